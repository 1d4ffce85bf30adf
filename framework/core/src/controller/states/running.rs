//! `Running`: the deployment is up. The controller serves, in this order of priority, commands
//! from outside, what subtasks report (finished, failed, lost, checkpoint acks), the
//! heartbeats of backed-up subtasks, and its periodic tick (metrics, rate control, hang
//! detection, checkpoint triggers and timeouts). It leaves when every subtask has finished
//! (`Stopping`), a savepoint asked to stop the job (`Stopping`), the job is cancelled
//! (`Stopping`), a backed-up primary failed (`FailingOver`), or any other subtask or too many
//! checkpoints failed (`Recovering`).

use std::ops::ControlFlow::{self, Break, Continue};
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};

use crate::backup::BackupPing;
use crate::checkpoint::coordinator::Completed;
use crate::checkpoint::{remote, store};
use crate::controller::command::Command;
use crate::controller::deployment::Deployment;
use crate::controller::JobContext;
use crate::detector::check_every;
use crate::error::{JobError, TaskError};
use crate::event::JobEvent;
use crate::savepoint::{Completion, SavepointRequest};
use crate::sync::lock;
use crate::task::{NotifyComplete, Ping, Sample, TriggerCheckpoint};

use super::failing_over::{Fallback, Promote};
use super::replacing::{PendingReplace, Replacing};
use super::rescaling::{PendingRescale, Rescaling};

mod bound;
mod settings;

use super::stopping::StopReason;
use super::{FailingOver, Recovering, Stopping, Transition, TransitionTo};
use crate::replace::ReplaceError;
pub(super) use bound::Failure;
use bound::{Bound, Change};
pub(super) use settings::{record, set_rate_control};

/// The job runs its deployment.
pub(crate) struct Running {
    pub(super) dep: Deployment,
    /// Savepoints, and a rescale or replacement, waiting for their checkpoints.
    pub(super) bound: Bound,
    /// Subtasks that have not finished.
    remaining: usize,
    ticks: actix_rt::time::Interval,
    heartbeats: actix_rt::time::Interval,
    /// The settings each checkpoint in progress was triggered under.
    settings_at: std::collections::BTreeMap<u64, std::collections::BTreeMap<String, String>>,
    /// Checkpoints every subtask acknowledged whose `_metadata` is being put on the object
    /// store (complete once it is there), with that `_metadata`.
    storing: std::collections::BTreeMap<u64, (Completed, Vec<u8>)>,
}

/// What a checkpoint is triggered for; its trigger and barriers carry what follows from it.
#[derive(Debug, Clone, Copy)]
enum Purpose {
    /// A checkpoint (periodic or asked for).
    Checkpoint,
    /// A savepoint; one that stops the job pauses the sources after its barrier (the job's
    /// output ends exactly at it).
    Savepoint { stop: bool },
    /// A rescale's or graph replacement's: the sources pause after its barrier, and every
    /// subtask also hands its states over in memory.
    Change,
}

/// Why the job leaves `Running`: every handler returns `ControlFlow<Exit>`, `Continue` to
/// stay, `Break` with where to go.
enum Exit {
    Failed(JobError),
    Promote(Vec<Promote>),
    Stop(StopReason),
    Rescale(Box<PendingRescale>),
    Replace(Box<PendingReplace>),
    /// The new graph on probation must go: back to the old one.
    RollBack(String),
}

/// Goes on after `result`, or leaves the state with its error.
fn failed_with(result: Result<(), JobError>) -> ControlFlow<Exit> {
    match result {
        Ok(()) => Continue(()),
        Err(e) => Break(Exit::Failed(e)),
    }
}

/// What woke the controller.
enum Wake {
    Event(Option<JobEvent>),
    Command(Option<Command>),
    Heartbeat,
    Tick(Instant),
}

