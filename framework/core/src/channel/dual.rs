//! The dual channel into a backed-up subtask: one sender, the primary's and the backup's
//! channels fed together, and the switch on promotion ([`Dual`], [`dual_channel`]). Not the
//! backup itself (`backup`), nor the single-target channel (the parent module).

use super::{new_shared, Batch, Credit, Event, Full, Receiver, Sender, Shared, Target};
use crate::sync::atomic::Ordering;
use crate::sync::{lock, Arc, AtomicWaker, Mutex};

/// The sending side of a channel into a backed-up subtask: every event goes to the primary's
/// and the backup's channel together (one shared batch, never copied), or to neither while
/// either has no credit, so both see the same events at the same positions. The targets are
/// switched on promotion. A target whose receiver is gone is skipped.
pub(crate) struct Dual<T> {
    pub(super) targets: Mutex<DualTargets<T>>,
}

pub(super) struct DualTargets<T> {
    pub(super) primary: Arc<Shared<T>>,
    pub(super) backup: Option<Arc<Shared<T>>>,
    /// End of input was sent (a backup attached later gets it at once).
    ended: bool,
}

impl<T: Clone> Dual<T> {
    pub(super) fn try_send(&self, event: Event<T>) -> Result<(), Full<T>> {
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
