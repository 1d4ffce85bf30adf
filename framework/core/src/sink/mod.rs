//! Sinks: where records leave a job.
//!
//! A [`Sink`] takes whole batches. Built-in sinks: [`CollectSink`] (into memory, for tests),
//! text and JSON Lines files (one file per subtask, `part-{uid}-{subtask}` in a directory),
//! stdout, and discard. Sink instances are made per subtask by a factory, so each writes its
//! own file. This module does not own delivery guarantees across failures (two-phase commit
//! comes with checkpoints); a sink here writes through and flushes at end of input.

pub mod collect;
pub mod file;
pub mod staged;

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
    /// Checkpoint `id`'s barrier arrived: make what was written since the previous barrier
    /// ready to commit, and return the state that lets a restored sink commit it (two-phase
    /// commit). A write-through (at-least-once) sink flushes and returns `None`.
    fn pre_commit(&mut self, _checkpoint: u64) -> Result<Option<Vec<u8>>, SinkError> {
        Ok(None)
    }
    /// Checkpoint `id` is complete: make what was staged up to it visible. Must be
    /// idempotent: after a restore the same checkpoint may be committed again.
    fn commit(&mut self, _checkpoint: u64) -> Result<(), SinkError> {
        Ok(())
    }
    /// Called once before the first record, on every start of the subtask: `restored` is
    /// the state `pre_commit` returned for the checkpoint the job restarts from (commit what it
    /// staged — that checkpoint is complete — and drop anything newer), or `None` on a fresh
    /// start (drop leftovers of a failed earlier attempt).
    fn initialize(&mut self, _restored: Option<&[u8]>) -> Result<(), SinkError> {
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
    /// Whether the job takes checkpoints (an exactly-once sink then stages its output until
    /// the checkpoint that covers it completes).
    pub checkpointing: bool,
}

/// The sink as the last output of a chain.
pub(crate) struct SinkOp<T> {
    pub(crate) sink: Box<dyn Sink<T>>,
    pub(crate) info: Arc<OperatorInfo>,
    pub(crate) counters: Arc<OperatorCounters>,
    /// Injected faults of this instance (testing).
    pub(crate) fault: Option<crate::fault::FaultProbe>,
    /// Records written since the last checkpoint barrier (committed with the next
    /// checkpoint, or by the final commit).
    pub(crate) since_barrier: u64,
    /// This instance's start, for the committed-records count.
    pub(crate) epoch: u64,
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
        self.since_barrier += batch.len() as u64;
        let (sink, fault) = (&mut self.sink, &mut self.fault);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if let Some(probe) = fault {
                probe.before_batch(batch.len());
            }
            sink.write_batch(batch)
        }));
        self.check(r)
    }
    fn flush(&mut self) {}
    fn finish(&mut self) -> Result<(), TaskError> {
        let sink = &mut self.sink;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sink.finish()));
        self.check(r)
    }
    fn poll_pending(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), TaskError>> {
        Poll::Ready(Ok(()))
    }
    fn usage(&self, _usage: &mut crate::metrics::QueueUsage) {}
    fn control(&mut self, c: &mut crate::operator::Control<'_>) {
        c.here_or(&self.info.uid, |_| {})
    }
    fn barrier(
        &mut self,
        id: u64,
        w: &mut crate::checkpoint::StateWriter,
    ) -> Result<(), TaskError> {
        let (sink, fault) = (&mut self.sink, &self.fault);
        let mut state = None;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if let Some(probe) = fault {
                probe.at_snapshot(w.hand_over);
            }
            sink.pre_commit(id).map(|s| state = s)
        }));
        self.check(r)?;
        if let Some(payload) = state {
            w.put(&self.info.uid, None, payload);
        }
        self.counters
            .stage(self.epoch, id, std::mem::take(&mut self.since_barrier));
        Ok(())
    }
    fn watermark(&mut self, _w: crate::time::Watermark) -> Result<(), TaskError> {
        Ok(())
    }
    fn notify_complete(&mut self, id: u64) -> Result<(), TaskError> {
        let sink = &mut self.sink;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sink.commit(id)));
        self.check(r)?;
        let unstaged = if id == crate::checkpoint::FINAL_COMMIT {
            std::mem::take(&mut self.since_barrier)
        } else {
            0
        };
        self.counters.commit_up_to(self.epoch, id, unstaged);
        Ok(())
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
