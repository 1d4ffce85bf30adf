//! The upgrade path of compiled code: a process running version 1 of a job stops it with a
//! savepoint; a new process running version 2 (other code, another parallelism) starts from
//! that savepoint. Every id reaches the exactly-once sink once, each keyed count is what one
//! sequential run gives, and the output switches from v1 to v2 at one id.
//!
//! The two "binaries" are this test binary run as a child with a version in its environment:
//! separate processes, so nothing is shared but the savepoint and the sink's directory.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use weir::rate::RateControlConfig;
use weir::{Collector, Env, EnvConfig, ValueState};
use weir_testing::{
    encode_display, read_committed, wait_for_checkpoint, ExactlyOnce, TwoPhaseFileSink,
};

const CHILD: &str = "WEIR_UPGRADE_CHILD";
const N: u64 = 400_000;
const KEYS: u64 = 16;

/// The child: version `v` of the job. Version 1 runs throttled, and once a checkpoint has
/// completed and the parent says `stop` on stdin, stops with a savepoint and prints its
/// path; version 2 starts from the savepoint it is given and runs to the end.
#[test]
#[ignore = "the child process its parent tests start (with --ignored); not a test of its own"]
fn child_job() {
    let spec = std::env::var(CHILD)
        .unwrap_or_else(|_| panic!("{CHILD} is not set: only the parent tests run this"));
    let mut parts = spec.split(';');
    let base = PathBuf::from(parts.next().expect("base"));
    let version: u32 = parts.next().and_then(|v| v.parse().ok()).expect("version");
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(Duration::from_millis(20));
    cfg.checkpoint.directory = base.join("checkpoints");
    if version == 1 {
        cfg.rate_control = RateControlConfig::fixed(50_000.0);
    } else {
        cfg.checkpoint.restore_from = Some(PathBuf::from(parts.next().expect("savepoint")));
    }
    let env = Env::with_config(cfg);
    let out = base.join("out");
    env.generate(N, |i| i)
        .uid("ids")
        .set_parallelism(1)
        .key_by(|x: &u64| x % KEYS)
        .process(
            move |_k: &u64, n: &mut ValueState<u64>, x: u64, o: &mut Collector<String>| {
                let c = n.get_or_insert_with(|| 0);
                *c += 1;
                // Version 2 is other code: it writes its version too.
                o.collect(if version == 1 {
                    format!("{x} {c} v1")
                } else {
                    format!("{x} {c} v2")
                });
            },
        )
        .uid("count")
        .set_parallelism(if version == 1 { 2 } else { 3 })
        .add_sink("exactly_once", move |cx| {
            TwoPhaseFileSink::create(&out, cx, encode_display::<String>)
        })
        .uid("exactly_once")
        .set_parallelism(1);
    let job = env.start("upgrade").expect("the child's job starts");
    if version == 2 {
        job.wait().expect("version 2 runs to the end");
        println!("CHILD done");
        return;
    }
    wait_for_checkpoint(&job, 1, Duration::from_secs(60)).expect("a checkpoint");
    println!("CHILD running");
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .expect("the parent's word");
    let (savepoint, _) = job
        .stop_with_savepoint(base.join("savepoint"))
        .expect("stop with a savepoint");
    println!("CHILD savepoint {}", savepoint.display());
}

fn spawn(base: &Path, spec: String) -> std::process::Child {
    common::child_job_command()
        .env(CHILD, format!("{};{spec}", base.display()))
        .env("WEIR_STDERR_WARNINGS", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("run the child")
}

/// Reads the child's stdout until a line starts with `prefix`; returns the rest.
fn read_until(lines: &mut impl Iterator<Item = String>, prefix: &str) -> String {
    // The harness may print `test child_job ... ` on the same line first.
    for line in lines {
        if let Some(at) = line.find(prefix) {
            return line[at + prefix.len()..].trim().to_owned();
        }
    }
    panic!("the child ended before printing `{prefix}`");
}

#[test]
fn a_new_binary_resumes_from_the_old_ones_savepoint_with_every_id_once() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let base = std::env::temp_dir().join(format!("weir-upgrade-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).expect("a base directory");

    let mut v1 = spawn(&base, "1".into());
    let mut lines = BufReader::new(v1.stdout.take().expect("stdout"))
        .lines()
        .map_while(Result::ok);
    read_until(&mut lines, "CHILD running");
    writeln!(v1.stdin.take().expect("stdin"), "stop").expect("tell v1 to stop");
    let savepoint = read_until(&mut lines, "CHILD savepoint ");
    assert!(v1.wait().expect("v1 exits").success());

    let mut v2 = spawn(&base, format!("2;{savepoint}"));
    let mut lines = BufReader::new(v2.stdout.take().expect("stdout"))
        .lines()
        .map_while(Result::ok);
    read_until(&mut lines, "CHILD done");
    assert!(v2.wait().expect("v2 exits").success());

    let committed = read_committed(&base.join("out")).expect("the sink's output");
    let mut rows: Vec<(u64, String)> = committed
        .lines
        .iter()
        .map(|l| {
            let mut p = l.split(' ');
            let x: u64 = p.next().unwrap().parse().unwrap();
            let c: u64 = p.next().unwrap().parse().unwrap();
            assert_eq!(c, x / KEYS + 1, "id {x}: the count of one sequential run");
            (x, p.next().unwrap().to_owned())
        })
        .collect();
    let report = ExactlyOnce::new(0..N).check(rows.iter().map(|(x, _)| *x));
    assert!(report.is_exactly_once(), "{report}");
    rows.sort();
    let first_v2 = rows.iter().position(|(_, v)| v == "v2").expect("v2 wrote");
    assert!(first_v2 > 0, "v1 wrote first");
    assert!(rows[..first_v2].iter().all(|(_, v)| v == "v1"));
    assert!(rows[first_v2..].iter().all(|(_, v)| v == "v2"));
    let _ = std::fs::remove_dir_all(&base);
}
