//! The cluster, its jobs and their vertices: `/overview`, `/jobs`, `/jobs/overview`,
//! `/jobs/{id}` (and its cancel), vertices, backpressure, job, vertex and subtask metrics, and
//! the failure history `/jobs/{id}/exceptions` (Flink's shape, with Weir's promotions).

use actix_web::{web, HttpRequest, HttpResponse};

use super::request::{
    authorize, end_and_duration, job_of, level, ms, running, vertex_of, Answer, ApiError, State,
};
use crate::api_types::{
    AggregatedMetric, ClusterOverview, ExceptionEntry, ExceptionHistory, JobDetails, JobExceptions,
    JobIdWithStatus, JobIdsWithStatus, JobOverview, JobPlan, JobVertex, JobsOverview, Metric,
    PlanInput, PlanNode, Recovery, SubtaskBackpressure, TaskCounts, VertexBackpressure,
    VertexDetails, VertexIoMetrics, VertexSubtask,
};
use crate::job::{now_ms, JobMonitor};
use crate::metrics::BackpressureLevel;

pub(super) async fn overview(state: State, _req: HttpRequest) -> Answer {
    let jobs = state.jobs.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let count = |s: &[&str]| {
        jobs.iter()
            .filter(|j| s.contains(&j.status().as_str()))
            .count() as u64
    };
    Ok(HttpResponse::Ok().json(ClusterOverview {
        taskmanagers: 1,
        slots_total: jobs.len() as u64,
        slots_available: 0,
        jobs_running: count(&["RUNNING", "RESTARTING", "INITIALIZING", "CANCELLING"]),
        jobs_finished: count(&["FINISHED"]),
        jobs_cancelled: count(&["CANCELED"]),
        jobs_failed: count(&["FAILED"]),
        flink_version: concat!("weir ", env!("CARGO_PKG_VERSION")).into(),
        flink_commit: String::new(),
    }))
}

pub(super) async fn jobs(state: State, _req: HttpRequest) -> Answer {
    let jobs = state.jobs.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let jobs = jobs
        .iter()
        .map(|j| JobIdWithStatus {
            id: j.id().to_owned(),
            status: j.status().as_str().to_owned(),
        })
        .collect();
    Ok(HttpResponse::Ok().json(JobIdsWithStatus { jobs }))
}

pub(super) fn tasks(job: &JobMonitor) -> TaskCounts {
    let total = job.vertices().iter().map(|v| v.parallelism).sum::<usize>() as u64;
    let status = job.status().as_str().to_ascii_lowercase();
    let mut t = TaskCounts::new();
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
        t.insert(s.into(), if s == status { total } else { 0 });
    }
    t.insert("total".into(), total);
    t
}

pub(super) async fn jobs_overview(state: State, _req: HttpRequest) -> Answer {
    let jobs = state.jobs.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let now = now_ms();
    let jobs = jobs
        .iter()
        .map(|j| JobOverview {
            jid: j.id().to_owned(),
            name: j.name().to_owned(),
            state: j.status().as_str().to_owned(),
            start_time: j.start_time_ms(),
            end_time: end_and_duration(j, now).0,
            duration: end_and_duration(j, now).1,
            last_modification: now,
            tasks: tasks(j),
        })
        .collect();
    Ok(HttpResponse::Ok().json(JobsOverview { jobs }))
}

/// Records into and out of a vertex: its first operator's input, its last one's output.
pub(super) fn vertex_records(v: &crate::VertexInfo, m: Option<&crate::JobMetrics>) -> (u64, u64) {
    let Some(m) = m else { return (0, 0) };
    let first = v.operators.first().and_then(|u| m.operator(u));
    let last = v.operators.last().and_then(|u| m.operator(u));
    (
        first.map_or(0, |o| o.num_records_in),
        last.map_or(0, |o| o.num_records_out),
    )
}

