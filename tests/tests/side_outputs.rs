//! Side outputs (`OutputTag`, `ctx.output`, `get_side_output`) from each context that has
//! one: a `ProcessFunction`, a derived operator (keyed and not), a `KeyedProcessFunction`
//! (its records and its timers) and a `ProcessWindowFunction`. Each job panics in the
//! emitting operator after two checkpoints and restarts from the last (or, backed up,
//! promotes its backup): every tagged record reaches its side output's sink once, and the
//! main output is unchanged. Then what the plan
//! refuses: a side output of an operator without a context, and one tag name taken with two
//! types.

mod common;

use std::time::Duration;

use weir::time::{EventTime, WatermarkStrategy};
use weir::window::{ProcessWindowFunction, TumblingEventTimeWindows, WindowContext};
use weir::{
    Collector, DataStream, Env, EnvConfig, KeyedContext, KeyedProcessFunction, Operator, OutputTag,
    ProcessContext, ProcessFunction, TimeDomain, ValueState,
};
use weir_testing::{
    quiet_injected_panics, wait_for_checkpoint, Fault, FaultKind, FaultPlan, HeldIds, Hold,
};

const N: u64 = 6_000;
const KEYS: u64 = 7;

/// Odd ids to the side output (as text), even ones on.
#[derive(Clone)]
struct Odds {
    odd: OutputTag<String>,
}
impl ProcessFunction<u64, u64> for Odds {
    fn process_with_ctx(&mut self, x: u64, ctx: &mut ProcessContext<'_>, out: &mut Collector<u64>) {
        if x % 2 == 1 {
            ctx.output(&self.odd, format!("odd {x}"));
        } else {
            out.collect(x);
        }
    }
}

/// A derived operator with keyed state: each key's running count on; every third record of
/// a key, by that count, to the side output as `(id, count)`.
#[derive(Clone, Operator)]
struct EveryThird {
    #[weir(state)]
    seen: ValueState<u64>,
    third: OutputTag<(u64, u64)>,
}
impl ProcessFunction<u64, (u64, u64)> for EveryThird {
    fn process_with_ctx(
        &mut self,
        x: u64,
        ctx: &mut ProcessContext<'_>,
        out: &mut Collector<(u64, u64)>,
    ) {
        let n = self.seen.get_or_insert_with(|| 0);
        *n += 1;
        if n.is_multiple_of(3) {
            ctx.output(&self.third, (x, *n));
        }
        out.collect((x % KEYS, *n));
    }
}

/// Ids divisible by 5 to `fives` from the record's context; when a key's event-time timer
/// (100 ms after its first record) fires, `(key, count)` to `fired` from the timer's.
#[derive(Clone)]
struct Timed {
    fives: OutputTag<u64>,
    fired: OutputTag<(u64, u64)>,
}
impl KeyedProcessFunction<u64, u64, u64> for Timed {
    type State = ValueState<u64>;
    fn process_with_ctx(
        &mut self,
        _key: &u64,
        s: &mut ValueState<u64>,
        x: u64,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<u64>,
    ) {
        let n = s.get_or_insert_with(|| 0);
        if *n == 0 {
            let ts = ctx.timestamp().expect("the stream has timestamps");
            ctx.register_event_time_timer(ts + 100);
        }
        *n += 1;
        if x.is_multiple_of(5) {
            ctx.output(&self.fives, x);
        } else {
            out.collect(x);
        }
    }
    fn on_timer(
        &mut self,
        _t: EventTime,
        _d: TimeDomain,
        key: &u64,
        s: &mut ValueState<u64>,
        ctx: &mut KeyedContext<'_, u64>,
        _out: &mut Collector<u64>,
    ) {
        let n = s.take().unwrap_or(0);
        ctx.output(&self.fired, (*key, n));
    }
}

