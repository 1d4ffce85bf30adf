//! `weir_testing` used as a user would: a job of one's own under record-keyed faults, by
//! restart-all from checkpoints and by promoting a backup, checked with the exactly-once
//! checker; a fault armed on an event (`wait_for_checkpoint`), not after a sleep; faults at a
//! checkpoint's snapshot, and at a rescale's.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{within_timeout, TempDir, TIMEOUT};
use weir::rate::RateControlConfig;
use weir::{Collector, Env, EnvConfig, RestartStrategy, ValueState};
use weir_testing::{
    encode_display, quiet_injected_panics, read_committed, wait_for_checkpoint, ExactlyOnce, Fault,
    FaultKind, FaultPlan, RecordFaults, TwoPhaseFileSink,
};

const N: u64 = 20_000;

/// Checkpoints every 10 ms into `dir`, up to `attempts` restarts without delay.
fn config(dir: &TempDir, attempts: u32) -> EnvConfig {
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(Duration::from_millis(10));
    cfg.checkpoint.directory = dir.path().to_owned();
    cfg.restart = Some(RestartStrategy::FixedDelay {
        attempts,
        delay: Duration::ZERO,
    });
    cfg
}

/// Three panics, in both subtasks of the operator (source shares 0..N/2 and N/2..N), each
/// at a record chosen in advance.
fn three_panics() -> RecordFaults<u64> {
    RecordFaults::new("op", FaultKind::Panic, vec![1_000, 12_000, 17_500])
}

/// Runs `N` ids through `op` (parallelism 2, [`three_panics`], backed up if `backup`) into
/// a collect sink; the job's result, the faults and what the sink committed.
fn run_three_panics(name: &str, backup: bool) -> (weir::JobResult, RecordFaults<u64>, Vec<u64>) {
    quiet_injected_panics();
    let dir = TempDir::new(name);
    let faults = three_panics();
    let mut cfg = config(&dir, 5);
    cfg.faults = faults.plan().clone();
    let env = Env::with_config(cfg);
    let op = env
        .generate(N, |i| i)
        .set_parallelism(2)
        .map(faults.wrap(|x: u64| x))
        .uid("op")
        .set_parallelism(2);
    let out = if backup { op.with_backup() } else { op }.collect();
    let handle = env.start(name).unwrap();
    let result = within_timeout(move || handle.wait()).unwrap();
    (result, faults, out.take())
}

#[test]
fn record_faults_under_restart_all_are_recovered_exactly_once() {
    let (result, faults, out) = run_three_panics("testing-utils-restart", false);
    assert_eq!(faults.fired(), 3, "{faults:?}");
    if let Some(stats) = &result.checkpoints {
        // Faults of both subtasks can fire in one attempt, before the job stops it.
        assert!((1..=3).contains(&stats.num_restarts), "{stats:?}");
    }
    ExactlyOnce::new(0..N).check(out).assert_exactly_once();
}

#[test]
fn record_faults_with_a_part_file_sink_commit_every_record_once() {
    quiet_injected_panics();
    let dir = TempDir::new("testing-utils-files");
    let out_dir = dir.path().join("out");
    let faults = RecordFaults::new("format", FaultKind::Panic, vec![4_000u64, 15_000]);
    let mut cfg = config(&dir, 5);
    cfg.faults = faults.plan().clone();
    let env = Env::with_config(cfg);
    let d = out_dir.clone();
    env.generate(N, |i| i)
        .set_parallelism(2)
        .map(faults.wrap(|x: u64| format!("{x},record")))
        .uid("format")
        .set_parallelism(2)
        .add_sink("exactly_once", move |cx| TwoPhaseFileSink::lines(&d, cx))
        .set_parallelism(2);
    let handle = env.start("testing-utils-files").unwrap();
    within_timeout(move || handle.wait()).unwrap();
    assert_eq!(faults.fired(), 2, "{faults:?}");
    let committed = read_committed(&out_dir).unwrap();
    assert_eq!(committed.uncommitted_files, 0, "{committed:?}");
    let ids = committed.lines.iter().map(|l| {
        l.split(',')
            .next()
            .and_then(|id| id.parse::<u64>().ok())
            .unwrap_or(u64::MAX)
    });
    ExactlyOnce::new(0..N).check(ids).assert_exactly_once();
}

#[test]
fn record_faults_in_a_backed_up_operator_are_recovered_by_promotion() {
    let (result, faults, out) = run_three_panics("testing-utils-backup", true);
    // The promoted backup replays from the primary's last state and sees the fault's record
    // again: a record fault fires once, so it passes.
    assert_eq!(faults.fired(), 3, "{faults:?}");
    let promotions: u64 = result.backups.iter().map(|b| b.promotions).sum();
    // At least: a busy machine may also declare a slow primary hung (a correct promotion).
    assert!(promotions >= 3, "{:?}", result.backups);
    ExactlyOnce::new(0..N).check(out).assert_exactly_once();
}

