//! Side outputs (Flink's `OutputTag`): records of another type that an operator's function
//! emits beside its main output, from its context (`ctx.output(&tag, value)`), read as a
//! stream of their own with [`DataStream::get_side_output`](crate::DataStream::get_side_output).
//!
//! This module owns the tag, the operator's outputs as a whole ([`Outputs`]: the main output
//! and the side outputs that streams were taken from), and the plain context of a
//! [`ProcessFunction`](crate::ProcessFunction) ([`ProcessContext`]). A side output is an
//! output port of the operator's node like any other: its records are pushed at the end of
//! each batch, before the barrier or watermark that follows them, so checkpoints, restarts
//! and rescales treat them as they treat the main output. It does not own the keyed and
//! window contexts (`timers`, `window`), which lend their side outputs from here.
//!
//! ```
//! use weir::{Collector, Env, OutputTag, ProcessContext, ProcessFunction};
//!
//! /// Even numbers on; odd ones, as text, to a side output.
//! #[derive(Clone)]
//! struct Evens { odd: OutputTag<String> }
//! impl ProcessFunction<u64, u64> for Evens {
//!     fn process_with_ctx(&mut self, x: u64, ctx: &mut ProcessContext<'_>, out: &mut Collector<u64>) {
//!         if x % 2 == 0 {
//!             out.collect(x);
//!         } else {
//!             ctx.output(&self.odd, format!("odd {x}"));
//!         }
//!     }
//! }
//!
//! let env = Env::new();
//! let odd = OutputTag::<String>::new("odd");
//! let evens = env.from_collection(vec![1, 2, 3, 4]).process(Evens { odd: odd.clone() });
//! let odds = evens.get_side_output(&odd).collect();
//! let evens = evens.collect();
//! env.execute("side-output-doc").unwrap();
//! assert_eq!(evens.take(), vec![2, 4]);
//! assert_eq!(odds.take(), vec!["odd 1".to_owned(), "odd 3".to_owned()]);
//! ```

use std::any::Any;
use std::marker::PhantomData;
use std::task::{Context, Poll};

use super::{all_ready, BoxOutput, Control, Output};
use crate::checkpoint::StateWriter;
use crate::error::TaskError;
use crate::metrics::{OperatorCounters, QueueUsage};
use std::sync::Arc;

/// Names a side output of type `T` (Flink's `OutputTag`). Give a clone to the function that
/// emits to it (`ctx.output(&tag, value)`), and take the stream with
/// [`DataStream::get_side_output`](crate::DataStream::get_side_output). Tags are equal when
/// their names are; one operator's side outputs have distinct names.
///
/// Records emitted to a tag whose stream was never taken are dropped, as in Flink.
pub struct OutputTag<T> {
    name: Arc<str>,
    _t: PhantomData<fn() -> T>,
}

impl<T> OutputTag<T> {
    /// A tag named `name` (the name a side output is found by).
    pub fn new(name: impl Into<String>) -> Self {
        OutputTag {
            name: Arc::from(name.into()),
            _t: PhantomData,
        }
    }

    /// The tag's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl<T> Clone for OutputTag<T> {
    fn clone(&self) -> Self {
        OutputTag {
            name: self.name.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for OutputTag<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputTag")
            .field("name", &&*self.name)
            .field("type", &std::any::type_name::<T>())
            .finish()
    }
}

/// What a [`ProcessFunction`](crate::ProcessFunction) can do besides emitting to its main
/// output: emit to side outputs.
pub struct ProcessContext<'a> {
    sides: &'a mut SideOutputs,
}

impl<'a> ProcessContext<'a> {
    pub(crate) fn new(sides: &'a mut SideOutputs) -> Self {
        ProcessContext { sides }
    }

    /// Emits `value` to the side output `tag` (dropped if its stream was not taken).
    #[inline]
    pub fn output<T: 'static>(&mut self, tag: &OutputTag<T>, value: T) {
        self.sides.output(tag, value)
    }

    pub(crate) fn sides(&mut self) -> &mut SideOutputs {
        self.sides
    }
}

/// The side outputs of one operator instance, each with the records emitted to it in the
/// batch being processed.
#[derive(Default)]
pub(crate) struct SideOutputs {
    slots: Vec<Box<dyn Side>>,
}

impl SideOutputs {
    pub(crate) fn new(slots: Vec<Box<dyn Side>>) -> Self {
        SideOutputs { slots }
    }

    /// Buffers `value` for the side output named by `tag`; nothing if there is none.
    #[inline]
    pub(crate) fn output<T: 'static>(&mut self, tag: &OutputTag<T>, value: T) {
        let Some(slot) = self.slots.iter_mut().find(|s| s.is(&tag.name)) else {
            return;
        };
        // The plan checked the type when the stream was taken; a tag of the same name and
        // another type cannot reach here, but is dropped rather than trusted.
        if let Some(buf) = slot.buf().downcast_mut::<Vec<T>>() {
            buf.push(value);
        }
    }

    /// Whether the operator has no side output.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Drops what the batch being processed emitted (its user code panicked).
    pub(crate) fn clear(&mut self) {
        for s in &mut self.slots {
            s.clear();
        }
    }

    /// Pushes every side output's buffered records on, counting them as the operator's output.
    pub(crate) fn emit(&mut self, counters: &OperatorCounters) -> Result<(), TaskError> {
        for s in &mut self.slots {
            let n = s.emit()?;
            if n > 0 {
                counters.add_out(n);
            }
        }
        Ok(())
    }
}

