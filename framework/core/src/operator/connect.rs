//! Two-input operators: `connect` (two streams, one operator) and its broadcast variant.
//!
//! Both inputs of one subtask feed one operator instance, shared by the two input facades
//! under a mutex that is only ever taken by the subtask's own actor (so it is uncontended;
//! it exists because the two facades are separate `Output`s). The output ends when both
//! inputs have ended.
//!
//! An operator may ask to read only its second input for a while ([`InputSelection`], Flink's
//! `InputSelectable`): the broadcast variant uses it to load all of a bounded broadcast side
//! (rules, thresholds) before the first main record.

use std::marker::PhantomData;
use std::task::{Context, Poll};

use super::{Collector, OpCore, Output};
use crate::error::TaskError;
use crate::sync::atomic::{AtomicU8, Ordering};
use crate::sync::{lock, Arc, Mutex};
use crate::Data;

/// A two-input operator (`a.connect(b).process(..)`).
///
/// ```
/// use weir::{Collector, CoProcessFunction};
/// #[derive(Clone)]
/// struct Merge;
/// impl CoProcessFunction<u32, String, String> for Merge {
///     fn process1(&mut self, x: u32, out: &mut Collector<String>) { out.collect(x.to_string()) }
///     fn process2(&mut self, s: String, out: &mut Collector<String>) { out.collect(s) }
/// }
/// # let _ = Merge;
/// ```
pub trait CoProcessFunction<A, B, O>: Send + 'static {
    /// Handles a record of the first input.
    fn process1(&mut self, input: A, out: &mut Collector<O>);
    /// Handles a record of the second input.
    fn process2(&mut self, input: B, out: &mut Collector<O>);
    /// Called once when both inputs have ended.
    fn end_of_input(&mut self, _out: &mut Collector<O>) {}
}

/// A broadcast-connected operator: every subtask sees every broadcast record and keeps the
/// same broadcast state; main records read it (Flink's `BroadcastProcessFunction`).
///
/// ```
/// use weir::{BroadcastProcessFunction, Collector};
/// #[derive(Clone)]
/// struct Tag;
/// impl BroadcastProcessFunction<u64, String, String> for Tag {
///     type State = Vec<String>;
///     fn process_element(&mut self, x: u64, tags: &Vec<String>, out: &mut Collector<String>) {
///         out.collect(format!("{x}:{}", tags.join("|")));
///     }
///     fn process_broadcast(&mut self, t: String, tags: &mut Vec<String>, _out: &mut Collector<String>) {
///         tags.push(t);
///     }
/// }
/// # let _ = Tag;
/// ```
pub trait BroadcastProcessFunction<I, B, O>: Send + 'static {
    /// The broadcast state (the same on every subtask).
    type State: Default + Data;
    /// Handles a main-input record; the broadcast state is read-only here.
    fn process_element(&mut self, input: I, state: &Self::State, out: &mut Collector<O>);
    /// Handles a broadcast record.
    fn process_broadcast(&mut self, input: B, state: &mut Self::State, out: &mut Collector<O>);
    /// Called once when both inputs have ended.
    fn end_of_input(&mut self, _state: &Self::State, _out: &mut Collector<O>) {}
}

/// Which inputs a two-input subtask reads next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum InputSelection {
    /// Either input, fairly.
    All = 0,
    /// Only the first input (until it ends).
    First = 1,
    /// Only the second input (until it ends).
    Second = 2,
}

/// Shared cell through which an operator tells its subtask what to read.
#[derive(Debug, Default)]
pub(crate) struct SelectionCell(AtomicU8);

impl SelectionCell {
    pub(crate) fn new(s: InputSelection) -> Self {
        SelectionCell(AtomicU8::new(s as u8))
    }
    pub(crate) fn get(&self) -> InputSelection {
        match self.0.load(Ordering::Relaxed) {
            1 => InputSelection::First,
            2 => InputSelection::Second,
            _ => InputSelection::All,
        }
    }
    pub(crate) fn set(&self, s: InputSelection) {
        self.0.store(s as u8, Ordering::Relaxed)
    }
}