#[test]
fn a_fault_armed_once_a_checkpoint_completed_restores_from_it() {
    quiet_injected_panics();
    let dir = TempDir::new("testing-utils-armed");
    let mut cfg = config(&dir, 3);
    // An endless source, throttled so the collected output stays small.
    cfg.rate_control = RateControlConfig::fixed(20_000.0);
    let env = Env::with_config(cfg);
    let armed = Arc::new(AtomicBool::new(false));
    let fired = Arc::new(AtomicBool::new(false));
    let (a, f) = (armed.clone(), fired.clone());
    let out = env
        .generate(u64::MAX, |i| i)
        .map(move |x: u64| {
            if a.load(Ordering::SeqCst) && !f.swap(true, Ordering::SeqCst) {
                panic!("injected fault: `op` panics once armed, at record {x}");
            }
            x
        })
        .uid("op")
        .set_parallelism(2)
        .collect();
    let job = env.start("testing-utils-armed").unwrap();

    let safe = wait_for_checkpoint(&job, 2, TIMEOUT).unwrap();
    let safe_id = safe
        .last_completed_checkpoint_id
        .expect("a completed checkpoint");
    armed.store(true, Ordering::SeqCst);
    // The event of the restart, then a checkpoint of the restarted job.
    let deadline = Instant::now() + TIMEOUT;
    let restarted = loop {
        let s = job.checkpoint_stats().expect("stats");
        if s.num_restarts >= 1 {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "no restart within {TIMEOUT:?}: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    let after =
        wait_for_checkpoint(&job, restarted.number_of_completed_checkpoints + 1, TIMEOUT).unwrap();
    assert!(fired.load(Ordering::SeqCst));
    assert_eq!(after.num_restarts, 1, "{after:?}");
    let restored = after.last_restored_checkpoint_id.expect("restored");
    assert!(
        restored >= safe_id,
        "restored {restored}, completed {safe_id} before the fault"
    );

    // Stopped with a savepoint, the job has committed a prefix of the source, each once.
    let savepoints = TempDir::new("testing-utils-armed-savepoint");
    let savepoint_dir = savepoints.path().join("sp");
    within_timeout(move || job.stop_with_savepoint(&savepoint_dir)).unwrap();
    let got = out.take();
    let end = got.iter().max().map_or(0, |m| m + 1);
    assert!(end > 0, "nothing committed");
    ExactlyOnce::new(0..end).check(got).assert_exactly_once();
}

/// ids (1) -> keyed running count "count" (2) -> exactly-once part files "exactly_once" (1),
/// under `plan`; the stop flag and the source's end, and the output directory.
fn snapshot_fault_job(
    name: &str,
    plan: FaultPlan,
    dir: &TempDir,
    out: &TempDir,
) -> (weir::JobHandle, Arc<AtomicBool>, Arc<AtomicU64>) {
    let mut cfg = config(dir, 3);
    cfg.checkpoint.interval = Some(Duration::from_millis(20));
    cfg.faults = plan;
    cfg.stderr_warnings = false;
    let env = Env::with_config(cfg);
    let (stop, ended_at) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let d = out.path().to_owned();
    common::endless_ids(&env, &stop, &ended_at)
        .key_by(|x: &u64| x % KEYS)
        .process(
            |_k: &u64, n: &mut ValueState<u64>, x: u64, out: &mut Collector<String>| {
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
    (env.start(name).expect("starts"), stop, ended_at)
}

const KEYS: u64 = 10;

/// Stops the input and checks every id once with the count a sequential run gives.
fn stop_and_check(job: weir::JobHandle, stop: &AtomicBool, ended_at: &AtomicU64, out: &TempDir) {
    stop.store(true, Ordering::SeqCst);
    job.wait().expect("the job finishes");
    let end = ended_at.load(Ordering::SeqCst);
    let committed = read_committed(out.path()).expect("the sink's output");
    let mut ids = Vec::new();
    for line in &committed.lines {
        let (x, c) = line.split_once(' ').expect("`id count`");
        let (x, c): (u64, u64) = (x.parse().unwrap(), c.parse().unwrap());
        assert_eq!(c, x / KEYS + 1, "id {x}: the sequential count");
        ids.push(x);
    }
    ExactlyOnce::new(0..end).check(ids).assert_exactly_once();
}

#[test]
fn a_snapshot_fault_fails_the_first_checkpoint_after_the_event_and_it_is_recovered() {
    quiet_injected_panics();
    let (dir, out) = (
        TempDir::new("snapshot-fault"),
        TempDir::new("snapshot-fault-out"),
    );
    // The sink fails at its snapshot of the checkpoint after checkpoint 2: the sources and
    // the count have taken theirs, it has not.
    let plan = FaultPlan::new(vec![Fault::new("exactly_once", FaultKind::Panic, 0)
        .at_snapshot()
        .after_checkpoints(2)]);
    let (job, stop, ended_at) = snapshot_fault_job("snapshot-fault", plan.clone(), &dir, &out);
    let deadline = Instant::now() + TIMEOUT;
    let restarted = loop {
        let s = job.checkpoint_stats().unwrap_or_default();
        if s.num_restarts >= 1 && s.last_restored_checkpoint_id.is_some() {
            break s;
        }
        assert!(Instant::now() < deadline, "no restart: {s:?}");
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(plan.fired(), 1);
    assert_eq!(restarted.last_restored_checkpoint_id, Some(2));
    let failures = job.failures();
    assert!(
        failures[0]
            .error
            .contains("injected fault: operator `exactly_once` panics at its snapshot"),
        "{failures:?}"
    );
    wait_for_checkpoint(&job, restarted.number_of_completed_checkpoints + 2, TIMEOUT).unwrap();
    stop_and_check(job, &stop, &ended_at, &out);
}

#[test]
fn a_hand_over_fault_fires_at_a_rescales_checkpoint_and_at_no_other() {
    quiet_injected_panics();
    let (dir, out) = (
        TempDir::new("hand-over-fault"),
        TempDir::new("hand-over-fault-out"),
    );
    let plan = FaultPlan::new(vec![Fault::new("count", FaultKind::Panic, 0).at_hand_over()]);
    let (job, stop, ended_at) = snapshot_fault_job("hand-over-fault", plan.clone(), &dir, &out);
    wait_for_checkpoint(&job, 3, TIMEOUT).unwrap();
    assert_eq!(plan.fired(), 0, "not at an ordinary checkpoint");
    match job.rescale("count", 3) {
        Err(weir::RescaleError::Aborted(why)) => assert!(why.contains("failed"), "{why}"),
        other => panic!("a fault at the rescale's checkpoint: {other:?}"),
    }
    assert_eq!(plan.fired(), 1);
    // The job recovers at its old parallelism; a rescale then goes through (the fault fired).
    let after = job.checkpoint_stats().unwrap_or_default();
    wait_for_checkpoint(&job, after.number_of_completed_checkpoints + 1, TIMEOUT).unwrap();
    assert_eq!(job.checkpoint_stats().map(|s| s.num_restarts), Some(1));
    job.rescale("count", 3).expect("the second rescale");
    let count = job
        .vertices()
        .into_iter()
        .find(|v| v.id == "count")
        .expect("count");
    assert_eq!(count.parallelism, 3);
    stop_and_check(job, &stop, &ended_at, &out);
}

#[test]
fn a_fault_in_promoted_fires_in_the_backup_while_it_replays_the_record_its_primary_failed_at() {
    quiet_injected_panics();
    let dir = TempDir::new("in-promoted");
    let mut cfg = config(&dir, 5);
    // The primary of `op` subtask 0 fails at its record 3000; its backup, promoted, replays
    // the records since the state it holds and fails at the same record.
    let plan = FaultPlan::new(vec![
        Fault::new("op", FaultKind::Panic, 3_000).in_subtask(0),
        Fault::new("op", FaultKind::Panic, 3_000)
            .in_subtask(0)
            .in_promoted(),
        // Subtask 1 is never promoted: its fault never fires.
        Fault::new("op", FaultKind::Panic, 100)
            .in_subtask(1)
            .in_promoted(),
    ]);
    cfg.faults = plan.clone();
    let env = Env::with_config(cfg);
    let out = env
        .generate(N, |i| i)
        .set_parallelism(2)
        .map(|x: u64| x)
        .uid("op")
        .set_parallelism(2)
        .with_backup()
        .collect();
    let handle = env.start("in-promoted").unwrap();
    let result = within_timeout(move || handle.wait()).unwrap();
    assert_eq!(
        plan.fired(),
        2,
        "subtask 0's two, the second in its promoted backup"
    );
    let promotions: u64 = result.backups.iter().map(|b| b.promotions).sum();
    assert!(promotions >= 1, "{:?}", result.backups);
    ExactlyOnce::new(0..N)
        .check(out.take())
        .assert_exactly_once();
}
