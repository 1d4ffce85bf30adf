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

use crate::backup::{BackupGroup, GroupSpec};
use crate::config::EnvConfig;
use crate::erased::AnyBox;
use crate::error::{PlanError, TaskError};
use crate::event::SubtaskId;
use crate::graph::{Built, EdgeOutput, Graph, NodeId, OpEnv};
use crate::metrics::{OperatorCounters, SubtaskCounters};
use crate::operator::step::InputGate;
use crate::operator::OperatorInfo;
use crate::partition::{OutputConfig, PartitionKind};
use crate::sync::Arc;
use crate::task::Driver;

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
    let n = graph.nodes.len();
    // Uids: user-set or `{name}-{id}`; parts are named after their owner.
    let mut uids = Vec::with_capacity(n);
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
    let mut parallelism = Vec::with_capacity(n);
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
    let mut in_degree = vec![0usize; n];
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
    // Nodes are created after their inputs, so graph order is a topological order.
    let mut head_of: Vec<NodeId> = (0..n).collect();
    for (i, e) in graph.edges.iter().enumerate() {
        if chained[i] {
            head_of[e.to] = head_of[e.from];
        }
    }
    let heads = (0..n).filter(|&id| head_of[id] == id).collect();
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
    let mut key_groups = vec![None; n];
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

