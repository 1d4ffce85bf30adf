//! The backup group of one backed-up subtask: its dual input channels, its buffer queue, its
//! output fences, the live backup's inputs, and promotion (fence the old primary, plan the
//! replay, reopen the outputs, switch the dual channels). The controller sees it as a
//! [`BackupGroup`]; the typed side is [`TypedGroup`].

use super::*;

/// An output channel of a backed-up subtask, type-erased: its position, fencing, reopening.
pub(crate) trait OutputFence: Send + Sync {
    fn position(&self) -> u64;
    /// Records the sender emitted that are not in the channel yet.
    fn unsent(&self) -> u64;
    fn fence(&self) -> u64;
    /// A `Sender<T>` (erased) of the new epoch; see `OutputChannel::reopen`.
    fn reopen(&self, from: u64, have: u64) -> AnyBox;
}

impl<T: Data> OutputFence for OutputChannel<T> {
    fn position(&self) -> u64 {
        OutputChannel::position(self)
    }
    fn unsent(&self) -> u64 {
        OutputChannel::unsent(self)
    }
    fn fence(&self) -> u64 {
        OutputChannel::fence(self)
    }
    fn reopen(&self, from: u64, have: u64) -> AnyBox {
        Box::new(OutputChannel::reopen(self, from, have))
    }
}

// ---------------------------------------------------------------------------------------------
// The group

/// The erased face of a backed-up subtask, for the job's supervisor.
pub(crate) trait BackupGroup: Send + Sync {
    fn uid(&self) -> &str;
    fn subtask(&self) -> usize;
    fn policy(&self) -> &BackupPolicy;
    fn metrics(&self) -> BackupMetrics;
    /// Starts the backup actor on `arbiter` (a fresh one with new channels unless the group
    /// has channels no backup drains yet).
    fn start_backup(
        self: StdArc<Self>,
        arbiter: &actix_rt::ArbiterHandle,
        events: UnboundedSender<JobEvent>,
        attempt: u64,
        actor: usize,
    ) -> Recipient<BackupPing>;
    /// The backup of `generation` (or the current one) failed: stop feeding it (a new one is
    /// started next). False if that backup is already gone.
    fn drop_backup(&self, generation: Option<u64>) -> bool;
    /// Fences the primary, takes the backup's inputs and plans the replay.
    fn begin_promotion(&self) -> Result<Promotion, String>;
    /// The new primary's input gate over the backup's channels, replaying first; the dual
    /// channels now feed it.
    fn finish_promotion(
        self: StdArc<Self>,
        head: AnyBox,
        stale_barriers: u64,
    ) -> Box<dyn InputGate>;
    /// A promotion finished in `took` (metrics).
    fn promoted(&self, took: Duration);
    /// What the primary calls while it works for long between two batches (handing a large
    /// state over): the supervisor counts it as an answer, so busy is not taken for hung.
    fn on_progress(&self, progress: Progress);
}

/// See [`BackupGroup::on_progress`].
pub(crate) use crate::checkpoint::Progress;

/// What the job needs to build a promoted primary.
pub(crate) struct Promotion {
    pub(crate) epoch: u64,
    /// The operator state to restore (stateful operators).
    pub(crate) restore: Option<crate::state::changes::Restored>,
    /// Per outgoing edge: its senders, reopened for the new primary.
    pub(crate) senders: Vec<(usize, Vec<AnyBox>)>,
    /// Per outgoing edge: records sent on it before the replay's first batch.
    pub(crate) routed_before: Vec<(usize, u64)>,
    /// The waker the backup's channels wake (the new primary's data lane).
    pub(crate) waker: crate::sync::Arc<AtomicWaker>,
    /// Batches the old primary had processed that are processed again, and batches only the
    /// backup had.
    pub(crate) reprocessed: usize,
    pub(crate) replayed: usize,
    /// Records in the replayed batches.
    pub(crate) replayed_records: u64,
    /// Input records processed before the replay (injected faults count from there).
    pub(crate) records_before: u64,
}

