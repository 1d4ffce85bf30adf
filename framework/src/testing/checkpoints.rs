//! Waiting for an event of a running job instead of sleeping and hoping: [`wait_for_checkpoint`]
//! returns once the job has completed `n` checkpoints (say, to inject a fault, take a
//! savepoint or cancel only after some state is safe).
//!
//! ```
//! use std::time::Duration;
//! use weir::testing::wait_for_checkpoint;
//! let mut cfg = weir::EnvConfig::default();
//! cfg.checkpoint.interval = Some(Duration::from_millis(10));
//! let env = weir::Env::with_config(cfg);
//! // A source that never ends: the job runs until it is cancelled.
//! env.generate(u64::MAX, |i| i).add_sink("discard", |_| Ok(weir::testing::PacedSink::new(1e6)));
//! let job = env.start("wait-doc").unwrap();
//! let stats = wait_for_checkpoint(&job, 2, Duration::from_secs(30)).unwrap();
//! assert!(stats.number_of_completed_checkpoints >= 2);
//! job.cancel();
//! assert!(job.wait().is_err()); // cancelled
//! ```

use std::fmt;
use std::time::{Duration, Instant};

use crate::{CheckpointStats, JobHandle};

/// How often [`wait_for_checkpoint`] reads the job's statistics.
pub const POLL_INTERVAL: Duration = Duration::from_millis(1);

/// [`wait_for_checkpoint`] gave up.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointWaitTimeout {
    /// The number of completed checkpoints waited for.
    pub wanted: u64,
    /// How long it waited.
    pub waited: Duration,
    /// The job's statistics when it gave up (`None`: it had none yet).
    pub last: Option<CheckpointStats>,
}

impl fmt::Display for CheckpointWaitTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the job did not complete {} checkpoint(s) within {:?} (completed: {}, failed: {}); \
             has it ended, or are checkpoints off?",
            self.wanted,
            self.waited,
            self.last
                .as_ref()
                .map_or(0, |s| s.number_of_completed_checkpoints),
            self.last
                .as_ref()
                .map_or(0, |s| s.number_of_failed_checkpoints),
        )
    }
}

impl std::error::Error for CheckpointWaitTimeout {}

/// Waits until `job` has completed at least `n` checkpoints (counted over every restart
/// attempt: `CheckpointStats::number_of_completed_checkpoints`) and returns its statistics
/// then; gives up after `timeout`. It reads [`JobHandle::checkpoint_stats`] every
/// [`POLL_INTERVAL`]. A job that ends first, or runs without checkpoints, is seen as a
/// timeout (the handle does not tell whether the job still runs).
///
/// ```
/// use std::time::Duration;
/// use weir::testing::wait_for_checkpoint;
/// let env = weir::Env::new(); // no checkpoints
/// env.generate(u64::MAX, |i| i).add_sink("paced", |_| Ok(weir::testing::PacedSink::new(1e6)));
/// let job = env.start("no-checkpoints-doc").unwrap();
/// let e = wait_for_checkpoint(&job, 1, Duration::from_millis(20)).unwrap_err();
/// assert_eq!(e.wanted, 1);
/// job.cancel();
/// let _ = job.wait();
/// ```
pub fn wait_for_checkpoint(
    job: &JobHandle,
    n: u64,
    timeout: Duration,
) -> Result<CheckpointStats, CheckpointWaitTimeout> {
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
        let waited = started.elapsed();
        if waited >= timeout {
            return Err(CheckpointWaitTimeout {
                wanted: n,
                waited,
                last: stats,
            });
        }
        std::thread::sleep(POLL_INTERVAL.min(timeout - waited));
    }
}