/// Builds every subtask's chain and every channel (restoring `restore` if given).
pub(crate) fn instantiate(
    graph: &Graph,
    plan: &Plan,
    cfg: &EnvConfig,
    registry: &OperatorRegistry,
    restore: Option<&Restore>,
    attempt: u64,
) -> Result<Vec<SubtaskSpec>, TaskError> {
    // One actor per (head, subtask).
    let mut actor_of = vec![Vec::new(); graph.nodes.len()];
    let mut wakers = Vec::new();
    for &h in &plan.heads {
        for _ in 0..plan.parallelism[h] {
            actor_of[h].push(wakers.len());
            wakers.push(Arc::new(AtomicWaker::new()));
        }
    }
    // Channels of every networked edge: senders by (edge, upstream subtask), receivers by
    // (node, input, downstream subtask).
    let mut senders: Vec<Vec<Option<Vec<AnyBox>>>> = Vec::new();
    let mut receivers: Vec<Vec<Vec<Vec<AnyBox>>>> = graph
        .nodes
        .iter()
        .enumerate()
        .map(|(id, node)| {
            (0..node.n_inputs)
                .map(|_| (0..plan.parallelism[id]).map(|_| Vec::new()).collect())
                .collect()
        })
        .collect();
    // Backed-up subtasks: their dual channels in, their output channels, by (node, subtask).
    let mut backups: std::collections::HashMap<(NodeId, usize), BackupParts> = Default::default();
    for (id, node) in graph.nodes.iter().enumerate() {
        if node.backup.is_some() {
            for j in 0..plan.parallelism[id] {
                backups.insert((id, j), BackupParts::default());
            }
        }
    }
    for (ei, e) in graph.edges.iter().enumerate() {
        let mut per_up = Vec::new();
        if plan.chained[ei] {
            senders.push(per_up);
            continue;
        }
        let port = &graph.nodes[e.from].ports[e.port];
        for i in 0..plan.parallelism[e.from] {
            let targets: Vec<usize> = if plan.kinds[ei] == PartitionKind::Forward {
                vec![i]
            } else {
                (0..plan.parallelism[e.to]).collect()
            };
            let mut txs = Vec::with_capacity(targets.len());
            for j in targets {
                let waker = wakers[actor_of[e.to][j]].clone();
                match backups.get_mut(&(e.to, j)) {
                    Some(parts) => {
                        let bw = parts.waker.clone();
                        let (tx, dual, rx, rx_b) =
                            port.dual_channel(crate::channel::Credit::of(cfg), waker, bw);
                        txs.push(tx);
                        receivers[e.to][e.input][j].push(rx);
                        parts.duals.push(dual);
                        parts.backup_rx.push(rx_b);
                    }
                    None => {
                        let (tx, rx) = port.channel(crate::channel::Credit::of(cfg), waker);
                        txs.push(tx);
                        receivers[e.to][e.input][j].push(rx);
                    }
                }
            }
            if let Some(parts) = backups.get_mut(&(e.from, i)) {
                let fences = txs.iter().map(|tx| port.output_fence(tx)).collect();
                parts.outputs.push((ei, fences));
            }
            per_up.push(Some(txs));
        }
        senders.push(per_up);
    }
    // The groups, and the first primaries' claims.
    let mut groups: std::collections::HashMap<(NodeId, usize), std::sync::Arc<dyn BackupGroup>> =
        Default::default();
    let mut claims: std::collections::HashMap<(NodeId, usize), AnyBox> = Default::default();
    for ((id, j), parts) in backups {
        let node = &graph.nodes[id];
        let port = input_port(graph, id, 0);
        let spec = GroupSpec {
            uid: plan.uids[id].clone(),
            subtask: j,
            policy: node.backup.clone().unwrap_or_default(),
            stateful: !node.stateless,
            credit: crate::channel::Credit::of(cfg),
            initial: restore.and_then(|r| r.states.get(&(plan.uids[id].clone(), j)).cloned()),
            faults: cfg.faults.clone(),
        };
        let (group, first) = port.backup_group(
            spec,
            parts.duals,
            parts.backup_rx,
            parts.waker,
            parts.outputs,
        );
        groups.insert((id, j), group);
        claims.insert((id, j), first);
    }

    let mut builder = ChainBuilder {
        graph,
        plan,
        cfg,
        senders,
        registry,
        restore,
        fault_offset: 0,
        routed_before: Default::default(),
        promoted: false,
        image: None,
    };
    let mut specs = Vec::new();
    for &h in &plan.heads {
        for j in 0..plan.parallelism[h] {
            let actor = actor_of[h][j];
            let driver = match builder.build(h, j)? {
                Built::Source(step) => Driver::Source(step),
                Built::Inputs { heads, selection } => {
                    let mut gates: Vec<Box<dyn InputGate>> = Vec::new();
                    // A backed-up operator has one input (`plan` refuses others).
                    let mut claim = claims.remove(&(h, j));
                    let backed_up = claim.is_some();
                    debug_assert!(!backed_up || heads.len() == 1, "one input when backed up");
                    for (input, head) in heads.into_iter().enumerate() {
                        let rxs = std::mem::take(&mut receivers[h][input][j]);
                        let port = input_port(graph, h, input);
                        let key = (format!("{}#in{input}", plan.uids[h]), j);
                        let replay = restore
                            .and_then(|r| r.states.get(&key))
                            .map(|v| v.as_slice());
                        if let Some(c) = claim.take() {
                            // A backed-up subtask's checkpoints are aligned (no channel state
                            // of its own); one taken unaligned before it was backed up is
                            // refused rather than its in-flight records dropped.
                            if replay.is_some_and(crate::rescale::channels::carries_records) {
                                return Err(TaskError::Checkpoint {
                                    uid: plan.uids[h].clone(),
                                    subtask: j,
                                    message: "the checkpoint holds records in flight into \
                                              this operator (taken unaligned before it was \
                                              backed up), which a backed-up operator cannot \
                                              replay: restore without the backup, or from a \
                                              checkpoint or savepoint taken with unaligned \
                                              checkpoints and aligned_checkpoint_timeout off"
                                        .into(),
                                });
                            }
                            gates.push(port.claimed_gate(rxs, head, c));
                            continue;
                        }
                        let owned = replay.and_then(|_| {
                            keyed_input(graph, h, input)
                                .and_then(|e| e.owned_by(&plan.owners(h, cfg.max_parallelism), j))
                        });
                        let gate = port.gate(rxs, head, replay, owned).map_err(|message| {
                            TaskError::Checkpoint {
                                uid: plan.uids[h].clone(),
                                subtask: j,
                                message: format!("cannot restore channel state: {message}"),
                            }
                        })?;
                        gates.push(gate);
                    }
                    let driver = Driver::inputs(
                        gates,
                        selection,
                        crate::task::AlignmentSettings::of(&cfg.checkpoint),
                        plan.uids[h].clone(),
                    );
                    if backed_up {
                        driver.force_aligned()
                    } else {
                        driver
                    }
                }
            };
            specs.push(SubtaskSpec {
                id: SubtaskId {
                    actor,
                    attempt,
                    epoch: 0,
                    head: h,
                    head_uid: plan.uids[h].clone(),
                    subtask: j,
                },
                driver,
                counters: Arc::new(SubtaskCounters {
                    head: registry.counters[h][j].clone(),
                    ..SubtaskCounters::default()
                }),
                rx_waker: wakers[actor].clone(),
                backup: groups.remove(&(h, j)),
            });
        }
    }
    Ok(specs)
}

