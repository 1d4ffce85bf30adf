//! `Stopping`: the job ends on purpose — every subtask finished (sinks make their final
//! commit), a savepoint asked to stop it, or it was cancelled. The deployment is stopped, the
//! run's checkpoint directory removed (savepoints are elsewhere; a failed run keeps it), and
//! the result built. Then `Finished`.

use crate::controller::deployment::Deployment;
use crate::controller::result::result;
use crate::controller::JobContext;
use crate::error::JobError;

use super::{Finished, Recovering, Transition, TransitionTo};

/// Why the job stops.
pub(crate) enum StopReason {
    /// Every subtask finished.
    Finished,
    /// A savepoint completed that asked to stop the job.
    Savepoint,
    /// Cancelled; the answer goes here once the deployment has stopped.
    Cancelled(crate::controller::command::Reply<()>),
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StopReason::Finished => "every subtask finished",
            StopReason::Savepoint => "stop with a savepoint",
            StopReason::Cancelled(_) => "cancelled",
        })
    }
}

/// The job is stopping.
pub(crate) struct Stopping {
    dep: Deployment,
    reason: StopReason,
}

impl Stopping {
    pub(super) fn new(dep: Deployment, reason: StopReason) -> Self {
        Stopping { dep, reason }
    }

    /// Whether the job stops because it was cancelled.
    pub(super) fn is_cancel(&self) -> bool {
        matches!(self.reason, StopReason::Cancelled(_))
    }

    pub(crate) async fn run(self, ctx: &mut JobContext) -> Transition {
        let Stopping { dep, reason } = self;
        match reason {
            StopReason::Finished => {
                if let Some(id) = dep.gone_before_final_commit() {
                    // Nothing is committed yet: recovered like any other lost subtask.
                    let e = ctx.lost(
                        id.head_uid.clone(),
                        id.subtask,
                        "its actor went away after it finished, before the final commit".into(),
                    );
                    return Self::to(
                        Recovering::new(dep, e),
                        "a subtask went away before the final commit",
                    );
                }
                if let Err(e) = dep.commit_final(&ctx.job).await {
                    dep.stop(&ctx.job, &ctx.cfg);
                    tracing::warn!(error = %e, "final commit failed");
                    let cause = format!("the final commit failed: {e}");
                    return Self::to(Finished::failed(e), cause);
                }
                let backups = dep.backup_report(ctx.degraded_before);
                dep.stop(&ctx.job, &ctx.cfg);
                tracing::info!(elapsed = ?ctx.started.elapsed(), "job finished");
                let mut r = finish(ctx);
                r.backups = backups;
                ctx.publish_stats();
                r.checkpoints = ctx.views.load().checkpoints.clone().map(|mut s| {
                    s.num_restarts = ctx.num_restarts;
                    s
                });
                Self::to(Finished::ok(r), "sinks committed the end of the input")
            }
            StopReason::Savepoint => {
                // What came after the savepoint is not committed: a job started from it
                // produces it again.
                dep.stop(&ctx.job, &ctx.cfg);
                tracing::info!(elapsed = ?ctx.started.elapsed(), "job stopped with a savepoint");
                let mut r = finish(ctx);
                ctx.publish_stats();
                r.checkpoints = ctx.views.load().checkpoints.clone();
                Self::to(Finished::ok(r), "stopped after its savepoint")
            }
            StopReason::Cancelled(reply) => {
                ctx.degraded_before |= dep.degraded();
                dep.stop(&ctx.job, &ctx.cfg);
                let error = JobError::Cancelled {
                    job: ctx.job.clone(),
                };
                tracing::warn!(error = %error, "job failed");
                let _ = reply.send(());
                Self::to(Finished::failed(error), "every subtask stopped")
            }
        }
    }
}

/// The run is over: its checkpoints are of no further use, and the result is built.
fn finish(ctx: &mut JobContext) -> crate::controller::JobResult {
    let _ = std::fs::remove_dir_all(&ctx.checkpoint_root);
    ctx.release_claimed_runs();
    if let Some(remote) = &ctx.remote {
        // The job is over: its run goes from the store before its result is told.
        remote.delete_later(vec![ctx.checkpoint_root.clone()]);
        remote.settle();
    }
    result(
        &ctx.graph,
        &ctx.plan,
        &ctx.registry,
        ctx.job.clone(),
        ctx.started.elapsed(),
    )
}
