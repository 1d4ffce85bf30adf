//! A process killed with SIGKILL mid-job and started again with the same checkpoint directory
//! resumes from the latest complete checkpoint (`CheckpointConfig::restore_latest`), and its
//! exactly-once file output holds every id once, with no staging file left.
//!
//! The child processes are this test binary run again (`current_exe`) with `CHILD` set to
//! the run's settings: [`child_job`] runs a job of `N` ids into two exactly-once file sinks
//! (`TwoPhaseFileSink` and `write_text_exactly_once`), prints a line on stdout each time a
//! checkpoint completes, and the parent kills it upon such a line — an event, not a time. The
//! first child's source is throttled so that it is still running then; if it finished anyway
//! (a machine slow in an unexpected way), the output it committed is checked the same.

mod common;

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use common::TempDir;
use weir::rate::RateControlConfig;
use weir::{Env, EnvConfig, JobError, RestoreLatest};
use weir_testing::{
    encode_display, read_committed, wait_for_checkpoint, ExactlyOnce, TwoPhaseFileSink,
};

/// Set in a child process: `<base dir>;<rate or 0>;<retained>;<backpressured: 0 or 1>;<the
/// slow stage's parallelism>`.
const CHILD: &str = "WEIR_CRASH_RESUME_CHILD";
/// Ids the job writes: `0..N`.
const N: u64 = 60_000;
/// Ids the backpressured job writes (its channels hold more than a megabyte of them).
const N_BACKPRESSURED: u64 = 600_000;
/// The first child's records per second: it would need 20 s to finish.
const SLOW_RATE: f64 = 3_000.0;
/// The job's name (its checkpoints are under `<base>/checkpoints/<JOB>/`).
const JOB: &str = "crash-resume";
/// How long the parent waits for a child's line or end before failing.
const PATIENCE: Duration = Duration::from_secs(120);

fn checkpoints(base: &Path) -> PathBuf {
    base.join("checkpoints")
}
fn two_phase_out(base: &Path) -> PathBuf {
    base.join("out-two-phase")
}
fn staged_out(base: &Path) -> PathBuf {
    base.join("out-staged")
}

/// The child's job: `0..N` (throttled to `rate` if not 0) into both exactly-once file sinks,
/// checkpointed every 20 ms, resumed from the latest checkpoint if an earlier run left one.
/// Prints `CHILD checkpoint <n>` for each completed checkpoint, `CHILD restored <id|none>`
/// and `CHILD done` at the end.
#[test]
#[ignore = "the child process its parent tests start (with --ignored); not a test of its own"]
fn child_job() {
    let spec = std::env::var(CHILD)
        .unwrap_or_else(|_| panic!("{CHILD} is not set: only the parent tests run this"));
    let mut parts = spec.split(';');
    let base = PathBuf::from(parts.next().expect("base dir"));
    let rate: f64 = parts.next().and_then(|r| r.parse().ok()).expect("rate");
    let retained: usize = parts.next().and_then(|r| r.parse().ok()).expect("retained");
    let backpressured = parts.next() == Some("1");
    let slow_parallelism: usize = parts.next().and_then(|p| p.parse().ok()).unwrap_or(2);
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(Duration::from_millis(20));
    cfg.checkpoint.directory = checkpoints(&base);
    cfg.checkpoint.retained = retained;
    cfg.checkpoint.restore_latest = Some(RestoreLatest::if_any(checkpoints(&base)));
    if rate > 0.0 {
        cfg.rate_control = RateControlConfig::fixed(rate);
    }
    let n = if backpressured {
        // Unaligned checkpoints of a job whose `slow` stage keeps every channel into it full:
        // windows fixed at 128 batches of 1,024 ids with 24 bytes of padding each (megabytes
        // in flight once full, less than half of the ids: the source is still running).
        cfg.checkpoint.unaligned = true;
        cfg.checkpoint.interval = Some(Duration::from_millis(100));
        cfg.latency_target = None;
        cfg.channel_capacity = 128;
        N_BACKPRESSURED
    } else {
        N
    };
    let env = Env::with_config(cfg);
    let ids = if backpressured {
        // Each id travels with 24 bytes of padding to the slow stage, which drops it.
        env.generate(n, |i| (i, format!("{i:024}")))
            .uid("ids")
            .map(|(x, _pad): (u64, String)| {
                if x.is_multiple_of(32) {
                    std::thread::sleep(Duration::from_micros(200));
                }
                x
            })
            .uid("slow")
            .set_parallelism(slow_parallelism)
    } else {
        env.generate(n, |i| i).uid("ids")
    };
    let d = two_phase_out(&base);
    ids.clone()
        .add_sink("two_phase", move |cx| {
            TwoPhaseFileSink::create(&d, cx, encode_display::<u64>)
        })
        .uid("two_phase")
        .set_parallelism(2);
    ids.write_text_exactly_once(staged_out(&base))
        .uid("staged")
        .set_parallelism(2);
    let job = env.start(JOB).expect("the child's job starts");
    let mut seen = 0;
    // Until the job ends (then waiting fails).
    while let Ok(stats) = wait_for_checkpoint(&job, seen + 1, PATIENCE) {
        seen = stats.number_of_completed_checkpoints;
        // The in-flight data the newest completed checkpoint stored, first.
        let persisted = stats
            .history
            .iter()
            .rev()
            .find(|c| c.status == weir::CheckpointStatus::Completed)
            .map_or(0, |c| c.persisted_data);
        println!("CHILD persisted {persisted}");
        println!("CHILD checkpoint {seen}");
    }
    let result = job.wait().expect("the child's job succeeds");
    let restored = result
        .checkpoints
        .and_then(|c| c.last_restored_checkpoint_id);
    match restored {
        Some(id) => println!("CHILD restored {id}"),
        None => println!("CHILD restored none"),
    }
    println!("CHILD done");
}