impl Running {
    /// Starts running `dep`: the current source rate applies, the tick runs at the shortest
    /// of the metrics, rate-control and checkpoint intervals.
    pub(super) fn new(dep: Deployment, ctx: &JobContext) -> Self {
        if let Some(c) = ctx.rate.as_ref() {
            if c.current.is_some() {
                dep.set_rate(c.current);
            }
        }
        let tick_every = tick_every(ctx);
        let hb_every = check_every(
            dep.backups
                .iter()
                .map(|b| b.group.policy().heartbeat_interval),
        );
        Running {
            remaining: dep.actors.len(),
            bound: Bound::default(),
            ticks: actix_rt::time::interval(tick_every),
            heartbeats: actix_rt::time::interval(hb_every),
            settings_at: Default::default(),
            storing: Default::default(),
            dep,
        }
    }

    pub(crate) async fn run(mut self, ctx: &mut JobContext) -> Transition {
        let exit = loop {
            if let Break(exit) = self.step(ctx).await {
                break exit;
            }
        };
        // A change still waiting for its checkpoint will not happen.
        let rescaling = self.bound.rescaling();
        let why = match &exit {
            Exit::Failed(e) if rescaling => {
                format!("the job failed first ({e}); it recovers at its old parallelism")
            }
            Exit::Failed(e) => format!("the job failed first ({e})"),
            Exit::Promote(_) if rescaling => {
                "a backup took over first; the job runs on at its old parallelism".into()
            }
            Exit::Promote(_) => "a backup took over first".into(),
            _ => "the job is stopping".into(),
        };
        // After a promotion the same deployment runs on: its sources, paused for the change's
        // barrier, read on.
        let resume = matches!(exit, Exit::Promote(_));
        self.bound.abandon_change(ctx, &self.dep, why, resume);
        // The new graph on probation fails: back to the old one, not a restart.
        let exit = match exit {
            Exit::Failed(e) if ctx.probation.is_some() => Exit::RollBack(format!(
                "the new graph failed before its first checkpoint: {e}"
            )),
            exit => exit,
        };
        if let Exit::Stop(reason) = &exit {
            if let Some(fb) = ctx.probation.take() {
                fb.ended(matches!(reason, StopReason::Finished));
            }
        }
        match exit {
            Exit::Replace(pending) => {
                let cause = format!("graph replacement at savepoint {}", pending.id);
                Self::to(
                    Replacing::Forward {
                        dep: self.dep,
                        pending,
                    },
                    cause,
                )
            }
            Exit::RollBack(why) => {
                let cause = why.clone();
                Self::to(Replacing::Back { dep: self.dep, why }, cause)
            }
            Exit::Rescale(pending) => {
                let cause = format!("rescale at checkpoint {}", pending.id);
                Self::to(Rescaling::new(self.dep, *pending), cause)
            }
            // Pending savepoints are dropped with `self`: their callers learn that the job
            // ended before they completed.
            Exit::Failed(e) => {
                let cause = e.to_string();
                Self::to(Recovering::new(self.dep, e), cause)
            }
            Exit::Promote(promotions) => {
                let cause = promotions
                    .iter()
                    .map(|p| p.why.clone())
                    .collect::<Vec<_>>()
                    .join("; ");
                Self::to(FailingOver::new(self, promotions), cause)
            }
            Exit::Stop(reason) => {
                let cause = reason.to_string();
                if let StopReason::Finished = reason {
                    self.bound
                        .savepoints
                        .fail_all("the job finished before the savepoint completed");
                }
                Self::to(Stopping::new(self.dep, reason), cause)
            }
        }
    }

