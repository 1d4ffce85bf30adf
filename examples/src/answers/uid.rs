//! The stable uids of the job's operators.
//!
//! Owns the uid constants only: faults, metrics and part-file names refer to operators by
//! these. It does not build the operators (`graph`) or read their results (`summary`).

/// The answer lines.
pub const SOURCE: &str = "source";
/// The level thresholds.
pub const LEVELS: &str = "levels";
/// Attaches the thresholds to every line (broadcast state).
pub const CONNECT: &str = "connect";
/// Parses and assigns the level.
pub const FLAT_MAP: &str = "flat_map";
/// Routes malformed lines to the side output.
pub const SPLIT: &str = "split";
/// Drops empty and spam answers.
pub const FILTER: &str = "filter";
/// Formats the output line.
pub const MAP: &str = "map";
/// Writes the output lines.
pub const SINK: &str = "sink";
/// Turns the lines the source could not read as text (too long, NUL bytes, not UTF-8) into
/// malformed records (file input only).
pub const UNREADABLE: &str = "unreadable";
/// Writes the malformed lines.
pub const MALFORMED: &str = "malformed";
/// Gives the answers their event time (`ts_ms`) and the watermark (windowed job).
pub const WATERMARKS: &str = "watermarks";
/// Counts answers per level per window (windowed job).
pub const WINDOW: &str = "window";
/// Writes the window counts (windowed job): `part-windows-<subtask>-<checkpoint>`.
pub const WINDOW_SINK: &str = "windows";
/// Writes the late answers (windowed job), in the folder `late`.
pub const LATE: &str = "late";