/// The inputs of the live backup.
pub(super) struct BackupInputs<T> {
    pub(super) receivers: Vec<Receiver<T>>,
    pub(super) ended: Vec<bool>,
    pub(super) waker: crate::sync::Arc<AtomicWaker>,
    pub(super) generation: u64,
}

/// A promotion between its two halves: the backup's inputs, the replay, the new epoch, and
/// whether its operator restores the backup's image (and so hands changes).
type Promoting<T> = (
    BackupInputs<T>,
    queue::ReplayPlan<StdArc<Vec<T>>>,
    u64,
    bool,
);

/// Everything of one backed-up subtask, typed by its input record type.
pub(crate) struct TypedGroup<T> {
    pub(super) uid: String,
    pub(super) subtask: usize,
    pub(super) policy: BackupPolicy,
    pub(super) queue: BufferQueue<StdArc<Vec<T>>>,
    duals: Vec<StdArc<Dual<T>>>,
    /// Per outgoing edge (graph edge index): its output channels, in sender order.
    outputs: Vec<(usize, Vec<Box<dyn OutputFence>>)>,
    credit: crate::channel::Credit,
    pub(super) slot: Mutex<Option<BackupInputs<T>>>,
    promoting: Mutex<Option<Promoting<T>>>,
    /// The supervisor's "the primary is working" (see [`BackupGroup::on_progress`]).
    pub(super) progress: Mutex<Option<Progress>>,
    generation: AtomicU64,
    faults: crate::fault::FaultPlan,
    promotions: AtomicU64,
    last_reprocessed: AtomicU64,
    /// Promotions in a row whose primary failed during its replay.
    replay_failures: AtomicU64,
    replacements: AtomicU64,
    last_failover_us: AtomicU64,
    /// Builds a promoted primary's input gate (the `gate` module's, handed in by the plan).
    make_gate: GateFn<T>,
}

/// How a group builds the input gate of a promoted primary: over its receivers, feeding its
/// chain, with its claims.
pub(crate) type GateFn<T> =
    fn(Vec<Receiver<T>>, BoxOutput<T>, Option<Box<Claims<T>>>) -> Box<dyn InputGate>;

/// Promotions in a row that fail during their replay before the subtask falls back to
/// restart-all.
const MAX_REPLAY_FAILURES: u64 = 2;

/// Settings of a new group.
pub(crate) struct GroupSpec {
    pub(crate) uid: String,
    pub(crate) subtask: usize,
    pub(crate) policy: BackupPolicy,
    pub(crate) stateful: bool,
    pub(crate) credit: crate::channel::Credit,
    /// The state the subtask is deployed with (a restored checkpoint).
    pub(crate) initial: Option<Vec<u8>>,
    pub(crate) faults: crate::fault::FaultPlan,
}

impl<T: Data> TypedGroup<T> {
    /// A group over the dual channels into the subtask (`duals`, with the backup's receivers
    /// `backup_rx`, woken through `backup_waker`) and its output channels.
    pub(crate) fn new(
        spec: GroupSpec,
        duals: Vec<StdArc<Dual<T>>>,
        backup_rx: Vec<Receiver<T>>,
        backup_waker: crate::sync::Arc<AtomicWaker>,
        outputs: Vec<(usize, Vec<Box<dyn OutputFence>>)>,
        make_gate: GateFn<T>,
    ) -> StdArc<Self> {
        let n_out = outputs.iter().map(|(_, o)| o.len()).sum();
        let n_in = backup_rx.len();
        StdArc::new(TypedGroup {
            queue: BufferQueue::new(
                n_in,
                n_out,
                spec.stateful,
                spec.policy.max_memory,
                spec.initial,
            ),
            uid: spec.uid,
            subtask: spec.subtask,
            policy: spec.policy,
            duals,
            outputs,
            credit: spec.credit,
            slot: Mutex::new(Some(BackupInputs {
                receivers: backup_rx,
                ended: vec![false; n_in],
                waker: backup_waker,
                generation: 1,
            })),
            promoting: Mutex::new(None),
            progress: Mutex::new(None),
            generation: AtomicU64::new(1),
            faults: spec.faults,
            make_gate,
            promotions: AtomicU64::new(0),
            last_reprocessed: AtomicU64::new(0),
            replay_failures: AtomicU64::new(0),
            replacements: AtomicU64::new(0),
            last_failover_us: AtomicU64::new(u64::MAX),
        })
    }