/// The two-input interface both public traits are adapted to.
pub(crate) trait TwoInput<A, B, O>: Send + 'static {
    fn process1(&mut self, input: A, out: &mut Collector<O>);
    fn process2(&mut self, input: B, out: &mut Collector<O>);
    fn end_of_input(&mut self, out: &mut Collector<O>);
    /// Answers a control request addressed to this operator.
    fn control(&mut self, c: &mut super::Control<'_>) {
        c.unsupported()
    }
    /// The operator's checkpointed state, if it keeps any.
    fn snapshot(&self) -> Result<Option<Vec<u8>>, String> {
        Ok(None)
    }
    /// Restores the state [`snapshot`](Self::snapshot) returned.
    fn restore(&mut self, _payload: &[u8]) -> Result<(), String> {
        Ok(())
    }
}

/// A two-input function with derived hooks (`ConnectedStreams::apply`).
pub(crate) struct HookedCo<P>(pub(crate) P);

impl<A, B, O, P> TwoInput<A, B, O> for HookedCo<P>
where
    P: CoProcessFunction<A, B, O> + crate::hooks::Operator + Clone,
{
    fn process1(&mut self, input: A, out: &mut Collector<O>) {
        self.0.process1(input, out)
    }
    fn process2(&mut self, input: B, out: &mut Collector<O>) {
        self.0.process2(input, out)
    }
    fn end_of_input(&mut self, out: &mut Collector<O>) {
        self.0.end_of_input(out)
    }
    fn control(&mut self, c: &mut super::Control<'_>) {
        c.apply(&mut self.0)
    }
    fn snapshot(&self) -> Result<Option<Vec<u8>>, String> {
        let snap = self.0.snapshot_state().map_err(|e| e.to_string())?;
        crate::checkpoint::encode(&snap).map(Some)
    }
    fn restore(&mut self, payload: &[u8]) -> Result<(), String> {
        super::apply::restore_hooked(&mut self.0, payload)
    }
}

/// A broadcast function with derived hooks (`BroadcastConnectedStreams::apply`).
pub(crate) struct HookedBroadcast<P, S>(pub(crate) BroadcastAdapter<P, S>);

impl<I, B, O, P> TwoInput<I, B, O> for HookedBroadcast<P, P::State>
where
    P: BroadcastProcessFunction<I, B, O> + crate::hooks::Operator + Clone,
{
    fn process1(&mut self, input: I, out: &mut Collector<O>) {
        self.0.process1(input, out)
    }
    fn process2(&mut self, input: B, out: &mut Collector<O>) {
        self.0.process2(input, out)
    }
    fn end_of_input(&mut self, out: &mut Collector<O>) {
        self.0.end_of_input(out)
    }
    fn control(&mut self, c: &mut super::Control<'_>) {
        c.apply(&mut self.0.f)
    }
    fn snapshot(&self) -> Result<Option<Vec<u8>>, String> {
        let hooks = self.0.f.snapshot_state().map_err(|e| e.to_string())?;
        crate::checkpoint::encode(&(hooks, &self.0.state)).map(Some)
    }
    fn restore(&mut self, payload: &[u8]) -> Result<(), String> {
        let (hooks, state): (crate::hooks::StateSnapshot, P::State) =
            crate::checkpoint::decode(payload)?;
        self.0.f.restore_state(&hooks).map_err(|e| e.to_string())?;
        self.0.state = state;
        Ok(())
    }
}

pub(crate) struct CoAdapter<P>(pub(crate) P);

impl<A, B, O, P: CoProcessFunction<A, B, O>> TwoInput<A, B, O> for CoAdapter<P> {
    fn process1(&mut self, input: A, out: &mut Collector<O>) {
        self.0.process1(input, out)
    }
    fn process2(&mut self, input: B, out: &mut Collector<O>) {
        self.0.process2(input, out)
    }
    fn end_of_input(&mut self, out: &mut Collector<O>) {
        self.0.end_of_input(out)
    }
}

pub(crate) struct BroadcastAdapter<P, S> {
    pub(crate) f: P,
    pub(crate) state: S,
}

impl<I, B, O, P> TwoInput<I, B, O> for BroadcastAdapter<P, P::State>
where
    P: BroadcastProcessFunction<I, B, O>,
{
    fn process1(&mut self, input: I, out: &mut Collector<O>) {
        self.f.process_element(input, &self.state, out)
    }
    fn process2(&mut self, input: B, out: &mut Collector<O>) {
        self.f.process_broadcast(input, &mut self.state, out)
    }
    fn end_of_input(&mut self, out: &mut Collector<O>) {
        self.f.end_of_input(&self.state, out)
    }
    fn snapshot(&self) -> Result<Option<Vec<u8>>, String> {
        crate::checkpoint::encode(&self.state).map(Some)
    }
    fn restore(&mut self, payload: &[u8]) -> Result<(), String> {
        self.state = crate::checkpoint::decode(payload)?;
        Ok(())
    }
}

