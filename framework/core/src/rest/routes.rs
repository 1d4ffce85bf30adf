//! The route table, once: every method and path the server serves, the handler that answers
//! it and what it does. The actix router ([`configure`]) and the public list of paths and
//! methods ([`ROUTES`]) are made from it, and the checked-in OpenAPI description
//! (`openapi.json`, which adds the bodies' schemas) is held to it: a unit test here compares
//! its paths, methods and summaries with [`TABLE`], and `tests/rest.rs` its paths and methods
//! with [`ROUTES`] and the server's answers.
//!
//! It names the handlers, each in the file of its resource; the handlers import the shared
//! helpers (`request`), never this module.

use std::sync::LazyLock;

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse, ResponseError};

use super::request::ApiError;
use super::{backups, checkpoints, dashboard, jobs, prom, replace, rescale, savepoints, settings};

/// An HTTP method a route answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Get,
    Post,
    Patch,
    Put,
}

impl Method {
    /// Its name as HTTP writes it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Patch => "PATCH",
            Method::Put => "PUT",
        }
    }

    fn actix(self) -> actix_web::http::Method {
        match self {
            Method::Get => actix_web::http::Method::GET,
            Method::Post => actix_web::http::Method::POST,
            Method::Patch => actix_web::http::Method::PATCH,
            Method::Put => actix_web::http::Method::PUT,
        }
    }
}

/// One row of the table: a method on a path, its handler, its summary.
pub(crate) struct Route {
    pub(crate) method: Method,
    pub(crate) path: &'static str,
    /// What it does: the `summary` of its operation in `openapi.json` (a test compares them).
    #[cfg_attr(not(test), expect(dead_code, reason = "read by the openapi.json test"))]
    pub(crate) summary: &'static str,
    /// Points an actix route at the handler.
    to: fn(actix_web::Route) -> actix_web::Route,
}

macro_rules! route {
    ($method:ident $path:literal => $handler:path, $summary:literal) => {
        Route {
            method: Method::$method,
            path: $path,
            summary: $summary,
            to: |r| r.to($handler),
        }
    };
}

/// Every route. Paths are matched in their first row's order, so a more specific path comes
/// before a pattern that would take it (`/jobs/overview` before `/jobs/{id}`); a known path
/// with a method it does not serve answers 405.
pub(crate) static TABLE: &[Route] = &[
    route!(Get "/" => dashboard::asset, "The dashboard: a web page that shows and steers the server's jobs (Weir's own; ?job=<id> picks a job)"),
    route!(Get "/dashboard.js" => dashboard::asset, "The dashboard's script (embedded, no external request)"),
    route!(Get "/dashboard.css" => dashboard::asset, "The dashboard's style sheet (embedded)"),
    route!(Get "/overview" => jobs::overview, "Cluster overview: jobs running, finished, cancelled, failed"),
    route!(Get "/jobs/overview" => jobs::jobs_overview, "Every job with its state, times and task counts"),
    route!(Get "/jobs" => jobs::jobs, "Every job's id and status"),
    route!(Get "/metrics" => prom::metrics, "Every metric in Prometheus text exposition (job_id, job_name, operator, vertex, subtask labels)"),
    route!(Get "/jobs/{id}" => jobs::job, "A job: state, times, vertices (chains) with parallelism, status and records in/out, plan (nodes with their inputs and ship strategy); Weir adds each vertex's backpressure-level and records-in/out-per-second, and the source-rate-limit"),
    route!(Patch "/jobs/{id}" => jobs::patch_job, "Cancel the job (mode=cancel)"),
    route!(Get "/jobs/{id}/vertices/{vid}" => jobs::vertex, "A vertex and its subtasks"),
    route!(Patch "/jobs/{id}/vertices/{vid}" => rescale::patch_vertex, "Rescale the vertex while the job runs"),
    route!(Patch "/jobs/{id}/parallelism" => rescale::patch_job_parallelism, "Rescale every operator that follows the job's default parallelism"),
    route!(Get "/jobs/{id}/resource-requirements" => rescale::resource_requirements, "Each vertex's parallelism (Flink's lowerBound/upperBound shape)"),
    route!(Put "/jobs/{id}/resource-requirements" => rescale::put_resource_requirements, "Rescale the named vertices to their upperBound, at one barrier"),
    route!(Post "/jobs/{id}/vertices/{vid}/rebalance" => rescale::rebalance_vertex, "Assign the vertex's key groups to its subtasks again by observed load, at its parallelism"),
    route!(Get "/jobs/{id}/rescales" => rescale::rescales, "numRescales, the rescale in progress, the last rescale's report, each vertex's parallelism"),
    route!(Get "/jobs/{id}/config" => settings::config, "Every live setting's value now"),
    route!(Patch "/jobs/{id}/config" => settings::patch_config, "Change live settings, all or none (Flink option names; operator.<uid>.<key> for operator fields)"),
    route!(Post "/jobs/{id}/config/plan" => settings::plan, "How each change would apply: live (and when) or fast-restart (and why); applies nothing"),
    route!(Get "/jobs/{id}/config/history" => settings::history, "Every settings change asked for: time, caller, old and new values, outcome"),
    route!(Post "/jobs/{id}/replace" => replace::replace, "Fast restart with a registered graph version: savepoint in memory, new graph in the same process, rollback if it fails before its first checkpoint"),
    route!(Post "/jobs/{id}/config/rollback" => settings::rollback, "Return every setting to its value when the last completed checkpoint was taken"),
    route!(Get "/jobs/{id}/vertices/{vid}/backpressure" => jobs::backpressure, "backpressureLevel and per-subtask ratio, busyRatio, idleRatio"),
    route!(Get "/jobs/{id}/vertices/{vid}/metrics" => jobs::vertex_metrics, "A vertex's subtask metrics by Flink's <subtask>.<metric> names; without get, the names"),
    route!(Get "/jobs/{id}/vertices/{vid}/subtasks/metrics" => jobs::subtask_metrics, "Each metric in get aggregated over the vertex's subtasks"),
    route!(Get "/jobs/{id}/checkpoints" => checkpoints::checkpoints, "Checkpoint counts, summary (min/max/avg over completed), latest completed/savepoint/failed/restored, and the history of the last 10; Weir adds each checkpoint's alignment_duration and start_delay (ms, the longest of a subtask)"),
    route!(Post "/jobs/{id}/checkpoints" => checkpoints::trigger_checkpoint, "Trigger a checkpoint now; answers {request-id}"),
    route!(Get "/jobs/{id}/checkpoints/config" => checkpoints::checkpoint_config, "Checkpoint settings: mode, interval, timeout, min_pause, unaligned_checkpoints, ..."),
    route!(Get "/jobs/{id}/checkpoints/details/{cid}" => checkpoints::checkpoint_details, "One checkpoint of the history: status, times, size, acknowledged subtasks, failure message, and per vertex (tasks) its subtasks' totals"),
    route!(Get "/jobs/{id}/checkpoints/details/{cid}/subtasks/{vid}" => checkpoints::checkpoint_subtasks, "Each subtask of one vertex in one checkpoint: acknowledgement, sizes, sync/async durations, alignment, start delay, in-flight data persisted (unaligned)"),
    route!(Get "/jobs/{id}/checkpoints/{trigger}" => checkpoints::checkpoint_status, "A triggered checkpoint's status: IN_PROGRESS, or COMPLETED with operation.checkpointId or operation.failure-cause"),
    route!(Get "/jobs/{id}/metrics" => jobs::job_metrics, "Job metrics: names, or [{id, value}] of those in `get`"),
    route!(Get "/jobs/{id}/backups" => backups::backups, "Buffer-queue backups: queue, promotions, last failover (Weir's own)"),
    route!(Get "/jobs/{id}/exceptions" => jobs::exceptions, "Failure history, newest first (Flink's exceptionHistory); Weir adds each entry's failover (promotion, restart or failed), recoveryMs and recordsReplayed"),
    route!(Post "/jobs/{id}/savepoints" => savepoints::trigger_savepoint, "Trigger a savepoint; answers {request-id}"),
    route!(Get "/jobs/{id}/savepoints/{trigger}" => savepoints::savepoint_status, "A savepoint's status: IN_PROGRESS, or COMPLETED with operation.location or operation.failure-cause"),
    route!(Post "/jobs/{id}/stop" => savepoints::stop, "Stop the job with a savepoint; answers {request-id}"),
];

