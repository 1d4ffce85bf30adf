//! Line files: JSON Lines read into a user type with serde, and plain text lines.
//!
//! A path is a file or a directory (its regular files, sorted by name). Every file is split
//! by byte range among the source's subtasks, as Flink's file source splits files: subtask
//! `k` of `n` reads the lines whose first byte lies in `[k * len / n, (k + 1) * len / n)`
//! (it passes over the end of a line that started before its range, and reads to its end the
//! line that starts in its range and ends after it), so one file keeps every subtask busy
//! and each line is read by exactly one subtask. Lines end at `\n` (a `\r` before it is
//! removed too).
//! Blank lines (only ASCII white space) hold no record and are passed over, but count in
//! line numbers. Line numbers are 1-based; byte offsets are 0-based, of the line's first
//! byte in its file.
//!
//! A line is *malformed* ([`BadLineKind`]) when it
//!
//! - is longer than the maximum (`EnvConfig::max_line_bytes`, default
//!   [`DEFAULT_MAX_LINE_BYTES`], counting the bytes before its `\n`): it is read in bounded
//!   chunks and never held whole — at most the maximum is buffered, then the rest is passed
//!   over up to the next `\n`;
//! - holds a NUL byte;
//! - is not valid UTF-8;
//! - (JSON Lines only) does not deserialize into the record type. A last line without a
//!   newline is a line like any other: kept if it parses; if it does not, it is reported as
//!   [`BadLineKind::Truncated`] (the file was likely cut short while being written).
//!
//! The [`MalformedPolicy`] decides: `Fail` (`Env::read_jsonl`, `Env::read_lines`) fails the
//! job with [`SourceError::Malformed`] naming file, line and byte offset; `Skip`
//! (`Env::read_jsonl_skipping`, `Env::read_lines_skipping`,
//! `Env::read_located_lines_skipping`) sends the line to a side output of [`BadLine`]s (with
//! the same coordinates), counts it (`records_rejected`) and goes on. A malformed line is
//! never dropped silently, and is reported exactly once.
//!
//! A subtask whose range starts inside a file does not know the number of its first line:
//! it counts the file's newlines before its range only when a line number is asked for (a
//! malformed line, or a [`Line`] of `Env::read_located_lines_skipping`), once per range.
//!
//! Checkpoints store a [`LinePosition`]: (file index, byte offset, lines read in the
//! subtask's range of that file) of the next line to read, past every line already read, good
//! or malformed, and the parallelism the ranges were cut for: a restored job reads on from
//! the next line and reads or reports no line twice. A source cannot be restored at another
//! parallelism (its ranges would differ): the framework refuses to rescale a source, and a
//! position of another parallelism is a [`SourceError::BadPosition`].

use std::cell::Cell;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::text::Text;
use super::SourceContext;
use crate::error::SourceError;

pub use crate::config::DEFAULT_MAX_LINE_BYTES;

mod sources;

pub use sources::{
    FailingJsonl, LocatedLines, SkippingJsonl, SkippingLines, TextLines, TEXT_BATCH_BYTES,
};

/// How much of an over-long line a [`BadLine`] keeps as its `text`: its first 1 KiB.
pub const OVERLONG_PREVIEW_BYTES: usize = 1024;

/// What to do with a line that does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MalformedPolicy {
    /// Fail the job with an error naming the file, line and byte offset (default).
    #[default]
    Fail,
    /// Skip the line: count it and emit it on the side output.
    Skip,
}

/// Why a line is malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BadLineKind {
    /// Longer than the maximum line length.
    TooLong,
    /// Holds a NUL byte.
    Nul,
    /// Not valid UTF-8.
    NotUtf8,
    /// Does not deserialize into the record type (JSON Lines).
    Unparsable,
    /// The last line of its file, without a newline, and does not deserialize (JSON Lines):
    /// the file was likely cut short.
    Truncated,
}

