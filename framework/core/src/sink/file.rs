//! Line files: each sink subtask writes `part-{uid}-{subtask}` in a directory, one line per
//! record, as text (`Display`, or a formatter the user gives) or JSON; the exactly-once
//! variants stage each checkpoint interval and commit it when the checkpoint completes.
//!
//! With checkpoints, a part file's length is part of the checkpoint: a restored job cuts the
//! file back to that length and appends, so after recovery the file holds every record once
//! (records written after the checkpoint and before a failure are visible until then: the
//! guarantee is exactly-once on completion, not transactional visibility).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::staged::{PartKind, PartNames, StagedFiles};
use super::{Sink, SinkContext};
use crate::error::SinkError;

/// The open part file of one sink subtask.
pub(crate) struct PartFile {
    path: PathBuf,
    out: BufWriter<File>,
}

impl PartFile {
    pub(crate) fn create(dir: &Path, cx: &SinkContext) -> Result<Self, SinkError> {
        std::fs::create_dir_all(dir).map_err(|source| SinkError::Io {
            path: dir.to_owned(),
            source,
        })?;
        let path = dir.join(format!("part-{}-{}", cx.uid, cx.subtask));
        // Not truncated yet: `initialize` decides (fresh start, or resume at a length).
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|source| SinkError::Io {
                path: path.clone(),
                source,
            })?;
        Ok(PartFile {
            path,
            out: BufWriter::with_capacity(256 * 1024, f),
        })
    }

    /// Truncates to `len` (0 on a fresh start) and positions at the end.
    fn resume_at(&mut self, len: u64) -> Result<(), SinkError> {
        use std::io::{Seek, SeekFrom};
        self.out.flush().map_err(|e| self.io(e))?;
        let f = self.out.get_mut();
        f.set_len(len)
            .and_then(|()| f.seek(SeekFrom::Start(len)).map(|_| ()))
            .map_err(|e| self.io(e))
    }

    /// Flushes and fsyncs; returns the length, the state of a checkpoint.
    fn checkpoint(&mut self) -> Result<Option<Vec<u8>>, SinkError> {
        self.out.flush().map_err(|e| self.io(e))?;
        self.out.get_ref().sync_data().map_err(|e| self.io(e))?;
        let len = self.out.get_ref().metadata().map_err(|e| self.io(e))?.len();
        crate::checkpoint::encode(&len)
            .map(Some)
            .map_err(|message| SinkError::Encode {
                path: self.path.clone(),
                message,
            })
    }

    fn initialize(&mut self, restored: Option<&[u8]>) -> Result<(), SinkError> {
        let len = match restored {
            None => 0,
            Some(state) => {
                crate::checkpoint::decode::<u64>(state).map_err(|message| SinkError::Encode {
                    path: self.path.clone(),
                    message,
                })?
            }
        };
        self.resume_at(len)
    }

    fn io(&self, source: std::io::Error) -> SinkError {
        SinkError::Io {
            path: self.path.clone(),
            source,
        }
    }

    fn close(&mut self) -> Result<(), SinkError> {
        self.out.flush().map_err(|e| self.io(e))?;
        self.out.get_ref().sync_all().map_err(|e| self.io(e))
    }
}

/// Why a record could not be written as a line.
pub(crate) enum LineError {
    Io(std::io::Error),
    Encode(String),
}

/// How a line sink turns a record into one line: its `Display` form ([`DisplayLines`]), its
/// JSON ([`JsonLines`]), or what a user's formatter writes ([`FormatLines`]). Writes straight
/// into the file's buffer, allocating nothing per record.
pub(crate) trait LineFormat<T>: Send + 'static {
    /// Writes `r` and its newline.
    fn write_line<W: Write>(&mut self, r: &T, w: &mut W) -> Result<(), LineError>;
}

/// A record's `Display` form.
pub(crate) struct DisplayLines;

impl<T: std::fmt::Display> LineFormat<T> for DisplayLines {
    #[inline]
    fn write_line<W: Write>(&mut self, r: &T, w: &mut W) -> Result<(), LineError> {
        writeln!(w, "{r}").map_err(LineError::Io)
    }
}

/// A record as one line of JSON.
pub(crate) struct JsonLines;

impl<T: Serialize> LineFormat<T> for JsonLines {
    #[inline]
    fn write_line<W: Write>(&mut self, r: &T, w: &mut W) -> Result<(), LineError> {
        serde_json::to_writer(&mut *w, r).map_err(|e| {
            if e.is_io() {
                LineError::Io(e.into())
            } else {
                LineError::Encode(e.to_string())
            }
        })?;
        w.write_all(b"\n").map_err(LineError::Io)
    }
}

/// What a user's formatter appends to a reused buffer (cleared before each record).
pub(crate) struct FormatLines<F> {
    f: std::sync::Arc<F>,
    buf: String,
}

