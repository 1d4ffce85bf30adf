//! The control agent against a real job over real HTTP (seed 002's scenario): the job's sink
//! writes to a database that turns slow, and a connection made while it was slow stays slow
//! after it recovers (a stale pool), so checkpoints become slow under backpressure until the
//! job restarts. The agent, in alert-then-act mode, first only alerts, then takes a savepoint
//! and restarts the job (a fast restart); the job recovers, the cool-down holds a second
//! action back when the database turns slow again, and every id reaches the exactly-once sink
//! once with the count a sequential run gives.
//!
//! Every wait is on an event (a checkpoint completed, a line in the agent's log), never on
//! the clock: how slow "slow" is only decides how long the test takes.

mod common;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{endless_ids, within_timeout, TempDir};
use serde_json::Value;
use weir::agent::{Agent, AgentConfig, JobSelector, Rules};
use weir::rest::RestConfig;
use weir::testing::{
    encode_display, read_committed, wait_for_checkpoint, ExactlyOnce, TwoPhaseFileSink,
};
use weir::{Collector, Env, EnvConfig, ValueState};

const KEYS: u64 = 16;

/// The database the sink writes to: its latency per row now, and a failure to come.
#[derive(Default)]
struct Db {
    latency_us: AtomicU64,
    fail_next_write: AtomicBool,
    connections: AtomicU64,
}

/// An exactly-once sink over a [`Db`] connection: slow while the database is, or for ever if
/// it connected while the database was slow.
struct DbSink {
    inner: TwoPhaseFileSink<String>,
    db: Arc<Db>,
    stale_latency_us: u64,
}

impl weir::sink::Sink<String> for DbSink {
    fn write_batch(&mut self, batch: &mut Vec<String>) -> Result<(), weir::SinkError> {
        if self.db.fail_next_write.swap(false, Ordering::SeqCst) {
            return Err(weir::SinkError::Io {
                path: PathBuf::from("db://orders"),
                source: std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "injected fault: the database reset the connection",
                ),
            });
        }
        let per_row = self
            .db
            .latency_us
            .load(Ordering::SeqCst)
            .max(self.stale_latency_us);
        if per_row > 0 {
            std::thread::sleep(Duration::from_micros(per_row * batch.len() as u64));
        }
        self.inner.write_batch(batch)
    }
    fn finish(&mut self) -> Result<(), weir::SinkError> {
        self.inner.finish()
    }
    fn pre_commit(&mut self, checkpoint: u64) -> Result<Option<Vec<u8>>, weir::SinkError> {
        self.inner.pre_commit(checkpoint)
    }
    fn commit(&mut self, checkpoint: u64) -> Result<(), weir::SinkError> {
        self.inner.commit(checkpoint)
    }
    fn initialize(&mut self, restored: Option<&[u8]>) -> Result<(), weir::SinkError> {
        self.inner.initialize(restored)
    }
}

/// ids -> keyed running count (parallelism 2) -> `id count` rows into the database.
fn graph(env: &Env, stop: &Arc<AtomicBool>, ended: &Arc<AtomicU64>, out: PathBuf, db: Arc<Db>) {
    endless_ids(env, stop, ended)
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
        .add_sink("orders_db", move |cx| {
            db.connections.fetch_add(1, Ordering::SeqCst);
            Ok(DbSink {
                inner: TwoPhaseFileSink::create(&out, cx, encode_display::<String>)?,
                stale_latency_us: db.latency_us.load(Ordering::SeqCst),
                db: db.clone(),
            })
        })
        .uid("orders_db")
        .set_parallelism(1);
}

