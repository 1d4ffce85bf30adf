//! The controller's side of failures (`failure` has the vocabulary): where a panic happened
//! in terms replay reproduces, whether it recurs, and the failure history the job's handle
//! reads. The counters of every operator subtask are read when an attempt is deployed, so a
//! position is counted from the attempt's start.

use crate::error::JobError;
use crate::failure::{FailureClass, FailureOutcome, FailureRecord, PanicAt, Recurrence};
use crate::graph::Graph;
use crate::plan::{OperatorRegistry, Plan};
use crate::sync::atomic::Ordering;

/// What the controller keeps about the failures of a job.
#[derive(Debug, Default)]
pub(crate) struct FailureLog {
    recurrence: Recurrence,
    /// Per node and subtask: the records counted for its position when the attempt started.
    baseline: Vec<Vec<u64>>,
    /// The checkpoint the current attempt was restored from.
    restored: Option<u64>,
}

/// The count a node's position is measured in: records taken in, or emitted by a source.
fn position_count(graph: &Graph, registry: &OperatorRegistry, n: usize, subtask: usize) -> u64 {
    let Some(c) = registry.counters.get(n).and_then(|v| v.get(subtask)) else {
        return 0;
    };
    let counter = match graph.nodes.get(n).is_some_and(|node| node.is_source) {
        true => &c.records_out,
        false => &c.records_in,
    };
    counter.load(Ordering::Relaxed)
}

impl FailureLog {
    /// An attempt restored from `restored` is about to be deployed: positions count from here.
    pub(crate) fn deploying(
        &mut self,
        graph: &Graph,
        registry: &OperatorRegistry,
        restored: Option<u64>,
    ) {
        self.restored = restored;
        self.baseline = (0..registry.counters.len())
            .map(|n| {
                (0..registry.counters[n].len())
                    .map(|j| position_count(graph, registry, n, j))
                    .collect()
            })
            .collect();
    }

    /// Where `error` happened, if it is a panic of a known operator subtask.
    fn panic_at(
        &self,
        error: &JobError,
        graph: &Graph,
        plan: &Plan,
        registry: &OperatorRegistry,
    ) -> Option<PanicAt> {
        let JobError::OperatorPanicked { uid, subtask, .. } = error else {
            return None;
        };
        let n = plan.uids.iter().position(|u| u == uid)?;
        let start = *self.baseline.get(n)?.get(*subtask)?;
        Some(PanicAt {
            uid: uid.clone(),
            subtask: *subtask,
            checkpoint: self.restored,
            records: position_count(graph, registry, n, *subtask).saturating_sub(start),
        })
    }

    /// Classifies the failure of `attempt`: a panic that recurs at the same input position
    /// becomes [`JobError::FailsAgain`]; any other error keeps its own class.
    pub(crate) fn classify(
        &mut self,
        failure: JobError,
        job: &str,
        attempt: u64,
        restarts: u64,
        batch: u64,
        (graph, plan, registry): (&Graph, &Plan, &OperatorRegistry),
    ) -> (JobError, FailureClass) {
        let at = self.panic_at(&failure, graph, plan, registry);
        let recurs = self
            .recurrence
            .observe(attempt, at.clone(), batch)
            .is_some();
        let Some(at) = at.filter(|_| recurs) else {
            let class = FailureClass::of(&failure);
            return (failure, class);
        };
        let since = match at.checkpoint {
            Some(id) => format!("checkpoint {id}"),
            None => "the start".to_owned(),
        };
        let error = JobError::FailsAgain {
            job: job.to_owned(),
            uid: at.uid,
            subtask: at.subtask,
            since,
            records: at.records,
            restarts,
            last: Box::new(failure),
        };
        (error, FailureClass::Deterministic)
    }
}

/// The record of a failure of `attempt` now.
pub(crate) fn record(
    attempt: u64,
    error: &JobError,
    class: FailureClass,
    outcome: FailureOutcome,
) -> FailureRecord {
    FailureRecord {
        time_ms: crate::metrics::now_ms(),
        attempt,
        error: error.to_string(),
        class,
        outcome,
        recovery: None,
    }
}
