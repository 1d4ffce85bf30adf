//! The line sources the environment reads with: text lines ([`TextLines`], [`SkippingLines`],
//! [`LocatedLines`]) and JSON Lines records ([`FailingJsonl`], [`SkippingJsonl`]), each a
//! [`Source`] over a [`LineReader`] or [`JsonlReader`] under one [`MalformedPolicy`](super::MalformedPolicy)
//! (fail, or skip to the side output). Not the reading of lines itself, its ranges and
//! positions (the parent module).

use serde::de::DeserializeOwned;

use std::sync::Arc;

use super::{BadLine, JsonlReader, Line, LineReader};
use crate::error::SourceError;
use crate::source::text::{Text, TextBatch};
use crate::source::{Source, SourceStatus};

/// Text lines as `String`s (the `Fail` policy): a malformed line fails the job. The source
/// of `Env::read_lines`.
pub struct TextLines(pub LineReader);

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
        self.0.encoded_position()
    }

    fn seek(&mut self, position: &[u8]) -> Result<(), SourceError> {
        self.0.seek_encoded(position)
    }
}

/// Text lines (the `Skip` policy): malformed lines travel as `Err` to the side output split.
/// The source of `Env::read_lines_skipping`.
pub struct SkippingLines(pub LineReader);

impl Source<Result<String, BadLine>> for SkippingLines {
    fn poll_batch(
        &mut self,
        out: &mut Vec<Result<String, BadLine>>,
        max: usize,
    ) -> Result<SourceStatus, SourceError> {
        for _ in 0..max {
            if !self.0.advance()? {
                return Ok(SourceStatus::End);
            }
            out.push(match self.0.text() {
                Ok(s) => Ok(s.to_owned()),
                Err((kind, e)) => Err(self.0.bad_line(kind, e)?),
            });
        }
        Ok(SourceStatus::More)
    }

    fn position(&self) -> Option<Vec<u8>> {
        self.0.encoded_position()
    }

    fn seek(&mut self, position: &[u8]) -> Result<(), SourceError> {
        self.0.seek_encoded(position)
    }
}

/// Text lines with their coordinates (the `Skip` policy). The source of
/// `Env::read_located_lines_skipping`.
///
/// The lines of a batch are copied into one buffer that their [`Text`]s share (see
/// [`text`](crate::source::text)); a batch ends early once that buffer holds
/// [`TEXT_BATCH_BYTES`], so a batch of long lines stays bounded.
pub struct LocatedLines {
    reader: LineReader,
    batch: TextBatch,
    /// The batch being read, before its buffer is shared.
    pending: Vec<Result<PendingLine, BadLine>>,
}

/// The bytes of text after which a line source ends its batch (unless it holds one line).
pub const TEXT_BATCH_BYTES: usize = 1024 * 1024;

/// A line of the batch being read: its coordinates and its range in the batch's buffer.
struct PendingLine {
    path: Arc<str>,
    line: u64,
    byte_offset: u64,
    range: std::ops::Range<usize>,
}

impl LocatedLines {
    /// The lines `reader` reads.
    pub fn new(reader: LineReader) -> Self {
        LocatedLines {
            reader,
            batch: TextBatch::default(),
            pending: Vec::new(),
        }
    }
}

impl Source<Result<Line, BadLine>> for LocatedLines {
    fn poll_batch(
        &mut self,
        out: &mut Vec<Result<Line, BadLine>>,
        max: usize,
    ) -> Result<SourceStatus, SourceError> {
        let mut status = SourceStatus::More;
        let mut error = None;
        let r = &mut self.reader;
        while self.pending.len() < max && self.batch.len() < TEXT_BATCH_BYTES {
            match r.advance() {
                Ok(true) => {}
                Ok(false) => {
                    status = SourceStatus::End;
                    break;
                }
                // The lines read before stay in `out`, as when they were pushed one by one.
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
            let located = match r.text() {
                Ok(s) => r.line_number().map(|line| {
                    Ok(PendingLine {
                        path: r.shown_path(),
                        line,
                        byte_offset: r.start,
                        range: self.batch.push(s),
                    })
                }),
                Err((kind, e)) => r.bad_line(kind, e).map(Err),
            };
            match located {
                Ok(p) => self.pending.push(p),
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        let buf = self.batch.share();
        out.extend(self.pending.drain(..).map(|p| {
            p.map(|p| Line {
                path: p.path,
                line: p.line,
                byte_offset: p.byte_offset,
                text: Text::new(&buf, p.range),
            })
        }));
        match error {
            Some(e) => Err(e),
            None => Ok(status),
        }
    }

    fn position(&self) -> Option<Vec<u8>> {
        self.reader.encoded_position()
    }

    fn seek(&mut self, position: &[u8]) -> Result<(), SourceError> {
        self.reader.seek_encoded(position)
    }
}

/// JSON Lines records (the `Fail` policy): a malformed line is an error. The source of
/// `Env::read_jsonl`.
pub struct FailingJsonl<T>(pub JsonlReader<T>);

impl<T: DeserializeOwned + Send + 'static> Source<T> for FailingJsonl<T> {
    fn poll_batch(&mut self, out: &mut Vec<T>, max: usize) -> Result<SourceStatus, SourceError> {
        for _ in 0..max {
            match self.0.next_record()? {
                None => return Ok(SourceStatus::End),
                Some(Ok(v)) => out.push(v),
                Some(Err(bad)) => return Err(self.0.lines.malformed(bad.error)),
            }
        }
        Ok(SourceStatus::More)
    }

    fn position(&self) -> Option<Vec<u8>> {
        self.0.lines.encoded_position()
    }

    fn seek(&mut self, position: &[u8]) -> Result<(), SourceError> {
        self.0.lines.seek_encoded(position)
    }
}

/// JSON Lines records (the `Skip` policy): malformed lines travel as `Err` to the side
/// output split. The source of `Env::read_jsonl_skipping`.
pub struct SkippingJsonl<T>(pub JsonlReader<T>);

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
        self.0.lines.encoded_position()
    }

    fn seek(&mut self, position: &[u8]) -> Result<(), SourceError> {
        self.0.lines.seek_encoded(position)
    }
}
