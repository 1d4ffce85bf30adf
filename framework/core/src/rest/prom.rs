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
    let job_families = JobFamilies::new(&mut r);
    let operator_families = OperatorFamilies::new(&mut r);
    let subtask_families = SubtaskFamilies::new(&mut r);
    for j in jobs {
        let jl = job_labels(j);
        subtask_families.record_gauges(j, &jl);
        job_families.record(j, &jl);
        if let Some(m) = j.metrics() {
            operator_families.record(&m, &jl);
            subtask_families.record(&m, &jl);
        }
        subtask_families.record_backups(j, &jl);
    }
    let mut out = String::new();
    encode(&mut out, &r)?;
    Ok(out)
}

/// The job-level gauges.
struct JobFamilies {
    up: Gauges,
    restarts: Gauges,
    rescales: Gauges,
    rescale_pause: Gauges,
    completed: Gauges,
    failed: Gauges,
    last_duration: Gauges,
    last_size: Gauges,
}

impl JobFamilies {
    fn new(r: &mut Registry) -> Self {
        JobFamilies {
            up: family(
                r,
                "job_running",
                "1 while the job runs (RUNNING or RESTARTING), else 0",
            ),
            restarts: family(r, "job_num_restarts", "numRestarts"),
            rescales: family(r, "job_num_rescales", "numRescales"),
            rescale_pause: family(
                r,
                "job_last_rescale_pause_ms",
                "lastRescalePause: how long the input paused in the last rescale, ms",
            ),
            completed: family(
                r,
                "job_completed_checkpoints",
                "numberOfCompletedCheckpoints",
            ),
            failed: family(r, "job_failed_checkpoints", "numberOfFailedCheckpoints"),
            last_duration: family(
                r,
                "job_last_checkpoint_duration_ms",
                "lastCheckpointDuration, ms",
            ),
            last_size: family(
                r,
                "job_last_checkpoint_size_bytes",
                "lastCheckpointSize, bytes",
            ),
        }
    }

    fn record(&self, j: &JobMonitor, jl: &Labels) {
        let status = j.status();
        self.up
            .get_or_create(jl)
            .set(if status.is_terminal() { 0.0 } else { 1.0 });
        let rs = j.rescale_stats();
        self.rescales.get_or_create(jl).set(rs.num_rescales as f64);
        if let Some(last) = &rs.last {
            self.rescale_pause
                .get_or_create(jl)
                .set(last.pause.as_secs_f64() * 1e3);
        }
        if let Some(s) = j.checkpoint_stats() {
            self.restarts.get_or_create(jl).set(s.num_restarts as f64);
            self.completed
                .get_or_create(jl)
                .set(s.number_of_completed_checkpoints as f64);
            self.failed
                .get_or_create(jl)
                .set(s.number_of_failed_checkpoints as f64);
            self.last_duration
                .get_or_create(jl)
                .set(s.last_checkpoint_duration_ms as f64);
            self.last_size
                .get_or_create(jl)
                .set(s.last_checkpoint_size as f64);
        }
    }
}

/// The per-operator gauges.
struct OperatorFamilies {
    rec_in: Gauges,
    rec_out: Gauges,
    in_rate: Gauges,
    out_rate: Gauges,
    late: Gauges,
    source_idle: Gauges,
}

impl OperatorFamilies {
    fn new(r: &mut Registry) -> Self {
        OperatorFamilies {
            rec_in: family(r, "operator_num_records_in", "numRecordsIn"),
            rec_out: family(r, "operator_num_records_out", "numRecordsOut"),
            in_rate: family(
                r,
                "operator_num_records_in_per_second",
                "numRecordsInPerSecond",
            ),
            out_rate: family(
                r,
                "operator_num_records_out_per_second",
                "numRecordsOutPerSecond",
            ),
            late: family(
                r,
                "operator_num_late_records_dropped",
                "numLateRecordsDropped",
            ),
            source_idle: family(
                r,
                "source_idle_time_ms",
                "sourceIdleTime, ms since the source subtask last read a record",
            ),
        }
    }

