//! Event-time windows against a sequential reference over the same events: tumbling, sliding
//! and session windows, per key per window (nothing missing or twice), out-of-order input
//! within the bound, late records beyond it (the late set equals the reference's), window
//! parallelism 1, 2 and 4, and recovery from an injected fault: a restart from a checkpoint,
//! or the promotion of the window operator's buffer-queue backup mid-window.
//!
//! Determinism: the source runs at parallelism 1 with one record per batch and a watermark
//! after each, so the watermark a record meets is the highest timestamp before it minus the
//! bound, which the reference computes the same way. Faults fire on events (a checkpoint
//! completed), never on the clock.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use weir::time::WatermarkStrategy;
use weir::window::{
    AggregateFunction, EventTimeSessionWindows, EventTimeTrigger, Fired, SlidingEventTimeWindows,
    TumblingEventTimeWindows, WindowAssigner,
};
use weir::{Env, EnvConfig, LateData};
use weir_testing::{
    quiet_injected_panics, wait_for_checkpoint, Fault, FaultKind, FaultPlan, HeldIds, Hold,
};

/// How the job recovers from its injected faults.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Recovery {
    /// Restart-all from the last completed checkpoint.
    Restart,
    /// The same, with unaligned checkpoints and deep channels: the barrier overtakes
    /// records and watermarks in flight, which the checkpoint keeps as channel state.
    Unaligned,
    /// The window operator has a buffer-queue backup, promoted when its primary fails;
    /// no restart is allowed. With `handed`, the primary also hands its state to the
    /// backup between checkpoints (every 20 ms); without, the backup restarts from the last
    /// checkpoint and replays everything since.
    Promote { handed: bool },
}

const BOUND_MS: i64 = 400;
const KEYS: u64 = 5;

/// (id, key, ts): ids 0..n in order, timestamps rising about 10 ms a record, shuffled up to
/// `BOUND_MS` back, and every 97th record `late_by` ms further back.
fn events(n: u64, seed: u64, late_by: i64) -> Vec<(u64, u64, i64)> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..n)
        .map(|i| {
            let base = i as i64 * 10;
            let jitter = (next() % BOUND_MS as u64) as i64;
            let late = if i % 97 == 50 { late_by } else { 0 };
            (i, next() % KEYS, (base - jitter - late).max(0))
        })
        .collect()
}

/// (key, window start, window end) -> count, and the late ids.
type Outcome = (BTreeMap<(u64, i64, i64), u64>, Vec<u64>);

#[derive(Clone)]
struct Count;
impl AggregateFunction<(u64, u64, i64), u64> for Count {
    type Acc = u64;
    fn add(&self, n: &mut u64, _x: (u64, u64, i64)) {
        *n += 1;
    }
    fn merge(&self, n: &mut u64, other: &u64) {
        *n += other;
    }
    fn result(&self, n: &u64) -> u64 {
        *n
    }
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Tumbling(i64),
    Sliding(i64, i64),
    Session(i64),
}

