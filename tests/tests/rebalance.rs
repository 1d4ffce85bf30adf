//! Key groups assigned by load: a keyed running count whose input has one hot key group
//! (half the records) is rebalanced while ids flow; the hot group gets a subtask of its own,
//! and every id reaches an exactly-once sink once with the count a sequential run gives,
//! across a failure after the rebalance (the restart keeps the assignment), a rescale (back
//! to count, or by load for an operator set to `key_groups_by_load`), a second rebalance, a
//! stop with savepoint and a new job restored from it by count. Bad requests are refused
//! with what is wrong, and change nothing.
//!
//! Every wait is on an event (a checkpoint completed, a rebalance answered), never on the
//! clock.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use weir::key_group::key_group_of;
use weir::{Collector, Env, EnvConfig, JobHandle, RescaleError, RestartStrategy, ValueState};
use weir_testing::{
    encode_display, quiet_injected_panics, read_committed, ExactlyOnce, TwoPhaseFileSink,
};

mod common;

use common::{endless_ids, two_more_checkpoints};

/// Three ids in four have key 0: one key group carries three quarters of the records (more
/// than any other assignment can split); the fourth ids go round 50 other keys.
fn key_of(x: u64) -> u64 {
    if x % 4 != 3 {
        0
    } else {
        (x / 4) % 50 + 1
    }
}

/// The count a sequential run gives id `x` (its key's records up to and including it).
fn sequential_count(x: u64) -> u64 {
    if x % 4 != 3 {
        (x / 4) * 3 + x % 4 + 1
    } else {
        (x / 4) / 50 + 1
    }
}

struct Job {
    handle: JobHandle,
    stop: Arc<AtomicBool>,
    ended_at: Arc<AtomicU64>,
}

fn out_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("weir-rebalance-{name}-{}", std::process::id()))
}

fn config(name: &str) -> EnvConfig {
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(Duration::from_millis(20));
    cfg.checkpoint.directory = out_dir(&format!("{name}-ckpt"));
    cfg.restart = Some(RestartStrategy::FixedDelay {
        attempts: 5,
        delay: Duration::ZERO,
    });
    cfg
}

/// ids (1) -> keyed running count "count" (p) -> exactly-once sink (1) into `out`; with
/// `by_load`, the count's key groups are assigned by load when it is rescaled; `fail` makes
/// the count's next record fail (once).
fn start(
    name: &str,
    cfg: EnvConfig,
    p: usize,
    by_load: bool,
    out: &Path,
    fail: Arc<AtomicBool>,
) -> Job {
    let (stop, ended_at) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let env = Env::with_config(cfg);
    let d = out.to_owned();
    let counts = endless_ids(&env, &stop, &ended_at)
        .key_by(|x: &u64| key_of(*x))
        .process(
            move |_k: &u64, n: &mut ValueState<u64>, x: u64, out: &mut Collector<String>| {
                if fail.swap(false, Ordering::SeqCst) {
                    panic!("injected fault: the count fails after the rebalance");
                }
                let c = n.get_or_insert_with(|| 0);
                *c += 1;
                out.collect(format!("{x} {c}"));
            },
        )
        .uid("count")
        .set_parallelism(p);
    let counts = if by_load {
        counts.key_groups_by_load()
    } else {
        counts
    };
    counts
        .add_sink("exactly_once", move |cx| {
            TwoPhaseFileSink::create(&d, cx, encode_display::<String>)
        })
        .uid("exactly_once")
        .set_parallelism(1);
    let handle = env.start(name).expect("the job starts");
    Job {
        handle,
        stop,
        ended_at,
    }
}

/// Each subtask's key groups, as runs, of the vertex running `uid`.
fn runs_of(job: &JobHandle, uid: &str) -> Vec<Vec<std::ops::Range<usize>>> {
    job.vertices()
        .into_iter()
        .find(|v| v.operators.iter().any(|o| o == uid))
        .and_then(|v| v.key_group_runs)
        .expect("a keyed vertex runs the operator")
}

