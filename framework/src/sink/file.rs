//! Line files: each sink subtask writes `part-{uid}-{subtask}` in a directory, one line per
//! record, as text (`Display`) or JSON.

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
        let f = File::create(&path).map_err(|source| SinkError::Io {
            path: path.clone(),
            source,
        })?;
        Ok(PartFile {
            path,
            out: BufWriter::with_capacity(256 * 1024, f),
        })
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
}
