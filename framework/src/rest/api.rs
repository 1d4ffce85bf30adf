//! The routes of the REST API and the JSON they answer, with Flink's paths, field names and
//! status codes; Weir's own additions (`/jobs/{id}/backups`) follow the same style.

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, TryRecvError};

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse, ResponseError};
use futures::StreamExt;
use serde_json::{json, Value};

use super::Shared;
use crate::checkpoint::CheckpointMode;
use crate::job::{now_ms, JobMonitor};
use crate::metrics::BackpressureLevel;

/// A REST error: its status and the messages of `{"errors": [...]}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }
    fn bad_request(m: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, m)
    }
    fn not_found(m: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, m)
    }
    fn conflict(m: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, m)
    }
    pub(crate) fn internal(m: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, m)
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

type Answer = Result<HttpResponse, ApiError>;
type State = web::Data<Shared>;

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

impl Trigger {
    /// Takes a savepoint's answer if it has come.
    fn refresh(&mut self) {
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
    cfg.service(get("/overview", overview))
        .service(get("/jobs/overview", jobs_overview))
        .service(get("/jobs", jobs))
        .service(get("/metrics", super::prom::metrics))
        .service(
            web::resource("/jobs/{id}")
                .route(web::get().to(job))
                .route(web::patch().to(patch_job))
                .default_service(web::to(method_not_allowed)),
        )
        .service(get("/jobs/{id}/vertices/{vid}", vertex))
        .service(get("/jobs/{id}/vertices/{vid}/backpressure", backpressure))
        .service(get("/jobs/{id}/vertices/{vid}/metrics", vertex_metrics))
        .service(get(
            "/jobs/{id}/vertices/{vid}/subtasks/metrics",
            subtask_metrics,
        ))
        .service(
            web::resource("/jobs/{id}/checkpoints")
                .route(web::get().to(checkpoints))
                .route(web::post().to(trigger_checkpoint))
                .default_service(web::to(method_not_allowed)),
        )
        .service(get("/jobs/{id}/checkpoints/config", checkpoint_config))
        .service(get(
            "/jobs/{id}/checkpoints/details/{cid}",
            checkpoint_details,
        ))
        .service(get("/jobs/{id}/checkpoints/{trigger}", checkpoint_status))
        .service(get("/jobs/{id}/metrics", job_metrics))
        .service(get("/jobs/{id}/backups", backups))
        .service(
            web::resource("/jobs/{id}/savepoints")
                .route(web::post().to(trigger_savepoint))
                .default_service(web::to(method_not_allowed)),
        )
        .service(get("/jobs/{id}/savepoints/{trigger}", savepoint_status))
        .service(
            web::resource("/jobs/{id}/stop")
                .route(web::post().to(stop))
                .default_service(web::to(method_not_allowed)),
        );
}

/// Every path the server serves, with its methods, as registered by the server.
pub const ROUTES: &[(&str, &[&str])] = &[
    ("/overview", &["GET"]),
    ("/jobs/overview", &["GET"]),
    ("/jobs", &["GET"]),
    ("/metrics", &["GET"]),
    ("/jobs/{id}", &["GET", "PATCH"]),
    ("/jobs/{id}/vertices/{vid}", &["GET"]),
    ("/jobs/{id}/vertices/{vid}/backpressure", &["GET"]),
    ("/jobs/{id}/vertices/{vid}/metrics", &["GET"]),
    ("/jobs/{id}/vertices/{vid}/subtasks/metrics", &["GET"]),
    ("/jobs/{id}/checkpoints", &["GET", "POST"]),
    ("/jobs/{id}/checkpoints/config", &["GET"]),
    ("/jobs/{id}/checkpoints/details/{cid}", &["GET"]),
    ("/jobs/{id}/checkpoints/{trigger}", &["GET"]),
    ("/jobs/{id}/metrics", &["GET"]),
    ("/jobs/{id}/backups", &["GET"]),
    ("/jobs/{id}/savepoints", &["POST"]),
    ("/jobs/{id}/savepoints/{trigger}", &["GET"]),
    ("/jobs/{id}/stop", &["POST"]),
];

pub(crate) async fn not_found(req: HttpRequest) -> HttpResponse {
    ApiError::not_found(format!("Not found: {}", req.path())).error_response()
}

async fn method_not_allowed(req: HttpRequest) -> HttpResponse {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{} is not allowed on {}", req.method(), req.path()),
    )
    .error_response()
}

