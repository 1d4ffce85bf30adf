//! The job's controller: one per job, on the job's thread, driving the job through typed
//! states (`states`: `Deploying`, `Running`, `FailingOver`, `Recovering`, `Stopping`,
//! `Finished`) until it ends.
//!
//! The controller is the only owner of a job's state. It owns the deployment (`deployment`:
//! arbiters, subtask actors, backup slots) and the job-wide context every state works in
//! ([`JobContext`]): the graph and plan, the settings, the channel on which subtasks report
//! ([`JobEvent`]), the command channel from outside ([`command`]: every change to a job —
//! settings, operator config, rescale, replacement, savepoint, rate, cancel — is a command it
//! answers, one at a time), and the protocols it drives, each a plain struct in a module named
//! for it and tested without actors: checkpoint coordination (`checkpoint::coordinator`),
//! failure detection (`detector`) and promotion (`backup`), the restart strategy (`restart`),
//! savepoint requests (`savepoint`) and metrics sampling with rate control (`sampler`). What
//! the outside reads (status, subtasks, metrics, checkpoint statistics, settings, vertices) it
//! publishes as one immutable [`JobView`] (`view`), which it alone writes.
//!
//! It does not plan (`plan`), run operators (`task`, `operator`) or hand out the job's
//! handle (`job`).

pub(crate) mod command;
pub(crate) mod deployment;
mod failures;
mod result;
mod states;
pub(crate) mod view;

use std::path::PathBuf;
use std::sync::mpsc as std_mpsc;
use std::time::Instant;

use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender};

use crate::checkpoint::coordinator::Failed;
use crate::checkpoint::coordinator::{CheckpointStats, Coordinator};
use crate::config::EnvConfig;
use crate::error::JobError;
use crate::event::JobEvent;
use crate::failure::{FailureClass, Warnings};
use crate::graph::Graph;
use crate::plan::{OperatorRegistry, Plan};
use crate::restart::{RestartStrategy, RestartTracker};
use crate::sampler::RateController;

pub(crate) use command::{
    Command, CommandInbox, Commands, ConfigureRequest, ReplaceRequest, RescaleRequest,
    RescaleTarget, SettingsRequest,
};
pub use result::{JobResult, OperatorResult};

use deployment::Deployment;
use states::{Deploying, JobState};
pub(crate) use view::{JobView, ViewWriter, Views};

/// A job's status as Flink names it (`/jobs/{id}` `state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum JobStatus {
    /// Being deployed for the first time.
    #[default]
    Initializing,
    /// Running (including while a backup takes over).
    Running,
    /// Waiting to restart after a failure.
    Restarting,
    /// Cancelled, stopping its subtasks.
    Cancelling,
    /// Ended: every subtask finished (or stopped after a savepoint).
    Finished,
    /// Ended by a cancel.
    Canceled,
    /// Ended by a failure it could not recover from.
    Failed,
}

impl JobStatus {
    /// Flink's name of the status (`RUNNING`, `FINISHED`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Initializing => "INITIALIZING",
            JobStatus::Running => "RUNNING",
            JobStatus::Restarting => "RESTARTING",
            JobStatus::Cancelling => "CANCELLING",
            JobStatus::Finished => "FINISHED",
            JobStatus::Canceled => "CANCELED",
            JobStatus::Failed => "FAILED",
        }
    }

    /// Whether the job has ended.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobStatus::Finished | JobStatus::Canceled | JobStatus::Failed
        )
    }
}

impl ViewWriter {
    /// Publishes a new deployment's subtasks and backup groups.
    fn publish_deployment(&self, dep: &Deployment) {
        self.update(|v| {
            v.actors = dep.actors.clone();
            v.backups = dep.backups.iter().map(|b| b.group.clone()).collect();
        });
    }
}

