//! Bounded, batched credit channels: the data lane between two subtasks.
//!
//! One channel connects one upstream subtask to one downstream subtask and carries
//! [`Event`]s: record batches and in-band markers (end of input) that must keep their order
//! with the records. Capacity is counted in events, so credit is per batch, never per record.
//! A sender with no credit gets its event back ([`Full`]) and registers to be woken when the
//! receiver frees a slot: that wait is backpressure. All channels into one subtask share that
//! subtask's receive waker, so one wake-up serves every input.
//!
//! The rule every channel keeps: events are received in the order they were sent, and an event
//! is never dropped or duplicated; a full channel refuses and hands the event back.
//! This module does not decide where records go (see `partition`).
//!
//! **Adaptive credit** ([`Credit`]; Flink's buffer debloating is the model). A channel's window
//! (the events it takes before it refuses) is sized to a queueing-delay target rather than
//! fixed: the receiver times how long it takes to get through one batch while more wait
//! behind it (its service time, a moving average), and the window becomes `target / service
//! time`, kept between a floor and a ceiling. A throughput-bound pipeline whose consumer gets
//! through a batch in microseconds gets a deep window, and its threads hand off rarely; a slow
//! consumer gets the floor, and what waits in front of a record stays under the target. The
//! ceiling bounds the memory a channel holds whatever the rate.
//!
//! **Adaptive batch size.** A receiver so slow that even the floor's batches would wait longer
//! than the target (a sink that takes 20 µs a record waits 40 ms behind two batches of 1024)
//! also asks for smaller batches: it averages its time per record, and
//! [`Sender::batch_limit`] becomes `target / (floor * time per record)` records, which the
//! network outputs (`partition`) follow, read once per batch they send, when
//! `EnvConfig::adaptive_batch_size` is on and rate control is off (`partition::AdaptBatches`).
//! Window and batch size then hold together what
//! waits in front of a record near the target; a fast receiver never limits the batch below
//! the job's batch size.
//!
//! **Hand-offs.** A sender refused for credit is woken when the receiver has taken the queue
//! down to half its window (not at every taken batch), so a woken sender finds room for many
//! batches. A receiver about to park (it found nothing to take, or its own output has no
//! credit) calls [`Receiver::release`], which wakes a waiting sender if there is any room:
//! no sender stays parked on room that is there while its receiver is parked too.

use std::collections::VecDeque;
use std::task::Context;
use std::time::{Duration, Instant};

use crate::sync::AtomicWaker;

use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::{lock, Arc, Mutex};

/// A batch of records, owned or shared by several receivers (broadcast). Sharing never copies
/// the records; a receiver that needs ownership of a shared batch clones them out.
#[derive(Debug)]
pub(crate) enum Batch<T> {
    Owned(Vec<T>),
    Shared(std::sync::Arc<Vec<T>>),
}

impl<T: Clone> Batch<T> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Batch::Owned(v) => v.len(),
            Batch::Shared(v) => v.len(),
        }
    }

    /// Moves the records into `buf` (which the caller has emptied), without copying when it can.
    pub(crate) fn move_into(self, buf: &mut Vec<T>) {
        match self {
            Batch::Owned(v) => {
                if buf.is_empty() {
                    *buf = v;
                } else {
                    buf.extend(v);
                }
            }
            Batch::Shared(arc) => match std::sync::Arc::try_unwrap(arc) {
                Ok(v) => Batch::Owned(v).move_into(buf),
                Err(arc) => buf.extend(arc.iter().cloned()),
            },
        }
    }
}

/// A checkpoint barrier and the options of its checkpoint, which every subtask it reaches
/// learns from it (as Flink's `CheckpointBarrier` carries its `CheckpointOptions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Barrier {
    /// The checkpoint.
    pub(crate) id: u64,
    /// Every subtask also hands its states for this checkpoint over in memory, to the
    /// controller (a rescale's or a graph replacement's checkpoint).
    pub(crate) hand_over: bool,
}

impl Barrier {
    /// The barrier of an ordinary checkpoint `id` (nothing handed over).
    #[cfg(test)]
    pub(crate) fn new(id: u64) -> Self {
        Barrier {
            id,
            hand_over: false,
        }
    }
}

/// What travels on a channel.
#[derive(Debug)]
pub(crate) enum Event<T> {
    Batch(Batch<T>),
    /// Checkpoint barrier: everything before it belongs to its checkpoint, everything after
    /// it to the next.
    Barrier(Barrier),
    /// The sender's event-time watermark advanced, or the sender went idle.
    Watermark(crate::time::Watermark),
    EndOfInput,
}

