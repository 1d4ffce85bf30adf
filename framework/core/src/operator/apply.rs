//! `apply`: a user operator with derived hooks (`#[derive(Operator)]`). It processes exactly
//! like `process` (it wraps a [`ProcessOp`]) and also answers live config changes and state
//! snapshots addressed to its uid.

use super::process::{ProcessFunction, ProcessOp};
use super::{Control, Output};
use crate::checkpoint::StateWriter;
use crate::error::TaskError;
use crate::hooks::Operator;
use crate::metrics::QueueUsage;

pub(crate) struct ApplyOp<P, O>(pub(crate) ProcessOp<P, O>);

impl<I, O, P> Output<I> for ApplyOp<P, O>
where
    P: ProcessFunction<I, O> + Operator + Clone,
    O: Send,
{
    #[inline]
    fn push(&mut self, batch: &mut Vec<I>) -> Result<(), TaskError> {
        self.0.push(batch)
    }
    fn finish(&mut self) -> Result<(), TaskError> {
        Output::<I>::finish(&mut self.0)
    }
    fn flush(&mut self) {
        Output::<I>::flush(&mut self.0)
    }
    fn poll_pending(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), TaskError>> {
        Output::<I>::poll_pending(&mut self.0, cx)
    }
    fn usage(&self, usage: &mut QueueUsage) {
        Output::<I>::usage(&self.0, usage)
    }
    fn control(&mut self, c: &mut Control<'_>) {
        if c.uid == self.0.core.info.uid {
            c.apply(&mut self.0.f)
        } else {
            self.0.core.next.control(c)
        }
    }
    fn barrier(&mut self, id: u64, w: &mut StateWriter) -> Result<(), TaskError> {
        self.0.core.at_barrier(w)?;
        self.snapshot_state(w)?;
        self.0.core.next.barrier(id, w)
    }
    fn snapshot_state(&mut self, w: &mut StateWriter) -> Result<(), TaskError> {
        let core = &self.0.core;
        let snap = self
            .0
            .f
            .snapshot_state()
            .map_err(|e| core.state_error(e.to_string()))?;
        let payload = crate::checkpoint::encode(&snap).map_err(|e| core.state_error(e))?;
        w.put(&core.info.uid, None, payload);
        Ok(())
    }
    fn notify_complete(&mut self, id: u64) -> Result<(), TaskError> {
        self.0.core.next.notify_complete(id)
    }
    fn watermark(&mut self, w: crate::time::Watermark) -> Result<(), TaskError> {
        self.0.core.next.watermark(w)
    }
}

/// Restores an operator with hooks from a checkpointed payload (a `StateSnapshot`).
pub(crate) fn restore_hooked<P: Operator>(op: &mut P, payload: &[u8]) -> Result<(), String> {
    let snap: crate::hooks::StateSnapshot = crate::checkpoint::decode(payload)?;
    op.restore_state(&snap).map_err(|e| e.to_string())
}
