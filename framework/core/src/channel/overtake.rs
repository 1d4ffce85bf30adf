//! Unaligned checkpoints in a channel: a barrier that overtakes the events queued in front of
//! it ([`Sender::send_overtaking`], or an in-band barrier moved ahead by
//! [`Receiver::overtake_in_band`]), and the receiver taking those events as the checkpoint's
//! channel state ([`Receiver::take_overtaken`]). Not what follows an overtaking barrier
//! waiting for it (the queue's `pop_front`), nor the checkpoint's alignment (`checkpoint`).

use super::{Barrier, Batch, Event, Receiver, Sender, Target};
use crate::sync::atomic::Ordering;
use crate::sync::lock;

/// A barrier at the head of the channel, ahead of the first `before` queued events (which
/// belong to the checkpoint before it: its channel state).
#[derive(Debug, Clone, Copy)]
pub(super) struct Overtaking {
    pub(super) barrier: Barrier,
    pub(super) before: usize,
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

impl<T> Receiver<T> {
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
}
