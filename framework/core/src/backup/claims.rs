//! The primary's side of the buffer queue: the [`Claims`] its input gate makes on each batch
//! before processing it, the state it hands to the queue between batches, and what a promoted
//! primary replays first ([`Replay`]).

use super::*;

/// What a promoted primary processes before its channels: the batches, watermarks and ends
/// of its replay, then the ends the backup saw.
pub(crate) type Replay<T> = queue::Item<StdArc<Vec<T>>>;

/// The primary's claims on the buffer queue (held by its input gate).
pub(crate) struct Claims<T> {
    group: StdArc<TypedGroup<T>>,
    epoch: u64,
    positions: Vec<u64>,
    replay: VecDeque<Replay<T>>,
    stale_barriers: u64,
    /// Per input channel: batches below this position were claimed before the promotion.
    pub(super) skip_below: Vec<u64>,
    /// Checkpoints taken and not yet complete: where the queue restarts if they complete.
    pending: Vec<Restart>,
    record_bytes: u64,
    /// When the state was last handed to the queue (stateful operators).
    state_handed: std::time::Instant,
    /// The least time from one handoff to the next, from what the last one took.
    handoff_gap: std::time::Duration,
    /// The image's time spent applying at the last handoff (see `StateImage::applying_ns`).
    applied_ns: u64,
    /// The operator hands what changed (`state::changes`), not whole snapshots.
    pub(super) hands_changes: bool,
    /// The next hand-off must be everything (the queue asked for it).
    hand_all: bool,
    /// The input channels' watermarks to start from (a promoted primary's, from the state
    /// it restarts from); taken by the gate.
    pub(super) marks: Option<crate::time::WatermarkMerge>,
}

impl<T: Data> Claims<T> {
    pub(super) fn new(
        group: StdArc<TypedGroup<T>>,
        epoch: u64,
        replay: VecDeque<Replay<T>>,
        stale_barriers: u64,
    ) -> Self {
        Claims {
            group,
            epoch,
            positions: Vec::new(),
            replay,
            stale_barriers,
            skip_below: Vec::new(),
            pending: Vec::new(),
            record_bytes: std::mem::size_of::<T>().max(1) as u64,
            state_handed: std::time::Instant::now(),
            handoff_gap: std::time::Duration::ZERO,
            applied_ns: 0,
            hands_changes: false,
            hand_all: false,
            marks: None,
        }
    }

    /// The error of a primary the queue found fenced.
    fn fenced(&self, f: queue::Fenced) -> TaskError {
        TaskError::Fenced {
            uid: self.group.uid.clone(),
            subtask: self.group.subtask,
            epoch: f.epoch,
        }
    }

    /// The input channels' watermarks a promoted primary starts from, if the state it
    /// restarts from had them.
    pub(crate) fn take_marks(&mut self) -> Option<crate::time::WatermarkMerge> {
        self.marks.take()
    }

    /// Logs a watermark or an end of channel `c` before it is processed, so a replay takes
    /// it at the same place among the batches.
    pub(crate) fn log(&mut self, input: queue::Input) -> Result<(), TaskError> {
        self.group.positions(&mut self.positions);
        self.group
            .queue
            .log(self.epoch, input, &self.positions)
            .map_err(|f| self.fenced(f))
    }

    /// The replay's next input is a batch (a subtask holding records waits before it).
    pub(crate) fn replay_starts_with_batch(&self) -> bool {
        matches!(self.replay.front(), Some(queue::Item::Batch(..)))
    }

    /// The next batch, watermark or end to replay, if any.
    pub(crate) fn next_replay(&mut self) -> Option<Replay<T>> {
        self.replay.pop_front()
    }

    /// Batch `seq` of channel `c` was claimed before the promotion (the old primary processed
    /// it, or it is replayed): the backup's channel still held a copy.
    pub(crate) fn is_claimed(&self, c: usize, seq: u64) -> bool {
        self.skip_below.get(c).is_some_and(|&w| seq < w)
    }

    /// A barrier from before the promotion (its checkpoint was aborted).
    pub(crate) fn is_stale(&self, id: u64) -> bool {
        id <= self.stale_barriers
    }

