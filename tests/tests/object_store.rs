//! Checkpoint directories on object stores (`CheckpointConfig::directory` as a URL): a job
//! killed with SIGKILL whose local disk is then wiped is restored by a new process from the
//! store alone (from its latest checkpoint, and from a savepoint), with every id once at an
//! exactly-once sink and every key's counts those of a sequential run; an S3 server that
//! answers 503, is down or slow fails checkpoints (counted and tolerated) while the job goes
//! on, and a checkpoint that failed never appears complete on the store.
//!
//! The S3 server is moto's (`weir_testing::s3::S3Server`, behind a fault proxy); the same
//! kill-and-wipe run also goes through a `file://` URL, which needs no server. The child
//! processes are this test binary run again with `CHILD` set (see `crash_resume.rs`).

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use weir::rate::RateControlConfig;
use weir::{Collector, Env, EnvConfig, JobHandle, RestoreLatest, ValueState};
use weir_testing::s3::{S3Fault, S3Server};
use weir_testing::{encode_display, read_committed, wait_for_checkpoint, TwoPhaseFileSink};

/// Set in a child process: `<url>;<local dir>;<out dir>;<rate>;<mode>`.
const CHILD: &str = "WEIR_OBJECT_STORE_CHILD";
const N: u64 = 40_000;
const KEYS: u64 = 500;
const JOB: &str = "object-store";
const PATIENCE: Duration = Duration::from_secs(120);

fn keyed_job(source: weir::DataStream<u64>, out: &Path, backup: bool) {
    let d = out.to_owned();
    let counts = source
        .key_by(|x: &u64| x % KEYS)
        .process(
            |k: &u64, s: &mut ValueState<u64>, x: u64, out: &mut Collector<String>| {
                let n = s.get_or_insert_with(|| 0);
                *n += 1;
                out.collect(format!("{k} {n} {x}"));
            },
        )
        .uid("count")
        .set_parallelism(2);
    let counts = if backup { counts.with_backup() } else { counts };
    counts
        .add_sink("out", move |cx| {
            TwoPhaseFileSink::create(&d, cx, encode_display::<String>)
        })
        .uid("out");
}

fn config(url: &str, local: &Path) -> EnvConfig {
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(Duration::from_millis(20));
    cfg.checkpoint.directory = url.into();
    cfg.checkpoint.local_directory = local.to_owned();
    cfg.checkpoint.incremental = true;
    cfg
}

/// The child's job: `0..N` counted per key, into an exactly-once part-file sink. Modes:
/// `latest` resumes from the newest checkpoint on the store if there is one and prints
/// `CHILD checkpoint <n>` per completed checkpoint; `stop-savepoint:<url>` stops with a
/// savepoint there after two checkpoints; `from:<url>` starts from that savepoint. Prints
/// `CHILD restored <id|none>` and `CHILD done` when its job ends.
#[test]
#[ignore = "the child process its parent tests start (with --ignored); not a test of its own"]
fn child_job() {
    let spec = std::env::var(CHILD)
        .unwrap_or_else(|_| panic!("{CHILD} is not set: only the parent tests run this"));
    let f: Vec<&str> = spec.splitn(5, ';').collect();
    let (url, local, out) = (f[0], PathBuf::from(f[1]), PathBuf::from(f[2]));
    let rate: f64 = f[3].parse().expect("rate");
    let mut mode = f[4];
    let mut cfg = config(url, &local);
    if rate > 0.0 {
        cfg.rate_control = RateControlConfig::fixed(rate);
    }
    if let Some(m) = mode.strip_suffix("+unaligned") {
        // Channel-state files (`<uid>#in<n>-<k>.state`): names the store escapes.
        cfg.checkpoint.unaligned = true;
        cfg.checkpoint.incremental = false;
        mode = m;
    }
    if mode == "latest" {
        cfg.checkpoint.restore_latest = Some(RestoreLatest::if_any(url));
    } else if let Some(from) = mode.strip_prefix("from:") {
        cfg.checkpoint.restore_from = Some(from.into());
    }
    let env = Env::with_config(cfg);
    let ids = env.generate(N, |i| i).uid("ids");
    keyed_job(ids, &out, false);
    let job = env.start(JOB).expect("the child's job starts");
    let result = if let Some(sp) = mode.strip_prefix("stop-savepoint:") {
        wait_for_checkpoint(&job, 2, PATIENCE).expect("two checkpoints");
        let (path, result) = job.stop_with_savepoint(sp).expect("a savepoint");
        println!("CHILD savepoint {}", path.display());
        result
    } else {
        let mut seen = 0;
        while let Ok(stats) = wait_for_checkpoint(&job, seen + 1, PATIENCE) {
            seen = stats.number_of_completed_checkpoints;
            println!("CHILD checkpoint {seen}");
        }
        job.wait().expect("the child's job succeeds")
    };
    match result
        .checkpoints
        .and_then(|c| c.last_restored_checkpoint_id)
    {
        Some(id) => println!("CHILD restored {id}"),
        None => println!("CHILD restored none"),
    }
    println!("CHILD done");
}

