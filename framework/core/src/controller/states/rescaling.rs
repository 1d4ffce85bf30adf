//! `Rescaling`: the rescale's checkpoint is complete; the job moves to the new parallelism.
//!
//! A rescale starts in `Running` ([`PendingRescale::prepare`] validates the request against a
//! plan at the new parallelism, then a checkpoint is triggered whose barrier pauses the
//! sources and whose states the subtasks hand over in memory). Once every subtask acked it,
//! this state tells every subtask that the checkpoint is complete and waits for the answers
//! (sinks commit everything before the barrier), stops the deployment, deals the states to
//! the new parallelism (`rescale`) and deploys again from them on new arbiters: the sources
//! resume exactly at the barrier. If the new subtasks cannot be built, it goes back to the
//! old parallelism from the same states (`RolledBack`).
//!
//! ```text
//!   Running ──(checkpoint complete)──► Rescaling ──► Running      (new parallelism, or rolled back)
//!                                          └───────► Recovering   (a commit failed; old parallelism)
//! ```

use std::collections::HashMap;
use std::time::Instant;

use crate::controller::command::{Reply, RescaleTarget};
use crate::controller::deployment::Deployment;
use crate::controller::JobContext;
use crate::graph::NodeId;
use crate::plan::Plan;
use crate::rescale::{ParallelismChange, Rebalanced, RescaleError, RescaleReport};
use crate::task::Resume;

use super::switch;
use super::{Recovering, Running, Transition, TransitionTo};

/// Nodes whose parallelism changes, and to what.
type Nodes = Vec<(NodeId, usize)>;

/// Nodes whose key-group table changes, and to what (None: by count).
type Tables = Vec<(NodeId, Option<std::sync::Arc<[u32]>>)>;

/// A validated rescale, before its checkpoint is triggered.
pub(crate) struct Prepared {
    pub(crate) changes: Vec<ParallelismChange>,
    kept: Vec<(String, String)>,
    /// The plan at the new parallelism.
    plan: Plan,
    /// Nodes whose parallelism changes, and to what.
    nodes: Vec<(NodeId, usize)>,
    /// Nodes whose key-group table changes, and to what.
    tables: Tables,
    /// What each rebalance by load does.
    rebalanced: Vec<(NodeId, Rebalanced)>,
    /// The job-wide default parallelism after (a job-wide rescale).
    default_parallelism: Option<usize>,
    requested: Instant,
}

/// A rescale waiting for (or past) its checkpoint.
pub(crate) struct PendingRescale {
    pub(crate) id: u64,
    prepared: Prepared,
    reply: Reply<Result<RescaleReport, RescaleError>>,
    paused_at: Instant,
    /// The states handed over with the checkpoint's acks: (uid, subtask) -> payload.
    pub(crate) payloads: HashMap<(String, usize), Vec<u8>>,
}

impl Prepared {
    /// The report of this rescale, done at checkpoint `id`.
    pub(crate) fn report(&self, id: u64, paused_at: Instant, now: Instant) -> RescaleReport {
        RescaleReport {
            checkpoint: id,
            changes: self.changes.clone(),
            kept: self.kept.clone(),
            rebalanced: self.rebalanced.iter().map(|(_, r)| r.clone()).collect(),
            duration: now.duration_since(self.requested),
            pause: now.duration_since(paused_at),
        }
    }

    /// Whether nothing would change (no parallelism, no key-group owner).
    pub(crate) fn changes_nothing(&self) -> bool {
        self.changes.is_empty() && self.tables.is_empty()
    }

    /// Waits for checkpoint `id` (its barrier pauses the sources at `now`).
    pub(crate) fn start(
        self,
        id: u64,
        reply: Reply<Result<RescaleReport, RescaleError>>,
        now: Instant,
    ) -> PendingRescale {
        PendingRescale {
            id,
            prepared: self,
            reply,
            paused_at: now,
            payloads: HashMap::new(),
        }
    }
}

impl PendingRescale {
    /// Checks a rescale request against the job: every uid known, every parallelism in
    /// range, every changed operator able to move its state, the graph valid at the new
    /// parallelism. Changes nothing.
    pub(crate) fn prepare(
        ctx: &mut JobContext,
        target: &RescaleTarget,
    ) -> Result<Prepared, RescaleError> {
        let requested = Instant::now();
        let wanted = match target {
            RescaleTarget::Rebalance(uid) => Wanted::rebalance(ctx, uid)?,
            RescaleTarget::Operators(list) => Wanted::operators(ctx, list)?,
            RescaleTarget::Job(p) => Wanted::job(ctx, *p)?,
        };
        let (changes, nodes) = wanted.changes(ctx)?;
        let (tables, rebalanced) = key_group_tables(ctx, &nodes, wanted.rebalance)?;
        let new_plan = if nodes.is_empty() && tables.is_empty() {
            ctx.plan.clone()
        } else {
            replan(ctx, &nodes, &tables).map_err(|e| RescaleError::Plan(e.to_string()))?
        };
        Ok(Prepared {
            changes,
            kept: wanted.kept,
            plan: new_plan,
            nodes,
            tables,
            rebalanced,
            default_parallelism: wanted.default_parallelism,
            requested,
        })
    }