pub(super) fn vertex_json(
    job: &JobMonitor,
    v: &crate::VertexInfo,
    m: Option<&crate::JobMetrics>,
    now: u64,
) -> JobVertex {
    let (read, write) = vertex_records(v, m);
    let status = job.status().as_str();
    let first = m.and_then(|m| v.operators.first().and_then(|u| m.operator(u)));
    let last = m.and_then(|m| v.operators.last().and_then(|u| m.operator(u)));
    JobVertex {
        id: v.id.clone(),
        name: v.name.clone(),
        max_parallelism: crate::key_group::DEFAULT_MAX_PARALLELISM as u64,
        parallelism: v.parallelism as u64,
        status: status.to_owned(),
        start_time: job.start_time_ms(),
        end_time: end_and_duration(job, now).0,
        duration: end_and_duration(job, now).1,
        tasks: TaskCounts::from([(status.to_owned(), v.parallelism as u64)]),
        metrics: VertexIoMetrics {
            read_records: read,
            read_records_complete: true,
            write_records: write,
            write_records_complete: true,
            ..VertexIoMetrics::default()
        },
        // Weir's: the worst backpressure level of its subtasks and its rates over the last
        // metrics interval, so one request draws the whole graph.
        backpressure_level: Some(level(worst_level(v, m)).to_owned()),
        records_in_per_second: Some(first.map_or(0.0, |o| o.num_records_in_per_second)),
        records_out_per_second: Some(last.map_or(0.0, |o| o.num_records_out_per_second)),
    }
}

/// The worst backpressure level of `v`'s subtasks (`ok` before the first metrics).
fn worst_level(v: &crate::VertexInfo, m: Option<&crate::JobMetrics>) -> BackpressureLevel {
    m.iter()
        .flat_map(|m| m.subtasks.iter())
        .filter(|s| s.head_uid == v.id)
        .map(|s| s.backpressure_level)
        .max()
        .unwrap_or(BackpressureLevel::Ok)
}

pub(super) async fn job(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let now = now_ms();
    let m = job.metrics();
    let vertices = job
        .vertices()
        .iter()
        .map(|v| vertex_json(&job, v, m.as_ref(), now))
        .collect();
    let nodes = job
        .vertices()
        .iter()
        .map(|v| PlanNode {
            id: v.id.clone(),
            parallelism: v.parallelism as u64,
            description: v.name.clone(),
            operator: String::new(),
            operator_strategy: String::new(),
            inputs: v
                .inputs
                .iter()
                .enumerate()
                .map(|(num, i)| PlanInput {
                    num: num as u64,
                    id: i.id.clone(),
                    ship_strategy: i.ship_strategy.to_string(),
                    exchange: "pipelined_bounded".into(),
                })
                .collect(),
        })
        .collect();
    let status = job.status().as_str().to_owned();
    Ok(HttpResponse::Ok().json(JobDetails {
        jid: job.id().to_owned(),
        name: job.name().to_owned(),
        is_stoppable: false,
        state: status.clone(),
        job_type: "STREAMING".into(),
        start_time: job.start_time_ms(),
        end_time: end_and_duration(&job, now).0,
        duration: end_and_duration(&job, now).1,
        max_parallelism: -1,
        now,
        timestamps: [(status.clone(), job.start_time_ms())].into(),
        vertices,
        status_counts: [(status, job.vertices().len() as u64)].into(),
        plan: JobPlan {
            jid: job.id().to_owned(),
            name: job.name().to_owned(),
            kind: "STREAMING".into(),
            nodes,
        },
        // Weir's: the rate limit on each source subtask when rate control is on.
        source_rate_limit: m.as_ref().and_then(|m| m.source_rate_limit),
    }))
}

pub(super) async fn patch_job(state: State, req: HttpRequest) -> Answer {
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
            Ok(HttpResponse::Accepted().json(serde_json::Map::new()))
        }
        Some("stop") => Err(ApiError::bad_request(
            "mode=stop is not supported: use POST /jobs/{id}/stop (stop with a savepoint)",
        )),
        Some(other) => Err(ApiError::bad_request(format!(
            "query parameter `mode` must be `cancel`, got `{other}`"
        ))),
    }
}

pub(super) async fn vertex(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let v = vertex_of(&job, &req)?;
    let now = now_ms();
    let status = job.status().as_str();
    let subtasks = (0..v.parallelism)
        .map(|i| VertexSubtask {
            subtask: i as u64,
            status: status.to_owned(),
            attempt: 0,
            host: "localhost".into(),
            start_time: job.start_time_ms(),
            end_time: end_and_duration(&job, now).0,
            duration: end_and_duration(&job, now).1,
        })
        .collect();
    Ok(HttpResponse::Ok().json(VertexDetails {
        id: v.id,
        name: v.name,
        parallelism: v.parallelism as u64,
        max_parallelism: crate::key_group::DEFAULT_MAX_PARALLELISM as u64,
        now,
        subtasks,
    }))
}

