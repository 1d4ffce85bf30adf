//! What `paper` measures, as written to `results.json`. Medians are over the repetitions of
//! a configuration; every figure comes from the harness binaries' JSON or from sampling them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::proc::{Machine, Sample};

/// The version of this layout.
pub const SCHEMA: u32 = 1;

/// Everything one run of `paper` measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Results {
    /// [`SCHEMA`].
    pub schema: u32,
    /// Whether `--quick` was given.
    pub quick: bool,
    /// When the run started.
    pub date_utc: String,
    /// Seconds the whole run took (building excluded).
    pub wall_seconds: f64,
    /// `git rev-parse HEAD` of the workspace.
    pub git_commit: String,
    /// Whether the work tree had changes (`git status --porcelain`).
    pub git_dirty: bool,
    /// The machine.
    pub machine: Machine,
    /// How `paper` was invoked.
    pub invocation: String,
    /// How often each child process was sampled.
    pub sampling_interval_ms: u64,
    /// Table 6.
    pub latency: Latency,
    /// Table 7.
    pub recovery: Recovery,
    /// Table 8, CPU.
    pub cpu: Cpu,
    /// Table 8, memory.
    pub memory: Memory,
    /// Table 5.
    pub criticality: Criticality,
    /// What the paper measured that this run could not, and why.
    pub unavailable: Vec<Unavailable>,
    /// The charts written, relative to the output directory.
    pub charts: Vec<String>,
    /// Every child command, in order.
    pub commands: Vec<String>,
}

/// A figure that is not measured, and why.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Unavailable {
    /// The figure (a field name where it has one).
    pub what: String,
    /// Why.
    pub reason: String,
}

/// Latency and throughput of the fault-free job (`etl`), with and without a backup of
/// `flat_map`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Latency {
    /// Input sizes, records.
    pub sizes: Vec<u64>,
    /// Runs per size and mode (after one warm-up run per size that also writes the input).
    pub repeats: usize,
    /// Checkpointing in these runs.
    pub checkpointing: String,
    /// Checkpoint intervals measured, ms (the paper's 30 s, and 1 s).
    pub checkpoint_intervals_ms: Vec<u64>,
    /// Every measured run.
    pub runs: Vec<LatencyRun>,
    /// Medians per size and mode.
    pub summary: Vec<LatencyRow>,
    /// With backup against without, per size (from the medians).
    pub overhead: Vec<LatencyOverhead>,
}

/// One `etl` run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LatencyRun {
    /// Input records.
    pub records: u64,
    /// `--backup` (flat_map backed up).
    pub backup: bool,
    /// `--checkpoint-interval-ms`.
    pub checkpoint_interval_ms: u64,
    /// Checkpoints the run completed.
    pub checkpoints_completed: u64,
    /// Repetition, from 0.
    pub rep: usize,
    /// The job's time (etl's `seconds`).
    pub seconds: f64,
    /// etl's `records_per_sec`.
    pub records_per_sec: f64,
    /// etl's `latency_p50_ms`.
    pub latency_p50_ms: f64,
    /// etl's `latency_p95_ms`.
    pub latency_p95_ms: Option<f64>,
    /// etl's `latency_p99_ms`.
    pub latency_p99_ms: f64,
    /// etl's `latency_max_ms`.
    pub latency_max_ms: f64,
    /// etl's own `peak_rss_bytes` (its VmHWM at the end).
    pub reported_peak_rss_bytes: u64,
    /// Largest VmHWM sampled.
    pub peak_rss_bytes: u64,
    /// Median VmRSS sampled.
    pub steady_rss_bytes: u64,
    /// Process CPU time over wall time, percent of one core.
    pub cpu_mean_pct_core: f64,
    /// Spawn to exit, seconds.
    pub wall_s: f64,
    /// The command.
    pub command: String,
    /// The samples.
    pub samples: Vec<Sample>,
}