/// The reference: (key, window start, window end) -> count, and the late ids.
fn reference(ev: &[(u64, u64, i64)], kind: Kind) -> Outcome {
    let mut max_seen = i64::MIN;
    let mut late = Vec::new();
    // The records on time, in arrival order, and the watermark each met.
    let mut on_time: Vec<(u64, u64, i64)> = Vec::new();
    let mut met: Vec<i64> = Vec::new();
    for &(id, k, ts) in ev {
        let wm = max_seen.saturating_sub(BOUND_MS);
        let last_end = match kind {
            Kind::Tumbling(size) => ts - ts.rem_euclid(size) + size,
            Kind::Sliding(size, slide) => ts - ts.rem_euclid(slide) + size,
            Kind::Session(_) => i64::MAX, // decided below, with the merged session
        };
        let is_late = match kind {
            Kind::Session(gap) => {
                // Late if the session it would make (with the sessions of its key so far,
                // which all end after the watermark, or they would have fired) ends by it.
                let mut start = ts;
                let mut end = ts + gap;
                let mut sessions: Vec<(i64, i64)> = sessions_of(&on_time, k, gap);
                sessions.sort();
                for (s, e) in sessions {
                    if s <= end && e >= start {
                        start = start.min(s);
                        end = end.max(e);
                    }
                }
                let _ = start;
                end - 1 <= wm
            }
            _ => last_end - 1 <= wm,
        };
        if is_late {
            late.push(id);
        } else {
            on_time.push((id, k, ts));
            met.push(wm);
        }
        max_seen = max_seen.max(ts);
    }
    let mut out = BTreeMap::new();
    match kind {
        Kind::Tumbling(size) => {
            for &(_, k, ts) in &on_time {
                let s = ts - ts.rem_euclid(size);
                *out.entry((k, s, s + size)).or_insert(0) += 1;
            }
        }
        Kind::Sliding(size, slide) => {
            // A record counts in the windows that had not fired when it came (as in Flink,
            // a window already fired is late for it even if a later one is not).
            for (&(_, k, ts), &wm) in on_time.iter().zip(&met) {
                let mut s = ts - ts.rem_euclid(slide);
                while s + size > ts {
                    if s + size - 1 > wm {
                        *out.entry((k, s, s + size)).or_insert(0) += 1;
                    }
                    s -= slide;
                }
            }
        }
        Kind::Session(gap) => {
            for k in 0..KEYS {
                for (s, e) in sessions_of(&on_time, k, gap) {
                    let n = on_time
                        .iter()
                        .filter(|&&(_, kk, ts)| kk == k && ts >= s && ts < e)
                        .count() as u64;
                    out.insert((k, s, e), n);
                }
            }
        }
    }
    (out, late)
}

/// The sessions of key `k` over `records`.
fn sessions_of(records: &[(u64, u64, i64)], k: u64, gap: i64) -> Vec<(i64, i64)> {
    let mut ts: Vec<i64> = records.iter().filter(|r| r.1 == k).map(|r| r.2).collect();
    ts.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::new();
    for t in ts {
        match out.last_mut() {
            Some((_, e)) if t <= *e => *e = (*e).max(t + gap),
            _ => out.push((t, t + gap)),
        }
    }
    out
}

/// A window's result: (key, start, end, count).
fn counted(k: &u64, f: &Fired, n: u64) -> (u64, i64, i64, u64) {
    (*k, f.window.start, f.window.end, n)
}

/// `triggered`: the windows are given Flink's default trigger explicitly, which runs them as
/// a keyed process function through the state backend, not in the slicing operator.
fn run_windows<W: WindowAssigner>(
    ev: &[(u64, u64, i64)],
    assigner: W,
    parallelism: usize,
    faults: Option<(FaultPlan, Recovery)>,
    triggered: bool,
) -> Outcome {
    // Tests run at once in this process: each run its own directory.
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "weir-windows-{}-{}",
        std::process::id(),
        RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let mut cfg = EnvConfig::default();
    cfg.batch_size = 1;
    cfg.checkpoint.directory = dir.clone();
    let faulty = faults.is_some();
    let recovery = faults.as_ref().map(|f| f.1);
    if let Some((plan, recovery)) = faults {
        common::restart_on_faults(&mut cfg, plan);
        if recovery == Recovery::Unaligned {
            cfg.checkpoint.unaligned = true;
            cfg.channel_capacity = 64;
        }
        if let Recovery::Promote { .. } = recovery {
            common::promote_only(&mut cfg);
        }
    }
    let env = Env::with_config(cfg);
    let wm =
        WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(BOUND_MS as u64))
            .with_timestamp_assigner(|r: &(u64, u64, i64)| r.2)
            .with_watermark_interval(Duration::ZERO);
    let late = LateData::new();
    // With faults, half the input waits until two checkpoints completed, so the fault (armed
    // by them) always finds input left, however slow the machine is.
    let hold = Hold::new();
    let input = if faulty {
        let h = hold.clone();
        let all = std::sync::Arc::new(ev.to_vec());
        let n = ev.len() as u64;
        env.add_source("events", move |cx| Ok(HeldIds::new(cx, n, 0.5, h.clone())))
            .set_parallelism(1)
            .map(move |i: u64| all[i as usize])
    } else {
        env.from_collection(ev.to_vec())
    };
    let counts = input
        .set_parallelism(1)
        .assign_timestamps_and_watermarks(wm)
        .set_parallelism(1)
        .key_by(|r: &(u64, u64, i64)| r.1)
        .window(assigner)
        .side_output_late_data(&late);
    let counts = if triggered {
        counts
            .trigger(EventTimeTrigger::create())
            .aggregate_window(Count, counted)
    } else {
        counts.aggregate_window(Count, counted)
    };
    let counts = counts.uid("windows").set_parallelism(parallelism);
    let counts = match recovery {
        Some(Recovery::Promote { handed }) => counts.with_backup_policy(
            common::replaying_backup().state_interval(handed.then(|| Duration::from_millis(20))),
        ),
        _ => counts,
    }
    .collect();
    let late = late
        .stream()
        .expect("attached")
        .map(|r: (u64, u64, i64)| r.0)
        .collect();
    let job = env.start("windows").expect("the job starts");
    if let Some(Recovery::Promote { .. }) = recovery {
        common::trigger_checkpoints(&job, 2);
    }
    if faulty {
        wait_for_checkpoint(&job, 2, Duration::from_secs(60)).expect("two checkpoints complete");
        hold.release();
    }
    let result = job.wait().expect("the job runs");
    let _ = std::fs::remove_dir_all(&dir);
    if let Some(Recovery::Promote { .. }) = recovery {
        assert!(common::promotions(&result) >= 1, "the backup was promoted");
    }
    let mut got = BTreeMap::new();
    for (k, s, e, n) in counts.take() {
        assert!(
            got.insert((k, s, e), n).is_none(),
            "window ({k}, {s}, {e}) fired twice"
        );
    }
    let mut late = late.take();
    late.sort_unstable();
    (got, late)
}

