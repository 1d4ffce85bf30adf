//! The subtask actor: one running instance of a chain of operators, with a two-lane mailbox.
//!
//! - **System lane**: the actor's actix mailbox (`Addr`), unbounded for control mail
//!   ([`Ping`], [`Stop`]). actix drains it completely before it polls anything else.
//! - **Data lane**: the bounded input channels (or, for a source, its reader), driven by
//!   [`DataLane`], a future spawned in the actor's context that does **one unit of work** (one
//!   input batch, or one source batch) per poll, then wakes itself and yields. So between any
//!   two batches actix serves the whole system lane: a control mail waits for at most the
//!   batch in progress, whatever is queued on the data lane.
//!
//! Before it takes new input the lane moves every output batch waiting for credit into its
//! channel; while one has no credit the subtask takes no input (backpressure). Partial output
//! batches are flushed when the subtask finds no input (idle) and after `linger` while busy.
//!
//! A subtask reports to its job exactly once: finished, failed (with the operator uid and
//! subtask of the cause), or lost (dropped without either, e.g. its arbiter stopped). This
//! module owns the actor and its loop; operators (`operator`) and channels (`channel`) are
//! elsewhere.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use crate::sync::AtomicWaker;
use actix::prelude::*;
use futures::channel::mpsc::UnboundedSender;

use crate::checkpoint::align::{AlignMode, Alignment, BarrierAligner};
use crate::checkpoint::coordinator::StateFile;
use crate::checkpoint::store::SnapshotEnvelope;
use crate::checkpoint::StateWriter;
use crate::error::TaskError;
use crate::event::{JobEvent, SubtaskId};
use crate::hooks::{ConfigError, StateError, StateSnapshot};
use crate::metrics::QueueUsage;
use crate::metrics::{SubtaskCounters, SubtaskSample, TimeAccount, WaitState};
use crate::operator::connect::{InputSelection, SelectionCell};
use crate::operator::step::{GateStep, InputGate, SourceProgress, SourceStep};
use crate::operator::{Control, ControlAction, ControlOutcome};
use crate::sync::atomic::Ordering;
use crate::sync::Arc;
use crate::sync::{lock, Mutex};

/// What drives a subtask. One per subtask actor, never per record: its size does not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Driver {
    Source(Box<dyn SourceStep>),
    Inputs {
        gates: Vec<Box<dyn InputGate>>,
        selection: Option<Arc<SelectionCell>>,
        /// Round robin over logical inputs.
        next: usize,
        /// Barrier alignment over every channel of every input (gate `g`'s channel `c` is
        /// `offsets[g] + c`).
        aligner: BarrierAligner,
        offsets: Vec<usize>,
        /// When the barrier being aligned first arrived.
        align_started: Option<Instant>,
        /// Unaligned checkpoints, and the aligned-checkpoint timeout that switches to them.
        unaligned: Unaligned,
    },
}

/// The state of unaligned checkpointing in one subtask.
pub(crate) struct Unaligned {
    /// Every checkpoint is unaligned.
    always: bool,
    /// Aligned checkpoints switch to unaligned after this long.
    timeout: Option<Duration>,
    /// Uid under which the channel state is stored (`<head uid>#in<input>`).
    state_uid: String,
    /// The checkpoint whose channel state is being recorded.
    pending: Option<UnalignedPending>,
    /// Newest checkpoint started unaligned (older barriers are stale).
    last_started: Option<u64>,
}

struct UnalignedPending {
    id: u64,
    writer: StateWriter,
    /// Per global channel: its barrier has not arrived yet.
    waiting: Vec<bool>,
    started: Instant,
}

impl Driver {
    /// An input-driven driver over `gates`, aligning barriers per `mode`.
    pub(crate) fn inputs(
        gates: Vec<Box<dyn InputGate>>,
        selection: Option<Arc<SelectionCell>>,
        mode: AlignMode,
        unaligned: bool,
        aligned_timeout: Option<Duration>,
        state_uid: String,
    ) -> Self {
        let mut offsets = Vec::with_capacity(gates.len());
        let mut total = 0;
        for g in &gates {
            offsets.push(total);
            total += g.channels();
        }
        Driver::Inputs {
            gates,
            selection,
            next: 0,
            aligner: BarrierAligner::new(total, mode),
            offsets,
            align_started: None,
            unaligned: Unaligned {
                always: unaligned && mode == AlignMode::ExactlyOnce,
                timeout: aligned_timeout.filter(|_| mode == AlignMode::ExactlyOnce),
                state_uid,
                pending: None,
                last_started: None,
            },
        }
    }
}

