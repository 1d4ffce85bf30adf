//! `assign_timestamps_and_watermarks`: watermarks generated inside a stream, replacing the
//! ones from upstream.

use super::{OpCore, Output};
use crate::error::TaskError;
use crate::time::{Watermark, WatermarkGenerator};

pub(crate) struct WatermarkOp<T> {
    pub(crate) generator: Option<WatermarkGenerator<T>>,
    pub(crate) core: OpCore<T>,
    /// What the operators after it said to a watermark sent from `flush` (which cannot
    /// answer): reported at the next `poll_pending`.
    pub(crate) failed: Option<TaskError>,
}

impl<T: Send + 'static> Output<T> for WatermarkOp<T> {
    fn push(&mut self, batch: &mut Vec<T>) -> Result<(), TaskError> {
        let mark = match self.generator.as_mut() {
            Some(g) => g.on_batch(batch, std::time::Instant::now()),
            None => None,
        };
        let n = batch.len();
        self.core.run(n, |out| out.buf().append(batch))?;
        if let Some(w) = mark {
            self.core.next.watermark(w)?;
        }
        Ok(())
    }
    fn finish(&mut self) -> Result<(), TaskError> {
        self.core
            .next
            .watermark(Watermark::At(crate::time::EventTime::MAX))?;
        self.core.finish_with(|_| {})
    }
    /// Upstream watermarks are replaced by this operator's (idleness still passes).
    fn watermark(&mut self, w: Watermark) -> Result<(), TaskError> {
        match w {
            Watermark::Idle => self.core.next.watermark(w),
            Watermark::At(_) => Ok(()),
        }
    }
    /// Called when the subtask goes idle (and after the linger while busy): the watermark
    /// the interval held back goes now, or a pause in the input would hold it back.
    fn flush(&mut self) {
        if let Some(w) = self
            .generator
            .as_mut()
            .and_then(|g| g.owed(std::time::Instant::now()))
        {
            if let Err(e) = self.core.next.watermark(w) {
                self.failed.get_or_insert(e);
            }
        }
        self.core.next.flush()
    }
    fn poll_pending(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), TaskError>> {
        if let Some(e) = self.failed.take() {
            return std::task::Poll::Ready(Err(e));
        }
        self.core.next.poll_pending(cx)
    }
    fn usage(&self, usage: &mut crate::metrics::QueueUsage) {
        self.core.next.usage(usage)
    }
    fn control(&mut self, c: &mut super::Control<'_>) {
        let next = &mut self.core.next;
        c.here_or(&self.core.info.uid, |c| next.control(c))
    }
    fn barrier(
        &mut self,
        id: u64,
        w: &mut crate::checkpoint::StateWriter,
    ) -> Result<(), TaskError> {
        self.core.at_barrier(w)?;
        self.core.next.barrier(id, w)
    }
    fn notify_complete(&mut self, id: u64) -> Result<(), TaskError> {
        self.core.next.notify_complete(id)
    }
}
