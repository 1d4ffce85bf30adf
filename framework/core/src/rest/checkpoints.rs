//! Checkpoints over REST: statistics with their history and summary, one checkpoint's details,
//! the checkpoint settings, and a checkpoint triggered on request with its status.

use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Value};

use super::api::*;
use crate::checkpoint::CheckpointMode;
use crate::job::JobMonitor;

/// A checkpoint's status as Flink's REST names it.
fn status_name(s: crate::CheckpointStatus) -> &'static str {
    match s {
        crate::CheckpointStatus::InProgress => "IN_PROGRESS",
        crate::CheckpointStatus::Completed => "COMPLETED",
        crate::CheckpointStatus::Failed => "FAILED",
    }
}

pub(super) fn record_json(r: &crate::CheckpointRecord) -> Value {
    let status = status_name(r.status);
    let mut v = json!({
        "id": r.id,
        "status": status,
        "is_savepoint": r.is_savepoint,
        "savepointFormat": if r.is_savepoint { Value::from("CANONICAL") } else { Value::Null },
        "trigger_timestamp": r.trigger_timestamp_ms,
        "latest_ack_timestamp": r.latest_ack_timestamp_ms.map_or(-1, |t| t as i64),
        "state_size": r.state_size,
        "checkpointed_size": r.checkpointed_size,
        // Weir's: the longest synchronous (data path stopped at the barrier) and asynchronous
        // (copied, encoded, written beside it) parts of a subtask; Flink has these per subtask.
        "sync_duration": r.sync_duration_us / 1000,
        "sync_duration_us": r.sync_duration_us,
        "async_duration": r.async_duration_ms,
        "end_to_end_duration": r.end_to_end_duration_ms,
        "alignment_buffered": 0,
        "processed_data": 0,
        "persisted_data": r.persisted_data,
        // Weir's: the longest alignment and start delay of a subtask (Flink has these per
        // subtask only, in the checkpoint's details).
        "alignment_duration": r.alignment_ms,
        "start_delay": r.start_delay_ms,
        "num_subtasks": r.num_subtasks,
        "num_acknowledged_subtasks": r.num_acknowledged_subtasks,
        "checkpoint_type": match (r.is_savepoint, r.is_unaligned) {
            (true, _) => "SAVEPOINT",
            (false, true) => "UNALIGNED_CHECKPOINT",
            (false, false) => "CHECKPOINT",
        },
        "is_unaligned": r.is_unaligned,
        "mode": if r.at_least_once { "AT_LEAST_ONCE" } else { "EXACTLY_ONCE" },
    });
    if let Some(why) = &r.failure_message {
        v["failure_message"] = Value::from(why.as_str());
        v["failure_timestamp"] = Value::from(r.trigger_timestamp_ms + r.end_to_end_duration_ms);
    }
    v
}

pub(super) fn min_max_avg(m: &crate::MinMaxAvg) -> Value {
    json!({ "min": m.min, "max": m.max, "avg": m.avg })
}

pub(super) async fn checkpoints(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let s = job.checkpoint_stats().unwrap_or_default();
    let latest = |pred: &dyn Fn(&crate::CheckpointRecord) -> bool| {
        s.history
            .iter()
            .rev()
            .find(|r| pred(r))
            .map_or(Value::Null, record_json)
    };
    let completed = crate::CheckpointStatus::Completed;
    let restored = s
        .last_restored_checkpoint_id
        .map(|id| json!({ "id": id, "is_savepoint": false }));
    let summary = s.completed_summary.unwrap_or_default();
    let zero = json!({ "min": 0, "max": 0, "avg": 0.0 });
    Ok(HttpResponse::Ok().json(json!({
        "counts": {
            "restored": s.num_restarts,
            "total": s.number_of_completed_checkpoints + s.number_of_failed_checkpoints + s.number_of_in_progress_checkpoints,
            "in_progress": s.number_of_in_progress_checkpoints,
            "completed": s.number_of_completed_checkpoints,
            "failed": s.number_of_failed_checkpoints,
        },
        "summary": {
            "checkpointed_size": min_max_avg(&summary.checkpointed_size),
            "state_size": min_max_avg(&summary.state_size),
            "end_to_end_duration": min_max_avg(&summary.end_to_end_duration_ms),
            "alignment_buffered": zero,
            "processed_data": zero,
            "persisted_data": min_max_avg(&summary.persisted_data),
        },
        "latest": {
            "completed": latest(&|r| r.status == completed && !r.is_savepoint),
            "savepoint": latest(&|r| r.status == completed && r.is_savepoint),
            "failed": latest(&|r| r.status == crate::CheckpointStatus::Failed),
            "restored": restored,
        },
        "history": s.history.iter().rev().map(record_json).collect::<Vec<_>>(),
    })))
}

