//! The driver of a subtask: what one unit of data-lane work is — one source batch, or one
//! input batch from the gates, round robin over logical inputs — and the read loop's side of
//! checkpoints: it asks the barrier handler (`checkpoint::barriers`, one state machine with
//! Flink's state names) what each barrier, end of input and tick means, and does it on the
//! gates (blocks channels, snapshots, records and takes channel state). The actor (`task`)
//! calls it once per poll and owns the mailbox; gates and sources are `gate` and `source`.

use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use crate::sync::AtomicWaker;

use crate::checkpoint::align::AlignMode;
pub(crate) use crate::checkpoint::barriers::AlignmentSettings;
use crate::checkpoint::barriers::{BarrierHandler, InBand, Overtaking, StartUnaligned};
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
        /// What barriers mean, over every channel of every input (gate `g`'s channel `c` is
        /// `offsets[g] + c`): the decisions; this driver does them on the gates.
        barriers: BarrierHandler,
        offsets: Vec<usize>,
        /// The unaligned checkpoint being recorded: its states, where its channel state goes.
        recorder: Recorder,
        /// An aligned checkpoint completed by the same end of a channel as an unaligned one
        /// (a timed-out checkpoint recorded while a newer one aligned): taken next.
        aligned_next: Option<u64>,
        /// Every input ended as a checkpoint completed: the end is reported next (after
        /// `aligned_next`).
        ended: bool,
    },
}

/// The I/O side of an unaligned checkpoint in one subtask: the snapshot taken when it started
/// and the channel state the gates record, written under `<head uid>#in<input>`.
pub(crate) struct Recorder {
    state_uid: String,
    writer: Option<StateWriter>,
    /// Checkpoints whose barriers said to hand their states over in memory too (a rescale's
    /// or a graph replacement's), not yet taken here.
    handing_over: Vec<u64>,
}

impl Driver {
    /// An input-driven driver over `gates`, handling barriers per `settings`.
    pub(crate) fn inputs(
        gates: Vec<Box<dyn InputGate>>,
        selection: Option<Arc<SelectionCell>>,
        settings: AlignmentSettings,
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
            barriers: BarrierHandler::new(total, settings),
            offsets,
            recorder: Recorder {
                state_uid,
                writer: None,
                handing_over: Vec::new(),
            },
            aligned_next: None,
            ended: false,
        }
    }

    /// New alignment settings, taken at the first moment no checkpoint is in progress here
    /// (a checkpoint finishes as it began). Sources do not align.
    pub(crate) fn set_alignment(&mut self, s: AlignmentSettings) {
        if let Driver::Inputs { barriers, .. } = self {
            barriers.set_settings(s);
        }
    }

    /// Every checkpoint of this subtask aligned, whatever the job's settings (a backed-up
    /// subtask: `BarrierHandler::force_aligned`).
    pub(crate) fn force_aligned(mut self) -> Self {
        if let Driver::Inputs { barriers, .. } = &mut self {
            barriers.force_aligned();
        }
        self
    }

    /// Whether checkpoint `id`'s barriers said to hand its states over in memory too; the
    /// checkpoint is being taken here (older ones are forgotten).
    pub(crate) fn hands_over(&mut self, id: u64) -> bool {
        match self {
            Driver::Inputs { recorder, .. } => recorder.hands_over(id),
            // A source learns it from its trigger.
            Driver::Source(_) => false,
        }
    }
}

impl Recorder {
    /// A gate's channel state could not be encoded: the checkpoint fails, naming the head.
    fn channel_state_error(&self, message: String) -> TaskError {
        TaskError::Checkpoint {
            uid: self.state_uid.clone(),
            subtask: 0,
            message,
        }
    }

    /// A barrier arrived: its checkpoint's options are this subtask's too.
    fn learn(&mut self, barrier: crate::channel::Barrier) {
        if barrier.hand_over && !self.handing_over.contains(&barrier.id) {
            self.handing_over.push(barrier.id);
        }
    }

