//! Answer cleaning: the ETL job of the BQBS paper.
//!
//! Input records are answers of a Q&A site, one JSON object per line ([`Answer`]). The job
//! attaches the current *level thresholds* (a small broadcast side: `likes >= 10` is `L1`, ...)
//! to every line, parses it, gives it the level of the largest threshold its likes reach, drops
//! answers with empty or spam content, and writes `id,user_id,likes,level` lines.
//!
//! The graph, with the stable uid of every operator (faults are injected by uid):
//!
//! ```text
//! source ──────────────┐ (forward)
//!                      ├─> connect ─> flat_map ─> split ─> filter ─> map ─> sink
//! levels ─(broadcast)──┘                            └─(malformed)─┬─> malformed
//! source ─(not text)─> unreadable ────────────────────────────────┘
//! ```
//!
//! - `source`: raw lines ([`weir::Line`]: the text with its file, line number and byte
//!   offset) from a file or directory, or generated ([`answer_json`]). A file line that is not
//!   even text — longer than `EnvConfig::max_line_bytes`, with a NUL byte, or not UTF-8 — is
//!   split off at the source (`read_located_lines_skipping`) and joins the side output below
//!   as a [`BadRecord`] (operator `unreadable`); the job goes on.
//! - `levels`: the thresholds ([`LevelThreshold`]) from a JSON Lines file or the built-in
//!   [`default_levels`]; parallelism 1, broadcast to every `connect` subtask.
//! - `connect`: [`Attach`] keeps the thresholds as broadcast state (sorted by `min_likes`, read
//!   completely before the first line: `broadcast_first`) and emits each line with them
//!   ([`Tagged`]; the thresholds travel as one shared [`Thresholds`] pointer, not a copy).
//! - `flat_map`: parses the line and assigns the level ([`clean_line`]), emitting one
//!   `Result<Cleaned, BadRecord>` per line.
//! - `split`: `Ok` records go on; **a malformed line is never dropped silently**: it goes, as
//!   a [`BadRecord`] with the line and the parse error, to the side output, which the
//!   `malformed` sink writes as JSON Lines to `part-malformed-<subtask>` in the output
//!   directory (and the job summary counts), with the file, line number and byte offset it
//!   was read at. A line is malformed when it is not text (above), not a JSON [`Answer`]
//!   (including a last line cut short, without its newline), or when its likes are below
//!   every threshold (no level applies).
//! - `filter`: drops answers whose content is empty after trimming or starts with `[spam]`
//!   ([`ContentFlag`]).
//! - `map`: formats `id,user_id,likes,level` (e.g. `42,36972,390,L2`) and counts records per
//!   level ([`LevelCounts`]).
//! - `sink`: writes the lines to `part-sink-<subtask>` in the output directory.
//!
//! Everything after `connect` is chained into the `connect` actor (one actor per subtask), so
//! a record crosses one channel: from its `source` subtask to its `connect` subtask.
//!
//! The code, by concern:
//!
//! - `records`: the records that flow between operators ([`Answer`], [`Thresholds`],
//!   [`Tagged`], [`Cleaned`], [`BadRecord`], ...).
//! - `clean`: the per-record logic as plain functions ([`clean_line`], [`content_flag`],
//!   [`format_cleaned`], ...).
//! - `operators`: the job's operators ([`Attach`], [`ParseAndLevel`], [`DropUnwanted`]).
//! - `graph`: the job's input description ([`Input`]) and its wiring
//!   ([`cleaning_streams`], [`build_answer_cleaning`], ...).
//! - `input`: generated answers ([`answer_json`], [`write_answers`]).
//! - `counts`: records per level ([`LevelCounts`]).
//! - `summary`: what a run produced ([`Summary`], [`read_part_files`], ...).
//! - `windowed`: answers per level per event-time window ([`build_windowed_level_counts`],
//!   [`LevelWindowCount`], [`WindowSummary`], [`parse_window`]): `answer_cleaning --window 1m`.
//! - `reference`: the windowed job computed sequentially, without the framework
//!   ([`reference_level_counts`]), for tests.
//! - [`uid`]: the operators' stable uids.
//!
//! Everything public is re-exported here: paths are `weir_examples::answers::X`.

mod clean;
mod counts;
mod graph;
mod input;
mod operators;
mod records;
mod reference;
mod summary;
pub mod uid;
mod windowed;

pub use clean::{clean, clean_line, clean_located, clean_str, content_flag, format_cleaned};
pub use counts::{LevelCounter, LevelCounts};
pub use graph::{
    build_answer_cleaning, cleaning_streams, cleaning_streams_of_lines, cleaning_streams_with,
    levels_stream, Answers, CleaningHandles, Input, Levels,
};
pub use input::{answer_json, write_answers, DEFAULT_SEED};
pub use operators::{Attach, DropUnwanted, ParseAndLevel};
pub use records::{
    default_levels, parse_answer, Answer, BadRecord, Cleaned, ContentFlag, LevelName,
    LevelThreshold, Tagged, Thresholds, User,
};
pub use reference::{reference_level_counts, KnownWatermark, WindowReference};
pub use summary::{prepare_output_dir, read_part_files, Summary};
pub use windowed::{
    build_windowed_level_counts, event_time, parse_window, windowed_level_counts, CountAnswers,
    LevelWindowCount, WindowHandles, WindowSummary, LATE_DIR, OUT_OF_ORDERNESS,
};
