//! Counters of operators and subtasks, readable while a job runs and summed into its result.
//!
//! Counters are updated once per batch (never per record) with relaxed atomics, so reading
//! them costs the hot path nothing measurable. This module owns the counters, not their
//! export (REST and Prometheus come with the control plane).

use std::time::{Duration, Instant};

use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::{lock, Arc, Mutex};

/// The wall clock in milliseconds since the Unix epoch, as metrics and the REST API report
/// times.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Readings an operator publishes beside the subtask counters (e.g. a lookup's cache hits
/// and its cache strategy), per running subtask; the REST API shows them as vertex metrics
/// `<subtask>.<uid>.<name>` and Prometheus as `weir_operator_gauge`.
#[cfg_attr(not(feature = "rest"), allow(dead_code))]
pub(crate) trait OperatorGauges: Send + Sync {
    /// The names of the readings, in the order [`read`](Self::read) gives them.
    fn names(&self) -> &'static [&'static str];
    /// Each running subtask's readings, by subtask index, in the order of `names`; a value
    /// is a number or a word (a strategy's name).
    fn read(&self) -> Vec<(usize, Vec<String>)>;
}

/// Operators' published readings, by uid.
pub(crate) type GaugesByUid = Vec<(String, std::sync::Arc<dyn OperatorGauges>)>;

/// Fill of a set of channels, in batches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct QueueUsage {
    pub(crate) queued: usize,
    pub(crate) capacity: usize,
    /// The highest watermark sent on these channels, if any.
    pub(crate) watermark: Option<crate::time::EventTime>,
}

/// Counters of one operator in one subtask.
#[derive(Debug, Default)]
pub(crate) struct OperatorCounters {
    pub(crate) records_in: AtomicU64,
    pub(crate) records_out: AtomicU64,
    /// Records refused as malformed (skipped by a source's policy).
    pub(crate) records_rejected: AtomicU64,
    /// A sink's records in output that is committed: covered by a completed checkpoint, or
    /// by the final commit at the end of the input.
    pub(crate) records_committed: AtomicU64,
    /// A window operator's late records dropped (no late-data output attached).
    pub(crate) late_dropped: AtomicU64,
    /// A chain head's: times its subtask was woken from parked (by input, credit, a timer or
    /// a mail) rather than running on by itself; each is a thread hand-off.
    pub(crate) wakes: AtomicU64,
    /// A source's last read of records, in µs on [`poll_clock_us`]'s clock (0: none yet).
    /// Stored once per batch.
    pub(crate) last_read_us: AtomicU64,
    /// A sink's records staged per checkpoint and not committed yet. Kept here, not in the
    /// sink instance, so that a restore counts what its checkpoint commits though the
    /// instance that staged it is gone. Touched once per checkpoint, never per record.
    pub(crate) staged: Mutex<Staged>,
}

/// A sink subtask's records staged per checkpoint, by the instances of one start.
#[derive(Debug, Default)]
pub(crate) struct Staged {
    /// Which start of the subtask stages now: instances of an earlier one (stopping after a
    /// failure) change nothing.
    epoch: u64,
    /// (checkpoint id, records), oldest first.
    entries: Vec<(u64, u64)>,
}

impl OperatorCounters {
    #[inline]
    pub(crate) fn add_in(&self, n: usize) {
        self.records_in.fetch_add(n as u64, Ordering::Relaxed);
    }
    #[inline]
    pub(crate) fn add_out(&self, n: usize) {
        self.records_out.fetch_add(n as u64, Ordering::Relaxed);
    }
    #[inline]
    pub(crate) fn add_rejected(&self, n: u64) {
        self.records_rejected.fetch_add(n, Ordering::Relaxed);
    }

    /// The epoch sink instances stage under now (a promoted backup goes on in it).
    pub(crate) fn sink_epoch(&self) -> u64 {
        lock(&self.staged).epoch
    }