    /// Whether checkpoint `id` is handed over in memory; it is being taken (older ones are
    /// forgotten: ids only grow).
    fn hands_over(&mut self, id: u64) -> bool {
        self.handing_over.retain(|&h| h >= id);
        self.handing_over.contains(&id)
    }

    /// Starts the unaligned checkpoint `s` says: the chain's states (and the barrier passed
    /// on), and recording on each channel that owes its barrier.
    fn start(
        &mut self,
        s: &StartUnaligned,
        gates: &mut [Box<dyn InputGate>],
        offsets: &[usize],
    ) -> Result<(), TaskError> {
        if s.dropped {
            self.drop(gates);
        }
        let hand_over = self.hands_over(s.id);
        let mut writer = StateWriter {
            unaligned: true,
            ..StateWriter::new(hand_over)
        };
        for g in gates.iter_mut() {
            g.barrier(s.id, &mut writer)?;
        }
        for (gi, g) in gates.iter_mut().enumerate() {
            for c in 0..g.channels() {
                if s.record[offsets[gi] + c] {
                    g.set_recording(c, true);
                }
            }
        }
        self.writer = Some(writer);
        Ok(())
    }

    /// Gives up the checkpoint being recorded (superseded or aborted): its coordinator times
    /// it out.
    fn drop(&mut self, gates: &mut [Box<dyn InputGate>]) {
        if self.writer.take().is_some() {
            for g in gates.iter_mut() {
                let _ = g.take_channel_state();
            }
        }
    }

    /// The checkpoint `barriers` completed (every channel delivered its barrier), if any,
    /// with its channel state.
    fn complete(
        &mut self,
        barriers: &mut BarrierHandler,
        gates: &mut [Box<dyn InputGate>],
    ) -> Result<Option<Work>, TaskError> {
        let Some((id, started)) = barriers.complete() else {
            return Ok(None);
        };
        let Some(mut writer) = self.writer.take() else {
            return Ok(None);
        };
        let mut persisted = 0;
        for (gi, g) in gates.iter_mut().enumerate() {
            let state = g
                .take_channel_state()
                .map_err(|message| self.channel_state_error(message))?;
            persisted += state.len() as u64;
            writer.put(&format!("{}#in{gi}", self.state_uid), None, state);
        }
        Ok(Some(Work::Checkpointed {
            id,
            writer,
            took: started.elapsed(),
            persisted,
        }))
    }
}

/// Where a gate's step came from: gate `gate`'s channel `channel`, `global` among all the
/// subtask's input channels.
#[derive(Debug, Clone, Copy)]
struct ChannelAt {
    gate: usize,
    channel: usize,
    global: usize,
}

