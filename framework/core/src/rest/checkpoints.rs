//! Checkpoints over REST: statistics with their history and summary, one checkpoint's details,
//! the checkpoint settings, and a checkpoint triggered on request with its status.

use actix_web::{web, HttpRequest, HttpResponse};

use super::request::{
    authorize, job_of, json_body, ms, optional_string, running, Answer, ApiError, State,
};
use super::triggers::{accepted, Trigger};
use crate::api_types::{
    CheckpointConfig, CheckpointCounts, CheckpointStatistics, CheckpointSummary,
    CheckpointVertexStatistics, CheckpointingStatistics, Externalization, FailureCause,
    LatestCheckpoints, MinMaxAvg, OperationResult, OperationStatus, RestoredCheckpoint,
    SubtaskAlignment, SubtaskCheckpointDuration, SubtaskCheckpointStatistics,
};
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

pub(super) fn record_json(r: &crate::CheckpointRecord) -> CheckpointStatistics {
    let failed = r.failure_message.as_ref();
    CheckpointStatistics {
        id: r.id,
        status: status_name(r.status).to_owned(),
        is_savepoint: r.is_savepoint,
        savepoint_format: r.is_savepoint.then(|| "CANONICAL".to_owned()),
        trigger_timestamp: r.trigger_timestamp_ms,
        latest_ack_timestamp: r.latest_ack_timestamp_ms.map_or(-1, |t| t as i64),
        state_size: r.state_size,
        checkpointed_size: r.checkpointed_size,
        // Weir's: the longest synchronous (data path stopped at the barrier) and asynchronous
        // (copied, encoded, written beside it) parts of a subtask; Flink has these per subtask.
        sync_duration: Some(r.sync_duration_us / 1000),
        sync_duration_us: Some(r.sync_duration_us),
        async_duration: Some(r.async_duration_ms),
        end_to_end_duration: r.end_to_end_duration_ms,
        alignment_buffered: 0,
        processed_data: 0,
        persisted_data: r.persisted_data,
        // Weir's: the longest alignment and start delay of a subtask (Flink has these per
        // subtask only, in the checkpoint's details).
        alignment_duration: Some(r.alignment_ms),
        start_delay: Some(r.start_delay_ms),
        num_subtasks: r.num_subtasks as u64,
        num_acknowledged_subtasks: r.num_acknowledged_subtasks as u64,
        checkpoint_type: match (r.is_savepoint, r.is_unaligned) {
            (true, _) => "SAVEPOINT",
            (false, true) => "UNALIGNED_CHECKPOINT",
            (false, false) => "CHECKPOINT",
        }
        .to_owned(),
        is_unaligned: r.is_unaligned,
        mode: Some(
            if r.at_least_once {
                "AT_LEAST_ONCE"
            } else {
                "EXACTLY_ONCE"
            }
            .to_owned(),
        ),
        failure_message: failed.cloned(),
        failure_timestamp: failed.map(|_| r.trigger_timestamp_ms + r.end_to_end_duration_ms),
        tasks: None,
    }
}

pub(super) fn min_max_avg(m: &crate::MinMaxAvg) -> MinMaxAvg {
    MinMaxAvg::new(m.min, m.max, m.avg)
}

pub(super) async fn checkpoints(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let s = job.checkpoint_stats().unwrap_or_default();
    let latest = |pred: &dyn Fn(&crate::CheckpointRecord) -> bool| {
        s.history.iter().rev().find(|r| pred(r)).map(record_json)
    };
    let completed = crate::CheckpointStatus::Completed;
    let restored = s.last_restored_checkpoint_id.map(|id| RestoredCheckpoint {
        id,
        is_savepoint: false,
    });
    let summary = s.completed_summary.unwrap_or_default();
    Ok(HttpResponse::Ok().json(CheckpointingStatistics {
        counts: CheckpointCounts {
            restored: s.num_restarts,
            total: s.number_of_completed_checkpoints
                + s.number_of_failed_checkpoints
                + s.number_of_in_progress_checkpoints,
            in_progress: s.number_of_in_progress_checkpoints,
            completed: s.number_of_completed_checkpoints,
            failed: s.number_of_failed_checkpoints,
        },
        summary: CheckpointSummary {
            checkpointed_size: min_max_avg(&summary.checkpointed_size),
            state_size: min_max_avg(&summary.state_size),
            end_to_end_duration: min_max_avg(&summary.end_to_end_duration_ms),
            alignment_buffered: MinMaxAvg::default(),
            processed_data: MinMaxAvg::default(),
            persisted_data: min_max_avg(&summary.persisted_data),
        },
        latest: LatestCheckpoints {
            completed: latest(&|r| r.status == completed && !r.is_savepoint),
            savepoint: latest(&|r| r.status == completed && r.is_savepoint),
            failed: latest(&|r| r.status == crate::CheckpointStatus::Failed),
            restored,
        },
        history: s.history.iter().rev().map(record_json).collect(),
    }))
}