/// A line that did not parse, as emitted on the side output under [`MalformedPolicy::Skip`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BadLine {
    /// The file.
    pub path: String,
    /// 1-based line number.
    pub line: u64,
    /// Offset in the file of the line's first byte.
    pub byte_offset: u64,
    /// What is wrong with it.
    pub kind: BadLineKind,
    /// The line (lossily decoded if it was not UTF-8), without its line ending; of a line
    /// over the maximum length, its first [`OVERLONG_PREVIEW_BYTES`] (or the maximum, if
    /// smaller).
    pub text: String,
    /// Why it did not parse.
    pub error: String,
}

/// A text line with where it was read: what `Env::read_located_lines_skipping` emits.
///
/// The lines a source reads in one batch share one buffer ([`Text`]): reading, cloning and
/// dropping a `Line` allocates nothing per line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    /// The file (shared by the lines of a file).
    #[serde(serialize_with = "ser_arc_str", deserialize_with = "de_arc_str")]
    pub path: Arc<str>,
    /// 1-based line number.
    pub line: u64,
    /// Offset in the file of the line's first byte.
    pub byte_offset: u64,
    /// The line, without its line ending (a slice of its batch's buffer; `String::from` or
    /// `to_string()` makes it a `String` of its own).
    pub text: Text,
}

fn ser_arc_str<S: Serializer>(s: &Arc<str>, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_str(s)
}

fn de_arc_str<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<str>, D::Error> {
    String::deserialize(d).map(Arc::from)
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

/// The capacity the line buffer shrinks back to after a line over the maximum.
const KEPT_BUFFER_BYTES: usize = 64 * 1024;

/// The byte range of the file being read.
struct Current {
    reader: BufReader<File>,
    path: PathBuf,
    /// `path` as text, shared by the [`Line`]s of the file.
    shown: Arc<str>,
    /// The end of the range: a line that starts at or after it is the next subtask's.
    end: u64,
    /// A byte offset of a line start in the range and the lines of the range before it:
    /// the newlines of the file before that offset, less those lines, are the lines of the
    /// file before the range.
    anchor: (u64, u64),
    /// The lines of the file before the range, once counted (`Some(0)` for a range that
    /// starts the file).
    lines_before: Cell<Option<u64>>,
}

impl Current {
    fn new(file: File, path: PathBuf, end: u64, anchor: (u64, u64)) -> Self {
        let shown = Arc::from(path.display().to_string());
        Current {
            reader: BufReader::with_capacity(64 * 1024, file),
            path,
            shown,
            end,
            anchor,
            lines_before: Cell::new((anchor == (0, 0)).then_some(0)),
        }
    }

    /// The lines of the file before the range: counted on the first call.
    fn lines_before(&self) -> Result<u64, SourceError> {
        if let Some(n) = self.lines_before.get() {
            return Ok(n);
        }
        let (offset, lines) = self.anchor;
        let n = count_newlines(&self.path, offset)?.saturating_sub(lines);
        self.lines_before.set(Some(n));
        Ok(n)
    }
}

/// The `\n` bytes among the first `upto` bytes of `path`.
fn count_newlines(path: &Path, upto: u64) -> Result<u64, SourceError> {
    use std::io::Read;
    let io = |source| SourceError::Io {
        path: path.to_owned(),
        source,
    };
    let mut file = File::open(path).map_err(io)?.take(upto);
    let mut buf = vec![0u8; 64 * 1024];
    let mut count = 0u64;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => return Ok(count),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        };
        count += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
    }
}

/// `cur`'s buffered bytes, reading more when there are none (empty: the end of the file).
/// An interrupted read is retried; any other read error names the file.
fn fill(cur: &mut Current) -> Result<&[u8], SourceError> {
    let io = |path: &Path, source| SourceError::Io {
        path: path.to_path_buf(),
        source,
    };
    loop {
        match cur.reader.fill_buf() {
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(source) => return Err(io(&cur.path, source)),
        }
    }
    // Filled (or at the end): this look does no read unless the file ended.
    cur.reader
        .fill_buf()
        .map_err(|source| io(&cur.path, source))
}

