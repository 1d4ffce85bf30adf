//! Job configuration: batch size, linger, channel capacity, arbiters, parallelism, chaining.
//!
//! [`EnvConfig`] is plain data with defaults that suit most jobs; [`EnvConfig::validate`]
//! names the first bad value. This module does not own settings of later subsystems
//! (checkpoints, backup), which bring their own config types.

use std::time::Duration;

use crate::checkpoint::CheckpointConfig;
use crate::error::PlanError;
use crate::fault::FaultPlan;
use crate::key_group::DEFAULT_MAX_PARALLELISM;
use crate::rate::RateControlConfig;
use crate::restart::RestartStrategy;
use crate::state::StateBackend;

/// The longest line the line sources read by default (`EnvConfig::max_line_bytes`): 16 MiB.
pub const DEFAULT_MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Settings of an [`Env`](crate::Env) and the jobs it runs.
///
/// ```
/// let mut cfg = weir::EnvConfig::default();
/// cfg.batch_size = 512;
/// cfg.arbiters = 2;
/// assert!(cfg.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EnvConfig {
    /// Most records in one batch (default 1024). Actor and channel costs are paid per batch.
    pub batch_size: usize,
    /// Longest a partial output batch waits while its operator is busy (default 2 ms). An
    /// operator with no more input flushes at once.
    pub linger: Duration,
    /// Capacity of each input channel, in batches (default 2, like Flink's two exclusive
    /// buffers per channel): the window's floor when it adapts to `latency_target`, the fixed
    /// window when that is `None`. A sender without credit waits: that is backpressure.
    pub channel_capacity: usize,
    /// The window's ceiling when it adapts to `latency_target`, in batches (default 64; one
    /// below `channel_capacity` counts as `channel_capacity`): it bounds the memory one
    /// channel holds (and the in-flight data an unaligned checkpoint stores for it) whatever
    /// the rate.
    pub max_channel_capacity: usize,
    /// The queueing delay each channel's window is sized for (default `Some(2 ms)`), Flink's
    /// buffer debloating target. The receiver measures how long it takes per batch while more
    /// wait, and the window becomes `latency_target / that`, between `channel_capacity` and
    /// `max_channel_capacity`: a consumer that gets through a batch in 20 µs gets a deep
    /// window (its threads hand off rarely), one that needs 1 ms keeps the floor, and what
    /// waits in front of a record stays under the target. `None`: the window is fixed at
    /// `channel_capacity` (a deeper fixed queue buys throughput with latency: measured ETL
    /// p99 2.7 ms at 2, 6.3 ms at 8, same records/s).
    pub latency_target: Option<Duration>,
    /// Whether a consumer slower than `latency_target` even at the window's floor also gets
    /// smaller batches (default `true`): `latency_target / (channel_capacity × its time per
    /// record)` records, between an eighth of `batch_size` and `batch_size`. It shortens the
    /// queue in front of a slow sink to about the target, and with it what an aligned
    /// checkpoint's barrier waits behind (measured under backpressure: 337 ms → 111 ms). A
    /// consumer that keeps up never gets batches below `batch_size`. It takes effect only
    /// while rate control (PID or a fixed rate) is off: a rate-limited source is paced at the
    /// consumer's capacity and sends in bursts that need the slack of full batches, and rate
    /// control keeps the queues short by itself (turning rate control on or off while the job
    /// runs switches batches back and forth).
    pub adaptive_batch_size: bool,
    /// Number of arbiter threads subtasks are placed on (default: available cores).
    pub arbiters: usize,
    /// Parallelism of operators that do not set their own (default 1).
    pub default_parallelism: usize,
    /// Number of key groups, the upper bound of any keyed operator's parallelism (default 128).
    pub max_parallelism: usize,
    /// Fuse forward edges of equal parallelism into one actor (default true).
    pub chaining: bool,
    /// How often the job samples its subtasks' metrics (default 1 s). When rate control is
    /// on at start, sampling runs at the shorter of this and its `update_interval`.
    pub metrics_interval: Duration,
    /// PID rate control of the sources (default off); changeable while the job runs with
    /// `JobMonitor::set_rate_control`.
    pub rate_control: RateControlConfig,
    /// Checkpoints (default off: no interval).
    pub checkpoint: CheckpointConfig,
    /// How a failed job restarts; `None` (default): Flink's rule — with checkpoints on,
    /// [`RestartStrategy::default_with_checkpoints`] (exponential delay from 100 ms to 10 s,
    /// at most 20 restarts in a row), else never. Deterministic failures (a malformed record,
    /// a panic that recurs at the same input position after a restore) are never restarted.
    pub restart: Option<RestartStrategy>,
    /// Print one line to stderr for every restart and every failed checkpoint or savepoint
    /// (`weir: job 'x' restarting (restart 1/20, in 100ms) after: ...`), with or without a
    /// `tracing` subscriber (default true, unless the environment variable
    /// `WEIR_STDERR_WARNINGS` is `0`, `false`, `off` or `no` when the config is made).
    pub stderr_warnings: bool,
    /// A subtask that does not answer the job's sampling mail for this long is declared
    /// failed (hung) (default 30 s).
    pub heartbeat_timeout: Duration,
    /// Buffer-queue backups by operator uid, besides the ones the job's code sets with
    /// [`with_backup`](crate::DataStream::with_backup) (default none). Which operators to
    /// protect can then follow the criticality analysis, or a deployment's settings, without
    /// a change to the job's code. A uid no operator has fails the job when it is planned,
    /// naming it.
    ///
    /// ```
    /// let mut cfg = weir::EnvConfig::default();
    /// cfg.backups.insert("count".into(), weir::BackupPolicy::default());
    /// cfg.checkpoint.interval = Some(std::time::Duration::from_millis(100));
    /// let env = weir::Env::with_config(cfg);
    /// let out = env
    ///     .from_collection((0..100u64).collect::<Vec<_>>())
    ///     .key_by(|x: &u64| x % 3)
    ///     .process(|_k: &u64, n: &mut weir::ValueState<u64>, _x: u64, out: &mut weir::Collector<u64>| {
    ///         let c = n.get_or_insert_with(|| 0);
    ///         *c += 1;
    ///         out.collect(*c);
    ///     })
    ///     .uid("count")
    ///     .collect();
    /// let result = env.execute("config-backups-doc").unwrap();
    /// assert_eq!(result.backups.len(), 1, "one backed-up subtask");
    /// assert_eq!(out.take().len(), 100);
    /// ```
    pub backups: std::collections::BTreeMap<String, crate::BackupPolicy>,
    /// Injected faults (default none): tests set them through the `weir-testing` crate,
    /// which turns on the feature `faults` that makes [`FaultPlan`] nameable.
    #[cfg_attr(not(feature = "faults"), doc(hidden))]
    pub faults: FaultPlan,
    /// The longest line the line sources (`read_lines`, `read_jsonl`, ...) read, in bytes
    /// before its `\n` (default 16 MiB, [`DEFAULT_MAX_LINE_BYTES`]). A longer line is
    /// malformed: it is never buffered whole, and goes to the side output or fails the job
    /// by the source's policy.
    pub max_line_bytes: usize,
    /// Where keyed operators keep their per-key states (default [`StateBackend::Memory`]):
    /// in memory, or on disk for state larger than memory ([`StateBackend::disk`]).
    pub state_backend: StateBackend,
}

