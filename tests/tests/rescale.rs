//! Live rescale under continuous load: a keyed running count goes 2 → 4 → 1 → 3 while ids
//! flow, and every id reaches an exactly-once sink once with the count a sequential run
//! gives; a failure during a rescale, and one right after it, lose and duplicate nothing;
//! bad requests are refused with a clear error and change nothing; a backed-up operator gets
//! backups for its new subtasks and fails over after the rescale.
//!
//! Every wait is on an event (a checkpoint completed, a rescale answered, a record seen),
//! never on the clock.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use weir::{Collector, Env, EnvConfig, JobHandle, RescaleError, RestartStrategy, ValueState};
use weir_testing::{
    encode_display, quiet_injected_panics, read_committed, ExactlyOnce, TwoPhaseFileSink,
};

mod common;

use common::{endless_ids, endless_ids_at, two_more_checkpoints, Endless};

const KEYS: u64 = 50;

/// A gate a test closes to hold records inside an operator (so a checkpoint cannot complete)
/// and opens again, optionally making the held record panic.
#[derive(Clone, Default)]
struct Gate {
    state: Arc<(Mutex<GateState>, Condvar)>,
}

#[derive(Default)]
struct GateState {
    closed: bool,
    /// A record is waiting at the closed gate.
    waiting: bool,
    panic_on_open: bool,
}

impl Gate {
    fn close(&self) {
        self.state.0.lock().unwrap().closed = true;
    }
    fn open(&self, panic: bool) {
        let mut s = self.state.0.lock().unwrap();
        s.closed = false;
        s.panic_on_open = panic;
        self.state.1.notify_all();
    }
    /// Waits until a record is held at the closed gate.
    fn wait_held(&self) {
        let mut s = self.state.0.lock().unwrap();
        while !s.waiting {
            s = self.state.1.wait(s).unwrap();
        }
    }
    fn pass(&self) {
        let mut s = self.state.0.lock().unwrap();
        if !s.closed {
            return;
        }
        s.waiting = true;
        self.state.1.notify_all();
        while s.closed {
            s = self.state.1.wait(s).unwrap();
        }
        s.waiting = false;
        if std::mem::take(&mut s.panic_on_open) {
            drop(s);
            panic!("injected fault: failing while a rescale waits for its checkpoint");
        }
    }
}

struct Job {
    handle: JobHandle,
    stop: Arc<AtomicBool>,
    ended_at: Arc<AtomicU64>,
    out: PathBuf,
}

/// source (1) -> gate map (1) -> keyed running count "count" (p) -> exactly-once sink (1).
fn start(name: &str, p: usize, gate: Gate, arm: Arc<AtomicBool>, cfg: EnvConfig) -> Job {
    start_with(
        name,
        p,
        gate,
        arm,
        cfg,
        Arc::new(AtomicBool::new(false)),
        false,
    )
}

