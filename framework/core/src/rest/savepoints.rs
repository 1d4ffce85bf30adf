//! Savepoints over REST: triggered (`POST /jobs/{id}/savepoints`), or taken to stop the job
//! (`POST /jobs/{id}/stop`), with their status by trigger id.

use std::path::PathBuf;

use super::request::{
    authorize, job_of, json_body, optional_bool, optional_string, running, Answer, ApiError, State,
};
use super::triggers::{accepted, Trigger};
use super::Shared;
use crate::api_types::{FailureCause, OperationResult, OperationStatus};
use crate::job::JobMonitor;
use actix_web::{web, HttpRequest, HttpResponse};

pub(super) fn start_savepoint(state: &Shared, job: &JobMonitor, dir: String, stop: bool) -> Answer {
    running(job)?;
    if dir.trim().is_empty() {
        return Err(ApiError::bad_request(
            "the target directory must not be empty",
        ));
    }
    if stop {
        let mut triggers = state.triggers.lock().unwrap_or_else(|e| e.into_inner());
        triggers.values_mut().for_each(Trigger::refresh);
        let stopping = triggers.values().any(|t| {
            matches!(t, Trigger::Savepoint { job: j, stop: true, outcome: None, .. } if j == job.id())
        });
        if stopping {
            return Err(ApiError::conflict(format!(
                "Job {} is already stopping with a savepoint",
                job.id()
            )));
        }
    }
    let answer = job.trigger_savepoint(PathBuf::from(dir), stop);
    accepted(
        state,
        Trigger::Savepoint {
            job: job.id().to_owned(),
            stop,
            answer: Some(answer),
            outcome: None,
        },
    )
}

pub(super) async fn trigger_savepoint(
    state: State,
    req: HttpRequest,
    body: web::Payload,
) -> Answer {
    authorize(&state, &req)?;
    let job = job_of(&state, &req)?;
    let body = json_body(body, state.max_body_bytes).await?;
    let dir = optional_string(&body, "target-directory")?.ok_or_else(|| {
        ApiError::bad_request(
            "field `target-directory` is required (there is no default savepoint directory)",
        )
    })?;
    let cancel = optional_bool(&body, "cancel-job")?;
    start_savepoint(&state, &job, dir, cancel)
}

pub(super) async fn stop(state: State, req: HttpRequest, body: web::Payload) -> Answer {
    authorize(&state, &req)?;
    let job = job_of(&state, &req)?;
    let body = json_body(body, state.max_body_bytes).await?;
    let dir = optional_string(&body, "targetDirectory")?.ok_or_else(|| {
        ApiError::bad_request(
            "field `targetDirectory` is required (there is no default savepoint directory)",
        )
    })?;
    if optional_bool(&body, "drain")? {
        return Err(ApiError::bad_request(
            "field `drain`: draining (ending event time) is not supported",
        ));
    }
    start_savepoint(&state, &job, dir, true)
}

pub(super) async fn savepoint_status(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let tid = req
        .match_info()
        .get("trigger")
        .unwrap_or_default()
        .to_owned();
    let mut triggers = state.triggers.lock().unwrap_or_else(|e| e.into_inner());
    let missing = || {
        ApiError::not_found(format!(
            "Savepoint trigger {tid} not found for job {}",
            job.id()
        ))
    };
    let Some(t) = triggers.get_mut(&tid) else {
        return Err(missing());
    };
    t.refresh();
    let Trigger::Savepoint {
        job: owner,
        outcome,
        ..
    } = t
    else {
        return Err(missing());
    };
    if owner != job.id() {
        return Err(missing());
    }
    let body = match &*outcome {
        None => OperationStatus::in_progress(),
        Some(Ok(path)) => OperationStatus::completed(OperationResult {
            location: Some(path.display().to_string()),
            ..OperationResult::default()
        }),
        Some(Err(why)) => OperationStatus::completed(OperationResult {
            failure_cause: Some(FailureCause {
                class: "weir.SavepointError".into(),
                stack_trace: why.clone(),
                serialized_throwable: Some(why.clone()),
            }),
            ..OperationResult::default()
        }),
    };
    Ok(HttpResponse::Ok().json(body))
}