/// Records per batch on edge `e`: smaller into and out of a backed-up operator (see
/// [`BackupPolicy::batch_size`](crate::BackupPolicy)), the job's elsewhere.
fn edge_batch_size(graph: &Graph, cfg: &EnvConfig, e: &crate::graph::Edge) -> usize {
    [e.from, e.to]
        .iter()
        .filter_map(|&n| graph.nodes[n].backup.as_ref().and_then(|b| b.batch_size))
        .fold(cfg.batch_size, usize::min)
}

/// The parts of a backed-up subtask gathered while its channels are made.
#[derive(Default)]
struct BackupParts {
    duals: Vec<AnyBox>,
    backup_rx: Vec<AnyBox>,
    waker: Arc<AtomicWaker>,
    outputs: Vec<(usize, Vec<Box<dyn crate::backup::OutputFence>>)>,
}

/// The record type of input `input` of node `n` (the port of an edge into it).
fn input_port(graph: &Graph, n: NodeId, input: usize) -> &dyn crate::graph::PortType {
    graph
        .edges
        .iter()
        .find(|e| e.to == n && e.input == input)
        .map(|e| &*graph.nodes[e.from].ports[e.port])
        .expect("every input of a planned node has an edge")
}

/// An edge into `n`'s `input` when every edge into it is keyed (one `key_by`, after a union
/// one edge per stream, all with its key selector): restored channel state of that input is
/// dealt by key group (`rescale::channels`), and each subtask keeps the records of its own
/// key groups.
pub(crate) fn keyed_input(graph: &Graph, n: NodeId, input: usize) -> Option<&dyn EdgeOutput> {
    let mut edges = graph
        .edges
        .iter()
        .filter(|e| e.to == n && e.input == input)
        .peekable();
    let first = edges.peek().map(|e| &*e.partition)?;
    edges
        .all(|e| e.partition.kind() == PartitionKind::Hash)
        .then_some(first)
}

/// The operator of a promoted backup: node `n`, subtask `j`, over the reopened `senders` of
/// its outgoing edges, restoring `restored` (or what it was deployed with). Returns its head
/// (`BoxOutput<In>`, erased).
#[allow(clippy::too_many_arguments)]
pub(crate) fn build_promoted(
    graph: &Graph,
    plan: &Plan,
    cfg: &EnvConfig,
    registry: &OperatorRegistry,
    n: NodeId,
    j: usize,
    senders: Vec<(usize, Vec<AnyBox>)>,
    routed_before: Vec<(usize, u64)>,
    restored: Option<crate::state::changes::Restored>,
    fault_offset: u64,
) -> Result<AnyBox, TaskError> {
    let mut table: Vec<Vec<Option<Vec<AnyBox>>>> = graph.edges.iter().map(|_| Vec::new()).collect();
    for (ei, txs) in senders {
        table[ei] = (0..plan.parallelism[n]).map(|_| None).collect();
        table[ei][j] = Some(txs);
    }
    let (restored, image) = match restored {
        Some(crate::state::changes::Restored::Payload(bytes)) => (Some(bytes), None),
        Some(crate::state::changes::Restored::Image(image)) => (None, Some(image)),
        None => (None, None),
    };
    let restore = restored.map(|bytes| Restore {
        checkpoint: 0,
        states: [((plan.uids[n].clone(), j), bytes)].into_iter().collect(),
        ..Default::default()
    });
    let mut builder = ChainBuilder {
        graph,
        plan,
        cfg,
        senders: table,
        registry,
        restore: restore.as_ref(),
        fault_offset,
        routed_before: routed_before.into_iter().collect(),
        promoted: true,
        image: image.map(|i| (n, i)),
    };
    match builder.build(n, j)? {
        Built::Inputs { mut heads, .. } if heads.len() == 1 => Ok(heads.remove(0)),
        _ => unreachable!("internal error: a backed-up operator has one input"),
    }
}

struct ChainBuilder<'a> {
    graph: &'a Graph,
    plan: &'a Plan,
    cfg: &'a EnvConfig,
    senders: Vec<Vec<Option<Vec<AnyBox>>>>,
    registry: &'a OperatorRegistry,
    restore: Option<&'a Restore>,
    fault_offset: u64,
    /// Per edge: records already sent on it by the subtask being built (a promotion).
    routed_before: std::collections::HashMap<usize, u64>,
    /// Building a promoted backup (its `restore` is its primary's state, not a checkpoint).
    promoted: bool,
    /// The keyed state image a promoted backup's node starts from (instead of `restore`).
    image: Option<(NodeId, crate::state::changes::KeyedImage)>,
}