/// The hot key group owns a subtask alone.
fn hot_group_is_alone(runs: &[Vec<std::ops::Range<usize>>]) -> bool {
    let hot = key_group_of(&0u64, 128);
    let alone = hot..hot + 1;
    runs.iter().any(|r| r.len() == 1 && r[0] == alone)
}

/// The key groups of 3 subtasks by count, as runs.
fn by_count_at_3() -> Vec<Vec<std::ops::Range<usize>>> {
    [0..43, 43..86, 86..128]
        .into_iter()
        .map(|r| vec![r])
        .collect()
}

/// Checks the committed output in `out` against ids `0..end`: each once, with its
/// sequential count.
fn check(out: &Path, end: u64) {
    let committed = read_committed(out).expect("read the sink's output");
    let mut ids = Vec::with_capacity(committed.lines.len());
    for line in &committed.lines {
        let (x, c) = line.split_once(' ').expect("`id count` lines");
        let (x, c): (u64, u64) = (x.parse().unwrap(), c.parse().unwrap());
        assert_eq!(
            c,
            sequential_count(x),
            "id {x}: the count a sequential run gives"
        );
        ids.push(x);
    }
    let report = ExactlyOnce::new(0..end).check(ids);
    assert!(report.is_exactly_once(), "{report}");
}

fn finish(job: Job) -> u64 {
    job.stop.store(true, Ordering::SeqCst);
    job.handle.wait().expect("the job finishes");
    let end = job.ended_at.load(Ordering::SeqCst);
    assert!(end > 0, "the source ran");
    end
}

#[test]
fn a_hot_key_group_gets_a_subtask_of_its_own_and_every_count_stays_exact() {
    quiet_injected_panics();
    let out = out_dir("exact");
    let _ = std::fs::remove_dir_all(&out);
    let fail = Arc::new(AtomicBool::new(false));
    let job = start("rebalance", config("exact"), 2, false, &out, fail.clone());
    two_more_checkpoints(&job.handle);
    assert!(!hot_group_is_alone(&runs_of(&job.handle, "count")));

    // Rebalance at p = 2: by count the hot group's subtask carries its three quarters and
    // some of the rest; by load, the hot group alone and every other group on the other.
    let report = job
        .handle
        .rebalance("count")
        .expect("the rebalance succeeds");
    assert!(report.changes.is_empty(), "{report:?}");
    assert_eq!(report.rebalanced.len(), 1, "{report:?}");
    let r = &report.rebalanced[0];
    let (before, after) = r.hottest_share();
    assert!(before > after && after < 0.78, "{r:?}");
    assert!(r.moved > 0, "{r:?}");
    let runs = runs_of(&job.handle, "count");
    assert!(hot_group_is_alone(&runs), "{r:?} {runs:?}");
    let v = job.handle.vertices();
    let count = v
        .iter()
        .find(|v| v.id == "count")
        .expect("the count's vertex");
    assert_eq!(count.parallelism, 2);

    two_more_checkpoints(&job.handle);

    // A failure after the rebalance: the restart restores its checkpoints with the same
    // assignment.
    let failures = job.handle.monitor().failures().len();
    fail.store(true, Ordering::SeqCst);
    while job.handle.monitor().failures().len() == failures {
        std::thread::sleep(Duration::from_millis(5));
    }
    two_more_checkpoints(&job.handle);
    assert_eq!(
        runs_of(&job.handle, "count"),
        runs,
        "the restart kept the assignment"
    );

    // A rescale of an operator not set to be assigned by load goes back to count.
    let report = job
        .handle
        .rescale("count", 3)
        .expect("the rescale succeeds");
    assert!(report.rebalanced.is_empty(), "{report:?}");
    let by_count = runs_of(&job.handle, "count");
    assert_eq!(by_count, by_count_at_3());
    two_more_checkpoints(&job.handle);

    // And a rebalance at 3.
    let report = job
        .handle
        .rebalance("count")
        .expect("the rebalance succeeds");
    assert_eq!(report.rebalanced.len(), 1, "{report:?}");
    assert!(hot_group_is_alone(&runs_of(&job.handle, "count")));
    two_more_checkpoints(&job.handle);

    let end = finish(job);
    check(&out, end);
    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_dir_all(out_dir("exact-ckpt"));
}

