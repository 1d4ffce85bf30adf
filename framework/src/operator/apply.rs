//! `apply`: a user operator with derived hooks (`#[derive(Operator)]`): it processes like
//! `process`, and also answers live config changes and state snapshots addressed to its uid.

use super::{Control, OpCore, Output};
use crate::error::TaskError;
use crate::hooks::Operator;
use crate::operator::process::ProcessFunction;

pub(crate) struct ApplyOp<P, O> {
    pub(crate) f: P,
    pub(crate) core: OpCore<O>,
}

impl<I, O, P> Output<I> for ApplyOp<P, O>
where
    P: ProcessFunction<I, O> + Operator,
    O: Send,
{
    #[inline]
    fn push(&mut self, batch: &mut Vec<I>) -> Result<(), TaskError> {
        let f = &mut self.f;
        self.core.run(batch.len(), |out| {
            for r in batch.drain(..) {
                f.process(r, out);
            }
        })
    }
    fn finish(&mut self) -> Result<(), TaskError> {
        let f = &mut self.f;
        self.core.finish_with(|out| f.end_of_input(out))
    }
    fn flush(&mut self) {
        self.core.next.flush()
    }
    fn poll_pending(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        self.core.next.poll_pending(cx)
    }
    fn usage(&self, usage: &mut super::QueueUsage) {
        self.core.next.usage(usage)
    }
    fn control(&mut self, c: &mut Control<'_>) {
        if c.uid == self.core.info.uid {
            c.apply(&mut self.f)
        } else {
            self.core.next.control(c)
        }
    }
}
