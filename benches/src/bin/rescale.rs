//! Rescale: the output pause of a live rescale 2 → 4 of a keyed operator at a steady input
//! rate, against the same change by stop-with-savepoint and a new job restored from it, in
//! the same run; (`--mode barrel`) the throughput of an I/O-bound keyed operator at
//! parallelism 12 against 8, to show balanced key groups; and (`--mode hot`) the load of the
//! hottest subtask of a keyed operator whose input has one hot key group (half the
//! records), with its key groups by count and after a rebalance by load, at a fixed input
//! rate.
//!
//! ```text
//! cargo run --release -p weir-benches --bin rescale
//! cargo run --release -p weir-benches --bin rescale -- --mode barrel
//! cargo run --release -p weir-benches --bin rescale -- --mode hot
//! ```
//!
//! In `hot` mode each record costs the operator `sleep_us` (I/O-bound, so the two cores do
//! not decide it). Per subtask it prints the share of the records it processed (counted by
//! the operator, per thread: each subtask runs on an arbiter of its own) and its
//! `busyTimeMsPerSecond`, both over `window_secs` after `warmup_secs`, by count and then by
//! load; `hottest_records_fall` and `hottest_busy_fall` are how much the hottest subtask's
//! share and busy time fell (at p = 2 with 128 key groups, 33.2 % is the most one group with
//! half the load allows: it alone is half, against ½ + ½·63/127 by count).
//!
//! Prints one JSON line. `live_pause_ms` is the longest gap between consecutive records at
//! the sink during the live rescale; `call_to_active_ms` runs from the call to the first
//! record at the sink after the call returned (processed by the new subtasks, one hop
//! before; an upper bound);
//! `restart_pause_ms` is the gap between the last record of the stopped job and the first of
//! the restored one; `duplicates` and `missing` count ids at the live run's sink, a plain one
//! (a source that did not pause at the barrier would show up as duplicates), and
//! `restart_duplicates` / `restart_missing` the same over the stopped and restored jobs.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::json;
use weir::rate::RateControlConfig;
use weir::sink::Sink;
use weir::{Collector, Env, EnvConfig, SinkError, ValueState};

#[derive(Parser, Debug)]
#[command(name = "rescale")]
struct Args {
    /// `live` (pause of a live rescale against a restart) or `barrel` (12 against 8 subtasks).
    #[arg(long, default_value = "live")]
    mode: String,
    /// Input rate, records per second (live mode).
    #[arg(long, default_value_t = 200_000.0)]
    rate: f64,
    /// Seconds of steady input before and after each change (live mode).
    #[arg(long, default_value_t = 1.0)]
    steady_secs: f64,
    /// Records (barrel mode).
    #[arg(long, default_value_t = 60_000)]
    records: u64,
    /// Sleep per record, microseconds (barrel and hot modes).
    #[arg(long, default_value_t = 200)]
    sleep_us: u64,
    /// The keyed operator's parallelism (hot mode).
    #[arg(long, default_value_t = 2)]
    parallelism: usize,
    /// Input rate, records per second (hot mode): below what the operator takes by count.
    #[arg(long, default_value_t = 2_000.0)]
    hot_rate: f64,
    /// Seconds before each measurement (hot mode).
    #[arg(long, default_value_t = 2.0)]
    warmup_secs: f64,
    /// Seconds each measurement lasts (hot mode).
    #[arg(long, default_value_t = 4.0)]
    window_secs: f64,
}

/// Every record's arrival at the sink: (time since the start, id).
#[derive(Clone)]
struct Arrivals {
    start: Instant,
    log: Arc<Mutex<Vec<(Duration, u64)>>>,
}

struct RecordingSink(Arrivals);

impl Sink<u64> for RecordingSink {
    fn write_batch(&mut self, batch: &mut Vec<u64>) -> Result<(), SinkError> {
        let at = self.0.start.elapsed();
        let mut log = self.0.log.lock().unwrap_or_else(|e| e.into_inner());
        log.extend(batch.drain(..).map(|id| (at, id)));
        Ok(())
    }
}