    /// A sink subtask starts again, from checkpoint `restored` or afresh; returns the new
    /// epoch its instance stages under. What was staged up to `restored` is committed (the
    /// sink commits it on restore); anything staged later, or before a fresh start, never
    /// will be.
    pub(crate) fn sink_restarted(&self, restored: Option<u64>) -> u64 {
        let mut staged = lock(&self.staged);
        if let Some(id) = restored {
            let n: u64 = staged
                .entries
                .iter()
                .filter(|e| e.0 <= id)
                .map(|e| e.1)
                .sum();
            self.records_committed.fetch_add(n, Ordering::Relaxed);
        }
        staged.entries.clear();
        staged.epoch += 1;
        staged.epoch
    }

    /// A sink instance of `epoch` staged `n` records for checkpoint `id` (at its barrier).
    pub(crate) fn stage(&self, epoch: u64, id: u64, n: u64) {
        let mut staged = lock(&self.staged);
        if staged.epoch == epoch {
            staged.entries.push((id, n));
        }
    }

    /// Checkpoint `id` completed (or the final commit, `u64::MAX`) at a sink instance of
    /// `epoch`: what was staged up to it is committed, and so are `unstaged` records written
    /// since the last barrier.
    pub(crate) fn commit_up_to(&self, epoch: u64, id: u64, unstaged: u64) {
        let mut staged = lock(&self.staged);
        if staged.epoch != epoch {
            return;
        }
        let mut n = unstaged;
        staged.entries.retain(|&(c, k)| {
            if c <= id {
                n += k;
            }
            c > id
        });
        self.records_committed.fetch_add(n, Ordering::Relaxed);
    }

    /// Late records a window operator dropped.
    pub(crate) fn late_dropped(&self) -> u64 {
        self.late_dropped.load(Ordering::Relaxed)
    }

    /// Records committed (a sink's; 0 for other operators).
    pub(crate) fn committed(&self) -> u64 {
        self.records_committed.load(Ordering::Relaxed)
    }

    pub(crate) fn snapshot(&self) -> (u64, u64, u64) {
        (
            self.records_in.load(Ordering::Relaxed),
            self.records_out.load(Ordering::Relaxed),
            self.records_rejected.load(Ordering::Relaxed),
        )
    }
}

/// Counters of one subtask (one actor).
#[derive(Debug, Default)]
pub(crate) struct SubtaskCounters {
    /// Input batches taken from the data lane (or produced by a source step).
    pub(crate) batches_in: AtomicU64,
    /// System mails put in the subtask's system lane.
    pub(crate) mails_sent: AtomicU64,
    /// System mails handled.
    pub(crate) mails_handled: AtomicU64,
    /// While the subtask is inside a poll of its data lane (its operators run there): when
    /// it entered, in µs on [`poll_clock_us`]'s clock; 0 outside. Among subtasks silent on a
    /// shared thread, the one stuck inside its operators is the one that hung.
    pub(crate) in_poll_since_us: AtomicU64,
    /// The counters of the chain's head operator in this subtask (its `wakes`).
    pub(crate) head: Arc<OperatorCounters>,
}

/// Microseconds since the first call in this process, at least 1 (0 means "not set").
pub(crate) fn poll_clock_us(now: Instant) -> u64 {
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let base = *BASE.get_or_init(Instant::now);
    now.saturating_duration_since(base).as_micros() as u64 + 1
}

/// Where a subtask's time went while it waited, per Flink's task time accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitState {
    /// Processing, or runnable (woken by itself to take more input). Time spent on system
    /// mail is charged to whatever the subtask was doing before it.
    Busy,
    /// Waiting for input (or throttled by its rate limit).
    Idle,
    /// Waiting for output credit.
    BackPressured,
}

/// Cumulative time accounting of one subtask, kept by its actor: two clock reads per poll of
/// the data lane (one batch), none per record.
#[derive(Debug, Clone)]
pub(crate) struct TimeAccount {
    pub(crate) busy: Duration,
    pub(crate) idle: Duration,
    pub(crate) back_pressured: Duration,
    state: WaitState,
    since: Instant,
}

impl TimeAccount {
    pub(crate) fn new(now: Instant) -> Self {
        TimeAccount {
            busy: Duration::ZERO,
            idle: Duration::ZERO,
            back_pressured: Duration::ZERO,
            state: WaitState::Idle,
            since: now,
        }
    }

