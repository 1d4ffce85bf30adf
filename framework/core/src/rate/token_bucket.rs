//! A token bucket: the throttle a rate-controlled source consults before emitting records.
//!
//! This module owns the token arithmetic only: a rate in records/s that may change at any
//! time, a burst capacity, and answers to "how many of these n records may go now?" and "how
//! long until n may go?". It owns no clock (every call takes the caller's
//! [`Instant`]), does no sleeping, no locking and no allocation, and does not decide the rate:
//! that is the [`PidRateEstimator`](super::PidRateEstimator)'s job.

use std::time::{Duration, Instant};

/// Fractions of a token this close below a whole number count as that whole number, so that
/// floating-point rounding of `elapsed * rate` never withholds a token the caller waited for.
const EPSILON: f64 = 1e-6;

/// A rejected token bucket parameter. Each variant names the parameter and carries the value.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenBucketError {
    /// The rate was 0, negative, NaN or infinite.
    #[error("token bucket: rate must be a finite number of records/s > 0, got {0}")]
    InvalidRate(f64),
    /// The burst capacity was 0.
    #[error("token bucket: burst must be at least 1 record, got {0}")]
    InvalidBurst(u64),
}

/// A token bucket with a settable rate (records/s) and a burst capacity (records).
///
/// Tokens accrue at `rate` per second of the caller's time, up to `burst`; each record taken
/// spends one. The bucket starts full, so a fresh source may send one burst at once. Time is
/// the caller's [`Instant`]: pass the same clock to every call. An `Instant` earlier than one
/// already seen adds no tokens (and is not an error).
///
/// ```
/// use std::time::{Duration, Instant};
/// use weir::rate::TokenBucket;
///
/// let t0 = Instant::now();
/// let mut bucket = TokenBucket::new(1_000.0, 10, t0)?; // 1000 records/s, bursts of 10
/// assert_eq!(bucket.try_take(t0, 25), 10); // the initial burst
/// assert_eq!(bucket.try_take(t0, 1), 0); // empty
/// assert_eq!(bucket.time_until(t0, 5), Duration::from_millis(5));
/// assert_eq!(bucket.try_take(t0 + Duration::from_millis(5), 25), 5);
/// # Ok::<(), weir::rate::TokenBucketError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct TokenBucket {
    rate: f64,
    burst: u64,
    tokens: f64,
    last: Instant,
}

fn check_rate(rate: f64) -> Result<(), TokenBucketError> {
    if rate.is_finite() && rate > 0.0 {
        Ok(())
    } else {
        Err(TokenBucketError::InvalidRate(rate))
    }
}

impl TokenBucket {
    /// A full bucket refilling at `rate` records/s and holding at most `burst` records, with
    /// `now` as its time origin. Fails if `rate` is not a finite number > 0 or `burst` is 0.
    pub fn new(rate: f64, burst: u64, now: Instant) -> Result<Self, TokenBucketError> {
        check_rate(rate)?;
        if burst == 0 {
            return Err(TokenBucketError::InvalidBurst(burst));
        }
        Ok(TokenBucket {
            rate,
            burst,
            tokens: burst as f64,
            last: now,
        })
    }

    /// The current rate in records/s.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The burst capacity in records.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// Changes the rate from `now` on: tokens accrued until `now` count at the old rate.
    /// Fails (leaving the bucket unchanged) if `rate` is not a finite number > 0.
    pub fn set_rate(&mut self, now: Instant, rate: f64) -> Result<(), TokenBucketError> {
        check_rate(rate)?;
        self.refill(now);
        self.rate = rate;
        Ok(())
    }

    /// Whole tokens available at `now` (at most `burst`).
    pub fn available(&self, now: Instant) -> u64 {
        (self.tokens_at(now) + EPSILON).floor() as u64
    }

    /// Takes up to `n` tokens at `now` and returns how many were taken: the number of the
    /// caller's `n` records that may go now (0 to `min(n, burst)`).
    pub fn try_take(&mut self, now: Instant, n: u64) -> u64 {
        self.refill(now);
        let whole = (self.tokens + EPSILON).floor();
        let taken = if (n as f64) < whole { n } else { whole as u64 };
        self.tokens = (self.tokens - taken as f64).max(0.0);
        taken
    }

    /// How long after `now` until `n` tokens are available (zero if they already are), at the
    /// current rate. The bucket never holds more than `burst`, so `n` is capped at `burst`:
    /// callers with more records take them in bursts. Waiting the returned time and then
    /// calling [`try_take`](Self::try_take) yields `min(n, burst)` records, provided nobody
    /// else took tokens and the rate did not drop meanwhile. Saturates at [`Duration::MAX`].
    pub fn time_until(&self, now: Instant, n: u64) -> Duration {
        let want = n.min(self.burst) as f64;
        let missing = want - self.tokens_at(now);
        if missing <= EPSILON {
            return Duration::ZERO;
        }
        let nanos = (missing / self.rate * 1e9).ceil();
        if nanos >= u64::MAX as f64 {
            Duration::MAX
        } else {
            Duration::from_nanos(nanos as u64)
        }
    }

    /// Tokens (fractional) the bucket would hold at `now`.
    fn tokens_at(&self, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        (self.tokens + elapsed * self.rate).min(self.burst as f64)
    }