fn check(kind: Kind, parallelism: usize, seed: u64, faults: Option<(FaultPlan, Recovery)>) {
    check_path(kind, parallelism, seed, faults, false)
}

fn check_path(
    kind: Kind,
    parallelism: usize,
    seed: u64,
    faults: Option<(FaultPlan, Recovery)>,
    triggered: bool,
) {
    let ev = events(3_000, seed, 5_000);
    let (want, want_late) = reference(&ev, kind);
    assert!(!want_late.is_empty(), "the input has late records");
    let (got, late) = match kind {
        Kind::Tumbling(size) => run_windows(
            &ev,
            TumblingEventTimeWindows::of(Duration::from_millis(size as u64)),
            parallelism,
            faults,
            triggered,
        ),
        Kind::Sliding(size, slide) => run_windows(
            &ev,
            SlidingEventTimeWindows::of(
                Duration::from_millis(size as u64),
                Duration::from_millis(slide as u64),
            ),
            parallelism,
            faults,
            triggered,
        ),
        Kind::Session(gap) => run_windows(
            &ev,
            EventTimeSessionWindows::with_gap(Duration::from_millis(gap as u64)),
            parallelism,
            faults,
            triggered,
        ),
    };
    assert_eq!(
        late, want_late,
        "{kind:?} p={parallelism} seed={seed} triggered={triggered}: the late set"
    );
    if got != want {
        let missing: Vec<_> = want
            .iter()
            .filter(|(w, n)| got.get(w) != Some(n))
            .take(5)
            .collect();
        let extra: Vec<_> = got
            .iter()
            .filter(|(w, n)| want.get(w) != Some(n))
            .take(5)
            .collect();
        panic!(
            "{kind:?} p={parallelism} seed={seed} triggered={triggered}: want {missing:?}, \
             got {extra:?}"
        );
    }
}

const KINDS: [Kind; 4] = [
    Kind::Tumbling(1_000),
    Kind::Sliding(1_000, 250),
    Kind::Sliding(900, 600),
    Kind::Session(60),
];

#[test]
fn windows_equal_the_reference_at_parallelism_one_two_and_four() {
    for kind in KINDS {
        for p in [1, 2, 4] {
            for seed in 1..=3 {
                check(kind, p, seed, None);
            }
        }
    }
}

