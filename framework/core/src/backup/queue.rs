//! The buffer queue of one backed-up subtask: the input batches its primary claimed (and the
//! order it processed them in), the batches its backup received first, and what a promoted
//! backup must replay.
//!
//! Ids are per input batch: `(channel, seq)`, where `seq` is the batch's position on that
//! input channel (dense, increasing; the primary's and the backup's copies of a channel have
//! the same positions, see `channel::Dual`). The queue works per batch, never per record.
//!
//! - **ADD / FILTER** (the paper's Algorithm 1): the backup [`offer`](BufferQueue::offer)s
//!   every batch it receives. If the primary has claimed it already, the offer is *filtered*
//!   (no second copy, no computation); otherwise the payload is *added* and waits for the
//!   primary's claim. The primary [`claim`](BufferQueue::claim)s each batch before processing
//!   it, in its processing order (its *steps*), inserting the payload if the backup has not.
//!   A channel's claim watermark is raised under the entry's lock, so a late offer of a batch
//!   that was claimed and already released is filtered, never re-added.
//! - **Release**: a step's entry is dropped once everything it emitted is in the downstream
//!   subtasks' input channels (they survive the primary) and, for a stateful operator, once
//!   a completed checkpoint covers it.
//! - **Fencing**: [`fence`](BufferQueue::fence) raises the epoch; a claim of an older epoch (a
//!   primary that was declared dead but still runs) fails, so it can never add steps.
//! - **Bound**: above `max_bytes` the queue turns *degraded*: it drops its payloads and keeps
//!   none (a failure then falls back to restart-all, which replays from the sources, so
//!   nothing a replay needs is lost) and says so in its metrics.
//!
//! - **Watermarks and ends** are steps too ([`log`](BufferQueue::log)): a window or timer
//!   operator's output depends on where the watermarks fell between its batches, so the
//!   replay puts them back in the same places. The watermarks only the backup received are
//!   kept beside its batches ([`offer_mark`](BufferQueue::offer_mark)), so a promotion never
//!   loses one (an idle input says so once; lost, it would stall the windows for good).
//!
//! This module owns the data structure only; who calls it when is `backup`'s business.

use std::collections::VecDeque;

use super::image::StateImage;
use crate::state::changes::{KeyedDelta, Restored};
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::{lock, ConcurrentMap, Mutex};
use crate::time::{Watermark, WatermarkMerge};

/// An input batch: (input channel, position of the batch on that channel).
pub(crate) type BatchId = (u32, u64);

/// What one step of the primary took from its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Input {
    Batch(BatchId),
    /// A watermark (or idleness) of input channel `.0`.
    Mark(u32, Watermark),
    /// The end of input channel `.0`.
    End(u32),
    /// The processing time the primary's operator was told (its timers on the wall clock
    /// fired up to it, and it is the time of the batches after it).
    Time(crate::time::EventTime),
}

/// One input of a replay, in the order the replay processes them.
#[derive(Debug)]
pub(crate) enum Item<P> {
    Batch(BatchId, P),
    Mark(u32, Watermark),
    End(u32),
    Time(crate::time::EventTime),
}

struct Entry<P> {
    payload: P,
    bytes: u64,
    claimed: bool,
}

/// One processing step of the primary: the batch it processed, and the positions of its
/// output channels after the step's output (unknown until the next step begins).
#[derive(Debug)]
struct Step {
    input: Input,
    /// Records in the batch (0 for a watermark or an end).
    records: u64,
    after: Option<Box<[u64]>>,
}

#[derive(Debug)]
struct StepLog {
    /// Step number of `steps[0]`.
    first: u64,
    steps: VecDeque<Step>,
    /// Output positions before `steps[0]`.
    base: Box<[u64]>,
    /// Input records of the steps before `steps[0]`.
    base_records: u64,
    /// The last replay plan's batches the current primary has not claimed again yet, in
    /// order (a failure during a replay replays them again, in the same order).
    replaying: VecDeque<Input>,
    /// The current primary's epoch.
    epoch: u64,
}

/// The state a promoted backup starts from (stateful operators): the last completed
/// checkpoint of the primary, held in memory.
#[derive(Debug, Clone)]
pub(crate) struct Restart {
    /// Checkpoint id (0: the state the subtask was deployed with).
    pub(crate) checkpoint: u64,
    /// The first step after the checkpoint.
    pub(crate) step: u64,
    /// Output positions at the checkpoint.
    pub(crate) positions: Box<[u64]>,
    /// The operator's state, if it has one.
    pub(crate) state: Option<StateCopy>,
    /// The input channels' watermarks at that point (a replay merges the channels'
    /// watermarks from there, as the primary did).
    pub(crate) marks: Option<WatermarkMerge>,
}