pub(super) async fn checkpoint_details(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let r = &checkpoint_in_path(&job, &req)?;
    let mut v = record_json(r);
    // Per vertex, as Flink's details: what its subtasks acknowledged so far.
    let mut tasks = std::collections::BTreeMap::new();
    for vertex in job.vertices() {
        let mine: Vec<&crate::SubtaskCheckpoint> = r
            .subtasks
            .iter()
            .filter(|s| s.vertex == vertex.id)
            .collect();
        tasks.insert(vertex.id.clone(), vertex_json(r, &mine, vertex.parallelism));
    }
    v.tasks = Some(tasks);
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
) -> CheckpointVertexStatistics {
    let sum = |f: fn(&crate::SubtaskCheckpoint) -> u64| mine.iter().map(|s| f(s)).sum::<u64>();
    let max = |f: fn(&crate::SubtaskCheckpoint) -> u64| mine.iter().map(|s| f(s)).max();
    CheckpointVertexStatistics {
        id: r.id,
        status: status_name(r.status).to_owned(),
        latest_ack_timestamp: max(|s| s.ack_timestamp_ms).map_or(-1, |t| t as i64),
        state_size: sum(|s| s.state_size),
        checkpointed_size: sum(|s| s.checkpointed_size),
        end_to_end_duration: max(|s| s.end_to_end_duration_ms).unwrap_or(0),
        alignment_buffered: 0,
        processed_data: 0,
        persisted_data: sum(|s| s.persisted_data),
        num_subtasks: parallelism as u64,
        num_acknowledged_subtasks: mine.len() as u64,
        subtasks: None,
    }
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
    v.subtasks = Some(
        (0..vertex.parallelism)
            .map(|j| match acked(j) {
                Some(s) => SubtaskCheckpointStatistics {
                    index: j as u64,
                    status: "completed".into(),
                    ack_timestamp: Some(s.ack_timestamp_ms),
                    end_to_end_duration: Some(s.end_to_end_duration_ms),
                    state_size: Some(s.state_size),
                    checkpointed_size: Some(s.checkpointed_size),
                    checkpoint: Some(SubtaskCheckpointDuration {
                        sync: s.sync_duration_us / 1000,
                        async_: s.async_duration_ms,
                    }),
                    alignment: Some(SubtaskAlignment {
                        buffered: 0,
                        processed: 0,
                        persisted: s.persisted_data,
                        duration: s.alignment_ms,
                    }),
                    start_delay: Some(s.start_delay_ms),
                    unaligned_checkpoint: Some(s.unaligned),
                    aborted: Some(false),
                },
                None => SubtaskCheckpointStatistics {
                    index: j as u64,
                    status: "pending_or_failed".into(),
                    ..SubtaskCheckpointStatistics::default()
                },
            })
            .collect(),
    );
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
    let done = || {
        OperationStatus::completed(OperationResult {
            checkpoint_id: Some(id),
            ..OperationResult::default()
        })
    };
    let body = match record.map(|r| r.status) {
        Some(crate::CheckpointStatus::InProgress) => OperationStatus::in_progress(),
        Some(crate::CheckpointStatus::Failed) => {
            let why = record
                .and_then(|r| r.failure_message.clone())
                .unwrap_or_default();
            OperationStatus::completed(OperationResult {
                failure_cause: Some(FailureCause {
                    class: "weir.CheckpointError".into(),
                    stack_trace: why,
                    serialized_throwable: None,
                }),
                ..OperationResult::default()
            })
        }
        Some(crate::CheckpointStatus::Completed) => done(),
        // Out of the history: complete if it or a later one completed.
        None if s.last_completed_checkpoint_id >= Some(id) => done(),
        None => OperationStatus::in_progress(),
    };
    Ok(HttpResponse::Ok().json(body))
}

pub(super) async fn checkpoint_config(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let c = job.checkpoint_config();
    Ok(HttpResponse::Ok().json(CheckpointConfig {
        mode: match c.mode {
            CheckpointMode::ExactlyOnce => "exactly_once",
            CheckpointMode::AtLeastOnce => "at_least_once",
        }
        .into(),
        // Flink reports a disabled periodic checkpoint as the largest interval.
        interval: c.interval.map_or(i64::MAX as u64, ms),
        timeout: ms(c.timeout),
        min_pause: ms(c.min_pause),
        max_concurrent: c.max_concurrent as u64,
        externalization: Externalization {
            enabled: true,
            delete_on_cancellation: false,
        },
        unaligned_checkpoints: c.unaligned,
        aligned_checkpoint_timeout: c.aligned_checkpoint_timeout.map_or(0, ms),
        tolerable_failed_checkpoints: c.tolerable_failed_checkpoints.into(),
        checkpoints_after_tasks_finish: false,
        state_backend: "weir (CBOR files)".into(),
        checkpoint_storage: "FileSystemCheckpointStorage".into(),
    }))
}