/// The same windows run by their trigger (Flink's default, given explicitly: a keyed process
/// function whose windows are keyed state) keep the same late records apart and fire the same
/// counts, at p = 1 and 2, and through a restart and a promotion mid-window.
#[test]
fn triggered_windows_keep_the_same_late_records_apart() {
    quiet_injected_panics();
    for kind in KINDS {
        for p in [1, 2] {
            check_path(kind, p, 31, None, true);
        }
        for (seed, recovery) in [
            (32, Recovery::Restart),
            (33, Recovery::Promote { handed: true }),
        ] {
            let plan = FaultPlan::new(vec![
                Fault::new("windows", FaultKind::Panic, 1_000).after_checkpoints(2)
            ]);
            check_path(kind, 2, seed, Some((plan.clone(), recovery)), true);
            assert_eq!(plan.fired(), 1, "{kind:?}, {recovery:?}: the fault fired");
        }
    }
}

/// Every kind at parallelism 2, once per `(seed, recovery)`: the window operator panics at
/// its first batch from record `at_record` once two checkpoints completed, and the job
/// recovers as `recovery` says. The windows and the late set are the reference's, and the
/// fault fired once.
fn check_recovered(runs: &[(u64, Recovery)], at_record: u64) {
    quiet_injected_panics();
    for kind in KINDS {
        for &(seed, recovery) in runs {
            let plan = FaultPlan::new(vec![
                Fault::new("windows", FaultKind::Panic, at_record).after_checkpoints(2)
            ]);
            check(kind, 2, seed, Some((plan.clone(), recovery)));
            assert_eq!(plan.fired(), 1, "{kind:?}, {recovery:?}: the fault fired");
        }
    }
}

#[test]
fn windows_restored_from_a_checkpoint_fire_once_with_the_same_late_set() {
    check_recovered(&[(11, Recovery::Restart), (12, Recovery::Restart)], 0);
}

/// As above with unaligned checkpoints (the records and watermarks a barrier overtook are
/// channel state; `gate`'s unit tests check that the watermarks among them come back in
/// place). The fault comes late in the flowing half, after checkpoints with records and
/// watermarks in flight.
#[test]
fn windows_restored_from_an_unaligned_checkpoint_fire_once_with_the_same_late_set() {
    check_recovered(
        &[(13, Recovery::Unaligned), (14, Recovery::Unaligned)],
        1_000,
    );
}

/// The window operator's primary panics with windows open, some hundreds of records after
/// the second checkpoint (triggered by the test while half the input is held back); its
/// buffer-queue backup takes over from the last checkpoint's state (or the state handed to
/// it since) and replays the batches and watermarks after it, in the primary's order. Every
/// window fires once with the reference's count, the late set is the reference's, and there
/// is no restart. (A subtask of two gets 2 or 3 of the 5 keys: 1,200 records or more of
/// 3,000, some 600 of them before the input is released.)
#[test]
fn windows_promoted_to_their_backup_mid_window_fire_once_with_the_same_late_set() {
    check_recovered(
        &[
            (21, Recovery::Promote { handed: false }),
            (22, Recovery::Promote { handed: true }),
        ],
        1_000,
    );
}

/// A late record with no late-data output attached is dropped and counted: in the job's
/// metrics (`numLateRecordsDropped`) while it runs, and in its result.
#[test]
fn late_records_without_a_late_output_are_counted_in_the_metrics() {
    late_records_counted(false);
    // The same windows run by their trigger count the same.
    late_records_counted(true);
}

fn late_records_counted(triggered: bool) {
    let mut cfg = EnvConfig::default();
    cfg.metrics_interval = Duration::from_millis(10);
    // One record per batch, a watermark after each.
    cfg.batch_size = 1;
    let env = Env::with_config(cfg);
    let hold = Hold::new();
    let h = hold.clone();
    // Key 0 at 1,000 and 5,000 (the watermark passes [1000, 2000)), then 500: late. The last
    // record waits until the test has seen the count.
    let ts = [1_000i64, 5_000, 500, 6_000];
    let out = env
        .add_source("events", move |cx| Ok(HeldIds::new(cx, 4, 0.8, h.clone())))
        .set_parallelism(1)
        .map(move |i: u64| (i, 0u64, ts[i as usize]))
        .assign_timestamps_and_watermarks(
            WatermarkStrategy::for_bounded_out_of_orderness(Duration::ZERO)
                .with_timestamp_assigner(|r: &(u64, u64, i64)| r.2)
                .with_watermark_interval(Duration::ZERO),
        )
        .key_by(|r: &(u64, u64, i64)| r.1)
        .window(TumblingEventTimeWindows::of(Duration::from_secs(1)));
    let out = if triggered {
        out.trigger(EventTimeTrigger::create()).aggregate(Count)
    } else {
        out.aggregate(Count)
    }
    .uid("windows")
    .collect();
    let job = env.start("late-metrics").expect("the job starts");
    common::wait_until("the late record counted in the metrics", || {
        job.metrics().and_then(|m| {
            m.operator("windows")
                .and_then(|o| o.get("numLateRecordsDropped"))
        }) == Some(1.0)
    });
    hold.release();
    let result = job.wait().expect("the job runs");
    assert_eq!(
        result.operator("windows").map(|o| o.late_records_dropped),
        Some(1)
    );
    let mut got = out.take();
    got.sort_unstable();
    assert_eq!(
        got,
        [1, 1, 1],
        "[1000, 2000), [5000, 6000) and [6000, 7000) once each"
    );
}

