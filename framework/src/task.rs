//! The subtask actor: one running instance of a chain of operators, with a two-lane mailbox.
//!
//! - **System lane**: the actor's actix mailbox (`Addr`), unbounded for control mail
//!   ([`Ping`], [`Stop`]). actix drains it completely before it polls anything else.
//! - **Data lane**: the bounded input channels (or, for a source, its reader), driven by
//!   [`DataLane`], a future spawned in the actor's context that does **one unit of work** (one
//!   input batch, or one source batch) per poll, then wakes itself and yields. So between any
//!   two batches actix serves the whole system lane: a control mail waits for at most the
//!   batch in progress, whatever is queued on the data lane.
//!
//! Before it takes new input the lane moves every output batch waiting for credit into its
//! channel; while one has no credit the subtask takes no input (backpressure). Partial output
//! batches are flushed when the subtask finds no input (idle) and after `linger` while busy.
//!
//! A subtask reports to its job exactly once: finished, failed (with the operator uid and
//! subtask of the cause), or lost (dropped without either, e.g. its arbiter stopped). This
//! module owns the actor and its loop; operators (`operator`) and channels (`channel`) are
//! elsewhere.

use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures::channel::mpsc::UnboundedSender;
use crate::sync::AtomicWaker;

use crate::error::TaskError;
use crate::metrics::SubtaskCounters;
use crate::operator::connect::{InputSelection, SelectionCell};
use crate::sync::atomic::Ordering;
use crate::sync::Arc;

/// One step of an input gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GateStep {
    /// A batch of this many records was processed.
    Batch(usize),
    /// An in-band marker was processed (one channel ended).
    Marker,
    /// Every channel of this input has ended; the operator was told.
    Ended,
    /// Nothing available now.
    Empty,
}

/// One logical input of a subtask: its channels and the operator they feed.
pub(crate) trait InputGate: Send {
    /// Processes at most one event from one channel (round robin).
    fn try_step(&mut self) -> Result<GateStep, TaskError>;
    fn flush(&mut self);
    fn poll_pending(&mut self, cx: &mut TaskContext<'_>) -> Poll<()>;
    fn is_ended(&self) -> bool;
    /// Batches waiting in this input's channels.
    fn queued(&self) -> usize;
    /// Total capacity of this input's channels, in batches.
    fn capacity(&self) -> usize;
}

/// What one step of a source produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SourceProgress {
    More,
    Ended,
}