impl<F> FormatLines<F> {
    pub(crate) fn new(f: std::sync::Arc<F>) -> Self {
        FormatLines {
            f,
            buf: String::new(),
        }
    }
}

impl<T, F> LineFormat<T> for FormatLines<F>
where
    F: Fn(&T, &mut String) -> std::fmt::Result + Send + Sync + 'static,
{
    #[inline]
    fn write_line<W: Write>(&mut self, r: &T, w: &mut W) -> Result<(), LineError> {
        self.buf.clear();
        (self.f)(r, &mut self.buf)
            .map_err(|std::fmt::Error| LineError::Encode("the record's formatter failed".into()))?;
        self.buf.push('\n');
        w.write_all(self.buf.as_bytes()).map_err(LineError::Io)
    }
}

/// Writes each record as a line per its [`LineFormat`], through (at-least-once; exactly-once
/// on completion with checkpoints, see the module doc).
pub(crate) struct LineFileSink<L> {
    file: PartFile,
    format: L,
    /// The lines of the batch being written (reused).
    lines: Vec<u8>,
}

impl<L> LineFileSink<L> {
    pub(crate) fn create(dir: &Path, cx: &SinkContext, format: L) -> Result<Self, SinkError> {
        Ok(LineFileSink {
            file: PartFile::create(dir, cx)?,
            format,
            lines: Vec::new(),
        })
    }
}

/// The capacity the batch buffer of a line sink shrinks back to after a larger batch.
const KEPT_LINES_BYTES: usize = 1024 * 1024;

/// Formats every record of `batch` as a line into `lines` (cleared first), leaving `batch`
/// empty: a sink then writes the whole batch at once. Of a record that cannot be formatted,
/// the batch is not written at all (the job fails).
fn format_batch<T, L: LineFormat<T>>(
    format: &mut L,
    batch: &mut Vec<T>,
    lines: &mut Vec<u8>,
) -> Result<(), LineError> {
    if lines.capacity() > KEPT_LINES_BYTES {
        *lines = Vec::new();
    }
    lines.clear();
    for r in batch.iter() {
        format.write_line(r, lines)?;
    }
    batch.clear();
    Ok(())
}

impl<T: Send + 'static, L: LineFormat<T>> Sink<T> for LineFileSink<L> {
    fn write_batch(&mut self, batch: &mut Vec<T>) -> Result<(), SinkError> {
        format_batch(&mut self.format, batch, &mut self.lines)
            .and_then(|()| self.file.out.write_all(&self.lines).map_err(LineError::Io))
            .map_err(|e| line_error(&self.file.path, e))
    }
    fn finish(&mut self) -> Result<(), SinkError> {
        self.file.close()
    }
    fn pre_commit(&mut self, _checkpoint: u64) -> Result<Option<Vec<u8>>, SinkError> {
        self.file.checkpoint()
    }
    fn initialize(&mut self, restored: Option<&[u8]>) -> Result<(), SinkError> {
        self.file.initialize(restored)
    }
}

/// The sink error of a line that could not be written to `path`.
fn line_error(path: &Path, e: LineError) -> SinkError {
    match e {
        LineError::Io(source) => SinkError::Io {
            path: path.to_owned(),
            source,
        },
        LineError::Encode(message) => SinkError::Encode {
            path: path.to_owned(),
            message,
        },
    }
}

/// Exactly-once line files (two-phase commit), each record a line per its [`LineFormat`],
/// on the two-phase part files of [`super::staged`] named by [`LineNames`].
/// Each checkpoint interval is written to a hidden staging file
/// `.{uid}-{subtask}-{seq}.inprogress`; at the checkpoint's barrier it is fsynced and renamed
/// `.{uid}-{subtask}-{checkpoint}.pending` and the directory is fsynced (its name goes into the
/// checkpoint); when the checkpoint completes it is renamed to its visible name
/// `part-{uid}-{subtask}-{checkpoint}` and the directory fsynced once for the commit. Commits
/// are idempotent (a file already renamed is skipped). A restored subtask commits the pending
/// files its checkpoint lists, deletes the failed attempt's staging files, and deletes the
/// visible files of checkpoints after the restored one (a fall-back past a corrupted
/// checkpoint: the job writes their records again); a fresh start deletes every staging file
/// of its subtask. At the end of the input the last interval becomes
/// `part-{uid}-{subtask}-final`. Without checkpoints it writes `part-{uid}-{subtask}-final`
/// directly at the end.
pub(crate) struct StagedLineSink<L> {
    format: L,
    files: StagedFiles<LineNames>,
    /// The number of the next staging file.
    seq: u64,
    /// The lines of the batch being written (reused).
    lines: Vec<u8>,
}