/// What a child printed, once it ended (or was killed).
#[derive(Debug, Default)]
struct Report {
    restored: Option<Option<u64>>,
    savepoint: bool,
    done: bool,
    stderr: String,
}

/// Runs a child with `spec` and `env`; SIGKILLs it once it reported `kill_at` checkpoints.
fn child(spec: &str, env: &[(String, String)], kill_at: Option<u64>) -> Report {
    let mut cmd = common::child_job_command();
    cmd.env(CHILD, spec).envs(env.iter().map(|(k, v)| (k, v)));
    let common::ChildRun {
        mut child,
        lines,
        stderr: err,
    } = common::start_child(cmd);
    let mut r = Report::default();
    loop {
        let line = match lines.recv_timeout(PATIENCE) {
            Ok(line) => line,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the child said nothing for {PATIENCE:?}; stderr:\n{}",
                    err.join().unwrap_or_default()
                );
            }
        };
        let Some(line) = line.find("CHILD ").map(|at| line[at..].to_owned()) else {
            continue;
        };
        if let Some(n) = line.strip_prefix("CHILD checkpoint ") {
            let n: u64 = n.parse().expect("a count");
            if kill_at.is_some_and(|k| n >= k) {
                // SIGKILL: no destructor, no flush, no cleanup.
                child.kill().expect("kill the child");
                break;
            }
        } else if let Some(id) = line.strip_prefix("CHILD restored ") {
            r.restored = Some(id.parse().ok());
        } else if line.starts_with("CHILD savepoint ") {
            r.savepoint = true;
        } else if line == "CHILD done" {
            r.done = true;
        }
    }
    let status = child.wait().expect("the child ends");
    r.stderr = err.join().unwrap_or_default();
    assert!(
        kill_at.is_some() || (r.done && status.success()),
        "the child failed ({status}); stderr:\n{}",
        r.stderr
    );
    r
}

/// Every id once in the committed output, and each key's counts 1, 2, ... n (a sequential
/// run's), each once.
fn assert_output(out: &Path) {
    let committed = read_committed(out).expect("read the output");
    let mut ids = Vec::new();
    let mut counts: HashMap<u64, Vec<u64>> = HashMap::new();
    for line in &committed.lines {
        let v: Vec<u64> = line
            .split(' ')
            .map(|f| f.parse().expect("a number"))
            .collect();
        counts.entry(v[0]).or_default().push(v[1]);
        ids.push(v[2]);
    }
    weir_testing::ExactlyOnce::new(0..N)
        .check(ids)
        .assert_exactly_once();
    for k in 0..KEYS {
        let mut c = counts.remove(&k).unwrap_or_default();
        c.sort_unstable();
        let n = (0..N).filter(|x| x % KEYS == k).count() as u64;
        assert_eq!(c, (1..=n).collect::<Vec<_>>(), "key {k}'s counts");
    }
}

