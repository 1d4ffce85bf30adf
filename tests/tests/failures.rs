//! Failures: panics in user code, failing sources and sinks, cancellation, plan errors.
//!
//! Every job that is expected to fail runs through `execute_within`, which fails the test if
//! the job does not return within 30 s (a hang).

mod common;

use std::time::{Duration, Instant};

use weir::key_group::{key_group_of, subtask_for_key_group, DEFAULT_MAX_PARALLELISM};
use weir::sink::{Sink, SinkContext};
use weir::source::{Source, SourceContext, SourceStatus};
use weir::{
    Collector, Env, EnvConfig, JobError, PlanError, ProcessFunction, SinkError, SourceError,
    ValueState,
};

use common::{execute_within, within_timeout, TempDir};

const N: u64 = 100_000;

/// The source subtask (of `p`) that generates index `i` of `0..n`.
fn subtask_of_index(i: u64, n: u64, p: usize) -> usize {
    (0..p)
        .find(|&s| {
            SourceContext {
                subtask: s,
                parallelism: p,
            }
            .share_of(n)
            .contains(&i)
        })
        .unwrap()
}

/// Runs the job of `env` and returns (uid, subtask, message) of the panic that failed it.
fn expect_panic(env: &Env, job: &str) -> (String, usize, String) {
    match execute_within(env, job) {
        Err(JobError::OperatorPanicked {
            job: j,
            uid,
            subtask,
            message,
        }) => {
            assert_eq!(j, job);
            (uid, subtask, message)
        }
        other => panic!("job {job}: expected OperatorPanicked, got {other:?}"),
    }
}

fn with_chaining(chaining: bool) -> EnvConfig {
    let mut c = EnvConfig::default();
    c.chaining = chaining;
    c
}

// ---------------------------------------------------------------------------------------------
// Panics in user code

#[test]
fn panic_in_map_names_the_operator_and_subtask() {
    const BAD: u64 = 70_000;
    for chaining in [true, false] {
        for p in [1, 3] {
            let env = Env::with_config(with_chaining(chaining));
            env.generate(N, |i| i)
                .set_parallelism(p)
                .map(|x: u64| x + 1)
                .set_parallelism(p)
                .uid("first")
                .forward()
                .map(|x: u64| {
                    if x == BAD + 1 {
                        panic!("bad record {x}");
                    }
                    x
                })
                .uid("mapper")
                .set_parallelism(p)
                .discard();
            let got = expect_panic(&env, "map-panic");
            let want = (
                "mapper".to_owned(),
                subtask_of_index(BAD, N, p),
                format!("bad record {}", BAD + 1),
            );
            assert_eq!(got, want, "chaining {chaining}, parallelism {p}");
        }
    }
}

#[test]
fn panic_in_keyed_process_names_the_operator_and_subtask() {
    const KEY: u64 = 42;
    for p in [1, 3] {
        let env = Env::new();
        env.generate(N, |i| i)
            .set_parallelism(2)
            .key_by(|x: &u64| x % 100)
            .process(
                |k: &u64, s: &mut ValueState<u64>, _x: u64, out: &mut Collector<u64>| {
                    let c = s.get_or_insert_with(|| 0);
                    *c += 1;
                    if *k == KEY && *c == 500 {
                        panic!("key {k} reached {c}");
                    }
                    out.collect(*c);
                },
            )
            .uid("keyed")
            .set_parallelism(p)
            .discard();
        let (uid, subtask, message) = expect_panic(&env, "keyed-panic");
        let owner = subtask_for_key_group(
            key_group_of(&KEY, DEFAULT_MAX_PARALLELISM),
            DEFAULT_MAX_PARALLELISM,
            p,
        );
        assert_eq!(
            (uid.as_str(), subtask, message.as_str()),
            ("keyed", owner, "key 42 reached 500"),
            "parallelism {p}"
        );
    }
}

#[test]
fn panic_in_end_of_input_names_the_operator() {
    #[derive(Clone)]
    struct FailAtEnd(u64);
    impl ProcessFunction<u64, u64> for FailAtEnd {
        fn process(&mut self, x: u64, out: &mut Collector<u64>) {
            self.0 += 1;
            out.collect(x)
        }
        fn end_of_input(&mut self, _out: &mut Collector<u64>) {
            panic!("cannot finish after {} records", self.0);
        }
    }
    let env = Env::new();
    env.generate(1000, |i| i)
        .process(FailAtEnd(0))
        .uid("ender")
        .discard();
    let got = expect_panic(&env, "end-panic");
    assert_eq!(
        got,
        ("ender".into(), 0, "cannot finish after 1000 records".into())
    );
}

