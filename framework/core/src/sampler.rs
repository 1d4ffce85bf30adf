//! The job's metrics sampler and source rate controller.
//!
//! Every tick the job puts a `Sample` mail in each subtask's system lane; the subtask writes
//! its cumulative time accounting and queue fill into a slot. The sampler turns two
//! consecutive samples into per-second figures with Flink's names ([`JobMetrics`]). The rate
//! controller feeds Spark's PID estimator from those figures and sets the sources' token
//! buckets. This module owns the arithmetic; sending mail is the controller's (`controller`).

use std::time::{Duration, Instant};

use crate::metrics::{
    BackpressureLevel, JobMetrics, OperatorCounters, OperatorMetrics, SubtaskMetrics, SubtaskSample,
};
use crate::rate::{PidRateEstimator, RateControlConfig};
use crate::sync::atomic::Ordering;
use crate::sync::{lock, Arc, Mutex};

/// What the sampler knows of one subtask.
pub(crate) struct SubtaskProbe {
    pub(crate) head: usize,
    pub(crate) head_uid: String,
    pub(crate) subtask: usize,
    pub(crate) is_source: bool,
    pub(crate) slot: Arc<Mutex<SubtaskSample>>,
    pub(crate) counters: Arc<crate::metrics::SubtaskCounters>,
}

/// A subtask's input watermark: the lowest over its inputs that have one and are not idle.
fn input_watermark(inputs: &[crate::time::InputWatermark]) -> Option<i64> {
    inputs.iter().filter(|w| !w.idle).filter_map(|w| w.at).min()
}

/// The (input, channel) holding a subtask's watermark back, when it has more than one open
/// channel: the active channel with the lowest watermark of the input with the lowest.
fn held_by(inputs: &[crate::time::InputWatermark]) -> Option<(usize, usize)> {
    if inputs.iter().map(|w| w.open).sum::<usize>() < 2 {
        return None;
    }
    let (i, w) = inputs
        .iter()
        .enumerate()
        .filter(|(_, w)| !w.idle && w.held_by.is_some())
        .min_by_key(|(_, w)| w.at.unwrap_or(i64::MIN))?;
    Some((i, w.held_by?))
}

/// What the sampler knows of one operator.
pub(crate) struct OperatorProbe {
    pub(crate) uid: String,
    pub(crate) name: String,
    pub(crate) head: usize,
    pub(crate) is_source: bool,
    pub(crate) counters: Vec<Arc<OperatorCounters>>,
}

pub(crate) struct Sampler {
    started: Instant,
    subtasks: Vec<SubtaskProbe>,
    operators: Vec<OperatorProbe>,
    prev_samples: Vec<SubtaskSample>,
    /// Operator record counts when the samples now in the slots were requested, and when the
    /// samples before them were: rates cover the same window as the samples.
    last_records: Vec<(u64, u64)>,
    last_at: Instant,
    prev_records: Vec<(u64, u64)>,
    prev_at: Instant,
    marks: u64,
}

fn per_second(delta: Duration, over: Duration) -> f64 {
    if over.is_zero() {
        return 0.0;
    }
    (delta.as_secs_f64() * 1000.0 / over.as_secs_f64()).clamp(0.0, 1000.0)
}

fn usage(u: crate::metrics::QueueUsage) -> f64 {
    if u.capacity == 0 {
        0.0
    } else {
        (u.queued as f64 / u.capacity as f64).min(1.0)
    }
}

impl Sampler {
    pub(crate) fn new(subtasks: Vec<SubtaskProbe>, operators: Vec<OperatorProbe>) -> Self {
        let now = Instant::now();
        Sampler {
            started: now,
            prev_samples: vec![SubtaskSample::default(); subtasks.len()],
            prev_records: vec![(0, 0); operators.len()],
            last_records: vec![(0, 0); operators.len()],
            subtasks,
            operators,
            prev_at: now,
            last_at: now,
            marks: 0,
        }
    }

    /// Records the operators' counts now: call when the sample mails are sent.
    pub(crate) fn mark(&mut self) {
        let now = Instant::now();
        self.prev_records = std::mem::take(&mut self.last_records);
        self.prev_at = self.last_at;
        self.last_records = self
            .operators
            .iter()
            .map(|op| {
                op.counters.iter().fold((0, 0), |(i, o), c| {
                    let (a, b, _) = c.snapshot();
                    (i + a, o + b)
                })
            })
            .collect();
        self.last_at = now;
        self.marks += 1;
    }

