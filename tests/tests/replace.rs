//! Fast restart with a new graph under continuous load, every id checked at an exactly-once
//! sink: keyed state carries over by uid (at a new parallelism too); a new graph that panics
//! on its first records, or cannot even start, is rolled back and the old one goes on; state
//! with no place in the new graph is refused before anything stops, or dropped when allowed;
//! registered versions are replaced by name; a fault while the replacement's savepoint is
//! taken abandons it, the old graph recovers, and a later replacement succeeds.
//!
//! Every wait is on an event (checkpoints completed, a call answered), never on the clock.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{endless_ids, two_more_checkpoints};
use weir::{Collector, Env, EnvConfig, JobHandle, ReplaceError, ReplaceOptions, ValueState};
use weir_testing::{
    encode_display, quiet_injected_panics, read_committed, ExactlyOnce, TwoPhaseFileSink,
};

const KEYS: u64 = 20;

/// What every version shares: the input's stop flag and end, and the sink's directory.
#[derive(Clone)]
struct Shared {
    stop: Arc<AtomicBool>,
    ended_at: Arc<AtomicU64>,
    out: PathBuf,
}

impl Shared {
    fn new(name: &str) -> Self {
        let out = std::env::temp_dir().join(format!("weir-replace-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        Shared {
            stop: Arc::new(AtomicBool::new(false)),
            ended_at: Arc::new(AtomicU64::new(0)),
            out,
        }
    }
}

/// ids -> keyed running count "count" (parallelism `p`) -> `id count version` lines; with
/// `panic_at`, the version's tagger panics on its first record.
fn version(env: &Env, s: &Shared, p: usize, tag: &'static str, panic: bool) {
    version_with(env, s, p, tag, panic, Arc::default());
}

/// A sink that panics in the pre-commit of the first checkpoint after `arm` is set.
struct ArmedSink<S> {
    inner: S,
    arm: Arc<AtomicBool>,
}

impl<S: weir::sink::Sink<String>> weir::sink::Sink<String> for ArmedSink<S> {
    fn write_batch(&mut self, batch: &mut Vec<String>) -> Result<(), weir::SinkError> {
        self.inner.write_batch(batch)
    }
    fn finish(&mut self) -> Result<(), weir::SinkError> {
        self.inner.finish()
    }
    fn pre_commit(&mut self, checkpoint: u64) -> Result<Option<Vec<u8>>, weir::SinkError> {
        if self.arm.swap(false, Ordering::SeqCst) {
            panic!("injected fault: the sink fails taking checkpoint {checkpoint}");
        }
        self.inner.pre_commit(checkpoint)
    }
    fn commit(&mut self, checkpoint: u64) -> Result<(), weir::SinkError> {
        self.inner.commit(checkpoint)
    }
    fn initialize(&mut self, restored: Option<&[u8]>) -> Result<(), weir::SinkError> {
        self.inner.initialize(restored)
    }
}

/// [`version`], whose sink panics taking the first checkpoint after `arm` is set.
fn version_with(
    env: &Env,
    s: &Shared,
    p: usize,
    tag: &'static str,
    panic: bool,
    arm: Arc<AtomicBool>,
) {
    let out = s.out.clone();
    endless_ids(env, &s.stop, &s.ended_at)
        .key_by(|x: &u64| x % KEYS)
        .process(
            |_k: &u64, n: &mut ValueState<u64>, x: u64, out: &mut Collector<(u64, u64)>| {
                let c = n.get_or_insert_with(|| 0);
                *c += 1;
                out.collect((x, *c));
            },
        )
        .uid("count")
        .set_parallelism(p)
        .map(move |(x, c): (u64, u64)| {
            if panic {
                panic!("injected fault: the new graph fails on its first record");
            }
            format!("{x} {c} {tag}")
        })
        .uid(&format!("tag-{tag}"))
        .add_sink("exactly_once", move |cx| {
            Ok(ArmedSink {
                inner: TwoPhaseFileSink::create(&out, cx, encode_display::<String>)?,
                arm: arm.clone(),
            })
        })
        .uid("exactly_once")
        .set_parallelism(1);
}

fn config() -> EnvConfig {
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(Duration::from_millis(20));
    cfg
}

/// Every id once with its sequential count; the version tag of each id, in id order.
fn finish(job: JobHandle, s: &Shared) -> Vec<String> {
    s.stop.store(true, Ordering::SeqCst);
    job.wait().expect("the job finishes");
    check(&s.out, s.ended_at.load(Ordering::SeqCst))
}

fn check(out: &Path, end: u64) -> Vec<String> {
    let committed = read_committed(out).expect("the sink's output");
    let mut rows: Vec<(u64, String)> = Vec::new();
    for line in &committed.lines {
        let mut parts = line.split(' ');
        let x: u64 = parts.next().unwrap().parse().unwrap();
        let c: u64 = parts.next().unwrap().parse().unwrap();
        assert_eq!(c, x / KEYS + 1, "id {x}: the count a sequential run gives");
        rows.push((x, parts.next().unwrap().to_owned()));
    }
    let report = ExactlyOnce::new(0..end).check(rows.iter().map(|(x, _)| *x));
    assert!(report.is_exactly_once(), "{report}");
    rows.sort();
    let _ = std::fs::remove_dir_all(out);
    rows.into_iter().map(|(_, t)| t).collect()
}

#[test]
fn a_new_graph_takes_over_the_keyed_state_and_the_output_stays_exact() {
    let s = Shared::new("forward");
    let env = Env::with_config(config());
    version(&env, &s, 2, "v1", false);
    let job = env.start("replace-forward").expect("starts");
    two_more_checkpoints(&job);
    let s2 = s.clone();
    let report = job
        .replace(
            move |env| version(env, &s2, 3, "v2", false),
            ReplaceOptions::default(),
        )
        .expect("the new graph takes over");
    assert!(
        report.committed_at.is_some_and(|c| c > report.checkpoint),
        "{report:?}"
    );
    assert!(report.dropped_state.is_empty());
    let count = job
        .vertices()
        .into_iter()
        .find(|v| v.id == "count")
        .expect("count");
    assert_eq!(count.parallelism, 3);
    assert_eq!(job.checkpoint_stats().map(|s| s.num_restarts), Some(0));
    two_more_checkpoints(&job);
    let tags = finish(job, &s);
    let first = tags
        .iter()
        .position(|t| t == "v2")
        .expect("the new graph wrote");
    assert!(first > 0, "the old graph wrote first");
    assert!(tags[..first].iter().all(|t| t == "v1") && tags[first..].iter().all(|t| t == "v2"));
}

#[test]
fn a_new_graph_that_panics_at_once_is_rolled_back_and_the_old_one_goes_on() {
    quiet_injected_panics();
    let s = Shared::new("rollback");
    let env = Env::with_config(config());
    version(&env, &s, 2, "v1", false);
    let job = env.start("replace-rollback").expect("starts");
    two_more_checkpoints(&job);
    let s2 = s.clone();
    match job.replace(
        move |env| version(env, &s2, 2, "v2", true),
        ReplaceOptions::default(),
    ) {
        Err(ReplaceError::RolledBack(why)) => assert!(why.contains("failed"), "{why}"),
        other => panic!("a failing new graph: {other:?}"),
    }
    assert!(job
        .vertices()
        .iter()
        .any(|v| v.operators.iter().any(|o| o == "tag-v1")));
    two_more_checkpoints(&job);
    let tags = finish(job, &s);
    assert!(
        tags.iter().all(|t| t == "v1"),
        "only the old graph's output is committed"
    );
}

#[test]
fn a_fault_while_the_replacements_savepoint_is_taken_keeps_the_old_graph_exactly_once() {
    quiet_injected_panics();
    let s = Shared::new("fault-during");
    let arm = Arc::new(AtomicBool::new(false));
    let mut cfg = config();
    cfg.restart = Some(weir::RestartStrategy::FixedDelay {
        attempts: 3,
        delay: Duration::ZERO,
    });
    let env = Env::with_config(cfg);
    version_with(&env, &s, 2, "v1", false, arm.clone());
    let job = env.start("replace-fault-during").expect("starts");
    two_more_checkpoints(&job);
    // No periodic checkpoint from now on: the replacement's savepoint is the next one.
    let interval = weir::settings::INTERVAL.to_owned();
    job.update_settings(&[(interval.clone(), "off".into())])
        .expect("no periodic checkpoints");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while job
        .checkpoint_stats()
        .is_some_and(|c| c.number_of_in_progress_checkpoints > 0)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "a checkpoint never ended"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    arm.store(true, Ordering::SeqCst);
    let s2 = s.clone();
    match job.replace(
        move |env| version(env, &s2, 3, "v2", false),
        ReplaceOptions::default(),
    ) {
        Err(ReplaceError::Aborted(why)) => assert!(why.contains("failed"), "{why}"),
        other => panic!("a fault during the savepoint: {other:?}"),
    }
    assert!(!arm.load(Ordering::SeqCst), "the fault fired");
    // The old graph recovered from its last checkpoint and goes on.
    // Settings wait for the restart to end (they are refused as busy until then).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        match job.update_settings(&[(interval.clone(), "20ms".into())]) {
            Ok(_) => break,
            Err(weir::settings::SettingError::Busy(why)) => {
                assert!(std::time::Instant::now() < deadline, "still busy: {why}");
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("periodic checkpoints again: {e}"),
        }
    }
    two_more_checkpoints(&job);
    assert_eq!(job.checkpoint_stats().map(|c| c.num_restarts), Some(1));
    assert!(job
        .vertices()
        .iter()
        .any(|v| v.operators.iter().any(|o| o == "tag-v1")));
    // And a replacement after it succeeds.
    let s3 = s.clone();
    job.replace(
        move |env| version(env, &s3, 3, "v2", false),
        ReplaceOptions::default(),
    )
    .expect("the second replacement");
    two_more_checkpoints(&job);
    let tags = finish(job, &s);
    let first = tags.iter().position(|t| t == "v2").expect("v2 output");
    assert!(tags[..first].iter().all(|t| t == "v1"), "v1, then v2");
    assert!(tags[first..].iter().all(|t| t == "v2"), "v1, then v2");
}

