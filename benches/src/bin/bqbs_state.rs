//! `bqbs_state`: what a buffer-queue backup costs a keyed operator with a large state, and
//! what its promotion costs. Prints one JSON line per run.
//!
//! The job: generated records `0..records`, keyed by `i % keys` (every key written once
//! every `keys` records: the whole state changes between two handoffs, the worst case; with
//! `--changed F < 1`, the first `keys` records write every key once, then the records cycle
//! through a window of `F * keys` keys that moves on by its width every `--dwell` records, so
//! about that fraction of the state changes between two handoffs), a keyed process function
//! holding a `(u64, u64, String)` per key (a count, a sum, a label: the state of #39's
//! measurements), which emits nothing until its input ends and then one `(key, count, sum)`
//! per key. Each run is one of:
//!
//! - `plain`: no backup; the baseline;
//! - `backup`: `.with_backup()` (its state handed to the backup every 20 ms by default);
//! - `promote`: with a backup, and the primary panics at record `--fault-at` (default half
//!   way): the backup is promoted; the line reports the promotion's recovery time and checks
//!   every key's count and sum against the sequential answer (nothing lost, nothing twice).
//!
//! With `--operator window` the operator is an event-time window per key instead, open for the
//! whole input (a count and a sum), so its state is every key's window.
//!
//! ```text
//! cargo run --release -p weir-benches --bin bqbs_state -- --keys 1000000 --records 20000000
//! ```

use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::json;
use weir::time::WatermarkStrategy;
use weir::window::{AggregateFunction, Fired, TumblingEventTimeWindows};
use weir::{BackupPolicy, Collector, Env, EnvConfig, KeyedProcessFunction, KeyedState};
use weir_testing::{quiet_injected_panics, Fault, FaultKind, FaultPlan};

#[derive(Parser)]
#[command(
    about = "A backed-up keyed operator with a large state: throughput with and without \
                   its backup, and one promotion; prints one JSON line per run."
)]
struct Args {
    /// Distinct keys.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Records (generated; record `i` has key `i % keys`).
    #[arg(long, default_value_t = 20_000_000)]
    records: u64,
    /// Runs to make: any of plain, backup, promote (comma-separated).
    #[arg(long, default_value = "plain,backup,promote")]
    runs: String,
    /// How often the primary hands its state to its backup (ms; 0: only at checkpoints).
    #[arg(long, default_value_t = 20)]
    state_interval_ms: u64,
    /// The largest share of the primary's time its hand-offs may take
    /// (`BackupPolicy::state_share`; default the policy's).
    #[arg(long)]
    state_share: Option<f64>,
    /// Records per batch on the backed-up operator's channels (`BackupPolicy::batch_size`;
    /// 0: the job's; default the policy's).
    #[arg(long)]
    backup_batch: Option<usize>,
    /// The record at which the primary panics (promote; default half the records).
    #[arg(long)]
    fault_at: Option<u64>,
    /// The backup's heartbeat timeout: a primary silent this long is taken for hung.
    #[arg(long, default_value_t = 250)]
    heartbeat_timeout_ms: u64,
    /// Checkpoint interval, for every run (a stateful backup needs checkpoints).
    #[arg(long, default_value_t = 1000)]
    checkpoint_interval_ms: u64,
    /// Repeat each run this many times.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// The fraction of the keys written in each `--dwell` records after the first `keys`
    /// (1: every key in turn, `i % keys`, the worst case).
    #[arg(long, default_value_t = 1.0)]
    changed: f64,
    /// Records written to one window of keys before it moves on (with `--changed` below 1).
    #[arg(long, default_value_t = 1_000_000)]
    dwell: u64,
    /// The operator: `keyed` (a keyed process function, the state above) or `window` (an
    /// event-time tumbling window per key longer than the input, aggregating a count and a
    /// sum; record `i` at `i` ms: every key's window is open until the input ends).
    #[arg(long, default_value = "keyed")]
    operator: String,
    /// Incremental checkpoints (`CheckpointConfig::incremental`; the operator without a
    /// backup writes what changed since its previous checkpoint).
    #[arg(long)]
    incremental: bool,
}

/// Which key record `i` has (see the module doc).
#[derive(Clone, Copy)]
struct Keying {
    keys: u64,
    /// Keys in the window (`keys`: `i % keys`).
    span: u64,
    dwell: u64,
}

impl Keying {
    fn of(args: &Args) -> Self {
        let span = ((args.keys as f64 * args.changed).round() as u64).clamp(1, args.keys.max(1));
        Keying {
            keys: args.keys.max(1),
            span,
            dwell: args.dwell.max(1),
        }
    }