    /// Waits for the next thing to do and does it.
    async fn step(&mut self, ctx: &mut JobContext) -> ControlFlow<Exit> {
        if self.remaining == 0 {
            return Break(Exit::Stop(StopReason::Finished));
        }
        // Commands from outside are control mail: served first, like a subtask's system
        // lane (they are few, so subtask reports are never starved by them).
        let wake = futures::select_biased! {
            c = ctx.commands.next() => Wake::Command(c),
            e = ctx.events.next() => Wake::Event(e),
            _ = self.heartbeats.tick().fuse() => Wake::Heartbeat,
            at = self.ticks.tick().fuse() => Wake::Tick(at.into_std()),
        };
        match wake {
            Wake::Event(Some(e)) => self.on_event(ctx, e),
            Wake::Event(None) => Break(Exit::Failed(JobError::Runtime {
                job: ctx.job.clone(),
                message: "the job's event channel closed".into(),
            })),
            Wake::Command(Some(c)) => self.on_command(ctx, c).await,
            // Every handle is gone: nobody can send commands any more.
            Wake::Command(None) => Continue(()),
            Wake::Heartbeat => self.on_heartbeat(ctx),
            Wake::Tick(at) => self.on_tick(ctx, at),
        }
    }

    fn on_event(&mut self, ctx: &mut JobContext, event: JobEvent) -> ControlFlow<Exit> {
        let dep = &mut self.dep;
        match event {
            JobEvent::Finished {
                attempt,
                actor,
                epoch,
            } if attempt == ctx.attempt && epoch == dep.ids[actor].epoch => {
                self.on_finished(ctx, actor);
                Continue(())
            }
            JobEvent::Failed {
                attempt,
                actor,
                epoch,
                error,
            } if attempt == ctx.attempt && epoch == dep.ids[actor].epoch => {
                self.on_failed(ctx, actor, error)
            }
            JobEvent::Lost {
                attempt,
                actor,
                epoch,
                uid,
                subtask,
                reason,
            } if attempt == ctx.attempt && epoch == dep.ids[actor].epoch => {
                Break(self.on_lost(ctx, actor, uid, subtask, reason))
            }
            JobEvent::BackupLost {
                attempt,
                actor,
                generation,
            } if attempt == ctx.attempt => {
                if let Some(i) = dep.slot_of(actor) {
                    dep.replace_backup(i, Some(generation), &ctx.events_tx, ctx.attempt);
                }
                Continue(())
            }
            JobEvent::Ack {
                attempt,
                id,
                actor,
                payloads,
                part,
            } if attempt == ctx.attempt => self.on_ack(ctx, id, actor, payloads, part),
            JobEvent::MetadataStored {
                attempt,
                id,
                result,
            } if attempt == ctx.attempt => self.on_metadata_stored(ctx, id, result),
            JobEvent::Declined {
                attempt,
                id,
                reason,
            } if attempt == ctx.attempt => {
                self.bound
                    .fail(ctx, &self.dep, id, Failure::Declined(&reason));
                failed_with(ctx.fail_checkpoint(id, format!("declined: {reason}")))
            }
            // Events of an earlier deployment, or of a fenced primary.
            _ => Continue(()),
        }
    }

    /// Subtask `actor` acknowledged checkpoint `id` (with the states it hands over in memory,
    /// if a change waits for it).
    fn on_ack(
        &mut self,
        ctx: &mut JobContext,
        id: u64,
        actor: usize,
        payloads: Vec<(String, Vec<u8>)>,
        part: crate::checkpoint::coordinator::AckPart,
    ) -> ControlFlow<Exit> {
        let subtask = self.dep.ids[actor].subtask;
        if let Some(into) = self.bound.handed_over(id) {
            for (uid, payload) in payloads {
                into.insert((uid, subtask), payload);
            }
        }
        match ctx.coordinator.ack(id, actor, part, Instant::now()) {
            Some(done) => self.on_checkpoint_acked(ctx, done),
            None => Continue(()),
        }
    }

    /// Checkpoint `id`'s `_metadata` was put on the object store (or could not be): written
    /// locally, it makes the checkpoint complete.
    fn on_metadata_stored(
        &mut self,
        ctx: &mut JobContext,
        id: u64,
        result: Result<(), String>,
    ) -> ControlFlow<Exit> {
        let Some((done, bytes)) = self.storing.remove(&id) else {
            return Continue(());
        };
        if !ctx.coordinator.is_pending(id) {
            // It failed meanwhile (timed out, subsumed, aborted by a failover): it stays failed.
            return Continue(());
        }
        let stored = result
            .map_err(|e| format!("cannot put its metadata on the object store: {e}"))
            .and_then(|()| {
                store::write_metadata_bytes(&ctx.checkpoint_root, id, &bytes)
                    .map_err(|e| format!("cannot write its metadata: {e}"))
            });
        match stored {
            Ok(()) => self.on_checkpoint_complete(ctx, done),
            Err(why) => self.on_metadata_failed(ctx, done.id, why),
        }
    }

