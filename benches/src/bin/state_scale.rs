//! `state_scale`: what checkpoints cost a keyed job as its state grows. Prints one JSON line
//! per run, then one summary line per (keys, changed) pair.
//!
//! The job (p = 1): a source that first writes every key once (the state is loaded), then
//! writes records whose keys rotate so that a fraction `changed` of the keys is written in each
//! checkpoint interval (with checkpoints, the keys move on at each checkpoint's barrier, so
//! that each checkpoint covers exactly that fraction, as random keys at a steady rate would;
//! moved on by the clock, a checkpoint interval would meet two windows of keys, twice the
//! fraction), measured for `--seconds` from the steady state on (with checkpoints:
//! once a checkpoint triggered after loading has completed; the first copies every key); a keyed process function holding a
//! `(u64, u64, String)` per key (a count, a sum, a label: the state of #39's measurements).
//! Each run is one of `--modes`:
//!
//! - `off`: no checkpoints (the baseline);
//! - `full`: a checkpoint every interval, each the whole state;
//! - `incremental`: `CheckpointConfig::incremental`.
//!
//! Per run: records/s in the measured phase, per checkpoint the synchronous pause (p50, max),
//! end-to-end duration (p50, max), bytes written (p50, mean) and state covered, and the peak
//! RSS; the summary line gives the throughput cost of checkpoints and the peak RSS over the
//! state's own (the `off` run's RSS at its end), from the medians of `--repeat` runs of each
//! mode, taken in turn. Each run is a process of its own (so peak RSS is the run's).
//!
//! ```text
//! cargo run --release -p weir-benches --bin state_scale -- --keys 1000000,10000000 --changed 0.01,0.1,1
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::{json, Value};
use weir::source::{Source, SourceStatus};
use weir::{Collector, Env, EnvConfig, KeyedProcessFunction, SourceError};

#[derive(Parser, Clone)]
#[command(about = "Checkpoints of a keyed job with a large state: one JSON line per run.")]
struct Args {
    /// Distinct keys (comma-separated list).
    #[arg(long, default_value = "1000000,10000000")]
    keys: String,
    /// Fraction of the keys written per checkpoint interval (comma-separated list).
    #[arg(long, default_value = "0.01,0.1,1")]
    changed: String,
    /// Runs per (keys, changed): any of off, full, incremental (comma-separated).
    #[arg(long, default_value = "off,incremental,full")]
    modes: String,
    /// State backend: `memory`, or `disk` (`StateBackend::Disk`, with `--memory-budget-mb`).
    #[arg(long, default_value = "memory")]
    backend: String,
    /// The disk backend's memory budget per keyed subtask, MiB.
    #[arg(long, default_value_t = 64)]
    memory_budget_mb: usize,
    /// Length of the measured phase, after the state is loaded.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Checkpoint interval (ms).
    #[arg(long, default_value_t = 1000)]
    checkpoint_interval_ms: u64,
    /// Runs of each mode per (keys, changed), taken in turn (off, incremental, off, ...) so
    /// that a slow spell of a shared machine falls on every mode; the summary compares medians.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Run one configuration in this process: `<keys>,<changed>,<mode>` (what the parent
    /// process starts each run with).
    #[arg(long, hide = true)]
    only: Option<String>,
}

fn main() {
    let args = Args::parse();
    if let Some(only) = &args.only {
        println!("{}", one_from(&args, only));
        return;
    }
    let list = |s: &str| {
        s.split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    for keys in list(&args.keys) {
        for changed in list(&args.changed) {
            let mut lines = Vec::new();
            for _ in 0..args.repeat.max(1) {
                for mode in list(&args.modes) {
                    let line = child(&args, &format!("{keys},{changed},{mode}"));
                    println!("{line}");
                    lines.push(line);
                }
            }
            if let Some(s) = summary(&lines) {
                println!("{s}");
            }
        }
    }
}

/// Runs one configuration in a child process; its JSON line.
fn child(args: &Args, only: &str) -> Value {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return json!({"bench": "state_scale", "run": only, "error": e.to_string()}),
    };
    let out = std::process::Command::new(exe)
        .args([
            "--only",
            only,
            "--backend",
            &args.backend,
            "--memory-budget-mb",
            &args.memory_budget_mb.to_string(),
            "--seconds",
            &args.seconds.to_string(),
            "--checkpoint-interval-ms",
            &args.checkpoint_interval_ms.to_string(),
        ])
        .stderr(std::process::Stdio::inherit())
        .output();
    match out {
        Ok(o) => String::from_utf8_lossy(&o.stdout)
            .lines()
            .last()
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| json!({"bench": "state_scale", "run": only, "error": format!("the run printed no result ({})", o.status)})),
        Err(e) => json!({"bench": "state_scale", "run": only, "error": e.to_string()}),
    }
}