/// A job killed after 4 checkpoints, its local copy deleted; a new process with another,
/// empty local directory resumes from the store and finishes.
fn killed_then_resumed_elsewhere(url: &str, base: &Path, env: &[(String, String)], mode: &str) {
    let out = base.join("out");
    let (local1, local2) = (base.join("machine-1"), base.join("machine-2"));
    let spec = |local: &Path, rate: f64| {
        format!("{url};{};{};{rate};{mode}", local.display(), out.display())
    };
    let first = child(&spec(&local1, 4_000.0), env, Some(4));
    assert!(!first.done, "the first child finished before it was killed");
    std::fs::remove_dir_all(&local1).expect("wipe the first machine's local copy");
    // Slow enough to complete checkpoints of its own, which its end deletes.
    let second = child(&spec(&local2, 20_000.0), env, None);
    assert!(
        matches!(second.restored, Some(Some(_))),
        "the second process restored nothing from {url}: {second:?}"
    );
    assert_output(&out);
}

#[test]
fn file_url_a_killed_job_resumes_in_a_new_process_with_its_local_copy_gone() {
    let base = common::TempDir::new("objstore-file");
    let store = base.path().join("store");
    let url = format!("file://{}", store.display());
    // The second process restored from the store (its own local copy started empty).
    killed_then_resumed_elsewhere(&url, base.path(), &[], "latest");
    let mut left = Vec::new();
    let mut dirs = vec![store.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                dirs.push(e.path());
            } else {
                left.push(e.path());
            }
        }
    }
    assert!(
        left.is_empty(),
        "the finished job left files on the store: {left:?}"
    );
}

#[test]
#[cfg_attr(
    not(feature = "s3-server"),
    ignore = "needs moto's S3 server: tests/run installs it (feature s3-server)"
)]
fn s3_a_killed_job_resumes_on_another_machine_from_the_server_alone() {
    let s3 = s3_with_bucket();
    let base = common::TempDir::new("objstore-s3");
    killed_then_resumed_elsewhere("s3://weir/checkpoints", base.path(), &s3.env(), "latest");
    // The finished job left nothing to resume from, on the store too.
    let left = s3.keys("weir", "checkpoints/").expect("list");
    assert!(left.is_empty(), "the finished job left objects: {left:?}");
}

/// moto's S3 server (behind its fault proxy) with the bucket `weir`.
fn s3_with_bucket() -> S3Server {
    let s3 = S3Server::start().unwrap_or_else(|e| panic!("{e}"));
    s3.create_bucket("weir").expect("a bucket");
    s3
}

/// Unaligned checkpoints write channel-state files named `<uid>#in<n>-<k>.state`, a
/// character object stores escape in keys: they are restored from the store all the same.
#[test]
#[cfg_attr(
    not(feature = "s3-server"),
    ignore = "needs moto's S3 server: tests/run installs it (feature s3-server)"
)]
fn s3_unaligned_checkpoints_resume_on_another_machine_from_the_server_alone() {
    let s3 = s3_with_bucket();
    let base = common::TempDir::new("objstore-unaligned");
    killed_then_resumed_elsewhere(
        "s3://weir/unaligned",
        base.path(),
        &s3.env(),
        "latest+unaligned",
    );
    let left = s3.keys("weir", "unaligned/").expect("list");
    assert!(left.is_empty(), "the finished job left objects: {left:?}");
}

#[test]
#[cfg_attr(
    not(feature = "s3-server"),
    ignore = "needs moto's S3 server: tests/run installs it (feature s3-server)"
)]
fn s3_a_savepoint_restores_on_another_machine_from_the_server_alone() {
    let s3 = s3_with_bucket();
    let base = common::TempDir::new("objstore-sp");
    let out = base.path().join("out");
    let sp = "s3://weir/savepoints/sp-1";
    let first = child(
        &format!(
            "s3://weir/checkpoints;{};{};4000;stop-savepoint:{sp}",
            base.path().join("machine-1").display(),
            out.display()
        ),
        &s3.env(),
        None,
    );
    assert!(first.savepoint, "no savepoint: {first:?}");
    std::fs::remove_dir_all(base.path().join("machine-1")).expect("wipe");
    let keys = s3.keys("weir", "savepoints/sp-1/").expect("list");
    assert!(
        keys.iter().any(|k| k.ends_with("/_metadata")),
        "the savepoint is not on the server: {keys:?}"
    );
    let second = child(
        &format!(
            "s3://weir/checkpoints;{};{};0;from:{sp}",
            base.path().join("machine-2").display(),
            out.display()
        ),
        &s3.env(),
        None,
    );
    assert!(
        matches!(second.restored, Some(Some(_))),
        "the savepoint was not restored: {second:?}"
    );
    assert_output(&out);
}

