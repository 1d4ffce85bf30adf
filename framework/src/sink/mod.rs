//! Sinks: where records leave a job.
//!
//! A [`Sink`] takes whole batches. Built-in sinks: [`CollectSink`] (into memory, for tests),
//! text and JSON Lines files (one file per subtask, `part-{uid}-{subtask}` in a directory),
//! stdout, and discard. Sink instances are made per subtask by a factory, so each writes its
//! own file. This module does not own delivery guarantees across failures (two-phase commit
//! comes with checkpoints); a sink here writes through and flushes at end of input.

pub mod collect;
pub mod file;

use std::task::{Context, Poll};

pub use collect::CollectSink;

use crate::error::{SinkError, TaskError};
use crate::metrics::OperatorCounters;
use crate::operator::{OperatorInfo, Output};
use crate::sync::Arc;

/// A writer of records. One required method.
pub trait Sink<T>: Send + 'static {
    /// Writes every record of `batch`, leaving it empty.
    fn write_batch(&mut self, batch: &mut Vec<T>) -> Result<(), SinkError>;
    /// The input has ended: flush and close.
    fn finish(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}

/// Which sink subtask is being created.
#[derive(Debug, Clone)]
pub struct SinkContext {
    /// The sink's uid.
    pub uid: String,
    /// This subtask's index.
    pub subtask: usize,
    /// The sink's parallelism.
    pub parallelism: usize,
}

/// The sink as the last output of a chain.
pub(crate) struct SinkOp<T> {
    pub(crate) sink: Box<dyn Sink<T>>,
    pub(crate) info: Arc<OperatorInfo>,
    pub(crate) counters: Arc<OperatorCounters>,
}

impl<T> SinkOp<T> {
    /// Names this sink in an error or a panic of the user's sink code.
    fn check(&self, r: std::thread::Result<Result<(), SinkError>>) -> Result<(), TaskError> {
        match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err(source)) => Err(TaskError::Sink {
                uid: self.info.uid.clone(),
                subtask: self.info.subtask,
                source,
            }),
            Err(payload) => Err(TaskError::Panic {
                uid: self.info.uid.clone(),
                subtask: self.info.subtask,
                message: crate::error::panic_message(&*payload),
            }),
        }
    }
}

impl<T: Send + 'static> Output<T> for SinkOp<T> {
    fn push(&mut self, batch: &mut Vec<T>) -> Result<(), TaskError> {
        self.counters.add_in(batch.len());
        let sink = &mut self.sink;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sink.write_batch(batch)));
        self.check(r)
    }
    fn flush(&mut self) {}
    fn finish(&mut self) -> Result<(), TaskError> {
        let sink = &mut self.sink;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sink.finish()));
        self.check(r)
    }
    fn poll_pending(&mut self, _cx: &mut Context<'_>) -> Poll<()> {
        Poll::Ready(())
    }
    fn usage(&self, _usage: &mut crate::operator::QueueUsage) {}
    fn control(&mut self, c: &mut crate::operator::Control<'_>) {
        c.here_or(&self.info.uid, |_| {})
    }
}

/// Writes each record's `Display` form as a line to stdout.
pub(crate) struct StdoutSink;

impl<T: std::fmt::Display> Sink<T> for StdoutSink {
    fn write_batch(&mut self, batch: &mut Vec<T>) -> Result<(), SinkError> {
        use std::io::Write;
        let stdout = std::io::stdout();
        let mut w = stdout.lock();
        for r in batch.drain(..) {
            writeln!(w, "{r}").map_err(|source| SinkError::Io {
                path: "<stdout>".into(),
                source,
            })?;
        }
        Ok(())
    }
}

/// Drops every record (counted as input).
pub(crate) struct DiscardSink;

impl<T: Send + 'static> Sink<T> for DiscardSink {
    #[inline]
    fn write_batch(&mut self, batch: &mut Vec<T>) -> Result<(), SinkError> {
        batch.clear();
        Ok(())
    }
}