/// How the primary's state reaches the queue, and how the queue holds it.
#[derive(Debug, Clone)]
pub(crate) enum StateCopy {
    /// A snapshot, whole (a checkpoint's, or a hand-off from an operator that does not track
    /// its changes).
    Encoded(Vec<u8>),
    /// What changed since the primary's last hand-off (or everything, if `full`): handed in,
    /// applied to the queue's image.
    Changes(KeyedDelta),
    /// Held: the queue's image, after its pending changes.
    InImage,
}

/// Whether a hand-off was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handoff {
    /// Taken (or older than what the queue holds, and not needed); changes taken into the
    /// image end at the point given.
    Taken(Option<u64>),
    /// Changes with no image to apply them to (the queue's state is a whole snapshot, or the
    /// changes came out of order): the restart point stays; the primary must hand everything.
    NeedsFull,
}

/// What a promoted backup replays, in order, before it reads its input channels.
#[derive(Debug)]
pub(crate) struct ReplayPlan<P> {
    /// The state to restore (stateful operators), and its checkpoint.
    pub(crate) restore: Option<(u64, Restored)>,
    /// The input channels' watermarks at the restart point (stateful operators).
    pub(crate) marks: Option<WatermarkMerge>,
    /// Output positions before the first replayed batch: the replay's output starts there.
    pub(crate) positions: Box<[u64]>,
    /// The inputs to process again: the primary's steps from the restart point, then the
    /// batches (and watermarks) only the backup had (per channel in position order).
    pub(crate) items: Vec<Item<P>>,
    /// How many of `items`' batches the primary had processed (claimed) before.
    pub(crate) reprocessed: usize,
    /// Input records the primaries processed before the first replayed batch.
    pub(crate) records_before: u64,
    /// Per input channel: batches below this position were claimed or are in `items`; a
    /// copy still waiting in the backup's channel must be skipped.
    pub(crate) claimed_upto: Vec<u64>,
}

impl<P> ReplayPlan<P> {
    /// The batches of the replay, in order.
    pub(crate) fn batches(&self) -> impl Iterator<Item = (&BatchId, &P)> {
        self.items.iter().filter_map(|i| match i {
            Item::Batch(id, p) => Some((id, p)),
            _ => None,
        })
    }
}

/// A claim refused because the claimer was fenced (a newer primary exists).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fenced {
    pub(crate) epoch: u64,
}

/// What became of an offered batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offer {
    /// Kept: the primary has not claimed it yet.
    Added,
    /// The primary claimed it already: not kept again.
    Filtered,
    /// The queue is degraded and keeps nothing.
    Dropped,
}

/// Counters for the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct QueueStats {
    pub(crate) entries: u64,
    pub(crate) bytes: u64,
    pub(crate) filtered: u64,
    pub(crate) filtered_records: u64,
    pub(crate) added: u64,
    pub(crate) claimed: u64,
    pub(crate) degraded: bool,
}

/// See the module doc.
pub(crate) struct BufferQueue<P> {
    entries: ConcurrentMap<BatchId, Entry<P>>,
    /// Per input channel: every batch below this position was claimed.
    claimed_upto: Box<[AtomicU64]>,
    /// Watermarks the backup received (channel, position of the next batch, mark) that the
    /// primary may not have taken yet: those at or above their channel's claim position.
    marks: Mutex<Vec<(u32, u64, Watermark)>>,
    log: Mutex<StepLog>,
    restart: Mutex<Restart>,
    /// The primary's state, built from its changes (when it hands changes): the restart
    /// point's state when it holds [`StateCopy::InImage`].
    image: std::sync::Arc<StateImage>,
    stateful: bool,
    max_bytes: u64,
    bytes: AtomicU64,
    len: AtomicU64,
    filtered: AtomicU64,
    filtered_records: AtomicU64,
    added: AtomicU64,
    claimed: AtomicU64,
    degraded: AtomicBool,
}

impl<P: Clone> BufferQueue<P> {
    /// A queue for a subtask with `inputs` input channels and `outputs` output channels.
    /// `initial` is the state the subtask was deployed with (stateful operators).
    pub(crate) fn new(
        inputs: usize,
        outputs: usize,
        stateful: bool,
        max_bytes: u64,
        initial: Option<Vec<u8>>,
    ) -> Self {
        let initial = initial.map(StateCopy::Encoded);
        let zeros: Box<[u64]> = vec![0; outputs].into();
        BufferQueue {
            entries: ConcurrentMap::new(),
            claimed_upto: (0..inputs).map(|_| AtomicU64::new(0)).collect(),
            marks: Mutex::new(Vec::new()),
            log: Mutex::new(StepLog {
                first: 0,
                steps: VecDeque::new(),
                base: zeros.clone(),
                base_records: 0,
                replaying: VecDeque::new(),
                epoch: 0,
            }),
            restart: Mutex::new(Restart {
                checkpoint: 0,
                step: 0,
                positions: zeros,
                state: initial,
                marks: None,
            }),
            image: std::sync::Arc::new(StateImage::new()),
            stateful,
            max_bytes,
            bytes: AtomicU64::new(0),
            len: AtomicU64::new(0),
            filtered: AtomicU64::new(0),
            filtered_records: AtomicU64::new(0),
            added: AtomicU64::new(0),
            claimed: AtomicU64::new(0),
            degraded: AtomicBool::new(false),
        }
    }

