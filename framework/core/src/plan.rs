//! The physical plan: from the logical graph to subtasks, channels and chains.
//!
//! [`plan`] resolves each operator's uid and parallelism, each edge's partitioning (`Auto`
//! becomes forward when parallelism is equal, rebalance otherwise) and which edges are
//! chained. An edge is chained (its two operators fused into one actor, no channel) when
//! chaining is on, the edge is forward, and the downstream operator has that edge as its only
//! input (Arroyo's rule; an upstream may feed several chained and networked consumers). Every
//! error is found here, before anything runs.
//!
//! [`instantiate`] then builds, for every chain head and subtask, the operators of the chain
//! and the channels between subtasks. It does not start actors or own placement (`controller`).

use std::collections::{HashMap, HashSet};

use crate::sync::AtomicWaker;

use crate::backup::BackupGroup;
use crate::config::EnvConfig;
use crate::error::PlanError;
use crate::event::SubtaskId;
use crate::graph::{Graph, NodeId};
use crate::metrics::{OperatorCounters, SubtaskCounters};
use crate::partition::PartitionKind;
use crate::sync::Arc;
use crate::task::Driver;

mod chain;
mod instantiate;
mod vertices;

pub(crate) use chain::build_promoted;
pub(crate) use instantiate::{instantiate, keyed_input};
pub(crate) use vertices::vertices;
pub use vertices::{VertexInfo, VertexInput};

/// The resolved shape of a job.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) uids: Vec<String>,
    pub(crate) parallelism: Vec<usize>,
    /// Per edge: its resolved partitioning.
    pub(crate) kinds: Vec<PartitionKind>,
    /// Per edge: fused into its upstream's actor.
    pub(crate) chained: Vec<bool>,
    /// Chain heads (nodes with an actor of their own), in graph order.
    pub(crate) heads: Vec<NodeId>,
    /// Per node: the head of its chain.
    pub(crate) head_of: Vec<NodeId>,
    /// Per node: its key groups' table when they are assigned by load (a keyed chain
    /// head's, from `Graph::key_groups`); `None`: by count.
    pub(crate) key_groups: Vec<Option<std::sync::Arc<[u32]>>>,
}

impl Plan {
    /// Each operator's uid and parallelism.
    pub(crate) fn parallelism_by_uid(&self) -> impl Iterator<Item = (String, usize)> + '_ {
        self.uids
            .iter()
            .cloned()
            .zip(self.parallelism.iter().copied())
    }

    /// Which subtask owns each key group of node `n` (the table of its chain's head: a keyed
    /// operator heads its chain, its input being a network edge).
    pub(crate) fn owners(&self, n: NodeId, max_parallelism: usize) -> crate::key_group::Owners {
        let head = self.head_of.get(n).copied().unwrap_or(n);
        crate::key_group::Owners::of(
            self.key_groups.get(head).and_then(|t| t.as_ref()),
            max_parallelism,
            self.parallelism[n],
        )
    }

    /// Each operator's key-group table, by uid, where assigned by load.
    pub(crate) fn key_groups_by_uid(
        &self,
    ) -> impl Iterator<Item = (String, std::sync::Arc<[u32]>)> + '_ {
        (0..self.uids.len()).filter_map(|n| {
            let head = self.head_of[n];
            let t = self.key_groups.get(head)?.as_ref()?;
            Some((self.uids[n].clone(), t.clone()))
        })
    }
}

/// Gives the operators `cfg.backups` names their buffer-queue backup policy (a uid no
/// operator has is an error naming it).
pub(crate) fn apply_config_backups(graph: &mut Graph, cfg: &EnvConfig) -> Result<(), PlanError> {
    for (uid, policy) in &cfg.backups {
        let node = graph
            .nodes
            .iter_mut()
            .find(|n| n.uid.as_deref() == Some(uid.as_str()))
            .ok_or_else(|| PlanError::Backup {
                uid: uid.clone(),
                message: "no operator has this uid (named in the config's `backups`)".into(),
            })?;
        node.backup = Some(policy.clone());
    }
    Ok(())
}

/// Resolves uids, parallelism, partitioning and chaining; finds every planning error.
pub(crate) fn plan(graph: &Graph, cfg: &EnvConfig) -> Result<Plan, PlanError> {
    plan_with_heads(graph, cfg, &HashSet::new())
}