    /// Subtask `actor` finished (once: a repeated report changes nothing).
    fn on_finished(&mut self, ctx: &mut JobContext, actor: usize) {
        let dep = &mut self.dep;
        if !dep.finished[actor] {
            dep.finished[actor] = true;
            self.remaining -= 1;
            if !dep.sources[actor] {
                // A finished operator could not be restored consistently.
                ctx.coordinator.stop_triggering();
            }
        }
    }

    /// Subtask `actor` went away without a report: its backup takes over, or the job
    /// recovers.
    fn on_lost(
        &self,
        ctx: &JobContext,
        actor: usize,
        uid: String,
        subtask: usize,
        reason: String,
    ) -> Exit {
        match self.dep.slot_of(actor) {
            Some(slot) => Exit::Promote(vec![Promote {
                slot,
                why: reason.clone(),
                fallback: Fallback::Lost {
                    uid,
                    subtask,
                    reason,
                },
            }]),
            None => Exit::Failed(ctx.lost(uid, subtask, reason)),
        }
    }

    /// A subtask failed: its backup takes over, or the job recovers.
    fn on_failed(&self, ctx: &JobContext, actor: usize, error: TaskError) -> ControlFlow<Exit> {
        match self.dep.slot_of(actor) {
            Some(slot) => Break(Exit::Promote(vec![Promote {
                slot,
                why: error.to_string(),
                fallback: Fallback::Failed(error),
            }])),
            None => Break(Exit::Failed(error.into_job_error(&ctx.job))),
        }
    }

    /// Every subtask acked checkpoint `done`: its metadata makes it complete. With an object
    /// store, `_metadata` is put there first, off this thread (`JobEvent::MetadataStored`
    /// goes on), and written locally once it is there: the local copy never holds a complete
    /// checkpoint the store lacks.
    fn on_checkpoint_acked(&mut self, ctx: &mut JobContext, done: Completed) -> ControlFlow<Exit> {
        let root = ctx.checkpoint_root.clone();
        let meta = metadata(&ctx.job, &ctx.plan, &done);
        let failed = |e: store::CheckpointError| format!("cannot write its metadata: {e}");
        let Some(remote) = ctx.remote.clone() else {
            return match store::write_metadata(&root, &meta) {
                Ok(()) => self.on_checkpoint_complete(ctx, done),
                Err(e) => self.on_metadata_failed(ctx, done.id, failed(e)),
            };
        };
        let bytes = match store::metadata_bytes(&root, &meta) {
            Ok(b) => b,
            Err(e) => return self.on_metadata_failed(ctx, done.id, failed(e)),
        };
        let (events, attempt, id) = (ctx.events_tx.clone(), ctx.attempt, done.id);
        let path = store::checkpoint_dir(&root, id).join("_metadata");
        remote.put_then(&path, bytes.clone(), move |result| {
            let result = result.map_err(|e| e.to_string());
            let _ = events.unbounded_send(JobEvent::MetadataStored {
                attempt,
                id,
                result,
            });
        });
        self.storing.insert(id, (done, bytes));
        Continue(())
    }

    /// Checkpoint `id`'s metadata could not be made durable: the checkpoint failed.
    fn on_metadata_failed(
        &mut self,
        ctx: &mut JobContext,
        id: u64,
        why: String,
    ) -> ControlFlow<Exit> {
        self.bound
            .fail(ctx, &self.dep, id, Failure::NotDurable(&why));
        failed_with(ctx.fail_checkpoint(id, why))?;
        ctx.publish_stats();
        Continue(())
    }