/// Consumes `cur`'s bytes up to and including the next `\n` (or to the end of the file)
/// without keeping them; returns how many.
fn pass_line(cur: &mut Current) -> Result<u64, SourceError> {
    let mut passed = 0u64;
    loop {
        let avail = fill(cur)?;
        if avail.is_empty() {
            return Ok(passed);
        }
        let (used, done) = match memchr::memchr(b'\n', avail) {
            Some(i) => (i + 1, true),
            None => (avail.len(), false),
        };
        cur.reader.consume(used);
        passed += used as u64;
        if done {
            return Ok(passed);
        }
    }
}

/// Where a [`LineReader`] reads on: what its sources' checkpoints store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinePosition {
    /// The file's index among the path's files (sorted by name).
    pub file: u64,
    /// The byte offset in the file of the next line to read (0: the start of the subtask's
    /// range, not yet opened).
    pub offset: u64,
    /// The lines (blank ones included) read so far in the subtask's range of the file.
    pub lines: u64,
    /// The source's parallelism, which the ranges were cut for.
    pub parallelism: u64,
}

/// Reads one subtask's byte range of every file, line by line, with line numbers and byte
/// offsets.
///
/// A line is buffered up to the maximum length; the rest of a longer one is read in chunks
/// and passed over (see the [module docs](self)).
pub struct LineReader {
    files: Vec<PathBuf>,
    cx: SourceContext,
    /// The index of the next file to open.
    file_idx: usize,
    current: Option<Current>,
    /// Lines read in the current range (the current line's number in it, 1-based).
    line_no: u64,
    /// Byte offset in the current file of the next line.
    offset: u64,
    /// Byte offset in the current file of the current line.
    start: u64,
    buf: Vec<u8>,
    /// End of the current line in `buf`, without the line ending.
    end: usize,
    max_line_bytes: usize,
    /// The current line's length (before its `\n`) if it is over the maximum.
    too_long: Option<u64>,
    /// The current line lies at the start of the file reader's buffer, in its first `held`
    /// bytes (its `\n` included), not in `buf`: consumed when the next line is read.
    held: usize,
    /// The current line ended at the end of its file, without a newline.
    unterminated: bool,
}

impl LineReader {
    /// The byte range of each of `path`'s files that subtask `cx` reads, with the default
    /// maximum line length ([`DEFAULT_MAX_LINE_BYTES`]).
    pub fn new(path: &Path, cx: SourceContext) -> Result<Self, SourceError> {
        Ok(LineReader {
            files: list_files(path)?,
            cx,
            file_idx: 0,
            current: None,
            line_no: 0,
            offset: 0,
            start: 0,
            buf: Vec::with_capacity(1024),
            end: 0,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            too_long: None,
            held: 0,
            unterminated: false,
        })
    }

    /// With lines longer than `max` bytes (before their `\n`; at least 1) malformed.
    pub fn with_max_line_bytes(mut self, max: usize) -> Self {
        self.max_line_bytes = max.max(1);
        self
    }

    /// Moves to the next non-blank line; `false` after the last file. Read it with
    /// [`text`](Self::text), [`line`](Self::line), [`path`](Self::path),
    /// [`line_number`](Self::line_number) and [`byte_offset`](Self::byte_offset). A line
    /// over the maximum length is not blank, whatever it holds.
    pub fn advance(&mut self) -> Result<bool, SourceError> {
        loop {
            if self.current.is_none() {
                if self.file_idx >= self.files.len() {
                    return Ok(false);
                }
                self.open(self.file_idx, None)?;
                continue;
            }
            if self.current.as_ref().is_some_and(|c| self.offset >= c.end) {
                // The next line is the next subtask's.
                self.current = None;
                self.held = 0;
                continue;
            }
            let (n, newline) = self.read_line()?;
            if n == 0 {
                self.current = None;
                self.held = 0;
                continue;
            }
            self.line_no += 1;
            self.start = self.offset;
            self.offset += n;
            self.unterminated = !newline;
            let raw = self.raw();
            if self.too_long.is_some() {
                self.end = raw.len();
                return Ok(true);
            }
            let mut end = raw.len();
            while end > 0 && raw[end - 1] == b'\r' {
                end -= 1;
            }
            if raw[..end].iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            self.end = end;
            return Ok(true);
        }
    }

