//! Shared benchmark helpers: a monotonic clock as plain nanoseconds (so records can carry a
//! timestamp), a fixed-bucket latency histogram, peak RSS, and medians; and the jobs of the
//! fault harnesses (`recovery_support`, `criticality`). The harness binaries are in `src/bin`.
//! The report of the BQBS paper's experiments, which runs some of them, is the crate
//! `weir-paper` (`benches/paper`); the chaos campaign is `weir-stress` (`tests/stress`).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod criticality;
pub mod recovery_support;

use std::sync::OnceLock;
use std::time::Instant;

/// Nanoseconds since the first call in this process, from the monotonic clock.
///
/// ```
/// let a = weir_benches::clock_ns();
/// let b = weir_benches::clock_ns();
/// assert!(b >= a);
/// ```
#[inline]
pub fn clock_ns() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Peak resident set size of this process in bytes (`VmHWM` of `/proc/self/status`); `None`
/// where that file does not exist.
pub fn peak_rss_bytes() -> Option<u64> {
    proc_status_bytes("VmHWM")
}

/// A size field of this process's `/proc/self/status` (`VmRSS`, `VmHWM`) in bytes; `None`
/// where that file or the field does not exist.
pub fn proc_status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status
        .lines()
        .find(|l| l.split(':').next() == Some(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// A latency histogram with fixed buckets of [`LatencyHistogram::BUCKET_NS`] (10 µs) up to
/// 1 s, and one overflow bucket. Recording is an index computation and an increment: no
/// allocation, no lock. Per-subtask histograms are merged at the end.
///
/// ```
/// let mut h = weir_benches::LatencyHistogram::new();
/// for us in 1..=100u64 {
///     h.record(us * 1_000);
/// }
/// assert_eq!(h.count(), 100);
/// assert_eq!(h.percentile_ms(0.5), 0.06); // 50 µs is in the bucket [50, 60) µs
/// assert_eq!(h.percentile_ms(0.99), 0.1);
/// ```
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    buckets: Vec<u64>,
    count: u64,
    max_ns: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    /// Width of a bucket.
    pub const BUCKET_NS: u64 = 10_000;
    /// Number of regular buckets (covering 0 to 1 s).
    pub const BUCKETS: usize = 100_000;

    /// An empty histogram.
    pub fn new() -> Self {
        LatencyHistogram {
            buckets: vec![0; Self::BUCKETS + 1],
            count: 0,
            max_ns: 0,
        }
    }

    /// Records one latency.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        let i = ((ns / Self::BUCKET_NS) as usize).min(Self::BUCKETS);
        self.buckets[i] += 1;
        self.count += 1;
        self.max_ns = self.max_ns.max(ns);
    }

    /// Records `n` equal latencies.
    #[inline]
    pub fn record_n(&mut self, ns: u64, n: u64) {
        let i = ((ns / Self::BUCKET_NS) as usize).min(Self::BUCKETS);
        self.buckets[i] += n;
        self.count += n;
        self.max_ns = self.max_ns.max(ns);
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
        self.count += other.count;
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The largest sample, in milliseconds.
    pub fn max_ms(&self) -> f64 {
        self.max_ns as f64 / 1e6
    }

    /// The `q`-quantile (0..=1) in milliseconds: the upper edge of the bucket holding it (so
    /// at most 10 µs above the true value); the maximum if it is in the overflow bucket.
    pub fn percentile_ms(&self, q: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                if i == Self::BUCKETS {
                    return self.max_ms();
                }
                return ((i as u64 + 1) * Self::BUCKET_NS).min(self.max_ns.max(1)) as f64 / 1e6;
            }
        }
        self.max_ms()
    }
}

/// The median of `xs` (the mean of the middle two for an even count); `None` if empty.
///
/// ```
/// assert_eq!(weir_benches::median(&[3.0, 1.0, 2.0]), Some(2.0));
/// assert_eq!(weir_benches::median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
/// ```
pub fn median(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}