    /// Per-second metrics over the window between the last two [`mark`](Self::mark)s, from
    /// the samples the subtasks wrote when those marks' mails reached them.
    /// `None` until two windows have been marked (there is no complete window before).
    pub(crate) fn compute(&mut self, source_rate_limit: Option<f64>) -> Option<JobMetrics> {
        if self.marks < 2 {
            return None;
        }
        let now = Instant::now();
        let interval = self.last_at.duration_since(self.prev_at);
        let subtasks = self.subtask_metrics();
        let operators = self.operator_metrics(now, interval, &subtasks);
        Some(JobMetrics {
            at: now.duration_since(self.started),
            interval,
            subtasks,
            operators,
            source_rate_limit,
        })
    }

    /// Each subtask's metrics over its own span between its last two samples; the last
    /// sample becomes the one the next window starts from.
    fn subtask_metrics(&mut self) -> Vec<SubtaskMetrics> {
        let mut subtasks = Vec::with_capacity(self.subtasks.len());
        for (i, probe) in self.subtasks.iter().enumerate() {
            let cur = lock(&probe.slot).clone();
            let prev = &self.prev_samples[i];
            let span = match (cur.at, prev.at) {
                (Some(c), Some(p)) => c.saturating_duration_since(p),
                (Some(c), None) => c.saturating_duration_since(self.started),
                _ => Duration::ZERO,
            };
            let bp = per_second(cur.back_pressured.saturating_sub(prev.back_pressured), span);
            let sent = probe.counters.mails_sent.load(Ordering::Relaxed);
            let handled = probe.counters.mails_handled.load(Ordering::Relaxed);
            subtasks.push(SubtaskMetrics {
                head_uid: probe.head_uid.clone(),
                subtask: probe.subtask,
                busy_time_ms_per_second: per_second(cur.busy.saturating_sub(prev.busy), span),
                idle_time_ms_per_second: per_second(cur.idle.saturating_sub(prev.idle), span),
                back_pressured_time_ms_per_second: bp,
                is_back_pressured: cur.back_pressured_now,
                backpressure_level: BackpressureLevel::from_ms_per_second(bp),
                input_queue_length: cur.input.queued,
                input_queue_usage: usage(cur.input),
                input_queue_records: cur.input_records,
                output_queue_length: cur.output.queued,
                output_queue_usage: usage(cur.output),
                mailbox_latency_ms: cur.mailbox_latency.as_secs_f64() * 1000.0,
                mailbox_queue_size: sent.saturating_sub(handled),
                wakes_per_second: if span.is_zero() {
                    0.0
                } else {
                    cur.wakes.saturating_sub(prev.wakes) as f64 / span.as_secs_f64()
                },
                current_input_watermark: input_watermark(&cur.input_watermarks),
                input_watermarks: cur.input_watermarks.iter().map(|w| w.at).collect(),
                current_output_watermark: cur.output.watermark,
                inputs_idle: !cur.input_watermarks.is_empty()
                    && cur.input_watermarks.iter().all(|w| w.idle),
                watermark_held_by: held_by(&cur.input_watermarks),
            });
            self.prev_samples[i] = cur;
        }
        subtasks
    }

    /// Each operator's metrics over `interval`, its times the highest of its chain's
    /// `subtasks`.
    fn operator_metrics(
        &self,
        now: Instant,
        interval: Duration,
        subtasks: &[SubtaskMetrics],
    ) -> Vec<OperatorMetrics> {
        let mut operators = Vec::with_capacity(self.operators.len());
        let (now_us, started_us) = (
            crate::metrics::poll_clock_us(now),
            crate::metrics::poll_clock_us(self.started),
        );
        for (k, op) in self.operators.iter().enumerate() {
            let (rin, rout) = self.last_records[k];
            let (pin, pout) = self.prev_records[k];
            let secs = interval.as_secs_f64().max(1e-9);
            let mine = subtasks
                .iter()
                .zip(&self.subtasks)
                .filter(|(_, p)| p.head == op.head)
                .map(|(m, _)| m);
            let (mut busy, mut idle, mut bp) = (0.0f64, 0.0f64, 0.0f64);
            for m in mine {
                busy = busy.max(m.busy_time_ms_per_second);
                idle = idle.max(m.idle_time_ms_per_second);
                bp = bp.max(m.back_pressured_time_ms_per_second);
            }
            let source_idle_time_ms = if op.is_source {
                op.counters
                    .iter()
                    .map(|c| {
                        let last = c.last_read_us.load(Ordering::Relaxed);
                        let since = if last == 0 { started_us } else { last };
                        now_us.saturating_sub(since) / 1_000
                    })
                    .collect()
            } else {
                Vec::new()
            };
            operators.push(OperatorMetrics {
                num_late_records_dropped: op.counters.iter().map(|c| c.late_dropped()).sum(),
                source_idle_time_ms,
                uid: op.uid.clone(),
                name: op.name.clone(),
                num_records_in: rin,
                num_records_out: rout,
                num_records_in_per_second: rin.saturating_sub(pin) as f64 / secs,
                num_records_out_per_second: rout.saturating_sub(pout) as f64 / secs,
                busy_time_ms_per_second: busy,
                idle_time_ms_per_second: idle,
                back_pressured_time_ms_per_second: bp,
                backpressure_level: BackpressureLevel::from_ms_per_second(bp),
            });
        }
        operators
    }