    /// Reads the next line of the current file (without its `\n`, at most the maximum
    /// length of it): (bytes consumed, whether it ended with `\n`). A line that lies whole in
    /// the file reader's buffer stays there (`held`), any other is copied into `buf`. Sets
    /// `too_long`.
    fn read_line(&mut self) -> Result<(u64, bool), SourceError> {
        let Some(cur) = self.current.as_mut() else {
            return Ok((0, false));
        };
        cur.reader.consume(std::mem::take(&mut self.held));
        let max = self.max_line_bytes;
        self.buf.clear();
        self.too_long = None;
        let (mut total, mut content, mut over) = (0u64, 0u64, false);
        // The common case: the whole line is in the reader's buffer.
        if let Ok(avail) = cur.reader.fill_buf() {
            if let Some(i) = memchr::memchr(b'\n', avail).filter(|i| *i <= max) {
                self.held = i + 1;
                return Ok(((i + 1) as u64, true));
            }
        }
        loop {
            let avail = fill(cur)?;
            if avail.is_empty() {
                break;
            }
            let (used, len, newline) = match memchr::memchr(b'\n', avail) {
                Some(i) => (i + 1, i, true),
                None => (avail.len(), avail.len(), false),
            };
            if !over {
                if self.buf.len() + len > max {
                    over = true;
                    // Keep the start as a preview; pass over the rest.
                    let preview = OVERLONG_PREVIEW_BYTES.min(max);
                    let room = preview.saturating_sub(self.buf.len());
                    self.buf.truncate(preview);
                    self.buf.extend_from_slice(&avail[..len.min(room)]);
                } else {
                    self.buf.extend_from_slice(&avail[..len]);
                }
            }
            cur.reader.consume(used);
            total += used as u64;
            content += len as u64;
            if newline {
                if over {
                    self.too_long = Some(content);
                    // Do not keep a buffer the size of the maximum for the lines after.
                    self.buf.shrink_to(KEPT_BUFFER_BYTES);
                }
                return Ok((total, true));
            }
        }
        if over {
            self.too_long = Some(content);
            self.buf.shrink_to(KEPT_BUFFER_BYTES);
        }
        Ok((total, false))
    }

    /// Where the next line starts.
    pub fn position(&self) -> LinePosition {
        let parallelism = self.cx.parallelism as u64;
        match self.current {
            Some(_) => LinePosition {
                file: (self.file_idx - 1) as u64,
                offset: self.offset,
                lines: self.line_no,
                parallelism,
            },
            None => LinePosition {
                file: self.file_idx as u64,
                offset: 0,
                lines: 0,
                parallelism,
            },
        }
    }

    /// Resumes at a [`position`](Self::position).
    pub fn seek(&mut self, position: LinePosition) -> Result<(), SourceError> {
        if position.parallelism != self.cx.parallelism as u64 {
            return Err(SourceError::BadPosition {
                message: format!(
                    "the checkpoint was taken with the files split among {} subtasks, the \
                     source now has {}: a line source cannot change parallelism",
                    position.parallelism, self.cx.parallelism
                ),
            });
        }
        self.current = None;
        self.held = 0;
        let file = usize::try_from(position.file).unwrap_or(usize::MAX);
        self.file_idx = file.min(self.files.len());
        if file >= self.files.len() {
            return Ok(());
        }
        if (position.offset, position.lines) == (0, 0) {
            // The range is opened when it is read.
            return Ok(());
        }
        self.open(file, Some((position.offset, position.lines)))
    }

