//! Input gates: the typed input side of one logical input of a subtask — its channels, read
//! round robin one batch at a time, and the operator chain they feed — with channel-state
//! recording and replay for unaligned checkpoints, and a backed-up primary's claims on its
//! buffer queue. The subtask actor (`task`) drives gates through
//! [`InputGate`](crate::operator::step::InputGate); the plan builds them through the graph's
//! typed ports; the backup group (`backup`) is handed [`typed_gate`] to build a promoted
//! primary's gate.

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::task::{Context, Poll};

use crate::backup::queue::Input;
use crate::backup::{Claims, Replay};
use crate::channel::{ewma, Event, Receiver};
use crate::error::TaskError;
use crate::operator::step::{GateStep, InputGate};
use crate::operator::BoxOutput;
use crate::Data;

/// The input gate over `receivers` feeding `head`; with `claims`, the gate of a backed-up
/// primary (each batch is claimed in the buffer queue first, output is flushed per batch).
pub(crate) fn typed_gate<T: Data>(
    receivers: Vec<Receiver<T>>,
    head: BoxOutput<T>,
    claims: Option<Box<Claims<T>>>,
) -> Box<dyn InputGate> {
    Box::new(TypedGate::new(receivers, head, claims))
}

/// One element of a channel's in-flight data in an unaligned checkpoint: a batch, or a
/// watermark (in-band, so a restore takes it at the same place among the records).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) enum InFlight<T> {
    Batch(u32, Vec<T>),
    Mark(u32, crate::time::Watermark),
}

/// [`InFlight`] as recorded, before it is encoded: a batch is shared with the channel or the
/// operator, not copied.
enum Recorded<T> {
    Batch(u32, std::sync::Arc<Vec<T>>),
    Mark(u32, crate::time::Watermark),
}

/// How [`InFlight`] is encoded from what was recorded (the same CBOR).
#[derive(serde::Serialize)]
enum InFlightRef<'a, T> {
    Batch(u32, &'a [T]),
    Mark(u32, crate::time::Watermark),
}

/// How [`ChannelState`] is encoded from what was recorded (the same CBOR).
#[derive(serde::Serialize)]
struct ChannelStateRef<'a, T> {
    marks: Option<crate::time::WatermarkMerge>,
    in_flight: Vec<InFlightRef<'a, T>>,
}

/// A gate's part of an unaligned checkpoint: its channels' watermarks when the operator's
/// state was snapshotted, and the in-flight data recorded after it, in the order taken.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct ChannelState<T> {
    pub(crate) marks: Option<crate::time::WatermarkMerge>,
    pub(crate) in_flight: Vec<InFlight<T>>,
}

impl<T: Data> ChannelState<T> {
    /// Keeps the records `owned` takes (restored channel state dealt by key group: a new
    /// subtask replays what its key groups were sent, in the order it was recorded).
    pub(crate) fn keep(&mut self, mut owned: crate::partition::Owned<T>) {
        self.in_flight.retain_mut(|f| match f {
            InFlight::Batch(_, batch) => {
                batch.retain(|r| owned(r));
                !batch.is_empty()
            }
            InFlight::Mark(..) => true,
        });
    }

    /// Reads a gate's channel state; also the format before watermarks were kept (the
    /// batches alone).
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, String> {
        match crate::checkpoint::decode::<ChannelState<T>>(bytes) {
            Ok(state) => Ok(state),
            Err(e) => match crate::checkpoint::decode::<Vec<Vec<T>>>(bytes) {
                Ok(batches) => Ok(ChannelState {
                    marks: None,
                    in_flight: batches.into_iter().map(|b| InFlight::Batch(0, b)).collect(),
                }),
                Err(_) => Err(e),
            },
        }
    }
}

#[cfg(test)]
mod dealt;

