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

use crate::sync::AtomicWaker;

use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::{lock, Arc, Mutex};

mod credit;
mod dual;
mod overtake;
mod receiver;

use credit::Window;
pub(crate) use credit::{ewma, Credit, NO_BATCH_LIMIT};
pub(crate) use dual::{dual_channel, Dual};
use overtake::Overtaking;

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

#[cfg(all(test, not(weir_loom)))]
mod tests;

/// Loom models: run with
/// `RUSTFLAGS="--cfg weir_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p weir --lib --release loom_`.
#[cfg(all(test, weir_loom))]
pub(crate) mod loom_tests;