#[test]
fn an_operator_set_by_load_is_rebalanced_by_each_rescale_and_a_savepoint_restores_by_count() {
    let out = out_dir("savepoint");
    let sp = out_dir("savepoint-sp");
    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_dir_all(&sp);
    let mut cfg = config("savepoint");
    // Incremental checkpoints: a restore reads each subtask's key groups from the runs.
    cfg.checkpoint.incremental = true;
    let no_fault = Arc::new(AtomicBool::new(false));
    let job = start("by-load", cfg, 2, true, &out, no_fault.clone());
    two_more_checkpoints(&job.handle);
    let report = job
        .handle
        .rescale("count", 3)
        .expect("the rescale succeeds");
    assert_eq!(report.changes.len(), 1, "{report:?}");
    assert_eq!(report.rebalanced.len(), 1, "{report:?}");
    assert_eq!(report.rebalanced[0].load_after.len(), 3);
    let runs = runs_of(&job.handle, "count");
    assert!(hot_group_is_alone(&runs), "{report:?} {runs:?}");
    two_more_checkpoints(&job.handle);
    let (path, _) = job
        .handle
        .stop_with_savepoint(&sp)
        .expect("stop with savepoint");
    let metadata = std::fs::read(path.join("_metadata")).expect("the savepoint's metadata");
    assert!(!metadata.is_empty());

    // A new job of the same code at 3 restores the savepoint's key groups by count.
    let mut cfg = config("savepoint-b");
    cfg.checkpoint.restore_from = Some(sp.clone());
    let job = start("by-load-b", cfg, 3, false, &out, no_fault);
    assert_eq!(runs_of(&job.handle, "count"), by_count_at_3());
    two_more_checkpoints(&job.handle);
    let end = finish(job);
    check(&out, end);
    for d in [
        out,
        sp,
        out_dir("savepoint-ckpt"),
        out_dir("savepoint-b-ckpt"),
    ] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn bad_rebalances_are_refused_and_change_nothing() {
    let out = out_dir("bad");
    let _ = std::fs::remove_dir_all(&out);
    let job = start("bad", config("bad"), 2, false, &out, Arc::default());
    two_more_checkpoints(&job.handle);
    let runs = runs_of(&job.handle, "count");
    match job.handle.rebalance("nope") {
        Err(RescaleError::UnknownOperator { uid, known }) => {
            assert_eq!(uid, "nope");
            assert!(known.contains("count"), "{known}");
        }
        other => panic!("an unknown uid is refused: {other:?}"),
    }
    match job.handle.rebalance("exactly_once") {
        Err(RescaleError::NotRescalable { uid, reason }) => {
            assert_eq!(uid, "exactly_once");
            assert!(reason.contains("keyed operator"), "{reason}");
        }
        other => panic!("a sink has no key groups: {other:?}"),
    }
    assert_eq!(runs_of(&job.handle, "count"), runs);
    assert_eq!(job.handle.rescale_stats().num_rescales, 0);
    let end = finish(job);
    check(&out, end);
    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_dir_all(out_dir("bad-ckpt"));
}

#[test]
fn key_groups_by_load_on_an_operator_without_keyed_state_is_refused_when_planned() {
    let env = Env::new();
    env.from_collection((0u64..10).collect())
        .map(|x: u64| x + 1)
        .uid("plus")
        .key_groups_by_load()
        .collect();
    let e = env.start("refused").expect_err("refused when planned");
    let msg = e.to_string();
    assert!(
        msg.contains("plus") && msg.contains("key_groups_by_load"),
        "{msg}"
    );
}
