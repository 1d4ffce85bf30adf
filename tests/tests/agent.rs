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
use weir::rest::RestConfig;
use weir::{Collector, Env, EnvConfig, ValueState};
use weir_testing::{
    encode_display, read_committed, wait_for_checkpoint, ExactlyOnce, TwoPhaseFileSink,
};
use weirctl::agent::{Agent, AgentConfig, JobSelector, Rules};

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
        let text = String::from_utf8(bytes).expect("the agent writes UTF-8");
        // Complete lines only: the agent may be writing the next one.
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        complete
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
        // Each subtask on a thread of its own (ids, two counts, the sink), whatever the
        // machine's core count: the slow sink sharing one would stall its neighbour rather
        // than backpressure it.
        cfg.arbiters = 4;
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
        // The alert is the line after the decision (the agent writes them one by one).
        log.wait_for(alert, "the alert", |l| l["event"] == "alert");
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

/// A request the fake server got.
#[derive(Debug, Clone)]
struct Request {
    method: String,
    path: String,
    authorization: Option<String>,
    body: String,
}

type Handler = dyn Fn(&Request, usize) -> (u16, String) + Send + Sync;

/// A REST server that answers from a script (recorded Flink answers, failures, delays):
/// `handler` gets each request and how many came before it on the same path.
struct FakeServer {
    addr: std::net::SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl FakeServer {
    fn start(
        handler: impl Fn(&Request, usize) -> (u16, String) + Send + Sync + 'static,
    ) -> FakeServer {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        let addr = listener.local_addr().expect("its address");
        let requests: Arc<Mutex<Vec<Request>>> = Arc::default();
        let seen = requests.clone();
        let handler: Arc<Handler> = Arc::new(handler);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let (seen, handler) = (seen.clone(), handler.clone());
                // A thread per connection: a slow answer holds up no other.
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().expect("a second handle"));
                    let mut first = String::new();
                    if reader.read_line(&mut first).is_err() {
                        return;
                    }
                    let mut parts = first.split_whitespace();
                    let (method, path) = (
                        parts.next().unwrap_or("").to_owned(),
                        parts.next().unwrap_or("").to_owned(),
                    );
                    let (mut length, mut authorization) = (0, None);
                    loop {
                        let mut header = String::new();
                        if reader.read_line(&mut header).unwrap_or(0) == 0
                            || header.trim().is_empty()
                        {
                            break;
                        }
                        let (name, value) = header.split_once(':').unwrap_or((&header, ""));
                        match name.trim().to_ascii_lowercase().as_str() {
                            "content-length" => length = value.trim().parse().unwrap_or(0),
                            "authorization" => authorization = Some(value.trim().to_owned()),
                            _ => {}
                        }
                    }
                    let mut body = vec![0; length];
                    let _ = reader.read_exact(&mut body);
                    let request = Request {
                        method,
                        path,
                        authorization,
                        body: String::from_utf8_lossy(&body).into_owned(),
                    };
                    let before = {
                        let mut all = seen.lock().unwrap_or_else(|e| e.into_inner());
                        let before = all.iter().filter(|r| r.path == request.path).count();
                        all.push(request.clone());
                        before
                    };
                    let (status, body) = handler(&request, before);
                    let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                });
            }
        });
        FakeServer { addr, requests }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn requests(&self) -> Vec<Request> {
        self.requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// The answers a Flink 2.3 cluster gave on this machine (`fixtures/flink-2.3/README.md`).
fn flink(name: &str) -> String {
    let path = fixture(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn fixture(name: &str) -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/flink-2.3")
        .join(format!("{name}.json"))
}

const FLINK_JOB: &str = "79e991bb26cc267fd68205712d82ce5a";

/// A recorded Flink job: its checkpoints advance one recording per look; a stop with a
/// savepoint is in progress once, then completed, and the job is finished after it.
fn flink_cluster(stopped: Arc<AtomicBool>) -> impl Fn(&Request, usize) -> (u16, String) {
    move |r, n| {
        let job = format!("/jobs/{FLINK_JOB}");
        let p = r.path.as_str();
        let done = stopped.load(Ordering::SeqCst);
        let ok = |name: &str| (200, flink(name));
        if p == "/jobs/overview" {
            ok(if done {
                "overview-after-stop"
            } else {
                "overview"
            })
        } else if p == job {
            ok(if done { "job-after-stop" } else { "job" })
        } else if p == format!("{job}/checkpoints") {
            ok(&format!("checkpoints-{}", (n + 1).min(4)))
        } else if p.starts_with(&format!("{job}/metrics?")) {
            ok("metrics-get")
        } else if let Some(rest) = p.strip_prefix(&format!("{job}/vertices/")) {
            let (vid, what) = rest.split_once('/').unwrap_or((rest, ""));
            if what == "backpressure" {
                ok(&format!("backpressure-{vid}-{}", (n + 1).min(2)))
            } else if let Some(query) = what.strip_prefix("subtasks/metrics?get=") {
                // One metric a call: its own recording where Flink answered differently for it
                // alone, else that metric out of the recording of both.
                let metric = query.split('&').next().unwrap_or("");
                let own = format!("subtasks-metrics-{vid}-{metric}");
                if fixture(&own).exists() {
                    return ok(&own);
                }
                let both: Vec<Value> =
                    serde_json::from_str(&flink(&format!("subtasks-metrics-{vid}"))).unwrap();
                let one: Vec<&Value> = both.iter().filter(|m| m["id"] == metric).collect();
                (200, serde_json::to_string(&one).unwrap())
            } else {
                (404, flink("unknown-job"))
            }
        } else if r.method == "POST" && p == format!("{job}/stop") {
            ok("stop-trigger")
        } else if p.starts_with(&format!("{job}/savepoints/")) {
            if n == 0 {
                ok("stop-in-progress")
            } else {
                stopped.store(true, Ordering::SeqCst);
                ok("stop-completed")
            }
        } else {
            (404, flink("unknown-job"))
        }
    }
}

#[test]
fn the_agent_reads_a_flink_clusters_answers_and_stops_the_job_with_a_savepoint() {
    let stopped = Arc::new(AtomicBool::new(false));
    let server = FakeServer::start(flink_cluster(stopped.clone()));
    let hook = FakeServer::start(|_, _| (204, String::new()));
    let dir = TempDir::new("agent-alerts");
    let alerts = dir.path().join("alerts.jsonl");
    let rules = Rules::parse(
        &format!(
            r#"
interval = "10ms"
mode = "act"

[alert]
stdout = false
file = "{}"
webhook = "{}/weir-alerts"

[[rule]]
name = "slow-and-late"
last_checkpoint_duration = "500ms"
checkpoint_start_delay = "500ms"
consecutive = 2

[[rule.action]]
kind = "stop"
dir = "file:///tmp/flink-recorded-sp"
"#,
            alerts.display(),
            hook.url()
        ),
        "flink.toml",
    )
    .expect("the rules read");
    // No token: a Flink cluster without authentication takes the stop as it is.
    let mut agent = Agent::new(AgentConfig::new(&server.url(), rules));
    let log = Log::default();
    let mut out = log.clone();
    for _ in 0..6 {
        agent.look(&mut out).expect("the log is written");
    }
    let lines = log.lines();
    let decisions: Vec<&Value> = lines.iter().filter(|l| l["event"] == "decision").collect();
    assert_eq!(
        decisions.len(),
        2,
        "checkpoints-3 repeats checkpoints-2: no new outcome\n{lines:#?}"
    );
    // Flink's job metrics have no start delay or alignment time: they come from the task
    // metrics (ns, the largest subtask's); metric values are strings.
    let v = &decisions[0]["values"];
    assert_eq!(decisions[0]["job"], FLINK_JOB);
    assert_eq!(decisions[0]["verdict"], "violation");
    assert_eq!(v["lastCheckpointDuration"], 504);
    // The largest of the four vertices' largest subtask delay (7.12E8 ns).
    assert_eq!(v["checkpointStartDelay"], 712);
    assert_eq!(v["numberOfCompletedCheckpoints"], 20);
    assert_eq!(v["numberOfFailedCheckpoints"], 2);
    assert_eq!(v["backpressure"], 0.0);
    assert!(v["checkpointAlignmentTime"].as_u64().is_some(), "{v}");
    assert_eq!(decisions[1]["verdict"], "act");
    assert_eq!(decisions[1]["values"]["lastCheckpointDuration"], 7169);
    let action = lines
        .iter()
        .find(|l| l["event"] == "action")
        .expect("the stop");
    assert_eq!(action["kind"], "stop");
    assert_eq!(action["ok"], true, "{action}");
    assert_eq!(
        action["detail"]["location"],
        "file:/tmp/flink-recorded-sp/savepoint-79e991-36747201d745"
    );
    let stop = server
        .requests()
        .into_iter()
        .find(|r| r.method == "POST")
        .expect("the stop request");
    assert_eq!(stop.path, format!("/jobs/{FLINK_JOB}/stop"));
    assert!(stop.authorization.is_none());
    let body: Value = serde_json::from_str(&stop.body).expect("a JSON body");
    assert_eq!(body["targetDirectory"], "file:///tmp/flink-recorded-sp");
    assert_eq!(body["drain"], false);
    // The finished job is let go; with no running job the agent waits for one.
    let gone = lines
        .iter()
        .find(|l| l["event"] == "job" && l["job"].is_null())
        .expect("the job let go");
    assert!(
        gone["why"].as_str().is_some_and(|w| w.contains("FINISHED")),
        "{gone}"
    );
    let last = lines.last().expect("a line");
    assert_eq!(last["event"], "look_failed");
    assert!(
        last["error"]
            .as_str()
            .is_some_and(|e| e.contains("no job is running")),
        "{last}"
    );
    assert_eq!(agent.status().actions, 1);
    assert_eq!(agent.status().action_failures, 0);
    // The act went to the alert file and the webhook, not to stdout (`stdout = false`).
    assert!(!lines.iter().any(|l| l["event"] == "alert"));
    let filed: Vec<Value> = std::fs::read_to_string(&alerts)
        .expect("the alert file")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(filed.len(), 1);
    assert_eq!(
        (filed[0]["event"].as_str(), filed[0]["verdict"].as_str()),
        (Some("alert"), Some("act"))
    );
    let posted = hook.requests();
    assert_eq!(posted.len(), 1);
    assert_eq!(
        (posted[0].method.as_str(), posted[0].path.as_str()),
        ("POST", "/weir-alerts")
    );
    let body: Value = serde_json::from_str(&posted[0].body).expect("JSON");
    assert_eq!(body, filed[0]);
}

#[test]
fn a_server_away_or_slow_makes_the_agent_back_off_not_fail() {
    // Away (503) for three looks, then a slow answer, then the recorded Flink job.
    let stopped = Arc::new(AtomicBool::new(false));
    let flink = flink_cluster(stopped);
    let server = FakeServer::start(move |r, n| {
        if r.path == "/jobs/overview" && n < 3 {
            return (503, r#"{"errors":["the cluster is starting"]}"#.into());
        }
        if r.path == "/jobs/overview" && n == 3 {
            std::thread::sleep(Duration::from_millis(1_500));
        }
        flink(r, n)
    });
    let mut rules = Rules::default();
    rules.interval = Duration::from_millis(10);
    rules.request_timeout = Duration::from_millis(300);
    let mut agent = Agent::new(AgentConfig::new(&server.url(), rules));
    let log = Log::default();
    let mut out = log.clone();
    let waits: Vec<Duration> = (0..5)
        .map(|_| agent.look(&mut out).expect("the log is written"))
        .collect();
    assert_eq!(
        waits,
        [20, 40, 80, 160, 10].map(Duration::from_millis),
        "doubling while the server is away, the interval again once it answers"
    );
    let lines = log.lines();
    let failed: Vec<&Value> = lines
        .iter()
        .filter(|l| l["event"] == "look_failed")
        .collect();
    assert_eq!(failed.len(), 4, "{lines:#?}");
    assert!(
        failed[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("503") && e.contains("the cluster is starting")),
        "{}",
        failed[0]
    );
    assert!(
        failed[3]["error"]
            .as_str()
            .is_some_and(|e| e.to_lowercase().contains("timeout") || e.contains("timed out")),
        "{}",
        failed[3]
    );
    assert_eq!(lines.last().expect("a line")["event"], "job");
    assert_eq!(agent.status().look_failures, 4);
    assert_eq!(agent.status().looks, 1);
    assert_eq!(agent.status().job.as_deref(), Some(FLINK_JOB));
}

#[test]
fn a_failed_action_is_retried_reported_and_never_repeated_past_the_budget() {
    let stopped = Arc::new(AtomicBool::new(false));
    let flink = flink_cluster(stopped);
    let job = format!("/jobs/{FLINK_JOB}");
    let server = FakeServer::start(move |r, n| {
        // The checkpoints advance at every look, always slow.
        if r.path == format!("{job}/checkpoints") {
            let mut c: Value = serde_json::from_str(&flink_body("checkpoints-4")).unwrap();
            c["counts"]["completed"] = (21 + n).into();
            return (200, c.to_string());
        }
        // Busy twice, then the savepoint is triggered (and completes at once).
        if r.method == "POST" && r.path == format!("{job}/savepoints") {
            return if n < 2 {
                (503, r#"{"errors":["busy"]}"#.into())
            } else {
                (202, flink_body("stop-trigger"))
            };
        }
        if r.path.starts_with(&format!("{job}/savepoints/")) {
            return (200, flink_body("stop-completed"));
        }
        flink(r, n)
    });
    let rules = Rules::parse(
        r#"
interval = "10ms"
mode = "act"
cooldown = "0ms"
max_actions_per_hour = 1
retries = 2

[[rule]]
name = "slow"
last_checkpoint_duration = "1s"
consecutive = 1

[[rule.action]]
kind = "savepoint"
dir = "/tmp/sp"

[[rule.action]]
kind = "restart"
graph = "main"
"#,
        "budget.toml",
    )
    .expect("the rules read");
    let mut agent = Agent::new(
        AgentConfig::new(&server.url(), rules).token(Some("a-token-for-the-test".into())),
    );
    let log = Log::default();
    let mut out = log.clone();
    for _ in 0..4 {
        agent.look(&mut out).expect("the log is written");
    }
    let lines = log.lines();
    let actions: Vec<&Value> = lines.iter().filter(|l| l["event"] == "action").collect();
    assert_eq!(actions.len(), 2, "{lines:#?}");
    assert_eq!(
        (
            actions[0]["kind"].as_str(),
            actions[0]["ok"].as_bool(),
            actions[0]["tries"].as_u64()
        ),
        (Some("savepoint"), Some(true), Some(3)),
        "busy twice, then taken"
    );
    // Flink has no fast restart: refused (404), not tried again, reported as an alert.
    assert_eq!(
        (
            actions[1]["kind"].as_str(),
            actions[1]["ok"].as_bool(),
            actions[1]["tries"].as_u64()
        ),
        (Some("restart"), Some(false), Some(1))
    );
    assert!(
        actions[1]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("404")
                && d.contains("NotFoundException")
                && !d.contains("\tat ")),
        "{}",
        actions[1]
    );
    assert!(lines
        .iter()
        .any(|l| l["event"] == "alert" && l["kind"] == "restart" && l["ok"] == false));
    // The budget (one an hour) holds every later trigger back.
    let held: Vec<&Value> = lines
        .iter()
        .filter(|l| l["event"] == "decision" && l["verdict"] == "suppressed")
        .collect();
    assert_eq!(held.len(), 2, "{lines:#?}");
    assert!(held
        .iter()
        .all(|h| h["why"].as_str().is_some_and(|w| w.starts_with("budget"))));
    assert_eq!(
        server
            .requests()
            .iter()
            .filter(|r| r.method == "POST")
            .count(),
        4,
        "3 tries of the savepoint, 1 of the restart"
    );
    assert!(server
        .requests()
        .iter()
        .filter(|r| r.method == "POST")
        .all(|r| r.authorization.as_deref() == Some("Bearer a-token-for-the-test")));
    assert_eq!(agent.status().action_failures, 1);
    assert_eq!(agent.status().suppressed, 2);
}

fn flink_body(name: &str) -> String {
    flink(name)
}

#[test]
fn the_agent_follows_a_job_replaced_under_the_same_name() {
    let replaced = Arc::new(AtomicBool::new(false));
    let flink = flink_cluster(Arc::new(AtomicBool::new(false)));
    let new_id = "0123456789abcdef0123456789abcdef";
    let server = {
        let replaced = replaced.clone();
        FakeServer::start(move |r, n| {
            if !replaced.load(Ordering::SeqCst) {
                return flink(r, n);
            }
            // The old job is gone; a new one of the same name runs under a new id.
            if r.path.starts_with(&format!("/jobs/{FLINK_JOB}")) {
                return (404, flink_body("unknown-job"));
            }
            let translated = Request {
                path: r.path.replace(new_id, FLINK_JOB),
                ..r.clone()
            };
            let (status, body) = flink(&translated, n);
            (status, body.replace(FLINK_JOB, new_id))
        })
    };
    let mut rules = Rules::default();
    rules.interval = Duration::from_millis(10);
    let mut agent = Agent::new(
        AgentConfig::new(&server.url(), rules).job(JobSelector::Name("nexmark-q5".into())),
    );
    let log = Log::default();
    let mut out = log.clone();
    agent.look(&mut out).expect("the log is written");
    assert_eq!(agent.status().job.as_deref(), Some(FLINK_JOB));
    replaced.store(true, Ordering::SeqCst);
    for _ in 0..2 {
        agent.look(&mut out).expect("the log is written");
    }
    let jobs: Vec<Value> = log
        .lines()
        .into_iter()
        .filter(|l| l["event"] == "job")
        .map(|l| l["job"].clone())
        .collect();
    assert_eq!(
        jobs,
        [Value::from(FLINK_JOB), Value::Null, Value::from(new_id)]
    );
    assert_eq!(agent.status().job.as_deref(), Some(new_id));
}

fn weirctl(args: &[&str]) -> Result<String, weirctl::cli::CliError> {
    let mut out = Vec::new();
    weirctl::cli::run(args.iter().copied(), &mut out)?;
    Ok(String::from_utf8(out).expect("UTF-8 output"))
}

#[test]
fn the_example_rules_file_reads() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/agent-rules.toml");
    let rules = Rules::from_file(&path).expect("examples/agent-rules.toml reads");
    assert_eq!(rules.rules.len(), 2);
    assert_eq!(rules.rules[0].when.backpressure, Some(0.8));
}

#[test]
fn weirctl_agent_names_what_is_wrong_in_a_rules_file_and_dry_runs() {
    let dir = TempDir::new("agent-cli");
    let bad = dir.write(
        "bad.toml",
        b"interval = \"1s\"\n\n[[rule]]\nname = \"slow\"\nlast_checkpoint_duration = \"5 parsecs\"\n",
    );
    let e = weirctl(&["weirctl", "agent", "--rules", bad.to_str().unwrap()]).unwrap_err();
    assert!(matches!(e, weirctl::cli::CliError::Rules(_)), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("bad.toml line 5, column 28, field `last_checkpoint_duration`: `parsecs` is not a unit of time"),
        "{msg}"
    );
    let missing = weirctl(&["weirctl", "agent", "--rules", "/no/such/rules.toml"]).unwrap_err();
    assert!(
        missing
            .to_string()
            .contains("cannot read the rules file /no/such/rules.toml"),
        "{missing}"
    );

    let good = dir.write(
        "good.toml",
        b"interval = \"10ms\"\nmode = \"act\"\n[[rule]]\nname = \"slow\"\nlast_checkpoint_duration = \"500ms\"\nconsecutive = 1\n[[rule.action]]\nkind = \"stop\"\ndir = \"/tmp/sp\"\n",
    );
    let checked = weirctl(&[
        "weirctl",
        "agent",
        "--rules",
        good.to_str().unwrap(),
        "--check",
    ])
    .unwrap();
    assert!(
        checked.contains("slow") && checked.contains("Stop"),
        "{checked}"
    );

    let server = FakeServer::start(flink_cluster(Arc::new(AtomicBool::new(false))));
    let out = weirctl(&[
        "weirctl",
        "--url",
        &server.url(),
        "agent",
        "--rules",
        good.to_str().unwrap(),
        "--dry-run",
        "--looks",
        "3",
    ])
    .unwrap();
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON lines"))
        .collect();
    let acts: Vec<&Value> = lines
        .iter()
        .filter(|l| l["event"] == "decision" && l["verdict"] == "act")
        .collect();
    assert_eq!(acts.len(), 1, "{out}");
    assert_eq!(acts[0]["dryRun"], true);
    assert!(
        !lines.iter().any(|l| l["event"] == "action"),
        "a dry run takes no action: {out}"
    );
    assert!(server.requests().iter().all(|r| r.method == "GET"));
    let status = lines.last().expect("a status line");
    assert_eq!(
        (
            status["event"].as_str(),
            status["looks"].as_u64(),
            status["actions"].as_u64()
        ),
        (Some("status"), Some(3), Some(1))
    );
}

#[test]
fn the_agent_changes_live_settings_and_rescales_a_backpressured_job() {
    within_timeout(|| {
        let mut cfg = EnvConfig::default();
        cfg.checkpoint.interval = Some(Duration::from_millis(50));
        cfg.metrics_interval = Duration::from_millis(20);
        let env = Env::with_config(cfg);
        env.serve_rest(RestConfig::default());
        env.generate(u64::MAX, |i| i)
            .key_by(|x: &u64| x % KEYS)
            .process(
                |_k: &u64, n: &mut ValueState<u64>, _x: u64, out: &mut Collector<u64>| {
                    let c = n.get_or_insert_with(|| 0);
                    *c += 1;
                    out.collect(*c);
                },
            )
            .uid("count")
            .set_parallelism(2)
            .add_sink("slow", |_| Ok(weir_testing::PacedSink::new(20_000.0)))
            .uid("slow")
            .set_parallelism(1);
        let job = env.start("backpressured").expect("the job starts");
        let rest = job.rest().expect("the job serves REST");
        let rules = Rules::parse(
            r#"
interval = "20ms"
mode = "act"

[[rule]]
name = "backpressured"
backpressure = 0.8
consecutive = 2

[[rule.action]]
kind = "set"
settings = { "weir.source.rate" = 10000, "execution.checkpointing.interval" = "200ms" }

[[rule.action]]
kind = "rescale"
vertex = "count"
parallelism = 3
"#,
            "live.toml",
        )
        .expect("the rules read");
        let mut agent = Agent::new(
            AgentConfig::new(&format!("http://{}", rest.addr()), rules)
                .token(Some(rest.token().to_owned())),
        );
        let log = Log::default();
        let mut out = log.clone();
        // Look until the rule acted (the backpressure shows once the metrics have a period).
        while log.count(|l| l["event"] == "action") < 2 {
            let wait = agent.look(&mut out).expect("the log is written");
            std::thread::sleep(wait);
        }
        let lines = log.lines();
        let actions: Vec<&Value> = lines.iter().filter(|l| l["event"] == "action").collect();
        assert!(actions.iter().all(|a| a["ok"] == true), "{actions:#?}");
        assert_eq!(actions[0]["kind"], "set");
        assert_eq!(
            actions[1]["detail"]["changes"][0]["to"], 3,
            "{}",
            actions[1]
        );
        let settings = job.settings();
        assert!(
            settings
                .get("weir.source.rate")
                .is_some_and(|r| r.parse::<f64>() == Ok(10_000.0)),
            "{settings:?}"
        );
        assert_eq!(
            settings
                .get("execution.checkpointing.interval")
                .map(String::as_str),
            Some("200ms")
        );
        let count = job
            .vertices()
            .into_iter()
            .find(|v| v.id == "count")
            .expect("the count vertex");
        assert_eq!(count.parallelism, 3);
        job.cancel();
        let _ = job.wait();
    });
}
