//! One look at a job over its REST API: which job to watch, and the [`Observation`] the
//! engine judges, read into the REST API's types (`weir::api_types`). Only calls and fields
//! Weir and Flink share are needed; where Flink reports
//! a value elsewhere (the start delay and alignment time are task metrics in Flink, job
//! metrics in Weir) both places are read. It owns reading, not judging (`engine`) or acting
//! (`act`).

use weir::api_types::{
    AggregatedMetric, CheckpointingStatistics, JobDetails, JobsOverview, Metric, VertexBackpressure,
};

use super::engine::Observation;
use crate::client::{ClientError, RestClient};

/// Which job the agent watches.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobSelector {
    /// The job with this id.
    Id(String),
    /// The running job with this name (followed across a new id).
    Name(String),
    /// The one running job on the server.
    Only,
}

/// Why a look found no job to judge.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LookError {
    /// The server did not answer as it should.
    #[error(transparent)]
    Rest(#[from] ClientError),
    /// No running job fits the selector.
    #[error("no job to watch: {0}")]
    NoJob(String),
}

/// The id of the running job `selector` names.
pub fn find_job(client: &RestClient, selector: &JobSelector) -> Result<String, LookError> {
    if let JobSelector::Id(id) = selector {
        let job: JobDetails = client.get_as(&format!("/jobs/{id}")).map_err(|e| match e {
            ClientError::Refused { status: 404, .. } => {
                LookError::NoJob(format!("job {id} is not on the server"))
            }
            e => e.into(),
        })?;
        return match job.state.as_str() {
            "RUNNING" => Ok(id.clone()),
            "" => Err(LookError::NoJob(format!("job {id} is in an unknown state"))),
            state => Err(LookError::NoJob(format!("job {id} is {state}"))),
        };
    }
    let overview: JobsOverview = client.get_as("/jobs/overview")?;
    let running: Vec<(&str, &str)> = overview
        .jobs
        .iter()
        .filter(|j| j.state == "RUNNING" && !j.jid.is_empty())
        .map(|j| (j.jid.as_str(), j.name.as_str()))
        .collect();
    let fitting: Vec<&str> = running
        .iter()
        .filter(|(_, name)| match selector {
            JobSelector::Name(n) => name == n,
            _ => true,
        })
        .map(|(id, _)| *id)
        .collect();
    match (fitting.as_slice(), selector) {
        ([one], _) => Ok((*one).to_owned()),
        ([], JobSelector::Name(n)) => {
            Err(LookError::NoJob(format!("no running job is named `{n}`")))
        }
        ([], _) => Err(LookError::NoJob("no job is running".into())),
        (many, _) => Err(LookError::NoJob(format!(
            "{} jobs are running ({}): name one with --job or --job-name",
            many.len(),
            many.join(", ")
        ))),
    }
}

/// Looks at job `id`: `None` while it is not running but may again (restarting).
pub fn observe(client: &RestClient, id: &str) -> Result<Option<Observation>, LookError> {
    let job: JobDetails = client.get_as(&format!("/jobs/{id}")).map_err(|e| match e {
        ClientError::Refused { status: 404, .. } => {
            LookError::NoJob(format!("job {id} is no longer on the server"))
        }
        e => e.into(),
    })?;
    match job.state.as_str() {
        "RUNNING" => {}
        s @ ("FINISHED" | "CANCELED" | "FAILED" | "SUSPENDED") => {
            return Err(LookError::NoJob(format!("job {id} is {s}")))
        }
        _ => return Ok(None),
    }
    let checkpoints: CheckpointingStatistics = client.get_as(&format!("/jobs/{id}/checkpoints"))?;
    let metrics: Vec<Metric> = client.get_as(&format!(
        "/jobs/{id}/metrics?get=lastCheckpointDuration,checkpointStartDelay,checkpointAlignmentTime"
    ))?;
    let metric = |name: &str| -> Option<u64> {
        metrics
            .iter()
            .find(|m| m.id == name)
            .and_then(Metric::number)
            .map(|v| v as u64)
    };
    let mut obs = Observation {
        job_id: id.to_owned(),
        completed_checkpoints: Some(checkpoints.counts.completed),
        failed_checkpoints: Some(checkpoints.counts.failed),
        // From the same answer as the counts, so that the duration is the latest counted
        // checkpoint's; the job metric only where the answer has none.
        last_checkpoint_duration_ms: checkpoints
            .latest
            .completed
            .as_ref()
            .map(|c| c.end_to_end_duration)
            .or_else(|| metric("lastCheckpointDuration")),
        checkpoint_start_delay_ms: metric("checkpointStartDelay"),
        checkpoint_alignment_ms: metric("checkpointAlignmentTime"),
        ..Observation::default()
    };
    let flink_task_metrics =
        obs.checkpoint_start_delay_ms.is_none() || obs.checkpoint_alignment_ms.is_none();
    for vertex in job.vertices.iter().filter(|v| !v.id.is_empty()) {
        let vid = &vertex.id;
        let name = if vertex.name.is_empty() {
            vid
        } else {
            &vertex.name
        };
        let bp: VertexBackpressure =
            client.get_as(&format!("/jobs/{id}/vertices/{vid}/backpressure"))?;
        let ratio = bp
            .subtasks
            .iter()
            .map(|s| s.ratio)
            .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))));
        if let Some(r) = ratio {
            if obs.backpressure.is_none_or(|b| r > b) {
                obs.backpressure = Some(r);
                obs.backpressured_vertex = Some(name.to_owned());
            }
        }
        if flink_task_metrics {
            flink_task_metrics_of(client, id, vid, &mut obs);
        }
    }
    Ok(Some(obs))
}

/// Flink: the start delay and alignment time are task metrics in ns, the largest over the
/// vertex's subtasks; each raises the observation's value to it. One metric a call: Flink
/// answers `[]` to the whole call when a vertex lacks one of them (a source has no alignment
/// time).
fn flink_task_metrics_of(client: &RestClient, id: &str, vid: &str, obs: &mut Observation) {
    for (metric, slot) in [
        (
            "checkpointStartDelayNanos",
            &mut obs.checkpoint_start_delay_ms,
        ),
        ("checkpointAlignmentTime", &mut obs.checkpoint_alignment_ms),
    ] {
        let all: Option<Vec<AggregatedMetric>> = client
            .get_as(&format!(
                "/jobs/{id}/vertices/{vid}/subtasks/metrics?get={metric}&agg=max"
            ))
            .ok();
        let ns = all
            .iter()
            .flatten()
            .find(|m| m.id == metric)
            .and_then(|m| m.max);
        if let Some(ms) = ns.map(|ns| (ns / 1e6) as u64) {
            *slot = Some(slot.map_or(ms, |v| v.max(ms)));
        }
    }
}