pub(super) async fn checkpoint_details(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let r = &checkpoint_in_path(&job, &req)?;
    let mut v = record_json(r);
    // Per vertex, as Flink's details: what its subtasks acknowledged so far.
    let mut tasks = serde_json::Map::new();
    for vertex in job.vertices() {
        let mine: Vec<&crate::SubtaskCheckpoint> = r
            .subtasks
            .iter()
            .filter(|s| s.vertex == vertex.id)
            .collect();
        tasks.insert(vertex.id.clone(), vertex_json(r, &mine, vertex.parallelism));
    }
    v["tasks"] = Value::Object(tasks);
    Ok(HttpResponse::Ok().json(v))
}

/// The checkpoint `{cid}` of the request's path, from `job`'s history.
fn checkpoint_in_path(
    job: &JobMonitor,
    req: &HttpRequest,
) -> Result<crate::CheckpointRecord, ApiError> {
    let raw = req.match_info().get("cid").unwrap_or_default();
    let cid: u64 = raw.parse().map_err(|_| {
        ApiError::bad_request(format!("checkpoint id must be a number, got `{raw}`"))
    })?;
    let s = job.checkpoint_stats().unwrap_or_default();
    s.history.into_iter().find(|r| r.id == cid).ok_or_else(|| {
        ApiError::not_found(format!(
            "Checkpoint {cid} not found in job {} (the last {} are kept)",
            job.id(),
            crate::checkpoint::coordinator::HISTORY
        ))
    })
}

/// One vertex's part of checkpoint `r`: its acknowledged subtasks `mine` of `parallelism`.
fn vertex_json(
    r: &crate::CheckpointRecord,
    mine: &[&crate::SubtaskCheckpoint],
    parallelism: usize,
) -> Value {
    let sum = |f: fn(&crate::SubtaskCheckpoint) -> u64| mine.iter().map(|s| f(s)).sum::<u64>();
    let max = |f: fn(&crate::SubtaskCheckpoint) -> u64| mine.iter().map(|s| f(s)).max();
    json!({
        "id": r.id,
        "status": status_name(r.status),
        "latest_ack_timestamp": max(|s| s.ack_timestamp_ms).map_or(-1, |t| t as i64),
        "state_size": sum(|s| s.state_size),
        "checkpointed_size": sum(|s| s.checkpointed_size),
        "end_to_end_duration": max(|s| s.end_to_end_duration_ms).unwrap_or(0),
        "alignment_buffered": 0,
        "processed_data": 0,
        "persisted_data": sum(|s| s.persisted_data),
        "num_subtasks": parallelism,
        "num_acknowledged_subtasks": mine.len(),
    })
}

/// `/checkpoints/details/{cid}/subtasks/{vid}`: each subtask of vertex `vid` in checkpoint
/// `cid` (Flink's per-subtask checkpoint statistics), the vertex's totals beside them.
pub(super) async fn checkpoint_subtasks(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let r = &checkpoint_in_path(&job, &req)?;
    let vid = req.match_info().get("vid").unwrap_or_default();
    let vertices = job.vertices();
    let vertex = vertices.iter().find(|v| v.id == vid).ok_or_else(|| {
        let known: Vec<&str> = vertices.iter().map(|v| v.id.as_str()).collect();
        ApiError::not_found(format!(
            "no vertex `{vid}` in job {} (it has: {})",
            job.id(),
            known.join(", ")
        ))
    })?;
    let mut mine: Vec<&crate::SubtaskCheckpoint> = r
        .subtasks
        .iter()
        .filter(|s| s.vertex == vertex.id)
        .collect();
    mine.sort_by_key(|s| s.subtask);
    let mut v = vertex_json(r, &mine, vertex.parallelism);
    let acked = |j: usize| mine.iter().find(|s| s.subtask == j);
    v["subtasks"] = (0..vertex.parallelism)
        .map(|j| match acked(j) {
            Some(s) => json!({
                "index": j,
                "status": "completed",
                "ack_timestamp": s.ack_timestamp_ms,
                "end_to_end_duration": s.end_to_end_duration_ms,
                "state_size": s.state_size,
                "checkpointed_size": s.checkpointed_size,
                "checkpoint": {
                    "sync": s.sync_duration_us / 1000,
                    "async": s.async_duration_ms,
                },
                "alignment": {
                    "buffered": 0,
                    "processed": 0,
                    "persisted": s.persisted_data,
                    "duration": s.alignment_ms,
                },
                "start_delay": s.start_delay_ms,
                "unaligned_checkpoint": s.unaligned,
                "aborted": false,
            }),
            None => json!({ "index": j, "status": "pending_or_failed" }),
        })
        .collect();
    Ok(HttpResponse::Ok().json(v))
}

