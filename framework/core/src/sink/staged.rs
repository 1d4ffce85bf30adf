//! Two-phase part files: the file side of an exactly-once file sink, for one sink subtask.
//!
//! [`StagedFiles`] owns the protocol and leaves the names and the checkpoint state to the sink
//! that uses it. A checkpoint interval is written to a staging file ([`PartKind::InProgress`]);
//! at a checkpoint's barrier it is flushed, fsynced and renamed to a pending file of that
//! checkpoint ([`PartKind::Pending`]) and the directory fsynced ([`StagedFiles::pre_commit`]);
//! when a checkpoint completes, the pending files up to it are renamed to their committed names
//! ([`PartKind::Final`]) with one directory fsync ([`StagedFiles::commit_up_to`]). Commits are
//! idempotent: a pending file already renamed is skipped, and one that is neither pending nor
//! committed is an error (its records are lost). A restore commits what its checkpoint lists
//! and deletes the rest of the failed attempt's files ([`StagedFiles::discard`]).
//!
//! Its users: the core's exactly-once line files (`DataStream::write_text_exactly_once` and
//! the other staged writers of [`super::file`]) and `weir-testing`'s `TwoPhaseFileSink`. Each
//! names its files with a [`PartNames`] and encodes its own checkpoint state.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::SinkError;

/// What a file of a two-phase sink is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PartKind {
    /// Committed output.
    Final,
    /// Pre-committed at a checkpoint, waiting for it to complete.
    Pending,
    /// Being written.
    InProgress,
}

/// The names of one sink subtask's files, and which files in the directory are its own.
pub trait PartNames: Send + 'static {
    /// The staging file numbered `n`.
    fn in_progress(&self, n: u64) -> String;
    /// The pending file of checkpoint `checkpoint`.
    fn pending(&self, checkpoint: u64) -> String;
    /// The committed file of checkpoint `checkpoint`.
    fn committed(&self, checkpoint: u64) -> String;
    /// `(number, kind)` of a file of this subtask; `None` for any other file.
    fn parse(&self, name: &str) -> Option<(u64, PartKind)>;
}

/// The staged files of one sink subtask in a directory (see the module doc).
pub struct StagedFiles<N> {
    dir: PathBuf,
    names: N,
    /// The open staging file and its number.
    current: Option<(u64, BufWriter<File>)>,
    /// Pending files not committed yet, by checkpoint.
    pending: BTreeMap<u64, String>,
    committed_files: u64,
    discarded_files: u64,
}

impl<N> std::fmt::Debug for StagedFiles<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StagedFiles")
            .field("dir", &self.dir)
            .field("current", &self.current.as_ref().map(|(n, _)| n))
            .field("pending", &self.pending)
            .finish()
    }
}

