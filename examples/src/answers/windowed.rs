//! Answers per level per event-time window: the cleaning job's answers, counted per level in
//! tumbling windows of their `ts_ms` ([`build_windowed_level_counts`]), written as
//! `window_start_ms,window_end_ms,level,count` lines ([`LevelWindowCount`]).
//!
//! ```text
//! source ─> connect ─> flat_map ─> split ─> filter ─> watermarks ─(by level)─> window ─> windows
//!                                    │                                           └─(late)─> late
//!                                    └─(malformed)─> malformed
//! ```
//!
//! - `watermarks`: the answers' event time is their `ts_ms`; the watermark trails the highest
//!   one seen by [`OUT_OF_ORDERNESS`] (5 s), after every batch.
//! - `window`: keyed by level, tumbling windows of the chosen size (`--window 1m`), counting
//!   answers ([`CountAnswers`]); a window fires when the watermark passes its end.
//! - `windows`: the counts, one line each, exactly once (two-phase commit: the part files
//!   `part-windows-<subtask>-<checkpoint>` appear when their checkpoint completes,
//!   `…-final` at the end of the input).
//! - `late`: answers whose window had fired when they came (older than the watermark) are not
//!   lost: they go, as JSON Lines of [`Cleaned`] (with their `ts_ms`), to the folder
//!   [`LATE_DIR`] in the output directory, exactly once as well.
//! - `malformed`: lines that do not parse, as in the cleaning job.
//!
//! Owns the windowed job's wiring, its output record and its summary. The sequential
//! reference it is tested against is in `reference`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use weir::time::{EventTime, WatermarkStrategy};
use weir::window::{AggregateFunction, Fired, TumblingEventTimeWindows};
use weir::{DataStream, Env, JobResult, LateData};

use super::graph::{cleaning_streams, Input};
use super::records::{BadRecord, Cleaned, LevelName};
use super::uid;

/// How far behind the newest answer an answer may be and still count: the watermark is the
/// highest `ts_ms` seen minus this.
pub const OUT_OF_ORDERNESS: Duration = Duration::from_secs(5);

/// The folder, in the output directory, that the late answers are written to.
pub const LATE_DIR: &str = "late";

/// The event time of an answer: its `ts_ms`.
#[inline]
pub fn event_time(c: &Cleaned) -> EventTime {
    EventTime::try_from(c.ts_ms).unwrap_or(EventTime::MAX)
}

/// One output line: `count` answers of `level` in the window `[window_start_ms,
/// window_end_ms)`.
///
/// ```
/// use weir_examples::answers::{LevelName, LevelWindowCount};
/// let c = LevelWindowCount { window_start_ms: 60_000, window_end_ms: 120_000,
///                            level: LevelName::new("L1").unwrap(), count: 7 };
/// assert_eq!(c.to_string(), "60000,120000,L1,7");
/// assert_eq!("60000,120000,L1,7".parse::<LevelWindowCount>(), Ok(c));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LevelWindowCount {
    /// The window's first ms.
    pub window_start_ms: EventTime,
    /// The first ms after the window.
    pub window_end_ms: EventTime,
    /// The level.
    pub level: LevelName,
    /// Answers of that level in the window.
    pub count: u64,
}

impl fmt::Display for LevelWindowCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{},{},{},{}",
            self.window_start_ms, self.window_end_ms, self.level, self.count
        )
    }
}

impl std::str::FromStr for LevelWindowCount {
    type Err = String;

    /// Parses a line `window_start_ms,window_end_ms,level,count`.
    fn from_str(line: &str) -> Result<Self, String> {
        let bad = || format!("not a `window_start_ms,window_end_ms,level,count` line: {line:?}");
        let mut fields = line.split(',');
        let mut next = || fields.next().ok_or_else(bad);
        let window_start_ms = next()?.parse().map_err(|_| bad())?;
        let window_end_ms = next()?.parse().map_err(|_| bad())?;
        let level = LevelName::new(next()?)?;
        let count = next()?.parse().map_err(|_| bad())?;
        if fields.next().is_some() {
            return Err(bad());
        }
        Ok(LevelWindowCount {
            window_start_ms,
            window_end_ms,
            level,
            count,
        })
    }
}

/// The `window` operator's aggregate: answers in the window.
#[derive(Debug, Clone, Copy, Default)]
pub struct CountAnswers;