/// The gate over `receivers` feeding `head` that first processes `replay` (restored channel
/// state of an unaligned checkpoint), then its channels.
pub(crate) fn replaying_gate<T: Data>(
    receivers: Vec<Receiver<T>>,
    head: BoxOutput<T>,
    replay: ChannelState<T>,
) -> Box<dyn InputGate> {
    let mut gate = TypedGate::new(receivers, head, None);
    gate.replay = replay.in_flight.into();
    if let Some(m) = replay.marks.filter(|m| m.inputs() == gate.receivers.len()) {
        gate.marks = m;
        gate.tell_restored = true;
    }
    Box::new(gate)
}

/// The typed input side of one logical input of a subtask: its channels and the operator
/// they feed.
struct TypedGate<T> {
    receivers: Vec<Receiver<T>>,
    ended: Vec<bool>,
    n_ended: usize,
    /// Round robin: the channel to look at first next time.
    next: usize,
    head: BoxOutput<T>,
    scratch: Vec<T>,
    /// Channels whose batches and watermarks are being recorded as channel state (unaligned
    /// checkpoint).
    recording: Vec<bool>,
    recorded: Vec<Recorded<T>>,
    /// The channels' watermarks when the recording began (the operator's snapshot).
    recorded_marks: Option<crate::time::WatermarkMerge>,
    /// Restored channel state, processed before any new input.
    replay: VecDeque<InFlight<T>>,
    /// A backed-up primary's claims on its buffer queue.
    claims: Option<Box<Claims<T>>>,
    /// The channels' event-time watermarks.
    marks: crate::time::WatermarkMerge,
    /// What is left of a batch the operators get a slice at a time (see [`SLICE_NS`]), and
    /// its channel: taken before anything else.
    rest: Vec<T>,
    rest_from: usize,
    /// Moving average of the operators' time per record, ns (0: none yet).
    record_ns: u64,
    /// Every channel ended while the operator held work the `MAX` watermark made due (every
    /// window left): it is told the end once that work is done, a budget at a time from its
    /// `poll_pending`, so that its mailbox (heartbeats, barriers of other inputs) is served
    /// meanwhile.
    finishing: bool,
    /// The channels' watermarks were restored (a promoted primary's, from its restart point;
    /// an unaligned checkpoint's): the operator is told the watermark they had passed on
    /// before anything else, as the operator they were restored from had been. Without it
    /// an operator that does not keep its watermark in its state (a keyed process function)
    /// would take the records before the next watermark as on time, and not fire the timers
    /// that were due at its restart point before them.
    tell_restored: bool,
}

/// Records a backed-up primary copies out of a claimed batch at a time.
const CLAIMED_CHUNK: usize = 128;

/// The longest a gate's step should keep its subtask busy, ns: operators slower than this
/// over a whole batch (a slow sink chained behind them) get each batch a slice at a time,
/// one slice per step, so the subtask's mailbox, the barriers that overtake its queues and
/// the other subtasks on its arbiter wait about this long at most, not a whole batch.
const SLICE_NS: u64 = 500_000;

impl<T: Data> TypedGate<T> {
    fn new(
        receivers: Vec<Receiver<T>>,
        head: BoxOutput<T>,
        mut claims: Option<Box<Claims<T>>>,
    ) -> Self {
        let n = receivers.len();
        // A promoted primary merges its channels' watermarks from where the state it
        // restarts from had them, as the primary before it did.
        let restored = claims
            .as_mut()
            .and_then(|c| c.take_marks())
            .filter(|m| m.inputs() == n);
        let tell_restored = restored.is_some();
        let marks = restored.unwrap_or_else(|| crate::time::WatermarkMerge::new(n));
        TypedGate {
            receivers,
            ended: vec![false; n],
            n_ended: 0,
            next: 0,
            head,
            scratch: Vec::new(),
            recording: vec![false; n],
            recorded: Vec::new(),
            recorded_marks: None,
            replay: Default::default(),
            claims,
            marks,
            rest: Vec::new(),
            rest_from: 0,
            record_ns: 0,
            finishing: false,
            tell_restored,
        }
    }