    /// The rescale will not happen: its caller is told why, the sources read on (if the
    /// deployment runs on), nothing else changed.
    pub(crate) fn abandon(self, ctx: &JobContext, dep: &Deployment, why: String, resume: bool) {
        tracing::warn!(checkpoint = self.id, reason = %why, "rescale abandoned");
        ctx.views.update(|v| v.rescales.in_progress = None);
        if resume {
            dep.mail_sources(|| Resume);
        }
        let _ = self.reply.send(Err(RescaleError::Aborted(why)));
    }
}

/// What a rescale request asks for, checked against the job.
#[derive(Default)]
struct Wanted {
    /// Nodes and the parallelism asked for.
    nodes: Vec<(NodeId, usize)>,
    /// Operators a job-wide rescale keeps, and why.
    kept: Vec<(String, String)>,
    /// The new default parallelism (a job-wide rescale).
    default_parallelism: Option<usize>,
    /// The keyed operator to rebalance by load.
    rebalance: Option<NodeId>,
}

/// The node of operator `uid`, or the error naming the known uids.
fn node_of(plan: &Plan, uid: &str) -> Result<NodeId, RescaleError> {
    plan.uids
        .iter()
        .position(|u| u == uid)
        .ok_or_else(|| RescaleError::UnknownOperator {
            uid: uid.to_owned(),
            known: plan.uids.join(", "),
        })
}

/// `p` is a parallelism operator `uid` may have.
fn in_range(ctx: &JobContext, uid: &str, p: usize) -> Result<(), RescaleError> {
    let max = ctx.cfg.max_parallelism;
    if p == 0 || p > max {
        return Err(RescaleError::Parallelism {
            uid: uid.to_owned(),
            parallelism: p,
            max,
        });
    }
    Ok(())
}

impl Wanted {
    /// A rebalance of keyed operator `uid` by load.
    fn rebalance(ctx: &JobContext, uid: &str) -> Result<Self, RescaleError> {
        let n = ctx.graph.settable(node_of(&ctx.plan, uid)?);
        if !matches!(
            ctx.graph.nodes[n].rescale,
            crate::rescale::Rule::Keyed { .. }
        ) || ctx.plan.head_of[n] != n
        {
            return Err(RescaleError::NotRescalable {
                uid: uid.to_owned(),
                reason: "only a keyed operator (a keyed process, reduce, aggregate or \
                         window) has key groups to rebalance"
                    .into(),
            });
        }
        Ok(Wanted {
            rebalance: Some(n),
            ..Wanted::default()
        })
    }

    /// These operators at these parallelisms.
    fn operators(ctx: &JobContext, list: &[(String, usize)]) -> Result<Self, RescaleError> {
        if list.is_empty() {
            return Err(RescaleError::Plan(
                "no operator to rescale was named".into(),
            ));
        }
        let mut nodes = Vec::new();
        for (uid, p) in list {
            let n = node_of(&ctx.plan, uid)?;
            in_range(ctx, uid, *p)?;
            nodes.push((ctx.graph.settable(n), *p));
        }
        Ok(Wanted {
            nodes,
            ..Wanted::default()
        })
    }

    /// Every operator that follows the default parallelism and can be rescaled, at `p`.
    fn job(ctx: &JobContext, p: usize) -> Result<Self, RescaleError> {
        in_range(ctx, "the job", p)?;
        let (mut nodes, mut kept) = (Vec::new(), Vec::new());
        for (n, node) in ctx.graph.nodes.iter().enumerate() {
            if node.part_of.is_some() || !ctx.follows_default[n] {
                continue;
            }
            match node.rescale.refusal() {
                Some(why) => kept.push((ctx.plan.uids[n].clone(), why.to_owned())),
                None => nodes.push((n, p)),
            }
        }
        if nodes.is_empty() {
            let why: Vec<String> = kept.iter().map(|(u, w)| format!("`{u}`: {w}")).collect();
            return Err(RescaleError::Unsupported(format!(
                "no operator that follows the default parallelism can be rescaled ({})",
                why.join("; ")
            )));
        }
        Ok(Wanted {
            nodes,
            kept,
            default_parallelism: Some(p),
            rebalance: None,
        })
    }