    /// Opens this subtask's range of file `idx`, at its first line or at `resume` (a byte
    /// offset of a line start in the range, and the lines of the range before it).
    fn open(&mut self, idx: usize, resume: Option<(u64, u64)>) -> Result<(), SourceError> {
        use std::io::{Seek, SeekFrom};
        let path = self.files[idx].clone();
        let io = |source| SourceError::Io {
            path: path.clone(),
            source,
        };
        let mut f = File::open(&path).map_err(io)?;
        let len = f.metadata().map_err(io)?.len();
        let range = self.cx.share_of(len);
        self.file_idx = idx + 1;
        let (offset, lines) = match resume {
            Some((offset, lines)) => {
                if offset > len {
                    return Err(SourceError::BadPosition {
                        message: format!(
                            "{} has {len} bytes, the checkpoint resumes at byte {offset}",
                            path.display()
                        ),
                    });
                }
                (offset, lines)
            }
            // The line starting at the range's first byte is ours if the byte before it
            // ends a line: start one byte early and pass over everything up to a newline.
            None if range.start > 0 => (range.start - 1, 0),
            None => (0, 0),
        };
        f.seek(SeekFrom::Start(offset)).map_err(io)?;
        let mut cur = Current::new(f, path, range.end, (offset, lines));
        self.offset = offset;
        self.line_no = lines;
        if resume.is_none() && range.start > 0 {
            self.offset += pass_line(&mut cur)?;
            cur.anchor = (self.offset, 0);
        }
        self.current = Some(cur);
        self.held = 0;
        Ok(())
    }

    /// The current line as text, or why it is malformed (too long, a NUL byte, not UTF-8).
    #[inline]
    pub fn text(&self) -> Result<&str, (BadLineKind, String)> {
        if let Some(len) = self.too_long {
            return Err((
                BadLineKind::TooLong,
                format!(
                    "the line has {len} bytes, more than the maximum of {} \
                     (EnvConfig::max_line_bytes)",
                    self.max_line_bytes
                ),
            ));
        }
        let line = self.line();
        if let Some(i) = memchr::memchr(0, line) {
            return Err((
                BadLineKind::Nul,
                format!("a NUL byte at byte {i} of the line"),
            ));
        }
        std::str::from_utf8(line).map_err(|e| (BadLineKind::NotUtf8, format!("not UTF-8: {e}")))
    }

    /// Moves to the next non-blank line and returns it as text; `None` after the last file.
    /// A malformed line is an error naming its file, line and byte offset.
    #[inline]
    pub fn next_text(&mut self) -> Result<Option<&str>, SourceError> {
        if !self.advance()? {
            return Ok(None);
        }
        match self.text() {
            Ok(s) => Ok(Some(s)),
            Err((_, message)) => Err(self.malformed(message)),
        }
    }

    /// The current line (of a line over the maximum, its first
    /// [`OVERLONG_PREVIEW_BYTES`]), without its line ending.
    pub fn line(&self) -> &[u8] {
        &self.raw()[..self.end]
    }

    /// The current line as read: in the file reader's buffer (`held`) or in `buf`, without
    /// its `\n` (with any `\r`).
    fn raw(&self) -> &[u8] {
        match &self.current {
            Some(c) if self.held > 0 => &c.reader.buffer()[..self.held - 1],
            _ => &self.buf,
        }
    }

    /// The file of the current line.
    pub fn path(&self) -> &Path {
        self.current
            .as_ref()
            .map(|c| c.path.as_path())
            .unwrap_or(Path::new(""))
    }