/// One side output, its record type erased.
pub(crate) trait Side: Send {
    fn is(&self, name: &Arc<str>) -> bool;
    /// The buffer (`Vec<T>`) the records emitted in this batch wait in.
    fn buf(&mut self) -> &mut dyn Any;
    /// Pushes the buffer on; how many records it held.
    fn emit(&mut self) -> Result<usize, TaskError>;
    fn clear(&mut self);
    fn output(&mut self) -> &mut dyn Plumbing;
    fn usage(&self, usage: &mut QueueUsage);
}

/// What passes through a side output besides records (its type erased).
pub(crate) trait Plumbing: Send {
    fn flush(&mut self);
    fn finish(&mut self) -> Result<(), TaskError>;
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TaskError>>;
    fn control(&mut self, c: &mut Control<'_>);
    fn barrier(&mut self, id: u64, w: &mut StateWriter) -> Result<(), TaskError>;
    fn notify_complete(&mut self, id: u64) -> Result<(), TaskError>;
    fn watermark(&mut self, w: crate::time::Watermark) -> Result<(), TaskError>;
}

impl<T> Plumbing for BoxOutput<T> {
    fn flush(&mut self) {
        Output::flush(&mut **self)
    }
    fn finish(&mut self) -> Result<(), TaskError> {
        Output::finish(&mut **self)
    }
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TaskError>> {
        Output::poll_pending(&mut **self, cx)
    }
    fn control(&mut self, c: &mut Control<'_>) {
        Output::control(&mut **self, c)
    }
    fn barrier(&mut self, id: u64, w: &mut StateWriter) -> Result<(), TaskError> {
        Output::barrier(&mut **self, id, w)
    }
    fn notify_complete(&mut self, id: u64) -> Result<(), TaskError> {
        Output::notify_complete(&mut **self, id)
    }
    fn watermark(&mut self, w: crate::time::Watermark) -> Result<(), TaskError> {
        Output::watermark(&mut **self, w)
    }
}

/// A side output of records of type `T`.
pub(crate) struct Slot<T> {
    name: Arc<str>,
    buf: Vec<T>,
    next: BoxOutput<T>,
}

impl<T: Send + 'static> Slot<T> {
    pub(crate) fn boxed(name: Arc<str>, next: BoxOutput<T>) -> Box<dyn Side> {
        Box::new(Slot {
            name,
            buf: Vec::new(),
            next,
        })
    }
}

impl<T: Send + 'static> Side for Slot<T> {
    #[inline]
    fn is(&self, name: &Arc<str>) -> bool {
        Arc::ptr_eq(&self.name, name) || *self.name == **name
    }
    fn buf(&mut self) -> &mut dyn Any {
        &mut self.buf
    }
    fn emit(&mut self) -> Result<usize, TaskError> {
        let n = self.buf.len();
        if n > 0 {
            self.next.push(&mut self.buf)?;
        }
        Ok(n)
    }
    fn clear(&mut self) {
        self.buf.clear()
    }
    fn output(&mut self) -> &mut dyn Plumbing {
        &mut self.next
    }
    fn usage(&self, usage: &mut QueueUsage) {
        self.next.usage(usage)
    }
}

/// An operator's outputs: the main one and its side outputs. Everything but records goes to
/// each of them (barriers, watermarks, flushes, the end of input), the side outputs' buffered
/// records first, so a side record is never behind a barrier that followed it.
pub(crate) struct Outputs<U> {
    pub(crate) main: BoxOutput<U>,
    pub(crate) sides: SideOutputs,
}

impl<U> Outputs<U> {
    fn each(
        &mut self,
        mut f: impl FnMut(&mut dyn Plumbing) -> Result<(), TaskError>,
    ) -> Result<(), TaskError> {
        for s in &mut self.sides.slots {
            s.emit()?;
            f(s.output())?;
        }
        Ok(())
    }
}

impl<U> Output<U> for Outputs<U> {
    #[inline]
    fn push(&mut self, batch: &mut Vec<U>) -> Result<(), TaskError> {
        self.main.push(batch)
    }
    fn flush(&mut self) {
        self.main.flush();
        for s in &mut self.sides.slots {
            s.output().flush();
        }
    }
    fn finish(&mut self) -> Result<(), TaskError> {
        self.each(|o| o.finish())?;
        self.main.finish()
    }
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TaskError>> {
        let main = self.main.poll_pending(cx);
        if self.sides.slots.is_empty() {
            return main;
        }
        let sides: Vec<_> = self
            .sides
            .slots
            .iter_mut()
            .map(|s| s.output().poll_pending(cx))
            .collect();
        all_ready(std::iter::once(main).chain(sides))
    }
    fn usage(&self, usage: &mut QueueUsage) {
        self.main.usage(usage);
        for s in &self.sides.slots {
            s.usage(usage);
        }
    }
    fn control(&mut self, c: &mut Control<'_>) {
        self.main.control(c);
        for s in &mut self.sides.slots {
            if c.outcome.is_some() {
                return;
            }
            s.output().control(c);
        }
    }
    fn barrier(&mut self, id: u64, w: &mut StateWriter) -> Result<(), TaskError> {
        self.each(|o| o.barrier(id, w))?;
        self.main.barrier(id, w)
    }
    fn notify_complete(&mut self, id: u64) -> Result<(), TaskError> {
        self.each(|o| o.notify_complete(id))?;
        self.main.notify_complete(id)
    }
    fn watermark(&mut self, w: crate::time::Watermark) -> Result<(), TaskError> {
        self.each(|o| o.watermark(w))?;
        self.main.watermark(w)
    }
}
