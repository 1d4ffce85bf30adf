//! Chaining on and off give equal results; end of input drains every multi-stage pipeline.

mod common;

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use weir::{
    CollectSink, Collector, Env, EnvConfig, JobResult, KeyedProcessFunction, KeyedState,
    ProcessFunction, ValueState,
};

use common::{assert_multiset_eq, cfg, configs, PAR_PAIRS};

/// source -> map -> filter -> flat_map -> key_by -> reduce -> map -> collect, built on `env`.
/// The running count per key does not depend on arrival order, so the output multiset is
/// deterministic.
fn pipeline(env: &Env, n: u64, ps: usize, po: usize) -> CollectSink<u64> {
    env.generate(n, |i| i)
        .set_parallelism(ps)
        .map(|x: u64| x * 3)
        .set_parallelism(ps)
        .filter(|x: &u64| x.is_multiple_of(2))
        .set_parallelism(po)
        .flat_map(|x: u64| [x, x + 1])
        .set_parallelism(po)
        .key_by(|x: &u64| x % 101)
        .reduce_by(|x| (x % 101, 1u64), |(k, a), (_, b)| (k, a + b))
        .set_parallelism(po)
        .map(|(k, c)| k * 1_000_000 + c)
        .set_parallelism(po)
        .collect()
}

fn sequential(n: u64) -> Vec<u64> {
    let mut counts: HashMap<u64, u64> = HashMap::new();
    let mut out = Vec::new();
    for x in (0..n).map(|x| x * 3).filter(|x| x % 2 == 0) {
        for y in [x, x + 1] {
            let c = counts.entry(y % 101).or_default();
            *c += 1;
            out.push((y % 101) * 1_000_000 + *c);
        }
    }
    out
}

fn run(cfg: &EnvConfig, chaining: bool, n: u64, ps: usize, po: usize) -> (Vec<u64>, JobResult) {
    let mut cfg = cfg.clone();
    cfg.chaining = chaining;
    let env = Env::with_config(cfg);
    let out = pipeline(&env, n, ps, po);
    let result = env.execute("chain").unwrap();
    let mut v = out.take();
    v.sort();
    (v, result)
}

/// (name, parallelism, records in, records out) per operator.
fn counters(r: &JobResult) -> Vec<(String, usize, u64, u64)> {
    r.operators
        .iter()
        .map(|o| (o.name.clone(), o.parallelism, o.records_in, o.records_out))
        .collect()
}

#[test]
fn chaining_on_and_off_give_equal_results() {
    for (tag, cfg, n) in configs() {
        let expected = sequential(n);
        for (ps, po) in PAR_PAIRS {
            let ctx = format!("{tag} config, parallelism {ps} -> {po}");
            let (on, r_on) = run(&cfg, true, n, ps, po);
            let (off, r_off) = run(&cfg, false, n, ps, po);
            assert!(on == off, "{ctx}: chaining on and off differ");
            assert_multiset_eq(on, expected.clone(), &ctx);
            assert_eq!(counters(&r_on), counters(&r_off), "{ctx}");
            let names: Vec<&str> = r_on.operators.iter().map(|o| o.name.as_str()).collect();
            assert_eq!(
                names,
                ["generate", "map", "filter", "flat_map", "reduce", "map", "collect"],
                "{ctx}"
            );
            let c = counters(&r_on);
            assert_eq!(c[0].3, n, "{ctx}: source out");
            assert_eq!(c[6].2, expected.len() as u64, "{ctx}: sink in");
        }
    }
}