impl Unaligned {
    /// Starts unaligned checkpoint `id` now: the chain's states (and the barrier passed on),
    /// and recording on every channel that still owes its barrier.
    fn start(
        &mut self,
        id: u64,
        gates: &mut [Box<dyn InputGate>],
        offsets: &[usize],
        owes: impl Fn(usize) -> bool,
    ) -> Result<(), TaskError> {
        let mut writer = StateWriter::default();
        for g in gates.iter_mut() {
            g.barrier(id, &mut writer)?;
        }
        let total = offsets.last().copied().unwrap_or(0) + gates.last().map_or(0, |g| g.channels());
        let mut waiting = vec![false; total];
        for (gi, g) in gates.iter_mut().enumerate() {
            for c in 0..g.channels() {
                let global = offsets[gi] + c;
                if owes(global) && !g.is_channel_ended(c) {
                    waiting[global] = true;
                    g.set_recording(c, true);
                }
            }
        }
        self.last_started = Some(id);
        self.pending = Some(UnalignedPending {
            id,
            writer,
            waiting,
            started: Instant::now(),
        });
        Ok(())
    }

    /// Channel `global` (gate `gi`, channel `c`) delivered its barrier or ended.
    fn channel_done(
        &mut self,
        gates: &mut [Box<dyn InputGate>],
        gi: usize,
        c: usize,
        global: usize,
    ) {
        if let Some(p) = self.pending.as_mut() {
            if p.waiting[global] {
                p.waiting[global] = false;
                gates[gi].set_recording(c, false);
            }
        }
    }

    /// The checkpoint with its channel state, once every channel delivered its barrier.
    fn try_complete(
        &mut self,
        gates: &mut [Box<dyn InputGate>],
    ) -> Result<Option<Work>, TaskError> {
        if !self
            .pending
            .as_ref()
            .is_some_and(|p| p.waiting.iter().all(|w| !w))
        {
            return Ok(None);
        }
        let Some(mut p) = self.pending.take() else {
            return Ok(None);
        };
        for (gi, g) in gates.iter_mut().enumerate() {
            let state = g
                .take_channel_state()
                .map_err(|message| TaskError::Checkpoint {
                    uid: self.state_uid.clone(),
                    subtask: 0,
                    message,
                })?;
            p.writer
                .put(&format!("{}#in{gi}", self.state_uid), None, state);
        }
        Ok(Some(Work::Checkpointed {
            id: p.id,
            writer: p.writer,
            took: p.started.elapsed(),
        }))
    }
}

/// Result of one unit of work.
enum Work {
    /// Did something; more may be ready.
    Progress,
    /// Nothing to do until woken.
    Idle,
    /// A rate-limited source may read again after this long.
    Throttled(Duration),
    /// All input consumed and end-of-input pushed through the chain.
    Ended,
    /// Every input delivered barrier `id` (the subtask snapshots and passes it on).
    Aligned(u64),
    /// An unaligned checkpoint is complete with its channel state.
    Checkpointed {
        id: u64,
        writer: StateWriter,
        took: Duration,
    },
}

