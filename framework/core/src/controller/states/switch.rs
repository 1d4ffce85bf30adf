//! The path every change of the deployment takes once its checkpoint is complete — a rescale
//! (`Rescaling`) and a graph replacement (`Replacing`); a rescale is a replacement that keeps
//! the graph and changes the plan. Every subtask commits the checkpoint (the sinks' commits
//! are awaited: nothing staged before the barrier may be lost when the subtasks stop), the
//! deployment stops, and the job is deployed again from the states the subtasks handed over
//! with the checkpoint: in the new layout, or — if that cannot start — in the old one, from
//! the same states, so nothing is lost or duplicated either way.
//!
//! It does not decide the new layout (the states do, before and after calling it).

use std::collections::HashMap;

use crate::controller::deployment::Deployment;
use crate::controller::JobContext;
use crate::error::JobError;
use crate::plan::Restore;
use crate::task::NotifyComplete;

use super::deploying::deploy_from;
use super::{Finished, Running, Transition, TransitionTo};

/// Commits checkpoint `id` in every subtask of `dep` and stops it; the states handed over
/// with the checkpoint (`payloads`, by uid and subtask) become what the next deployment
/// restores. A failed commit hands the deployment back with the error (the job recovers
/// from its last complete checkpoint, in the layout it had).
pub(super) async fn stop_at(
    ctx: &mut JobContext,
    dep: Deployment,
    id: u64,
    payloads: HashMap<(String, usize), Vec<u8>>,
) -> Result<Restore, (Deployment, JobError)> {
    if let Err(e) = commit_all(ctx, &dep, id).await {
        return Err((dep, e));
    }
    ctx.degraded_before |= dep.degraded();
    dep.stop(&ctx.job, &ctx.cfg);
    Ok(Restore {
        checkpoint: id,
        states: payloads,
        chains: Default::default(),
        parallelism: ctx.plan.parallelism_by_uid().collect(),
        key_groups: ctx.plan.key_groups_by_uid().collect(),
        older: None,
    })
}

/// Deploys the job, as a new attempt, in the layout the context has now, from `restore`.
pub(super) fn deploy(ctx: &mut JobContext, restore: Restore) -> Result<Deployment, JobError> {
    ctx.attempt += 1;
    deploy_from(ctx, Some(restore)).map(|(dep, _)| dep)
}

/// Deploys the job again in its old layout (put back by the caller) from `restore`, after the
/// new one could not start or failed (`why`): `Running` again, or `Finished` if the old
/// layout cannot start either.
pub(super) fn deploy_back<S>(ctx: &mut JobContext, restore: Restore, why: &str) -> Transition
where
    S: TransitionTo<Running> + TransitionTo<Finished>,
{
    ctx.attempt += 1;
    match deploy_from(ctx, Some(restore)) {
        Ok((dep, cause)) => S::to(Running::new(dep, ctx), format!("{why}: {cause}")),
        Err(e) => {
            let cause = e.to_string();
            S::to(Finished::failed(e), cause)
        }
    }
}

/// Tells every subtask that checkpoint `id` is complete and waits for each answer.
async fn commit_all(ctx: &JobContext, dep: &Deployment, id: u64) -> Result<(), JobError> {
    for a in &dep.actors {
        match a.addr.send(NotifyComplete(id)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e.into_job_error(&ctx.job)),
            Err(_) => {
                return Err(ctx.lost(
                    a.uids.first().cloned().unwrap_or_default(),
                    a.subtask,
                    format!("went away before committing checkpoint {id}"),
                ))
            }
        }
    }
    Ok(())
}
