//! An exactly-once part-file sink ([`TwoPhaseFileSink`]: two-phase commit on the
//! [`Sink`] hooks) and the reading of what it committed ([`read_committed`]): a sink whose
//! output, once the job ends, holds every record once however often the job failed, and
//! whose committed files never show output of a failed attempt. A reference for your own
//! transactional sinks, and an output a test can read back from disk.
//!
//! # How it commits
//!
//! Each sink subtask `s` writes the records of one checkpoint interval to
//! `part-<s>-<n>.inprogress` (opened at the first record after a barrier). At the barrier of
//! checkpoint `id`, [`Sink::pre_commit`] flushes and fsyncs that file and renames it to
//! `part-<s>-<id>.pending`; the state it returns (JSON: the checkpoint id and the names of
//! every pending file not committed yet) goes into the checkpoint. [`Sink::commit`]
//! (checkpoint `id` complete) renames every pending file of a checkpoint `<= id` to its final
//! name `part-<s>-<checkpoint>` (a file already renamed is skipped, so commits are
//! idempotent); the commit at the end of the input also commits the in-progress data. A
//! restored subtask ([`Sink::initialize`] with a state) commits the pending files its
//! checkpoint lists and deletes the output of the failed attempt: its `.inprogress` files,
//! `.pending` files of checkpoints newer than the restored one (they never completed), and
//! final files newer than it (the restore fell back past a newer, unreadable checkpoint, or
//! the end of the input was committed before the failure: their records are written again). A
//! subtask started without a restore (a fresh start, or a restart before any checkpoint
//! completed) deletes all of its `.inprogress` and `.pending` files, because none of them
//! belongs to a complete checkpoint. Only final files are output: [`read_committed`] reads
//! those.
//!
//! Without checkpoints ([`SinkContext::checkpointing`] false) the sink writes through to
//! `part-<s>-0`, created (truncated) when the subtask starts.
//!
//! The renames, fsyncs and clean-ups are the core's two-phase part files
//! ([`weir::sink::staged::StagedFiles`], which the core's exactly-once line files use too);
//! this sink gives them its names ([`part_name`]) and keeps its checkpoint state as JSON.
//!
//! ```
//! use std::time::Duration;
//! use weir_testing::{clear_part_files, read_committed, ExactlyOnce, TwoPhaseFileSink};
//! let dir = std::env::temp_dir().join(format!("weir-part-files-doc-{}", std::process::id()));
//! clear_part_files(&dir).unwrap();
//! let mut cfg = weir::EnvConfig::default();
//! cfg.checkpoint.interval = Some(Duration::from_millis(10));
//! let env = weir::Env::with_config(cfg);
//! let d = dir.clone();
//! env.generate(10_000, |i| i)
//!     .map(|i| i.to_string())
//!     .add_sink("exactly_once", move |cx| TwoPhaseFileSink::lines(&d, cx))
//!     .set_parallelism(2);
//! env.execute("part-files-doc").unwrap();
//! let committed = read_committed(&dir).unwrap();
//! assert_eq!(committed.uncommitted_files, 0);
//! let ids = committed.lines.iter().map(|l| l.parse::<u64>().unwrap());
//! ExactlyOnce::new(0..10_000u64).check(ids).assert_exactly_once();
//! std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::fs::File;
use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use weir::sink::staged::{PartNames, StagedFiles};
use weir::sink::{Sink, SinkContext};
use weir::SinkError;

/// The checkpoint id of the commit a job makes at the end of its input.
pub const FINAL_COMMIT: u64 = weir::checkpoint::FINAL_COMMIT;

/// Kinds of the sink's files: `part-<s>-<n>` is [`PartKind::Final`] (committed output),
/// `part-<s>-<n>.pending` [`PartKind::Pending`] (pre-committed at checkpoint `n`, waiting for it
/// to complete), `part-<s>-<n>.inprogress` [`PartKind::InProgress`] (being written).
pub use weir::sink::staged::PartKind;