/// A sink that panics on one record value, and records nothing.
struct PanickySink {
    bad: u64,
}

impl Sink<u64> for PanickySink {
    fn write_batch(&mut self, batch: &mut Vec<u64>) -> Result<(), SinkError> {
        for x in batch.drain(..) {
            if x == self.bad {
                panic!("sink cannot write {x}");
            }
        }
        Ok(())
    }
}

#[test]
fn panic_in_sink_names_the_sink_and_subtask() {
    const BAD: u64 = 12_345;
    for p in [1, 3] {
        let env = Env::new();
        env.generate(N, |i| i)
            .set_parallelism(p)
            .add_sink("panicky", |_cx: &SinkContext| Ok(PanickySink { bad: BAD }))
            .uid("sink")
            .set_parallelism(p);
        let got = expect_panic(&env, "sink-panic");
        let want = (
            "sink".to_owned(),
            subtask_of_index(BAD, N, p),
            format!("sink cannot write {BAD}"),
        );
        assert_eq!(got, want, "parallelism {p}");
    }
}

#[test]
fn panic_in_sink_finish_and_sink_errors() {
    struct FailsAtFinish;
    impl Sink<u64> for FailsAtFinish {
        fn write_batch(&mut self, batch: &mut Vec<u64>) -> Result<(), SinkError> {
            batch.clear();
            Ok(())
        }
        fn finish(&mut self) -> Result<(), SinkError> {
            panic!("flush failed");
        }
    }
    let env = Env::new();
    env.generate(10, |i| i)
        .add_sink("finisher", |_: &SinkContext| Ok(FailsAtFinish))
        .uid("fin");
    assert_eq!(
        expect_panic(&env, "finish-panic"),
        ("fin".into(), 0, "flush failed".into())
    );

    // A sink that returns an error (not a panic) fails the job with SinkFailed.
    struct Refuses;
    impl Sink<u64> for Refuses {
        fn write_batch(&mut self, _batch: &mut Vec<u64>) -> Result<(), SinkError> {
            Err(SinkError::Encode {
                path: "memory".into(),
                message: "refused".into(),
            })
        }
    }
    let env = Env::new();
    env.generate(10, |i| i)
        .add_sink("refuses", |_: &SinkContext| Ok(Refuses))
        .uid("ref");
    match execute_within(&env, "sink-error") {
        Err(JobError::SinkFailed {
            uid,
            subtask: 0,
            source: SinkError::Encode { message, .. },
            ..
        }) => assert_eq!((uid.as_str(), message.as_str()), ("ref", "refused")),
        other => panic!("expected SinkFailed, got {other:?}"),
    }

    // write_text into a path that is a file: the sink cannot create its directory, which
    // the job finds before it starts (the directory check of `honest_failures.rs`).
    let dir = TempDir::new("sink-io");
    let file = dir.write("not-a-dir", b"x");
    let env = Env::new();
    env.generate(10, |i| i).write_text(&file).uid("text");
    match execute_within(&env, "sink-io") {
        Err(JobError::Directory { purpose, path, .. }) => {
            assert_eq!(purpose, "sink directory");
            assert_eq!(path, file);
        }
        other => panic!("expected a sink directory error, got {other:?}"),
    }

    // A custom sink that cannot create its file fails the job with SinkFailed/Io naming it.
    struct CannotOpen;
    impl Sink<u64> for CannotOpen {
        fn write_batch(&mut self, _batch: &mut Vec<u64>) -> Result<(), SinkError> {
            Ok(())
        }
    }
    let env = Env::new();
    let under_file = file.join("part-0");
    let target = under_file.clone();
    env.generate(10, |i| i)
        .add_sink("opens", move |_: &SinkContext| {
            std::fs::File::create(&target)
                .map(|_| CannotOpen)
                .map_err(|source| SinkError::Io {
                    path: target.clone(),
                    source,
                })
        })
        .uid("opens");
    match execute_within(&env, "sink-io-custom") {
        Err(JobError::SinkFailed {
            uid,
            source: SinkError::Io { path, .. },
            ..
        }) => {
            assert_eq!(uid, "opens");
            assert_eq!(path, under_file);
        }
        other => panic!("expected SinkFailed/Io, got {other:?}"),
    }
}