/// A source and the chain it feeds.
pub(crate) trait SourceStep: Send {
    /// Reads one batch and pushes it through the chain.
    fn step(&mut self) -> Result<SourceProgress, TaskError>;
    fn flush(&mut self);
    fn poll_pending(&mut self, cx: &mut TaskContext<'_>) -> Poll<()>;
}

/// What drives a subtask.
pub(crate) enum Driver {
    Source(Box<dyn SourceStep>),
    Inputs {
        gates: Vec<Box<dyn InputGate>>,
        selection: Option<Arc<SelectionCell>>,
        /// Round robin over logical inputs.
        next: usize,
    },
}

/// Result of one unit of work.
enum Work {
    /// Did something; more may be ready.
    Progress,
    /// Nothing to do until woken.
    Idle,
    /// All input consumed and end-of-input pushed through the chain.
    Ended,
}

impl Driver {
    fn poll_pending(&mut self, cx: &mut TaskContext<'_>) -> Poll<()> {
        match self {
            Driver::Source(s) => s.poll_pending(cx),
            Driver::Inputs { gates, .. } => {
                let mut ready = true;
                for g in gates.iter_mut() {
                    ready &= g.poll_pending(cx).is_ready();
                }
                if ready {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            }
        }
    }

    fn flush(&mut self) {
        match self {
            Driver::Source(s) => s.flush(),
            Driver::Inputs { gates, .. } => gates.iter_mut().for_each(|g| g.flush()),
        }
    }

    /// Tries each readable input once, in round-robin order.
    fn try_inputs(
        gates: &mut [Box<dyn InputGate>],
        selection: &Option<Arc<SelectionCell>>,
        next: &mut usize,
        counters: &SubtaskCounters,
    ) -> Result<Option<Work>, TaskError> {
        let n = gates.len();
        let selected = selection
            .as_ref()
            .map(|s| s.get())
            .unwrap_or(InputSelection::All);
        for k in 0..n {
            let i = (*next + k) % n;
            if gates[i].is_ended() {
                continue;
            }
            let wanted = match selected {
                InputSelection::All => true,
                InputSelection::First => i == 0 || gates[0].is_ended(),
                InputSelection::Second => i == 1 || gates.get(1).is_none_or(|g| g.is_ended()),
            };
            if !wanted {
                continue;
            }
            match gates[i].try_step()? {
                GateStep::Empty => continue,
                GateStep::Batch(_) => {
                    counters.batches_in.fetch_add(1, Ordering::Relaxed);
                    *next = (i + 1) % n;
                    return Ok(Some(Work::Progress));
                }
                GateStep::Marker => return Ok(Some(Work::Progress)),
                GateStep::Ended => {
                    return Ok(Some(if gates.iter().all(|g| g.is_ended()) {
                        Work::Ended
                    } else {
                        Work::Progress
                    }))
                }
            }
        }
        Ok(None)
    }

    fn step(
        &mut self,
        cx: &mut TaskContext<'_>,
        rx_waker: &AtomicWaker,
        counters: &SubtaskCounters,
    ) -> Result<Work, TaskError> {
        match self {
            Driver::Source(s) => {
                counters.batches_in.fetch_add(1, Ordering::Relaxed);
                Ok(match s.step()? {
                    SourceProgress::More => Work::Progress,
                    SourceProgress::Ended => Work::Ended,
                })
            }
            Driver::Inputs {
                gates,
                selection,
                next,
            } => {
                if let Some(w) = Self::try_inputs(gates, selection, next, counters)? {
                    return Ok(w);
                }
                // Idle: send partial batches now, then sleep until an input arrives. Register
                // before the second look so an arrival in between is not missed.
                gates.iter_mut().for_each(|g| g.flush());
                rx_waker.register(cx.waker());
                if let Some(w) = Self::try_inputs(gates, selection, next, counters)? {
                    return Ok(w);
                }
                Ok(Work::Idle)
            }
        }
    }
}

/// An event a subtask reports to its job.
#[derive(Debug)]
pub(crate) enum JobEvent {
    Finished {
        actor: usize,
    },
    Failed(TaskError),
    Lost {
        uid: String,
        subtask: usize,
        reason: String,
    },
    Cancel,
}

/// Identity of a subtask actor.
#[derive(Debug, Clone)]
pub(crate) struct SubtaskId {
    /// Index of this actor in the job's list.
    pub(crate) actor: usize,
    /// Uid of the chain's first operator.
    pub(crate) head_uid: String,
    pub(crate) subtask: usize,
}

/// The actor of one subtask.
pub(crate) struct SubtaskActor {
    id: SubtaskId,
    driver: Driver,
    draining: bool,
    events: UnboundedSender<JobEvent>,
    counters: Arc<SubtaskCounters>,
    rx_waker: Arc<AtomicWaker>,
    linger: Duration,
    last_flush: Instant,
    reported: bool,
}

impl SubtaskActor {
    pub(crate) fn new(
        id: SubtaskId,
        driver: Driver,
        events: UnboundedSender<JobEvent>,
        counters: Arc<SubtaskCounters>,
        rx_waker: Arc<AtomicWaker>,
        linger: Duration,
    ) -> Self {
        SubtaskActor {
            id,
            driver,
            draining: false,
            events,
            counters,
            rx_waker,
            linger,
            last_flush: Instant::now(),
            reported: false,
        }
    }

    fn report(&mut self, event: JobEvent) {
        self.reported = true;
        // The job may already be gone (it stops listening once it has a verdict).
        let _ = self.events.unbounded_send(event);
    }

