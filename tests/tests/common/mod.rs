//! Helpers shared by the integration tests: configs, temp dirs, timeouts, instance ids.
#![allow(dead_code)]

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use weir::EnvConfig;

/// How long a job may take before the test calls it a hang. Generous: it only tells a hang
/// from a slow run, and a test's job runs several times slower on a loaded machine (all
/// tests on one core shared with a busy loop, #17's slowed machine) than alone.
pub const TIMEOUT: Duration = Duration::from_secs(180);

/// A config with the given batch size and channel capacity.
pub fn cfg(batch_size: usize, channel_capacity: usize) -> EnvConfig {
    let mut c = EnvConfig::default();
    c.batch_size = batch_size;
    c.channel_capacity = channel_capacity;
    c
}

/// The default config and a small one (batch 7, capacity 2), with the number of records to
/// generate under each (fewer for the small one, which costs one actor turn per 7 records).
pub fn configs() -> Vec<(&'static str, EnvConfig, u64)> {
    vec![
        ("default", EnvConfig::default(), 100_000),
        ("small", cfg(7, 2), 20_000),
    ]
}

/// (source parallelism, operator parallelism) pairs: equal (forward, chained) and unequal
/// (rebalance), odd and even splits.
pub const PAR_PAIRS: [(usize, usize); 5] = [(1, 1), (2, 2), (3, 3), (1, 3), (3, 2)];

/// `v` sorted.
pub fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

/// How many times each element occurs.
pub fn counts<T: Hash + Eq, I: IntoIterator<Item = T>>(items: I) -> HashMap<T, u64> {
    let mut m = HashMap::new();
    for x in items {
        *m.entry(x).or_insert(0) += 1;
    }
    m
}

/// A random u64 (different on every call), without a dependency.
pub fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    h.finish()
}

/// A per-operator-instance id, chosen at first use. Put it in a user function struct: the
/// prototype is cloned per subtask before it is ever used, so every instance gets its own.
#[derive(Debug, Clone, Default)]
pub struct InstanceId(Option<u64>);

impl InstanceId {
    pub fn get(&mut self) -> u64 {
        *self.0.get_or_insert_with(random_u64)
    }
}

/// A directory under the system temp dir, removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "weir-tests-{tag}-{}-{}-{:x}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            random_u64()
        );
        let path = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `bytes` to `name` in this dir and returns the file's path.
    pub fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, bytes).expect("write temp file");
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `f` (which builds and runs a job) on a thread of its own and returns its result;
/// fails the test if it does not return within [`TIMEOUT`] (a hang) or panics.
pub fn within_timeout<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("weir-test-job".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .expect("spawn test thread");
    match rx.recv_timeout(TIMEOUT) {
        Ok(r) => {
            let _ = thread.join();
            r
        }
        Err(RecvTimeoutError::Timeout) => panic!("the job did not return within {TIMEOUT:?}"),
        Err(RecvTimeoutError::Disconnected) => match thread.join() {
            Err(payload) => std::panic::resume_unwind(payload),
            Ok(()) => panic!("the job thread ended without a result"),
        },
    }
}

/// The part files (`part-*`) in `dir`, by name.
pub fn part_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read output dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("part-"))
        })
        .collect();
    v.sort();
    v
}

/// Every line of every part file in `dir`.
pub fn read_part_lines(dir: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    for p in part_files(dir) {
        let text = std::fs::read_to_string(&p).expect("read part file");
        lines.extend(text.lines().map(str::to_owned));
    }
    lines
}

/// Asserts that `actual` and `expected` hold the same elements with the same multiplicities
/// (order ignored); on failure names the sizes and the first difference, not every record.
pub fn assert_multiset_eq<T: Ord + std::fmt::Debug>(actual: Vec<T>, expected: Vec<T>, ctx: &str) {
    let a = sorted(actual);
    let e = sorted(expected);
    if a != e {
        let i = a
            .iter()
            .zip(&e)
            .position(|(x, y)| x != y)
            .unwrap_or(a.len().min(e.len()));
        panic!(
            "{ctx}: got {} records, expected {}; first difference at sorted index {i}: got {:?}, expected {:?}",
            a.len(),
            e.len(),
            a.get(i),
            e.get(i)
        );
    }
}