/// Medians of the runs of one size and mode.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LatencyRow {
    /// Input records.
    pub records: u64,
    /// flat_map backed up.
    pub backup: bool,
    /// Checkpoint interval, ms.
    pub checkpoint_interval_ms: u64,
    /// Runs.
    pub runs: usize,
    /// Median p50, ms.
    pub latency_p50_ms: f64,
    /// Median p95, ms.
    pub latency_p95_ms: Option<f64>,
    /// Median p99, ms.
    pub latency_p99_ms: f64,
    /// Median max, ms.
    pub latency_max_ms: f64,
    /// Median throughput, records/s.
    pub records_per_sec: f64,
    /// Median job time, s.
    pub seconds: f64,
    /// Median of the runs' peak RSS.
    pub peak_rss_bytes: u64,
    /// Median of the runs' steady RSS.
    pub steady_rss_bytes: u64,
    /// Median of the runs' mean CPU, percent of one core.
    pub cpu_mean_pct_core: f64,
}

/// With backup against without, one size, percent (positive: the backup costs).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LatencyOverhead {
    /// Input records.
    pub records: u64,
    /// Checkpoint interval, ms.
    pub checkpoint_interval_ms: u64,
    /// Change of median p50.
    pub p50_pct: f64,
    /// Change of median p99.
    pub p99_pct: f64,
    /// Change of the median job time.
    pub seconds_pct: f64,
    /// Change of median throughput (negative: slower).
    pub throughput_pct: f64,
}

/// Recovery from successive faults in flat_map (`recovery`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Recovery {
    /// Generated records per run.
    pub records: u64,
    /// Faults per run.
    pub failures: usize,
    /// Fault kind.
    pub kind: String,
    /// Checkpoint interval of both modes.
    pub checkpoint_interval_ms: u64,
    /// Runs per mode.
    pub repeats: usize,
    /// How the failure windows are chosen.
    pub failure_window: String,
    /// Shortest failure window, ms.
    pub failure_window_min_ms: f64,
    /// Every run.
    pub runs: Vec<RecoveryRun>,
    /// Per mode.
    pub summary: Vec<RecoveryRow>,
    /// BQBS's first recovery over restart-all's (medians).
    pub bqbs_over_restart_all_first: f64,
    /// BQBS's cumulative recovery over restart-all's after the last failure (medians).
    pub bqbs_over_restart_all_cumulative: f64,
}

/// One `recovery` run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecoveryRun {
    /// `restart-all` or `bqbs`.
    pub mode: String,
    /// Repetition, from 0.
    pub rep: usize,
    /// The harness's `recovery_ms_each`.
    pub recovery_ms_each: Vec<f64>,
    /// Running sums of `recovery_ms_each`.
    pub cumulative_ms: Vec<f64>,
    /// Extra copies of expected output.
    pub duplicates: u64,
    /// Expected output not committed.
    pub missing: u64,
    /// Output that should not be there.
    pub unexpected: u64,
    /// Lines that differ from the expected.
    pub wrong_lines: u64,
    /// Faults that fired.
    pub faults_fired: u64,
    /// Backup promotions.
    pub promotions: u64,
    /// Job restarts.
    pub restarts: u64,
    /// bqbs: the last failover's detection → promoted backup running.
    pub last_failover_ms: Option<f64>,
    /// restart-all: first fault → the restarted job's sink created.
    pub redeploy_ms: Option<f64>,
    /// The harness's `total_seconds` (the job).
    pub total_seconds: f64,
    /// Job start, seconds since the spawn (see `anchor`).
    pub job_start_s: f64,
    /// Job end, seconds since the spawn.
    pub job_end_s: f64,
    /// How the job start was placed on this process's clock.
    pub anchor: String,
    /// Fault times, seconds since the spawn.
    pub fault_times_s: Vec<f64>,
    /// Largest difference between a fault time and the time its "injected fault" stderr
    /// line was read, ms (a check of the anchor).
    pub fault_line_skew_ms: Option<f64>,
    /// The failure windows, seconds since the spawn.
    pub failure_windows_s: Vec<(f64, f64)>,
    /// Mean CPU in the job outside the failure windows, percent of one core.
    pub cpu_normal_pct_core: f64,
    /// Mean CPU inside the failure windows, percent of one core.
    pub cpu_failure_pct_core: f64,
    /// Largest VmHWM sampled.
    pub peak_rss_bytes: u64,
    /// Median VmRSS in the job outside the failure windows.
    pub steady_rss_bytes: u64,
    /// Spawn to exit, s.
    pub wall_s: f64,
    /// The command.
    pub command: String,
    /// The samples.
    pub samples: Vec<Sample>,
    /// The harness's JSON.
    pub raw: Value,
}

