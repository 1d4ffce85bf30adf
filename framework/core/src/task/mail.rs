//! The system lane's mail: what a subtask actor answers between any two batches — pings,
//! metric samples, rate limits, live config, state snapshots, checkpoint triggers,
//! completions and aborts, and stop. Each is a message type and its handler; the controller
//! and the job's handle send them.

use std::time::{Duration, Instant};

use actix::prelude::*;

use crate::checkpoint::coordinator::Taken;
use crate::checkpoint::StateWriter;
use crate::error::TaskError;
use crate::event::JobEvent;
use crate::hooks::{ConfigError, StateError, StateSnapshot};
use crate::operator::{Control, ControlAction, ControlOutcome};
use crate::sync::atomic::Ordering;

use super::{Driver, SubtaskActor, SubtaskStatus};

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
        let (input, _) = self.driver.input_usage();
        let (queued, capacity) = (input.queued, input.capacity);
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

/// Sample the subtask's metrics into its slot (sent by the job every metrics interval).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    pub(crate) sent_at: Instant,
}

impl Message for Sample {
    type Result = ();
}

impl Handler<Sample> for SubtaskActor {
    type Result = ();

    fn handle(&mut self, msg: Sample, _ctx: &mut Self::Context) {
        self.counters.mails_handled.fetch_add(1, Ordering::Relaxed);
        self.take_sample(msg.sent_at.elapsed());
    }
}

/// Set (or lift, with `None`) a source subtask's rate limit, in records per second.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SetRate(pub(crate) Option<f64>);

impl Message for SetRate {
    type Result = ();
}

impl Handler<SetRate> for SubtaskActor {
    type Result = ();

    fn handle(&mut self, msg: SetRate, _ctx: &mut Self::Context) {
        self.counters.mails_handled.fetch_add(1, Ordering::Relaxed);
        if let Driver::Source(s) = &mut self.driver {
            s.set_rate(Instant::now(), msg.0);
            // A shorter wait may now apply: re-evaluate at the next poll.
            self.throttle = None;
        }
    }
}

/// Change a `#[weir(config)]` field of the operator `uid` in this subtask.
#[derive(Debug, Clone)]
pub(crate) struct Configure {
    pub(crate) uid: String,
    pub(crate) key: String,
    pub(crate) value: String,
}

impl Message for Configure {
    type Result = Result<(), ConfigError>;
}

impl Handler<Configure> for SubtaskActor {
    type Result = Result<(), ConfigError>;

    fn handle(&mut self, msg: Configure, _ctx: &mut Self::Context) -> Self::Result {
        self.counters.mails_handled.fetch_add(1, Ordering::Relaxed);
        let mut c = Control {
            uid: &msg.uid,
            action: ControlAction::Configure {
                key: &msg.key,
                value: &msg.value,
            },
            outcome: None,
        };
        self.driver.control(&mut c);
        match c.outcome {
            Some(ControlOutcome::Configured(r)) => {
                if r.is_ok() {
                    tracing::info!(uid = %msg.uid, subtask = self.id.subtask, key = %msg.key, value = %msg.value, "operator reconfigured");
                }
                r
            }
            _ => Err(ConfigError::NoSuchOperator { uid: msg.uid }),
        }
    }
}

/// Snapshot the state of operator `uid` in this subtask (between two batches).
#[derive(Debug, Clone)]
pub(crate) struct SnapshotState {
    pub(crate) uid: String,
}

impl Message for SnapshotState {
    type Result = Result<StateSnapshot, StateError>;
}

impl Handler<SnapshotState> for SubtaskActor {
    type Result = Result<StateSnapshot, StateError>;

    fn handle(&mut self, msg: SnapshotState, _ctx: &mut Self::Context) -> Self::Result {
        self.counters.mails_handled.fetch_add(1, Ordering::Relaxed);
        let mut c = Control {
            uid: &msg.uid,
            action: ControlAction::Snapshot,
            outcome: None,
        };
        self.driver.control(&mut c);
        match c.outcome {
            Some(ControlOutcome::Snapshot(r)) => r,
            _ => Err(StateError::NoSuchOperator { uid: msg.uid }),
        }
    }
}

/// Take checkpoint `id` (sent to source subtasks; the others receive barriers in-band).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TriggerCheckpoint {
    pub(crate) id: u64,
    pub(crate) sent_at: Instant,
    /// The source reads nothing more after this barrier until [`Resume`] (a rescale: the job
    /// is redeployed from this checkpoint, so what it read after would be read again).
    pub(crate) pause: bool,
    /// An unaligned checkpoint: the source's barrier overtakes its waiting output.
    pub(crate) unaligned: bool,
    /// Every subtask also hands its states over in memory (a rescale's or a graph
    /// replacement's checkpoint); the barrier carries it downstream.
    pub(crate) hand_over: bool,
}