    /// What the sampler knows of each subtask.
    pub(crate) fn probes(&self) -> &[SubtaskProbe] {
        &self.subtasks
    }

    /// Number of source subtasks (the rate limit is split evenly among them).
    pub(crate) fn source_subtasks(&self) -> usize {
        self.subtasks.iter().filter(|p| p.is_source).count()
    }

    /// Indices of the source subtasks.
    pub(crate) fn source_actors(&self) -> impl Iterator<Item = usize> + '_ {
        self.subtasks
            .iter()
            .enumerate()
            .filter(|(_, p)| p.is_source)
            .map(|(i, _)| i)
    }

    fn is_source_op(&self, uid: &str) -> bool {
        self.operators.iter().any(|o| o.uid == uid && o.is_source)
    }
}

/// Spark's rate controller, fed from Weir's metrics.
///
/// Per update: `elements` = records the sources emitted in the interval; `processing delay` =
/// the busy time, in the interval, of the busiest non-source subtask (the bottleneck: the time
/// the pipeline needed for those records); `scheduling delay` = the records waiting in
/// channels divided by the processing rate. The new rate is split evenly over the source
/// subtasks.
pub(crate) struct RateController {
    pub(crate) config: RateControlConfig,
    estimator: PidRateEstimator,
    last_update: Instant,
    elapsed_ms: u64,
    pub(crate) current: Option<f64>,
}

impl RateController {
    pub(crate) fn new(config: RateControlConfig) -> Option<Self> {
        if !config.enabled {
            return None;
        }
        let estimator = config.estimator().ok()?;
        Some(RateController {
            current: config.initial_rate,
            config,
            estimator,
            last_update: Instant::now(),
            elapsed_ms: 0,
        })
    }

    /// Whether an update is due at the tick scheduled for `at`.
    pub(crate) fn due(&self, at: Instant) -> bool {
        at.saturating_duration_since(self.last_update) >= self.config.update_interval
    }

    /// Keeps `previous` (clamped to this controller's bounds) when it has no rate of its own:
    /// a live change of gains must not lift the limit until the next estimate.
    pub(crate) fn inherit(&mut self, previous: Option<f64>) {
        if self.current.is_none() {
            self.current = previous.map(|r| {
                let r = r.max(self.config.min_rate);
                self.config.max_rate.map_or(r, |max| r.min(max))
            });
        }
    }

    /// Feeds one interval's metrics at the tick scheduled for `at`; returns the new total
    /// source rate, if it changed.
    pub(crate) fn update(&mut self, m: &JobMetrics, sampler: &Sampler, at: Instant) -> Option<f64> {
        // The tick's scheduled time, not the time after this tick's work: otherwise the next
        // tick, exactly one interval later, finds the interval not yet elapsed.
        self.last_update = at;
        let secs = m.interval.as_secs_f64();
        self.elapsed_ms += m.interval.as_millis() as u64;
        let elements: f64 = m
            .operators
            .iter()
            .filter(|o| sampler.is_source_op(&o.uid))
            .map(|o| o.num_records_out_per_second * secs)
            .sum();
        let busiest = m
            .subtasks
            .iter()
            .zip(&sampler.subtasks)
            .filter(|(_, p)| !p.is_source)
            .map(|(s, _)| s.busy_time_ms_per_second)
            .fold(0.0f64, f64::max);
        let processing_ms = busiest * secs;
        if elements < 1.0 || processing_ms < 1.0 {
            return None;
        }
        let processing_rate = elements / processing_ms * 1000.0;
        let queued: usize = m.subtasks.iter().map(|s| s.input_queue_records).sum();
        let scheduling_ms = queued as f64 / processing_rate * 1000.0;
        let rate = self.estimator.compute(
            self.elapsed_ms,
            elements as u64,
            processing_ms as u64,
            scheduling_ms as u64,
        )?;
        self.current = Some(rate);
        Some(rate)
    }
}
