//! `Replacing`: fast restart with a new graph, and its rollback.
//!
//! A replacement starts in `Running` ([`PendingReplace::prepare`] plans the new graph and
//! checks, before anything stops, that every operator's state has a place in it); a
//! checkpoint whose barrier pauses the sources is taken, its states handed over in memory.
//! Once complete, this state waits for the sinks' commits, stops the old deployment and
//! deploys the new graph from those states (by operator uid, dealt to a new parallelism where
//! one changed), in the same process, REST server and handle. The old graph and the states
//! are kept ([`Probation`]) until the new graph completes its first checkpoint: a failure
//! before that, or no checkpoint within the grace period, rolls back to the old graph from
//! the same states, so nothing is lost or duplicated either way.
//!
//! ```text
//!   Running ──(savepoint complete)──► Replacing::Forward ──► Running (new graph, on probation)
//!   Running (on probation) ──(failure, or no checkpoint in time)──► Replacing::Back ──► Running (old graph)
//! ```

use std::collections::HashMap;
use std::time::Instant;

use crate::controller::command::Reply;
use crate::controller::deployment::Deployment;
use crate::controller::JobContext;
use crate::graph::Graph;
use crate::plan::{OperatorRegistry, Plan, Restore};
use crate::replace::{ReplaceError, ReplaceOptions, ReplaceReport};
use crate::task::Resume;

use super::switch;
use super::{Finished, Recovering, Running, Transition, TransitionTo};

type ReplaceReply = Reply<Result<ReplaceReport, ReplaceError>>;

/// A checked replacement, waiting for (or past) its savepoint.
pub(crate) struct PendingReplace {
    pub(crate) id: u64,
    graph: Box<Graph>,
    plan: Plan,
    options: ReplaceOptions,
    /// Operators of the old graph whose state is dropped.
    dropped: Vec<String>,
    reply: ReplaceReply,
    requested: Instant,
    paused_at: Instant,
    /// The states handed over with the savepoint's acks: (uid, subtask) -> payload.
    pub(crate) payloads: HashMap<(String, usize), Vec<u8>>,
}

/// A checked replacement before its savepoint is triggered.
pub(crate) struct PreparedReplace {
    graph: Box<Graph>,
    plan: Plan,
    options: ReplaceOptions,
    dropped: Vec<String>,
    requested: Instant,
}

/// What the job goes back to while the new graph is on probation.
pub(crate) struct Probation {
    graph: Graph,
    plan: Plan,
    registry: OperatorRegistry,
    follows_default: Vec<bool>,
    restore: Restore,
    /// The new graph must complete a checkpoint by then.
    pub(crate) deadline: Instant,
    /// Checkpoints after this id are the new graph's.
    pub(crate) from_checkpoint: u64,
    reply: ReplaceReply,
    report: ReplaceReport,
}

impl Probation {
    /// The new graph completed checkpoint `id` (or, with checkpoints off, its grace period):
    /// it stays, and the caller is told.
    pub(crate) fn commit(self, id: Option<u64>) {
        let mut report = self.report;
        report.committed_at = id;
        tracing::info!(checkpoint = ?id, "the new graph is committed");
        let _ = self.reply.send(Ok(report));
    }

    /// The job ended while the new graph was on probation.
    pub(crate) fn ended(self, finished: bool) {
        if finished {
            self.commit(None)
        } else {
            let _ = self.reply.send(Err(ReplaceError::JobEnded));
        }
    }
}

impl PendingReplace {
    /// Plans `graph` and checks, before anything stops, that the running job's state fits
    /// it: every stateful operator of the old graph is in the new one (by uid), unless its
    /// state may be dropped, and none whose state belongs to its subtasks changes
    /// parallelism.
    pub(crate) fn prepare(
        ctx: &JobContext,
        graph: Box<Graph>,
        options: ReplaceOptions,
    ) -> Result<PreparedReplace, ReplaceError> {
        let requested = Instant::now();
        let cp = &ctx.cfg.checkpoint;
        if cp.unaligned || cp.aligned_checkpoint_timeout.is_some() {
            return Err(ReplaceError::Unsupported(
                "unaligned checkpoints carry in-flight records per channel of the old graph: a replacement needs aligned checkpoints".into(),
            ));
        }
        let plan =
            crate::plan::plan(&graph, &ctx.cfg).map_err(|e| ReplaceError::Plan(e.to_string()))?;
        let mut dropped = Vec::new();
        for (n, uid) in ctx.plan.uids.iter().enumerate() {
            let rule = &ctx.graph.nodes[n].rescale;
            if *rule == crate::rescale::Rule::Stateless {
                continue;
            }
            match plan.uids.iter().position(|u| u == uid) {
                None if options.allow_dropping_state => dropped.push(uid.clone()),
                None => {
                    return Err(ReplaceError::StateDoesNotFit {
                        uid: uid.clone(),
                        why: "the new graph has no operator with this uid (give it the same `.uid(..)`, or allow dropping its state)".into(),
                    })
                }
                Some(m) if plan.parallelism[m] != ctx.plan.parallelism[n] => {
                    let new_rule = &graph.nodes[m].rescale;
                    if let Some(why) = rule.refusal().or(new_rule.refusal()) {
                        return Err(ReplaceError::StateDoesNotFit {
                            uid: uid.clone(),
                            why: format!(
                                "its parallelism changes from {} to {}, and {why}",
                                ctx.plan.parallelism[n], plan.parallelism[m]
                            ),
                        });
                    }
                }
                Some(_) => {}
            }
        }
        Ok(PreparedReplace {
            graph,
            plan,
            options,
            dropped,
            requested,
        })
    }

