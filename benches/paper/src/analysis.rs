//! From samples to figures: CPU utilization between consecutive samples, time windows, and
//! means over (or outside) windows.

use serde::{Deserialize, Serialize};

use crate::proc::Sample;

/// CPU utilization between two consecutive samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CpuInterval {
    /// Start, seconds since the spawn.
    pub start_s: f64,
    /// End, seconds since the spawn.
    pub end_s: f64,
    /// CPU time in the interval over its length, in percent of one core (200 = two cores
    /// busy).
    pub pct_core: f64,
}

/// The CPU utilization between consecutive samples (`clk_tck` ticks per second).
///
/// ```
/// use weir_paper::{analysis::cpu_intervals, proc::Sample};
/// let s = |t_s, cpu_ticks| Sample { t_s, cpu_ticks, rss_bytes: 1, hwm_bytes: 1 };
/// let iv = cpu_intervals(&[s(0.0, 0), s(0.1, 10), s(0.2, 15)], 100);
/// assert_eq!(iv.len(), 2);
/// assert!((iv[0].pct_core - 100.0).abs() < 1e-9);
/// assert!((iv[1].pct_core - 50.0).abs() < 1e-9);
/// ```
pub fn cpu_intervals(samples: &[Sample], clk_tck: u64) -> Vec<CpuInterval> {
    samples
        .windows(2)
        .filter(|w| w[1].t_s > w[0].t_s)
        .map(|w| CpuInterval {
            start_s: w[0].t_s,
            end_s: w[1].t_s,
            pct_core: w[1].cpu_ticks.saturating_sub(w[0].cpu_ticks) as f64
                / clk_tck as f64
                / (w[1].t_s - w[0].t_s)
                * 100.0,
        })
        .collect()
}

fn overlap(a: (f64, f64), b: (f64, f64)) -> f64 {
    (a.1.min(b.1) - a.0.max(b.0)).max(0.0)
}

/// Length of the part of `iv` inside `range` and inside any of `windows` (which must not
/// overlap each other).
fn inside(iv: (f64, f64), range: (f64, f64), windows: &[(f64, f64)]) -> f64 {
    windows
        .iter()
        .map(|&w| overlap(iv, (w.0.max(range.0), w.1.min(range.1))))
        .sum()
}

/// The time-weighted mean CPU utilization (percent of one core) over the parts of `range`
/// that are inside `windows` (`in_windows`) or outside all of them; `None` if no interval
/// covers such a part. Windows must not overlap (see [`merge_windows`]).
///
/// ```
/// use weir_paper::analysis::{weighted_cpu, CpuInterval};
/// let iv = |start_s, end_s, pct_core| CpuInterval { start_s, end_s, pct_core };
/// let series = [iv(0.0, 1.0, 100.0), iv(1.0, 2.0, 200.0), iv(2.0, 3.0, 100.0)];
/// let w = [(1.5, 2.5)];
/// assert_eq!(weighted_cpu(&series, (0.0, 3.0), &w, true), Some(150.0));
/// assert_eq!(weighted_cpu(&series, (0.0, 3.0), &w, false), Some(125.0));
/// assert_eq!(weighted_cpu(&series, (0.0, 1.0), &w, true), None);
/// ```
pub fn weighted_cpu(
    series: &[CpuInterval],
    range: (f64, f64),
    windows: &[(f64, f64)],
    in_windows: bool,
) -> Option<f64> {
    let (mut sum, mut len) = (0.0, 0.0);
    for iv in series {
        let span = (iv.start_s, iv.end_s);
        let in_range = overlap(span, range);
        let w = inside(span, range, windows);
        let l = if in_windows { w } else { in_range - w };
        if l > 1e-12 {
            sum += iv.pct_core * l;
            len += l;
        }
    }
    (len > 0.0).then(|| sum / len)
}

