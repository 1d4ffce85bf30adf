//! The PID rate estimator: Spark Streaming's `PIDRateEstimator`, ported formula for formula.
//!
//! This module owns the arithmetic that turns one interval's processing statistics (when it
//! ended, how many records, how long they took, how long they waited) into the next ingestion
//! rate. It owns no clock (every time is passed in, in milliseconds), no thread, no event
//! listener and no throttle: applying the rate to a source is the job of the caller, usually
//! through a [`TokenBucket`](super::TokenBucket).

/// Spark's default proportional gain (`spark.streaming.backpressure.pid.proportional`).
pub const DEFAULT_PROPORTIONAL: f64 = 1.0;
/// Spark's default integral gain (`spark.streaming.backpressure.pid.integral`).
pub const DEFAULT_INTEGRAL: f64 = 0.2;
/// Spark's default derivative gain (`spark.streaming.backpressure.pid.derived`).
pub const DEFAULT_DERIVATIVE: f64 = 0.0;
/// Spark's default minimum rate in records/s (`spark.streaming.backpressure.pid.minRate`).
pub const DEFAULT_MIN_RATE: f64 = 100.0;

/// A parameter of [`PidRateEstimator`] that is out of range. Each variant names the parameter
/// and carries the rejected value.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PidError {
    /// The batch (update) interval was 0 ms.
    #[error("PID rate estimator: batch_interval_ms must be > 0, got {0}")]
    BatchInterval(u64),
    /// The proportional gain was negative, NaN or infinite.
    #[error("PID rate estimator: proportional must be a finite number >= 0, got {0}")]
    Proportional(f64),
    /// The integral gain was negative, NaN or infinite.
    #[error("PID rate estimator: integral must be a finite number >= 0, got {0}")]
    Integral(f64),
    /// The derivative gain was negative, NaN or infinite.
    #[error("PID rate estimator: derivative must be a finite number >= 0, got {0}")]
    Derivative(f64),
    /// The minimum rate was not a finite number > 0, or was above the maximum rate.
    #[error("PID rate estimator: min_rate must be a finite number > 0 (records/s) and not above max_rate, got {0}")]
    MinRate(f64),
    /// The maximum rate was not a finite number > 0, or was below the minimum rate.
    #[error("PID rate estimator: max_rate must be a finite number > 0 (records/s) and not below min_rate, got {0}")]
    MaxRate(f64),
}

impl PidError {
    /// The name of the bad parameter, as spelled by the constructor and setters
    /// (`"batch_interval_ms"`, `"proportional"`, `"integral"`, `"derivative"`, `"min_rate"`,
    /// `"max_rate"`).
    pub fn parameter(&self) -> &'static str {
        match self {
            PidError::BatchInterval(_) => "batch_interval_ms",
            PidError::Proportional(_) => "proportional",
            PidError::Integral(_) => "integral",
            PidError::Derivative(_) => "derivative",
            PidError::MinRate(_) => "min_rate",
            PidError::MaxRate(_) => "max_rate",
        }
    }
}

fn gain_ok(v: f64) -> bool {
    v.is_finite() && v >= 0.0
}

fn rate_ok(v: f64) -> bool {
    v.is_finite() && v > 0.0
}

