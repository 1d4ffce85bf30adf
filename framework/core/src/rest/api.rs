//! What every route shares: the REST error and its JSON, the triggers of operations started
//! over REST, the route table, and the helpers that find a job or vertex, check the token and
//! read a body. The handlers are `jobs` (cluster, jobs, vertices, metrics, exceptions),
//! `checkpoints`, `savepoints`, `rescale`, `replace`, `settings`, `backups`, `prom` and
//! `dashboard` (the web page).

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, TryRecvError};

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse, ResponseError};
use futures::StreamExt;
use serde_json::{json, Value};

use super::Shared;
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
        HttpResponse::build(self.status).json(json!({ "errors": [self.message] }))
    }
}

pub(super) type Answer = Result<HttpResponse, ApiError>;
pub(super) type State = web::Data<Shared>;

/// An operation started over REST, by its trigger id.
pub(crate) enum Trigger {
    /// A savepoint: its answer, then its outcome.
    Savepoint {
        job: String,
        /// The job stops after it.
        stop: bool,
        answer: Option<Receiver<Result<PathBuf, String>>>,
        outcome: Option<Result<PathBuf, String>>,
    },
    /// A checkpoint: its id (its progress is in the job's checkpoint history).
    Checkpoint { job: String, id: u64 },
}

/// Records `trigger` under a new id and answers 202 `{"request-id": id}`, as Flink does for
/// asynchronous operations.
pub(super) fn accepted(state: &Shared, trigger: Trigger) -> Answer {
    let id = crate::job::unique_hex();
    state
        .triggers
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(id.clone(), trigger);
    Ok(HttpResponse::Accepted().json(json!({ "request-id": id })))
}

impl Trigger {
    /// Takes a savepoint's answer if it has come.
    pub(super) fn refresh(&mut self) {
        let Trigger::Savepoint {
            answer, outcome, ..
        } = self
        else {
            return;
        };
        if let Some(rx) = answer {
            match rx.try_recv() {
                Ok(r) => *outcome = Some(r),
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => {
                    *outcome = Some(Err("the job ended before the savepoint completed".into()))
                }
            }
            if outcome.is_some() {
                *answer = None;
            }
        }
    }
}

/// Every route. More specific paths come first (`/jobs/overview` before `/jobs/{id}`); a
/// known path with a method it does not serve answers 405.
pub(crate) fn routes(cfg: &mut web::ServiceConfig) {
    fn get(
        path: &str,
        h: impl actix_web::Handler<(State, HttpRequest), Output = Answer>,
    ) -> actix_web::Resource {
        web::resource(path)
            .route(web::get().to(h))
            .default_service(web::to(method_not_allowed))
    }
    cfg.service(get("/", super::dashboard::asset))
        .service(get("/dashboard.js", super::dashboard::asset))
        .service(get("/dashboard.css", super::dashboard::asset))
        .service(get("/overview", super::jobs::overview))
        .service(get("/jobs/overview", super::jobs::jobs_overview))
        .service(get("/jobs", super::jobs::jobs))
        .service(get("/metrics", super::prom::metrics))
        .service(
            web::resource("/jobs/{id}")
                .route(web::get().to(super::jobs::job))
                .route(web::patch().to(super::jobs::patch_job))
                .default_service(web::to(method_not_allowed)),
        )
        .service(
            web::resource("/jobs/{id}/vertices/{vid}")
                .route(web::get().to(super::jobs::vertex))
                .route(web::patch().to(super::rescale::patch_vertex))
                .default_service(web::to(method_not_allowed)),
        )
        .service(
            web::resource("/jobs/{id}/parallelism")
                .route(web::patch().to(super::rescale::patch_job_parallelism))
                .default_service(web::to(method_not_allowed)),
        )
        .service(
            web::resource("/jobs/{id}/resource-requirements")
                .route(web::get().to(super::rescale::resource_requirements))
                .route(web::put().to(super::rescale::put_resource_requirements))
                .default_service(web::to(method_not_allowed)),
        )
        .service(
            web::resource("/jobs/{id}/vertices/{vid}/rebalance")
                .route(web::post().to(super::rescale::rebalance_vertex))
                .default_service(web::to(method_not_allowed)),
        )
        .service(get("/jobs/{id}/rescales", super::rescale::rescales))
        .service(
            web::resource("/jobs/{id}/config")
                .route(web::get().to(super::settings::config))
                .route(web::patch().to(super::settings::patch_config))
                .default_service(web::to(method_not_allowed)),
        )
        .service(
            web::resource("/jobs/{id}/config/plan")
                .route(web::post().to(super::settings::plan))
                .default_service(web::to(method_not_allowed)),
        )
        .service(get("/jobs/{id}/config/history", super::settings::history))
        .service(
            web::resource("/jobs/{id}/replace")
                .route(web::post().to(super::replace::replace))
                .default_service(web::to(method_not_allowed)),
        )
        .service(
            web::resource("/jobs/{id}/config/rollback")
                .route(web::post().to(super::settings::rollback))
                .default_service(web::to(method_not_allowed)),
        )
        .service(get(
            "/jobs/{id}/vertices/{vid}/backpressure",
            super::jobs::backpressure,
        ))
        .service(get(
            "/jobs/{id}/vertices/{vid}/metrics",
            super::jobs::vertex_metrics,
        ))
        .service(get(
            "/jobs/{id}/vertices/{vid}/subtasks/metrics",
            super::jobs::subtask_metrics,
        ))
        .service(
            web::resource("/jobs/{id}/checkpoints")
                .route(web::get().to(super::checkpoints::checkpoints))
                .route(web::post().to(super::checkpoints::trigger_checkpoint))
                .default_service(web::to(method_not_allowed)),
        )
        .service(get(
            "/jobs/{id}/checkpoints/config",
            super::checkpoints::checkpoint_config,
        ))
        .service(get(
            "/jobs/{id}/checkpoints/details/{cid}",
            super::checkpoints::checkpoint_details,
        ))
        .service(get(
            "/jobs/{id}/checkpoints/details/{cid}/subtasks/{vid}",
            super::checkpoints::checkpoint_subtasks,
        ))
        .service(get(
            "/jobs/{id}/checkpoints/{trigger}",
            super::checkpoints::checkpoint_status,
        ))
        .service(get("/jobs/{id}/metrics", super::jobs::job_metrics))
        .service(get("/jobs/{id}/backups", super::backups::backups))
        .service(get("/jobs/{id}/exceptions", super::jobs::exceptions))
        .service(
            web::resource("/jobs/{id}/savepoints")
                .route(web::post().to(super::savepoints::trigger_savepoint))
                .default_service(web::to(method_not_allowed)),
        )
        .service(get(
            "/jobs/{id}/savepoints/{trigger}",
            super::savepoints::savepoint_status,
        ))
        .service(
            web::resource("/jobs/{id}/stop")
                .route(web::post().to(super::savepoints::stop))
                .default_service(web::to(method_not_allowed)),
        );
}