// ---------------------------------------------------------------------------------------------
// Helpers

fn job_of(state: &Shared, req: &HttpRequest) -> Result<JobMonitor, ApiError> {
    let id = req.match_info().get("id").unwrap_or_default();
    let jobs = state.jobs.lock().unwrap_or_else(|e| e.into_inner());
    jobs.iter()
        .find(|j| j.id() == id)
        .cloned()
        .ok_or_else(|| ApiError::not_found(format!("Job {id} not found")))
}

fn vertex_of<'a>(
    job: &'a JobMonitor,
    req: &HttpRequest,
) -> Result<&'a crate::VertexInfo, ApiError> {
    let vid = req.match_info().get("vid").unwrap_or_default();
    job.vertices()
        .iter()
        .find(|v| v.id == vid)
        .ok_or_else(|| ApiError::not_found(format!("Vertex {vid} not found in job {}", job.id())))
}

/// The bearer token is required for every mutating call.
fn authorize(state: &Shared, req: &HttpRequest) -> Result<(), ApiError> {
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

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The request body as a JSON object (an empty body is `{}`), at most `limit` bytes.
async fn json_body(
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

fn optional_string(
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

fn optional_bool(body: &serde_json::Map<String, Value>, field: &str) -> Result<bool, ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(ApiError::bad_request(format!(
            "field `{field}` must be a boolean, got {other}"
        ))),
    }
}

fn running(job: &JobMonitor) -> Result<(), ApiError> {
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
fn end_and_duration(job: &JobMonitor, now: u64) -> (i64, u64) {
    match job.end_time_ms() {
        Some(end) => (end as i64, end.saturating_sub(job.start_time_ms())),
        None => (-1, now.saturating_sub(job.start_time_ms())),
    }
}

fn ms(d: std::time::Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}

fn level(l: BackpressureLevel) -> &'static str {
    match l {
        BackpressureLevel::Ok => "ok",
        BackpressureLevel::Low => "low",
        BackpressureLevel::High => "high",
    }
}

// ---------------------------------------------------------------------------------------------
// Cluster and jobs

async fn overview(state: State, _req: HttpRequest) -> Answer {
    let jobs = state.jobs.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let count = |s: &[&str]| {
        jobs.iter()
            .filter(|j| s.contains(&j.status().as_str()))
            .count()
    };
    Ok(HttpResponse::Ok().json(json!({
        "taskmanagers": 1,
        "slots-total": jobs.len(),
        "slots-available": 0,
        "jobs-running": count(&["RUNNING", "RESTARTING", "INITIALIZING", "CANCELLING"]),
        "jobs-finished": count(&["FINISHED"]),
        "jobs-cancelled": count(&["CANCELED"]),
        "jobs-failed": count(&["FAILED"]),
        "flink-version": concat!("weir ", env!("CARGO_PKG_VERSION")),
        "flink-commit": "",
    })))
}

async fn jobs(state: State, _req: HttpRequest) -> Answer {
    let jobs = state.jobs.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let list: Vec<Value> = jobs
        .iter()
        .map(|j| json!({ "id": j.id(), "status": j.status().as_str() }))
        .collect();
    Ok(HttpResponse::Ok().json(json!({ "jobs": list })))
}

fn tasks(job: &JobMonitor) -> Value {
    let total: usize = job.vertices().iter().map(|v| v.parallelism).sum();
    let status = job.status().as_str().to_ascii_lowercase();
    let mut t = serde_json::Map::new();
    for s in [
        "running",
        "canceling",
        "canceled",
        "failed",
        "finished",
        "created",
        "scheduled",
        "deploying",
        "reconciling",
        "initializing",
        "pending",
    ] {
        t.insert(s.into(), json!(if s == status { total } else { 0 }));
    }
    t.insert("total".into(), json!(total));
    Value::Object(t)
}

async fn jobs_overview(state: State, _req: HttpRequest) -> Answer {
    let jobs = state.jobs.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let now = now_ms();
    let list: Vec<Value> = jobs
        .iter()
        .map(|j| {
            json!({
                "jid": j.id(),
                "name": j.name(),
                "state": j.status().as_str(),
                "start-time": j.start_time_ms(),
                "end-time": end_and_duration(j, now).0,
                "duration": end_and_duration(j, now).1,
                "last-modification": now,
                "tasks": tasks(j),
            })
        })
        .collect();
    Ok(HttpResponse::Ok().json(json!({ "jobs": list })))
}

/// Records into and out of a vertex: its first operator's input, its last one's output.
fn vertex_records(
    job: &JobMonitor,
    v: &crate::VertexInfo,
    m: Option<&crate::JobMetrics>,
) -> (u64, u64) {
    let Some(m) = m else { return (0, 0) };
    let first = v.operators.first().and_then(|u| m.operator(u));
    let last = v.operators.last().and_then(|u| m.operator(u));
    let _ = job;
    (
        first.map_or(0, |o| o.num_records_in),
        last.map_or(0, |o| o.num_records_out),
    )
}

fn vertex_json(
    job: &JobMonitor,
    v: &crate::VertexInfo,
    m: Option<&crate::JobMetrics>,
    now: u64,
) -> Value {
    let (read, write) = vertex_records(job, v, m);
    let status = job.status().as_str();
    json!({
        "id": v.id,
        "name": v.name,
        "maxParallelism": crate::key_group::DEFAULT_MAX_PARALLELISM,
        "parallelism": v.parallelism,
        "status": status,
        "start-time": job.start_time_ms(),
        "end-time": end_and_duration(job, now).0,
        "duration": end_and_duration(job, now).1,
        "tasks": { status: v.parallelism },
        "metrics": {
            "read-bytes": 0, "read-bytes-complete": false,
            "write-bytes": 0, "write-bytes-complete": false,
            "read-records": read, "read-records-complete": true,
            "write-records": write, "write-records-complete": true,
        },
    })
}

async fn job(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let now = now_ms();
    let m = job.metrics();
    let vertices: Vec<Value> = job
        .vertices()
        .iter()
        .map(|v| vertex_json(&job, v, m.as_ref(), now))
        .collect();
    let nodes: Vec<Value> = job
        .vertices()
        .iter()
        .map(|v| json!({ "id": v.id, "parallelism": v.parallelism, "description": v.name, "operator": "", "operator_strategy": "" }))
        .collect();
    let status = job.status().as_str();
    Ok(HttpResponse::Ok().json(json!({
        "jid": job.id(),
        "name": job.name(),
        "isStoppable": false,
        "state": status,
        "job-type": "STREAMING",
        "start-time": job.start_time_ms(),
        "end-time": end_and_duration(&job, now).0,
        "duration": end_and_duration(&job, now).1,
        "maxParallelism": -1,
        "now": now,
        "timestamps": { status: job.start_time_ms() },
        "vertices": vertices,
        "status-counts": { status: job.vertices().len() },
        "plan": { "jid": job.id(), "name": job.name(), "type": "STREAMING", "nodes": nodes },
    })))
}

async fn patch_job(state: State, req: HttpRequest) -> Answer {
    authorize(&state, &req)?;
    let job = job_of(&state, &req)?;
    let mode =
        web::Query::<std::collections::HashMap<String, String>>::from_query(req.query_string())
            .map_err(|e| ApiError::bad_request(format!("bad query: {e}")))?
            .get("mode")
            .cloned();
    match mode.as_deref() {
        Some("cancel") | None => {
            running(&job)?;
            job.cancel();
            Ok(HttpResponse::Accepted().json(json!({})))
        }
        Some("stop") => Err(ApiError::bad_request(
            "mode=stop is not supported: use POST /jobs/{id}/stop (stop with a savepoint)",
        )),
        Some(other) => Err(ApiError::bad_request(format!(
            "query parameter `mode` must be `cancel`, got `{other}`"
        ))),
    }
}

async fn vertex(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let v = vertex_of(&job, &req)?;
    let now = now_ms();
    let status = job.status().as_str();
    let subtasks: Vec<Value> = (0..v.parallelism)
        .map(|i| {
            json!({
                "subtask": i, "status": status, "attempt": 0, "host": "localhost",
                "start-time": job.start_time_ms(), "end-time": end_and_duration(&job, now).0,
                "duration": end_and_duration(&job, now).1,
            })
        })
        .collect();
    Ok(HttpResponse::Ok().json(json!({
        "id": v.id, "name": v.name, "parallelism": v.parallelism,
        "maxParallelism": crate::key_group::DEFAULT_MAX_PARALLELISM,
        "now": now, "subtasks": subtasks,
    })))
}

async fn backpressure(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let v = vertex_of(&job, &req)?;
    let m = job.metrics();
    let subtasks: Vec<Value> = m
        .iter()
        .flat_map(|m| m.subtasks.iter())
        .filter(|s| s.head_uid == v.id)
        .map(|s| {
            json!({
                "subtask": s.subtask,
                "attempt-number": 0,
                "backpressureLevel": level(s.backpressure_level),
                "ratio": s.back_pressured_time_ms_per_second / 1000.0,
                "busyRatio": s.busy_time_ms_per_second / 1000.0,
                "idleRatio": s.idle_time_ms_per_second / 1000.0,
            })
        })
        .collect();
    let worst = m
        .iter()
        .flat_map(|m| m.subtasks.iter())
        .filter(|s| s.head_uid == v.id)
        .map(|s| s.backpressure_level)
        .max()
        .unwrap_or(BackpressureLevel::Ok);
    Ok(HttpResponse::Ok().json(json!({
        "status": "ok",
        "backpressureLevel": level(worst),
        "end-timestamp": now_ms(),
        "subtasks": subtasks,
    })))
}

/// The query's `name` parameter split at commas (empty: not given).
fn query_list(req: &HttpRequest, name: &str) -> Result<Option<Vec<String>>, ApiError> {
    let q = web::Query::<std::collections::HashMap<String, String>>::from_query(req.query_string())
        .map_err(|e| ApiError::bad_request(format!("bad query: {e}")))?;
    Ok(q.get(name).map(|v| {
        v.split(',')
            .map(|x| x.trim().to_owned())
            .filter(|x| !x.is_empty())
            .collect()
    }))
}

/// The metrics of `v`'s subtasks, in subtask order.
fn subtasks_of(job: &JobMonitor, v: &crate::VertexInfo) -> Vec<crate::SubtaskMetrics> {
    let mut subs: Vec<crate::SubtaskMetrics> = job
        .metrics()
        .map(|m| {
            m.subtasks
                .into_iter()
                .filter(|s| s.head_uid == v.id)
                .collect()
        })
        .unwrap_or_default();
    subs.sort_by_key(|s| s.subtask);
    subs
}

/// `/vertices/{vid}/metrics`: Flink's `<subtask>.<metric>` names; without `get`, the names.
async fn vertex_metrics(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let v = vertex_of(&job, &req)?;
    let subs = subtasks_of(&job, v);
    let list: Vec<Value> = match query_list(&req, "get")? {
        None => (0..v.parallelism)
            .flat_map(|i| {
                crate::SubtaskMetrics::NAMES
                    .iter()
                    .map(move |n| json!({ "id": format!("{i}.{n}") }))
            })
            .collect(),
        Some(names) => names
            .iter()
            .filter_map(|full| {
                let (i, name) = full.split_once('.')?;
                let i: usize = i.parse().ok()?;
                let value = subs.iter().find(|s| s.subtask == i)?.get(name)?;
                Some(json!({ "id": full, "value": value.to_string() }))
            })
            .collect(),
    };
    Ok(HttpResponse::Ok().json(list))
}

/// `/vertices/{vid}/subtasks/metrics`: each metric in `get` aggregated over the subtasks
/// (`agg=min,max,sum,avg`, all by default; `subtasks=0,2` to choose some).
async fn subtask_metrics(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let v = vertex_of(&job, &req)?;
    let mut subs = subtasks_of(&job, v);
    if let Some(chosen) = query_list(&req, "subtasks")? {
        let mut keep = Vec::new();
        for c in chosen {
            let i: usize = c.parse().map_err(|_| {
                ApiError::bad_request(format!(
                    "query parameter `subtasks`: `{c}` is not a subtask index"
                ))
            })?;
            keep.push(i);
        }
        subs.retain(|s| keep.contains(&s.subtask));
    }
    let aggs = query_list(&req, "agg")?
        .unwrap_or_else(|| ["min", "max", "sum", "avg"].map(String::from).to_vec());
    if let Some(bad) = aggs
        .iter()
        .find(|a| !["min", "max", "sum", "avg", "skew"].contains(&a.as_str()))
    {
        return Err(ApiError::bad_request(format!(
            "query parameter `agg`: `{bad}` is not one of min, max, sum, avg, skew"
        )));
    }
    let Some(names) = query_list(&req, "get")? else {
        let list: Vec<Value> = crate::SubtaskMetrics::NAMES
            .iter()
            .map(|n| json!({ "id": n }))
            .collect();
        return Ok(HttpResponse::Ok().json(list));
    };
    let list: Vec<Value> = names
        .iter()
        .filter_map(|name| {
            let xs: Vec<f64> = subs.iter().filter_map(|s| s.get(name)).collect();
            if xs.is_empty() {
                return None;
            }
            let sum: f64 = xs.iter().sum();
            let avg = sum / xs.len() as f64;
            let max = xs.iter().copied().fold(f64::MIN, f64::max);
            let mut m = serde_json::Map::new();
            m.insert("id".into(), json!(name));
            for a in &aggs {
                let x = match a.as_str() {
                    "min" => xs.iter().copied().fold(f64::MAX, f64::min),
                    "max" => max,
                    "sum" => sum,
                    "avg" => avg,
                    // Flink's skew: how far the largest is above the average, in percent.
                    _ => {
                        if max > 0.0 {
                            (max - avg) / max * 100.0
                        } else {
                            0.0
                        }
                    }
                };
                m.insert(a.clone(), json!(x));
            }
            Some(Value::Object(m))
        })
        .collect();
    Ok(HttpResponse::Ok().json(list))
}

// ---------------------------------------------------------------------------------------------
// Checkpoints and metrics

fn record_json(r: &crate::CheckpointRecord) -> Value {
    let status = match r.status {
        crate::CheckpointStatus::InProgress => "IN_PROGRESS",
        crate::CheckpointStatus::Completed => "COMPLETED",
        crate::CheckpointStatus::Failed => "FAILED",
    };
    let mut v = json!({
        "id": r.id,
        "status": status,
        "is_savepoint": r.is_savepoint,
        "savepointFormat": if r.is_savepoint { Value::from("CANONICAL") } else { Value::Null },
        "trigger_timestamp": r.trigger_timestamp_ms,
        "latest_ack_timestamp": r.latest_ack_timestamp_ms.map_or(-1, |t| t as i64),
        "state_size": r.state_size,
        "checkpointed_size": r.state_size,
        "end_to_end_duration": r.end_to_end_duration_ms,
        "alignment_buffered": 0,
        "processed_data": 0,
        "persisted_data": 0,
        "num_subtasks": r.num_subtasks,
        "num_acknowledged_subtasks": r.num_acknowledged_subtasks,
        "checkpoint_type": if r.is_savepoint { "SAVEPOINT" } else { "CHECKPOINT" },
    });
    if let Some(why) = &r.failure_message {
        v["failure_message"] = Value::from(why.as_str());
        v["failure_timestamp"] = Value::from(r.trigger_timestamp_ms + r.end_to_end_duration_ms);
    }
    v
}

fn min_max_avg(m: &crate::MinMaxAvg) -> Value {
    json!({ "min": m.min, "max": m.max, "avg": m.avg })
}

async fn checkpoints(state: State, req: HttpRequest) -> Answer {
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
            "checkpointed_size": min_max_avg(&summary.state_size),
            "state_size": min_max_avg(&summary.state_size),
            "end_to_end_duration": min_max_avg(&summary.end_to_end_duration_ms),
            "alignment_buffered": zero,
            "processed_data": zero,
            "persisted_data": zero,
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

async fn checkpoint_details(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let raw = req.match_info().get("cid").unwrap_or_default();
    let cid: u64 = raw.parse().map_err(|_| {
        ApiError::bad_request(format!("checkpoint id must be a number, got `{raw}`"))
    })?;
    let s = job.checkpoint_stats().unwrap_or_default();
    let r = s.history.iter().find(|r| r.id == cid).ok_or_else(|| {
        ApiError::not_found(format!(
            "Checkpoint {cid} not found in job {} (the last {} are kept)",
            job.id(),
            crate::checkpoint::coordinator::HISTORY
        ))
    })?;
    Ok(HttpResponse::Ok().json(record_json(r)))
}

async fn trigger_checkpoint(state: State, req: HttpRequest, body: web::Payload) -> Answer {
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
    let tid = new_trigger_id();
    state
        .triggers
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(
            tid.clone(),
            Trigger::Checkpoint {
                job: job.id().to_owned(),
                id,
            },
        );
    Ok(HttpResponse::Accepted().json(json!({ "request-id": tid })))
}

async fn checkpoint_status(state: State, req: HttpRequest) -> Answer {
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

async fn checkpoint_config(state: State, req: HttpRequest) -> Answer {
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

/// The job-level metrics with Flink's names.
fn job_metric(job: &JobMonitor, name: &str) -> Option<String> {
    let s = job.checkpoint_stats();
    let s = s.as_ref();
    let v = match name {
        "numRestarts" => s.map_or(0, |s| s.num_restarts),
        "lastCheckpointDuration" => s.map_or(0, |s| s.last_checkpoint_duration_ms),
        "lastCheckpointSize" => s.map_or(0, |s| s.last_checkpoint_size),
        "numberOfCompletedCheckpoints" => s.map_or(0, |s| s.number_of_completed_checkpoints),
        "numberOfFailedCheckpoints" => s.map_or(0, |s| s.number_of_failed_checkpoints),
        "numberOfInProgressCheckpoints" => s.map_or(0, |s| s.number_of_in_progress_checkpoints),
        "checkpointAlignmentTime" => s.map_or(0, |s| s.checkpoint_alignment_time_ms),
        "checkpointStartDelay" => s.map_or(0, |s| s.checkpoint_start_delay_nanos / 1_000_000),
        "uptime" => now_ms().saturating_sub(job.start_time_ms()),
        _ => return None,
    };
    Some(v.to_string())
}

/// The names `/jobs/{id}/metrics` knows.
pub(crate) const JOB_METRICS: &[&str] = &[
    "numRestarts",
    "lastCheckpointDuration",
    "lastCheckpointSize",
    "numberOfCompletedCheckpoints",
    "numberOfFailedCheckpoints",
    "numberOfInProgressCheckpoints",
    "checkpointAlignmentTime",
    "checkpointStartDelay",
    "uptime",
];

async fn job_metrics(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let query =
        web::Query::<std::collections::HashMap<String, String>>::from_query(req.query_string())
            .map_err(|e| ApiError::bad_request(format!("bad query: {e}")))?;
    let list: Vec<Value> = match query.get("get") {
        // As Flink: without `get`, the names; with it, the values (as strings) of the known ones.
        None => JOB_METRICS.iter().map(|n| json!({ "id": n })).collect(),
        Some(names) => names
            .split(',')
            .map(str::trim)
            .filter_map(|n| job_metric(&job, n).map(|v| json!({ "id": n, "value": v })))
            .collect(),
    };
    Ok(HttpResponse::Ok().json(list))
}

async fn backups(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let list: Vec<Value> = job
        .backup_metrics()
        .iter()
        .map(|b| {
            json!({
                "uid": b.uid, "subtask": b.subtask,
                "queueEntries": b.queue_entries, "queueBytes": b.queue_bytes,
                "filteredBatches": b.filtered, "filteredRecords": b.filtered_records,
                "added": b.added, "claimed": b.claimed,
                "promotions": b.promotions, "backupReplacements": b.backup_replacements,
                "lastFailoverMs": b.last_failover.map(|d| d.as_secs_f64() * 1000.0),
                "lastReprocessedBatches": b.last_reprocessed,
                "backupLag": b.backup_lag, "degraded": b.degraded,
            })
        })
        .collect();
    Ok(HttpResponse::Ok().json(json!({ "backups": list })))
}

// ---------------------------------------------------------------------------------------------
// Savepoints and stop

fn new_trigger_id() -> String {
    let mut b = [0u8; 16];
    let _ = getrandom::fill(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn start_savepoint(state: &Shared, job: &JobMonitor, dir: String, stop: bool) -> Answer {
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
    let id = new_trigger_id();
    state
        .triggers
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(
            id.clone(),
            Trigger::Savepoint {
                job: job.id().to_owned(),
                stop,
                answer: Some(answer),
                outcome: None,
            },
        );
    Ok(HttpResponse::Accepted().json(json!({ "request-id": id })))
}

async fn trigger_savepoint(state: State, req: HttpRequest, body: web::Payload) -> Answer {
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

async fn stop(state: State, req: HttpRequest, body: web::Payload) -> Answer {
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

async fn savepoint_status(state: State, req: HttpRequest) -> Answer {
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
        None => json!({ "status": { "id": "IN_PROGRESS" } }),
        Some(Ok(path)) => {
            json!({ "status": { "id": "COMPLETED" }, "operation": { "location": path.display().to_string() } })
        }
        Some(Err(why)) => json!({
            "status": { "id": "COMPLETED" },
            "operation": { "failure-cause": { "class": "weir.SavepointError", "stack-trace": why, "serialized-throwable": why } },
        }),
    };
    Ok(HttpResponse::Ok().json(body))
}