/// Everything a controller starts with.
pub(crate) struct Launch {
    pub(crate) graph: Graph,
    pub(crate) plan: Plan,
    pub(crate) cfg: EnvConfig,
    pub(crate) job: String,
    pub(crate) commands: CommandInbox,
    /// Told once the first deployment is up (dropped unsent if it never is).
    pub(crate) deployed: std_mpsc::Sender<()>,
    /// The controller's end of what the outside reads.
    pub(crate) views: ViewWriter,
    /// The object store checkpoints go to, when the checkpoint directory is a URL.
    pub(crate) remote: Option<std::sync::Arc<crate::checkpoint::remote::Remote>>,
}

/// The job-wide context every state works in.
pub(crate) struct JobContext {
    pub(crate) job: String,
    pub(crate) graph: Graph,
    pub(crate) plan: Plan,
    pub(crate) cfg: EnvConfig,
    pub(crate) registry: OperatorRegistry,
    /// Subtasks report here; the controller keeps a sender for the actors it starts.
    pub(crate) events_tx: UnboundedSender<JobEvent>,
    pub(crate) events: UnboundedReceiver<JobEvent>,
    pub(crate) commands: CommandInbox,
    /// What the outside reads: the controller is its only writer.
    pub(crate) views: ViewWriter,
    /// The settings when the last checkpoint completed (what a rollback returns to).
    pub(crate) good_settings: std::collections::BTreeMap<String, String>,
    deployed: Option<std_mpsc::Sender<()>>,
    /// This run's checkpoint directory: a new run restores another run's checkpoints only
    /// when asked to (`restore_from`, `restore_latest`). With checkpoints on an object store,
    /// the local copy (see [`crate::checkpoint::remote`]).
    pub(crate) checkpoint_root: PathBuf,
    /// The object store checkpoints also go to (the checkpoint directory is a URL).
    pub(crate) remote: Option<std::sync::Arc<crate::checkpoint::remote::Remote>>,
    /// What the job started from (a savepoint, or an earlier run's checkpoint): restored
    /// again by a restart before this run's own first checkpoint.
    pub(crate) initial_restore: Option<crate::plan::Restore>,
    /// Run directories of earlier runs this run resumed from ([`crate::RestoreLatest`]):
    /// deleted once this run completed a checkpoint of its own, or finished.
    pub(crate) claimed_runs: Vec<PathBuf>,
    pub(crate) coordinator: Coordinator,
    pub(crate) restarts: RestartTracker,
    pub(crate) rate: Option<RateController>,
    pub(crate) started: Instant,
    /// Which deployment (0, then +1 per restart): events of older ones are ignored.
    pub(crate) attempt: u64,
    pub(crate) num_restarts: u64,
    /// A buffer queue of an earlier deployment degraded.
    pub(crate) degraded_before: bool,
    /// Positions of panics, for recurrence, and the failure history.
    pub(crate) failures: failures::FailureLog,
    /// The stderr warnings.
    pub(crate) warnings: Warnings,
    /// Per node: it follows the job's default parallelism (a job-wide rescale changes it).
    pub(crate) follows_default: Vec<bool>,
    /// The old graph while a new one is on probation (until its first checkpoint).
    pub(crate) probation: Option<Box<states::Probation>>,
}

impl JobContext {
    fn new(launch: Launch) -> Self {
        let Launch {
            graph,
            plan,
            cfg,
            job,
            commands,
            deployed,
            views,
            remote,
        } = launch;
        let (events_tx, events) = futures::channel::mpsc::unbounded();
        let strategy = cfg.restart.clone().unwrap_or_else(|| {
            if cfg.checkpoint.interval.is_some() {
                RestartStrategy::default_with_checkpoints()
            } else {
                RestartStrategy::None
            }
        });
        let registry = OperatorRegistry::new(
            &plan,
            cfg.max_parallelism,
            crate::plan::LiveConfig::default(),
            crate::partition::AdaptBatches::new(&cfg),
        );
        registry.observe_load(&graph.by_load);
        let ctx = JobContext {
            registry,
            checkpoint_root: remote
                .as_ref()
                .map_or(cfg.checkpoint.directory.as_path(), |r| r.local())
                .join(&job)
                .join(run_id()),
            remote,
            initial_restore: None,
            claimed_runs: Vec::new(),
            coordinator: Coordinator::new(&cfg.checkpoint, 0, 1),
            restarts: RestartTracker::new(strategy),
            rate: RateController::new(cfg.rate_control.clone()),
            started: Instant::now(),
            attempt: 0,
            num_restarts: 0,
            degraded_before: false,
            failures: failures::FailureLog::default(),
            warnings: Warnings::new(&job, cfg.stderr_warnings),
            good_settings: views.load().settings.clone(),
            probation: None,
            follows_default: graph
                .nodes
                .iter()
                .map(|n| n.parallelism.is_none())
                .collect(),
            deployed: Some(deployed),
            job,
            graph,
            plan,
            cfg,
            events_tx,
            events,
            commands,
            views,
        };
        if ctx.cfg.checkpoint.interval.is_some() {
            // With checkpoints on there are statistics from the start, zero or not: a job
            // too short for its first checkpoint reports `Some` with none completed.
            ctx.publish_stats();
        }
        ctx
    }

