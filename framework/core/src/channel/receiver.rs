//! The receiving half of a channel: taking events (or peeking at a batch for a backed-up
//! primary), giving credit back and waking a waiting sender. Not the overtaking barriers of
//! unaligned checkpoints (`overtake`), nor the channel's window (`credit`).

use super::{Batch, Event, Receiver};
use crate::sync::atomic::Ordering;
use crate::sync::lock;

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
