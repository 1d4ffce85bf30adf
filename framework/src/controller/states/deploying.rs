//! `Deploying`: the job's subtasks are built (restoring a checkpoint or savepoint if there is
//! one) and placed on arbiters. Then `Running`; `Finished` if they cannot be built.

use std::time::Instant;

use crate::checkpoint::store;
use crate::controller::deployment::deploy;
use crate::controller::JobContext;
use crate::error::JobError;
use crate::plan::{instantiate, Restore};

use super::{Finished, JobState, Running, Transition, TransitionTo};

/// The job is being deployed.
pub(crate) struct Deploying {
    /// The state to start from.
    restore: Option<Restore>,
}

impl Deploying {
    /// A deployment from `restore` (none: from the start).
    pub(super) fn new(restore: Option<Restore>) -> Self {
        Deploying { restore }
    }

    /// The job's first state: deploying from the savepoint the settings name (if any), or
    /// finished if that savepoint cannot be read.
    pub(crate) fn first(ctx: &mut JobContext) -> JobState {
        let Some(dir) = &ctx.cfg.checkpoint.restore_from else {
            return Deploying::new(None).into();
        };
        match store::load_dir(
            dir,
            &ctx.plan.uids,
            &ctx.plan.parallelism,
            ctx.cfg.checkpoint.allow_non_restored_state,
        ) {
            Ok((checkpoint, states)) => {
                tracing::info!(savepoint = %dir.display(), checkpoint, "starting from a savepoint");
                Deploying::new(Some(Restore { checkpoint, states })).into()
            }
            Err(e) => Finished::failed(JobError::Runtime {
                job: ctx.job.clone(),
                message: format!("cannot start from savepoint {}: {e}", dir.display()),
            })
            .into(),
        }
    }

    pub(crate) fn run(self, ctx: &mut JobContext) -> Transition {
        ctx.cfg.faults.rearm();
        let restore = self.restore;
        let specs = match instantiate(
            &ctx.graph,
            &ctx.plan,
            &ctx.cfg,
            &ctx.registry,
            restore.as_ref(),
            ctx.attempt,
        ) {
            Ok(specs) => specs,
            Err(e) => {
                let e = e.into_job_error(&ctx.job);
                let cause = e.to_string();
                return Self::to(Finished::failed(e), cause);
            }
        };
        let restored = restore.as_ref().map(|r| r.checkpoint);
        ctx.failures.deploying(&ctx.graph, &ctx.registry, restored);
        let dep = deploy(&ctx.placement(), specs);
        ctx.views.publish_deployment(&dep);
        ctx.signal_deployed();
        let c = &mut ctx.coordinator;
        c.reset(
            dep.actors.len(),
            restore.as_ref().map_or(1, |r| r.checkpoint + 1),
            Instant::now(),
        );
        if let Some(r) = &restore {
            c.stats.last_restored_checkpoint_id = Some(r.checkpoint);
        }
        c.stats.num_restarts = ctx.num_restarts;
        tracing::info!(
            attempt = ctx.attempt,
            subtasks = dep.actors.len(),
            arbiters = dep.arbiters.len(),
            ?restored,
            "job deployed"
        );
        let cause = match restored {
            Some(id) => format!(
                "{} subtasks deployed from checkpoint {id}",
                dep.actors.len()
            ),
            None => format!("{} subtasks deployed", dep.actors.len()),
        };
        Self::to(Running::new(dep, ctx), cause)
    }
}