    /// The claims of the subtask's first primary (epoch 0).
    pub(crate) fn claims(self: &StdArc<Self>) -> Claims<T> {
        Claims::new(self.clone(), 0, VecDeque::new(), 0)
    }

    /// Every record the primary emitted is in its output channels (none in its buffers or
    /// waiting for credit).
    pub(super) fn all_sent(&self) -> bool {
        self.outputs
            .iter()
            .all(|(_, fences)| fences.iter().all(|f| f.unsent() == 0))
    }

    pub(super) fn positions(&self, out: &mut Vec<u64>) {
        out.clear();
        for (_, fences) in &self.outputs {
            out.extend(fences.iter().map(|f| f.position()));
        }
    }
}

impl<T: Data> BackupGroup for TypedGroup<T> {
    fn uid(&self) -> &str {
        &self.uid
    }
    fn subtask(&self) -> usize {
        self.subtask
    }
    fn policy(&self) -> &BackupPolicy {
        &self.policy
    }
    fn metrics(&self) -> BackupMetrics {
        let QueueStats {
            entries,
            bytes,
            filtered,
            filtered_records,
            added,
            claimed,
            degraded,
        } = self.queue.stats();
        let lag = lock(&self.slot).as_ref().map_or(0, |i| {
            i.receivers.iter().map(|r| r.queued() as u64).sum::<u64>()
        });
        let last = self.last_failover_us.load(Ordering::Relaxed);
        BackupMetrics {
            uid: self.uid.clone(),
            subtask: self.subtask,
            queue_entries: entries,
            queue_bytes: bytes,
            filtered,
            filtered_records,
            added,
            claimed,
            promotions: self.promotions.load(Ordering::Relaxed),
            backup_replacements: self.replacements.load(Ordering::Relaxed),
            last_failover: (last != u64::MAX).then(|| Duration::from_micros(last)),
            last_reprocessed: self.last_reprocessed.load(Ordering::Relaxed),
            backup_lag: lag,
            degraded,
        }
    }

    fn start_backup(
        self: StdArc<Self>,
        arbiter: &actix_rt::ArbiterHandle,
        events: UnboundedSender<JobEvent>,
        attempt: u64,
        actor: usize,
    ) -> Recipient<BackupPing> {
        let generation = {
            let mut slot = lock(&self.slot);
            match slot.as_ref() {
                Some(inputs) => inputs.generation,
                None => {
                    let waker = crate::sync::Arc::new(AtomicWaker::new());
                    let receivers: Vec<Receiver<T>> = self
                        .duals
                        .iter()
                        .map(|d| d.attach_backup(self.credit, waker.clone()))
                        .collect();
                    let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
                    let n = receivers.len();
                    *slot = Some(BackupInputs {
                        receivers,
                        ended: vec![false; n],
                        waker,
                        generation,
                    });
                    generation
                }
            }
        };
        // Attached (its inputs are in the slot): faults waiting for it may fire (its own
        // too: counted before it runs).
        self.faults.backup_started(&self.uid, self.subtask);
        let fault = self
            .faults
            .for_instance(&format!("{}.backup", self.uid), self.subtask);
        let group = self.clone();
        let addr = BackupActor::start_in_arbiter(arbiter, move |_| BackupActor {
            group,
            generation,
            events,
            attempt,
            actor,
            fault,
            stopped: false,
        });
        addr.recipient()
    }

    fn drop_backup(&self, generation: Option<u64>) -> bool {
        let mut slot = lock(&self.slot);
        let current = slot.as_ref().map(|i| i.generation);
        if current.is_none() || generation.is_some_and(|g| current != Some(g)) {
            return false;
        }
        *slot = None;
        for d in &self.duals {
            d.detach_backup();
        }
        self.replacements.fetch_add(1, Ordering::Relaxed);
        true
    }

