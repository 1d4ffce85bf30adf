//! Operators: what a subtask does to each batch, and how chained operators hand batches on.
//!
//! Every operator, chained or not, is an [`Output`] of the operator before it: it takes a
//! whole batch, runs the user's function over it in a tight loop (monomorphized, no dynamic
//! call per record), and pushes its own output batch to the next [`Output`]. A chain of
//! forward operators is therefore a chain of per-batch calls inside one actor: no channel, no
//! copy. The last `Output` of a chain is a network output (`partition`) or a sink.
//!
//! User code runs inside [`OpCore::run`], which counts records per batch and turns a panic
//! into a [`TaskError`] naming the operator uid and subtask.
//!
//! One operator kind per file, named for its verb (`map`, `filter`, `flat_map`, `process`,
//! `keyed`, `connect`, `split`, `local` for `local_aggregate`; `lookup`, a folder, is public
//! as `weir::lookup`). This module does not own the actor loop (`task`).

pub(crate) mod apply;
pub(crate) mod connect;
pub(crate) mod filter;
pub(crate) mod flat_map;
pub(crate) mod handoff;
pub(crate) mod keyed;
pub(crate) mod keyed_apply;
pub(crate) mod local;
pub mod lookup;
pub(crate) mod map;
pub(crate) mod process;
pub(crate) mod side;
pub(crate) mod split;
pub(crate) mod step;
pub(crate) mod timers;
pub(crate) mod watermark;
pub mod window;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::task::{Context, Poll};

use crate::checkpoint::StateWriter;
use crate::error::{panic_message, TaskError};
use crate::metrics::OperatorCounters;
use crate::metrics::QueueUsage;
use crate::sync::Arc;

/// Where an operator pushes its output batches. Implemented by operators (for the operator
/// before them in a chain), network outputs and sinks.
pub(crate) trait Output<T>: Send {
    /// Takes every record out of `batch`, leaving it empty with its capacity.
    fn push(&mut self, batch: &mut Vec<T>) -> Result<(), TaskError>;
    /// Sends partial network batches now (linger expired or the subtask is idle).
    fn flush(&mut self);
    /// No more input: emit what the operator holds back, flush, and send end-of-input.
    fn finish(&mut self) -> Result<(), TaskError>;
    /// Moves batches waiting for credit into their channels, and lets operators with work in
    /// progress (async lookups) make progress; `Pending` while some channel has no credit or
    /// an operator cannot take input yet (the task is woken when it can). An error is a
    /// failure of the work in progress (a lookup that failed or timed out, a panic in it).
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TaskError>>;
    /// Adds the fill of the network channels this output sends to, and their capacity, in
    /// batches (batches waiting for credit count as queued).
    fn usage(&self, usage: &mut QueueUsage);
    /// Delivers a control request to the operator it names, if it is in this chain.
    fn control(&mut self, c: &mut Control<'_>);
    /// Checkpoint barrier `id`: add this operator's state to `w`, then pass the barrier on
    /// (network outputs send their partial batches first, then the barrier, in order).
    fn barrier(&mut self, id: u64, w: &mut StateWriter) -> Result<(), TaskError>;
    /// Checkpoint `id` is complete (sinks commit what they staged for it).
    fn notify_complete(&mut self, id: u64) -> Result<(), TaskError>;
    /// The input's event-time watermark advanced (or the input went idle): emit what it
    /// completes (window results, timers), then pass it on. Network outputs send it on every
    /// channel behind the records already emitted; sinks drop it.
    fn watermark(&mut self, w: crate::time::Watermark) -> Result<(), TaskError>;
    /// Adds this operator's own state to `w`, as [`barrier`](Self::barrier) would, without
    /// passing anything on (a backed-up primary hands its state to its backup between two
    /// batches). Operators without state add nothing.
    fn snapshot_state(&mut self, _w: &mut StateWriter) -> Result<(), TaskError> {
        Ok(())
    }
    /// In an operator with a buffer-queue backup, the wall-clock time (ms since the epoch)
    /// from which it wants to be told the processing time
    /// ([`advance_processing_time`](Self::advance_processing_time)): its next processing-time
    /// timer, or the next millisecond if it reads the clock for every batch. The gate logs
    /// each time it tells, so a promoted backup's replay tells the same times at the same
    /// places. `None`: it does not use the wall clock. Asked of the head of a gate's chain.
    fn next_processing_time(&self) -> Option<crate::time::EventTime> {
        None
    }
    /// The processing time is `now` (logged by the gate of a backed-up subtask, or replayed):
    /// fire the processing-time timers due, and take `now` as the time of the records that
    /// follow.
    fn advance_processing_time(&mut self, _now: crate::time::EventTime) -> Result<(), TaskError> {
        Ok(())
    }
    /// Whether the operator takes no records now: it has work its next records must wait
    /// for (event-time timers due at the watermark), done a budget at a time from
    /// [`poll_pending`](Self::poll_pending). Barriers and watermarks still come. Asked of the
    /// head of a gate's chain.
    fn holds_records(&self) -> bool {
        false
    }
    /// Whether the operator reads its input watermark and does not keep it in its own
    /// state (a keyed process function: its timers, `current_watermark`): its subtask's
    /// aligned checkpoints then keep the watermark its input had passed on, and a restore
    /// tells it that watermark before the first record. Asked of the head of a gate's chain.
    fn restores_watermark(&self) -> bool {
        false
    }
}

/// A control request for one operator of a chain (by uid), answered in place.
pub(crate) struct Control<'a> {
    pub(crate) uid: &'a str,
    pub(crate) action: ControlAction<'a>,
    pub(crate) outcome: Option<ControlOutcome>,
}