    /// Accrues tokens up to `now`; a `now` before the last one seen changes nothing.
    fn refill(&mut self, now: Instant) {
        if now > self.last {
            self.tokens = self.tokens_at(now);
            self.last = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn rejects_bad_rates_and_burst() {
        let t0 = Instant::now();
        for rate in [0.0, -0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let err = TokenBucket::new(rate, 10, t0).unwrap_err();
            assert!(matches!(err, TokenBucketError::InvalidRate(_)), "{rate}");
            assert!(err.to_string().contains("rate"));
        }
        assert_eq!(
            TokenBucket::new(10.0, 0, t0).unwrap_err(),
            TokenBucketError::InvalidBurst(0)
        );

        let mut bucket = TokenBucket::new(10.0, 5, t0).unwrap();
        for rate in [0.0, -5.0, f64::NAN] {
            assert!(matches!(
                bucket.set_rate(t0, rate),
                Err(TokenBucketError::InvalidRate(_))
            ));
        }
        assert_eq!(bucket.rate(), 10.0);
    }

    /// Takes greedily every millisecond for `ms` milliseconds after `start`; returns the total.
    fn take_for(bucket: &mut TokenBucket, start: Instant, ms: u32) -> u64 {
        (1..=ms)
            .map(|i| bucket.try_take(start + MS * i, u64::MAX))
            .sum()
    }

    #[test]
    fn rate_is_respected_over_a_simulated_second() {
        for (rate, burst) in [(1_000.0, 10), (1_234.5, 50), (37.0, 1), (250_000.0, 1_000)] {
            let t0 = Instant::now();
            let mut bucket = TokenBucket::new(rate, burst, t0).unwrap();
            // The initial (full) burst plus one second of accrual.
            let total = bucket.try_take(t0, u64::MAX) + take_for(&mut bucket, t0, 1_000);
            let diff = (total as f64 - rate).abs();
            assert!(
                diff <= burst as f64 + 1.0,
                "rate {rate} burst {burst}: took {total}"
            );
        }
    }

    #[test]
    fn requests_smaller_than_available_take_all_of_them() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(1_000.0, 100, t0).unwrap();
        assert_eq!(bucket.try_take(t0, 30), 30);
        assert_eq!(bucket.try_take(t0, 30), 30);
        assert_eq!(bucket.available(t0), 40);
        assert_eq!(bucket.try_take(t0, 0), 0);
        assert_eq!(bucket.try_take(t0, 50), 40);
    }

    #[test]
    fn set_rate_mid_way() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(1_000.0, 5, t0).unwrap();
        bucket.try_take(t0, u64::MAX); // drain the initial burst
        let first = take_for(&mut bucket, t0, 500); // 500 ms at 1000/s = 500
        let mid = t0 + MS * 500;
        bucket.set_rate(mid, 200.0).unwrap();
        assert_eq!(bucket.rate(), 200.0);
        let second = take_for(&mut bucket, mid, 500); // 500 ms at 200/s = 100
        assert!((first as i64 - 500).abs() <= 1, "first half {first}");
        assert!((second as i64 - 100).abs() <= 1, "second half {second}");

        // Tokens accrued before set_rate count at the old rate.
        let t1 = mid + MS * 500;
        let mut bucket = TokenBucket::new(1_000.0, 1_000, t1).unwrap();
        bucket.try_take(t1, u64::MAX);
        bucket.set_rate(t1 + MS * 100, 1.0).unwrap(); // 100 ms at 1000/s = 100 tokens
        assert_eq!(bucket.available(t1 + MS * 100), 100);
    }

    #[test]
    fn burst_caps_idle_accrual() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(1_000.0, 25, t0).unwrap();
        assert_eq!(bucket.try_take(t0, u64::MAX), 25); // starts full
        let later = t0 + Duration::from_secs(10); // 10 000 tokens' worth of idling
        assert_eq!(bucket.available(later), 25);
        assert_eq!(bucket.try_take(later, 1_000_000), 25);
        assert_eq!(bucket.try_take(later, 1), 0);
    }

    #[test]
    fn time_until_then_take() {
        for rate in [1_000.0, 3.0, 7_777.7, 0.5, 123_456.0] {
            let t0 = Instant::now();
            let mut bucket = TokenBucket::new(rate, 100, t0).unwrap();
            bucket.try_take(t0, u64::MAX);
            let mut now = t0;
            for n in [1, 5, 17, 100] {
                let wait = bucket.time_until(now, n);
                assert!(wait > Duration::ZERO);
                // Shortly before the wait is over, n are not yet there.
                assert!(bucket.available(now + wait.mul_f64(0.99)) < n);
                now += wait;
                assert_eq!(
                    bucket.time_until(now, n),
                    Duration::ZERO,
                    "rate {rate} n {n}"
                );
                assert_eq!(bucket.try_take(now, n), n, "rate {rate} n {n}");
            }
        }

        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(1_000.0, 10, t0).unwrap();
        assert_eq!(bucket.time_until(t0, 10), Duration::ZERO); // full
        assert_eq!(bucket.time_until(t0, 0), Duration::ZERO);
        bucket.try_take(t0, 10);
        // 4 tokens at 1000/s: 4 ms.
        assert_eq!(bucket.time_until(t0, 4), MS * 4);
        // More than the burst is capped at the burst: 10 tokens, 10 ms.
        assert_eq!(bucket.time_until(t0, 1_000), MS * 10);
        // Partial accrual: 2.5 ms in, 2.5 tokens; 4 needs 1.5 more, 1.5 ms.
        let t = t0 + Duration::from_micros(2_500);
        assert_eq!(bucket.time_until(t, 4), Duration::from_micros(1_500));
    }

    #[test]
    fn time_going_backwards_adds_nothing() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(1);
        let mut bucket = TokenBucket::new(100.0, 10, later).unwrap();
        assert_eq!(bucket.try_take(later, 10), 10);
        assert_eq!(bucket.try_take(t0, 10), 0);
        assert_eq!(bucket.available(t0), 0);
        bucket.set_rate(t0, 1_000.0).unwrap();
        // 10 ms after `later` at the new rate: 10 tokens.
        assert_eq!(bucket.try_take(later + MS * 10, 100), 10);
    }
}
