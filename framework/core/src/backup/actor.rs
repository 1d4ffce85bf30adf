//! The backup actor: on its own arbiter, it drains its input channels into the buffer queue,
//! answers heartbeats ([`BackupPing`]), and does no operator work while its primary lives.

use super::*;

/// Heartbeat of a backup (answered from its mailbox).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BackupPing;

impl Message for BackupPing {
    type Result = ();
}

/// Drains the backup's channels into the buffer queue; see the module doc.
pub(crate) struct BackupActor<T: Data> {
    pub(super) group: StdArc<TypedGroup<T>>,
    pub(super) generation: u64,
    pub(super) events: UnboundedSender<JobEvent>,
    pub(super) attempt: u64,
    pub(super) actor: usize,
    pub(super) fault: Option<FaultProbe>,
    /// Stopped because it was replaced or promoted (not a failure).
    pub(super) stopped: bool,
}

impl<T: Data> Actor for BackupActor<T> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        tracing::debug!(uid = %self.group.uid, subtask = self.group.subtask, generation = self.generation, "backup started");
        ctx.spawn(Drain);
    }
}

impl<T: Data> Handler<BackupPing> for BackupActor<T> {
    type Result = ();
    fn handle(&mut self, _msg: BackupPing, _ctx: &mut Self::Context) {}
}

impl<T: Data> Drop for BackupActor<T> {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = self.events.unbounded_send(JobEvent::BackupLost {
                attempt: self.attempt,
                actor: self.actor,
                generation: self.generation,
            });
        }
    }
}

enum DrainStep {
    /// Nothing to do now (woken when a batch arrives).
    Idle,
    /// A batch waits in channel `c`.
    Ready(usize),
    /// This backup was replaced or promoted.
    Gone,
}

impl<T: Data> BackupActor<T> {
    fn look(&self, cx: &mut TaskContext<'_>) -> DrainStep {
        let slot = lock(&self.group.slot);
        let Some(inputs) = slot.as_ref().filter(|i| i.generation == self.generation) else {
            return DrainStep::Gone;
        };
        inputs.waker.register(cx.waker());
        match inputs.receivers.iter().position(|r| r.queued() > 0) {
            Some(c) => DrainStep::Ready(c),
            None => DrainStep::Idle,
        }
    }

    /// Takes one event of channel `c` into the queue (under the slot's lock, so a promotion
    /// sees every batch either in the queue or still in the channel).
    fn take(&self, c: usize) {
        let mut slot = lock(&self.group.slot);
        let Some(inputs) = slot.as_mut().filter(|i| i.generation == self.generation) else {
            return;
        };
        match inputs.receivers[c].try_recv_at() {
            Some((seq, Event::Batch(batch))) => {
                let payload = match batch {
                    crate::channel::Batch::Shared(a) => a,
                    crate::channel::Batch::Owned(v) => StdArc::new(v),
                };
                let records = payload.len() as u64;
                let bytes = records * std::mem::size_of::<T>().max(1) as u64;
                self.group
                    .queue
                    .offer((c as u32, seq), payload, records, bytes);
            }
            // Kept for a promotion's replay: a watermark only the backup saw must not be
            // lost (an input says it is idle once).
            Some((at, Event::Watermark(w))) => self.group.queue.offer_mark(c as u32, at, w),
            Some((_, Event::EndOfInput)) => inputs.ended[c] = true,
            Some((_, Event::Barrier(_))) | None => {}
        }
    }
}

struct Drain;

/// Entries of the primary's hand-offs applied per poll of the backup actor.
const APPLY_BUDGET: usize = 16_384;

impl<T: Data> ActorFuture<BackupActor<T>> for Drain {
    type Output = ();

    fn poll(
        self: Pin<&mut Self>,
        act: &mut BackupActor<T>,
        ctx: &mut Context<BackupActor<T>>,
        task: &mut TaskContext<'_>,
    ) -> Poll<()> {
        // The primary's hand-offs are applied to the queue's image here, off its thread, a
        // part at a time so that heartbeats are answered between two parts, and after the
        // batches waiting: applying first, a large handoff kept the backup's channels full
        // (64 batches taken per part applied), and so the upstream and the primary waiting.
        // Not woken for a part it could not apply now (a checkpoint holds the image, or its
        // writer applies): the next batch wakes it, and a promotion or a checkpoint applies
        // what they need themselves.
        for _ in 0..64 {
            match act.look(task) {
                DrainStep::Idle => {
                    if act.group.queue.image().apply(APPLY_BUDGET) {
                        task.waker().wake_by_ref();
                    }
                    return Poll::Pending;
                }
                DrainStep::Gone => {
                    act.stopped = true;
                    ctx.stop();
                    return Poll::Ready(());
                }
                DrainStep::Ready(c) => {
                    // Injected faults (tests) count the backup's batches; they run outside
                    // the lock, as a real hang would not hold it.
                    if let Some(probe) = act.fault.as_mut() {
                        let hit = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            probe.before_batch(1)
                        }));
                        if hit.is_err() {
                            tracing::warn!(uid = %act.group.uid, subtask = act.group.subtask, "backup failed");
                            ctx.stop();
                            return Poll::Ready(());
                        }
                    }
                    act.take(c);
                }
            }
        }
        // More batches wait: a smaller part of the handoffs meanwhile, so they are applied
        // however busy the channels are.
        act.group.queue.image().apply(APPLY_BUDGET / 4);
        task.waker().wake_by_ref();
        Poll::Pending
    }
}