/// Each window's count on; its records' ids to the side output.
#[derive(Clone)]
struct WindowIds {
    ids: OutputTag<u64>,
}
impl ProcessWindowFunction<u64, u64, (u64, i64, usize)> for WindowIds {
    fn process_with_ctx(
        &mut self,
        key: &u64,
        ctx: &mut WindowContext<'_>,
        items: &mut dyn Iterator<Item = &u64>,
        out: &mut Collector<(u64, i64, usize)>,
    ) {
        let mut n = 0;
        for id in items {
            ctx.output(&self.ids, *id);
            n += 1;
        }
        out.collect((*key, ctx.fired().window.start, n));
    }
}

/// `got` (sorted) equals `want`; if not, says how, without printing thousands of ids.
fn same<T: Ord + std::fmt::Debug + Clone>(got: Vec<T>, want: Vec<T>, what: &str) {
    if got == want {
        return;
    }
    let missing: Vec<T> = want
        .iter()
        .filter(|w| !got.contains(w))
        .take(10)
        .cloned()
        .collect();
    let mut twice = got.clone();
    twice.dedup();
    panic!(
        "{what}: {} records, {} wanted; {} distinct; first missing {missing:?}",
        got.len(),
        want.len(),
        twice.len()
    );
}

/// How the faulty operator recovers.
#[derive(Clone, Copy, PartialEq)]
enum Recovery {
    /// The job restarts from the last checkpoint.
    Restart,
    /// Its buffer-queue backup is promoted (no restart allowed).
    Promote,
}

/// Runs a job of ids `0..N` (event time: 1 ms per id) through `build`, with the operator
/// `uid` panicking once some records after the second checkpoint, and a restart. The
/// source holds half its ids until two checkpoints completed, so the restart always has
/// input to replay.
fn with_a_restart(uid: &str, build: impl FnOnce(DataStream<u64>)) {
    with_a_fault(uid, Recovery::Restart, |ids| {
        build(ids);
    })
}

/// [`with_a_restart`], or with the operator backed up and its backup promoted: `build`
/// returns the faulty operator's output (to which the backup is added) with `Promote`.
fn with_a_fault(uid: &str, recovery: Recovery, build: impl FnOnce(DataStream<u64>)) {
    quiet_injected_panics();
    let mut cfg = EnvConfig::default();
    cfg.batch_size = 64;
    let dir = common::TempDir::new("side-outputs");
    cfg.checkpoint.directory = dir.path().to_owned();
    let plan = FaultPlan::new(vec![
        Fault::new(uid, FaultKind::Panic, 100).after_checkpoints(2)
    ]);
    common::restart_on_faults(&mut cfg, plan.clone());
    if recovery == Recovery::Promote {
        common::promote_only(&mut cfg);
    }
    let env = Env::with_config(cfg);
    let hold = Hold::new();
    let h = hold.clone();
    let wm = WatermarkStrategy::for_bounded_out_of_orderness(Duration::ZERO)
        .with_timestamp_assigner(|id: &u64| *id as i64);
    let ids = env
        .add_source("ids", move |cx| Ok(HeldIds::new(cx, N, 0.5, h.clone())))
        // One source subtask: its ids in event-time order, none late at the windows.
        .set_parallelism(1)
        .assign_timestamps_and_watermarks(wm);
    build(ids);
    let job = env.start("side-outputs").expect("the job starts");
    if recovery == Recovery::Promote {
        common::trigger_checkpoints(&job, 2);
    }
    wait_for_checkpoint(&job, 2, Duration::from_secs(60)).expect("two checkpoints complete");
    hold.release();
    let result = job.wait().expect("the job ends after its recovery");
    assert_eq!(plan.fired(), 1, "{uid}: the fault fired once");
    if recovery == Recovery::Promote {
        assert!(
            common::promotions(&result) >= 1,
            "{uid}: the backup was promoted"
        );
    }
}

