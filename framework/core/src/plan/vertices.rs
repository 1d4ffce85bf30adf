//! The vertices of a planned job as the API and the REST API show them ([`VertexInfo`],
//! [`VertexInput`]): one per chain, with its operators, key groups and inputs. Not the plan
//! they are read from (the parent module).

use crate::graph::{Graph, NodeId};
use crate::partition::PartitionKind;

use super::Plan;

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
