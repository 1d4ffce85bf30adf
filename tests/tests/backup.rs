//! Buffer-queue backup (BQBS), checked by injecting real faults into a backed-up operator's
//! primary (panics, hangs, a stopped arbiter, a primary that wakes up after it was fenced, a
//! failing backup) and checking every record id at the sink: each exactly once, and keyed
//! state equal to a sequential computation.

use std::collections::BTreeMap;
use std::time::Duration;

use weir::rate::RateControlConfig;
use weir::testing::{Fault, FaultKind, FaultPlan};
use weir::{
    BackupPolicy, Collector, Env, EnvConfig, JobError, JobHandle, RestartStrategy, ValueState,
};

const KEYS: u64 = 13;

/// One run's outcome.
struct Run {
    /// Stateless runs: ids at the sink. Stateful runs: (key, count, id).
    ids: Vec<u64>,
    counts: Vec<(u64, u64, u64)>,
    restarts: u64,
    promotions: u64,
    replacements: u64,
    degraded: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Shape {
    /// source -> map (backed up) -> sink
    Stateless,
    /// source -> key_by -> counting process (backed up) -> sink
    Stateful,
}

struct Setup {
    n: u64,
    shape: Shape,
    faults: FaultPlan,
    parallelism: usize,
    rate: f64,
    checkpoint: Option<Duration>,
    policy: BackupPolicy,
}

impl Setup {
    fn new(n: u64, shape: Shape, faults: FaultPlan) -> Self {
        Setup {
            n,
            shape,
            faults,
            parallelism: 2,
            rate: 100_000.0,
            checkpoint: Some(Duration::from_millis(20)),
            policy: BackupPolicy::default()
                .heartbeat(Duration::from_millis(10), Duration::from_millis(60)),
        }
    }
}

fn tmp_dir() -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!("weir-backup-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn run(s: Setup) -> Result<Run, JobError> {
    let dir = tmp_dir();
    let mut cfg = EnvConfig::default();
    cfg.batch_size = 64;
    cfg.arbiters = 2;
    cfg.metrics_interval = Duration::from_millis(20);
    cfg.heartbeat_timeout = Duration::from_secs(5);
    cfg.checkpoint.interval = s.checkpoint;
    cfg.checkpoint.directory = dir.clone();
    cfg.restart = Some(RestartStrategy::FixedDelay {
        attempts: 5,
        delay: Duration::from_millis(5),
    });
    let mut rc = RateControlConfig::default();
    rc.enabled = true;
    rc.initial_rate = Some(s.rate);
    rc.min_rate = s.rate;
    rc.max_rate = Some(s.rate);
    cfg.rate_control = rc;
    cfg.faults = s.faults.clone();
    let env = Env::with_config(cfg);
    let src = env
        .generate(s.n, |i| i)
        .uid("src")
        .set_parallelism(s.parallelism);
    let (ids, counts) = match s.shape {
        Shape::Stateless => {
            let out = src
                .map(|x: u64| x)
                .uid("op")
                .set_parallelism(s.parallelism)
                .with_backup_policy(s.policy.clone())
                .collect();
            (Some(out), None)
        }
        Shape::Stateful => {
            let out = src
                .key_by(|x: &u64| x % KEYS)
                .process(
                    |k: &u64,
                     st: &mut ValueState<u64>,
                     x: u64,
                     out: &mut Collector<(u64, u64, u64)>| {
                        let c = st.get_or_insert_with(|| 0);
                        *c += 1;
                        out.collect((*k, *c, x));
                    },
                )
                .uid("op")
                .set_parallelism(s.parallelism)
                .with_backup_policy(s.policy.clone())
                .collect();
            (None, Some(out))
        }
    };
    let handle = env.start("backup")?;
    let (result, metrics) = wait(handle)?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Run {
        ids: ids.map(|o| o.take()).unwrap_or_default(),
        counts: counts.map(|o| o.take()).unwrap_or_default(),
        restarts: result.checkpoints.map_or(0, |c| c.num_restarts),
        promotions: metrics.iter().map(|m| m.promotions).sum(),
        replacements: metrics.iter().map(|m| m.backup_replacements).sum(),
        degraded: metrics.iter().any(|m| m.degraded),
    })
}

/// Waits (at most 60 s) for the job.
fn wait(handle: JobHandle) -> Result<(weir::JobResult, Vec<weir::BackupMetrics>), JobError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let r = handle.wait();
        let _ = tx.send(());
        r
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(60)).is_ok(),
        "job did not end within 60 s"
    );
    let result = waiter.join().expect("waiter thread")?;
    let m = result.backups.clone();
    Ok((result, m))
}

fn assert_exactly_once(ids: &[u64], n: u64) {
    let mut seen = vec![0u32; n as usize];
    for &id in ids {
        seen[id as usize] += 1;
    }
    let dup: Vec<u64> = (0..n).filter(|&i| seen[i as usize] > 1).take(10).collect();
    let missing: Vec<u64> = (0..n).filter(|&i| seen[i as usize] == 0).take(10).collect();
    assert!(
        dup.is_empty() && missing.is_empty(),
        "duplicates {dup:?} missing {missing:?} (of {n})"
    );
    assert_eq!(ids.len() as u64, n);
}

/// Keyed counts equal a sequential computation: per key, the counts are 1..=m and the ids
/// of each key are exactly those with that key.
fn assert_state(counts: &[(u64, u64, u64)], n: u64) {
    let ids: Vec<u64> = counts.iter().map(|c| c.2).collect();
    assert_exactly_once(&ids, n);
    let mut per_key: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for &(k, c, id) in counts {
        assert_eq!(k, id % KEYS, "record {id} under key {k}");
        per_key.entry(k).or_default().push(c);
    }
    for (k, mut cs) in per_key {
        cs.sort_unstable();
        let expected: Vec<u64> = (1..=cs.len() as u64).collect();
        assert_eq!(
            cs, expected,
            "counts of key {k} are not 1..=m: state was lost or doubled"
        );
    }
}

#[test]
fn smoke_panic_stateless() {
    let faults = FaultPlan::new(vec![Fault::new("op", FaultKind::Panic, 3_000).in_subtask(0)]);
    let r = run(Setup::new(20_000, Shape::Stateless, faults.clone())).unwrap();
    assert_exactly_once(&r.ids, 20_000);
    assert_eq!(faults.fired(), 1);
    assert_eq!(r.promotions, 1);
    assert_eq!(r.restarts, 0);
}

#[test]
fn smoke_panic_stateful() {
    let faults = FaultPlan::new(vec![Fault::new("op", FaultKind::Panic, 3_000).in_subtask(1)]);
    let r = run(Setup::new(20_000, Shape::Stateful, faults.clone())).unwrap();
    assert_state(&r.counts, 20_000);
    assert_eq!(faults.fired(), 1);
    assert_eq!(r.promotions, 1);
    assert_eq!(r.restarts, 0);
    let _ = (r.replacements, r.degraded);
}