    /// Claims batch `id` before processing it.
    pub(crate) fn claim(&mut self, id: BatchId, payload: &StdArc<Vec<T>>) -> Result<(), TaskError> {
        self.group.positions(&mut self.positions);
        let bytes = payload.len() as u64 * self.record_bytes;
        self.group
            .queue
            .claim(
                self.epoch,
                id,
                payload,
                payload.len() as u64,
                bytes,
                &self.positions,
            )
            .map(|_| ())
            .map_err(|f| self.fenced(f))
    }

    /// What to call while working long (see `BackupGroup::on_progress`).
    pub(crate) fn progress(&self) -> Option<super::group::Progress> {
        lock(&self.group.progress).clone()
    }

    /// The backed-up operator's uid.
    pub(crate) fn uid(&self) -> &str {
        &self.group.uid
    }

    /// Whether every record the primary emitted is in its output channels; if not, sends
    /// what its output buffers hold (without waiting for credit) and looks again.
    pub(crate) fn drained(&self, head: &mut BoxOutput<T>) -> bool {
        if self.group.all_sent() {
            return true;
        }
        head.flush();
        let waker = futures::task::noop_waker();
        let polled = head.poll_pending(&mut std::task::Context::from_waker(&waker));
        matches!(polled, std::task::Poll::Ready(Ok(()))) && self.group.all_sent()
    }

    /// The primary is idle: its last step's output is all out.
    pub(crate) fn settle(&mut self) {
        self.group.positions(&mut self.positions);
        self.group.queue.settle(self.epoch, &self.positions);
    }

    /// The primary is between two batches with nothing waiting for credit: if the policy
    /// says so, its operator's state goes to the queue (in memory), so a promotion replays
    /// only the batches after this point. The handoff's output positions must all be in
    /// the channels (what the operator still holds could be lost with it, and a replay from
    /// here would not emit it again): what its output buffers hold is sent first, and if
    /// that has to wait for credit, this returns `true` and the handoff waits too (the
    /// caller takes no input meanwhile).
    pub(crate) fn maybe_hand_state(
        &mut self,
        head: &mut BoxOutput<T>,
        marks: &crate::time::WatermarkMerge,
    ) -> Result<bool, TaskError> {
        let Some(every) = self.group.policy.state_interval else {
            return Ok(false);
        };
        if !self.group.queue.is_stateful() {
            return Ok(false);
        }
        let since = self.state_handed.elapsed();
        // The pacing's wait is capped by what the queue holds meanwhile: the batches since the
        // last handoff stay in it, and a queue over its bound degrades the backup.
        if since < every || (since < self.handoff_gap && !self.group.queue.over_half()) {
            return Ok(false);
        }
        if !self.drained(head) {
            return Ok(true);
        }
        let started = std::time::Instant::now();
        self.settle();
        let mut w = StateWriter::changes(&self.group.uid, self.hand_all);
        w.progress = self.progress();
        head.snapshot_state(&mut w)?;
        let state = w
            .entries
            .into_iter()
            .find(|e| e.uid == self.group.uid)
            .map(|e| match e.changes {
                Some(delta) => {
                    self.hands_changes = true;
                    StateCopy::Changes(delta)
                }
                None => StateCopy::Encoded(e.payload),
            });
        let taken = self
            .group
            .queue
            .checkpoint_complete(self.epoch, self.restart_here(0, state, marks))
            .map_err(|f| self.fenced(f))?;
        self.hand_all = matches!(taken, Handoff::NeedsFull);
        // Paced by what it cost (`BackupPolicy::state_share`), measured from the end of this
        // one.
        self.paced(started.elapsed());
        Ok(false)
    }

    /// A handoff took `took` of the primary's time: the next waits `cost * (1 - share) /
    /// share` (`BackupPolicy::state_share`), measured from now, where `cost` is `took` and
    /// what applying the handoffs took the backup's side since the last one (on a machine
    /// with few cores that time is taken from the job as well). A state that changes faster
    /// than it is handed is so handed less often, each handoff holding more writes of a key
    /// as one.
    fn paced(&mut self, took: std::time::Duration) {
        let share = self.group.policy.state_share;
        let applied = self.group.queue.image().applying_ns();
        let applying = std::time::Duration::from_nanos(applied.saturating_sub(self.applied_ns));
        self.applied_ns = applied;
        self.handoff_gap = (took + applying).mul_f64((1.0 - share) / share);
        tracing::debug!(
            uid = %self.group.uid,
            subtask = self.group.subtask,
            since_last = ?self.state_handed.elapsed(),
            ?took,
            ?applying,
            next_after = ?self.handoff_gap,
            "state handed to the backup"
        );
        self.state_handed = std::time::Instant::now();
    }