    /// Tells the operator the restored channels' watermark, once, before its first input
    /// (see `tell_restored`); `None` if there is nothing to tell.
    fn tell_restored_mark(&mut self) -> Result<Option<GateStep>, TaskError> {
        if !std::mem::take(&mut self.tell_restored) {
            return Ok(None);
        }
        match self.marks.said() {
            Some(t) => {
                self.head.watermark(crate::time::Watermark::At(t))?;
                Ok(Some(GateStep::Watermark))
            }
            None => Ok(None),
        }
    }

    /// The records the operators get through in about [`SLICE_NS`] at their pace.
    #[inline]
    fn slice_len(&self) -> usize {
        match self.record_ns {
            0 => usize::MAX,
            ns => (SLICE_NS / ns).max(1) as usize,
        }
    }

    /// Gives the operators `scratch`, timing them.
    #[inline]
    fn timed_push(&mut self) -> Result<(), TaskError> {
        let n = self.scratch.len().max(1) as u64;
        let started = std::time::Instant::now();
        self.head.push(&mut self.scratch)?;
        let took = started.elapsed().as_nanos() as u64;
        self.record_ns = ewma(self.record_ns, (took / n).max(1));
        Ok(())
    }

    /// The next slice of `rest`.
    fn push_slice(&mut self) -> Result<GateStep, TaskError> {
        let k = self.slice_len().min(self.rest.len());
        if k == self.rest.len() {
            std::mem::swap(&mut self.scratch, &mut self.rest);
        } else {
            self.scratch.extend(self.rest.drain(..k));
        }
        self.timed_push()?;
        Ok(GateStep::Slice(k))
    }

    /// An unaligned checkpoint's snapshot: the channels' watermarks now, and the restored
    /// channel state not yet replayed, which comes after the snapshot too (copied into this
    /// checkpoint's channel state first: it is still to be replayed).
    fn begin_recording(&mut self) {
        if self.recorded_marks.is_some() {
            return;
        }
        self.recorded_marks = Some(self.marks.clone());
        for f in &self.replay {
            self.recorded.push(match f {
                InFlight::Batch(c, b) => Recorded::Batch(*c, std::sync::Arc::new(b.clone())),
                InFlight::Mark(c, w) => Recorded::Mark(*c, *w),
            });
        }
        // So is the rest of a batch given a slice at a time.
        if !self.rest.is_empty() {
            self.recorded.push(Recorded::Batch(
                self.rest_from as u32,
                std::sync::Arc::new(self.rest.clone()),
            ));
        }
    }

    fn end_channel(&mut self, idx: usize) -> Result<GateStep, TaskError> {
        if self.ended[idx] {
            return Ok(GateStep::Empty);
        }
        self.ended[idx] = true;
        self.n_ended += 1;
        let all = self.n_ended == self.receivers.len();
        // An ended channel no longer holds the watermark back (all ended: `MAX`).
        if let Some(w) = self.marks.end(idx) {
            self.head.watermark(w)?;
        }
        if all && self.head.holds_records() {
            self.finishing = true;
            return Ok(GateStep::ChannelEnded {
                channel: idx,
                all: false,
            });
        }
        if all {
            self.head.finish()?;
        }
        Ok(GateStep::ChannelEnded { channel: idx, all })
    }

    /// Every channel ended: the operator is told so once the work it holds is done.
    fn finish_when_free(&mut self) -> Result<GateStep, TaskError> {
        if self.head.holds_records() {
            return Ok(GateStep::Empty);
        }
        self.finishing = false;
        self.head.finish()?;
        Ok(GateStep::Finished)
    }

    /// Channel `idx` delivered watermark `w`: the operator gets this input's, if it moved.
    fn on_watermark(
        &mut self,
        idx: usize,
        w: crate::time::Watermark,
    ) -> Result<GateStep, TaskError> {
        if let Some(w) = self.marks.update(idx, w) {
            self.head.watermark(w)?;
        }
        Ok(GateStep::Watermark)
    }