/// 4,000 keys' windows complete on one watermark and fire a batch at a time. The window
/// function panics at the 1,500th firing, mid-storm, when part of the storm's results has
/// reached the sink. The backup restores the checkpoint taken before the storm and fires the
/// same windows in the same (canonical, by key hash) order, so the sink drops by position
/// exactly the results it has: every window once, and no restart. (In insertion order, the
/// backup's windows, rebuilt from a snapshot, would fire in another order.)
#[test]
fn a_backup_promoted_mid_storm_fires_each_window_once() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    const KEYS: u64 = 4_000;
    quiet_injected_panics();
    let dir = common::TempDir::new("windows-mid-storm");
    let mut cfg = EnvConfig::default();
    cfg.batch_size = 16;
    common::promote_only(&mut cfg);
    cfg.checkpoint.directory = dir.path().to_owned();
    cfg.metrics_interval = Duration::from_millis(10);
    let env = Env::with_config(cfg);
    let calls = Arc::new(AtomicU64::new(0));
    let c = calls.clone();
    let hold = Hold::new();
    let h = hold.clone();
    // Every key once in window [0, 1000), then the source holds its last record (at 1 h),
    // which completes them all.
    let before_hold = (KEYS as f64 + 0.5) / (KEYS as f64 + 1.0);
    let out = env
        .add_source("keys", move |cx| {
            Ok(HeldIds::new(cx, KEYS + 1, before_hold, h.clone()))
        })
        .set_parallelism(1)
        .map(|k: u64| {
            let ts = if k >= KEYS { 3_600_000 } else { 0 };
            (k, k, ts)
        })
        .assign_timestamps_and_watermarks(
            WatermarkStrategy::for_bounded_out_of_orderness(Duration::ZERO)
                .with_timestamp_assigner(|r: &(u64, u64, i64)| r.2)
                .with_watermark_interval(Duration::ZERO),
        )
        .key_by(|r: &(u64, u64, i64)| r.1)
        .window(TumblingEventTimeWindows::of(Duration::from_secs(1)))
        .aggregate_window(Count, move |k: &u64, f: &Fired, n: u64| {
            if c.fetch_add(1, Ordering::SeqCst) + 1 == 1_500 {
                panic!("injected fault: the window function fails mid-storm");
            }
            (*k, f.window.start, n)
        })
        .uid("windows")
        .set_parallelism(1)
        .with_backup_policy(common::replaying_backup())
        .collect();
    let job = env.start("windows-mid-storm").expect("the job starts");
    // The checkpoint after the window operator took every key: the backup restores their
    // windows from it (and lists them in its own order).
    common::wait_until("the windows took every key", || {
        job.metrics()
            .and_then(|m| m.operator("windows").map(|o| o.num_records_in))
            .unwrap_or(0)
            >= KEYS
    });
    common::trigger_checkpoints(&job, 1);
    hold.release();
    let result = job.wait().expect("the job runs without a restart");
    assert!(common::promotions(&result) >= 1, "the backup was promoted");
    assert!(
        calls.load(Ordering::SeqCst) > KEYS,
        "the storm fired again after the fault"
    );
    let mut seen = BTreeMap::new();
    for (k, start, n) in out.take() {
        *seen.entry((k, start)).or_insert(0u64) += n;
    }
    let want: BTreeMap<(u64, i64), u64> = (0..KEYS)
        .map(|k| ((k, 0), 1))
        .chain(std::iter::once(((KEYS, 3_600_000), 1)))
        .collect();
    if seen != want {
        let twice = seen.iter().filter(|(_, n)| **n > 1).count();
        let missing = want.keys().filter(|w| !seen.contains_key(w)).count();
        panic!(
            "{twice} windows fired twice, {missing} missing, of {}",
            want.len()
        );
    }
}