/// Channel `c` of gate `gi` (`global`) delivered the recorded checkpoint's barrier or ended:
/// the gate records it no more.
fn channel_done(
    barriers: &mut BarrierHandler,
    gates: &mut [Box<dyn InputGate>],
    gi: usize,
    c: usize,
    global: usize,
) {
    if barriers.records(global) {
        gates[gi].set_recording(c, false);
    }
    barriers.channel_done(global);
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
                barriers,
                recorder,
                ..
            } => {
                for (gi, g) in gates.iter_mut().enumerate() {
                    g.barrier(id, &mut w)?;
                    // The input's watermark, for an operator told it on restore.
                    if let Some(state) = g.aligned_channel_state() {
                        let state =
                            state.map_err(|message| recorder.channel_state_error(message))?;
                        w.put(&format!("{}#in{gi}", recorder.state_uid), None, state);
                    }
                }
                let took = barriers.take_alignment_time();
                let taken = match barriers.mode() {
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
            barriers,
            recorder,
            ..
        } = self
        {
            if barriers.abort_upto(id) {
                recorder.drop(gates);
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
            barriers,
            offsets,
            recorder,
            ..
        } = self
        else {
            return Ok(None);
        };
        barriers.take_settings();
        let mut progressed = false;
        for gi in 0..gates.len() {
            while let Some((c, barrier)) = gates[gi].overtaking(barriers.overtakes_in_band()) {
                progressed = true;
                recorder.learn(barrier);
                let id = barrier.id;
                let global = offsets[gi] + c;
                match barriers.on_overtaking(id) {
                    Overtaking::Record => {}
                    Overtaking::Start(s) => recorder.start(&s, gates, offsets)?,
                    Overtaking::Stale => {
                        // Its checkpoint was taken, given up or superseded here. (If a newer
                        // one replaced it meanwhile, nothing is taken and the next look finds
                        // that one.)
                        gates[gi].take_overtaken(c, id, false);
                        continue;
                    }
                }
                if !gates[gi].take_overtaken(c, id, true) {
                    // A newer barrier replaced it meanwhile: the next look takes that one.
                    continue;
                }
                channel_done(barriers, gates, gi, c, global);
                if let Some(w) = recorder.complete(barriers, gates)? {
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
            gates, barriers, ..
        } = self
        else {
            return false;
        };
        let in_band = barriers.overtakes_in_band();
        gates.iter_mut().any(|g| g.overtaking(in_band).is_some())
    }

    /// Tries each readable input once, in round-robin order.
    #[allow(clippy::too_many_arguments)]
    fn try_inputs(
        gates: &mut [Box<dyn InputGate>],
        selection: &Option<Arc<SelectionCell>>,
        next: &mut usize,
        barriers: &mut BarrierHandler,
        offsets: &[usize],
        recorder: &mut Recorder,
        (aligned_next, ended): (&mut Option<u64>, &mut bool),
        counters: &SubtaskCounters,
    ) -> Result<Option<Work>, TaskError> {
        if let Some(id) = aligned_next.take() {
            return Ok(Some(Work::Aligned(id)));
        }
        if std::mem::take(ended) {
            return Ok(Some(Work::Ended));
        }
        let n = gates.len();
        // Aligned for too long: this checkpoint switches to unaligned.
        if let Some(s) = barriers.on_tick(Instant::now) {
            recorder.start(&s, gates, offsets)?;
            if let Some(w) = recorder.complete(barriers, gates)? {
                return Ok(Some(w));
            }
            return Ok(Some(Work::Progress));
        }
        // While a barrier is being aligned every unblocked channel must be read, whatever
        // the operator's preference, or the alignment could never finish.
        let selected = match (barriers.aligning(), selection) {
            (false, Some(s)) => s.get(),
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
                let barriers = &*barriers;
                gates[i].try_step(&|c| barriers.is_blocked(offset + c))?
            };
            return match step {
                GateStep::Empty => continue,
                GateStep::Watermark | GateStep::Slice(_) => {
                    // (The rest of a batch counted when it was taken.)
                    *next = (i + 1) % n;
                    Ok(Some(Work::Progress))
                }
                GateStep::Batch(_) => {
                    counters.batches_in.fetch_add(1, Ordering::Relaxed);
                    *next = (i + 1) % n;
                    Ok(Some(Work::Progress))
                }
                GateStep::Barrier { channel, barrier } => {
                    let at = ChannelAt {
                        gate: i,
                        channel,
                        global: offset + channel,
                    };
                    Self::on_barrier(gates, barriers, offsets, recorder, at, barrier).map(Some)
                }
                GateStep::Finished if gates.iter().all(|g| g.is_ended()) => Ok(Some(Work::Ended)),
                GateStep::Finished => Ok(Some(Work::Progress)),
                GateStep::ChannelEnded { channel, all } => {
                    let at = ChannelAt {
                        gate: i,
                        channel,
                        global: offset + channel,
                    };
                    Self::on_channel_end(gates, barriers, recorder, at, all, (aligned_next, ended))
                        .map(Some)
                }
            };
        }
        Ok(None)
    }

    /// The in-band `barrier` came from channel `at`: aligned, started, recorded or taken on.
    fn on_barrier(
        gates: &mut [Box<dyn InputGate>],
        barriers: &mut BarrierHandler,
        offsets: &[usize],
        recorder: &mut Recorder,
        at: ChannelAt,
        barrier: crate::channel::Barrier,
    ) -> Result<Work, TaskError> {
        recorder.learn(barrier);
        let id = barrier.id;
        match barriers.on_barrier(at.global, id, Instant::now()) {
            InBand::Continue => Ok(Work::Progress),
            InBand::Aligned(id) => Ok(Work::Aligned(id)),
            InBand::Start(s) => {
                recorder.start(&s, gates, offsets)?;
                Ok(recorder
                    .complete(barriers, gates)?
                    .unwrap_or(Work::Progress))
            }
            InBand::Recorded => {
                channel_done(barriers, gates, at.gate, at.channel, at.global);
                Ok(recorder
                    .complete(barriers, gates)?
                    .unwrap_or(Work::Progress))
            }
        }
    }

    /// Channel `at` ended (`all`: its gate's last): the checkpoints it completes, then the
    /// end of the input when every gate ended. What comes after the work returned goes in
    /// `aligned_next` and `ended`.
    fn on_channel_end(
        gates: &mut [Box<dyn InputGate>],
        barriers: &mut BarrierHandler,
        recorder: &mut Recorder,
        at: ChannelAt,
        all: bool,
        (aligned_next, ended): (&mut Option<u64>, &mut bool),
    ) -> Result<Work, TaskError> {
        if barriers.records(at.global) {
            gates[at.gate].set_recording(at.channel, false);
        }
        let aligned = barriers.on_end(at.global);
        let all = all && gates.iter().all(|g| g.is_ended());
        if let Some(w) = recorder.complete(barriers, gates)? {
            // An aligned checkpoint it completed too, and the end, come next.
            *aligned_next = aligned;
            *ended = all;
            return Ok(w);
        }
        Ok(match aligned {
            // A barrier completed by this end is taken before the end.
            Some(id) => {
                *ended = all;
                Work::Aligned(id)
            }
            None if all => Work::Ended,
            None => Work::Progress,
        })
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
                barriers,
                offsets,
                recorder,
                aligned_next,
                ended,
            } => {
                barriers.take_settings();
                let mut attempt = |gates: &mut Vec<Box<dyn InputGate>>| {
                    Self::try_inputs(
                        gates,
                        selection,
                        next,
                        barriers,
                        offsets,
                        recorder,
                        (aligned_next, ended),
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
                let in_band = barriers.overtakes_in_band();
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

#[cfg(test)]
mod tests {
    use super::Recorder;
    use crate::channel::Barrier;

    fn recorder() -> Recorder {
        Recorder {
            state_uid: "op".into(),
            writer: None,
            handing_over: Vec::new(),
        }
    }

    /// A subtask knows a checkpoint is handed over from its barriers alone, and forgets older
    /// checkpoints once a newer one is taken.
    #[test]
    fn a_barrier_carries_its_checkpoint_s_hand_over() {
        let mut r = recorder();
        r.learn(Barrier::new(3));
        r.learn(Barrier {
            id: 4,
            hand_over: true,
        });
        // Every channel's barrier of checkpoint 4 says so: learned once.
        r.learn(Barrier {
            id: 4,
            hand_over: true,
        });
        assert!(!r.hands_over(3));
        assert!(r.hands_over(4));
        assert_eq!(r.handing_over, vec![4]);
        r.learn(Barrier {
            id: 6,
            hand_over: true,
        });
        assert!(!r.hands_over(5));
        assert!(r.hands_over(6));
        assert!(!r.hands_over(7));
        assert!(r.handing_over.is_empty(), "taken checkpoints are forgotten");
    }
}