/// A refused send: the channel had no credit. Holds the event, which is not lost.
#[derive(Debug)]
pub(crate) struct Full<T>(pub(crate) Event<T>);

/// How a channel sizes its window, in events: fixed, or adapted to a queueing-delay target
/// (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Credit {
    /// The window, or its floor when adaptive (at least 1).
    pub(crate) min: usize,
    /// The window's ceiling when adaptive (at least `min`).
    pub(crate) max: usize,
    /// The queueing delay the window is sized for; `None`: fixed at `min`.
    pub(crate) target: Option<Duration>,
}

impl Credit {
    /// A fixed window of `n` events.
    pub(crate) fn fixed(n: usize) -> Self {
        let n = n.max(1);
        Credit {
            min: n,
            max: n,
            target: None,
        }
    }

    /// The job's channel credit.
    pub(crate) fn of(cfg: &crate::EnvConfig) -> Self {
        match cfg.latency_target {
            Some(target) => Credit {
                min: cfg.channel_capacity.max(1),
                max: cfg.max_channel_capacity.max(cfg.channel_capacity).max(1),
                target: Some(target),
            },
            None => Credit::fixed(cfg.channel_capacity),
        }
    }

    /// This credit with a floor and ceiling of at least `n` (a channel that starts with `n`
    /// events in it).
    fn at_least(self, n: usize) -> Self {
        Credit {
            min: self.min.max(n),
            max: self.max.max(n),
            target: self.target,
        }
    }
}

impl From<usize> for Credit {
    fn from(n: usize) -> Self {
        Credit::fixed(n)
    }
}

/// The adaptive part of a channel's window, kept by the receiver under the queue's lock.
struct Window {
    /// Events the channel takes now.
    now: usize,
    credit: Credit,
    /// When the receiver last took an event and left others behind it (it had work waiting):
    /// the next take's interval is one service time.
    busy_since: Option<Instant>,
    /// Moving average of the service time per batch, ns (0: no measure yet).
    service_ns: u64,
    /// Records in the batch taken at `busy_since`.
    busy_records: usize,
    /// Moving average of the service time per record, ns (0: no measure yet).
    record_ns: u64,
}

impl Window {
    fn new(credit: Credit) -> Self {
        Window {
            now: credit.min,
            credit,
            busy_since: None,
            service_ns: 0,
            busy_records: 0,
            record_ns: 0,
        }
    }

    /// The receiver took a batch of `records` and `left` events wait behind it. Returns the
    /// batch limit the senders should keep to (records; `NO_BATCH_LIMIT` while every batch
    /// fits), when it was measured anew.
    #[inline]
    fn took_batch(&mut self, records: usize, left: usize) -> Option<u64> {
        let target = self.credit.target?;
        let now = Instant::now();
        let mut limit = None;
        if let Some(since) = self.busy_since {
            let dt = now.saturating_duration_since(since).as_nanos() as u64;
            // An average over about eight batches: quick to follow a change of rate, steady
            // over one slow batch.
            self.service_ns = ewma(self.service_ns, dt);
            let fits = target.as_nanos() as u64 / self.service_ns.max(1);
            self.now = (fits as usize).clamp(self.credit.min, self.credit.max);
            if self.busy_records > 0 {
                self.record_ns = ewma(self.record_ns, dt / self.busy_records as u64);
                limit = Some(batch_limit(target, self.credit.min, self.record_ns));
            }
        }
        self.busy_since = (left > 0).then_some(now);
        self.busy_records = records;
        limit
    }
}

/// A moving average over about eight samples (`avg` 0: none yet).
#[inline]
pub(crate) fn ewma(avg: u64, sample: u64) -> u64 {
    if avg == 0 {
        sample
    } else {
        (avg * 7 + sample) / 8
    }
}

/// No limit on the records of a batch beyond the job's batch size.
pub(crate) const NO_BATCH_LIMIT: u64 = u64::MAX;

/// The records per batch that keep the smallest window (`floor` batches) within `target` at
/// `record_ns` per record: a receiver so slow that even the floor's batches of the job's batch
/// size would wait longer than the target gets smaller batches (at least one record).
fn batch_limit(target: Duration, floor: usize, record_ns: u64) -> u64 {
    let per_batch = target.as_nanos() as u64 / floor.max(1) as u64;
    (per_batch / record_ns.max(1)).max(1)
}