    /// What the subtask is waiting for now.
    pub(crate) fn state(&self) -> WaitState {
        self.state
    }

    /// Charges the time since the last mark to the current state, and marks `now`.
    pub(crate) fn charge(&mut self, now: Instant) {
        let d = now.saturating_duration_since(self.since);
        match self.state {
            WaitState::Busy => self.busy += d,
            WaitState::Idle => self.idle += d,
            WaitState::BackPressured => self.back_pressured += d,
        }
        self.since = now;
    }

    /// Charges up to `now`, then accounts what follows as `state`.
    pub(crate) fn switch(&mut self, now: Instant, state: WaitState) {
        self.charge(now);
        self.state = state;
    }
}

/// What a subtask reports when sampled through its system lane.
#[derive(Debug, Clone, Default)]
pub(crate) struct SubtaskSample {
    pub(crate) busy: Duration,
    pub(crate) idle: Duration,
    pub(crate) back_pressured: Duration,
    pub(crate) input: QueueUsage,
    pub(crate) input_records: usize,
    pub(crate) output: QueueUsage,
    /// How long the sample mail waited in the system lane.
    pub(crate) mailbox_latency: Duration,
    /// Each input's watermark (none for a source).
    pub(crate) input_watermarks: Vec<crate::time::InputWatermark>,
    /// Waiting for output credit when sampled.
    pub(crate) back_pressured_now: bool,
    /// When the sample was taken.
    pub(crate) at: Option<Instant>,
    /// Wake-ups so far (see `OperatorCounters::wakes`).
    pub(crate) wakes: u64,
}

impl SubtaskCounters {
    pub(crate) fn batches(&self) -> u64 {
        self.batches_in.load(Ordering::Relaxed)
    }

    /// The subtask enters a poll of its data lane at `now`.
    pub(crate) fn enter_poll(&self, now: Instant) {
        self.in_poll_since_us
            .store(poll_clock_us(now), Ordering::Relaxed);
    }

    /// The subtask left its poll.
    pub(crate) fn leave_poll(&self) {
        self.in_poll_since_us.store(0, Ordering::Relaxed);
    }

    /// Since when the subtask has been inside a poll of its data lane (µs on
    /// [`poll_clock_us`]'s clock), if it is now.
    pub(crate) fn in_poll_since_us(&self) -> Option<u64> {
        Some(self.in_poll_since_us.load(Ordering::Relaxed)).filter(|&t| t > 0)
    }
}

/// Flink's backpressure level of a subtask or operator, from the share of time it waits for
/// output credit: OK up to 10 %, LOW up to 50 %, HIGH above.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum BackpressureLevel {
    /// At most 100 ms per second back-pressured.
    Ok,
    /// More than 100 and at most 500 ms per second.
    Low,
    /// More than 500 ms per second.
    High,
}

impl BackpressureLevel {
    /// The level of `back_pressured_ms_per_second`.
    ///
    /// ```
    /// use weir::BackpressureLevel;
    /// assert_eq!(BackpressureLevel::from_ms_per_second(50.0), BackpressureLevel::Ok);
    /// assert_eq!(BackpressureLevel::from_ms_per_second(300.0), BackpressureLevel::Low);
    /// assert_eq!(BackpressureLevel::from_ms_per_second(900.0), BackpressureLevel::High);
    /// ```
    pub fn from_ms_per_second(ms: f64) -> Self {
        if ms > 500.0 {
            BackpressureLevel::High
        } else if ms > 100.0 {
            BackpressureLevel::Low
        } else {
            BackpressureLevel::Ok
        }
    }
}