    /// One step of a backed-up primary: replay first, then its channels; every batch is
    /// claimed before it is processed and its output flushed after, every watermark and end
    /// logged, so a replay takes them in the same order.
    fn try_step_claimed(&mut self, blocked: &dyn Fn(usize) -> bool) -> Result<GateStep, TaskError> {
        let Some(claims) = self.claims.as_mut() else {
            unreachable!("internal error: claimed step without claims")
        };
        // The subtask takes input only when every record it emitted is in its channels (the
        // task polls the output before each step, but a batch limit can leave a remainder in
        // a buffer): the output positions each step, barrier and hand-off records are then
        // what the channels have, and what a replay numbers its own output from. If sending
        // the remainder waits for credit, so does everything else (the task polls the output
        // again at once).
        if !claims.drained(&mut self.head) {
            return Ok(GateStep::Watermark);
        }
        // No hand-off after the end was logged: a replay from a hand-off before it takes the
        // end again, and finishes the same way.
        if self.finishing {
            return self.finish_when_free();
        }
        // The state is between two batches: a hand-off may go to the backup.
        if claims.maybe_hand_state(&mut self.head, &self.marks)? {
            return Ok(GateStep::Watermark);
        }
        // Work the watermark made due goes before any record, in a replay too.
        let records = !self.head.holds_records();
        if !records && claims.replay_starts_with_batch() {
            return Ok(GateStep::Empty);
        }
        let taken = match self.next_claimed(records, blocked)? {
            ControlFlow::Continue(taken) => taken,
            ControlFlow::Break(step) => return Ok(step),
        };
        let Some(claims) = self.claims.as_mut() else {
            unreachable!("internal error: claimed step without claims")
        };
        let Claimed {
            idx,
            seq,
            event,
            peeked,
        } = taken;
        match event {
            Event::Batch(batch) => self.push_claimed(idx, seq, batch, peeked),
            Event::Barrier(barrier) => Ok(GateStep::Barrier {
                channel: idx,
                barrier,
            }),
            Event::Watermark(w) => {
                claims.log(Input::Mark(idx as u32, w))?;
                self.on_watermark(idx, w)
            }
            Event::EndOfInput => {
                claims.log(Input::End(idx as u32))?;
                self.end_channel(idx)
            }
        }
    }

    /// What a backed-up primary takes next: the replay's next input, else the wall clock's
    /// time if a timer is due, else the next event of its channels. A step already done (a
    /// time advanced, nothing to take) breaks.
    fn next_claimed(
        &mut self,
        records: bool,
        blocked: &dyn Fn(usize) -> bool,
    ) -> Result<ControlFlow<GateStep, Claimed<T>>, TaskError> {
        let Some(claims) = self.claims.as_mut() else {
            unreachable!("internal error: claimed step without claims")
        };
        let (idx, seq, event) = match claims.next_replay() {
            Some(Replay::Batch(id, payload)) => (
                id.0 as usize,
                id.1,
                Event::Batch(crate::channel::Batch::Shared(payload)),
            ),
            Some(Replay::Mark(c, w)) => (c as usize, 0, Event::Watermark(w)),
            Some(Replay::End(c)) => (c as usize, 0, Event::EndOfInput),
            Some(Replay::Time(t)) => {
                claims.log(Input::Time(t))?;
                self.head.advance_processing_time(t)?;
                return Ok(ControlFlow::Break(GateStep::Watermark));
            }
            None => {
                // The wall clock, where the operator uses it: logged first, so a replay
                // tells the operator the same time at the same place.
                if let Some(due) = self.head.next_processing_time() {
                    let now = crate::operator::timers::now_ms();
                    if due <= now {
                        claims.log(Input::Time(now))?;
                        self.head.advance_processing_time(now)?;
                        return Ok(ControlFlow::Break(GateStep::Watermark));
                    }
                }
                return Ok(self.poll_claimed(records, blocked));
            }
        };
        Ok(ControlFlow::Continue(Claimed {
            idx,
            seq,
            event,
            peeked: false,
        }))
    }

