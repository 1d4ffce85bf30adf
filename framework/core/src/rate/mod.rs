//! Rate control for sources that read from outside: the PID estimator, the token bucket, and
//! their configuration.
//!
//! Inside a job, bounded credit channels already give backpressure. A source that pulls from an
//! external system (a socket, a broker) can additionally be throttled, as Spark Streaming's
//! backpressure does (`spark.streaming.backpressure.*`): after every update interval the
//! interval's processing statistics go into a [`PidRateEstimator`], and the rate it returns is
//! set on the source's [`TokenBucket`]. [`RateControlConfig`] holds the settings.
//!
//! This module owns the arithmetic and the settings only. It owns no clock, thread, timer or
//! actor: collecting the per-interval statistics, calling the estimator on time, and sleeping
//! for [`TokenBucket::time_until`] are the caller's (the source runtime's) business.

mod pid;
mod token_bucket;

use std::time::Duration;

pub use pid::{
    PidError, PidRateEstimator, DEFAULT_DERIVATIVE, DEFAULT_INTEGRAL, DEFAULT_MIN_RATE,
    DEFAULT_PROPORTIONAL,
};
pub use token_bucket::{TokenBucket, TokenBucketError};

/// A bad [`RateControlConfig`] value: which field, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rate control config: `{field}` {message}")]
pub struct RateConfigError {
    /// The field's name, as spelled in [`RateControlConfig`].
    pub field: &'static str,
    /// What is wrong, with the rejected value.
    pub message: String,
}

/// Settings of a source's rate control (Spark: `spark.streaming.backpressure.*`).
///
/// Plain data with Spark's defaults; [`validate`](Self::validate) names the first bad field.
///
/// ```
/// use std::time::Duration;
///
/// let mut cfg = weir::rate::RateControlConfig::default();
/// cfg.enabled = true;
/// cfg.initial_rate = Some(10_000.0);
/// cfg.update_interval = Duration::from_millis(200);
/// assert!(cfg.validate().is_ok());
/// let pid = cfg.estimator()?;
/// assert_eq!(pid.batch_interval_ms(), 200);
/// # Ok::<(), weir::rate::RateConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RateControlConfig {
    /// Whether the source is rate controlled at all (default false, as in Spark).
    pub enabled: bool,
    /// Rate in records/s before the first estimate (Spark:
    /// `spark.streaming.backpressure.initialRate`). `None` (the default): unthrottled until
    /// the estimator produces its first rate. If set: finite, > 0, and not above `max_rate`.
    pub initial_rate: Option<f64>,
    /// Lowest rate the estimator returns, records/s (default 100, Spark's
    /// `spark.streaming.backpressure.pid.minRate`). Finite and > 0.
    pub min_rate: f64,
    /// Highest rate the estimator returns, records/s (default `None`: no cap). Weir's addition;
    /// Spark caps only through the separate `maxRate` settings. Finite, > 0, >= `min_rate`.
    pub max_rate: Option<f64>,
    /// Proportional gain (default 1.0). Finite and >= 0.
    pub proportional: f64,
    /// Integral gain (default 0.2). Finite and >= 0.
    pub integral: f64,
    /// Derivative gain (default 0.0). Finite and >= 0.
    pub derivative: f64,
    /// How often statistics are collected and a new rate computed; the estimator's batch
    /// interval (default 1 s; Spark uses the batch interval). At least 1 ms, whole
    /// milliseconds (sub-millisecond parts are dropped).
    pub update_interval: Duration,
}

impl Default for RateControlConfig {
    fn default() -> Self {
        RateControlConfig {
            enabled: false,
            initial_rate: None,
            min_rate: DEFAULT_MIN_RATE,
            max_rate: None,
            proportional: DEFAULT_PROPORTIONAL,
            integral: DEFAULT_INTEGRAL,
            derivative: DEFAULT_DERIVATIVE,
            update_interval: Duration::from_secs(1),
        }
    }
}

impl RateControlConfig {
    /// Rate control on, held at `rate` records per second in all (initial, minimum and
    /// maximum): a fixed source rate.
    ///
    /// ```
    /// let rc = weir::rate::RateControlConfig::fixed(20_000.0);
    /// assert!(rc.enabled);
    /// assert_eq!((rc.initial_rate, rc.min_rate, rc.max_rate), (Some(20_000.0), 20_000.0, Some(20_000.0)));
    /// ```
    pub fn fixed(rate: f64) -> Self {
        RateControlConfig {
            enabled: true,
            initial_rate: Some(rate),
            min_rate: rate,
            max_rate: Some(rate),
            ..RateControlConfig::default()
        }
    }

