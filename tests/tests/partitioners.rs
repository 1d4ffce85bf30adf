//! Every partitioner at parallelism 1 and > 1: forward, rebalance, broadcast, hash (key_by).
//!
//! Which subtask a record reached is observed through a per-instance random id that a user
//! function struct picks on its first record (closures have no subtask index).

mod common;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use weir::key_group::{key_group_of, subtask_for_key_group};
use weir::source::SourceContext;
use weir::{
    Collector, Env, EnvConfig, JobError, KeyedProcessFunction, PlanError, ProcessFunction,
    ValueState,
};

use common::{assert_multiset_eq, configs, InstanceId};

/// Tags every record with the id of the instance that processed it.
#[derive(Debug, Clone, Default)]
struct TagInstance {
    id: InstanceId,
}

impl ProcessFunction<u64, (u64, u64)> for TagInstance {
    fn process(&mut self, x: u64, out: &mut Collector<(u64, u64)>) {
        out.collect((self.id.get(), x));
    }
}

/// Groups `(instance, record)` pairs into the sorted record sets of each instance.
fn groups(tagged: Vec<(u64, u64)>) -> Vec<Vec<u64>> {
    let mut by: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for (i, x) in tagged {
        by.entry(i).or_default().push(x);
    }
    let mut v: Vec<Vec<u64>> = by
        .into_values()
        .map(|mut g| {
            g.sort();
            g
        })
        .collect();
    v.sort();
    v
}

// ---------------------------------------------------------------------------------------------
// forward

#[test]
fn forward_keeps_each_source_share_on_its_own_subtask() {
    for (tag, base, n) in configs() {
        for chaining in [true, false] {
            for p in [1, 2, 3] {
                let ctx = format!("{tag} config, chaining {chaining}, parallelism {p}");
                let mut cfg = base.clone();
                cfg.chaining = chaining;
                let env = Env::with_config(cfg);
                let out = env
                    .generate(n, |i| i)
                    .set_parallelism(p)
                    .map(|x: u64| x + 1)
                    .set_parallelism(p)
                    .forward()
                    .process(TagInstance::default())
                    .set_parallelism(p)
                    .collect();
                env.execute("forward").unwrap();
                let got = groups(out.take());
                // Subtask j of the source generates its contiguous share; forward keeps it
                // together on subtask j downstream.
                let mut expected: Vec<Vec<u64>> = (0..p)
                    .map(|subtask| {
                        SourceContext {
                            subtask,
                            parallelism: p,
                        }
                        .share_of(n)
                        .map(|x| x + 1)
                        .collect()
                    })
                    .collect();
                expected.sort();
                assert_eq!(got.len(), p, "{ctx}");
                assert_eq!(got, expected, "{ctx}");
            }
        }
    }
}

