//! `ckpt_backpressure`: checkpoints under backpressure (issue #15's troubleshooting scenario).
//! An unthrottled source at parallelism 2 feeds a keyed count at parallelism 2 (hash
//! exchange), whose output goes to a sink capped at `--sink-rate` records/s in total
//! ([`PacedSink`], `--sink-parallelism` subtasks of `sink_rate / sink_parallelism` each; at the
//! default parallelism 2 the sink is chained to the count). The sink is the bottleneck, so
//! every channel of the hash exchange is full and the source waits for credit; checkpoints
//! are taken every `--interval-ms`, aligned or unaligned (`--mode`).
//!
//! Prints one JSON line per completed checkpoint, read from the framework's checkpoint
//! statistics (`JobMonitor::checkpoint_stats`, its `history` records), nothing timed here:
//!
//! ```text
//! {"bench":"ckpt_backpressure","mode":"aligned","id":3,"duration_ms":..,"alignment_ms":..,
//!  "start_delay_ms":..,"inflight_bytes":..,"state_bytes":..,"is_unaligned":false,
//!  "trigger_timestamp_ms":..}
//! ```
//!
//! - `duration_ms`: the record's `end_to_end_duration_ms` (trigger to the last acknowledgement).
//! - `alignment_ms`: the record's `alignment_ms`, the longest of any subtask (aligned: first
//!   barrier to the last; unaligned: the unaligned start to the last barrier).
//! - `inflight_bytes`: the record's `persisted_data`, the in-flight channel data an unaligned
//!   checkpoint stored (0 when aligned).
//! - `state_bytes`: the record's `state_size`, every state file of the checkpoint (channel
//!   state included).
//! - `start_delay_ms`: `CheckpointStats::checkpoint_start_delay_nanos`, the largest start
//!   delay any subtask reported for the last completed checkpoint. Only sources measure one
//!   (trigger mail sent → handled); subtasks with inputs report 0 (the barrier's travel through
//!   the backpressured channels is in `duration_ms` − `alignment_ms`, not in this value). It
//!   is read when the checkpoint is first seen completed (the latest's, if two completed
//!   between two polls 50 ms apart).
//!
//! A summary line comes last, over the completed checkpoints after the first `--warmup`:
//! median, p90 and max of each value and the failed checkpoints; and, sampled once a second
//! from the job's metrics after the first `--warmup` seconds, the sink's rate (to check that
//! throughput holds) and what a barrier finds in front of it: records and batches queued in
//! a count subtask's input channels (`count_input_queue_records`, `_batches`), batches in a
//! source's output channels and waiting for credit (`source_output_queue_batches`), the
//! sources' mailbox latency (`source_mailbox_latency_ms`, what a trigger mail waits), and
//! `count_queue_drain_ms_estimate`, the median count queue over the count subtask's share of
//! the sink rate.
//!
//! ```text
//! cargo run --release -p weir-benches --bin ckpt_backpressure -- --mode aligned
//! cargo run --release -p weir-benches --bin ckpt_backpressure -- --mode unaligned --seconds 30 \
//!     --sink-rate 20000 --interval-ms 1000 --warmup 2 --batch-size 1024 --channel-capacity 2
//! ```
//!
//! `--batch-size`, `--channel-capacity`, `--linger-ms` and `--arbiters` default to
//! `EnvConfig::default()`'s values; `--aligned-timeout-ms` sets
//! `CheckpointConfig::aligned_checkpoint_timeout` (aligned mode only; default none);
//! `--rate-control` turns on the sources' PID rate control (default off, as in the framework);
//! `--no-adaptive-batch` keeps full batches in front of the slow sink
//! (`EnvConfig::adaptive_batch_size` off; the summary's `adaptive_batch` says which ran).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use serde_json::{json, Value};
use weir::rate::RateControlConfig;
use weir::{
    CheckpointRecord, CheckpointStats, CheckpointStatus, Collector, Env, EnvConfig, JobHandle,
    JobMetrics, ValueState,
};
use weir_testing::PacedSink;

/// The job's name (its checkpoints go to `<checkpoint dir>/<name>/`).
const JOB: &str = "ckpt_backpressure";
/// How often the checkpoint statistics are read (the history keeps the last 10 checkpoints).
const POLL: Duration = Duration::from_millis(50);

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Aligned barriers (exactly-once, the default checkpoint mode).
    Aligned,
    /// Unaligned checkpoints (exactly-once, in-flight data stored as channel state).
    Unaligned,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Aligned => "aligned",
            Mode::Unaligned => "unaligned",
        }
    }
}