    /// The parallelism changes asked for (each node once, unchanged ones left out), each
    /// checked: the operator can move its state.
    fn changes(&self, ctx: &JobContext) -> Result<(Vec<ParallelismChange>, Nodes), RescaleError> {
        let (graph, plan) = (&ctx.graph, &ctx.plan);
        let mut changes = Vec::new();
        let mut nodes: Vec<(NodeId, usize)> = Vec::new();
        for &(n, p) in &self.nodes {
            let from = plan.parallelism[n];
            if from == p || nodes.iter().any(|&(m, _)| m == n) {
                continue;
            }
            if let Some(why) = graph.nodes[n].rescale.refusal() {
                return Err(RescaleError::NotRescalable {
                    uid: plan.uids[n].clone(),
                    reason: why.to_owned(),
                });
            }
            changes.push(ParallelismChange {
                uid: plan.uids[n].clone(),
                from,
                to: p,
            });
            nodes.push((n, p));
        }
        Ok((changes, nodes))
    }
}

/// Key-group tables of the rescale: by load for a rebalance and for an operator set to be
/// rescaled by load; by count for any other keyed operator whose parallelism changes. With
/// what each rebalance by load does.
fn key_group_tables(
    ctx: &mut JobContext,
    nodes: &[(NodeId, usize)],
    rebalance: Option<NodeId>,
) -> Result<(Tables, Vec<(NodeId, Rebalanced)>), RescaleError> {
    let (graph, plan, max) = (&ctx.graph, &ctx.plan, ctx.cfg.max_parallelism);
    let mut tables = Vec::new();
    let mut rebalanced = Vec::new();
    let mut by_load: Vec<(NodeId, usize)> = nodes
        .iter()
        .filter(|(n, _)| graph.by_load.contains(n))
        .copied()
        .collect();
    for &(n, _) in nodes {
        if !graph.by_load.contains(&n) && graph.key_groups.contains_key(&n) {
            tables.push((n, None));
        }
    }
    if let Some(n) = rebalance {
        if !nodes.iter().any(|&(m, _)| m == n) {
            by_load.push((n, plan.parallelism[n]));
        }
    }
    for (n, p) in by_load {
        if !ctx.registry.loads[n].is_observed() {
            // Its keyed edges count from now on (a rebalance asked for an operator not set
            // to be assigned by load).
            ctx.registry.loads[n].observe();
            return Err(RescaleError::LoadNotObserved {
                uid: plan.uids[n].clone(),
            });
        }
        let loads = ctx.registry.loads[n].counts();
        if rebalance == Some(n) && loads.iter().all(|&l| l == 0) {
            return Err(RescaleError::Unsupported(format!(
                "operator `{}` has received no records since its key groups were last assigned: there is no load to balance by",
                plan.uids[n]
            )));
        }
        let current = plan.owners(n, max);
        let same_p = current.parallelism() == p;
        let new = crate::key_group::balance_by_load(&loads, p, same_p.then_some(&current));
        if same_p && new == current {
            continue;
        }
        let moved = (0..max)
            .filter(|&kg| current.owner(kg) != new.owner(kg))
            .count();
        tables.push((n, new.shared_table().cloned()));
        rebalanced.push((
            n,
            Rebalanced {
                uid: plan.uids[n].clone(),
                load_before: current.subtask_loads(&loads),
                load_after: new.subtask_loads(&loads),
                moved,
            },
        ));
    }
    Ok((tables, rebalanced))
}

/// The plan of the job with the parallelism of `nodes` and the key-group tables of `tables`
/// changed (and of their parts), without changing the graph.
fn replan(
    ctx: &mut JobContext,
    nodes: &[(NodeId, usize)],
    tables: &[(NodeId, Option<std::sync::Arc<[u32]>>)],
) -> Result<Plan, crate::error::PlanError> {
    let saved = set_layout(ctx, nodes, tables);
    let planned = crate::plan::plan(&ctx.graph, &ctx.cfg);
    saved.put_back(ctx);
    planned
}

/// What [`set_layout`] replaced.
struct Saved {
    /// (node, parallelism, initial state).
    nodes: Vec<(
        NodeId,
        Option<usize>,
        Option<Vec<crate::hooks::StateSnapshot>>,
    )>,
    /// (node, key-group table).
    tables: Vec<(NodeId, Option<std::sync::Arc<[u32]>>)>,
}

impl Saved {
    /// Puts back what was replaced.
    fn put_back(self, ctx: &mut JobContext) {
        for (n, p, state) in self.nodes {
            ctx.graph.nodes[n].parallelism = p;
            ctx.graph.nodes[n].initial_state = state;
        }
        for (n, table) in self.tables {
            match table {
                Some(t) => ctx.graph.key_groups.insert(n, t),
                None => ctx.graph.key_groups.remove(&n),
            };
        }
    }
}

