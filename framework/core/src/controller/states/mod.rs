//! The controller's states, one file each, and the transitions between them.
//!
//! ```text
//!              ┌──────────────── restart ──────────────────┐
//!              ▼                                           │
//!   start ─► Deploying ───► Running ◄──────► FailingOver   │
//!              │           │ │ │ │               │         │
//!              │           │ │ │ └─────────────► ▼         │
//!              │           │ │ └─► Rescaling ─► Recovering ┘
//!              │           │ └───► Replacing ─►    │
//!              │           ▼    (both go back to   │
//!              │        Stopping  Running, and to  │
//!              │           │      Finished)        │
//!              └─────────► Finished ◄──────────────┘
//!
//!  Deploying   → Running       the subtasks are deployed
//!  Deploying   → Deploying     the state of the checkpoint found for it cannot be read:
//!                              from the newest older one of the same run
//!  Deploying   → Finished      the subtasks cannot be built
//!  Running     → FailingOver   a backed-up primary failed, hung or was lost
//!  Running     → Recovering    any other subtask failed, or too many checkpoints did
//!  Running     → Stopping      every subtask finished, a savepoint asked to stop, or a cancel
//!  FailingOver → Running       the backups are promoted
//!  FailingOver → Recovering    a promotion is impossible
//!  Recovering  → Deploying     restart from the last complete checkpoint, after the delay
//!  Recovering  → Finished      the failure is deterministic, the restart strategy gives up,
//!                              or a cancel during the delay
//!  Stopping    → Finished      the deployment has stopped
//!  Running     → Rescaling     a rescale's checkpoint completed
//!  Rescaling   → Running       redeployed at the new parallelism (or rolled back to the old)
//!  Rescaling   → Recovering    a subtask failed committing the rescale's checkpoint
//!  Rescaling   → Finished      neither the new nor the old parallelism could be deployed
//!  Running     → Replacing     a replacement's savepoint completed, or the new graph failed
//!                              on probation (before its first checkpoint)
//!  Replacing   → Running       the new graph runs (on probation), or the old one again
//!  Replacing   → Recovering    a subtask failed committing the savepoint; old graph
//!  Replacing   → Finished      neither graph could be deployed
//! ```
//!
//! A state is a type that implements [`State`]; it runs until it knows where the job goes next
//! and returns a [`Transition`] built by [`TransitionTo::to`], which exists only for the pairs
//! declared below with `impl TransitionTo<B> for A {}`: a forbidden transition does not
//! compile. The loop in `controller` logs each one (job, from, to, cause) and runs the next
//! state. New states (live rescale, fast restart with rollback) are a new file, a variant of
//! [`JobState`] and the `TransitionTo` pairs they allow.

mod deploying;
mod failing_over;
mod finished;
mod recovering;
mod replacing;
mod rescaling;
mod running;
mod stopping;
mod switch;
mod transition;

pub(crate) use deploying::Deploying;
pub(crate) use failing_over::FailingOver;
pub(crate) use finished::Finished;
pub(crate) use recovering::Recovering;
pub(crate) use replacing::{Probation, Replacing};
pub(crate) use rescaling::Rescaling;
pub(crate) use running::Running;
pub(crate) use stopping::Stopping;
pub(crate) use transition::{State, Transition, TransitionTo};

impl TransitionTo<Running> for Deploying {}
impl TransitionTo<Finished> for Deploying {}
impl TransitionTo<Deploying> for Deploying {}
impl TransitionTo<FailingOver> for Running {}
impl TransitionTo<Recovering> for Running {}
impl TransitionTo<Stopping> for Running {}
impl TransitionTo<Running> for FailingOver {}
impl TransitionTo<Recovering> for FailingOver {}
impl TransitionTo<Deploying> for Recovering {}
impl TransitionTo<Finished> for Recovering {}
impl TransitionTo<Finished> for Stopping {}
impl TransitionTo<Recovering> for Stopping {}
impl TransitionTo<Rescaling> for Running {}
impl TransitionTo<Running> for Rescaling {}
impl TransitionTo<Recovering> for Rescaling {}
impl TransitionTo<Finished> for Rescaling {}
impl TransitionTo<Replacing> for Running {}
impl TransitionTo<Running> for Replacing {}
impl TransitionTo<Recovering> for Replacing {}
impl TransitionTo<Finished> for Replacing {}

/// Every state the controller can be in.
pub(crate) enum JobState {
    Deploying(Deploying),
    Running(Running),
    FailingOver(FailingOver),
    Recovering(Recovering),
    Rescaling(Rescaling),
    Replacing(Replacing),
    Stopping(Stopping),
    Finished(Finished),
}

impl JobState {
    /// The job's status in this state.
    pub(crate) fn status(&self) -> crate::controller::JobStatus {
        use crate::controller::JobStatus;
        match self {
            JobState::Deploying(_)
            | JobState::Running(_)
            | JobState::FailingOver(_)
            | JobState::Rescaling(_)
            | JobState::Replacing(_) => JobStatus::Running,
            JobState::Recovering(_) => JobStatus::Restarting,
            JobState::Stopping(s) if s.is_cancel() => JobStatus::Cancelling,
            JobState::Stopping(_) => JobStatus::Running,
            JobState::Finished(f) => f.status(),
        }
    }
}

macro_rules! states {
    ($($s:ident),*) => {$(
        impl From<$s> for JobState {
            fn from(s: $s) -> Self {
                JobState::$s(s)
            }
        }
        impl State for $s {
            const NAME: &'static str = stringify!($s);
        }
    )*};
}

states!(
    Deploying,
    Running,
    FailingOver,
    Recovering,
    Rescaling,
    Replacing,
    Stopping,
    Finished
);
