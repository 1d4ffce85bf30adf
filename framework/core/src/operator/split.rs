//! `split`: routes `Ok` records to one output and `Err` records to another (side outputs).
//! `Err` records are also counted as rejected (a source's malformed lines).

use std::task::{Context, Poll};

use super::{Collector, OpCore, Output};
use crate::error::TaskError;

pub(crate) struct SplitOp<A, B> {
    pub(crate) core: OpCore<A>,
    pub(crate) side: Collector<B>,
    pub(crate) side_next: super::BoxOutput<B>,
}

impl<A: Send, B: Send> Output<Result<A, B>> for SplitOp<A, B> {
    fn push(&mut self, batch: &mut Vec<Result<A, B>>) -> Result<(), TaskError> {
        let side = &mut self.side;
        self.core.run(batch.len(), |out| {
            for r in batch.drain(..) {
                match r {
                    Ok(a) => out.collect(a),
                    Err(b) => side.collect(b),
                }
            }
        })?;
        if !self.side.is_empty() {
            self.core.counters.add_out(self.side.len());
            self.core.counters.add_rejected(self.side.len() as u64);
            self.side_next.push(self.side.buf())?;
        }
        Ok(())
    }
    fn flush(&mut self) {
        self.core.next.flush();
        self.side_next.flush();
    }
    fn finish(&mut self) -> Result<(), TaskError> {
        self.core.finish_with(|_| {})?;
        self.side_next.finish()
    }
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TaskError>> {
        let a = self.core.next.poll_pending(cx);
        let b = self.side_next.poll_pending(cx);
        super::all_ready([a, b])
    }
    fn usage(&self, usage: &mut crate::metrics::QueueUsage) {
        self.core.next.usage(usage);
        self.side_next.usage(usage);
    }
    fn barrier(
        &mut self,
        id: u64,
        w: &mut crate::checkpoint::StateWriter,
    ) -> Result<(), TaskError> {
        self.core.at_barrier(w)?;
        self.core.next.barrier(id, w)?;
        self.side_next.barrier(id, w)
    }
    fn notify_complete(&mut self, id: u64) -> Result<(), TaskError> {
        self.core.next.notify_complete(id)?;
        self.side_next.notify_complete(id)
    }
    fn watermark(&mut self, w: crate::time::Watermark) -> Result<(), TaskError> {
        self.core.next.watermark(w)?;
        self.side_next.watermark(w)
    }
    fn control(&mut self, c: &mut super::Control<'_>) {
        let (next, side) = (&mut self.core.next, &mut self.side_next);
        c.here_or(&self.core.info.uid, |c| {
            next.control(c);
            if c.outcome.is_none() {
                side.control(c);
            }
        })
    }
}
