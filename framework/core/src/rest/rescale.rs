//! Rescale over REST: the seed's `PATCH /jobs/{id}/parallelism` (every operator that follows
//! the job's default parallelism), per vertex `PATCH /jobs/{id}/vertices/{vid}`, Flink's
//! `GET`/`PUT /jobs/{id}/resource-requirements`, `POST /jobs/{id}/vertices/{vid}/rebalance`
//! (its key groups assigned again by load), and `GET /jobs/{id}/rescales`. A rescale
//! call answers once the job runs at the new parallelism, with what changed and how long the
//! input paused; a refused one changes nothing and says why (400 for a bad request, 404 for
//! an unknown vertex, 409 when the job cannot rescale now).

use actix_web::{web, HttpRequest, HttpResponse};
use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::request::{
    authorize, job_of, json_body, ms, running, vertex_of, Answer, ApiError, State,
};
use crate::api_types::{
    self, KeptOperator, ParallelismBounds, ParallelismChange, Rebalanced, RescaleVertex, Rescales,
    ResourceRequirement,
};
use crate::job::JobMonitor;
use crate::rescale::{RescaleError, RescaleReport};

/// `PATCH /jobs/{id}/parallelism` with `{"parallelism": n}`.
pub(super) async fn patch_job_parallelism(
    state: State,
    req: HttpRequest,
    body: web::Payload,
) -> Answer {
    rescale_call(state, req, body, false).await
}

/// `PATCH /jobs/{id}/vertices/{vid}` with `{"parallelism": n}`.
pub(super) async fn patch_vertex(state: State, req: HttpRequest, body: web::Payload) -> Answer {
    rescale_call(state, req, body, true).await
}

/// `POST /jobs/{id}/vertices/{vid}/rebalance` (no body): the vertex's key groups assigned
/// again by observed load at its parallelism ([`JobMonitor::rebalance`]); the answer is the
/// rescale report, whose `rebalanced` says each subtask's load before and after.
pub(super) async fn rebalance_vertex(state: State, req: HttpRequest) -> Answer {
    authorize(&state, &req)?;
    let job = job_of(&state, &req)?;
    let vid = vertex_of(&job, &req)?.id;
    running(&job)?;
    answer(web::block(move || job.rebalance(&vid)).await)
}

/// A rescale of the request's vertex (or, without `vertex`, of the whole job) to the body's
/// `parallelism`.
async fn rescale_call(state: State, req: HttpRequest, body: web::Payload, vertex: bool) -> Answer {
    authorize(&state, &req)?;
    let job = job_of(&state, &req)?;
    let vid = if vertex {
        Some(vertex_of(&job, &req)?.id)
    } else {
        None
    };
    let body = json_body(body, state.max_body_bytes).await?;
    let p = parallelism_field(&body, "parallelism")?;
    running(&job)?;
    answer(
        web::block(move || match vid {
            Some(v) => job.rescale(&v, p),
            None => job.rescale_job(p),
        })
        .await,
    )
}

/// `GET /jobs/{id}/resource-requirements`: Flink's shape, one entry per vertex.
pub(super) async fn resource_requirements(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let out: BTreeMap<String, ResourceRequirement> = job
        .vertices()
        .into_iter()
        .map(|v| {
            let bounds = ParallelismBounds {
                lower_bound: 1,
                upper_bound: v.parallelism as u64,
            };
            (
                v.id,
                ResourceRequirement {
                    parallelism: bounds,
                },
            )
        })
        .collect();
    Ok(HttpResponse::Ok().json(out))
}

