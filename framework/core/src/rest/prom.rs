//! `GET /metrics`: every job's metrics in Prometheus text exposition, encoded by the
//! `prometheus-client` crate, with `job_id`, `job_name` and `operator` / `vertex` and
//! `subtask` labels. A registry is built per scrape from the jobs' published metrics, so a
//! scrape never holds a job's locks for longer than a copy.

use actix_web::{HttpRequest, HttpResponse};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::request::ApiError;
use crate::job::JobMonitor;

type Labels = Vec<(String, String)>;
type Gauges = Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>;

/// A family of gauges registered under `name`.
fn family(registry: &mut Registry, name: &str, help: &str) -> Gauges {
    let f = Gauges::default();
    registry.register(name, help, f.clone());
    f
}

fn job_labels(j: &JobMonitor) -> Labels {
    vec![
        ("job_id".into(), j.id().to_owned()),
        ("job_name".into(), j.name().to_owned()),
    ]
}

fn with(mut l: Labels, k: &str, v: impl ToString) -> Labels {
    l.push((k.to_owned(), v.to_string()));
    l
}

/// The text exposition of `jobs`.
pub(crate) fn render(jobs: &[JobMonitor]) -> Result<String, std::fmt::Error> {
    let mut r = Registry::with_prefix("weir");
    let up = family(
        &mut r,
        "job_running",
        "1 while the job runs (RUNNING or RESTARTING), else 0",
    );
    let restarts = family(&mut r, "job_num_restarts", "numRestarts");
    let rescales = family(&mut r, "job_num_rescales", "numRescales");
    let rescale_pause = family(
        &mut r,
        "job_last_rescale_pause_ms",
        "lastRescalePause: how long the input paused in the last rescale, ms",
    );
    let completed = family(
        &mut r,
        "job_completed_checkpoints",
        "numberOfCompletedCheckpoints",
    );
    let failed = family(
        &mut r,
        "job_failed_checkpoints",
        "numberOfFailedCheckpoints",
    );
    let last_duration = family(
        &mut r,
        "job_last_checkpoint_duration_ms",
        "lastCheckpointDuration, ms",
    );
    let last_size = family(
        &mut r,
        "job_last_checkpoint_size_bytes",
        "lastCheckpointSize, bytes",
    );
    let rec_in = family(&mut r, "operator_num_records_in", "numRecordsIn");
    let rec_out = family(&mut r, "operator_num_records_out", "numRecordsOut");
    let in_rate = family(
        &mut r,
        "operator_num_records_in_per_second",
        "numRecordsInPerSecond",
    );
    let out_rate = family(
        &mut r,
        "operator_num_records_out_per_second",
        "numRecordsOutPerSecond",
    );
    let late = family(
        &mut r,
        "operator_num_late_records_dropped",
        "numLateRecordsDropped",
    );
    let source_idle = family(
        &mut r,
        "source_idle_time_ms",
        "sourceIdleTime, ms since the source subtask last read a record",
    );
    let busy = family(
        &mut r,
        "subtask_busy_time_ms_per_second",
        "busyTimeMsPerSecond",
    );
    let idle = family(
        &mut r,
        "subtask_idle_time_ms_per_second",
        "idleTimeMsPerSecond",
    );
    let bp = family(
        &mut r,
        "subtask_back_pressured_time_ms_per_second",
        "backPressuredTimeMsPerSecond",
    );
    let mailbox = family(&mut r, "subtask_mailbox_latency_ms", "mailboxLatencyMs");
    let wakes = family(
        &mut r,
        "subtask_wakes_per_second",
        "wakesPerSecond: wake-ups from parked (thread hand-offs)",
    );
    let input_wm = family(
        &mut r,
        "subtask_current_input_watermark",
        "currentInputWatermark (ms since the epoch; absent before the first)",
    );
    let output_wm = family(
        &mut r,
        "subtask_current_output_watermark",
        "currentOutputWatermark (ms since the epoch; absent before the first)",
    );
    let promotions = family(
        &mut r,
        "backup_promotions",
        "promotions of the subtask's backup",
    );
    let queue = family(
        &mut r,
        "backup_queue_entries",
        "entries in the subtask's buffer queue",
    );
    let operator_gauge = family(
        &mut r,
        "operator_gauge",
        "an operator's own reading (label name: e.g. cacheHits, cacheSize of a lookup)",
    );
    for j in jobs {
        let jl = job_labels(j);
        for (uid, subtask, name, value) in j.operator_gauges() {
            if let Ok(x) = value.parse::<f64>() {
                let l = with(
                    with(with(jl.clone(), "operator", &uid), "subtask", subtask),
                    "name",
                    name,
                );
                operator_gauge.get_or_create(&l).set(x);
            }
        }
        let status = j.status();
        up.get_or_create(&jl)
            .set(if status.is_terminal() { 0.0 } else { 1.0 });
        let rs = j.rescale_stats();
        rescales.get_or_create(&jl).set(rs.num_rescales as f64);
        if let Some(last) = &rs.last {
            rescale_pause
                .get_or_create(&jl)
                .set(last.pause.as_secs_f64() * 1e3);
        }
        if let Some(s) = j.checkpoint_stats() {
            restarts.get_or_create(&jl).set(s.num_restarts as f64);
            completed
                .get_or_create(&jl)
                .set(s.number_of_completed_checkpoints as f64);
            failed
                .get_or_create(&jl)
                .set(s.number_of_failed_checkpoints as f64);
            last_duration
                .get_or_create(&jl)
                .set(s.last_checkpoint_duration_ms as f64);
            last_size
                .get_or_create(&jl)
                .set(s.last_checkpoint_size as f64);
        }
        if let Some(m) = j.metrics() {
            for o in &m.operators {
                let l = with(jl.clone(), "operator", &o.uid);
                rec_in.get_or_create(&l).set(o.num_records_in as f64);
                rec_out.get_or_create(&l).set(o.num_records_out as f64);
                in_rate.get_or_create(&l).set(o.num_records_in_per_second);
                out_rate.get_or_create(&l).set(o.num_records_out_per_second);
                late.get_or_create(&l)
                    .set(o.num_late_records_dropped as f64);
                for (subtask, ms) in o.source_idle_time_ms.iter().enumerate() {
                    let l = with(l.clone(), "subtask", subtask);
                    source_idle.get_or_create(&l).set(*ms as f64);
                }
            }
            for s in &m.subtasks {
                let l = with(
                    with(jl.clone(), "vertex", &s.head_uid),
                    "subtask",
                    s.subtask,
                );
                busy.get_or_create(&l).set(s.busy_time_ms_per_second);
                idle.get_or_create(&l).set(s.idle_time_ms_per_second);
                bp.get_or_create(&l)
                    .set(s.back_pressured_time_ms_per_second);
                mailbox.get_or_create(&l).set(s.mailbox_latency_ms);
                wakes.get_or_create(&l).set(s.wakes_per_second);
                if let Some(w) = s.current_input_watermark {
                    input_wm.get_or_create(&l).set(w as f64);
                }
                if let Some(w) = s.current_output_watermark {
                    output_wm.get_or_create(&l).set(w as f64);
                }
            }
        }
        for b in j.backup_metrics() {
            let l = with(with(jl.clone(), "operator", &b.uid), "subtask", b.subtask);
            promotions.get_or_create(&l).set(b.promotions as f64);
            queue.get_or_create(&l).set(b.queue_entries as f64);
        }
    }
    let mut out = String::new();
    encode(&mut out, &r)?;
    Ok(out)
}

pub(crate) async fn metrics(
    state: actix_web::web::Data<super::Shared>,
    _req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let jobs = state.jobs.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let text = render(&jobs).map_err(|_| ApiError::internal("cannot encode the metrics"))?;
    Ok(HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(text))
}