/// Metrics of one subtask over the last metrics interval, with Flink's names and meaning.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SubtaskMetrics {
    /// Uid of the first operator of the subtask's chain.
    pub head_uid: String,
    /// Subtask index.
    pub subtask: usize,
    /// `busyTimeMsPerSecond`: processing (or runnable).
    pub busy_time_ms_per_second: f64,
    /// `idleTimeMsPerSecond`: waiting for input.
    pub idle_time_ms_per_second: f64,
    /// `backPressuredTimeMsPerSecond`: waiting for output credit.
    pub back_pressured_time_ms_per_second: f64,
    /// `isBackPressured`: waiting for output credit when sampled.
    pub is_back_pressured: bool,
    /// Backpressure level from `back_pressured_time_ms_per_second`.
    pub backpressure_level: BackpressureLevel,
    /// `inputQueueLength`: batches waiting in the data lane.
    pub input_queue_length: usize,
    /// `inPoolUsage`-like: input queue fill, 0..=1.
    pub input_queue_usage: f64,
    /// Records waiting in the data lane.
    pub input_queue_records: usize,
    /// `outputQueueLength`: batches waiting in the output channels (and for credit).
    pub output_queue_length: usize,
    /// `outPoolUsage`-like: output queue fill, 0..=1.
    pub output_queue_usage: f64,
    /// `mailboxLatencyMs`: how long the last sampling mail waited in the system lane.
    pub mailbox_latency_ms: f64,
    /// `mailboxQueueSize`: system mails sent and not yet handled.
    pub mailbox_queue_size: u64,
    /// `wakesPerSecond` (Weir's): how often the subtask was woken from parked (by input,
    /// output credit, a timer or a mail) rather than running on by itself. Each wake is a
    /// thread hand-off; a busy subtask that wakes once per batch pays the scheduler per batch.
    pub wakes_per_second: f64,
    /// `currentInputWatermark`: the lowest of the inputs' watermarks (ms since the epoch;
    /// `None` before the first, and for a source).
    pub current_input_watermark: Option<i64>,
    /// `currentInput{N}Watermark`: each input's (N from 1, as Flink numbers them).
    pub input_watermarks: Vec<Option<i64>>,
    /// `currentOutputWatermark`: the last watermark the subtask sent on.
    pub current_output_watermark: Option<i64>,
    /// Every open channel of every input is idle.
    pub inputs_idle: bool,
    /// The input and channel (upstream subtask) whose watermark holds the input watermark
    /// back (`watermarkHeldByInput`, `watermarkHeldByChannel`, from 1 and 0 as above):
    /// the active channel with the lowest watermark, when there are several.
    pub watermark_held_by: Option<(usize, usize)>,
}

impl SubtaskMetrics {
    /// The names [`get`](Self::get) knows (Flink's task metric names).
    pub const NAMES: &'static [&'static str] = &[
        "busyTimeMsPerSecond",
        "idleTimeMsPerSecond",
        "backPressuredTimeMsPerSecond",
        "isBackPressured",
        "inputQueueLength",
        "inPoolUsage",
        "outputQueueLength",
        "outPoolUsage",
        "mailboxLatencyMs",
        "mailboxQueueSize",
        "wakesPerSecond",
        "currentInputWatermark",
        "currentInput1Watermark",
        "currentInput2Watermark",
        "currentOutputWatermark",
        "watermarkLag",
        "watermarkHeldByInput",
        "watermarkHeldByChannel",
    ];

    /// A metric by its Flink name (`busyTimeMsPerSecond`, `inPoolUsage`, ...).
    pub fn get(&self, name: &str) -> Option<f64> {
        Some(match name {
            "busyTimeMsPerSecond" => self.busy_time_ms_per_second,
            "idleTimeMsPerSecond" => self.idle_time_ms_per_second,
            "backPressuredTimeMsPerSecond" => self.back_pressured_time_ms_per_second,
            "isBackPressured" => f64::from(u8::from(self.is_back_pressured)),
            "inputQueueLength" => self.input_queue_length as f64,
            "inPoolUsage" => self.input_queue_usage,
            "outputQueueLength" => self.output_queue_length as f64,
            "outPoolUsage" => self.output_queue_usage,
            "mailboxLatencyMs" => self.mailbox_latency_ms,
            "mailboxQueueSize" => self.mailbox_queue_size as f64,
            "wakesPerSecond" => self.wakes_per_second,
            // Flink says Long.MIN_VALUE before the first watermark.
            "currentInputWatermark" => self.current_input_watermark.unwrap_or(i64::MIN) as f64,
            "currentOutputWatermark" => self.current_output_watermark.unwrap_or(i64::MIN) as f64,
            "currentInput1Watermark" | "currentInput2Watermark" => {
                let n = if name == "currentInput1Watermark" {
                    0
                } else {
                    1
                };
                (*self.input_watermarks.get(n)?).unwrap_or(i64::MIN) as f64
            }
            // How far event time is behind the wall clock.
            "watermarkLag" => {
                (now_ms() as i64).saturating_sub(self.current_input_watermark?) as f64
            }
            "watermarkHeldByInput" => (self.watermark_held_by?.0 + 1) as f64,
            "watermarkHeldByChannel" => self.watermark_held_by?.1 as f64,
            _ => return None,
        })
    }
}

