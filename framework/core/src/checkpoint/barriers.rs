//! The barrier handler of one subtask with inputs: one plain state machine that says what each
//! barrier, end of input and tick means for its checkpoints, aligned or unaligned, with no I/O
//! and no actor types (the subtask's read loop, `task::driver`, does what it says on the
//! gates). Flink's `SingleCheckpointBarrierHandler` and its states, with the same names:
//!
//! ```text
//!                      barrier (aligned)                   last barrier
//!  WaitingForFirstBarrier ───────────────▶ CollectingBarriers ──────────▶ WaitingForFirstBarrier
//!         │    ▲                               │   (snapshot: Aligned)
//!         │    │ last barrier or end           │ aligned_checkpoint_timeout, or a barrier
//!         │    │ (channel state complete)      │ that overtook queued data
//!         │    │                               ▼
//!         └────┴──── CollectingBarriersUnaligned ◀──── (unaligned always: the first barrier,
//!                      (snapshot taken at start;        in band or overtaking)
//!                       owing channels recorded)
//! ```
//!
//! - **WaitingForFirstBarrier**: no checkpoint in progress.
//! - **CollectingBarriers** (aligned; Flink's `CollectingBarriers`, and with a timeout its
//!   `AlternatingCollectingAlignedBarriers`): the channels that delivered the barrier are
//!   blocked (exactly-once; at-least-once blocks nothing) until every open channel did; then
//!   the subtask snapshots and forwards the barrier ([`Alignment`] from [`BarrierAligner`]).
//! - **CollectingBarriersUnaligned** (Flink's `CollectingBarriersUnaligned` and
//!   `AlternatingCollectingUnalignedBarriers`): the snapshot was taken when it started and the
//!   barrier forwarded ahead of the output; each channel that still owes its barrier is
//!   recorded as channel state until the barrier comes (or overtakes) or the channel ends.
//!
//! A barrier of a newer checkpoint supersedes the one in progress (its coordinator times it
//! out); a barrier of a checkpoint taken, given up or aborted here is stale and ignored.
//! Channels are numbered across all of a subtask's inputs (gate `g`'s channel `c` is
//! `offsets[g] + c`, the driver's numbering).

use std::time::{Duration, Instant};

use super::align::{AlignMode, Alignment, BarrierAligner};

/// Where the handler is (Flink's state names; see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandlerState {
    WaitingForFirstBarrier,
    CollectingBarriers(u64),
    CollectingBarriersUnaligned(u64),
}

/// How barriers are handled: the checkpoint mode, unaligned checkpoints, the aligned
/// checkpoint timeout (taken between checkpoints when changed live).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AlignmentSettings {
    pub(crate) mode: AlignMode,
    pub(crate) unaligned: bool,
    pub(crate) aligned_timeout: Option<Duration>,
}

impl AlignmentSettings {
    /// The alignment of checkpoint settings `c`.
    pub(crate) fn of(c: &super::CheckpointConfig) -> Self {
        AlignmentSettings {
            mode: match c.mode {
                super::CheckpointMode::ExactlyOnce => AlignMode::ExactlyOnce,
                super::CheckpointMode::AtLeastOnce => AlignMode::AtLeastOnce,
            },
            unaligned: c.unaligned,
            aligned_timeout: c.aligned_checkpoint_timeout,
        }
    }
}

/// Start unaligned checkpoint `id` now: take the snapshot, pass the barrier on ahead of the
/// output, and record the channels in `record` until their barriers come.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StartUnaligned {
    pub(crate) id: u64,
    pub(crate) record: Vec<bool>,
    /// The unaligned checkpoint being recorded was superseded: drop what was recorded.
    pub(crate) dropped: bool,
}

/// What a barrier that overtook queued data means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Overtaking {
    /// Of the checkpoint being recorded: record what it overtook, then [`channel_done`].
    ///
    /// [`channel_done`]: BarrierHandler::channel_done
    Record,
    /// A newer checkpoint: start it unaligned, record what the barrier overtook, then
    /// [`channel_done`](BarrierHandler::channel_done).
    Start(StartUnaligned),
    /// Of a checkpoint taken, given up or superseded here: take it without recording.
    Stale,
}

