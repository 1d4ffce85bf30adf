//! A sink of fixed capacity ([`PacedSink`]), for backpressure tests and benchmarks.

use std::time::Duration;

/// A call this soon after the previous one's end counts as back to back.
const SLACK: Duration = Duration::from_micros(500);

// ANCHOR: paced_sink
/// A sink of fixed capacity, for backpressure tests and benchmarks: a server that takes a
/// batch of `n` records in `n / capacity` seconds from when it is free (an idle sink does not
/// bank time to burst later; a call within 0.5 ms of the previous one's end, the sleep's own
/// overshoot, is not idle). Records are dropped after their time.
///
/// ```
/// use weir_testing::PacedSink;
/// let env = weir::Env::new();
/// env.generate(100, |i| i).add_sink("paced", |_| Ok(PacedSink::new(10_000.0)));
/// let r = env.execute("paced-doc").unwrap();
/// assert!(r.duration.as_secs_f64() >= 0.009);
/// ```
#[derive(Debug, Clone)]
pub struct PacedSink {
    capacity: f64,
    free_at: Option<std::time::Instant>,
}

impl PacedSink {
    /// A sink that takes `capacity` records per second.
    ///
    /// ```
    /// let _ten_thousand_per_second = weir_testing::PacedSink::new(10_000.0);
    /// ```
    pub fn new(capacity: f64) -> Self {
        PacedSink {
            capacity,
            free_at: None,
        }
    }
}

impl<T: Send + 'static> weir::sink::Sink<T> for PacedSink {
    fn write_batch(&mut self, batch: &mut Vec<T>) -> Result<(), weir::SinkError> {
        let now = std::time::Instant::now();
        // Back to back when called again within the sleep's overshoot (the OS wakes a
        // sleeper some tens of µs late): that is not idle time.
        let start = match self.free_at {
            Some(f) if now.saturating_duration_since(f) < SLACK => f,
            _ => now,
        };
        let done = start + Duration::from_secs_f64(batch.len() as f64 / self.capacity);
        batch.clear();
        self.free_at = Some(done);
        std::thread::sleep(done.saturating_duration_since(std::time::Instant::now()));
        Ok(())
    }
}
// ANCHOR_END: paced_sink