/// The cost of checkpoints against the runs without them, from the medians of each mode's
/// runs.
fn summary(lines: &[Value]) -> Option<Value> {
    let median_of = |mode: &str, field: &str| {
        let mut v: Vec<f64> = lines
            .iter()
            .filter(|l| l["mode"] == mode)
            .filter_map(|l| l[field].as_f64())
            .collect();
        v.sort_by(f64::total_cmp);
        (!v.is_empty()).then(|| v[v.len() / 2])
    };
    let off = median_of("off", "records_per_second")?;
    let cost = |mode: &str| median_of(mode, "records_per_second").map(|r| 1.0 - r / off);
    // The state's own memory: the process at the end of the runs without checkpoints.
    let own = median_of("off", "rss_end_mb").filter(|m| *m > 0.0)?;
    let peak = |mode: &str| median_of(mode, "rss_peak_mb").map(|p| p / own);
    Some(json!({
        "bench": "state_scale",
        "summary": true,
        "keys": lines.first()?["keys"],
        "changed": lines.first()?["changed"],
        "runs_per_mode": lines.iter().filter(|l| l["mode"] == "off").count(),
        "records_per_second_off": off,
        "records_per_second_incremental": median_of("incremental", "records_per_second"),
        "throughput_cost_incremental": cost("incremental"),
        "throughput_cost_full": cost("full"),
        "peak_rss_over_state_incremental": peak("incremental"),
        "peak_rss_over_state_full": peak("full"),
    }))
}

fn one_from(args: &Args, only: &str) -> Value {
    let parts: Vec<&str> = only.split(',').collect();
    let parsed = match parts.as_slice() {
        [k, c, m] => k
            .parse::<u64>()
            .ok()
            .zip(c.parse::<f64>().ok().filter(|c| *c > 0.0 && *c <= 1.0))
            .map(|(k, c)| (k, c, m.to_string())),
        _ => None,
    };
    let Some((keys, changed, mode)) = parsed else {
        return json!({"bench": "state_scale", "error": format!("--only {only}: expected <keys>,<fraction in (0, 1]>,<mode>")});
    };
    if !matches!(args.backend.as_str(), "memory" | "disk") {
        return json!({"bench": "state_scale", "keys": keys, "changed": changed, "mode": mode, "backend": args.backend, "error": "unknown backend: memory or disk"});
    }
    if !matches!(mode.as_str(), "off" | "full" | "incremental") {
        return json!({"bench": "state_scale", "error": format!("unknown mode `{mode}`: off, full or incremental")});
    }
    one(args, keys, changed, &mode)
}

/// A count, a sum and a label per key.
#[derive(Clone)]
struct Tally;

impl KeyedProcessFunction<u64, u64, ()> for Tally {
    type State = (u64, u64, String);
    fn process(&mut self, key: &u64, s: &mut Self::State, x: u64, _out: &mut Collector<()>) {
        if s.2.is_empty() {
            s.2 = format!("{key:048}");
        }
        s.0 += 1;
        s.1 = s.1.wrapping_add(x);
    }
}

/// Every key once, then keys rotating through windows of `span` keys, one window per
/// interval, for the measured phase.
struct Rotating {
    keys: u64,
    span: u64,
    interval: Duration,
    measure: Duration,
    next: u64,
    j: u64,
    /// When every key had been written once.
    loaded_at: Option<Instant>,
    /// When the measured phase began.
    started: Option<Instant>,
    /// Checkpoint barriers seen, which move the keys on (`None`: no checkpoints, the clock
    /// moves them on every `interval`).
    barriers: Option<u64>,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    /// The state is loaded (every key written once).
    loaded: AtomicBool,
    /// Steady state: loaded, and (with checkpoints) a checkpoint triggered after that
    /// completed (the first, which copies every key, is left out): the measured phase.
    steady: AtomicBool,
    /// Records written in the measured phase.
    measured: AtomicU64,
    /// Its length, µs.
    measured_us: AtomicU64,
    /// RSS when the measured phase ended, bytes (without checkpoints: the state's own).
    end_rss: AtomicU64,
}

