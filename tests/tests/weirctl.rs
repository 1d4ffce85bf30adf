//! `weirctl` against a running job over real HTTP: every command's table, `--json`, the token
//! from a file, and its errors (no token, wrong token, unknown job, unreachable server).

mod common;

use std::time::Duration;

use common::{within_timeout, TempDir};
use weir::rate::RateControlConfig;
use weir::rest::{RestConfig, RestServer};
use weir::{Env, EnvConfig};
use weir_testing::wait_for_checkpoint;
use weirctl::cli::{run, CliError};

fn weirctl(url: &str, args: &[&str]) -> Result<String, CliError> {
    let mut out = Vec::new();
    let mut all = vec!["weirctl", "--url", url];
    all.extend_from_slice(args);
    run(all, &mut out)?;
    Ok(String::from_utf8(out).expect("UTF-8 output"))
}

#[test]
fn weirctl_reads_and_steers_a_running_job() {
    within_timeout(|| {
        let dir = TempDir::new("weirctl");
        let server = RestServer::start(RestConfig::default()).expect("the server starts");
        let mut cfg = EnvConfig::default();
        cfg.checkpoint.interval = Some(Duration::from_millis(10));
        cfg.checkpoint.directory = dir.path().to_owned();
        cfg.metrics_interval = Duration::from_millis(20);
        cfg.rate_control = RateControlConfig::fixed(20_000.0);
        let env = Env::with_config(cfg);
        env.generate(u64::MAX, |i| i).uid("src").collect();
        let job = env.start("weirctl-job").expect("the job starts");
        server.register(job.monitor());
        wait_for_checkpoint(&job, 1, Duration::from_secs(20)).expect("a checkpoint");
        while job.metrics().is_none() {
            std::thread::sleep(Duration::from_millis(2));
        }
        let url = format!("http://{}", server.addr());
        let id = job.id().to_owned();
        let token_file = server
            .token_file()
            .expect("a token file")
            .display()
            .to_string();

        let jobs = weirctl(&url, &["jobs"]).unwrap();
        assert!(jobs.starts_with("ID"), "{jobs}");
        assert!(
            jobs.contains(&id) && jobs.contains("weirctl-job") && jobs.contains("RUNNING"),
            "{jobs}"
        );
        let one = weirctl(&url, &["job", &id]).unwrap();
        assert!(one.contains("VERTEX") && one.contains("src"), "{one}");
        let cps = weirctl(&url, &["checkpoints", &id]).unwrap();
        assert!(
            cps.contains("completed") && cps.contains("latest completed: #"),
            "{cps}"
        );
        let bp = weirctl(&url, &["backpressure", &id]).unwrap();
        assert!(bp.contains("LEVEL") && bp.contains("src"), "{bp}");
        let m = weirctl(&url, &["metrics", &id, "lastCheckpointDuration", "noSuch"]).unwrap();
        assert!(
            m.contains("lastCheckpointDuration") && m.contains("(unknown)"),
            "{m}"
        );
        let raw = weirctl(&url, &["--json", "checkpoints", &id]).unwrap();
        let v: serde_json::Value = serde_json::from_str(&raw).expect("--json prints JSON");
        assert!(v["counts"]["completed"].as_u64() >= Some(1));

        // Errors: no token, a wrong one, an unknown job.
        match weirctl(&url, &["cancel", &id]) {
            Err(CliError::Token(m)) => assert!(m.contains("--token"), "{m}"),
            other => panic!("a cancel without a token is refused before sending, got {other:?}"),
        }
        match weirctl(&url, &["--token", "not-the-token-at-all", "cancel", &id]) {
            Err(e @ CliError::Refused { status: 401, .. }) => {
                assert!(e.to_string().contains("401"))
            }
            other => panic!("a wrong token is refused by the server, got {other:?}"),
        }
        match weirctl(&url, &["job", "00000000000000000000000000000000"]) {
            Err(CliError::Refused {
                status: 404,
                message,
                ..
            }) => assert!(message.contains("not found"), "{message}"),
            other => panic!("an unknown job is a 404, got {other:?}"),
        }

        // A savepoint, then a stop with a savepoint, with the token from its file.
        let sp = dir.path().join("sp").display().to_string();
        let out = weirctl(
            &url,
            &["--token-file", &token_file, "savepoint", &id, "--dir", &sp],
        )
        .unwrap();
        assert_eq!(out.trim(), format!("savepoint: {sp}"));
        let sp2 = dir.path().join("sp2").display().to_string();
        let out = weirctl(
            &url,
            &["--token-file", &token_file, "stop", &id, "--dir", &sp2],
        )
        .unwrap();
        assert!(
            out.contains(&format!("savepoint: {sp2}")) && out.contains("stopped"),
            "{out}"
        );
        job.wait().expect("stopped with a savepoint");
        assert!(weirctl(&url, &["jobs"]).unwrap().contains("FINISHED"));
        match weirctl(&url, &["--token-file", &token_file, "cancel", &id]) {
            Err(CliError::Refused { status: 409, .. }) => {}
            other => panic!("cancelling a finished job is a conflict, got {other:?}"),
        }
    });
}