/// A proportional-integral-derivative controller of the ingestion rate, with Spark Streaming's
/// formula and defaults.
///
/// Call [`compute`](Self::compute) once per completed interval (Spark: per completed batch)
/// with the interval's end time `t` (ms), its number of records `n`, its processing delay `p`
/// (ms) and its scheduling delay `s` (ms, how long its records waited before processing
/// started). With `r` the previous rate, `e` the previous error, `t'` the previous time and
/// `B` the batch interval (ms):
///
/// ```text
/// processing_rate  = n / p * 1000                        (records/s)
/// error            = r - processing_rate                  (records/s)
/// historical_error = s * processing_rate / B              (records/s; the integral term)
/// d_error          = (error - e) / ((t - t') / 1000)      (records/s²)
/// new_rate         = max(min_rate, r - kp * error - ki * historical_error - kd * d_error)
/// ```
///
/// As in Spark:
/// - a call is skipped (returns `None`, changes nothing) unless `t` is later than the previous
///   accepted call's time, `n > 0` and `p > 0`;
/// - the first accepted call only initializes: `r = processing_rate`, `e = 0`, and it returns
///   `None`;
/// - every later accepted call returns `Some(new_rate)` and stores `r = new_rate`,
///   `e = error`.
///
/// Weir's addition: an optional maximum rate ([`with_max_rate`](Self::with_max_rate)); when
/// set, `new_rate` is clamped to `[min_rate, max_rate]` (Spark only has the floor). The clamped
/// value is what is returned and stored as `r`. The initializing call's `r` (the measured
/// processing rate) is stored unclamped, as in Spark.
///
/// Defaults (Spark's): proportional 1.0, integral 0.2, derivative 0.0, minimum rate
/// 100 records/s, no maximum.
///
/// # Examples
///
/// ```
/// use weir::rate::PidRateEstimator;
///
/// // 100 ms intervals, Spark's gains, and Weir's optional cap.
/// let mut pid = PidRateEstimator::new(100)?.with_max_rate(1_000_000.0)?;
///
/// // First accepted call: 500 records processed in 100 ms; only initializes (rate 5000/s).
/// assert_eq!(pid.compute(1_000, 500, 100, 0), None);
///
/// // Next interval: 400 records in 100 ms (4000/s), no scheduling delay.
/// // error = 5000 - 4000 = 1000; new = 5000 - 1.0 * 1000 - 0.2 * 0 = 4000.
/// assert_eq!(pid.compute(1_100, 400, 100, 0), Some(4000.0));
///
/// // Time must advance: a stale report is skipped.
/// assert_eq!(pid.compute(1_100, 400, 100, 0), None);
/// # Ok::<(), weir::rate::PidError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct PidRateEstimator {
    batch_interval_ms: u64,
    proportional: f64,
    integral: f64,
    derivative: f64,
    min_rate: f64,
    max_rate: Option<f64>,
    /// Time of the last accepted call; `None` before the first (Spark: `latestTime = -1`).
    latest_time: Option<u64>,
    /// Spark's `latestRate`; meaningful once `initialized`.
    latest_rate: f64,
    /// Spark's `latestError`; meaningful once `initialized`.
    latest_error: f64,
    /// Spark's `!firstRun`.
    initialized: bool,
}

impl PidRateEstimator {
    /// An estimator for intervals of `batch_interval_ms` with Spark's default gains and minimum
    /// rate. Fails with [`PidError::BatchInterval`] if the interval is 0.
    pub fn new(batch_interval_ms: u64) -> Result<Self, PidError> {
        Self::with_params(
            batch_interval_ms,
            DEFAULT_PROPORTIONAL,
            DEFAULT_INTEGRAL,
            DEFAULT_DERIVATIVE,
            DEFAULT_MIN_RATE,
        )
    }

    /// An estimator with every Spark parameter given, checked as Spark's constructor checks
    /// them: `batch_interval_ms > 0`, `proportional >= 0`, `integral >= 0`, `derivative >= 0`,
    /// `min_rate > 0` (and, Weir's stricter reading, all finite). The error names the first bad
    /// parameter in that order.
    pub fn with_params(
        batch_interval_ms: u64,
        proportional: f64,
        integral: f64,
        derivative: f64,
        min_rate: f64,
    ) -> Result<Self, PidError> {
        if batch_interval_ms == 0 {
            return Err(PidError::BatchInterval(batch_interval_ms));
        }
        if !gain_ok(proportional) {
            return Err(PidError::Proportional(proportional));
        }
        if !gain_ok(integral) {
            return Err(PidError::Integral(integral));
        }
        if !gain_ok(derivative) {
            return Err(PidError::Derivative(derivative));
        }
        if !rate_ok(min_rate) {
            return Err(PidError::MinRate(min_rate));
        }
        Ok(PidRateEstimator {
            batch_interval_ms,
            proportional,
            integral,
            derivative,
            min_rate,
            max_rate: None,
            latest_time: None,
            latest_rate: -1.0,
            latest_error: -1.0,
            initialized: false,
        })
    }