/// Parses a file name of the sink: `(subtask, checkpoint, kind)`.
///
/// ```
/// use weir_testing::{parse_part_name, PartKind};
/// assert_eq!(parse_part_name("part-1-12.pending"), Some((1, 12, PartKind::Pending)));
/// assert_eq!(parse_part_name("part-10-3"), Some((10, 3, PartKind::Final)));
/// assert_eq!(parse_part_name("part-sink-0"), None);
/// ```
pub fn parse_part_name(name: &str) -> Option<(usize, u64, PartKind)> {
    let rest = name.strip_prefix("part-")?;
    let (stem, kind) = if let Some(s) = rest.strip_suffix(".pending") {
        (s, PartKind::Pending)
    } else if let Some(s) = rest.strip_suffix(".inprogress") {
        (s, PartKind::InProgress)
    } else {
        (rest, PartKind::Final)
    };
    let (s, n) = stem.split_once('-')?;
    let digits = |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
    if !digits(s) || !digits(n) {
        return None;
    }
    Some((s.parse().ok()?, n.parse().ok()?, kind))
}

/// The file name of subtask `subtask`'s file of checkpoint `checkpoint`.
///
/// ```
/// use weir_testing::{part_name, PartKind};
/// assert_eq!(part_name(1, 12, PartKind::Pending), "part-1-12.pending");
/// assert_eq!(part_name(0, 3, PartKind::Final), "part-0-3");
/// ```
pub fn part_name(subtask: usize, checkpoint: u64, kind: PartKind) -> String {
    match kind {
        PartKind::Final => format!("part-{subtask}-{checkpoint}"),
        PartKind::Pending => format!("part-{subtask}-{checkpoint}.pending"),
        PartKind::InProgress => format!("part-{subtask}-{checkpoint}.inprogress"),
    }
}

/// The state a subtask puts in a checkpoint.
#[derive(Debug, Serialize, Deserialize)]
struct SinkState {
    checkpoint: u64,
    subtask: usize,
    pending: Vec<String>,
}

/// The file names of one subtask of a [`TwoPhaseFileSink`] ([`part_name`]).
struct SubtaskNames {
    subtask: usize,
}

impl PartNames for SubtaskNames {
    fn in_progress(&self, n: u64) -> String {
        part_name(self.subtask, n, PartKind::InProgress)
    }
    fn pending(&self, checkpoint: u64) -> String {
        part_name(self.subtask, checkpoint, PartKind::Pending)
    }
    fn committed(&self, checkpoint: u64) -> String {
        part_name(self.subtask, checkpoint, PartKind::Final)
    }
    fn parse(&self, name: &str) -> Option<(u64, PartKind)> {
        parse_part_name(name)
            .filter(|(s, _, _)| *s == self.subtask)
            .map(|(_, n, kind)| (n, kind))
    }
}

/// Encodes one record as the bytes of its line (without the newline).
pub type Encode<T> = fn(&T, &mut Vec<u8>);

/// Encodes a `String` record as its line.
///
/// ```
/// let mut line = Vec::new();
/// weir_testing::encode_string(&"1,a".to_string(), &mut line);
/// assert_eq!(line, b"1,a");
/// ```
pub fn encode_string(s: &String, out: &mut Vec<u8>) {
    out.extend_from_slice(s.as_bytes());
}

/// Encodes a record as its `Display` form.
///
/// ```
/// let mut line = Vec::new();
/// weir_testing::encode_display(&42u64, &mut line);
/// assert_eq!(line, b"42");
/// ```
pub fn encode_display<T: std::fmt::Display>(r: &T, out: &mut Vec<u8>) {
    // Writing into a `Vec` cannot fail.
    let _ = write!(out, "{r}");
}

/// Encodes a record as JSON (a record that does not serialize is written as nothing).
///
/// ```
/// let mut line = Vec::new();
/// weir_testing::encode_json(&(1u64, "a"), &mut line);
/// assert_eq!(line, br#"[1,"a"]"#);
/// ```
pub fn encode_json<T: Serialize>(r: &T, out: &mut Vec<u8>) {
    let _ = serde_json::to_writer(out, r);
}

