//! Hot updates, measured in one run on one job at a steady input rate: a live change of the
//! checkpoint settings, a fast restart with a new graph, and the upgrade path of a new binary
//! (stop with a savepoint, then a new job restored from it; here in the same process).
//!
//! ```text
//! cargo run --release -p weir-benches --bin hot_update
//! ```
//!
//! Prints one JSON line: `baseline_gap_ms` (longest gap between consecutive records at the
//! sink over a window with no change), `live_change_pause_ms` (the same over the window of a
//! live change of the checkpoint interval 1 s -> 100 ms and back, and of the mode),
//! `fast_restart_ms` (request -> first record of the new graph at the sink),
//! `binary_upgrade_gap_ms` (last record of the stopped job -> first record of the restored
//! one), and `duplicates` / `missing` over every id the sink saw (a plain sink: any record
//! read twice would show).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::json;
use weir::rate::RateControlConfig;
use weir::sink::Sink;
use weir::{Collector, Env, EnvConfig, JobHandle, ReplaceOptions, SinkError, ValueState};

#[derive(Parser, Debug)]
#[command(name = "hot_update")]
struct Args {
    /// Input rate, records per second.
    #[arg(long, default_value_t = 200_000.0)]
    rate: f64,
    /// Seconds of each measured window.
    #[arg(long, default_value_t = 1.0)]
    window_secs: f64,
}

/// Every record's arrival at the sink: (time since the start, id, graph version).
#[derive(Clone)]
struct Arrivals {
    start: Instant,
    log: Arc<Mutex<Vec<(Duration, u64, u8)>>>,
}

impl Arrivals {
    fn take(&self) -> Vec<(Duration, u64, u8)> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

struct RecordingSink(Arrivals);

impl Sink<(u64, u8)> for RecordingSink {
    fn write_batch(&mut self, batch: &mut Vec<(u64, u8)>) -> Result<(), SinkError> {
        let at = self.0.start.elapsed();
        let mut log = self.0.log.lock().unwrap_or_else(|e| e.into_inner());
        log.extend(batch.drain(..).map(|(id, v)| (at, id, v)));
        Ok(())
    }
}

/// ids -> keyed count -> (id, version) -> the recording sink.
fn graph(env: &Env, arrivals: &Arrivals, version: u8) {
    let a = arrivals.clone();
    env.generate(u64::MAX, |i| i)
        .uid("ids")
        .set_parallelism(1)
        .key_by(|x: &u64| x % 1000)
        .process(
            move |_k: &u64, n: &mut ValueState<u64>, x: u64, out: &mut Collector<(u64, u8)>| {
                *n.get_or_insert_with(|| 0) += 1;
                out.collect((x, version));
            },
        )
        .uid("count")
        .set_parallelism(2)
        .add_sink("record", move |_cx| Ok(RecordingSink(a.clone())))
        .uid("record")
        .set_parallelism(1);
}

fn longest_gap(log: &[(Duration, u64, u8)], from: Duration, to: Duration) -> Duration {
    log.windows(2)
        .filter(|w| w[1].0 >= from && w[0].0 <= to)
        .map(|w| w[1].0.saturating_sub(w[0].0.max(from)))
        .max()
        .unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// Ids received more than once, and ids below the largest received never received.
fn duplicates_and_missing(log: &[(Duration, u64, u8)]) -> (u64, u64) {
    let mut ids: Vec<u64> = log.iter().map(|&(_, id, _)| id).collect();
    ids.sort_unstable();
    let duplicates = ids.windows(2).filter(|w| w[0] == w[1]).count() as u64;
    let max = ids.last().copied().unwrap_or(0);
    let missing = (max + 1).saturating_sub(ids.len() as u64 - duplicates);
    (duplicates, missing)
}

/// Over `window`: checkpoints every 100 ms at least once for half of it, then back to every
/// second exactly once, all as live changes.
fn change_checkpoints_live(job: &JobHandle, window: Duration) {
    let set = |n: &str, v: &str| {
        job.update_settings(&[(n.to_owned(), v.to_owned())])
            .expect("a live change")
    };
    set("execution.checkpointing.interval", "100ms");
    set("execution.checkpointing.mode", "AT_LEAST_ONCE");
    std::thread::sleep(window / 2);
    set("execution.checkpointing.mode", "EXACTLY_ONCE");
    set("execution.checkpointing.interval", "1s");
    std::thread::sleep(window / 2);
}

fn main() {
    let args = Args::parse();
    let window = Duration::from_secs_f64(args.window_secs);
    let dir = std::env::temp_dir().join(format!("weir-hot-update-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(Duration::from_secs(1));
    cfg.checkpoint.directory = dir.clone();
    cfg.rate_control = RateControlConfig::fixed(args.rate);
    let arrivals = Arrivals {
        start: Instant::now(),
        log: Default::default(),
    };
    let env = Env::with_config(cfg.clone());
    graph(&env, &arrivals, 1);
    let job = env.start("hot-update").expect("the job starts");

    // A window with no change, then one with live checkpoint changes.
    std::thread::sleep(window);
    let baseline_from = arrivals.start.elapsed();
    std::thread::sleep(window);
    let change_from = arrivals.start.elapsed();
    change_checkpoints_live(&job, window);
    let change_to = arrivals.start.elapsed();

    // A fast restart with a new graph (version 2).
    let a2 = arrivals.clone();
    let requested = arrivals.start.elapsed();
    job.replace(move |env| graph(env, &a2, 2), ReplaceOptions::default())
        .expect("the new graph takes over");
    std::thread::sleep(window);

    // The new binary's path: stop with a savepoint, a new job restored from it (version 3).
    let (savepoint, _) = job
        .stop_with_savepoint(dir.join("savepoints"))
        .expect("stop with a savepoint");
    let mut restored = cfg.clone();
    restored.checkpoint.restore_from = Some(savepoint);
    let env = Env::with_config(restored);
    graph(&env, &arrivals, 3);
    let job = env.start("hot-update").expect("the restored job starts");
    std::thread::sleep(window);
    // Stopped at a savepoint too: every id before its barrier reached the sink.
    job.stop_with_savepoint(dir.join("savepoints-end"))
        .expect("the last stop");

    let log = arrivals.take();
    let first_of = |v: u8| {
        log.iter()
            .find(|&&(_, _, version)| version == v)
            .map(|&(at, _, _)| at)
    };
    let last_of = |v: u8| {
        log.iter()
            .rev()
            .find(|&&(_, _, version)| version == v)
            .map(|&(at, _, _)| at)
    };
    let fast_restart = first_of(2).map(|t| t.saturating_sub(requested));
    let upgrade_gap = match (last_of(2), first_of(3)) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    let (duplicates, missing) = duplicates_and_missing(&log);
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "{}",
        json!({
            "bench": "hot_update",
            "rate": args.rate,
            "baseline_gap_ms": ms(longest_gap(&log, baseline_from, change_from)),
            "live_change_pause_ms": ms(longest_gap(&log, change_from, change_to)),
            "fast_restart_ms": fast_restart.map(ms),
            "binary_upgrade_gap_ms": upgrade_gap.map(ms),
            "duplicates": duplicates,
            "missing": missing,
        })
    );
}