impl Default for EnvConfig {
    fn default() -> Self {
        EnvConfig {
            batch_size: 1024,
            linger: Duration::from_millis(2),
            channel_capacity: 2,
            max_channel_capacity: 64,
            latency_target: Some(Duration::from_millis(2)),
            adaptive_batch_size: true,
            arbiters: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
            default_parallelism: 1,
            max_parallelism: DEFAULT_MAX_PARALLELISM,
            chaining: true,
            metrics_interval: Duration::from_secs(1),
            rate_control: RateControlConfig::default(),
            checkpoint: CheckpointConfig::default(),
            restart: None,
            stderr_warnings: crate::failure::stderr_warnings_default(),
            heartbeat_timeout: Duration::from_secs(30),
            backups: Default::default(),
            faults: FaultPlan::default(),
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            state_backend: StateBackend::Memory,
        }
    }
}

impl EnvConfig {
    /// Checks every value; the error names the first bad one.
    pub fn validate(&self) -> Result<(), PlanError> {
        let bad = |key, message: &str| {
            Err(PlanError::BadConfig {
                key,
                message: message.to_owned(),
            })
        };
        if self.batch_size == 0 {
            return bad("batch_size", "must be at least 1");
        }
        if self.channel_capacity == 0 {
            return bad("channel_capacity", "must be at least 1 batch");
        }
        if self.latency_target.is_some_and(|t| t.is_zero()) {
            return bad(
                "latency_target",
                "must be more than zero (None fixes the window at channel_capacity)",
            );
        }
        if self.arbiters == 0 {
            return bad("arbiters", "must be at least 1");
        }
        if self.max_parallelism == 0 {
            return bad("max_parallelism", "must be at least 1");
        }
        if self.max_line_bytes == 0 {
            return bad("max_line_bytes", "must be at least 1");
        }
        if self.metrics_interval < Duration::from_millis(10) {
            return bad("metrics_interval", "must be at least 10 ms");
        }
        self.checkpoint.validate()?;
        if let Err(e) = self.state_backend.validate() {
            return bad("state_backend", &e);
        }
        if let Err(e) = self.rate_control.validate() {
            return bad("rate_control", &e.to_string());
        }
        if self.default_parallelism == 0 || self.default_parallelism > self.max_parallelism {
            return bad(
                "default_parallelism",
                &format!("must be in 1..={}", self.max_parallelism),
            );
        }
        Ok(())
    }
}