impl AggregateFunction<Cleaned, u64> for CountAnswers {
    type Acc = u64;
    #[inline]
    fn add(&self, n: &mut u64, _c: Cleaned) {
        *n += 1;
    }
    fn merge(&self, n: &mut u64, other: &u64) {
        *n += other;
    }
    fn result(&self, n: &u64) -> u64 {
        *n
    }
}

/// A window size as given on the command line: a positive whole number and a unit, `ms`,
/// `s`, `m` or `h`.
///
/// ```
/// use std::time::Duration;
/// use weir_examples::answers::parse_window;
/// assert_eq!(parse_window("1m"), Ok(Duration::from_secs(60)));
/// assert_eq!(parse_window("30s"), Ok(Duration::from_secs(30)));
/// assert_eq!(parse_window("500ms"), Ok(Duration::from_millis(500)));
/// assert_eq!(parse_window("2h"), Ok(Duration::from_secs(7_200)));
/// assert!(parse_window("0s").is_err());
/// assert!(parse_window("1.5m").unwrap_err().contains("`1.5m`"));
/// assert!(parse_window("10").is_err(), "a unit is needed");
/// ```
pub fn parse_window(s: &str) -> Result<Duration, String> {
    let bad = |why: &str| {
        format!("`{s}` is not a window size ({why}): give a positive whole number and a unit, e.g. 500ms, 30s, 1m or 2h")
    };
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(digits);
    if number.is_empty() {
        return Err(bad("no number"));
    }
    let n: u64 = number.parse().map_err(|_| bad("too large"))?;
    let ms_per_unit: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        "" => return Err(bad("no unit")),
        _ => return Err(bad("unknown unit")),
    };
    let ms = n.checked_mul(ms_per_unit).ok_or_else(|| bad("too large"))?;
    if ms == 0 {
        return Err(bad("zero"));
    }
    if ms > i64::MAX as u64 / 4 {
        return Err(bad("too large"));
    }
    Ok(Duration::from_millis(ms))
}

/// What the caller keeps of a built windowed job.
#[derive(Debug, Clone)]
pub struct WindowHandles {
    /// Where the `windows` and `malformed` part files go.
    pub out_dir: PathBuf,
    /// Where the `late` part files go (`out_dir/late`).
    pub late_dir: PathBuf,
    /// The window size.
    pub window: Duration,
}

/// Adds the windowed job to `env`: the answers of `input`, cleaned as by
/// [`build_answer_cleaning`](super::build_answer_cleaning), counted per level per tumbling
/// event-time window of `window` (event time `ts_ms`, out-of-orderness [`OUT_OF_ORDERNESS`]);
/// one [`LevelWindowCount`] line per level and window to `out_dir/part-windows-…`
/// (exactly once), late answers to `out_dir/late/part-late-…` (JSON Lines of [`Cleaned`],
/// exactly once), malformed lines to `out_dir/part-malformed-<subtask>`. Every operator but
/// `levels` at `parallelism`.
///
/// ```
/// use std::time::Duration;
/// use weir::Env;
/// use weir_examples::answers::{
///     build_windowed_level_counts, read_part_files, uid, Input, LevelWindowCount, WindowSummary,
/// };
/// let dir = std::env::temp_dir().join(format!("weir-doc-windowed-{}", std::process::id()));
/// let env = Env::new();
/// // Generated answers are 10 ms apart: 20,000 of them span 200 s, four windows of 1 minute.
/// let handles = build_windowed_level_counts(
///     &env, &Input::generated(20_000, 1), &dir, 2, Duration::from_secs(60));
/// let result = env.execute("windowed-doc").unwrap();
/// let summary = WindowSummary::new(&result, &handles);
/// let counts: Vec<LevelWindowCount> = read_part_files(&dir, uid::WINDOW_SINK)
///     .unwrap()
///     .iter()
///     .map(|l| l.parse().unwrap())
///     .collect();
/// assert_eq!(counts.len() as u64, summary.windows);
/// let counted: u64 = counts.iter().map(|c| c.count).sum();
/// assert_eq!(counted + summary.late + summary.dropped + summary.malformed, 20_000);
/// assert!(counts.iter().all(|c| c.window_end_ms - c.window_start_ms == 60_000));
/// assert_eq!(summary.late, 0, "generated answers are at most 10 ms out of order");
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn build_windowed_level_counts(
    env: &Env,
    input: &Input,
    out_dir: &Path,
    parallelism: usize,
    window: Duration,
) -> WindowHandles {
    let (cleaned, malformed) = cleaning_streams(env, input, parallelism);
    windowed_level_counts(cleaned, malformed, out_dir, parallelism, window)
}