    fn key(&self, i: u64) -> u64 {
        if self.span >= self.keys || i < self.keys {
            return i % self.keys;
        }
        let j = i - self.keys;
        ((j / self.dwell) * self.span + j % self.span) % self.keys
    }
}

/// A count, a sum and a label per key; everything at the end of the input.
#[derive(Clone)]
struct Tally;

type Row = (u64, u64, u64);

impl KeyedProcessFunction<u64, u64, Row> for Tally {
    type State = (u64, u64, String);
    fn process(&mut self, key: &u64, s: &mut Self::State, x: u64, _out: &mut Collector<Row>) {
        if s.2.is_empty() {
            s.2 = format!("key-{key}");
        }
        s.0 += 1;
        s.1 = s.1.wrapping_add(x);
    }
    fn end_of_input(&mut self, state: &mut KeyedState<u64, Self::State>, out: &mut Collector<Row>) {
        for (k, (n, sum, _)) in state.iter() {
            out.collect((*k, *n, *sum));
        }
    }
}

/// A count and a (wrapping) sum per window.
#[derive(Clone)]
struct CountSum;

impl AggregateFunction<u64, (u64, u64)> for CountSum {
    type Acc = (u64, u64);
    fn add(&self, acc: &mut (u64, u64), x: u64) {
        acc.0 += 1;
        acc.1 = acc.1.wrapping_add(x);
    }
    fn merge(&self, acc: &mut (u64, u64), other: &(u64, u64)) {
        acc.0 += other.0;
        acc.1 = acc.1.wrapping_add(other.1);
    }
    fn result(&self, acc: &(u64, u64)) -> (u64, u64) {
        *acc
    }
}

