//! Line files: each sink subtask writes `part-{uid}-{subtask}` in a directory, one line per
//! record, as text (`Display`) or JSON.
//!
//! With checkpoints, a part file's length is part of the checkpoint: a restored job cuts the
//! file back to that length and appends, so after recovery the file holds every record once
//! (records written after the checkpoint and before a failure are visible until then: the
//! guarantee is exactly-once on completion, not transactional visibility).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

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

/// Writes each record's `Display` form as a line.
pub(crate) struct TextFileSink(pub(crate) PartFile);

impl<T: std::fmt::Display + Send + 'static> Sink<T> for TextFileSink {
    fn write_batch(&mut self, batch: &mut Vec<T>) -> Result<(), SinkError> {
        for r in batch.drain(..) {
            if let Err(e) = writeln!(self.0.out, "{r}") {
                return Err(self.0.io(e));
            }
        }
        Ok(())
    }
    fn finish(&mut self) -> Result<(), SinkError> {
        self.0.close()
    }
    fn pre_commit(&mut self, _checkpoint: u64) -> Result<Option<Vec<u8>>, SinkError> {
        self.0.checkpoint()
    }
    fn initialize(&mut self, restored: Option<&[u8]>) -> Result<(), SinkError> {
        self.0.initialize(restored)
    }
}

/// Writes each record as one line of JSON.
pub(crate) struct JsonlFileSink(pub(crate) PartFile);

impl<T: Serialize + Send + 'static> Sink<T> for JsonlFileSink {
    fn write_batch(&mut self, batch: &mut Vec<T>) -> Result<(), SinkError> {
        for r in batch.drain(..) {
            serde_json::to_writer(&mut self.0.out, &r).map_err(|e| SinkError::Encode {
                path: self.0.path.clone(),
                message: e.to_string(),
            })?;
            if let Err(e) = self.0.out.write_all(b"\n") {
                return Err(self.0.io(e));
            }
        }
        Ok(())
    }
    fn finish(&mut self) -> Result<(), SinkError> {
        self.0.close()
    }
    fn pre_commit(&mut self, _checkpoint: u64) -> Result<Option<Vec<u8>>, SinkError> {
        self.0.checkpoint()
    }
    fn initialize(&mut self, restored: Option<&[u8]>) -> Result<(), SinkError> {
        self.0.initialize(restored)
    }
}