#[test]
fn weirctl_says_when_the_server_cannot_be_reached_or_the_arguments_are_wrong() {
    // A port nobody listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    match weirctl(&format!("http://127.0.0.1:{port}"), &["jobs"]) {
        Err(e @ CliError::Unreachable { .. }) => {
            assert!(e.to_string().contains("cannot reach"), "{e}")
        }
        other => panic!("an unreachable server is named, got {other:?}"),
    }
    match weirctl("http://127.0.0.1:1", &["metrics", "some-job"]) {
        Err(e @ CliError::Usage(_)) => {
            assert!(!e.is_help() && e.to_string().contains("NAMES"), "{e}")
        }
        other => panic!("metrics without names is a usage error, got {other:?}"),
    }
    match weirctl("http://127.0.0.1:1", &["--help"]) {
        Err(e) if e.is_help() => assert!(e.to_string().contains("Usage")),
        other => panic!("--help is help, got {other:?}"),
    }
    match weirctl(
        "http://127.0.0.1:1",
        &["--token-file", "/no/such/token", "cancel", "x"],
    ) {
        Err(CliError::Token(m)) => assert!(m.contains("/no/such/token"), "{m}"),
        other => panic!("an unreadable token file is named, got {other:?}"),
    }
}

/// A REST server, and an `Env` whose job runs at 20,000 records/s, checkpointing every
/// `interval` into `dir`.
fn served_env(dir: &TempDir, interval: Duration) -> (RestServer, Env) {
    let server = RestServer::start(RestConfig::default()).expect("the server starts");
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(interval);
    cfg.checkpoint.directory = dir.path().to_owned();
    cfg.rate_control = RateControlConfig::fixed(20_000.0);
    (server, Env::with_config(cfg))
}

/// `weirctl --token TOKEN ARGS..` against `url`.
fn weirctl_as(url: &str, token: &str, args: &[&str]) -> Result<String, CliError> {
    let mut all = vec!["--token", token];
    all.extend_from_slice(args);
    weirctl(url, &all)
}

#[test]
fn weirctl_rescales_a_vertex_and_the_job_and_reports_refusals() {
    within_timeout(|| {
        let dir = TempDir::new("weirctl-rescale");
        let (server, env) = served_env(&dir, Duration::from_millis(10));
        env.generate(u64::MAX, |i| i)
            .uid("src")
            .key_by(|x: &u64| x % 10)
            .reduce(|a, b| a.max(b))
            .uid("max")
            .discard();
        let job = env.start("weirctl-rescale").expect("the job starts");
        server.register(job.monitor());
        let url = format!("http://{}", server.addr());
        let id = job.id().to_owned();
        let token = server.token().to_owned();
        let ctl = |args: &[&str]| weirctl_as(&url, &token, args);
        let out = ctl(&["rescale", &id, "3", "--vertex", "max"]).unwrap();
        assert!(
            out.contains("max: 1 -> 3") && out.contains("rescaled at checkpoint"),
            "{out}"
        );
        let out = ctl(&["rescale", &id, "2"]).unwrap();
        assert!(out.contains("src kept"), "{out}");
        match ctl(&["rescale", &id, "2", "--vertex", "src"]) {
            Err(CliError::Refused {
                status: 400,
                message,
                ..
            }) => {
                assert!(message.contains("source"), "{message}")
            }
            other => panic!("a source cannot be rescaled: {other:?}"),
        }
        assert_eq!(job.rescale_stats().num_rescales, 2);
        job.cancel();
        let _ = job.wait();
    });
}