pub(crate) enum ControlAction<'a> {
    Configure {
        key: &'a str,
        value: &'a str,
    },
    /// Would `Configure` succeed? Tried on a copy of the operator.
    Validate {
        key: &'a str,
        value: &'a str,
    },
    Snapshot,
}

pub(crate) enum ControlOutcome {
    Configured(Result<(), crate::hooks::ConfigError>),
    Snapshot(Result<crate::hooks::StateSnapshot, crate::hooks::StateError>),
}

impl Control<'_> {
    /// Answers for an operator that has no hooks.
    pub(crate) fn unsupported(&mut self) {
        let uid = self.uid.to_owned();
        self.outcome = Some(match self.action {
            ControlAction::Configure { .. } | ControlAction::Validate { .. } => {
                ControlOutcome::Configured(Err(crate::hooks::ConfigError::NotSupported { uid }))
            }
            ControlAction::Snapshot => {
                ControlOutcome::Snapshot(Err(crate::hooks::StateError::NotSupported { uid }))
            }
        });
    }

    /// Answers with the hooks of `op`.
    pub(crate) fn apply<P: crate::hooks::Operator + Clone>(&mut self, op: &mut P) {
        self.outcome = Some(match self.action {
            ControlAction::Configure { key, value } => {
                ControlOutcome::Configured(op.on_config(key, value))
            }
            ControlAction::Validate { key, value } => {
                ControlOutcome::Configured(op.clone().on_config(key, value))
            }
            ControlAction::Snapshot => ControlOutcome::Snapshot(op.snapshot_state()),
        });
    }

    /// Answers here if `uid` is this operator's (without hooks), else passes it on.
    pub(crate) fn here_or<F: FnOnce(&mut Self)>(&mut self, uid: &str, next: F) {
        if self.uid == uid {
            self.unsupported()
        } else {
            next(self)
        }
    }
}

/// Combines the `poll_pending` answers of several outputs (every one is polled, so each
/// registers its waker): the first error, else `Pending` if any is pending.
pub(crate) fn all_ready(
    polls: impl IntoIterator<Item = Poll<Result<(), TaskError>>>,
) -> Poll<Result<(), TaskError>> {
    let mut out = Poll::Ready(Ok(()));
    for p in polls {
        match p {
            Poll::Ready(Err(e)) => {
                if !matches!(out, Poll::Ready(Err(_))) {
                    out = Poll::Ready(Err(e));
                }
            }
            Poll::Pending => {
                if matches!(out, Poll::Ready(Ok(()))) {
                    out = Poll::Pending;
                }
            }
            Poll::Ready(Ok(())) => {}
        }
    }
    out
}