/// What an in-band barrier (one that reached the head of its channel) means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InBand {
    /// Keep reading (the channel may now be blocked, or the barrier was stale).
    Continue,
    /// Every channel delivered aligned barrier `id`: snapshot now and pass it on.
    Aligned(u64),
    /// Start unaligned (checkpoints always unaligned), then see [`BarrierHandler::complete`].
    Start(StartUnaligned),
    /// The channel delivered the barrier of the checkpoint being recorded: it is recorded no
    /// more ([`BarrierHandler::channel_done`]), then see [`BarrierHandler::complete`].
    Recorded,
}

/// The unaligned checkpoint being recorded.
#[derive(Debug)]
struct Recording {
    id: u64,
    /// Per channel: its barrier has not arrived yet (it is being recorded).
    waiting: Vec<bool>,
    started: Instant,
}

/// The state machine (see the module doc).
#[derive(Debug)]
pub(crate) struct BarrierHandler {
    /// The aligned part: blocked channels, ended channels, the checkpoint being aligned.
    aligner: BarrierAligner,
    /// Every checkpoint is unaligned.
    always: bool,
    /// Aligned checkpoints switch to unaligned after this long.
    timeout: Option<Duration>,
    /// When the checkpoint being aligned first arrived.
    align_started: Option<Instant>,
    recording: Option<Recording>,
    /// Newest checkpoint started unaligned (older barriers are stale).
    last_started: Option<u64>,
    /// Settings changed live, taken once no checkpoint is in progress.
    next: Option<AlignmentSettings>,
    /// Every checkpoint aligned whatever the settings say ([`BarrierHandler::force_aligned`]).
    forced_aligned: bool,
}

impl BarrierHandler {
    pub(crate) fn new(channels: usize, s: AlignmentSettings) -> Self {
        let mut h = BarrierHandler {
            aligner: BarrierAligner::new(channels, s.mode),
            always: false,
            timeout: None,
            align_started: None,
            recording: None,
            last_started: None,
            next: None,
            forced_aligned: false,
        };
        h.apply(s);
        h
    }

    fn apply(&mut self, s: AlignmentSettings) {
        self.aligner.set_mode(s.mode);
        let may_overtake = s.mode == AlignMode::ExactlyOnce && !self.forced_aligned;
        self.always = s.unaligned && may_overtake;
        self.timeout = s.aligned_timeout.filter(|_| may_overtake);
    }

    /// Every checkpoint of this subtask is aligned from now on, whatever the job's settings
    /// (now or changed live): no unaligned start, no switch after a timeout, no barrier moved
    /// ahead of queued data. For a backed-up subtask, whose dual input channels keep barriers
    /// in band and whose buffer queue restarts its backup at a step between two whole
    /// batches, never at a channel position (Flink forces alignment the same way where an
    /// edge cannot take unaligned barriers). Called before the first checkpoint.
    pub(crate) fn force_aligned(&mut self) {
        self.forced_aligned = true;
        self.always = false;
        self.timeout = None;
    }

    /// New settings, taken at the first moment no checkpoint is in progress (a checkpoint
    /// finishes as it began).
    pub(crate) fn set_settings(&mut self, s: AlignmentSettings) {
        self.next = Some(s);
    }

    /// Takes the new settings if they wait and no checkpoint is in progress.
    pub(crate) fn take_settings(&mut self) {
        if self.state() != HandlerState::WaitingForFirstBarrier {
            return;
        }
        if let Some(s) = self.next.take() {
            self.apply(s);
        }
    }

    pub(crate) fn state(&self) -> HandlerState {
        match (&self.recording, self.aligner.in_progress()) {
            (Some(r), _) => HandlerState::CollectingBarriersUnaligned(r.id),
            (None, Some(id)) => HandlerState::CollectingBarriers(id),
            (None, None) => HandlerState::WaitingForFirstBarrier,
        }
    }