#[test]
fn a_process_function_emits_each_tagged_record_once_across_a_restart() {
    let odd = OutputTag::<String>::new("odd");
    let (mut main, mut side) = (None, None);
    with_a_restart("odds", |ids| {
        let evens = ids
            .process(Odds { odd: odd.clone() })
            .uid("odds")
            .set_parallelism(2);
        side = Some(evens.get_side_output(&odd).collect());
        main = Some(evens.collect());
    });
    let main = common::sorted(main.expect("built").take());
    let side = common::sorted(side.expect("built").take());
    assert_eq!(main, (0..N).filter(|x| x % 2 == 0).collect::<Vec<_>>());
    let mut want: Vec<String> = (0..N)
        .filter(|x| x % 2 == 1)
        .map(|x| format!("odd {x}"))
        .collect();
    want.sort();
    assert_eq!(side, want);
}

#[test]
fn a_derived_keyed_operator_emits_each_tagged_record_once_across_a_restart() {
    let third = OutputTag::<(u64, u64)>::new("third");
    let (mut main, mut side) = (None, None);
    with_a_restart("every-third", |ids| {
        let counts = ids
            .key_by(|x: &u64| x % KEYS)
            .apply(EveryThird {
                seen: ValueState::default(),
                third: third.clone(),
            })
            .uid("every-third")
            .set_parallelism(3);
        side = Some(counts.get_side_output(&third).collect());
        main = Some(counts.collect());
    });
    // Per key, counts 1..=n once each; the side output has each key's multiples of three.
    let main = common::sorted(main.expect("built").take());
    let mut want_main = Vec::new();
    let mut want_side = Vec::new();
    for k in 0..KEYS {
        let n = (0..N).filter(|x| x % KEYS == k).count() as u64;
        want_main.extend((1..=n).map(|c| (k, c)));
        want_side.extend((1..=n).filter(|c| c % 3 == 0).map(|c| (k, c)));
    }
    same(main, common::sorted(want_main), "main");
    // Which id had which count depends on the order of the source's two subtasks; each
    // key's counts are its multiples of three once each, and each id is its key's.
    let side = side.expect("built").take();
    let mut by_key: Vec<(u64, u64)> = side.iter().map(|(id, c)| (id % KEYS, *c)).collect();
    by_key.sort();
    same(by_key, common::sorted(want_side), "third");
    let mut side_ids: Vec<u64> = side.iter().map(|(id, _)| *id).collect();
    side_ids.sort();
    side_ids.dedup();
    assert_eq!(side_ids.len(), side.len(), "no id tagged twice");
}

#[test]
fn a_keyed_process_function_emits_from_records_and_timers_once_across_a_restart() {
    keyed_function_side_outputs(Recovery::Restart);
}

/// `Timed` at parallelism 2 (backed up with `Promote`), faulted: its main output and both side
/// outputs have every id once, and the firings count every record once.
fn keyed_function_side_outputs(recovery: Recovery) {
    let fives = OutputTag::<u64>::new("fives");
    let fired = OutputTag::<(u64, u64)>::new("fired");
    let (mut main, mut f5, mut ft) = (None, None, None);
    with_a_fault("timed", recovery, |ids| {
        let rest = ids
            .key_by(|x: &u64| x % KEYS)
            .process_with(Timed {
                fives: fives.clone(),
                fired: fired.clone(),
            })
            .uid("timed")
            .set_parallelism(2);
        let rest = match recovery {
            Recovery::Promote => rest.with_backup_policy(common::replaying_backup()),
            Recovery::Restart => rest,
        };
        f5 = Some(rest.get_side_output(&fives).collect());
        ft = Some(rest.get_side_output(&fired).collect());
        main = Some(rest.collect());
    });
    let main = common::sorted(main.expect("built").take());
    same(main, (0..N).filter(|x| x % 5 != 0).collect(), "main");
    let f5 = common::sorted(f5.expect("built").take());
    same(f5, (0..N).filter(|x| x % 5 == 0).collect(), "fives");
    // Every record is counted by exactly one firing of its key's timer.
    let ft = ft.expect("built").take();
    for k in 0..KEYS {
        let total: u64 = ft.iter().filter(|(key, _)| *key == k).map(|(_, n)| n).sum();
        let want = (0..N).filter(|x| x % KEYS == k).count() as u64;
        assert_eq!(total, want, "key {k}: firings {ft:?}");
    }
}