struct Queue<T> {
    events: VecDeque<Event<T>>,
    window: Window,
    /// Records in the queued batches.
    records: usize,
    /// Senders of older epochs were fenced: what they send is dropped.
    epoch: u64,
    /// Position of the next batch / record sent (the first one is 0 unless the channel was
    /// opened at a later position).
    sent_batches: u64,
    sent_records: u64,
    /// Position of the next batch taken by the receiver.
    taken_batches: u64,
    /// Records at positions below this are dropped on send: a promoted backup replays them
    /// and the receiver has them already.
    suppress_below: u64,
    /// Records the current sender emitted for this channel that are not in it yet (in its
    /// buffers, or waiting for credit), as it last said ([`Sender::set_unsent`]): a
    /// backed-up subtask's output positions count them.
    unsent: u64,
    /// An unaligned checkpoint's barrier that overtook the events queued in front of it (see
    /// [`Sender::send_overtaking`]).
    overtaking: Option<Overtaking>,
    /// In-band barriers queued.
    barriers: u64,
}

/// A barrier at the head of the channel, ahead of the first `before` queued events (which
/// belong to the checkpoint before it: its channel state).
#[derive(Debug, Clone, Copy)]
struct Overtaking {
    barrier: Barrier,
    before: usize,
}

struct Shared<T> {
    queue: Mutex<Queue<T>>,
    /// The records per batch senders should keep to (see [`Sender::batch_limit`]).
    batch_limit: AtomicU64,
    rx_waker: Arc<AtomicWaker>,
    tx_waker: AtomicWaker,
    closed: AtomicBool,
    /// A hint, read without the lock: an overtaking barrier waits (set and cleared under it).
    overtaken: AtomicBool,
    /// A hint, read without the lock: in-band barriers queued (kept under it).
    barriers: AtomicU64,
}

impl<T> Shared<T> {
    /// Publishes the count of in-band barriers queued (the lock is held: `q`).
    #[inline]
    fn note_barriers(&self, q: &Queue<T>) {
        self.barriers.store(q.barriers, Ordering::Release);
    }
}

/// Sending half: owned by the upstream subtask.
pub(crate) struct Sender<T> {
    target: Target<T>,
}

enum Target<T> {
    One { shared: Arc<Shared<T>>, epoch: u64 },
    Dual(std::sync::Arc<Dual<T>>),
}

/// Receiving half: owned by the downstream subtask.
pub(crate) struct Receiver<T> {
    shared: Arc<Shared<T>>,
}

fn new_shared<T>(credit: Credit, rx_waker: Arc<AtomicWaker>, sent_batches: u64) -> Arc<Shared<T>> {
    Arc::new(Shared {
        queue: Mutex::new(Queue {
            events: VecDeque::with_capacity(credit.min),
            window: Window::new(credit),
            records: 0,
            epoch: 0,
            sent_batches,
            sent_records: 0,
            taken_batches: sent_batches,
            suppress_below: 0,
            unsent: 0,
            overtaking: None,
            barriers: 0,
        }),
        batch_limit: AtomicU64::new(NO_BATCH_LIMIT),
        rx_waker,
        tx_waker: AtomicWaker::new(),
        closed: AtomicBool::new(false),
        overtaken: AtomicBool::new(false),
        barriers: AtomicU64::new(0),
    })
}

/// A channel with window `credit` (a `usize`: fixed at that many events) whose arrivals wake
/// `rx_waker`.
pub(crate) fn channel<T>(
    credit: impl Into<Credit>,
    rx_waker: Arc<AtomicWaker>,
) -> (Sender<T>, Receiver<T>) {
    let shared = new_shared(credit.into(), rx_waker, 0);
    (
        Sender {
            target: Target::One {
                shared: shared.clone(),
                epoch: 0,
            },
        },
        Receiver { shared },
    )
}

impl<T: Clone> Event<T> {
    /// The same event again: a shared batch is shared once more (an owned one is copied).
    fn share(&self) -> Event<T> {
        match self {
            Event::Batch(Batch::Shared(a)) => Event::Batch(Batch::Shared(a.clone())),
            Event::Batch(Batch::Owned(v)) => Event::Batch(Batch::Owned(v.clone())),
            Event::Barrier(b) => Event::Barrier(*b),
            Event::Watermark(w) => Event::Watermark(*w),
            Event::EndOfInput => Event::EndOfInput,
        }
    }
}

impl<T> Event<T> {
    fn records(&self) -> usize {
        match self {
            Event::Batch(Batch::Owned(v)) => v.len(),
            Event::Batch(Batch::Shared(v)) => v.len(),
            Event::Barrier(_) | Event::Watermark(_) | Event::EndOfInput => 0,
        }
    }
}

