//! Idle inputs and the watermark: one of two source subtasks stays silent. With an idleness
//! timeout the other one's watermark moves the windows on; without it nothing fires and the
//! metrics name the silent channel as the one holding the watermark back.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir::source::{Source, SourceContext, SourceStatus};
use weir::time::WatermarkStrategy;
use weir::window::TumblingEventTimeWindows;
use weir::{Env, EnvConfig, JobHandle, SourceError};
use weir_testing::Hold;

/// Subtask 0 emits `(id, ts = id * 10)` a few at a time, for ever, until the hold is
/// released; subtask 1 emits nothing until then. Both end at the release.
struct OneSilent {
    subtask: usize,
    next: u64,
    hold: Hold,
}

impl Source<(u64, i64)> for OneSilent {
    fn poll_batch(
        &mut self,
        out: &mut Vec<(u64, i64)>,
        _max: usize,
    ) -> Result<SourceStatus, SourceError> {
        if self.hold.is_released() {
            return Ok(SourceStatus::End);
        }
        if self.subtask == 1 {
            return Ok(SourceStatus::Idle {
                until: Some(Duration::from_millis(5)),
            });
        }
        for _ in 0..5 {
            out.push((self.next, self.next as i64 * 10));
            self.next += 1;
        }
        // Slowly, so that the test sees the job running (2 ms per 50 ms of event time).
        Ok(SourceStatus::Idle {
            until: Some(Duration::from_millis(2)),
        })
    }
    fn position(&self) -> Option<Vec<u8>> {
        None
    }
    fn seek(&mut self, _position: &[u8]) -> Result<(), SourceError> {
        Ok(())
    }
}

fn start(idleness: Option<Duration>) -> (JobHandle, Hold, Arc<AtomicU64>) {
    let mut cfg = EnvConfig::default();
    cfg.metrics_interval = Duration::from_millis(20);
    let env = Env::with_config(cfg);
    let hold = Hold::new();
    let h = hold.clone();
    let mut wm = WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(20))
        .with_timestamp_assigner(|r: &(u64, i64)| r.1)
        .with_watermark_interval(Duration::from_millis(10));
    if let Some(d) = idleness {
        wm = wm.with_idleness(d);
    }
    let fired = Arc::new(AtomicU64::new(0));
    let f = fired.clone();
    env.add_source_with_watermarks(
        "events",
        move |cx: SourceContext| {
            Ok(OneSilent {
                subtask: cx.subtask,
                next: 0,
                hold: h.clone(),
            })
        },
        wm,
    )
    .set_parallelism(2)
    .key_by(|r: &(u64, i64)| r.0 % 3)
    .window(TumblingEventTimeWindows::of(Duration::from_millis(100)))
    .reduce(|a: (u64, i64), _b| a)
    .uid("windows")
    .set_parallelism(1)
    .map(move |r: (u64, i64)| {
        f.fetch_add(1, Ordering::SeqCst);
        r
    })
    .discard();
    let job = env.start("idleness").expect("the job starts");
    (job, hold, fired)
}

fn window_subtask(job: &JobHandle) -> Option<weir::SubtaskMetrics> {
    job.monitor()
        .metrics()?
        .subtasks
        .into_iter()
        .find(|s| s.head_uid == "windows")
}