impl<N: PartNames> StagedFiles<N> {
    /// The files named by `names` in `dir`, created (durably) if need be.
    pub fn create(dir: &Path, names: N) -> Result<Self, SinkError> {
        crate::checkpoint::store::create_dir_durable(dir).map_err(|source| SinkError::Io {
            path: dir.to_owned(),
            source,
        })?;
        Ok(StagedFiles {
            dir: dir.to_owned(),
            names,
            current: None,
            pending: BTreeMap::new(),
            committed_files: 0,
            discarded_files: 0,
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The names.
    pub fn names(&self) -> &N {
        &self.names
    }

    /// The sink error of `source` on the file `name` (the directory itself for `""`).
    pub fn io(&self, name: &str, source: std::io::Error) -> SinkError {
        SinkError::Io {
            path: self.dir.join(name),
            source,
        }
    }

    /// The number of the open staging file, if one is open.
    pub fn current(&self) -> Option<u64> {
        self.current.as_ref().map(|(n, _)| *n)
    }

    /// The path of the open staging file (the directory if none is open), for errors.
    pub fn current_path(&self) -> PathBuf {
        match &self.current {
            Some((n, _)) => self.dir.join(self.names.in_progress(*n)),
            None => self.dir.clone(),
        }
    }

    /// The open staging file; opens (creates) the one numbered `n` if none is open.
    pub fn writer(&mut self, n: u64) -> Result<&mut BufWriter<File>, SinkError> {
        if self.current.is_none() {
            let name = self.names.in_progress(n);
            let f = File::create(self.dir.join(&name)).map_err(|e| self.io(&name, e))?;
            self.current = Some((n, BufWriter::with_capacity(256 * 1024, f)));
        }
        Ok(&mut self.current.as_mut().expect("just set").1)
    }

    /// Flushes and fsyncs the open staging file and keeps it open.
    pub fn sync_current(&mut self) -> Result<(), SinkError> {
        let Some((n, w)) = self.current.as_mut() else {
            return Ok(());
        };
        let r = w.flush().and_then(|()| w.get_ref().sync_all());
        let n = *n;
        r.map_err(|e| self.io(&self.names.in_progress(n), e))
    }

    /// Flushes, fsyncs and closes the open staging file; its number.
    pub fn close_current(&mut self) -> Result<Option<u64>, SinkError> {
        let Some((n, mut w)) = self.current.take() else {
            return Ok(None);
        };
        let name = self.names.in_progress(n);
        w.flush().map_err(|e| self.io(&name, e))?;
        w.get_ref().sync_all().map_err(|e| self.io(&name, e))?;
        Ok(Some(n))
    }

    /// Renames `from` to `to` in the directory.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), SinkError> {
        std::fs::rename(self.dir.join(from), self.dir.join(to)).map_err(|e| self.io(to, e))
    }

    /// Closes the open staging file (flushed, fsynced), renames it to `to` and fsyncs the
    /// directory; its number, `None` if none was open.
    pub fn close_as(&mut self, to: &str) -> Result<Option<u64>, SinkError> {
        let Some(n) = self.close_current()? else {
            return Ok(None);
        };
        self.rename(&self.names.in_progress(n), to)?;
        self.sync_dir()?;
        Ok(Some(n))
    }

    /// Checkpoint `checkpoint`'s barrier: the open staging file becomes its pending file
    /// (durably). `true` if there was one.
    pub fn pre_commit(&mut self, checkpoint: u64) -> Result<bool, SinkError> {
        let to = self.names.pending(checkpoint);
        if self.close_as(&to)?.is_none() {
            return Ok(false);
        }
        self.pending.insert(checkpoint, to);
        Ok(true)
    }

    /// Pending files not committed yet, by checkpoint.
    pub fn pending(&self) -> &BTreeMap<u64, String> {
        &self.pending
    }

    /// Records `name` as the pending file of `checkpoint` (a restored checkpoint's list, or a
    /// staging file the sink renamed itself).
    pub fn add_pending(&mut self, checkpoint: u64, name: String) {
        self.pending.insert(checkpoint, name);
    }

    /// Renames the pending file `name` of `checkpoint` to its committed name; `false` if it
    /// was committed already. An error if it is neither.
    pub fn commit_pending(&mut self, checkpoint: u64, name: &str) -> Result<bool, SinkError> {
        let to = self.names.committed(checkpoint);
        if self.dir.join(name).exists() {
            self.rename(name, &to)?;
            self.committed_files += 1;
            return Ok(true);
        }
        if self.dir.join(&to).exists() {
            return Ok(false);
        }
        Err(SinkError::Encode {
            path: self.dir.join(name),
            message: "a pending file of a complete checkpoint is gone (neither pending nor \
                      committed): its records are lost"
                .into(),
        })
    }

    /// Commits the pending files of checkpoints up to `id` (one directory fsync for all).
    pub fn commit_up_to(&mut self, id: u64) -> Result<(), SinkError> {
        let ready: Vec<(u64, String)> = self
            .pending
            .range(..=id)
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        let mut renamed = false;
        for (k, name) in ready {
            renamed |= self.commit_pending(k, &name)?;
            self.pending.remove(&k);
        }
        if renamed {
            self.sync_dir()?;
        }
        Ok(())
    }

    /// This subtask's files in the directory: `(number, kind, name)`.
    pub fn own_files(&self) -> Result<Vec<(u64, PartKind, String)>, SinkError> {
        let entries = std::fs::read_dir(&self.dir).map_err(|e| self.io("", e))?;
        let mut files = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| self.io("", e))?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if let Some((n, kind)) = self.names.parse(&name) {
                files.push((n, kind, name));
            }
        }
        Ok(files)
    }

    /// Deletes this subtask's files for which `which(number, kind)` holds; their names.
    pub fn discard(
        &mut self,
        which: impl Fn(u64, PartKind) -> bool,
    ) -> Result<Vec<String>, SinkError> {
        let mut deleted = Vec::new();
        for (n, kind, name) in self.own_files()? {
            if which(n, kind) {
                std::fs::remove_file(self.dir.join(&name)).map_err(|e| self.io(&name, e))?;
                self.discarded_files += 1;
                deleted.push(name);
            }
        }
        Ok(deleted)
    }

    /// Fsyncs the directory: its renames and deletions become durable.
    pub fn sync_dir(&self) -> Result<(), SinkError> {
        crate::checkpoint::store::sync_dir(&self.dir).map_err(|e| self.io("", e))
    }

    /// Pending files renamed to their committed names so far.
    pub fn committed_files(&self) -> u64 {
        self.committed_files
    }

    /// Files deleted by [`discard`](Self::discard) so far.
    pub fn discarded_files(&self) -> u64 {
        self.discarded_files
    }
}
