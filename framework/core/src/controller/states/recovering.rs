//! `Recovering` (restart-all): a failure no backup could take. The deployment is stopped, the
//! failure is classified (`failure`: a deterministic one ends the job with its error) and
//! recorded in the failure history, and the restart strategy decides: after its delay the job is deployed again from the last
//! complete checkpoint of this run (`Deploying`), or it gives up (`Finished` with the error).
//! Commands that arrive during the delay are answered: a cancel ends the job at once, a
//! savepoint is refused (there is nothing running to take it from), a rate change applies to
//! the next deployment.

use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};

use crate::checkpoint::store;
use crate::controller::command::Command;
use crate::controller::deployment::Deployment;
use crate::controller::JobContext;
use crate::error::JobError;
use crate::failure::{FailureClass, FailureOutcome};
use crate::plan::Restore;

use super::running::{record, set_rate_control};
use super::{Deploying, Finished, Transition, TransitionTo};

/// The job is recovering from `failure`.
pub(crate) struct Recovering {
    dep: Deployment,
    failure: JobError,
}

impl Recovering {
    pub(super) fn new(dep: Deployment, failure: JobError) -> Self {
        Recovering { dep, failure }
    }

    pub(crate) async fn run(self, ctx: &mut JobContext) -> Transition {
        let Recovering { dep, failure } = self;
        ctx.degraded_before |= dep.degraded();
        dep.stop(&ctx.job, &ctx.cfg);
        let delay = match decide(ctx, failure) {
            Decision::Restart(delay) => delay,
            Decision::End(error, cause) => return Self::to(Finished::failed(error), cause),
        };
        if let Some(reply) = wait_answering(ctx, delay).await {
            let _ = reply.send(());
            let error = JobError::Cancelled {
                job: ctx.job.clone(),
            };
            return Self::to(Finished::failed(error), "cancelled while recovering");
        }
        // This run's newest readable checkpoint; before it has one, what the job started
        // from (a savepoint, or an earlier run's checkpoint).
        let restore = store::load_latest(&ctx.checkpoint_root, &ctx.plan.uids)
            .map(|loaded| {
                let dir = store::checkpoint_dir(&ctx.checkpoint_root, loaded.checkpoint);
                Restore::loaded(loaded, &dir).scanned_in(&ctx.checkpoint_root)
            })
            .or_else(|| ctx.initial_restore.clone());
        if restore.is_none() {
            tracing::warn!(root = %ctx.checkpoint_root.display(), "no readable complete checkpoint: starting from the beginning");
        }
        let restarts = ctx.num_restarts;
        ctx.views.update(|v| {
            if let Some(s) = v.checkpoints.as_mut() {
                s.num_restarts = restarts;
            }
        });
        let cause = match &restore {
            Some(r) => format!(
                "restart {} from checkpoint {}",
                ctx.num_restarts, r.checkpoint
            ),
            None => format!("restart {} from the start", ctx.num_restarts),
        };
        Self::to(Deploying::new(restore), cause)
    }
}

/// What becomes of a failed job.
enum Decision {
    /// It restarts after the delay.
    Restart(Duration),
    /// It ends with the error, for the reason given.
    End(JobError, &'static str),
}

/// Classifies `failure` and asks the restart strategy: the delay before restarting, or the
/// job's error and why it is not restarted. Either way the failure joins the history; a
/// restart is told on stderr.
fn decide(ctx: &mut JobContext, failure: JobError) -> Decision {
    let (failure, class) = ctx.classify(failure);
    if class == FailureClass::Deterministic {
        tracing::warn!(error = %failure, "job failed deterministically: not restarting");
        ctx.record_failure(&failure, class, FailureOutcome::Failed);
        return Decision::End(failure, "a deterministic failure is not restarted");
    }
    let Some(delay) = ctx.restarts.on_failure(Instant::now()) else {
        tracing::warn!(error = %failure, "job failed");
        ctx.record_failure(&failure, class, FailureOutcome::Failed);
        let error = if ctx.num_restarts > 0 {
            JobError::RestartsExhausted {
                job: ctx.job.clone(),
                restarts: ctx.num_restarts,
                last: Box::new(failure),
            }
        } else {
            failure
        };
        return Decision::End(error, "the restart strategy gives up");
    };
    ctx.record_failure(&failure, class, FailureOutcome::Restarted { delay });
    let budget = ctx.restarts.budget();
    tracing::warn!(error = %failure, restart = %budget, ?delay, "job failed; restarting from the last complete checkpoint");
    ctx.warnings.restarting(&budget, delay, &failure);
    ctx.num_restarts += 1;
    ctx.attempt += 1;
    Decision::Restart(delay)
}

/// Waits `delay`, answering commands meanwhile; a cancel ends the wait and is returned.
async fn wait_answering(
    ctx: &mut JobContext,
    delay: Duration,
) -> Option<crate::controller::command::Reply<()>> {
    let mut sleep = Box::pin(actix_rt::time::sleep(delay).fuse());
    loop {
        let command = futures::select_biased! {
            c = ctx.commands.next() => c,
            _ = sleep => return None,
        };
        match command {
            Some(Command::Cancel(reply)) => return Some(reply),
            Some(Command::Savepoint(request)) => {
                let _ = request.reply.send(Err(
                    "the job is restarting after a failure; no savepoint can be taken now".into(),
                ));
            }
            Some(Command::TriggerCheckpoint(reply)) => {
                let _ = reply.send(Err(
                    "the job is restarting after a failure; no checkpoint can be taken now".into(),
                ));
            }
            Some(Command::Replace(request)) => {
                let _ = request.reply.send(Err(crate::replace::ReplaceError::Busy(
                    "the job is restarting after a failure".into(),
                )));
            }
            Some(Command::Settings(request)) => {
                let why = crate::settings::SettingError::Busy(
                    "the job is restarting after a failure".into(),
                );
                let before = ctx.views.load().settings.clone();
                record(ctx, &before, &request.changes, &request.caller, Some(&why));
                let _ = request.reply.send(Err(why));
            }
            Some(Command::RollbackSettings(reply)) => {
                let _ = reply.send(Err(crate::settings::SettingError::Busy(
                    "the job is restarting after a failure".into(),
                )));
            }
            // No subtask runs: nothing to configure (a restarted one applies what was set).
            Some(Command::Configure(request)) => {
                let _ = request
                    .reply
                    .send(Err(crate::hooks::ConfigError::NoSuchOperator {
                        uid: request.uid,
                    }));
            }
            Some(Command::Rescale(request)) => {
                let _ = request.reply.send(Err(crate::rescale::RescaleError::Busy(
                    "the job is restarting after a failure".into(),
                )));
            }
            Some(Command::SetRateControl(config, reply)) => {
                set_rate_control(ctx, config);
                let _ = reply.send(());
            }
            // No handle is left; the command stream has ended.
            None => {
                sleep.as_mut().await;
                return None;
            }
        }
    }
}