#[test]
fn an_idle_source_subtask_does_not_hold_windows_back() {
    let (job, hold, fired) = start(Some(Duration::from_millis(200)));
    let deadline = Instant::now() + common::TIMEOUT;
    // Subtask 1 never sends a record: only its idleness lets the watermark move.
    while fired.load(Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "no window fired while one subtask was idle"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The metrics show a watermark and no channel holding it back (the idle one is out).
    let mut seen = None;
    while seen.is_none() {
        assert!(Instant::now() < deadline, "no watermark in the metrics");
        seen = window_subtask(&job).filter(|m| m.current_input_watermark.is_some());
        std::thread::sleep(Duration::from_millis(5));
    }
    let m = seen.expect("metrics");
    assert_eq!(m.watermark_held_by.map(|h| h.1), Some(0), "{m:?}");
    assert!(m.get("watermarkLag").is_some() && m.get("currentInputWatermark").is_some());
    // `sourceIdleTime`: the silent subtask has read nothing for at least its idleness
    // timeout (it was declared idle).
    let idle = loop {
        assert!(
            Instant::now() < deadline,
            "no sourceIdleTime in the metrics"
        );
        let source = job
            .monitor()
            .metrics()
            .and_then(|m| m.operators.into_iter().find(|o| o.name == "events"));
        if let Some(o) = source.filter(|o| o.source_idle_time_ms.get(1) >= Some(&200)) {
            break o;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(idle.source_idle_time_ms.len(), 2, "{idle:?}");
    assert!(idle.get("sourceIdleTime") >= Some(200.0), "{idle:?}");
    hold.release();
    job.wait().expect("the job ends");
}

#[test]
fn without_idleness_the_metrics_name_the_silent_channel() {
    let (job, hold, fired) = start(None);
    let deadline = Instant::now() + common::TIMEOUT;
    let m = loop {
        assert!(
            Instant::now() < deadline,
            "the metrics never named the silent channel"
        );
        if let Some(m) = window_subtask(&job).filter(|m| m.watermark_held_by.is_some()) {
            break m;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    // Channel 1 (source subtask 1) has sent no watermark: it holds the input at its start.
    assert_eq!(m.watermark_held_by, Some((0, 1)), "{m:?}");
    assert_eq!(m.current_input_watermark, None, "{m:?}");
    assert_eq!(m.get("watermarkHeldByInput"), Some(1.0));
    assert_eq!(m.get("watermarkHeldByChannel"), Some(1.0));
    assert_eq!(
        fired.load(Ordering::SeqCst),
        0,
        "a window fired below the silent channel's watermark"
    );
    // The end of the input brings every window.
    hold.release();
    job.wait().expect("the job ends");
    assert!(fired.load(Ordering::SeqCst) > 0);
}

/// A watermark generated inside a stream and held back by its interval goes out when the
/// input pauses: with an interval of an hour, the windows before the pause still fire while
/// the source holds.
#[test]
fn a_pause_in_the_input_does_not_hold_back_a_watermark_owed_by_the_interval() {
    use weir_testing::HeldIds;
    let mut cfg = EnvConfig::default();
    cfg.batch_size = 5;
    let env = Env::with_config(cfg);
    let hold = Hold::new();
    let h = hold.clone();
    let fired = Arc::new(AtomicU64::new(0));
    let f = fired.clone();
    env.add_source("ids", move |cx| Ok(HeldIds::new(cx, 200, 0.5, h.clone())))
        .set_parallelism(1)
        .map(|i: u64| (i % 3, i as i64 * 10))
        .assign_timestamps_and_watermarks(
            WatermarkStrategy::for_bounded_out_of_orderness(Duration::ZERO)
                .with_timestamp_assigner(|r: &(u64, i64)| r.1)
                .with_watermark_interval(Duration::from_secs(3_600)),
        )
        .set_parallelism(1)
        .key_by(|r: &(u64, i64)| r.0)
        .window(TumblingEventTimeWindows::of(Duration::from_millis(100)))
        .reduce(|a: (u64, i64), _b| a)
        .set_parallelism(1)
        .map(move |r: (u64, i64)| {
            f.fetch_add(1, Ordering::SeqCst);
            r
        })
        .discard();
    let job = env.start("owed-watermark").expect("the job starts");
    let deadline = Instant::now() + common::TIMEOUT;
    // Ids 0..100 (ts up to 990) are in; the windows before 900 can fire only if the
    // watermark the interval held back went out when the source paused.
    while fired.load(Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "no window fired during the pause"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    hold.release();
    job.wait().expect("the job ends");
}
