//! `FailingOver`: backed-up primaries failed (panicked, hung, or lost their thread) and their
//! backups take over — the BQBS paper's Algorithm 2, with fencing — while the rest of the job
//! keeps running. Per failed subtask: the backup group fences the old primary and plans the
//! replay (`backup`), the new primary's chain is built (`plan::build_promoted`), checkpoints in
//! flight are aborted (the new primary never saw their barriers), the new primary starts on the
//! backup's arbiter, the old primary's arbiter is stopped, and a fresh backup starts on a new
//! arbiter, so the next failure is as fast as this one. Back to `Running`; to `Recovering`
//! (restart-all) when a promotion is impossible.

use std::time::Instant;

use actix::Arbiter;

use crate::controller::JobContext;
use crate::error::{JobError, TaskError};
use crate::event::SubtaskId;
use crate::task::{AbortCheckpoint, Driver};

use super::running::Failure;
use super::{Recovering, Running, Transition, TransitionTo};

/// A promotion to make.
pub(crate) struct Promote {
    /// The backup slot (index in the deployment's backups).
    pub(crate) slot: usize,
    /// Why the primary is taken for failed.
    pub(crate) why: String,
    /// The job's error if the promotion is impossible.
    pub(crate) fallback: Fallback,
}

/// What a failure becomes when no promotion is possible.
pub(crate) enum Fallback {
    /// The primary reported this error.
    Failed(TaskError),
    /// The primary did not answer heartbeats.
    Hung { uid: String, subtask: usize },
    /// The primary's actor went away without a report.
    Lost {
        uid: String,
        subtask: usize,
        reason: String,
    },
}

impl Fallback {
    fn into_error(self, ctx: &JobContext, impossible: String) -> JobError {
        match self {
            Fallback::Failed(error) => {
                tracing::warn!(reason = %impossible, "promotion impossible: restarting the job");
                error.into_job_error(&ctx.job)
            }
            Fallback::Hung { uid, subtask } => ctx.lost(uid, subtask, impossible),
            Fallback::Lost {
                uid,
                subtask,
                reason,
            } => ctx.lost(
                uid,
                subtask,
                format!("{reason}; promotion impossible: {impossible}"),
            ),
        }
    }
}

/// Backups are being promoted.
pub(crate) struct FailingOver {
    running: Running,
    promotions: Vec<Promote>,
}

impl FailingOver {
    pub(super) fn new(running: Running, promotions: Vec<Promote>) -> Self {
        FailingOver {
            running,
            promotions,
        }
    }

    pub(crate) fn run(self, ctx: &mut JobContext) -> Transition {
        let mut running = self.running;
        let n = self.promotions.len();
        for p in self.promotions {
            if let Err(impossible) = promote(&mut running, ctx, p.slot, &p.why) {
                let cause = format!("promotion impossible: {impossible}");
                let error = p.fallback.into_error(ctx, impossible);
                return Self::to(Recovering::new(running.dep, error), cause);
            }
        }
        Self::to(running, format!("{n} backup(s) promoted"))
    }
}

/// Promotions of one subtask in a row (no checkpoint completed between them, each within
/// [`PROMOTION_QUIET`] of the last) before its failures go to restart-all and the restart
/// strategy: a failure that repeats in every promoted primary (a poison record, a bug in the
/// operator) must not promote backups for ever.
pub(crate) const MAX_PROMOTIONS_IN_A_ROW: u32 = 8;
/// A promoted primary that ran this long without failing starts a new count.
pub(crate) const PROMOTION_QUIET: std::time::Duration = std::time::Duration::from_secs(60);

/// Counts one more promotion of `slot` (a quiet primary starts a new count); `Err` when its
/// primary failed too often in a row.
fn count_promotion(
    slot: &mut crate::controller::deployment::BackupSlot,
    now: Instant,
) -> Result<(), String> {
    if slot
        .last_promotion
        .is_some_and(|t| now.duration_since(t) > PROMOTION_QUIET)
    {
        slot.recent_promotions = 0;
    }
    if slot.recent_promotions >= MAX_PROMOTIONS_IN_A_ROW {
        return Err(format!(
            "its primary failed {} times in a row after a promotion, with no checkpoint completed in between (the failure repeats: the restart strategy decides)",
            slot.recent_promotions + 1
        ));
    }
    slot.recent_promotions += 1;
    slot.last_promotion = Some(now);
    Ok(())
}