/// What one subtask of a [`TwoPhaseFileSink`] did to its files so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartFileStats {
    /// Pending files it renamed to their final names (by a commit or a restore).
    pub committed_files: u64,
    /// Of those, the ones a restore committed.
    pub committed_by_restore: u64,
    /// Uncommitted files of failed attempts it deleted.
    pub discarded_files: u64,
    /// The checkpoint it was restored from, if any.
    pub restored_checkpoint: Option<u64>,
}

/// One subtask of the exactly-once part-file sink (see the module documentation). Make one per
/// subtask in the sink factory: [`create`](Self::create) (any record type with an
/// [`Encode`]) or [`lines`](Self::lines) (`String` records).
///
/// ```
/// use weir_testing::{encode_display, read_committed, TwoPhaseFileSink};
/// let dir = std::env::temp_dir().join(format!("weir-two-phase-doc-{}", std::process::id()));
/// let env = weir::Env::new(); // no checkpoints: written through to `part-<s>-0`
/// let d = dir.clone();
/// env.generate(100, |i| i)
///     .add_sink("files", move |cx| TwoPhaseFileSink::create(&d, cx, encode_display::<u64>));
/// env.execute("two-phase-doc").unwrap();
/// assert_eq!(read_committed(&dir).unwrap().lines.len(), 100);
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub struct TwoPhaseFileSink<T> {
    /// The staged files (with checkpoints).
    files: StagedFiles<SubtaskNames>,
    subtask: usize,
    transactional: bool,
    encode: Encode<T>,
    /// Without checkpoints: `part-<s>-0`, written through.
    through: Option<BufWriter<File>>,
    /// The checkpoint the next in-progress file most likely belongs to (only its name).
    next_checkpoint: u64,
    /// Leftovers of earlier attempts were dealt with (by `initialize`, or at the first call).
    initialized: bool,
    committed_by_restore: u64,
    restored_checkpoint: Option<u64>,
    line: Vec<u8>,
}

impl<T> std::fmt::Debug for TwoPhaseFileSink<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TwoPhaseFileSink")
            .field("dir", &self.files.dir())
            .field("subtask", &self.subtask)
            .field("transactional", &self.transactional)
            .field("pending", self.files.pending())
            .field("stats", &self.stats())
            .finish()
    }
}

impl TwoPhaseFileSink<String> {
    /// The subtask `cx` of a sink writing `String` records as lines into `dir`.
    ///
    /// ```
    /// use weir_testing::{read_committed, TwoPhaseFileSink};
    /// let dir = std::env::temp_dir().join(format!("weir-lines-doc-{}", std::process::id()));
    /// let env = weir::Env::new();
    /// let d = dir.clone();
    /// env.from_collection(vec!["a".to_string(), "b".to_string()])
    ///     .add_sink("lines", move |cx| TwoPhaseFileSink::lines(&d, cx));
    /// env.execute("lines-doc").unwrap();
    /// assert_eq!(read_committed(&dir).unwrap().lines, ["a", "b"]);
    /// std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    pub fn lines(dir: &Path, cx: &SinkContext) -> Result<Self, SinkError> {
        Self::create(dir, cx, encode_string)
    }
}

