//! JSON Lines files, read into a user type with serde.
//!
//! A path is a file or a directory (its regular files, sorted by name); files are dealt to
//! the source's subtasks round robin. Blank lines hold no record and are passed over. A line
//! that is not valid UTF-8 or does not deserialize is *malformed*; the [`MalformedPolicy`]
//! decides: `Fail` (default) fails the job with an error naming file and line, `Skip` sends the
//! line to a side output of [`BadLine`]s and counts it. A malformed line is never dropped
//! silently.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{Source, SourceContext, SourceStatus};
use crate::error::SourceError;

/// What to do with a line that does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MalformedPolicy {
    /// Fail the job with an error naming the file and line (default).
    #[default]
    Fail,
    /// Skip the line: count it and emit it on the side output.
    Skip,
}

/// A line that did not parse, as emitted on the side output under [`MalformedPolicy::Skip`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BadLine {
    /// The file.
    pub path: String,
    /// 1-based line number.
    pub line: u64,
    /// The line (lossily decoded if it was not UTF-8), without its newline.
    pub text: String,
    /// Why it did not parse.
    pub error: String,
}

/// Lists the files under `path` (the file itself, or a directory's regular files by name).
pub(crate) fn list_files(path: &Path) -> Result<Vec<PathBuf>, SourceError> {
    let io = |source| SourceError::Io {
        path: path.to_owned(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(io)? {
        let entry = entry.map_err(io)?;
        if entry.file_type().map_err(io)?.is_file() {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

/// Reads the files of one subtask, line by line.
pub struct JsonlReader<T> {
    files: Vec<PathBuf>,
    file_idx: usize,
    current: Option<(BufReader<File>, PathBuf)>,
    line_no: u64,
    /// Byte offset in the current file of the next line.
    offset: u64,
    buf: Vec<u8>,
    _t: PhantomData<fn() -> T>,
}

impl<T: DeserializeOwned> JsonlReader<T> {
    /// The share of `path`'s files that subtask `cx` reads.
    pub fn new(path: &Path, cx: SourceContext) -> Result<Self, SourceError> {
        let files = list_files(path)?
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % cx.parallelism == cx.subtask)
            .map(|(_, p)| p)
            .collect();
        Ok(JsonlReader {
            files,
            file_idx: 0,
            current: None,
            line_no: 0,
            offset: 0,
            buf: Vec::with_capacity(1024),
            _t: PhantomData,
        })
    }

    /// The next record, a malformed line, or `None` at the end of the last file.
    pub fn next_record(&mut self) -> Result<Option<Result<T, BadLine>>, SourceError> {
        loop {
            if self.current.is_none() {
                let Some(path) = self.files.get(self.file_idx).cloned() else {
                    return Ok(None);
                };
                self.file_idx += 1;
                let f = File::open(&path).map_err(|source| SourceError::Io {
                    path: path.clone(),
                    source,
                })?;
                self.current = Some((BufReader::with_capacity(64 * 1024, f), path));
                self.line_no = 0;
                self.offset = 0;
            }
            let Some((reader, path)) = self.current.as_mut() else {
                continue;
            };
            self.buf.clear();
            let n = reader
                .read_until(b'\n', &mut self.buf)
                .map_err(|source| SourceError::Io {
                    path: path.clone(),
                    source,
                })?;
            if n == 0 {
                self.current = None;
                continue;
            }
            self.line_no += 1;
            self.offset += n as u64;
            let mut line = &self.buf[..];
            while let [rest @ .., b'\n' | b'\r'] = line {
                line = rest;
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Ok(Some(match serde_json::from_slice::<T>(line) {
                Ok(v) => Ok(v),
                Err(e) => Err(BadLine {
                    path: path.display().to_string(),
                    line: self.line_no,
                    text: String::from_utf8_lossy(line).into_owned(),
                    error: e.to_string(),
                }),
            }));
        }
    }
}

/// The `Fail` policy: a malformed line is an error.
pub(crate) struct FailingJsonl<T>(pub(crate) JsonlReader<T>);

impl<T: DeserializeOwned + Send + 'static> Source<T> for FailingJsonl<T> {
    fn poll_batch(&mut self, out: &mut Vec<T>, max: usize) -> Result<SourceStatus, SourceError> {
        for _ in 0..max {
            match self.0.next_record()? {
                None => return Ok(SourceStatus::End),
                Some(Ok(v)) => out.push(v),
                Some(Err(bad)) => {
                    return Err(SourceError::Malformed {
                        path: PathBuf::from(bad.path),
                        line: bad.line,
                        message: bad.error,
                    })
                }
            }
        }
        Ok(SourceStatus::More)
    }
}

/// The `Skip` policy: malformed lines travel as `Err` to the side output split.
pub(crate) struct SkippingJsonl<T>(pub(crate) JsonlReader<T>);

impl<T: DeserializeOwned + Send + 'static> Source<Result<T, BadLine>> for SkippingJsonl<T> {
    fn poll_batch(
        &mut self,
        out: &mut Vec<Result<T, BadLine>>,
        max: usize,
    ) -> Result<SourceStatus, SourceError> {
        for _ in 0..max {
            match self.0.next_record()? {
                None => return Ok(SourceStatus::End),
                Some(r) => out.push(r),
            }
        }
        Ok(SourceStatus::More)
    }
}