/// The file names of one subtask of a [`StagedLineSink`]: `prefix` is `{uid}-{subtask}`.
pub(crate) struct LineNames {
    prefix: String,
}

impl LineNames {
    /// The visible file of the end of the input.
    fn last(&self) -> String {
        format!("part-{}-final", self.prefix)
    }
}

impl PartNames for LineNames {
    fn in_progress(&self, n: u64) -> String {
        format!(".{}-{n}.inprogress", self.prefix)
    }
    fn pending(&self, checkpoint: u64) -> String {
        format!(".{}-{checkpoint}.pending", self.prefix)
    }
    fn committed(&self, checkpoint: u64) -> String {
        format!("part-{}-{checkpoint}", self.prefix)
    }
    /// Staging files by their number; visible ones by their checkpoint, the end of the
    /// input's (`-final`) as [`FINAL_COMMIT`](crate::checkpoint::FINAL_COMMIT).
    fn parse(&self, name: &str) -> Option<(u64, PartKind)> {
        if let Some(tail) = name
            .strip_prefix('.')
            .and_then(|n| n.strip_prefix(self.prefix.as_str()))
            .and_then(|n| n.strip_prefix('-'))
        {
            let (n, kind) = if let Some(n) = tail.strip_suffix(".inprogress") {
                (n, PartKind::InProgress)
            } else {
                (tail.strip_suffix(".pending")?, PartKind::Pending)
            };
            return Some((n.parse().ok()?, kind));
        }
        let tail = name
            .strip_prefix("part-")?
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix('-')?;
        if tail == "final" {
            return Some((crate::checkpoint::FINAL_COMMIT, PartKind::Final));
        }
        Some((tail.parse().ok()?, PartKind::Final))
    }
}

impl<L> StagedLineSink<L> {
    pub(crate) fn create(dir: &Path, cx: &SinkContext, format: L) -> Result<Self, SinkError> {
        let names = LineNames {
            prefix: format!("{}-{}", cx.uid, cx.subtask),
        };
        Ok(StagedLineSink {
            format,
            files: StagedFiles::create(dir, names)?,
            seq: 0,
            lines: Vec::new(),
        })
    }

    /// Deletes this subtask's visible files of checkpoints after `restored` (and of the end
    /// of the input): a restore of `restored` writes their records again.
    fn retract_after(&mut self, restored: u64) -> Result<(), SinkError> {
        let deleted = self
            .files
            .discard(|n, kind| kind == PartKind::Final && n > restored)?;
        for name in deleted {
            tracing::warn!(file = %self.files.dir().join(name).display(), restored, "deleting output committed after the restored checkpoint: it is written again");
        }
        Ok(())
    }

    /// Deletes this subtask's staging files.
    fn clean(&mut self) -> Result<(), SinkError> {
        self.files.discard(|_, kind| kind != PartKind::Final)?;
        Ok(())
    }

    fn encode_state(&self, state: &StagedState) -> Result<Option<Vec<u8>>, SinkError> {
        crate::checkpoint::encode(state)
            .map(Some)
            .map_err(|message| SinkError::Encode {
                path: self.files.dir().to_owned(),
                message,
            })
    }
}

impl<T: Send + 'static, L: LineFormat<T>> Sink<T> for StagedLineSink<L> {
    fn write_batch(&mut self, batch: &mut Vec<T>) -> Result<(), SinkError> {
        // A staging file opened now takes the next number.
        let n = self.seq;
        if self.files.current().is_none() {
            self.seq += 1;
        }
        let w = self.files.writer(n)?;
        let written = format_batch(&mut self.format, batch, &mut self.lines)
            .and_then(|()| w.write_all(&self.lines).map_err(LineError::Io));
        written.map_err(|e| line_error(&self.files.current_path(), e))
    }

    fn pre_commit(&mut self, checkpoint: u64) -> Result<Option<Vec<u8>>, SinkError> {
        self.files.pre_commit(checkpoint)?;
        let state = StagedState {
            checkpoint: Some(checkpoint),
            pending: self
                .files
                .pending()
                .iter()
                .map(|(k, v)| (*k, v.clone()))
                .collect(),
        };
        self.encode_state(&state)
    }

    fn commit(&mut self, checkpoint: u64) -> Result<(), SinkError> {
        if checkpoint == crate::checkpoint::FINAL_COMMIT {
            let last = self.files.names().last();
            self.files.close_as(&last)?;
        }
        self.files.commit_up_to(checkpoint)
    }

    fn initialize(&mut self, restored: Option<&[u8]>) -> Result<(), SinkError> {
        let Some(state) = restored else {
            // Nothing staged by an earlier attempt belongs to a complete checkpoint.
            self.clean()?;
            return self.files.sync_dir();
        };
        let state = StagedState::decode(state).map_err(|message| SinkError::Encode {
            path: self.files.dir().to_owned(),
            message,
        })?;
        for (k, name) in state.pending {
            self.files.add_pending(k, name);
        }
        // The restored checkpoint is complete: what it lists is committed; the rest of the
        // failed attempt's staging is dropped, and so is what was committed after it.
        self.files.commit_up_to(u64::MAX - 1)?;
        if let Some(restored) = state.checkpoint {
            self.retract_after(restored)?;
        }
        self.clean()?;
        self.files.sync_dir()
    }
}