struct CoShared<C, O> {
    op: C,
    core: OpCore<O>,
    ended: [bool; 2],
    selection: Arc<SelectionCell>,
    /// The event-time watermarks of the two inputs.
    watermarks: crate::time::WatermarkMerge,
}

/// One input side of a two-input operator; `SIDE` is 0 or 1.
pub(crate) struct CoSide<C, A, B, O, const SIDE: usize> {
    shared: Arc<Mutex<CoShared<C, O>>>,
    _types: PhantomData<fn(A, B)>,
}

/// Builds the two input facades of one two-input operator instance.
#[allow(clippy::type_complexity)]
pub(crate) fn co_sides<C, A, B, O>(
    op: C,
    core: OpCore<O>,
    selection: Arc<SelectionCell>,
) -> (CoSide<C, A, B, O, 0>, CoSide<C, A, B, O, 1>) {
    let shared = Arc::new(Mutex::new(CoShared {
        op,
        core,
        ended: [false; 2],
        selection,
        watermarks: crate::time::WatermarkMerge::new(2),
    }));
    (
        CoSide {
            shared: shared.clone(),
            _types: PhantomData,
        },
        CoSide {
            shared,
            _types: PhantomData,
        },
    )
}

macro_rules! co_side_impl {
    ($side:literal, $ty:ident, $method:ident, $other:expr) => {
        impl<A, B, O, C> Output<$ty> for CoSide<C, A, B, O, $side>
        where
            C: TwoInput<A, B, O>,
            O: Send,
            A: Send,
            B: Send,
        {
            fn push(&mut self, batch: &mut Vec<$ty>) -> Result<(), TaskError> {
                let mut g = lock(&self.shared);
                g.watermarks.activate($side);
                let CoShared { op, core, .. } = &mut *g;
                core.run(batch.len(), |out| {
                    for r in batch.drain(..) {
                        op.$method(r, out);
                    }
                })
            }
            fn flush(&mut self) {
                lock(&self.shared).core.next.flush()
            }
            fn finish(&mut self) -> Result<(), TaskError> {
                let mut g = lock(&self.shared);
                g.ended[$side] = true;
                if g.selection.get() != InputSelection::All {
                    g.selection.set(InputSelection::All);
                }
                if g.ended[$other] {
                    let CoShared { op, core, .. } = &mut *g;
                    core.finish_with(|out| op.end_of_input(out))
                } else {
                    Ok(())
                }
            }
            fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TaskError>> {
                lock(&self.shared).core.next.poll_pending(cx)
            }
            fn usage(&self, usage: &mut crate::metrics::QueueUsage) {
                // Both sides share one output: only the first reports it.
                if $side == 0 {
                    lock(&self.shared).core.next.usage(usage)
                }
            }
            fn barrier(
                &mut self,
                id: u64,
                w: &mut crate::checkpoint::StateWriter,
            ) -> Result<(), TaskError> {
                // Both sides share one operator: the first snapshots it and passes the
                // barrier on (the subtask calls it once both inputs are aligned).
                if $side != 0 {
                    return Ok(());
                }
                let mut g = lock(&self.shared);
                let CoShared { op, core, .. } = &mut *g;
                core.at_barrier(w)?;
                if let Some(payload) = op.snapshot().map_err(|e| core.state_error(e))? {
                    w.put(&core.info.uid, None, payload);
                }
                core.next.barrier(id, w)
            }
            fn notify_complete(&mut self, id: u64) -> Result<(), TaskError> {
                if $side != 0 {
                    return Ok(());
                }
                lock(&self.shared).core.next.notify_complete(id)
            }
            fn watermark(&mut self, w: crate::time::Watermark) -> Result<(), TaskError> {
                // The operator's watermark is the lower of its two inputs'.
                let mut g = lock(&self.shared);
                match g.watermarks.update($side, w) {
                    Some(w) => g.core.next.watermark(w),
                    None => Ok(()),
                }
            }
            fn control(&mut self, c: &mut super::Control<'_>) {
                // Both sides share one operator: only the first answers.
                if $side != 0 {
                    return;
                }
                let mut g = lock(&self.shared);
                let CoShared { op, core, .. } = &mut *g;
                if c.uid == core.info.uid {
                    op.control(c)
                } else {
                    core.next.control(c)
                }
            }
        }
    };
}

co_side_impl!(0, A, process1, 1);
co_side_impl!(1, B, process2, 0);