impl Driver {
    fn poll_pending(&mut self, cx: &mut TaskContext<'_>) -> Poll<()> {
        match self {
            Driver::Source(s) => s.poll_pending(cx),
            Driver::Inputs { gates, .. } => {
                let mut ready = true;
                for g in gates.iter_mut() {
                    ready &= g.poll_pending(cx).is_ready();
                }
                if ready {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            }
        }
    }

    fn flush(&mut self) {
        match self {
            Driver::Source(s) => s.flush(),
            Driver::Inputs { gates, .. } => gates.iter_mut().for_each(|g| g.flush()),
        }
    }

    /// Fill of the data lane (batches, capacity) and the records in it.
    fn input_usage(&self) -> (QueueUsage, usize) {
        match self {
            Driver::Source(_) => (QueueUsage::default(), 0),
            Driver::Inputs { gates, .. } => (
                QueueUsage {
                    queued: gates.iter().map(|g| g.queued()).sum(),
                    capacity: gates.iter().map(|g| g.capacity()).sum(),
                },
                gates.iter().map(|g| g.queued_records()).sum(),
            ),
        }
    }

    /// All inputs delivered barrier `id`: the chain's states, barrier passed on; returns the
    /// states and how long the alignment took.
    fn snapshot_aligned(&mut self, id: u64) -> Result<(StateWriter, Duration), TaskError> {
        let mut w = StateWriter::default();
        match self {
            Driver::Source(_) => Ok((w, Duration::ZERO)),
            Driver::Inputs {
                gates,
                align_started,
                ..
            } => {
                for g in gates.iter_mut() {
                    g.barrier(id, &mut w)?;
                }
                let took = align_started.take().map_or(Duration::ZERO, |t| t.elapsed());
                Ok((w, took))
            }
        }
    }

    /// Checkpoint `id` was aborted (a backed-up subtask failed over): stop aligning it, so no
    /// channel stays blocked waiting for a barrier that will not come.
    fn abort_checkpoint(&mut self, id: u64) {
        if let Driver::Inputs {
            gates,
            aligner,
            align_started,
            unaligned,
            ..
        } = self
        {
            if aligner.in_progress().is_some_and(|cur| cur <= id) {
                *align_started = None;
            }
            aligner.abort_upto(id);
            unaligned.last_started = Some(unaligned.last_started.map_or(id, |l| l.max(id)));
            if unaligned.pending.as_ref().is_some_and(|p| p.id <= id) {
                unaligned.pending = None;
                for g in gates.iter_mut() {
                    let _ = g.take_channel_state();
                }
            }
        }
    }

    fn notify_complete(&mut self, id: u64) -> Result<(), TaskError> {
        match self {
            Driver::Source(s) => s.notify_complete(id),
            Driver::Inputs { gates, .. } => {
                gates.iter_mut().try_for_each(|g| g.notify_complete(id))
            }
        }
    }

    fn control(&mut self, c: &mut Control<'_>) {
        match self {
            Driver::Source(s) => s.control(c),
            Driver::Inputs { gates, .. } => {
                for g in gates.iter_mut() {
                    if c.outcome.is_some() {
                        return;
                    }
                    g.control(c);
                }
            }
        }
    }

    fn output_usage(&self) -> QueueUsage {
        let mut u = QueueUsage::default();
        match self {
            Driver::Source(s) => s.output_usage(&mut u),
            Driver::Inputs { gates, .. } => gates.iter().for_each(|g| g.output_usage(&mut u)),
        }
        u
    }

    /// Tries each readable input once, in round-robin order.
    #[allow(clippy::too_many_arguments)]
    fn try_inputs(
        gates: &mut [Box<dyn InputGate>],
        selection: &Option<Arc<SelectionCell>>,
        next: &mut usize,
        aligner: &mut BarrierAligner,
        offsets: &[usize],
        align_started: &mut Option<Instant>,
        unaligned: &mut Unaligned,
        counters: &SubtaskCounters,
    ) -> Result<Option<Work>, TaskError> {
        let n = gates.len();
        // Unaligned: start as soon as a barrier is visible in any queue, ahead of the data
        // before it (which is then recorded as channel state).
        if unaligned.always && unaligned.pending.is_none() {
            let newest = gates.iter().filter_map(|g| g.peek_barrier()).max();
            if let Some(id) = newest.filter(|id| unaligned.last_started.is_none_or(|l| *id > l)) {
                unaligned.start(id, gates, offsets, |_| true)?;
                return Ok(Some(Work::Progress));
            }
        }
        // Aligned for too long: switch this checkpoint to unaligned. Channels that delivered
        // the barrier (blocked) owe nothing; the others are recorded until theirs arrives.
        if let (Some(timeout), Some(id), Some(t)) =
            (unaligned.timeout, aligner.in_progress(), *align_started)
        {
            if unaligned.pending.is_none() && t.elapsed() > timeout {
                let blocked: Vec<bool> = (0..aligner.channels())
                    .map(|c| aligner.is_blocked(c))
                    .collect();
                aligner.abandon();
                *align_started = None;
                unaligned.start(id, gates, offsets, |c| !blocked[c])?;
                if let Some(w) = unaligned.try_complete(gates)? {
                    return Ok(Some(w));
                }
                return Ok(Some(Work::Progress));
            }
        }
        // While a barrier is being aligned every unblocked channel must be read, whatever
        // the operator's preference, or the alignment could never finish.
        let selected = match (aligner.in_progress(), selection) {
            (None, Some(s)) => s.get(),
            _ => InputSelection::All,
        };
        for k in 0..n {
            let i = (*next + k) % n;
            if gates[i].is_ended() {
                continue;
            }
            let wanted = match selected {
                InputSelection::All => true,
                InputSelection::First => i == 0 || gates[0].is_ended(),
                InputSelection::Second => i == 1 || gates.get(1).is_none_or(|g| g.is_ended()),
            };
            if !wanted {
                continue;
            }
            let offset = offsets[i];
            let step = {
                let aligner = &*aligner;
                gates[i].try_step(&|c| aligner.is_blocked(offset + c))?
            };
            let alignment = match step {
                GateStep::Empty => continue,
                GateStep::Batch(_) => {
                    counters.batches_in.fetch_add(1, Ordering::Relaxed);
                    *next = (i + 1) % n;
                    return Ok(Some(Work::Progress));
                }
                GateStep::Barrier { channel, id }
                    if unaligned.pending.as_ref().is_some_and(|p| p.id == id) =>
                {
                    unaligned.channel_done(gates, i, channel, offset + channel);
                    if let Some(w) = unaligned.try_complete(gates)? {
                        return Ok(Some(w));
                    }
                    Alignment::Pending
                }
                GateStep::Barrier { channel, id } if unaligned.always => {
                    if unaligned.last_started.is_none_or(|l| id > l) {
                        // Not seen by the peek (it reached the head at once): start now;
                        // this channel owes nothing more.
                        let global = offset + channel;
                        unaligned.start(id, gates, offsets, |c| c != global)?;
                        if let Some(w) = unaligned.try_complete(gates)? {
                            return Ok(Some(w));
                        }
                    }
                    Alignment::Pending
                }
                GateStep::Barrier { channel, id } => {
                    if aligner.in_progress().is_none() {
                        *align_started = Some(Instant::now());
                    }
                    aligner.on_barrier(offset + channel, id)
                }
                GateStep::ChannelEnded { channel, all } => {
                    unaligned.channel_done(gates, i, channel, offset + channel);
                    if let Some(w) = unaligned.try_complete(gates)? {
                        return Ok(Some(w));
                    }
                    let a = aligner.on_end_of_input(offset + channel);
                    if all && gates.iter().all(|g| g.is_ended()) {
                        // A barrier completed by this end is taken before the end.
                        if let Alignment::Aligned(id) = a {
                            return Ok(Some(Work::Aligned(id)));
                        }
                        return Ok(Some(Work::Ended));
                    }
                    a
                }
            };
            return Ok(Some(match alignment {
                Alignment::Aligned(id) => Work::Aligned(id),
                Alignment::Pending => Work::Progress,
            }));
        }
        Ok(None)
    }

    fn step(
        &mut self,
        cx: &mut TaskContext<'_>,
        now: Instant,
        rx_waker: &AtomicWaker,
        counters: &SubtaskCounters,
    ) -> Result<Work, TaskError> {
        match self {
            Driver::Source(s) => Ok(match s.step(now)? {
                SourceProgress::More => {
                    counters.batches_in.fetch_add(1, Ordering::Relaxed);
                    Work::Progress
                }
                SourceProgress::Ended => Work::Ended,
                SourceProgress::Throttled(d) => Work::Throttled(d),
            }),
            Driver::Inputs {
                gates,
                selection,
                next,
                aligner,
                offsets,
                align_started,
                unaligned,
            } => {
                let mut attempt = |gates: &mut Vec<Box<dyn InputGate>>| {
                    Self::try_inputs(
                        gates,
                        selection,
                        next,
                        aligner,
                        offsets,
                        align_started,
                        unaligned,
                        counters,
                    )
                };
                if let Some(w) = attempt(gates)? {
                    return Ok(w);
                }
                // Idle: send partial batches now, then sleep until an input arrives. Register
                // before the second look so an arrival in between is not missed.
                gates.iter_mut().for_each(|g| g.flush());
                rx_waker.register(cx.waker());
                if let Some(w) = attempt(gates)? {
                    return Ok(w);
                }
                Ok(Work::Idle)
            }
        }
    }
}

/// The actor of one subtask.
pub(crate) struct SubtaskActor {
    id: SubtaskId,
    driver: Driver,
    draining: bool,
    events: UnboundedSender<JobEvent>,
    counters: Arc<SubtaskCounters>,
    rx_waker: Arc<AtomicWaker>,
    linger: Duration,
    last_flush: Instant,
    reported: bool,
    time: TimeAccount,
    sample: Arc<Mutex<SubtaskSample>>,
    throttle: Option<Pin<Box<actix_rt::time::Sleep>>>,
    /// Where checkpoint state files go (checkpoints on).
    checkpoint_dir: Option<std::path::PathBuf>,
}

impl SubtaskActor {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        id: SubtaskId,
        driver: Driver,
        events: UnboundedSender<JobEvent>,
        counters: Arc<SubtaskCounters>,
        rx_waker: Arc<AtomicWaker>,
        linger: Duration,
        sample: Arc<Mutex<SubtaskSample>>,
        checkpoint_dir: Option<std::path::PathBuf>,
    ) -> Self {
        let now = Instant::now();
        SubtaskActor {
            time: TimeAccount::new(now),
            sample,
            throttle: None,
            checkpoint_dir,
            id,
            driver,
            draining: false,
            events,
            counters,
            rx_waker,
            linger,
            last_flush: now,
            reported: false,
        }
    }