#[test]
fn a_new_graph_that_cannot_start_is_rolled_back() {
    let s = Shared::new("cannot-start");
    let env = Env::with_config(config());
    version(&env, &s, 2, "v1", false);
    let job = env.start("replace-cannot-start").expect("starts");
    two_more_checkpoints(&job);
    let s2 = s.clone();
    let r = job.replace(
        move |env| {
            endless_ids(env, &s2.stop, &s2.ended_at)
                .key_by(|x: &u64| x % KEYS)
                .process(
                    |_k: &u64, n: &mut ValueState<u64>, x: u64, out: &mut Collector<u64>| {
                        *n.get_or_insert_with(|| 0) += 1;
                        out.collect(x);
                    },
                )
                .uid("count")
                .add_sink("exactly_once", |_cx| -> Result<TwoPhaseFileSink<u64>, _> {
                    Err(weir::SinkError::Io {
                        path: "/nowhere".into(),
                        source: std::io::Error::other("the new sink cannot open"),
                    })
                })
                .uid("exactly_once");
        },
        ReplaceOptions::default(),
    );
    match r {
        Err(ReplaceError::RolledBack(why)) => assert!(why.contains("cannot start"), "{why}"),
        other => panic!("a new graph whose sink cannot open: {other:?}"),
    }
    two_more_checkpoints(&job);
    let tags = finish(job, &s);
    assert!(tags.iter().all(|t| t == "v1"));
}