/// The windowed job after the cleaning: [`build_windowed_level_counts`] for answers the
/// caller cleaned (e.g. with [`cleaning_streams_of_lines`](super::cleaning_streams_of_lines)
/// over a source of its own).
pub fn windowed_level_counts(
    cleaned: DataStream<Cleaned>,
    malformed: DataStream<BadRecord>,
    out_dir: &Path,
    parallelism: usize,
    window: Duration,
) -> WindowHandles {
    let p = parallelism;
    let late_dir = out_dir.join(LATE_DIR);
    // ANCHOR: windowed
    malformed
        .write_jsonl(out_dir)
        .uid(uid::MALFORMED)
        .set_parallelism(p);
    // At most one watermark per interval (200 ms) while answers flow; the one the interval
    // held back goes out when the input pauses.
    let watermarks = WatermarkStrategy::for_bounded_out_of_orderness(OUT_OF_ORDERNESS)
        .with_timestamp_assigner(event_time);
    let late = LateData::new();
    cleaned
        .assign_timestamps_and_watermarks(watermarks)
        .uid(uid::WATERMARKS)
        .set_parallelism(p)
        .key_by(|c: &Cleaned| c.level)
        .window(TumblingEventTimeWindows::of(window))
        .side_output_late_data(&late)
        .aggregate_window(CountAnswers, |level: &LevelName, f: &Fired, count| {
            LevelWindowCount {
                window_start_ms: f.window.start,
                window_end_ms: f.window.end,
                level: *level,
                count,
            }
        })
        .uid(uid::WINDOW)
        .set_parallelism(p)
        .write_text_exactly_once(out_dir)
        .uid(uid::WINDOW_SINK)
        .set_parallelism(p);
    // Late answers are kept, with their time: JSON Lines in `out_dir/late`.
    late.stream()
        .expect("the window's result stream is built")
        .write_jsonl_exactly_once(&late_dir)
        .uid(uid::LATE)
        .set_parallelism(p);
    // ANCHOR_END: windowed
    WindowHandles {
        out_dir: out_dir.to_owned(),
        late_dir,
        window,
    }
}

/// What a run of the windowed job did, from its result.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowSummary {
    /// Lines read by `source`.
    pub records_read: u64,
    /// Lines sent to the side output (`malformed`).
    pub malformed: u64,
    /// Answers dropped by `filter` (empty or spam).
    pub dropped: u64,
    /// Lines (level and window counts) written by `windows`.
    pub windows: u64,
    /// Late answers written by `late`.
    pub late: u64,
    /// The window size.
    pub window: Duration,
    /// Job wall time in seconds.
    pub seconds: f64,
}

impl WindowSummary {
    /// The summary of a completed job.
    pub fn new(result: &JobResult, handles: &WindowHandles) -> Self {
        let op = |u: &str| result.operator(u);
        let filter = op(uid::FILTER);
        WindowSummary {
            records_read: op(uid::SOURCE).map_or(0, |o| o.records_out),
            malformed: op(uid::MALFORMED).map_or(0, |o| o.records_in),
            dropped: filter.map_or(0, |o| o.records_in - o.records_out),
            windows: op(uid::WINDOW_SINK).map_or(0, |o| o.records_in),
            late: op(uid::LATE).map_or(0, |o| o.records_in),
            window: handles.window,
            seconds: result.duration.as_secs_f64(),
        }
    }
}

impl fmt::Display for WindowSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "records read:   {:>12}", self.records_read)?;
        writeln!(
            f,
            "windows:        {:>12}  (level counts of {} ms windows written)",
            self.windows,
            self.window.as_millis()
        )?;
        writeln!(
            f,
            "late answers:   {:>12}  (older than the watermark: {LATE_DIR}/)",
            self.late
        )?;
        writeln!(
            f,
            "dropped:        {:>12}  (empty or [spam] content)",
            self.dropped
        )?;
        writeln!(f, "malformed:      {:>12}  (side output)", self.malformed)?;
        write!(f, "time:           {:>12.3} s", self.seconds)
    }
}