    /// The backup received batch `id` (ADD or FILTER).
    pub(crate) fn offer(&self, id: BatchId, payload: P, records: u64, bytes: u64) -> Offer {
        if self.degraded.load(Ordering::Acquire) {
            return Offer::Dropped;
        }
        let watermark = &self.claimed_upto[id.0 as usize];
        let mut total = 0;
        let offer = self.entries.upsert(
            id,
            |_| Offer::Filtered,
            || {
                if id.1 < watermark.load(Ordering::Acquire) {
                    (Offer::Filtered, None)
                } else {
                    let entry = Entry {
                        payload,
                        bytes,
                        claimed: false,
                    };
                    // Counted before the entry is visible: its removal (by the primary's
                    // release, on another thread) cannot come first and wrap the count.
                    total = self.account(bytes);
                    (Offer::Added, Some(entry))
                }
            },
        );
        match offer {
            Offer::Added => {
                self.added.fetch_add(1, Ordering::Relaxed);
                self.degrade_over(total);
            }
            Offer::Filtered => {
                self.filtered.fetch_add(1, Ordering::Relaxed);
                self.filtered_records.fetch_add(records, Ordering::Relaxed);
            }
            Offer::Dropped => {}
        }
        offer
    }

    /// The backup received watermark `mark` on channel `c`, before the channel's batch `at`.
    /// Kept until the primary claims that batch (it took the mark before it).
    pub(crate) fn offer_mark(&self, c: u32, at: u64, mark: Watermark) {
        if self.degraded.load(Ordering::Acquire) {
            return;
        }
        let mut marks = lock(&self.marks);
        marks.retain(|(c, at, _)| *at >= self.claimed_upto[*c as usize].load(Ordering::Acquire));
        marks.push((c, at, mark));
    }

    /// The primary of `epoch` takes a watermark or an end (`input`), after the output of its
    /// previous step reached `positions`.
    pub(crate) fn log(&self, epoch: u64, input: Input, positions: &[u64]) -> Result<(), Fenced> {
        let mut log = lock(&self.log);
        if log.epoch != epoch {
            return Err(Fenced { epoch: log.epoch });
        }
        if log.replaying.front() == Some(&input) {
            log.replaying.pop_front();
        }
        if self.degraded.load(Ordering::Acquire) {
            return Ok(());
        }
        if let Some(last) = log.steps.back_mut() {
            if last.after.is_none() {
                last.after = Some(positions.into());
            }
        }
        log.steps.push_back(Step {
            input,
            records: 0,
            after: None,
        });
        self.release_locked(&mut log);
        Ok(())
    }

    /// The primary of `epoch` is about to process batch `id`; `positions` are its output
    /// channels' positions now (everything the previous step emitted is in them). Returns the
    /// step number, or [`Fenced`] if a newer primary exists.
    pub(crate) fn claim(
        &self,
        epoch: u64,
        id: BatchId,
        payload: &P,
        records: u64,
        bytes: u64,
        positions: &[u64],
    ) -> Result<u64, Fenced> {
        let mut log = lock(&self.log);
        if log.epoch != epoch {
            return Err(Fenced { epoch: log.epoch });
        }
        if log.replaying.front() == Some(&Input::Batch(id)) {
            log.replaying.pop_front();
        }
        if self.degraded.load(Ordering::Acquire) {
            // Nothing can be promoted any more: keep no log either.
            log.steps.clear();
            log.replaying.clear();
            self.claimed_upto[id.0 as usize].fetch_max(id.1 + 1, Ordering::AcqRel);
            self.claimed.fetch_add(1, Ordering::Relaxed);
            return Ok(log.first);
        }
        if let Some(last) = log.steps.back_mut() {
            if last.after.is_none() {
                last.after = Some(positions.into());
            }
        }
        let step = log.first + log.steps.len() as u64;
        log.steps.push_back(Step {
            input: Input::Batch(id),
            records,
            after: None,
        });
        let degraded = self.degraded.load(Ordering::Acquire);
        let watermark = &self.claimed_upto[id.0 as usize];
        let mut total = 0;
        self.entries.upsert(
            id,
            |e| {
                e.claimed = true;
                watermark.fetch_max(id.1 + 1, Ordering::AcqRel);
            },
            || {
                watermark.fetch_max(id.1 + 1, Ordering::AcqRel);
                if degraded {
                    return ((), None);
                }
                let entry = Entry {
                    payload: payload.clone(),
                    bytes,
                    claimed: true,
                };
                total = self.account(bytes);
                ((), Some(entry))
            },
        );
        self.claimed.fetch_add(1, Ordering::Relaxed);
        self.degrade_over(total);
        self.release_locked(&mut log);
        Ok(step)
    }