#[test]
fn state_with_no_place_is_refused_before_anything_stops_unless_dropping_is_allowed() {
    let s = Shared::new("fit");
    let env = Env::with_config(config());
    version(&env, &s, 2, "v1", false);
    // Registered versions, replaced by name.
    let s2 = s.clone();
    env.register_graph("v2", move |env| version(env, &s2, 2, "v2", false));
    let s3 = s.clone();
    env.register_graph("no-count", move |env| {
        let out = s3.out.clone();
        endless_ids(env, &s3.stop, &s3.ended_at)
            .map(|x: u64| format!("{x} {} v3", x / KEYS + 1))
            .uid("tag-v3")
            .add_sink("exactly_once", move |cx| {
                TwoPhaseFileSink::create(&out, cx, encode_display::<String>)
            })
            .uid("exactly_once")
            .set_parallelism(1);
    });
    let job = env.start("replace-fit").expect("starts");
    two_more_checkpoints(&job);
    match job.replace_with("v9", ReplaceOptions::default()) {
        Err(ReplaceError::UnknownGraph { known, .. }) => assert!(known.contains("v2"), "{known}"),
        other => panic!("an unknown version: {other:?}"),
    }
    match job.replace_with("no-count", ReplaceOptions::default()) {
        Err(ReplaceError::StateDoesNotFit { uid, why }) => {
            assert_eq!(uid, "count");
            assert!(why.contains("allow dropping"), "{why}");
        }
        other => panic!("state with no place: {other:?}"),
    }
    assert_eq!(job.checkpoint_stats().map(|s| s.num_restarts), Some(0));
    let report = job
        .replace_with("v2", ReplaceOptions::default())
        .expect("v2 by name");
    assert!(report.committed_at.is_some());
    two_more_checkpoints(&job);
    let report = job
        .replace_with("no-count", ReplaceOptions::default().allow_dropping_state())
        .expect("allowed to drop the count's state");
    assert_eq!(report.dropped_state, vec!["count".to_string()]);
    two_more_checkpoints(&job);
    let tags = finish(job, &s);
    let first = |t: &str| {
        tags.iter()
            .position(|x| x == t)
            .expect("each version wrote")
    };
    assert!(
        first("v1") < first("v2") && first("v2") < first("v3"),
        "in order"
    );
}
