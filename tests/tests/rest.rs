//! The REST control plane, over real HTTP to running jobs on loopback: Flink's paths and JSON
//! field names, the error codes with their messages, cancel, savepoints and stop-with-savepoint
//! triggered over REST (a new job started from the savepoint carries on exactly once), and
//! `/metrics` in Prometheus text. Waits are on events (checkpoints completed, a trigger's
//! status), never on elapsed time.

mod common;

use std::time::Duration;

use common::{within_timeout, TempDir};
use serde_json::{json, Value};
use weir::rate::RateControlConfig;
use weir::rest::{RestConfig, RestError, RestServer};
use weir::{Env, EnvConfig, JobError};
use weir_testing::{wait_for_checkpoint, ExactlyOnce};

const WAIT: Duration = Duration::from_secs(20);

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

/// `(status, JSON body)` of a request.
fn call(req: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> (u16, Value) {
    let mut resp = req.expect("the server answers");
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().expect("a body");
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body)
}

fn get(server: &RestServer, path: &str) -> (u16, Value) {
    call(
        agent()
            .get(format!("http://{}{path}", server.addr()))
            .call(),
    )
}

fn post(server: &RestServer, path: &str, token: Option<&str>, body: &str) -> (u16, Value) {
    let mut req = agent()
        .post(format!("http://{}{path}", server.addr()))
        .header("Content-Type", "application/json");
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    call(req.send(body))
}

fn patch(server: &RestServer, path: &str, token: Option<&str>) -> (u16, Value) {
    let mut req = agent().patch(format!("http://{}{path}", server.addr()));
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    call(req.send_empty())
}

/// The `id`s of a metrics answer (`[{"id": …, "value": …}]`), in order.
fn metric_ids(body: &Value) -> Vec<&str> {
    body.as_array()
        .unwrap_or_else(|| panic!("a list of metrics, got {body}"))
        .iter()
        .map(|m| m["id"].as_str().expect("a metric id"))
        .collect()
}

fn error_of(body: &Value) -> String {
    body["errors"][0]
        .as_str()
        .unwrap_or_else(|| panic!("a JSON error, got {body}"))
        .to_owned()
}

/// A job whose source runs at `rate` records/s (so it is still running when the test acts),
/// with checkpoints every 10 ms; `map` and `sink` chained behind a rebalance.
fn config(rate: f64, dir: &std::path::Path) -> EnvConfig {
    let mut cfg = EnvConfig::default();
    cfg.batch_size = 64;
    cfg.metrics_interval = Duration::from_millis(20);
    cfg.checkpoint.interval = Some(Duration::from_millis(10));
    cfg.checkpoint.directory = dir.to_owned();
    cfg.rate_control = RateControlConfig::fixed(rate);
    cfg
}