#[derive(Parser)]
struct Args {
    /// Aligned or unaligned checkpoints.
    #[arg(long, value_enum, default_value_t = Mode::Aligned)]
    mode: Mode,
    /// How long the job runs.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// Records per second the sink takes, over all its subtasks.
    #[arg(long, default_value_t = 20_000)]
    sink_rate: u64,
    /// Subtasks of the sink (each takes `sink_rate / sink_parallelism` records/s).
    #[arg(long, default_value_t = 2)]
    sink_parallelism: usize,
    /// Checkpoint interval.
    #[arg(long, default_value_t = 1000)]
    interval_ms: u64,
    /// Completed checkpoints left out of the summary (and seconds left out of the sink rate).
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    /// Distinct keys of the keyed count.
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// Records per batch (default: `EnvConfig::default().batch_size`).
    #[arg(long)]
    batch_size: Option<usize>,
    /// Batches per channel (default: `EnvConfig::default().channel_capacity`).
    #[arg(long)]
    channel_capacity: Option<usize>,
    /// Longest a partial output batch waits while busy, ms (default: `EnvConfig::default()`).
    #[arg(long)]
    linger_ms: Option<u64>,
    /// Arbiter threads (default: `EnvConfig::default().arbiters`, the available cores).
    #[arg(long)]
    arbiters: Option<usize>,
    /// Aligned mode: switch a checkpoint to unaligned after this much alignment.
    #[arg(long)]
    aligned_timeout_ms: Option<u64>,
    /// Turn on PID rate control of the sources (`EnvConfig::rate_control`, default off): the
    /// source's rate follows the sink's capacity and the queues stay short.
    #[arg(long)]
    rate_control: bool,
    /// Keep full batches in front of a slow consumer (`EnvConfig::adaptive_batch_size` off;
    /// it is on by default, and then the queue an aligned barrier waits behind holds about
    /// `latency_target`).
    #[arg(long)]
    no_adaptive_batch: bool,
    /// Where checkpoints are written (a fresh directory under it, removed at the end;
    /// default: the system's temporary directory). Every state file is fsynced by its
    /// subtask, on its arbiter thread: a directory on tmpfs (`/dev/shm`) leaves the disk's
    /// fsync latency out.
    #[arg(long)]
    checkpoint_dir: Option<PathBuf>,
}

/// What can stop the bench.
#[derive(Debug)]
enum BenchError {
    BadArgs(String),
    Job(weir::JobError),
}

impl std::fmt::Display for BenchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BenchError::BadArgs(m) => write!(f, "bad arguments: {m}"),
            BenchError::Job(e) => write!(f, "the job failed: {e}"),
        }
    }
}

impl std::error::Error for BenchError {}

impl From<weir::JobError> for BenchError {
    fn from(e: weir::JobError) -> Self {
        BenchError::Job(e)
    }
}

/// Per-second samples of the job's queues (`JobMetrics::subtasks`), after the warm-up: what
/// a barrier finds in front of it.
#[derive(Default)]
struct Queues {
    /// Records waiting in a count subtask's input channels (`input_queue_records`).
    count_records: Vec<f64>,
    /// Batches waiting there (`input_queue_length`).
    count_batches: Vec<f64>,
    /// Batches in a source subtask's output channels and waiting for credit
    /// (`output_queue_length`).
    source_out_batches: Vec<f64>,
    /// How long a source subtask's last sampling mail waited (`mailbox_latency_ms`): what a
    /// checkpoint trigger mail waits too.
    source_mailbox_ms: Vec<f64>,
}

/// One completed checkpoint as printed.
struct Seen {
    duration_ms: u64,
    alignment_ms: u64,
    start_delay_ms: f64,
    inflight_bytes: u64,
    state_bytes: u64,
}

fn line(mode: Mode, r: &CheckpointRecord, start_delay_ms: f64) -> Value {
    json!({
        "bench": "ckpt_backpressure",
        "mode": mode.name(),
        "id": r.id,
        "duration_ms": r.end_to_end_duration_ms,
        "alignment_ms": r.alignment_ms,
        "start_delay_ms": start_delay_ms,
        "inflight_bytes": r.persisted_data,
        "state_bytes": r.state_size,
        "is_unaligned": r.is_unaligned,
        "trigger_timestamp_ms": r.trigger_timestamp_ms,
    })
}

/// Median, p90 (nearest rank) and max of `v`; nulls when empty.
fn stats<T: Copy + PartialOrd + Into<f64>>(v: impl Iterator<Item = T>) -> Value {
    let mut v: Vec<f64> = v.map(Into::into).collect();
    if v.is_empty() {
        return json!({"median": null, "p90": null, "max": null});
    }
    v.sort_by(f64::total_cmp);
    let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    let median = if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    json!({"median": median, "p90": rank(0.9), "max": v[v.len() - 1]})
}