    /// The next event a backed-up primary takes from its channels, round robin from the one
    /// after the last taken, passing over the stale barriers and what was claimed before a
    /// promotion; none: the step settles its claims and is empty.
    fn poll_claimed(
        &mut self,
        records: bool,
        blocked: &dyn Fn(usize) -> bool,
    ) -> ControlFlow<GateStep, Claimed<T>> {
        let Some(claims) = self.claims.as_mut() else {
            unreachable!("internal error: claimed step without claims")
        };
        let n = self.receivers.len();
        for k in 0..n {
            let idx = (self.next + k) % n;
            if self.ended[idx] || blocked(idx) {
                continue;
            }
            // A batch is claimed before it leaves the channel (see
            // `Receiver::try_recv_or_peek`).
            let taken = if records {
                self.receivers[idx].try_recv_or_peek()
            } else {
                self.receivers[idx]
                    .try_recv_unless_batch_at()
                    .map(|(at, e)| (at, e, false))
            };
            let Some((seq, event, peeked)) = taken else {
                continue;
            };
            match event {
                Event::Barrier(b) if claims.is_stale(b.id) => continue,
                Event::Batch(_) if claims.is_claimed(idx, seq) => {
                    tracing::debug!(
                        channel = idx,
                        seq,
                        "skipping a batch claimed before the promotion"
                    );
                    self.receivers[idx].take_peeked(seq);
                    continue;
                }
                // A watermark before a batch the promotion replays or skipped: taken
                // already (by the old primary, logged, or kept from the backup and in
                // the replay). Taken again after the replay, an idle mark would make
                // the channel idle behind records the replay just gave it.
                Event::Watermark(_) if claims.is_claimed(idx, seq) => continue,
                _ => {}
            }
            self.next = (idx + 1) % n;
            return ControlFlow::Continue(Claimed {
                idx,
                seq,
                event,
                peeked,
            });
        }
        claims.settle();
        ControlFlow::Break(GateStep::Empty)
    }

    /// A backed-up primary's batch from channel `idx` at position `seq`: claimed (then taken
    /// from its channel if it was `peeked` there), pushed to the operator a slice at a time,
    /// and its output flushed.
    fn push_claimed(
        &mut self,
        idx: usize,
        seq: u64,
        batch: crate::channel::Batch<T>,
        peeked: bool,
    ) -> Result<GateStep, TaskError> {
        let Some(claims) = self.claims.as_mut() else {
            unreachable!("internal error: claimed step without claims")
        };
        let payload = match batch {
            crate::channel::Batch::Shared(a) => a,
            crate::channel::Batch::Owned(v) => std::sync::Arc::new(v),
        };
        claims.claim((idx as u32, seq), &payload)?;
        if peeked {
            self.receivers[idx].take_peeked(seq);
        }
        self.marks.activate(idx);
        let len = payload.len();
        if self.recording[idx] {
            self.recorded
                .push(Recorded::Batch(idx as u32, payload.clone()));
        }
        // The buffer queue keeps the batch: the operator gets copies, a slice at a
        // time, so a whole second copy of the batch never exists at once.
        for chunk in payload.chunks(CLAIMED_CHUNK) {
            self.scratch.extend_from_slice(chunk);
            self.head.push(&mut self.scratch)?;
        }
        drop(payload);
        self.head.flush();
        // Output all out: the step can be released now (not at the next one). An
        // error is the lane's to report, at its next poll.
        if claims.drained(&mut self.head) {
            claims.settle();
        }
        Ok(GateStep::Batch(len))
    }
}

/// What a backed-up primary's step takes: an event of channel `idx` at batch position `seq`
/// (`peeked`: a batch left at the head of its channel until it is claimed).
struct Claimed<T> {
    idx: usize,
    seq: u64,
    event: Event<T>,
    peeked: bool,
}