    fn record(&self, m: &crate::JobMetrics, jl: &Labels) {
        for o in &m.operators {
            let l = with(jl.clone(), "operator", &o.uid);
            self.rec_in.get_or_create(&l).set(o.num_records_in as f64);
            self.rec_out.get_or_create(&l).set(o.num_records_out as f64);
            self.in_rate
                .get_or_create(&l)
                .set(o.num_records_in_per_second);
            self.out_rate
                .get_or_create(&l)
                .set(o.num_records_out_per_second);
            self.late
                .get_or_create(&l)
                .set(o.num_late_records_dropped as f64);
            for (subtask, ms) in o.source_idle_time_ms.iter().enumerate() {
                let l = with(l.clone(), "subtask", subtask);
                self.source_idle.get_or_create(&l).set(*ms as f64);
            }
        }
    }
}

/// The per-subtask gauges: the subtasks' own, their backups', their operators' readings.
struct SubtaskFamilies {
    busy: Gauges,
    idle: Gauges,
    bp: Gauges,
    mailbox: Gauges,
    wakes: Gauges,
    input_wm: Gauges,
    output_wm: Gauges,
    promotions: Gauges,
    queue: Gauges,
    operator_gauge: Gauges,
}

impl SubtaskFamilies {
    fn new(r: &mut Registry) -> Self {
        SubtaskFamilies {
            busy: family(r, "subtask_busy_time_ms_per_second", "busyTimeMsPerSecond"),
            idle: family(r, "subtask_idle_time_ms_per_second", "idleTimeMsPerSecond"),
            bp: family(
                r,
                "subtask_back_pressured_time_ms_per_second",
                "backPressuredTimeMsPerSecond",
            ),
            mailbox: family(r, "subtask_mailbox_latency_ms", "mailboxLatencyMs"),
            wakes: family(
                r,
                "subtask_wakes_per_second",
                "wakesPerSecond: wake-ups from parked (thread hand-offs)",
            ),
            input_wm: family(
                r,
                "subtask_current_input_watermark",
                "currentInputWatermark (ms since the epoch; absent before the first)",
            ),
            output_wm: family(
                r,
                "subtask_current_output_watermark",
                "currentOutputWatermark (ms since the epoch; absent before the first)",
            ),
            promotions: family(r, "backup_promotions", "promotions of the subtask's backup"),
            queue: family(
                r,
                "backup_queue_entries",
                "entries in the subtask's buffer queue",
            ),
            operator_gauge: family(
                r,
                "operator_gauge",
                "an operator's own reading (label name: e.g. cacheHits, cacheSize of a lookup)",
            ),
        }
    }

    fn record(&self, m: &crate::JobMetrics, jl: &Labels) {
        for s in &m.subtasks {
            let l = with(
                with(jl.clone(), "vertex", &s.head_uid),
                "subtask",
                s.subtask,
            );
            self.busy.get_or_create(&l).set(s.busy_time_ms_per_second);
            self.idle.get_or_create(&l).set(s.idle_time_ms_per_second);
            self.bp
                .get_or_create(&l)
                .set(s.back_pressured_time_ms_per_second);
            self.mailbox.get_or_create(&l).set(s.mailbox_latency_ms);
            self.wakes.get_or_create(&l).set(s.wakes_per_second);
            if let Some(w) = s.current_input_watermark {
                self.input_wm.get_or_create(&l).set(w as f64);
            }
            if let Some(w) = s.current_output_watermark {
                self.output_wm.get_or_create(&l).set(w as f64);
            }
        }
    }

    fn record_backups(&self, j: &JobMonitor, jl: &Labels) {
        for b in j.backup_metrics() {
            let l = with(with(jl.clone(), "operator", &b.uid), "subtask", b.subtask);
            self.promotions.get_or_create(&l).set(b.promotions as f64);
            self.queue.get_or_create(&l).set(b.queue_entries as f64);
        }
    }

    /// The operators' own readings that are numbers.
    fn record_gauges(&self, j: &JobMonitor, jl: &Labels) {
        for (uid, subtask, name, value) in j.operator_gauges() {
            if let Ok(x) = value.parse::<f64>() {
                let l = with(
                    with(with(jl.clone(), "operator", &uid), "subtask", subtask),
                    "name",
                    name,
                );
                self.operator_gauge.get_or_create(&l).set(x);
            }
        }
    }
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
