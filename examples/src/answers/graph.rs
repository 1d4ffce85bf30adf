//! The job's graph: what it reads ([`Input`], [`Answers`], [`Levels`]), the thresholds stream
//! ([`levels_stream`]), the job up to its sinks ([`cleaning_streams`],
//! [`cleaning_streams_with`]) and the whole job with its file sinks ([`build_answer_cleaning`],
//! which returns [`CleaningHandles`]).
//!
//! Owns the wiring: operator order, uids, names, parallelism and partitioning. It does not
//! define the operators (`operators`) or records (`records`), generate input (`input`), nor
//! summarize a run (`summary`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use weir::{DataStream, Env, Line};

use super::counts::LevelCounts;
use super::input::answer_json;
use super::operators::{Attach, DropUnwanted, ParseAndLevel};
use super::records::{default_levels, BadRecord, Cleaned, LevelThreshold, Tagged};
use super::uid;

/// Where the answers come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answers {
    /// `records` generated answers ([`answer_json`]) of stream `seed`, as lines of the path
    /// `<generated, seed S>` numbered from 1 (at byte offset 0: they have no file).
    Generated {
        /// How many.
        records: u64,
        /// Which stream.
        seed: u64,
    },
    /// The lines of a file, or of a directory's files. Lines that are not text (too long, a
    /// NUL byte, not UTF-8) go to the side output with the others that do not parse.
    Lines(PathBuf),
}

/// Where the thresholds come from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Levels {
    /// [`default_levels`].
    #[default]
    Builtin,
    /// A JSON Lines file of [`LevelThreshold`]s (a malformed line fails the job).
    File(PathBuf),
}

/// The inputs of the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    /// The answers.
    pub answers: Answers,
    /// The thresholds.
    pub levels: Levels,
}

impl Input {
    /// `records` generated answers of stream `seed`, built-in thresholds.
    pub fn generated(records: u64, seed: u64) -> Self {
        Input {
            answers: Answers::Generated { records, seed },
            levels: Levels::Builtin,
        }
    }

    /// The answers of a file or directory, built-in thresholds.
    pub fn lines(path: impl Into<PathBuf>) -> Self {
        Input {
            answers: Answers::Lines(path.into()),
            levels: Levels::Builtin,
        }
    }

    /// With the thresholds of a levels file.
    pub fn with_levels(mut self, path: impl Into<PathBuf>) -> Self {
        self.levels = Levels::File(path.into());
        self
    }
}

/// What the caller keeps of a built job.
#[derive(Debug, Clone)]
pub struct CleaningHandles {
    /// Records per level, filled by the `map` operator.
    pub level_counts: LevelCounts,
    /// Where the `sink` and `malformed` part files go.
    pub out_dir: PathBuf,
}

/// The `levels` operator: the thresholds stream, parallelism 1.
pub fn levels_stream(env: &Env, levels: &Levels) -> DataStream<LevelThreshold> {
    let s = match levels {
        Levels::Builtin => env.from_collection(default_levels()),
        Levels::File(path) => env.read_jsonl::<LevelThreshold>(path),
    };
    s.uid(uid::LEVELS).name("levels").set_parallelism(1)
}

/// The answer-cleaning job up to its sinks: every operator but `map` and the sinks, at
/// `parallelism` (`levels` at 1). Returns the answers the `filter` keeps and the lines that did
/// not parse. [`build_answer_cleaning`] adds the `map` and file sinks; benchmarks add their own.
pub fn cleaning_streams(
    env: &Env,
    input: &Input,
    parallelism: usize,
) -> (DataStream<Cleaned>, DataStream<BadRecord>) {
    cleaning_streams_with(env, input, parallelism, |tagged| {
        tagged.apply(ParseAndLevel::default())
    })
}

/// [`cleaning_streams`] with the `flat_map` operator that `parse` applies to the tagged lines
/// (benchmarks wrap [`ParseAndLevel`] to inject faults, or back it up). Its uid, name and
/// parallelism are set here.
pub fn cleaning_streams_with(
    env: &Env,
    input: &Input,
    parallelism: usize,
    parse: impl FnOnce(DataStream<Tagged>) -> DataStream<Result<Cleaned, BadRecord>>,
) -> (DataStream<Cleaned>, DataStream<BadRecord>) {
    cleaning_graph(
        env,
        LineSource::Answers(&input.answers),
        &input.levels,
        parallelism,
        parse,
    )
}

/// [`cleaning_streams`] over a stream of lines the caller made (a source of its own, e.g.
/// one a test holds back; give it the uid [`uid::SOURCE`] and the parallelism
/// `parallelism`): the same `levels`, `connect`, `flat_map`, `split` and `filter`
/// operators. Each `connect` subtask reads the `lines` subtask of its own index (a forward
/// edge), in order.
///
/// ```
/// use std::sync::Arc;
/// use weir::{Env, Line};
/// use weir_examples::answers::{answer_json, cleaning_streams_of_lines, uid, Levels};
/// let env = Env::new();
/// let path: Arc<str> = Arc::from("<mine>");
/// let lines = env
///     .generate(1_000, move |i| Line {
///         path: path.clone(), line: i + 1, byte_offset: 0, text: answer_json(3, i).into(),
///     })
///     .uid(uid::SOURCE);
/// let (kept, malformed) = cleaning_streams_of_lines(&env, lines, &Levels::Builtin, 1);
/// let (kept, malformed) = (kept.collect(), malformed.collect());
/// env.execute("of-lines-doc").unwrap();
/// let (kept, malformed) = (kept.take().len(), malformed.take().len());
/// assert_eq!(malformed, 0);
/// assert!(kept > 900 && kept < 1_000, "empty and spam answers are dropped: {kept}");
/// ```
pub fn cleaning_streams_of_lines(
    env: &Env,
    lines: DataStream<Line>,
    levels: &Levels,
    parallelism: usize,
) -> (DataStream<Cleaned>, DataStream<BadRecord>) {
    cleaning_graph(
        env,
        LineSource::Stream(lines),
        levels,
        parallelism,
        |tagged| tagged.apply(ParseAndLevel::default()),
    )
}