#[test]
fn every_read_endpoint_answers_with_flinks_fields_and_cancel_works() {
    within_timeout(|| {
        let dir = TempDir::new("rest-read");
        let server = RestServer::start(RestConfig::default()).expect("the server starts");
        let env = Env::with_config(config(20_000.0, dir.path()));
        env.generate(u64::MAX, |i| i)
            .uid("src")
            .map(|x: u64| x + 1)
            .uid("inc")
            .rebalance()
            .map(|x: u64| x)
            .uid("sink-side")
            .set_parallelism(2)
            .collect();
        let job = env.start("rest-read").expect("the job starts");
        server.register(job.monitor());
        wait_for_checkpoint(&job, 2, WAIT).expect("two checkpoints");
        while job.metrics().is_none() {
            std::thread::sleep(Duration::from_millis(2));
        }
        let id = job.id().to_owned();

        let (s, b) = get(&server, "/overview");
        assert_eq!(s, 200);
        for f in [
            "taskmanagers",
            "slots-total",
            "slots-available",
            "jobs-running",
            "jobs-finished",
            "jobs-cancelled",
            "jobs-failed",
            "flink-version",
            "flink-commit",
        ] {
            assert!(b.get(f).is_some(), "/overview has `{f}`: {b}");
        }
        assert_eq!(b["jobs-running"], 1);

        let (s, b) = get(&server, "/jobs");
        assert_eq!(s, 200);
        assert_eq!(b["jobs"], json!([{ "id": id, "status": "RUNNING" }]));

        let (s, b) = get(&server, "/jobs/overview");
        assert_eq!(s, 200);
        let o = &b["jobs"][0];
        assert_eq!(o["jid"], id);
        assert_eq!(o["name"], "rest-read");
        assert_eq!(o["state"], "RUNNING");
        let subtasks: u64 = job
            .monitor()
            .vertices()
            .iter()
            .map(|v| v.parallelism as u64)
            .sum();
        assert_eq!(o["tasks"]["total"], subtasks);
        assert_eq!(o["tasks"]["running"], subtasks);
        for f in ["start-time", "end-time", "duration", "last-modification"] {
            assert!(o.get(f).is_some(), "/jobs/overview has `{f}`: {o}");
        }

        // The second vertex's input shows once a metrics interval has seen records there.
        let b = loop {
            let (s, b) = get(&server, &format!("/jobs/{id}"));
            assert_eq!(s, 200);
            if b["vertices"][1]["metrics"]["read-records"].as_u64() > Some(0) {
                break b;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(b["jid"], id);
        assert_eq!(b["state"], "RUNNING");
        let vertices = b["vertices"].as_array().expect("vertices");
        let shape: Vec<(String, u64)> = vertices
            .iter()
            .map(|v| {
                (
                    v["id"].as_str().unwrap().to_owned(),
                    v["parallelism"].as_u64().unwrap(),
                )
            })
            .collect();
        // `generate -> map` chained, the rebalanced `map`, and the collect sink (parallelism 1).
        assert_eq!(shape.len(), 3, "{shape:?}");
        assert_eq!(
            shape[..2],
            [("src".to_owned(), 1), ("sink-side".to_owned(), 2)]
        );
        assert_eq!(vertices[0]["name"], "generate -> map");
        let m = &vertices[1]["metrics"];
        for f in [
            "read-bytes",
            "write-bytes",
            "read-records",
            "write-records",
            "read-records-complete",
        ] {
            assert!(m.get(f).is_some(), "vertex metrics have `{f}`: {m}");
        }
        assert_eq!(b["plan"]["nodes"].as_array().map(Vec::len), Some(3));

        let (s, b) = get(&server, &format!("/jobs/{id}/vertices/sink-side"));
        assert_eq!(s, 200);
        assert_eq!(b["subtasks"].as_array().map(Vec::len), Some(2));

        let (s, b) = get(
            &server,
            &format!("/jobs/{id}/vertices/sink-side/backpressure"),
        );
        assert_eq!(s, 200);
        assert!(["ok", "low", "high"].contains(&b["backpressureLevel"].as_str().unwrap()));
        let subtasks = b["subtasks"].as_array().expect("subtasks");
        assert_eq!(subtasks.len(), 2);
        for st in subtasks {
            for f in [
                "subtask",
                "backpressureLevel",
                "ratio",
                "busyRatio",
                "idleRatio",
            ] {
                assert!(
                    st.get(f).is_some(),
                    "a backpressure subtask has `{f}`: {st}"
                );
            }
        }

        let (s, b) = get(&server, &format!("/jobs/{id}/vertices/sink-side/metrics"));
        assert_eq!(s, 200);
        assert!(
            b.as_array()
                .unwrap()
                .iter()
                .any(|m| m["id"] == "1.busyTimeMsPerSecond"),
            "{b}"
        );
        let (s, b) = get(
            &server,
            &format!("/jobs/{id}/vertices/sink-side/metrics?get=0.busyTimeMsPerSecond,1.idleTimeMsPerSecond,7.nope"),
        );
        assert_eq!(s, 200);
        let ids = metric_ids(&b);
        assert_eq!(
            ids,
            ["0.busyTimeMsPerSecond", "1.idleTimeMsPerSecond"],
            "{b}"
        );
        let (s, b) = get(
            &server,
            &format!("/jobs/{id}/vertices/sink-side/subtasks/metrics?get=busyTimeMsPerSecond,inPoolUsage&agg=min,max"),
        );
        assert_eq!(s, 200);
        assert_eq!(b.as_array().map(Vec::len), Some(2), "{b}");
        assert_eq!(b[0]["id"], "busyTimeMsPerSecond");
        assert!(b[0]["min"].as_f64().unwrap() <= b[0]["max"].as_f64().unwrap());
        assert!(
            b[0].get("sum").is_none(),
            "only the aggregations asked for: {b}"
        );
        let (s, b) = get(
            &server,
            &format!(
                "/jobs/{id}/vertices/sink-side/subtasks/metrics?get=busyTimeMsPerSecond&agg=median"
            ),
        );
        assert_eq!(s, 400);
        assert!(error_of(&b).contains("`agg`"), "{b}");

        let (s, b) = get(&server, &format!("/jobs/{id}/checkpoints"));
        assert_eq!(s, 200);
        assert!(b["counts"]["completed"].as_u64().unwrap() >= 2, "{b}");
        for f in ["restored", "total", "in_progress", "completed", "failed"] {
            assert!(b["counts"].get(f).is_some(), "counts have `{f}`");
        }
        assert_eq!(b["latest"]["completed"]["status"], "COMPLETED");
        let latest = b["latest"]["completed"]["id"].as_u64().unwrap();
        assert!(latest >= 2);
        let history = b["history"].as_array().expect("history");
        assert!(!history.is_empty() && history.len() <= 10, "{b}");
        for f in [
            "id",
            "status",
            "is_savepoint",
            "trigger_timestamp",
            "latest_ack_timestamp",
            "state_size",
            "end_to_end_duration",
            "num_subtasks",
            "num_acknowledged_subtasks",
        ] {
            assert!(
                history[0].get(f).is_some(),
                "a history entry has `{f}`: {}",
                history[0]
            );
        }
        for f in [
            "state_size",
            "end_to_end_duration",
            "checkpointed_size",
            "persisted_data",
        ] {
            for g in ["min", "max", "avg"] {
                assert!(b["summary"][f].get(g).is_some(), "summary.{f}.{g}: {b}");
            }
        }
        let (s, d) = get(&server, &format!("/jobs/{id}/checkpoints/details/{latest}"));
        assert_eq!(s, 200);
        assert_eq!(
            (d["id"].as_u64(), d["status"].as_str()),
            (Some(latest), Some("COMPLETED"))
        );
        assert_eq!(d["num_acknowledged_subtasks"], d["num_subtasks"]);
        // Per vertex, and per subtask of each vertex: every one acknowledged.
        let tasks = d["tasks"].as_object().expect("tasks per vertex");
        assert!(!tasks.is_empty(), "{d}");
        let mut acked = 0;
        for (vid, t) in tasks {
            assert_eq!(
                t["num_acknowledged_subtasks"], t["num_subtasks"],
                "{vid}: {t}"
            );
            acked += t["num_acknowledged_subtasks"].as_u64().unwrap();
            let (s, v) = get(
                &server,
                &format!("/jobs/{id}/checkpoints/details/{latest}/subtasks/{vid}"),
            );
            assert_eq!(s, 200, "{v}");
            let subtasks = v["subtasks"].as_array().expect("subtasks");
            assert_eq!(subtasks.len() as u64, t["num_subtasks"].as_u64().unwrap());
            for (j, st) in subtasks.iter().enumerate() {
                assert_eq!(
                    (st["index"].as_u64(), st["status"].as_str()),
                    (Some(j as u64), Some("completed")),
                    "{st}"
                );
                assert!(
                    st["ack_timestamp"].as_u64() >= d["trigger_timestamp"].as_u64(),
                    "{st}"
                );
            }
        }
        assert_eq!(Some(acked), d["num_subtasks"].as_u64());
        let (s, b) = get(
            &server,
            &format!("/jobs/{id}/checkpoints/details/{latest}/subtasks/no-such-vertex"),
        );
        assert_eq!(s, 404);
        assert!(error_of(&b).contains("no-such-vertex"), "{b}");

        // A checkpoint triggered over REST.
        let (s, t) = post(
            &server,
            &format!("/jobs/{id}/checkpoints"),
            Some(server.token()),
            "{}",
        );
        assert_eq!(s, 202, "{t}");
        let trigger = t["request-id"].as_str().unwrap().to_owned();
        let done = loop {
            let (s, b) = get(&server, &format!("/jobs/{id}/checkpoints/{trigger}"));
            assert_eq!(s, 200, "{b}");
            if b["status"]["id"] == "COMPLETED" {
                break b;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let triggered = done["operation"]["checkpointId"]
            .as_u64()
            .expect("a checkpoint id");
        assert!(triggered > latest, "{done}");

        let (s, b) = get(&server, &format!("/jobs/{id}/checkpoints/config"));
        assert_eq!(s, 200);
        assert_eq!(b["mode"], "exactly_once");
        assert_eq!(b["interval"], 10);
        assert_eq!(b["unaligned_checkpoints"], false);

        let (s, b) = get(
            &server,
            &format!("/jobs/{id}/metrics?get=lastCheckpointDuration,checkpointStartDelay,checkpointAlignmentTime,noSuchMetric"),
        );
        assert_eq!(s, 200);
        let ids = metric_ids(&b);
        assert_eq!(
            ids,
            [
                "lastCheckpointDuration",
                "checkpointStartDelay",
                "checkpointAlignmentTime"
            ]
        );
        assert!(
            b[0]["value"].as_str().unwrap().parse::<u64>().is_ok(),
            "values are strings of numbers: {b}"
        );
        let (_, b) = get(&server, &format!("/jobs/{id}/metrics"));
        assert!(b
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == "numRestarts"));

        let (s, b) = get(&server, &format!("/jobs/{id}/backups"));
        assert_eq!((s, b), (200, json!({ "backups": [] })));

        let (s, text) = get(&server, "/metrics");
        assert_eq!(s, 200);
        let text = text.as_str().expect("Prometheus text").to_owned();
        let samples = parse_prometheus(&text);
        let completed = samples
            .iter()
            .find(|(name, labels, _)| {
                name == "weir_job_completed_checkpoints"
                    && labels.contains(&("job_id".into(), id.clone()))
            })
            .unwrap_or_else(|| panic!("a completed-checkpoints sample for the job in:\n{text}"));
        assert!(completed.2 >= 2.0);
        assert!(samples
            .iter()
            .any(|(n, l, _)| n == "weir_subtask_busy_time_ms_per_second"
                && l.contains(&("vertex".into(), "sink-side".into()))
                && l.contains(&("subtask".into(), "1".into()))));

        let (s, b) = patch(
            &server,
            &format!("/jobs/{id}?mode=cancel"),
            Some(server.token()),
        );
        assert_eq!((s, b), (202, json!({})));
        assert!(matches!(job.wait(), Err(JobError::Cancelled { .. })));
        let (_, b) = get(&server, &format!("/jobs/{id}"));
        assert_eq!(b["state"], "CANCELED");
        let end = b["end-time"].as_i64().unwrap();
        assert!(
            end >= b["start-time"].as_i64().unwrap(),
            "an ended job has an end time: {b}"
        );
        assert_eq!(
            b["duration"].as_i64(),
            Some(end - b["start-time"].as_i64().unwrap())
        );
        let (s, b) = patch(
            &server,
            &format!("/jobs/{id}?mode=cancel"),
            Some(server.token()),
        );
        assert_eq!(s, 409, "{b}");
        assert!(error_of(&b).contains("CANCELED"));
    });
}

/// One sample: its metric name, labels and value.
type Sample = (String, Vec<(String, String)>, f64);

/// Samples of a Prometheus text exposition: `(name, labels, value)`, comments skipped; every
/// other line must parse.
fn parse_prometheus(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("a sample line: {line}"));
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("a number in: {line}"));
        let (name, labels) = match series.split_once('{') {
            None => (series.to_owned(), Vec::new()),
            Some((name, rest)) => {
                let body = rest
                    .strip_suffix('}')
                    .unwrap_or_else(|| panic!("labels end with }}: {line}"));
                let labels = body
                    .split("\",")
                    .filter(|kv| !kv.is_empty())
                    .map(|kv| {
                        let (k, v) = kv
                            .split_once("=\"")
                            .unwrap_or_else(|| panic!("k=\"v\" in: {line}"));
                        (k.to_owned(), v.trim_end_matches('"').to_owned())
                    })
                    .collect();
                (name.to_owned(), labels)
            }
        };
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "a metric name: {name}"
        );
        out.push((name, labels, value));
    }
    out
}