impl<T> Queue<T> {
    /// No credit: the window is taken (a window that shrank may hold more until drained).
    #[inline]
    fn is_full(&self) -> bool {
        self.events.len() >= self.window.now
    }

    /// After a take: a sender waiting for credit should go on now (the queue is down to half
    /// its window, see the module doc's hand-offs).
    #[inline]
    fn wakes_sender(&self) -> bool {
        self.events.len() <= self.window.now / 2
    }
}

impl<T: Clone> Queue<T> {
    /// Enqueues `event` (credit was checked), dropping records below `suppress_below`.
    fn push(&mut self, event: Event<T>) {
        let event = match event {
            Event::Batch(batch) if self.sent_records < self.suppress_below => {
                let n = batch.len() as u64;
                let k = n.min(self.suppress_below - self.sent_records);
                self.sent_records += k;
                if k == n {
                    return;
                }
                let rest = match batch {
                    Batch::Owned(mut v) => {
                        v.drain(..k as usize);
                        v
                    }
                    Batch::Shared(a) => a[k as usize..].to_vec(),
                };
                Event::Batch(Batch::Owned(rest))
            }
            e => e,
        };
        if let Event::Batch(b) = &event {
            self.sent_batches += 1;
            self.sent_records += b.len() as u64;
        }
        self.records += event.records();
        if matches!(event, Event::Barrier(_)) {
            self.barriers += 1;
        }
        self.events.push_back(event);
    }
}

impl<T> Queue<T> {
    /// Takes the event at the head: the overtaking barrier (if any) is ahead of one event
    /// fewer. None once it is ahead of none: what follows it waits until the receiver took
    /// the barrier (as an in-band barrier would be taken before what follows it).
    #[inline]
    fn pop_front(&mut self) -> Option<Event<T>> {
        if self.overtaking.is_some_and(|o| o.before == 0) {
            return None;
        }
        let e = self.events.pop_front()?;
        if let Some(o) = self.overtaking.as_mut() {
            o.before = o.before.saturating_sub(1);
        }
        if matches!(e, Event::Barrier(_)) {
            self.barriers -= 1;
        }
        Some(e)
    }
}

impl<T: Clone> Sender<T> {
    /// The most records a batch sent now should hold ([`NO_BATCH_LIMIT`]: the job's batch
    /// size): the receiver's measured pace against the latency target (see the module doc).
    /// One relaxed load: read it once per batch sent, not per record.
    #[inline]
    pub(crate) fn batch_limit(&self) -> u64 {
        match &self.target {
            Target::One { shared, .. } => shared.batch_limit.load(Ordering::Relaxed),
            Target::Dual(d) => lock(&d.targets).primary.batch_limit.load(Ordering::Relaxed),
        }
    }

    /// Events waiting in the channel, and its window now.
    pub(crate) fn usage(&self) -> (usize, usize) {
        let of = |s: &Shared<T>| {
            let q = lock(&s.queue);
            (q.events.len(), q.window.now)
        };
        match &self.target {
            Target::One { shared, .. } => of(shared),
            Target::Dual(d) => of(&lock(&d.targets).primary),
        }
    }

    /// Says how many records this sender emitted for its channel that are not in it yet
    /// (see [`OutputChannel::position`]); a fenced sender's word is ignored. Only senders
    /// of backed-up subtasks say it (once per batch, not per record).
    pub(crate) fn set_unsent(&self, records: u64) {
        if let Target::One { shared, epoch } = &self.target {
            let mut q = lock(&shared.queue);
            if q.epoch == *epoch {
                q.unsent = records;
            }
        }
    }

    /// Sends if there is credit; otherwise hands the event back. A sender of a fenced epoch
    /// drops what it sends.
    pub(crate) fn try_send(&self, event: Event<T>) -> Result<(), Full<T>> {
        match &self.target {
            Target::One { shared, epoch } => {
                {
                    let mut q = lock(&shared.queue);
                    if q.epoch != *epoch {
                        return Ok(());
                    }
                    if q.is_full() {
                        return Err(Full(event));
                    }
                    let barrier = matches!(event, Event::Barrier(_));
                    q.push(event);
                    if barrier {
                        shared.note_barriers(&q);
                    }
                }
                shared.rx_waker.wake();
                Ok(())
            }
            Target::Dual(d) => d.try_send(event),
        }
    }