    fn report(&mut self, event: JobEvent) {
        self.reported = true;
        // The job may already be gone (it stops listening once it has a verdict).
        let _ = self.events.unbounded_send(event);
    }

    /// One poll of the data lane: at most one unit of work. Says what the subtask waits for
    /// next, for the time accounting.
    fn poll_data(
        &mut self,
        cx: &mut TaskContext<'_>,
        now: Instant,
    ) -> (Poll<Result<(), TaskError>>, WaitState) {
        if let Some(sleep) = self.throttle.as_mut() {
            if sleep.as_mut().poll(cx).is_pending() {
                return (Poll::Pending, WaitState::Idle);
            }
            self.throttle = None;
        }
        if self.driver.poll_pending(cx).is_pending() {
            return (Poll::Pending, WaitState::BackPressured);
        }
        if self.draining {
            return (Poll::Ready(Ok(())), WaitState::Busy);
        }
        match self.driver.step(cx, now, &self.rx_waker, &self.counters) {
            Err(e) => (Poll::Ready(Err(e)), WaitState::Busy),
            Ok(Work::Idle) => {
                self.last_flush = now;
                (Poll::Pending, WaitState::Idle)
            }
            Ok(Work::Progress) => {
                if now.duration_since(self.last_flush) >= self.linger {
                    self.driver.flush();
                    self.last_flush = now;
                }
                cx.waker().wake_by_ref();
                (Poll::Pending, WaitState::Busy)
            }
            Ok(Work::Throttled(d)) => {
                // Nothing more comes from this source for a while: send what is buffered.
                self.driver.flush();
                self.last_flush = now;
                self.throttle = Some(Box::pin(actix_rt::time::sleep(d)));
                cx.waker().wake_by_ref();
                (Poll::Pending, WaitState::Idle)
            }
            Ok(Work::Ended) => {
                self.draining = true;
                cx.waker().wake_by_ref();
                (Poll::Pending, WaitState::Busy)
            }
            Ok(Work::Checkpointed { id, writer, took }) => {
                self.write_and_ack(id, writer, took, Duration::ZERO);
                cx.waker().wake_by_ref();
                (Poll::Pending, WaitState::Busy)
            }
            Ok(Work::Aligned(id)) => {
                match self.driver.snapshot_aligned(id) {
                    Ok((w, alignment)) => self.write_and_ack(id, w, alignment, Duration::ZERO),
                    Err(e) => self.decline(id, e),
                }
                cx.waker().wake_by_ref();
                (Poll::Pending, WaitState::Busy)
            }
        }
    }