#[test]
fn errors_are_json_with_flinks_status_codes_and_name_what_is_wrong() {
    within_timeout(|| {
        let dir = TempDir::new("rest-errors");
        let cfg = RestConfig::default().max_body_bytes(1024);
        let server = RestServer::start(cfg).expect("the server starts");
        let env = Env::with_config(config(20_000.0, dir.path()));
        env.generate(u64::MAX, |i| i).uid("src").collect();
        let job = env.start("rest-errors").expect("the job starts");
        server.register(job.monitor());
        let id = job.id().to_owned();
        let token = server.token().to_owned();

        let (s, b) = get(&server, "/jobs/00000000000000000000000000000000");
        assert_eq!(s, 404);
        assert!(error_of(&b).contains("not found"), "{b}");
        let (s, b) = get(&server, &format!("/jobs/{id}/vertices/nope/backpressure"));
        assert_eq!(s, 404);
        assert!(error_of(&b).contains("nope"), "{b}");
        let (s, _) = get(&server, "/no/such/path");
        assert_eq!(s, 404);
        let (s, b) = call(
            agent()
                .delete(format!("http://{}/jobs/{id}", server.addr()))
                .call(),
        );
        assert_eq!(s, 405);
        assert!(error_of(&b).contains("DELETE"), "{b}");

        let (s, b) = patch(&server, &format!("/jobs/{id}?mode=cancel"), None);
        assert_eq!(s, 401);
        assert!(error_of(&b).contains("Bearer"), "{b}");
        let (s, _) = patch(
            &server,
            &format!("/jobs/{id}?mode=cancel"),
            Some("wrong-token-wrong-token"),
        );
        assert_eq!(s, 401);
        let (s, b) = patch(&server, &format!("/jobs/{id}?mode=explode"), Some(&token));
        assert_eq!(s, 400);
        assert!(error_of(&b).contains("mode"), "{b}");

        let sp = format!("/jobs/{id}/savepoints");
        let (s, _) = post(&server, &sp, None, "{}");
        assert_eq!(s, 401, "a savepoint needs the token");
        let (s, b) = post(&server, &sp, Some(&token), "{not json");
        assert_eq!(s, 400);
        assert!(error_of(&b).contains("not valid JSON"), "{b}");
        let (s, b) = post(&server, &sp, Some(&token), r#"{"target-directory": 5}"#);
        assert_eq!(s, 400);
        assert!(error_of(&b).contains("`target-directory`"), "{b}");
        let (s, b) = post(
            &server,
            &sp,
            Some(&token),
            r#"{"target-directory": "/tmp/x", "cancel-job": "yes"}"#,
        );
        assert_eq!(s, 400);
        assert!(error_of(&b).contains("`cancel-job`"), "{b}");
        let (s, b) = post(&server, &sp, Some(&token), "{}");
        assert_eq!(s, 400);
        assert!(error_of(&b).contains("required"), "{b}");
        let big = format!(r#"{{"target-directory": "{}"}}"#, "x".repeat(2048));
        let (s, b) = post(&server, &sp, Some(&token), &big);
        assert_eq!(s, 413);
        assert!(error_of(&b).contains("1024"), "{b}");
        let (s, b) = get(&server, &format!("/jobs/{id}/checkpoints/details/abc"));
        assert_eq!(s, 400);
        assert!(error_of(&b).contains("abc"), "{b}");
        let (s, b) = get(&server, &format!("/jobs/{id}/checkpoints/details/99999"));
        assert_eq!(s, 404);
        assert!(error_of(&b).contains("99999"), "{b}");
        let (s, b) = post(
            &server,
            &format!("/jobs/{id}/checkpoints"),
            Some(&token),
            r#"{"checkpointType": "INCREMENTAL"}"#,
        );
        assert_eq!(s, 400);
        assert!(error_of(&b).contains("`checkpointType`"), "{b}");
        let (s, b) = get(&server, &format!("/jobs/{id}/savepoints/feedbeef"));
        assert_eq!(s, 404);
        assert!(error_of(&b).contains("feedbeef"), "{b}");

        job.cancel();
        let _ = job.wait();
    });
}

#[test]
fn a_savepoint_and_a_stop_over_rest_complete_and_a_new_job_resumes_from_it() {
    within_timeout(|| {
        let dir = TempDir::new("rest-savepoint");
        let server = RestServer::start(RestConfig::default()).expect("the server starts");
        let n = 200_000u64;
        let build = |cfg: EnvConfig| {
            let env = Env::with_config(cfg);
            let out = env
                .generate(n, |i| i)
                .uid("src")
                .map(|x: u64| x)
                .uid("id")
                .collect();
            (env, out)
        };
        let (env, first_out) = build(config(20_000.0, dir.path()));
        let job = env.start("rest-savepoint").expect("the job starts");
        server.register(job.monitor());
        wait_for_checkpoint(&job, 1, WAIT).expect("a checkpoint");
        let id = job.id().to_owned();
        let token = server.token().to_owned();

        // A savepoint that leaves the job running.
        let sp1 = dir.path().join("sp1");
        let body = json!({ "target-directory": sp1, "cancel-job": false }).to_string();
        let (s, b) = post(
            &server,
            &format!("/jobs/{id}/savepoints"),
            Some(&token),
            &body,
        );
        assert_eq!(s, 202, "{b}");
        let done = poll(&server, &id, b["request-id"].as_str().unwrap());
        assert_eq!(
            done["operation"]["location"],
            sp1.display().to_string(),
            "{done}"
        );
        assert_eq!(get(&server, &format!("/jobs/{id}")).1["state"], "RUNNING");

        // Stop with a savepoint.
        let sp2 = dir.path().join("sp2");
        let body = json!({ "targetDirectory": sp2, "drain": false }).to_string();
        let (s, b) = post(&server, &format!("/jobs/{id}/stop"), Some(&token), &body);
        assert_eq!(s, 202, "{b}");
        let done = poll(&server, &id, b["request-id"].as_str().unwrap());
        assert_eq!(
            done["operation"]["location"],
            sp2.display().to_string(),
            "{done}"
        );
        job.wait().expect("stopped after its savepoint");
        assert_eq!(get(&server, &format!("/jobs/{id}")).1["state"], "FINISHED");
        let before = first_out.take();
        assert!(
            (before.len() as u64) < n,
            "the job was stopped before its end"
        );

        // A new job from the savepoint resumes where it was taken: it produces the ids from
        // the savepoint's source position on, each once, and the first job had every id
        // before it. (Its sink re-commits the savepoint's pending transaction, as a restored
        // two-phase sink does; into a new in-memory sink those ids appear in both.)
        let mut cfg = config(1e9, dir.path());
        cfg.checkpoint.restore_from = Some(sp2);
        let (env, second_out) = build(cfg);
        env.execute("rest-resumed")
            .expect("the resumed job finishes");
        let second = second_out.take();
        let from = *second
            .iter()
            .min()
            .expect("the resumed job produces the rest");
        assert!(from > 0, "the resumed job did not start over");
        ExactlyOnce::new(from..n)
            .check(second)
            .assert_exactly_once();
        let first: std::collections::HashSet<u64> = before.into_iter().collect();
        assert!(
            (0..from).all(|i| first.contains(&i)),
            "the first job produced every id before the savepoint"
        );
    });
}

/// Polls a savepoint trigger until it completes; returns its status body.
fn poll(server: &RestServer, job: &str, trigger: &str) -> Value {
    loop {
        let (s, b) = get(server, &format!("/jobs/{job}/savepoints/{trigger}"));
        assert_eq!(s, 200, "{b}");
        match b["status"]["id"].as_str() {
            Some("IN_PROGRESS") => std::thread::sleep(Duration::from_millis(5)),
            Some("COMPLETED") => {
                assert!(
                    b["operation"].get("failure-cause").is_none(),
                    "the savepoint failed: {b}"
                );
                return b;
            }
            _ => panic!("a savepoint status: {b}"),
        }
    }
}

#[test]
fn the_server_is_safe_by_default() {
    let public = RestConfig::default().addr("0.0.0.0:0".parse().unwrap());
    match RestServer::start(public) {
        Err(e @ RestError::PublicWithoutToken { .. }) => assert!(e.to_string().contains("token")),
        other => panic!("a public address without a token is refused, got {other:?}"),
    }
    assert!(matches!(
        RestServer::start(RestConfig::default().token("short")),
        Err(RestError::BadToken)
    ));
    let server = RestServer::start(RestConfig::default()).expect("the server starts");
    assert!(server.addr().ip().is_loopback());
    let file = server
        .token_file()
        .expect("a generated token is written")
        .to_owned();
    assert_eq!(std::fs::read_to_string(&file).unwrap(), server.token());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the token file is the user's only");
    }
    server.stop();
    assert!(!file.exists(), "the token file goes with the server");
}

/// The checked-in OpenAPI description lists exactly the routes the server serves, with their
/// methods; and the server answers each listed route and method (no 404 for the path, no
/// 405), and 405 for every other method on it.
#[test]
fn the_openapi_description_matches_the_routes_the_server_serves() {
    let spec: Value =
        serde_json::from_str(include_str!("../../framework/core/src/rest/openapi.json"))
            .expect("openapi.json is JSON");
    let mut documented: Vec<(String, Vec<String>)> = spec["paths"]
        .as_object()
        .expect("paths")
        .iter()
        .map(|(path, item)| {
            let mut methods: Vec<String> = item
                .as_object()
                .unwrap()
                .keys()
                .filter(|k| *k != "parameters")
                .map(|k| k.to_uppercase())
                .collect();
            methods.sort();
            (path.clone(), methods)
        })
        .collect();
    documented.sort();
    let mut served: Vec<(String, Vec<String>)> = weir::rest::ROUTES
        .iter()
        .map(|(p, ms)| {
            let mut ms: Vec<String> = ms.iter().map(|m| m.to_string()).collect();
            ms.sort();
            (p.to_string(), ms)
        })
        .collect();
    served.sort();
    assert_eq!(
        documented, served,
        "framework/core/src/rest/openapi.json is out of date"
    );

    within_timeout(move || {
        let dir = TempDir::new("rest-routes");
        let server = RestServer::start(RestConfig::default()).expect("the server starts");
        let env = Env::with_config(config(1_000.0, dir.path()));
        env.generate(u64::MAX, |i| i).uid("src").collect();
        let job = env.start("rest-routes").expect("the job starts");
        server.register(job.monitor());
        let id = job.id().to_owned();
        for (path, methods) in &served {
            let concrete = path
                .replace("{id}", &id)
                .replace("{vid}", "src")
                .replace("{trigger}", "0")
                .replace("{cid}", "1");
            for method in ["GET", "POST", "PATCH", "PUT", "DELETE"] {
                // Mutating calls carry no token, so none of them changes the job.
                let url = format!("http://{}{concrete}?mode=nothing", server.addr());
                let a = agent();
                let resp = match method {
                    "GET" => a.get(&url).call(),
                    "DELETE" => a.delete(&url).call(),
                    "POST" => a.post(&url).send("{}"),
                    "PATCH" => a.patch(&url).send_empty(),
                    _ => a.put(&url).send("{}"),
                };
                let (status, body) = call(resp);
                if methods.iter().any(|m| m == method) {
                    assert_ne!(status, 405, "{method} {path} is served: {body}");
                    let route_missing = status == 404 && error_of(&body).starts_with("Not found:");
                    assert!(!route_missing, "{method} {path} is routed: {body}");
                } else {
                    assert_eq!(status, 405, "{method} {path} is not served: {body}");
                }
            }
        }
        job.cancel();
        let _ = job.wait();
    });
}

/// `Env::serve_rest` starts a server with the job and registers it; a server that cannot
/// start keeps the job from starting, with the reason.
#[test]
fn a_job_asked_to_serve_rest_is_served_while_it_runs() {
    within_timeout(|| {
        let dir = TempDir::new("rest-env");
        let env = Env::with_config(config(1_000.0, dir.path()));
        env.serve_rest(RestConfig::default());
        env.generate(u64::MAX, |i| i)
            .uid("src")
            .map(|x: u64| x)
            .uid("backed-up")
            .with_backup()
            .collect();
        let job = env.start("rest-env").expect("the job starts");
        let server = job.rest().expect("served");
        let (s, b) = get(server, &format!("/jobs/{}", job.id()));
        assert_eq!(s, 200, "{b}");
        assert_eq!(b["name"], "rest-env");
        let (s, b) = get(server, &format!("/jobs/{}/backups", job.id()));
        assert_eq!(s, 200, "{b}");
        let backup = &b["backups"][0];
        assert_eq!(
            (backup["uid"].as_str(), backup["subtask"].as_u64()),
            (Some("backed-up"), Some(0)),
            "{b}"
        );
        for f in ["queueEntries", "promotions", "lastFailoverMs", "degraded"] {
            assert!(backup.get(f).is_some(), "a backup has `{f}`: {backup}");
        }
        job.cancel();
        let _ = job.wait();

        let env = Env::new();
        env.serve_rest(RestConfig::default().addr("0.0.0.0:0".parse().unwrap()));
        env.generate(10, |i| i).collect();
        match env.start("rest-public") {
            Err(e @ JobError::Runtime { .. }) => {
                assert!(
                    e.to_string().contains("REST server") && e.to_string().contains("token"),
                    "{e}"
                )
            }
            other => {
                panic!("a REST server that cannot start keeps the job from starting, got {other:?}")
            }
        }
    });
}

/// A sink whose checkpoint waits while `hold` is set: a savepoint in progress for as long as
/// the test wants.
struct HeldSink(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl weir::sink::Sink<u64> for HeldSink {
    fn write_batch(&mut self, batch: &mut Vec<u64>) -> Result<(), weir::SinkError> {
        batch.clear();
        Ok(())
    }
    fn pre_commit(&mut self, _checkpoint: u64) -> Result<Option<Vec<u8>>, weir::SinkError> {
        while self.0.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(None)
    }
}

/// A second stop while a stop with a savepoint is in progress is a 409.
#[test]
fn a_second_stop_while_one_is_in_progress_is_a_conflict() {
    within_timeout(|| {
        let dir = TempDir::new("rest-conflict");
        let hold = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let mut cfg = config(1_000.0, dir.path());
        cfg.checkpoint.interval = None; // only the savepoint's checkpoint
        let env = Env::with_config(cfg);
        env.serve_rest(RestConfig::default());
        let h = hold.clone();
        env.generate(u64::MAX, |i| i)
            .uid("src")
            .add_sink("held", move |_| Ok(HeldSink(h.clone())));
        let job = env.start("rest-conflict").expect("the job starts");
        let server = job.rest().expect("served");
        let (id, token) = (job.id().to_owned(), server.token().to_owned());
        let body = json!({ "targetDirectory": dir.path().join("sp") }).to_string();
        let (s, first) = post(server, &format!("/jobs/{id}/stop"), Some(&token), &body);
        assert_eq!(s, 202, "{first}");
        let (s, b) = post(server, &format!("/jobs/{id}/stop"), Some(&token), &body);
        assert_eq!(s, 409, "{b}");
        assert!(error_of(&b).contains("already stopping"), "{b}");
        hold.store(false, std::sync::atomic::Ordering::SeqCst);
        let done = poll(server, &id, first["request-id"].as_str().unwrap());
        assert!(done["operation"]["location"].is_string(), "{done}");
        job.wait().expect("stopped with its savepoint");
    });
}

fn send(
    server: &RestServer,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, Value) {
    let url = format!("http://{}{path}", server.addr());
    let req = match method {
        "PATCH" => agent().patch(url),
        "PUT" => agent().put(url),
        "POST" => agent().post(url),
        other => panic!("method {other}"),
    };
    let mut req = req.header("Content-Type", "application/json");
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    call(req.send(body))
}

#[test]
fn rescale_calls_change_parallelism_and_refuse_bad_requests_with_their_reason() {
    within_timeout(|| {
        let dir = TempDir::new("rest-rescale");
        let server = RestServer::start(RestConfig::default()).expect("the server starts");
        let mut cfg = config(20_000.0, dir.path());
        cfg.default_parallelism = 2;
        let env = Env::with_config(cfg);
        env.generate(u64::MAX, |i| i)
            .uid("src")
            .key_by(|x: &u64| x % 10)
            .reduce(|a, b| a.max(b))
            .uid("max")
            .discard();
        let job = env.start("rest-rescale").expect("the job starts");
        server.register(job.monitor());
        let (id, token) = (job.id().to_owned(), server.token().to_owned());
        let t = Some(token.as_str());
        let vertex = format!("/jobs/{id}/vertices/max");

        // Bad requests: nothing changes.
        let (s, b) = send(&server, "PATCH", &vertex, None, r#"{"parallelism": 3}"#);
        assert_eq!(s, 401, "{b}");
        let (s, b) = send(&server, "PATCH", &vertex, t, r#"{"parallelism": 0}"#);
        assert_eq!(s, 400, "{b}");
        assert!(error_of(&b).contains("positive integer"), "{b}");
        let (s, b) = send(&server, "PATCH", &vertex, t, r#"{"parallelism": 1000}"#);
        assert_eq!(s, 400, "{b}");
        assert!(error_of(&b).contains("max_parallelism"), "{b}");
        let (s, b) = send(&server, "PATCH", &vertex, t, r#"{"parallelism": "3"}"#);
        assert_eq!(s, 400, "{b}");
        let (s, b) = send(
            &server,
            "PATCH",
            &format!("/jobs/{id}/vertices/nope"),
            t,
            r#"{"parallelism": 3}"#,
        );
        assert_eq!(s, 404, "{b}");
        let (s, b) = send(
            &server,
            "PATCH",
            &format!("/jobs/{id}/vertices/src"),
            t,
            r#"{"parallelism": 3}"#,
        );
        assert_eq!(s, 400, "{b}");
        assert!(error_of(&b).contains("source"), "{b}");
        assert_eq!(job.rescale_stats().num_rescales, 0);

        // Per vertex, Flink's resource requirements, and the whole job.
        let (s, b) = send(&server, "PATCH", &vertex, t, r#"{"parallelism": 3}"#);
        assert_eq!(s, 200, "{b}");
        assert_eq!(b["changes"][0]["to"], 3, "{b}");
        let (s, b) = get(&server, &format!("/jobs/{id}/resource-requirements"));
        assert_eq!(s, 200);
        assert_eq!(b["max"]["parallelism"]["upperBound"], 3, "{b}");
        let (_, b) = get(&server, &format!("/jobs/{id}/rescales"));
        let max = b["vertices"]
            .as_array()
            .expect("vertices")
            .iter()
            .find(|v| v["id"] == "max")
            .expect("the max vertex")
            .clone();
        assert_eq!(
            max["keyGroups"],
            json!([[0, 43], [43, 86], [86, 128]]),
            "{b}"
        );
        let (_, b) = get(
            &server,
            &format!("/jobs/{id}/metrics?get=numRescales,lastRescalePause"),
        );
        assert_eq!(b[0]["value"], "1", "{b}");
        let (s, b) = send(
            &server,
            "PUT",
            &format!("/jobs/{id}/resource-requirements"),
            t,
            r#"{"max": {"parallelism": {"lowerBound": 1, "upperBound": 1}}}"#,
        );
        assert_eq!(s, 200, "{b}");
        let (s, b) = send(
            &server,
            "PATCH",
            &format!("/jobs/{id}/parallelism"),
            t,
            r#"{"parallelism": 4}"#,
        );
        assert_eq!(s, 200, "{b}");
        let kept: Vec<&str> = b["kept"]
            .as_array()
            .expect("kept")
            .iter()
            .map(|k| k["uid"].as_str().unwrap())
            .collect();
        assert!(kept.contains(&"src"), "{b}");
        let (s, b) = get(&server, &format!("/jobs/{id}/rescales"));
        assert_eq!(s, 200);
        assert_eq!(b["numRescales"], 3, "{b}");
        assert_eq!(job.rescale_stats().num_rescales, 3);

        // A rebalance by load: refused without the token and for a vertex without key
        // groups; for the keyed one, the report (what moved, if the load called for it).
        let rebalance = format!("/jobs/{id}/vertices/max/rebalance");
        let (s, b) = send(&server, "POST", &rebalance, None, "");
        assert_eq!(s, 401, "{b}");
        let (s, b) = send(
            &server,
            "POST",
            &format!("/jobs/{id}/vertices/src/rebalance"),
            t,
            "",
        );
        assert_eq!(s, 400, "{b}");
        assert!(error_of(&b).contains("keyed operator"), "{b}");
        let (s, b) = send(&server, "POST", &rebalance, t, "");
        assert_eq!(s, 200, "{b}");
        assert!(b["rebalanced"].is_array(), "{b}");
        let (_, b) = get(&server, &format!("/jobs/{id}/rescales"));
        assert!(
            b["vertices"]
                .as_array()
                .expect("vertices")
                .iter()
                .any(|v| v["id"] == "max" && v["keyGroupRuns"].is_array()),
            "{b}"
        );
        job.cancel();
        let _ = job.wait();
    });
}

#[test]
fn settings_change_live_over_rest_with_a_plan_a_history_and_a_rollback() {
    within_timeout(|| {
        let dir = TempDir::new("rest-settings");
        let server = RestServer::start(RestConfig::default()).expect("the server starts");
        let mut cfg = config(20_000.0, dir.path());
        cfg.checkpoint.interval = Some(Duration::from_secs(3600));
        let env = Env::with_config(cfg);
        env.generate(u64::MAX, |i| i).uid("src").discard();
        let job = env.start("rest-settings").expect("the job starts");
        server.register(job.monitor());
        let (id, token) = (job.id().to_owned(), server.token().to_owned());
        let t = Some(token.as_str());
        let path = format!("/jobs/{id}/config");

        let (s, b) = get(&server, &path);
        assert_eq!(s, 200);
        assert_eq!(b["execution.checkpointing.interval"], "3600s", "{b}");
        let (s, b) = post(
            &server,
            &format!("{path}/plan"),
            None,
            r#"{"execution.checkpointing.interval": "50ms", "pipeline.max-parallelism": 256}"#,
        );
        assert_eq!(s, 200, "{b}");
        let applies: Vec<&str> = b["changes"]
            .as_array()
            .expect("changes")
            .iter()
            .map(|c| c["applies"].as_str().unwrap())
            .collect();
        assert!(
            applies.contains(&"live") && applies.contains(&"fast-restart"),
            "{b}"
        );
        let (s, b) = send(
            &server,
            "PATCH",
            &path,
            None,
            r#"{"execution.checkpointing.interval": "50ms"}"#,
        );
        assert_eq!(s, 401, "{b}");
        let (s, b) = send(
            &server,
            "PATCH",
            &path,
            t,
            r#"{"execution.checkpointing.interval": "50ms", "execution.checkpointing.mode": "SOMETIMES"}"#,
        );
        assert_eq!(s, 400, "{b}");
        assert!(error_of(&b).contains("execution.checkpointing.mode"), "{b}");
        let (s, b) = send(&server, "PATCH", &path, t, "{}");
        assert_eq!(s, 400, "{b}");
        let (s, b) = send(
            &server,
            "PATCH",
            &path,
            t,
            r#"{"execution.checkpointing.interval": "50ms"}"#,
        );
        assert_eq!(s, 200, "{b}");
        wait_for_checkpoint(&job, 2, WAIT).expect("checkpoints at the new interval");
        let (s, b) = send(
            &server,
            "PATCH",
            &path,
            t,
            r#"{"execution.checkpointing.timeout": "7s", "execution.checkpointing.interval": "off"}"#,
        );
        assert_eq!(s, 200, "{b}");
        let (s, b) = post(&server, &format!("{path}/rollback"), t, "");
        assert_eq!(s, 200, "{b}");
        let (_, b) = get(&server, &path);
        assert_eq!(b["execution.checkpointing.interval"], "50ms", "{b}");
        let (_, b) = get(&server, &format!("{path}/history"));
        let history = b["history"].as_array().expect("history");
        assert_eq!(history.len(), 4, "{b}");
        assert!(
            history[0]["outcome"].as_str().unwrap().contains("mode"),
            "{b}"
        );
        assert!(
            history[1]["caller"].as_str().unwrap().starts_with("token:"),
            "{b}"
        );
        assert!(
            !history[1]["caller"].as_str().unwrap().contains(&token),
            "no token in the history"
        );
        assert_eq!(history[3]["caller"], "rollback", "{b}");
        assert_eq!(job.checkpoint_stats().map(|s| s.num_restarts), Some(0));
        job.cancel();
        let _ = job.wait();
    });
}

/// `/jobs/{id}/exceptions` has Flink's exception history, newest first, with how the job
/// recovered: a panic in a backed-up operator is a promotion (its recovery time and the
/// records replayed from the buffer queue), a panic elsewhere a restart (its recovery time once
/// the job runs again). `/jobs/{id}` draws the graph: plan nodes with their inputs and ship
/// strategy, vertices with their backpressure level and rates.
#[test]
fn the_exception_history_has_promotions_and_restarts_with_their_recovery() {
    within_timeout(|| {
        weir_testing::quiet_injected_panics();
        let dir = TempDir::new("rest-exceptions");
        let mut cfg = config(20_000.0, dir.path());
        let faults = weir_testing::FaultPlan::new(vec![
            weir_testing::Fault::new("backed-up", weir_testing::FaultKind::Panic, 0)
                .after_checkpoints(2)
                .in_subtask(0),
            weir_testing::Fault::new("plain", weir_testing::FaultKind::Panic, 0)
                .after_checkpoints(6),
        ]);
        common::restart_on_faults(&mut cfg, faults.clone());
        let env = Env::with_config(cfg);
        env.serve_rest(RestConfig::default());
        env.generate(u64::MAX, |i| i)
            .uid("src")
            .rebalance()
            .map(|x: u64| x)
            .uid("backed-up")
            .with_backup()
            .rebalance()
            .map(|x: u64| x)
            .uid("plain")
            .set_parallelism(2)
            .collect();
        let job = env.start("rest-exceptions").expect("the job starts");
        let server = job.rest().expect("served");
        let id = job.id().to_owned();
        let deadline = std::time::Instant::now() + WAIT * 3;
        let entries = loop {
            let (s, b) = get(server, &format!("/jobs/{id}/exceptions"));
            assert_eq!(s, 200, "{b}");
            let entries = b["exceptionHistory"]["entries"].as_array().unwrap().clone();
            let restarted = entries
                .iter()
                .any(|e| e["failover"] == "restart" && e["recoveryMs"].is_number());
            if restarted && entries.len() == 2 {
                assert_eq!(b["root-exception"], entries[0]["stacktrace"], "{b}");
                break entries;
            }
            assert!(std::time::Instant::now() < deadline, "two failovers: {b}");
            std::thread::sleep(Duration::from_millis(5));
        };
        let (restart, promotion) = (&entries[0], &entries[1]);
        assert!(
            restart["timestamp"].as_u64() >= promotion["timestamp"].as_u64(),
            "newest first: {entries:?}"
        );
        assert_eq!(restart["failover"], "restart", "{restart}");
        assert_eq!(restart["attempt"], 0, "{restart}");
        assert!(
            restart["stacktrace"].as_str().unwrap().contains("plain"),
            "{restart}"
        );
        assert_eq!(promotion["failover"], "promotion", "{promotion}");
        assert_eq!(
            (promotion["uid"].as_str(), promotion["subtask"].as_u64()),
            (Some("backed-up"), Some(0)),
            "{promotion}"
        );
        let cause = promotion["stacktrace"].as_str().unwrap();
        assert!(
            cause.contains("`backed-up`") && cause.contains("injected"),
            "{cause}"
        );
        let promoted = job.monitor().promotions();
        assert_eq!(promoted.len(), 1, "{promoted:?}");
        // serde_json parses floats to within an ulp or so, not always exactly.
        let shown = promotion["recoveryMs"].as_f64().expect("a recovery time");
        assert!(
            (shown - promoted[0].recovery.as_secs_f64() * 1000.0).abs() < 1e-6,
            "{promotion} vs {promoted:?}"
        );
        assert_eq!(
            promotion["recordsReplayed"].as_u64(),
            Some(promoted[0].records_replayed)
        );
        let failures = job.failures();
        assert_eq!(
            restart["recoveryMs"].as_u64(),
            failures[0].recovery.map(|d| d.as_millis() as u64),
            "{failures:?}"
        );
        let (s, b) = get(server, &format!("/jobs/{id}/exceptions?maxExceptions=1"));
        assert_eq!(s, 200);
        assert_eq!(
            b["exceptionHistory"]["entries"].as_array().unwrap().len(),
            1
        );
        assert_eq!(b["truncated"], true, "{b}");
        let (s, b) = get(server, &format!("/jobs/{id}/exceptions?maxExceptions=many"));
        assert_eq!(s, 400);
        assert!(error_of(&b).contains("maxExceptions"), "{b}");

        let (s, b) = get(server, &format!("/jobs/{id}"));
        assert_eq!(s, 200);
        let inputs: Vec<(String, Value)> = b["plan"]["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| (n["id"].as_str().unwrap().to_owned(), n["inputs"].clone()))
            .collect();
        assert_eq!(
            inputs.len(),
            4,
            "source, two maps, the collecting sink: {b}"
        );
        assert_eq!(
            inputs[3].1,
            json!([{ "num": 0, "id": "plain", "ship_strategy": "REBALANCE", "exchange": "pipelined_bounded" }]),
            "the sink (parallelism 1) after `plain` (2): {b}"
        );
        assert_eq!(
            inputs[..3],
            vec![
                ("src".to_owned(), json!([])),
                (
                    "backed-up".to_owned(),
                    json!([{ "num": 0, "id": "src", "ship_strategy": "REBALANCE", "exchange": "pipelined_bounded" }])
                ),
                (
                    "plain".to_owned(),
                    json!([{ "num": 0, "id": "backed-up", "ship_strategy": "REBALANCE", "exchange": "pipelined_bounded" }])
                ),
            ],
            "{b}"
        );
        for v in b["vertices"].as_array().unwrap() {
            assert!(
                ["ok", "low", "high"].contains(&v["backpressure-level"].as_str().unwrap()),
                "{v}"
            );
            assert!(v["records-in-per-second"].is_number(), "{v}");
            assert!(v["records-out-per-second"].is_number(), "{v}");
        }
        job.cancel();
        let _ = job.wait();
    });
}

/// The dashboard's page and assets are served at `/` by the same server, embedded, with a
/// Content-Security-Policy that allows nothing but the server itself (no CDN, no inline
/// script, no request elsewhere).
#[test]
fn the_dashboard_is_served_at_the_root_with_a_strict_content_security_policy() {
    let server = RestServer::start(RestConfig::default()).expect("the server starts");
    for (path, media) in [
        ("/", "text/html"),
        ("/dashboard.js", "text/javascript"),
        ("/dashboard.css", "text/css"),
    ] {
        let mut resp = agent()
            .get(format!("http://{}{path}", server.addr()))
            .call()
            .expect("the server answers");
        assert_eq!(resp.status().as_u16(), 200, "{path}");
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        assert!(
            header("content-type").starts_with(media),
            "{path}: {}",
            header("content-type")
        );
        let csp = header("content-security-policy");
        for rule in [
            "default-src 'none'",
            "script-src 'self'",
            "connect-src 'self'",
        ] {
            assert!(csp.contains(rule), "{path}: {csp}");
        }
        assert!(!csp.contains("unsafe-inline"), "{path}: {csp}");
        let body = resp.body_mut().read_to_string().expect("a body");
        assert!(!body.is_empty(), "{path}");
        if path == "/" {
            assert!(body.contains("<script src=\"/dashboard.js\""), "{body}");
        }
    }
    let (s, b) = call(
        agent()
            .post(format!("http://{}/", server.addr()))
            .send_empty(),
    );
    assert_eq!(s, 405, "{b}");
}