/// `PUT /jobs/{id}/resource-requirements`: each named vertex goes to its `upperBound` (Weir
/// runs a vertex at exactly the parallelism asked for), all at one barrier.
pub(super) async fn put_resource_requirements(
    state: State,
    req: HttpRequest,
    body: web::Payload,
) -> Answer {
    authorize(&state, &req)?;
    let job = job_of(&state, &req)?;
    let body = json_body(body, state.max_body_bytes).await?;
    let vertices = job.vertices();
    let mut changes = Vec::new();
    for (vid, spec) in &body {
        let Some(v) = vertices.iter().find(|v| &v.id == vid) else {
            return Err(ApiError::not_found(format!(
                "Vertex {vid} not found in job {}",
                job.id()
            )));
        };
        let bounds = spec
            .get("parallelism")
            .and_then(Value::as_object)
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "vertex {vid}: expected {{\"parallelism\": {{\"lowerBound\": l, \"upperBound\": u}}}}"
                ))
            })?;
        let upper = parallelism_field(bounds, "upperBound")
            .map_err(|e| ApiError::bad_request(format!("vertex {vid}: {}", e.message())))?;
        if let Some(lower) = bounds.get("lowerBound").filter(|l| !l.is_null()) {
            let lower = lower.as_u64().ok_or_else(|| {
                ApiError::bad_request(format!(
                    "vertex {vid}: field `lowerBound` must be a non-negative integer, got {lower}"
                ))
            })?;
            if lower as usize > upper {
                return Err(ApiError::bad_request(format!(
                    "vertex {vid}: lowerBound {lower} is above upperBound {upper}"
                )));
            }
        }
        if upper != v.parallelism {
            changes.push((v.id.clone(), upper));
        }
    }
    running(&job)?;
    if changes.is_empty() {
        return Ok(HttpResponse::Ok().json(NoChanges::default()));
    }
    let j = job.clone();
    answer(web::block(move || j.rescale_operators(&changes)).await)
}

/// `GET /jobs/{id}/rescales`: `numRescales`, the one in progress, the last one's report.
pub(super) async fn rescales(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    Ok(HttpResponse::Ok().json(stats_json(&job)))
}

fn stats_json(job: &JobMonitor) -> Rescales {
    let s = job.rescale_stats();
    let ranges = |r: &[std::ops::Range<usize>]| -> Vec<[u64; 2]> {
        r.iter().map(|g| [g.start as u64, g.end as u64]).collect()
    };
    Rescales {
        num_rescales: s.num_rescales,
        in_progress: s.in_progress,
        last: s.last.as_ref().map(report_json),
        vertices: job
            .vertices()
            .iter()
            .map(|v| RescaleVertex {
                id: v.id.clone(),
                parallelism: v.parallelism as u64,
                key_groups: v.key_groups.as_deref().map(ranges),
                key_group_runs: v
                    .key_group_runs
                    .as_ref()
                    .map(|per| per.iter().map(|runs| ranges(runs)).collect()),
            })
            .collect(),
    }
}

/// The answer to a call that changed nothing: `{"changes": []}`.
#[derive(Default, serde::Serialize)]
struct NoChanges {
    changes: [(); 0],
}

fn report_json(r: &RescaleReport) -> api_types::RescaleReport {
    api_types::RescaleReport {
        checkpoint: Some(r.checkpoint),
        changes: r
            .changes
            .iter()
            .map(|c| ParallelismChange {
                uid: c.uid.clone(),
                from: c.from as u64,
                to: c.to as u64,
            })
            .collect(),
        kept: r
            .kept
            .iter()
            .map(|(uid, why)| KeptOperator {
                uid: uid.clone(),
                reason: why.clone(),
            })
            .collect(),
        rebalanced: r
            .rebalanced
            .iter()
            .map(|b| Rebalanced {
                uid: b.uid.clone(),
                load_before: b.load_before.clone(),
                load_after: b.load_after.clone(),
                moved: b.moved as u64,
            })
            .collect(),
        duration_ms: Some(ms(r.duration)),
        pause_ms: Some(ms(r.pause)),
    }
}

/// A required positive integer field.
fn parallelism_field(body: &Map<String, Value>, field: &str) -> Result<usize, ApiError> {
    match body.get(field) {
        Some(Value::Number(n)) if n.as_u64().is_some_and(|p| p > 0) => {
            Ok(n.as_u64().unwrap_or(1) as usize)
        }
        None => Err(ApiError::bad_request(format!(
            "field `{field}` is required: a positive integer"
        ))),
        Some(other) => Err(ApiError::bad_request(format!(
            "field `{field}` must be a positive integer, got {other}"
        ))),
    }
}

/// The answer to a rescale call.
fn answer(
    r: Result<Result<RescaleReport, RescaleError>, actix_web::error::BlockingError>,
) -> Answer {
    let r = r.map_err(|e| ApiError::internal(e.to_string()))?;
    match r {
        Ok(report) => Ok(HttpResponse::Ok().json(report_json(&report))),
        Err(e @ RescaleError::UnknownOperator { .. }) => Err(ApiError::not_found(e.to_string())),
        Err(
            e @ (RescaleError::Parallelism { .. }
            | RescaleError::NotRescalable { .. }
            | RescaleError::Plan(_)
            | RescaleError::Unsupported(_)),
        ) => Err(ApiError::bad_request(e.to_string())),
        Err(e) => Err(ApiError::conflict(e.to_string())),
    }
}