    /// Sends if there is credit; otherwise registers the task in `cx` to be woken when credit
    /// returns, and hands the event back. A channel whose receiver is gone (the job is
    /// stopping) accepts and drops the event, since nothing will ever read it.
    pub(crate) fn send_or_register(
        &self,
        cx: &mut Context<'_>,
        event: Event<T>,
    ) -> Result<(), Full<T>> {
        match self.try_send(event) {
            Ok(()) => Ok(()),
            Err(Full(event)) => {
                match &self.target {
                    Target::One { shared, epoch } => {
                        if shared.closed.load(Ordering::Acquire) {
                            return Ok(());
                        }
                        // A fenced sender must not take the credit waker from the sender
                        // that replaced it (the same channel, a newer epoch).
                        if lock(&shared.queue).epoch != *epoch {
                            return Ok(());
                        }
                        shared.tx_waker.register(cx.waker());
                    }
                    Target::Dual(d) => {
                        let t = lock(&d.targets);
                        t.primary.tx_waker.register(cx.waker());
                        if let Some(b) = &t.backup {
                            b.tx_waker.register(cx.waker());
                        }
                    }
                }
                // Credit may have returned between the refusal and the registration.
                self.try_send(event)
            }
        }
    }
}

impl<T: Clone> Sender<T> {
    /// Sends checkpoint `id`'s barrier ahead of everything queued (an unaligned checkpoint):
    /// `before` (the sender's output that waited for credit, in order) is queued first,
    /// without credit, and the barrier overtakes it and every event already queued: the
    /// receiver sees it at once ([`Receiver::overtaking`]) and takes those events as the
    /// checkpoint's channel state ([`Receiver::take_overtaken`]). An older overtaking barrier
    /// not yet seen is superseded (its checkpoint cannot complete here).
    ///
    /// A channel into a backed-up subtask (a dual channel) keeps barriers in band: `before`
    /// is handed back, for the caller to send in order with the barrier behind it.
    pub(crate) fn send_overtaking(
        &self,
        barrier: Barrier,
        before: Vec<Event<T>>,
    ) -> Result<(), Vec<Event<T>>> {
        let Target::One { shared, epoch } = &self.target else {
            return Err(before);
        };
        {
            let mut q = lock(&shared.queue);
            if q.epoch != *epoch {
                return Ok(());
            }
            let barriers = before.iter().any(|e| matches!(e, Event::Barrier(_)));
            for e in before {
                q.push(e);
            }
            if barriers {
                shared.note_barriers(&q);
            }
            let before = q.events.len();
            q.overtaking = Some(Overtaking { barrier, before });
            shared.overtaken.store(true, Ordering::Release);
        }
        shared.rx_waker.wake();
        Ok(())
    }
}

/// The sending side of a channel into a backed-up subtask: every event goes to the primary's
/// and the backup's channel together (one shared batch, never copied), or to neither while
/// either has no credit, so both see the same events at the same positions. The targets are
/// switched on promotion. A target whose receiver is gone is skipped.
pub(crate) struct Dual<T> {
    targets: Mutex<DualTargets<T>>,
}

struct DualTargets<T> {
    primary: Arc<Shared<T>>,
    backup: Option<Arc<Shared<T>>>,
    /// End of input was sent (a backup attached later gets it at once).
    ended: bool,
}

impl<T: Clone> Dual<T> {
    fn try_send(&self, event: Event<T>) -> Result<(), Full<T>> {
        let mut t = lock(&self.targets);
        let end = matches!(event, Event::EndOfInput);
        let open = |s: &Shared<T>| !s.closed.load(Ordering::Acquire);
        let (p_open, b_open) = (open(&t.primary), t.backup.as_deref().is_some_and(open));
        if !p_open && !b_open {
            // The primary is gone and no backup reads yet (a promotion is under way): the
            // event waits for the next target (attaching one wakes this sender).
            return Err(Full(event));
        }
        {
            let mut qp = lock(&t.primary.queue);
            let mut qb = match (&t.backup, b_open) {
                (Some(b), true) => Some(lock(&b.queue)),
                _ => None,
            };
            if p_open && qp.is_full() {
                return Err(Full(event));
            }
            if let Some(q) = &qb {
                if q.is_full() {
                    return Err(Full(event));
                }
            }
            let (for_p, for_b) = match event {
                Event::Batch(batch) => {
                    let shared = match batch {
                        Batch::Owned(v) => std::sync::Arc::new(v),
                        Batch::Shared(a) => a,
                    };
                    (
                        Event::Batch(Batch::Shared(shared.clone())),
                        Event::Batch(Batch::Shared(shared)),
                    )
                }
                Event::Barrier(b) => (Event::Barrier(b), Event::Barrier(b)),
                Event::Watermark(w) => (Event::Watermark(w), Event::Watermark(w)),
                Event::EndOfInput => (Event::EndOfInput, Event::EndOfInput),
            };
            let barrier = matches!(for_p, Event::Barrier(_));
            if p_open {
                qp.push(for_p);
                if barrier {
                    t.primary.note_barriers(&qp);
                }
            } else {
                // Keep the positions aligned with the backup's even with nobody reading.
                if let Event::Batch(b) = &for_p {
                    qp.sent_batches += 1;
                    qp.sent_records += b.len() as u64;
                }
            }
            if let Some(q) = qb.as_mut() {
                q.push(for_b);
                if let (true, Some(b)) = (barrier, &t.backup) {
                    b.note_barriers(q);
                }
            }
        }
        t.ended |= end;
        t.primary.rx_waker.wake();
        if let Some(b) = &t.backup {
            b.rx_waker.wake();
        }
        Ok(())
    }

