//! Disk trouble mid-job: a full, read-only or blocked checkpoint directory fails checkpoints —
//! counted, reported with the path and the I/O error, under the tolerable-failure policy —
//! and never the data path. Within the tolerance the job runs on without a restart; beyond it
//! the job restarts from the last good checkpoint; once the directory can be written again,
//! checkpoints complete again. Under continuous load into an exactly-once sink, every id
//! arrives once with the count a sequential run gives.
//!
//! The faults are real I/O errors from the checkpoint store: injected with
//! `weir_testing::StorageFaults` (the next `k` checkpoints' files fail with `ENOSPC` or
//! `EROFS`; the tests run as root, so permissions would not stop a write), or made by the
//! file system itself (a file where a coming checkpoint's directory goes). Every wait is on an
//! event (checkpoints completed or failed, a restart), never on the clock; the deadlines only
//! turn a hang into a failure.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{endless_ids, two_more_checkpoints, TempDir};
use weir::{
    CheckpointStats, CheckpointStatus, Collector, Env, EnvConfig, JobHandle, RestartStrategy,
    ValueState,
};
use weir_testing::{
    encode_display, read_committed, DiskTrouble, ExactlyOnce, StorageFaults, TwoPhaseFileSink,
};

const KEYS: u64 = 16;
/// Bounds every wait, so that a regression fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(60);

/// A running job: ids (1) -> keyed running count (2) -> exactly-once part files (1).
struct Job {
    handle: JobHandle,
    name: String,
    stop: Arc<AtomicBool>,
    ended_at: Arc<AtomicU64>,
    checkpoints: TempDir,
    out: TempDir,
}

fn start(name: &str, tolerated: u32) -> Job {
    common::logged();
    let (checkpoints, out) = (TempDir::new(name), TempDir::new(&format!("{name}-out")));
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(Duration::from_millis(20));
    cfg.checkpoint.directory = checkpoints.path().to_owned();
    cfg.checkpoint.tolerable_failed_checkpoints = tolerated;
    cfg.restart = Some(RestartStrategy::FixedDelay {
        attempts: 3,
        delay: Duration::ZERO,
    });
    cfg.stderr_warnings = false;
    let (stop, ended_at) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let env = Env::with_config(cfg);
    let dir = out.path().to_owned();
    endless_ids(&env, &stop, &ended_at)
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
            TwoPhaseFileSink::create(&dir, cx, encode_display::<String>)
        })
        .uid("exactly_once")
        .set_parallelism(1);
    let handle = env.start(name).expect("the job starts");
    Job {
        handle,
        name: name.to_owned(),
        stop,
        ended_at,
        checkpoints,
        out,
    }
}

impl Job {
    fn stats(&self) -> CheckpointStats {
        self.handle.checkpoint_stats().unwrap_or_default()
    }

