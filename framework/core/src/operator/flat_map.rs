//! `flat_map`: zero or more records out per record in.

use super::{forward_output_plumbing, OpCore, Output};
use crate::error::TaskError;

pub(crate) struct FlatMapOp<F, U> {
    pub(crate) f: F,
    pub(crate) core: OpCore<U>,
}

impl<T, U, I, F> Output<T> for FlatMapOp<F, U>
where
    F: FnMut(T) -> I + Send,
    I: IntoIterator<Item = U>,
    U: Send,
{
    #[inline]
    fn push(&mut self, batch: &mut Vec<T>) -> Result<(), TaskError> {
        let f = &mut self.f;
        self.core.run(batch.len(), |out| {
            for r in batch.drain(..) {
                out.buf().extend(f(r));
            }
        })
    }
    fn finish(&mut self) -> Result<(), TaskError> {
        self.core.finish_with(|_| {})
    }
    forward_output_plumbing!();
}
