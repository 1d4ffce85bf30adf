//! Live settings over REST: `GET /jobs/{id}/config` (every live setting's value now),
//! `PATCH /jobs/{id}/config` (a JSON object of changes, Flink's option names where they
//! exist: all applied or none), `POST /jobs/{id}/config/plan` (how each would apply: `live`
//! and when, or `fast-restart` and why), `GET /jobs/{id}/config/history` and `POST
//! /jobs/{id}/config/rollback` (back to the settings of the last completed checkpoint). The
//! caller recorded in the history is the token's id (a checksum of it, never the token).

use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{Map, Value};

use super::request::{authorize, job_of, json_body, running, Answer, ApiError, State};
use crate::api_types::{
    SettingChange, SettingValueChange, SettingsChanges, SettingsHistory, SettingsHistoryEntry,
};
use crate::settings::{Applies, PlannedChange, SettingError};

/// `GET /jobs/{id}/config`.
pub(super) async fn config(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    Ok(HttpResponse::Ok().json(job.settings()))
}

/// `PATCH /jobs/{id}/config`.
pub(super) async fn patch_config(state: State, req: HttpRequest, body: web::Payload) -> Answer {
    authorize(&state, &req)?;
    let job = job_of(&state, &req)?;
    let changes = changes_of(json_body(body, state.max_body_bytes).await?)?;
    running(&job)?;
    let caller = caller_of(&req);
    let j = job.clone();
    let r = web::block(move || j.update_settings_as(&changes, &caller))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    match r {
        Ok(planned) => Ok(HttpResponse::Ok().json(changes_json(&planned, None))),
        Err(e) => Err(error_of(e)),
    }
}

/// `POST /jobs/{id}/config/plan`.
pub(super) async fn plan(state: State, req: HttpRequest, body: web::Payload) -> Answer {
    let job = job_of(&state, &req)?;
    let changes = changes_of(json_body(body, state.max_body_bytes).await?)?;
    match job.plan_settings(&changes) {
        Ok(planned) => Ok(HttpResponse::Ok().json(changes_json(&planned, None))),
        Err(e) => Err(error_of(e)),
    }
}

/// `GET /jobs/{id}/config/history`.
pub(super) async fn history(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let history = job
        .settings_history()
        .iter()
        .map(|r| SettingsHistoryEntry {
            timestamp: r.at_ms,
            caller: r.caller.clone(),
            changes: r
                .changes
                .iter()
                .map(|(n, old, new)| SettingValueChange {
                    name: n.clone(),
                    old: old.clone(),
                    new: new.clone(),
                })
                .collect(),
            outcome: r.outcome.clone(),
        })
        .collect();
    Ok(HttpResponse::Ok().json(SettingsHistory { history }))
}

/// `POST /jobs/{id}/config/rollback`.
pub(super) async fn rollback(state: State, req: HttpRequest) -> Answer {
    authorize(&state, &req)?;
    let job = job_of(&state, &req)?;
    running(&job)?;
    let j = job.clone();
    let r = web::block(move || j.rollback_settings())
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    match r {
        Ok(report) => Ok(HttpResponse::Ok().json(changes_json(&report.applied, Some(report.kept)))),
        Err(e) => Err(error_of(e)),
    }
}

/// The changes of a request body: every value a string, number or boolean.
fn changes_of(body: Map<String, Value>) -> Result<Vec<(String, String)>, ApiError> {
    if body.is_empty() {
        return Err(ApiError::bad_request(
            "the body must name at least one setting, e.g. {\"execution.checkpointing.interval\": \"100ms\"}",
        ));
    }
    body.into_iter()
        .map(|(name, v)| {
            let value = match v {
                Value::String(s) => s,
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                other => {
                    return Err(ApiError::bad_request(format!(
                        "setting `{name}` must be a string, number or boolean, got {other}"
                    )))
                }
            };
            Ok((name, value))
        })
        .collect()
}

/// The answer naming each planned change (and, for a rollback, the settings kept).
fn changes_json(planned: &[PlannedChange], kept: Option<Vec<String>>) -> SettingsChanges {
    let changes = planned
        .iter()
        .map(|p| {
            let (applies, detail) = match &p.applies {
                Applies::Live { at } => ("live", at.clone()),
                Applies::FastRestart { why } => ("fast-restart", why.clone()),
            };
            SettingChange {
                name: p.name.clone(),
                old: p.old.clone(),
                new: p.new.clone(),
                applies: applies.to_owned(),
                why: detail,
            }
        })
        .collect();
    SettingsChanges { changes, kept }
}

fn error_of(e: SettingError) -> ApiError {
    match e {
        SettingError::Busy(_) => ApiError::conflict(e.to_string()),
        _ => ApiError::bad_request(e.to_string()),
    }
}

/// Who called: the id of the bearer token (its CRC-32), never the token itself.
fn caller_of(req: &HttpRequest) -> String {
    req.headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))
        .map_or("rest".into(), |t| {
            format!("token:{:08x}", crc32fast::hash(t.as_bytes()))
        })
}