#[test]
fn a_window_function_emits_each_tagged_record_once_across_a_restart() {
    let ids_tag = OutputTag::<u64>::new("ids");
    let (mut main, mut side) = (None, None);
    with_a_restart("windows", |ids| {
        let counts = ids
            .key_by(|x: &u64| x % KEYS)
            .window(TumblingEventTimeWindows::of(Duration::from_millis(500)))
            .process(WindowIds {
                ids: ids_tag.clone(),
            })
            .uid("windows")
            .set_parallelism(2);
        side = Some(counts.get_side_output(&ids_tag).collect());
        main = Some(counts.collect());
    });
    let side = common::sorted(side.expect("built").take());
    same(side, (0..N).collect(), "ids");
    let mut want = Vec::new();
    for k in 0..KEYS {
        for start in (0..N as i64).step_by(500) {
            let n = (start as u64..(start as u64 + 500).min(N))
                .filter(|x| x % KEYS == k)
                .count();
            want.push((k, start, n));
        }
    }
    assert_eq!(
        common::sorted(main.expect("built").take()),
        common::sorted(want)
    );
}

#[test]
fn a_non_keyed_derived_operator_emits_to_a_side_output() {
    #[derive(Clone, Operator)]
    struct Tens {
        #[weir(operator_state)]
        seen: u64,
        tens: OutputTag<u64>,
    }
    impl ProcessFunction<u64, u64> for Tens {
        fn process_with_ctx(
            &mut self,
            x: u64,
            ctx: &mut ProcessContext<'_>,
            out: &mut Collector<u64>,
        ) {
            self.seen += 1;
            if x.is_multiple_of(10) {
                ctx.output(&self.tens, x);
            }
            out.collect(x);
        }
    }
    let tens = OutputTag::<u64>::new("tens");
    let (mut main, mut side) = (None, None);
    with_a_restart("tens", |ids| {
        let all = ids
            .apply(Tens {
                seen: 0,
                tens: tens.clone(),
            })
            .uid("tens");
        side = Some(all.get_side_output(&tens).collect());
        main = Some(all.collect());
    });
    assert_eq!(
        common::sorted(main.expect("built").take()),
        (0..N).collect::<Vec<_>>()
    );
    assert_eq!(
        common::sorted(side.expect("built").take()),
        (0..N).filter(|x| x % 10 == 0).collect::<Vec<_>>()
    );
}

#[test]
fn the_plan_refuses_a_side_output_without_a_context_and_a_tag_of_two_types() {
    let env = Env::new();
    let doubled = env.from_collection(vec![1u64, 2, 3]).map(|x: u64| x * 2);
    let _ = doubled.get_side_output(&OutputTag::<u64>::new("nope"));
    doubled.collect();
    let err = env.execute("no-context").expect_err("refused");
    let msg = err.to_string();
    assert!(
        msg.contains("has no side outputs") && msg.contains("nope"),
        "{msg}"
    );

    let env = Env::new();
    let out = env
        .from_collection(vec![1u64, 2, 3])
        .process(|x: u64, out: &mut Collector<u64>| out.collect(x));
    let _ = out.get_side_output(&OutputTag::<u64>::new("t"));
    let _ = out.get_side_output(&OutputTag::<String>::new("t"));
    out.collect();
    let err = env.execute("two-types").expect_err("refused");
    let msg = err.to_string();
    assert!(
        msg.contains("side output `t` was taken as `u64` and now as `alloc::string::String`"),
        "{msg}"
    );
}

#[test]
fn records_to_a_tag_whose_stream_was_not_taken_are_dropped() {
    let env = Env::new();
    let evens = env
        .from_collection((0..100u64).collect::<Vec<_>>())
        .process(Odds {
            odd: OutputTag::new("odd"),
        })
        .collect();
    env.execute("untaken").expect("runs");
    assert_eq!(
        common::sorted(evens.take()),
        (0..100).filter(|x| x % 2 == 0).collect::<Vec<_>>()
    );
}

#[test]
fn a_promoted_backup_emits_each_tagged_record_once() {
    keyed_function_side_outputs(Recovery::Promote);
}