impl ChainBuilder<'_> {
    /// Builds node `n` of subtask `j` with everything chained after it.
    fn build(&mut self, n: NodeId, j: usize) -> Result<Built, TaskError> {
        let node = &self.graph.nodes[n];
        let mut outputs = Vec::with_capacity(node.ports.len());
        for (p, port) in node.ports.iter().enumerate() {
            let mut outs = Vec::new();
            for (ei, e) in self.graph.edges.iter().enumerate() {
                if e.from != n || e.port != p {
                    continue;
                }
                if self.plan.chained[ei] {
                    match self.build(e.to, j)? {
                        Built::Inputs { mut heads, .. } if heads.len() == 1 => {
                            outs.push(heads.remove(0))
                        }
                        _ => unreachable!("internal error: only one-input operators are chained"),
                    }
                } else {
                    let txs = self.senders[ei][j]
                        .take()
                        .expect("each upstream subtask's senders are used once");
                    let cfg = OutputConfig {
                        batch_size: edge_batch_size(self.graph, self.cfg, e),
                        subtask: j,
                        max_parallelism: self.cfg.max_parallelism,
                        owners: self.plan.owners(e.to, self.cfg.max_parallelism),
                        load: self.registry.loads.get(e.to).cloned(),
                        load_when_single: self.graph.by_load.contains(&e.to),
                        counts_unsent: node.backup.is_some(),
                        target_uid: std::sync::Arc::new(self.plan.uids[e.to].clone()),
                        routed_before: self.routed_before.get(&ei).copied().unwrap_or(0),
                        adaptive_batch: self.registry.adapt_batches.clone(),
                    };
                    outs.push(e.partition.output(self.plan.kinds[ei], txs, cfg));
                }
            }
            outputs.push(port.tee(outs));
        }
        // Side output ports come after the operator's own: its builder sees only those.
        let first_side = node
            .side_outputs
            .iter()
            .flatten()
            .map(|t| t.port)
            .min()
            .unwrap_or(outputs.len());
        let side_outs = outputs.split_off(first_side);
        let sides = node
            .side_outputs
            .iter()
            .flatten()
            .zip(side_outs)
            .map(|(t, out)| node.ports[t.port].side(t.name.clone(), out))
            .collect();
        let env = OpEnv {
            sides: std::sync::Mutex::new(Some(crate::operator::side::SideOutputs::new(sides))),
            info: Arc::new(OperatorInfo {
                uid: self.plan.uids[n].clone(),
                name: node.name.clone(),
                subtask: j,
                parallelism: self.plan.parallelism[n],
                key_groups: matches!(node.rescale, crate::rescale::Rule::Keyed { .. })
                    .then(|| self.plan.owners(n, self.cfg.max_parallelism).range_of(j))
                    .flatten(),
            }),
            counters: self.registry.counters[n][j].clone(),
            config: self.cfg.clone(),
            initial_state: node.initial_state.as_ref().and_then(|v| v.get(j).cloned()),
            restored: self
                .restore
                .and_then(|r| r.states.get(&(self.plan.uids[n].clone(), j)).cloned()),
            start: match self.restore {
                _ if self.promoted => crate::checkpoint::StartPoint::Promoted,
                Some(r) => crate::checkpoint::StartPoint::Checkpoint(r.checkpoint),
                None => crate::checkpoint::StartPoint::Fresh,
            },
            promoted_image: std::sync::Mutex::new(
                self.image
                    .take_if(|(node, _)| *node == n)
                    .map(|(_, image)| image),
            ),
            fault_offset: self.fault_offset,
            live_config: crate::sync::lock(&self.registry.live_config)
                .get(&self.plan.uids[n])
                .cloned()
                .unwrap_or_default(),
            backed_up: node.backup.is_some(),
            hands_state: node
                .backup
                .as_ref()
                .is_some_and(|p| p.state_interval.is_some()),
        };
        // The builder runs user factories (sources, sinks): a panic there names the operator.
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            node.builder.build(&env, outputs)
        }));
        if matches!(built, Ok(Ok(_))) && env.take_promoted_image().is_some() {
            // Only a keyed operator hands its backup changes, and takes the image back.
            return Err(env.restore_error(
                "internal error: the promoted operator did not take its backup's state image",
            ));
        }
        built.unwrap_or_else(|payload| {
            Err(TaskError::Panic {
                uid: self.plan.uids[n].clone(),
                subtask: j,
                message: crate::error::panic_message(&*payload),
            })
        })
    }
}