/// Boxed output, the unit the plan builder wires together.
pub(crate) type BoxOutput<T> = Box<dyn Output<T>>;

/// Where an operator's function puts its output records.
///
/// ```
/// use weir::Collector;
/// fn split_words(line: String, out: &mut Collector<String>) {
///     for w in line.split_whitespace() {
///         out.collect(w.to_owned());
///     }
/// }
/// # let _ = split_words;
/// ```
#[derive(Debug)]
pub struct Collector<T> {
    buf: Vec<T>,
}

impl<T> Collector<T> {
    pub(crate) fn with_capacity(n: usize) -> Self {
        Collector {
            buf: Vec::with_capacity(n),
        }
    }
    /// Emits one record.
    #[inline]
    pub fn collect(&mut self, record: T) {
        self.buf.push(record);
    }
    /// Records emitted so far in this batch.
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    /// Whether nothing was emitted so far in this batch.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    pub(crate) fn buf(&mut self) -> &mut Vec<T> {
        &mut self.buf
    }
}

/// An empty collector, to test an operator's function outside a job.
///
/// ```
/// use weir::{Collector, ProcessFunction};
/// let mut double = |x: u64, out: &mut Collector<u64>| out.collect(x * 2);
/// let mut out = Collector::default();
/// double.process(21, &mut out);
/// assert_eq!(out.records(), &[42]);
/// ```
impl<T> Default for Collector<T> {
    fn default() -> Self {
        Collector { buf: Vec::new() }
    }
}

impl<T> Collector<T> {
    /// The records emitted so far in this batch.
    pub fn records(&self) -> &[T] {
        &self.buf
    }
}

impl<T> Extend<T> for Collector<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, iter: I) {
        self.buf.extend(iter)
    }
}

/// Identity of one operator instance: uid, name and subtask.
#[derive(Debug, Clone)]
pub struct OperatorInfo {
    /// The operator's stable uid.
    pub uid: String,
    /// Display name (the verb, or what the user set).
    pub name: String,
    /// This instance's subtask index.
    pub subtask: usize,
    /// The operator's parallelism.
    pub parallelism: usize,
    /// The key groups of a keyed operator's subtask, when they are one range (always by
    /// count, the default; `None` when rebalanced by load into several ranges, and for
    /// operators without keyed state).
    pub key_groups: Option<std::ops::Range<usize>>,
}

/// What every operator has: identity, counters, an output buffer and the next output.
pub(crate) struct OpCore<U> {
    pub(crate) info: Arc<OperatorInfo>,
    pub(crate) counters: Arc<OperatorCounters>,
    pub(crate) out: Collector<U>,
    /// The main output and the side outputs taken from this operator.
    pub(crate) next: side::Outputs<U>,
    /// Injected faults of this instance (testing).
    pub(crate) fault: Option<crate::fault::FaultProbe>,
}

impl<U> OpCore<U> {
    pub(crate) fn new(
        info: Arc<OperatorInfo>,
        counters: Arc<OperatorCounters>,
        next: BoxOutput<U>,
        batch_size: usize,
    ) -> Self {
        OpCore {
            info,
            counters,
            out: Collector::with_capacity(batch_size),
            next: side::Outputs {
                main: next,
                sides: side::SideOutputs::default(),
            },
            fault: None,
        }
    }

    /// Runs user code that reads `n_in` records and writes to the collector, then pushes the
    /// output on. A panic becomes a [`TaskError::Panic`] naming this operator.
    #[inline]
    pub(crate) fn run(
        &mut self,
        n_in: usize,
        f: impl FnOnce(&mut Collector<U>),
    ) -> Result<(), TaskError> {
        self.run_with_sides(n_in, |out, _| f(out))
    }