/// Promotes the backup of slot `i`. `Err` when no promotion is possible.
fn promote(running: &mut Running, ctx: &mut JobContext, i: usize, why: &str) -> Result<(), String> {
    let started = Instant::now();
    let started_ms = crate::metrics::now_ms();
    count_promotion(&mut running.dep.backups[i], started)?;
    let dep = &mut running.dep;
    let (k, group) = (dep.backups[i].actor, dep.backups[i].group.clone());
    let old = dep.ids[k].clone();
    tracing::warn!(uid = %old.head_uid, subtask = old.subtask, reason = why, "primary failed: promoting its backup");
    let promotion = group.begin_promotion()?;
    let begun = started.elapsed();
    let head = crate::plan::build_promoted(
        &ctx.graph,
        &ctx.plan,
        &ctx.cfg,
        &ctx.registry,
        old.head,
        old.subtask,
        promotion.senders,
        promotion.routed_before,
        promotion.restore,
        promotion.records_before,
    )
    .map_err(|e| format!("cannot build the promoted operator: {e:?}"))?;
    let built = started.elapsed();
    let stale = abort_checkpoints_in_flight(running, ctx, k, &old.head_uid);
    let gate = group.clone().finish_promotion(head, stale);
    // Backed up again or not, a promoted primary's checkpoints stay aligned: what it replays
    // comes from the buffer queue, never from recorded channel state.
    let driver = Driver::inputs(
        vec![gate],
        None,
        crate::task::AlignmentSettings::of(&ctx.cfg.checkpoint),
        old.head_uid.clone(),
    )
    .force_aligned();
    let id = SubtaskId {
        epoch: promotion.epoch,
        ..old.clone()
    };
    let dep = &mut running.dep;
    dep.ids[k] = id.clone();
    let slot = dep.sampler.probes()[k].slot.clone();
    let counters = dep.actors[k].counters.clone();
    let arbiter = dep.backups[i].backup_arbiter;
    dep.actors[k].addr = ctx.placement().start_actor(
        &dep.arbiters[arbiter],
        id,
        driver,
        counters,
        promotion.waker,
        slot,
    );
    let actors = dep.actors.clone();
    ctx.views.update(|v| v.actors = actors);
    swap_arbiters(running, ctx, i);
    let took = started.elapsed();
    group.promoted(took);
    let record = crate::failure::PromotionRecord {
        time_ms: started_ms,
        uid: old.head_uid.clone(),
        subtask: old.subtask,
        cause: why.to_owned(),
        recovery: took,
        batches_replayed: promotion.replayed as u64,
        records_replayed: promotion.replayed_records,
        batches_reprocessed: promotion.reprocessed as u64,
    };
    ctx.views.update(|v| v.promotions.push(record));
    tracing::warn!(uid = %old.head_uid, subtask = old.subtask, epoch = promotion.epoch, reprocessed = promotion.reprocessed, replayed = promotion.replayed, ?took, ?begun, ?built, "backup promoted");
    Ok(())
}

/// Aborts every checkpoint in flight (their savepoints fail) in every other running subtask;
/// returns the newest aborted id, whose barriers the new primary must ignore.
fn abort_checkpoints_in_flight(
    running: &mut Running,
    ctx: &mut JobContext,
    k: usize,
    uid: &str,
) -> u64 {
    let (aborted, newest) = ctx.coordinator.abort_for_failover();
    for id in &aborted {
        running
            .bound
            .fail(ctx, &running.dep, *id, Failure::FailedOver(uid));
        for (a, entry) in running.dep.actors.iter().enumerate() {
            if a != k && !running.dep.finished[a] {
                entry.mail(AbortCheckpoint(*id));
            }
        }
    }
    newest
}

/// The promoted primary of slot `i` runs on its backup's arbiter: the old primary's arbiter
/// stops (a hung thread ends when its function returns) and a fresh backup starts on a new
/// arbiter.
fn swap_arbiters(running: &mut Running, ctx: &JobContext, i: usize) {
    let dep = &mut running.dep;
    let now = Instant::now();
    let b = &mut dep.backups[i];
    let k = b.actor;
    dep.arbiters[b.primary_arbiter].stop();
    b.primary_arbiter = b.backup_arbiter;
    b.heartbeats.new_primary(now);
    dep.silence.seen(k, now);
    dep.arbiters.push(Arbiter::new());
    b.backup_arbiter = dep.arbiters.len() - 1;
    b.backup = b.group.clone().start_backup(
        &dep.arbiters[b.backup_arbiter].handle(),
        ctx.events_tx.clone(),
        ctx.attempt,
        k,
    );
    b.heartbeats.new_backup(now);
}