/// Waits until the job's failed checkpoints reach `n`.
fn wait_failed(job: &JobHandle, n: u64) {
    common::wait_until(&format!("{n} failed checkpoints"), || {
        job.checkpoint_stats()
            .is_some_and(|s| s.number_of_failed_checkpoints >= n)
    });
}

/// Checkpoint ids (`chk-<id>/_metadata`) complete on the server under `prefix`.
fn complete_on_server(s3: &S3Server, prefix: &str) -> Vec<u64> {
    s3.keys("weir", prefix)
        .expect("list")
        .iter()
        .filter(|k| k.ends_with("/_metadata"))
        .filter_map(|k| k.rsplit('/').nth(1)?.strip_prefix("chk-")?.parse().ok())
        .collect()
}

fn stats(job: &JobHandle) -> weir::CheckpointStats {
    job.checkpoint_stats().unwrap_or_default()
}

/// A store that answers 503 to `_metadata` puts, then to everything, then is down: each
/// phase fails checkpoints (counted, tolerated) and the job goes on; while `_metadata` puts
/// fail, no checkpoint is complete on the server but those completed before. A store slower
/// than the backups' heartbeat timeout delays checkpoints, never the controller: no backup
/// takes over a healthy primary. Every id once, every key's counts right.
#[test]
#[cfg_attr(
    not(feature = "s3-server"),
    ignore = "needs moto's S3 server: tests/run installs it (feature s3-server)"
)]
fn s3_unavailable_down_and_slow_fail_checkpoints_and_the_job_goes_on() {
    let s3 = s3_with_bucket();
    let base = common::TempDir::new("objstore-faults");
    let out = base.path().join("out");
    let mut cfg = config("s3://weir/faults", &base.path().join("local"));
    cfg.checkpoint.storage_options = s3.options();
    cfg.checkpoint.tolerable_failed_checkpoints = 1_000;
    cfg.checkpoint.retained = 2;
    cfg.rate_control = RateControlConfig::fixed(20_000.0);
    let env = Env::with_config(cfg);
    let (stop, ended_at) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let ids = common::endless_ids(&env, &stop, &ended_at);
    keyed_job(ids, &out, true);
    let job = env.start("faults").expect("starts");
    wait_for_checkpoint(&job, 2, PATIENCE).expect("two checkpoints");

    // `_metadata` puts fail: no checkpoint completes, so none is deleted on the server
    // either, and what is complete there is what completed before.
    s3.set_fault(S3Fault::UnavailableFor("_metadata"));
    let before = stats(&job);
    wait_failed(&job, before.number_of_failed_checkpoints + 2);
    let during = stats(&job);
    let complete = complete_on_server(&s3, "faults/");
    let newest = during.last_completed_checkpoint_id.unwrap_or(0);
    assert!(
        complete.iter().all(|&id| id <= newest),
        "checkpoints after {newest} are complete on the server though their _metadata failed: {complete:?}"
    );
    assert!(
        complete.contains(&newest),
        "the newest complete checkpoint {newest} is not on the server: {complete:?}"
    );
    s3.set_fault(S3Fault::Healthy);
    wait_for_checkpoint(&job, during.number_of_completed_checkpoints + 2, PATIENCE)
        .expect("checkpoints again once healthy");

    for fault in [S3Fault::Unavailable, S3Fault::Down] {
        let s = stats(&job);
        s3.set_fault(fault);
        wait_failed(&job, s.number_of_failed_checkpoints + 2);
        s3.set_fault(S3Fault::Healthy);
        let done = stats(&job).number_of_completed_checkpoints;
        wait_for_checkpoint(&job, done + 2, PATIENCE).expect("checkpoints again once healthy");
    }

    // Slower than the backups' heartbeat timeout (250 ms).
    s3.set_fault(S3Fault::Slow(Duration::from_millis(400)));
    let done = stats(&job).number_of_completed_checkpoints;
    wait_for_checkpoint(&job, done + 2, PATIENCE).expect("checkpoints through a slow server");
    s3.set_fault(S3Fault::Healthy);
    assert_eq!(
        stats(&job).num_restarts,
        0,
        "a storage fault restarted the job"
    );
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let result = job.wait().expect("the job ends well");
    assert_eq!(
        common::promotions(&result),
        0,
        "a backup took over a healthy primary"
    );
    let end = ended_at.load(std::sync::atomic::Ordering::SeqCst);
    let committed = read_committed(&out).expect("output");
    let mut ids: Vec<u64> = committed
        .lines
        .iter()
        .map(|l| {
            l.rsplit(' ')
                .next()
                .and_then(|x| x.parse().ok())
                .expect("id")
        })
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..end).collect::<Vec<_>>(), "every id once");
    let mut per_key: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for l in &committed.lines {
        let v: Vec<u64> = l.split(' ').map(|f| f.parse().expect("n")).collect();
        per_key.entry(v[0]).or_default().push(v[1]);
    }
    for (k, mut c) in per_key {
        c.sort_unstable();
        assert_eq!(c, (1..=c.len() as u64).collect::<Vec<_>>(), "key {k}");
    }
    let left = s3.keys("weir", "faults/").expect("list");
    assert!(left.is_empty(), "the finished job left objects: {left:?}");
}