    /// Sets the proportional gain (must be finite and >= 0).
    pub fn with_proportional(mut self, proportional: f64) -> Result<Self, PidError> {
        if !gain_ok(proportional) {
            return Err(PidError::Proportional(proportional));
        }
        self.proportional = proportional;
        Ok(self)
    }

    /// Sets the integral gain (must be finite and >= 0).
    pub fn with_integral(mut self, integral: f64) -> Result<Self, PidError> {
        if !gain_ok(integral) {
            return Err(PidError::Integral(integral));
        }
        self.integral = integral;
        Ok(self)
    }

    /// Sets the derivative gain (must be finite and >= 0).
    pub fn with_derivative(mut self, derivative: f64) -> Result<Self, PidError> {
        if !gain_ok(derivative) {
            return Err(PidError::Derivative(derivative));
        }
        self.derivative = derivative;
        Ok(self)
    }

    /// Sets the minimum rate in records/s (must be finite, > 0, and not above the maximum rate
    /// if one is set).
    pub fn with_min_rate(mut self, min_rate: f64) -> Result<Self, PidError> {
        if !rate_ok(min_rate) || self.max_rate.is_some_and(|max| min_rate > max) {
            return Err(PidError::MinRate(min_rate));
        }
        self.min_rate = min_rate;
        Ok(self)
    }

    /// Sets a maximum rate in records/s (must be finite, > 0 and not below the minimum rate).
    /// Estimates above it are clamped to it. This is Weir's addition: Spark's estimator has
    /// only the minimum.
    pub fn with_max_rate(mut self, max_rate: f64) -> Result<Self, PidError> {
        if !rate_ok(max_rate) || max_rate < self.min_rate {
            return Err(PidError::MaxRate(max_rate));
        }
        self.max_rate = Some(max_rate);
        Ok(self)
    }

    /// The batch (update) interval in milliseconds.
    pub fn batch_interval_ms(&self) -> u64 {
        self.batch_interval_ms
    }

    /// The proportional gain.
    pub fn proportional(&self) -> f64 {
        self.proportional
    }

    /// The integral gain.
    pub fn integral(&self) -> f64 {
        self.integral
    }

    /// The derivative gain.
    pub fn derivative(&self) -> f64 {
        self.derivative
    }

    /// The minimum rate in records/s.
    pub fn min_rate(&self) -> f64 {
        self.min_rate
    }

    /// The maximum rate in records/s, if one is set.
    pub fn max_rate(&self) -> Option<f64> {
        self.max_rate
    }

    /// The rate the next error is measured against: `None` before the first accepted call,
    /// then the measured processing rate of that call, then the last returned estimate.
    pub fn latest_rate(&self) -> Option<f64> {
        self.initialized.then_some(self.latest_rate)
    }

