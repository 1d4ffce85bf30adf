//! What every handler shares: the REST error and its JSON body, and the helpers that find a
//! job or vertex, check the token, read a body and format times and levels. It names no
//! handler and no route (the route table is `routes`), so every handler imports it and it
//! imports none of them.

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse, ResponseError};
use futures::StreamExt;
use serde_json::Value;

use super::Shared;
use crate::api_types::ErrorBody;
use crate::job::JobMonitor;
use crate::metrics::BackpressureLevel;

/// A REST error: its status and the messages of `{"errors": [...]}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }
    pub(super) fn bad_request(m: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, m)
    }
    pub(super) fn not_found(m: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, m)
    }
    pub(super) fn conflict(m: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, m)
    }
    pub(crate) fn internal(m: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, m)
    }
    pub(super) fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }
    fn error_response(&self) -> HttpResponse {
        HttpResponse::build(self.status).json(ErrorBody {
            errors: vec![self.message.clone()],
        })
    }
}

pub(super) type Answer = Result<HttpResponse, ApiError>;
pub(super) type State = web::Data<Shared>;

pub(super) fn job_of(state: &Shared, req: &HttpRequest) -> Result<JobMonitor, ApiError> {
    let id = req.match_info().get("id").unwrap_or_default();
    let jobs = state.jobs.lock().unwrap_or_else(|e| e.into_inner());
    jobs.iter()
        .find(|j| j.id() == id)
        .cloned()
        .ok_or_else(|| ApiError::not_found(format!("Job {id} not found")))
}

pub(super) fn vertex_of(
    job: &JobMonitor,
    req: &HttpRequest,
) -> Result<crate::VertexInfo, ApiError> {
    let vid = req.match_info().get("vid").unwrap_or_default();
    job.vertices()
        .into_iter()
        .find(|v| v.id == vid)
        .ok_or_else(|| ApiError::not_found(format!("Vertex {vid} not found in job {}", job.id())))
}

/// The bearer token is required for every mutating call.
pub(super) fn authorize(state: &Shared, req: &HttpRequest) -> Result<(), ApiError> {
    let given = req
        .headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "));
    match given {
        Some(t) if constant_time_eq(t.as_bytes(), state.token.as_bytes()) => Ok(()),
        Some(_) => Err(ApiError::new(StatusCode::UNAUTHORIZED, "wrong bearer token")),
        None => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "this call changes the job: it needs `Authorization: Bearer <token>` (the token file is printed when the server starts)",
        )),
    }
}

pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The request body as a JSON object (an empty body is `{}`), at most `limit` bytes.
pub(super) async fn json_body(
    mut payload: web::Payload,
    limit: usize,
) -> Result<serde_json::Map<String, Value>, ApiError> {
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk
            .map_err(|e| ApiError::bad_request(format!("cannot read the request body: {e}")))?;
        if body.len() + chunk.len() > limit {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the request body is larger than {limit} bytes"),
            ));
        }
        body.extend_from_slice(&chunk);
    }
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(Default::default());
    }
    match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::bad_request(
            "the request body must be a JSON object",
        )),
        Err(e) => Err(ApiError::bad_request(format!(
            "the request body is not valid JSON: {e}"
        ))),
    }
}

pub(super) fn optional_string(
    body: &serde_json::Map<String, Value>,
    field: &str,
) -> Result<Option<String>, ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(ApiError::bad_request(format!(
            "field `{field}` must be a string, got {other}"
        ))),
    }
}

pub(super) fn optional_bool(
    body: &serde_json::Map<String, Value>,
    field: &str,
) -> Result<bool, ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(ApiError::bad_request(format!(
            "field `{field}` must be a boolean, got {other}"
        ))),
    }
}

pub(super) fn running(job: &JobMonitor) -> Result<(), ApiError> {
    let status = job.status();
    if status.is_terminal() {
        return Err(ApiError::conflict(format!(
            "Job {} is {}: it cannot be changed",
            job.id(),
            status.as_str()
        )));
    }
    Ok(())
}

/// A job's `end-time` (-1 while it runs) and `duration` (to now while it runs), ms.
pub(super) fn end_and_duration(job: &JobMonitor, now: u64) -> (i64, u64) {
    match job.end_time_ms() {
        Some(end) => (end as i64, end.saturating_sub(job.start_time_ms())),
        None => (-1, now.saturating_sub(job.start_time_ms())),
    }
}

pub(super) fn ms(d: std::time::Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}

pub(super) fn level(l: BackpressureLevel) -> &'static str {
    match l {
        BackpressureLevel::Ok => "ok",
        BackpressureLevel::Low => "low",
        BackpressureLevel::High => "high",
    }
}