    fn begin_promotion(&self) -> Result<Promotion, String> {
        if self.queue.is_degraded() {
            return Err("its buffer queue is degraded (over max_memory)".into());
        }
        // A primary that fails again before it got through its replay is failing on the
        // same input (a record that always panics, a batch slower than the heartbeat
        // timeout): promoting again would loop. Restart-all, bounded by the restart
        // strategy, takes over.
        if self.queue.is_replaying() {
            let n = self.replay_failures.fetch_add(1, Ordering::AcqRel) + 1;
            if n >= MAX_REPLAY_FAILURES {
                return Err(format!(
                    "its promoted primaries failed {n} times in a row before finishing their \
                     replay (an input that always fails, or batches slower than the heartbeat \
                     timeout)"
                ));
            }
        } else {
            self.replay_failures.store(0, Ordering::Release);
        }
        let epoch = self.queue.fence();
        let delivered: Vec<u64> = self
            .outputs
            .iter()
            .flat_map(|(_, fences)| fences.iter().map(|f| f.fence()))
            .collect();
        let inputs = lock(&self.slot)
            .take()
            .ok_or_else(|| "it has no live backup".to_owned())?;
        let mut plan = self
            .queue
            .replay_plan(&delivered)
            .ok_or_else(|| "its buffer queue is degraded (over max_memory)".to_owned())?;
        tracing::debug!(uid = %self.uid, subtask = self.subtask, ?delivered, replay_from = ?plan.positions, batches = ?plan.batches().map(|(id, p)| (id.1, p.len())).collect::<Vec<_>>(), skip_below = ?plan.claimed_upto, "replay planned");
        let mut senders = Vec::with_capacity(self.outputs.len());
        let mut routed_before = Vec::with_capacity(self.outputs.len());
        let mut k = 0;
        for (edge, fences) in &self.outputs {
            let mut txs = Vec::with_capacity(fences.len());
            let mut routed = 0;
            for f in fences {
                txs.push(f.reopen(plan.positions[k], delivered[k]));
                routed += plan.positions[k];
                k += 1;
            }
            senders.push((*edge, txs));
            routed_before.push((*edge, routed));
        }
        self.last_reprocessed
            .store(plan.reprocessed as u64, Ordering::Relaxed);
        let restore = plan.restore.take().map(|(_, state)| state);
        let from_image = matches!(restore, Some(crate::state::changes::Restored::Image(_)));
        let promotion = Promotion {
            epoch,
            restore,
            senders,
            routed_before,
            waker: inputs.waker.clone(),
            reprocessed: plan.reprocessed,
            replayed: plan.batches().count(),
            replayed_records: plan.batches().map(|(_, p)| p.len() as u64).sum(),
            records_before: plan.records_before,
        };
        *lock(&self.promoting) = Some((inputs, plan, epoch, from_image));
        Ok(promotion)
    }

    fn finish_promotion(
        self: StdArc<Self>,
        head: AnyBox,
        stale_barriers: u64,
    ) -> Box<dyn InputGate> {
        let (inputs, plan, epoch, from_image) = lock(&self.promoting)
            .take()
            .expect("internal error: finish_promotion without begin_promotion");
        for d in &self.duals {
            d.promote();
        }
        let mut replay: VecDeque<Replay<T>> = plan.items.into_iter().collect();
        for (c, ended) in inputs.ended.iter().enumerate() {
            if *ended {
                replay.push_back(Replay::End(c as u32));
            }
        }
        let mut claims = Claims::new(self.clone(), epoch, replay, stale_barriers);
        if from_image {
            // Its operator hands changes (it restores its backup's image): from its first
            // barrier on, not only from its first hand-off, so that barrier does not take
            // the whole state (which the promoted operator has not read in yet).
            claims.hands_changes = true;
        }
        claims.skip_below = plan.claimed_upto;
        claims.marks = plan.marks;
        (self.make_gate)(
            inputs.receivers,
            crate::erased::unbox(head),
            Some(Box::new(claims)),
        )
    }

    fn on_progress(&self, progress: Progress) {
        *lock(&self.progress) = Some(progress);
    }

    fn promoted(&self, took: Duration) {
        self.promotions.fetch_add(1, Ordering::Relaxed);
        self.last_failover_us
            .store(took.as_micros() as u64, Ordering::Relaxed);
    }
}