/// Medians over the runs of one mode.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecoveryRow {
    /// `restart-all` or `bqbs`.
    pub mode: String,
    /// Runs.
    pub runs: usize,
    /// Median recovery of each failure, ms.
    pub recovery_ms_each: Vec<f64>,
    /// Running sums of those medians, ms.
    pub cumulative_ms: Vec<f64>,
    /// Duplicates over all runs.
    pub duplicates: u64,
    /// Missing over all runs.
    pub missing: u64,
    /// Median normal CPU, percent of one core.
    pub cpu_normal_pct_core: f64,
    /// Median CPU during failures, percent of one core.
    pub cpu_failure_pct_core: f64,
    /// Median peak RSS.
    pub peak_rss_bytes: u64,
    /// Median steady RSS.
    pub steady_rss_bytes: u64,
    /// Median `last_failover_ms` (bqbs).
    pub last_failover_ms: Option<f64>,
    /// Median `redeploy_ms` (restart-all).
    pub redeploy_ms: Option<f64>,
}

/// CPU utilization rows.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cpu {
    /// Logical CPUs of the machine (percent of the machine = percent of a core / this).
    pub logical_cpus: usize,
    /// How the figures are computed.
    pub definition: String,
    /// One row per measured configuration.
    pub rows: Vec<CpuRow>,
}

/// CPU of one configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CpuRow {
    /// What ran.
    pub what: String,
    /// `restart-all` (no backup) or `bqbs` (flat_map backed up).
    pub mode: String,
    /// Normal running, percent of one core.
    pub normal_pct_core: f64,
    /// During failures, percent of one core (`None` for fault-free runs).
    pub failure_pct_core: Option<f64>,
    /// Normal running, percent of the machine.
    pub normal_pct_machine: f64,
    /// During failures, percent of the machine.
    pub failure_pct_machine: Option<f64>,
}

/// Memory rows.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Memory {
    /// `MemTotal`.
    pub mem_total_bytes: u64,
    /// How the figures are computed.
    pub definition: String,
    /// One row per measured configuration.
    pub rows: Vec<MemRow>,
}

/// Memory of one configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemRow {
    /// What ran.
    pub what: String,
    /// `restart-all` (no backup) or `bqbs`.
    pub mode: String,
    /// Peak RSS.
    pub peak_rss_bytes: u64,
    /// Steady RSS.
    pub steady_rss_bytes: u64,
    /// Peak RSS, percent of `MemTotal`.
    pub peak_pct_mem: f64,
    /// Steady RSS, percent of `MemTotal`.
    pub steady_pct_mem: f64,
}

/// The criticality ranking (`criticality`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Criticality {
    /// Faults per operator.
    pub faults: usize,
    /// Records per run.
    pub records: u64,
    /// Checkpoint interval of its runs.
    pub checkpoint_interval_ms: u64,
    /// The operators ranked, most critical first.
    pub ranking: Vec<CritRow>,
    /// Operators that could not be faulted, as the tool reports them.
    pub skipped: Vec<Value>,
    /// The tool's total time.
    pub total_seconds: f64,
    /// The command.
    pub command: String,
    /// The tool's JSON.
    pub raw: Value,
}

/// One operator of the ranking.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CritRow {
    /// 1 = most critical.
    pub rank: u64,
    /// Operator uid.
    pub uid: String,
    /// Faults injected.
    pub faults: u64,
    /// Mean recovery, ms.
    pub mean_recovery_ms: f64,
    /// Median recovery, ms.
    pub p50_recovery_ms: f64,
    /// Largest recovery, ms.
    pub max_recovery_ms: f64,
    /// Duplicates over its runs.
    pub duplicates: u64,
    /// Missing over its runs.
    pub missing: u64,
}