    /// Writes this subtask's states for checkpoint `id` and acknowledges it.
    fn write_and_ack(
        &mut self,
        id: u64,
        w: StateWriter,
        alignment: Duration,
        start_delay: Duration,
    ) {
        let Some(root) = self.checkpoint_dir.clone() else {
            return;
        };
        let mut files = Vec::with_capacity(w.entries.len());
        for e in w.entries {
            let env = SnapshotEnvelope {
                format_version: crate::checkpoint::store::FORMAT_VERSION,
                uid: e.uid,
                subtask: self.id.subtask,
                checkpoint_id: id,
                key_groups: e.key_groups,
                payload: e.payload,
            };
            match crate::checkpoint::store::write_state(&root, &env) {
                Ok((file, size)) => files.push(StateFile {
                    uid: env.uid,
                    subtask: env.subtask,
                    file,
                    size,
                }),
                Err(err) => {
                    let reason = err.to_string();
                    tracing::warn!(uid = %self.id.head_uid, subtask = self.id.subtask, checkpoint = id, %reason, "cannot write checkpoint state");
                    let _ = self.events.unbounded_send(JobEvent::Declined {
                        attempt: self.id.attempt,
                        id,
                        reason,
                    });
                    return;
                }
            }
        }
        let _ = self.events.unbounded_send(JobEvent::Ack {
            attempt: self.id.attempt,
            id,
            actor: self.id.actor,
            files,
            alignment,
            start_delay,
        });
    }