impl<T> TwoPhaseFileSink<T> {
    /// The subtask `cx` of a sink writing into `dir` (created if need be) the lines `encode`
    /// makes of its records.
    ///
    /// ```
    /// use weir_testing::{encode_json, TwoPhaseFileSink};
    /// let dir = std::env::temp_dir().join(format!("weir-create-doc-{}", std::process::id()));
    /// let env = weir::Env::new();
    /// let d = dir.clone();
    /// env.generate(10, |i| (i, i * i))
    ///     .add_sink("json", move |cx| TwoPhaseFileSink::create(&d, cx, encode_json::<(u64, u64)>));
    /// env.execute("create-doc").unwrap();
    /// let lines = weir_testing::read_committed(&dir).unwrap().lines;
    /// assert_eq!(lines[3], "[3,9]");
    /// std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    pub fn create(dir: &Path, cx: &SinkContext, encode: Encode<T>) -> Result<Self, SinkError> {
        let names = SubtaskNames {
            subtask: cx.subtask,
        };
        let mut sink = TwoPhaseFileSink {
            files: StagedFiles::create(dir, names)?,
            subtask: cx.subtask,
            transactional: cx.checkpointing,
            encode,
            through: None,
            next_checkpoint: 1,
            initialized: !cx.checkpointing,
            committed_by_restore: 0,
            restored_checkpoint: None,
            line: Vec::with_capacity(256),
        };
        if sink.transactional {
            // In-progress data is never part of a complete checkpoint: it is the output of a
            // failed attempt (the job replays it).
            sink.files.discard(|_, kind| kind == PartKind::InProgress)?;
        } else {
            let path = sink.through_path();
            let f = File::create(&path).map_err(|source| SinkError::Io { path, source })?;
            sink.through = Some(BufWriter::with_capacity(256 * 1024, f));
        }
        Ok(sink)
    }

    /// What this subtask did to its files so far.
    ///
    /// ```
    /// use weir::sink::SinkContext;
    /// use weir_testing::TwoPhaseFileSink;
    /// let dir = std::env::temp_dir().join(format!("weir-stats-doc-{}", std::process::id()));
    /// let cx = SinkContext { uid: "sink".into(), subtask: 0, parallelism: 1, checkpointing: true };
    /// let sink = TwoPhaseFileSink::lines(&dir, &cx).unwrap();
    /// assert_eq!(sink.stats().committed_files, 0);
    /// std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    pub fn stats(&self) -> PartFileStats {
        PartFileStats {
            committed_files: self.files.committed_files(),
            committed_by_restore: self.committed_by_restore,
            discarded_files: self.files.discarded_files(),
            restored_checkpoint: self.restored_checkpoint,
        }
    }

    /// The file written through without checkpoints.
    fn through_path(&self) -> PathBuf {
        self.files
            .dir()
            .join(part_name(self.subtask, 0, PartKind::Final))
    }

    /// Without a restore, no pre-committed file belongs to a complete checkpoint.
    fn ensure_initialized(&mut self) -> Result<(), SinkError> {
        if !self.initialized {
            self.initialized = true;
            self.files.discard(|_, kind| kind == PartKind::Pending)?;
        }
        Ok(())
    }

    /// The end of the input: the in-progress data becomes pending under an unused number,
    /// committed with the rest.
    fn stage_last(&mut self) -> Result<(), SinkError> {
        let Some(n) = self.files.close_current()? else {
            return Ok(());
        };
        let mut k = n;
        while self.files.pending().contains_key(&k)
            || self
                .files
                .dir()
                .join(part_name(self.subtask, k, PartKind::Final))
                .exists()
        {
            k += 1;
        }
        let pending = part_name(self.subtask, k, PartKind::Pending);
        self.files
            .rename(&part_name(self.subtask, n, PartKind::InProgress), &pending)?;
        self.files.add_pending(k, pending);
        Ok(())
    }
}

