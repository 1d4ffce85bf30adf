//! Backpressure and rate control, end to end and in real time: a fast source behind a sink of
//! fixed capacity (records/s), read through `JobMonitor::metrics()`.
//!
//! The controller's arithmetic is tested in simulated time by the unit tests of
//! `weir::rate`; these tests run real jobs on real threads on a shared, noisy machine, so they
//! use wide margins (±35 % on rates, Flink's HIGH level, busy ≥ 700 ms/s), take medians over
//! several metrics intervals, and poll until a condition holds or a generous deadline passes
//! instead of asserting at a fixed instant. They run one at a time (`serial`): each job keeps
//! two arbiter threads busy, and the memory check reads the whole process's RSS.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use weir::rate::RateControlConfig;
use weir::{BackpressureLevel, Env, EnvConfig, JobError, JobHandle, JobMetrics};

/// Metrics interval of every job here (default 1 s), to make the tests faster.
const METRICS_INTERVAL: Duration = Duration::from_millis(200);
/// Update interval of the rate controller (default 1 s; must be at least 1 ms).
const UPDATE_INTERVAL: Duration = Duration::from_millis(200);
/// Records per second the paced sink takes.
const CAPACITY: f64 = 20_000.0;
/// Relative margin on rates measured in real time.
const MARGIN: f64 = 0.35;
/// Longest a condition may take to hold before the test fails.
const DEADLINE: Duration = Duration::from_secs(12);

static SERIAL: Mutex<()> = Mutex::new(());

/// Runs the tests of this file one at a time (a failed test poisons the lock; the next one
/// still runs).
fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

use weir_testing::PacedSink;

// ANCHOR: config
/// Small batches and channels, two arbiters (source and sink on different threads), and a
/// short metrics interval.
fn config() -> EnvConfig {
    let mut c = EnvConfig::default();
    c.batch_size = 64;
    c.channel_capacity = 4;
    c.max_channel_capacity = 8;
    c.arbiters = 2;
    c.metrics_interval = METRICS_INTERVAL;
    c
}

/// Rate control on, Spark's gains, the given initial and maximum rates.
fn rate_control(initial_rate: Option<f64>, max_rate: Option<f64>) -> RateControlConfig {
    let mut rc = RateControlConfig::default();
    rc.enabled = true;
    rc.initial_rate = initial_rate;
    rc.max_rate = max_rate;
    rc.update_interval = UPDATE_INTERVAL;
    rc
}
// ANCHOR_END: config

/// A running job, cancelled when dropped (so a failed assertion does not leave an endless job
/// eating the CPU of the tests that follow).
struct Job {
    handle: Option<JobHandle>,
    /// `at` of the last metrics returned by `next_metrics`.
    last_at: Option<Duration>,
    /// Every metrics sample read, for failure messages.
    seen: Vec<JobMetrics>,
}

impl Job {
    fn handle(&self) -> &JobHandle {
        self.handle.as_ref().expect("running")
    }