/// As [`start`]; with `backup`, the count is backed up, and `fail_count` makes its next
/// record fail (once).
fn start_with(
    name: &str,
    p: usize,
    gate: Gate,
    arm: Arc<AtomicBool>,
    cfg: EnvConfig,
    fail_count: Arc<AtomicBool>,
    backup: bool,
) -> Job {
    let out = std::env::temp_dir().join(format!("weir-rescale-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let (stop, ended_at) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let env = Env::with_config(cfg);
    let d = out.clone();
    let gated = endless_ids(&env, &stop, &ended_at)
        .map(move |x: u64| {
            gate.pass();
            if arm.swap(false, Ordering::SeqCst) {
                panic!("injected fault: the first record after the rescale");
            }
            x
        })
        .uid("gate")
        .set_parallelism(1);
    let counts = gated
        .key_by(|x: &u64| x % KEYS)
        .process(
            move |_k: &u64, n: &mut ValueState<u64>, x: u64, out: &mut Collector<String>| {
                if fail_count.swap(false, Ordering::SeqCst) {
                    panic!("injected fault: the count's primary fails");
                }
                let c = n.get_or_insert_with(|| 0);
                *c += 1;
                out.collect(format!("{x} {c}"));
            },
        )
        .uid("count")
        .set_parallelism(p);
    let counts = if backup { counts.with_backup() } else { counts };
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
        out,
    }
}

fn config() -> EnvConfig {
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(Duration::from_millis(20));
    cfg.restart = Some(RestartStrategy::FixedDelay {
        attempts: 5,
        delay: Duration::ZERO,
    });
    cfg
}

/// [`config`] with unaligned checkpoints every 100 ms, and windows fixed at 128 batches of
/// 1,024 records (megabytes per channel once full).
fn unaligned_config() -> EnvConfig {
    let mut cfg = config();
    cfg.checkpoint.unaligned = true;
    cfg.checkpoint.interval = Some(Duration::from_millis(100));
    cfg.latency_target = None;
    cfg.channel_capacity = 128;
    cfg
}

/// Waits until a checkpoint completes whose in-flight data is at least `bytes`.
fn until_in_flight(job: &JobHandle, bytes: u64) {
    loop {
        let done = job
            .checkpoint_stats()
            .map_or(0, |s| s.number_of_completed_checkpoints);
        let stats = weir_testing::wait_for_checkpoint(job, done + 1, common::TIMEOUT)
            .expect("checkpoints complete");
        let newest = stats
            .history
            .iter()
            .rev()
            .find(|c| c.status == weir::CheckpointStatus::Completed)
            .map_or(0, |c| c.persisted_data);
        if newest >= bytes {
            return;
        }
    }
}

/// Stops the input, waits for the end, and checks every id once with its sequential count.
fn finish_and_check(job: Job) -> u64 {
    job.stop.store(true, Ordering::SeqCst);
    job.handle.wait().expect("the job finishes");
    let end = job.ended_at.load(Ordering::SeqCst);
    assert!(end > 0, "the source ran");
    let committed = read_committed(&job.out).expect("read the sink's output");
    let mut ids = Vec::with_capacity(committed.lines.len());
    for line in &committed.lines {
        let (x, c) = line.split_once(' ').expect("`id count` lines");
        let (x, c): (u64, u64) = (x.parse().unwrap(), c.parse().unwrap());
        assert_eq!(c, x / KEYS + 1, "id {x}: the count a sequential run gives");
        ids.push(x);
    }
    let report = ExactlyOnce::new(0..end).check(ids);
    assert!(report.is_exactly_once(), "{report}");
    let _ = std::fs::remove_dir_all(&job.out);
    end
}

/// Waits until a rescale waits for its checkpoint.
fn wait_rescale_in_progress(job: &JobHandle) {
    while job.rescale_stats().in_progress.is_none() {
        std::thread::yield_now();
    }
}

fn parallelism_of(job: &JobHandle, uid: &str) -> usize {
    job.vertices()
        .iter()
        .find(|v| v.operators.iter().any(|o| o == uid))
        .map(|v| v.parallelism)
        .expect("a vertex runs the operator")
}

#[test]
fn a_keyed_count_rescaled_two_four_one_three_under_load_is_exact() {
    let job = start(
        "2413",
        2,
        Gate::default(),
        Arc::new(AtomicBool::new(false)),
        config(),
    );
    two_more_checkpoints(&job.handle);
    let mut from = 2;
    for to in [4, 1, 3] {
        let report = job
            .handle
            .rescale("count", to)
            .expect("the rescale succeeds");
        assert_eq!(report.changes.len(), 1, "{report:?}");
        assert_eq!((report.changes[0].from, report.changes[0].to), (from, to));
        assert!(report.checkpoint > 0);
        assert_eq!(parallelism_of(&job.handle, "count"), to);
        two_more_checkpoints(&job.handle);
        from = to;
    }
    let stats = job.handle.rescale_stats();
    assert_eq!(stats.num_rescales, 3);
    assert_eq!(job.handle.monitor().failures().len(), 0, "no failure");
    finish_and_check(job);
}

#[test]
fn bad_requests_are_refused_and_change_nothing() {
    let gate = Gate::default();
    let mut cfg = config();
    cfg.max_parallelism = 16;
    let job = start(
        "bad",
        2,
        gate.clone(),
        Arc::new(AtomicBool::new(false)),
        cfg,
    );
    two_more_checkpoints(&job.handle);
    let h = &job.handle;
    match h.rescale("count", 0) {
        Err(RescaleError::Parallelism {
            parallelism: 0,
            max: 16,
            ..
        }) => {}
        other => panic!("parallelism 0: {other:?}"),
    }
    let e = h.rescale("count", 17).unwrap_err();
    assert!(e.to_string().contains("1 to max_parallelism (16)"), "{e}");
    let e = h.rescale("no-such-operator", 2).unwrap_err();
    assert!(
        matches!(e, RescaleError::UnknownOperator { .. }) && e.to_string().contains("count"),
        "{e}"
    );
    let e = h.rescale("ids", 2).unwrap_err();
    assert!(
        matches!(e, RescaleError::NotRescalable { .. }) && e.to_string().contains("source"),
        "{e}"
    );
    let e = h.rescale("exactly_once", 2).unwrap_err();
    assert!(e.to_string().contains("sink"), "{e}");
    // A rescale while another waits for its checkpoint (held behind the closed gate).
    gate.close();
    gate.wait_held();
    let monitor = h.monitor();
    let first = std::thread::spawn(move || monitor.rescale("count", 3));
    wait_rescale_in_progress(h);
    match h.rescale("count", 4) {
        Err(RescaleError::Busy(why)) => assert!(why.contains("another rescale"), "{why}"),
        other => panic!("a rescale while another runs: {other:?}"),
    }
    assert_eq!(parallelism_of(h, "count"), 2, "nothing changed yet");
    gate.open(false);
    let report = first.join().unwrap().expect("the first rescale completes");
    assert_eq!(report.changes[0].to, 3);
    assert_eq!(parallelism_of(h, "count"), 3);
    finish_and_check(job);
}

#[test]
fn a_failure_during_a_rescale_keeps_the_old_parallelism_and_loses_nothing() {
    quiet_injected_panics();
    let gate = Gate::default();
    let job = start(
        "fault-during",
        2,
        gate.clone(),
        Arc::new(AtomicBool::new(false)),
        config(),
    );
    two_more_checkpoints(&job.handle);
    gate.close();
    gate.wait_held();
    let monitor = job.handle.monitor();
    let pending = std::thread::spawn(move || monitor.rescale("count", 4));
    wait_rescale_in_progress(&job.handle);
    // The held record panics: the job fails while the rescale waits for its checkpoint.
    gate.open(true);
    match pending.join().unwrap() {
        Err(RescaleError::Aborted(why)) => assert!(why.contains("failed"), "{why}"),
        other => panic!("a failure during the rescale: {other:?}"),
    }
    two_more_checkpoints(&job.handle);
    assert_eq!(
        parallelism_of(&job.handle, "count"),
        2,
        "the old parallelism"
    );
    assert_eq!(job.handle.rescale_stats().num_rescales, 0);
    // And a rescale after the recovery works.
    let report = job
        .handle
        .rescale("count", 3)
        .expect("rescale after recovery");
    assert_eq!(report.changes[0].to, 3);
    finish_and_check(job);
}

#[test]
fn a_failure_right_after_a_rescale_restores_its_checkpoint_at_the_new_parallelism() {
    quiet_injected_panics();
    let arm = Arc::new(AtomicBool::new(false));
    let job = start("fault-after", 3, Gate::default(), arm.clone(), config());
    two_more_checkpoints(&job.handle);
    job.handle.rescale("count", 5).expect("rescale");
    // The next record fails the job before another checkpoint may have completed: the restart
    // restores the rescale's checkpoint (taken at parallelism 3) into 5 subtasks.
    arm.store(true, Ordering::SeqCst);
    while job.handle.monitor().failures().is_empty() {
        std::thread::yield_now();
    }
    two_more_checkpoints(&job.handle);
    assert_eq!(parallelism_of(&job.handle, "count"), 5);
    finish_and_check(job);
}

#[test]
fn a_job_wide_rescale_changes_what_follows_the_default_and_says_what_it_kept() {
    let mut cfg = config();
    cfg.default_parallelism = 2;
    let env = Env::with_config(cfg);
    env.generate(1_000_000_000, |i| i)
        .map(|x: u64| x)
        .key_by(|x: &u64| x % 7)
        .reduce(|a, b| a.max(b))
        .uid("max")
        .discard();
    let job = env.start("job-wide").expect("starts");
    two_more_checkpoints(&job);
    let report = job.rescale_job(3).expect("job-wide rescale");
    let changed: Vec<&str> = report.changes.iter().map(|c| c.uid.as_str()).collect();
    assert!(changed.contains(&"max"), "{report:?}");
    assert!(
        report.kept.iter().any(|(_, why)| why.contains("source")),
        "the source keeps its parallelism and says why: {report:?}"
    );
    assert_eq!(parallelism_of(&job, "max"), 3);
    job.cancel();
    let _ = job.wait();
}

#[test]
fn a_backed_up_count_gets_backups_for_its_new_subtasks_and_fails_over_after_a_rescale() {
    quiet_injected_panics();
    let fail = Arc::new(AtomicBool::new(false));
    let job = start_with(
        "backup",
        2,
        Gate::default(),
        Arc::new(AtomicBool::new(false)),
        config(),
        fail.clone(),
        true,
    );
    two_more_checkpoints(&job.handle);
    assert_eq!(job.handle.backup_metrics().len(), 2);
    job.handle.rescale("count", 3).expect("rescale");
    let backups = job.handle.backup_metrics();
    assert_eq!(backups.len(), 3, "a backup per new subtask: {backups:?}");
    two_more_checkpoints(&job.handle);
    // One primary fails: its backup takes over, the job does not restart.
    fail.store(true, Ordering::SeqCst);
    while job
        .handle
        .backup_metrics()
        .iter()
        .all(|b| b.promotions == 0)
    {
        std::thread::yield_now();
    }
    two_more_checkpoints(&job.handle);
    assert!(
        job.handle.monitor().failures().is_empty(),
        "promoted, not restarted: {:?}",
        job.handle.monitor().failures()
    );
    finish_and_check(job);
}

/// Tallies of the records it took, as operator list state: every subtask adds to its last
/// tally; a rescale deals the tallies out (split), so their sum stays the record count.
#[derive(Clone, Default, weir::Operator)]
struct Tally {
    #[weir(operator_state)]
    tallies: Vec<u64>,
    /// Every subtask's marks, whoever made them (union).
    #[weir(operator_state(union))]
    marks: std::collections::BTreeSet<u64>,
}

impl weir::ProcessFunction<u64, (u64, usize)> for Tally {
    fn process(&mut self, x: u64, _out: &mut Collector<(u64, usize)>) {
        if self.tallies.is_empty() {
            self.tallies.push(0);
        }
        *self.tallies.last_mut().expect("one tally") += 1;
        if x < 3 {
            self.marks.insert(x);
        }
    }
    fn end_of_input(&mut self, out: &mut Collector<(u64, usize)>) {
        out.collect((self.tallies.iter().sum(), self.marks.len()));
    }
}

/// A per-subtask count that is not a collection: it cannot be split.
#[derive(Clone, Default, weir::Operator)]
struct Scalar {
    #[weir(operator_state)]
    n: u64,
}

impl weir::ProcessFunction<u64, u64> for Scalar {
    fn process(&mut self, x: u64, out: &mut Collector<u64>) {
        self.n += 1;
        out.collect(x);
    }
}

#[test]
fn operator_state_is_split_and_unioned_and_a_scalar_rolls_back() {
    let (stop, ended_at) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let env = Env::with_config(config());
    let (s, e) = (stop.clone(), ended_at.clone());
    let out = env
        .add_source("ids", move |_cx| {
            Ok(Endless {
                next: 0,
                stop: s.clone(),
                ended_at: e.clone(),
                flood: false,
            })
        })
        .set_parallelism(1)
        .rebalance()
        .apply(Scalar::default())
        .uid("scalar")
        .set_parallelism(2)
        .rebalance()
        .apply(Tally::default())
        .uid("tally")
        .set_parallelism(2)
        .collect();
    let job = env.start("operator-state").expect("starts");
    two_more_checkpoints(&job);
    for to in [3, 1, 4] {
        let r = job.rescale("tally", to).expect("tally rescales");
        assert_eq!(r.changes[0].to, to);
        two_more_checkpoints(&job);
    }
    match job.rescale("scalar", 3) {
        Err(RescaleError::RolledBack(why)) => {
            assert!(
                why.contains("`n`") && why.contains("not a collection"),
                "{why}"
            )
        }
        other => panic!("a scalar per-subtask field: {other:?}"),
    }
    assert_eq!(
        parallelism_of(&job, "scalar"),
        2,
        "back to the old parallelism"
    );
    two_more_checkpoints(&job);
    stop.store(true, Ordering::SeqCst);
    job.wait().expect("finishes");
    let got = out.take();
    assert_eq!(got.len(), 4, "one total per subtask at the end: {got:?}");
    let total: u64 = got.iter().map(|(t, _)| t).sum();
    assert_eq!(
        total,
        ended_at.load(Ordering::SeqCst),
        "every record tallied once"
    );
    assert!(
        got.iter().all(|&(_, m)| m == 3),
        "every subtask has every mark: {got:?}"
    );
}

/// Rescale from unaligned checkpoints under backpressure: `count` is slow, so the channels
/// into it stay full and each barrier overtakes over a megabyte of queued records (padded
/// ids), which the rescale's checkpoint stores as channel state. The count goes 2 → 3 → 1;
/// the in-flight records are dealt to the new subtasks by key group, and every id reaches
/// the exactly-once sink once with the count a sequential run gives.
#[test]
fn a_keyed_count_rescaled_from_unaligned_checkpoints_with_megabytes_in_flight_is_exact() {
    let cfg = unaligned_config();
    let out = std::env::temp_dir().join(format!("weir-rescale-unaligned-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let (stop, ended_at) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let env = Env::with_config(cfg);
    let d = out.clone();
    endless_ids_at(&env, &stop, &ended_at, true)
        .map(|x: u64| (x, format!("{x:024}")))
        .uid("pad")
        .set_parallelism(1)
        .key_by(|r: &(u64, String)| r.0 % KEYS)
        .process(
            move |_k: &u64,
                  n: &mut ValueState<u64>,
                  (x, _pad): (u64, String),
                  out: &mut Collector<String>| {
                if x.is_multiple_of(32) {
                    std::thread::sleep(Duration::from_micros(200));
                }
                let c = n.get_or_insert_with(|| 0);
                *c += 1;
                out.collect(format!("{x} {c}"));
            },
        )
        .uid("count")
        .set_parallelism(2)
        .add_sink("exactly_once", move |cx| {
            TwoPhaseFileSink::create(&d, cx, encode_display::<String>)
        })
        .uid("exactly_once")
        .set_parallelism(1);
    let handle = env.start("rescale-unaligned").expect("the job starts");
    let job = Job {
        handle,
        stop,
        ended_at,
        out,
    };
    let persisted = |id: u64| {
        job.handle
            .checkpoint_stats()
            .and_then(|s| s.history.into_iter().find(|c| c.id == id))
            .map_or(0, |c| c.persisted_data)
    };
    let mut from = 2;
    for to in [3, 1] {
        // Until a checkpoint stored a megabyte in flight (the channels are full).
        until_in_flight(&job.handle, 1_000_000);
        let report = job
            .handle
            .rescale("count", to)
            .expect("the rescale succeeds");
        assert_eq!(
            (report.changes[0].from, report.changes[0].to),
            (from, to),
            "{report:?}"
        );
        let in_flight = persisted(report.checkpoint);
        // Per subtask: the count's subtasks stored the in-flight data (the source none).
        let parts = job
            .handle
            .checkpoint_stats()
            .and_then(|s| s.history.into_iter().find(|c| c.id == report.checkpoint))
            .map(|c| c.subtasks)
            .unwrap_or_default();
        let of = |v: &str| -> u64 {
            parts
                .iter()
                .filter(|p| p.vertex == v)
                .map(|p| p.persisted_data)
                .sum()
        };
        assert_eq!(
            parts.iter().map(|p| p.persisted_data).sum::<u64>(),
            in_flight
        );
        assert!(of("count") > 0 && of("ids") == 0, "{parts:?}");
        assert_eq!(parts.iter().filter(|p| p.vertex == "count").count(), from);
        eprintln!(
            "rescaled {from} -> {to} at checkpoint {} with {in_flight} bytes in flight",
            report.checkpoint
        );
        assert!(
            in_flight >= 1_000_000,
            "the rescale's checkpoint {} stored {in_flight} bytes in flight",
            report.checkpoint
        );
        assert_eq!(parallelism_of(&job.handle, "count"), to);
        two_more_checkpoints(&job.handle);
        from = to;
    }
    assert_eq!(job.handle.monitor().failures().len(), 0, "no failure");
    finish_and_check(job);
}

/// A rescale whose checkpoint holds in-flight data that cannot be dealt (a broadcast input:
/// each subtask holds its own copy) is rolled back at that checkpoint, naming why, and the job
/// runs on at its old parallelism.
#[test]
fn a_rescale_with_broadcast_data_in_flight_is_rolled_back_and_the_job_runs_on() {
    let cfg = unaligned_config();
    let (stop, ended_at) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let env = Env::with_config(cfg);
    endless_ids_at(&env, &stop, &ended_at, true)
        .broadcast()
        .map(|x: u64| {
            if x.is_multiple_of(32) {
                std::thread::sleep(Duration::from_micros(200));
            }
            x
        })
        .uid("slow")
        .set_parallelism(2)
        .discard();
    let job = env.start("rescale-broadcast").expect("the job starts");
    until_in_flight(&job, 1);
    match job.rescale("slow", 1) {
        Err(RescaleError::RolledBack(why)) => {
            assert!(why.contains("`slow`") && why.contains("broadcast"), "{why}")
        }
        other => panic!("expected a rollback, got {other:?}"),
    }
    assert_eq!(parallelism_of(&job, "slow"), 2);
    two_more_checkpoints(&job);
    stop.store(true, Ordering::SeqCst);
    job.wait().expect("the job finishes at its old parallelism");
}
