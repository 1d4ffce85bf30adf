//! What a job reports when it ends: per operator counters ([`OperatorResult`]), checkpoint
//! statistics and backup metrics ([`JobResult`]). The controller's `Stopping` state builds it.

use std::time::Duration;

use crate::backup::BackupMetrics;
use crate::checkpoint::coordinator::CheckpointStats;
use crate::graph::Graph;
use crate::plan::{OperatorRegistry, Plan};

/// Counters of one operator over all its subtasks, at the end of a job.
///
/// **Processed is not committed.** `records_in` and `records_out` count every record the
/// operator took and emitted over every attempt of the job: after a failure, the records
/// since the checkpoint it restores are processed again and counted again, so with restarts
/// they exceed the input. `records_committed` counts, at a sink, the records in its
/// committed output — covered by a completed checkpoint, or by the final commit at the end
/// of the input — each once, replays or not: what a reader of the sink's output finds.
///
/// ```
/// let env = weir::Env::new();
/// env.generate(100, |i| i).discard().uid("sink");
/// let result = env.execute("counts").unwrap();
/// let sink = result.operator("sink").unwrap();
/// // No failure: processed and committed agree.
/// assert_eq!((sink.records_in, sink.records_committed), (100, 100));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OperatorResult {
    /// The operator's uid.
    pub uid: String,
    /// Its display name.
    pub name: String,
    /// Its parallelism.
    pub parallelism: usize,
    /// Records it received, over every attempt: replays after a restore included.
    pub records_in: u64,
    /// Records it emitted, over every attempt: replays after a restore included.
    pub records_out: u64,
    /// Records a source refused as malformed (`MalformedPolicy::Skip`).
    pub records_rejected: u64,
    /// A sink's records in committed output (a completed checkpoint's, or the final
    /// commit's), each counted once however often it was replayed; 0 for other operators.
    /// A job stopped with a savepoint does not commit what came after it.
    pub records_committed: u64,
    /// Late records a window operator dropped (Flink's `numLateRecordsDropped`), over every
    /// attempt; 0 for other operators and for windows with a late-data output.
    pub late_records_dropped: u64,
    /// Times the subtasks this operator heads were woken from parked (by input, output
    /// credit, a timer or a mail) rather than running on by themselves, summed over its
    /// subtasks and attempts: the job's thread hand-offs. 0 for an operator chained behind
    /// another (its chain's head counts them).
    pub wakes: u64,
}

/// What a completed job reports.
///
/// Per operator counts ([`OperatorResult`]) are of records *processed*, replays after a
/// restore included; a sink's `records_committed` is what its committed output holds.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct JobResult {
    /// The job's name.
    pub name: String,
    /// Wall time from deployment to the last subtask finishing.
    pub duration: Duration,
    /// Per operator, in graph order.
    pub operators: Vec<OperatorResult>,
    /// Checkpoint statistics (including `num_restarts`): `Some` whenever checkpoints are on
    /// (with zero counts for a job that ended before its first checkpoint); with checkpoints
    /// off, `None` unless the job took a savepoint or restarted.
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
            let (mut i, mut o, mut r, mut committed, mut late) = (0, 0, 0, 0, 0);
            let mut wakes = 0;
            for c in &registry.counters[id] {
                wakes += c.wakes.load(crate::sync::atomic::Ordering::Relaxed);
                committed += c.committed();
                late += c.late_dropped();
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
                records_committed: committed,
                late_records_dropped: late,
                wakes,
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