    /// [`run`](Self::run), with the operator's side outputs lent to the user code too.
    #[inline]
    pub(crate) fn run_with_sides(
        &mut self,
        n_in: usize,
        f: impl FnOnce(&mut Collector<U>, &mut side::SideOutputs),
    ) -> Result<(), TaskError> {
        self.counters.add_in(n_in);
        let (out, sides, fault) = (&mut self.out, &mut self.next.sides, &mut self.fault);
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| {
            if let Some(probe) = fault {
                probe.before_batch(n_in);
            }
            f(out, sides)
        })) {
            self.out.buf.clear();
            self.next.sides.clear();
            return Err(self.panic(payload));
        }
        self.emit()
    }

    /// At a checkpoint barrier, before the operator snapshots: fires an injected snapshot
    /// fault that is due (tests). A panic becomes a [`TaskError::Panic`] naming this operator.
    pub(crate) fn at_barrier(&mut self, w: &StateWriter) -> Result<(), TaskError> {
        let Some(probe) = self.fault.as_ref() else {
            return Ok(());
        };
        catch_unwind(AssertUnwindSafe(|| probe.at_snapshot(w.hand_over)))
            .map_err(|payload| self.panic(payload))
    }

    /// Pushes whatever is in the collector to the next output.
    #[inline]
    pub(crate) fn emit(&mut self) -> Result<(), TaskError> {
        if !self.out.buf.is_empty() {
            self.counters.add_out(self.out.buf.len());
            self.next.main.push(&mut self.out.buf)?;
        }
        if self.next.sides.is_empty() {
            return Ok(());
        }
        self.next.sides.emit(&self.counters)
    }

    /// A state that could not be encoded or restored, naming this operator.
    pub(crate) fn state_error(&self, message: String) -> TaskError {
        TaskError::Checkpoint {
            uid: self.info.uid.clone(),
            subtask: self.info.subtask,
            message,
        }
    }

    pub(crate) fn panic(&self, payload: Box<dyn std::any::Any + Send>) -> TaskError {
        TaskError::Panic {
            uid: self.info.uid.clone(),
            subtask: self.info.subtask,
            message: panic_message(&*payload),
        }
    }

    /// Runs a user end-of-input hook, emits what it produced, and finishes the next output.
    pub(crate) fn finish_with(
        &mut self,
        f: impl FnOnce(&mut Collector<U>),
    ) -> Result<(), TaskError> {
        self.finish_with_sides(|out, _| f(out))
    }

    /// [`finish_with`](Self::finish_with), with the side outputs lent to the hook too.
    pub(crate) fn finish_with_sides(
        &mut self,
        f: impl FnOnce(&mut Collector<U>, &mut side::SideOutputs),
    ) -> Result<(), TaskError> {
        let (out, sides) = (&mut self.out, &mut self.next.sides);
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| f(out, sides))) {
            self.out.buf.clear();
            self.next.sides.clear();
            return Err(self.panic(payload));
        }
        self.emit()?;
        self.next.finish()
    }
}

/// Implements the forwarding methods of [`Output`] that an operator with an `OpCore` field
/// named `core` passes straight on: flush, pending output, usage, control, completion.
macro_rules! forward_output_io {
    () => {
        fn flush(&mut self) {
            self.core.next.flush()
        }
        fn poll_pending(
            &mut self,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), $crate::error::TaskError>> {
            self.core.next.poll_pending(cx)
        }
        fn usage(&self, usage: &mut $crate::metrics::QueueUsage) {
            self.core.next.usage(usage)
        }
        fn control(&mut self, c: &mut $crate::operator::Control<'_>) {
            let next = &mut self.core.next;
            c.here_or(&self.core.info.uid, |c| next.control(c))
        }
        fn notify_complete(&mut self, id: u64) -> Result<(), $crate::error::TaskError> {
            self.core.next.notify_complete(id)
        }
    };
}
pub(crate) use forward_output_io;

