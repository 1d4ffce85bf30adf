//! `rest_load`: what the REST server costs a job at full speed, and how fast it answers then.
//! Runs the answer-cleaning job over generated answers in pairs — without a REST server, then
//! with one and a client sending `GET /jobs/{id}` back to back while the job runs — and prints
//! one JSON line: each run's throughput, the median throughput drop, and the request latency
//! percentiles (only requests answered while the job ran count).
//!
//! `cargo run --release -p weir-benches --bin rest_load -- --records 3000000 --requests 1000`

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use weir::rest::{RestConfig, RestServer};
use weir::{Env, EnvConfig};
use weir_benches::median;
use weir_examples::answers::{build_answer_cleaning, prepare_output_dir, Input, DEFAULT_SEED};

#[derive(Parser)]
struct Args {
    /// Answers per run.
    #[arg(long, default_value_t = 3_000_000)]
    records: u64,
    /// Requests to send per run with REST (sent back to back until the job ends).
    #[arg(long, default_value_t = 1_000)]
    requests: usize,
    /// Pairs of runs (without, with REST), interleaved.
    #[arg(long, default_value_t = 3)]
    pairs: usize,
}

/// One run: records per second, and the latencies of the requests answered while it ran.
fn run(records: u64, requests: Option<usize>) -> Result<(f64, Vec<f64>), String> {
    let out = std::env::temp_dir().join(format!("weir-rest-load-{}", std::process::id()));
    prepare_output_dir(&out).map_err(|e| e.to_string())?;
    let env = Env::with_config(EnvConfig::default());
    build_answer_cleaning(&env, &Input::generated(records, DEFAULT_SEED), &out, 1);
    let server = match requests {
        Some(_) => Some(RestServer::start(RestConfig::default()).map_err(|e| e.to_string())?),
        None => None,
    };
    let started = Instant::now();
    let job = env.start("rest-load").map_err(|e| e.to_string())?;
    let running = Arc::new(AtomicBool::new(true));
    let client = match (&server, requests) {
        (Some(server), Some(n)) => {
            server.register(job.monitor());
            let url = format!("http://{}/jobs/{}", server.addr(), job.id());
            let running = running.clone();
            Some(std::thread::spawn(move || {
                let agent: ureq::Agent = ureq::Agent::config_builder()
                    .timeout_global(Some(Duration::from_secs(10)))
                    .build()
                    .into();
                let mut latencies = Vec::with_capacity(n);
                while latencies.len() < n && running.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let ok = agent
                        .get(&url)
                        .call()
                        .and_then(|mut r| r.body_mut().read_to_string())
                        .is_ok();
                    if ok && running.load(Ordering::Relaxed) {
                        latencies.push(t.elapsed().as_secs_f64() * 1000.0);
                    }
                }
                latencies
            }))
        }
        _ => None,
    };
    let result = job.wait().map_err(|e| e.to_string())?;
    let took = started.elapsed();
    running.store(false, Ordering::Relaxed);
    let latencies = client
        .map(|c| c.join().unwrap_or_default())
        .unwrap_or_default();
    let _ = std::fs::remove_dir_all(&out);
    let read = result.operator("source").map_or(records, |o| o.records_out);
    Ok((read as f64 / took.as_secs_f64(), latencies))
}

fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    Some(sorted[i])
}

fn main() -> Result<(), String> {
    let args = Args::parse();
    let (mut without, mut with, mut drops, mut latencies) = (vec![], vec![], vec![], vec![]);
    for _ in 0..args.pairs {
        let (a, _) = run(args.records, None)?;
        let (b, l) = run(args.records, Some(args.requests))?;
        without.push(a);
        with.push(b);
        drops.push((a - b) / a * 100.0);
        latencies.extend(l);
    }
    latencies.sort_by(|a, b| a.total_cmp(b));
    let line = serde_json::json!({
        "bench": "rest_load",
        "records": args.records,
        "pairs": args.pairs,
        "records_per_sec_without_rest": without,
        "records_per_sec_with_rest": with,
        "throughput_drop_pct_median": median(&drops),
        "requests_answered_while_running": latencies.len(),
        "latency_ms_p50": percentile(&latencies, 0.50),
        "latency_ms_p99": percentile(&latencies, 0.99),
        "latency_ms_max": latencies.last(),
    });
    println!("{line}");
    Ok(())
}