pub(super) async fn trigger_checkpoint(
    state: State,
    req: HttpRequest,
    body: web::Payload,
) -> Answer {
    authorize(&state, &req)?;
    let job = job_of(&state, &req)?;
    let body = json_body(body, state.max_body_bytes).await?;
    match optional_string(&body, "checkpointType")?.as_deref() {
        None | Some("DEFAULT") | Some("CONFIGURED") | Some("FULL") => {}
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "field `checkpointType` must be FULL, CONFIGURED or DEFAULT, got `{other}`"
            )))
        }
    }
    running(&job)?;
    let j = job.clone();
    let id = web::block(move || j.trigger_checkpoint())
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(ApiError::conflict)?;
    accepted(
        &state,
        Trigger::Checkpoint {
            job: job.id().to_owned(),
            id,
        },
    )
}

pub(super) async fn checkpoint_status(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let tid = req
        .match_info()
        .get("trigger")
        .unwrap_or_default()
        .to_owned();
    let found = match state
        .triggers
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&tid)
    {
        Some(Trigger::Checkpoint { job: j, id }) if j == job.id() => Some(*id),
        _ => None,
    };
    let id = found.ok_or_else(|| {
        ApiError::not_found(format!(
            "Checkpoint trigger {tid} not found for job {}",
            job.id()
        ))
    })?;
    let s = job.checkpoint_stats().unwrap_or_default();
    let record = s.history.iter().find(|r| r.id == id);
    let done = json!({ "status": { "id": "COMPLETED" }, "operation": { "checkpointId": id } });
    let body = match record.map(|r| r.status) {
        Some(crate::CheckpointStatus::InProgress) => json!({ "status": { "id": "IN_PROGRESS" } }),
        Some(crate::CheckpointStatus::Failed) => {
            let why = record
                .and_then(|r| r.failure_message.clone())
                .unwrap_or_default();
            json!({
                "status": { "id": "COMPLETED" },
                "operation": { "failure-cause": { "class": "weir.CheckpointError", "stack-trace": why } },
            })
        }
        Some(crate::CheckpointStatus::Completed) => done,
        // Out of the history: complete if it or a later one completed.
        None if s.last_completed_checkpoint_id >= Some(id) => done,
        None => json!({ "status": { "id": "IN_PROGRESS" } }),
    };
    Ok(HttpResponse::Ok().json(body))
}

pub(super) async fn checkpoint_config(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let c = job.checkpoint_config();
    Ok(HttpResponse::Ok().json(json!({
        "mode": match c.mode { CheckpointMode::ExactlyOnce => "exactly_once", CheckpointMode::AtLeastOnce => "at_least_once" },
        // Flink reports a disabled periodic checkpoint as the largest interval.
        "interval": c.interval.map_or(i64::MAX as u64, ms),
        "timeout": ms(c.timeout),
        "min_pause": ms(c.min_pause),
        "max_concurrent": c.max_concurrent,
        "externalization": { "enabled": true, "delete_on_cancellation": false },
        "unaligned_checkpoints": c.unaligned,
        "aligned_checkpoint_timeout": c.aligned_checkpoint_timeout.map_or(0, ms),
        "tolerable_failed_checkpoints": c.tolerable_failed_checkpoints,
        "checkpoints_after_tasks_finish": false,
        "state_backend": "weir (CBOR files)",
        "checkpoint_storage": "FileSystemCheckpointStorage",
    })))
}