impl<T: Data> InputGate for TypedGate<T> {
    fn try_step(&mut self, blocked: &dyn Fn(usize) -> bool) -> Result<GateStep, TaskError> {
        if let Some(step) = self.tell_restored_mark()? {
            return Ok(step);
        }
        if self.claims.is_some() {
            return self.try_step_claimed(blocked);
        }
        if self.finishing {
            return self.finish_when_free();
        }
        // An operator busy with work its input must wait for (event-time timers the
        // watermark made due) takes no records; barriers, watermarks and ends still come.
        let records = !self.head.holds_records();
        // Restored in-flight data goes first, in its order (while records are held, a
        // replayed batch waits, and so does everything behind it).
        match self.replay.front() {
            Some(InFlight::Batch(..)) if !records => return Ok(GateStep::Empty),
            Some(_) => {
                return match self.replay.pop_front() {
                    Some(InFlight::Batch(c, mut batch)) => {
                        let len = batch.len();
                        self.marks
                            .activate((c as usize).min(self.receivers.len() - 1));
                        self.head.push(&mut batch)?;
                        Ok(GateStep::Batch(len))
                    }
                    Some(InFlight::Mark(c, w)) if (c as usize) < self.receivers.len() => {
                        self.on_watermark(c as usize, w)
                    }
                    _ => Ok(GateStep::Watermark),
                };
            }
            None => {}
        }
        if !self.rest.is_empty() {
            if !records {
                return Ok(GateStep::Empty);
            }
            return self.push_slice();
        }
        let n = self.receivers.len();
        for k in 0..n {
            let idx = (self.next + k) % n;
            if self.ended[idx] || blocked(idx) {
                continue;
            }
            let event = if records {
                self.receivers[idx].try_recv()
            } else {
                self.receivers[idx].try_recv_unless_batch()
            };
            let Some(event) = event else {
                continue;
            };
            self.next = (idx + 1) % n;
            return match event {
                Event::Batch(batch) => {
                    let len = batch.len();
                    self.marks.activate(idx);
                    batch.move_into(&mut self.scratch);
                    if self.recording[idx] {
                        self.recorded.push(Recorded::Batch(
                            idx as u32,
                            std::sync::Arc::new(self.scratch.clone()),
                        ));
                    }
                    let fits = self.slice_len();
                    if len > fits {
                        // Slow operators: the rest at the next steps, before anything else.
                        self.rest = self.scratch.split_off(fits);
                        self.rest_from = idx;
                    }
                    self.timed_push()?;
                    Ok(GateStep::Batch(len))
                }
                Event::Barrier(barrier) => Ok(GateStep::Barrier {
                    channel: idx,
                    barrier,
                }),
                Event::Watermark(w) => {
                    if self.recording[idx] {
                        self.recorded.push(Recorded::Mark(idx as u32, w));
                    }
                    self.on_watermark(idx, w)
                }
                Event::EndOfInput => self.end_channel(idx),
            };
        }
        Ok(GateStep::Empty)
    }
    fn flush(&mut self) {
        self.head.flush()
    }
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TaskError>> {
        self.head.poll_pending(cx)
    }
    fn is_ended(&self) -> bool {
        self.n_ended == self.receivers.len() && !self.finishing
    }
    fn release(&self) {
        self.receivers.iter().for_each(Receiver::release)
    }
    fn queued(&self) -> usize {
        self.receivers.iter().map(Receiver::queued).sum()
    }
    fn capacity(&self) -> usize {
        self.receivers.iter().map(Receiver::capacity).sum()
    }
    fn queued_records(&self) -> usize {
        self.receivers
            .iter()
            .map(Receiver::queued_records)
            .sum::<usize>()
            + self.rest.len()
    }
    fn output_usage(&self, usage: &mut crate::metrics::QueueUsage) {
        self.head.usage(usage)
    }
    fn control(&mut self, c: &mut crate::operator::Control<'_>) {
        self.head.control(c)
    }
    fn channels(&self) -> usize {
        self.receivers.len()
    }
    fn watermark(&self) -> crate::time::InputWatermark {
        self.marks.reading()
    }
    fn overtaking(&mut self, in_band: bool) -> Option<(usize, crate::channel::Barrier)> {
        let n = self.receivers.len();
        // While a checkpoint records, only the channels that still owe its barrier.
        let recording = self.recorded_marks.is_some();
        (0..n).filter(|c| !self.ended[*c]).find_map(|c| {
            let r = &self.receivers[c];
            if in_band && (!recording || self.recording[c]) {
                r.overtake_in_band();
            }
            r.overtaking().map(|b| (c, b))
        })
    }
    fn take_overtaken(&mut self, channel: usize, id: u64, record: bool) -> bool {
        let Some(events) = self.receivers[channel].take_overtaken(id) else {
            return false;
        };
        if !record {
            return true;
        }
        for e in events {
            match e {
                Event::Batch(crate::channel::Batch::Shared(a)) => {
                    self.recorded.push(Recorded::Batch(channel as u32, a))
                }
                Event::Batch(crate::channel::Batch::Owned(v)) => self
                    .recorded
                    .push(Recorded::Batch(channel as u32, std::sync::Arc::new(v))),
                Event::Watermark(w) => self.recorded.push(Recorded::Mark(channel as u32, w)),
                // An older barrier (its checkpoint was superseded) or the end: no data.
                Event::Barrier(_) | Event::EndOfInput => {}
            }
        }
        true
    }
    fn set_recording(&mut self, channel: usize, on: bool) {
        if on {
            self.begin_recording();
        }
        self.recording[channel] = on;
    }
    fn aligned_channel_state(&self) -> Option<Result<Vec<u8>, String>> {
        // A backed-up primary's promoted backup takes the watermarks from its restart point.
        if self.claims.is_some() || !self.head.restores_watermark() {
            return None;
        }
        self.marks.said()?;
        Some(crate::checkpoint::encode(&ChannelStateRef::<T> {
            marks: Some(self.marks.clone()),
            in_flight: Vec::new(),
        }))
    }
    fn take_channel_state(&mut self) -> Result<Vec<u8>, String> {
        let recorded = std::mem::take(&mut self.recorded);
        let state = crate::checkpoint::encode(&ChannelStateRef {
            marks: self.recorded_marks.take(),
            in_flight: recorded
                .iter()
                .map(|r| match r {
                    Recorded::Batch(c, b) => InFlightRef::Batch(*c, b.as_slice()),
                    Recorded::Mark(c, w) => InFlightRef::Mark(*c, *w),
                })
                .collect(),
        });
        self.recording.iter_mut().for_each(|r| *r = false);
        state
    }
    fn barrier(
        &mut self,
        id: u64,
        w: &mut crate::checkpoint::StateWriter,
    ) -> Result<(), TaskError> {
        // A backed-up operator that hands its changes writes them at the barrier, not its
        // whole snapshot (unless the states are also handed over in memory: a rescale's).
        let changes = match self.claims.as_ref().and_then(|c| c.hands_changes()) {
            Some(full) if !w.hand_over => self.claims.as_ref().map(|c| (c.uid().to_owned(), full)),
            _ => None,
        };
        // A backed-up primary says it works while it writes a large state, so that its
        // supervisor does not take it for hung.
        w.progress = self.claims.as_ref().and_then(|c| c.progress());
        w.changes_of = changes;
        if w.unaligned {
            self.begin_recording();
        }
        let started = std::time::Instant::now();
        let passed = self.head.barrier(id, w);
        let took = started.elapsed();
        w.changes_of = None;
        w.progress = None;
        passed?;
        if let Some(c) = self.claims.as_mut() {
            if !c.on_barrier(id, w, &self.marks, took) {
                // The backup could not take the changes: the whole snapshot in their place
                // (the operator's entry, left without changes or payload, is replaced).
                let uid = c.uid().to_owned();
                let mut whole = crate::checkpoint::StateWriter::new(w.hand_over);
                whole.progress = c.progress();
                self.head.snapshot_state(&mut whole)?;
                if let Some(made) = whole.entries.into_iter().find(|e| e.uid == uid) {
                    match w.entries.iter().position(|e| e.uid == uid) {
                        Some(at) => w.entries[at] = made,
                        None => w.entries.push(made),
                    }
                }
            }
        }
        Ok(())
    }
    fn notify_complete(&mut self, id: u64) -> Result<(), TaskError> {
        self.head.notify_complete(id)?;
        if let Some(c) = self.claims.as_mut() {
            c.on_complete(id);
        }
        Ok(())
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests;