    /// The primary's output positions after its latest step (it is idle, or at a barrier),
    /// so that step can be released without waiting for the next one.
    pub(crate) fn settle(&self, epoch: u64, positions: &[u64]) {
        let mut log = lock(&self.log);
        if log.epoch != epoch {
            return;
        }
        if let Some(last) = log.steps.back_mut() {
            if last.after.is_none() {
                last.after = Some(positions.into());
            }
        }
        self.release_locked(&mut log);
    }

    /// The step the next claim will get (a checkpoint taken now covers every step before it).
    pub(crate) fn next_step(&self) -> u64 {
        let log = lock(&self.log);
        log.first + log.steps.len() as u64
    }

    /// The primary's state at step `restart.step` (a completed checkpoint, or a handoff
    /// between two batches): a promoted backup restarts from it (if it is newer than what
    /// the queue holds), and the steps before it can go.
    ///
    /// Only from a primary of the current `epoch`: a fenced primary (a zombie woken after its
    /// replacement, or one finishing its last batch) holds state that includes batches the
    /// new primary replays, and its output positions count output that never got through.
    /// Taken as the restart point, a later promotion would count those batches twice.
    ///
    /// Changes ([`StateCopy::Changes`]) are appended for the backup to apply; they need the
    /// image the earlier ones built ([`Handoff::NeedsFull`] otherwise).
    pub(crate) fn checkpoint_complete(
        &self,
        epoch: u64,
        mut restart: Restart,
    ) -> Result<Handoff, Fenced> {
        let mut log = lock(&self.log);
        if log.epoch != epoch {
            return Err(Fenced { epoch: log.epoch });
        }
        let mut handoff = Handoff::Taken(None);
        {
            let mut r = lock(&self.restart);
            match restart.state.take() {
                Some(StateCopy::Changes(delta)) => {
                    if restart.step < r.step {
                        // Applying them would leave the image behind the restart point: the
                        // queue keeps what it has until a whole hand-off.
                        return Ok(Handoff::NeedsFull);
                    }
                    if !delta.full {
                        // Changes since the primary's restore point; what the queue holds is
                        // that state or a later one (its restart point only moves forward),
                        // and changes since an older point apply to a newer state as well.
                        match r.state.take() {
                            Some(StateCopy::InImage) => {}
                            Some(StateCopy::Encoded(payload)) => {
                                self.image.push_base(payload, delta.own.is_some())
                            }
                            None => {
                                self.image.push(KeyedDelta::new(true));
                            }
                            held @ Some(StateCopy::Changes(_)) => {
                                r.state = held; // never held: changes are applied
                                return Ok(Handoff::NeedsFull);
                            }
                        }
                    }
                    let at = self.image.push(delta);
                    restart.state = Some(StateCopy::InImage);
                    handoff = Handoff::Taken(Some(at));
                }
                _ if restart.step < r.step => return Ok(Handoff::Taken(None)),
                whole => restart.state = whole,
            }
            *r = restart;
        }
        self.release_locked(&mut log);
        Ok(handoff)
    }

    /// The primary's state as the backup holds it (the backup actor applies its changes
    /// between batches; a checkpoint holds it at its barrier).
    pub(crate) fn image(&self) -> &std::sync::Arc<StateImage> {
        &self.image
    }

    /// The restart point's state (`r`: the restart point, locked): a snapshot payload, or
    /// the image the backup keeps (a clone sharing its key groups: no copy of the state).
    fn restart_payload(&self, r: &Restart) -> Option<Result<Restored, ()>> {
        match r.state.as_ref()? {
            StateCopy::Encoded(bytes) => Some(Ok(Restored::Payload(bytes.clone()))),
            StateCopy::InImage => Some(self.image.snapshot().map(Restored::Image).map_err(|e| {
                tracing::error!(error = %e, "the backup's copy of the state cannot be restored");
            })),
            StateCopy::Changes(_) => Some(Err(())),
        }
    }

    fn release_locked(&self, log: &mut StepLog) {
        let limit = if self.stateful {
            lock(&self.restart).step
        } else {
            u64::MAX
        };
        while log.first < limit {
            let Some(front) = log.steps.front() else {
                break;
            };
            let Some(after) = &front.after else { break };
            let after = after.clone();
            let (input, records) = (front.input, front.records);
            log.steps.pop_front();
            log.first += 1;
            log.base = after;
            log.base_records += records;
            if let Input::Batch(id) = input {
                if let Some(e) = self.entries.remove(&id) {
                    self.unaccount(e.bytes);
                }
            }
        }
    }