/// 20,000 keys' windows complete on one watermark: they fire a batch at a time, and a
/// checkpoint triggered meanwhile completes before the last has fired. (From the 100th
/// firing on, each waits 1 ms until the test has seen the checkpoint complete; bounded, so a
/// storm that did not let the checkpoint through fails on the count instead of hanging.)
#[test]
fn a_window_storm_lets_a_checkpoint_through_while_it_fires() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    const KEYS: u64 = 20_000;
    let dir = std::env::temp_dir().join(format!("weir-window-storm-{}", std::process::id()));
    let mut cfg = EnvConfig::default();
    cfg.batch_size = 16;
    cfg.checkpoint.directory = dir.clone();
    let env = Env::with_config(cfg);
    let fired = Arc::new(AtomicU64::new(0));
    let checkpointed = Arc::new(AtomicBool::new(false));
    let (f, c) = (fired.clone(), checkpointed.clone());
    let hold = Hold::new();
    let h = hold.clone();
    // Every key once in window [0, 1000), then one record at 1 h, then the source holds
    // (until the test releases its last record, also at 1 h).
    let before_hold = (KEYS as f64 + 1.5) / (KEYS as f64 + 2.0);
    let out = env
        .add_source("keys", move |cx| {
            Ok(HeldIds::new(cx, KEYS + 2, before_hold, h.clone()))
        })
        .set_parallelism(1)
        .map(|k: u64| {
            let ts = if k >= KEYS { 3_600_000 } else { 0 };
            (k, k, ts)
        })
        .assign_timestamps_and_watermarks(
            WatermarkStrategy::for_bounded_out_of_orderness(Duration::ZERO)
                .with_timestamp_assigner(|r: &(u64, u64, i64)| r.2)
                .with_watermark_interval(Duration::ZERO),
        )
        .key_by(|r: &(u64, u64, i64)| r.1)
        .window(TumblingEventTimeWindows::of(Duration::from_secs(1)))
        .aggregate_window(Count, move |k: &u64, _w: &Fired, n: u64| {
            let i = f.fetch_add(1, Ordering::SeqCst);
            if (100..10_100).contains(&i) && !c.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            (*k, n)
        })
        .set_parallelism(1)
        .collect();
    let job = env.start("window-storm").expect("the job starts");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while fired.load(Ordering::SeqCst) < 100 {
        assert!(
            std::time::Instant::now() < deadline,
            "the storm never started"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let id = job.monitor().trigger_checkpoint().expect("a checkpoint");
    wait_for_checkpoint(&job, id, Duration::from_secs(60)).expect("the checkpoint completes");
    let at_completion = fired.load(Ordering::SeqCst);
    checkpointed.store(true, Ordering::SeqCst);
    hold.release();
    job.wait().expect("the job runs");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        at_completion < KEYS,
        "the checkpoint waited for the whole storm ({at_completion} of {KEYS} windows had fired)"
    );
    let got = out.take();
    assert_eq!(got.len() as u64, KEYS + 2, "every window fired once");
}

/// Sums partial counts (the global half of a local-global count).
#[derive(Clone)]
struct SumPartials;
impl AggregateFunction<((u64, i64), u64), u64> for SumPartials {
    type Acc = u64;
    fn add(&self, n: &mut u64, p: ((u64, i64), u64)) {
        *n += p.1;
    }
    fn merge(&self, n: &mut u64, other: &u64) {
        *n += other;
    }
    fn result(&self, n: &u64) -> u64 {
        *n
    }
}