fn main() {
    let args = Args::parse();
    if std::env::var_os("RUST_LOG").is_some() {
        // The job's promotions, replays and checkpoints, on stderr.
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    quiet_injected_panics();
    for _ in 0..args.repeat {
        for run in args.runs.split(',') {
            let line = match run {
                "plain" | "backup" | "promote" => one(&args, run),
                other => {
                    json!({"bench": "bqbs_state", "error": format!("unknown run `{other}`: plain, backup or promote")})
                }
            };
            println!("{line}");
        }
    }
}

fn one(args: &Args, run: &str) -> serde_json::Value {
    let mut cfg = EnvConfig::default();
    // Each run's checkpoints in a directory of its own, removed after it (the default
    // directory kept every run's: gigabytes over a few sittings).
    let dir = std::env::temp_dir().join(format!("weir-bqbs-state-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    cfg.checkpoint.directory = dir.clone();
    let result = one_in(args, run, cfg);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn one_in(args: &Args, run: &str, mut cfg: EnvConfig) -> serde_json::Value {
    cfg.checkpoint.interval = Some(Duration::from_millis(args.checkpoint_interval_ms));
    cfg.checkpoint.incremental = args.incremental;
    let faults = FaultPlan::new(vec![Fault::new(
        "tally",
        FaultKind::Panic,
        args.fault_at.unwrap_or(args.records / 2),
    )]);
    if run == "promote" {
        cfg.faults = faults.clone();
    }
    let env = Env::with_config(cfg);
    let keys = args.keys;
    let keying = Keying::of(args);
    let tallied = match args.operator.as_str() {
        "window" => env
            .generate(args.records, |i| i)
            .assign_timestamps_and_watermarks(
                WatermarkStrategy::for_monotonous_timestamps()
                    .with_timestamp_assigner(|x: &u64| *x as i64),
            )
            .key_by(move |x: &u64| keying.key(*x))
            .window(TumblingEventTimeWindows::of(Duration::from_secs(1 << 40)))
            .aggregate_window(CountSum, |k: &u64, _: &Fired, (n, sum): (u64, u64)| {
                (*k, n, sum)
            }),
        "keyed" => env
            .generate(args.records, |i| i)
            .key_by(move |x: &u64| keying.key(*x))
            .process_with(Tally),
        other => {
            return json!({"bench": "bqbs_state", "run": run, "error": format!("--operator {other}: not keyed or window")})
        }
    }
    .uid("tally");
    let tallied = if run == "plain" {
        tallied
    } else {
        let policy = BackupPolicy::default()
            .heartbeat(
                Duration::from_millis(args.heartbeat_timeout_ms.div_ceil(5).max(1)),
                Duration::from_millis(args.heartbeat_timeout_ms),
            )
            .state_interval(
                Some(Duration::from_millis(args.state_interval_ms)).filter(|d| !d.is_zero()),
            );
        let policy = match args.backup_batch {
            Some(0) => policy.batch_size(None),
            Some(n) => policy.batch_size(Some(n)),
            None => policy,
        };
        let policy = match args.state_share {
            Some(share) => policy.state_share(share),
            None => policy,
        };
        tallied.with_backup_policy(policy)
    };
    let out = tallied.collect();
    let started = Instant::now();
    let handle = match env.start("bqbs-state") {
        Ok(h) => h,
        Err(e) => return json!({"bench": "bqbs_state", "run": run, "error": e.to_string()}),
    };
    let monitor = handle.monitor();
    let result = match handle.wait() {
        Ok(r) => r,
        Err(e) => {
            let failures: Vec<String> = monitor
                .failures()
                .iter()
                .take(5)
                .map(|f| format!("{f:?}"))
                .collect();
            return json!({"bench": "bqbs_state", "run": run, "error": e.to_string(), "first_failures": failures});
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    let rows = out.take();
    let expected = expected(keying, args.records);
    let (wrong, seen, runs) = compare(&rows, &expected);
    let promotions: Vec<_> = result
        .backups
        .iter()
        .filter_map(|b| {
            b.last_failover
                .map(|d| (b.promotions, d.as_secs_f64() * 1e3))
        })
        .collect();
    let history = result
        .checkpoints
        .as_ref()
        .map(|c| c.history.clone())
        .unwrap_or_default();
    let p50 = |f: fn(&weir::CheckpointRecord) -> u64| median(history.iter().map(f).collect());
    json!({
        "bench": "bqbs_state",
        "run": run,
        "incremental": args.incremental,
        "checkpointed_size_p50": p50(|r| r.checkpointed_size),
        "state_size_p50": p50(|r| r.state_size),
        "sync_pause_us_p50": p50(|r| r.sync_duration_us),
        "sync_pause_us_max": history.iter().map(|r| r.sync_duration_us).max(),
        "operator": args.operator,
        "keys": keys,
        "records": args.records,
        "state_interval_ms": args.state_interval_ms,
        "state_share": args.state_share,
        "backup_batch": args.backup_batch,
        "checkpoint_interval_ms": args.checkpoint_interval_ms,
        "checkpoints": result.checkpoints.as_ref().map(|c| c.number_of_completed_checkpoints),
        "seconds": seconds,
        "records_per_second": args.records as f64 / seconds,
        "promotions": promotions.iter().map(|p| p.0).sum::<u64>(),
        "failover_ms": promotions.first().map(|p| p.1),
        "faults_fired": faults.fired(),
        "keys_out": seen,
        "keys_wrong": wrong,
        "wrong_runs": runs,
        "changed": args.changed,
        "keys_missing": keys.min(args.records) - seen.min(keys.min(args.records)),
        "exactly_once": wrong == 0 && seen == keys.min(args.records),
    })
}

/// The middle value (none of nothing).
fn median(mut v: Vec<u64>) -> Option<u64> {
    v.sort_unstable();
    v.get(v.len() / 2).copied()
}

/// Compares the output rows `(key, count, sum)` with the expected ones: keys wrong, keys seen,
/// and the first 8 contiguous runs of records counted once too many (or other differences,
/// as they are).
fn compare(rows: &[(u64, u64, u64)], expected: &[(u64, u64)]) -> (u64, u64, Vec<String>) {
    let (mut wrong, mut seen) = (0u64, 0u64);
    // Per wrong key: (count off by, sum off by); one record too many says which record.
    let mut off: Vec<(i64, u64)> = Vec::new();
    for (k, n, sum) in rows {
        seen += 1;
        let (want_n, want_sum) = expected.get(*k as usize).copied().unwrap_or((0, 0));
        if (*n, *sum) != (want_n, want_sum) {
            wrong += 1;
            off.push((*n as i64 - want_n as i64, sum.wrapping_sub(want_sum)));
        }
    }
    off.sort_unstable();
    // Contiguous runs of records counted once too many (or other differences, as they are).
    let mut runs: Vec<String> = Vec::new();
    let mut i = 0;
    while i < off.len() && runs.len() < 8 {
        let (d, first) = off[i];
        let mut j = i + 1;
        while j < off.len() && d == 1 && off[j] == (1, off[j - 1].1 + 1) {
            j += 1;
        }
        runs.push(format!("count{d:+} records {first}..={}", off[j - 1].1));
        i = j;
    }
    (wrong, seen, runs)
}

/// Every key's count and sum of the records `i < records`, as the operator counts them
/// (the sum wrapping), computed in sequence.
fn expected(keying: Keying, records: u64) -> Vec<(u64, u64)> {
    let mut by_key = vec![(0u64, 0u64); keying.keys as usize];
    for i in 0..records {
        let e = &mut by_key[keying.key(i) as usize];
        e.0 += 1;
        e.1 = e.1.wrapping_add(i);
    }
    by_key
}
