//! The controller is the only writer of a job's state. Settings changed at once over the Rust
//! API and over REST, rescales, a graph replacement and savepoints, all driven from several
//! threads against one running job, are each answered; the settings history holds every
//! request once, each caller's in the order it asked; what the job publishes agrees with the
//! last change applied (the settings, the checkpoint configuration, the vertices); and the
//! output is every id exactly once with the count a sequential run gives. Nothing waits on
//! time: threads run a fixed number of operations, and the checks come after they all end.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::{endless_ids, within_timeout, TempDir};
use weir::rest::{RestConfig, RestServer};
use weir::{
    Collector, Env, EnvConfig, JobHandle, JobMonitor, ReplaceError, ReplaceOptions, RescaleError,
    ValueState,
};
use weir_testing::{encode_display, read_committed, ExactlyOnce, TwoPhaseFileSink};

const KEYS: u64 = 16;
const INTERVAL: &str = "execution.checkpointing.interval";
const TIMEOUT: &str = "execution.checkpointing.timeout";
/// Operations per thread.
const ROUNDS: usize = 6;

/// The job: ids, counted per key by `count` (a keyed, rescalable operator), tagged with the
/// graph's version, written exactly once.
fn version(env: &Env, out: &Path, stop: &Arc<AtomicBool>, ended: &Arc<AtomicU64>, tag: &str) {
    let out = out.to_owned();
    let tag = tag.to_owned();
    endless_ids(env, stop, ended)
        .key_by(|x: &u64| x % KEYS)
        .process(
            |_k: &u64, n: &mut ValueState<u64>, x: u64, out: &mut Collector<(u64, u64)>| {
                let c = n.get_or_insert_with(|| 0);
                *c += 1;
                out.collect((x, *c));
            },
        )
        .uid("count")
        .set_parallelism(2)
        .map(move |(x, c): (u64, u64)| format!("{x} {c} {tag}"))
        .uid("tag")
        .add_sink("exactly_once", move |cx| {
            TwoPhaseFileSink::create(&out, cx, encode_display::<String>)
        })
        .uid("exactly_once")
        .set_parallelism(1);
}

fn patch_over_rest(server: &RestServer, job: &str, body: &str) -> u16 {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let resp = agent
        .patch(format!("http://{}/jobs/{job}/config", server.addr()))
        .header("Content-Type", "application/json")
        .header("Authorization", format!("Bearer {}", server.token()))
        .send(body)
        .expect("the server answers");
    resp.status().as_u16()
}

/// Sets `INTERVAL` from the Rust API: `20ms`, `21ms`, ... in order; returns what was applied.
fn rust_settings(job: JobMonitor, start: Arc<Barrier>) -> Vec<String> {
    start.wait();
    let mut applied = Vec::new();
    for i in 0..ROUNDS {
        let value = format!("{}ms", 20 + i);
        match job.update_settings(&[(INTERVAL.into(), value.clone())]) {
            Ok(_) => applied.push(value),
            Err(e) => panic!("a live interval change is refused: {e}"),
        }
    }
    applied
}