    /// Checks every value (whether or not `enabled`); the error names the first bad field.
    pub fn validate(&self) -> Result<(), RateConfigError> {
        fn bad(field: &'static str, message: String) -> Result<(), RateConfigError> {
            Err(RateConfigError { field, message })
        }
        let rate_ok = |v: f64| v.is_finite() && v > 0.0;
        let gain_ok = |v: f64| v.is_finite() && v >= 0.0;

        if !rate_ok(self.min_rate) {
            return bad(
                "min_rate",
                format!("must be a finite number > 0, got {}", self.min_rate),
            );
        }
        if let Some(max) = self.max_rate {
            if !rate_ok(max) || max < self.min_rate {
                return bad(
                    "max_rate",
                    format!(
                        "must be a finite number >= min_rate ({}), got {max}",
                        self.min_rate
                    ),
                );
            }
        }
        if let Some(initial) = self.initial_rate {
            if !rate_ok(initial) {
                return bad(
                    "initial_rate",
                    format!("must be a finite number > 0, got {initial}"),
                );
            }
            if let Some(max) = self.max_rate.filter(|&max| initial > max) {
                return bad(
                    "initial_rate",
                    format!("must not be above max_rate ({max}), got {initial}"),
                );
            }
        }
        for (field, value) in [
            ("proportional", self.proportional),
            ("integral", self.integral),
            ("derivative", self.derivative),
        ] {
            if !gain_ok(value) {
                return bad(field, format!("must be a finite number >= 0, got {value}"));
            }
        }
        if self.update_interval < Duration::from_millis(1) {
            return bad(
                "update_interval",
                format!("must be at least 1 ms, got {:?}", self.update_interval),
            );
        }
        Ok(())
    }