    /// Checkpoint `done` is complete (its metadata is durable): subtasks are told (sinks
    /// commit), old checkpoints go, and a savepoint waiting for it is copied.
    fn on_checkpoint_complete(
        &mut self,
        ctx: &mut JobContext,
        done: Completed,
    ) -> ControlFlow<Exit> {
        let root = ctx.checkpoint_root.clone();
        for subsumed in ctx.coordinator.complete(&done, Instant::now()) {
            // What waited for an older checkpoint learns it will not complete.
            self.bound
                .fail(ctx, &self.dep, subsumed, Failure::Subsumed(done.id));
        }
        ctx.cfg.faults.checkpoint_completed();
        // Promoted primaries made progress: their failures count from zero again.
        for slot in &mut self.dep.backups {
            slot.recent_promotions = 0;
        }
        // A rollback returns to the settings the last completed checkpoint was taken under.
        if let Some(settings) = self.settings_at.remove(&done.id) {
            ctx.good_settings = settings;
        }
        self.settings_at = self.settings_at.split_off(&done.id);
        tracing::info!(checkpoint = done.id, duration = ?done.duration, size = done.size, "checkpoint complete");
        let deleted = store::retain(&root, ctx.cfg.checkpoint.retained);
        if let Some(remote) = &ctx.remote {
            remote.delete_later(deleted);
        }
        ctx.release_claimed_runs();
        if ctx
            .probation
            .as_ref()
            .is_some_and(|fb| done.id > fb.from_checkpoint)
        {
            if let Some(fb) = ctx.probation.take() {
                fb.commit(Some(done.id));
            }
        }
        if let Some(change) = self.bound.take_change(done.id) {
            // The change tells the subtasks itself, and waits for their commits.
            ctx.publish_stats();
            return Break(match change {
                Change::Rescale(pending) => Exit::Rescale(pending),
                Change::Replace(pending) => Exit::Replace(pending),
            });
        }
        for a in &self.dep.actors {
            a.mail(NotifyComplete(done.id));
        }
        let copied = match self.bound.take_savepoint(done.id) {
            Some(sp) => self.copy_savepoint(ctx, done.id, sp),
            None => Continue(()),
        };
        ctx.publish_stats();
        copied
    }

    /// Copies checkpoint `id` to the savepoint `sp` asks for, and answers its caller. On
    /// this thread (see the book's "State backends and checkpoint storage": a copy on a
    /// thread of its own let a stop-with-savepoint lose records, not yet understood). A
    /// stopping savepoint whose copy fails lets the sources read on.
    fn copy_savepoint(
        &mut self,
        ctx: &JobContext,
        id: u64,
        sp: SavepointRequest,
    ) -> ControlFlow<Exit> {
        let copied = remote::save_to(&ctx.checkpoint_root, id, &sp.dir, &ctx.cfg.checkpoint)
            .map_err(|e| e.to_string());
        match crate::savepoint::answer(sp, copied) {
            Completion::Done { stop: true } => Break(Exit::Stop(StopReason::Savepoint)),
            Completion::Done { stop: false } => Continue(()),
            Completion::Failed => {
                self.bound.resume_after_failed_stop(&self.dep, id);
                Continue(())
            }
        }
    }

