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

impl StepLog {
    /// Where a stateless operator's replay starts, given how far each output channel got
    /// (`delivered`): the first step whose output did not all get through, and the output
    /// positions before it.
    fn first_undelivered(&self, delivered: &[u64]) -> (u64, Box<[u64]>) {
        let mut start = self.first + self.steps.len() as u64;
        let mut positions = self.base.clone();
        let mut before = self.base.clone();
        for (k, s) in self.steps.iter().enumerate() {
            let through = s
                .after
                .as_ref()
                .is_some_and(|after| after.iter().zip(delivered).all(|(a, d)| a <= d));
            if !through {
                start = self.first + k as u64;
                positions = before;
                break;
            }
            if let Some(after) = &s.after {
                before = after.clone();
                positions = after.clone();
            }
        }
        (start, positions)
    }
}

/// An item of a replay with where it goes: (position, channel, watermark first, offer
/// order), item.
type Ordered<P> = ((u64, u32, u8, usize), Item<P>);

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

    /// What only the backup had, in replay order: the batches offered and neither claimed
    /// nor `listed` (in the replay already), and the watermarks at or past their channel's
    /// claim position. Per channel in position order, a watermark before the batch it
    /// preceded. A watermark the primary took already is taken again: it moves nothing.
    fn unclaimed(&self, listed: &std::collections::HashSet<BatchId>) -> Vec<Ordered<P>> {
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
        unclaimed
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
            let (start, positions) = log.first_undelivered(delivered);
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
        items.extend(self.unclaimed(&listed).into_iter().map(|(_, i)| i));
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
mod tests;
