//! `assign_timestamps_and_watermarks`: watermarks generated inside a stream, replacing the
//! ones from upstream.

use super::{OpCore, Output};
use crate::error::TaskError;
use crate::time::{Watermark, WatermarkGenerator};

pub(crate) struct WatermarkOp<T> {
    pub(crate) generator: Option<WatermarkGenerator<T>>,
    pub(crate) core: OpCore<T>,
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
    fn flush(&mut self) {
        self.core.next.flush()
    }
    fn poll_pending(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), TaskError>> {
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