/// [`forward_output_io`], and barriers and watermarks passed on too (an operator whose
/// only state is in `core`).
macro_rules! forward_output_plumbing {
    () => {
        $crate::operator::forward_output_io!();
        fn barrier(
            &mut self,
            id: u64,
            w: &mut $crate::checkpoint::StateWriter,
        ) -> Result<(), $crate::error::TaskError> {
            self.core.at_barrier(w)?;
            self.core.next.barrier(id, w)
        }
        fn watermark(
            &mut self,
            w: $crate::time::Watermark,
        ) -> Result<(), $crate::error::TaskError> {
            self.core.next.watermark(w)
        }
    };
}
pub(crate) use forward_output_plumbing;

/// Sends each batch to several outputs: a stream consumed by more than one operator. All but
/// the last get a clone.
pub(crate) struct Tee<T> {
    outs: Vec<BoxOutput<T>>,
    scratch: Vec<T>,
}

impl<T: Clone + Send + 'static> Tee<T> {
    pub(crate) fn boxed(mut outs: Vec<BoxOutput<T>>) -> BoxOutput<T> {
        match outs.len() {
            0 => Box::new(Discard),
            1 => outs.pop().expect("one output"),
            _ => Box::new(Tee {
                outs,
                scratch: Vec::new(),
            }),
        }
    }
}

impl<T: Clone + Send + 'static> Output<T> for Tee<T> {
    fn push(&mut self, batch: &mut Vec<T>) -> Result<(), TaskError> {
        let (last, rest) = self.outs.split_last_mut().expect("tee has outputs");
        for out in rest {
            self.scratch.extend_from_slice(batch);
            out.push(&mut self.scratch)?;
        }
        last.push(batch)
    }
    fn flush(&mut self) {
        self.outs.iter_mut().for_each(|o| o.flush())
    }
    fn finish(&mut self) -> Result<(), TaskError> {
        self.outs.iter_mut().try_for_each(|o| o.finish())
    }
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TaskError>> {
        all_ready(self.outs.iter_mut().map(|o| o.poll_pending(cx)))
    }
    fn usage(&self, usage: &mut QueueUsage) {
        self.outs.iter().for_each(|o| o.usage(usage))
    }
    fn control(&mut self, c: &mut Control<'_>) {
        for o in &mut self.outs {
            if c.outcome.is_some() {
                return;
            }
            o.control(c);
        }
    }
    fn barrier(&mut self, id: u64, w: &mut StateWriter) -> Result<(), TaskError> {
        self.outs.iter_mut().try_for_each(|o| o.barrier(id, w))
    }
    fn notify_complete(&mut self, id: u64) -> Result<(), TaskError> {
        self.outs.iter_mut().try_for_each(|o| o.notify_complete(id))
    }
    fn watermark(&mut self, w: crate::time::Watermark) -> Result<(), TaskError> {
        self.outs.iter_mut().try_for_each(|o| o.watermark(w))
    }
}

/// Drops records: the output of a stream nothing consumes, and the `discard` sink.
pub(crate) struct Discard;

impl<T> Output<T> for Discard {
    fn push(&mut self, batch: &mut Vec<T>) -> Result<(), TaskError> {
        batch.clear();
        Ok(())
    }
    fn flush(&mut self) {}
    fn finish(&mut self) -> Result<(), TaskError> {
        Ok(())
    }
    fn poll_pending(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), TaskError>> {
        Poll::Ready(Ok(()))
    }
    fn usage(&self, _usage: &mut QueueUsage) {}
    fn control(&mut self, _c: &mut Control<'_>) {}
    fn barrier(&mut self, _id: u64, _w: &mut StateWriter) -> Result<(), TaskError> {
        Ok(())
    }
    fn notify_complete(&mut self, _id: u64) -> Result<(), TaskError> {
        Ok(())
    }
    fn watermark(&mut self, _w: crate::time::Watermark) -> Result<(), TaskError> {
        Ok(())
    }
}