/// Sets the parallelism of `nodes` and the key-group tables of `tables` in the graph. The
/// nodes' initial states (one per old subtask) are dropped: from now on the job always
/// restores a checkpoint, which wins over them.
fn set_layout(
    ctx: &mut JobContext,
    nodes: &[(NodeId, usize)],
    tables: &[(NodeId, Option<std::sync::Arc<[u32]>>)],
) -> Saved {
    let mut saved = Saved {
        nodes: Vec::new(),
        tables: Vec::new(),
    };
    for &(n, p) in nodes {
        let node = &mut ctx.graph.nodes[n];
        saved
            .nodes
            .push((n, node.parallelism, node.initial_state.take()));
        node.parallelism = Some(p);
    }
    for (n, table) in tables {
        let old = match table {
            Some(t) => ctx.graph.key_groups.insert(*n, t.clone()),
            None => ctx.graph.key_groups.remove(n),
        };
        saved.tables.push((*n, old));
    }
    saved
}

/// The job moves to a new parallelism at a complete checkpoint.
pub(crate) struct Rescaling {
    dep: Deployment,
    pending: PendingRescale,
}

impl Rescaling {
    pub(super) fn new(dep: Deployment, pending: PendingRescale) -> Self {
        Rescaling { dep, pending }
    }

    pub(crate) async fn run(self, ctx: &mut JobContext) -> Transition {
        let Rescaling { dep, pending } = self;
        let PendingRescale {
            id,
            prepared,
            reply,
            paused_at,
            payloads,
        } = pending;
        ctx.views.update(|v| v.rescales.in_progress = None);
        let restore = match switch::stop_at(ctx, dep, id, payloads).await {
            Ok(restore) => restore,
            Err((dep, e)) => {
                let _ = reply.send(Err(RescaleError::Aborted(format!(
                    "a subtask failed committing the rescale's checkpoint ({e}); the job recovers at its old parallelism"
                ))));
                let cause = e.to_string();
                return Self::to(Recovering::new(dep, e), cause);
            }
        };
        let saved = set_layout(ctx, &prepared.nodes, &prepared.tables);
        let old_plan = std::mem::replace(&mut ctx.plan, prepared.plan.clone());
        ctx.registry.resize(&ctx.plan);
        match switch::deploy(ctx, restore.clone()) {
            Ok(dep) => {
                let report = rescaled(ctx, &prepared, id, paused_at);
                let cause = cause(id, &report);
                let _ = reply.send(Ok(report));
                Self::to(Running::new(dep, ctx), cause)
            }
            Err(e) => {
                // Back to the old parallelism, from the same states.
                tracing::warn!(error = %e, "rescale: the new subtasks cannot start; rolling back");
                saved.put_back(ctx);
                ctx.plan = old_plan;
                ctx.registry.resize(&ctx.plan);
                ctx.publish_vertices();
                let _ = reply.send(Err(RescaleError::RolledBack(e.to_string())));
                switch::deploy_back::<Self>(ctx, restore, "rescale rolled back")
            }
        }
    }
}

/// The job runs at the new parallelism: what follows the old default keeps its own, load is
/// counted again from the new assignment, and the rescale is published.
fn rescaled(
    ctx: &mut JobContext,
    prepared: &Prepared,
    id: u64,
    paused_at: Instant,
) -> RescaleReport {
    if let Some(p) = prepared.default_parallelism {
        // What follows the default but kept its parallelism (a source, a sink) keeps it: a
        // later plan (another rescale, a rebalance) must not move it to the new default.
        for (n, node) in ctx.graph.nodes.iter_mut().enumerate() {
            if node.parallelism.is_none() && node.part_of.is_none() && ctx.plan.parallelism[n] != p
            {
                node.parallelism = Some(ctx.plan.parallelism[n]);
            }
        }
        ctx.cfg.default_parallelism = p;
    }
    for (n, _) in &prepared.tables {
        ctx.registry.loads[*n].reset();
    }
    let report = prepared.report(id, paused_at, Instant::now());
    tracing::info!(checkpoint = id, changes = ?report.changes, pause = ?report.pause, duration = ?report.duration, "rescaled");
    ctx.publish_vertices();
    ctx.views.update(|v| {
        v.rescales.num_rescales += 1;
        v.rescales.last = Some(report.clone());
    });
    report
}

/// The transition's cause: what changed.
fn cause(id: u64, report: &RescaleReport) -> String {
    let changes = report
        .changes
        .iter()
        .map(|c| format!("{} {} -> {}", c.uid, c.from, c.to))
        .chain(report.rebalanced.iter().map(|r| {
            format!(
                "{} rebalanced by load ({} key groups moved)",
                r.uid, r.moved
            )
        }));
    format!(
        "rescaled at checkpoint {id}: {}",
        changes.collect::<Vec<_>>().join(", ")
    )
}
