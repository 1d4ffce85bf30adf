//! Timers of keyed process functions: event-time timers against a sequential reference at
//! parallelism 1, 2 and 4 and after a restore; a timer storm that lets a checkpoint through
//! while it fires; processing-time timers that wake an idle subtask; event-time and
//! processing-time timers in a backed-up operator whose backup is promoted; the watermark a
//! restored or promoted keyed function meets its first records at.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use weir::time::{EventTime, WatermarkStrategy};
use weir::{Collector, Env, EnvConfig, KeyedContext, KeyedProcessFunction, TimeDomain, ValueState};
use weir_testing::{
    quiet_injected_panics, wait_for_checkpoint, Fault, FaultKind, FaultPlan, HeldIds, Hold,
};

const BOUND_MS: i64 = 300;
const GAP_MS: i64 = 150;
const KEYS: u64 = 7;

/// (id, key, ts): ids in order, timestamps 10 ms apart with jitter within the bound, and
/// every 53rd record far behind it.
fn events(n: u64, seed: u64) -> Vec<(u64, u64, i64)> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..n)
        .map(|i| {
            let jitter = (next() % BOUND_MS as u64) as i64;
            let late = if i % 53 == 20 { 2_000 } else { 0 };
            // Keys come in runs, so that some go quiet for longer than the gap.
            let key = (i / 20 + next() % 2) % KEYS;
            (i, key, (i as i64 * 10 - jitter - late).max(0))
        })
        .collect()
}

/// Per key: counts records and emits `(key, timer time, count)` once the key has had no
/// record for `GAP_MS` of event time (the timer moves with the latest timestamp).
#[derive(Clone)]
struct Quiet;
impl KeyedProcessFunction<u64, (u64, u64, i64), (u64, i64, u64)> for Quiet {
    type State = ValueState<(u64, Option<EventTime>)>;
    fn process_with_ctx(
        &mut self,
        _key: &u64,
        s: &mut Self::State,
        _x: (u64, u64, i64),
        ctx: &mut KeyedContext<'_, u64>,
        _out: &mut Collector<(u64, i64, u64)>,
    ) {
        let ts = ctx.timestamp().expect("the stream has timestamps");
        let (n, timer) = s.get_or_insert_with(|| (0, None));
        *n += 1;
        let want = ts + GAP_MS;
        match *timer {
            Some(t) if t >= want => {}
            Some(t) => {
                ctx.delete_event_time_timer(t);
                ctx.register_event_time_timer(want);
                *timer = Some(want);
            }
            None => {
                ctx.register_event_time_timer(want);
                *timer = Some(want);
            }
        }
    }
    fn on_timer(
        &mut self,
        t: EventTime,
        domain: TimeDomain,
        key: &u64,
        s: &mut Self::State,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<(u64, i64, u64)>,
    ) {
        assert_eq!(domain, TimeDomain::EventTime);
        assert!(
            t <= ctx.current_watermark(),
            "fired before the watermark reached it"
        );
        let (n, _) = s.take().expect("a key with a timer has a count");
        out.collect((*key, t, n));
    }
}

/// The same computation, sequentially: before each record the watermark of the records
/// before it (the highest timestamp minus the bound) fires every timer at or below it.
fn reference(ev: &[(u64, u64, i64)]) -> Vec<(u64, i64, u64)> {
    let mut state: std::collections::HashMap<u64, (u64, i64)> = Default::default();
    let mut out = Vec::new();
    let mut max_seen = i64::MIN;
    let fire =
        |wm: i64, state: &mut std::collections::HashMap<u64, (u64, i64)>, out: &mut Vec<_>| {
            let due: Vec<u64> = state
                .iter()
                .filter(|(_, (_, t))| *t <= wm)
                .map(|(k, _)| *k)
                .collect();
            for k in due {
                let (n, t) = state.remove(&k).expect("due");
                out.push((k, t, n));
            }
        };
    for &(_, k, ts) in ev {
        fire(max_seen.saturating_sub(BOUND_MS), &mut state, &mut out);
        let e = state.entry(k).or_insert((0, i64::MIN));
        e.0 += 1;
        e.1 = e.1.max(ts + GAP_MS);
        max_seen = max_seen.max(ts);
    }
    fire(i64::MAX, &mut state, &mut out);
    common::sorted(out)
}

