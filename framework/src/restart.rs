//! Restart strategies: whether, and after how long, a failed job restarts from its last
//! complete checkpoint (Flink's fixed-delay, exponential-delay and failure-rate strategies).
//! A plain struct with time passed in; the job acts on its answers.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How a failed job is restarted.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RestartStrategy {
    /// Never: the first failure fails the job.
    None,
    /// Up to `attempts` restarts, `delay` apart.
    FixedDelay {
        /// Restarts allowed.
        attempts: u32,
        /// Wait before each restart.
        delay: Duration,
    },
    /// Restarts with a delay that grows by `multiplier` up to `max`, with `jitter` (0..1) of
    /// randomness, and falls back to `initial` after `reset_after` without a failure.
    ExponentialDelay {
        /// First delay.
        initial: Duration,
        /// Growth per failure.
        multiplier: f64,
        /// Largest delay.
        max: Duration,
        /// Share of the delay randomized (0 to 1).
        jitter: f64,
        /// Quiet time after which the delay starts over.
        reset_after: Duration,
    },
    /// Restarts unless more than `max_failures` happened within `interval`.
    FailureRate {
        /// Failures tolerated per interval.
        max_failures: u32,
        /// The interval.
        interval: Duration,
        /// Wait before each restart.
        delay: Duration,
    },
}

impl RestartStrategy {
    /// Flink's default with checkpoints on: restart (practically) forever, 1 s apart.
    pub fn default_with_checkpoints() -> Self {
        RestartStrategy::FixedDelay {
            attempts: u32::MAX,
            delay: Duration::from_secs(1),
        }
    }
}

/// Applies a strategy to a sequence of failures.
#[derive(Debug)]
pub(crate) struct RestartTracker {
    strategy: RestartStrategy,
    restarts: u32,
    failures: VecDeque<Instant>,
    backoff: Option<Duration>,
    last_failure: Option<Instant>,
}

impl RestartTracker {
    pub(crate) fn new(strategy: RestartStrategy) -> Self {
        RestartTracker {
            strategy,
            restarts: 0,
            failures: VecDeque::new(),
            backoff: None,
            last_failure: None,
        }
    }

    /// A failure at `now`: the delay before restarting, or `None` to give up.
    pub(crate) fn on_failure(&mut self, now: Instant) -> Option<Duration> {
        let since_last = self.last_failure.map(|t| now.saturating_duration_since(t));
        self.last_failure = Some(now);
        let delay = match &self.strategy {
            RestartStrategy::None => return None,
            RestartStrategy::FixedDelay { attempts, delay } => {
                if self.restarts >= *attempts {
                    return None;
                }
                *delay
            }
            RestartStrategy::ExponentialDelay {
                initial,
                multiplier,
                max,
                jitter,
                reset_after,
            } => {
                let base = match (self.backoff, since_last) {
                    (Some(_), Some(quiet)) if quiet >= *reset_after => *initial,
                    (Some(b), _) => b.mul_f64(multiplier.max(1.0)).min(*max),
                    (None, _) => *initial,
                };
                self.backoff = Some(base);
                // Deterministic jitter from the clock (no RNG dependency): in [-j, +j].
                let nanos = now.elapsed().as_nanos() as u64 ^ self.restarts as u64;
                let unit = (nanos % 1000) as f64 / 1000.0 * 2.0 - 1.0;
                base.mul_f64((1.0 + jitter.clamp(0.0, 1.0) * unit).max(0.0))
            }
            RestartStrategy::FailureRate {
                max_failures,
                interval,
                delay,
            } => {
                self.failures.push_back(now);
                while self
                    .failures
                    .front()
                    .is_some_and(|t| now.saturating_duration_since(*t) > *interval)
                {
                    self.failures.pop_front();
                }
                if self.failures.len() as u32 > *max_failures {
                    return None;
                }
                *delay
            }
        };
        self.restarts += 1;
        Some(delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_delay_counts_attempts() {
        let mut t = RestartTracker::new(RestartStrategy::FixedDelay {
            attempts: 2,
            delay: Duration::from_millis(5),
        });
        let now = Instant::now();
        assert_eq!(t.on_failure(now), Some(Duration::from_millis(5)));
        assert_eq!(t.on_failure(now), Some(Duration::from_millis(5)));
        assert_eq!(t.on_failure(now), None);
    }

    #[test]
    fn exponential_grows_to_max_and_resets_after_quiet() {
        let mut t = RestartTracker::new(RestartStrategy::ExponentialDelay {
            initial: Duration::from_millis(10),
            multiplier: 2.0,
            max: Duration::from_millis(35),
            jitter: 0.0,
            reset_after: Duration::from_secs(60),
        });
        let t0 = Instant::now();
        assert_eq!(t.on_failure(t0), Some(Duration::from_millis(10)));
        assert_eq!(t.on_failure(t0), Some(Duration::from_millis(20)));
        assert_eq!(t.on_failure(t0), Some(Duration::from_millis(35)));
        assert_eq!(t.on_failure(t0), Some(Duration::from_millis(35)));
        assert_eq!(
            t.on_failure(t0 + Duration::from_secs(61)),
            Some(Duration::from_millis(10))
        );
    }

    #[test]
    fn failure_rate_gives_up_when_too_many_fail_within_the_interval() {
        let mut t = RestartTracker::new(RestartStrategy::FailureRate {
            max_failures: 2,
            interval: Duration::from_secs(10),
            delay: Duration::ZERO,
        });
        let t0 = Instant::now();
        assert!(t.on_failure(t0).is_some());
        assert!(t.on_failure(t0 + Duration::from_secs(1)).is_some());
        assert!(t.on_failure(t0 + Duration::from_secs(2)).is_none());
        let mut t2 = RestartTracker::new(RestartStrategy::FailureRate {
            max_failures: 1,
            interval: Duration::from_secs(1),
            delay: Duration::ZERO,
        });
        assert!(t2.on_failure(t0).is_some());
        assert!(
            t2.on_failure(t0 + Duration::from_secs(5)).is_some(),
            "old failure expired"
        );
    }
}