/// Where the answer lines come from: the job's own source, or a stream the caller made.
enum LineSource<'a> {
    Answers(&'a Answers),
    Stream(DataStream<Line>),
}

fn cleaning_graph(
    env: &Env,
    source: LineSource<'_>,
    levels: &Levels,
    parallelism: usize,
    parse: impl FnOnce(DataStream<Tagged>) -> DataStream<Result<Cleaned, BadRecord>>,
) -> (DataStream<Cleaned>, DataStream<BadRecord>) {
    let p = parallelism;
    // ANCHOR: graph
    // The thresholds: one subtask, broadcast to every `connect` subtask. (Made first: subtasks
    // are dealt to arbiter threads round robin in graph order, so `source` and `connect` do
    // not share a thread when there are two.)
    let levels = levels_stream(env, levels);
    // The answers: raw JSON lines with where they were read, generated or read from files.
    // File lines that are not text are split off at the source, never lost.
    let (lines, unreadable): (DataStream<Line>, _) = match source {
        LineSource::Answers(Answers::Generated { records, seed }) => {
            let seed = *seed;
            let path: Arc<str> = Arc::from(format!("<generated, seed {seed}>"));
            let lines = env.generate(*records, move |i| Line {
                path: path.clone(),
                line: i + 1,
                byte_offset: 0,
                text: answer_json(seed, i).into(),
            });
            (lines.uid(uid::SOURCE).set_parallelism(p), None)
        }
        LineSource::Answers(Answers::Lines(path)) => {
            let (lines, unreadable) = env.read_located_lines_skipping(path);
            // Each source subtask reads its byte range of every file, so each feeds the
            // `connect` subtask of its index (a forward edge) and all are busy.
            (lines.uid(uid::SOURCE).set_parallelism(p), Some(unreadable))
        }
        // A stream of the caller's, as it made it.
        LineSource::Stream(lines) => (lines, None),
    };
    let tagged = lines
        // Every connect subtask reads all the thresholds before its first line.
        .connect_broadcast(levels)
        .broadcast_first()
        .process(Attach)
        .uid(uid::CONNECT)
        .name("connect")
        .set_parallelism(p);
    // Parse and assign the level: one Ok(Cleaned) or Err(BadRecord) per line.
    let (parsed, malformed) = parse(tagged)
        .uid(uid::FLAT_MAP)
        .name("flat_map")
        .set_parallelism(p)
        .split();
    let kept = parsed
        .uid(uid::SPLIT)
        .set_parallelism(p)
        .apply(DropUnwanted::default())
        .uid(uid::FILTER)
        .name("filter")
        .set_parallelism(p);
    // The lines the source could not read as text join the side output.
    let malformed = match unreadable {
        None => malformed,
        Some(u) => malformed.union([u
            .map(BadRecord::from)
            .uid(uid::UNREADABLE)
            .name("unreadable")
            .set_parallelism(p)]),
    };
    // ANCHOR_END: graph
    (kept, malformed)
}

/// Adds the answer-cleaning job to `env`: answers from `input`, lines to
/// `out_dir/part-sink-<subtask>`, malformed lines to `out_dir/part-malformed-<subtask>`, every
/// operator but `levels` at `parallelism`. Run it with `env.execute(..)`.
///
/// ```
/// use weir::Env;
/// use weir_examples::answers::{build_answer_cleaning, read_part_files, uid, Input, Summary};
/// let dir = std::env::temp_dir().join(format!("weir-doc-cleaning-{}", std::process::id()));
/// let env = Env::new();
/// let handles = build_answer_cleaning(&env, &Input::generated(2_000, 1), &dir, 2);
/// let result = env.execute("answer-cleaning-doc").unwrap();
/// let summary = Summary::new(&result, &handles);
/// let lines = read_part_files(&dir, uid::SINK).unwrap();
/// assert_eq!(summary.records_read, 2_000);
/// assert_eq!(lines.len() as u64, summary.written);
/// assert_eq!(summary.written + summary.dropped + summary.malformed, 2_000);
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn build_answer_cleaning(
    env: &Env,
    input: &Input,
    out_dir: &Path,
    parallelism: usize,
) -> CleaningHandles {
    let p = parallelism;
    let level_counts = LevelCounts::default();
    let mut counter = level_counts.counter();
    // ANCHOR: pipeline
    let (cleaned, malformed) = cleaning_streams(env, input, p);
    // Malformed lines are kept: a side output, written as JSON Lines.
    malformed
        .write_jsonl(out_dir)
        .uid(uid::MALFORMED)
        .set_parallelism(p);
    // The sink writes each record's `Display` form (`format_cleaned`'s line) straight into
    // its batch buffer: no `String` per record.
    cleaned
        .map(move |c: Cleaned| {
            counter.add(c.level);
            c
        })
        .uid(uid::MAP)
        .set_parallelism(p)
        .write_text(out_dir)
        .uid(uid::SINK)
        .set_parallelism(p);
    // ANCHOR_END: pipeline
    CleaningHandles {
        level_counts,
        out_dir: out_dir.to_owned(),
    }
}