    /// Exactly-once (blocking) or at-least-once.
    pub(crate) fn mode(&self) -> AlignMode {
        self.aligner.mode()
    }

    /// Whether channel `global` must not be read now (aligned, it delivered the barrier).
    #[inline]
    pub(crate) fn is_blocked(&self, global: usize) -> bool {
        self.aligner.is_blocked(global)
    }

    /// Whether in-band barriers should be moved ahead of queued data (they will be taken
    /// unaligned): checkpoints always unaligned, or one being recorded.
    pub(crate) fn overtakes_in_band(&self) -> bool {
        self.always || self.recording.is_some()
    }

    /// Whether the checkpoint being aligned is a barrier's first arrival (for the driver's
    /// input selection: while aligning, every unblocked channel is read).
    pub(crate) fn aligning(&self) -> bool {
        self.aligner.in_progress().is_some()
    }

    /// A channel has a barrier of checkpoint `id` at its head that overtook queued data.
    pub(crate) fn on_overtaking(&mut self, id: u64) -> Overtaking {
        // A forced-aligned subtask's channels (dual ones) keep barriers in band, and it never
        // moves one ahead itself (`overtakes_in_band`).
        debug_assert!(
            !self.forced_aligned,
            "an overtaking barrier at a forced-aligned subtask"
        );
        if self.recording.as_ref().is_some_and(|r| r.id == id) {
            return Overtaking::Record;
        }
        if self.last_started.is_none_or(|l| id > l)
            && self.aligner.last_aligned().is_none_or(|l| id > l)
        {
            // Channels that delivered this barrier aligned owe nothing more.
            let delivered: Vec<bool> = (0..self.aligner.channels())
                .map(|c| self.aligner.in_progress() == Some(id) && self.aligner.is_blocked(c))
                .collect();
            self.aligner.abort_upto(id);
            self.align_started = None;
            return Overtaking::Start(self.start(id, |c| !delivered[c]));
        }
        Overtaking::Stale
    }

    /// Channel `global` delivered barrier `id` in band (at the head of its queue); `now` starts
    /// the alignment clock if this is the checkpoint's first barrier.
    pub(crate) fn on_barrier(&mut self, global: usize, id: u64, now: Instant) -> InBand {
        if self.recording.as_ref().is_some_and(|r| r.id == id) {
            return InBand::Recorded;
        }
        if self.always {
            if self.last_started.is_none_or(|l| id > l) {
                // Reached the head before it could overtake: this channel owes nothing more.
                let start = self.start(id, |c| c != global);
                return InBand::Start(start);
            }
            return InBand::Continue;
        }
        if self.aligner.in_progress().is_none() {
            self.align_started = Some(now);
        }
        match self.aligner.on_barrier(global, id) {
            Alignment::Aligned(id) => InBand::Aligned(id),
            Alignment::Pending => InBand::Continue,
        }
    }

    /// Channel `global` ended: it owes no barrier, and counts as aligned from now on.
    /// Returns the aligned checkpoint it completed, if any (an unaligned one: see
    /// [`complete`](Self::complete)).
    pub(crate) fn on_end(&mut self, global: usize) -> Option<u64> {
        self.channel_done(global);
        match self.aligner.on_end_of_input(global) {
            Alignment::Aligned(id) => Some(id),
            Alignment::Pending => None,
        }
    }

    /// Aligned for longer than the timeout at `now()`: the checkpoint switches to unaligned.
    /// Channels that delivered its barrier owe nothing; the others are recorded until theirs
    /// arrives.
    /// `now` is read only while an aligned checkpoint with a timeout is in progress (this is
    /// asked at every step of the read loop).
    pub(crate) fn on_tick(&mut self, now: impl FnOnce() -> Instant) -> Option<StartUnaligned> {
        let (timeout, id, t) = (
            self.timeout?,
            self.aligner.in_progress()?,
            self.align_started?,
        );
        if self.recording.is_some() || now().saturating_duration_since(t) <= timeout {
            return None;
        }
        let delivered: Vec<bool> = (0..self.aligner.channels())
            .map(|c| self.aligner.is_blocked(c))
            .collect();
        self.aligner.abandon();
        self.align_started = None;
        Some(self.start(id, |c| !delivered[c]))
    }

