//! Windows fired by triggers, with evictors, and on the wall clock, against sequential
//! references over shuffled input: global windows with a count trigger (firing, purging, and
//! with a count evictor), with a continuous event-time trigger, and with a user-defined
//! trigger and evictor; event-time tumbling windows with a time evictor; each at window
//! parallelism 1, 2 and 4, after a restart from a checkpoint, after a stop with a savepoint
//! and a restore, and after the promotion of the window operator's backup, all mid-window.
//! Processing-time windows (tumbling, sliding, sessions) are checked for completeness: every
//! record in exactly the panes it belongs to, once, also across a restart and a savepoint
//! restore; and a backup is refused for them.
//!
//! Determinism: the source runs at parallelism 1 with one record per batch and a watermark
//! after each, so the watermark a record meets is the highest timestamp before it minus the
//! bound, which the references compute the same way. Faults fire on events (checkpoints
//! completed), never on the clock.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use weir::time::WatermarkStrategy;
use weir::window::{
    AggregateFunction, ContinuousEventTimeTrigger, ContinuousProcessingTimeTrigger, CountEvictor,
    CountTrigger, Evictor, Fired, GlobalWindows, ProcessWindowFunction,
    ProcessingTimeSessionWindows, PurgingTrigger, SlidingProcessingTimeWindows, TimeEvictor,
    TimeWindow, Trigger, TriggerContext, TriggerResult, TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
};
use weir::{Collector, DataStream, Env, EnvConfig};
use weir_testing::{
    quiet_injected_panics, wait_for_checkpoint, Fault, FaultKind, FaultPlan, HeldIds, Hold,
};

const BOUND_MS: i64 = 300;
const KEYS: u64 = 5;
const N: u64 = 2_000;

type Event = (u64, u64, i64);
/// (key, firing or window start, records, sum of their ids).
type Out = (u64, i64, u64, u64);