    /// Deletes the earlier runs' directories this run resumed from: it no longer needs them
    /// (it has a checkpoint of its own, or it finished).
    pub(crate) fn release_claimed_runs(&mut self) {
        if self.claimed_runs.is_empty() {
            return;
        }
        // What the job started from is its fall-back while none of its own checkpoints reads
        // back: its incremental states reference runs about to go, so they are read now.
        if let Some(r) = self.initial_restore.as_mut() {
            // Its run goes: no older checkpoint there stands in for it any more.
            r.older = None;
            for (key, chain) in std::mem::take(&mut r.chains) {
                match chain.payload() {
                    Ok(p) => {
                        r.states.insert(key, p);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot read the state the job started from before its run goes: no fall-back to it");
                        self.initial_restore = None;
                        break;
                    }
                }
            }
        }
        for run in self.claimed_runs.drain(..) {
            if run == self.checkpoint_root {
                continue;
            }
            if let Some(remote) = &self.remote {
                remote.delete_later(vec![run.clone()]);
            }
            match std::fs::remove_dir_all(&run) {
                Ok(()) => {
                    tracing::info!(run = %run.display(), "deleted the checkpoints of an earlier run this run resumed from")
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(run = %run.display(), error = %e, "cannot delete the checkpoints of an earlier run")
                }
            }
        }
    }

    /// Tells the starter that the job is deployed (once; later deployments say nothing).
    fn signal_deployed(&mut self) {
        if let Some(d) = self.deployed.take() {
            let _ = d.send(());
        }
    }

