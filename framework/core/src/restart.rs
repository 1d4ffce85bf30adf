//! Restart strategies: whether, and after how long, a failed job restarts from its last
//! complete checkpoint (Flink's fixed-delay, exponential-delay and failure-rate strategies).
//! A plain struct with time passed in; the job acts on its answers. Which failures are worth
//! a restart at all is decided before the strategy is asked (`failure`).

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
    /// randomness, and falls back to `initial` after `reset_after` without a failure. At most
    /// `attempts_before_reset` restarts in a row (Flink's
    /// `restart-strategy.exponential-delay.attempts-before-reset-backoff`): one more failure
    /// before a quiet `reset_after` fails the job.
    ExponentialDelay {
        /// First delay.
        initial: Duration,
        /// Growth per failure.
        multiplier: f64,
        /// Largest delay.
        max: Duration,
        /// Share of the delay randomized (0 to 1).
        jitter: f64,
        /// Quiet time after which the delay (and the count of attempts) starts over.
        reset_after: Duration,
        /// Restarts allowed before the delay resets (`u32::MAX`: no bound).
        attempts_before_reset: u32,
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
    /// The default with checkpoints on: Flink's (since 1.19) exponential delay, with a bound.
    /// The first restart waits 100 ms, each next one twice as long up to 10 s (10 % jitter);
    /// after 20 restarts in a row (about 2½ minutes of failing) the job fails with
    /// [`JobError::RestartsExhausted`](crate::JobError::RestartsExhausted). A job that runs
    /// 10 minutes without a failure starts over at 100 ms and 20 attempts.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::RestartStrategy;
    /// match RestartStrategy::default_with_checkpoints() {
    ///     RestartStrategy::ExponentialDelay { initial, max, attempts_before_reset, .. } => {
    ///         assert_eq!(initial, Duration::from_millis(100));
    ///         assert_eq!(max, Duration::from_secs(10));
    ///         assert_eq!(attempts_before_reset, 20);
    ///     }
    ///     other => panic!("{other:?}"),
    /// }
    /// ```
    pub fn default_with_checkpoints() -> Self {
        RestartStrategy::ExponentialDelay {
            initial: Duration::from_millis(100),
            multiplier: 2.0,
            max: Duration::from_secs(10),
            jitter: 0.1,
            reset_after: Duration::from_secs(600),
            attempts_before_reset: 20,
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
    /// Restarts since the exponential delay last reset.
    in_a_row: u32,
}

impl RestartTracker {
    pub(crate) fn new(strategy: RestartStrategy) -> Self {
        RestartTracker {
            strategy,
            restarts: 0,
            failures: VecDeque::new(),
            backoff: None,
            last_failure: None,
            in_a_row: 0,
        }
    }

    /// The restart just granted against the strategy's bound, for messages: `3/20`, `3/∞`,
    /// `3 (at most 5 failures per 60s)`, `3` for a strategy without a count.
    pub(crate) fn budget(&self) -> String {
        let of = |n: u32, max: u32| match max {
            u32::MAX => format!("{n}/unbounded"),
            max => format!("{n}/{max}"),
        };
        match &self.strategy {
            RestartStrategy::None => "0/0".into(),
            RestartStrategy::FixedDelay { attempts, .. } => of(self.restarts, *attempts),
            RestartStrategy::ExponentialDelay {
                attempts_before_reset,
                ..
            } => of(self.in_a_row, *attempts_before_reset),
            RestartStrategy::FailureRate {
                max_failures,
                interval,
                ..
            } => format!(
                "{} (at most {max_failures} failures per {interval:?})",
                self.restarts
            ),
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
                attempts_before_reset,
            } => {
                let base = match (self.backoff, since_last) {
                    (Some(_), Some(quiet)) if quiet >= *reset_after => {
                        self.in_a_row = 0;
                        *initial
                    }
                    (Some(b), _) => b.mul_f64(multiplier.max(1.0)).min(*max),
                    (None, _) => *initial,
                };
                if self.in_a_row >= *attempts_before_reset {
                    return None;
                }
                self.in_a_row += 1;
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
            attempts_before_reset: u32::MAX,
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
    fn exponential_gives_up_after_its_attempts_until_a_quiet_reset() {
        let mut t = RestartTracker::new(RestartStrategy::ExponentialDelay {
            initial: Duration::from_millis(10),
            multiplier: 2.0,
            max: Duration::from_millis(40),
            jitter: 0.0,
            reset_after: Duration::from_secs(60),
            attempts_before_reset: 2,
        });
        let t0 = Instant::now();
        assert_eq!(t.on_failure(t0), Some(Duration::from_millis(10)));
        assert_eq!(t.budget(), "1/2");
        assert_eq!(t.on_failure(t0), Some(Duration::from_millis(20)));
        assert_eq!(t.on_failure(t0), None, "a third restart in a row");
        let mut quiet = RestartTracker::new(t.strategy.clone());
        quiet.on_failure(t0);
        quiet.on_failure(t0);
        assert_eq!(
            quiet.on_failure(t0 + Duration::from_secs(61)),
            Some(Duration::from_millis(10)),
            "after a quiet minute the attempts start over"
        );
        assert_eq!(quiet.budget(), "1/2");
    }

    #[test]
    fn the_default_with_checkpoints_is_bounded_and_its_delays_grow_to_10_s() {
        let mut t = RestartTracker::new(RestartStrategy::default_with_checkpoints());
        let t0 = Instant::now();
        let delays: Vec<Duration> = std::iter::from_fn(|| t.on_failure(t0)).collect();
        assert_eq!(delays.len(), 20);
        let ms = |d: &Duration| d.as_millis() as u64;
        assert!((90..=110).contains(&ms(&delays[0])), "{delays:?}");
        assert!((9_000..=11_000).contains(&ms(&delays[19])), "{delays:?}");
        let total: Duration = delays.iter().sum();
        assert!(total < Duration::from_secs(200), "{total:?}");
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
