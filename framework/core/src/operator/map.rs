//! `map`: one record in, one record out.

use super::{forward_output_plumbing, OpCore, Output};
use crate::error::TaskError;

pub(crate) struct MapOp<F, U> {
    pub(crate) f: F,
    pub(crate) core: OpCore<U>,
}

impl<T, U, F> Output<T> for MapOp<F, U>
where
    F: FnMut(T) -> U + Send,
    U: Send,
{
    #[inline]
    fn push(&mut self, batch: &mut Vec<T>) -> Result<(), TaskError> {
        let f = &mut self.f;
        self.core
            .run(batch.len(), |out| out.buf().extend(batch.drain(..).map(f)))
    }
    fn finish(&mut self) -> Result<(), TaskError> {
        self.core.finish_with(|_| {})
    }
    forward_output_plumbing!();
}