/// Starts the job of `env` and waits for it on another thread, failing the test if it does
/// not end within [`TIMEOUT`]. (`Env` is not `Send`; the started job's handle is.)
pub fn execute_within(env: &weir::Env, name: &str) -> Result<weir::JobResult, weir::JobError> {
    let handle = env.start(name)?;
    within_timeout(move || handle.wait())
}

/// Ids 0, 1, 2, ... at most 64 per poll and a poll per millisecond (with `flood`, as many as
/// a poll takes, polled again at once), until told to stop; then it ends and says at which id.
pub struct Endless {
    pub next: u64,
    pub stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    pub ended_at: std::sync::Arc<AtomicU64>,
    pub flood: bool,
}

impl weir::source::Source<u64> for Endless {
    fn poll_batch(
        &mut self,
        out: &mut Vec<u64>,
        max: usize,
    ) -> Result<weir::source::SourceStatus, weir::SourceError> {
        if self.stop.load(Ordering::SeqCst) {
            self.ended_at.store(self.next, Ordering::SeqCst);
            return Ok(weir::source::SourceStatus::End);
        }
        let stop = self.next
            + if self.flood {
                max as u64
            } else {
                (max as u64).min(64)
            };
        out.extend(self.next..stop);
        self.next = stop;
        if self.flood {
            return Ok(weir::source::SourceStatus::More);
        }
        Ok(weir::source::SourceStatus::Idle {
            until: Some(Duration::from_millis(1)),
        })
    }
    fn position(&self) -> Option<Vec<u8>> {
        Some(self.next.to_le_bytes().to_vec())
    }
    fn seek(&mut self, position: &[u8]) -> Result<(), weir::SourceError> {
        let bytes: [u8; 8] = position
            .try_into()
            .map_err(|_| weir::SourceError::BadPosition {
                message: format!("8 bytes expected, got {}", position.len()),
            })?;
        self.next = u64::from_le_bytes(bytes);
        Ok(())
    }
}

/// Waits until two more checkpoints than now have completed (records flow at the job's
/// current shape), at most a minute.
pub fn two_more_checkpoints(job: &weir::JobHandle) {
    let done = job
        .checkpoint_stats()
        .map_or(0, |s| s.number_of_completed_checkpoints);
    weir_testing::wait_for_checkpoint(job, done + 2, Duration::from_secs(60))
        .expect("checkpoints complete");
}

/// An [`Endless`] source of ids on `env` (uid `ids`, one subtask) that ends when `stop` is
/// set and stores where in `ended_at`.
pub fn endless_ids(
    env: &weir::Env,
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
    ended_at: &std::sync::Arc<AtomicU64>,
) -> weir::DataStream<u64> {
    endless_ids_at(env, stop, ended_at, false)
}

/// [`endless_ids`], with `flood` as fast as the job takes them (see [`Endless`]).
pub fn endless_ids_at(
    env: &weir::Env,
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
    ended_at: &std::sync::Arc<AtomicU64>,
    flood: bool,
) -> weir::DataStream<u64> {
    let (stop, ended_at) = (stop.clone(), ended_at.clone());
    env.add_source("ids", move |_cx| {
        Ok(Endless {
            next: 0,
            stop: stop.clone(),
            ended_at: ended_at.clone(),
            flood,
        })
    })
    .uid("ids")
    .set_parallelism(1)
}