    /// A fresh [`PidRateEstimator`] with these gains, bounds and `update_interval` as its batch
    /// interval. Validates first.
    pub fn estimator(&self) -> Result<PidRateEstimator, RateConfigError> {
        self.validate()?;
        let interval_ms = u64::try_from(self.update_interval.as_millis()).unwrap_or(u64::MAX);
        let as_config_error = |e: PidError| RateConfigError {
            field: e.parameter(),
            message: e.to_string(),
        };
        let pid = PidRateEstimator::with_params(
            interval_ms,
            self.proportional,
            self.integral,
            self.derivative,
            self.min_rate,
        )
        .map_err(as_config_error)?;
        match self.max_rate {
            Some(max) => pid.with_max_rate(max).map_err(as_config_error),
            None => Ok(pid),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn config_defaults_are_sparks() {
        let cfg = RateControlConfig::default();
        assert!(!cfg.enabled);
        assert_eq!(cfg.initial_rate, None);
        assert_eq!(cfg.min_rate, 100.0);
        assert_eq!(cfg.max_rate, None);
        assert_eq!(cfg.proportional, 1.0);
        assert_eq!(cfg.integral, 0.2);
        assert_eq!(cfg.derivative, 0.0);
        assert!(cfg.validate().is_ok());
        let pid = cfg.estimator().unwrap();
        assert_eq!(pid.batch_interval_ms(), 1_000);
        assert_eq!(pid.max_rate(), None);
    }

    #[test]
    fn config_validate_names_the_bad_field() {
        type Edit = fn(&mut RateControlConfig);
        let cases: [(Edit, &str); 13] = [
            (|c| c.min_rate = 0.0, "min_rate"),
            (|c| c.min_rate = f64::NAN, "min_rate"),
            (|c| c.max_rate = Some(50.0), "max_rate"), // below min 100
            (|c| c.max_rate = Some(f64::INFINITY), "max_rate"),
            (|c| c.initial_rate = Some(0.0), "initial_rate"),
            (|c| c.initial_rate = Some(-5.0), "initial_rate"),
            (
                |c| {
                    c.max_rate = Some(1_000.0);
                    c.initial_rate = Some(2_000.0);
                },
                "initial_rate",
            ),
            (|c| c.proportional = -1.0, "proportional"),
            (|c| c.integral = f64::NAN, "integral"),
            (|c| c.derivative = -0.1, "derivative"),
            (|c| c.derivative = f64::INFINITY, "derivative"),
            (|c| c.update_interval = Duration::ZERO, "update_interval"),
            (
                |c| c.update_interval = Duration::from_micros(999),
                "update_interval",
            ),
        ];
        for (edit, field) in cases {
            let mut cfg = RateControlConfig::default();
            edit(&mut cfg);
            let err = cfg.validate().unwrap_err();
            assert_eq!(err.field, field, "{err}");
            assert!(err.to_string().contains(field), "{err}");
            assert_eq!(cfg.estimator().unwrap_err(), err);
        }

        let cfg = RateControlConfig {
            max_rate: Some(5_000.0),
            initial_rate: Some(50.0), // below min_rate is allowed (min bounds estimates)
            update_interval: Duration::from_millis(250),
            ..RateControlConfig::default()
        };
        let pid = cfg.estimator().unwrap();
        assert_eq!(pid.max_rate(), Some(5_000.0));
        assert_eq!(pid.batch_interval_ms(), 250);
    }

    /// Outcome of one simulated closed-loop run.
    struct Run {
        /// (interval end in ms, bucket rate after the update, records in the interval).
        intervals: Vec<(u64, f64, u64)>,
        /// Records received but not yet processed at the end.
        backlog: f64,
    }

    /// Closed loop, all in simulated time with 1 ms steps:
    /// - the source has unlimited data and takes every token its bucket allows each ms;
    /// - the sink processes at most `capacity` records/s, from a FIFO backlog;
    /// - every 100 ms (the estimator's batch interval) the interval is reported:
    ///   `elements` = records the source took in it, `processing_delay` =
    ///   `elements / capacity * 1000` ms, `scheduling_delay` = `backlog / capacity * 1000` ms
    ///   (backlog = records taken but not yet processed at the interval's end);
    /// - a returned rate is set on the bucket at once.
    fn simulate(capacity: f64, start_rate: f64, seconds: u64) -> Run {
        const INTERVAL_MS: u64 = 100;
        let t0 = Instant::now();
        // One interval's worth at the sink's capacity: well above what one 1 ms step takes.
        let burst = (capacity / 10.0) as u64;
        let mut bucket = TokenBucket::new(start_rate, burst, t0).unwrap();
        let mut pid = RateControlConfig {
            update_interval: Duration::from_millis(INTERVAL_MS),
            ..RateControlConfig::default()
        }
        .estimator()
        .unwrap();

        let mut backlog = 0.0_f64;
        let mut elements = 0_u64;
        let mut intervals = Vec::new();
        for ms in 1..=seconds * 1_000 {
            let now = t0 + Duration::from_millis(ms);
            let took = bucket.try_take(now, u64::MAX);
            elements += took;
            backlog = (backlog + took as f64 - capacity / 1_000.0).max(0.0);
            if ms % INTERVAL_MS == 0 {
                let processing_delay = (elements as f64 / capacity * 1_000.0).round() as u64;
                let scheduling_delay = (backlog / capacity * 1_000.0).round() as u64;
                if let Some(rate) = pid.compute(ms, elements, processing_delay, scheduling_delay) {
                    bucket.set_rate(now, rate).unwrap();
                }
                intervals.push((ms, bucket.rate(), elements));
                elements = 0;
            }
        }
        Run { intervals, backlog }
    }

    #[test]
    fn closed_loop_converges_to_sink_capacity() {
        for capacity in [1_000.0, 5_000.0, 20_000.0] {
            for start_rate in [10.0 * capacity, 0.1 * capacity] {
                let run = simulate(capacity, start_rate, 20);
                let settled: Vec<_> = run
                    .intervals
                    .iter()
                    .filter(|(ms, _, _)| *ms > 10_000)
                    .collect();
                assert_eq!(settled.len(), 100);
                for &&(ms, rate, _) in &settled {
                    assert!(
                        (rate - capacity).abs() <= 0.15 * capacity,
                        "C={capacity} start={start_rate}: rate {rate} at {ms} ms"
                    );
                }
                // Throughput over the last 10 s matches the sink, and no backlog is left.
                let taken: u64 = settled.iter().map(|(_, _, n)| n).sum();
                let throughput = taken as f64 / 10.0;
                assert!(
                    (throughput - capacity).abs() <= 0.15 * capacity,
                    "C={capacity} start={start_rate}: throughput {throughput}"
                );
                assert!(
                    run.backlog <= 0.15 * capacity,
                    "C={capacity} start={start_rate}: backlog {}",
                    run.backlog
                );
            }
        }
    }
}