/// What a [`StagedLineSink`] subtask puts in a checkpoint.
#[derive(serde::Serialize, serde::Deserialize)]
struct StagedState {
    /// The checkpoint (absent in the state of older versions, a bare list of pending files).
    checkpoint: Option<u64>,
    /// Pending files not committed yet, by checkpoint.
    pending: Vec<(u64, String)>,
}

impl StagedState {
    fn decode(bytes: &[u8]) -> Result<StagedState, String> {
        crate::checkpoint::decode::<StagedState>(bytes).or_else(|e| {
            crate::checkpoint::decode::<Vec<(u64, String)>>(bytes)
                .map(|pending| StagedState {
                    checkpoint: None,
                    pending,
                })
                .map_err(|_| e)
        })
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;

    fn cx() -> SinkContext {
        SinkContext {
            uid: "out".into(),
            subtask: 0,
            parallelism: 1,
            checkpointing: true,
        }
    }

    fn visible(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn staged_files_commit_on_notify_or_on_restore_and_a_fresh_start_cleans_up() {
        let dir = std::env::temp_dir().join(format!("weir-staged-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut a = StagedLineSink::create(&dir, &cx(), DisplayLines).unwrap();
        Sink::<u32>::initialize(&mut a, None).unwrap();
        a.write_batch(&mut vec![1u32, 2]).unwrap();
        let s1 = Sink::<u32>::pre_commit(&mut a, 1).unwrap().unwrap();
        a.write_batch(&mut vec![3u32]).unwrap();
        // Nothing is visible before a commit.
        assert!(visible(&dir).iter().all(|n| n.starts_with('.')));
        Sink::<u32>::commit(&mut a, 1).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("part-out-0-1")).unwrap(),
            "1\n2\n"
        );
        // Checkpoint 2 is pre-committed, then the subtask dies before its notification.
        a.write_batch(&mut vec![4u32]).unwrap();
        let s2 = Sink::<u32>::pre_commit(&mut a, 2).unwrap().unwrap();
        a.write_batch(&mut vec![5u32]).unwrap();
        drop(a);
        // Restored from checkpoint 2: its pending file is committed, the rest dropped.
        let mut b = StagedLineSink::create(&dir, &cx(), DisplayLines).unwrap();
        Sink::<u32>::initialize(&mut b, Some(&s2)).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("part-out-0-2")).unwrap(),
            "3\n4\n"
        );
        assert_eq!(visible(&dir), vec!["part-out-0-1", "part-out-0-2"]);
        // Committing again (a late notification, or restoring checkpoint 2 again) changes
        // nothing.
        Sink::<u32>::commit(&mut b, 2).unwrap();
        Sink::<u32>::initialize(&mut b, Some(&s2)).unwrap();
        assert_eq!(visible(&dir), vec!["part-out-0-1", "part-out-0-2"]);
        // Falling back to checkpoint 1 (checkpoint 2 unreadable) takes back what was
        // committed after it: the job writes those records again.
        let kept = std::fs::read(dir.join("part-out-0-2")).unwrap();
        Sink::<u32>::initialize(&mut b, Some(&s1)).unwrap();
        assert_eq!(visible(&dir), vec!["part-out-0-1"]);
        std::fs::write(dir.join("part-out-0-2"), kept).unwrap();
        // The state of an older version (a bare list of pending files) still restores.
        let old = crate::checkpoint::encode(&Vec::<(u64, String)>::new()).unwrap();
        Sink::<u32>::initialize(&mut b, Some(&old)).unwrap();
        assert_eq!(visible(&dir), vec!["part-out-0-1", "part-out-0-2"]);
        // A fresh start deletes staging left by a failed attempt.
        b.write_batch(&mut vec![6u32]).unwrap();
        drop(b);
        let mut c = StagedLineSink::create(&dir, &cx(), DisplayLines).unwrap();
        Sink::<u32>::initialize(&mut c, None).unwrap();
        assert_eq!(visible(&dir), vec!["part-out-0-1", "part-out-0-2"]);
        // The end of the input commits the last interval.
        c.write_batch(&mut vec![7u32]).unwrap();
        Sink::<u32>::commit(&mut c, crate::checkpoint::FINAL_COMMIT).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("part-out-0-final")).unwrap(),
            "7\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