/// Collects what the crate logs into a shared buffer (see [`logged`]).
struct LogBuffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Everything the crate logged at `info` and above in this test binary so far, one event a
/// line (`<time> <level> <target>: <message> <field>=<value> ...`). The first call installs
/// the subscriber that records it: call it before the job starts.
pub fn logged() -> String {
    use std::sync::{Arc, Mutex, OnceLock};
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    let buf = LOG.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let writer = buf.clone();
        let _ = tracing_subscriber::fmt()
            .with_env_filter("weir=info")
            .with_ansi(false)
            .with_writer(move || LogBuffer(writer.clone()))
            .try_init();
        buf
    });
    let bytes = buf
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Faults from `plan`, checkpoints every 10 ms and up to 3 immediate restarts: the set-up of
/// the restore-after-a-fault cases (the tests hold their input until the checkpoints the
/// faults wait for have completed).
pub fn restart_on_faults(cfg: &mut EnvConfig, plan: weir_testing::FaultPlan) {
    cfg.checkpoint.interval = Some(Duration::from_millis(10));
    cfg.faults = plan;
    cfg.restart = Some(weir::RestartStrategy::FixedDelay {
        attempts: 3,
        delay: Duration::ZERO,
    });
}

/// Sets `cfg` up for a test of buffer-queue promotions: the backups on arbiters of their own,
/// no restart (a failure that promotion cannot take fails the job), no subtask declared hung
/// by the job's own timeout, and checkpoints only when the test triggers them (so the replay
/// after a fault can be long).
pub fn promote_only(cfg: &mut EnvConfig) {
    cfg.arbiters = 4;
    cfg.restart = None;
    cfg.heartbeat_timeout = TIMEOUT;
    cfg.checkpoint.interval = Some(Duration::from_secs(3_600));
}

/// The backup policy of those tests: a heartbeat every 20 ms, hung after 10 s, and no state
/// handed over between checkpoints (a promoted backup replays everything since the last).
pub fn replaying_backup() -> weir::BackupPolicy {
    weir::BackupPolicy::default()
        .heartbeat(Duration::from_millis(20), Duration::from_secs(10))
        .state_interval(None)
}

/// Promotions over a finished job's backed-up subtasks.
pub fn promotions(result: &weir::JobResult) -> u64 {
    result.backups.iter().map(|b| b.promotions).sum()
}

/// Triggers checkpoints `1..=n`, each once the one before has completed, and waits for the
/// last.
pub fn trigger_checkpoints(job: &weir::JobHandle, n: u64) {
    for k in 1..=n {
        job.monitor()
            .trigger_checkpoint()
            .unwrap_or_else(|e| panic!("checkpoint {k} starts: {e}"));
        weir_testing::wait_for_checkpoint(job, k, TIMEOUT)
            .unwrap_or_else(|e| panic!("checkpoint {k} completes: {e}"));
    }
}

/// Waits until `done` says so (an event: a count reached, a fault fired), looking every
/// millisecond; past [`TIMEOUT`] the test fails naming `what` it waited for.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + TIMEOUT;
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "waited in vain: {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The command that runs this test binary's `child_job` test alone: ignored (not a test of its
/// own), so its parents run it with `--ignored`; its stdout carries `CHILD ...` lines.
pub fn child_job_command() -> std::process::Command {
    let mut cmd = std::process::Command::new(std::env::current_exe().expect("the test binary"));
    cmd.args([
        "--exact",
        "child_job",
        "--ignored",
        "--nocapture",
        "--test-threads",
        "1",
    ])
    .env_remove("RUST_LOG");
    cmd
}

/// A child process started by [`start_child`]: its stdout lines arrive on `lines`, its
/// stderr is collected by `stderr`.
pub struct ChildRun {
    pub child: std::process::Child,
    pub lines: mpsc::Receiver<String>,
    pub stderr: std::thread::JoinHandle<String>,
}

/// Starts `cmd` with its stdout read line by line and its stderr collected.
pub fn start_child(mut cmd: std::process::Command) -> ChildRun {
    use std::io::{BufRead, Read};
    use std::process::Stdio;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the child");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    ChildRun {
        child,
        lines,
        stderr,
    }
}