/// (id, key, ts): timestamps rising 10 ms a record, shuffled up to `BOUND_MS` back.
fn events(n: u64, seed: u64) -> Vec<Event> {
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
            (i, next() % KEYS, (i as i64 * 10 - jitter).max(0))
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Case {
    /// Global windows, `CountTrigger::of(n)`: every n-th record fires the key's records so far.
    CountFire(u64),
    /// Global windows, `PurgingTrigger::of(CountTrigger::of(n))`: every n records, once.
    CountPurge(u64),
    /// Global windows, `CountTrigger::of(n)` and `CountEvictor::of(keep)`.
    CountEvict(u64, usize),
    /// Global windows, `ContinuousEventTimeTrigger::of(interval)`.
    Continuous(i64),
    /// Event-time tumbling windows of `size` with `TimeEvictor::of(keep)`.
    TumblingEvict(i64, i64),
    /// Global windows with a user-defined trigger (fire and purge at an id that is a
    /// multiple of 7) and evictor (odd ids out).
    Custom,
}

const CASES: [Case; 6] = [
    Case::CountFire(3),
    Case::CountPurge(4),
    Case::CountEvict(5, 2),
    Case::Continuous(700),
    Case::TumblingEvict(1_000, 400),
    Case::Custom,
];

/// Fires and purges a window when a record whose id is a multiple of 7 comes.
#[derive(Clone)]
struct AtSevens;
impl Trigger<Event> for AtSevens {
    type State = ();
    fn on_element(
        &mut self,
        e: &Event,
        _ts: i64,
        _w: &TimeWindow,
        _s: &mut (),
        _ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        if e.0.is_multiple_of(7) {
            TriggerResult::FireAndPurge
        } else {
            TriggerResult::Continue
        }
    }
}

/// Drops the records with an odd id before the window function runs.
#[derive(Clone)]
struct EvenIds;
impl Evictor<Event> for EvenIds {
    fn evict_before(&mut self, records: &mut Vec<(i64, Event)>, _w: &TimeWindow) {
        records.retain(|(_, e)| e.0 % 2 == 0);
    }
}

#[derive(Clone)]
struct CountSum;
impl AggregateFunction<Event, (u64, u64)> for CountSum {
    type Acc = (u64, u64);
    fn add(&self, a: &mut (u64, u64), e: Event) {
        a.0 += 1;
        a.1 += e.0;
    }
    fn merge(&self, a: &mut (u64, u64), o: &(u64, u64)) {
        a.0 += o.0;
        a.1 += o.1;
    }
    fn result(&self, a: &(u64, u64)) -> (u64, u64) {
        *a
    }
}

/// The windows of `case` over `keyed`, as `Out`.
fn windows(case: Case, input: DataStream<Event>) -> DataStream<Out> {
    let keyed = input.key_by(|e: &Event| e.1);
    let by_firing = |k: &u64, f: &Fired, (n, s): (u64, u64)| (*k, f.firing as i64, n, s);
    let by_start = |k: &u64, f: &Fired, (n, s): (u64, u64)| (*k, f.window.start, n, s);
    let global = || keyed.clone().window(GlobalWindows::create());
    match case {
        Case::CountFire(n) => global()
            .trigger(CountTrigger::of(n))
            .aggregate_window(CountSum, by_firing),
        Case::CountPurge(n) => global()
            .trigger(PurgingTrigger::of(CountTrigger::of(n)))
            .aggregate_window(CountSum, by_firing),
        Case::CountEvict(n, keep) => global()
            .trigger(CountTrigger::of(n))
            .evictor(CountEvictor::of(keep))
            .aggregate_window(CountSum, by_firing),
        Case::Continuous(i) => global()
            .trigger(ContinuousEventTimeTrigger::of(Duration::from_millis(
                i as u64,
            )))
            .aggregate_window(CountSum, by_firing),
        Case::TumblingEvict(size, keep) => keyed
            .clone()
            .window(TumblingEventTimeWindows::of(Duration::from_millis(
                size as u64,
            )))
            .evictor(TimeEvictor::of(Duration::from_millis(keep as u64)))
            .aggregate_window(CountSum, by_start),
        Case::Custom => global()
            .trigger(AtSevens)
            .evictor(EvenIds)
            .aggregate_window(CountSum, by_firing),
    }
}

/// The outputs of `case` over `ev` in input order, sequentially.
fn reference(case: Case, ev: &[Event]) -> Vec<Out> {
    let mut out = Vec::new();
    // Per key: records (id, ts) in the window, firings so far, and what the trigger holds.
    #[derive(Default)]
    struct Key {
        records: Vec<(u64, i64)>,
        firings: i64,
        count: u64,
        next: Option<i64>,
    }
    let mut keys: BTreeMap<u64, Key> = BTreeMap::new();
    // Tumbling: per (key, window start) the on-time records.
    let mut tumbling: BTreeMap<(u64, i64), Vec<(u64, i64)>> = BTreeMap::new();
    let emit = |k: u64, tag: i64, records: &[(u64, i64)], out: &mut Vec<Out>| {
        let sum = records.iter().map(|r| r.0).sum();
        out.push((k, tag, records.len() as u64, sum));
    };
    let mut max_seen = i64::MIN;
    // Fires what a watermark at `w` makes due.
    let fire = |w: i64,
                keys: &mut BTreeMap<u64, Key>,
                tumbling: &mut BTreeMap<(u64, i64), Vec<(u64, i64)>>,
                out: &mut Vec<Out>| {
        match case {
            Case::Continuous(interval) => {
                for (k, s) in keys.iter_mut() {
                    while let Some(t) = s.next.filter(|t| *t <= w) {
                        emit(*k, s.firings, &s.records, out);
                        s.firings += 1;
                        s.next = (w != i64::MAX).then(|| t + interval);
                    }
                }
            }
            Case::TumblingEvict(size, keep) => {
                let due: Vec<(u64, i64)> = tumbling
                    .keys()
                    .filter(|(_, start)| start + size - 1 <= w)
                    .copied()
                    .collect();
                for (k, start) in due {
                    let mut records = tumbling.remove(&(k, start)).unwrap_or_default();
                    let newest = records.iter().map(|r| r.1).max().unwrap_or(i64::MIN);
                    records.retain(|r| r.1 > newest - keep);
                    emit(k, start, &records, out);
                }
            }
            _ => {}
        }
    };
    for &(id, k, ts) in ev {
        let w = max_seen.saturating_sub(BOUND_MS);
        fire(w, &mut keys, &mut tumbling, &mut out);
        let s = keys.entry(k).or_default();
        match case {
            Case::CountFire(n) | Case::CountPurge(n) | Case::CountEvict(n, _) => {
                s.records.push((id, ts));
                s.count += 1;
                if s.count == n {
                    s.count = 0;
                    if let Case::CountEvict(_, keep) = case {
                        let cut = s.records.len().saturating_sub(keep);
                        s.records.drain(..cut);
                    }
                    emit(k, s.firings, &s.records, &mut out);
                    s.firings += 1;
                    if let Case::CountPurge(_) = case {
                        s.records.clear();
                    }
                }
            }
            Case::Continuous(interval) => {
                s.records.push((id, ts));
                if s.next.is_none() {
                    s.next = Some(ts - ts.rem_euclid(interval) + interval - 1);
                }
            }
            Case::TumblingEvict(size, _) => {
                let start = ts - ts.rem_euclid(size);
                if start + size - 1 > w {
                    tumbling.entry((k, start)).or_default().push((id, ts));
                }
            }
            Case::Custom => {
                s.records.push((id, ts));
                if id.is_multiple_of(7) {
                    s.records.retain(|r| r.0 % 2 == 0);
                    if !s.records.is_empty() {
                        emit(k, s.firings, &s.records, &mut out);
                    }
                    s.firings += 1;
                    s.records.clear();
                }
            }
        }
        max_seen = max_seen.max(ts);
    }
    fire(i64::MAX, &mut keys, &mut tumbling, &mut out);
    common::sorted(out)
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Plain,
    /// A panic in the window operator after two checkpoints; a restart.
    Restart,
    /// A stop with a savepoint while half the input is held; a new job restores it.
    Savepoint,
    /// A panic in the window operator after two checkpoints; its backup is promoted.
    Promote,
}

fn config(dir: &std::path::Path) -> EnvConfig {
    let mut cfg = EnvConfig::default();
    cfg.batch_size = 1;
    cfg.checkpoint.directory = dir.to_owned();
    cfg
}

fn build(
    env: &Env,
    case: Case,
    ev: &[Event],
    p: usize,
    hold: &Hold,
    mode: Mode,
) -> DataStream<Out> {
    let wm =
        WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(BOUND_MS as u64))
            .with_timestamp_assigner(|e: &Event| e.2)
            .with_watermark_interval(Duration::ZERO);
    let all = std::sync::Arc::new(ev.to_vec());
    let n = ev.len() as u64;
    let h = hold.clone();
    let input = env
        .add_source("events", move |cx| Ok(HeldIds::new(cx, n, 0.5, h.clone())))
        .uid("events")
        .set_parallelism(1)
        .map(move |i: u64| all[i as usize])
        .uid("to-events")
        .set_parallelism(1)
        .assign_timestamps_and_watermarks(wm)
        .uid("watermarks")
        .set_parallelism(1);
    let out = windows(case, input).uid("windows").set_parallelism(p);
    match mode {
        Mode::Promote => out.with_backup_policy(common::replaying_backup()),
        _ => out,
    }
}