    /// The backup's channel becomes the primary's (the promoted backup reads it); the old
    /// primary's channel gets nothing more.
    pub(crate) fn promote(&self) {
        let mut t = lock(&self.targets);
        if let Some(b) = t.backup.take() {
            let old = std::mem::replace(&mut t.primary, b);
            // A sender waiting for the old primary's credit must look again: that channel
            // no longer counts.
            old.tx_waker.wake();
        }
    }

    /// Opens a channel for a new backup at the position of the primary's next batch: the
    /// batches still waiting in the primary's channel are in the new one too (shared, not
    /// copied), so no batch the primary has not claimed exists only in its channel.
    pub(crate) fn attach_backup(&self, credit: Credit, rx_waker: Arc<AtomicWaker>) -> Receiver<T> {
        let mut t = lock(&self.targets);
        let shared = {
            let p = lock(&t.primary.queue);
            let shared = new_shared(credit.at_least(p.events.len()), rx_waker, p.taken_batches);
            {
                let mut q = lock(&shared.queue);
                for e in &p.events {
                    q.push(e.share());
                }
                if t.ended && !p.events.iter().any(|e| matches!(e, Event::EndOfInput)) {
                    q.events.push_back(Event::EndOfInput);
                }
                shared.note_barriers(&q);
            }
            shared
        };
        t.backup = Some(shared.clone());
        // A sender waiting because no channel was open can go on.
        t.primary.tx_waker.wake();
        Receiver { shared }
    }

    /// Stops sending to the backup (it failed or was promoted away).
    pub(crate) fn detach_backup(&self) {
        if let Some(old) = lock(&self.targets).backup.take() {
            old.tx_waker.wake();
        }
    }
}

/// A dual channel into a backed-up subtask: the upstream's sender, the handle that switches
/// it, and the primary's and the backup's receivers.
pub(crate) fn dual_channel<T>(
    credit: impl Into<Credit>,
    primary_waker: Arc<AtomicWaker>,
    backup_waker: Arc<AtomicWaker>,
) -> (Sender<T>, std::sync::Arc<Dual<T>>, Receiver<T>, Receiver<T>) {
    let credit = credit.into();
    let p = new_shared(credit, primary_waker, 0);
    let b = new_shared(credit, backup_waker, 0);
    let dual = std::sync::Arc::new(Dual {
        targets: Mutex::new(DualTargets {
            primary: p.clone(),
            backup: Some(b.clone()),
            ended: false,
        }),
    });
    (
        Sender {
            target: Target::Dual(dual.clone()),
        },
        dual,
        Receiver { shared: p },
        Receiver { shared: b },
    )
}

/// The receiving end of a channel seen from outside: its position, and fencing its sender.
/// Used for the output channels of a backed-up subtask.
pub(crate) struct OutputChannel<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Sender<T> {
    /// A handle on this sender's channel (a single-target sender).
    pub(crate) fn handle(&self) -> Option<OutputChannel<T>> {
        match &self.target {
            Target::One { shared, .. } => Some(OutputChannel {
                shared: shared.clone(),
            }),
            Target::Dual(_) => None,
        }
    }
}

impl<T> OutputChannel<T> {
    /// Records the sender emitted for the channel so far: sent into it (taken or still
    /// queued), and what the sender still holds for it (its buffers, or waiting for credit).
    /// A step's output counts from the moment the operator emits it, so that a replay
    /// positions its own output after every record the step emitted, sent or not.
    pub(crate) fn position(&self) -> u64 {
        let q = lock(&self.shared.queue);
        q.sent_records + q.unsent
    }