/// The paths of [`TABLE`], each with its routes, in the order of their first row.
fn by_path() -> Vec<(&'static str, Vec<&'static Route>)> {
    let mut paths: Vec<(&'static str, Vec<&'static Route>)> = Vec::new();
    for r in TABLE {
        match paths.iter_mut().find(|(p, _)| *p == r.path) {
            Some((_, routes)) => routes.push(r),
            None => paths.push((r.path, vec![r])),
        }
    }
    paths
}

/// Every path the server serves with its methods, from the route table.
pub static ROUTES: LazyLock<Vec<(&'static str, Vec<&'static str>)>> = LazyLock::new(|| {
    by_path()
        .into_iter()
        .map(|(p, routes)| (p, routes.iter().map(|r| r.method.as_str()).collect()))
        .collect()
});

/// Registers every route of [`TABLE`] with actix, and 405 for other methods on a known path.
pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    for (path, routes) in by_path() {
        let mut resource = web::resource(path);
        for r in routes {
            resource = resource.route((r.to)(web::route().method(r.method.actix())));
        }
        cfg.service(resource.default_service(web::to(method_not_allowed)));
    }
}

/// Any path the table does not have: 404 in Flink's error shape.
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `openapi.json` describes exactly the table's operations, each with the table's summary.
    #[test]
    fn the_openapi_description_has_the_tables_operations_and_summaries() {
        let spec: serde_json::Value =
            serde_json::from_str(include_str!("openapi.json")).expect("openapi.json is JSON");
        let mut documented: Vec<(String, String, String)> = Vec::new();
        for (path, item) in spec["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("a path item") {
                if method == "parameters" {
                    continue;
                }
                let summary = op["summary"].as_str().unwrap_or_default().to_owned();
                documented.push((path.clone(), method.to_uppercase(), summary));
            }
        }
        documented.sort();
        let mut table: Vec<(String, String, String)> = TABLE
            .iter()
            .map(|r| {
                (
                    r.path.to_owned(),
                    r.method.as_str().to_owned(),
                    r.summary.to_owned(),
                )
            })
            .collect();
        table.sort();
        assert_eq!(
            documented, table,
            "openapi.json is out of step with the route table"
        );
    }

    #[test]
    fn routes_list_every_path_once_in_table_order() {
        assert_eq!(ROUTES[0], ("/", vec!["GET"]));
        assert_eq!(
            ROUTES
                .iter()
                .find(|(p, _)| *p == "/jobs/{id}")
                .map(|r| &r.1),
            Some(&vec!["GET", "PATCH"])
        );
        let mut paths: Vec<&str> = ROUTES.iter().map(|(p, _)| *p).collect();
        let n = paths.len();
        paths.sort();
        paths.dedup();
        assert_eq!(paths.len(), n);
    }
}