/// A stream read by two operators (a fan-out), and an explicit forward, with chaining on and
/// off.
#[test]
fn fan_out_and_explicit_forward_with_and_without_chaining() {
    for (tag, base, n) in configs() {
        for p in [1, 3] {
            let mut results = Vec::new();
            for chaining in [true, false] {
                let mut cfg = base.clone();
                cfg.chaining = chaining;
                let env = Env::with_config(cfg);
                let doubled = env
                    .generate(n, |i| i)
                    .set_parallelism(p)
                    .map(|x: u64| x * 2)
                    .set_parallelism(p);
                let a = doubled
                    .clone()
                    .forward()
                    .map(|x| x + 1)
                    .set_parallelism(p)
                    .collect();
                let b = doubled.filter(|x| x % 3 == 0).set_parallelism(p).collect();
                env.execute("fan-out").unwrap();
                let (a, b) = (common::sorted(a.take()), common::sorted(b.take()));
                let ctx = format!("{tag} config, parallelism {p}, chaining {chaining}");
                assert_multiset_eq(a.clone(), (0..n).map(|x| x * 2 + 1).collect(), &ctx);
                assert_multiset_eq(
                    b.clone(),
                    (0..n).map(|x| x * 2).filter(|x| x % 3 == 0).collect(),
                    &ctx,
                );
                results.push((a, b));
            }
            assert!(results[0] == results[1], "{tag} config, parallelism {p}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// End of input

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
enum Msg {
    Data(u64),
    /// Stage `stage` ended after seeing `seen` records (data and earlier stages' markers).
    End {
        stage: u8,
        seen: u64,
    },
}

/// Forwards everything; at end of input, emits its own `End` with how much it saw.
#[derive(Debug, Clone)]
struct Stage {
    stage: u8,
    seen: u64,
    ended: bool,
}

impl Stage {
    fn new(stage: u8) -> Self {
        Stage {
            stage,
            seen: 0,
            ended: false,
        }
    }
}

impl ProcessFunction<Msg, Msg> for Stage {
    fn process(&mut self, m: Msg, out: &mut Collector<Msg>) {
        assert!(
            !self.ended,
            "stage {}: a record after end_of_input",
            self.stage
        );
        self.seen += 1;
        out.collect(m);
    }
    fn end_of_input(&mut self, out: &mut Collector<Msg>) {
        assert!(!self.ended, "stage {}: end_of_input twice", self.stage);
        self.ended = true;
        out.collect(Msg::End {
            stage: self.stage,
            seen: self.seen,
        });
    }
}

/// The keyed variant: counts per key in state, and at end of input its total from the state.
#[derive(Debug, Clone)]
struct KeyedStage {
    ended: bool,
}

impl KeyedProcessFunction<u64, Msg, Msg> for KeyedStage {
    type State = ValueState<u64>;
    fn process(&mut self, _k: &u64, s: &mut ValueState<u64>, m: Msg, out: &mut Collector<Msg>) {
        assert!(!self.ended, "keyed stage: a record after end_of_input");
        *s.get_or_insert_with(|| 0) += 1;
        out.collect(m);
    }
    fn end_of_input(
        &mut self,
        state: &mut KeyedState<u64, ValueState<u64>>,
        out: &mut Collector<Msg>,
    ) {
        assert!(!self.ended, "keyed stage: end_of_input twice");
        self.ended = true;
        let seen = state.iter().map(|(_, s)| *s.value().unwrap()).sum();
        out.collect(Msg::End { stage: 2, seen });
    }
}

fn msg_key(m: &Msg) -> u64 {
    match m {
        Msg::Data(x) => x % 17,
        Msg::End { stage, seen } => 1000 + *stage as u64 * 7 + seen % 5,
    }
}

#[test]
fn end_of_input_drains_every_stage_with_tiny_channels() {
    const N: u64 = 3000;
    let (pa, pb, pc) = (3usize, 2usize, 1usize);
    for batch in 1..=3 {
        for chaining in [true, false] {
            let ctx = format!("batch {batch}, capacity 1, chaining {chaining}");
            let mut c = cfg(batch, 1);
            c.chaining = chaining;
            let result = common::within_timeout(move || {
                let env = Env::with_config(c);
                let out = env
                    .generate(N, Msg::Data)
                    .set_parallelism(2)
                    .rebalance()
                    .process(Stage::new(1))
                    .set_parallelism(pa)
                    .key_by(msg_key)
                    .process_with(KeyedStage { ended: false })
                    .set_parallelism(pb)
                    .process(Stage::new(3))
                    .set_parallelism(pc)
                    .collect();
                let r = env.execute("drain");
                (r, out.take())
            });
            let (result, out) = result;
            let result = result.unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let data = out.iter().filter(|m| matches!(m, Msg::Data(_))).count() as u64;
            assert_eq!(data, N, "{ctx}: every record reached the sink");
            let ends = |stage: u8| -> Vec<u64> {
                out.iter()
                    .filter_map(|m| match m {
                        Msg::End { stage: s, seen } if *s == stage => Some(*seen),
                        _ => None,
                    })
                    .collect()
            };
            let (e1, e2, e3) = (ends(1), ends(2), ends(3));
            // Each stage's hook ran once per subtask, after all of its input: including the
            // End markers every upstream subtask emitted from its own hook.
            assert_eq!(e1.len(), pa, "{ctx}");
            assert_eq!(e1.iter().sum::<u64>(), N, "{ctx}: stage 1 saw {e1:?}");
            assert_eq!(e2.len(), pb, "{ctx}");
            assert_eq!(
                e2.iter().sum::<u64>(),
                N + pa as u64,
                "{ctx}: stage 2 saw {e2:?}"
            );
            assert_eq!(e3, vec![N + (pa + pb) as u64], "{ctx}: stage 3");
            assert_eq!(out.len() as u64, N + (pa + pb + pc) as u64, "{ctx}");
            // The job's counters agree.
            let ops: Vec<(&str, usize, u64, u64)> = result
                .operators
                .iter()
                .map(|o| (o.name.as_str(), o.parallelism, o.records_in, o.records_out))
                .collect();
            let (a, b) = (pa as u64, pb as u64);
            assert_eq!(
                ops,
                [
                    ("generate", 2, 0, N),
                    ("process", pa, N, N + a),
                    ("keyed_process", pb, N + a, N + a + b),
                    ("process", pc, N + a + b, N + a + b + 1),
                    ("collect", 1, N + a + b + 1, 0),
                ],
                "{ctx}"
            );
        }
    }
}

/// End of input with a two-input operator in the middle: its hook runs once both inputs end.
#[test]
fn end_of_input_through_connect_and_union_with_tiny_channels() {
    for batch in 1..=3 {
        let c = cfg(batch, 1);
        let (n1, n2) = (1500u64, 700u64);
        let (out, result) = common::within_timeout(move || {
            let env = Env::with_config(c);
            let a = env.generate(n1, Msg::Data).set_parallelism(2);
            let b = env
                .generate(n2, |i| Msg::Data(100_000 + i))
                .set_parallelism(3);
            let extra = env
                .generate(5, |i| Msg::Data(200_000 + i))
                .set_parallelism(1);
            #[derive(Clone)]
            struct Both(u64);
            impl weir::CoProcessFunction<Msg, Msg, Msg> for Both {
                fn process1(&mut self, m: Msg, out: &mut Collector<Msg>) {
                    self.0 += 1;
                    out.collect(m)
                }
                fn process2(&mut self, m: Msg, out: &mut Collector<Msg>) {
                    self.0 += 1;
                    out.collect(m)
                }
                fn end_of_input(&mut self, out: &mut Collector<Msg>) {
                    out.collect(Msg::End {
                        stage: 1,
                        seen: self.0,
                    })
                }
            }
            let out = a
                .connect(b.union([extra]))
                .process(Both(0))
                .set_parallelism(2)
                .process(Stage::new(2))
                .set_parallelism(1)
                .collect();
            let r = env.execute("drain-connect").unwrap();
            (out.take(), r)
        });
        let total = n1 + n2 + 5;
        let data = out.iter().filter(|m| matches!(m, Msg::Data(_))).count() as u64;
        assert_eq!(data, total, "batch {batch}");
        let mut e1: Vec<u64> = out
            .iter()
            .filter_map(|m| match m {
                Msg::End { stage: 1, seen } => Some(*seen),
                _ => None,
            })
            .collect();
        e1.sort();
        assert_eq!(e1.len(), 2, "batch {batch}");
        assert_eq!(e1.iter().sum::<u64>(), total, "batch {batch}");
        assert!(
            out.contains(&Msg::End {
                stage: 2,
                seen: total + 2
            }),
            "batch {batch}"
        );
        let sink = result.operators.last().unwrap();
        assert_eq!(sink.records_in, total + 3, "batch {batch}");
    }
}
