//! `Deploying`: the job's subtasks are built (restoring a checkpoint or savepoint if there is
//! one) and placed on arbiters. Then `Running`; `Finished` if they cannot be built.

use std::time::Instant;

use crate::checkpoint::{remote, store};
use crate::controller::deployment::{deploy, Deployment};
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

    /// The job's first state: deploying from the savepoint the settings name, or from the
    /// latest checkpoint of an earlier run ([`RestoreLatest`](crate::RestoreLatest)), if any;
    /// finished if what the settings ask for cannot be restored.
    pub(crate) fn first(ctx: &mut JobContext) -> JobState {
        if let Some(latest) = ctx.cfg.checkpoint.restore_latest.clone() {
            return Self::from_latest(ctx, &latest);
        }
        let Some(from) = &ctx.cfg.checkpoint.restore_from else {
            return Deploying::new(None).into();
        };
        let dir = match remote::fetched(from, &ctx.cfg.checkpoint) {
            Ok(dir) => dir,
            Err(e) => {
                return Finished::failed(JobError::Runtime {
                    job: ctx.job.clone(),
                    message: format!("cannot start from savepoint {}: {e}", from.display()),
                })
                .into()
            }
        };
        let dir = &dir;
        match store::load_dir(
            dir,
            &ctx.plan.uids,
            ctx.cfg.checkpoint.allow_non_restored_state,
        ) {
            Ok(loaded) => {
                tracing::info!(savepoint = %dir.display(), checkpoint = loaded.checkpoint, "starting from a savepoint");
                let restore = Restore::loaded(loaded, dir);
                ctx.initial_restore = Some(restore.clone());
                Deploying::new(Some(restore)).into()
            }
            Err(e) => Finished::failed(JobError::Runtime {
                job: ctx.job.clone(),
                message: format!("cannot start from savepoint {}: {e}", dir.display()),
            })
            .into(),
        }
    }

    /// Mirrors the job's earlier runs on the object store at `url` into their local copy
    /// (their `_metadata` files; what is already there is kept, what the store no longer has
    /// is deleted); returns the local directory of the job's runs and the store's listing,
    /// through which the restore fetches the files of the checkpoints it reads.
    fn fetch_latest(
        ctx: &JobContext,
        url: &std::path::Path,
    ) -> Result<(std::path::PathBuf, remote::Listing), store::CheckpointError> {
        let same = ctx
            .remote
            .clone()
            .filter(|r| r.url() == url.to_string_lossy());
        let remote = match same {
            Some(r) => r,
            None => remote::Remote::open(
                url,
                &ctx.cfg.checkpoint.local_directory,
                &ctx.cfg.checkpoint.storage_options,
            )?,
        };
        let local = remote.local().join(&ctx.job);
        let listing = remote.mirror_lazily(&local)?;
        Ok((local, listing))
    }

    /// Deploying from the newest usable checkpoint of the job's earlier runs.
    fn from_latest(ctx: &mut JobContext, latest: &crate::RestoreLatest) -> JobState {
        let mut job_dir = latest.directory().join(&ctx.job);
        let mut listing = None;
        if remote::is_url(latest.directory()) {
            match Self::fetch_latest(ctx, latest.directory()) {
                Ok((local, l)) => (job_dir, listing) = (local, Some(l)),
                Err(source) => return restore_failed(ctx, job_dir, source),
            }
        }
        let uids = &ctx.plan.uids;
        let fetch = |path: &std::path::Path| match &listing {
            Some(l) => l.fetch(path),
            None => store::local(path),
        };
        let allow = ctx.cfg.checkpoint.allow_non_restored_state;
        let scan = match store::find_latest(&job_dir, uids, allow, &fetch) {
            Ok(scan) => scan,
            Err(source) => return restore_failed(ctx, job_dir, source),
        };
        if let Some(l) = &listing {
            let (fetched, listed) = l.counts();
            tracing::info!(url = %latest.directory().display(), local = %job_dir.display(), fetched, listed, "fetched what the restore reads of the job's earlier runs from the object store");
        }
        for (dir, e) in &scan.skipped {
            ctx.warnings.checkpoint_skipped(dir, &e.to_string());
            if let Some(id) = store::checkpoint_id_of(dir) {
                ctx.coordinator.ids_after(id);
            }
        }
        // Claimed: deleted once this run has a checkpoint of its own, or has finished.
        ctx.claimed_runs = scan.runs.clone();
        match scan.latest {
            Some(found) => {
                tracing::info!(checkpoint = found.loaded.checkpoint, dir = %found.dir.display(), skipped = scan.skipped.len(), "resuming from the latest checkpoint of an earlier run");
                let mut restore = Restore::loaded(found.loaded, &found.dir);
                if listing.is_none() {
                    // Older checkpoints of that run may stand in (read locally; from an
                    // object store, only what the scan fetched is here).
                    if let Some(root) = found.dir.parent() {
                        restore = restore.scanned_in(root);
                    }
                }
                ctx.initial_restore = Some(restore.clone());
                Deploying::new(Some(restore)).into()
            }
            None if latest.is_required() => {
                let found = if scan.runs.is_empty() {
                    "no earlier run of the job left a directory there".to_owned()
                } else if scan.skipped.is_empty() {
                    format!(
                        "{} earlier run(s), none with a complete checkpoint",
                        scan.runs.len()
                    )
                } else {
                    let why: Vec<String> = scan
                        .skipped
                        .iter()
                        .map(|(d, e)| format!("{}: {e}", d.display()))
                        .collect();
                    format!(
                        "every complete checkpoint is unreadable ({})",
                        why.join("; ")
                    )
                };
                Finished::failed(JobError::NoCheckpointToRestore {
                    job: ctx.job.clone(),
                    dir: job_dir,
                    found,
                })
                .into()
            }
            None => {
                tracing::warn!(dir = %job_dir.display(), "no usable checkpoint of an earlier run: starting from the beginning");
                ctx.warnings.starting_fresh(&job_dir);
                Deploying::new(None).into()
            }
        }
    }

    pub(crate) fn run(self, ctx: &mut JobContext) -> Transition {
        let mut restore = self.restore;
        if let Some(mut r) = restore.take() {
            // The incremental chains are read here, before anything is built: a checkpoint
            // whose state cannot be read gives way to an older one where there is one.
            // (`deploy_from` does both steps again, as no-ops: it also serves rescales.)
            if let Err(source) = keep_replaying_heads(ctx, &r) {
                let error = JobError::Plan {
                    job: ctx.job.clone(),
                    source,
                };
                let cause = error.to_string();
                return Self::to(Finished::failed(error), cause);
            }
            match fit_restore(ctx, &mut r) {
                Ok(()) => restore = Some(r),
                Err(message) => return Self::unreadable(ctx, r, message),
            }
        }
        match deploy_from(ctx, restore) {
            Ok((dep, cause)) => Self::to(Running::new(dep, ctx), cause),
            Err(e) => {
                let cause = e.to_string();
                Self::to(Finished::failed(e), cause)
            }
        }
    }
}

