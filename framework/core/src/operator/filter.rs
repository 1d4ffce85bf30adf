//! `filter`: keeps the records a predicate accepts.

use super::{forward_output_plumbing, OpCore, Output};
use crate::error::TaskError;

pub(crate) struct FilterOp<F, T> {
    pub(crate) f: F,
    pub(crate) core: OpCore<T>,
}

impl<T, F> Output<T> for FilterOp<F, T>
where
    F: FnMut(&T) -> bool + Send,
    T: Send,
{
    #[inline]
    fn push(&mut self, batch: &mut Vec<T>) -> Result<(), TaskError> {
        let f = &mut self.f;
        self.core.run(batch.len(), |out| {
            out.buf().extend(batch.drain(..).filter(|r| f(r)))
        })
    }
    fn finish(&mut self) -> Result<(), TaskError> {
        self.core.finish_with(|_| {})
    }
    forward_output_plumbing!();
}