fn run(
    ev: &[(u64, u64, i64)],
    parallelism: usize,
    faults: Option<FaultPlan>,
) -> Vec<(u64, i64, u64)> {
    run_with(ev, parallelism, faults, false)
}

/// With `promote`, the timer operator has a buffer-queue backup (restarting from the last
/// checkpoint, which the test triggers twice before it releases the held input) and the job
/// may not restart.
fn run_with(
    ev: &[(u64, u64, i64)],
    parallelism: usize,
    faults: Option<FaultPlan>,
    promote: bool,
) -> Vec<(u64, i64, u64)> {
    let backup = promote.then(common::replaying_backup);
    run_fn(ev, parallelism, faults, backup, Quiet)
}

/// [`run_with`] with another keyed function in `Quiet`'s place (under its uid).
fn run_fn<F>(
    ev: &[(u64, u64, i64)],
    parallelism: usize,
    faults: Option<FaultPlan>,
    backup: Option<weir::BackupPolicy>,
    f: F,
) -> Vec<(u64, i64, u64)>
where
    F: KeyedProcessFunction<u64, (u64, u64, i64), (u64, i64, u64)> + Clone,
{
    let promote = backup.is_some();
    let mut cfg = EnvConfig::default();
    // One record per batch and a watermark after each: the watermark every record meets is
    // the reference's.
    cfg.batch_size = 1;
    let dir = common::TempDir::new("timers");
    cfg.checkpoint.directory = dir.path().to_owned();
    let faulty = faults.is_some();
    if let Some(plan) = faults {
        common::restart_on_faults(&mut cfg, plan);
    }
    if promote {
        common::promote_only(&mut cfg);
    }
    let env = Env::with_config(cfg);
    let wm =
        WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(BOUND_MS as u64))
            .with_timestamp_assigner(|r: &(u64, u64, i64)| r.2)
            .with_watermark_interval(Duration::ZERO);
    let hold = Hold::new();
    let h = hold.clone();
    let all = Arc::new(ev.to_vec());
    let n = ev.len() as u64;
    // With faults, half the input waits until two checkpoints completed (the fault is armed
    // by them), so the restore always has input left to replay.
    let before_hold = if faulty { 0.5 } else { 1.0 };
    let out = env
        .add_source("events", move |cx| {
            Ok(HeldIds::new(cx, n, before_hold, h.clone()))
        })
        .set_parallelism(1)
        .map(move |i: u64| all[i as usize])
        .assign_timestamps_and_watermarks(wm)
        .key_by(|r: &(u64, u64, i64)| r.1)
        .process_with(f)
        .uid("quiet")
        .set_parallelism(parallelism);
    let out = match backup {
        Some(policy) => out.with_backup_policy(policy),
        None => out,
    }
    .collect();
    let job = env.start("timers").expect("the job starts");
    if promote {
        common::trigger_checkpoints(&job, 2);
    }
    if faulty {
        wait_for_checkpoint(&job, 2, Duration::from_secs(60)).expect("two checkpoints complete");
    }
    hold.release();
    let result = job.wait().expect("the job runs");
    if promote {
        assert!(common::promotions(&result) >= 1, "the backup was promoted");
    }
    common::sorted(out.take())
}

#[test]
fn event_time_timers_equal_the_reference_at_parallelism_one_two_and_four() {
    for seed in 1..=3 {
        let ev = events(1_500, seed);
        let want = reference(&ev);
        assert!(
            want.len() > 20,
            "the data makes keys go quiet: {}",
            want.len()
        );
        for p in [1, 2, 4] {
            assert_eq!(run(&ev, p, None), want, "p={p} seed={seed}");
        }
    }
}