/// [`plan`], where the operators whose uids are in `heads` head their chains whatever the
/// chaining rule says (a restore has in-flight data of their inputs to replay: only a chain
/// head has input channels).
pub(crate) fn plan_with_heads(
    graph: &Graph,
    cfg: &EnvConfig,
    heads: &HashSet<String>,
) -> Result<Plan, PlanError> {
    check_graph(graph, cfg)?;
    let uids = resolve_uids(graph)?;
    let parallelism = resolve_parallelism(graph, cfg, &uids)?;
    check_initial_states(graph, &uids, &parallelism)?;
    let (kinds, chained) = resolve_edges(graph, cfg, heads, &uids, &parallelism)?;
    check_backups(graph, cfg, &uids)?;
    let head_of = chain_heads(graph, &chained);
    let heads = (0..graph.nodes.len())
        .filter(|&id| head_of[id] == id)
        .collect();
    check_by_load(graph, &uids)?;
    let key_groups = key_group_tables(graph, cfg, &uids, &parallelism, &head_of)?;
    Ok(Plan {
        uids,
        parallelism,
        kinds,
        chained,
        heads,
        head_of,
        key_groups,
    })
}

/// The checks before any node is resolved: the config, the errors the graph recorded while
/// it was built, the connectors' config checks, and a source.
fn check_graph(graph: &Graph, cfg: &EnvConfig) -> Result<(), PlanError> {
    cfg.validate()?;
    if let Some(e) = graph.errors.first() {
        return Err(e.clone());
    }
    for check in &graph.config_checks {
        check(cfg)?;
    }
    if !graph.nodes.iter().any(|n| n.is_source) {
        return Err(PlanError::NoSource);
    }
    Ok(())
}

/// Each node's uid: user-set or `{name}-{id}`; parts are named after their owner. Uids are
/// unique.
fn resolve_uids(graph: &Graph) -> Result<Vec<String>, PlanError> {
    let mut uids = Vec::with_capacity(graph.nodes.len());
    for (id, node) in graph.nodes.iter().enumerate() {
        let uid = match (node.part_of, &node.uid) {
            (_, Some(u)) => u.clone(),
            (Some(owner), None) => format!("{}.{}", uids[owner], node.name),
            (None, None) => format!("{}-{}", node.name, id),
        };
        uids.push(uid);
    }
    let mut seen = HashSet::new();
    for uid in &uids {
        if !seen.insert(uid.as_str()) {
            return Err(PlanError::DuplicateUid(uid.clone()));
        }
    }
    Ok(uids)
}

/// Each node's parallelism: its own, its owner's for a part, or the job's default; between 1
/// and the job's maximum.
fn resolve_parallelism(
    graph: &Graph,
    cfg: &EnvConfig,
    uids: &[String],
) -> Result<Vec<usize>, PlanError> {
    let mut parallelism = Vec::with_capacity(graph.nodes.len());
    for (id, node) in graph.nodes.iter().enumerate() {
        let p = match node.part_of {
            Some(owner) => parallelism[owner],
            None => node.parallelism.unwrap_or(cfg.default_parallelism),
        };
        if p == 0 || p > cfg.max_parallelism {
            return Err(PlanError::BadParallelism {
                uid: uids[id].clone(),
                parallelism: p,
                max: cfg.max_parallelism,
            });
        }
        parallelism.push(p);
    }
    Ok(parallelism)
}

/// An operator's initial states are one per subtask.
fn check_initial_states(
    graph: &Graph,
    uids: &[String],
    parallelism: &[usize],
) -> Result<(), PlanError> {
    for (id, node) in graph.nodes.iter().enumerate() {
        if let Some(states) = &node.initial_state {
            if states.len() != parallelism[id] {
                return Err(PlanError::StateParallelism {
                    uid: uids[id].clone(),
                    snapshots: states.len(),
                    parallelism: parallelism[id],
                });
            }
        }
    }
    Ok(())
}

/// Each edge's partitioning (`Auto` resolved by the parallelism at its ends) and whether it
/// is chained; refuses a forward edge between unequal parallelism and backups that cannot
/// be (of an operator with side outputs, or of two adjacent operators).
fn resolve_edges(
    graph: &Graph,
    cfg: &EnvConfig,
    heads: &HashSet<String>,
    uids: &[String],
    parallelism: &[usize],
) -> Result<(Vec<PartitionKind>, Vec<bool>), PlanError> {
    let mut in_degree = vec![0usize; graph.nodes.len()];
    for e in &graph.edges {
        in_degree[e.to] += 1;
    }
    let mut kinds = Vec::with_capacity(graph.edges.len());
    let mut chained = Vec::with_capacity(graph.edges.len());
    for e in &graph.edges {
        let (pf, pt) = (parallelism[e.from], parallelism[e.to]);
        let kind = match e.partition.kind() {
            PartitionKind::Auto if pf == pt => PartitionKind::Forward,
            PartitionKind::Auto => PartitionKind::Rebalance,
            PartitionKind::Forward if pf != pt => {
                return Err(PlanError::ForwardMismatch {
                    from: uids[e.from].clone(),
                    to: uids[e.to].clone(),
                    from_parallelism: pf,
                    to_parallelism: pt,
                })
            }
            k => k,
        };
        let part = graph.nodes[e.to].part_of == Some(e.from);
        let backed = |id: NodeId| graph.nodes[id].backup.is_some();
        if part && backed(e.from) {
            return Err(PlanError::Backup {
                uid: uids[e.from].clone(),
                message: "an operator with side outputs cannot be backed up".into(),
            });
        }
        if backed(e.from) && backed(e.to) {
            return Err(PlanError::Backup {
                uid: uids[e.to].clone(),
                message: format!(
                    "its input comes from `{}`, also backed up: back up one of two adjacent operators",
                    uids[e.from]
                ),
            });
        }
        // A backed-up operator is an actor of its own: its input arrives on dual channels
        // and its output on channels it can be fenced from.
        let networked = backed(e.from) || backed(e.to);
        chained.push(
            part || (cfg.chaining
                && !networked
                && kind == PartitionKind::Forward
                && in_degree[e.to] == 1
                && !heads.contains(&uids[e.to])),
        );
        kinds.push(kind);
    }
    Ok((kinds, chained))
}

