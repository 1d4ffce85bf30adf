//! The JSON line `recovery` prints: the run's setup and recovery times with what they mean
//! ([`summary`]), and the restore, checkpoints and the output's check ([`details`]).

use std::sync::atomic::Ordering;

use serde_json::{json, Value};
use weir::JobResult;
use weir_benches::recovery_support::{Expected, RecoveryProbe, Tally};
use weir_examples::answers::{uid, Answers};
use weir_testing::Committed;

use super::{ms, Args};

/// What a finished run leaves to report.
pub(crate) struct Finished<'a> {
    pub(crate) args: &'a Args,
    pub(crate) answers: &'a Answers,
    pub(crate) expected: &'a Expected,
    pub(crate) fault_at: u64,
    pub(crate) failed_subtask: usize,
    pub(crate) restart_attempts: u32,
    pub(crate) batch_size: usize,
    pub(crate) arbiters: usize,
    pub(crate) probe: &'a RecoveryProbe,
    pub(crate) faults_fired: usize,
    pub(crate) result: JobResult,
    pub(crate) started_ns: u64,
    pub(crate) total_seconds: f64,
    pub(crate) main: Committed,
    pub(crate) side: Committed,
    pub(crate) tally: Tally,
}

/// Each fault: where it was, whether it fired, its target and its recovery.
fn per_fault(f: &Finished) -> Vec<Value> {
    let (probe, started_ns) = (f.probe, f.started_ns);
    let watch = probe.watch.as_ref().expect("a watch");
    watch
        .faults
        .iter()
        .enumerate()
        .map(|(j, f)| {
            let target = f.target();
            let fault_ns = f.fault_ns.load(Ordering::SeqCst);
            let last_checkpoint = (fault_ns != 0)
                .then(|| probe.last_checkpoint_before(fault_ns))
                .flatten();
            json!({
                "n": j + 1,
                "input_record": f.index,
                "subtask_record": f.local,
                "fired": fault_ns != 0,
                "fault_after_start_ms": (fault_ns != 0)
                    .then(|| fault_ns.saturating_sub(started_ns) as f64 / 1e6),
                "processed_after_fault": f.processed_after.load(Ordering::SeqCst),
                "replayed_to_fault": Some(f.replayed_to_fault.load(Ordering::SeqCst))
                    .filter(|&n| n != u64::MAX),
                "last_checkpoint_before_fault": last_checkpoint.map(|c| c.0),
                "last_checkpoint_before_fault_ms": last_checkpoint
                    .map(|c| fault_ns.saturating_sub(c.1) as f64 / 1e6),
                "target_id": target.map(|w| w.id),
                "target_index": target.map(|w| w.index),
                "target_receipts_before_fault": target.map(|w| w.before.load(Ordering::SeqCst)),
                "target_receipts_after_fault": target.map(|w| w.after.load(Ordering::SeqCst)),
                "recovery_ms": f.recovery_ms(),
            })
        })
        .collect()
}

/// Each backup's metrics.
fn backups(result: &JobResult) -> Vec<Value> {
    result
        .backups
        .iter()
        .map(|b| {
            json!({
                "uid": b.uid,
                "subtask": b.subtask,
                "promotions": b.promotions,
                "last_failover_ms": b.last_failover.map(ms),
                "backup_replacements": b.backup_replacements,
                "queue_entries": b.queue_entries,
                "queue_bytes": b.queue_bytes,
                "filtered": b.filtered,
                "added": b.added,
                "claimed": b.claimed,
                "backup_lag": b.backup_lag,
                "degraded": b.degraded,
            })
        })
        .collect()
}