    /// Waits until `done` holds of the job's statistics.
    fn wait_until(&self, what: &str, done: impl Fn(&CheckpointStats) -> bool) -> CheckpointStats {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let stats = self.stats();
            if done(&stats) {
                return stats;
            }
            assert!(
                Instant::now() < deadline && !self.handle.is_finished(),
                "{}: never {what}: {stats:?}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The directory the job's run writes its checkpoints into (`<dir>/<job>/run-*`).
    fn run_dir(&self) -> PathBuf {
        let runs: Vec<PathBuf> = std::fs::read_dir(self.checkpoints.path().join(&self.name))
            .expect("the job's checkpoint directory")
            .map(|e| e.expect("an entry").path())
            .collect();
        assert_eq!(runs.len(), 1, "one run: {runs:?}");
        runs.into_iter().next().expect("checked")
    }

    /// Stops the input, waits for the end, and checks every id once with its sequential
    /// count. Returns the job's last statistics.
    fn finish_and_check(self) -> CheckpointStats {
        self.stop.store(true, Ordering::SeqCst);
        let result = self.handle.wait().expect("the job finishes");
        let end = self.ended_at.load(Ordering::SeqCst);
        assert!(end > 0, "the source ran");
        let committed = read_committed(self.out.path()).expect("the sink's output");
        let mut ids = Vec::with_capacity(committed.lines.len());
        for line in &committed.lines {
            let (x, c) = line.split_once(' ').expect("`id count` lines");
            let (x, c): (u64, u64) = (x.parse().expect("id"), c.parse().expect("count"));
            assert_eq!(c, x / KEYS + 1, "id {x}: the count a sequential run gives");
            ids.push(x);
        }
        let report = ExactlyOnce::new(0..end).check(ids);
        assert!(report.is_exactly_once(), "{report}");
        result.checkpoints.expect("checkpoint statistics")
    }
}

/// Why checkpoint `id` of job `job` failed, as the job logged it (`None`: it did not fail).
fn logged_failure(job: &str, id: u64) -> Option<String> {
    common::logged()
        .lines()
        .find(|l| {
            l.contains("checkpoint failed")
                && l.contains(&format!(" job={job} "))
                && l.contains(&format!(" checkpoint={id} "))
        })
        .map(str::to_owned)
}

/// Checkpoint `id` failed, and the job said why: the file of its directory and `error`.
fn assert_failed_with(job: &str, run: &Path, id: u64, error: &str) {
    let why = logged_failure(job, id)
        .unwrap_or_else(|| panic!("{job}: checkpoint {id} failed, with a warning"));
    let dir = run.join(format!("chk-{id}"));
    assert!(
        why.contains(&dir.display().to_string()) && why.contains(error),
        "checkpoint {id} failed naming {} and `{error}`: {why}",
        dir.display()
    );
}

#[test]
fn a_full_disk_within_the_tolerance_fails_checkpoints_not_the_job() {
    let job = start("disk-full-tolerated", 3);
    let disk = StorageFaults::new(job.checkpoints.path(), DiskTrouble::Full);
    two_more_checkpoints(&job.handle);
    let before = job.stats();
    disk.fail_next(3);
    let failed = job.wait_until("failed 3 checkpoints", |s| {
        s.number_of_failed_checkpoints >= before.number_of_failed_checkpoints + 3
    });
    let doomed = disk.failed_checkpoints();
    assert_eq!(doomed.len(), 3, "{doomed:?}");
    assert!(
        doomed.windows(2).all(|w| w[1] == w[0] + 1),
        "the next checkpoints, one after another: {doomed:?}"
    );
    let run = job.run_dir();
    for &id in &doomed {
        assert_eq!(
            failed.history.iter().find(|r| r.id == id).map(|r| r.status),
            Some(CheckpointStatus::Failed),
            "{:?}",
            failed.history
        );
        assert_failed_with(&job.name, &run, id, "No space left on device");
    }
    // The disk has room again: checkpoints complete again, after the failed ones.
    two_more_checkpoints(&job.handle);
    let after = job.stats();
    assert!(after.last_completed_checkpoint_id > doomed.last().copied());
    assert_eq!(
        after.number_of_failed_checkpoints,
        before.number_of_failed_checkpoints + 3,
        "exactly the checkpoints the disk failed"
    );
    assert_eq!(after.num_restarts, 0, "tolerated: no restart");
    assert!(
        job.handle.failures().is_empty(),
        "the data path never failed: {:?}",
        job.handle.failures()
    );
    assert!(disk.failed_writes() >= 3);
    let last = job.finish_and_check();
    assert_eq!(last.num_restarts, 0);
}

#[test]
fn a_full_disk_beyond_the_tolerance_restarts_the_job_from_the_last_good_checkpoint() {
    let job = start("disk-full-restart", 1);
    let disk = StorageFaults::new(job.checkpoints.path(), DiskTrouble::Full);
    two_more_checkpoints(&job.handle);
    disk.fail_next(2);
    let restarted = job.wait_until("restarted from a checkpoint", |s| {
        s.num_restarts >= 1 && s.last_restored_checkpoint_id.is_some()
    });
    let doomed = disk.failed_checkpoints();
    assert_eq!(doomed.len(), 2, "{doomed:?}");
    assert_eq!(doomed[1], doomed[0] + 1, "{doomed:?}");
    assert_eq!(
        restarted.last_restored_checkpoint_id,
        Some(doomed[0] - 1),
        "restored the last checkpoint before the failed ones"
    );
    let failures = job.handle.failures();
    assert_eq!(failures.len(), 1, "{failures:?}");
    let error = &failures[0].error;
    assert!(
        error.contains("2 checkpoints failed in a row (tolerated: 1)")
            && error.contains(&format!("chk-{}", doomed[1]))
            && error.contains("No space left on device"),
        "the restart's cause is the checkpoint policy, with the I/O error: {error}"
    );
    // The restarted job's checkpoints complete, and it does not restart again.
    two_more_checkpoints(&job.handle);
    let after = job.stats();
    assert_eq!(after.num_restarts, 1);
    assert!(after.last_completed_checkpoint_id > Some(doomed[1]));
    assert_eq!(job.handle.failures().len(), 1);
    let last = job.finish_and_check();
    assert_eq!(last.num_restarts, 1);
}

#[test]
fn a_read_only_disk_fails_every_checkpoint_until_it_can_be_written_again() {
    let job = start("disk-read-only", 1_000);
    let disk = StorageFaults::new(job.checkpoints.path(), DiskTrouble::ReadOnly);
    two_more_checkpoints(&job.handle);
    let before = job.stats();
    disk.fail_next(u64::MAX);
    // Checkpoints fail one after another while the records flow on.
    let failing = job.wait_until("failed 5 checkpoints", |s| {
        s.number_of_failed_checkpoints >= before.number_of_failed_checkpoints + 5
    });
    let doomed = disk.failed_checkpoints();
    assert!(doomed.len() >= 5, "{doomed:?}");
    let run = job.run_dir();
    for &id in &doomed[..5] {
        assert_failed_with(&job.name, &run, id, "Read-only file system");
    }
    assert!(
        failing.number_of_completed_checkpoints <= before.number_of_completed_checkpoints + 1,
        "at most the checkpoint in flight completed: {failing:?}"
    );
    assert_eq!(failing.num_restarts, 0);
    disk.heal();
    let healed = job.stats().number_of_completed_checkpoints;
    common::two_more_checkpoints(&job.handle);
    assert!(job.stats().number_of_completed_checkpoints >= healed + 2);
    assert_eq!(job.stats().num_restarts, 0);
    assert!(job.handle.failures().is_empty());
    job.finish_and_check();
}

#[test]
fn a_file_where_a_checkpoint_directory_goes_fails_that_checkpoint_only() {
    let job = start("disk-blocked", 1);
    two_more_checkpoints(&job.handle);
    let run = job.run_dir();
    // A file takes the name of a checkpoint directory not made yet: the file system refuses
    // the directory (no injection). `create_new` is atomic, so a checkpoint that began
    // meanwhile keeps its directory and the next one is taken.
    let mut id = job.stats().last_completed_checkpoint_id.expect("completed") + 2;
    let blocker = loop {
        let path = run.join(format!("chk-{id}"));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(_) => break path,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => id += 1,
            Err(e) => panic!("cannot create {}: {e}", path.display()),
        }
    };
    job.wait_until("failed the blocked checkpoint", |_| {
        logged_failure(&job.name, id).is_some()
    });
    assert_failed_with(&job.name, &run, id, "File exists");
    let stats = job.wait_until("completed the one after", |s| {
        s.last_completed_checkpoint_id > Some(id)
    });
    assert_eq!(stats.num_restarts, 0);
    assert!(job.handle.failures().is_empty());
    std::fs::remove_file(&blocker).expect("remove the blocker");
    two_more_checkpoints(&job.handle);
    job.finish_and_check();
}