fn run(case: Case, ev: &[Event], p: usize, mode: Mode) -> Vec<Out> {
    let dir = common::TempDir::new("triggers");
    let mut cfg = config(dir.path());
    let plan = FaultPlan::new(vec![
        Fault::new("windows", FaultKind::Panic, 100).after_checkpoints(2)
    ]);
    match mode {
        Mode::Restart => common::restart_on_faults(&mut cfg, plan.clone()),
        Mode::Promote => {
            common::restart_on_faults(&mut cfg, plan.clone());
            common::promote_only(&mut cfg);
        }
        Mode::Plain | Mode::Savepoint => {}
    }
    let env = Env::with_config(cfg);
    let hold = Hold::new();
    let first = build(&env, case, ev, p, &hold, mode).collect();
    let job = env.start("triggers").expect("the job starts");
    let mut got = Vec::new();
    match mode {
        Mode::Plain => {
            hold.release();
            job.wait().expect("the job runs");
        }
        Mode::Restart => {
            wait_for_checkpoint(&job, 2, Duration::from_secs(60)).expect("two checkpoints");
            hold.release();
            job.wait().expect("the job recovers");
            assert_eq!(plan.fired(), 1, "{case:?}: the fault fired");
        }
        Mode::Promote => {
            common::trigger_checkpoints(&job, 2);
            hold.release();
            let result = job.wait().expect("the job ends without a restart");
            assert_eq!(plan.fired(), 1, "{case:?}: the fault fired");
            assert!(
                common::promotions(&result) >= 1,
                "{case:?}: the backup was promoted"
            );
        }
        Mode::Savepoint => {
            // Half the input is in (the source holds the rest): some windows are open.
            common::wait_until("half the input read", || {
                job.metrics()
                    .and_then(|m| m.operator("windows").map(|o| o.num_records_in))
                    .is_some_and(|n| n >= n_before_hold(ev))
            });
            let (savepoint, _) = job
                .stop_with_savepoint(dir.path().join("savepoint"))
                .expect("a savepoint");
            let mut cfg = config(dir.path());
            cfg.checkpoint.restore_from = Some(savepoint);
            let env = Env::with_config(cfg);
            let hold = Hold::new();
            hold.release();
            let second = build(&env, case, ev, p, &hold, mode).collect();
            env.execute("triggers-restored")
                .expect("the restored job runs");
            got.extend(second.take());
        }
    }
    got.extend(first.take());
    common::sorted(got)
}