    /// Channel `global` delivered the barrier of the checkpoint being recorded (or ended):
    /// it is recorded no more.
    pub(crate) fn channel_done(&mut self, global: usize) {
        if let Some(r) = self.recording.as_mut() {
            r.waiting[global] = false;
        }
    }

    /// Whether channel `global` is being recorded (it owes the recorded checkpoint's barrier).
    pub(crate) fn records(&self, global: usize) -> bool {
        self.recording.as_ref().is_some_and(|r| r.waiting[global])
    }

    /// The unaligned checkpoint being recorded, once every channel delivered its barrier:
    /// its id and when it started (its channel state is complete).
    pub(crate) fn complete(&mut self) -> Option<(u64, Instant)> {
        if !self
            .recording
            .as_ref()
            .is_some_and(|r| r.waiting.iter().all(|w| !w))
        {
            return None;
        }
        let r = self.recording.take()?;
        Some((r.id, r.started))
    }

    /// Checkpoints up to `id` were aborted (a backed-up subtask failed over): nothing waits
    /// for their barriers. Returns whether a recording was dropped.
    pub(crate) fn abort_upto(&mut self, id: u64) -> bool {
        if self.aligner.in_progress().is_some_and(|cur| cur <= id) {
            self.align_started = None;
        }
        self.aligner.abort_upto(id);
        self.last_started = Some(self.last_started.map_or(id, |l| l.max(id)));
        if self.recording.as_ref().is_some_and(|r| r.id <= id) {
            self.recording = None;
            return true;
        }
        false
    }

    /// How long the checkpoint just aligned took to align (the clock stops).
    pub(crate) fn take_alignment_time(&mut self) -> Duration {
        self.align_started
            .take()
            .map_or(Duration::ZERO, |t| t.elapsed())
    }