    /// One poll of the data lane.
    fn poll_data(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), TaskError>> {
        if self.driver.poll_pending(cx).is_pending() {
            return Poll::Pending;
        }
        if self.draining {
            return Poll::Ready(Ok(()));
        }
        match self.driver.step(cx, &self.rx_waker, &self.counters) {
            Err(e) => Poll::Ready(Err(e)),
            Ok(Work::Idle) => {
                self.last_flush = Instant::now();
                Poll::Pending
            }
            Ok(Work::Progress) => {
                let now = Instant::now();
                if now.duration_since(self.last_flush) >= self.linger {
                    self.driver.flush();
                    self.last_flush = now;
                }
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Ok(Work::Ended) => {
                self.draining = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }
}

impl Actor for SubtaskActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        tracing::debug!(uid = %self.id.head_uid, subtask = self.id.subtask, "subtask started");
        ctx.spawn(DataLane);
    }
}

impl Drop for SubtaskActor {
    fn drop(&mut self) {
        if !self.reported {
            let event = JobEvent::Lost {
                uid: self.id.head_uid.clone(),
                subtask: self.id.subtask,
                reason: "the subtask's actor stopped before its input ended".into(),
            };
            let _ = self.events.unbounded_send(event);
        }
    }
}

/// The data lane of a subtask (see the module doc).
struct DataLane;

impl ActorFuture<SubtaskActor> for DataLane {
    type Output = ();

    fn poll(
        self: Pin<&mut Self>,
        act: &mut SubtaskActor,
        ctx: &mut Context<SubtaskActor>,
        task: &mut TaskContext<'_>,
    ) -> Poll<()> {
        match act.poll_data(task) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(())) => {
                tracing::debug!(uid = %act.id.head_uid, subtask = act.id.subtask, "subtask finished");
                act.report(JobEvent::Finished {
                    actor: act.id.actor,
                });
                ctx.stop();
                Poll::Ready(())
            }
            Poll::Ready(Err(e)) => {
                tracing::warn!(uid = %act.id.head_uid, subtask = act.id.subtask, error = ?e, "subtask failed");
                act.report(JobEvent::Failed(e));
                ctx.stop();
                Poll::Ready(())
            }
        }
    }
}

/// What a subtask says about itself when pinged.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SubtaskStatus {
    /// Uid of the chain's first operator.
    pub head_uid: String,
    /// Subtask index.
    pub subtask: usize,
    /// Input batches processed so far (source: batches read).
    pub batches_processed: u64,
    /// Batches waiting in the data lane now.
    pub input_queued: usize,
    /// Capacity of the data lane, in batches.
    pub input_capacity: usize,
    /// System mails handled so far, this one included.
    pub mails_handled: u64,
}

/// Heartbeat ping: a system mail answered with the subtask's status.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ping;

impl Message for Ping {
    type Result = SubtaskStatus;
}

impl Handler<Ping> for SubtaskActor {
    type Result = MessageResult<Ping>;

    fn handle(&mut self, _msg: Ping, _ctx: &mut Self::Context) -> Self::Result {
        let mails = self.counters.mails_handled.fetch_add(1, Ordering::Relaxed) + 1;
        let (queued, capacity) = match &self.driver {
            Driver::Source(_) => (0, 0),
            Driver::Inputs { gates, .. } => (
                gates.iter().map(|g| g.queued()).sum(),
                gates.iter().map(|g| g.capacity()).sum(),
            ),
        };
        MessageResult(SubtaskStatus {
            head_uid: self.id.head_uid.clone(),
            subtask: self.id.subtask,
            batches_processed: self.counters.batches(),
            input_queued: queued,
            input_capacity: capacity,
            mails_handled: mails,
        })
    }
}

/// Stop now (the job is cancelled or failed elsewhere).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stop;

impl Message for Stop {
    type Result = ();
}

impl Handler<Stop> for SubtaskActor {
    type Result = ();

    fn handle(&mut self, _msg: Stop, ctx: &mut Self::Context) {
        self.counters.mails_handled.fetch_add(1, Ordering::Relaxed);
        self.reported = true;
        ctx.stop();
    }
}