/// Every backed-up operator can be: a valid policy, a checkpoint to replay from if it has
/// state, a heartbeat timeout within the job's, an operator a backup can follow, one input.
fn check_backups(graph: &Graph, cfg: &EnvConfig, uids: &[String]) -> Result<(), PlanError> {
    for (id, node) in graph.nodes.iter().enumerate() {
        if let Some(policy) = &node.backup {
            policy.validate()?;
            let refuse = |message: String| {
                Err(PlanError::Backup {
                    uid: uids[id].clone(),
                    message,
                })
            };
            if !node.stateless && cfg.checkpoint.interval.is_none() {
                return refuse(
                    "a stateful operator's backup replays from its last checkpoint: set \
                     `checkpoint.interval` (only map, filter and flat_map are stateless)"
                        .into(),
                );
            }
            if policy.heartbeat_timeout >= cfg.heartbeat_timeout {
                return refuse(format!(
                    "its heartbeat timeout ({:?}) must be shorter than the job's \
                     `heartbeat_timeout` ({:?}), or a hang restarts the job instead",
                    policy.heartbeat_timeout, cfg.heartbeat_timeout
                ));
            }
            if let Some((_, why)) = graph.no_backup.iter().find(|(n, _)| *n == id) {
                return refuse((*why).to_owned());
            }
            if node.is_source || node.n_inputs != 1 {
                return Err(PlanError::Backup {
                    uid: uids[id].clone(),
                    message: "only one-input operators can be backed up (not sources, connect or sinks' siblings with two inputs)".into(),
                });
            }
        }
    }
    Ok(())
}

/// The head of each node's chain: a node chained to its input has that input's head.
fn chain_heads(graph: &Graph, chained: &[bool]) -> Vec<NodeId> {
    // Nodes are created after their inputs, so graph order is a topological order.
    let mut head_of: Vec<NodeId> = (0..graph.nodes.len()).collect();
    for (i, e) in graph.edges.iter().enumerate() {
        if chained[i] {
            head_of[e.to] = head_of[e.from];
        }
    }
    head_of
}

/// Only operators with keyed state are assigned key groups by load.
fn check_by_load(graph: &Graph, uids: &[String]) -> Result<(), PlanError> {
    for &id in &graph.by_load {
        if !matches!(graph.nodes[id].rescale, crate::rescale::Rule::Keyed { .. }) {
            return Err(PlanError::KeyGroups {
                uid: uids[id].clone(),
                message: "`key_groups_by_load` is for an operator with keyed state (a keyed \
                          process, reduce, aggregate or window)"
                    .into(),
            });
        }
    }
    Ok(())
}

/// The key-group tables the graph was given, per node: each must fit its operator (one
/// entry per key group, subtasks within its parallelism) and the operator head its chain.
fn key_group_tables(
    graph: &Graph,
    cfg: &EnvConfig,
    uids: &[String],
    parallelism: &[usize],
    head_of: &[NodeId],
) -> Result<Vec<Option<std::sync::Arc<[u32]>>>, PlanError> {
    let mut key_groups = vec![None; graph.nodes.len()];
    for (&id, table) in &graph.key_groups {
        let fits = table.len() == cfg.max_parallelism
            && table.iter().all(|&s| (s as usize) < parallelism[id]);
        if head_of.get(id) != Some(&id) || !fits {
            return Err(PlanError::KeyGroups {
                uid: uids[id].clone(),
                message: format!(
                    "its key-group table ({} groups) does not fit the operator ({} key groups, parallelism {}, {})",
                    table.len(),
                    cfg.max_parallelism,
                    parallelism[id],
                    if head_of[id] == id { "heads its chain" } else { "chained to its input" }
                ),
            });
        }
        key_groups[id] = Some(table.clone());
    }
    Ok(key_groups)
}