/// Every path the server serves, with its methods, as registered by the server.
pub const ROUTES: &[(&str, &[&str])] = &[
    ("/", &["GET"]),
    ("/dashboard.js", &["GET"]),
    ("/dashboard.css", &["GET"]),
    ("/overview", &["GET"]),
    ("/jobs/overview", &["GET"]),
    ("/jobs", &["GET"]),
    ("/metrics", &["GET"]),
    ("/jobs/{id}", &["GET", "PATCH"]),
    ("/jobs/{id}/vertices/{vid}", &["GET", "PATCH"]),
    ("/jobs/{id}/parallelism", &["PATCH"]),
    ("/jobs/{id}/resource-requirements", &["GET", "PUT"]),
    ("/jobs/{id}/vertices/{vid}/rebalance", &["POST"]),
    ("/jobs/{id}/rescales", &["GET"]),
    ("/jobs/{id}/config", &["GET", "PATCH"]),
    ("/jobs/{id}/config/plan", &["POST"]),
    ("/jobs/{id}/config/history", &["GET"]),
    ("/jobs/{id}/config/rollback", &["POST"]),
    ("/jobs/{id}/replace", &["POST"]),
    ("/jobs/{id}/vertices/{vid}/backpressure", &["GET"]),
    ("/jobs/{id}/vertices/{vid}/metrics", &["GET"]),
    ("/jobs/{id}/vertices/{vid}/subtasks/metrics", &["GET"]),
    ("/jobs/{id}/checkpoints", &["GET", "POST"]),
    ("/jobs/{id}/checkpoints/config", &["GET"]),
    ("/jobs/{id}/checkpoints/details/{cid}", &["GET"]),
    (
        "/jobs/{id}/checkpoints/details/{cid}/subtasks/{vid}",
        &["GET"],
    ),
    ("/jobs/{id}/checkpoints/{trigger}", &["GET"]),
    ("/jobs/{id}/metrics", &["GET"]),
    ("/jobs/{id}/backups", &["GET"]),
    ("/jobs/{id}/exceptions", &["GET"]),
    ("/jobs/{id}/savepoints", &["POST"]),
    ("/jobs/{id}/savepoints/{trigger}", &["GET"]),
    ("/jobs/{id}/stop", &["POST"]),
];

pub(crate) async fn not_found(req: HttpRequest) -> HttpResponse {
    ApiError::not_found(format!("Not found: {}", req.path())).error_response()
}

pub(super) async fn method_not_allowed(req: HttpRequest) -> HttpResponse {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{} is not allowed on {}", req.method(), req.path()),
    )
    .error_response()
}

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