    /// The replacement will not happen: its caller is told why, the sources read on.
    pub(crate) fn abandon(self, dep: &Deployment, why: String, resume: bool) {
        tracing::warn!(checkpoint = self.id, reason = %why, "graph replacement abandoned");
        if resume {
            dep.mail_sources(|| Resume);
        }
        let _ = self.reply.send(Err(ReplaceError::Aborted(why)));
    }
}

impl PreparedReplace {
    /// Waits for savepoint `id` (its barrier pauses the sources at `now`).
    pub(crate) fn start(self, id: u64, reply: ReplaceReply, now: Instant) -> PendingReplace {
        PendingReplace {
            id,
            graph: self.graph,
            plan: self.plan,
            options: self.options,
            dropped: self.dropped,
            reply,
            requested: self.requested,
            paused_at: now,
            payloads: HashMap::new(),
        }
    }
}

/// The job switches graphs: forward to a new one, or back to the old.
pub(crate) enum Replacing {
    Forward {
        dep: Deployment,
        pending: Box<PendingReplace>,
    },
    Back {
        dep: Deployment,
        why: String,
    },
}

impl Replacing {
    pub(crate) async fn run(self, ctx: &mut JobContext) -> Transition {
        match self {
            Replacing::Forward { dep, pending } => forward(ctx, dep, *pending).await,
            Replacing::Back { dep, why } => back(ctx, dep, why),
        }
    }
}

async fn forward(ctx: &mut JobContext, dep: Deployment, pending: PendingReplace) -> Transition {
    let PendingReplace {
        id,
        graph,
        plan,
        dropped,
        options,
        reply,
        requested,
        paused_at,
        mut payloads,
    } = pending;
    payloads.retain(|(uid, _), _| !dropped.contains(uid));
    let restore = match switch::stop_at(ctx, dep, id, payloads).await {
        Ok(restore) => restore,
        Err((dep, e)) => {
            let _ = reply.send(Err(ReplaceError::Aborted(format!(
                "a subtask failed committing the savepoint ({e}); the job recovers with the old graph"
            ))));
            let cause = e.to_string();
            return Replacing::to(Recovering::new(dep, e), cause);
        }
    };
    let old = swap_graph(ctx, *graph, plan);
    let probation = |restore: Restore, report: ReplaceReport| Probation {
        graph: old.0,
        plan: old.1,
        registry: old.2,
        follows_default: old.3,
        restore,
        deadline: Instant::now() + options.grace,
        from_checkpoint: id,
        reply,
        report,
    };
    let report = |dropped| ReplaceReport {
        checkpoint: id,
        duration: requested.elapsed(),
        pause: paused_at.elapsed(),
        dropped_state: dropped,
        committed_at: None,
    };
    match switch::deploy(ctx, restore.clone()) {
        Ok(dep) => {
            let report = report(dropped);
            tracing::info!(checkpoint = id, pause = ?report.pause, "the new graph runs, on probation until its first checkpoint");
            ctx.publish_graph();
            ctx.probation = Some(Box::new(probation(restore, report)));
            let cause = format!("replaced the graph at savepoint {id}");
            Replacing::to(Running::new(dep, ctx), cause)
        }
        Err(e) => {
            ctx.probation = Some(Box::new(probation(restore, report(dropped))));
            roll_back(ctx, format!("the new graph cannot start: {e}"))
        }
    }
}

/// What [`swap_graph`] took out of the context: the old graph, plan, registry and which nodes
/// followed the default parallelism.
type OldGraph = (Graph, Plan, OperatorRegistry, Vec<bool>);

/// Puts `graph` and its `plan` in the context (with a registry of their own), and returns
/// what they replace.
fn swap_graph(ctx: &mut JobContext, graph: Graph, plan: Plan) -> OldGraph {
    let registry = OperatorRegistry::new(
        &plan,
        ctx.cfg.max_parallelism,
        ctx.registry.live_config.clone(),
        ctx.registry.adapt_batches.clone(),
    );
    registry.observe_load(&graph.by_load);
    let follows: Vec<bool> = graph
        .nodes
        .iter()
        .map(|n| n.parallelism.is_none())
        .collect();
    (
        std::mem::replace(&mut ctx.graph, graph),
        std::mem::replace(&mut ctx.plan, plan),
        std::mem::replace(&mut ctx.registry, registry),
        std::mem::replace(&mut ctx.follows_default, follows),
    )
}

/// The new graph failed on probation: back to the old graph from the same states.
fn back(ctx: &mut JobContext, dep: Deployment, why: String) -> Transition {
    ctx.degraded_before |= dep.degraded();
    dep.stop(&ctx.job, &ctx.cfg);
    roll_back(ctx, why)
}

fn roll_back(ctx: &mut JobContext, why: String) -> Transition {
    let Some(fb) = ctx.probation.take() else {
        let e = crate::error::JobError::Runtime {
            job: ctx.job.clone(),
            message: format!("internal error: a rollback without a graph on probation ({why})"),
        };
        return Replacing::to(Finished::failed(e), why);
    };
    let Probation {
        graph,
        plan,
        registry,
        follows_default,
        restore,
        reply,
        ..
    } = *fb;
    tracing::warn!(reason = %why, "rolling back to the old graph");
    ctx.graph = graph;
    ctx.plan = plan;
    ctx.registry = registry;
    ctx.follows_default = follows_default;
    ctx.publish_graph();
    let _ = reply.send(Err(ReplaceError::RolledBack(why.clone())));
    switch::deploy_back::<Replacing>(ctx, restore, &format!("rolled back ({why})"))
}