fn spawn(base: &Path, rate: f64, retained: usize) -> Running {
    spawn_job(base, rate, retained, false, 2)
}

fn spawn_job(
    base: &Path,
    rate: f64,
    retained: usize,
    backpressured: bool,
    slow_parallelism: usize,
) -> Running {
    let mut cmd = common::child_job_command();
    let bp = u8::from(backpressured);
    cmd.env(
        CHILD,
        format!(
            "{};{rate};{retained};{bp};{slow_parallelism}",
            base.display()
        ),
    )
    .env("WEIR_STDERR_WARNINGS", "1");
    Running(common::start_child(cmd))
}

/// A running child, its stdout lines arriving on a channel and its stderr collected.
struct Running(common::ChildRun);

/// What a child reported.
#[derive(Debug, Default)]
struct Report {
    checkpoints: u64,
    /// The most in-flight data a completed checkpoint stored, bytes.
    persisted: u64,
    restored: Option<Option<u64>>,
    done: bool,
    stderr: String,
}

impl Running {
    /// Reads the child's lines until it reported `kill_at` checkpoints (then SIGKILLs it) or
    /// ended by itself.
    fn run(self, kill_at: Option<u64>) -> Report {
        self.run_until(kill_at, 0)
    }

    /// [`run`](Self::run), killing only at a checkpoint that stored at least `persisted` bytes
    /// of in-flight data.
    fn run_until(self, kill_at: Option<u64>, persisted: u64) -> Report {
        let common::ChildRun {
            mut child,
            lines,
            stderr,
        } = self.0;
        let mut r = Report::default();
        let mut last_persisted = 0;
        loop {
            let line = match lines.recv_timeout(PATIENCE) {
                Ok(line) => line,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let stderr = stderr.join().unwrap_or_default();
                    panic!("the child said nothing for {PATIENCE:?}; stderr:\n{stderr}");
                }
            };
            // The test harness prints `test child_job ... ` before the child's first line.
            let Some(line) = line.find("CHILD ").map(|at| &line[at..]) else {
                continue;
            };
            if let Some(b) = line.strip_prefix("CHILD persisted ") {
                last_persisted = b.parse().expect("a byte count");
                r.persisted = r.persisted.max(last_persisted);
            } else if let Some(n) = line.strip_prefix("CHILD checkpoint ") {
                r.checkpoints = n.parse().expect("a checkpoint count");
                if kill_at.is_some_and(|k| r.checkpoints >= k) && last_persisted >= persisted {
                    // SIGKILL on Unix: no destructor, no flush, no cleanup runs.
                    child.kill().expect("kill the child");
                    break;
                }
            } else if let Some(id) = line.strip_prefix("CHILD restored ") {
                r.restored = Some(id.parse().ok());
            } else if line == "CHILD done" {
                r.done = true;
            }
        }
        let status = child.wait().expect("the child ends");
        r.stderr = stderr.join().unwrap_or_default();
        if !r.done {
            assert!(
                kill_at.is_some(),
                "the child ended without finishing ({status}); stderr:\n{}",
                r.stderr
            );
        } else {
            assert!(status.success(), "child failed: {status}\n{}", r.stderr);
        }
        r
    }
}