    async fn on_command(&mut self, ctx: &mut JobContext, command: Command) -> ControlFlow<Exit> {
        match command {
            Command::Cancel(reply) => Break(Exit::Stop(StopReason::Cancelled(reply))),
            Command::Savepoint(request) => {
                self.trigger_savepoint(ctx, request);
                Continue(())
            }
            Command::TriggerCheckpoint(reply) => {
                if let Some(why) = self.bound.changing() {
                    // A newer checkpoint completing first would subsume the change's.
                    let _ = reply.send(Err(format!(
                        "no checkpoint is triggered while {why}; ask again once it is done"
                    )));
                    return Continue(());
                }
                let now = Instant::now();
                let id = ctx.coordinator.trigger_checkpoint(now);
                tracing::info!(checkpoint = id, "triggering a checkpoint on request");
                self.trigger(ctx, id, now, Purpose::Checkpoint);
                ctx.publish_stats();
                let _ = reply.send(Ok(id));
                Continue(())
            }
            Command::SetRateControl(config, reply) => {
                set_rate_control(ctx, config);
                self.dep.set_rate(ctx.rate.as_ref().and_then(|c| c.current));
                let _ = reply.send(());
                Continue(())
            }
            Command::Rescale(request) => {
                self.start_rescale(ctx, request);
                Continue(())
            }
            Command::Replace(request) => {
                self.start_replace(ctx, request);
                Continue(())
            }
            Command::Settings(request) => {
                self.on_settings(ctx, request).await;
                Continue(())
            }
            Command::RollbackSettings(reply) => {
                self.on_rollback(ctx, reply).await;
                Continue(())
            }
            Command::Configure(request) => {
                self.on_configure(ctx, request).await;
                Continue(())
            }
        }
    }

    /// Validates a rescale request (a bad one is answered at once, with nothing changed) and
    /// starts its checkpoint: the sources pause after its barrier.
    fn start_rescale(&mut self, ctx: &mut JobContext, request: crate::controller::RescaleRequest) {
        if let Some(why) = self.bound.busy(ctx, &self.dep) {
            let _ = request
                .reply
                .send(Err(crate::rescale::RescaleError::Busy(why.into())));
            return;
        }
        let now = Instant::now();
        match PendingRescale::prepare(ctx, &request.target) {
            Err(e) => {
                tracing::warn!(error = %e, "rescale refused");
                let _ = request.reply.send(Err(e));
            }
            Ok(prepared) if prepared.changes_nothing() => {
                let _ = request.reply.send(Ok(prepared.report(0, now, now)));
            }
            Ok(prepared) => {
                let id = ctx.coordinator.trigger_checkpoint(now);
                tracing::info!(checkpoint = id, changes = ?prepared.changes, "rescale: triggering its checkpoint");
                self.trigger(ctx, id, now, Purpose::Change);
                ctx.publish_stats();
                ctx.views.update(|v| v.rescales.in_progress = Some(id));
                let pending = prepared.start(id, request.reply, now);
                self.bound.add_change(Change::Rescale(Box::new(pending)));
            }
        }
    }

    /// Starts checkpoint `id` at the sources (pausing them after its barrier if `pause`),
    /// remembering the settings it was triggered under (what a rollback returns to).
    fn trigger(&mut self, ctx: &JobContext, id: u64, now: Instant, purpose: Purpose) {
        self.settings_at
            .insert(id, ctx.views.load().settings.clone());
        let cp = &ctx.cfg.checkpoint;
        let unaligned = cp.unaligned && cp.mode == crate::checkpoint::CheckpointMode::ExactlyOnce;
        let (pause, hand_over) = match purpose {
            Purpose::Checkpoint => (false, false),
            Purpose::Savepoint { stop } => (stop, false),
            Purpose::Change => (true, true),
        };
        self.dep.mail_sources(|| TriggerCheckpoint {
            id,
            sent_at: now,
            pause,
            unaligned,
            hand_over,
        });
    }

    /// Validates a graph replacement (a bad one is answered at once, nothing changed) and
    /// starts its savepoint: the sources pause after its barrier.
    fn start_replace(&mut self, ctx: &mut JobContext, request: crate::controller::ReplaceRequest) {
        if let Some(why) = self.bound.busy(ctx, &self.dep) {
            let _ = request.reply.send(Err(ReplaceError::Busy(why.into())));
            return;
        }
        let now = Instant::now();
        match PendingReplace::prepare(ctx, request.graph, request.options) {
            Err(e) => {
                tracing::warn!(error = %e, "graph replacement refused");
                let _ = request.reply.send(Err(e));
            }
            Ok(prepared) => {
                let id = ctx.coordinator.trigger_savepoint(now);
                tracing::info!(
                    checkpoint = id,
                    "graph replacement: triggering its savepoint"
                );
                self.trigger(ctx, id, now, Purpose::Change);
                ctx.publish_stats();
                let pending = prepared.start(id, request.reply, now);
                self.bound.add_change(Change::Replace(Box::new(pending)));
            }
        }
    }