fn n_before_hold(ev: &[Event]) -> u64 {
    ev.len() as u64 / 2
}

fn check(case: Case, seed: u64, p: usize, mode: Mode) {
    let ev = events(N, seed);
    let want = reference(case, &ev);
    assert!(
        want.len() > 20,
        "{case:?}: the input fires windows: {}",
        want.len()
    );
    let got = run(case, &ev, p, mode);
    if got != want {
        let missing: Vec<_> = want.iter().filter(|w| !got.contains(w)).take(5).collect();
        let extra: Vec<_> = got.iter().filter(|g| !want.contains(g)).take(5).collect();
        panic!(
            "{case:?} seed {seed} p={p} {mode:?}: {} outputs, {} wanted; missing {missing:?}, extra {extra:?}",
            got.len(),
            want.len()
        );
    }
}

#[test]
fn triggers_and_evictors_equal_the_reference_at_parallelism_one_two_and_four() {
    for case in CASES {
        for p in [1, 2, 4] {
            check(case, 1, p, Mode::Plain);
        }
    }
}

#[test]
fn triggered_windows_restored_from_a_checkpoint_fire_as_the_reference() {
    quiet_injected_panics();
    for case in CASES {
        check(case, 2, 2, Mode::Restart);
    }
}

#[test]
fn triggered_windows_restored_from_a_savepoint_fire_as_the_reference() {
    for case in CASES {
        check(case, 3, 2, Mode::Savepoint);
    }
}

#[test]
fn triggered_windows_of_a_promoted_backup_fire_as_the_reference() {
    quiet_injected_panics();
    for case in CASES {
        check(case, 4, 2, Mode::Promote);
    }
}

/// Each pane's ids.
#[derive(Clone)]
struct Ids;
impl ProcessWindowFunction<u64, u64, Vec<u64>> for Ids {
    fn process(
        &mut self,
        _key: &u64,
        _fired: &Fired,
        items: &mut dyn Iterator<Item = &u64>,
        out: &mut Collector<Vec<u64>>,
    ) {
        out.collect(items.copied().collect());
    }
}

#[derive(Debug, Clone, Copy)]
enum Wall {
    Tumbling,
    Sliding,
    Session,
    /// 20 ms tumbling windows fired (and purged) every 3 ms of wall clock while records come
    /// (`ContinuousProcessingTimeTrigger` under a `PurgingTrigger`).
    Continuous,
}