/// Every id once in each sink's committed output, no staging file left, and no checkpoint
/// left behind by the finished job and the run it resumed.
fn assert_output_exactly_once(base: &Path) {
    assert_ids_exactly_once(base, N)
}

fn assert_ids_exactly_once(base: &Path, n: u64) {
    let committed = read_committed(&two_phase_out(base)).expect("read the two-phase output");
    assert_eq!(committed.uncommitted_files, 0, "orphaned staging files");
    let ids = committed
        .lines
        .iter()
        .map(|l| l.parse::<u64>().expect("an id"));
    ExactlyOnce::new(0..n).check(ids).assert_exactly_once();

    let mut staged_ids = Vec::new();
    for entry in std::fs::read_dir(staged_out(base)).expect("the staged output") {
        let entry = entry.expect("a directory entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        assert!(
            !name.starts_with('.'),
            "orphaned staging file {name} of write_text_exactly_once"
        );
        let text = std::fs::read_to_string(entry.path()).expect("a part file");
        staged_ids.extend(text.lines().map(|l| l.parse::<u64>().expect("an id")));
    }
    ExactlyOnce::new(0..n)
        .check(staged_ids)
        .assert_exactly_once();

    let runs: Vec<_> = std::fs::read_dir(checkpoints(base).join(JOB))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(
        runs.is_empty(),
        "the finished job left checkpoint runs: {runs:?}"
    );
}

/// The newest complete checkpoint directory of the (only) run left under `base`.
fn newest_checkpoint(base: &Path) -> (u64, PathBuf) {
    let job_dir = checkpoints(base).join(JOB);
    let mut found = Vec::new();
    for run in std::fs::read_dir(&job_dir)
        .expect("the job's runs")
        .flatten()
    {
        for chk in std::fs::read_dir(run.path()).expect("a run").flatten() {
            let name = chk.file_name().to_string_lossy().into_owned();
            let Some(id) = name
                .strip_prefix("chk-")
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            if chk.path().join("_metadata").is_file() {
                found.push((id, chk.path()));
            }
        }
    }
    found.sort();
    found.pop().expect("a complete checkpoint")
}

#[test]
fn a_job_killed_mid_run_resumes_from_its_latest_checkpoint_with_every_id_once() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let base = TempDir::new("crash-resume");
    let first = spawn(base.path(), SLOW_RATE, 1).run(Some(3));
    if first.done {
        // The first child finished before its third checkpoint: nothing to resume, and a
        // supervisor would not start it again. Its output must hold anyway.
        eprintln!("note: the first child finished before it could be killed");
        assert_output_exactly_once(base.path());
        return;
    }
    let second = spawn(base.path(), 0.0, 1).run(None);
    let restored = second
        .restored
        .flatten()
        .unwrap_or_else(|| panic!("the second run restored nothing:\n{}", second.stderr));
    eprintln!(
        "killed after {} checkpoints; resumed from checkpoint {restored}",
        first.checkpoints
    );
    assert!(
        restored >= 3,
        "restored checkpoint {restored}, but 3 had completed before the kill"
    );
    assert_output_exactly_once(base.path());
}

/// Unaligned checkpoints under backpressure, storing over a megabyte of in-flight data: the
/// process is SIGKILLed once three completed and the newest stored a megabyte, and a new
/// process resumes from the newest, replaying its channel state: every id once in both
/// exactly-once sinks.
#[test]
fn a_job_killed_with_a_megabyte_in_flight_resumes_from_its_unaligned_checkpoint() {
    killed_with_a_megabyte_in_flight(2);
}