    /// Forces a checkpoint for a savepoint request, once its directory is known writable.
    fn trigger_savepoint(&mut self, ctx: &mut JobContext, request: SavepointRequest) {
        if let Err(e) = remote::probe_savepoint_dir(&request.dir, &ctx.cfg.checkpoint) {
            let why = format!(
                "the savepoint directory {} cannot be created or written: {e}",
                request.dir.display()
            );
            tracing::warn!(reason = %why, "savepoint refused");
            ctx.warnings.savepoint_failed(&why);
            let _ = request.reply.send(Err(why));
            return;
        }
        if let Some(why) = self.bound.changing() {
            let why = format!("no savepoint is taken while {why}; ask again once it is done");
            tracing::warn!(reason = %why, "savepoint refused");
            let _ = request.reply.send(Err(why));
            return;
        }
        let now = Instant::now();
        let id = ctx.coordinator.trigger_savepoint(now);
        tracing::info!(checkpoint = id, dir = %request.dir.display(), stop = request.stop, "triggering a savepoint");
        // Stopping: the sources read nothing after the savepoint's barrier, so the job's
        // output ends exactly at the savepoint (a job restored from it repeats nothing).
        self.trigger(ctx, id, now, Purpose::Savepoint { stop: request.stop });
        self.bound.add_savepoint(id, request);
    }

    /// Checks the heartbeats of every backed-up subtask: hung primaries are promoted, hung
    /// backups replaced, pings sent when due.
    fn on_heartbeat(&mut self, ctx: &mut JobContext) -> ControlFlow<Exit> {
        let now = Instant::now();
        let mut promotions = Vec::new();
        for i in 0..self.dep.backups.len() {
            let k = self.dep.backups[i].actor;
            let running = !self.dep.finished[k];
            let slot = &mut self.dep.backups[i];
            let verdict = slot.heartbeats.check(now, running);
            if verdict.primary_hung {
                let id = &self.dep.ids[k];
                promotions.push(Promote {
                    slot: i,
                    why: format!(
                        "no heartbeat answer for {:?} (hung)",
                        slot.heartbeats.timeout()
                    ),
                    fallback: Fallback::Hung {
                        uid: id.head_uid.clone(),
                        subtask: id.subtask,
                    },
                });
                continue;
            }
            if verdict.ping && running {
                let (addr, seen) = (
                    self.dep.actors[k].addr.clone(),
                    slot.heartbeats.primary.clone(),
                );
                actix_rt::spawn(async move {
                    if addr.send(Ping).await.is_ok() {
                        seen.answered(Instant::now());
                    }
                });
            }
            if verdict.backup_hung {
                self.dep
                    .replace_backup(i, None, &ctx.events_tx, ctx.attempt);
                continue;
            }
            if verdict.ping {
                let (addr, seen) = (slot.backup.clone(), slot.heartbeats.backup.clone());
                actix_rt::spawn(async move {
                    if addr.send(BackupPing).await.is_ok() {
                        seen.answered(Instant::now());
                    }
                });
            }
        }
        if promotions.is_empty() {
            Continue(())
        } else {
            Break(Exit::Promote(promotions))
        }
    }