/// The median of `v`, if any.
fn median_of(v: &[f64]) -> Option<f64> {
    stats(v.iter().copied())["median"].as_f64()
}

/// The job's configuration from the flags, checkpointing into the returned directory.
fn config(args: &Args) -> (EnvConfig, PathBuf) {
    let mut cfg = EnvConfig::default();
    if let Some(b) = args.batch_size {
        cfg.batch_size = b;
    }
    if let Some(c) = args.channel_capacity {
        cfg.channel_capacity = c;
    }
    if let Some(l) = args.linger_ms {
        cfg.linger = Duration::from_millis(l);
    }
    if let Some(a) = args.arbiters {
        cfg.arbiters = a;
    }
    cfg.adaptive_batch_size &= !args.no_adaptive_batch;
    if args.rate_control {
        let mut rc = RateControlConfig::default();
        rc.enabled = true;
        cfg.rate_control = rc;
    }
    let dir: PathBuf = args
        .checkpoint_dir
        .clone()
        .unwrap_or_else(std::env::temp_dir)
        .join(format!("weir-ckpt-bp-{}", std::process::id()));
    cfg.checkpoint.interval = Some(Duration::from_millis(args.interval_ms));
    cfg.checkpoint.directory = dir.clone();
    cfg.checkpoint.unaligned = args.mode == Mode::Unaligned;
    cfg.checkpoint.aligned_checkpoint_timeout = args.aligned_timeout_ms.map(Duration::from_millis);
    // A slow checkpoint is what is measured, not a reason to fail the job.
    cfg.checkpoint.tolerable_failed_checkpoints = u32::MAX;
    (cfg, dir)
}

/// The job: a keyed count of an endless source into paced sinks.
fn build(env: &Env, args: &Args) {
    let keys = args.keys;
    let per_sink = args.sink_rate as f64 / args.sink_parallelism as f64;
    env.generate(u64::MAX, |i| i)
        .uid("source")
        .set_parallelism(2)
        .key_by(move |i: &u64| i % keys)
        .process(
            |k: &u64, n: &mut ValueState<u64>, _x: u64, out: &mut Collector<(u64, u64)>| {
                let c = n.get_or_insert_with(|| 0);
                *c += 1;
                out.collect((*k, *c));
            },
        )
        .uid("count")
        .set_parallelism(2)
        .add_sink("paced", move |_| Ok(PacedSink::new(per_sink)))
        .uid("sink")
        .set_parallelism(args.sink_parallelism);
}

/// What was seen of the running job.
#[derive(Default)]
struct Observed {
    /// Completed checkpoints, in order (each printed as a line when seen).
    seen: Vec<Seen>,
    emitted: std::collections::BTreeSet<u64>,
    failed: std::collections::BTreeSet<u64>,
    last_stats: Option<CheckpointStats>,
    /// The sink's rate, per second after the warm-up.
    sink_rates: Vec<f64>,
    queues: Queues,
}

impl Observed {
    /// Watches the job for `args.seconds`: its checkpoints every [`POLL`], its metrics every
    /// second.
    fn watch(handle: &JobHandle, args: &Args) -> Observed {
        let mut o = Observed::default();
        let started = Instant::now();
        let end = started + Duration::from_secs(args.seconds);
        let mut next_second = started + Duration::from_secs(1);
        let mut second = 0u64;
        while Instant::now() < end {
            std::thread::sleep(POLL);
            if let Some(s) = handle.checkpoint_stats() {
                o.checkpoints(args.mode, s);
            }
            if Instant::now() >= next_second {
                next_second += Duration::from_secs(1);
                second += 1;
                if let Some(m) = handle.metrics().filter(|_| second > args.warmup as u64) {
                    o.metrics(&m);
                }
            }
        }
        o
    }

    /// Prints and keeps the checkpoints completed since the last look, and reports failed ones.
    fn checkpoints(&mut self, mode: Mode, s: CheckpointStats) {
        let delay_ms = s.checkpoint_start_delay_nanos as f64 / 1e6;
        for r in &s.history {
            match r.status {
                CheckpointStatus::Completed if self.emitted.insert(r.id) => {
                    println!("{}", line(mode, r, delay_ms));
                    self.seen.push(Seen {
                        duration_ms: r.end_to_end_duration_ms,
                        alignment_ms: r.alignment_ms,
                        start_delay_ms: delay_ms,
                        inflight_bytes: r.persisted_data,
                        state_bytes: r.state_size,
                    });
                }
                CheckpointStatus::Failed if self.failed.insert(r.id) => {
                    eprintln!(
                        "checkpoint {} failed: {}",
                        r.id,
                        r.failure_message.as_deref().unwrap_or("?")
                    );
                }
                _ => {}
            }
        }
        self.last_stats = Some(s);
    }