impl Source<u64> for Rotating {
    fn poll_batch(&mut self, out: &mut Vec<u64>, max: usize) -> Result<SourceStatus, SourceError> {
        if self.next < self.keys {
            let end = (self.next + max as u64).min(self.keys);
            out.extend(self.next..end);
            self.next = end;
            return Ok(SourceStatus::More);
        }
        let now = Instant::now();
        let loaded_at = *self.loaded_at.get_or_insert_with(|| {
            self.shared.loaded.store(true, Ordering::SeqCst);
            now
        });
        let window = self.barriers.unwrap_or_else(|| {
            ((now - loaded_at).as_nanos() / self.interval.as_nanos().max(1)) as u64
        });
        let base = window.wrapping_mul(self.span) % self.keys;
        for _ in 0..max {
            out.push((base + self.j % self.span) % self.keys);
            self.j += 1;
        }
        if !self.shared.steady.load(Ordering::SeqCst) {
            return Ok(SourceStatus::More);
        }
        let started = *self.started.get_or_insert(now);
        let elapsed = now - started;
        if elapsed >= self.measure {
            self.shared.end_rss.store(rss("VmRSS"), Ordering::SeqCst);
            self.shared
                .measured_us
                .store(elapsed.as_micros() as u64, Ordering::SeqCst);
            return Ok(SourceStatus::End);
        }
        self.shared
            .measured
            .fetch_add(max as u64, Ordering::Relaxed);
        Ok(SourceStatus::More)
    }
    fn position(&self) -> Option<Vec<u8>> {
        Some([self.next.to_le_bytes(), self.j.to_le_bytes()].concat())
    }
    fn checkpoint_position(&mut self, _checkpoint: u64) -> Option<Vec<u8>> {
        // The keys of the next window from here on (once the state is loaded).
        if let Some(n) = self.barriers.as_mut().filter(|_| self.next >= self.keys) {
            *n += 1;
        }
        self.position()
    }
    fn seek(&mut self, position: &[u8]) -> Result<(), SourceError> {
        let word = |i: usize| {
            position
                .get(i..i + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
        };
        match (word(0), word(8)) {
            (Some(next), Some(j)) => {
                (self.next, self.j) = (next, j);
                Ok(())
            }
            _ => Err(SourceError::BadPosition {
                message: format!("16 bytes expected, got {}", position.len()),
            }),
        }
    }
}

/// A field of `/proc/self/status` in bytes (`VmRSS`, `VmHWM`), 0 where there is none.
fn rss(field: &str) -> u64 {
    weir_benches::proc_status_bytes(field).unwrap_or(0)
}

fn percentile(mut v: Vec<u64>, p: f64) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let i = ((v.len() - 1) as f64 * p).round() as usize;
    v.get(i).copied()
}

/// The job's configuration: checkpoints (`mode` off, full or incremental) and the state
/// backend, both under `dir`.
fn config(args: &Args, mode: &str, interval: Duration, dir: &std::path::Path) -> EnvConfig {
    let mut cfg = EnvConfig::default();
    if mode != "off" {
        cfg.checkpoint.interval = Some(interval);
        cfg.checkpoint.directory = dir.to_owned();
        cfg.checkpoint.incremental = mode == "incremental";
    }
    if args.backend == "disk" {
        let mut disk = weir::DiskBackend::default();
        disk.directory = dir.join("state");
        disk.memory_budget = args.memory_budget_mb << 20;
        cfg.state_backend = weir::StateBackend::Disk(disk);
    }
    cfg
}

