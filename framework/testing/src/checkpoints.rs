//! Waiting for an event of a running job instead of sleeping and hoping: [`wait_for_checkpoint`]
//! returns once the job has completed `n` checkpoints (say, to inject a fault, take a
//! savepoint or cancel only after some state is safe).
//!
//! ```
//! use std::time::Duration;
//! use weir_testing::wait_for_checkpoint;
//! let mut cfg = weir::EnvConfig::default();
//! cfg.checkpoint.interval = Some(Duration::from_millis(10));
//! let env = weir::Env::with_config(cfg);
//! // A source that never ends: the job runs until it is cancelled.
//! env.generate(u64::MAX, |i| i).add_sink("discard", |_| Ok(weir_testing::PacedSink::new(1e6)));
//! let job = env.start("wait-doc").unwrap();
//! let stats = wait_for_checkpoint(&job, 2, Duration::from_secs(30)).unwrap();
//! assert!(stats.number_of_completed_checkpoints >= 2);
//! job.cancel();
//! assert!(job.wait().is_err()); // cancelled
//! ```

use std::fmt;
use std::time::{Duration, Instant};

use weir::{CheckpointStats, JobHandle};

/// How often [`wait_for_checkpoint`] reads the job's statistics.
pub const POLL_INTERVAL: Duration = Duration::from_millis(1);

/// Why [`wait_for_checkpoint`] gave up.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum CheckpointWaitError {
    /// The job did not complete enough checkpoints in time (are checkpoints off?).
    TimedOut {
        /// The number of completed checkpoints waited for.
        wanted: u64,
        /// How long it waited.
        waited: Duration,
        /// The job's statistics when it gave up (`None`: it had none yet).
        last: Option<Box<CheckpointStats>>,
    },
    /// The job ended before it completed enough checkpoints (`wait` tells how).
    JobEnded {
        /// The number of completed checkpoints waited for.
        wanted: u64,
        /// The job's last statistics (`None`: it had none).
        last: Option<Box<CheckpointStats>>,
    },
}

impl CheckpointWaitError {
    /// The number of completed checkpoints waited for.
    pub fn wanted(&self) -> u64 {
        match self {
            CheckpointWaitError::TimedOut { wanted, .. }
            | CheckpointWaitError::JobEnded { wanted, .. } => *wanted,
        }
    }
}

fn counts(last: &Option<Box<CheckpointStats>>) -> (u64, u64) {
    last.as_ref().map_or((0, 0), |s| {
        (
            s.number_of_completed_checkpoints,
            s.number_of_failed_checkpoints,
        )
    })
}

impl fmt::Display for CheckpointWaitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckpointWaitError::TimedOut {
                wanted,
                waited,
                last,
            } => {
                let (done, failed) = counts(last);
                write!(
                    f,
                    "the job did not complete {wanted} checkpoint(s) within {waited:?} \
                     (completed: {done}, failed: {failed}); are checkpoints off?"
                )
            }
            CheckpointWaitError::JobEnded { wanted, last } => {
                let (done, failed) = counts(last);
                write!(
                    f,
                    "the job ended before it completed {wanted} checkpoint(s) \
                     (completed: {done}, failed: {failed})"
                )
            }
        }
    }
}

impl std::error::Error for CheckpointWaitError {}

/// Waits until `job` has completed at least `n` checkpoints (counted over every restart
/// attempt: `CheckpointStats::number_of_completed_checkpoints`) and returns its statistics
/// then; gives up after `timeout`. It reads [`JobMonitor::checkpoint_stats`](weir::JobMonitor::checkpoint_stats) every
/// [`POLL_INTERVAL`]. A job that ends first is [`CheckpointWaitError::JobEnded`] (as soon as it
/// has ended); one that runs without checkpoints times out.
///
/// ```
/// use std::time::Duration;
/// use weir_testing::wait_for_checkpoint;
/// let env = weir::Env::new(); // no checkpoints
/// env.generate(u64::MAX, |i| i).add_sink("paced", |_| Ok(weir_testing::PacedSink::new(1e6)));
/// let job = env.start("no-checkpoints-doc").unwrap();
/// let e = wait_for_checkpoint(&job, 1, Duration::from_millis(20)).unwrap_err();
/// assert!(matches!(e, weir_testing::CheckpointWaitError::TimedOut { wanted: 1, .. }));
/// job.cancel();
/// let _ = job.wait();
///
/// // A job that ends first.
/// let env = weir::Env::new();
/// env.generate(10, |i| i).collect();
/// let job = env.start("ends-doc").unwrap();
/// let e = wait_for_checkpoint(&job, 1, Duration::from_secs(30)).unwrap_err();
/// assert!(matches!(e, weir_testing::CheckpointWaitError::JobEnded { .. }), "{e}");
/// assert!(job.wait().is_ok());
/// ```
pub fn wait_for_checkpoint(
    job: &JobHandle,
    n: u64,
    timeout: Duration,
) -> Result<CheckpointStats, CheckpointWaitError> {
    let started = Instant::now();
    loop {
        let stats = job.checkpoint_stats();
        if n == 0 {
            return Ok(stats.unwrap_or_default());
        }
        if let Some(s) = stats
            .as_ref()
            .filter(|s| s.number_of_completed_checkpoints >= n)
        {
            return Ok(s.clone());
        }
        if job.is_finished() {
            // Statistics published just before the end are read once more.
            let last = job.checkpoint_stats();
            if let Some(s) = last
                .as_ref()
                .filter(|s| s.number_of_completed_checkpoints >= n)
            {
                return Ok(s.clone());
            }
            return Err(CheckpointWaitError::JobEnded {
                wanted: n,
                last: last.map(Box::new),
            });
        }
        let waited = started.elapsed();
        if waited >= timeout {
            return Err(CheckpointWaitError::TimedOut {
                wanted: n,
                waited,
                last: stats.map(Box::new),
            });
        }
        std::thread::sleep(POLL_INTERVAL.min(timeout - waited));
    }
}
