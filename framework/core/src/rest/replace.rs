//! A fast restart over REST: `POST /jobs/{id}/replace`, to a graph version the app
//! registered.

use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::Value;

use super::request::{
    authorize, job_of, json_body, ms, optional_bool, optional_string, running, Answer, ApiError,
    State,
};
use crate::api_types::ReplaceReport;

/// `POST /jobs/{id}/replace` with `{"graph": name, "allowDroppingState": bool,
/// "graceMs": n}`: a fast restart with a graph version the app registered; answered once
/// the new graph completed its first checkpoint, or rolled back.
pub(super) async fn replace(state: State, req: HttpRequest, body: web::Payload) -> Answer {
    authorize(&state, &req)?;
    let job = job_of(&state, &req)?;
    let body = json_body(body, state.max_body_bytes).await?;
    let Some(name) = optional_string(&body, "graph")? else {
        return Err(ApiError::bad_request(format!(
            "field `graph` is required: the name of a registered graph version ({})",
            job.registered_graphs().join(", ")
        )));
    };
    let mut options = crate::replace::ReplaceOptions::default();
    if optional_bool(&body, "allowDroppingState")? {
        options = options.allow_dropping_state();
    }
    match body.get("graceMs") {
        None | Some(Value::Null) => {}
        Some(Value::Number(n)) if n.as_u64().is_some_and(|ms| ms > 0) => {
            options = options.grace(std::time::Duration::from_millis(n.as_u64().unwrap_or(1)));
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "field `graceMs` must be a positive integer, got {other}"
            )))
        }
    }
    running(&job)?;
    let j = job.clone();
    let r = web::block(move || j.replace_with(&name, options))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    use crate::replace::ReplaceError as E;
    match r {
        Ok(report) => Ok(HttpResponse::Ok().json(ReplaceReport {
            checkpoint: Some(report.checkpoint),
            duration_ms: Some(ms(report.duration)),
            pause_ms: Some(ms(report.pause)),
            dropped_state: report.dropped_state,
            committed_at: report.committed_at,
        })),
        Err(e @ E::UnknownGraph { .. }) => Err(ApiError::not_found(e.to_string())),
        Err(e @ (E::Plan(_) | E::StateDoesNotFit { .. } | E::Unsupported(_))) => {
            Err(ApiError::bad_request(e.to_string()))
        }
        Err(e) => Err(ApiError::conflict(e.to_string())),
    }
}