    /// Feeds one completed interval and returns the new rate in records/s, or `None` if this
    /// call only initialized the estimator or was skipped (see the type's docs for the
    /// formula and the rules).
    ///
    /// - `time_ms`: when the interval's processing ended (any monotonic millisecond clock);
    /// - `elements`: records in the interval;
    /// - `processing_delay_ms`: how long processing them took;
    /// - `scheduling_delay_ms`: how long they waited before processing started.
    pub fn compute(
        &mut self,
        time_ms: u64,
        elements: u64,
        processing_delay_ms: u64,
        scheduling_delay_ms: u64,
    ) -> Option<f64> {
        let time_advanced = self.latest_time.is_none_or(|latest| time_ms > latest);
        if !(time_advanced && elements > 0 && processing_delay_ms > 0) {
            return None;
        }

        // Before the first accepted call Spark's latestTime is -1: delay_since_update is then
        // meaningless, but the result of that call is discarded anyway.
        let latest_time = self.latest_time.map_or(-1.0, |t| t as f64);
        // In seconds, close to the batch interval.
        let delay_since_update = (time_ms as f64 - latest_time) / 1000.0;
        // In records/s.
        let processing_rate = elements as f64 / processing_delay_ms as f64 * 1000.0;
        // Desired rate (the previous estimate) minus measured rate, in records/s.
        let error = self.latest_rate - processing_rate;
        // The integral term: a scheduling delay s stands for s * processing_rate records that
        // overflowed earlier intervals; spread over one interval, that is this rate.
        let historical_error =
            scheduling_delay_ms as f64 * processing_rate / self.batch_interval_ms as f64;
        // In records/s².
        let d_error = (error - self.latest_error) / delay_since_update;

        let mut new_rate = (self.latest_rate
            - self.proportional * error
            - self.integral * historical_error
            - self.derivative * d_error)
            .max(self.min_rate);
        if let Some(max) = self.max_rate {
            new_rate = new_rate.min(max);
        }

        self.latest_time = Some(time_ms);
        if !self.initialized {
            self.latest_rate = processing_rate;
            self.latest_error = 0.0;
            self.initialized = true;
            None
        } else {
            self.latest_rate = new_rate;
            self.latest_error = error;
            Some(new_rate)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(actual: Option<f64>, expected: f64) {
        let actual = actual.expect("expected a rate, got None");
        assert!(
            (actual - expected).abs() < 1e-9,
            "expected {expected}, got {actual}"
        );
    }

    #[test]
    fn defaults_are_sparks() {
        let pid = PidRateEstimator::new(100).unwrap();
        assert_eq!(pid.batch_interval_ms(), 100);
        assert_eq!(pid.proportional(), 1.0);
        assert_eq!(pid.integral(), 0.2);
        assert_eq!(pid.derivative(), 0.0);
        assert_eq!(pid.min_rate(), 100.0);
        assert_eq!(pid.max_rate(), None);
        assert_eq!(pid.latest_rate(), None);
    }

    #[test]
    fn constructor_and_setters_name_the_bad_parameter() {
        let err = PidRateEstimator::new(0).unwrap_err();
        assert_eq!(err, PidError::BatchInterval(0));
        assert_eq!(err.parameter(), "batch_interval_ms");
        assert!(err.to_string().contains("batch_interval_ms"));

        let cases = [
            (
                PidRateEstimator::with_params(100, -1.0, 0.2, 0.0, 100.0),
                "proportional",
            ),
            (
                PidRateEstimator::with_params(100, 1.0, -0.1, 0.0, 100.0),
                "integral",
            ),
            (
                PidRateEstimator::with_params(100, 1.0, 0.2, -0.5, 100.0),
                "derivative",
            ),
            (
                PidRateEstimator::with_params(100, 1.0, 0.2, 0.0, 0.0),
                "min_rate",
            ),
            (
                PidRateEstimator::with_params(100, 1.0, 0.2, 0.0, -3.0),
                "min_rate",
            ),
            (
                PidRateEstimator::with_params(100, f64::NAN, 0.2, 0.0, 100.0),
                "proportional",
            ),
            (
                PidRateEstimator::with_params(100, 1.0, f64::INFINITY, 0.0, 100.0),
                "integral",
            ),
            (
                PidRateEstimator::new(100).unwrap().with_proportional(-1.0),
                "proportional",
            ),
            (
                PidRateEstimator::new(100).unwrap().with_integral(f64::NAN),
                "integral",
            ),
            (
                PidRateEstimator::new(100).unwrap().with_derivative(-0.1),
                "derivative",
            ),
            (
                PidRateEstimator::new(100).unwrap().with_min_rate(0.0),
                "min_rate",
            ),
            (
                PidRateEstimator::new(100).unwrap().with_max_rate(0.0),
                "max_rate",
            ),
            // Max below the (default 100) min.
            (
                PidRateEstimator::new(100).unwrap().with_max_rate(50.0),
                "max_rate",
            ),
            // Min above an existing max.
            (
                PidRateEstimator::new(100)
                    .unwrap()
                    .with_max_rate(500.0)
                    .unwrap()
                    .with_min_rate(600.0),
                "min_rate",
            ),
        ];
        for (result, param) in cases {
            let err = result.unwrap_err();
            assert_eq!(err.parameter(), param, "{err}");
            assert!(err.to_string().contains(param), "{err}");
        }

        // Zero gains are allowed, as in Spark.
        let pid = PidRateEstimator::with_params(1, 0.0, 0.0, 0.0, 1e-3).unwrap();
        assert_eq!(pid.proportional(), 0.0);
    }

    #[test]
    fn first_accepted_call_only_initializes() {
        let mut pid = PidRateEstimator::new(100).unwrap();
        // Time 0 is a valid first time (Spark starts from latestTime = -1).
        assert_eq!(pid.compute(0, 500, 100, 0), None);
        // latest_rate = processing rate = 500 / 100 * 1000 = 5000.
        assert_eq!(pid.latest_rate(), Some(5000.0));
        // Next: 400 / 100 * 1000 = 4000; error = 5000 - 4000 = 1000; new = 5000 - 1000 = 4000.
        close(pid.compute(100, 400, 100, 0), 4000.0);
    }

    #[test]
    fn several_steps_with_integral_term() {
        // Spark's defaults: kp = 1.0, ki = 0.2, kd = 0.0, min 100; B = 100 ms.
        let mut pid = PidRateEstimator::new(100).unwrap();

        // Step 0 (initializes): processing_rate = 5000 / 1000 * 1000 = 5000.
        // latest_rate = 5000, latest_error = 0.
        assert_eq!(pid.compute(1_000, 5_000, 1_000, 0), None);

        // Step 1: processing_rate = 400 / 100 * 1000 = 4000
        //   error = 5000 - 4000 = 1000; historical = 0 * 4000 / 100 = 0
        //   new = 5000 - 1.0 * 1000 - 0.2 * 0 = 4000
        close(pid.compute(1_100, 400, 100, 0), 4000.0);

        // Step 2: processing_rate = 300 / 100 * 1000 = 3000
        //   error = 4000 - 3000 = 1000; historical = 50 * 3000 / 100 = 1500
        //   new = 4000 - 1000 - 0.2 * 1500 = 4000 - 1000 - 300 = 2700
        close(pid.compute(1_200, 300, 100, 50), 2700.0);

        // Step 3: processing_rate = 300 / 60 * 1000 = 5000
        //   error = 2700 - 5000 = -2300; historical = 20 * 5000 / 100 = 1000
        //   new = 2700 + 2300 - 0.2 * 1000 = 4800
        close(pid.compute(1_300, 300, 60, 20), 4800.0);
        assert_eq!(pid.latest_rate(), Some(4800.0));
    }

    #[test]
    fn integral_term_with_non_unit_proportional() {
        // kp = 0.5, ki = 0.2, B = 200 ms.
        let mut pid = PidRateEstimator::new(200)
            .unwrap()
            .with_proportional(0.5)
            .unwrap();
        // Init: processing_rate = 200 / 100 * 1000 = 2000.
        assert_eq!(pid.compute(10_000, 200, 100, 0), None);
        // processing_rate = 150 / 100 * 1000 = 1500
        //   error = 2000 - 1500 = 500; historical = 400 * 1500 / 200 = 3000
        //   new = 2000 - 0.5 * 500 - 0.2 * 3000 = 2000 - 250 - 600 = 1150
        close(pid.compute(10_200, 150, 100, 400), 1150.0);
        // processing_rate = 100 / 50 * 1000 = 2000
        //   error = 1150 - 2000 = -850; historical = 100 * 2000 / 200 = 1000
        //   new = 1150 + 425 - 200 = 1375
        close(pid.compute(10_400, 100, 50, 100), 1375.0);
    }

    #[test]
    fn derivative_term() {
        // kp = 1.0, ki = 0.2, kd = 0.5, B = 500 ms.
        let mut pid = PidRateEstimator::new(500)
            .unwrap()
            .with_derivative(0.5)
            .unwrap();
        // Init at t = 0: processing_rate = 1000 / 1000 * 1000 = 1000; latest_error = 0.
        assert_eq!(pid.compute(0, 1_000, 1_000, 0), None);
        // t = 500: delay_since_update = 0.5 s; processing_rate = 400 / 500 * 1000 = 800
        //   error = 1000 - 800 = 200; d_error = (200 - 0) / 0.5 = 400
        //   new = 1000 - 200 - 0 - 0.5 * 400 = 600
        close(pid.compute(500, 400, 500, 0), 600.0);
        // t = 1000: processing_rate = 300 / 500 * 1000 = 600
        //   error = 600 - 600 = 0; d_error = (0 - 200) / 0.5 = -400
        //   new = 600 - 0 - 0 + 0.5 * 400 = 800
        close(pid.compute(1_000, 300, 500, 0), 800.0);
    }

    #[test]
    fn min_rate_floor_is_returned_and_stored() {
        let mut pid = PidRateEstimator::new(100)
            .unwrap()
            .with_proportional(0.5)
            .unwrap();
        // Init: processing_rate = 5000 / 1000 * 1000 = 5000.
        assert_eq!(pid.compute(1_000, 5_000, 1_000, 0), None);
        // processing_rate = 10 / 100 * 1000 = 100
        //   error = 5000 - 100 = 4900; historical = 30000 * 100 / 100 = 30000
        //   raw = 5000 - 0.5 * 4900 - 0.2 * 30000 = 5000 - 2450 - 6000 = -3450 -> floor 100
        close(pid.compute(1_100, 10, 100, 30_000), 100.0);
        // The floored value is the new latest rate:
        // processing_rate = 20 / 100 * 1000 = 200; error = 100 - 200 = -100
        //   new = 100 + 0.5 * 100 - 0 = 150
        // (had -3450 been stored: error = -3650, raw = -3450 + 1825 = -1625 -> 100.)
        close(pid.compute(1_200, 20, 100, 0), 150.0);

        // With a custom floor.
        let mut pid = PidRateEstimator::new(100)
            .unwrap()
            .with_min_rate(1_000.0)
            .unwrap();
        assert_eq!(pid.compute(0, 5_000, 1_000, 0), None);
        // processing_rate = 50 / 100 * 1000 = 500; error = 4500; new = 5000 - 4500 = 500
        //   -> floor 1000
        close(pid.compute(100, 50, 100, 0), 1_000.0);
    }

    #[test]
    fn max_rate_clamp_is_returned_and_stored() {
        let mut pid = PidRateEstimator::new(100)
            .unwrap()
            .with_proportional(0.5)
            .unwrap()
            .with_max_rate(3_000.0)
            .unwrap();
        // Init: processing_rate = 5000 (stored unclamped, as Spark stores it).
        assert_eq!(pid.compute(1_000, 5_000, 1_000, 0), None);
        assert_eq!(pid.latest_rate(), Some(5_000.0));
        // processing_rate = 400 / 100 * 1000 = 4000; error = 5000 - 4000 = 1000
        //   raw = 5000 - 0.5 * 1000 = 4500 -> clamp 3000
        close(pid.compute(1_100, 400, 100, 0), 3_000.0);
        // The clamped value is the new latest rate:
        // processing_rate = 200 / 100 * 1000 = 2000; error = 3000 - 2000 = 1000
        //   new = 3000 - 0.5 * 1000 = 2500
        // (had 4500 been stored: error = 2500, raw = 4500 - 1250 = 3250 -> 3000.)
        close(pid.compute(1_200, 200, 100, 0), 2_500.0);
    }

    #[test]
    fn guards_skip_without_changing_state() {
        let mut pid = PidRateEstimator::new(100).unwrap();

        // Skipped calls before initialization do not initialize.
        assert_eq!(pid.compute(1_000, 0, 100, 0), None); // no elements
        assert_eq!(pid.compute(1_000, 500, 0, 0), None); // no processing delay
        assert_eq!(pid.latest_rate(), None);

        // First accepted call initializes: 500 / 100 * 1000 = 5000.
        assert_eq!(pid.compute(1_000, 500, 100, 0), None);
        assert_eq!(pid.latest_rate(), Some(5_000.0));

        // Time must strictly advance.
        assert_eq!(pid.compute(1_000, 400, 100, 0), None);
        assert_eq!(pid.compute(999, 400, 100, 0), None);
        // No elements / no processing delay.
        assert_eq!(pid.compute(1_100, 0, 100, 0), None);
        assert_eq!(pid.compute(1_100, 400, 0, 0), None);
        assert_eq!(pid.latest_rate(), Some(5_000.0));

        // State untouched: 400 / 100 * 1000 = 4000; error = 1000; new = 5000 - 1000 = 4000.
        close(pid.compute(1_100, 400, 100, 0), 4_000.0);
    }
}
