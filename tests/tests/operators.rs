//! Every operator at parallelism 1 and > 1, compared with a sequential computation.
//!
//! Each test runs its pipeline under the default config (100 000 records, batches of 1024)
//! and a small one (batches of 7, channels of 2 batches), over source/operator parallelism
//! pairs that make forward (chained) and rebalanced edges, odd and even splits.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use weir::{
    BroadcastProcessFunction, CoProcessFunction, Collector, Env, EnvConfig, KeyedProcessFunction,
    KeyedState, MapState, ProcessFunction, ValueState,
};

use common::{assert_multiset_eq, configs, InstanceId, PAR_PAIRS};

/// Runs `f(ctx, cfg, n, source_parallelism, operator_parallelism)` for every config and pair.
fn for_each_setup(mut f: impl FnMut(&str, &EnvConfig, u64, usize, usize)) {
    for (tag, cfg, n) in configs() {
        for (ps, po) in PAR_PAIRS {
            let ctx = format!("{tag} config, parallelism {ps} -> {po}");
            f(&ctx, &cfg, n, ps, po);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Stateless one-input operators

#[test]
fn map_matches_sequential() {
    for_each_setup(|ctx, cfg, n, ps, po| {
        let env = Env::with_config(cfg.clone());
        let out = env
            .generate(n, |i| i)
            .set_parallelism(ps)
            .map(|x: u64| format!("v{}", x * 3 + 1))
            .set_parallelism(po)
            .collect();
        let result = env.execute("map").unwrap();
        let expected: Vec<String> = (0..n).map(|x| format!("v{}", x * 3 + 1)).collect();
        assert_multiset_eq(out.take(), expected, ctx);
        let map = &result.operators[1];
        assert_eq!((map.name.as_str(), map.parallelism), ("map", po), "{ctx}");
        assert_eq!((map.records_in, map.records_out), (n, n), "{ctx}");
    });
}

#[test]
fn filter_matches_sequential() {
    for_each_setup(|ctx, cfg, n, ps, po| {
        let env = Env::with_config(cfg.clone());
        let out = env
            .generate(n, |i| i)
            .set_parallelism(ps)
            .filter(|x: &u64| !x.is_multiple_of(3) && x % 7 != 1)
            .set_parallelism(po)
            .collect();
        let result = env.execute("filter").unwrap();
        let expected: Vec<u64> = (0..n).filter(|x| x % 3 != 0 && x % 7 != 1).collect();
        let kept = expected.len() as u64;
        assert_multiset_eq(out.take(), expected, ctx);
        let filter = &result.operators[1];
        assert_eq!((filter.records_in, filter.records_out), (n, kept), "{ctx}");
    });
}

#[test]
fn flat_map_matches_sequential() {
    for_each_setup(|ctx, cfg, n, ps, po| {
        let env = Env::with_config(cfg.clone());
        // 0, 1, 2 or 3 outputs per input.
        let out = env
            .generate(n, |i| i)
            .set_parallelism(ps)
            .flat_map(|x: u64| (0..x % 4).map(move |j| (x, j)))
            .set_parallelism(po)
            .collect();
        env.execute("flat_map").unwrap();
        let expected: Vec<(u64, u64)> = (0..n)
            .flat_map(|x| (0..x % 4).map(move |j| (x, j)))
            .collect();
        assert_multiset_eq(out.take(), expected, ctx);
    });
}

#[test]
fn process_closure_matches_sequential() {
    for_each_setup(|ctx, cfg, n, ps, po| {
        let env = Env::with_config(cfg.clone());
        let out = env
            .generate(n, |i| i)
            .set_parallelism(ps)
            .process(move |x: u64, out: &mut Collector<u64>| {
                if !x.is_multiple_of(5) {
                    out.collect(x);
                    if x.is_multiple_of(2) {
                        out.collect(x + n);
                    }
                }
            })
            .set_parallelism(po)
            .collect();
        env.execute("process-closure").unwrap();
        let mut expected = Vec::new();
        for x in 0..n {
            if x % 5 != 0 {
                expected.push(x);
                if x % 2 == 0 {
                    expected.push(x + n);
                }
            }
        }
        assert_multiset_eq(out.take(), expected, ctx);
    });
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
enum Tagged {
    Item(u64),
    Summary { count: u64, sum: u64 },
}

/// Doubles every record and, at end of input, emits what this instance saw.
#[derive(Debug, Clone, Default)]
struct Summarize {
    count: u64,
    sum: u64,
    ended: bool,
}

impl ProcessFunction<u64, Tagged> for Summarize {
    fn process(&mut self, x: u64, out: &mut Collector<Tagged>) {
        assert!(!self.ended, "a record arrived after end_of_input");
        self.count += 1;
        self.sum += x;
        out.collect(Tagged::Item(x * 2));
    }
    fn end_of_input(&mut self, out: &mut Collector<Tagged>) {
        assert!(!self.ended, "end_of_input was called twice");
        self.ended = true;
        out.collect(Tagged::Summary {
            count: self.count,
            sum: self.sum,
        });
    }
}

#[test]
fn process_struct_with_end_of_input_emits_one_summary_per_subtask() {
    for_each_setup(|ctx, cfg, n, ps, po| {
        let env = Env::with_config(cfg.clone());
        let out = env
            .generate(n, |i| i)
            .set_parallelism(ps)
            .process(Summarize::default())
            .set_parallelism(po)
            .collect();
        let result = env.execute("process-struct").unwrap();
        let (items, summaries): (Vec<Tagged>, Vec<Tagged>) = out
            .take()
            .into_iter()
            .partition(|t| matches!(t, Tagged::Item(_)));
        assert_multiset_eq(items, (0..n).map(|x| Tagged::Item(x * 2)).collect(), ctx);
        assert_eq!(summaries.len(), po, "{ctx}: one summary per subtask");
        let (mut count, mut sum) = (0, 0);
        for s in &summaries {
            let Tagged::Summary { count: c, sum: s } = s else {
                unreachable!()
            };
            assert!(
                *c > 0,
                "{ctx}: every subtask received records: {summaries:?}"
            );
            count += c;
            sum += s;
        }
        assert_eq!(count, n, "{ctx}");
        assert_eq!(sum, n * (n - 1) / 2, "{ctx}");
        let op = &result.operators[1];
        assert_eq!((op.records_in, op.records_out), (n, n + po as u64), "{ctx}");
    });
}

// ---------------------------------------------------------------------------------------------
// Keyed operators

/// Sequential running (count, sum) per key, in record order: the expected output of one
/// upstream subtask.
fn running_count_sum(n: u64, keys: u64) -> Vec<(u64, u64, u64)> {
    let mut state: HashMap<u64, (u64, u64)> = HashMap::new();
    (0..n)
        .map(|x| {
            let k = x % keys;
            let s = state.entry(k).or_default();
            s.0 += 1;
            s.1 += x;
            (k, s.0, s.1)
        })
        .collect()
}

#[test]
fn keyed_process_closure_with_value_state() {
    const KEYS: u64 = 97;
    for_each_setup(|ctx, cfg, n, ps, po| {
        let env = Env::with_config(cfg.clone());
        let out = env
            .generate(n, |i| i)
            .set_parallelism(ps)
            .key_by(|x: &u64| x % KEYS)
            .process(
                |k: &u64,
                 s: &mut ValueState<(u64, u64)>,
                 x: u64,
                 out: &mut Collector<(u64, u64, u64)>| {
                    assert_eq!(x % KEYS, *k, "the key passed is the record's key");
                    let st = s.get_or_insert_with(|| (0, 0));
                    st.0 += 1;
                    st.1 += x;
                    out.collect((*k, st.0, st.1));
                },
            )
            .set_parallelism(po)
            .collect();
        let result = env.execute("keyed-value-state").unwrap();
        let got = out.take();
        let expected = running_count_sum(n, KEYS);
        // Counts per key are 1..=c whatever the arrival order.
        assert_multiset_eq(
            got.iter().map(|&(k, c, _)| (k, c)).collect(),
            expected.iter().map(|&(k, c, _)| (k, c)).collect(),
            ctx,
        );
        // The last value per key is the sequential total.
        let mut last: HashMap<u64, (u64, u64)> = HashMap::new();
        for &(k, c, s) in &got {
            let e = last.entry(k).or_default();
            if c > e.0 {
                *e = (c, s);
            }
        }
        let mut totals: HashMap<u64, (u64, u64)> = HashMap::new();
        for &(k, c, s) in &expected {
            totals.insert(k, (c, s));
        }
        assert_eq!(last, totals, "{ctx}: final (count, sum) per key");
        if ps == 1 {
            // One upstream subtask: each key's records arrive in order, so even the running
            // sums equal the sequential ones.
            assert_multiset_eq(got, expected, ctx);
        }
        let op = &result.operators[1];
        assert_eq!(op.name, "keyed_process", "{ctx}");
        assert_eq!(
            (op.parallelism, op.records_in, op.records_out),
            (po, n, n),
            "{ctx}"
        );
    });
}

#[test]
fn keyed_process_closure_with_map_state() {
    const KEYS: u64 = 31;
    const SUBS: u64 = 7;
    for_each_setup(|ctx, cfg, n, ps, po| {
        let env = Env::with_config(cfg.clone());
        let out = env
            .generate(n, |i| i)
            .set_parallelism(ps)
            .key_by(|x: &u64| x % KEYS)
            .process(
                |k: &u64,
                 m: &mut MapState<u64, u64>,
                 x: u64,
                 out: &mut Collector<(u64, u64, u64, usize)>| {
                    let sub = (x / KEYS) % SUBS;
                    let c = {
                        let e = m.entry(sub).or_insert(0);
                        *e += 1;
                        *e
                    };
                    assert_eq!(m.get(&sub), Some(&c));
                    assert!(m.contains(&sub));
                    out.collect((*k, sub, c, m.len()));
                },
            )
            .set_parallelism(po)
            .collect();
        env.execute("keyed-map-state").unwrap();
        let got = out.take();
        let mut state: HashMap<u64, HashMap<u64, u64>> = HashMap::new();
        let mut expected = Vec::new();
        for x in 0..n {
            let (k, sub) = (x % KEYS, (x / KEYS) % SUBS);
            let c = state.entry(k).or_default().entry(sub).or_insert(0);
            *c += 1;
            expected.push((k, sub, *c));
        }
        assert_multiset_eq(
            got.iter().map(|&(k, s, c, _)| (k, s, c)).collect(),
            expected,
            ctx,
        );
        // The map of each key ends with every sub-key it saw.
        let mut max_len: BTreeMap<u64, usize> = BTreeMap::new();
        for &(k, _, _, len) in &got {
            let e = max_len.entry(k).or_default();
            *e = (*e).max(len);
        }
        let want: BTreeMap<u64, usize> = state.iter().map(|(k, m)| (*k, m.len())).collect();
        assert_eq!(max_len, want, "{ctx}");
    });
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct KeyStats {
    count: u64,
    sum: u64,
    max: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
enum KeyedOut {
    Key {
        key: u64,
        count: u64,
        sum: u64,
        max: u64,
    },
    Subtask {
        keys: u64,
        records: u64,
    },
}

/// Emits nothing per record; at end of input, one record per key and one per subtask.
#[derive(Debug, Clone)]
struct StatsAtEnd {
    keys: u64,
    records: u64,
    ended: bool,
}

impl KeyedProcessFunction<u64, u64, KeyedOut> for StatsAtEnd {
    type State = KeyStats;
    fn process(&mut self, key: &u64, s: &mut KeyStats, x: u64, _out: &mut Collector<KeyedOut>) {
        assert!(!self.ended, "a record arrived after end_of_input");
        assert_eq!(x % self.keys, *key);
        self.records += 1;
        s.count += 1;
        s.sum += x;
        s.max = s.max.max(x);
    }
    fn end_of_input(
        &mut self,
        state: &mut KeyedState<u64, KeyStats>,
        out: &mut Collector<KeyedOut>,
    ) {
        assert!(!self.ended, "end_of_input was called twice");
        self.ended = true;
        for (k, s) in state.iter() {
            assert_eq!(state.get(k), Some(s));
            out.collect(KeyedOut::Key {
                key: *k,
                count: s.count,
                sum: s.sum,
                max: s.max,
            });
        }
        // iter_mut reaches every entry too.
        let mut visited = 0;
        for (_, s) in state.iter_mut() {
            s.max += 0;
            visited += 1;
        }
        assert_eq!(visited, state.len());
        out.collect(KeyedOut::Subtask {
            keys: state.len() as u64,
            records: self.records,
        });
    }
}

#[test]
fn keyed_process_with_struct_and_end_of_input_over_keyed_state() {
    const KEYS: u64 = 1000;
    for_each_setup(|ctx, cfg, n, ps, po| {
        let env = Env::with_config(cfg.clone());
        let out = env
            .generate(n, |i| i)
            .set_parallelism(ps)
            .key_by(|x: &u64| x % KEYS)
            .process_with(StatsAtEnd {
                keys: KEYS,
                records: 0,
                ended: false,
            })
            .set_parallelism(po)
            .collect();
        env.execute("keyed-struct").unwrap();
        let (keys, subtasks): (Vec<KeyedOut>, Vec<KeyedOut>) = out
            .take()
            .into_iter()
            .partition(|o| matches!(o, KeyedOut::Key { .. }));
        let mut stats: BTreeMap<u64, KeyStats> = BTreeMap::new();
        for x in 0..n {
            let s = stats.entry(x % KEYS).or_default();
            s.count += 1;
            s.sum += x;
            s.max = s.max.max(x);
        }
        let expected: Vec<KeyedOut> = stats
            .iter()
            .map(|(k, s)| KeyedOut::Key {
                key: *k,
                count: s.count,
                sum: s.sum,
                max: s.max,
            })
            .collect();
        // Each key exactly once, over all subtasks, with its sequential totals.
        assert_multiset_eq(keys, expected, ctx);
        assert_eq!(subtasks.len(), po, "{ctx}: one end record per subtask");
        let (mut nkeys, mut nrec) = (0, 0);
        for s in subtasks {
            let KeyedOut::Subtask { keys, records } = s else {
                unreachable!()
            };
            nkeys += keys;
            nrec += records;
        }
        assert_eq!((nkeys, nrec), (KEYS, n), "{ctx}");
    });
}

#[test]
fn reduce_matches_sequential() {
    const KEYS: u64 = 13;
    for_each_setup(|ctx, cfg, n, ps, po| {
        let env = Env::with_config(cfg.clone());
        let out = env
            .generate(n, |i| i)
            .set_parallelism(ps)
            .map(|x: u64| (x % KEYS, x))
            .set_parallelism(ps)
            .key_by(|r: &(u64, u64)| r.0)
            .reduce(|a, b| {
                assert_eq!(a.0, b.0, "reduce gets records of one key");
                (a.0, a.1 + b.1)
            })
            .set_parallelism(po)
            .collect();
        let result = env.execute("reduce").unwrap();
        let got = out.take();
        assert_eq!(got.len() as u64, n, "{ctx}: one output per input");
        let expected: Vec<(u64, u64)> = running_count_sum(n, KEYS)
            .into_iter()
            .map(|(k, _, s)| (k, s))
            .collect();
        let mut finals: HashMap<u64, u64> = HashMap::new();
        for &(k, s) in &expected {
            finals.insert(k, s);
        }
        let mut got_finals: HashMap<u64, u64> = HashMap::new();
        let mut got_counts: HashMap<u64, u64> = HashMap::new();
        for &(k, s) in &got {
            let e = got_finals.entry(k).or_default();
            *e = (*e).max(s);
            *got_counts.entry(k).or_default() += 1;
        }
        assert_eq!(got_finals, finals, "{ctx}: final sum per key");
        assert_eq!(
            got_counts,
            common::counts((0..n).map(|x| x % KEYS)),
            "{ctx}: outputs per key"
        );
        if ps == 1 {
            assert_multiset_eq(got, expected, ctx);
        }
        let op = result
            .operators
            .iter()
            .find(|o| o.name == "reduce")
            .unwrap();
        assert_eq!((op.records_in, op.records_out), (n, n), "{ctx}");
    });
}

#[test]
fn reduce_by_counts_words() {
    const WORDS: u64 = 101;
    for_each_setup(|ctx, cfg, n, ps, po| {
        let env = Env::with_config(cfg.clone());
        let out = env
            .generate(n, |i| format!("w{}", (i * 7) % WORDS))
            .set_parallelism(ps)
            .key_by(|w: &String| w.clone())
            .reduce_by(|w| (w, 1u64), |(w, a), (_, b)| (w, a + b))
            .set_parallelism(po)
            .collect();
        env.execute("reduce_by").unwrap();
        // Running counts per word are 1..=count whatever the order.
        let mut seen: HashMap<String, u64> = HashMap::new();
        let expected: Vec<(String, u64)> = (0..n)
            .map(|i| {
                let w = format!("w{}", (i * 7) % WORDS);
                let c = seen.entry(w.clone()).or_default();
                *c += 1;
                (w, *c)
            })
            .collect();
        assert_multiset_eq(out.take(), expected, ctx);
    });
}

// ---------------------------------------------------------------------------------------------
// Union

#[test]
fn union_of_two_streams_of_different_parallelism() {
    for (tag, cfg, n) in configs() {
        for po in [1, 2, 3] {
            let ctx = format!("{tag} config, union -> parallelism {po}");
            let env = Env::with_config(cfg.clone());
            let a = env.generate(n, |i| i).set_parallelism(1);
            let b = env.generate(n / 2, |i| 10_000_000 + i).set_parallelism(3);
            let out = a
                .union([b])
                .map(|x: u64| x + 1)
                .set_parallelism(po)
                .collect();
            let result = env.execute("union2").unwrap();
            let expected: Vec<u64> = (0..n)
                .chain((0..n / 2).map(|i| 10_000_000 + i))
                .map(|x| x + 1)
                .collect();
            assert_multiset_eq(out.take(), expected, &ctx);
            let map = result.operators.iter().find(|o| o.name == "map").unwrap();
            assert_eq!(map.records_in, n + n / 2, "{ctx}");
        }
    }
}

#[test]
fn union_of_three_streams_into_sink_and_keyed_operator() {
    for (tag, cfg, n) in configs() {
        let ctx = format!("{tag} config, union of 3");
        let env = Env::with_config(cfg.clone());
        let a = env.generate(n, |i| i % 50).set_parallelism(1);
        let b = env
            .from_collection((0..n / 3).map(|i| (i * 3) % 50).collect())
            .set_parallelism(2);
        let c = env
            .generate(n / 5, |i| i % 10)
            .set_parallelism(3)
            .map(|x| x + 40)
            .set_parallelism(3);
        let all = a.union([b, c]);
        let direct = all.clone().collect();
        let counts = all
            .key_by(|x: &u64| *x)
            .reduce_by(|x| (x, 1u64), |(x, a), (_, b)| (x, a + b))
            .set_parallelism(3)
            .collect();
        env.execute("union3").unwrap();
        let inputs: Vec<u64> = (0..n)
            .map(|i| i % 50)
            .chain((0..n / 3).map(|i| (i * 3) % 50))
            .chain((0..n / 5).map(|i| i % 10 + 40))
            .collect();
        let mut seen: HashMap<u64, u64> = HashMap::new();
        let expected_counts: Vec<(u64, u64)> = inputs
            .iter()
            .map(|&x| {
                let c = seen.entry(x).or_default();
                *c += 1;
                (x, *c)
            })
            .collect();
        assert_multiset_eq(direct.take(), inputs, &ctx);
        assert_multiset_eq(counts.take(), expected_counts, &ctx);
    }
}

// ---------------------------------------------------------------------------------------------
// connect

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
enum CoOut {
    A(u64),
    B(String),
    End { a: u64, b: u64 },
}

#[derive(Debug, Clone, Default)]
struct Co {
    a: u64,
    b: u64,
    ended: bool,
}

impl CoProcessFunction<u64, String, CoOut> for Co {
    fn process1(&mut self, x: u64, out: &mut Collector<CoOut>) {
        assert!(!self.ended);
        self.a += 1;
        out.collect(CoOut::A(x * 2));
    }
    fn process2(&mut self, s: String, out: &mut Collector<CoOut>) {
        assert!(!self.ended);
        self.b += 1;
        out.collect(CoOut::B(s.to_uppercase()));
    }
    fn end_of_input(&mut self, out: &mut Collector<CoOut>) {
        assert!(!self.ended, "end_of_input was called twice");
        self.ended = true;
        out.collect(CoOut::End {
            a: self.a,
            b: self.b,
        });
    }
}

#[test]
fn connect_process_matches_sequential() {
    for_each_setup(|ctx, cfg, n, ps, po| {
        let env = Env::with_config(cfg.clone());
        let first = env.generate(n, |i| i).set_parallelism(ps);
        let second = env.generate(n / 3, |i| format!("s{i}")).set_parallelism(2);
        let out = first
            .connect(second)
            .process(Co::default())
            .set_parallelism(po)
            .collect();
        let result = env.execute("co_process").unwrap();
        let mut a = Vec::new();
        let mut b = Vec::new();
        let mut ends = Vec::new();
        for o in out.take() {
            match o {
                CoOut::A(x) => a.push(x),
                CoOut::B(s) => b.push(s),
                CoOut::End { a, b } => ends.push((a, b)),
            }
        }
        assert_multiset_eq(a, (0..n).map(|x| x * 2).collect(), ctx);
        assert_multiset_eq(b, (0..n / 3).map(|i| format!("S{i}")).collect(), ctx);
        assert_eq!(ends.len(), po, "{ctx}: end_of_input once per subtask");
        let total = ends.iter().fold((0, 0), |(x, y), (a, b)| (x + a, y + b));
        assert_eq!(total, (n, n / 3), "{ctx}");
        let op = result
            .operators
            .iter()
            .find(|o| o.name == "co_process")
            .unwrap();
        assert_eq!(op.records_in, n + n / 3, "{ctx}");
        assert_eq!(op.records_out, n + n / 3 + po as u64, "{ctx}");
    });
}

#[test]
fn connect_map_matches_sequential() {
    for_each_setup(|ctx, cfg, n, ps, po| {
        let env = Env::with_config(cfg.clone());
        let first = env.generate(n, |i| i).set_parallelism(ps);
        let second = env
            .from_collection((0..(n / 2) as i32).collect())
            .set_parallelism(3);
        let out = first
            .connect(second)
            .map(|x: u64| x as i64, |y: i32| -(y as i64) - 1)
            .set_parallelism(po)
            .collect();
        env.execute("co_map").unwrap();
        let expected: Vec<i64> = (0..n as i64)
            .chain((0..(n / 2) as i64).map(|y| -y - 1))
            .collect();
        assert_multiset_eq(out.take(), expected, ctx);
    });
}

// ---------------------------------------------------------------------------------------------
// connect_broadcast

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Level {
    min_likes: u64,
    level: String,
}

fn levels_path() -> &'static str {
    concat!(env!("CARGO_MANIFEST_DIR"), "/data/levels.jsonl")
}

fn levels() -> Vec<Level> {
    std::fs::read_to_string(levels_path())
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn level_of(likes: u64, levels: &[Level]) -> String {
    levels
        .iter()
        .filter(|l| l.min_likes <= likes)
        .max_by_key(|l| l.min_likes)
        .map(|l| l.level.clone())
        .unwrap_or_else(|| "none".into())
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
enum BcOut {
    Main {
        likes: u64,
        level: String,
        thresholds: usize,
    },
    Seen {
        instance: u64,
        min_likes: u64,
    },
    End {
        instance: u64,
        thresholds: usize,
        main: u64,
    },
}

/// Classifies main records by the thresholds broadcast so far.
#[derive(Debug, Clone, Default)]
struct Classify {
    id: InstanceId,
    main: u64,
}

impl BroadcastProcessFunction<u64, Level, BcOut> for Classify {
    type State = Vec<Level>;
    fn process_element(&mut self, likes: u64, state: &Vec<Level>, out: &mut Collector<BcOut>) {
        self.main += 1;
        out.collect(BcOut::Main {
            likes,
            level: level_of(likes, state),
            thresholds: state.len(),
        });
    }
    fn process_broadcast(&mut self, l: Level, state: &mut Vec<Level>, out: &mut Collector<BcOut>) {
        out.collect(BcOut::Seen {
            instance: self.id.get(),
            min_likes: l.min_likes,
        });
        state.push(l);
    }
    fn end_of_input(&mut self, state: &Vec<Level>, out: &mut Collector<BcOut>) {
        out.collect(BcOut::End {
            instance: self.id.get(),
            thresholds: state.len(),
            main: self.main,
        });
    }
}

fn run_broadcast(cfg: &EnvConfig, n: u64, ps: usize, po: usize, first: bool) -> Vec<BcOut> {
    let env = Env::with_config(cfg.clone());
    let main = env.generate(n, |i| (i * 7919) % 20_000).set_parallelism(ps);
    let rules = env.read_jsonl::<Level>(levels_path());
    let mut connected = main.connect_broadcast(rules);
    if first {
        connected = connected.broadcast_first();
    }
    let out = connected
        .process(Classify::default())
        .set_parallelism(po)
        .collect();
    env.execute("broadcast").unwrap();
    out.take()
}

/// Checks what does not depend on timing: every main record once, every subtask saw every
/// broadcast record once, and the state at end of input is complete.
fn check_broadcast_common(out: &[BcOut], n: u64, po: usize, levels: &[Level], ctx: &str) {
    let likes: Vec<u64> = out
        .iter()
        .filter_map(|o| match o {
            BcOut::Main { likes, .. } => Some(*likes),
            _ => None,
        })
        .collect();
    assert_multiset_eq(likes, (0..n).map(|i| (i * 7919) % 20_000).collect(), ctx);
    let mut seen: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for o in out {
        if let BcOut::Seen {
            instance,
            min_likes,
        } = o
        {
            seen.entry(*instance).or_default().push(*min_likes);
        }
    }
    assert_eq!(
        seen.len(),
        po,
        "{ctx}: every subtask received the broadcast"
    );
    let all: Vec<u64> = levels.iter().map(|l| l.min_likes).collect();
    for (instance, got) in &seen {
        assert_multiset_eq(
            got.clone(),
            all.clone(),
            &format!("{ctx}: instance {instance}"),
        );
    }
    let ends: Vec<(u64, usize, u64)> = out
        .iter()
        .filter_map(|o| match o {
            BcOut::End {
                instance,
                thresholds,
                main,
            } => Some((*instance, *thresholds, *main)),
            _ => None,
        })
        .collect();
    assert_eq!(ends.len(), po, "{ctx}: end_of_input once per subtask");
    let end_instances: BTreeSet<u64> = ends.iter().map(|e| e.0).collect();
    let seen_instances: BTreeSet<u64> = seen.keys().copied().collect();
    assert_eq!(end_instances, seen_instances, "{ctx}");
    assert!(
        ends.iter().all(|e| e.1 == levels.len()),
        "{ctx}: full broadcast state at end: {ends:?}"
    );
    assert_eq!(ends.iter().map(|e| e.2).sum::<u64>(), n, "{ctx}");
}

#[test]
fn broadcast_first_every_main_record_sees_the_full_state() {
    let levels = levels();
    assert_eq!(levels.len(), 5);
    for_each_setup(|ctx, cfg, n, ps, po| {
        let out = run_broadcast(cfg, n, ps, po, true);
        check_broadcast_common(&out, n, po, &levels, ctx);
        for o in &out {
            if let BcOut::Main {
                likes,
                level,
                thresholds,
            } = o
            {
                assert_eq!(
                    *thresholds,
                    levels.len(),
                    "{ctx}: record {likes} saw a partial state"
                );
                assert_eq!(*level, level_of(*likes, &levels), "{ctx}: record {likes}");
            }
        }
    });
}

#[test]
fn broadcast_without_broadcast_first_delivers_everything() {
    let levels = levels();
    for_each_setup(|ctx, cfg, n, ps, po| {
        let out = run_broadcast(cfg, n, ps, po, false);
        check_broadcast_common(&out, n, po, &levels, ctx);
        for o in &out {
            if let BcOut::Main { thresholds, .. } = o {
                assert!(*thresholds <= levels.len(), "{ctx}");
            }
        }
    });
}

/// A broadcast side of parallelism 2 reaches every one of 3 main subtasks, record for record.
#[test]
fn broadcast_from_parallel_side_reaches_every_main_subtask() {
    #[derive(Debug, Clone, Default)]
    struct Gather {
        id: InstanceId,
        mains: u64,
    }
    impl BroadcastProcessFunction<u64, u64, (u64, u64, u64)> for Gather {
        type State = BTreeSet<u64>;
        fn process_element(
            &mut self,
            x: u64,
            s: &BTreeSet<u64>,
            out: &mut Collector<(u64, u64, u64)>,
        ) {
            self.mains += 1;
            // (kind 0 = main, record, broadcast values seen so far)
            out.collect((0, x, s.len() as u64));
        }
        fn process_broadcast(
            &mut self,
            b: u64,
            s: &mut BTreeSet<u64>,
            out: &mut Collector<(u64, u64, u64)>,
        ) {
            assert!(s.insert(b), "broadcast record {b} arrived twice");
            out.collect((1, self.id.get(), b));
        }
        fn end_of_input(&mut self, s: &BTreeSet<u64>, out: &mut Collector<(u64, u64, u64)>) {
            out.collect((2, self.id.get(), s.len() as u64 * 1_000_000 + self.mains));
        }
    }
    const B: u64 = 500;
    for (tag, cfg, n) in configs() {
        let ctx = format!("{tag} config");
        let env = Env::with_config(cfg.clone());
        let main = env.generate(n, |i| i).set_parallelism(3);
        let side = env.generate(B, |i| i * 10).set_parallelism(2);
        let out = main
            .connect_broadcast(side)
            .broadcast_first()
            .process(Gather::default())
            .set_parallelism(3)
            .collect();
        env.execute("broadcast-parallel").unwrap();
        let out = out.take();
        let mains: Vec<(u64, u64)> = out
            .iter()
            .filter(|o| o.0 == 0)
            .map(|o| (o.1, o.2))
            .collect();
        assert_multiset_eq(mains, (0..n).map(|x| (x, B)).collect(), &ctx);
        let mut per_instance: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for o in out.iter().filter(|o| o.0 == 1) {
            per_instance.entry(o.1).or_default().push(o.2);
        }
        assert_eq!(per_instance.len(), 3, "{ctx}");
        for v in per_instance.values() {
            assert_multiset_eq(v.clone(), (0..B).map(|i| i * 10).collect(), &ctx);
        }
        let ends: Vec<u64> = out.iter().filter(|o| o.0 == 2).map(|o| o.2).collect();
        assert_eq!(ends.len(), 3, "{ctx}");
        assert!(ends.iter().all(|e| e / 1_000_000 == B), "{ctx}: {ends:?}");
        assert_eq!(ends.iter().map(|e| e % 1_000_000).sum::<u64>(), n, "{ctx}");
    }
}
