//! What a job reports when it ends: per operator counters ([`OperatorResult`]), checkpoint
//! statistics and backup metrics ([`JobResult`]). The controller's `Stopping` state builds it.

use std::time::Duration;

use crate::backup::BackupMetrics;
use crate::checkpoint::coordinator::CheckpointStats;
use crate::graph::Graph;
use crate::plan::{OperatorRegistry, Plan};

/// Counters of one operator over all its subtasks, at the end of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OperatorResult {
    /// The operator's uid.
    pub uid: String,
    /// Its display name.
    pub name: String,
    /// Its parallelism.
    pub parallelism: usize,
    /// Records it received.
    pub records_in: u64,
    /// Records it emitted.
    pub records_out: u64,
    /// Records a source refused as malformed (`MalformedPolicy::Skip`).
    pub records_rejected: u64,
}

/// What a completed job reports.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct JobResult {
    /// The job's name.
    pub name: String,
    /// Wall time from deployment to the last subtask finishing.
    pub duration: Duration,
    /// Per operator, in graph order.
    pub operators: Vec<OperatorResult>,
    /// Checkpoint statistics, with checkpoints on (including `num_restarts`).
    pub checkpoints: Option<CheckpointStats>,
    /// Backed-up subtasks at the end (promotions, failover time, buffer queue); a job that
    /// restarted reports its last run's, with `degraded` set if any run's queue degraded.
    pub backups: Vec<BackupMetrics>,
}

impl JobResult {
    /// The result of the operator with `uid`.
    pub fn operator(&self, uid: &str) -> Option<&OperatorResult> {
        self.operators.iter().find(|o| o.uid == uid)
    }
}

/// The result of a job that ran `graph` for `duration` (checkpoints and backups not set).
pub(crate) fn result(
    graph: &Graph,
    plan: &Plan,
    registry: &OperatorRegistry,
    name: String,
    duration: Duration,
) -> JobResult {
    let operators = graph
        .nodes
        .iter()
        .enumerate()
        .map(|(id, node)| {
            let (mut i, mut o, mut r) = (0, 0, 0);
            for c in &registry.counters[id] {
                let (a, b, c) = c.snapshot();
                i += a;
                o += b;
                r += c;
            }
            OperatorResult {
                uid: plan.uids[id].clone(),
                name: node.name.clone(),
                parallelism: plan.parallelism[id],
                records_in: i,
                records_out: o,
                records_rejected: r,
            }
        })
        .collect::<Vec<OperatorResult>>();
    // A part (a source's malformed-line split) reports its rejections on its owner.
    let mut operators = operators;
    for (id, node) in graph.nodes.iter().enumerate() {
        if let Some(owner) = node.part_of {
            operators[owner].records_rejected += operators[id].records_rejected;
        }
    }
    JobResult {
        name,
        duration,
        operators,
        checkpoints: None,
        backups: Vec::new(),
    }
}