#[test]
fn timers_restored_from_a_checkpoint_fire_once() {
    quiet_injected_panics();
    for seed in [21, 22, 23] {
        let ev = events(1_500, seed);
        let plan = FaultPlan::new(vec![
            Fault::new("quiet", FaultKind::Panic, 0).after_checkpoints(2)
        ]);
        let got = run(&ev, 2, Some(plan.clone()));
        assert_eq!(plan.fired(), 1, "seed {seed}: the fault fired");
        assert_eq!(got, reference(&ev), "seed {seed}");
    }
}

/// The timer operator's primary panics some hundreds of records after the second
/// checkpoint; its backup restores that checkpoint (timers included) and replays the batches
/// and watermarks since in the primary's order: every timer fires once, as in the
/// reference, with no restart.
#[test]
fn timers_of_a_promoted_backup_fire_once() {
    quiet_injected_panics();
    for seed in [31, 32] {
        let ev = events(1_500, seed);
        // One of two subtasks has 4 of the 7 keys: some 850 records, 430 before the hold.
        let plan = FaultPlan::new(vec![
            Fault::new("quiet", FaultKind::Panic, 500).after_checkpoints(2)
        ]);
        let got = run_with(&ev, 2, Some(plan.clone()), true);
        assert_eq!(plan.fired(), 1, "seed {seed}: the fault fired");
        assert_eq!(got, reference(&ev), "seed {seed}");
    }
}

/// Emits, for each record, `(id, the watermark it met, key)`.
#[derive(Clone)]
struct SeenWatermark;
impl KeyedProcessFunction<u64, (u64, u64, i64), (u64, i64, u64)> for SeenWatermark {
    type State = ValueState<()>;
    fn process_with_ctx(
        &mut self,
        key: &u64,
        _s: &mut Self::State,
        x: (u64, u64, i64),
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<(u64, i64, u64)>,
    ) {
        out.collect((x.0, ctx.current_watermark(), *key));
    }
}

/// A keyed function restored from a checkpoint (restart-all), or promoted from its backup
/// (from a checkpoint, or from the state handed to it since), meets each record at the
/// watermark its primary met it at: the watermark it had when its state was taken goes
/// before the first record after the restore, not `MIN` (which would take late records as
/// on time, and leave timers due at the restart point unfired before them) until the next
/// watermark. (The window operator keeps its watermark in its own state; a keyed function
/// does not: its subtask keeps the watermark its input had passed on.)
#[test]
fn a_restored_keyed_function_meets_each_record_at_its_primary_s_watermark() {
    quiet_injected_panics();
    // Timestamps that move on every fourth record: the watermark too, so most records
    // follow another record with no watermark between them, and so do most restart points.
    let ev: Vec<(u64, u64, i64)> = (0..1_500)
        .map(|i| (i, i % KEYS, i as i64 / 4 * 10))
        .collect();
    let mut max_seen = EventTime::MIN;
    let want: Vec<(u64, i64, u64)> = ev
        .iter()
        .map(|&(id, k, ts)| {
            let wm = max_seen.saturating_sub(BOUND_MS);
            max_seen = max_seen.max(ts);
            (id, wm, k)
        })
        .collect();
    // Restart-all; a promotion from a checkpoint; one from a hand-off (every 1 ms, so the
    // restart point is the last hand-off before the fault, wherever it fell).
    let handing = common::replaying_backup().state_interval(Some(Duration::from_millis(1)));
    for (how, backup) in [
        ("restart", None),
        (
            "promoted from a checkpoint",
            Some(common::replaying_backup()),
        ),
        ("promoted from a hand-off", Some(handing)),
    ] {
        let plan = FaultPlan::new(vec![
            Fault::new("quiet", FaultKind::Panic, 300).after_checkpoints(2)
        ]);
        let got = run_fn(&ev, 2, Some(plan.clone()), backup, SeenWatermark);
        assert_eq!(plan.fired(), 1, "{how}: the fault fired");
        let wrong: Vec<_> = got
            .iter()
            .zip(&want)
            .filter(|(g, w)| g != w)
            .take(3)
            .collect();
        assert_eq!(got.len(), want.len(), "{how}: every record once");
        assert!(wrong.is_empty(), "{how}: (got, want) {wrong:?}");
    }
}

