//! The derives at work in running jobs: `#[derive(Operator)]` state snapshotted from one job
//! and restored into the next, config changed while a job runs (one-input, connected and
//! broadcast-connected `apply`), the errors of each; and `#[derive(Record)]`'s key and event
//! time.
//!
//! Jobs are held mid-stream by a gated source: it emits its first records, then waits for
//! the gate in short steps (so its subtask keeps serving control mail), then emits the rest.
//! The test waits on what it can observe (snapshots, collected records), never on time.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde::{de::DeserializeOwned, Deserialize, Serialize};
use weir::source::{Source, SourceContext, SourceStatus};
use weir::{
    BroadcastProcessFunction, CoProcessFunction, Collector, ConfigError, ConfigKey, DataStream,
    Env, EventTime, JobError, JobHandle, Operator, PlanError, ProcessFunction, Record, RecordKey,
    SourceError, StateError, StateSnapshot,
};

use common::{sorted, within_timeout, TIMEOUT};

// ---------------------------------------------------------------------------------------
// A gated source.

/// Opens once; gated sources wait for it.
#[derive(Clone, Default)]
struct Gate(Arc<(Mutex<bool>, Condvar)>);

impl Gate {
    fn open(&self) {
        let (m, cv) = &*self.0;
        *m.lock().unwrap() = true;
        cv.notify_all();
    }

    /// Waits at most `d` for the gate to open; whether it is open.
    fn wait_open(&self, d: Duration) -> bool {
        let (m, cv) = &*self.0;
        let open = m.lock().unwrap();
        if *open {
            return true;
        }
        *cv.wait_timeout(open, d).unwrap().0
    }
}

/// Emits `before`, then (once the gate is open) `after`, then ends.
struct GatedSource {
    before: Range<u64>,
    after: Range<u64>,
    gate: Gate,
}

impl Source<u64> for GatedSource {
    fn poll_batch(&mut self, out: &mut Vec<u64>, max: usize) -> Result<SourceStatus, SourceError> {
        if !self.before.is_empty() {
            out.extend(self.before.by_ref().take(max));
            return Ok(SourceStatus::More);
        }
        // A short wait: the subtask serves its control mail between two calls.
        if !self.gate.wait_open(Duration::from_millis(2)) {
            return Ok(SourceStatus::More);
        }
        out.extend(self.after.by_ref().take(max));
        Ok(if self.after.is_empty() {
            SourceStatus::End
        } else {
            SourceStatus::More
        })
    }
}

/// A source (parallelism 1) emitting `before`, then waiting for `gate`, then emitting `after`.
fn gated(
    env: &Env,
    uid: &str,
    before: Range<u64>,
    after: Range<u64>,
    gate: &Gate,
) -> DataStream<u64> {
    let gate = gate.clone();
    env.add_source("gated", move |_: SourceContext| {
        Ok(GatedSource {
            before: before.clone(),
            after: after.clone(),
            gate: gate.clone(),
        })
    })
    .uid(uid)
    .set_parallelism(1)
}

/// Polls `f` until it returns `Some`; fails the test after [`TIMEOUT`].
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Waits until `n` records have been collected.
fn wait_collected<T: Clone>(out: &weir::CollectSink<T>, n: usize) {
    wait_for(&format!("{n} collected records"), || {
        (out.len() >= n).then_some(())
    });
    assert_eq!(out.len(), n, "more records than expected reached the sink");
}