/// A subtask ready to be started as an actor.
pub(crate) struct SubtaskSpec {
    pub(crate) id: SubtaskId,
    pub(crate) driver: Driver,
    pub(crate) counters: Arc<SubtaskCounters>,
    pub(crate) rx_waker: Arc<AtomicWaker>,
    /// The subtask's backup group, if its operator is backed up.
    pub(crate) backup: Option<std::sync::Arc<dyn BackupGroup>>,
}

/// The live config changes of a job: uid -> (key, value) in the order made, one per key.
pub(crate) type LiveConfig = Arc<crate::sync::Mutex<HashMap<String, Vec<(String, String)>>>>;

/// Counters of every operator subtask, by node, and what the job's deployments share: its
/// live config changes and whether its batches adapt now.
pub(crate) struct OperatorRegistry {
    pub(crate) counters: Vec<Vec<Arc<OperatorCounters>>>,
    /// Per node: the records its keyed inputs sent to each key group (counted by every
    /// deployment's routers until the node's key groups are assigned again).
    pub(crate) loads: Vec<std::sync::Arc<crate::partition::KeyGroupLoad>>,
    pub(crate) live_config: LiveConfig,
    pub(crate) adapt_batches: crate::partition::AdaptBatches,
}

impl OperatorRegistry {
    /// The keyed edges into `nodes` (operators set to be assigned by load) count their load
    /// from the start.
    pub(crate) fn observe_load(&self, nodes: &std::collections::HashSet<NodeId>) {
        for &n in nodes {
            if let Some(l) = self.loads.get(n) {
                l.observe();
            }
        }
    }

    /// Counters for the subtasks of `plan` (a rescaled one): those that stay keep theirs.
    pub(crate) fn resize(&mut self, plan: &Plan) {
        for (n, &p) in plan.parallelism.iter().enumerate() {
            let c = &mut self.counters[n];
            c.truncate(p);
            while c.len() < p {
                c.push(Arc::new(OperatorCounters::default()));
            }
        }
    }

    /// Fresh counters for `plan`'s subtasks, sharing the job's `live_config` and
    /// `adapt_batches`.
    pub(crate) fn new(
        plan: &Plan,
        max_parallelism: usize,
        live_config: LiveConfig,
        adapt_batches: crate::partition::AdaptBatches,
    ) -> Self {
        OperatorRegistry {
            loads: plan
                .parallelism
                .iter()
                .map(|_| std::sync::Arc::new(crate::partition::KeyGroupLoad::new(max_parallelism)))
                .collect(),
            counters: plan
                .parallelism
                .iter()
                .map(|&p| {
                    (0..p)
                        .map(|_| Arc::new(OperatorCounters::default()))
                        .collect()
                })
                .collect(),
            live_config,
            adapt_batches,
        }
    }
}

/// The states a job restores: (uid, subtask) -> payload, from checkpoint `checkpoint`.
#[derive(Debug, Default, Clone)]
pub(crate) struct Restore {
    pub(crate) checkpoint: u64,
    pub(crate) states: std::collections::HashMap<(String, usize), Vec<u8>>,
    /// States of incremental checkpoints not read yet (read when the job is deployed, each
    /// subtask's key groups only: `controller::states::deploying::fit_restore`); none once
    /// the job is deployed from it.
    pub(crate) chains: crate::checkpoint::store::Chains,
    /// uid -> parallelism when the states were taken (where known; `rescale::fit`).
    pub(crate) parallelism: HashMap<String, usize>,
    /// uid -> key-group table when the states were taken, of operators rebalanced by load
    /// (the others' were by count).
    pub(crate) key_groups: HashMap<String, std::sync::Arc<[u32]>>,
    /// The run directory a scan for the newest complete checkpoint found this one in: if
    /// its state cannot be read when the job is deployed (a damaged block, an I/O error),
    /// the newest older complete checkpoint there stands in. `None` for a savepoint or a
    /// checkpoint asked for by path.
    pub(crate) older: Option<std::path::PathBuf>,
}

impl Restore {
    /// The restore of what was loaded from the checkpoint (or savepoint) in `dir`.
    pub(crate) fn loaded(loaded: crate::checkpoint::store::Loaded, dir: &std::path::Path) -> Self {
        Restore {
            checkpoint: loaded.checkpoint,
            states: loaded.states,
            chains: loaded.chains,
            parallelism: crate::checkpoint::store::recorded_parallelism(dir),
            key_groups: crate::checkpoint::store::recorded_key_groups(dir),
            older: None,
        }
    }

    /// Found by a scan of the run directory `root` for its newest complete checkpoint: an
    /// older one there may stand in for it ([`Restore::older`]).
    pub(crate) fn scanned_in(mut self, root: &std::path::Path) -> Self {
        self.older = Some(root.to_owned());
        self
    }
}