    /// The periodic tick scheduled for `at`.
    fn on_tick(&mut self, ctx: &mut JobContext, at: Instant) -> ControlFlow<Exit> {
        self.sample(ctx, at)?;
        let now = Instant::now();
        if ctx.probation.as_ref().is_some_and(|fb| now >= fb.deadline) {
            if ctx.cfg.checkpoint.interval.is_some() {
                return Break(Exit::RollBack(
                    "the new graph completed no checkpoint within its grace period".into(),
                ));
            }
            // Without periodic checkpoints the grace period is the probation.
            if let Some(fb) = ctx.probation.take() {
                fb.commit(None);
            }
        }
        for (id, why) in ctx.coordinator.timed_out(now) {
            self.bound.fail(ctx, &self.dep, id, Failure::TimedOut);
            failed_with(ctx.fail_checkpoint(id, why))?;
        }
        // While a change waits for its checkpoint, no other starts (a newer one completing
        // first would subsume it).
        let periodic = self.bound.changing().is_none();
        if let Some(id) = periodic
            .then(|| ctx.coordinator.maybe_trigger(now))
            .flatten()
        {
            tracing::debug!(checkpoint = id, "triggering checkpoint");
            self.trigger(ctx, id, now, Purpose::Checkpoint);
        }
        ctx.publish_stats();
        Continue(())
    }

    /// Metrics from the last samples, the rate controller's update, the job-level hang
    /// check, and the next sampling mail.
    fn sample(&mut self, ctx: &mut JobContext, at: Instant) -> ControlFlow<Exit> {
        let dep = &mut self.dep;
        let now = Instant::now();
        if let Some(m) = dep
            .sampler
            .compute(ctx.rate.as_ref().and_then(|c| c.current))
        {
            if let Some(c) = ctx.rate.as_mut() {
                if c.due(at) {
                    if let Some(rate) = c.update(&m, &dep.sampler, at) {
                        dep.set_rate(Some(rate));
                    }
                }
            }
            ctx.views.update(|v| v.metrics = Some(m));
        }
        for (i, probe) in dep.sampler.probes().iter().enumerate() {
            if let Some(t) = lock(&probe.slot).at {
                dep.silence.seen(i, t);
            }
        }
        let timeout: Duration = ctx.cfg.heartbeat_timeout;
        let probes = dep.sampler.probes();
        let inside = |i: usize| probes[i].counters.in_poll_since_us();
        if let Some(i) = dep.silence.hung(now, timeout, &dep.finished, inside) {
            let probe = &dep.sampler.probes()[i];
            return Break(Exit::Failed(ctx.lost(
                probe.head_uid.clone(),
                probe.subtask,
                format!("no answer to the system lane for {timeout:?} (hung)"),
            )));
        }
        dep.sampler.mark();
        dep.mail_running(|| Sample {
            sent_at: Instant::now(),
        });
        Continue(())
    }
}

/// How often the controller ticks: the shortest of the metrics, rate-control and checkpoint
/// intervals.
fn tick_every(ctx: &JobContext) -> Duration {
    let cfg = &ctx.cfg;
    let mut every = match ctx.rate.as_ref() {
        Some(c) => cfg.metrics_interval.min(c.config.update_interval),
        None => cfg.metrics_interval,
    };
    if let Some(i) = cfg.checkpoint.interval {
        every = every.min(i);
    }
    every
}

/// The metadata that makes checkpoint `done` complete.
fn metadata(job: &str, plan: &crate::plan::Plan, done: &Completed) -> store::CheckpointMetadata {
    use std::collections::BTreeMap;
    let mut states: BTreeMap<String, BTreeMap<usize, String>> = BTreeMap::new();
    for f in &done.files {
        states
            .entry(f.uid.clone())
            .or_default()
            .insert(f.subtask, f.file.clone());
    }
    // Every operator's, so a restore at another parallelism knows what it deals from.
    let parallelism: BTreeMap<String, usize> = plan.parallelism_by_uid().collect();
    store::CheckpointMetadata {
        format_version: store::FORMAT_VERSION,
        checkpoint_id: done.id,
        job: job.to_owned(),
        states,
        parallelism,
        key_groups: plan
            .key_groups_by_uid()
            .map(|(uid, t)| (uid, t.to_vec()))
            .collect(),
        size: done.size,
        runs: done
            .files
            .iter()
            .flat_map(|f| f.runs.iter().cloned())
            .collect(),
        // Computed when written.
        crc32: None,
    }
}