/// Registers one event-time timer per key at `STORM_AT`; once `SLOW_FROM` have fired it
/// slows down (1 ms a timer) until the test says a checkpoint completed.
#[derive(Clone)]
struct Storm {
    fired: Arc<AtomicU64>,
    checkpointed: Arc<AtomicBool>,
}
const STORM_AT: EventTime = 1_000;
const STORM_KEYS: u64 = 20_000;
const SLOW_FROM: u64 = 100;

impl KeyedProcessFunction<u64, (u64, i64), u64> for Storm {
    type State = ValueState<()>;
    fn process_with_ctx(
        &mut self,
        _key: &u64,
        s: &mut Self::State,
        _x: (u64, i64),
        ctx: &mut KeyedContext<'_, u64>,
        _out: &mut Collector<u64>,
    ) {
        s.update(());
        ctx.register_event_time_timer(STORM_AT);
    }
    fn on_timer(
        &mut self,
        _t: EventTime,
        _d: TimeDomain,
        key: &u64,
        _s: &mut Self::State,
        _ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<u64>,
    ) {
        let n = self.fired.fetch_add(1, Ordering::SeqCst);
        // Bounded: if the storm did not let the checkpoint through it ends after 10 s and
        // the test fails on the count, rather than hanging.
        if (SLOW_FROM..SLOW_FROM + 10_000).contains(&n) && !self.checkpointed.load(Ordering::SeqCst)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        out.collect(*key);
    }
}