pub(super) async fn backpressure(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let v = vertex_of(&job, &req)?;
    let m = job.metrics();
    let subtasks = m
        .iter()
        .flat_map(|m| m.subtasks.iter())
        .filter(|s| s.head_uid == v.id)
        .map(|s| SubtaskBackpressure {
            subtask: s.subtask as u64,
            attempt_number: 0,
            backpressure_level: level(s.backpressure_level).to_owned(),
            ratio: s.back_pressured_time_ms_per_second / 1000.0,
            busy_ratio: s.busy_time_ms_per_second / 1000.0,
            idle_ratio: s.idle_time_ms_per_second / 1000.0,
        })
        .collect();
    let worst = worst_level(&v, m.as_ref());
    Ok(HttpResponse::Ok().json(VertexBackpressure {
        status: "ok".into(),
        backpressure_level: level(worst).to_owned(),
        end_timestamp: now_ms(),
        subtasks,
    }))
}

/// The query's `name` parameter split at commas (empty: not given).
pub(super) fn query_list(req: &HttpRequest, name: &str) -> Result<Option<Vec<String>>, ApiError> {
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
pub(super) fn subtasks_of(job: &JobMonitor, v: &crate::VertexInfo) -> Vec<crate::SubtaskMetrics> {
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
pub(super) async fn vertex_metrics(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let v = vertex_of(&job, &req)?;
    let subs = subtasks_of(&job, &v);
    // The chain's operators' own readings, `<subtask>.<uid>.<name>`.
    let gauges: Vec<(String, String)> = job
        .operator_gauges()
        .into_iter()
        .filter(|(uid, ..)| v.operators.contains(uid))
        .map(|(uid, i, name, value)| (format!("{i}.{uid}.{name}"), value))
        .collect();
    let list: Vec<Metric> = match query_list(&req, "get")? {
        None => (0..v.parallelism)
            .flat_map(|i| {
                crate::SubtaskMetrics::NAMES
                    .iter()
                    .map(move |n| Metric::name(format!("{i}.{n}")))
            })
            .chain(gauges.iter().map(|(id, _)| Metric::name(id)))
            .collect(),
        Some(names) => names
            .iter()
            .filter_map(|full| {
                if let Some((_, value)) = gauges.iter().find(|(id, _)| id == full) {
                    return Some(Metric::with_value(full, value));
                }
                let (i, name) = full.split_once('.')?;
                let i: usize = i.parse().ok()?;
                let value = subs.iter().find(|s| s.subtask == i)?.get(name)?;
                Some(Metric::with_value(full, value.to_string()))
            })
            .collect(),
    };
    Ok(HttpResponse::Ok().json(list))
}

/// `/vertices/{vid}/subtasks/metrics`: each metric in `get` aggregated over the subtasks
/// (`agg=min,max,sum,avg`, all by default; `subtasks=0,2` to choose some).
pub(super) async fn subtask_metrics(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let v = vertex_of(&job, &req)?;
    let mut subs = subtasks_of(&job, &v);
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
        let list: Vec<AggregatedMetric> = crate::SubtaskMetrics::NAMES
            .iter()
            .map(|n| AggregatedMetric::name(*n))
            .collect();
        return Ok(HttpResponse::Ok().json(list));
    };
    let list: Vec<AggregatedMetric> = names
        .iter()
        .filter_map(|name| {
            let xs: Vec<f64> = subs.iter().filter_map(|s| s.get(name)).collect();
            if xs.is_empty() {
                return None;
            }
            let sum: f64 = xs.iter().sum();
            let avg = sum / xs.len() as f64;
            let max = xs.iter().copied().fold(f64::MIN, f64::max);
            let mut m = AggregatedMetric::name(name.as_str());
            for a in &aggs {
                match a.as_str() {
                    "min" => m.min = Some(xs.iter().copied().fold(f64::MAX, f64::min)),
                    "max" => m.max = Some(max),
                    "sum" => m.sum = Some(sum),
                    "avg" => m.avg = Some(avg),
                    // Flink's skew: how far the largest is above the average, in percent.
                    _ => {
                        m.skew = Some(if max > 0.0 {
                            (max - avg) / max * 100.0
                        } else {
                            0.0
                        })
                    }
                }
            }
            Some(m)
        })
        .collect();
    Ok(HttpResponse::Ok().json(list))
}

/// `GET /jobs/{id}/exceptions`: Flink's exception history, newest first, at most
/// `maxExceptions` entries (default 20). Weir adds to each entry how the job recovered
/// (`failover`: `promotion`, `restart` or `failed`), `recoveryMs` (`null` while a restart is
/// under way) and, for a promotion, `recordsReplayed` from the buffer queue.
pub(super) async fn exceptions(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let max = match query_list(&req, "maxExceptions")?.as_deref() {
        None | Some([]) => 20,
        Some([n]) => n.parse::<usize>().map_err(|_| {
            ApiError::bad_request(format!(
                "query parameter `maxExceptions` must be a number, got `{n}`"
            ))
        })?,
        Some(_) => {
            return Err(ApiError::bad_request(
                "query parameter `maxExceptions` must be one number",
            ))
        }
    };
    let vertices = job.vertices();
    let mut entries: Vec<ExceptionEntry> = job.failures().iter().map(failure_entry).collect();
    entries.extend(job.promotions().iter().map(|p| {
        let parallelism = vertices
            .iter()
            .find(|v| v.id == p.uid)
            .map_or(0, |v| v.parallelism);
        promotion_entry(p, parallelism)
    }));
    entries.sort_by_key(|e| std::cmp::Reverse(e.timestamp));
    let truncated = entries.len() > max;
    entries.truncate(max);
    let root = entries.first();
    Ok(HttpResponse::Ok().json(JobExceptions {
        root_exception: root.map(|e| e.stacktrace.clone()),
        timestamp: root.map(|e| e.timestamp),
        all_exceptions: Vec::new(),
        truncated,
        exception_history: ExceptionHistory { entries, truncated },
    }))
}

/// A failure of the job: how it recovered (`restart` or `failed`).
fn failure_entry(f: &crate::FailureRecord) -> ExceptionEntry {
    let (failover, delay) = match f.outcome {
        crate::FailureOutcome::Restarted { delay } => ("restart", Some(ms(delay))),
        _ => ("failed", None),
    };
    ExceptionEntry {
        exception_name: "weir.JobError".into(),
        stacktrace: f.error.clone(),
        timestamp: f.time_ms,
        failure_labels: [("class".to_owned(), f.class.as_str().to_owned())].into(),
        failover: Some(failover.into()),
        recovery_ms: f.recovery.map(|d| ms(d).into()),
        recovery: Some(Recovery::Restart {
            attempt: f.attempt,
            restart_delay_ms: delay,
        }),
        ..ExceptionEntry::default()
    }
}

/// A subtask's failure that its backup took over (of a vertex of `parallelism` subtasks).
fn promotion_entry(p: &crate::PromotionRecord, parallelism: usize) -> ExceptionEntry {
    ExceptionEntry {
        exception_name: "weir.TaskFailure".into(),
        stacktrace: p.cause.clone(),
        timestamp: p.time_ms,
        task_name: Some(format!("{} ({}/{parallelism})", p.uid, p.subtask + 1)),
        failure_labels: [("class".to_owned(), "transient".to_owned())].into(),
        failover: Some("promotion".into()),
        recovery_ms: serde_json::Number::from_f64(p.recovery.as_secs_f64() * 1000.0),
        records_replayed: Some(p.records_replayed),
        recovery: Some(Recovery::Promotion {
            uid: p.uid.clone(),
            subtask: p.subtask as u64,
            batches_replayed: p.batches_replayed,
            batches_reprocessed: p.batches_reprocessed,
        }),
        ..ExceptionEntry::default()
    }
}

/// The job-level metrics with Flink's names.
pub(super) fn job_metric(job: &JobMonitor, name: &str) -> Option<String> {
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
        "numRescales" => job.rescale_stats().num_rescales,
        "lastRescaleDuration" => job.rescale_stats().last.map_or(0, |r| ms(r.duration)),
        "lastRescalePause" => job.rescale_stats().last.map_or(0, |r| ms(r.pause)),
        _ => return None,
    };
    Some(v.to_string())
}

/// The names `/jobs/{id}/metrics` knows.
pub(super) const JOB_METRICS: &[&str] = &[
    "numRestarts",
    "lastCheckpointDuration",
    "lastCheckpointSize",
    "numberOfCompletedCheckpoints",
    "numberOfFailedCheckpoints",
    "numberOfInProgressCheckpoints",
    "checkpointAlignmentTime",
    "checkpointStartDelay",
    "uptime",
    "numRescales",
    "lastRescaleDuration",
    "lastRescalePause",
];

pub(super) async fn job_metrics(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let query =
        web::Query::<std::collections::HashMap<String, String>>::from_query(req.query_string())
            .map_err(|e| ApiError::bad_request(format!("bad query: {e}")))?;
    let list: Vec<Metric> = match query.get("get") {
        // As Flink: without `get`, the names; with it, the values (as strings) of the known ones.
        None => JOB_METRICS.iter().map(|n| Metric::name(*n)).collect(),
        Some(names) => names
            .split(',')
            .map(str::trim)
            .filter_map(|n| job_metric(&job, n).map(|v| Metric::with_value(n, v)))
            .collect(),
    };
    Ok(HttpResponse::Ok().json(list))
}