/// The agent's output, shared with the test.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Log {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Log {
    fn lines(&self) -> Vec<Value> {
        let bytes = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        String::from_utf8(bytes)
            .expect("the agent writes UTF-8")
            .lines()
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}"))
            })
            .collect()
    }

    /// Waits until a line after the first `from` lines fits `pred`; its index.
    fn wait_for(&self, from: usize, what: &str, pred: impl Fn(&Value) -> bool) -> usize {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let lines = self.lines();
            if let Some(i) = lines.iter().skip(from).position(&pred) {
                return from + i;
            }
            assert!(
                Instant::now() < deadline,
                "no {what} in the agent's log:\n{}",
                lines
                    .iter()
                    .map(Value::to_string)
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn count(&self, pred: impl Fn(&Value) -> bool) -> usize {
        self.lines().iter().filter(|l| pred(l)).count()
    }
}

fn is(event: &'static str, verdict: &'static str) -> impl Fn(&Value) -> bool {
    move |l| l["event"] == event && (verdict.is_empty() || l["verdict"] == verdict)
}

#[test]
fn the_agent_alerts_then_saves_and_restarts_a_job_stuck_on_a_stale_connection() {
    within_timeout(|| {
        let out_dir = TempDir::new("agent-out");
        let savepoints = TempDir::new("agent-sp");
        let checkpoints = TempDir::new("agent-cp");
        let out = out_dir.path().to_owned();
        let db = Arc::new(Db::default());
        let (stop, ended) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );

        let mut cfg = EnvConfig::default();
        cfg.checkpoint.interval = Some(Duration::from_millis(50));
        cfg.checkpoint.directory = checkpoints.path().to_owned();
        cfg.metrics_interval = Duration::from_millis(20);
        // Small batches: a slow row costs a slow checkpoint sooner.
        cfg.batch_size = 64;
        let env = Env::with_config(cfg);
        env.serve_rest(RestConfig::default());
        graph(&env, &stop, &ended, out.clone(), db.clone());
        {
            let (stop, ended, out, db) = (stop.clone(), ended.clone(), out.clone(), db.clone());
            env.register_graph("main", move |env| {
                graph(env, &stop, &ended, out.clone(), db.clone())
            });
        }
        let job = env.start("orders-etl").expect("the job starts");
        let rest = job.rest().expect("the job serves REST");
        let token = rest.token().to_owned();
        wait_for_checkpoint(&job, 2, Duration::from_secs(60)).expect("healthy checkpoints");

        let rules = Rules::parse(
            &format!(
                r#"
interval = "20ms"
mode = "alert-then-act"
alert_first = 1
cooldown = "1h"
max_actions_per_hour = 3

[[rule]]
name = "slow-checkpoints-under-backpressure"
last_checkpoint_duration = "200ms"
backpressure = 0.8
consecutive = 2
decay = 2

[[rule.action]]
kind = "savepoint"
dir = "{}"

[[rule.action]]
kind = "restart"
graph = "main"
"#,
                savepoints.path().display()
            ),
            "test-rules.toml",
        )
        .expect("the rules read");
        let log = Log::default();
        let agent_stop = Arc::new(AtomicBool::new(false));
        let agent = {
            let (mut log, stop) = (log.clone(), agent_stop.clone());
            let cfg = AgentConfig::new(&format!("http://{}", rest.addr()), rules)
                .job(JobSelector::Name("orders-etl".into()))
                .token(Some(token));
            std::thread::spawn(move || Agent::new(cfg).run(&stop, &mut log))
        };
        let watching = log.wait_for(0, "job found", |l| l["event"] == "job");
        assert_eq!(log.lines()[watching]["job"], job.id());

        // The database turns slow, and resets the connection once: the job restarts from its
        // checkpoint, and its new connection is made while the database is slow.
        db.latency_us.store(2_000, Ordering::SeqCst);
        db.fail_next_write.store(true, Ordering::SeqCst);
        let alert = log.wait_for(watching, "first alert", is("decision", "alert"));
        let first = &log.lines()[alert];
        assert_eq!(first["trigger"], 1);
        assert!(
            first["values"]["lastCheckpointDuration"].as_u64() > Some(200)
                && first["values"]["backpressure"].as_f64() > Some(0.8),
            "a decision quotes the values that caused it: {first}"
        );
        assert_eq!(
            first["breached"],
            serde_json::json!(["last_checkpoint_duration", "backpressure"])
        );
        assert_eq!(
            log.count(is("action", "")),
            0,
            "the first trigger only alerts"
        );
        assert_eq!(log.count(|l| l["event"] == "alert"), 1);
        assert!(
            std::fs::read_dir(savepoints.path()).map_or(0, |d| d.count()) == 0,
            "no savepoint yet"
        );

        // The database is back, but the connection the job holds stays slow.
        db.latency_us.store(0, Ordering::SeqCst);
        let act = log.wait_for(alert, "an action", is("decision", "act"));
        assert_eq!(log.lines()[act]["trigger"], 2);
        let saved = log.wait_for(act, "the savepoint", |l| {
            l["event"] == "action" && l["kind"] == "savepoint"
        });
        let saved = &log.lines()[saved];
        assert_eq!(saved["ok"], true, "{saved}");
        let location = saved["detail"]["location"]
            .as_str()
            .expect("the savepoint's location");
        assert!(
            std::path::Path::new(location).exists(),
            "the savepoint is on disk: {location}"
        );
        let restarted = log.wait_for(act, "the restart", |l| {
            l["event"] == "action" && l["kind"] == "restart"
        });
        let restarted_line = &log.lines()[restarted];
        assert_eq!(restarted_line["ok"], true, "{restarted_line}");

        // The restarted job has a fresh connection: checkpoints are quick and nothing waits.
        log.wait_for(restarted, "a healthy checkpoint", is("decision", "healthy"));
        assert_eq!(job.monitor().status(), weir::JobStatus::Running);

        // The database turns slow again: the rule triggers, but the cool-down holds it back.
        let before = log.lines().len();
        db.latency_us.store(2_000, Ordering::SeqCst);
        let held = log.wait_for(before, "a suppressed trigger", is("decision", "suppressed"));
        let held = &log.lines()[held];
        assert!(
            held["why"]
                .as_str()
                .is_some_and(|w| w.contains("cool-down")),
            "{held}"
        );
        assert_eq!(log.count(is("decision", "act")), 1, "one action only");
        assert_eq!(
            log.count(|l| l["event"] == "action" && l["kind"] == "restart"),
            1
        );
        db.latency_us.store(0, Ordering::SeqCst);

        agent_stop.store(true, Ordering::SeqCst);
        agent
            .join()
            .expect("the agent does not panic")
            .expect("the agent's log is written");
        if std::env::var_os("WEIR_AGENT_LOG").is_some() {
            for l in log.lines() {
                eprintln!("{l}");
            }
        }
        let status = log.lines().pop().expect("a last line");
        assert_eq!(status["event"], "status", "{status}");
        assert_eq!(status["actions"], 1);
        assert_eq!(status["alerts"], 1);
        assert!(status["suppressed"].as_u64() >= Some(1), "{status}");
        assert_eq!(status["actionFailures"], 0);

        // Every id once, with its sequential count, through the restart from the checkpoint
        // and the agent's restart.
        stop.store(true, Ordering::SeqCst);
        job.wait().expect("the job finishes");
        assert!(
            db.connections.load(Ordering::SeqCst) >= 3,
            "connected, reconnected after the reset, and after the agent's restart"
        );
        let end = ended.load(Ordering::SeqCst);
        let committed = read_committed(&out).expect("the sink's output");
        let ids: Vec<u64> = committed
            .lines
            .iter()
            .map(|line| {
                let (x, c) = line.split_once(' ').expect("`id count`");
                let (x, c): (u64, u64) = (x.parse().unwrap(), c.parse().unwrap());
                assert_eq!(c, x / KEYS + 1, "id {x}: the count a sequential run gives");
                x
            })
            .collect();
        let report = ExactlyOnce::new(0..end).check(ids);
        assert!(report.is_exactly_once(), "{report}");
    });
}