fn cancel(handle: JobHandle) {
    handle.cancel();
    match handle.wait() {
        Err(JobError::Cancelled { .. }) => {}
        other => panic!("expected a cancelled job, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// State: snapshot from a running job, restore into the next.

const KEYS: u64 = 10;

/// Counts records, in all and per key; emits its total at the end of its input.
#[derive(Clone, Default, Operator)]
struct Counter {
    #[weir(operator_state)]
    seen: u64,
    #[weir(operator_state)]
    per_key: HashMap<u64, u64>,
}

impl ProcessFunction<u64, u64> for Counter {
    fn process(&mut self, x: u64, _out: &mut Collector<u64>) {
        self.seen += 1;
        *self.per_key.entry(x % KEYS).or_insert(0) += 1;
    }
    fn end_of_input(&mut self, out: &mut Collector<u64>) {
        out.collect(self.seen);
    }
}

/// Another operator type, for a snapshot that must not restore into a `Counter`.
#[derive(Clone, Default, Operator)]
#[weir(name = "other")]
struct Other {
    #[weir(operator_state)]
    seen: u64,
}

/// A `Counter` of a later state format.
#[derive(Clone, Default, Operator)]
#[weir(name = "Counter", version = 2)]
struct CounterV2 {
    #[weir(operator_state)]
    seen: u64,
    #[weir(operator_state)]
    per_key: HashMap<u64, u64>,
}

/// A `Counter` whose snapshot lacks `per_key`.
#[derive(Clone, Default, Operator)]
#[weir(name = "Counter")]
struct CounterWithoutKeys {
    #[weir(operator_state)]
    seen: u64,
}

/// A `Counter` whose snapshot has a `per_key` of another type.
#[derive(Clone, Default, Operator)]
#[weir(name = "Counter")]
struct CounterWithTextKeys {
    #[weir(operator_state)]
    seen: u64,
    #[weir(operator_state)]
    per_key: String,
}

impl ProcessFunction<u64, u64> for Other {
    fn process(&mut self, x: u64, out: &mut Collector<u64>) {
        out.collect(x);
    }
}

fn restored(snap: &StateSnapshot) -> Counter {
    let mut c = Counter::default();
    c.restore_state(snap).expect("a Counter snapshot restores");
    c
}

/// The counters of a job: `snapshots` restored, plus their merged per-key counts.
fn counters(snapshots: &[StateSnapshot]) -> (Vec<Counter>, BTreeMap<u64, u64>) {
    let counters: Vec<Counter> = snapshots.iter().map(restored).collect();
    let mut merged = BTreeMap::new();
    for c in &counters {
        for (k, n) in &c.per_key {
            assert!(
                merged.insert(*k, *n).is_none(),
                "key {k} counted by two subtasks"
            );
        }
        assert_eq!(c.seen, c.per_key.values().sum::<u64>());
    }
    (counters, merged)
}

/// The keyed counting job: `before` records, the gate, `after` records.
fn counting_job(
    env: &Env,
    before: Range<u64>,
    after: Range<u64>,
    gate: &Gate,
    initial: Option<Vec<StateSnapshot>>,
) -> weir::CollectSink<u64> {
    let counted = gated(env, "src", before, after, gate)
        .key_by(|x: &u64| x % KEYS)
        .apply(Counter::default())
        .uid("counter")
        .set_parallelism(2);
    match initial {
        Some(snaps) => counted.with_initial_state(snaps),
        None => counted,
    }
    .collect()
}

#[test]
fn state_is_snapshotted_from_a_running_job_and_restored_into_the_next() {
    within_timeout(|| {
        // Job 1: 1000 records, then held.
        let env = Env::new();
        let gate = Gate::default();
        let _out = counting_job(&env, 0..1000, 0..0, &gate, None);
        let handle = env.start("count-1").expect("job starts");
        let snaps = wait_for("1000 records counted", || {
            let snaps = handle.snapshot_state("counter").expect("counter snapshots");
            let total: u64 = snaps.iter().map(|s| restored(s).seen).sum();
            (total == 1000).then_some(snaps)
        });
        assert_eq!(snaps.len(), 2, "one snapshot per subtask");
        for s in &snaps {
            assert_eq!(s.operator, "Counter");
            assert_eq!(s.version, 1);
        }
        let (first, merged) = counters(&snaps);
        assert_eq!(merged, (0..KEYS).map(|k| (k, 100)).collect());
        cancel(handle);

        // Job 2: starts from job 1's state, counts 500 more (50 per key), held again.
        let env = Env::new();
        let gate = Gate::default();
        let out = counting_job(&env, 0..500, 0..0, &gate, Some(snaps.clone()));
        let handle = env.start("count-2").expect("job starts");
        let snaps2 = wait_for("1500 records counted", || {
            let snaps = handle.snapshot_state("counter").expect("counter snapshots");
            let total: u64 = snaps.iter().map(|s| restored(s).seen).sum();
            (total == 1500).then_some(snaps)
        });
        let (second, merged) = counters(&snaps2);
        assert_eq!(merged, (0..KEYS).map(|k| (k, 150)).collect());
        // Each subtask kept its own keys.
        for (a, b) in first.iter().zip(&second) {
            let keys = |c: &Counter| sorted(c.per_key.keys().copied().collect());
            assert_eq!(keys(a), keys(b));
        }

        // Released, job 2 ends; each subtask emits its old count plus its new one.
        gate.open();
        handle.wait().expect("job 2 completes");
        let expected: Vec<u64> = first
            .iter()
            .map(|c| c.seen + 50 * c.per_key.len() as u64)
            .collect();
        assert_eq!(sorted(out.take()), sorted(expected));
    });
}

/// Runs a counting job (parallelism 2) started from `snapshots`; returns its error.
fn start_from(snapshots: Vec<StateSnapshot>) -> JobError {
    let env = Env::new();
    // An open gate: were the job to start, it would complete.
    let gate = Gate::default();
    gate.open();
    let _out = counting_job(&env, 0..10, 0..0, &gate, Some(snapshots));
    match env.execute("restore") {
        Ok(_) => panic!("the job should not start from these snapshots"),
        Err(e) => e,
    }
}

#[test]
fn a_snapshot_of_another_operator_is_refused() {
    let snap = Other { seen: 3 }.snapshot_state().unwrap();
    let err = within_timeout(move || start_from(vec![snap.clone(), snap]));
    match err {
        JobError::StateRestore { uid, source, .. } => match *source {
            StateError::WrongOperator { expected, found } => {
                assert_eq!(uid, "counter");
                assert_eq!(expected, "Counter");
                assert_eq!(found, "other");
            }
            other => panic!("expected a wrong-operator restore error, got {other:?}"),
        },
        other => panic!("expected a wrong-operator restore error, got {other:?}"),
    }
}

#[test]
fn a_snapshot_of_another_version_is_refused() {
    let snap = CounterV2::default().snapshot_state().unwrap();
    assert_eq!((snap.operator.as_str(), snap.version), ("Counter", 2));
    let err = within_timeout(move || start_from(vec![snap.clone(), snap]));
    match err {
        JobError::StateRestore { source, .. } => match *source {
            StateError::Version {
                operator,
                expected,
                found,
            } => {
                assert_eq!(operator, "Counter");
                assert_eq!((expected, found), (1, 2));
            }
            other => panic!("expected a version restore error, got {other:?}"),
        },
        other => panic!("expected a version restore error, got {other:?}"),
    }
}

#[test]
fn one_snapshot_per_subtask_is_required() {
    let snap = Counter::default().snapshot_state().unwrap();
    let err = within_timeout(move || start_from(vec![snap.clone(), snap.clone(), snap]));
    match err {
        JobError::Plan {
            source:
                PlanError::StateParallelism {
                    uid,
                    snapshots,
                    parallelism,
                },
            ..
        } => {
            assert_eq!(uid, "counter");
            assert_eq!((snapshots, parallelism), (3, 2));
        }
        other => panic!("expected a state parallelism plan error, got {other:?}"),
    }
}

#[test]
fn a_failed_restore_changes_nothing() {
    // `seen` decodes, `per_key` is missing: neither is assigned.
    let snap = CounterWithoutKeys { seen: 99 }.snapshot_state().unwrap();
    let mut c = Counter {
        seen: 5,
        per_key: HashMap::from([(1, 5)]),
    };
    match c.restore_state(&snap) {
        Err(StateError::MissingField { operator, field }) => {
            assert_eq!((operator.as_str(), field.as_str()), ("Counter", "per_key"));
        }
        other => panic!("expected a missing field, got {other:?}"),
    }
    assert_eq!(c.seen, 5);
    assert_eq!(c.per_key, HashMap::from([(1, 5)]));

    // `per_key` of another type: refused, and `seen`, decoded first, is not assigned.
    let snap = CounterWithTextKeys {
        seen: 99,
        per_key: "x".into(),
    }
    .snapshot_state()
    .unwrap();
    match c.restore_state(&snap) {
        Err(StateError::Decode { operator, message }) => {
            assert_eq!(operator, "Counter");
            assert!(message.contains("per_key"), "{message}");
        }
        other => panic!("expected a decode error, got {other:?}"),
    }
    assert_eq!(c.seen, 5);
    assert_eq!(c.per_key, HashMap::from([(1, 5)]));
}

// ---------------------------------------------------------------------------------------
// Derived hooks outside a job.

/// A generic operator: the derive adds no bound, the user's are kept.
#[derive(Clone, Operator)]
#[weir(name = "last")]
struct Last<T>
where
    T: Serialize + DeserializeOwned + Send + 'static,
{
    #[weir(state)]
    last: Option<T>,
    #[weir(config)]
    r#type: u32,
}

#[test]
fn generic_operators_and_raw_field_names() {
    let mut a = Last::<String> {
        last: Some("x".into()),
        r#type: 1,
    };
    a.on_config("type", "7").unwrap();
    assert_eq!(a.r#type, 7);
    assert_eq!(
        Last::<String>::config_keys(),
        [ConfigKey {
            name: "type",
            type_name: "u32"
        }]
    );
    let snap = a.snapshot_state().unwrap();
    assert_eq!(snap.operator, "last");
    let mut b = Last::<String> {
        last: None,
        r#type: 0,
    };
    b.restore_state(&snap).unwrap();
    assert_eq!(b.last.as_deref(), Some("x"));
    assert_eq!(b.r#type, 0, "config fields are not state");
}

// ---------------------------------------------------------------------------------------
// Config: changed while a job runs.

/// Passes records at or above its threshold.
#[derive(Clone, Operator)]
#[weir(name = "threshold")]
struct Threshold {
    #[weir(config)]
    threshold: u64,
}

impl ProcessFunction<u64, u64> for Threshold {
    fn process(&mut self, x: u64, out: &mut Collector<u64>) {
        if x >= self.threshold {
            out.collect(x);
        }
    }
}

#[test]
fn config_keys_name_the_fields_and_their_types() {
    assert_eq!(
        Threshold::config_keys(),
        [ConfigKey {
            name: "threshold",
            type_name: "u64"
        }]
    );
    assert!(Counter::config_keys().is_empty());
}

#[test]
fn config_is_updated_in_a_running_job() {
    within_timeout(|| {
        let env = Env::new();
        let gate = Gate::default();
        let out = gated(&env, "src", 0..1000, 1000..2000, &gate)
            .rebalance()
            .apply(Threshold { threshold: 0 })
            .uid("filter")
            .set_parallelism(2)
            .map(|x| x)
            .uid("plain")
            .collect();
        let handle = env.start("config").expect("job starts");
        // Every record before the gate passes the first threshold.
        wait_collected(&out, 1000);

        handle
            .update_config("filter", "threshold", "1500")
            .expect("a known key and a valid value");

        // Refused changes leave the threshold as it is.
        match handle.update_config("filter", "limit", "3") {
            Err(ConfigError::UnknownKey {
                operator,
                key,
                known,
            }) => {
                assert_eq!((operator.as_str(), key.as_str()), ("threshold", "limit"));
                assert_eq!(known, ["threshold"]);
            }
            other => panic!("expected an unknown key, got {other:?}"),
        }
        let err = handle
            .update_config("filter", "threshold", "abc")
            .expect_err("abc is not a u64");
        match &err {
            ConfigError::BadValue {
                operator,
                key,
                value,
                expected,
                message,
            } => {
                assert_eq!(operator, "threshold");
                assert_eq!(key, "threshold");
                assert_eq!(expected, "u64");
                assert_eq!(value, "abc");
                assert!(!message.is_empty());
                let text = err.to_string();
                assert!(text.contains("`u64`") && text.contains("\"abc\""), "{text}");
            }
            other => panic!("expected a bad value, got {other:?}"),
        }
        match handle.update_config("nope", "threshold", "1") {
            Err(ConfigError::NoSuchOperator { uid }) => assert_eq!(uid, "nope"),
            other => panic!("expected no such operator, got {other:?}"),
        }
        match handle.update_config("plain", "threshold", "1") {
            Err(ConfigError::NotSupported { uid }) => assert_eq!(uid, "plain"),
            other => panic!("expected not supported, got {other:?}"),
        }
        match handle.snapshot_state("plain") {
            Err(StateError::NotSupported { uid }) => assert_eq!(uid, "plain"),
            other => panic!("expected not supported, got {other:?}"),
        }
        // An operator with no state field still snapshots (an empty state).
        assert_eq!(handle.snapshot_state("filter").unwrap().len(), 2);

        gate.open();
        handle.wait().expect("job completes");
        let expected: Vec<u64> = (0..1000).chain(1500..2000).collect();
        assert_eq!(sorted(out.take()), expected);
    });
}

/// Passes records of both inputs at or above its threshold; the second input's are shifted.
#[derive(Clone, Operator)]
#[weir(name = "co_threshold")]
struct CoThreshold {
    #[weir(config)]
    threshold: u64,
}

impl CoProcessFunction<u64, u64, u64> for CoThreshold {
    fn process1(&mut self, x: u64, out: &mut Collector<u64>) {
        if x >= self.threshold {
            out.collect(x);
        }
    }
    fn process2(&mut self, x: u64, out: &mut Collector<u64>) {
        if x >= self.threshold {
            out.collect(x + 10_000);
        }
    }
}

#[test]
fn config_is_updated_in_a_running_connected_job() {
    within_timeout(|| {
        let env = Env::new();
        let gate = Gate::default();
        let a = gated(&env, "a", 0..100, 100..200, &gate).rebalance();
        let b = gated(&env, "b", 0..100, 100..200, &gate).rebalance();
        let out = a
            .connect(b)
            .apply(CoThreshold { threshold: 0 })
            .uid("co")
            .set_parallelism(2)
            .collect();
        let handle = env.start("co-config").expect("job starts");
        wait_collected(&out, 200);
        handle.update_config("co", "threshold", "150").unwrap();
        assert!(matches!(
            handle.update_config("co", "threshold", "-1"),
            Err(ConfigError::BadValue { .. })
        ));
        gate.open();
        handle.wait().expect("job completes");
        let expected: Vec<u64> = (0..100)
            .chain(150..200)
            .chain((0..100).chain(150..200).map(|x| x + 10_000))
            .collect();
        assert_eq!(sorted(out.take()), sorted(expected));
    });
}

/// Adds the broadcast offset to main records at or above its threshold.
#[derive(Clone, Operator)]
#[weir(name = "offset_threshold")]
struct OffsetThreshold {
    #[weir(config)]
    threshold: u64,
}

impl BroadcastProcessFunction<u64, u64, u64> for OffsetThreshold {
    type State = u64;
    fn process_element(&mut self, x: u64, offset: &u64, out: &mut Collector<u64>) {
        if x >= self.threshold {
            out.collect(x + offset);
        }
    }
    fn process_broadcast(&mut self, offset: u64, state: &mut u64, _out: &mut Collector<u64>) {
        *state = offset;
    }
}

#[test]
fn config_is_updated_in_a_running_broadcast_job() {
    within_timeout(|| {
        let env = Env::new();
        let gate = Gate::default();
        let main = gated(&env, "main", 0..100, 100..200, &gate).rebalance();
        let offsets = env.from_collection(vec![1000u64]).uid("offsets");
        let out = main
            .connect_broadcast(offsets)
            .broadcast_first()
            .apply(OffsetThreshold { threshold: 0 })
            .uid("bc")
            .set_parallelism(2)
            .collect();
        let handle = env.start("bc-config").expect("job starts");
        wait_collected(&out, 100);
        handle.update_config("bc", "threshold", "150").unwrap();
        match handle.update_config("bc", "offset", "1") {
            Err(ConfigError::UnknownKey { operator, .. }) => {
                assert_eq!(operator, "offset_threshold")
            }
            other => panic!("expected an unknown key, got {other:?}"),
        }
        gate.open();
        handle.wait().expect("job completes");
        let expected: Vec<u64> = (0..100).chain(150..200).map(|x| x + 1000).collect();
        assert_eq!(sorted(out.take()), expected);
    });
}

// ---------------------------------------------------------------------------------------
// Records.

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Record)]
struct Click {
    #[weir(key)]
    user: u32,
    #[weir(event_time)]
    at_ms: u32,
    clicks: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, Record)]
struct Pair(#[weir(key)] String, u64);

#[test]
fn record_key_and_event_time() {
    let c = Click {
        user: 7,
        at_ms: 1_000,
        clicks: 1,
    };
    assert_eq!(c.record_key(), 7u32);
    assert_eq!(c.event_time(), 1_000u64);
    assert_eq!(Pair("a".into(), 1).record_key(), "a");
}

#[test]
fn records_are_keyed_by_their_key_field() {
    let clicks: Vec<Click> = (0..300)
        .map(|i| Click {
            user: (i % 3) as u32,
            at_ms: i as u32,
            clicks: 1,
        })
        .collect();
    let totals = within_timeout(move || {
        let env = Env::new();
        let out = env
            .from_collection(clicks)
            .key_by_field()
            .reduce(|a, b| Click {
                clicks: a.clicks + b.clicks,
                at_ms: a.at_ms.max(b.at_ms),
                ..a
            })
            .set_parallelism(2)
            .collect();
        env.execute("clicks").expect("job completes");
        let mut totals: BTreeMap<u32, u64> = BTreeMap::new();
        for c in out.take() {
            let t = totals.entry(c.user).or_default();
            *t = (*t).max(c.clicks);
        }
        totals
    });
    assert_eq!(totals, BTreeMap::from([(0, 100), (1, 100), (2, 100)]));
}