fn build(env: &Env, parallelism: usize, arrivals: &Arrivals) {
    let a = arrivals.clone();
    env.generate(u64::MAX, |i| i)
        .uid("ids")
        .set_parallelism(1)
        .key_by(|x: &u64| x % 1000)
        .process(
            |_k: &u64, n: &mut ValueState<u64>, x: u64, out: &mut Collector<u64>| {
                *n.get_or_insert_with(|| 0) += 1;
                out.collect(x);
            },
        )
        .uid("count")
        .set_parallelism(parallelism)
        .add_sink("record", move |_cx| Ok(RecordingSink(a.clone())))
        .uid("record")
        .set_parallelism(1);
}

fn config(rate: f64, dir: &std::path::Path) -> EnvConfig {
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(Duration::from_millis(500));
    cfg.checkpoint.directory = dir.to_owned();
    cfg.rate_control = RateControlConfig::fixed(rate);
    cfg
}

/// The longest gap between consecutive arrivals in `[from, to]`, and the arrival after it.
fn longest_gap(log: &[(Duration, u64)], from: Duration, to: Duration) -> (Duration, Duration) {
    let mut best = (Duration::ZERO, from);
    for w in log.windows(2) {
        let (a, b) = (w[0].0, w[1].0);
        if b < from || a > to {
            continue;
        }
        let gap = b.saturating_sub(a.max(from));
        if gap > best.0 {
            best = (gap, b);
        }
    }
    best
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// Counts duplicated and missing ids among `ids` (expected: `0..=max`).
fn duplicates_and_missing(ids: &mut [u64]) -> (u64, u64) {
    ids.sort_unstable();
    let mut dup = 0;
    for w in ids.windows(2) {
        if w[0] == w[1] {
            dup += 1;
        }
    }
    let unique = ids.len() as u64 - dup;
    let max = ids.last().copied().unwrap_or(0);
    (dup, (max + 1).saturating_sub(unique))
}

fn live(args: &Args) -> serde_json::Value {
    let dir = std::env::temp_dir().join(format!("weir-rescale-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let steady = Duration::from_secs_f64(args.steady_secs);

    // Live: 2 -> 4 while the job runs.
    let arrivals = Arrivals {
        start: Instant::now(),
        log: Default::default(),
    };
    let env = Env::with_config(config(args.rate, &dir));
    build(&env, 2, &arrivals);
    let job = env.start("rescale-live").expect("the job starts");
    std::thread::sleep(steady);
    let called = arrivals.start.elapsed();
    let report = job.rescale("count", 4).expect("the live rescale");
    let returned = arrivals.start.elapsed();
    std::thread::sleep(steady);
    job.cancel();
    let _ = job.wait();
    let log = std::mem::take(&mut *arrivals.log.lock().unwrap_or_else(|e| e.into_inner()));
    let (live_pause, _) = longest_gap(&log, called, returned + steady / 2);
    // The first record at the sink after the call returned: the new subtasks ran by then.
    let resumed = log
        .iter()
        .map(|&(at, _)| at)
        .find(|&at| at >= returned)
        .unwrap_or(returned);
    let mut ids: Vec<u64> = log.iter().map(|&(_, id)| id).collect();
    let (live_dup, live_missing) = duplicates_and_missing(&mut ids);

    // Restart: stop with a savepoint at 2, a new job from it at 4.
    let arrivals = Arrivals {
        start: Instant::now(),
        log: Default::default(),
    };
    let env = Env::with_config(config(args.rate, &dir));
    build(&env, 2, &arrivals);
    let job = env.start("rescale-restart").expect("the job starts");
    std::thread::sleep(steady);
    let sp_dir = dir.join("savepoints");
    let stop_called = arrivals.start.elapsed();
    let (savepoint, _) = job
        .stop_with_savepoint(&sp_dir)
        .expect("stop with a savepoint");
    let mut cfg = config(args.rate, &dir);
    cfg.checkpoint.restore_from = Some(savepoint);
    let env = Env::with_config(cfg);
    build(&env, 4, &arrivals);
    let job = env
        .start("rescale-restart")
        .expect("the restored job starts");
    std::thread::sleep(steady);
    job.cancel();
    let _ = job.wait();
    let log = std::mem::take(&mut *arrivals.log.lock().unwrap_or_else(|e| e.into_inner()));
    let (restart_pause, restart_resumed) = longest_gap(&log, stop_called, arrivals.start.elapsed());
    let mut ids: Vec<u64> = log.iter().map(|&(_, id)| id).collect();
    let (restart_dup, restart_missing) = duplicates_and_missing(&mut ids);
    let _ = std::fs::remove_dir_all(&dir);
    json!({
        "bench": "rescale",
        "mode": "live",
        "rate": args.rate,
        "change": "count 2 -> 4",
        "live_pause_ms": ms(live_pause),
        "call_to_active_ms": ms(resumed.saturating_sub(called)),
        "call_to_return_ms": ms(returned.saturating_sub(called)),
        "reported_pause_ms": ms(report.pause),
        "restart_pause_ms": ms(restart_pause),
        "restart_call_to_active_ms": ms(restart_resumed.saturating_sub(stop_called)),
        "duplicates": live_dup,
        "missing": live_missing,
        "restart_duplicates": restart_dup,
        "restart_missing": restart_missing,
    })
}

/// Time to run `records` through an I/O-bound keyed operator at `parallelism`.
fn barrel_run(args: &Args, parallelism: usize) -> Duration {
    let mut cfg = EnvConfig::default();
    cfg.arbiters = parallelism + 2;
    let env = Env::with_config(cfg);
    let sleep = Duration::from_micros(args.sleep_us);
    env.generate(args.records, |i| i)
        .set_parallelism(1)
        .key_by(|x: &u64| x % 10_000)
        .process(
            move |_k: &u64, _s: &mut ValueState<u8>, x: u64, out: &mut Collector<u64>| {
                std::thread::sleep(sleep);
                out.collect(x);
            },
        )
        .set_parallelism(parallelism)
        .discard();
    let t = Instant::now();
    env.execute("rescale-barrel").expect("the job runs");
    t.elapsed()
}

fn barrel(args: &Args) -> serde_json::Value {
    let at8 = barrel_run(args, 8);
    let at12 = barrel_run(args, 12);
    let groups = |p: usize| {
        (0..p)
            .map(|s| weir::key_group::key_group_range(s, 128, p).len())
            .max()
            .unwrap_or(0)
    };
    json!({
        "bench": "rescale",
        "mode": "barrel",
        "records": args.records,
        "sleep_us": args.sleep_us,
        "p8_secs": at8.as_secs_f64(),
        "p12_secs": at12.as_secs_f64(),
        "speedup_12_over_8": at8.as_secs_f64() / at12.as_secs_f64(),
        "max_groups_per_subtask_p8": groups(8),
        "max_groups_per_subtask_p12": groups(12),
    })
}

/// Records each thread's operator processed.
type PerThread = Arc<Mutex<std::collections::HashMap<std::thread::ThreadId, u64>>>;

/// One measurement of the hot job: each subtask's share of the records (hottest first) and
/// its busy time.
fn measure(job: &weir::JobHandle, per_thread: &PerThread, args: &Args) -> serde_json::Value {
    std::thread::sleep(Duration::from_secs_f64(args.warmup_secs));
    let snapshot = || per_thread.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let before = snapshot();
    let start = Instant::now();
    let mut busy: Vec<Vec<f64>> = Vec::new();
    while start.elapsed() < Duration::from_secs_f64(args.window_secs) {
        std::thread::sleep(Duration::from_millis(500));
        if let Some(m) = job.metrics() {
            let mut per: Vec<(usize, f64)> = m
                .subtasks
                .iter()
                .filter(|s| s.head_uid == "count")
                .map(|s| (s.subtask, s.busy_time_ms_per_second))
                .collect();
            per.sort_by_key(|(s, _)| *s);
            busy.push(per.into_iter().map(|(_, b)| b).collect());
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let after = snapshot();
    let mut records: Vec<u64> = after
        .iter()
        .map(|(t, n)| n - before.get(t).copied().unwrap_or(0))
        .filter(|&n| n > 0)
        .collect();
    records.sort_unstable_by(|a, b| b.cmp(a));
    let total: u64 = records.iter().sum();
    let shares: Vec<f64> = records
        .iter()
        .map(|&n| n as f64 / total.max(1) as f64)
        .collect();
    let subtasks = busy.first().map_or(0, Vec::len);
    let mut mean_busy: Vec<f64> = (0..subtasks)
        .map(|s| busy.iter().filter_map(|b| b.get(s)).sum::<f64>() / busy.len().max(1) as f64)
        .collect();
    mean_busy.sort_by(|a, b| b.total_cmp(a));
    json!({
        "records_per_second": total as f64 / elapsed,
        "record_shares": shares,
        "hottest_record_share": shares.first().copied().unwrap_or(0.0),
        "busy_ms_per_second": mean_busy,
        "hottest_busy_ms_per_second": mean_busy.first().copied().unwrap_or(0.0),
    })
}

/// A keyed operator with one hot key group (even ids: one key; odd ids: 10,000 keys), at a
/// fixed rate, by count and then rebalanced by load.
fn hot(args: &Args) -> serde_json::Value {
    let dir = std::env::temp_dir().join(format!("weir-rescale-hot-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut cfg = config(args.hot_rate, &dir);
    cfg.arbiters = args.parallelism + 3;
    let env = Env::with_config(cfg);
    let per_thread: PerThread = Arc::default();
    let counts = per_thread.clone();
    let sleep = Duration::from_micros(args.sleep_us);
    env.generate(u64::MAX, |i| i)
        .uid("ids")
        .set_parallelism(1)
        .key_by(|x: &u64| if x.is_multiple_of(2) { 0 } else { x % 20_000 })
        .process(
            move |_k: &u64, n: &mut ValueState<u64>, x: u64, out: &mut Collector<u64>| {
                std::thread::sleep(sleep);
                *n.get_or_insert_with(|| 0) += 1;
                *counts
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(std::thread::current().id())
                    .or_default() += 1;
                out.collect(x);
            },
        )
        .uid("count")
        .set_parallelism(args.parallelism)
        .discard();
    let job = env.start("rescale-hot").expect("the job starts");
    let by_count = measure(&job, &per_thread, args);
    let report = job.rebalance("count").expect("the rebalance succeeds");
    let by_load = measure(&job, &per_thread, args);
    job.cancel();
    let _ = std::fs::remove_dir_all(&dir);
    let fall = |key: &str| {
        let (a, b) = (
            by_count[key].as_f64().unwrap_or(0.0),
            by_load[key].as_f64().unwrap_or(0.0),
        );
        1.0 - b / a.max(f64::MIN_POSITIVE)
    };
    let rebalanced = report.rebalanced.first();
    json!({
        "bench": "rescale",
        "mode": "hot",
        "parallelism": args.parallelism,
        "rate": args.hot_rate,
        "sleep_us": args.sleep_us,
        "by_count": by_count,
        "by_load": by_load,
        "hottest_records_fall": fall("hottest_record_share"),
        "hottest_busy_fall": fall("hottest_busy_ms_per_second"),
        "rebalance_pause_ms": ms(report.pause),
        "key_groups_moved": rebalanced.map(|r| r.moved),
        "observed_load_before": rebalanced.map(|r| r.load_before.clone()),
        "observed_load_after": rebalanced.map(|r| r.load_after.clone()),
    })
}

fn main() {
    let args = Args::parse();
    let out = match args.mode.as_str() {
        "live" => live(&args),
        "barrel" => barrel(&args),
        "hot" => hot(&args),
        other => {
            eprintln!("--mode must be `live`, `barrel` or `hot`, got `{other}`");
            std::process::exit(2);
        }
    };
    println!("{out}");
}
