//! How an operator is backed up ([`BackupPolicy`]: heartbeats, memory bound, batch sizes,
//! validated) and what a backed-up subtask reports ([`BackupMetrics`]).

use super::*;

/// How an operator is backed up: heartbeat period and timeout of its primaries, and the
/// memory bound of each subtask's buffer queue.
///
/// ```
/// use std::time::Duration;
/// use weir::BackupPolicy;
///
/// let policy = BackupPolicy::default()
///     .heartbeat(Duration::from_millis(20), Duration::from_millis(100))
///     .max_memory(64 << 20);
/// assert_eq!(policy.heartbeat_timeout, Duration::from_millis(100));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BackupPolicy {
    /// How often the supervisor pings each primary through its system lane (default 50 ms).
    pub heartbeat_interval: Duration,
    /// A primary that has not answered for this long is declared hung (default 250 ms).
    pub heartbeat_timeout: Duration,
    /// Bound of each subtask's buffer queue, in bytes of buffered records (counted as
    /// `size_of` of the record type: heap data the records own is not counted). Above it the
    /// backup is degraded and a failure falls back to restart-all. Default 256 MiB.
    pub max_memory: u64,
    /// Records per batch on the channels into and out of the operator, if smaller than the
    /// job's batch size (default 256). A backed-up operator is an actor of its own, so its
    /// input and output wait in channels that a chained operator would not have; smaller
    /// batches keep the memory of those batches near the chained job's. `None`: the job's.
    pub batch_size: Option<usize>,
    /// How often a stateful primary hands its operator state to the buffer queue, in
    /// memory, between two batches (default 20 ms): a promotion restores the latest and
    /// replays only the batches after it, instead of everything since the last checkpoint.
    /// A keyed process function (and `reduce`) hands only the entries of the keys written
    /// since its last handoff, which the backup applies to its copy off the primary's thread,
    /// so a handoff costs what changed, not the state; other operators hand their whole
    /// snapshot. `None`: only at completed checkpoints.
    pub state_interval: Option<Duration>,
    /// The largest share of the primary's time its handoffs may take (default 0.1): after a
    /// handoff that took `d` (the one at a checkpoint's barrier too), plus what applying the
    /// handoffs took the backup since the one before, the next waits at least
    /// `d * (1 - share) / share`, even if `state_interval` is shorter; but not while the
    /// buffer queue holds over half of `max_memory`. A state that changes faster than the
    /// primary can hand it over then costs about this share of throughput, and a promotion
    /// replays more batches instead (those since the last handoff). 1.0: no bound.
    pub state_share: f64,
}

impl Default for BackupPolicy {
    fn default() -> Self {
        BackupPolicy {
            heartbeat_interval: Duration::from_millis(50),
            heartbeat_timeout: Duration::from_millis(250),
            max_memory: 256 << 20,
            batch_size: Some(256),
            state_interval: Some(Duration::from_millis(20)),
            state_share: 0.1,
        }
    }
}

impl BackupPolicy {
    /// Sets the heartbeat period and timeout.
    pub fn heartbeat(mut self, interval: Duration, timeout: Duration) -> Self {
        self.heartbeat_interval = interval;
        self.heartbeat_timeout = timeout;
        self
    }

    /// Sets the buffer queue's bound in bytes.
    pub fn max_memory(mut self, bytes: u64) -> Self {
        self.max_memory = bytes;
        self
    }

    /// Sets how often a stateful primary hands its state to its backup (`None`: only at
    /// completed checkpoints).
    pub fn state_interval(mut self, every: Option<Duration>) -> Self {
        self.state_interval = every;
        self
    }

    /// Sets the largest share of the primary's time its state handoffs may take (see
    /// [`state_share`](Self::state_share)).
    pub fn state_share(mut self, share: f64) -> Self {
        self.state_share = share;
        self
    }

    /// Sets the batch size of the channels into and out of the operator (`None`: the
    /// job's).
    pub fn batch_size(mut self, records: Option<usize>) -> Self {
        self.batch_size = records;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), PlanError> {
        let bad = |key, message: &str| {
            Err(PlanError::BadConfig {
                key,
                message: message.to_owned(),
            })
        };
        if self.heartbeat_interval < Duration::from_millis(1) {
            return bad("backup.heartbeat_interval", "must be at least 1 ms");
        }
        if self.heartbeat_timeout <= self.heartbeat_interval {
            return bad(
                "backup.heartbeat_timeout",
                "must be longer than the heartbeat interval",
            );
        }
        if self.max_memory == 0 {
            return bad("backup.max_memory", "must be more than 0");
        }
        if self.state_interval.is_some_and(|d| d.is_zero()) {
            return bad("backup.state_interval", "must be more than 0");
        }
        if !(self.state_share > 0.0 && self.state_share <= 1.0) {
            return bad("backup.state_share", "must be more than 0 and at most 1");
        }
        if self.batch_size == Some(0) {
            return bad("backup.batch_size", "must be at least 1 record");
        }
        Ok(())
    }
}

/// Metrics of one backed-up subtask ([`JobMonitor::backup_metrics`](crate::JobMonitor::backup_metrics)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackupMetrics {
    /// The backed-up operator.
    pub uid: String,
    /// Subtask index.
    pub subtask: usize,
    /// Batches in the buffer queue now.
    pub queue_entries: u64,
    /// Bytes of records in the buffer queue now (`size_of` per record).
    pub queue_bytes: u64,
    /// Batches the backup found already claimed by the primary (not kept twice).
    pub filtered: u64,
    /// Records in those batches: tuples the backup neither stored nor computed.
    pub filtered_records: u64,
    /// Batches the backup received before the primary claimed them.
    pub added: u64,
    /// Batches the primaries claimed.
    pub claimed: u64,
    /// Promotions of a backup to primary so far.
    pub promotions: u64,
    /// Backups replaced after they failed.
    pub backup_replacements: u64,
    /// From the failure's detection to the new primary running, of the last promotion.
    pub last_failover: Option<Duration>,
    /// Batches the last promotion processed again (the old primary had processed them).
    pub last_reprocessed: u64,
    /// Batches waiting in the backup's input channels (how far it trails the upstream).
    pub backup_lag: u64,
    /// The queue is over `max_memory`: a failure restarts the job instead.
    pub degraded: bool,
}