    /// Records the current sender emitted for the channel that are not in it yet.
    pub(crate) fn unsent(&self) -> u64 {
        lock(&self.shared.queue).unsent
    }

    /// Fences every current sender (what they send from now on is dropped) and returns the
    /// channel's position: the records the receiver has or will get from them.
    pub(crate) fn fence(&self) -> u64 {
        let mut q = lock(&self.shared.queue);
        q.epoch += 1;
        // A sender that is replaying below what the receiver has (suppressed) has not moved
        // the receiver's position back.
        q.sent_records.max(q.suppress_below)
    }

    /// A sender of the current epoch whose output starts at position `from`; records below
    /// `have` (the position at the fence) are dropped, the receiver has them.
    pub(crate) fn reopen(&self, from: u64, have: u64) -> Sender<T> {
        let mut q = lock(&self.shared.queue);
        q.sent_records = from;
        q.suppress_below = have;
        q.unsent = 0;
        // Wake a fenced sender that waits for credit: it now drops what it sends.
        self.shared.tx_waker.wake();
        Sender {
            target: Target::One {
                shared: self.shared.clone(),
                epoch: q.epoch,
            },
        }
    }
}

impl<T> Receiver<T> {
    /// Takes the next event, if any, and returns a credit to the sender.
    pub(crate) fn try_recv(&self) -> Option<Event<T>> {
        self.try_recv_at().map(|(_, e)| e)
    }

    /// Like [`try_recv`](Self::try_recv), with the event's batch position (for a batch: its
    /// own; otherwise the next batch's).
    pub(crate) fn try_recv_at(&self) -> Option<(u64, Event<T>)> {
        let (taken, wake) = {
            let mut q = lock(&self.shared.queue);
            let e = q.pop_front()?;
            let records = e.records();
            q.records -= records;
            let at = q.taken_batches;
            let left = q.events.len();
            if matches!(e, Event::Batch(_)) {
                q.taken_batches += 1;
                if let Some(limit) = q.window.took_batch(records, left) {
                    self.shared.batch_limit.store(limit, Ordering::Relaxed);
                }
            }
            if matches!(e, Event::Barrier(_)) {
                self.shared.note_barriers(&q);
            }
            ((at, e), q.wakes_sender())
        };
        if wake {
            self.shared.tx_waker.wake();
        }
        Some(taken)
    }

    /// The receiver is about to park (it found nothing it takes now, or its own output has no
    /// credit): wakes a sender waiting for credit if the channel has room, however little,
    /// so that none stays parked on room that is there.
    pub(crate) fn release(&self) {
        if !lock(&self.shared.queue).is_full() {
            self.shared.tx_waker.wake();
        }
    }

    /// Like [`try_recv`](Self::try_recv), but a batch at the head stays there (for an
    /// operator that takes no records now: barriers, watermarks and the end still come).
    pub(crate) fn try_recv_unless_batch(&self) -> Option<Event<T>> {
        self.try_recv_unless_batch_at().map(|(_, e)| e)
    }

    /// Like [`try_recv_unless_batch`](Self::try_recv_unless_batch), with the position of the
    /// batch after the event.
    pub(crate) fn try_recv_unless_batch_at(&self) -> Option<(u64, Event<T>)> {
        let (taken, wake) = {
            let mut q = lock(&self.shared.queue);
            if q.overtaking.is_some_and(|o| o.before == 0) {
                return None;
            }
            match q.events.front() {
                None | Some(Event::Batch(_)) => return None,
                Some(_) => {
                    let at = q.taken_batches;
                    let e = q.pop_front().map(|e| (at, e));
                    if matches!(e, Some((_, Event::Barrier(_)))) {
                        self.shared.note_barriers(&q);
                    }
                    (e, q.wakes_sender())
                }
            }
        };
        if wake {
            self.shared.tx_waker.wake();
        }
        taken
    }

    /// For a backed-up primary, which claims each batch in its buffer queue before it takes
    /// it: a batch at the head is *not* taken but returned shared (made shared in place if
    /// owned), with its position, and stays in the channel until
    /// [`take_peeked`](Self::take_peeked); any other event is taken as by
    /// [`try_recv_at`](Self::try_recv_at). A batch is so always in the channel or claimed:
    /// a backup attached meanwhile (which starts from the channel's waiting events) misses
    /// none that the primary took and could not claim (it was fenced).
    pub(crate) fn try_recv_or_peek(&self) -> Option<(u64, Event<T>, bool)> {
        {
            let mut q = lock(&self.shared.queue);
            let at = q.taken_batches;
            if q.overtaking.is_some_and(|o| o.before == 0) {
                return None;
            }
            if let Event::Batch(b) = q.events.front_mut()? {
                if let Batch::Owned(v) = b {
                    *b = Batch::Shared(std::sync::Arc::new(std::mem::take(v)));
                }
                let Batch::Shared(a) = b else {
                    unreachable!("made shared above")
                };
                return Some((at, Event::Batch(Batch::Shared(a.clone())), true));
            }
        }
        self.try_recv_at().map(|(at, e)| (at, e, false))
    }

