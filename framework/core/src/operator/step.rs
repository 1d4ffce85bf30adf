//! What a subtask actor drives: a [`SourceStep`] (a source and the chain it feeds) or a set
//! of [`InputGate`]s (logical inputs, each its channels and the operators they feed). The
//! actor (`task`) owns the loop that calls them; gates and sources implement them
//! (`gate`, `source`). This module owns only the contracts.

use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use crate::checkpoint::StateWriter;
use crate::error::TaskError;
use crate::metrics::QueueUsage;
use crate::operator::Control;

/// One step of an input gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GateStep {
    /// A batch of this many records was taken from a channel and processed (its first slice,
    /// for slow operators).
    Batch(usize),
    /// The next slice of this many records of a batch taken earlier was processed.
    Slice(usize),
    /// A channel delivered a watermark (passed on to the operator if it moved this input's),
    /// or the gate did other work that took no record (told a backed-up operator the time;
    /// sent its buffered output before a hand-off).
    Watermark,
    /// Channel `channel` (of this input) delivered a checkpoint barrier.
    Barrier {
        channel: usize,
        barrier: crate::channel::Barrier,
    },
    /// Channel `channel` ended; `all`: every channel of this input has ended and the operator
    /// was told.
    ChannelEnded { channel: usize, all: bool },
    /// Every channel of this input had ended, and the operator, done with the work the end
    /// made due, was now told.
    Finished,
    /// Nothing available now.
    Empty,
}

/// One logical input of a subtask: its channels and the operator they feed.
pub(crate) trait InputGate: Send {
    /// Processes at most one event from one channel (round robin), skipping the channels
    /// `blocked` names (by index within this input).
    fn try_step(&mut self, blocked: &dyn Fn(usize) -> bool) -> Result<GateStep, TaskError>;
    /// Number of channels of this input.
    fn channels(&self) -> usize;
    /// A channel of this input whose checkpoint barrier overtook the events queued in front
    /// of it, and the barrier. With `in_band`, a barrier queued in band is moved to the head
    /// first (an unaligned checkpoint does not wait for what is before it).
    fn overtaking(&mut self, in_band: bool) -> Option<(usize, crate::channel::Barrier)>;
    /// Takes `channel`'s overtaking barrier of checkpoint `id`; with `record`, the events it
    /// overtook become channel state (they stay queued, and are processed as usual). False if
    /// the barrier waiting there is no longer `id`'s (a newer one replaced it): nothing taken.
    fn take_overtaken(&mut self, channel: usize, id: u64, record: bool) -> bool;
    /// Starts or stops recording `channel`'s batches as channel state.
    fn set_recording(&mut self, channel: usize, on: bool);
    /// The recorded channel state (encoded), and stops recording.
    fn take_channel_state(&mut self) -> Result<Vec<u8>, String>;
    /// An aligned checkpoint's channel state: none in flight, but the watermark the input
    /// passed on, if its operator is to be told it on restore (`Output::restores_watermark`).
    fn aligned_channel_state(&self) -> Option<Result<Vec<u8>, String>>;
    /// Passes checkpoint barrier `id` to the operators behind this input.
    fn barrier(&mut self, id: u64, w: &mut StateWriter) -> Result<(), TaskError>;
    /// Checkpoint `id` is complete.
    fn notify_complete(&mut self, id: u64) -> Result<(), TaskError>;
    fn flush(&mut self);
    fn poll_pending(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), TaskError>>;
    fn is_ended(&self) -> bool;
    /// The subtask is about to park: wakes every sender into this input that waits for
    /// credit (see `channel`'s hand-offs).
    fn release(&self);
    /// Batches waiting in this input's channels.
    fn queued(&self) -> usize;
    /// Total capacity of this input's channels, in batches.
    fn capacity(&self) -> usize;
    /// Records in the batches waiting in this input's channels.
    fn queued_records(&self) -> usize;
    /// Fill of the channels the operators behind this input send to.
    fn output_usage(&self, usage: &mut QueueUsage);
    /// Delivers a control request to the operators behind this input.
    fn control(&mut self, c: &mut Control<'_>);
    /// This input's watermark and the channel holding it back (metrics).
    fn watermark(&self) -> crate::time::InputWatermark;
}

/// What one step of a source produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SourceProgress {
    More,
    Ended,
    /// The rate limit allows no record before this long.
    Throttled(Duration),
    /// The source has nothing now: poll it again when woken, or after this long if given.
    Idle(Option<Duration>),
}

/// A source and the chain it feeds.
pub(crate) trait SourceStep: Send {
    /// Reads one batch (at most what the rate limit allows) and pushes it through the chain.
    fn step(&mut self, now: Instant) -> Result<SourceProgress, TaskError>;
    fn flush(&mut self);
    /// Registers `waker` to be woken when the source's `SourceWaker` is; whether it was
    /// woken since the last step began (then step again now).
    fn woken(&self, waker: &std::task::Waker) -> bool;
    fn poll_pending(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), TaskError>>;
    /// Sets (or with `None` lifts) the source's rate limit, in records per second.
    fn set_rate(&mut self, now: Instant, rate: Option<f64>);
    fn output_usage(&self, usage: &mut QueueUsage);
    /// Delivers a control request to the source or the operators behind it.
    fn control(&mut self, c: &mut Control<'_>);
    /// Checkpoint `id`: the source's position and its chain's states, then the barrier
    /// downstream (not after the source has ended: its channels have ended too).
    fn checkpoint(&mut self, id: u64, w: &mut StateWriter) -> Result<(), TaskError>;
    /// Checkpoint `id` is complete.
    fn notify_complete(&mut self, id: u64) -> Result<(), TaskError>;
}