    /// The 1-based number of the current line in its file. In a range that starts inside
    /// the file, the first call counts the file's lines before the range (an I/O error is
    /// the file's).
    pub fn line_number(&self) -> Result<u64, SourceError> {
        let before = match &self.current {
            Some(c) => c.lines_before()?,
            None => 0,
        };
        Ok(before + self.line_no)
    }

    /// The offset in its file of the current line's first byte.
    pub fn byte_offset(&self) -> u64 {
        self.start
    }

    /// Whether the current line is the last of its file and has no newline.
    pub fn is_unterminated(&self) -> bool {
        self.unterminated
    }

    /// The current file's path as shared text.
    fn shown_path(&self) -> Arc<str> {
        self.current
            .as_ref()
            .map(|c| c.shown.clone())
            .unwrap_or_else(|| Arc::from(""))
    }

    /// The current line as a [`BadLine`] of `kind` (an error if its line number cannot be
    /// counted: see [`line_number`](Self::line_number)).
    pub fn bad_line(&self, kind: BadLineKind, error: String) -> Result<BadLine, SourceError> {
        Ok(BadLine {
            path: self.path().display().to_string(),
            line: self.line_number()?,
            byte_offset: self.start,
            kind,
            text: String::from_utf8_lossy(self.line()).into_owned(),
            error,
        })
    }

    /// The `Fail` policy's error for the current line (or the I/O error that kept its line
    /// number from being counted).
    pub fn malformed(&self, message: String) -> SourceError {
        match self.line_number() {
            Ok(line) => SourceError::Malformed {
                path: self.path().to_owned(),
                line,
                byte_offset: self.start,
                message,
            },
            Err(e) => e,
        }
    }

    fn encoded_position(&self) -> Option<Vec<u8>> {
        crate::checkpoint::encode(&self.position()).ok()
    }

    fn seek_encoded(&mut self, position: &[u8]) -> Result<(), SourceError> {
        let p = match crate::checkpoint::decode::<LinePosition>(position) {
            Ok(p) => p,
            // Before files were split by range: (file index among the subtask's files, byte
            // offset, line number). At parallelism 1 that is the same place.
            Err(message) => match crate::checkpoint::decode::<(u64, u64, u64)>(position) {
                Ok((file, offset, lines)) if self.cx.parallelism == 1 => LinePosition {
                    file,
                    offset,
                    lines,
                    parallelism: 1,
                },
                Ok(_) => {
                    return Err(SourceError::BadPosition {
                        message: "the checkpoint is of an older line source that dealt whole \
                                  files to its subtasks: it can only be restored at parallelism 1"
                            .into(),
                    })
                }
                Err(_) => return Err(SourceError::BadPosition { message }),
            },
        };
        self.seek(p)
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

    /// With lines longer than `max` bytes malformed ([`LineReader::with_max_line_bytes`]).
    pub fn with_max_line_bytes(mut self, max: usize) -> Self {
        self.lines = self.lines.with_max_line_bytes(max);
        self
    }

    /// The next record, a malformed line, or `None` at the end of the last file.
    pub fn next_record(&mut self) -> Result<Option<Result<T, BadLine>>, SourceError> {
        if !self.lines.advance()? {
            return Ok(None);
        }
        let lines = &self.lines;
        let r = lines.text().and_then(|s| {
            serde_json::from_str::<T>(s).map_err(|e| {
                if lines.is_unterminated() {
                    (
                        BadLineKind::Truncated,
                        format!(
                            "{e} (the last line of the file has no newline: was the file \
                             cut short?)"
                        ),
                    )
                } else {
                    (BadLineKind::Unparsable, e.to_string())
                }
            })
        });
        match r {
            Ok(v) => Ok(Some(Ok(v))),
            Err((kind, e)) => Ok(Some(Err(lines.bad_line(kind, e)?))),
        }
    }

    /// The line reader.
    pub fn lines(&self) -> &LineReader {
        &self.lines
    }
}

#[cfg(test)]
mod tests;