    /// Takes the batch at position `seq` that [`try_recv_or_peek`](Self::try_recv_or_peek)
    /// returned (only this receiver takes from the channel: it is still at the head).
    pub(crate) fn take_peeked(&self, seq: u64) {
        let taken = self.try_recv_at();
        debug_assert!(
            matches!(taken, Some((at, Event::Batch(_))) if at == seq),
            "internal error: the peeked batch was not at the head"
        );
    }

    /// Events waiting in the channel.
    pub(crate) fn queued(&self) -> usize {
        lock(&self.shared.queue).events.len()
    }

    /// The checkpoint whose barrier waits at the head of the channel, ahead of queued events
    /// ([`Sender::send_overtaking`], or one moved there by
    /// [`overtake_in_band`](Self::overtake_in_band)). One relaxed look while there is none.
    #[inline]
    pub(crate) fn overtaking(&self) -> Option<Barrier> {
        if !self.shared.overtaken.load(Ordering::Acquire) {
            return None;
        }
        lock(&self.shared.queue).overtaking.map(|o| o.barrier)
    }

    /// Moves the first in-band barrier queued to the head, ahead of the events in front of
    /// it (an unaligned checkpoint does not wait for them): it is then the channel's
    /// [`overtaking`](Self::overtaking) barrier. Returns its id. One relaxed look while no
    /// barrier is queued.
    pub(crate) fn overtake_in_band(&self) -> Option<u64> {
        if self.shared.barriers.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut q = lock(&self.shared.queue);
        let at = q
            .events
            .iter()
            .position(|e| matches!(e, Event::Barrier(_)))?;
        let Some(Event::Barrier(barrier)) = q.events.remove(at) else {
            unreachable!("found above")
        };
        q.barriers -= 1;
        self.shared.note_barriers(&q);
        match q.overtaking.as_mut() {
            // A newer barrier overtakes already: this one is stale, and one event fewer is
            // in front of that one if it was.
            Some(o) if o.barrier.id >= barrier.id => {
                if at < o.before {
                    o.before -= 1;
                }
            }
            _ => {
                q.overtaking = Some(Overtaking {
                    barrier,
                    before: at,
                });
                self.shared.overtaken.store(true, Ordering::Release);
            }
        }
        Some(barrier.id)
    }

    /// Takes the overtaking barrier of checkpoint `id`: copies of the events it overtook, in
    /// order (shared, not copied: a batch owned in the queue is made shared in place). The
    /// events stay queued, to be taken as usual. None if the barrier waiting is not `id`'s (a
    /// newer one replaced it since it was looked at): nothing is taken.
    pub(crate) fn take_overtaken(&self, id: u64) -> Option<Vec<Event<T>>>
    where
        T: Clone,
    {
        let mut q = lock(&self.shared.queue);
        if q.overtaking.is_none_or(|o| o.barrier.id != id) {
            return None;
        }
        self.shared.overtaken.store(false, Ordering::Release);
        let o = q.overtaking.take()?;
        let copies = q
            .events
            .iter_mut()
            .take(o.before)
            .map(|e| {
                if let Event::Batch(b @ Batch::Owned(_)) = e {
                    let Batch::Owned(v) = std::mem::replace(b, Batch::Owned(Vec::new())) else {
                        unreachable!("matched above")
                    };
                    *b = Batch::Shared(std::sync::Arc::new(v));
                }
                e.share()
            })
            .collect();
        Some(copies)
    }

    /// Records in the batches waiting in the channel.
    pub(crate) fn queued_records(&self) -> usize {
        lock(&self.shared.queue).records
    }

    /// The window now, in events.
    pub(crate) fn capacity(&self) -> usize {
        lock(&self.shared.queue).window.now
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.tx_waker.wake();
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests;

/// Loom models: run with
/// `RUSTFLAGS="--cfg weir_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p weir --lib --release loom_`.
#[cfg(all(test, weir_loom))]
pub(crate) mod loom_tests;