/// The JSON line's first part: the run's setup, the recovery times and what they mean.
pub(crate) fn summary(f: &Finished) -> Value {
    let (args, probe, result) = (f.args, f.probe, &f.result);
    let k = args.failures;
    let watch = probe.watch.as_ref().expect("a watch");
    let recovery_ms_each: Vec<Option<f64>> = watch.faults.iter().map(|f| f.recovery_ms()).collect();
    let first = &watch.faults[0];
    let target = first.target();
    let promotions: u64 = result.backups.iter().map(|b| b.promotions).sum();
    let restarts = result.checkpoints.as_ref().map_or(0, |s| s.num_restarts);
    let last_failover_ms = result
        .backups
        .iter()
        .filter(|b| b.promotions > 0)
        .filter_map(|b| b.last_failover)
        .map(ms)
        .reduce(f64::max);
    let after_first = |slot| probe.ms_after_fault(slot);
    let fired = f.faults_fired;
    json!({
        "bench": "recovery",
        "mode": args.mode.name(),
        "kind": args.kind.name(),
        "failures": k,
        "input": match f.answers {
            Answers::Generated { .. } => "generated".to_string(),
            Answers::Lines(p) => p.display().to_string(),
        },
        "seed": args.seed,
        "records": f.expected.records,
        "parallelism": args.parallelism,
        "fault_at": f.fault_at,
        "fault_subtask": f.failed_subtask,
        "fault_subtask_record": first.local,
        "fault_fired": fired == k,
        "faults_fired": fired,
        "checkpoint_interval_ms": args.checkpoint_interval_ms,
        "restart_delay_ms": args.restart_delay_ms,
        "restart_attempts": f.restart_attempts,
        "heartbeat_ms": args.heartbeat_ms,
        "heartbeat_timeout_ms": args.heartbeat_timeout_ms,
        "batch_size": f.batch_size,
        "arbiters": f.arbiters,
        "recovery_ms": recovery_ms_each[0],
        "recovery_ms_each": recovery_ms_each,
        "recovery_ms_definition": "per fault: time from the injected flat_map fault (taken in \
            the failing thread just before it panics, hangs or stops its arbiter) to the sink \
            receiving the fault's target record: the first record of the failed subtask that \
            passes parse, level and filter and that the failed instance did not process (at or \
            after the fault's input record for a panic or a hang; after what it processed in \
            its last poll for a stop). The failure kept it from the sink, so this is its first \
            processing after the recovery. restart-all: detection, restart delay, redeploy, \
            restore, replay from the restored checkpoint (or the start). bqbs: detection, \
            promotion, replay of flat_map's input since its last checkpoint (output the \
            downstream has is not sent again), one channel hop to split..sink. recovery_ms is \
            the first fault's.",
        "promotions": promotions,
        "restarts": restarts,
        "last_failover_ms": last_failover_ms,
        "last_failover_ms_definition": "bqbs: from the failure's detection to the promoted \
            backup running, of the last promotion (BackupMetrics::last_failover)",
        "recovery_target_id": target.map(|w| w.id),
        "recovery_target_index": target.map(|w| w.index),
        "target_receipts_before_fault": target.map(|w| w.before.load(Ordering::SeqCst)),
        "target_receipts_after_fault": target.map(|w| w.after.load(Ordering::SeqCst)),
        "faults": per_fault(f),
        "backups": backups(result),
        "first_output_after_fault_ms": after_first(&probe.first_write_after_fault_ns),
        "first_output_after_fault_ms_definition": "restart-all: first fault -> a sink subtask \
            of the restarted job receives its first records (written to its in-progress file)",
        "first_commit_after_fault_ms": after_first(&probe.first_commit_after_fault_ns),
        "first_commit_after_fault_ms_definition": "restart-all: first fault -> a sink subtask \
            of the restarted job first commits records it wrote (first checkpoint completed \
            after the restart, or the end of the input)",
        "redeploy_ms": after_first(&probe.first_sink_after_fault_ns),
    })
}

/// The JSON line's second part: the restore, the checkpoints, and the output's check.
pub(crate) fn details(f: &Finished) -> Value {
    let (args, probe, result, expected, t) = (f.args, f.probe, &f.result, f.expected, &f.tally);
    let (main, side) = (&f.main, &f.side);
    let stats = result.checkpoints.clone();
    let restarts = stats.as_ref().map_or(0, |s| s.num_restarts);
    let restored = *probe
        .restored_checkpoint
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let op_in = |u: &str| result.operator(u).map_or(0, |o| o.records_in);
    let source_out = result.operator(uid::SOURCE).map_or(0, |o| o.records_out);
    json!({
        "restored_checkpoint": restored,
        "restarted_from_scratch": restarts > 0 && restored.is_none(),
        "total_seconds": f.total_seconds,
        "job_seconds": result.duration.as_secs_f64(),
        "source_records_out": source_out,
        "replayed_records": source_out.saturating_sub(expected.records),
        "checkpoints_completed": stats.as_ref().map(|s| s.number_of_completed_checkpoints),
        "checkpoints_failed": stats.as_ref().map(|s| s.number_of_failed_checkpoints),
        "num_restarts": stats.as_ref().map(|s| s.num_restarts),
        "sink_instances": probe.sink_instances.load(Ordering::SeqCst),
        "files_committed_by_restore": probe.committed_by_restore.load(Ordering::SeqCst),
        "uncommitted_files_discarded": probe.discarded_files.load(Ordering::SeqCst),
        "expected": expected.kept.len(),
        "committed": t.committed,
        "committed_files": main.files,
        "uncommitted_files_left": main.uncommitted_files + side.uncommitted_files,
        "duplicates": t.duplicates,
        "missing": t.missing,
        "unexpected": t.unexpected,
        "wrong_lines": t.wrong_lines,
        "unparsable": t.unparsable,
        "duplicate_examples": t.duplicate_examples,
        "missing_examples": t.missing_examples,
        "sink_records_in": op_in(uid::SINK),
        "flat_map_records_in": op_in(uid::FLAT_MAP),
        "malformed_expected": expected.malformed,
        "malformed_committed": side.lines.len(),
        "dropped_expected": expected.dropped,
        "output_dir": args.output.as_ref().map(|d| d.display().to_string()),
        "checkpoint_dir": args.checkpoint_dir.as_ref().map(|d| d.display().to_string()),
    })
}