/// Counts per key per 1 s tumbling window in two steps: `local_aggregate` on each of
/// `parallelism` subtasks fed round-robin (no shuffle by key), then the partials keyed by
/// (key, window) and summed in a tumbling window.
fn run_local_global(
    ev: &[(u64, u64, i64)],
    parallelism: usize,
    faults: Option<FaultPlan>,
) -> Outcome {
    let dir = std::env::temp_dir().join(format!(
        "weir-local-global-{}-{parallelism}-{}",
        std::process::id(),
        faults.is_some()
    ));
    let mut cfg = EnvConfig::default();
    cfg.batch_size = 1;
    cfg.checkpoint.directory = dir.clone();
    let faulty = faults.is_some();
    if let Some(plan) = faults {
        common::restart_on_faults(&mut cfg, plan);
    }
    let env = Env::with_config(cfg);
    let wm =
        WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(BOUND_MS as u64))
            .with_timestamp_assigner(|r: &(u64, u64, i64)| r.2)
            .with_watermark_interval(Duration::ZERO);
    let hold = Hold::new();
    let input = if faulty {
        let h = hold.clone();
        let all = std::sync::Arc::new(ev.to_vec());
        let n = ev.len() as u64;
        env.add_source("events", move |cx| Ok(HeldIds::new(cx, n, 0.5, h.clone())))
            .set_parallelism(1)
            .map(move |i: u64| all[i as usize])
    } else {
        env.from_collection(ev.to_vec())
    };
    let window = |r: &(u64, u64, i64)| (r.1, r.2.div_euclid(1_000) * 1_000);
    let counts = input
        .set_parallelism(1)
        .assign_timestamps_and_watermarks(wm)
        .set_parallelism(1)
        .rebalance()
        .local_aggregate(window, |w: &(u64, i64)| w.1 + 999, Count)
        .uid("local")
        .set_parallelism(parallelism)
        .with_timestamps(|p: &((u64, i64), u64)| p.0 .1)
        .key_by(|p: &((u64, i64), u64)| p.0)
        .window(TumblingEventTimeWindows::of(Duration::from_secs(1)))
        .aggregate_window(SumPartials, |w: &(u64, i64), _: &Fired, n: u64| {
            (w.0, w.1, w.1 + 1_000, n)
        })
        .uid("global")
        .set_parallelism(parallelism)
        .collect();
    let job = env.start("local-global").expect("the job starts");
    if faulty {
        wait_for_checkpoint(&job, 2, Duration::from_secs(60)).expect("two checkpoints complete");
        hold.release();
    }
    job.wait().expect("the job runs");
    let _ = std::fs::remove_dir_all(&dir);
    let mut got = BTreeMap::new();
    for (k, s, e, n) in counts.take() {
        assert!(
            got.insert((k, s, e), n).is_none(),
            "window ({k}, {s}, {e}) fired twice"
        );
    }
    (got, Vec::new())
}

/// `local_aggregate` before a keyed window gives the counts of a keyed window alone: at
/// parallelism 1, 2 and 4, and across a restart from a checkpoint (the local step sends its
/// open partials on before each barrier, so it has no state to lose). Input within the
/// out-of-orderness bound (nothing late).
#[test]
fn local_then_global_aggregation_equals_the_reference() {
    quiet_injected_panics();
    for seed in [21, 22] {
        let ev = events(3_000, seed, 0);
        let (want, want_late) = reference(&ev, Kind::Tumbling(1_000));
        assert!(want_late.is_empty());
        for p in [1, 2, 4] {
            let (got, _) = run_local_global(&ev, p, None);
            assert_eq!(got, want, "p={p} seed={seed}");
        }
        let plan = FaultPlan::new(vec![
            Fault::new("global", FaultKind::Panic, 0).after_checkpoints(2)
        ]);
        let (got, _) = run_local_global(&ev, 2, Some(plan.clone()));
        assert_eq!(plan.fired(), 1, "seed={seed}: the fault fired");
        assert_eq!(got, want, "seed={seed}: after a restart");
    }
}

#[test]
fn a_backed_up_local_aggregate_is_a_plan_error() {
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(Duration::from_millis(100));
    cfg.checkpoint.directory =
        std::env::temp_dir().join(format!("weir-local-backup-{}", std::process::id()));
    let env = Env::with_config(cfg);
    env.generate(10, |i| (i, i % 2, i as i64))
        .local_aggregate(|r: &(u64, u64, i64)| r.1, |_: &u64| 0, Count)
        .uid("local")
        .with_backup()
        .discard();
    let e = env.execute("bad").unwrap_err().to_string();
    assert!(
        e.contains("cannot back up operator `local`") && e.contains("local aggregation"),
        "{e}"
    );
}