    /// The current primary is still replaying a promotion's plan.
    pub(crate) fn is_replaying(&self) -> bool {
        !lock(&self.log).replaying.is_empty()
    }

    /// Fences every primary of the current epoch: their claims fail from now on. Returns the
    /// new epoch.
    pub(crate) fn fence(&self) -> u64 {
        let mut log = lock(&self.log);
        log.epoch += 1;
        log.epoch
    }

    /// What a promoted backup replays, given how far each output channel got (`delivered`:
    /// its position when the old primary was fenced). Call after [`fence`](Self::fence) and
    /// once the backup stopped offering. The replayed steps are taken off the log: the new
    /// primary claims them again as it replays.
    pub(crate) fn replay_plan(&self, delivered: &[u64]) -> Option<ReplayPlan<P>> {
        if self.degraded.load(Ordering::Acquire) {
            return None;
        }
        let mut log = lock(&self.log);
        let (start, positions, restore, marks) = if self.stateful {
            let r = lock(&self.restart);
            if r.step < log.first {
                return None; // cannot happen: steps after the checkpoint are never released
            }
            let restore = match self.restart_payload(&r) {
                None => None,
                Some(Ok(state)) => Some((r.checkpoint, state)),
                // The image could not be built (a snapshot it cannot read): restart-all.
                Some(Err(())) => return None,
            };
            (r.step, r.positions.clone(), restore, r.marks.clone())
        } else {
            // The first step whose output did not all get through.
            let mut start = log.first + log.steps.len() as u64;
            let mut positions = log.base.clone();
            let mut before = log.base.clone();
            for (k, s) in log.steps.iter().enumerate() {
                let through = s
                    .after
                    .as_ref()
                    .is_some_and(|after| after.iter().zip(delivered).all(|(a, d)| a <= d));
                if !through {
                    start = log.first + k as u64;
                    positions = before;
                    break;
                }
                if let Some(after) = &s.after {
                    before = after.clone();
                    positions = after.clone();
                }
            }
            (start, positions, None, None)
        };
        let skip = (start - log.first) as usize;
        let records_before =
            log.base_records + log.steps.iter().take(skip).map(|s| s.records).sum::<u64>();
        // The primary's steps from the restart point, then what an earlier replay had not
        // processed again yet (in its order), then what only the backup had.
        let mut items = Vec::new();
        for s in log.steps.iter().skip(skip) {
            items.push(self.item(s.input)?);
        }
        let reprocessed = items
            .iter()
            .filter(|i| matches!(i, Item::Batch(..)))
            .count();
        for input in &log.replaying {
            items.push(self.item(*input)?);
        }
        log.steps.truncate(skip);
        let listed: std::collections::HashSet<BatchId> = items
            .iter()
            .filter_map(|i| match i {
                Item::Batch(id, _) => Some(*id),
                _ => None,
            })
            .collect();
        // Per channel in position order, a watermark before the batch it preceded. A
        // watermark the primary took already is taken again: it moves nothing.
        // (position, channel, watermark first, offer order), item.
        type Ordered<P> = ((u64, u32, u8, usize), Item<P>);
        let mut unclaimed: Vec<Ordered<P>> = Vec::new();
        self.entries.for_each(|id, e| {
            if !e.claimed && !listed.contains(id) {
                unclaimed.push(((id.1, id.0, 1, 0), Item::Batch(*id, e.payload.clone())));
            }
        });
        for (k, (c, at, mark)) in lock(&self.marks).iter().enumerate() {
            if *at >= self.claimed_upto[*c as usize].load(Ordering::Acquire) {
                unclaimed.push(((*at, *c, 0, k), Item::Mark(*c, *mark)));
            }
        }
        unclaimed.sort_by_key(|(order, _)| *order);
        items.extend(unclaimed.into_iter().map(|(_, i)| i));
        log.replaying = items
            .iter()
            .map(|i| match i {
                Item::Batch(id, _) => Input::Batch(*id),
                Item::Mark(c, w) => Input::Mark(*c, *w),
                Item::End(c) => Input::End(*c),
                Item::Time(t) => Input::Time(*t),
            })
            .collect();
        drop(log);
        // What the promoted primary skips in its channels: what was claimed, and what the
        // replay holds. A backup attached after another one failed starts at its primary's
        // next batch, so its channel may hold again batches the failed one had offered
        // (kept here unclaimed, so replayed): read again, they would count twice. (A
        // channel's claimed and offered positions are one run from 0: the primary claims
        // in order, and each backup offers in order from at most the claim position.)
        let mut claimed_upto: Vec<u64> = self
            .claimed_upto
            .iter()
            .map(|w| w.load(Ordering::Acquire))
            .collect();
        for item in &items {
            if let Item::Batch(id, _) = item {
                if let Some(w) = claimed_upto.get_mut(id.0 as usize) {
                    *w = (*w).max(id.1 + 1);
                }
            }
        }
        Some(ReplayPlan {
            restore,
            marks,
            positions,
            items,
            reprocessed,
            records_before,
            claimed_upto,
        })
    }