impl Message for TriggerCheckpoint {
    type Result = ();
}

impl Handler<TriggerCheckpoint> for SubtaskActor {
    type Result = ();

    fn handle(&mut self, msg: TriggerCheckpoint, _ctx: &mut Self::Context) {
        self.counters.mails_handled.fetch_add(1, Ordering::Relaxed);
        let start_delay = msg.sent_at.elapsed();
        let mut w = StateWriter::new(msg.hand_over);
        w.unaligned = msg.unaligned;
        let r = match &mut self.driver {
            Driver::Source(s) => s.checkpoint(msg.id, &mut w),
            Driver::Inputs { .. } => return,
        };
        match r {
            Ok(()) => {
                self.write_and_ack(msg.id, w, Duration::ZERO, start_delay, Taken::Source);
                if msg.pause {
                    self.paused = true;
                }
            }
            Err(e) => self.decline(msg.id, e),
        }
    }
}

/// A paused source reads again (the rescale it paused for was abandoned).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Resume;

impl Message for Resume {
    type Result = ();
}

impl Handler<Resume> for SubtaskActor {
    type Result = ();

    fn handle(&mut self, _msg: Resume, _ctx: &mut Self::Context) {
        self.counters.mails_handled.fetch_add(1, Ordering::Relaxed);
        self.paused = false;
        if let Some(w) = self.pause_waker.take() {
            w.wake();
        }
    }
}

/// Checkpoint `id` is complete: sinks commit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NotifyComplete(pub(crate) u64);

impl Message for NotifyComplete {
    type Result = Result<(), TaskError>;
}

impl Handler<NotifyComplete> for SubtaskActor {
    type Result = Result<(), TaskError>;

    fn handle(&mut self, msg: NotifyComplete, ctx: &mut Self::Context) -> Self::Result {
        self.counters.mails_handled.fetch_add(1, Ordering::Relaxed);
        match self.driver.notify_complete(msg.0) {
            Ok(()) => Ok(()),
            // The final commit's caller waits for the answer and fails the job.
            Err(e) if msg.0 == crate::checkpoint::FINAL_COMMIT => Err(e),
            Err(e) => {
                // A caller that waits (a rescale) learns it too; the report fails the job.
                let answer = TaskError::Checkpoint {
                    uid: self.id.head_uid.clone(),
                    subtask: self.id.subtask,
                    message: format!("cannot commit checkpoint {}: {e:?}", msg.0),
                };
                self.report(JobEvent::Failed {
                    attempt: self.id.attempt,
                    actor: self.id.actor,
                    epoch: self.id.epoch,
                    error: e,
                });
                ctx.stop();
                Err(answer)
            }
        }
    }
}

/// Checkpoint `id` was aborted because a backed-up subtask failed over.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AbortCheckpoint(pub(crate) u64);

impl Message for AbortCheckpoint {
    type Result = ();
}

impl Handler<AbortCheckpoint> for SubtaskActor {
    type Result = ();

    fn handle(&mut self, msg: AbortCheckpoint, _ctx: &mut Self::Context) {
        self.counters.mails_handled.fetch_add(1, Ordering::Relaxed);
        self.driver.abort_checkpoint(msg.0);
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

/// New alignment settings (checkpoint mode, unaligned), taken between two checkpoints.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SetAlignment(pub(crate) super::driver::AlignmentSettings);

impl Message for SetAlignment {
    type Result = ();
}

impl Handler<SetAlignment> for SubtaskActor {
    type Result = ();

    fn handle(&mut self, msg: SetAlignment, _ctx: &mut Self::Context) {
        self.counters.mails_handled.fetch_add(1, Ordering::Relaxed);
        self.driver.set_alignment(msg.0);
    }
}

/// Whether `value` would be accepted by the `#[weir(config)]` field `key` of operator `uid`
/// (tried on a copy: nothing changes).
#[derive(Debug, Clone)]
pub(crate) struct ValidateConfig {
    pub(crate) uid: String,
    pub(crate) key: String,
    pub(crate) value: String,
}

impl Message for ValidateConfig {
    type Result = Result<(), crate::hooks::ConfigError>;
}

impl Handler<ValidateConfig> for SubtaskActor {
    type Result = Result<(), crate::hooks::ConfigError>;

    fn handle(&mut self, msg: ValidateConfig, _ctx: &mut Self::Context) -> Self::Result {
        self.counters.mails_handled.fetch_add(1, Ordering::Relaxed);
        let mut c = Control {
            uid: &msg.uid,
            action: ControlAction::Validate {
                key: &msg.key,
                value: &msg.value,
            },
            outcome: None,
        };
        self.driver.control(&mut c);
        match c.outcome {
            Some(ControlOutcome::Configured(r)) => r,
            _ => Err(crate::hooks::ConfigError::NoSuchOperator { uid: msg.uid }),
        }
    }
}