    /// Whether the operator hands its changes (and may at a checkpoint's barrier), and if
    /// so whether the next hand-off must be everything.
    pub(crate) fn hands_changes(&self) -> Option<bool> {
        self.hands_changes.then_some(self.hand_all)
    }

    /// The chain wrote its part of checkpoint `id` into `w`. An operator that hands its
    /// changes wrote them instead of its snapshot: they go to the backup (a hand-off at the
    /// barrier), and the checkpoint's payload is made from the backup's copy, held there,
    /// off the data path. Returns `false` if that cannot be (the queue refused the changes):
    /// the caller puts the operator's whole snapshot in their place.
    /// `took`: how long the operator took to write its part at the barrier (a handoff's
    /// encoding, paced as the others are).
    pub(crate) fn on_barrier(
        &mut self,
        id: u64,
        w: &mut StateWriter,
        marks: &crate::time::WatermarkMerge,
        took: std::time::Duration,
    ) -> bool {
        self.settle();
        let uid = &self.group.uid;
        let changed = w
            .entries
            .iter_mut()
            .find(|e| &e.uid == uid)
            .and_then(|e| Some((e.changes.take()?, e)));
        if let Some((delta, entry)) = changed {
            if !self.group.all_sent() {
                // A hand-off is a restart point at once, and its output positions must all
                // be in the channels (output waiting for credit could be lost with the
                // primary, and a replay from here would not emit it again). The checkpoint
                // takes the whole snapshot, and the next hand-off is everything (these
                // changes do not reach the backup's copy).
                self.hand_all = true;
                return false;
            }
            let restart = self.restart_here(0, Some(StateCopy::Changes(delta)), marks);
            return match self.group.queue.checkpoint_complete(self.epoch, restart) {
                Ok(Handoff::Taken(Some(at))) => {
                    let held = self.group.queue.image().hold(at);
                    entry.deferred =
                        Some(crate::checkpoint::DeferredPayload(Box::new(move || {
                            held.resolve()
                        })));
                    self.hand_all = false;
                    // The barrier's handoff counts in the pacing as the others do: the
                    // next one does not follow it at once.
                    self.paced(took);
                    true
                }
                Ok(Handoff::NeedsFull) => {
                    self.hand_all = true;
                    false
                }
                Ok(Handoff::Taken(None)) | Err(_) => false,
            };
        }
        if self.hands_changes {
            // Its hand-offs (every `state_interval`) are the backup's restart points: a
            // checkpoint's whole snapshot is not needed, nor could changes go on from it.
            return true;
        }
        let state = w
            .entries
            .iter()
            .find(|e| e.uid == self.group.uid)
            .map(|e| StateCopy::Encoded(e.payload.clone()));
        // Checkpoints that never complete (aborted, expired) must not pile up state copies.
        if self.pending.len() >= 2 {
            self.pending.remove(0);
        }
        let restart = self.restart_here(id, state, marks);
        self.pending.push(restart);
        true
    }

    /// The backup's restart point here, between two batches: checkpoint `checkpoint` (0: a
    /// handoff), with the operator's `state` and the inputs' watermarks `marks`.
    fn restart_here(
        &self,
        checkpoint: u64,
        state: Option<StateCopy>,
        marks: &crate::time::WatermarkMerge,
    ) -> Restart {
        Restart {
            checkpoint,
            step: self.group.queue.next_step(),
            positions: self.positions.clone().into(),
            state,
            marks: Some(marks.clone()),
        }
    }

    /// Checkpoint `id` completed: the backup restarts from it from now on.
    pub(crate) fn on_complete(&mut self, id: u64) {
        if let Some(k) = self.pending.iter().position(|r| r.checkpoint == id) {
            let restart = self.pending.swap_remove(k);
            self.pending.retain(|r| r.checkpoint > id);
            // A fenced primary's checkpoint is not the backup's restart point; it learns
            // it was fenced at its next claim.
            if let Err(f) = self.group.queue.checkpoint_complete(self.epoch, restart) {
                tracing::debug!(
                    uid = %self.group.uid,
                    subtask = self.group.subtask,
                    epoch = f.epoch,
                    "a fenced primary's completed checkpoint is not a restart point"
                );
            }
        }
    }
}
