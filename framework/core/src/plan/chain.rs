//! Building one subtask's chain: a node's operator over its outputs (chained operators built
//! in place, networked edges as partitioned outputs), with the environment its builder sees
//! (`ChainBuilder`); and the operator of a promoted backup ([`build_promoted`]). Not the
//! channels the chain's outputs send on (`instantiate`).

use crate::config::EnvConfig;
use crate::erased::AnyBox;
use crate::error::TaskError;
use crate::graph::{Built, Graph, NodeId, OpEnv};
use crate::operator::OperatorInfo;
use crate::partition::OutputConfig;
use crate::sync::Arc;

use super::{OperatorRegistry, Plan, Restore};

/// Records per batch on edge `e`: smaller into and out of a backed-up operator (see
/// [`BackupPolicy::batch_size`](crate::BackupPolicy)), the job's elsewhere.
fn edge_batch_size(graph: &Graph, cfg: &EnvConfig, e: &crate::graph::Edge) -> usize {
    [e.from, e.to]
        .iter()
        .filter_map(|&n| graph.nodes[n].backup.as_ref().and_then(|b| b.batch_size))
        .fold(cfg.batch_size, usize::min)
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

pub(super) struct ChainBuilder<'a> {
    pub(super) graph: &'a Graph,
    pub(super) plan: &'a Plan,
    pub(super) cfg: &'a EnvConfig,
    pub(super) senders: Vec<Vec<Option<Vec<AnyBox>>>>,
    pub(super) registry: &'a OperatorRegistry,
    pub(super) restore: Option<&'a Restore>,
    pub(super) fault_offset: u64,
    /// Per edge: records already sent on it by the subtask being built (a promotion).
    pub(super) routed_before: std::collections::HashMap<usize, u64>,
    /// Building a promoted backup (its `restore` is its primary's state, not a checkpoint).
    pub(super) promoted: bool,
    /// The keyed state image a promoted backup's node starts from (instead of `restore`).
    pub(super) image: Option<(NodeId, crate::state::changes::PromotedImage)>,
}

impl ChainBuilder<'_> {
    /// Builds node `n` of subtask `j` with everything chained after it.
    pub(super) fn build(&mut self, n: NodeId, j: usize) -> Result<Built, TaskError> {
        let node = &self.graph.nodes[n];
        let mut outputs = self.outputs(n, j)?;
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
        let env = self.op_env(n, j, crate::operator::side::SideOutputs::new(sides));
        // The builder runs user factories (sources, sinks): a panic there names the operator.
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            node.builder.build(&env, outputs)
        }));
        if matches!(built, Ok(Ok(_))) && env.take_promoted_image().is_some() {
            // Only keyed and window operators hand their backup changes, and take the image
            // back.
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

    /// The output of each port of node `n` in subtask `j`: the operators chained to it (built
    /// now) and the partitioned outputs of its networked edges, teed.
    fn outputs(&mut self, n: NodeId, j: usize) -> Result<Vec<AnyBox>, TaskError> {
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
        Ok(outputs)
    }

    /// The environment node `n`'s builder sees in subtask `j`: its info, counters, config,
    /// the state it starts from, and its `sides` outputs.
    fn op_env(&mut self, n: NodeId, j: usize, sides: crate::operator::side::SideOutputs) -> OpEnv {
        let node = &self.graph.nodes[n];
        OpEnv {
            sides: std::sync::Mutex::new(Some(sides)),
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
        }
    }
}