/// Emits its share of `0..n`; panics (or fails) on index `bad` if it owns it.
struct Numbers {
    next: u64,
    end: u64,
    bad: u64,
    fail_with_error: bool,
}

impl Source<u64> for Numbers {
    fn poll_batch(&mut self, out: &mut Vec<u64>, max: usize) -> Result<SourceStatus, SourceError> {
        let stop = self.end.min(self.next + max as u64);
        while self.next < stop {
            if self.next == self.bad {
                if self.fail_with_error {
                    return Err(SourceError::Malformed {
                        path: "numbers".into(),
                        line: self.bad,
                        byte_offset: 0,
                        message: "unreadable".into(),
                    });
                }
                panic!("source broke at {}", self.bad);
            }
            out.push(self.next);
            self.next += 1;
        }
        Ok(if self.next >= self.end {
            SourceStatus::End
        } else {
            SourceStatus::More
        })
    }
}

fn numbers(env: &Env, bad: u64, fail_with_error: bool) -> weir::DataStream<u64> {
    env.add_source("numbers", move |cx: SourceContext| {
        let r = cx.share_of(N);
        Ok(Numbers {
            next: r.start,
            end: r.end,
            bad,
            fail_with_error,
        })
    })
}

#[test]
fn panic_in_custom_source_names_the_source_and_subtask() {
    const BAD: u64 = 90_000;
    for p in [1, 3] {
        let env = Env::new();
        numbers(&env, BAD, false)
            .uid("src")
            .set_parallelism(p)
            .map(|x| x * 2)
            .set_parallelism(p)
            .discard();
        let got = expect_panic(&env, "source-panic");
        let want = (
            "src".to_owned(),
            subtask_of_index(BAD, N, p),
            format!("source broke at {BAD}"),
        );
        assert_eq!(got, want, "parallelism {p}");
        assert_eq!(want.1, p - 1);
    }
    // A source error (not a panic) is SourceFailed.
    let env = Env::new();
    numbers(&env, 5, true)
        .uid("src")
        .set_parallelism(3)
        .discard();
    match execute_within(&env, "source-error") {
        Err(JobError::SourceFailed {
            uid,
            subtask: 0,
            source: SourceError::Malformed { line: 5, .. },
            ..
        }) => assert_eq!(uid, "src"),
        other => panic!("expected SourceFailed, got {other:?}"),
    }
}

/// A failure while other subtasks are blocked on backpressure still ends the job.
#[test]
fn panic_while_upstream_is_backpressured_ends_the_job() {
    let mut c = common::cfg(4, 1);
    c.arbiters = 2;
    let env = Env::with_config(c);
    env.generate(N, |i| i)
        .set_parallelism(3)
        .rebalance()
        .map(|x: u64| {
            if x == 2_000 {
                panic!("stuck downstream");
            }
            std::thread::sleep(Duration::from_micros(20));
            x
        })
        .uid("slow")
        .set_parallelism(1)
        .discard();
    let (uid, subtask, message) = expect_panic(&env, "backpressured");
    assert_eq!(
        (uid.as_str(), subtask, message.as_str()),
        ("slow", 0, "stuck downstream")
    );
}

#[test]
fn panic_in_two_input_operators_names_the_operator() {
    #[derive(Clone)]
    struct Co;
    impl weir::CoProcessFunction<u64, String, u64> for Co {
        fn process1(&mut self, x: u64, out: &mut Collector<u64>) {
            out.collect(x)
        }
        fn process2(&mut self, s: String, _out: &mut Collector<u64>) {
            if s == "s77" {
                panic!("cannot take {s}");
            }
        }
    }
    for p in [1, 3] {
        let env = Env::new();
        let a = env.generate(N, |i| i).set_parallelism(p);
        let b = env.generate(1000, |i| format!("s{i}")).set_parallelism(p);
        a.connect(b)
            .process(Co)
            .uid("co")
            .set_parallelism(p)
            .discard();
        let (uid, subtask, message) = expect_panic(&env, "co-panic");
        assert_eq!(
            (uid.as_str(), message.as_str()),
            ("co", "cannot take s77"),
            "parallelism {p}"
        );
        assert_eq!(subtask, subtask_of_index(77, 1000, p), "parallelism {p}");
    }
}