/// As above, the new process running the slow stage at parallelism 1 (2 before): both old
/// subtasks' in-flight data goes to the one new subtask, which heads its own chain to replay
/// it (at equal parallelism it would be chained to the source, with no input channel).
#[test]
fn a_job_killed_with_a_megabyte_in_flight_resumes_at_another_parallelism() {
    killed_with_a_megabyte_in_flight(1);
}

fn killed_with_a_megabyte_in_flight(resume_at: usize) {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let base = TempDir::new(&format!("crash-resume-unaligned-{resume_at}"));
    let first = spawn_job(base.path(), 0.0, 1, true, 2).run_until(Some(3), 1_000_000);
    assert!(
        !first.done,
        "the first child finished before a checkpoint stored a megabyte in flight (at most {})",
        first.persisted
    );
    assert!(
        first.persisted >= 1_000_000,
        "the checkpoints stored {} bytes in flight at most",
        first.persisted
    );
    let second = spawn_job(base.path(), 0.0, 1, true, resume_at).run(None);
    let restored = second
        .restored
        .flatten()
        .unwrap_or_else(|| panic!("the second run restored nothing:\n{}", second.stderr));
    eprintln!(
        "killed after {} checkpoints ({} bytes in flight); resumed from checkpoint {restored}",
        first.checkpoints, first.persisted
    );
    assert!(restored >= 3, "restored {restored}, 3 had completed");
    assert_ids_exactly_once(base.path(), N_BACKPRESSURED);
}

#[test]
fn restore_latest_skips_a_corrupted_newest_checkpoint_for_the_one_before() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let base = TempDir::new("crash-corrupt");
    // Two checkpoints retained, so that there is one before the newest.
    let first = spawn(base.path(), SLOW_RATE, 2).run(Some(3));
    if first.done {
        eprintln!("note: the first child finished before it could be killed");
        assert_output_exactly_once(base.path());
        return;
    }
    let (newest, dir) = newest_checkpoint(base.path());
    let state = std::fs::read_dir(&dir)
        .expect("the newest checkpoint")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "state"))
        .expect("a state file");
    let len = std::fs::metadata(&state).expect("its size").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&state)
        .and_then(|f| f.set_len(len / 2))
        .expect("truncate it");

    let second = spawn(base.path(), 0.0, 2).run(None);
    assert_eq!(
        second.restored,
        Some(Some(newest - 1)),
        "stderr:\n{}",
        second.stderr
    );
    assert!(
        second.stderr.contains("skipping checkpoint") && second.stderr.contains("unreadable"),
        "no warning about the corrupted checkpoint:\n{}",
        second.stderr
    );
    // What checkpoint `newest` had committed is taken back and written again.
    assert_output_exactly_once(base.path());
}

/// A job asked to resume strictly fails when there is nothing to resume; asked to resume if
/// it can, it starts fresh.
#[test]
fn required_restore_without_a_checkpoint_fails_and_if_any_starts_fresh() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let base = TempDir::new("crash-none");
    let run = |restore: RestoreLatest| {
        let mut cfg = EnvConfig::default();
        cfg.checkpoint.interval = Some(Duration::from_millis(20));
        cfg.checkpoint.directory = checkpoints(base.path());
        cfg.checkpoint.restore_latest = Some(restore);
        cfg.stderr_warnings = false;
        let env = Env::with_config(cfg);
        let out = env.generate(1_000, |i| i).collect();
        env.execute(JOB).map(|r| (r, out.take().len()))
    };
    let e = run(RestoreLatest::required(checkpoints(base.path()))).unwrap_err();
    assert!(
        matches!(&e, JobError::NoCheckpointToRestore { .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("no usable checkpoint"), "{e}");
    let (r, n) = run(RestoreLatest::if_any(checkpoints(base.path()))).expect("a fresh start");
    assert_eq!(n, 1_000);
    assert_eq!(
        r.checkpoints.and_then(|c| c.last_restored_checkpoint_id),
        None
    );

    // A run directory with only an unreadable checkpoint: the same, with the reason.
    let chk = checkpoints(base.path())
        .join(JOB)
        .join("run-1-1-0")
        .join("chk-4");
    std::fs::create_dir_all(&chk).unwrap();
    std::fs::write(chk.join("_metadata"), b"\xffnot cbor").unwrap();
    let e = run(RestoreLatest::required(checkpoints(base.path()))).unwrap_err();
    assert!(e.to_string().contains("unreadable"), "{e}");
}