    /// Keeps one second's sink rate and queues.
    fn metrics(&mut self, m: &JobMetrics) {
        if let Some(o) = m.operator("sink") {
            self.sink_rates.push(o.num_records_in_per_second);
        }
        let queues = &mut self.queues;
        for st in &m.subtasks {
            match st.head_uid.as_str() {
                "count" => {
                    queues.count_records.push(st.input_queue_records as f64);
                    queues.count_batches.push(st.input_queue_length as f64);
                }
                "source" => {
                    queues
                        .source_out_batches
                        .push(st.output_queue_length as f64);
                    queues.source_mailbox_ms.push(st.mailbox_latency_ms);
                }
                _ => {}
            }
        }
    }
}

/// The summary line.
fn summary(
    args: &Args,
    cfg: &EnvConfig,
    adaptive_batch: bool,
    dir: &std::path::Path,
    o: &Observed,
) -> Value {
    let tail: Vec<&Seen> = o.seen.iter().skip(args.warmup).collect();
    let completed = o
        .last_stats
        .as_ref()
        .map_or(0, |s| s.number_of_completed_checkpoints);
    let queues = &o.queues;
    json!({
        "summary": "ckpt_backpressure",
        "mode": args.mode.name(),
        "seconds": args.seconds,
        "sink_rate": args.sink_rate,
        "sink_parallelism": args.sink_parallelism,
        "interval_ms": args.interval_ms,
        "warmup": args.warmup,
        "keys": args.keys,
        "batch_size": cfg.batch_size,
        "channel_capacity": cfg.channel_capacity,
        "linger_ms": cfg.linger.as_millis() as u64,
        "arbiters": cfg.arbiters,
        "aligned_timeout_ms": args.aligned_timeout_ms,
        "rate_control": args.rate_control,
        "adaptive_batch": adaptive_batch,
        "checkpoint_dir": dir.parent().map(|p| p.display().to_string()),
        "checkpoints_completed": completed,
        "checkpoints_failed": o.last_stats.as_ref().map_or(0, |s| s.number_of_failed_checkpoints),
        "checkpoints_summarized": tail.len(),
        "duration_ms": stats(tail.iter().map(|s| s.duration_ms as f64)),
        "alignment_ms": stats(tail.iter().map(|s| s.alignment_ms as f64)),
        "start_delay_ms": stats(tail.iter().map(|s| s.start_delay_ms)),
        "inflight_bytes": stats(tail.iter().map(|s| s.inflight_bytes as f64)),
        "state_bytes": stats(tail.iter().map(|s| s.state_bytes as f64)),
        "sink_records_per_second": stats(o.sink_rates.iter().copied()),
        "count_input_queue_records": stats(queues.count_records.iter().copied()),
        "count_input_queue_batches": stats(queues.count_batches.iter().copied()),
        "source_output_queue_batches": stats(queues.source_out_batches.iter().copied()),
        "source_mailbox_latency_ms": stats(queues.source_mailbox_ms.iter().copied()),
        // What the median queue in front of a count subtask takes to drain at its share
        // of the sink's rate (the count runs at parallelism 2): the wait of a barrier
        // that enters behind it.
        "count_queue_drain_ms_estimate": median_of(&queues.count_records)
            .map(|r| r / (args.sink_rate as f64 / 2.0) * 1000.0),
    })
}

fn main() -> Result<(), BenchError> {
    let args = Args::parse();
    if args.sink_parallelism == 0 || args.sink_rate == 0 || args.keys == 0 {
        return Err(BenchError::BadArgs(
            "--sink-parallelism, --sink-rate and --keys must be at least 1".into(),
        ));
    }
    let (cfg, dir) = config(&args);
    // As the job applies it: batches adapt only while rate control is off.
    let adaptive_batch = cfg.adaptive_batch_size && !args.rate_control;
    let env = Env::with_config(cfg.clone());
    build(&env, &args);
    let handle = env.start(JOB)?;
    let observed = Observed::watch(&handle, &args);
    handle.cancel();
    let result = handle.wait();
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = result {
        // A cancelled job ends without error; anything else is reported.
        if !matches!(e, weir::JobError::Cancelled { .. }) {
            return Err(e.into());
        }
    }
    println!("{}", summary(&args, &cfg, adaptive_batch, &dir, &observed));
    Ok(())
}