/// A key selector runs in the upstream subtask's hash partitioner too; its panic must fail
/// the job as a panic of user code, with its message (not as a lost subtask).
#[test]
fn panic_in_key_selector_is_an_operator_panic() {
    for p in [1, 3] {
        let env = Env::new();
        env.generate(N, |i| i)
            .set_parallelism(p)
            .uid("numbers")
            .key_by(|x: &u64| {
                if *x == 500 {
                    panic!("bad key {x}");
                }
                x % 10
            })
            .reduce(|a, b| a + b)
            .uid("sums")
            .set_parallelism(2)
            .discard();
        match execute_within(&env, "key-panic") {
            Err(JobError::OperatorPanicked { uid, message, .. }) => {
                assert_eq!(uid, "sums", "the keyed operator owns its key selector");
                assert!(message.contains("bad key 500"), "message {message}");
                assert!(message.contains("key selector"), "message {message}");
            }
            other => panic!("parallelism {p}: expected OperatorPanicked, got {other:?}"),
        }
    }
}

/// The factories given to add_sink and add_source are user code too.
#[test]

fn panic_in_sink_or_source_factory_is_an_operator_panic() {
    let env = Env::new();
    env.generate(10, |i| i)
        .add_sink("s", |_cx: &SinkContext| -> Result<PanickySink, SinkError> {
            panic!("sink factory broke")
        })
        .uid("sink");
    assert_eq!(
        expect_panic(&env, "sink-factory"),
        ("sink".into(), 0, "sink factory broke".into())
    );
    let env = Env::new();
    env.add_source(
        "src",
        |_cx: SourceContext| -> Result<Numbers, SourceError> { panic!("source factory broke") },
    )
    .uid("src")
    .discard();
    assert_eq!(
        expect_panic(&env, "source-factory"),
        ("src".into(), 0, "source factory broke".into())
    );
}

// ---------------------------------------------------------------------------------------------
// Cancellation

fn cancel_after(handle: &weir::JobHandle, delay: Duration) -> std::thread::JoinHandle<()> {
    let canceller = handle.canceller();
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        canceller.cancel();
    })
}

#[test]
fn cancel_stops_an_endless_job() {
    let env = Env::new();
    env.generate(u64::MAX, |i| i)
        .map(|x: u64| x.wrapping_mul(3))
        .filter(|x: &u64| x.is_multiple_of(2))
        .discard();
    let handle = env.start("endless").unwrap();
    assert_eq!(handle.name(), "endless");
    let started = Instant::now();
    let t = cancel_after(&handle, Duration::from_millis(300));
    let r = within_timeout(move || handle.wait());
    t.join().unwrap();
    match r {
        Err(JobError::Cancelled { job }) => assert_eq!(job, "endless"),
        other => panic!("expected Cancelled, got {other:?}"),
    }
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "it ran until cancelled"
    );
}

#[test]
fn cancel_stops_a_backpressured_job_with_networked_stages() {
    let mut c = common::cfg(16, 1);
    c.chaining = false;
    let env = Env::with_config(c);
    env.generate(u64::MAX, |i| i)
        .rebalance()
        .map(|x: u64| {
            std::thread::sleep(Duration::from_micros(50));
            x
        })
        .set_parallelism(2)
        .key_by(|x: &u64| x % 10)
        .reduce(|a, b| a.wrapping_add(b))
        .set_parallelism(3)
        .discard();
    let handle = env.start("endless-slow").unwrap();
    let t = cancel_after(&handle, Duration::from_millis(300));
    let r = within_timeout(move || handle.wait());
    t.join().unwrap();
    assert!(matches!(r, Err(JobError::Cancelled { .. })), "{r:?}");
}

/// An endless generator at parallelism > 1: every subtask must get a share of `0..u64::MAX`.
#[test]
fn cancel_stops_an_endless_parallel_job() {
    let env = Env::new();
    env.generate(u64::MAX, |i| i).set_parallelism(2).discard();
    let handle = env.start("endless-parallel").unwrap();
    let t = cancel_after(&handle, Duration::from_millis(300));
    let r = within_timeout(move || handle.wait());
    t.join().unwrap();
    assert!(matches!(r, Err(JobError::Cancelled { .. })), "{r:?}");
}

#[test]
fn cancelling_a_finished_job_changes_nothing() {
    let env = Env::new();
    let out = env.generate(100, |i| i).collect();
    let handle = env.start("short").unwrap();
    let canceller = handle.canceller();
    let r = within_timeout(move || handle.wait()).unwrap();
    canceller.cancel();
    assert_eq!(r.name, "short");
    assert_eq!(out.len(), 100);
}