    /// Checkpoint `id` could not be taken here. A panic of user code (a sink's pre-commit, an
    /// operator's snapshot hook) fails the subtask like any panic; anything else declines the
    /// checkpoint and the coordinator decides.
    fn decline(&mut self, id: u64, e: TaskError) {
        if matches!(e, TaskError::Panic { .. }) {
            self.report(JobEvent::Failed {
                attempt: self.id.attempt,
                actor: self.id.actor,
                epoch: self.id.epoch,
                error: e,
            });
            return;
        }
        let reason = format!("{e:?}");
        tracing::warn!(uid = %self.id.head_uid, subtask = self.id.subtask, checkpoint = id, %reason, "checkpoint declined");
        let _ = self.events.unbounded_send(JobEvent::Declined {
            attempt: self.id.attempt,
            id,
            reason,
        });
    }

    /// Charges the time so far and writes a sample for the job to read.
    fn take_sample(&mut self, mailbox_latency: Duration) {
        let now = Instant::now();
        self.time.charge(now);
        let (input, input_records) = self.driver.input_usage();
        let output = self.driver.output_usage();
        let mut slot = lock(&self.sample);
        *slot = SubtaskSample {
            busy: self.time.busy,
            idle: self.time.idle,
            back_pressured: self.time.back_pressured,
            input,
            input_records,
            output,
            mailbox_latency,
            back_pressured_now: self.time.state() == WaitState::BackPressured,
            at: Some(now),
        };
    }
}

impl Actor for SubtaskActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        tracing::debug!(uid = %self.id.head_uid, subtask = self.id.subtask, "subtask started");
        ctx.spawn(DataLane);
    }
}

impl Drop for SubtaskActor {
    fn drop(&mut self) {
        if !self.reported {
            let event = JobEvent::Lost {
                attempt: self.id.attempt,
                actor: self.id.actor,
                epoch: self.id.epoch,
                uid: self.id.head_uid.clone(),
                subtask: self.id.subtask,
                reason: "the subtask's actor stopped before its input ended".into(),
            };
            let _ = self.events.unbounded_send(event);
        }
    }
}

/// The data lane of a subtask (see the module doc).
struct DataLane;

impl ActorFuture<SubtaskActor> for DataLane {
    type Output = ();

