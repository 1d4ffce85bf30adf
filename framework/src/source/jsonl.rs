//! Line files: JSON Lines read into a user type with serde, and plain text lines.
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

/// Reads the files of one subtask, line by line, with line numbers and byte offsets.
pub struct LineReader {
    files: Vec<PathBuf>,
    file_idx: usize,
    current: Option<(BufReader<File>, PathBuf)>,
    line_no: u64,
    /// Byte offset in the current file of the next line.
    offset: u64,
    buf: Vec<u8>,
    /// End of the current line in `buf`, without the line ending.
    end: usize,
}

impl LineReader {
    /// The share of `path`'s files that subtask `cx` reads.
    pub fn new(path: &Path, cx: SourceContext) -> Result<Self, SourceError> {
        let files = list_files(path)?
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % cx.parallelism == cx.subtask)
            .map(|(_, p)| p)
            .collect();
        Ok(LineReader {
            files,
            file_idx: 0,
            current: None,
            line_no: 0,
            offset: 0,
            buf: Vec::with_capacity(1024),
            end: 0,
        })
    }

    /// Moves to the next non-blank line; `false` after the last file. Read it with
    /// [`line`](Self::line), [`path`](Self::path) and [`line_number`](Self::line_number).
    pub fn advance(&mut self) -> Result<bool, SourceError> {
        loop {
            if self.current.is_none() {
                let Some(path) = self.files.get(self.file_idx).cloned() else {
                    return Ok(false);
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
            let mut end = self.buf.len();
            while end > 0 && matches!(self.buf[end - 1], b'\n' | b'\r') {
                end -= 1;
            }
            if self.buf[..end].iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            self.end = end;
            return Ok(true);
        }
    }

    /// Where the next line starts: (file index, byte offset, lines read in that file).
    pub fn position(&self) -> (u64, u64, u64) {
        match self.current {
            Some(_) => ((self.file_idx - 1) as u64, self.offset, self.line_no),
            None => (self.file_idx as u64, 0, 0),
        }
    }

    /// Resumes at a [`position`](Self::position).
    pub fn seek(&mut self, (file, offset, line_no): (u64, u64, u64)) -> Result<(), SourceError> {
        use std::io::{Seek, SeekFrom};
        let file = file as usize;
        self.current = None;
        self.file_idx = file;
        if file >= self.files.len() {
            return Ok(());
        }
        let path = self.files[file].clone();
        let mut f = File::open(&path).map_err(|source| SourceError::Io {
            path: path.clone(),
            source,
        })?;
        let len = f
            .metadata()
            .map_err(|source| SourceError::Io {
                path: path.clone(),
                source,
            })?
            .len();
        if offset > len {
            return Err(SourceError::BadPosition {
                message: format!(
                    "{} has {len} bytes, the checkpoint resumes at byte {offset}",
                    path.display()
                ),
            });
        }
        f.seek(SeekFrom::Start(offset))
            .map_err(|source| SourceError::Io {
                path: path.clone(),
                source,
            })?;
        self.current = Some((BufReader::with_capacity(64 * 1024, f), path));
        self.file_idx = file + 1;
        self.offset = offset;
        self.line_no = line_no;
        Ok(())
    }

    /// Moves to the next non-blank line and returns it as text; `None` after the last file.
    /// A line that is not UTF-8 is an error naming its file and line.
    pub fn next_text(&mut self) -> Result<Option<&str>, SourceError> {
        if !self.advance()? {
            return Ok(None);
        }
        match std::str::from_utf8(&self.buf[..self.end]) {
            Ok(s) => Ok(Some(s)),
            Err(e) => Err(SourceError::Malformed {
                path: self.path().to_owned(),
                line: self.line_no,
                message: format!("not UTF-8: {e}"),
            }),
        }
    }

    /// The current line, without its line ending.
    pub fn line(&self) -> &[u8] {
        &self.buf[..self.end]
    }

    /// The file of the current line.
    pub fn path(&self) -> &Path {
        self.current
            .as_ref()
            .map(|(_, p)| p.as_path())
            .unwrap_or(Path::new(""))
    }

    /// The 1-based number of the current line in its file.
    pub fn line_number(&self) -> u64 {
        self.line_no
    }
}

/// Reads records of type `T`, one JSON document per line.
pub struct JsonlReader<T> {
    lines: LineReader,
    _t: PhantomData<fn() -> T>,
}

impl<T: DeserializeOwned> JsonlReader<T> {
    /// The share of `path`'s files that subtask `cx` reads.
    pub fn new(path: &Path, cx: SourceContext) -> Result<Self, SourceError> {
        Ok(JsonlReader {
            lines: LineReader::new(path, cx)?,
            _t: PhantomData,
        })
    }

    /// The next record, a malformed line, or `None` at the end of the last file.
    pub fn next_record(&mut self) -> Result<Option<Result<T, BadLine>>, SourceError> {
        if !self.lines.advance()? {
            return Ok(None);
        }
        let line = self.lines.line();
        Ok(Some(serde_json::from_slice::<T>(line).map_err(|e| {
            BadLine {
                path: self.lines.path().display().to_string(),
                line: self.lines.line_number(),
                text: String::from_utf8_lossy(line).into_owned(),
                error: e.to_string(),
            }
        })))
    }
}

/// Text lines as `String`s; a line that is not UTF-8 fails the job, naming file and line.
pub(crate) struct TextLines(pub(crate) LineReader);

impl Source<String> for TextLines {
    fn poll_batch(
        &mut self,
        out: &mut Vec<String>,
        max: usize,
    ) -> Result<SourceStatus, SourceError> {
        for _ in 0..max {
            match self.0.next_text()? {
                None => return Ok(SourceStatus::End),
                Some(line) => out.push(line.to_owned()),
            }
        }
        Ok(SourceStatus::More)
    }

    fn position(&self) -> Option<Vec<u8>> {
        crate::checkpoint::encode(&self.0.position()).ok()
    }

    fn seek(&mut self, position: &[u8]) -> Result<(), SourceError> {
        let p: (u64, u64, u64) = crate::checkpoint::decode(position)
            .map_err(|message| SourceError::BadPosition { message })?;
        self.0.seek(p)
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

    fn position(&self) -> Option<Vec<u8>> {
        crate::checkpoint::encode(&self.0.lines.position()).ok()
    }

    fn seek(&mut self, position: &[u8]) -> Result<(), SourceError> {
        let p: (u64, u64, u64) = crate::checkpoint::decode(position)
            .map_err(|message| SourceError::BadPosition { message })?;
        self.0.lines.seek(p)
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

    fn position(&self) -> Option<Vec<u8>> {
        crate::checkpoint::encode(&self.0.lines.position()).ok()
    }

    fn seek(&mut self, position: &[u8]) -> Result<(), SourceError> {
        let p: (u64, u64, u64) = crate::checkpoint::decode(position)
            .map_err(|message| SourceError::BadPosition { message })?;
        self.0.lines.seek(p)
    }
}