    /// Starts unaligned checkpoint `id`, recording each open channel `owes` says owes its
    /// barrier.
    fn start(&mut self, id: u64, owes: impl Fn(usize) -> bool) -> StartUnaligned {
        let dropped = self.recording.take().is_some();
        let record: Vec<bool> = (0..self.aligner.channels())
            .map(|c| owes(c) && !self.aligner.is_ended(c))
            .collect();
        self.last_started = Some(id);
        self.recording = Some(Recording {
            id,
            waiting: record.clone(),
            started: Instant::now(),
        });
        StartUnaligned {
            id,
            record,
            dropped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXACTLY_ONCE: AlignmentSettings = AlignmentSettings {
        mode: AlignMode::ExactlyOnce,
        unaligned: false,
        aligned_timeout: None,
    };

    fn unaligned() -> AlignmentSettings {
        AlignmentSettings {
            unaligned: true,
            ..EXACTLY_ONCE
        }
    }

    fn start(id: u64, record: &[bool], dropped: bool) -> StartUnaligned {
        StartUnaligned {
            id,
            record: record.to_vec(),
            dropped,
        }
    }

    use HandlerState::*;

    #[test]
    fn aligned_waiting_collecting_then_waiting() {
        let now = Instant::now();
        let mut h = BarrierHandler::new(2, EXACTLY_ONCE);
        assert_eq!(h.state(), WaitingForFirstBarrier);
        assert_eq!(h.on_barrier(0, 1, now), InBand::Continue);
        assert_eq!(h.state(), CollectingBarriers(1));
        assert!(h.is_blocked(0) && !h.is_blocked(1));
        assert_eq!(h.on_barrier(1, 1, now), InBand::Aligned(1));
        assert_eq!(h.state(), WaitingForFirstBarrier);
        assert!(!h.is_blocked(0));
        // A late copy of 1 is stale.
        assert_eq!(h.on_barrier(0, 1, now), InBand::Continue);
        assert_eq!(h.state(), WaitingForFirstBarrier);
    }

    #[test]
    fn an_end_of_input_completes_an_alignment() {
        let now = Instant::now();
        let mut h = BarrierHandler::new(2, EXACTLY_ONCE);
        assert_eq!(h.on_barrier(0, 1, now), InBand::Continue);
        assert_eq!(h.on_end(1), Some(1));
        assert_eq!(h.state(), WaitingForFirstBarrier);
    }

    #[test]
    fn the_timeout_switches_collecting_barriers_to_unaligned() {
        let now = Instant::now();
        let mut h = BarrierHandler::new(
            3,
            AlignmentSettings {
                aligned_timeout: Some(Duration::from_millis(10)),
                ..EXACTLY_ONCE
            },
        );
        assert_eq!(h.on_barrier(1, 4, now), InBand::Continue);
        assert_eq!(
            h.on_tick(|| now + Duration::from_millis(5)),
            None,
            "not yet"
        );
        // Channel 1 delivered its barrier: only 0 and 2 are recorded.
        assert_eq!(
            h.on_tick(|| now + Duration::from_millis(11)),
            Some(start(4, &[true, false, true], false))
        );
        assert_eq!(h.state(), CollectingBarriersUnaligned(4));
        assert!(!h.is_blocked(1), "nothing is blocked any more");
        assert_eq!(h.on_barrier(0, 4, now), InBand::Recorded);
        assert!(h.records(0), "until the driver stops recording it");
        h.channel_done(0);
        assert_eq!(h.complete(), None, "channel 2 still owes it");
        assert!(h.records(2) && !h.records(0));
        assert_eq!(h.on_end(2), None);
        assert_eq!(h.complete().map(|(id, _)| id), Some(4));
        assert_eq!(h.state(), WaitingForFirstBarrier);
        // Its barrier's late copy on channel 1 is stale now.
        assert_eq!(h.on_overtaking(4), Overtaking::Stale);
    }

    #[test]
    fn one_end_completes_the_recorded_checkpoint_and_the_newer_aligned_one() {
        let now = Instant::now();
        let mut h = BarrierHandler::new(
            2,
            AlignmentSettings {
                aligned_timeout: Some(Duration::from_millis(10)),
                ..EXACTLY_ONCE
            },
        );
        // 4 times out with channel 1 owing it; 5 then aligns on channel 0.
        h.on_barrier(0, 4, now);
        assert_eq!(
            h.on_tick(|| now + Duration::from_millis(11)),
            Some(start(4, &[false, true], false))
        );
        assert_eq!(h.on_barrier(0, 5, now), InBand::Continue);
        assert!(h.is_blocked(0));
        // Channel 1 ends: both complete (the driver takes 4, then 5).
        assert_eq!(h.on_end(1), Some(5));
        assert_eq!(h.complete().map(|(id, _)| id), Some(4));
        assert_eq!(h.state(), WaitingForFirstBarrier);
    }

    #[test]
    fn an_overtaking_barrier_starts_unaligned_from_waiting_or_collecting() {
        let now = Instant::now();
        let mut h = BarrierHandler::new(2, EXACTLY_ONCE);
        // From WaitingForFirstBarrier: both channels owe it (the overtaking one is recorded
        // too: what it overtook is its channel state).
        assert_eq!(
            h.on_overtaking(1),
            Overtaking::Start(start(1, &[true, true], false))
        );
        assert_eq!(h.state(), CollectingBarriersUnaligned(1));
        h.channel_done(1);
        assert_eq!(h.on_overtaking(1), Overtaking::Record);
        h.channel_done(0);
        assert_eq!(h.complete().map(|(id, _)| id), Some(1));
        // From CollectingBarriers: a channel that delivered barrier 2 aligned owes nothing.
        assert_eq!(h.on_barrier(0, 2, now), InBand::Continue);
        assert_eq!(h.state(), CollectingBarriers(2));
        assert_eq!(
            h.on_overtaking(2),
            Overtaking::Start(start(2, &[false, true], false))
        );
        assert!(!h.is_blocked(0));
        h.channel_done(1);
        assert_eq!(h.complete().map(|(id, _)| id), Some(2));
    }

    #[test]
    fn a_newer_barrier_supersedes_the_recording_and_older_ones_are_stale() {
        let now = Instant::now();
        let mut h = BarrierHandler::new(2, unaligned());
        assert!(h.overtakes_in_band());
        assert_eq!(
            h.on_barrier(0, 1, now),
            InBand::Start(start(1, &[false, true], false))
        );
        assert_eq!(
            h.on_overtaking(2),
            Overtaking::Start(start(2, &[true, true], true)),
            "1 is dropped"
        );
        assert_eq!(h.on_overtaking(1), Overtaking::Stale);
        assert_eq!(h.on_barrier(1, 1, now), InBand::Continue);
        assert_eq!(h.state(), CollectingBarriersUnaligned(2));
    }

    #[test]
    fn always_unaligned_completes_at_once_with_one_channel() {
        let now = Instant::now();
        let mut h = BarrierHandler::new(1, unaligned());
        assert_eq!(
            h.on_barrier(0, 7, now),
            InBand::Start(start(7, &[false], false))
        );
        assert_eq!(h.complete().map(|(id, _)| id), Some(7));
        assert_eq!(h.state(), WaitingForFirstBarrier);
    }

    #[test]
    fn an_abort_drops_the_recording_and_its_barriers_are_stale() {
        let now = Instant::now();
        let mut h = BarrierHandler::new(2, unaligned());
        assert!(matches!(h.on_barrier(0, 3, now), InBand::Start(_)));
        assert!(h.abort_upto(3));
        assert_eq!(h.state(), WaitingForFirstBarrier);
        assert_eq!(h.on_overtaking(3), Overtaking::Stale);
        assert!(!h.abort_upto(3), "nothing left to drop");
        // Aligned checkpoints too: nothing stays blocked.
        let mut h = BarrierHandler::new(2, EXACTLY_ONCE);
        h.on_barrier(0, 5, now);
        assert!(h.is_blocked(0));
        assert!(!h.abort_upto(5));
        assert!(!h.is_blocked(0));
        assert_eq!(h.state(), WaitingForFirstBarrier);
    }

    #[test]
    fn a_forced_aligned_handler_never_goes_unaligned() {
        let now = Instant::now();
        let mut h = BarrierHandler::new(
            2,
            AlignmentSettings {
                mode: AlignMode::ExactlyOnce,
                unaligned: true,
                aligned_timeout: Some(Duration::from_millis(1)),
            },
        );
        h.force_aligned();
        assert!(!h.overtakes_in_band());
        assert_eq!(h.on_barrier(0, 1, now), InBand::Continue);
        assert!(h.is_blocked(0));
        assert!(
            h.on_tick(|| now + Duration::from_secs(1)).is_none(),
            "no switch to unaligned after the timeout"
        );
        assert_eq!(h.on_barrier(1, 1, now), InBand::Aligned(1));
        // Settings changed live (unaligned on) leave it aligned.
        h.set_settings(unaligned());
        h.take_settings();
        assert!(!h.overtakes_in_band());
        assert_eq!(h.on_barrier(0, 2, now), InBand::Continue);
        assert_eq!(h.state(), CollectingBarriers(2));
    }

    #[test]
    fn settings_change_only_between_checkpoints() {
        let now = Instant::now();
        let mut h = BarrierHandler::new(2, EXACTLY_ONCE);
        h.on_barrier(0, 1, now);
        h.set_settings(unaligned());
        h.take_settings();
        assert!(!h.overtakes_in_band(), "not while aligning");
        assert_eq!(h.on_barrier(1, 1, now), InBand::Aligned(1));
        h.take_settings();
        assert!(h.overtakes_in_band());
        // At-least-once never blocks.
        let mut h = BarrierHandler::new(
            2,
            AlignmentSettings {
                mode: AlignMode::AtLeastOnce,
                unaligned: true,
                aligned_timeout: None,
            },
        );
        assert_eq!(h.on_barrier(0, 1, now), InBand::Continue);
        assert!(!h.is_blocked(0) && !h.overtakes_in_band());
        assert_eq!(h.mode(), AlignMode::AtLeastOnce);
    }
}