    fn poll(
        self: Pin<&mut Self>,
        act: &mut SubtaskActor,
        ctx: &mut Context<SubtaskActor>,
        task: &mut TaskContext<'_>,
    ) -> Poll<()> {
        let t0 = Instant::now();
        act.time.switch(t0, WaitState::Busy);
        let (poll, next) = act.poll_data(task, t0);
        act.time.switch(Instant::now(), next);
        match poll {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(())) => {
                tracing::debug!(uid = %act.id.head_uid, subtask = act.id.subtask, "subtask finished");
                act.report(JobEvent::Finished {
                    attempt: act.id.attempt,
                    actor: act.id.actor,
                    epoch: act.id.epoch,
                });
                // The actor stays until the job ends: a finished source still answers
                // checkpoint triggers (with its end position).
                Poll::Ready(())
            }
            Poll::Ready(Err(e)) => {
                tracing::warn!(uid = %act.id.head_uid, subtask = act.id.subtask, error = ?e, "subtask failed");
                act.report(JobEvent::Failed {
                    attempt: act.id.attempt,
                    actor: act.id.actor,
                    epoch: act.id.epoch,
                    error: e,
                });
                ctx.stop();
                Poll::Ready(())
            }
        }
    }
}

/// What a subtask says about itself when pinged.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SubtaskStatus {
    /// Uid of the chain's first operator.
    pub head_uid: String,
    /// Subtask index.
    pub subtask: usize,
    /// Input batches processed so far (source: batches read).
    pub batches_processed: u64,
    /// Batches waiting in the data lane now.
    pub input_queued: usize,
    /// Capacity of the data lane, in batches.
    pub input_capacity: usize,
    /// System mails handled so far, this one included.
    pub mails_handled: u64,
}

/// Heartbeat ping: a system mail answered with the subtask's status.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ping;

impl Message for Ping {
    type Result = SubtaskStatus;
}

impl Handler<Ping> for SubtaskActor {
    type Result = MessageResult<Ping>;

    fn handle(&mut self, _msg: Ping, _ctx: &mut Self::Context) -> Self::Result {
        let mails = self.counters.mails_handled.fetch_add(1, Ordering::Relaxed) + 1;
        let (input, _) = self.driver.input_usage();
        let (queued, capacity) = (input.queued, input.capacity);
        MessageResult(SubtaskStatus {
            head_uid: self.id.head_uid.clone(),
            subtask: self.id.subtask,
            batches_processed: self.counters.batches(),
            input_queued: queued,
            input_capacity: capacity,
            mails_handled: mails,
        })
    }
}

/// Sample the subtask's metrics into its slot (sent by the job every metrics interval).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    pub(crate) sent_at: Instant,
}

impl Message for Sample {
    type Result = ();
}

impl Handler<Sample> for SubtaskActor {
    type Result = ();

    fn handle(&mut self, msg: Sample, _ctx: &mut Self::Context) {
        self.counters.mails_handled.fetch_add(1, Ordering::Relaxed);
        self.take_sample(msg.sent_at.elapsed());
    }
}

/// Set (or lift, with `None`) a source subtask's rate limit, in records per second.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SetRate(pub(crate) Option<f64>);

impl Message for SetRate {
    type Result = ();
}

impl Handler<SetRate> for SubtaskActor {
    type Result = ();

    fn handle(&mut self, msg: SetRate, _ctx: &mut Self::Context) {
        self.counters.mails_handled.fetch_add(1, Ordering::Relaxed);
        if let Driver::Source(s) = &mut self.driver {
            s.set_rate(Instant::now(), msg.0);
            // A shorter wait may now apply: re-evaluate at the next poll.
            self.throttle = None;
        }
    }
}

/// Change a `#[weir(config)]` field of the operator `uid` in this subtask.
#[derive(Debug, Clone)]
pub(crate) struct Configure {
    pub(crate) uid: String,
    pub(crate) key: String,
    pub(crate) value: String,
}

impl Message for Configure {
    type Result = Result<(), ConfigError>;
}

impl Handler<Configure> for SubtaskActor {
    type Result = Result<(), ConfigError>;