// ---------------------------------------------------------------------------------------------
// Plan errors

fn plan_error(env: &Env) -> PlanError {
    match env.execute("plan") {
        Err(JobError::Plan { job, source }) => {
            assert_eq!(job, "plan");
            source
        }
        other => panic!("expected a plan error, got {other:?}"),
    }
}

#[test]
fn duplicate_uid_is_a_plan_error_and_nothing_runs() {
    let dir = TempDir::new("dup");
    let out_dir = dir.path().join("never-created");
    let env = Env::new();
    env.generate(10, |i| i)
        .uid("same")
        .map(|x: u64| x.to_string())
        .uid("same")
        .write_text(&out_dir);
    assert_eq!(plan_error(&env), PlanError::DuplicateUid("same".into()));
    assert!(!out_dir.exists(), "a plan error starts nothing");

    // A sink's uid clashes too.
    let env = Env::new();
    env.generate(10, |i| i).uid("x").discard().uid("x");
    assert_eq!(plan_error(&env), PlanError::DuplicateUid("x".into()));
}

#[test]
fn bad_parallelism_is_a_plan_error() {
    let env = Env::new();
    env.generate(10, |i| i)
        .map(|x: u64| x)
        .uid("m")
        .set_parallelism(0)
        .discard();
    assert_eq!(
        plan_error(&env),
        PlanError::BadParallelism {
            uid: "m".into(),
            parallelism: 0,
            max: DEFAULT_MAX_PARALLELISM,
        }
    );
    let env = Env::new();
    env.generate(10, |i| i)
        .uid("g")
        .set_parallelism(DEFAULT_MAX_PARALLELISM + 1)
        .discard();
    assert_eq!(
        plan_error(&env),
        PlanError::BadParallelism {
            uid: "g".into(),
            parallelism: DEFAULT_MAX_PARALLELISM + 1,
            max: DEFAULT_MAX_PARALLELISM,
        }
    );
    // Exactly max_parallelism is fine.
    let mut c = EnvConfig::default();
    c.max_parallelism = 4;
    let env = Env::with_config(c);
    let out = env.generate(100, |i| i).set_parallelism(4).collect();
    execute_within(&env, "max").unwrap();
    assert_eq!(out.len(), 100);
}

#[test]
fn bad_config_is_a_plan_error() {
    type Tweak = fn(&mut EnvConfig);
    let cases: [(Tweak, &str); 5] = [
        (|c| c.batch_size = 0, "batch_size"),
        (|c| c.channel_capacity = 0, "channel_capacity"),
        (|c| c.arbiters = 0, "arbiters"),
        (|c| c.default_parallelism = 0, "default_parallelism"),
        (|c| c.max_parallelism = 0, "max_parallelism"),
    ];
    for (set, key) in cases {
        let mut c = EnvConfig::default();
        set(&mut c);
        let env = Env::with_config(c);
        env.generate(10, |i| i).discard();
        match plan_error(&env) {
            PlanError::BadConfig { key: k, .. } => assert_eq!(k, key),
            other => panic!("{key}: expected BadConfig, got {other:?}"),
        }
    }
}

#[test]
fn a_graph_without_source_is_a_plan_error() {
    let env = Env::new();
    assert_eq!(plan_error(&env), PlanError::NoSource);
    // An Env runs its graph once: a second execute has nothing left.
    let env = Env::new();
    env.generate(10, |i| i).discard();
    execute_within(&env, "once").unwrap();
    assert_eq!(plan_error(&env), PlanError::NoSource);
}

#[test]
fn operator_settings_on_a_union_are_a_plan_error() {
    type Setter = fn(weir::DataStream<u64>) -> weir::DataStream<u64>;
    let cases: [(Setter, &str); 3] = [
        (|s| s.uid("u"), "uid"),
        (|s| s.name("n"), "name"),
        (|s| s.set_parallelism(2), "set_parallelism"),
    ];
    for (set, method) in cases {
        let env = Env::new();
        let a = env.generate(10, |i| i);
        let b = env.generate(10, |i| i + 10);
        set(a.union([b])).discard();
        assert_eq!(
            plan_error(&env),
            PlanError::NotAnOperator { method },
            "{method}"
        );
    }
}