impl<T: Send + 'static> Sink<T> for TwoPhaseFileSink<T> {
    fn write_batch(&mut self, batch: &mut Vec<T>) -> Result<(), SinkError> {
        if batch.is_empty() {
            return Ok(());
        }
        self.ensure_initialized()?;
        let out = match self.through.as_mut() {
            Some(out) => out,
            None => self.files.writer(self.next_checkpoint)?,
        };
        let mut result = Ok(());
        for r in batch.drain(..) {
            self.line.clear();
            (self.encode)(&r, &mut self.line);
            self.line.push(b'\n');
            if let Err(e) = out.write_all(&self.line) {
                result = Err(e);
                break;
            }
        }
        result.map_err(|source| SinkError::Io {
            path: if self.through.is_some() {
                self.through_path()
            } else {
                self.files.current_path()
            },
            source,
        })
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        self.ensure_initialized()?;
        if !self.transactional {
            if let Some(mut out) = self.through.take() {
                let r = out.flush().and_then(|()| out.get_ref().sync_all());
                r.map_err(|source| SinkError::Io {
                    path: self.through_path(),
                    source,
                })?;
            }
            return Ok(());
        }
        // Kept in progress: the final commit makes it final. Made durable now.
        self.files.sync_current()
    }

    fn pre_commit(&mut self, checkpoint: u64) -> Result<Option<Vec<u8>>, SinkError> {
        if !self.transactional {
            if let Some(out) = self.through.as_mut() {
                let r = out.flush();
                r.map_err(|source| SinkError::Io {
                    path: self.through_path(),
                    source,
                })?;
            }
            return Ok(None);
        }
        self.ensure_initialized()?;
        self.files.pre_commit(checkpoint)?;
        self.next_checkpoint = checkpoint + 1;
        let state = SinkState {
            checkpoint,
            subtask: self.subtask,
            pending: self.files.pending().values().cloned().collect(),
        };
        serde_json::to_vec(&state)
            .map(Some)
            .map_err(|e| SinkError::Encode {
                path: self.files.dir().to_owned(),
                message: e.to_string(),
            })
    }

    fn commit(&mut self, checkpoint: u64) -> Result<(), SinkError> {
        if !self.transactional {
            return Ok(());
        }
        self.ensure_initialized()?;
        if checkpoint == FINAL_COMMIT {
            self.stage_last()?;
        }
        self.files.commit_up_to(checkpoint)
    }

    fn initialize(&mut self, restored: Option<&[u8]>) -> Result<(), SinkError> {
        let Some(state) = restored else {
            // A fresh start: drop what a failed earlier attempt left.
            return self.ensure_initialized();
        };
        let state: SinkState = serde_json::from_slice(state).map_err(|e| SinkError::Encode {
            path: self.files.dir().to_owned(),
            message: format!("bad sink state: {e}"),
        })?;
        // The restored checkpoint is complete: what it pre-committed is committed now.
        for name in &state.pending {
            let Some((_, n, PartKind::Pending)) = parse_part_name(name) else {
                return Err(SinkError::Encode {
                    path: self.files.dir().join(name),
                    message: "not a pending file name".into(),
                });
            };
            if self.files.commit_pending(n, name)? {
                self.committed_by_restore += 1;
            }
        }
        // Pre-committed for checkpoints after the restored one: they never completed. Final
        // files after it exist when the restore fell back past a newer complete checkpoint
        // (unreadable) or the end of the input was committed before the failure: the job
        // writes their records again, so they are taken back.
        let restored = state.checkpoint;
        let retracted = self
            .files
            .own_files()?
            .iter()
            .filter(|(n, kind, _)| *kind == PartKind::Final && *n > restored)
            .count();
        if retracted > 0 {
            tracing::warn!(dir = %self.files.dir().display(), subtask = self.subtask, restored, files = retracted, "deleting output committed after the restored checkpoint: it is written again");
        }
        self.files
            .discard(|n, kind| kind == PartKind::InProgress || n > restored)?;
        self.files.sync_dir()?;
        self.initialized = true;
        self.next_checkpoint = restored + 1;
        self.restored_checkpoint = Some(restored);
        Ok(())
    }
}

/// Makes `dir` and deletes the sink's files (`part-<s>-<n>[.pending|.inprogress]`) an earlier
/// run left there; other files are left alone. The number deleted.
///
/// ```
/// let dir = std::env::temp_dir().join(format!("weir-clear-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// std::fs::write(dir.join("part-0-1.pending"), "x").unwrap();
/// std::fs::write(dir.join("notes.txt"), "kept").unwrap();
/// assert_eq!(weir_testing::clear_part_files(&dir).unwrap(), 1);
/// assert!(dir.join("notes.txt").exists());
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn clear_part_files(dir: &Path) -> std::io::Result<usize> {
    std::fs::create_dir_all(dir)?;
    let mut n = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if parse_part_name(&name.to_string_lossy()).is_some() && entry.file_type()?.is_file() {
            std::fs::remove_file(entry.path())?;
            n += 1;
        }
    }
    Ok(n)
}

/// The committed output of a sink directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Committed {
    /// Every line of the final files (by subtask, then checkpoint).
    pub lines: Vec<String>,
    /// Final files read.
    pub files: usize,
    /// `.pending` and `.inprogress` files left (none after a job that finished).
    pub uncommitted_files: usize,
}