    /// A logged input as a replay item (`None`: a batch's payload is gone, degraded).
    fn item(&self, input: Input) -> Option<Item<P>> {
        Some(match input {
            Input::Batch(id) => Item::Batch(id, self.payload(id)?),
            Input::Mark(c, w) => Item::Mark(c, w),
            Input::End(c) => Item::End(c),
            Input::Time(t) => Item::Time(t),
        })
    }

    fn payload(&self, id: BatchId) -> Option<P> {
        let mut out = None;
        self.entries
            .upsert(id, |e| out = Some(e.payload.clone()), || ((), None));
        out
    }

    /// Counts an entry about to be inserted (called while its map shard is held, so before
    /// anyone can remove it); returns the queue's bytes with it, for [`Self::degrade_over`]
    /// once the shard is let go.
    fn account(&self, bytes: u64) -> u64 {
        self.len.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes
    }

    /// Degrades the queue if `total` bytes are over its bound.
    fn degrade_over(&self, total: u64) {
        if total > self.max_bytes && !self.degraded.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                bytes = total,
                max_memory = self.max_bytes,
                "buffer queue full: backup degraded, a failure of this subtask restarts the job"
            );
            self.entries.retain(|_, _| false);
            self.len.store(0, Ordering::Relaxed);
            self.bytes.store(0, Ordering::Relaxed);
        }
    }

    /// Uncounts a removed entry. Saturating: a removal racing the reset of a degrading queue
    /// must not wrap the counts (a wrapped count would read as a full queue).
    fn unaccount(&self, bytes: u64) {
        let sub = |by: u64| move |v: u64| Some(v.saturating_sub(by));
        let _ = self
            .len
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, sub(1));
        let _ = self
            .bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, sub(bytes));
    }

    pub(crate) fn is_stateful(&self) -> bool {
        self.stateful
    }

    /// Whether the queue holds over half its bound (a stateful primary then hands its state
    /// without waiting for its pacing, so the batches before it can go).
    pub(crate) fn over_half(&self) -> bool {
        self.bytes.load(Ordering::Relaxed) > self.max_bytes / 2
    }

    pub(crate) fn is_degraded(&self) -> bool {
        self.degraded.load(Ordering::Acquire)
    }

    pub(crate) fn stats(&self) -> QueueStats {
        QueueStats {
            entries: self.len.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            filtered: self.filtered.load(Ordering::Relaxed),
            filtered_records: self.filtered_records.load(Ordering::Relaxed),
            added: self.added.load(Ordering::Relaxed),
            claimed: self.claimed.load(Ordering::Relaxed),
            degraded: self.degraded.load(Ordering::Acquire),
        }
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;

    fn q(stateful: bool) -> BufferQueue<u64> {
        BufferQueue::new(2, 1, stateful, 1 << 20, None)
    }

    #[test]
    fn offer_after_claim_is_filtered_and_before_claim_is_added() {
        let q = q(false);
        assert_eq!(q.claim(0, (0, 0), &10, 1, 8, &[0]), Ok(0));
        assert_eq!(q.offer((0, 0), 10, 1, 8), Offer::Filtered);
        assert_eq!(q.offer((0, 1), 11, 1, 8), Offer::Added);
        assert_eq!(q.claim(0, (0, 1), &11, 1, 8, &[1]), Ok(1));
        // Step 0 is released (its output got through); a late offer is still filtered.
        assert_eq!(q.stats().entries, 1);
        assert_eq!(q.offer((0, 0), 10, 1, 8), Offer::Filtered);
        assert_eq!(q.stats().entries, 1);
    }

    #[test]
    fn stateless_replay_starts_at_the_first_step_not_through() {
        let q = q(false);
        q.claim(0, (0, 0), &10, 1, 8, &[0]).unwrap();
        q.claim(0, (1, 0), &20, 1, 8, &[2]).unwrap();
        q.claim(0, (0, 1), &11, 1, 8, &[3]).unwrap();
        q.offer((1, 1), 21, 1, 8);
        q.fence();
        // Step 2 emitted from position 3; the downstream has 3 records: replay step 2, then
        // the batch only the backup had.
        let plan = q.replay_plan(&[3]).unwrap();
        let ids: Vec<BatchId> = plan.batches().map(|(id, _)| *id).collect();
        assert_eq!(ids, vec![(0, 1), (1, 1)]);
        assert_eq!(&*plan.positions, &[3]);
        assert_eq!(plan.reprocessed, 1);
        assert!(plan.restore.is_none());
    }

    #[test]
    fn stateful_replay_starts_at_the_checkpoint() {
        let q = q(true);
        q.claim(0, (0, 0), &10, 1, 8, &[0]).unwrap();
        q.claim(0, (0, 1), &11, 1, 8, &[1]).unwrap();
        let step = q.next_step();
        q.settle(0, &[2]);
        q.checkpoint_complete(0, restart(1, step, 2, 7)).unwrap();
        assert_eq!(
            q.stats().entries,
            0,
            "steps before the checkpoint are released"
        );
        q.claim(0, (0, 2), &12, 1, 8, &[2]).unwrap();
        q.claim(0, (0, 3), &13, 1, 8, &[3]).unwrap();
        q.settle(0, &[4]);
        assert_eq!(q.stats().entries, 2, "steps after the checkpoint are kept");
        q.fence();
        let plan = q.replay_plan(&[4]).unwrap();
        assert_eq!(plan.restore, Some((1, Restored::Payload(vec![7]))));
        assert_eq!(&*plan.positions, &[2]);
        let ids: Vec<BatchId> = plan.batches().map(|(id, _)| *id).collect();
        assert_eq!(ids, vec![(0, 2), (0, 3)]);
    }

    #[test]
    fn a_failure_during_a_replay_replays_the_rest_in_order() {
        let q = q(true);
        for (k, id) in [(0, 0), (0, 1), (1, 0), (0, 2)].into_iter().enumerate() {
            q.claim(0, id, &(k as u64), 1, 8, &[k as u64]).unwrap();
        }
        q.offer((1, 1), 9, 1, 8);
        q.fence();
        let first = q.replay_plan(&[3]).unwrap();
        let ids = |p: &ReplayPlan<u64>| p.batches().map(|(id, _)| *id).collect::<Vec<_>>();
        assert_eq!(ids(&first), vec![(0, 0), (0, 1), (1, 0), (0, 2), (1, 1)]);
        assert!(q.is_replaying());
        // The promoted primary processes two of them again, then fails too.
        q.claim(1, (0, 0), &0, 1, 8, &[0]).unwrap();
        q.claim(1, (0, 1), &1, 1, 8, &[1]).unwrap();
        q.fence();
        let second = q.replay_plan(&[2]).unwrap();
        assert_eq!(ids(&second), ids(&first), "nothing dropped, same order");
        assert_eq!(second.reprocessed, 2);
        // The third primary gets through them all.
        for (k, (id, _)) in second.batches().enumerate() {
            q.claim(2, *id, &0, 1, 8, &[k as u64]).unwrap();
        }
        assert!(!q.is_replaying());
    }

    #[test]
    fn a_replay_takes_the_watermarks_where_the_primary_took_them() {
        use crate::time::Watermark::{At, Idle};
        let q = q(true);
        q.claim(0, (0, 0), &10, 1, 8, &[0]).unwrap();
        q.log(0, Input::Mark(0, At(5)), &[1]).unwrap();
        // The processing time the primary was told: replayed in its place too.
        q.log(0, Input::Time(77), &[1]).unwrap();
        q.claim(0, (1, 0), &20, 1, 8, &[1]).unwrap();
        q.log(0, Input::Mark(1, Idle), &[2]).unwrap();
        q.log(0, Input::End(1), &[2]).unwrap();
        // Only the backup saw these: a watermark of channel 0 before its batch 2, which
        // comes before batch 1 (also only the backup's) in position order... per channel.
        q.offer((0, 1), 11, 1, 8);
        q.offer_mark(0, 2, At(9));
        q.offer((0, 2), 12, 1, 8);
        q.fence();
        let plan = q.replay_plan(&[2]).unwrap();
        let order: Vec<String> = plan
            .items
            .iter()
            .map(|i| match i {
                Item::Batch(id, _) => format!("b{}.{}", id.0, id.1),
                Item::Mark(c, At(t)) => format!("m{c}@{t}"),
                Item::Mark(c, Idle) => format!("m{c}idle"),
                Item::End(c) => format!("e{c}"),
                Item::Time(t) => format!("t{t}"),
            })
            .collect();
        assert_eq!(
            order,
            ["b0.0", "m0@5", "t77", "b1.0", "m1idle", "e1", "b0.1", "m0@9", "b0.2"],
            "the primary's steps in its order, then the backup's per channel"
        );
        assert_eq!(plan.reprocessed, 2);
        // The new primary takes them again, in order: the replay is done.
        let epoch = 1;
        q.claim(epoch, (0, 0), &10, 1, 8, &[0]).unwrap();
        q.log(epoch, Input::Mark(0, At(5)), &[1]).unwrap();
        q.log(epoch, Input::Time(77), &[1]).unwrap();
        q.claim(epoch, (1, 0), &20, 1, 8, &[1]).unwrap();
        q.log(epoch, Input::Mark(1, Idle), &[2]).unwrap();
        q.log(epoch, Input::End(1), &[2]).unwrap();
        q.claim(epoch, (0, 1), &11, 1, 8, &[2]).unwrap();
        assert!(q.is_replaying());
        q.log(epoch, Input::Mark(0, At(9)), &[3]).unwrap();
        q.claim(epoch, (0, 2), &12, 1, 8, &[3]).unwrap();
        assert!(!q.is_replaying());
    }

    #[test]
    fn a_watermark_before_a_claimed_batch_is_not_replayed_from_the_backup() {
        use crate::time::Watermark::At;
        let q = q(false);
        q.offer_mark(0, 0, At(1));
        q.claim(0, (0, 0), &10, 1, 8, &[0]).unwrap();
        // The primary took the watermark before batch 0; the next offer drops it.
        q.offer_mark(0, 1, At(2));
        assert_eq!(lock(&q.marks).len(), 1);
        q.fence();
        let plan = q.replay_plan(&[0]).unwrap();
        assert!(matches!(
            plan.items.as_slice(),
            [Item::Batch((0, 0), _), Item::Mark(0, At(2))]
        ));
    }

    fn restart(checkpoint: u64, step: u64, position: u64, state: u8) -> Restart {
        Restart {
            checkpoint,
            step,
            positions: vec![position].into(),
            state: Some(StateCopy::Encoded(vec![state])),
            marks: None,
        }
    }

    #[test]
    fn a_fenced_primary_cannot_hand_its_state() {
        let q = q(true);
        q.claim(0, (0, 0), &10, 1, 8, &[0]).unwrap();
        q.settle(0, &[1]);
        q.checkpoint_complete(0, restart(1, q.next_step(), 1, 7))
            .unwrap();
        // The old primary claims and processes (0, 1); then it is fenced and the new one
        // restarts from checkpoint 1, replaying (0, 1).
        q.claim(0, (0, 1), &11, 1, 8, &[1]).unwrap();
        q.fence();
        let plan = q.replay_plan(&[1]).unwrap();
        assert_eq!(plan.restore, Some((1, Restored::Payload(vec![7]))));
        // The old primary, woken, hands over its state (which has (0, 1) in it) at the
        // new log's next step: refused.
        let zombie = restart(0, q.next_step(), 2, 9);
        assert_eq!(q.checkpoint_complete(0, zombie), Err(Fenced { epoch: 1 }));
        q.claim(1, (0, 1), &11, 1, 8, &[1]).unwrap();
        q.settle(1, &[2]);
        // A second promotion still restarts from checkpoint 1 and replays (0, 1) once.
        q.fence();
        let plan = q.replay_plan(&[2]).unwrap();
        assert_eq!(plan.restore, Some((1, Restored::Payload(vec![7]))));
        let ids: Vec<BatchId> = plan.batches().map(|(id, _)| *id).collect();
        assert_eq!(ids, vec![(0, 1)]);
        // The current primary's handoff is taken.
        q.claim(2, (0, 1), &11, 1, 8, &[1]).unwrap();
        q.settle(2, &[2]);
        q.checkpoint_complete(2, restart(0, q.next_step(), 2, 8))
            .unwrap();
        q.fence();
        let plan = q.replay_plan(&[2]).unwrap();
        assert_eq!(plan.restore, Some((0, Restored::Payload(vec![8]))));
        assert_eq!(plan.batches().count(), 0);
    }

    #[test]
    fn a_fenced_primary_cannot_claim() {
        let q = q(false);
        q.claim(0, (0, 0), &10, 1, 8, &[0]).unwrap();
        assert_eq!(q.fence(), 1);
        assert_eq!(
            q.claim(0, (0, 1), &11, 1, 8, &[1]),
            Err(Fenced { epoch: 1 })
        );
        assert_eq!(q.claim(1, (0, 1), &11, 1, 8, &[1]), Ok(1));
    }

    #[test]
    fn full_queue_degrades_and_keeps_nothing() {
        let q: BufferQueue<u64> = BufferQueue::new(1, 1, true, 20, None);
        assert_eq!(q.offer((0, 0), 1, 1, 8), Offer::Added);
        assert_eq!(q.offer((0, 1), 1, 1, 8), Offer::Added);
        assert!(!q.is_degraded());
        q.offer((0, 2), 1, 1, 8);
        assert!(q.is_degraded());
        assert_eq!(q.stats().entries, 0);
        assert_eq!(q.offer((0, 3), 1, 1, 8), Offer::Dropped);
        q.fence();
        assert!(
            q.replay_plan(&[0]).is_none(),
            "a degraded queue cannot promote"
        );
    }
}
