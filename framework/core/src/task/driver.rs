//! The driver of a subtask: what one unit of data-lane work is — one source batch, or one
//! input batch from the gates, round robin over logical inputs — with barrier alignment,
//! unaligned checkpoints and the aligned-checkpoint timeout. The actor (`task`) calls it once
//! per poll and owns the mailbox; gates and sources are `gate` and `source`.

use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use crate::sync::AtomicWaker;

use crate::checkpoint::align::{AlignMode, Alignment, BarrierAligner};
use crate::checkpoint::coordinator::Taken;
use crate::checkpoint::StateWriter;
use crate::error::TaskError;
use crate::metrics::QueueUsage;
use crate::metrics::SubtaskCounters;
use crate::operator::connect::{InputSelection, SelectionCell};
use crate::operator::step::{GateStep, InputGate, SourceProgress, SourceStep};
use crate::operator::Control;
use crate::sync::atomic::Ordering;
use crate::sync::Arc;

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
        /// Alignment settings changed live, applied once no checkpoint is in progress.
        next_alignment: Option<AlignmentSettings>,
    },
}

/// How a subtask aligns barriers: the checkpoint mode, unaligned checkpoints, the aligned
/// checkpoint timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AlignmentSettings {
    pub(crate) mode: AlignMode,
    pub(crate) unaligned: bool,
    pub(crate) aligned_timeout: Option<Duration>,
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
            next_alignment: None,
        }
    }

    /// New alignment settings, taken at the first moment no checkpoint is in progress here
    /// (a checkpoint finishes as it began). Sources do not align.
    pub(crate) fn set_alignment(&mut self, s: AlignmentSettings) {
        if let Driver::Inputs { next_alignment, .. } = self {
            *next_alignment = Some(s);
        }
    }
}

impl AlignmentSettings {
    /// The alignment of checkpoint settings `c`.
    pub(crate) fn of(c: &crate::checkpoint::CheckpointConfig) -> Self {
        AlignmentSettings {
            mode: match c.mode {
                crate::checkpoint::CheckpointMode::ExactlyOnce => AlignMode::ExactlyOnce,
                crate::checkpoint::CheckpointMode::AtLeastOnce => AlignMode::AtLeastOnce,
            },
            unaligned: c.unaligned,
            aligned_timeout: c.aligned_checkpoint_timeout,
        }
    }
}