/// Sets `TIMEOUT` over REST: `601s`, `602s`, ... in order; returns what was applied.
fn rest_settings(server: Arc<RestServer>, id: String, start: Arc<Barrier>) -> Vec<String> {
    start.wait();
    let mut applied = Vec::new();
    for i in 0..ROUNDS {
        let value = format!("{}s", 601 + i);
        let status = patch_over_rest(&server, &id, &format!(r#"{{"{TIMEOUT}": "{value}"}}"#));
        assert_eq!(status, 200, "a live timeout change over REST");
        applied.push(value);
    }
    applied
}

/// Rescales `count` through 3, 1, 2, ...: a busy job refuses (a savepoint or the replacement
/// in progress), and the thread asks again; returns the last parallelism and how often the
/// job was busy.
fn rescales(job: JobMonitor, start: Arc<Barrier>) -> (usize, u32) {
    start.wait();
    let mut busy = 0;
    let targets = [3, 1, 2, 3, 1, 2];
    for p in targets.into_iter().take(ROUNDS) {
        loop {
            match job.rescale("count", p) {
                // The replacement may have put `count` at `p` already.
                Ok(report) => {
                    assert!(report.changes.iter().all(|c| c.to == p), "{report:?}");
                    break;
                }
                Err(RescaleError::Busy(_)) => busy += 1,
                Err(e) => panic!("a rescale to {p}: {e}"),
            }
            assert!(busy < 100_000, "the rescales were refused as busy forever");
            std::thread::yield_now();
        }
    }
    (targets[ROUNDS - 1], busy)
}

/// Savepoints into fresh directories: each answered, with a path or why not.
fn savepoints(job: JobMonitor, dir: PathBuf, start: Arc<Barrier>) -> usize {
    start.wait();
    let mut taken = 0;
    for i in 0..ROUNDS {
        match job.savepoint(dir.join(format!("sp-{i}"))) {
            Ok(path) => {
                assert!(path.join("_metadata").exists(), "{}", path.display());
                taken += 1;
            }
            Err(e) => assert!(e.to_string().contains("savepoint"), "{e}"),
        }
    }
    taken
}

/// Replaces the graph by `v2` until it is done (a busy job refuses; the thread asks again).
fn replace(job: JobMonitor, start: Arc<Barrier>) -> u32 {
    start.wait();
    let mut refused = 0;
    loop {
        match job.replace_with("v2", ReplaceOptions::default()) {
            Ok(report) => {
                assert!(report.committed_at.is_some(), "{report:?}");
                return refused;
            }
            Err(ReplaceError::Busy(_)) => refused += 1,
            Err(e) => panic!("the replacement by v2: {e}"),
        }
        assert!(
            refused < 10_000,
            "the replacement was refused as busy forever"
        );
        std::thread::yield_now();
    }
}

/// The values `name` was given, in the order the history recorded them as applied.
fn applied_in_history(job: &JobHandle, name: &str) -> Vec<String> {
    job.settings_history()
        .iter()
        .filter(|r| r.outcome == "applied")
        .flat_map(|r| r.changes.iter())
        .filter(|(n, _, _)| n == name)
        .map(|(_, _, v)| v.clone())
        .collect()
}

#[test]
fn changes_from_many_threads_and_rest_are_answered_in_order_and_published_whole() {
    within_timeout(|| {
        let dir = TempDir::new("single-owner");
        let out = dir.path().join("out");
        let (stop, ended) = (Arc::new(AtomicBool::new(false)), Arc::default());
        let mut cfg = EnvConfig::default();
        cfg.checkpoint.interval = Some(Duration::from_millis(20));
        cfg.checkpoint.directory = dir.path().join("checkpoints");
        let env = Env::with_config(cfg);
        version(&env, &out, &stop, &ended, "v1");
        let (o, s, e) = (out.clone(), stop.clone(), ended.clone());
        env.register_graph("v2", move |env| version(env, &o, &s, &e, "v2"));
        let job = env.start("single-owner").expect("the job starts");
        let server = Arc::new(RestServer::start(RestConfig::default()).expect("a REST server"));
        server.register(job.monitor());

        let start = Arc::new(Barrier::new(5));
        let threads = (
            std::thread::spawn({
                let (j, b) = (job.monitor(), start.clone());
                move || rust_settings(j, b)
            }),
            std::thread::spawn({
                let (srv, id, b) = (server.clone(), job.id().to_owned(), start.clone());
                move || rest_settings(srv, id, b)
            }),
            std::thread::spawn({
                let (j, b) = (job.monitor(), start.clone());
                move || rescales(j, b)
            }),
            std::thread::spawn({
                let (j, d, b) = (job.monitor(), dir.path().join("savepoints"), start.clone());
                move || savepoints(j, d, b)
            }),
            std::thread::spawn({
                let (j, b) = (job.monitor(), start.clone());
                move || replace(j, b)
            }),
        );
        let intervals = threads.0.join().expect("the Rust settings thread");
        let timeouts = threads.1.join().expect("the REST settings thread");
        let (last_rescale, _busy) = threads.2.join().expect("the rescale thread");
        let _taken = threads.3.join().expect("the savepoint thread");
        let _refused = threads.4.join().expect("the replacement thread");

        // Every request once, each caller's in its order.
        assert_eq!(applied_in_history(&job, INTERVAL), intervals);
        assert_eq!(applied_in_history(&job, TIMEOUT), timeouts);
        // What the job publishes is the last change applied, everywhere.
        let settings = job.settings();
        assert_eq!(settings[INTERVAL], intervals[ROUNDS - 1]);
        assert_eq!(settings[TIMEOUT], timeouts[ROUNDS - 1]);
        let cp = job.checkpoint_config();
        assert_eq!(
            cp.interval,
            Some(Duration::from_millis(20 + ROUNDS as u64 - 1))
        );
        assert_eq!(cp.timeout, Duration::from_secs(600 + ROUNDS as u64));
        let count = job
            .vertices()
            .into_iter()
            .find(|v| v.operators.iter().any(|u| u == "count"))
            .expect("the count vertex");
        // The replacement's graph asks for 2: the last of the rescales and the replacement
        // wins.
        let rescaled = job.rescale_stats();
        assert!(rescaled.num_rescales >= 1, "{rescaled:?}");
        assert!(
            count.parallelism == last_rescale || count.parallelism == 2,
            "count runs at {} after a rescale to {last_rescale} and a replacement to 2 ({rescaled:?})",
            count.parallelism
        );
        assert_eq!(rescaled.in_progress, None);

        stop.store(true, Ordering::SeqCst);
        job.wait().expect("the job finishes");
        let end = ended.load(Ordering::SeqCst);
        let committed = read_committed(&out).expect("the sink's output");
        let mut ids = Vec::with_capacity(committed.lines.len());
        for line in &committed.lines {
            let mut parts = line.split(' ');
            let x: u64 = parts.next().unwrap().parse().unwrap();
            let c: u64 = parts.next().unwrap().parse().unwrap();
            assert_eq!(c, x / KEYS + 1, "id {x}: the count a sequential run gives");
            ids.push(x);
        }
        let report = ExactlyOnce::new(0..end).check(ids);
        assert!(report.is_exactly_once(), "{report}");
    });
}