    /// What placing actors needs, borrowed from the context.
    pub(crate) fn placement(&self) -> deployment::Placement<'_> {
        deployment::Placement {
            graph: &self.graph,
            plan: &self.plan,
            cfg: &self.cfg,
            registry: &self.registry,
            events: &self.events_tx,
            checkpoint_root: Some(self.checkpoint_root.clone()),
            remote: self.remote.clone(),
        }
    }

    /// Publishes the coordinator's statistics: with checkpoints on always (zero counts
    /// included), with them off only once there is something to say (a savepoint, a restart).
    pub(crate) fn publish_stats(&self) {
        let stats = &self.coordinator.stats;
        if self.cfg.checkpoint.interval.is_none()
            && self.num_restarts == 0
            && *stats == CheckpointStats::default()
        {
            return;
        }
        self.views.update(|v| v.checkpoints = Some(stats.clone()));
    }

    /// Publishes the job's vertices at their current parallelism.
    pub(crate) fn publish_vertices(&self) {
        let vertices = crate::plan::vertices(&self.graph, &self.plan, self.cfg.max_parallelism);
        self.views.update(|v| v.vertices = vertices);
    }

    /// Publishes a new graph's vertices and operator readings.
    pub(crate) fn publish_graph(&self) {
        let vertices = crate::plan::vertices(&self.graph, &self.plan, self.cfg.max_parallelism);
        let gauges = self.graph.gauges_by_uid(&self.plan.uids);
        self.views.update(|v| {
            v.vertices = vertices;
            v.gauges = gauges;
        });
    }

    /// The error of a subtask that is gone: `reason` says how.
    pub(crate) fn lost(&self, uid: String, subtask: usize, reason: String) -> JobError {
        JobError::SubtaskLost {
            job: self.job.clone(),
            uid,
            subtask,
            reason,
        }
    }

    /// Checkpoint `id` failed because of `why`: counted, logged and told on stderr; the
    /// error of too many failed in a row.
    pub(crate) fn fail_checkpoint(&mut self, id: u64, why: String) -> Result<(), JobError> {
        let tolerated = self.cfg.checkpoint.tolerable_failed_checkpoints;
        let in_a_row = match self.coordinator.fail_one(id, why.clone()) {
            Failed::NotPending => return Ok(()),
            Failed::Tolerated { in_a_row } | Failed::TooMany { in_a_row } => in_a_row,
        };
        tracing::warn!(job = %self.job, checkpoint = id, in_a_row, tolerated, reason = %why, "checkpoint failed");
        self.warnings
            .checkpoint_failed(id, in_a_row, tolerated, &why);
        if in_a_row <= tolerated {
            return Ok(());
        }
        Err(JobError::CheckpointsFailing {
            job: self.job.clone(),
            failures: in_a_row,
            tolerated,
            cause: why,
        })
    }

    /// Classifies the current attempt's failure (a panic may recur at the same position).
    pub(crate) fn classify(&mut self, failure: JobError) -> (JobError, FailureClass) {
        self.failures.classify(
            failure,
            &self.job,
            self.attempt,
            self.num_restarts,
            self.cfg.batch_size as u64,
            (&self.graph, &self.plan, &self.registry),
        )
    }

    /// Adds a failure of the current attempt to the history.
    pub(crate) fn record_failure(
        &self,
        error: &JobError,
        class: FailureClass,
        outcome: crate::failure::FailureOutcome,
    ) {
        let r = failures::record(self.attempt, error, class, outcome);
        self.views.update(|v| v.failures.push(r));
    }

    /// A restarted job runs again: its last restart took from the failure to now.
    fn restarted(&self) {
        let now = crate::metrics::now_ms();
        self.views.update(|v| {
            if let Some(r) = v.failures.last_mut().filter(|r| {
                r.recovery.is_none()
                    && matches!(r.outcome, crate::failure::FailureOutcome::Restarted { .. })
            }) {
                r.recovery = Some(std::time::Duration::from_millis(
                    now.saturating_sub(r.time_ms),
                ));
            }
        });
    }
}

/// Runs the job to its end: the state machine's loop. Each transition is logged at info with
/// the job, the states and the cause.
pub(crate) async fn run(launch: Launch) -> Result<JobResult, JobError> {
    let mut ctx = JobContext::new(launch);
    let mut state: JobState = Deploying::first(&mut ctx);
    loop {
        let t = match state {
            JobState::Deploying(s) => s.run(&mut ctx),
            JobState::Running(s) => s.run(&mut ctx).await,
            JobState::FailingOver(s) => s.run(&mut ctx),
            JobState::Recovering(s) => s.run(&mut ctx).await,
            JobState::Rescaling(s) => s.run(&mut ctx).await,
            JobState::Replacing(s) => s.run(&mut ctx).await,
            JobState::Stopping(s) => s.run(&mut ctx).await,
            JobState::Finished(s) => return s.outcome(),
        };
        tracing::info!(job = %ctx.job, from = t.from(), to = t.to(), cause = %t.cause(), "job state transition");
        if (t.from(), t.to())
            == (
                <Deploying as states::State>::NAME,
                <states::Running as states::State>::NAME,
            )
        {
            ctx.restarted();
        }
        let status = t.next().status();
        ctx.views.update(|v| {
            v.status = status;
            if status.is_terminal() {
                v.ended_ms = Some(crate::metrics::now_ms());
            }
        });
        state = t.into_next();
    }
}

/// A name unique to this run of a job (time, process, sequence).
fn run_id() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let millis = crate::metrics::now_ms();
    let seq = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("run-{millis}-{}-{seq}", std::process::id())
}
