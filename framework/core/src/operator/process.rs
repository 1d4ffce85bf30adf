//! `process`: a user operator with a collector and an end-of-input hook.

use super::side::ProcessContext;
use super::{forward_output_plumbing, Collector, OpCore, Output};
use crate::error::TaskError;

/// A one-input operator. One required method; closures `FnMut(I, &mut Collector<O>)`
/// implement it.
///
/// ```
/// use weir::{Collector, ProcessFunction};
/// #[derive(Clone, Default)]
/// struct Dedup { last: Option<u64> }
/// impl ProcessFunction<u64, u64> for Dedup {
///     fn process(&mut self, x: u64, out: &mut Collector<u64>) {
///         if self.last != Some(x) { out.collect(x); }
///         self.last = Some(x);
///     }
/// }
/// # let _ = Dedup::default();
/// ```
pub trait ProcessFunction<I, O>: Send + 'static {
    /// Handles one record. Implement this, or [`process_with_ctx`](Self::process_with_ctx)
    /// to emit to side outputs.
    ///
    /// # Panics
    /// The provided body panics (failing the subtask, naming the operator): a function must
    /// implement one of the two.
    fn process(&mut self, _input: I, _out: &mut Collector<O>) {
        panic!(
            "{} implements neither `process` nor `process_with_ctx` of ProcessFunction",
            std::any::type_name::<Self>()
        )
    }
    /// Handles one record with its context, through which it may emit to side outputs
    /// ([`ProcessContext::output`]). By default, [`process`](Self::process).
    #[inline]
    fn process_with_ctx(
        &mut self,
        input: I,
        _ctx: &mut ProcessContext<'_>,
        out: &mut Collector<O>,
    ) {
        self.process(input, out)
    }
    /// Called once when the input has ended, before the output ends.
    fn end_of_input(&mut self, _out: &mut Collector<O>) {}
}

impl<I, O, F> ProcessFunction<I, O> for F
where
    F: FnMut(I, &mut Collector<O>) + Send + 'static,
{
    fn process(&mut self, input: I, out: &mut Collector<O>) {
        self(input, out)
    }
}

pub(crate) struct ProcessOp<P, O> {
    pub(crate) f: P,
    pub(crate) core: OpCore<O>,
}

impl<I, O, P> Output<I> for ProcessOp<P, O>
where
    P: ProcessFunction<I, O>,
    O: Send,
{
    #[inline]
    fn push(&mut self, batch: &mut Vec<I>) -> Result<(), TaskError> {
        let f = &mut self.f;
        self.core.run_with_sides(batch.len(), |out, sides| {
            let ctx = &mut ProcessContext::new(sides);
            for r in batch.drain(..) {
                f.process_with_ctx(r, ctx, out);
            }
        })
    }
    fn finish(&mut self) -> Result<(), TaskError> {
        let f = &mut self.f;
        self.core.finish_with(|out| f.end_of_input(out))
    }
    forward_output_plumbing!();
}