    /// The next metrics computed after the last one returned; `None` at `deadline`.
    fn next_metrics(&mut self, deadline: Instant) -> Option<JobMetrics> {
        loop {
            if let Some(m) = self.handle().metrics() {
                if Some(m.at) != self.last_at {
                    self.last_at = Some(m.at);
                    self.seen.push(m.clone());
                    return Some(m);
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Reads fresh metrics until `check` (given every sample read since this call) returns
    /// `Some`, or fails after `timeout`, naming `what` and showing the last samples.
    fn poll_until<T>(
        &mut self,
        timeout: Duration,
        what: &str,
        mut check: impl FnMut(&[JobMetrics]) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        let mut window = Vec::new();
        while let Some(m) = self.next_metrics(deadline) {
            window.push(m);
            if let Some(t) = check(&window) {
                return t;
            }
        }
        panic!(
            "{what}: not within {timeout:?}; last samples:\n{}",
            self.describe_last(12)
        );
    }

    /// One line per sample, for failure messages.
    fn describe_last(&self, n: usize) -> String {
        let from = self.seen.len().saturating_sub(n);
        self.seen[from..]
            .iter()
            .map(describe)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Cancels the job and checks that it ends as cancelled.
    fn cancel_and_wait(mut self) {
        let handle = self.handle.take().expect("running");
        handle.cancel();
        match handle.wait() {
            Err(JobError::Cancelled { .. }) => {}
            other => panic!("expected the job to end cancelled, got {other:?}"),
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            handle.cancel();
            let _ = handle.wait();
        }
    }
}

/// Starts `generate(u64::MAX) -> rebalance -> paced sink of `capacity`` with `cfg`.
fn start_slow_sink_job(cfg: EnvConfig, capacity: f64, name: &str) -> Job {
    let env = Env::with_config(cfg);
    env.generate(u64::MAX, |i| i)
        .uid("source")
        .rebalance()
        .add_sink("paced", move |_| Ok(PacedSink::new(capacity)))
        .uid("sink");
    Job {
        handle: Some(env.start(name).expect("the job starts")),
        last_at: None,
        seen: Vec::new(),
    }
}

fn source_rate(m: &JobMetrics) -> f64 {
    m.operator("source")
        .expect("source")
        .num_records_out_per_second
}

fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty());
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Median source rate over the last `n` samples of `window`, if there are that many.
fn median_source_rate(window: &[JobMetrics], n: usize) -> Option<f64> {
    (window.len() >= n)
        .then(|| median(window[window.len() - n..].iter().map(source_rate).collect()))
}

fn within(value: f64, target: f64, margin: f64) -> bool {
    (value - target).abs() <= margin * target
}

// ANCHOR: describe
fn describe(m: &JobMetrics) -> String {
    let src = m.operator("source").expect("source");
    let sink = m.operator("sink").expect("sink");
    let queued: usize = m.subtasks.iter().map(|s| s.input_queue_records).sum();
    let src_bp_now = m
        .subtasks
        .iter()
        .any(|s| s.head_uid == "source" && s.is_back_pressured);
    format!(
        "at {:>6.2}s: source {:>7.0}/s limit {:?} bp {:>4.0}ms/s {:?} (now {src_bp_now}) \
         busy {:>4.0} idle {:>4.0} | sink {:>7.0}/s busy {:>4.0} idle {:>4.0} | queued {queued}",
        m.at.as_secs_f64(),
        src.num_records_out_per_second,
        m.source_rate_limit.map(|r| r.round()),
        src.back_pressured_time_ms_per_second,
        src.backpressure_level,
        src.busy_time_ms_per_second,
        src.idle_time_ms_per_second,
        sink.num_records_in_per_second,
        sink.busy_time_ms_per_second,
        sink.idle_time_ms_per_second,
    )
}
// ANCHOR_END: describe

/// The process's resident set size in bytes (Linux), `None` elsewhere.
fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

// ---------------------------------------------------------------------------------------------
// Without rate control: bounded channels stop the source.

#[test]
fn without_rate_control_in_flight_records_stay_bounded_and_the_source_is_back_pressured() {
    let _serial = serial();
    let cfg = config();
    // Source and sink at parallelism 1 (the default) over a rebalance edge: one channel per
    // (source subtask, sink subtask) pair. Records in channels are at most the window's
    // ceiling × batch size per channel; each sender may hold one more batch waiting for
    // credit.
    let (sources, sinks) = (cfg.default_parallelism, cfg.default_parallelism);
    let channels = sources * sinks;
    let window = cfg.max_channel_capacity;
    let bound = channels * window * cfg.batch_size + sources * cfg.batch_size;
    let max_input_batches = sources * window; // per sink subtask
                                              // Per source subtask: its channels, plus what one step may leave waiting for credit (a
                                              // full batch and, flushed after linger, a partial one).
    let max_output_batches = sinks * window + 2;

    let mut job = start_slow_sink_job(cfg, CAPACITY, "bp-no-rate-control");
    let started = Instant::now();
    let deadline = started + DEADLINE;
    let observe_for = Duration::from_secs(3);

    let mut max_queued = 0usize;
    let mut max_output = 0usize;
    let mut rss_first: Option<u64> = None;
    let mut rss_max = 0u64;
    let mut high_and_busy = false;
    let mut source_back_pressured_now = false;
    let mut rates = Vec::new();
    while let Some(m) = job.next_metrics(deadline) {
        // Every sample, not just some: the channels bound what is in flight.
        let queued: usize = m.subtasks.iter().map(|s| s.input_queue_records).sum();
        max_queued = max_queued.max(queued);
        assert!(
            queued <= bound,
            "{queued} records in flight, more than the channels allow ({bound}):\n{}",
            describe(&m)
        );
        for s in &m.subtasks {
            match s.head_uid.as_str() {
                "sink" => assert!(
                    s.input_queue_length <= max_input_batches,
                    "sink input queue {} > {max_input_batches}",
                    s.input_queue_length
                ),
                "source" => {
                    assert!(
                        s.output_queue_length <= max_output_batches,
                        "source output queue {} > {max_output_batches}",
                        s.output_queue_length
                    );
                    max_output = max_output.max(s.output_queue_length);
                    source_back_pressured_now |= s.is_back_pressured;
                }
                other => panic!("unexpected subtask {other}"),
            }
        }
        let src = m.operator("source").unwrap();
        let sink = m.operator("sink").unwrap();
        high_and_busy |= src.backpressure_level == BackpressureLevel::High
            && sink.busy_time_ms_per_second >= 700.0;

        let elapsed = started.elapsed();
        if elapsed >= Duration::from_secs(1) {
            rates.push(source_rate(&m));
            if let Some(rss) = rss_bytes() {
                rss_first.get_or_insert(rss);
                rss_max = rss_max.max(rss);
            }
        }
        if elapsed >= observe_for && high_and_busy && source_back_pressured_now {
            break;
        }
    }
    let history = job.describe_last(25);
    assert!(
        high_and_busy,
        "never saw the source at HIGH backpressure with the sink busy >= 700 ms/s:\n{history}"
    );
    assert!(
        source_back_pressured_now,
        "the source subtask was never waiting for credit when sampled:\n{history}"
    );
    // Backpressure paces the source at the sink's capacity.
    let rate = median(rates.clone());
    assert!(
        within(rate, CAPACITY, MARGIN),
        "median source rate {rate:.0}/s, sink capacity {CAPACITY}/s:\n{history}"
    );
    // Memory stays flat: at 20 000 records/s an unbounded queue would grow by far more.
    let rss_end = rss_bytes();
    if let (Some(first), Some(end)) = (rss_first, rss_end) {
        const SLACK: u64 = 8 << 20;
        let max = rss_max.max(end);
        assert!(
            max <= first + SLACK,
            "RSS grew from {first} to {max} bytes (more than {SLACK})"
        );
        eprintln!(
            "no rate control: max {max_queued} records queued (bound {bound}), source output \
             queue max {max_output} batches, median source rate {rate:.0}/s (capacity \
             {CAPACITY}), RSS {} KiB -> {} KiB (max {} KiB)",
            first / 1024,
            end / 1024,
            max / 1024
        );
    }
    eprintln!("{history}");
    job.cancel_and_wait();
}

// ---------------------------------------------------------------------------------------------
// With rate control: the PID controller sets the source to the sink's pace.

#[test]
fn with_rate_control_the_source_rate_settles_near_the_sink_capacity() {
    let _serial = serial();
    let mut cfg = config();
    // Spark's defaults (no initial rate: unthrottled until the second update), 200 ms updates.
    cfg.rate_control = rate_control(None, None);
    let mut job = start_slow_sink_job(cfg, CAPACITY, "bp-rate-control");
    settles_near_the_capacity(&mut job, Instant::now());
    job.cancel_and_wait();
}

/// Under rate control turned on at `started`, the source rate settles near the sink's
/// capacity and stays there, held back by its limit rather than by credit.
fn settles_near_the_capacity(job: &mut Job, started: Instant) {
    let settle = Duration::from_secs(2);
    const N: usize = 8;

    // Settles: after `settle`, the median of N consecutive samples is near the capacity, and
    // so is the limit the controller set.
    let mut settled = Vec::new();
    let (rate, limit) = job.poll_until(
        DEADLINE,
        "source rate within ±35 % of the sink capacity under rate control",
        |window| {
            if started.elapsed() >= settle {
                settled.push(window.last().unwrap().clone());
            }
            let rate = median_source_rate(&settled, N)?;
            let limit = settled.last()?.source_rate_limit?;
            (within(rate, CAPACITY, MARGIN) && within(limit, CAPACITY, MARGIN))
                .then_some((rate, limit))
        },
    );

    // Stays there, paced by its limit rather than by credit: over the next N samples the
    // limit is always set and the median rate stays near the capacity. Without rate control
    // the source waits for credit ~1000 ms/s; with it, rarely (0 to ~300 ms/s here, ~450 with
    // the machine oversubscribed twice over: the sink's real capacity then wobbles under the
    // limit), so "well below 1000" is the robust real-time check that the limit, not the
    // channels, holds the source back.
    const LIMIT_NOT_CREDIT_MS: f64 = 800.0;
    let deadline = Instant::now() + DEADLINE;
    let mut after = Vec::new();
    while after.len() < N {
        let m = job.next_metrics(deadline).expect("metrics keep coming");
        assert!(
            m.source_rate_limit.is_some(),
            "the limit went away:\n{}",
            describe(&m)
        );
        after.push(m);
    }
    let history = job.describe_last(2 * N);
    let rate_after = median_source_rate(&after, N).unwrap();
    let in_margin = after
        .iter()
        .filter(|m| within(source_rate(m), CAPACITY, MARGIN))
        .count();
    let bp_after = median(
        after
            .iter()
            .map(|m| {
                m.operator("source")
                    .unwrap()
                    .back_pressured_time_ms_per_second
            })
            .collect(),
    );
    assert!(
        within(rate_after, CAPACITY, MARGIN) && in_margin * 4 >= N * 3,
        "the source rate did not stay near {CAPACITY}/s (median {rate_after:.0}/s, \
         {in_margin}/{N} samples within ±35 %):\n{history}"
    );
    assert!(
        bp_after <= LIMIT_NOT_CREDIT_MS,
        "under rate control the source still waits for credit {bp_after:.0} ms/s:\n{history}"
    );
    eprintln!(
        "rate control: median source rate {rate:.0}/s when settled (limit {limit:.0}/s), then \
         {rate_after:.0}/s ({in_margin}/{N} samples within ±35 %, source back-pressured \
         {bp_after:.0} ms/s); capacity {CAPACITY}/s\n{history}"
    );
}

// ---------------------------------------------------------------------------------------------
// Changing rate control while the job runs.

#[test]
fn rate_control_can_be_turned_on_changed_and_off_while_the_job_runs() {
    let _serial = serial();
    let mut job = start_slow_sink_job(config(), CAPACITY, "bp-live");
    const N: usize = 5;
    let half = CAPACITY / 2.0;

    // Off: no limit; backpressure paces the source at the sink's capacity.
    job.poll_until(
        DEADLINE,
        "unlimited source back-pressured at capacity",
        |w| {
            let m = w.last().unwrap();
            assert_eq!(m.source_rate_limit, None, "rate control is off");
            let rate = median_source_rate(w, N)?;
            let level = m.operator("source").unwrap().backpressure_level;
            (within(rate, CAPACITY, MARGIN) && level == BackpressureLevel::High).then_some(())
        },
    );

    // On, capped at half the capacity: the source slows down and stops waiting for credit.
    job.handle()
        .set_rate_control(rate_control(Some(half), Some(half)))
        .expect("a valid config");
    let limited_rate = job.poll_until(DEADLINE, "source limited to half the capacity", |w| {
        let m = w.last().unwrap();
        let limit = m.source_rate_limit?;
        assert!(limit <= half + 1e-6, "limit {limit} above max_rate {half}");
        let rate = median_source_rate(w, N)?;
        let level = m.operator("source").unwrap().backpressure_level;
        (within(rate, half, MARGIN) && level <= BackpressureLevel::Low).then_some(rate)
    });

    // An invalid config is refused, names its field, and changes nothing (even one that
    // would turn rate control off).
    for enabled in [true, false] {
        let mut bad = rate_control(Some(half), Some(half));
        bad.enabled = enabled;
        bad.min_rate = -1.0;
        let err = job.handle().set_rate_control(bad).unwrap_err();
        assert_eq!(err.field, "min_rate", "{err}");
        assert!(err.to_string().contains("min_rate"), "{err}");
    }
    let mut still = Vec::new();
    for _ in 0..N {
        let m = job
            .next_metrics(Instant::now() + DEADLINE)
            .expect("metrics keep coming");
        let limit = m.source_rate_limit;
        assert!(
            limit.is_some_and(|l| l <= half + 1e-6),
            "the refused config changed the limit: {limit:?}"
        );
        still.push(m);
    }
    let rate = median_source_rate(&still, N).unwrap();
    assert!(
        within(rate, half, MARGIN),
        "after the refused config the source rate is {rate:.0}/s, expected about {half}/s:\n{}",
        job.describe_last(N)
    );

    // Off again: the limit goes at once and backpressure takes over again.
    job.handle()
        .set_rate_control(RateControlConfig::default())
        .expect("the default config is valid");
    let mut fresh = 0;
    let unlimited_rate = job.poll_until(DEADLINE, "limit lifted, back to capacity", |w| {
        let m = w.last().unwrap();
        fresh += 1;
        // The first two samples may have been computed before the job read the change (one
        // not yet read by the test, one being computed as the change was sent).
        if fresh > 2 {
            assert_eq!(m.source_rate_limit, None, "rate control was turned off");
        }
        let rate = median_source_rate(w, N)?;
        let level = m.operator("source").unwrap().backpressure_level;
        (m.source_rate_limit.is_none()
            && within(rate, CAPACITY, MARGIN)
            && level == BackpressureLevel::High)
            .then_some(rate)
    });
    eprintln!(
        "live change: limited to {limited_rate:.0}/s (max_rate {half}), unlimited again \
         {unlimited_rate:.0}/s (capacity {CAPACITY})\n{}",
        job.describe_last(30)
    );
    job.cancel_and_wait();
}

// ---------------------------------------------------------------------------------------------
// A throttled source is idle, not busy.

#[test]
fn a_throttled_source_counts_as_idle_not_busy() {
    let _serial = serial();
    const LIMIT: f64 = 1_000.0;
    const N: usize = 5;
    let mut cfg = config();
    cfg.rate_control = rate_control(Some(LIMIT), Some(LIMIT));
    let env = Env::with_config(cfg);
    env.generate(u64::MAX, |i| i)
        .uid("source")
        .rebalance()
        .discard()
        .uid("sink");
    let mut job = Job {
        handle: Some(env.start("bp-throttled").expect("the job starts")),
        last_at: None,
        seen: Vec::new(),
    };
    let (idle, busy, rate) = job.poll_until(DEADLINE, "throttled source mostly idle", |w| {
        if w.len() < N {
            return None;
        }
        let last = &w[w.len() - N..];
        let source = |m: &JobMetrics| {
            m.subtasks
                .iter()
                .find(|s| s.head_uid == "source")
                .expect("source subtask")
                .clone()
        };
        let idle = median(
            last.iter()
                .map(|m| source(m).idle_time_ms_per_second)
                .collect(),
        );
        let busy = median(
            last.iter()
                .map(|m| source(m).busy_time_ms_per_second)
                .collect(),
        );
        let rate = median_source_rate(w, N)?;
        let limit = last.last().unwrap().source_rate_limit?;
        assert!(
            limit <= LIMIT + 1e-6,
            "limit {limit} above max_rate {LIMIT}"
        );
        (idle >= 500.0 && busy <= 300.0 && within(rate, LIMIT, MARGIN))
            .then_some((idle, busy, rate))
    });
    eprintln!(
        "throttled source: idle {idle:.0} ms/s, busy {busy:.0} ms/s, rate {rate:.0}/s (limit \
         {LIMIT}/s)\n{}",
        job.describe_last(N)
    );
    job.cancel_and_wait();
}

// ---------------------------------------------------------------------------------------------
// Metrics by Flink name.

#[test]
fn operator_metrics_by_flink_name_match_the_fields() {
    let _serial = serial();
    let mut job = start_slow_sink_job(config(), CAPACITY, "bp-names");
    let m = job.poll_until(DEADLINE, "records flowing", |w| {
        let m = w.last().unwrap();
        (m.operator("sink")?.num_records_in_per_second > 0.0).then(|| m.clone())
    });
    assert!(m.operator("no-such-operator").is_none());
    for uid in ["source", "sink"] {
        let op = m.operator(uid).expect("operator");
        assert_eq!(op.uid, uid);
        let named = [
            ("numRecordsIn", op.num_records_in as f64),
            ("numRecordsOut", op.num_records_out as f64),
            ("numRecordsInPerSecond", op.num_records_in_per_second),
            ("numRecordsOutPerSecond", op.num_records_out_per_second),
            ("busyTimeMsPerSecond", op.busy_time_ms_per_second),
            ("idleTimeMsPerSecond", op.idle_time_ms_per_second),
            (
                "backPressuredTimeMsPerSecond",
                op.back_pressured_time_ms_per_second,
            ),
        ];
        for (name, field) in named {
            assert_eq!(op.get(name), Some(field), "{uid}: {name}");
        }
        for unknown in [
            "",
            "numrecordsin",
            "num_records_in",
            "numRecordsOutPerSec",
            "backPressuredTimeMsPerSecond ",
            "isBackPressured",
        ] {
            assert_eq!(op.get(unknown), None, "{uid}: {unknown:?}");
        }
    }
    // The figures are those of the operators: the source emits, the sink takes in.
    let (src, sink) = (m.operator("source").unwrap(), m.operator("sink").unwrap());
    assert_eq!(src.get("numRecordsIn"), Some(0.0));
    assert!(src.get("numRecordsOut").unwrap() > 0.0);
    assert!(sink.get("numRecordsIn").unwrap() > 0.0);
    assert_eq!(
        BackpressureLevel::from_ms_per_second(src.back_pressured_time_ms_per_second),
        src.backpressure_level
    );
    job.cancel_and_wait();
}

// ---------------------------------------------------------------------------------------------
// Known bug: a live change without an initial rate lifts the limit.

#[test]
fn changing_rate_control_live_keeps_the_current_limit_until_the_next_estimate() {
    let _serial = serial();
    let mut cfg = config();
    cfg.rate_control = rate_control(None, None);
    let mut job = start_slow_sink_job(cfg, CAPACITY, "bp-live-gains");
    job.poll_until(DEADLINE, "a limit set by the controller", |w| {
        w.last().unwrap().source_rate_limit
    });
    // Same settings, a different integral gain: "the new settings take effect at the next
    // update", so the limit set so far should hold until the new estimator has a rate.
    let mut changed = rate_control(None, None);
    changed.integral = 0.3;
    job.handle()
        .set_rate_control(changed)
        .expect("a valid config");
    let deadline = Instant::now() + DEADLINE;
    for _ in 0..8 {
        let m = job.next_metrics(deadline).expect("metrics keep coming");
        assert!(
            m.source_rate_limit.is_some(),
            "the limit was lifted by a change of gains:\n{}",
            job.describe_last(10)
        );
    }
    job.cancel_and_wait();
}

// ---------------------------------------------------------------------------------------------
// Known bug: the controller updates every other interval.

#[test]
fn the_controller_updates_every_update_interval() {
    let _serial = serial();
    let mut cfg = config();
    cfg.rate_control = rate_control(None, None);
    assert_eq!(cfg.metrics_interval, cfg.rate_control.update_interval);
    let mut job = start_slow_sink_job(cfg, CAPACITY, "bp-update-cadence");
    job.poll_until(DEADLINE, "a limit set by the controller", |w| {
        w.last().unwrap().source_rate_limit
    });
    // Each sample reports the limit set by the previous update; an update from real-time
    // measurements practically never returns the same float twice, so with one update per
    // interval consecutive samples show different limits.
    const N: usize = 10;
    let deadline = Instant::now() + DEADLINE;
    let mut limits = Vec::new();
    while limits.len() <= N {
        let m = job.next_metrics(deadline).expect("metrics keep coming");
        limits.push(m.source_rate_limit.expect("rate control is on"));
    }
    let changes = limits.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(
        changes * 10 >= N * 8,
        "the limit changed at {changes} of {N} intervals (one update per interval expected):\n{}",
        job.describe_last(N + 1)
    );
    job.cancel_and_wait();
}

// ---------------------------------------------------------------------------------------------
// Adaptive batch size and rate control.

/// A [`PacedSink`] that also keeps the sizes of the last batches it was given.
struct SizedSink {
    paced: PacedSink,
    sizes: std::sync::Arc<Mutex<std::collections::VecDeque<usize>>>,
}

/// Batch sizes a [`SizedSink`] keeps.
const SIZES_KEPT: usize = 16;

impl weir::sink::Sink<u64> for SizedSink {
    fn write_batch(&mut self, batch: &mut Vec<u64>) -> Result<(), weir::SinkError> {
        {
            let mut sizes = self.sizes.lock().unwrap_or_else(|e| e.into_inner());
            if sizes.len() == SIZES_KEPT {
                sizes.pop_front();
            }
            sizes.push_back(batch.len());
        }
        weir::sink::Sink::<u64>::write_batch(&mut self.paced, batch)
    }
}

/// Adaptive batch size (on by default) cuts the batches in front of a slow sink, and stops
/// while rate control is on: a source paced at the sink's capacity then still settles
/// there without waiting for credit most of the time (it waited ~990 ms/s with the batches
/// still cut), and once rate control is off again the batches are cut again (the unthrottled
/// source would otherwise send whole ones).
#[test]
fn batches_adapt_to_a_slow_sink_unless_rate_control_is_on() {
    let _serial = serial();
    let cfg = config();
    assert!(cfg.adaptive_batch_size, "on by default");
    let batch = cfg.batch_size;
    let env = Env::with_config(cfg);
    let sizes = std::sync::Arc::new(Mutex::new(std::collections::VecDeque::new()));
    let sink_sizes = sizes.clone();
    env.generate(u64::MAX, |i| i)
        .uid("source")
        .rebalance()
        .add_sink("sized", move |_| {
            Ok(SizedSink {
                paced: PacedSink::new(CAPACITY),
                sizes: sink_sizes.clone(),
            })
        })
        .uid("sink");
    let mut job = Job {
        handle: Some(env.start("bp-adaptive-batch").expect("the job starts")),
        last_at: None,
        seen: Vec::new(),
    };
    // Waits until the last `SIZES_KEPT` batches the sink took since this call are all cut.
    let cut_batches = |what: &str| {
        let deadline = Instant::now() + DEADLINE;
        sizes.lock().unwrap().clear();
        loop {
            let last: Vec<usize> = sizes.lock().unwrap().iter().copied().collect();
            if last.len() == SIZES_KEPT && last.iter().all(|&n| n < batch) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not within {DEADLINE:?}; last batch sizes {last:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    };

    cut_batches("batches cut in front of the slow sink");
    job.handle()
        .set_rate_control(rate_control(None, None))
        .expect("a valid config");
    settles_near_the_capacity(&mut job, Instant::now());
    job.handle()
        .set_rate_control(RateControlConfig::default())
        .expect("turning it off");
    cut_batches("batches cut again once rate control is off");
    job.cancel_and_wait();
}
