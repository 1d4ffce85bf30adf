//! `timer_storm`: a million event-time timers (or windows) made due by one watermark, with
//! checkpoints triggered every `--checkpoint-interval-ms` while they fire. Prints one JSON line:
//! how long the storm took, and the checkpoints that started during it with their durations
//! (trigger to completion) — the delay a storm adds to a checkpoint.
//!
//! `cargo run --release -p weir-benches --bin timer_storm -- --timers 1000000 [--kind windows]`
//!
//! One source subtask emits one record per key at time 0 and waits (idle): the checkpoints
//! then taken are the baseline (the same state, no storm). Then it emits one record at 1 h
//! that moves the watermark past every timer, and waits again until the storm is over.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::json;
use weir::source::{Source, SourceStatus};
use weir::time::{EventTime, WatermarkStrategy};
use weir::window::{AggregateFunction, Fired, TumblingEventTimeWindows};
use weir::SourceError;
use weir::{Collector, Env, EnvConfig, KeyedContext, KeyedProcessFunction, TimeDomain, ValueState};

#[derive(Parser)]
struct Args {
    /// Timers (keys) made due by one watermark.
    #[arg(long, default_value_t = 1_000_000)]
    timers: u64,
    /// `timers` (a keyed process function) or `windows` (a tumbling window per key).
    #[arg(long, default_value = "timers")]
    kind: String,
    /// Checkpoint interval.
    #[arg(long, default_value_t = 100)]
    checkpoint_interval_ms: u64,
    /// Records per batch (also the timers fired per run).
    #[arg(long, default_value_t = 1024)]
    batch_size: usize,
}

const STORM_AT: EventTime = 1_000;

/// Wall-clock ms (since the epoch) of the first and the last firing.
#[derive(Clone, Default)]
struct Clock {
    first: Arc<AtomicU64>,
    last: Arc<AtomicU64>,
    fired: Arc<AtomicU64>,
}

impl Clock {
    fn tick(&self) {
        let now = now_ms();
        let _ = self
            .first
            .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
        self.last.store(now, Ordering::Relaxed);
        self.fired.fetch_add(1, Ordering::Relaxed);
    }
}

/// Phases of the source, set by `main`.
#[derive(Clone, Default)]
struct Phase(Arc<AtomicU64>);
const KEYS_IN: u64 = 1;
const STORM: u64 = 2;
const END: u64 = 3;

/// Keys `0..n` at time 0, then (at `STORM`) key `n` at 1 h, then nothing until `END`.
struct Keys {
    next: u64,
    n: u64,
    phase: Phase,
}

impl Source<(u64, i64)> for Keys {
    fn poll_batch(
        &mut self,
        out: &mut Vec<(u64, i64)>,
        max: usize,
    ) -> Result<SourceStatus, SourceError> {
        let idle = Ok(SourceStatus::Idle {
            until: Some(Duration::from_millis(1)),
        });
        if self.next < self.n {
            let stop = self.n.min(self.next + max as u64);
            out.extend((self.next..stop).map(|k| (k, 0)));
            self.next = stop;
            if self.next == self.n {
                self.phase.0.store(KEYS_IN, Ordering::SeqCst);
            }
            return Ok(SourceStatus::More);
        }
        match self.phase.0.load(Ordering::SeqCst) {
            STORM if self.next == self.n => {
                out.push((self.n, 3_600_000));
                self.next += 1;
                Ok(SourceStatus::More)
            }
            END => Ok(SourceStatus::End),
            _ => idle,
        }
    }
    fn position(&self) -> Option<Vec<u8>> {
        Some(self.next.to_le_bytes().to_vec())
    }
    fn seek(&mut self, position: &[u8]) -> Result<(), SourceError> {
        let bytes: [u8; 8] = position.try_into().map_err(|_| SourceError::BadPosition {
            message: format!("8 bytes expected, got {}", position.len()),
        })?;
        self.next = u64::from_le_bytes(bytes);
        Ok(())
    }
}

