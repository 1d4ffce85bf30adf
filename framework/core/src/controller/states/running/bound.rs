//! What waits for a checkpoint in `Running`: savepoints (any number; one may stop the job),
//! and at most one change of the deployment — a rescale or a graph replacement — that
//! happens once its checkpoint completes. Each is bound to one checkpoint id, and every way
//! that checkpoint can fail (declined, timed out, its metadata not durable) goes through one
//! path, [`Bound::fail`]: the savepoints waiting for it are answered, sources paused for it
//! read on, and a change waiting for it is abandoned.
//!
//! It does not trigger checkpoints or copy savepoints (`running`), nor carry out a change
//! (`Rescaling`, `Replacing`).

use crate::controller::deployment::Deployment;
use crate::controller::JobContext;
use crate::savepoint::{SavepointRequest, SavepointRequests};

use super::super::replacing::PendingReplace;
use super::super::rescaling::PendingRescale;

/// A change of the deployment waiting for its checkpoint.
pub(in crate::controller::states) enum Change {
    Rescale(Box<PendingRescale>),
    Replace(Box<PendingReplace>),
}

impl Change {
    /// The checkpoint it waits for.
    fn id(&self) -> u64 {
        match self {
            Change::Rescale(r) => r.id,
            Change::Replace(r) => r.id,
        }
    }

    /// The states subtasks hand over in memory at its checkpoint.
    fn payloads(&mut self) -> &mut std::collections::HashMap<(String, usize), Vec<u8>> {
        match self {
            Change::Rescale(r) => &mut r.payloads,
            Change::Replace(r) => &mut r.payloads,
        }
    }

    /// It will not happen: its caller is told why; the sources read on if `resume`.
    pub(super) fn abandon(self, ctx: &JobContext, dep: &Deployment, why: String, resume: bool) {
        match self {
            Change::Rescale(r) => r.abandon(ctx, dep, why, resume),
            Change::Replace(r) => r.abandon(dep, why, resume),
        }
    }
}

/// How a checkpoint failed, worded for whoever waited for it.
pub(in crate::controller::states) enum Failure<'a> {
    Declined(&'a str),
    TimedOut,
    /// It could not be made durable (its metadata).
    NotDurable(&'a str),
    /// Aborted because this operator (uid) failed over to its backup.
    FailedOver(&'a str),
    /// A newer checkpoint (this one) completed first.
    Subsumed(u64),
}

impl Failure<'_> {
    fn for_savepoint(&self, id: u64) -> String {
        match self {
            Failure::Declined(reason) => format!("savepoint declined: {reason}"),
            Failure::TimedOut => format!("savepoint {id} timed out"),
            Failure::NotDurable(why) => format!("savepoint failed: {why}"),
            Failure::FailedOver(uid) => format!("savepoint {id} aborted: `{uid}` failed over"),
            Failure::Subsumed(by) => format!("savepoint {id} was subsumed by checkpoint {by}"),
        }
    }

    fn for_change(&self, id: u64) -> String {
        match self {
            Failure::Declined(reason) => format!("its checkpoint {id} was declined: {reason}"),
            Failure::TimedOut => format!("its checkpoint {id} timed out"),
            Failure::NotDurable(why) => format!("its checkpoint failed: {why}"),
            Failure::FailedOver(uid) => format!("its checkpoint {id} aborted: `{uid}` failed over"),
            Failure::Subsumed(by) => format!("its checkpoint {id} was subsumed by checkpoint {by}"),
        }
    }
}

/// Everything in `Running` that waits for a checkpoint.
#[derive(Default)]
pub(in crate::controller::states) struct Bound {
    pub(in crate::controller::states) savepoints: SavepointRequests,
    /// The stopping savepoint whose barrier paused the sources (they read on if it fails).
    stop_pause: Option<u64>,
    change: Option<Change>,
}

impl Bound {
    /// Savepoint `request` waits for checkpoint `id` (whose barrier paused the sources if it
    /// stops the job).
    pub(super) fn add_savepoint(&mut self, id: u64, request: SavepointRequest) {
        if request.stop {
            self.stop_pause = Some(id);
        }
        self.savepoints.add(id, request);
    }

    /// `change` waits for its checkpoint.
    pub(super) fn add_change(&mut self, change: Change) {
        self.change = Some(change);
    }

    /// What change waits for its checkpoint, if one does.
    pub(super) fn changing(&self) -> Option<&'static str> {
        match &self.change {
            Some(Change::Rescale(_)) => Some("a rescale is in progress"),
            Some(Change::Replace(_)) => Some("a graph replacement is in progress"),
            None => None,
        }
    }

    /// Whether a rescale waits for its checkpoint.
    pub(super) fn rescaling(&self) -> bool {
        matches!(self.change, Some(Change::Rescale(_)))
    }

    /// Why a rescale or replacement cannot start now, if it cannot.
    pub(super) fn busy(&self, ctx: &JobContext, dep: &Deployment) -> Option<&'static str> {
        match &self.change {
            Some(Change::Rescale(_)) => Some("another rescale is in progress"),
            Some(Change::Replace(_)) => Some("a graph replacement is in progress"),
            None if ctx.probation.is_some() => {
                Some("a new graph is on probation until its first checkpoint")
            }
            None if !self.savepoints.is_empty() => Some("a savepoint is in progress"),
            None if dep.finished.iter().any(|&f| f) => Some("part of the job has already finished"),
            None => None,
        }
    }

    /// Where the states handed over in memory at checkpoint `id` go, if a change waits for it.
    pub(super) fn handed_over(
        &mut self,
        id: u64,
    ) -> Option<&mut std::collections::HashMap<(String, usize), Vec<u8>>> {
        self.change
            .as_mut()
            .filter(|c| c.id() == id)
            .map(Change::payloads)
    }

    /// Checkpoint `id` completed: the change waiting for it, if any (it goes ahead).
    pub(super) fn take_change(&mut self, id: u64) -> Option<Change> {
        if self.change.as_ref().is_some_and(|c| c.id() == id) {
            self.change.take()
        } else {
            None
        }
    }

    /// Checkpoint `id` completed: the savepoint waiting for it, if any (to be copied).
    pub(super) fn take_savepoint(&mut self, id: u64) -> Option<SavepointRequest> {
        self.savepoints.take(id)
    }

    /// Checkpoint `id` will not complete: what waited for it is answered with `failure`,
    /// and sources a stopping savepoint paused read on.
    pub(in crate::controller::states) fn fail(
        &mut self,
        ctx: &JobContext,
        dep: &Deployment,
        id: u64,
        failure: Failure,
    ) {
        self.savepoints.fail(id, || failure.for_savepoint(id));
        self.resume_after_failed_stop(dep, id);
        if let Some(change) = self.take_change(id) {
            change.abandon(ctx, dep, failure.for_change(id), true);
        }
    }

    /// Savepoint `id`'s copy failed: a stopping one lets the sources read on.
    pub(super) fn resume_after_failed_stop(&mut self, dep: &Deployment, id: u64) {
        if self.stop_pause == Some(id) {
            self.stop_pause = None;
            dep.mail_sources(|| crate::task::Resume);
        }
    }

    /// The change will not happen (the job leaves `Running`, or a backup takes over and the
    /// deployment runs on): its caller is told `why`; the sources paused for it read on if
    /// `resume` (the deployment runs on).
    pub(super) fn abandon_change(
        &mut self,
        ctx: &JobContext,
        dep: &Deployment,
        why: String,
        resume: bool,
    ) {
        if let Some(change) = self.change.take() {
            change.abandon(ctx, dep, why, resume);
        }
    }
}