/// Applies `next` to `aligner` and `unaligned` if no checkpoint is in progress.
fn take_alignment(
    next: &mut Option<AlignmentSettings>,
    aligner: &mut BarrierAligner,
    unaligned: &mut Unaligned,
) {
    if next.is_none() || aligner.in_progress().is_some() || unaligned.pending.is_some() {
        return;
    }
    if let Some(s) = next.take() {
        aligner.set_mode(s.mode);
        unaligned.always = s.unaligned && s.mode == AlignMode::ExactlyOnce;
        unaligned.timeout = s
            .aligned_timeout
            .filter(|_| s.mode == AlignMode::ExactlyOnce);
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
        let mut writer = StateWriter {
            unaligned: true,
            ..StateWriter::default()
        };
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

    /// Gives up the checkpoint being recorded (a newer one supersedes it): its coordinator
    /// times it out.
    fn drop_pending(&mut self, gates: &mut [Box<dyn InputGate>]) {
        if self.pending.take().is_some() {
            for g in gates.iter_mut() {
                let _ = g.take_channel_state();
            }
        }
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
        let mut persisted = 0;
        for (gi, g) in gates.iter_mut().enumerate() {
            let state = g
                .take_channel_state()
                .map_err(|message| TaskError::Checkpoint {
                    uid: self.state_uid.clone(),
                    subtask: 0,
                    message,
                })?;
            persisted += state.len() as u64;
            p.writer
                .put(&format!("{}#in{gi}", self.state_uid), None, state);
        }
        Ok(Some(Work::Checkpointed {
            id: p.id,
            writer: p.writer,
            took: p.started.elapsed(),
            persisted,
        }))
    }
}

/// Result of one unit of work.
pub(super) enum Work {
    /// Did something; more may be ready.
    Progress,
    /// Nothing to do until woken.
    Idle,
    /// A rate-limited source may read again after this long.
    Throttled(Duration),
    /// The source has nothing now: wait until its waker is woken (the actor's task waker is
    /// registered with it), or at most this long if given.
    SourceIdle(Option<Duration>),
    /// All input consumed and end-of-input pushed through the chain.
    Ended,
    /// Every input delivered barrier `id` (the subtask snapshots and passes it on).
    Aligned(u64),
    /// An unaligned checkpoint is complete with its channel state.
    Checkpointed {
        id: u64,
        writer: StateWriter,
        took: Duration,
        /// Bytes of in-flight data in the channel state.
        persisted: u64,
    },
}

impl Driver {
    pub(super) fn poll_pending(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), TaskError>> {
        match self {
            Driver::Source(s) => s.poll_pending(cx),
            Driver::Inputs { gates, .. } => {
                crate::operator::all_ready(gates.iter_mut().map(|g| g.poll_pending(cx)))
            }
        }
    }

    /// A source driver: registers `cx`'s waker with the source's waker and says whether the
    /// source was woken since its last poll. Other drivers: always (nothing to wait for).
    pub(super) fn source_woken(&mut self, cx: &mut TaskContext<'_>) -> bool {
        match self {
            Driver::Source(s) => s.woken(cx.waker()),
            Driver::Inputs { .. } => true,
        }
    }

    /// The subtask parks: wakes every sender into it that waits for credit there is room
    /// for (see `channel`'s hand-offs).
    pub(super) fn release_inputs(&self) {
        if let Driver::Inputs { gates, .. } = self {
            gates.iter().for_each(|g| g.release());
        }
    }

    pub(super) fn flush(&mut self) {
        match self {
            Driver::Source(s) => s.flush(),
            Driver::Inputs { gates, .. } => gates.iter_mut().for_each(|g| g.flush()),
        }
    }

    /// Fill of the data lane (batches, capacity) and the records in it.
    /// Each input's watermark (none for a source).
    pub(super) fn input_watermarks(&self) -> Vec<crate::time::InputWatermark> {
        match self {
            Driver::Source(_) => Vec::new(),
            Driver::Inputs { gates, .. } => gates.iter().map(|g| g.watermark()).collect(),
        }
    }

    pub(super) fn input_usage(&self) -> (QueueUsage, usize) {
        match self {
            Driver::Source(_) => (QueueUsage::default(), 0),
            Driver::Inputs { gates, .. } => (
                QueueUsage {
                    queued: gates.iter().map(|g| g.queued()).sum(),
                    capacity: gates.iter().map(|g| g.capacity()).sum(),
                    watermark: None,
                },
                gates.iter().map(|g| g.queued_records()).sum(),
            ),
        }
    }

    /// All inputs delivered barrier `id`: the chain's states, barrier passed on; returns the
    /// states and how long the alignment took.
    pub(super) fn snapshot_aligned(
        &mut self,
        id: u64,
        hand_over: bool,
        root: Option<&std::path::Path>,
    ) -> Result<(StateWriter, Duration, Taken), TaskError> {
        let mut w = StateWriter::new(hand_over);
        // A checkpoint handed over in memory takes whole states.
        w.incremental = root.filter(|_| !hand_over).map(|r| (id, r.to_owned()));
        match self {
            Driver::Source(_) => Ok((w, Duration::ZERO, Taken::Source)),
            Driver::Inputs {
                gates,
                align_started,
                aligner,
                ..
            } => {
                for g in gates.iter_mut() {
                    g.barrier(id, &mut w)?;
                }
                let took = align_started.take().map_or(Duration::ZERO, |t| t.elapsed());
                let taken = match aligner.mode() {
                    AlignMode::ExactlyOnce => Taken::Aligned,
                    AlignMode::AtLeastOnce => Taken::AtLeastOnce,
                };
                Ok((w, took, taken))
            }
        }
    }

    /// Checkpoint `id` was aborted (a backed-up subtask failed over): stop aligning it, so no
    /// channel stays blocked waiting for a barrier that will not come.
    pub(super) fn abort_checkpoint(&mut self, id: u64) {
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

    pub(super) fn notify_complete(&mut self, id: u64) -> Result<(), TaskError> {
        match self {
            Driver::Source(s) => s.notify_complete(id),
            Driver::Inputs { gates, .. } => {
                gates.iter_mut().try_for_each(|g| g.notify_complete(id))
            }
        }
    }

    pub(super) fn control(&mut self, c: &mut Control<'_>) {
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

    pub(super) fn output_usage(&self) -> QueueUsage {
        let mut u = QueueUsage::default();
        match self {
            Driver::Source(s) => s.output_usage(&mut u),
            Driver::Inputs { gates, .. } => gates.iter().for_each(|g| g.output_usage(&mut u)),
        }
        u
    }

    /// Takes the barriers that overtook queued data (unaligned checkpoints; with unaligned
    /// checkpoints always on, in-band barriers are moved ahead first): a newer checkpoint
    /// starts at once, whatever waits in the queues or for credit downstream, and the data
    /// each barrier overtook becomes its channel state. Called at every poll, before the
    /// subtask looks at its output: a backpressured subtask takes its checkpoint too.
    pub(super) fn overtake(&mut self) -> Result<Option<Work>, TaskError> {
        let Driver::Inputs {
            gates,
            aligner,
            offsets,
            align_started,
            unaligned,
            next_alignment,
            ..
        } = self
        else {
            return Ok(None);
        };
        take_alignment(next_alignment, aligner, unaligned);
        let mut progressed = false;
        for gi in 0..gates.len() {
            loop {
                let in_band = unaligned.always || unaligned.pending.is_some();
                let Some((c, id)) = gates[gi].overtaking(in_band) else {
                    break;
                };
                progressed = true;
                let global = offsets[gi] + c;
                if unaligned.pending.as_ref().is_some_and(|p| p.id == id) {
                    if !gates[gi].take_overtaken(c, id, true) {
                        continue; // replaced by a newer barrier meanwhile: look again
                    }
                    unaligned.channel_done(gates, gi, c, global);
                } else if unaligned.last_started.is_none_or(|l| id > l)
                    && aligner.last_aligned().is_none_or(|l| id > l)
                {
                    // Channels that delivered this barrier aligned owe nothing more.
                    let blocked: Vec<bool> = (0..aligner.channels())
                        .map(|g| aligner.in_progress() == Some(id) && aligner.is_blocked(g))
                        .collect();
                    aligner.abort_upto(id);
                    *align_started = None;
                    unaligned.drop_pending(gates);
                    unaligned.start(id, gates, offsets, |g| !blocked[g])?;
                    if !gates[gi].take_overtaken(c, id, true) {
                        // A newer barrier replaced it while the snapshot was taken: the next
                        // look starts that one (this checkpoint cannot complete here).
                        continue;
                    }
                    unaligned.channel_done(gates, gi, c, global);
                } else {
                    // Stale: its checkpoint was taken, given up or superseded here. (If a
                    // newer one replaced it meanwhile, nothing is taken and the next look
                    // finds that one.)
                    gates[gi].take_overtaken(c, id, false);
                }
                if let Some(w) = unaligned.try_complete(gates)? {
                    return Ok(Some(w));
                }
            }
        }
        Ok(progressed.then_some(Work::Progress))
    }

    /// Whether a barrier waits to overtake in any input (moving in-band ones ahead first when
    /// unaligned checkpoints take them so). The subtask looks again after registering its
    /// receive waker, before it parks: a barrier that overtakes nothing blocks its channel
    /// until taken, so the read loop sees nothing there and would park past it.
    pub(super) fn overtaking_waits(&mut self) -> bool {
        let Driver::Inputs {
            gates, unaligned, ..
        } = self
        else {
            return false;
        };
        let in_band = unaligned.always || unaligned.pending.is_some();
        gates.iter_mut().any(|g| g.overtaking(in_band).is_some())
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
                GateStep::Watermark => {
                    *next = (i + 1) % n;
                    return Ok(Some(Work::Progress));
                }
                GateStep::Batch(_) => {
                    counters.batches_in.fetch_add(1, Ordering::Relaxed);
                    *next = (i + 1) % n;
                    return Ok(Some(Work::Progress));
                }
                // The rest of a batch counted when it was taken.
                GateStep::Slice(_) => {
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
                        // Reached the head before it could overtake: start now; this
                        // channel owes nothing more.
                        let global = offset + channel;
                        unaligned.drop_pending(gates);
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

    pub(super) fn step(
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
                // Registered before the flag is read: a wake since the poll began is either
                // seen here (poll again now) or wakes the task later.
                SourceProgress::Idle(_) if s.woken(cx.waker()) => Work::Progress,
                SourceProgress::Idle(until) => Work::SourceIdle(until),
            }),
            Driver::Inputs {
                gates,
                selection,
                next,
                aligner,
                offsets,
                align_started,
                unaligned,
                next_alignment,
            } => {
                take_alignment(next_alignment, aligner, unaligned);
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
                // A barrier that came meanwhile (the read loop does not see one that overtook
                // nothing): the next poll takes it.
                let in_band = unaligned.always || unaligned.pending.is_some();
                if gates.iter_mut().any(|g| g.overtaking(in_band).is_some()) {
                    return Ok(Work::Progress);
                }
                // The caller decides whether to park (and then releases the inputs, see
                // `release_inputs`) or look again soon.
                Ok(Work::Idle)
            }
        }
    }
}