/// The checkpoints triggered in `[from, to]` (wall-clock ms), once none of them is in
/// progress (or a minute has passed).
fn checkpoints_between(job: &weir::JobHandle, from: u64, to: u64) -> Vec<weir::CheckpointRecord> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let history = job
            .monitor()
            .checkpoint_stats()
            .map(|s| s.history)
            .unwrap_or_default();
        let chosen: Vec<_> = history
            .into_iter()
            .filter(|r| r.trigger_timestamp_ms >= from && r.trigger_timestamp_ms <= to)
            .collect();
        let open = chosen
            .iter()
            .any(|r| r.status == weir::CheckpointStatus::InProgress);
        if !open || Instant::now() > deadline {
            return chosen;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn durations(records: &[weir::CheckpointRecord]) -> Vec<u64> {
    records
        .iter()
        .filter(|r| r.status == weir::CheckpointStatus::Completed)
        .map(|r| r.end_to_end_duration_ms)
        .collect()
}

fn median(mut v: Vec<u64>) -> Option<u64> {
    v.sort_unstable();
    v.get(v.len() / 2).copied()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[derive(Clone)]
struct Storm(Clock);
impl KeyedProcessFunction<u64, (u64, i64), u64> for Storm {
    type State = ValueState<()>;
    fn process_with_ctx(
        &mut self,
        _k: &u64,
        _s: &mut Self::State,
        _x: (u64, i64),
        ctx: &mut KeyedContext<'_, u64>,
        _out: &mut Collector<u64>,
    ) {
        ctx.register_event_time_timer(STORM_AT);
    }
    fn on_timer(
        &mut self,
        _t: EventTime,
        _d: TimeDomain,
        k: &u64,
        _s: &mut Self::State,
        _ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<u64>,
    ) {
        self.0.tick();
        out.collect(*k);
    }
}

#[derive(Clone)]
struct Count;
impl AggregateFunction<(u64, i64), u64> for Count {
    type Acc = u64;
    fn add(&self, n: &mut u64, _x: (u64, i64)) {
        *n += 1;
    }
    fn merge(&self, n: &mut u64, o: &u64) {
        *n += o;
    }
    fn result(&self, n: &u64) -> u64 {
        *n
    }
}

/// The job: one source of `args.timers` keys, keyed, into a timer or a window per key that
/// fires at once in the storm, counted on `clock`.
fn build(env: &Env, args: &Args, phase: &Phase, clock: &Clock) -> Result<(), String> {
    let n = args.timers;
    let p = phase.clone();
    let stream = env
        .add_source("keys", move |_cx| {
            Ok(Keys {
                next: 0,
                n,
                phase: p.clone(),
            })
        })
        .set_parallelism(1)
        .assign_timestamps_and_watermarks(
            WatermarkStrategy::for_bounded_out_of_orderness(Duration::ZERO)
                .with_timestamp_assigner(|r: &(u64, i64)| r.1)
                .with_watermark_interval(Duration::ZERO),
        )
        .set_parallelism(1)
        .key_by(|r: &(u64, i64)| r.0);
    let out = match args.kind.as_str() {
        "timers" => stream.process_with(Storm(clock.clone())).set_parallelism(1),
        "windows" => {
            let c = clock.clone();
            stream
                .window(TumblingEventTimeWindows::of(Duration::from_millis(
                    STORM_AT as u64,
                )))
                .aggregate_window(Count, move |k: &u64, _w: &Fired, _n: u64| {
                    c.tick();
                    *k
                })
                .set_parallelism(1)
        }
        other => {
            return Err(format!(
                "--kind must be `timers` or `windows`, got `{other}`"
            ))
        }
    };
    out.discard();
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let dir = std::env::temp_dir().join(format!("weir-timer-storm-{}", std::process::id()));
    let mut cfg = EnvConfig::default();
    cfg.batch_size = args.batch_size;
    cfg.checkpoint.directory = dir.clone();
    cfg.checkpoint.interval = Some(Duration::from_millis(args.checkpoint_interval_ms));
    let env = Env::with_config(cfg);
    let n = args.timers;
    let phase = Phase::default();
    let clock = Clock::default();
    build(&env, &args, &phase, &clock)?;
    let started = Instant::now();
    let job = env.start("timer-storm")?;
    // Baseline: checkpoints of the same state with no storm, once every key is in.
    while phase.0.load(Ordering::SeqCst) < KEYS_IN {
        std::thread::sleep(Duration::from_millis(1));
    }
    let interval = args.checkpoint_interval_ms;
    std::thread::sleep(Duration::from_millis(interval / 2 + 50));
    let from = now_ms();
    std::thread::sleep(Duration::from_millis(interval * 3));
    let baseline = durations(&checkpoints_between(&job, from, now_ms()));
    phase.0.store(STORM, Ordering::SeqCst);
    // Wait for the storm to end (every key's timer or window fired).
    while clock.fired.load(Ordering::Relaxed) < n {
        if started.elapsed() > Duration::from_secs(600) {
            return Err("the storm did not end within 10 minutes".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let (first, last) = (
        clock.first.load(Ordering::Relaxed),
        clock.last.load(Ordering::Relaxed),
    );
    let during = checkpoints_between(&job, first, last);
    phase.0.store(END, Ordering::SeqCst);
    job.wait()?;
    let _ = std::fs::remove_dir_all(&dir);
    let storm = durations(&during);
    let worst = storm.iter().max().copied();
    let base = median(baseline.clone());
    println!(
        "{}",
        json!({
            "kind": args.kind,
            "timers": n,
            "batch_size": args.batch_size,
            "storm_ms": last.saturating_sub(first),
            "checkpoint_interval_ms": args.checkpoint_interval_ms,
            "baseline_checkpoint_ms": baseline,
            "checkpoints_during_storm": during.len(),
            "storm_checkpoint_ms": storm,
            // What the storm added to the slowest checkpoint triggered during it.
            "max_delay_ms": worst.zip(base).map(|(w, b)| w.saturating_sub(b)),
        })
    );
    Ok(())
}