    fn handle(&mut self, msg: Configure, _ctx: &mut Self::Context) -> Self::Result {
        self.counters.mails_handled.fetch_add(1, Ordering::Relaxed);
        let mut c = Control {
            uid: &msg.uid,
            action: ControlAction::Configure {
                key: &msg.key,
                value: &msg.value,
            },
            outcome: None,
        };
        self.driver.control(&mut c);
        match c.outcome {
            Some(ControlOutcome::Configured(r)) => {
                if r.is_ok() {
                    tracing::info!(uid = %msg.uid, subtask = self.id.subtask, key = %msg.key, value = %msg.value, "operator reconfigured");
                }
                r
            }
            _ => Err(ConfigError::NoSuchOperator { uid: msg.uid }),
        }
    }
}

/// Snapshot the state of operator `uid` in this subtask (between two batches).
#[derive(Debug, Clone)]
pub(crate) struct SnapshotState {
    pub(crate) uid: String,
}

impl Message for SnapshotState {
    type Result = Result<StateSnapshot, StateError>;
}

impl Handler<SnapshotState> for SubtaskActor {
    type Result = Result<StateSnapshot, StateError>;

    fn handle(&mut self, msg: SnapshotState, _ctx: &mut Self::Context) -> Self::Result {
        self.counters.mails_handled.fetch_add(1, Ordering::Relaxed);
        let mut c = Control {
            uid: &msg.uid,
            action: ControlAction::Snapshot,
            outcome: None,
        };
        self.driver.control(&mut c);
        match c.outcome {
            Some(ControlOutcome::Snapshot(r)) => r,
            _ => Err(StateError::NoSuchOperator { uid: msg.uid }),
        }
    }
}

/// Take checkpoint `id` (sent to source subtasks; the others receive barriers in-band).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TriggerCheckpoint {
    pub(crate) id: u64,
    pub(crate) sent_at: Instant,
}

impl Message for TriggerCheckpoint {
    type Result = ();
}

impl Handler<TriggerCheckpoint> for SubtaskActor {
    type Result = ();

    fn handle(&mut self, msg: TriggerCheckpoint, _ctx: &mut Self::Context) {
        self.counters.mails_handled.fetch_add(1, Ordering::Relaxed);
        let start_delay = msg.sent_at.elapsed();
        let mut w = StateWriter::default();
        let r = match &mut self.driver {
            Driver::Source(s) => s.checkpoint(msg.id, &mut w),
            Driver::Inputs { .. } => return,
        };
        match r {
            Ok(()) => self.write_and_ack(msg.id, w, Duration::ZERO, start_delay),
            Err(e) => self.decline(msg.id, e),
        }
    }
}

/// Checkpoint `id` is complete: sinks commit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NotifyComplete(pub(crate) u64);

impl Message for NotifyComplete {
    type Result = Result<(), TaskError>;
}

impl Handler<NotifyComplete> for SubtaskActor {
    type Result = Result<(), TaskError>;

    fn handle(&mut self, msg: NotifyComplete, ctx: &mut Self::Context) -> Self::Result {
        self.counters.mails_handled.fetch_add(1, Ordering::Relaxed);
        match self.driver.notify_complete(msg.0) {
            Ok(()) => Ok(()),
            // The final commit's caller waits for the answer and fails the job.
            Err(e) if msg.0 == crate::checkpoint::FINAL_COMMIT => Err(e),
            Err(e) => {
                self.report(JobEvent::Failed {
                    attempt: self.id.attempt,
                    actor: self.id.actor,
                    epoch: self.id.epoch,
                    error: e,
                });
                ctx.stop();
                Ok(())
            }
        }
    }
}

/// Checkpoint `id` was aborted because a backed-up subtask failed over.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AbortCheckpoint(pub(crate) u64);

impl Message for AbortCheckpoint {
    type Result = ();
}

impl Handler<AbortCheckpoint> for SubtaskActor {
    type Result = ();

    fn handle(&mut self, msg: AbortCheckpoint, _ctx: &mut Self::Context) {
        self.counters.mails_handled.fetch_add(1, Ordering::Relaxed);
        self.driver.abort_checkpoint(msg.0);
    }
}

/// Stop now (the job is cancelled or failed elsewhere).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stop;

impl Message for Stop {
    type Result = ();
}

impl Handler<Stop> for SubtaskActor {
    type Result = ();

    fn handle(&mut self, _msg: Stop, ctx: &mut Self::Context) {
        self.counters.mails_handled.fetch_add(1, Ordering::Relaxed);
        self.reported = true;
        ctx.stop();
    }
}