/// Processing-time windows over ids `0..n`, with a restart after two checkpoints or a stop
/// with a savepoint and a restore (`mode`): how many panes each id was in.
fn wall_clock(kind: Wall, p: usize, mode: Mode) -> BTreeMap<u64, usize> {
    let n = 3_000u64;
    let dir = common::TempDir::new("wall-windows");
    let mut cfg = EnvConfig::default();
    cfg.batch_size = 16;
    cfg.checkpoint.directory = dir.path().to_owned();
    let plan = FaultPlan::new(vec![
        Fault::new("panes", FaultKind::Panic, 50).after_checkpoints(2)
    ]);
    if matches!(mode, Mode::Restart | Mode::Promote) {
        quiet_injected_panics();
        common::restart_on_faults(&mut cfg, plan.clone());
    }
    if mode == Mode::Promote {
        common::promote_only(&mut cfg);
        // 20k records/s: the wall clock moves on between the primary's batches, so a replay
        // (faster) puts records in the primary's panes only if told the primary's times.
        cfg.rate_control.enabled = true;
        cfg.rate_control.initial_rate = Some(20_000.0);
        cfg.rate_control.min_rate = 20_000.0;
        cfg.rate_control.max_rate = Some(20_000.0);
    }
    let build = |env: &Env, hold: &Hold| {
        let h = hold.clone();
        let keyed = env
            .add_source("ids", move |cx| Ok(HeldIds::new(cx, n, 0.5, h.clone())))
            .uid("ids")
            .set_parallelism(1)
            .key_by(|i: &u64| i % KEYS);
        let ms = Duration::from_millis;
        let panes = match kind {
            Wall::Tumbling => keyed
                .window(TumblingProcessingTimeWindows::of(ms(3)))
                .process(Ids),
            Wall::Sliding => keyed
                .window(SlidingProcessingTimeWindows::of(ms(6), ms(2)))
                .process(Ids),
            Wall::Session => keyed
                .window(ProcessingTimeSessionWindows::with_gap(ms(2)))
                .process(Ids),
            Wall::Continuous => keyed
                .window(TumblingProcessingTimeWindows::of(ms(20)))
                .trigger(PurgingTrigger::of(ContinuousProcessingTimeTrigger::of(ms(
                    3,
                ))))
                .process(Ids),
        }
        .uid("panes")
        .set_parallelism(p);
        match mode {
            Mode::Promote => panes.with_backup_policy(common::replaying_backup()),
            _ => panes,
        }
        .collect()
    };
    let env = Env::with_config(cfg);
    let hold = Hold::new();
    let panes = build(&env, &hold);
    let job = env.start("wall-windows").expect("the job starts");
    let mut all = Vec::new();
    match mode {
        Mode::Restart => {
            wait_for_checkpoint(&job, 2, Duration::from_secs(60)).expect("two checkpoints");
            hold.release();
            job.wait().expect("the job runs");
            assert_eq!(plan.fired(), 1, "{kind:?}: the fault fired");
        }
        Mode::Savepoint => {
            common::wait_until("half the input read", || {
                job.metrics()
                    .and_then(|m| m.operator("panes").map(|o| o.num_records_in))
                    .is_some_and(|r| r >= n / 2)
            });
            let (savepoint, _) = job
                .stop_with_savepoint(dir.path().join("savepoint"))
                .expect("a savepoint");
            let mut cfg = EnvConfig::default();
            cfg.batch_size = 16;
            cfg.checkpoint.directory = dir.path().to_owned();
            cfg.checkpoint.restore_from = Some(savepoint);
            let env = Env::with_config(cfg);
            let hold = Hold::new();
            hold.release();
            let second = build(&env, &hold);
            env.execute("wall-windows-restored")
                .expect("the restored job runs");
            all.extend(second.take());
        }
        Mode::Promote => {
            common::trigger_checkpoints(&job, 2);
            hold.release();
            let result = job.wait().expect("the job ends without a restart");
            assert_eq!(plan.fired(), 1, "{kind:?}: the fault fired");
            assert!(
                common::promotions(&result) >= 1,
                "{kind:?}: the backup was promoted"
            );
        }
        Mode::Plain => {
            hold.release();
            job.wait().expect("the job runs");
        }
    }
    all.extend(panes.take());
    let mut seen = BTreeMap::new();
    for pane in all {
        assert!(!pane.is_empty(), "{kind:?}: an empty pane fired");
        for id in pane {
            *seen.entry(id).or_insert(0) += 1;
        }
    }
    assert_eq!(
        seen.len() as u64,
        n,
        "{kind:?} p={p} {mode:?}: every id in some pane"
    );
    seen
}

#[test]
fn processing_time_windows_put_every_record_in_its_panes_once() {
    for p in [1, 2, 4] {
        for restart in [Mode::Plain, Mode::Restart, Mode::Savepoint] {
            let t = wall_clock(Wall::Tumbling, p, restart);
            assert!(t.values().all(|&c| c == 1), "tumbling p={p}: one pane each");
            let s = wall_clock(Wall::Session, p, restart);
            assert!(
                s.values().all(|&c| c == 1),
                "sessions p={p}: one session each"
            );
            let sl = wall_clock(Wall::Sliding, p, restart);
            assert!(
                sl.values().all(|&c| c == 3),
                "sliding 6/2 ms p={p}: three panes each, got {:?}",
                sl.values().filter(|&&c| c != 3).take(3).collect::<Vec<_>>()
            );
            let c = wall_clock(Wall::Continuous, p, restart);
            assert!(
                c.values().all(|&c| c == 1),
                "continuous purging p={p}: one firing each"
            );
        }
    }
}

/// Processing-time windows in a backed-up operator: the primary panics after two
/// checkpoints and its backup is promoted; its replay takes the processing times the primary
/// was told (logged in the buffer queue), so every record is in each of its panes once.
#[test]
fn processing_time_windows_of_a_promoted_backup_put_every_record_in_its_panes_once() {
    for p in [1, 2] {
        let t = wall_clock(Wall::Tumbling, p, Mode::Promote);
        assert!(t.values().all(|&c| c == 1), "tumbling p={p}: one pane each");
        let s = wall_clock(Wall::Session, p, Mode::Promote);
        assert!(
            s.values().all(|&c| c == 1),
            "sessions p={p}: one session each"
        );
        let sl = wall_clock(Wall::Sliding, p, Mode::Promote);
        assert!(
            sl.values().all(|&c| c == 3),
            "sliding p={p}: three panes each"
        );
        let c = wall_clock(Wall::Continuous, p, Mode::Promote);
        assert!(
            c.values().all(|&c| c == 1),
            "continuous purging p={p}: one firing each"
        );
    }
}