#[test]
fn a_timer_storm_lets_a_checkpoint_through_while_it_fires() {
    let mut cfg = EnvConfig::default();
    cfg.batch_size = 16;
    let dir = common::TempDir::new("timer-storm");
    cfg.checkpoint.directory = dir.path().to_owned();
    let env = Env::with_config(cfg);
    let fired = Arc::new(AtomicU64::new(0));
    let checkpointed = Arc::new(AtomicBool::new(false));
    let f = Storm {
        fired: fired.clone(),
        checkpointed: checkpointed.clone(),
    };
    let hold = Hold::new();
    let h = hold.clone();
    // Every key once at time 0, then one record at 1 h that moves the watermark past every
    // timer, then the source holds (until the test releases its last record, also at 1 h).
    let before_hold = (STORM_KEYS as f64 + 1.5) / (STORM_KEYS as f64 + 2.0);
    let out = env
        .add_source("keys", move |cx| {
            Ok(HeldIds::new(cx, STORM_KEYS + 2, before_hold, h.clone()))
        })
        .set_parallelism(1)
        .map(|k: u64| (k, if k >= STORM_KEYS { 3_600_000i64 } else { 0 }))
        .assign_timestamps_and_watermarks(
            WatermarkStrategy::for_bounded_out_of_orderness(Duration::ZERO)
                .with_timestamp_assigner(|r: &(u64, i64)| r.1)
                .with_watermark_interval(Duration::ZERO),
        )
        .set_parallelism(1)
        .key_by(|r: &(u64, i64)| r.0)
        .process_with(f)
        .set_parallelism(1)
        .collect();
    let job = env.start("timer-storm").expect("the job starts");
    // The storm has begun and is slowed: a checkpoint now must get through between runs.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while fired.load(Ordering::SeqCst) < SLOW_FROM {
        assert!(
            std::time::Instant::now() < deadline,
            "the storm never started"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let id = job
        .monitor()
        .trigger_checkpoint()
        .expect("a checkpoint is triggered");
    wait_for_checkpoint(&job, id, Duration::from_secs(60)).expect("the checkpoint completes");
    let at_completion = fired.load(Ordering::SeqCst);
    checkpointed.store(true, Ordering::SeqCst);
    hold.release();
    job.wait().expect("the job runs");
    assert!(
        at_completion < STORM_KEYS,
        "the checkpoint waited for the whole storm ({at_completion} of {STORM_KEYS} timers had fired)"
    );
    let got = out.take();
    assert_eq!(got.len() as u64, STORM_KEYS + 2, "every timer fired once");
    assert_eq!(
        common::sorted(got)
            .windows(2)
            .filter(|w| w[0] == w[1])
            .count(),
        0
    );
}

/// Registers a processing-time timer 30 ms ahead for each key, and emits the key when it
/// fires.
#[derive(Clone)]
struct Later;
impl KeyedProcessFunction<u64, u64, u64> for Later {
    type State = ValueState<()>;
    fn process_with_ctx(
        &mut self,
        _key: &u64,
        _s: &mut Self::State,
        _x: u64,
        ctx: &mut KeyedContext<'_, u64>,
        _out: &mut Collector<u64>,
    ) {
        assert_eq!(ctx.timestamp(), None, "a stream without timestamps");
        let t = ctx.current_processing_time() + 30;
        ctx.register_processing_time_timer(t);
        // Twice the same time is one timer; a deleted one never fires.
        ctx.register_processing_time_timer(t);
        ctx.register_processing_time_timer(t + 1);
        ctx.delete_processing_time_timer(t + 1);
    }
    fn on_timer(
        &mut self,
        t: EventTime,
        d: TimeDomain,
        key: &u64,
        _s: &mut Self::State,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<u64>,
    ) {
        assert_eq!(d, TimeDomain::ProcessingTime);
        assert!(ctx.current_processing_time() >= t, "fired early");
        out.collect(*key);
    }
}

#[test]
fn processing_time_timers_fire_while_the_input_is_idle() {
    let env = Env::new();
    let hold = Hold::new();
    let h = hold.clone();
    let seen = Arc::new(AtomicU64::new(0));
    let s = seen.clone();
    // Ten keys, then the source holds (idle, no records, no watermarks).
    let out = env
        .add_source("ids", move |cx| Ok(HeldIds::new(cx, 20, 0.5, h.clone())))
        .set_parallelism(1)
        .key_by(|x: &u64| *x)
        .process_with(Later)
        .set_parallelism(2)
        .map(move |k: u64| {
            s.fetch_add(1, Ordering::SeqCst);
            k
        })
        .collect();
    let job = env.start("processing-timers").expect("the job starts");
    let deadline = std::time::Instant::now() + common::TIMEOUT;
    while seen.load(Ordering::SeqCst) < 10 {
        assert!(
            std::time::Instant::now() < deadline,
            "the timers of an idle subtask did not fire ({} of 10)",
            seen.load(Ordering::SeqCst)
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    // The second half's timers are still pending when the input ends: they do not fire.
    hold.release();
    job.wait().expect("the job runs");
    let got = common::sorted(out.take());
    assert_eq!(got[..10], (0..10).collect::<Vec<u64>>()[..]);
    assert!(got.iter().all(|k| *k < 20) && got.windows(2).all(|w| w[0] < w[1]));
}

/// Counts each key's records; a processing-time timer 2 ms after a key's first count emits
/// `(key, count)` and starts it again; what is left is emitted at the end of the input. So
/// every record is in exactly one emitted count.
#[derive(Clone)]
struct CountFor2Ms;
impl KeyedProcessFunction<u64, u64, (u64, u64)> for CountFor2Ms {
    type State = ValueState<u64>;
    fn process_with_ctx(
        &mut self,
        _key: &u64,
        n: &mut ValueState<u64>,
        _x: u64,
        ctx: &mut KeyedContext<'_, u64>,
        _out: &mut Collector<(u64, u64)>,
    ) {
        let c = n.get_or_insert_with(|| 0);
        if *c == 0 {
            ctx.register_processing_time_timer(ctx.current_processing_time() + 2);
        }
        *c += 1;
    }
    fn on_timer(
        &mut self,
        _t: EventTime,
        _d: TimeDomain,
        key: &u64,
        n: &mut ValueState<u64>,
        _ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<(u64, u64)>,
    ) {
        if let Some(c) = n.take().filter(|c| *c > 0) {
            out.collect((*key, c));
        }
    }
    fn end_of_input(
        &mut self,
        state: &mut weir::KeyedState<u64, ValueState<u64>>,
        out: &mut Collector<(u64, u64)>,
    ) {
        for (k, n) in state.iter_mut() {
            if let Some(c) = n.take().filter(|c| *c > 0) {
                out.collect((*k, c));
            }
        }
    }
}

/// Processing-time timers in a backed-up operator fire at the times its gate logs: the
/// primary panics after two checkpoints, its backup replays the batches and the logged
/// times since, and every record is in exactly one emitted count (a replay that fired
/// elsewhere than its primary would emit counts the downstream dedup drops or repeats).
#[test]
fn processing_time_timers_of_a_promoted_backup_fire_as_its_primary_did() {
    quiet_injected_panics();
    for seed in [41u64, 42] {
        let n = 6_000u64;
        let dir = common::TempDir::new("timers-processing-backup");
        let mut cfg = EnvConfig::default();
        cfg.batch_size = 16;
        cfg.checkpoint.directory = dir.path().to_owned();
        let plan = FaultPlan::new(vec![
            Fault::new("counts", FaultKind::Panic, 300 + seed).after_checkpoints(2)
        ]);
        common::restart_on_faults(&mut cfg, plan.clone());
        common::promote_only(&mut cfg);
        slowed(&mut cfg, 20_000.0);
        let env = Env::with_config(cfg);
        let hold = Hold::new();
        let h = hold.clone();
        let out = env
            .add_source("ids", move |cx| Ok(HeldIds::new(cx, n, 0.5, h.clone())))
            .set_parallelism(1)
            .key_by(|x: &u64| x % KEYS)
            .process_with(CountFor2Ms)
            .uid("counts")
            .set_parallelism(2)
            .with_backup_policy(common::replaying_backup())
            .collect();
        let job = env
            .start("processing-timers-backup")
            .expect("the job starts");
        common::trigger_checkpoints(&job, 2);
        hold.release();
        let result = job.wait().expect("the job ends without a restart");
        assert_eq!(plan.fired(), 1, "seed {seed}: the fault fired");
        assert!(
            common::promotions(&result) >= 1,
            "seed {seed}: the backup was promoted"
        );
        let got = out.take();
        for k in 0..KEYS {
            let counted: u64 = got
                .iter()
                .filter(|(key, _)| *key == k)
                .map(|(_, c)| c)
                .sum();
            let want = (0..n).filter(|x| x % KEYS == k).count() as u64;
            assert_eq!(counted, want, "seed {seed} key {k}: {} counts", got.len());
        }
        assert!(
            got.len() as u64 > KEYS,
            "seed {seed}: the timers fired along the way"
        );
    }
}

/// The source read at `rate` records/s, so that the wall clock moves on (and timers fire)
/// between the primary's batches: a replay faster than its primary then meets them only if
/// it is told the primary's times.
fn slowed(cfg: &mut EnvConfig, rate: f64) {
    cfg.rate_control.enabled = true;
    cfg.rate_control.initial_rate = Some(rate);
    cfg.rate_control.min_rate = rate;
    cfg.rate_control.max_rate = Some(rate);
}