impl Deploying {
    /// The state of checkpoint `r` could not be read (`why`): the newest older
    /// complete checkpoint of the same run stands in if the checkpoint was found by a scan
    /// (not for a savepoint); else the job fails, naming the checkpoint.
    fn unreadable(ctx: &mut JobContext, r: Restore, why: String) -> Transition {
        let failed = |ctx: &JobContext| {
            let error = JobError::Runtime {
                job: ctx.job.clone(),
                message: format!("cannot restore checkpoint {}: {why}", r.checkpoint),
            };
            let cause = error.to_string();
            Self::to(Finished::failed(error), cause)
        };
        let Some(root) = r.older.as_deref() else {
            return failed(ctx);
        };
        let dir = store::checkpoint_dir(root, r.checkpoint);
        ctx.coordinator.ids_after(r.checkpoint);
        tracing::warn!(checkpoint = r.checkpoint, dir = %dir.display(), error = %why, "checkpoint state unreadable at deployment; trying an older checkpoint");
        ctx.warnings.checkpoint_skipped(&dir, &why);
        match store::load_latest_below(root, &ctx.plan.uids, r.checkpoint) {
            Some(loaded) => {
                let older_dir = store::checkpoint_dir(root, loaded.checkpoint);
                let older = Restore::loaded(loaded, &older_dir).scanned_in(root);
                let cause = format!(
                    "checkpoint {} unreadable; deploying from checkpoint {}",
                    r.checkpoint, older.checkpoint
                );
                if ctx
                    .initial_restore
                    .as_ref()
                    .is_some_and(|i| i.checkpoint == r.checkpoint && i.older == r.older)
                {
                    ctx.initial_restore = Some(older.clone());
                }
                Self::to(Deploying::new(Some(older)), cause)
            }
            None => failed(ctx),
        }
    }
}

/// Builds and places the job's subtasks from `restore` (none: from the start), and resets
/// the checkpoint coordinator for them; the deployment and what to log of it.
pub(super) fn deploy_from(
    ctx: &mut JobContext,
    restore: Option<Restore>,
) -> Result<(Deployment, String), JobError> {
    ctx.cfg.faults.rearm();
    let mut restore = restore;
    if let Some(r) = restore.as_ref() {
        keep_replaying_heads(ctx, r).map_err(|source| JobError::Plan {
            job: ctx.job.clone(),
            source,
        })?;
    }
    if let Some(r) = restore.as_mut() {
        // State taken at another parallelism (before a rescale, or a savepoint) is dealt to
        // the subtasks there are now.
        fit_restore(ctx, r).map_err(|message| JobError::Runtime {
            job: ctx.job.clone(),
            message: format!("cannot restore checkpoint {}: {message}", r.checkpoint),
        })?;
    }
    let specs = instantiate(
        &ctx.graph,
        &ctx.plan,
        &ctx.cfg,
        &ctx.registry,
        restore.as_ref(),
        ctx.attempt,
    )
    .map_err(|e| e.into_job_error(&ctx.job))?;
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
    // Published now: a restarted job that ends before its first tick must not report the
    // statistics of the attempt before (no restore).
    ctx.publish_stats();
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
    Ok((dep, cause))
}