/// One vertex of a running job: a chain of operators that runs as one actor per subtask
/// (Flink's job vertex). Its id is the uid of the chain's first operator.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VertexInfo {
    /// The uid of the chain's first operator.
    pub id: String,
    /// The names of the chained operators, joined by ` -> ` (as Flink names vertices).
    pub name: String,
    /// Its parallelism.
    pub parallelism: usize,
    /// The uids of the operators in the chain, first to last.
    pub operators: Vec<String>,
    /// For a vertex with keyed state whose subtasks each own one range of key groups (by
    /// count, the default): each subtask's range, in subtask order. `None` when rebalanced by
    /// load into several ranges: see [`key_group_runs`](Self::key_group_runs).
    pub key_groups: Option<Vec<std::ops::Range<usize>>>,
    /// For a vertex with keyed state: the key groups each subtask owns as runs of consecutive
    /// groups, in subtask order.
    pub key_group_runs: Option<Vec<Vec<std::ops::Range<usize>>>>,
    /// The edges into it from other vertices, in the order of its inputs (a source has none).
    pub inputs: Vec<VertexInput>,
}

/// An edge into a vertex from another vertex (Flink's plan node `inputs`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VertexInput {
    /// The id of the vertex the records come from.
    pub id: String,
    /// How records are spread over the subtasks, in Flink's words: `FORWARD`, `REBALANCE`,
    /// `BROADCAST` or `HASH`.
    pub ship_strategy: &'static str,
}

/// The vertices of a planned graph: one per chain head, in graph order.
pub(crate) fn vertices(graph: &Graph, plan: &Plan, max_parallelism: usize) -> Vec<VertexInfo> {
    plan.heads
        .iter()
        .map(|&h| {
            let members: Vec<usize> = (0..plan.uids.len())
                .filter(|&n| plan.head_of[n] == h)
                .collect();
            let runs: Option<Vec<Vec<std::ops::Range<usize>>>> = members
                .iter()
                .any(|&n| matches!(graph.nodes[n].rescale, crate::rescale::Rule::Keyed { .. }))
                .then(|| {
                    let owners = plan.owners(h, max_parallelism);
                    (0..plan.parallelism[h])
                        .map(|s| owners.runs_of(s))
                        .collect()
                });
            VertexInfo {
                id: plan.uids[h].clone(),
                name: members
                    .iter()
                    .map(|&n| graph.nodes[n].name.as_str())
                    .collect::<Vec<_>>()
                    .join(" -> "),
                parallelism: plan.parallelism[h],
                key_groups: runs.as_ref().and_then(|runs| {
                    runs.iter()
                        .map(|r| match r.as_slice() {
                            [] => Some(0..0),
                            [one] => Some(one.clone()),
                            _ => None,
                        })
                        .collect()
                }),
                key_group_runs: runs,
                operators: members.iter().map(|&n| plan.uids[n].clone()).collect(),
                inputs: inputs_of(graph, plan, h),
            }
        })
        .collect()
}

/// The edges into the vertex headed by `h` from other vertices, in input order (a chained
/// edge stays inside a vertex and is not one).
fn inputs_of(graph: &Graph, plan: &Plan, h: NodeId) -> Vec<VertexInput> {
    let mut edges: Vec<(usize, usize)> = graph
        .edges
        .iter()
        .enumerate()
        .filter(|&(e, edge)| plan.head_of[edge.to] == h && !plan.chained[e])
        .map(|(e, edge)| (edge.input, e))
        .collect();
    edges.sort();
    edges
        .into_iter()
        .map(|(_, e)| VertexInput {
            id: plan.uids[plan.head_of[graph.edges[e].from]].clone(),
            ship_strategy: match plan.kinds[e] {
                PartitionKind::Auto | PartitionKind::Forward => "FORWARD",
                PartitionKind::Rebalance => "REBALANCE",
                PartitionKind::Broadcast => "BROADCAST",
                PartitionKind::Hash => "HASH",
            },
        })
        .collect()
}