/// Sorts windows and merges the ones that overlap.
///
/// ```
/// use weir_paper::analysis::merge_windows;
/// assert_eq!(merge_windows(vec![(3.0, 4.0), (0.0, 1.0), (0.5, 2.0)]), vec![(0.0, 2.0), (3.0, 4.0)]);
/// ```
pub fn merge_windows(mut w: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    w.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<(f64, f64)> = Vec::new();
    for (a, b) in w {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// The median of `xs` (the mean of the middle two for an even count); `None` if empty.
///
/// ```
/// assert_eq!(weir_paper::analysis::median(&[3.0, 1.0, 2.0]), Some(2.0));
/// assert_eq!(weir_paper::analysis::median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
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

/// The median `VmRSS` of the samples inside `range` and outside `windows`; `None` if there is
/// none.
pub fn steady_rss(samples: &[Sample], range: (f64, f64), windows: &[(f64, f64)]) -> Option<u64> {
    let v: Vec<f64> = samples
        .iter()
        .filter(|s| s.t_s >= range.0 && s.t_s <= range.1)
        .filter(|s| !windows.iter().any(|w| s.t_s >= w.0 && s.t_s <= w.1))
        .map(|s| s.rss_bytes as f64)
        .collect();
    median(&v).map(|m| m as u64)
}

/// The largest `VmHWM` sampled (0 without samples).
pub fn peak_rss(samples: &[Sample]) -> u64 {
    samples
        .iter()
        .map(|s| s.hwm_bytes.max(s.rss_bytes))
        .max()
        .unwrap_or(0)
}

/// The element-wise median of equally long rows (`None` where any row lacks a value).
///
/// ```
/// use weir_paper::analysis::column_medians;
/// let rows = vec![vec![1.0, 10.0], vec![3.0, 30.0], vec![2.0, 20.0]];
/// assert_eq!(column_medians(&rows), vec![Some(2.0), Some(20.0)]);
/// ```
pub fn column_medians(rows: &[Vec<f64>]) -> Vec<Option<f64>> {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    (0..n)
        .map(|i| {
            let col: Vec<f64> = rows.iter().filter_map(|r| r.get(i).copied()).collect();
            if col.len() == rows.len() {
                median(&col)
            } else {
                None
            }
        })
        .collect()
}

/// Running sums.
///
/// ```
/// assert_eq!(weir_paper::analysis::cumulative(&[1.0, 2.0, 3.0]), vec![1.0, 3.0, 6.0]);
/// ```
pub fn cumulative(xs: &[f64]) -> Vec<f64> {
    xs.iter()
        .scan(0.0, |acc, x| {
            *acc += x;
            Some(*acc)
        })
        .collect()
}

/// `100 * (with - without) / without`.
pub fn pct_change(without: f64, with: f64) -> f64 {
    100.0 * (with - without) / without
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_outside_windows_ignores_the_rest_of_the_process() {
        let iv = |start_s, end_s, pct_core| CpuInterval {
            start_s,
            end_s,
            pct_core,
        };
        // 0..1 s: setup at 100 %; the job 1..5 s at 50 %, but 3..4 s at 150 % (a failure).
        let series = [
            iv(0.0, 1.0, 100.0),
            iv(1.0, 3.0, 50.0),
            iv(3.0, 4.0, 150.0),
            iv(4.0, 5.0, 50.0),
        ];
        let w = merge_windows(vec![(3.0, 4.0)]);
        assert_eq!(weighted_cpu(&series, (1.0, 5.0), &w, false), Some(50.0));
        assert_eq!(weighted_cpu(&series, (1.0, 5.0), &w, true), Some(150.0));
        // A window partly outside the range only counts inside it.
        let w = [(4.5, 6.0)];
        assert_eq!(weighted_cpu(&series, (1.0, 5.0), &w, true), Some(50.0));
    }

    #[test]
    fn steady_rss_is_the_median_outside_windows() {
        let s = |t_s, rss| Sample {
            t_s,
            cpu_ticks: 0,
            rss_bytes: rss,
            hwm_bytes: rss,
        };
        let samples = [s(0.0, 1), s(1.0, 10), s(2.0, 12), s(3.0, 100), s(4.0, 11)];
        assert_eq!(steady_rss(&samples, (1.0, 4.0), &[(2.5, 3.5)]), Some(11));
        assert_eq!(peak_rss(&samples), 100);
        assert_eq!(steady_rss(&samples, (5.0, 6.0), &[]), None);
    }
}
