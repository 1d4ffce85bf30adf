//! The windowed job computed one answer at a time, without the framework
//! ([`reference_level_counts`]): what [`build_windowed_level_counts`] must write, per level per
//! window, and which answers it must find late.
//!
//! Owns the sequential model only (parse, level, drop rules, watermark bounds, window
//! counts). It uses none of the job's code but the record types: lines are parsed into the
//! owned [`Answer`] (the job parses a borrowing twin), levels are found by a scan of the
//! thresholds, and the drop rules are written out again.
//!
//! [`build_windowed_level_counts`]: super::build_windowed_level_counts

use std::collections::BTreeMap;
use std::time::Duration;

use super::records::{parse_answer, LevelThreshold};
use super::windowed::OUT_OF_ORDERNESS;

/// What the job must produce.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WindowReference {
    /// `(window_start_ms, window_end_ms, level)` -> answers counted.
    pub counts: BTreeMap<(i64, i64, String), u64>,
    /// The ids of the late answers, sorted.
    pub late: Vec<u64>,
    /// The malformed lines (not an answer, or likes below every threshold), sorted.
    pub malformed: Vec<String>,
    /// Answers dropped for empty or `[spam]` content.
    pub dropped: u64,
}

/// A fact about the run the reference cannot know from the input alone: by the time the job
/// reads line `before_line` (0-based), every window subtask's input watermark is at least
/// `at_least` (a test holds its source back until the job's metrics show it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownWatermark {
    /// The first line read after the watermark was seen.
    pub before_line: usize,
    /// The watermark then (ms).
    pub at_least: i64,
}

/// The windowed job over `lines` (in the order each source subtask reads them: a subtask
/// reads a subsequence of them, in this order), with the thresholds `levels`, tumbling
/// windows of `window` (from the epoch) and the watermark facts `known`.
///
/// An answer is late when its window has fired: `window_end - 1 <= watermark` at the window
/// operator. That watermark depends on timing (it is the minimum over channels), but it lies
/// between two bounds the input decides: at most the highest `ts_ms` of the answers kept
/// before it minus [`OUT_OF_ORDERNESS`] (the watermark of its own channel trails what that
/// channel carried), at least the largest `known` watermark for its line. An answer late by
/// the lower bound is late in every run; one on time by the upper bound is on time in every
/// run; any other makes the outcome depend on timing, and is an `Err` naming it: a test
/// input must not have one.
///
/// ```
/// use std::time::Duration;
/// use weir_examples::answers::{default_levels, reference_level_counts, KnownWatermark};
/// let line = |id: u64, ts: u64, likes: u64| format!(
///     r#"{{"id":{id},"ts_ms":{ts},"user":{{"id":1,"name":"u","followers":0}},"question_id":1,"likes":{likes},"favorites":0,"comments":0,"content":"x"}}"#);
/// let lines = vec![line(1, 1_000, 5), line(2, 70_000, 50), line(3, 71_000, 5), line(4, 2_000, 5),
///                  "{oops".to_string()];
/// let known = [KnownWatermark { before_line: 3, at_least: 70_000 - 5_000 }];
/// let r = reference_level_counts(&lines, &default_levels(), Duration::from_secs(60), &known).unwrap();
/// assert_eq!(r.counts[&(0, 60_000, "L0".to_string())], 1);
/// assert_eq!(r.counts[&(60_000, 120_000, "L1".to_string())], 1);
/// assert_eq!(r.late, vec![4]);
/// assert_eq!(r.malformed, vec!["{oops".to_string()]);
/// // Without the known watermark, answer 4 may or may not be late.
/// assert!(reference_level_counts(&lines, &default_levels(), Duration::from_secs(60), &[]).is_err());
/// ```
pub fn reference_level_counts(
    lines: &[String],
    levels: &[LevelThreshold],
    window: Duration,
    known: &[KnownWatermark],
) -> Result<WindowReference, String> {
    let size = i64::try_from(window.as_millis()).map_err(|_| "window too large".to_string())?;
    if size <= 0 {
        return Err("the window must be at least 1 ms".into());
    }
    let bound = OUT_OF_ORDERNESS.as_millis() as i64;
    let mut out = WindowReference::default();
    let mut max_seen: Option<i64> = None;
    for (i, line) in lines.iter().enumerate() {
        let Ok(a) = parse_answer(line) else {
            out.malformed.push(line.clone());
            continue;
        };
        // The largest threshold the likes reach; of equal ones, the last.
        let mut level: Option<&LevelThreshold> = None;
        for t in levels {
            if t.min_likes <= a.likes && level.is_none_or(|l| t.min_likes >= l.min_likes) {
                level = Some(t);
            }
        }
        let Some(level) = level else {
            out.malformed.push(line.clone());
            continue;
        };
        let content = a.content.trim();
        if content.is_empty() || content.starts_with("[spam]") {
            out.dropped += 1;
            continue;
        }
        let ts = i64::try_from(a.ts_ms).unwrap_or(i64::MAX);
        let start = ts - ts.rem_euclid(size);
        let last = start + size - 1;
        let upper = max_seen.map(|m| m.saturating_sub(bound));
        let lower = known
            .iter()
            .filter(|k| k.before_line <= i)
            .map(|k| k.at_least)
            .max();
        let surely_late = lower.is_some_and(|w| last <= w);
        let surely_on_time = upper.is_none_or(|w| last > w);
        match (surely_late, surely_on_time) {
            (true, false) => out.late.push(a.id),
            (false, true) => {
                *out
                    .counts
                    .entry((start, start + size, level.level.to_string()))
                    .or_insert(0) += 1;
            }
            (true, true) => {
                return Err(format!(
                    "line {i}: the known watermark {lower:?} is above what the answers before it allow ({upper:?})"
                ))
            }
            (false, false) => {
                return Err(format!(
                    "line {i}: answer {} at {ts} (window ending {}) is late or not depending on timing: \
                     the watermark is between {lower:?} and {upper:?}",
                    a.id,
                    start + size
                ))
            }
        }
        // Late answers pass the watermark generator too.
        max_seen = Some(max_seen.map_or(ts, |m| m.max(ts)));
    }
    out.late.sort_unstable();
    out.malformed.sort();
    Ok(out)
}