/// Reads the final files of `dir` (by subtask, then checkpoint); nothing if `dir` does not
/// exist.
///
/// ```
/// let dir = std::env::temp_dir().join(format!("weir-read-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// std::fs::write(dir.join("part-0-2"), "b\n").unwrap();
/// std::fs::write(dir.join("part-0-1"), "a\n").unwrap();
/// std::fs::write(dir.join("part-0-3.pending"), "c\n").unwrap();
/// let c = weir_testing::read_committed(&dir).unwrap();
/// assert_eq!((c.lines, c.files, c.uncommitted_files), (vec!["a".into(), "b".into()], 2, 1));
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn read_committed(dir: &Path) -> std::io::Result<Committed> {
    let mut out = Committed::default();
    if !dir.exists() {
        return Ok(out);
    }
    let mut finals = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        match parse_part_name(&name) {
            Some((s, n, PartKind::Final)) => finals.push((s, n, entry.path())),
            Some(_) => out.uncommitted_files += 1,
            None => {}
        }
    }
    finals.sort();
    out.files = finals.len();
    for (_, _, path) in finals {
        for line in std::io::BufReader::new(File::open(path)?).lines() {
            out.lines.push(line?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("weir-part-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn cx(subtask: usize) -> SinkContext {
        SinkContext {
            uid: "sink".into(),
            subtask,
            parallelism: 2,
            checkpointing: true,
        }
    }

    fn write(s: &mut TwoPhaseFileSink<String>, lines: &[&str]) {
        let mut batch: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
        s.write_batch(&mut batch).unwrap();
    }

    fn names(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn restore_commits_the_checkpoint_and_drops_the_failed_attempt() {
        let d = dir("restore");
        let mut a = TwoPhaseFileSink::lines(&d, &cx(0)).unwrap();
        write(&mut a, &["1,a", "2,b"]);
        let state = a.pre_commit(1).unwrap().unwrap();
        write(&mut a, &["3,c"]);
        a.pre_commit(2).unwrap(); // checkpoint 2 never completes
        write(&mut a, &["4,d"]);
        drop(a); // the failure
        assert_eq!(
            names(&d),
            [
                "part-0-1.pending",
                "part-0-2.pending",
                "part-0-3.inprogress"
            ]
        );
        let mut b = TwoPhaseFileSink::lines(&d, &cx(0)).unwrap();
        b.initialize(Some(&state)).unwrap();
        assert_eq!(names(&d), ["part-0-1"]);
        assert_eq!(
            b.stats(),
            PartFileStats {
                committed_files: 1,
                committed_by_restore: 1,
                discarded_files: 2,
                restored_checkpoint: Some(1),
            }
        );
        b.commit(1).unwrap(); // a late notification is harmless
        write(&mut b, &["3,c", "4,d"]);
        b.finish().unwrap();
        b.commit(FINAL_COMMIT).unwrap();
        let c = read_committed(&d).unwrap();
        assert_eq!(c.lines, ["1,a", "2,b", "3,c", "4,d"]);
        assert_eq!(c.uncommitted_files, 0);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_restart_without_a_checkpoint_starts_clean_and_leaves_other_subtasks_alone() {
        let d = dir("fresh");
        let mut a = TwoPhaseFileSink::lines(&d, &cx(0)).unwrap();
        let mut other = TwoPhaseFileSink::lines(&d, &cx(1)).unwrap();
        write(&mut a, &["1,a"]);
        a.pre_commit(1).unwrap();
        write(&mut a, &["2,b"]);
        write(&mut other, &["9,z"]);
        other.pre_commit(1).unwrap();
        drop(a);
        let mut b = TwoPhaseFileSink::lines(&d, &cx(0)).unwrap();
        write(&mut b, &["1,a", "2,b"]);
        assert_eq!(
            names(&d),
            ["part-0-1.inprogress", "part-1-1.pending"],
            "the failed attempt's files are gone, subtask 1's stay"
        );
        b.pre_commit(1).unwrap();
        b.commit(1).unwrap();
        other.commit(1).unwrap();
        assert_eq!(read_committed(&d).unwrap().lines, ["1,a", "2,b", "9,z"]);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