#[test]
fn forward_with_unequal_parallelism_is_a_plan_error() {
    let env = Env::new();
    env.generate(10, |i| i)
        .set_parallelism(2)
        .uid("numbers")
        .forward()
        .map(|x: u64| x)
        .set_parallelism(3)
        .uid("mapper")
        .discard();
    match env.execute("forward-mismatch") {
        Err(JobError::Plan { job, source }) => {
            assert_eq!(job, "forward-mismatch");
            assert_eq!(
                source,
                PlanError::ForwardMismatch {
                    from: "numbers".into(),
                    to: "mapper".into(),
                    from_parallelism: 2,
                    to_parallelism: 3,
                }
            );
            let msg = source.to_string();
            assert!(msg.contains("numbers") && msg.contains("mapper"), "{msg}");
        }
        other => panic!("expected a ForwardMismatch plan error, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// rebalance

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
enum Counted {
    Item(u64),
    Count { instance: u64, count: u64 },
}

/// Passes records on and, at end of input, emits how many this instance received.
#[derive(Debug, Clone, Default)]
struct CountPerInstance {
    id: InstanceId,
    count: u64,
}

impl ProcessFunction<u64, Counted> for CountPerInstance {
    fn process(&mut self, x: u64, out: &mut Collector<Counted>) {
        self.count += 1;
        out.collect(Counted::Item(x));
    }
    fn end_of_input(&mut self, out: &mut Collector<Counted>) {
        out.collect(Counted::Count {
            instance: self.id.get(),
            count: self.count,
        });
    }
}

fn split_counted(out: Vec<Counted>) -> (Vec<u64>, Vec<u64>) {
    let mut items = Vec::new();
    let mut per = Vec::new();
    for o in out {
        match o {
            Counted::Item(x) => items.push(x),
            Counted::Count { count, .. } => per.push(count),
        }
    }
    (items, per)
}

fn run_counted(
    cfg: &EnvConfig,
    n: u64,
    up: usize,
    down: usize,
    how: fn(weir::DataStream<u64>) -> weir::DataStream<u64>,
) -> (Vec<u64>, Vec<u64>) {
    let env = Env::with_config(cfg.clone());
    let out = how(env.generate(n, |i| i).set_parallelism(up))
        .process(CountPerInstance::default())
        .set_parallelism(down)
        .collect();
    env.execute("counted").unwrap();
    split_counted(out.take())
}

#[test]
fn rebalance_spreads_records_evenly() {
    let explicit: fn(weir::DataStream<u64>) -> weir::DataStream<u64> = |s| s.rebalance();
    let auto: fn(weir::DataStream<u64>) -> weir::DataStream<u64> = |s| s;
    for (tag, cfg, n) in configs() {
        for (up, down, how, label) in [
            (1, 1, explicit, "explicit"),
            (1, 3, explicit, "explicit"),
            (2, 3, explicit, "explicit"),
            (3, 2, explicit, "explicit"),
            (3, 3, explicit, "explicit"),
            (2, 2, explicit, "explicit"),
            (3, 1, explicit, "explicit"),
            (1, 2, auto, "auto (unequal parallelism)"),
            (2, 3, auto, "auto (unequal parallelism)"),
        ] {
            let ctx = format!("{tag} config, {label} rebalance {up} -> {down}");
            let (items, per) = run_counted(&cfg, n, up, down, how);
            assert_multiset_eq(items, (0..n).collect(), &ctx);
            assert_eq!(per.len(), down, "{ctx}: one count per subtask");
            assert_eq!(per.iter().sum::<u64>(), n, "{ctx}");
            let fair = n / down as u64;
            let tolerance = cfg.batch_size as u64;
            for c in &per {
                assert!(
                    c.abs_diff(fair) <= tolerance,
                    "{ctx}: subtask counts {per:?} are not within {tolerance} of {fair}"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// broadcast

#[test]
fn broadcast_sends_every_record_to_every_subtask() {
    let bc: fn(weir::DataStream<u64>) -> weir::DataStream<u64> = |s| s.broadcast();
    for (tag, cfg, n) in configs() {
        for (up, down) in [(1, 1), (1, 3), (2, 3), (2, 1), (3, 2)] {
            let ctx = format!("{tag} config, broadcast {up} -> {down}");
            let (items, per) = run_counted(&cfg, n, up, down, bc);
            assert_eq!(items.len() as u64, down as u64 * n, "{ctx}: total = p * N");
            let expected: Vec<u64> = (0..n).flat_map(|x| std::iter::repeat_n(x, down)).collect();
            assert_multiset_eq(items, expected, &ctx);
            assert_eq!(per, vec![n; down], "{ctx}: every subtask saw all N records");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// hash (key_by)

/// Counts per key and tags each output with this instance's id.
#[derive(Debug, Clone, Default)]
struct KeyInstance {
    id: InstanceId,
}

impl KeyedProcessFunction<u64, u64, (u64, u64, u64)> for KeyInstance {
    type State = ValueState<u64>;
    fn process(
        &mut self,
        key: &u64,
        s: &mut ValueState<u64>,
        _x: u64,
        out: &mut Collector<(u64, u64, u64)>,
    ) {
        let c = s.get_or_insert_with(|| 0);
        *c += 1;
        out.collect((*key, self.id.get(), *c));
    }
}

#[test]
fn key_by_sends_each_key_to_exactly_one_subtask() {
    const KEYS: u64 = 1000;
    for (tag, cfg, n) in configs() {
        for (up, down) in [(1, 1), (1, 3), (3, 3), (2, 3), (3, 2), (2, 1)] {
            let ctx = format!("{tag} config, key_by {up} -> {down}");
            let env = Env::with_config(cfg.clone());
            let out = env
                .generate(n, |i| (i * 31) % KEYS)
                .set_parallelism(up)
                .key_by(|x: &u64| *x)
                .process_with(KeyInstance::default())
                .set_parallelism(down)
                .collect();
            env.execute("key_by").unwrap();
            let got = out.take();
            // Counts per key are right (1..=c for each key).
            let mut seen = BTreeMap::new();
            let expected: Vec<(u64, u64)> = (0..n)
                .map(|i| {
                    let k = (i * 31) % KEYS;
                    let c = seen.entry(k).or_insert(0u64);
                    *c += 1;
                    (k, *c)
                })
                .collect();
            assert_multiset_eq(
                got.iter().map(|&(k, _, c)| (k, c)).collect(),
                expected,
                &ctx,
            );
            // Each key reached one instance only.
            let mut instance_of: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
            for &(k, i, _) in &got {
                instance_of.entry(k).or_default().insert(i);
            }
            for (k, is) in &instance_of {
                assert_eq!(is.len(), 1, "{ctx}: key {k} reached {} instances", is.len());
            }
            let instances: BTreeSet<u64> = instance_of.values().flatten().copied().collect();
            assert_eq!(instances.len(), down, "{ctx}: every subtask owns some keys");
            // The keys are grouped exactly as the key groups assign them to subtasks.
            let mut by_instance: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
            for (k, is) in &instance_of {
                by_instance
                    .entry(*is.iter().next().unwrap())
                    .or_default()
                    .insert(*k);
            }
            let mut by_subtask: BTreeMap<usize, BTreeSet<u64>> = BTreeMap::new();
            for k in instance_of.keys() {
                let s = subtask_for_key_group(
                    key_group_of(k, cfg.max_parallelism),
                    cfg.max_parallelism,
                    down,
                );
                by_subtask.entry(s).or_default().insert(*k);
            }
            let mut a: Vec<BTreeSet<u64>> = by_instance.into_values().collect();
            let mut b: Vec<BTreeSet<u64>> = by_subtask.into_values().collect();
            a.sort();
            b.sort();
            assert_eq!(
                a, b,
                "{ctx}: key partition differs from the key-group assignment"
            );
        }
    }
}

#[test]
fn key_by_with_string_keys_and_small_max_parallelism() {
    let mut cfg = common::cfg(16, 2);
    cfg.max_parallelism = 4;
    for down in [1, 3, 4] {
        let env = Env::with_config(cfg.clone());
        let out = env
            .generate(10_000, |i| format!("key-{}", i % 37))
            .set_parallelism(2)
            .key_by(|s: &String| s.clone())
            .process(
                |k: &String,
                 s: &mut ValueState<u64>,
                 _x: String,
                 out: &mut Collector<(String, u64)>| {
                    let c = s.get_or_insert_with(|| 0);
                    *c += 1;
                    out.collect((k.clone(), *c));
                },
            )
            .set_parallelism(down)
            .collect();
        env.execute("string-keys").unwrap();
        let mut finals: BTreeMap<String, u64> = BTreeMap::new();
        for (k, c) in out.take() {
            let e = finals.entry(k).or_default();
            *e = (*e).max(c);
        }
        let expected: BTreeMap<String, u64> =
            common::counts((0..10_000u64).map(|i| format!("key-{}", i % 37)))
                .into_iter()
                .collect();
        assert_eq!(finals, expected, "parallelism {down}");
    }
    // Above max_parallelism a keyed operator cannot run.
    let env = Env::with_config(cfg.clone());
    env.generate(10, |i| i)
        .key_by(|x: &u64| *x)
        .reduce(|a, b| a + b)
        .set_parallelism(5)
        .discard();
    assert!(matches!(
        env.execute("too-wide"),
        Err(JobError::Plan {
            source: PlanError::BadParallelism {
                parallelism: 5,
                max: 4,
                ..
            },
            ..
        })
    ));
}
