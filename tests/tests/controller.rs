//! The job controller's states, seen from outside: the transitions it logs for a restart and
//! for a failover, and the commands it answers while it waits to restart. Faults are real
//! (injected panics); waits are on logged transitions, never on time.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::{within_timeout, TempDir};
use weir::{BackupPolicy, Env, EnvConfig, JobError, RestartStrategy};
use weir_testing::{Fault, FaultKind, FaultPlan};

/// Everything the crate logged at info and above, for every test of this binary.
fn log() -> Arc<Mutex<Vec<u8>>> {
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let writer = buf.clone();
        tracing_subscriber::fmt()
            .with_env_filter("weir=info")
            .with_ansi(false)
            .with_writer(move || Tee(writer.clone()))
            .init();
        buf
    })
    .clone()
}

struct Tee(Arc<Mutex<Vec<u8>>>);

impl Write for Tee {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The transitions job `job` logged so far, as `(from, to)`.
fn transitions(job: &str) -> Vec<(String, String)> {
    let buf = log();
    let text = String::from_utf8_lossy(&buf.lock().expect("log buffer")).into_owned();
    let field = |line: &str, name: &str| -> Option<String> {
        let at = line.find(&format!(" {name}=\""))? + name.len() + 3;
        let end = line[at..].find('"')? + at;
        Some(line[at..end].to_owned())
    };
    text.lines()
        .filter(|l| l.contains("job state transition") && l.contains(&format!(" job={job} ")))
        .filter_map(|l| Some((field(l, "from")?, field(l, "to")?)))
        .collect()
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn config(faults: FaultPlan, restart: RestartStrategy) -> EnvConfig {
    let mut cfg = EnvConfig::default();
    cfg.batch_size = 64;
    cfg.arbiters = 2;
    cfg.faults = faults;
    cfg.restart = Some(restart);
    cfg.heartbeat_timeout = Duration::from_secs(20);
    cfg
}

#[test]
fn a_restart_goes_through_recovering_and_deploying_and_each_transition_is_logged() {
    log();
    let faults = FaultPlan::new(vec![Fault::new("op", FaultKind::Panic, 500)]);
    let restart = RestartStrategy::FixedDelay {
        attempts: 3,
        delay: Duration::from_millis(5),
    };
    let cfg = config(faults.clone(), restart);
    let (result, mut got) = within_timeout(move || {
        let env = Env::with_config(cfg);
        let out = env
            .generate(2_000, |i| i)
            .map(|x: u64| x)
            .uid("op")
            .collect();
        (env.execute("ctl-restart"), out.take())
    });
    result.expect("the job recovers");
    assert_eq!(faults.fired(), 1);
    got.sort_unstable();
    got.dedup();
    assert_eq!(got.len(), 2_000, "every record after the restart");
    assert_eq!(
        transitions("ctl-restart"),
        pairs(&[
            ("Deploying", "Running"),
            ("Running", "Recovering"),
            ("Recovering", "Deploying"),
            ("Deploying", "Running"),
            ("Running", "Stopping"),
            ("Stopping", "Finished"),
        ])
    );
}

#[test]
fn a_backed_up_failure_fails_over_and_the_job_keeps_running() {
    log();
    let faults = FaultPlan::new(vec![Fault::new("op", FaultKind::Panic, 500)]);
    let cfg = config(faults.clone(), RestartStrategy::None);
    let (result, mut got) = within_timeout(move || {
        let env = Env::with_config(cfg);
        let out = env
            .generate(2_000, |i| i)
            .map(|x: u64| x)
            .uid("op")
            // A timeout no busy machine reaches: the one promotion is the injected panic's.
            .with_backup_policy(
                BackupPolicy::default()
                    .heartbeat(Duration::from_millis(50), Duration::from_secs(5)),
            )
            .collect();
        (env.execute("ctl-failover"), out.take())
    });
    let result = result.expect("the backup takes over");
    assert_eq!(faults.fired(), 1);
    assert_eq!(result.backups[0].promotions, 1);
    got.sort_unstable();
    assert_eq!(got, (0..2_000).collect::<Vec<u64>>(), "each record once");
    assert_eq!(
        transitions("ctl-failover"),
        pairs(&[
            ("Deploying", "Running"),
            ("Running", "FailingOver"),
            ("FailingOver", "Running"),
            ("Running", "Stopping"),
            ("Stopping", "Finished"),
        ])
    );
}

#[test]
fn commands_are_answered_while_the_job_waits_to_restart() {
    log();
    let dir = TempDir::new("ctl-recovering");
    let faults = FaultPlan::new(vec![Fault::new("op", FaultKind::Panic, 500)]);
    // A delay no test would wait out: the cancel must end the wait.
    let restart = RestartStrategy::FixedDelay {
        attempts: 1,
        delay: Duration::from_secs(3_600),
    };
    let cfg = config(faults, restart);
    let savepoint_dir = dir.path().join("sp");
    let (savepoint, ended) = within_timeout(move || {
        let env = Env::with_config(cfg);
        env.generate(1_000_000, |i| i)
            .map(|x: u64| x)
            .uid("op")
            .collect();
        let handle = env.start("ctl-recovering").expect("the job starts");
        while !transitions("ctl-recovering").contains(&("Running".into(), "Recovering".into())) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let savepoint = handle.savepoint(&savepoint_dir);
        handle.cancel();
        (savepoint, handle.wait())
    });
    match savepoint {
        Err(JobError::Savepoint { message, .. }) => {
            assert!(message.contains("restarting"), "{message}")
        }
        other => panic!("a savepoint while restarting is refused, got {other:?}"),
    }
    assert!(
        matches!(ended, Err(JobError::Cancelled { .. })),
        "cancelled, got {ended:?}"
    );
    assert_eq!(
        transitions("ctl-recovering"),
        pairs(&[
            ("Deploying", "Running"),
            ("Running", "Recovering"),
            ("Recovering", "Finished"),
        ])
    );
}

/// Subtasks sharing a thread all fall silent when one of them hangs: the hang is blamed on
/// the one stuck inside its operators, not on the first silent one (here the source, which
/// comes first and shares the hung subtask's only thread).
#[test]
fn a_hang_on_a_shared_thread_names_the_subtask_that_hung() {
    let faults = FaultPlan::new(vec![
        Fault::new("count", FaultKind::Hang, 1_000).in_subtask(1)
    ]);
    let mut cfg = EnvConfig::default();
    cfg.arbiters = 1;
    cfg.heartbeat_timeout = Duration::from_millis(300);
    cfg.faults = faults.clone();
    let env = Env::with_config(cfg);
    env.generate(u64::MAX, |i| i)
        .uid("ids")
        .set_parallelism(1)
        .rebalance()
        .map(|x: u64| x + 1)
        .uid("count")
        .set_parallelism(2)
        .discard();
    let job = env.start("hang-blame").expect("the job starts");
    let err =
        within_timeout(move || job.wait()).expect_err("a hang without restarts fails the job");
    assert_eq!(faults.fired(), 1);
    match &err {
        JobError::SubtaskLost {
            uid,
            subtask,
            reason,
            ..
        } => {
            assert_eq!((uid.as_str(), *subtask), ("count", 1), "{err}");
            assert!(reason.contains("hung"), "{err}");
        }
        other => panic!("not a lost subtask: {other}"),
    }
}
