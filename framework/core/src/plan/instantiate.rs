//! Instantiating a plan: every subtask's chain and every channel between subtasks, with the
//! dual channels and groups of backed-up subtasks and the restored channel state of each
//! input gate ([`instantiate`]). Not the building of one chain's operators (`chain`), nor
//! starting the actors (`controller`).

use std::collections::HashMap;

use crate::sync::AtomicWaker;

use crate::backup::{BackupGroup, GroupSpec};
use crate::config::EnvConfig;
use crate::erased::AnyBox;
use crate::error::TaskError;
use crate::event::SubtaskId;
use crate::graph::{Built, EdgeOutput, Graph, NodeId};
use crate::metrics::SubtaskCounters;
use crate::operator::connect::SelectionCell;
use crate::operator::step::InputGate;
use crate::partition::PartitionKind;
use crate::sync::Arc;
use crate::task::Driver;

use super::chain::ChainBuilder;
use super::{OperatorRegistry, Plan, Restore, SubtaskSpec};

/// Builds every subtask's chain and every channel (restoring `restore` if given).
pub(crate) fn instantiate(
    graph: &Graph,
    plan: &Plan,
    cfg: &EnvConfig,
    registry: &OperatorRegistry,
    restore: Option<&Restore>,
    attempt: u64,
) -> Result<Vec<SubtaskSpec>, TaskError> {
    let actors = Actors::of(graph, plan);
    let Channels {
        senders,
        mut receivers,
        backups,
    } = channels(graph, plan, cfg, &actors);
    let Groups {
        mut groups,
        mut claims,
    } = backup_groups(graph, plan, cfg, restore, backups);
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
    let gates = Gates {
        graph,
        plan,
        cfg,
        restore,
    };
    let mut specs = Vec::new();
    for &h in &plan.heads {
        for j in 0..plan.parallelism[h] {
            let actor = actors.of[h][j];
            let driver = match builder.build(h, j)? {
                Built::Source(step) => Driver::Source(step),
                Built::Inputs { heads, selection } => {
                    // A backed-up operator has one input (`plan` refuses others).
                    let claim = claims.remove(&(h, j));
                    let inputs = &mut receivers[h];
                    gates.driver(h, j, heads, selection, inputs, claim)?
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
                rx_waker: actors.wakers[actor].clone(),
                backup: groups.remove(&(h, j)),
            });
        }
    }
    Ok(specs)
}

/// One actor per (chain head, subtask), and its receive waker.
struct Actors {
    /// By node (chain heads only) and subtask: the actor's index.
    of: Vec<Vec<usize>>,
    /// By actor: the waker of its inputs.
    wakers: Vec<Arc<AtomicWaker>>,
}

impl Actors {
    fn of(graph: &Graph, plan: &Plan) -> Self {
        let mut of = vec![Vec::new(); graph.nodes.len()];
        let mut wakers = Vec::new();
        for &h in &plan.heads {
            for _ in 0..plan.parallelism[h] {
                of[h].push(wakers.len());
                wakers.push(Arc::new(AtomicWaker::new()));
            }
        }
        Actors { of, wakers }
    }
}

/// The channels of every networked edge.
struct Channels {
    /// Senders by (edge, upstream subtask); none for a chained edge.
    senders: Vec<Vec<Option<Vec<AnyBox>>>>,
    /// Receivers by (node, input, downstream subtask).
    receivers: Vec<Vec<Vec<Vec<AnyBox>>>>,
    /// Backed-up subtasks: their dual channels in, their output channels, by (node, subtask).
    backups: HashMap<(NodeId, usize), BackupParts>,
}

/// Makes the channels of every networked edge: dual channels into a backed-up subtask, and
/// the fences of a backed-up subtask's output channels.
fn channels(graph: &Graph, plan: &Plan, cfg: &EnvConfig, actors: &Actors) -> Channels {
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
    let mut backups: HashMap<(NodeId, usize), BackupParts> = Default::default();
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
                let waker = actors.wakers[actors.of[e.to][j]].clone();
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
    Channels {
        senders,
        receivers,
        backups,
    }
}

/// The backup groups of the backed-up subtasks, and the first primaries' claims, by (node,
/// subtask).
struct Groups {
    groups: HashMap<(NodeId, usize), std::sync::Arc<dyn BackupGroup>>,
    claims: HashMap<(NodeId, usize), AnyBox>,
}

/// Makes the group of each backed-up subtask from the parts its channels gathered.
fn backup_groups(
    graph: &Graph,
    plan: &Plan,
    cfg: &EnvConfig,
    restore: Option<&Restore>,
    backups: HashMap<(NodeId, usize), BackupParts>,
) -> Groups {
    let mut groups: HashMap<(NodeId, usize), std::sync::Arc<dyn BackupGroup>> = Default::default();
    let mut claims: HashMap<(NodeId, usize), AnyBox> = Default::default();
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
    Groups { groups, claims }
}

/// What the input gates of a chain head's subtasks are made from.
struct Gates<'a> {
    graph: &'a Graph,
    plan: &'a Plan,
    cfg: &'a EnvConfig,
    restore: Option<&'a Restore>,
}

impl Gates<'_> {
    /// The driver of subtask `j` of chain head `h`, whose operators take `heads` (one per
    /// input): a gate per input over its receivers (`inputs`, by input and subtask), the
    /// claimed gate of a backed-up subtask (`claim`), restoring each input's channel state.
    fn driver(
        &self,
        h: NodeId,
        j: usize,
        heads: Vec<AnyBox>,
        selection: Option<Arc<SelectionCell>>,
        inputs: &mut [Vec<Vec<AnyBox>>],
        mut claim: Option<AnyBox>,
    ) -> Result<Driver, TaskError> {
        let (graph, plan) = (self.graph, self.plan);
        let mut gates: Vec<Box<dyn InputGate>> = Vec::new();
        let backed_up = claim.is_some();
        debug_assert!(!backed_up || heads.len() == 1, "one input when backed up");
        for (input, head) in heads.into_iter().enumerate() {
            let rxs = std::mem::take(&mut inputs[input][j]);
            let port = input_port(graph, h, input);
            let key = (format!("{}#in{input}", plan.uids[h]), j);
            let replay = self
                .restore
                .and_then(|r| r.states.get(&key))
                .map(|v| v.as_slice());
            if let Some(c) = claim.take() {
                // A backed-up subtask's checkpoints are aligned (no channel state of its
                // own); one taken unaligned before it was backed up is refused rather than
                // its in-flight records dropped.
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
                    .and_then(|e| e.owned_by(&plan.owners(h, self.cfg.max_parallelism), j))
            });
            let gate =
                port.gate(rxs, head, replay, owned)
                    .map_err(|message| TaskError::Checkpoint {
                        uid: plan.uids[h].clone(),
                        subtask: j,
                        message: format!("cannot restore channel state: {message}"),
                    })?;
            gates.push(gate);
        }
        let driver = Driver::inputs(
            gates,
            selection,
            crate::task::AlignmentSettings::of(&self.cfg.checkpoint),
            plan.uids[h].clone(),
        );
        Ok(if backed_up {
            driver.force_aligned()
        } else {
            driver
        })
    }
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