/// Deals the state of every operator whose parallelism changed since `restore` was taken to
/// its subtasks now (`rescale::fit`).
pub(super) fn fit_restore(ctx: &JobContext, restore: &mut Restore) -> Result<(), String> {
    let operators: Vec<(String, crate::key_group::Owners, &crate::rescale::Rule)> = ctx
        .plan
        .uids
        .iter()
        .enumerate()
        .map(|(n, uid)| {
            (
                uid.clone(),
                ctx.plan.owners(n, ctx.cfg.max_parallelism),
                &ctx.graph.nodes[n].rescale,
            )
        })
        .collect();
    let moved = crate::rescale::fit(
        &mut restore.states,
        std::mem::take(&mut restore.chains),
        &restore.parallelism,
        &restore.key_groups,
        &operators,
        &channel_inputs(ctx),
        ctx.cfg.max_parallelism,
    )?;
    if !moved.is_empty() {
        tracing::info!(checkpoint = restore.checkpoint, operators = ?moved, "state dealt to a new parallelism");
    }
    restore.parallelism.extend(ctx.plan.parallelism_by_uid());
    restore.key_groups = ctx.plan.key_groups_by_uid().collect();
    Ok(())
}

/// Re-plans the job if an operator with in-flight data to replay (an unaligned checkpoint's
/// channel state) would now be chained to its input (its parallelism and its input's became
/// equal, or the job's code changed): it heads its chain again, so that its input channels
/// replay the data. Nothing else of the plan changes.
fn keep_replaying_heads(
    ctx: &mut JobContext,
    restore: &Restore,
) -> Result<(), crate::error::PlanError> {
    let plan = &ctx.plan;
    let chained: std::collections::HashSet<String> = restore
        .states
        .iter()
        .filter_map(|((uid, _), payload)| {
            crate::rescale::channels::owner_of(uid).map(|(o, _)| (o, payload))
        })
        // Heads first: decoding a payload to see whether it holds records is for the rare
        // owner that is no longer a head, not for every restore's channel state.
        .filter(|(owner, _)| {
            plan.uids
                .iter()
                .position(|u| u == owner)
                .is_some_and(|n| plan.head_of[n] != n)
        })
        .filter(|(_, payload)| crate::rescale::channels::carries_records(payload))
        .map(|(owner, _)| owner.to_owned())
        .collect();
    if chained.is_empty() {
        return Ok(());
    }
    let mut heads: std::collections::HashSet<String> =
        plan.heads.iter().map(|&h| plan.uids[h].clone()).collect();
    tracing::info!(checkpoint = restore.checkpoint, operators = ?chained, "operators with in-flight data to replay head their chains");
    heads.extend(chained);
    ctx.plan = crate::plan::plan_with_heads(&ctx.graph, &ctx.cfg, &heads)?;
    ctx.registry.resize(&ctx.plan);
    ctx.publish_vertices();
    Ok(())
}

/// Every logical input of the plan's chain heads, as a restore deals its channel state
/// (unaligned checkpoints) to a new parallelism.
fn channel_inputs(ctx: &JobContext) -> Vec<crate::rescale::ChannelInput> {
    use crate::partition::PartitionKind;
    use crate::rescale::{ChannelInput, Dealing};
    let (graph, plan) = (&ctx.graph, &ctx.plan);
    let mut inputs = Vec::new();
    for &h in &plan.heads {
        for input in 0..graph.nodes[h].n_inputs {
            let edges: Vec<_> = graph
                .edges
                .iter()
                .filter(|e| e.to == h && e.input == input)
                .collect();
            let kinds: Vec<PartitionKind> = edges.iter().map(|e| e.partition.kind()).collect();
            let dealing = if crate::plan::keyed_input(graph, h, input).is_some() {
                Dealing::ByKeyGroup
            } else if kinds.contains(&PartitionKind::Broadcast) {
                Dealing::Not("each subtask holds its own copy of broadcast data in flight")
            } else if kinds.contains(&PartitionKind::Hash) {
                Dealing::Not("the input is fed by several edges, some keyed and some not")
            } else if kinds
                .iter()
                .any(|k| matches!(k, PartitionKind::Forward | PartitionKind::Auto))
            {
                Dealing::Forward
            } else {
                Dealing::Any
            };
            inputs.push(ChannelInput {
                owner: plan.uids[h].clone(),
                input,
                dealing,
                upstream: edges.iter().map(|e| plan.uids[e.from].clone()).collect(),
            });
        }
    }
    inputs
}

/// The job cannot start: what it was to restore from (`path`) could not be read.
fn restore_failed(
    ctx: &JobContext,
    path: std::path::PathBuf,
    source: store::CheckpointError,
) -> JobState {
    Finished::failed(JobError::Restore {
        job: ctx.job.clone(),
        path,
        source: Box::new(source),
    })
    .into()
}
