//! `slow_sink`: a fast source behind a sink of fixed capacity (records/s). Prints one JSON
//! line per second: `{"t":…,"source_rate":…,"sink_rate":…,"rss_bytes":…,
//! "source_backpressure":…,"sink_busy":…,"rate_limit":…}` and a summary line last.
//!
//! Without `--rate-control` the bounded channels stop the source (high backpressure at the
//! source, a busy sink, flat memory). With it, Spark's PID controller sets the source's token
//! bucket and the source rate settles near the sink's capacity.
//!
//! `cargo run --release -p weir-benches --bin slow_sink -- --seconds 60 --sink-capacity 10000 [--rate-control]`

use std::time::{Duration, Instant};

use clap::Parser;
use weir::rate::RateControlConfig;
use weir::{Env, EnvConfig};
use weir_testing::PacedSink;

#[derive(Parser)]
struct Args {
    /// How long to run.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Records per second the sink can take.
    #[arg(long, default_value_t = 10_000)]
    sink_capacity: u64,
    /// Turn on PID rate control of the source.
    #[arg(long)]
    rate_control: bool,
    /// Records per batch (small batches make per-second rates less grainy at low rates).
    #[arg(long, default_value_t = 256)]
    batch_size: usize,
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let mut cfg = EnvConfig::default();
    cfg.arbiters = 2;
    cfg.batch_size = args.batch_size;
    // Not the default: the run the book's backpressure chapter quotes has 8 batches per channel.
    cfg.channel_capacity = 8;
    if args.rate_control {
        let mut rc = RateControlConfig::default();
        rc.enabled = true;
        cfg.rate_control = rc;
    }
    let env = Env::with_config(cfg);
    let capacity = args.sink_capacity as f64;
    env.generate(u64::MAX, |i| i)
        .uid("source")
        .rebalance()
        .add_sink("paced", move |_| Ok(PacedSink::new(capacity)))
        .uid("sink");
    let handle = env.start("slow_sink")?;
    let started = Instant::now();
    let mut source_rates = Vec::new();
    let mut rss = Vec::new();
    for t in 1..=args.seconds {
        let wake = started + Duration::from_secs(t);
        std::thread::sleep(wake.saturating_duration_since(Instant::now()));
        let Some(m) = handle.metrics() else { continue };
        let (Some(src), Some(sink)) = (m.operator("source"), m.operator("sink")) else {
            continue;
        };
        let r = rss_bytes();
        source_rates.push(src.num_records_out_per_second);
        rss.push(r);
        println!(
            "{}",
            serde_json::json!({
                "t": t,
                "source_rate": src.num_records_out_per_second,
                "sink_rate": sink.num_records_in_per_second,
                "rss_bytes": r,
                "source_backpressure": src.back_pressured_time_ms_per_second,
                "source_backpressure_level": format!("{:?}", src.backpressure_level),
                "sink_busy": sink.busy_time_ms_per_second,
                "rate_limit": m.source_rate_limit,
            })
        );
    }
    handle.cancel();
    let _ = handle.wait();
    // Summary over the seconds after the first 10.
    let tail: Vec<f64> = source_rates.iter().skip(10).copied().collect();
    let within = tail
        .iter()
        .filter(|r| (*r - capacity).abs() <= 0.15 * capacity)
        .count();
    let rss_tail: Vec<u64> = rss.iter().skip(10).copied().collect();
    println!(
        "{}",
        serde_json::json!({
            "summary": "slow_sink",
            "seconds": args.seconds,
            "sink_capacity": args.sink_capacity,
            "rate_control": args.rate_control,
            "batch_size": args.batch_size,
            "seconds_after_10s": tail.len(),
            "source_rate_within_15pct": within,
            "source_rate_mean_after_10s": tail.iter().sum::<f64>() / tail.len().max(1) as f64,
            "rss_min_after_10s": rss_tail.iter().min(),
            "rss_max_after_10s": rss_tail.iter().max(),
        })
    );
    Ok(())
}