/// The completed checkpoints triggered in the measured phase, collected from the job's history
/// (which keeps the last few) until `done`; tells `shared` when that phase begins: once the
/// state is loaded and, with `checkpoints`, a checkpoint of it completed.
fn measured_checkpoints(
    monitor: &weir::JobMonitor,
    done: &AtomicBool,
    shared: &Shared,
    checkpoints: bool,
) -> Vec<weir::CheckpointRecord> {
    let mut seen: BTreeMap<u64, weir::CheckpointRecord> = BTreeMap::new();
    // The newest checkpoint when the state was loaded, and when the measured phase began.
    let (mut at_load, mut first_measured): (Option<u64>, Option<u64>) = (None, None);
    while !done.load(Ordering::SeqCst) {
        let s = monitor.checkpoint_stats().unwrap_or_default();
        let newest = s.history.iter().map(|r| r.id).max().unwrap_or(0);
        for r in s.history {
            if r.status == weir::CheckpointStatus::Completed {
                seen.insert(r.id, r);
            }
        }
        if shared.loaded.load(Ordering::SeqCst) && first_measured.is_none() {
            let load = *at_load.get_or_insert(newest);
            if !checkpoints || seen.keys().any(|id| *id > load) {
                first_measured = Some(newest);
                shared.steady.store(true, Ordering::SeqCst);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Checkpoints triggered before the measured phase are left out.
    seen.into_values()
        .filter(|r| first_measured.is_some_and(|f| r.id > f))
        .collect::<Vec<_>>()
}

fn one(args: &Args, keys: u64, changed: f64, mode: &str) -> Value {
    let interval = Duration::from_millis(args.checkpoint_interval_ms);
    let dir = std::env::temp_dir().join(format!("weir-state-scale-{}", std::process::id()));
    let cfg = config(args, mode, interval, &dir);
    let env = Env::with_config(cfg);
    let shared = Arc::new(Shared::default());
    let span = ((keys as f64 * changed).round() as u64).clamp(1, keys);
    let (measure, s) = (Duration::from_secs(args.seconds), shared.clone());
    let checkpointed = mode != "off";
    env.add_source("keys", move |_cx| {
        Ok(Rotating {
            keys,
            span,
            interval,
            measure,
            next: 0,
            j: 0,
            loaded_at: None,
            started: None,
            barriers: checkpointed.then_some(0),
            shared: s.clone(),
        })
    })
    .set_parallelism(1)
    .key_by(|x: &u64| *x)
    .process_with(Tally)
    .uid("tally")
    .set_parallelism(1)
    .discard();
    let handle = match env.start("state-scale") {
        Ok(h) => h,
        Err(e) => return json!({"bench": "state_scale", "mode": mode, "error": e.to_string()}),
    };
    let monitor = handle.monitor();
    // The history keeps the last few checkpoints: collect them as they complete, from the
    // measured phase on.
    let done = Arc::new(AtomicBool::new(false));
    let (d, sh, checkpoints) = (done.clone(), shared.clone(), mode != "off");
    let watcher = std::thread::spawn(move || measured_checkpoints(&monitor, &d, &sh, checkpoints));
    let result = handle.wait();
    done.store(true, Ordering::SeqCst);
    let records = watcher.join().unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = result {
        return json!({"bench": "state_scale", "mode": mode, "error": e.to_string()});
    }
    let secs = shared.measured_us.load(Ordering::SeqCst) as f64 / 1e6;
    let field = |f: fn(&weir::CheckpointRecord) -> u64| records.iter().map(f).collect::<Vec<_>>();
    let sync = field(|r| r.sync_duration_us);
    let e2e = field(|r| r.end_to_end_duration_ms);
    let written = field(|r| r.checkpointed_size);
    let size = field(|r| r.state_size);
    let mean = |v: &[u64]| (!v.is_empty()).then(|| v.iter().sum::<u64>() as f64 / v.len() as f64);
    let (end, peak) = (shared.end_rss.load(Ordering::SeqCst), rss("VmHWM"));
    json!({
        "bench": "state_scale",
        "keys": keys,
        "changed": changed,
        "mode": mode,
        "backend": args.backend,
        "memory_budget_mb": (args.backend == "disk").then_some(args.memory_budget_mb),
        "checkpoint_interval_ms": args.checkpoint_interval_ms,
        "seconds": secs,
        "records_per_second": shared.measured.load(Ordering::SeqCst) as f64 / secs.max(1e-9),
        "checkpoints": records.len(),
        "sync_pause_us_p50": percentile(sync.clone(), 0.5),
        "sync_pause_us_max": sync.iter().max(),
        "duration_ms_p50": percentile(e2e.clone(), 0.5),
        "duration_ms_max": e2e.iter().max(),
        "bytes_written_p50": percentile(written.clone(), 0.5),
        "bytes_written_mean": mean(&written),
        "state_size_p50": percentile(size, 0.5),
        "rss_end_mb": end as f64 / 1048576.0,
        "rss_peak_mb": peak as f64 / 1048576.0,
    })
}