#[test]
fn weirctl_config_shows_plans_changes_lists_and_rolls_back_settings() {
    within_timeout(|| {
        let dir = TempDir::new("weirctl-config");
        let (server, env) = served_env(&dir, Duration::from_secs(3600));
        env.generate(u64::MAX, |i| i).uid("src").discard();
        let job = env.start("weirctl-config").expect("the job starts");
        server.register(job.monitor());
        let url = format!("http://{}", server.addr());
        let id = job.id().to_owned();
        let token = server.token().to_owned();
        let ctl = |args: &[&str]| weirctl_as(&url, &token, args);
        let out = ctl(&["config", &id]).unwrap();
        assert!(
            out.contains("execution.checkpointing.interval = 3600s"),
            "{out}"
        );
        let out = ctl(&[
            "config",
            &id,
            "--dry-run",
            "execution.checkpointing.interval=50ms",
            "pipeline.max-parallelism=256",
        ])
        .unwrap();
        assert!(
            out.contains("(live:") && out.contains("(fast-restart:"),
            "{out}"
        );
        assert_eq!(job.settings()["execution.checkpointing.interval"], "3600s");
        let out = ctl(&["config", &id, "execution.checkpointing.interval=50ms"]).unwrap();
        assert!(out.contains("3600s -> 50ms (live"), "{out}");
        match ctl(&["config", &id, "execution.checkpointing.mode=SOMETIMES"]) {
            Err(CliError::Refused {
                status: 400,
                message,
                ..
            }) => {
                assert!(
                    message.contains("execution.checkpointing.mode"),
                    "{message}"
                )
            }
            other => panic!("a bad value: {other:?}"),
        }
        match ctl(&["config", &id, "no-equals-sign"]) {
            Err(CliError::Usage(m)) => assert!(m.contains("NAME=VALUE"), "{m}"),
            other => panic!("a malformed change: {other:?}"),
        }
        wait_for_checkpoint(&job, 1, Duration::from_secs(20)).expect("a checkpoint at 50ms");
        ctl(&["config", &id, "execution.checkpointing.interval=off"]).unwrap();
        let out = ctl(&["config", &id, "--rollback"]).unwrap();
        assert!(out.contains("off -> 50ms"), "{out}");
        let out = ctl(&["config", &id, "--history"]).unwrap();
        assert_eq!(out.lines().count(), 4, "{out}");
        assert!(out.contains("rollback"), "{out}");
        job.cancel();
        let _ = job.wait();
    });
}

#[test]
fn weirctl_replace_switches_to_a_registered_graph_version() {
    within_timeout(|| {
        let dir = TempDir::new("weirctl-replace");
        let (server, env) = served_env(&dir, Duration::from_millis(10));
        env.generate(u64::MAX, |i| i)
            .uid("src")
            .map(|x: u64| x)
            .uid("v1")
            .discard();
        env.register_graph("v2", |env| {
            env.generate(u64::MAX, |i| i)
                .uid("src")
                .map(|x: u64| x + 1)
                .uid("v2")
                .discard();
        });
        let job = env.start("weirctl-replace").expect("the job starts");
        server.register(job.monitor());
        let url = format!("http://{}", server.addr());
        let id = job.id().to_owned();
        let token = server.token().to_owned();
        let ctl = |args: &[&str]| weirctl_as(&url, &token, args);
        match ctl(&["replace", &id, "v9"]) {
            Err(CliError::Refused {
                status: 404,
                message,
                ..
            }) => {
                assert!(message.contains("v2"), "{message}")
            }
            other => panic!("an unknown version: {other:?}"),
        }
        let out = ctl(&["replace", &id, "v2"]).unwrap();
        assert!(
            out.contains("replaced by `v2`") && out.contains("committed at checkpoint"),
            "{out}"
        );
        assert!(job
            .vertices()
            .iter()
            .any(|v| v.operators.iter().any(|o| o == "v2")));
        job.cancel();
        let _ = job.wait();
    });
}