/// Metrics of one operator over the last metrics interval. Chained operators share their
/// subtask's time metrics; across subtasks the largest value is reported (as Flink's UI does).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct OperatorMetrics {
    /// The operator's uid.
    pub uid: String,
    /// Its name.
    pub name: String,
    /// `numRecordsIn`.
    pub num_records_in: u64,
    /// `numRecordsOut`.
    pub num_records_out: u64,
    /// `numRecordsInPerSecond`.
    pub num_records_in_per_second: f64,
    /// `numRecordsOutPerSecond`.
    pub num_records_out_per_second: f64,
    /// `busyTimeMsPerSecond` (largest over subtasks).
    pub busy_time_ms_per_second: f64,
    /// `idleTimeMsPerSecond` (largest over subtasks).
    pub idle_time_ms_per_second: f64,
    /// `backPressuredTimeMsPerSecond` (largest over subtasks).
    pub back_pressured_time_ms_per_second: f64,
    /// Backpressure level (of the most back-pressured subtask).
    pub backpressure_level: BackpressureLevel,
    /// `numLateRecordsDropped`: records a window operator dropped as late (no late-data
    /// output attached), over its subtasks.
    pub num_late_records_dropped: u64,
    /// `sourceIdleTime`, per subtask of a source (empty for other operators): ms since the
    /// subtask last read a record (since the job started, if it never did).
    pub source_idle_time_ms: Vec<u64>,
}

impl OperatorMetrics {
    /// A metric by its Flink name (`numRecordsIn`, `busyTimeMsPerSecond`, ...).
    pub fn get(&self, name: &str) -> Option<f64> {
        Some(match name {
            "numRecordsIn" => self.num_records_in as f64,
            "numRecordsOut" => self.num_records_out as f64,
            "numRecordsInPerSecond" => self.num_records_in_per_second,
            "numRecordsOutPerSecond" => self.num_records_out_per_second,
            "busyTimeMsPerSecond" => self.busy_time_ms_per_second,
            "idleTimeMsPerSecond" => self.idle_time_ms_per_second,
            "backPressuredTimeMsPerSecond" => self.back_pressured_time_ms_per_second,
            "numLateRecordsDropped" => self.num_late_records_dropped as f64,
            // The longest over the subtasks (a source that is idle somewhere).
            "sourceIdleTime" => *self.source_idle_time_ms.iter().max()? as f64,
            _ => return None,
        })
    }
}

/// A job's metrics over its last metrics interval (see `EnvConfig::metrics_interval`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct JobMetrics {
    /// Time since the job started, when these were computed.
    pub at: Duration,
    /// The interval they cover.
    pub interval: Duration,
    /// Per subtask (actor).
    pub subtasks: Vec<SubtaskMetrics>,
    /// Per operator, in graph order.
    pub operators: Vec<OperatorMetrics>,
    /// The rate limit currently set on each source subtask (records/s), if rate control is on.
    pub source_rate_limit: Option<f64>,
}

impl JobMetrics {
    /// The metrics of operator `uid`.
    pub fn operator(&self, uid: &str) -> Option<&OperatorMetrics> {
        self.operators.iter().find(|o| o.uid == uid)
    }
}