/// A state file larger than a part (16 MB) is put on S3 in parts and fetched back in chunks:
/// a savepoint of 300,000 keys with a 64-byte label each (a full checkpoint's one file per
/// subtask), restored by a new job whose restore checks every file's checksum.
#[test]
#[cfg_attr(
    not(feature = "s3-server"),
    ignore = "needs moto's S3 server: tests/run installs it (feature s3-server)"
)]
fn s3_a_state_file_larger_than_a_part_goes_in_parts_and_restores() {
    const BIG_KEYS: u64 = 300_000;
    let s3 = s3_with_bucket();
    let base = common::TempDir::new("objstore-parts");
    let job_of = |local: &str, restore: Option<&str>| {
        let mut cfg = config("s3://weir/parts", &base.path().join(local));
        cfg.checkpoint.storage_options = s3.options();
        cfg.checkpoint.incremental = false;
        cfg.checkpoint.interval = Some(Duration::from_millis(500));
        cfg.checkpoint.restore_from = restore.map(Into::into);
        let env = Env::with_config(cfg);
        let (stop, ended_at) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        common::endless_ids(&env, &stop, &ended_at)
            .key_by(|x: &u64| x % BIG_KEYS)
            .process(
                |k: &u64, s: &mut ValueState<String>, _x: u64, _out: &mut Collector<u64>| {
                    s.get_or_insert_with(|| format!("{k:064}"));
                },
            )
            .uid("labels")
            .set_parallelism(1)
            .discard();
        (env.start("parts").expect("starts"), stop)
    };
    let (job, stop) = job_of("machine-1", None);
    // Every key's entry is ~72 bytes in the state file: all 300,000 make ~21.5 MB, past 20 MiB
    // only once nearly all are in, and past a part (16 MiB) in any case.
    common::wait_until("a checkpoint of every key", || {
        stats(&job).last_checkpoint_size > 20 << 20
    });
    let sp = job.savepoint("s3://weir/parts-sp").expect("a savepoint");
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    job.wait().expect("the first job ends");
    std::fs::remove_dir_all(base.path().join("machine-1")).expect("wipe");
    let keys = s3.keys("weir", "parts-sp/").expect("list");
    assert!(
        keys.iter().any(|k| k.ends_with("labels-0.state")),
        "no state file in the savepoint: {keys:?}"
    );
    let (job, stop) = job_of("machine-2", Some(&sp.to_string_lossy()));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let result = job.wait().expect("the restored job ends");
    assert!(
        result
            .checkpoints
            .and_then(|c| c.last_restored_checkpoint_id)
            .is_some(),
        "the savepoint was not restored"
    );
}
