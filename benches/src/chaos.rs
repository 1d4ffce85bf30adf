//! The chaos command's scenarios: seeded runs of one job under every fault-tolerance mode,
//! fault kind and moment, each checked record by record and key by key.
//!
//! The job: [`HeldIds`] `0..N` (parallelism 2) -> `map` -> `key_by(id % KEYS)` -> a running
//! count per key in keyed state, emitting `(key, count, id)` -> an exactly-once `collect`.
//! Exactly-once holds when every id is committed once and each key's counts are exactly
//! `1..=n_key` (the keyed state continued where its checkpoint or its backup left it);
//! at-least-once when every id is committed at least once.
//!
//! Moments are events, not times: a fault fires once a checkpoint completed
//! ([`Fault::after_checkpoints`]) while the source holds the second half of its input
//! ([`Hold`]) until then, or at a record count, or two faults close together. Every run is
//! bounded by a timeout that counts as a failure.
//!
//! Not covered yet: faults during a checkpoint's commit phase and during a promotion's
//! replay, rescale and fast restart (issue 17 grows with them).

use std::collections::HashMap;
use std::fmt;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use weir::testing::{wait_for_checkpoint, Fault, FaultKind, FaultPlan, HeldIds, Hold};
use weir::{CheckpointMode, Collector, Env, EnvConfig, RestartStrategy, ValueState};
use weir_examples::rng::SplitMix64;

/// Keys of the keyed count.
pub const KEYS: u64 = 13;

/// How the job survives a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    /// Restart from the last checkpoint, aligned barriers.
    Aligned,
    /// Restart from the last checkpoint, unaligned barriers.
    Unaligned,
    /// Restart from the last checkpoint, at-least-once barriers.
    AtLeastOnce,
    /// A backup per subtask of the stateless `map` (BQBS).
    BackupStateless,
    /// A backup per subtask of the stateful keyed count (BQBS).
    BackupStateful,
}

impl Mode {
    /// Every mode.
    pub const ALL: [Mode; 5] = [
        Mode::Aligned,
        Mode::Unaligned,
        Mode::AtLeastOnce,
        Mode::BackupStateless,
        Mode::BackupStateful,
    ];
    fn exactly_once(self) -> bool {
        self != Mode::AtLeastOnce
    }
    /// The operator the faults hit.
    fn target(self) -> &'static str {
        match self {
            Mode::BackupStateful => "count",
            _ => "map",
        }
    }
}

/// When the fault comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Moment {
    /// At the first batch after checkpoint 1 completed (the second half of the input held
    /// until then).
    AfterCheckpoint,
    /// At a random record of a subtask's input.
    AtRecord,
    /// Two faults, one batch apart, in both subtasks.
    TwoClose,
}

impl Moment {
    /// Every moment.
    pub const ALL: [Moment; 3] = [Moment::AfterCheckpoint, Moment::AtRecord, Moment::TwoClose];
}

/// The fault kinds drawn from.
pub fn kinds() -> [FaultKind; 4] {
    [
        FaultKind::Panic,
        FaultKind::Hang,
        FaultKind::StopArbiter,
        FaultKind::Pause(Duration::from_millis(600)),
    ]
}

/// One run's choices, all from its seed.
#[derive(Debug, Clone, Copy)]
pub struct Scenario {
    /// The run's seed: `chaos --replay SEED` runs it alone.
    pub seed: u64,
    /// Fault-tolerance mode.
    pub mode: Mode,
    /// Fault kind.
    pub kind: FaultKind,
    /// When.
    pub moment: Moment,
    /// Records.
    pub n: u64,
}

impl Scenario {
    /// The scenario of `seed` (`n` records).
    pub fn from_seed(seed: u64, n: u64) -> Self {
        let mut r = SplitMix64::new(seed);
        Scenario {
            seed,
            mode: Mode::ALL[r.below(Mode::ALL.len() as u64) as usize],
            kind: kinds()[r.below(4) as usize],
            moment: Moment::ALL[r.below(Moment::ALL.len() as u64) as usize],
            n,
        }
    }

    fn faults(&self) -> Vec<Fault> {
        let mut r = SplitMix64::new(self.seed ^ 0xFA17);
        let target = self.mode.target();
        let share = self.n / 2;
        match self.moment {
            Moment::AfterCheckpoint => {
                vec![Fault::new(target, self.kind, 0).after_checkpoints(1)]
            }
            Moment::AtRecord => {
                vec![Fault::new(
                    target,
                    self.kind,
                    r.range(share / 10, share * 9 / 10),
                )]
            }
            Moment::TwoClose => {
                let at = r.range(share / 10, share * 8 / 10);
                vec![
                    Fault::new(target, self.kind, at).in_subtask(0),
                    Fault::new(target, self.kind, at + 64).in_subtask(1),
                ]
            }
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {} {:?} {:?} {:?} n={}",
            self.seed, self.mode, self.kind, self.moment, self.n
        )
    }
}

/// What went wrong in a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every id and every key's counts as they must be.
    Ok,
    /// Ids missing at the sink.
    Lost(u64),
    /// Ids committed more than once (exactly-once modes).
    Duplicated(u64),
    /// A key's counts are not `1..=n_key` (exactly-once modes).
    WrongState(String),
    /// The run did not end within the timeout.
    Hung,
    /// The job failed.
    Failed(String),
}

impl Verdict {
    /// Whether the run was correct.
    pub fn is_ok(&self) -> bool {
        *self == Verdict::Ok
    }
}

/// Runs one scenario, bounded by `timeout`.
pub fn run(s: Scenario, dir: &std::path::Path, timeout: Duration) -> Verdict {
    let (tx, rx) = mpsc::channel();
    let dir = dir.to_owned();
    let thread = std::thread::spawn(move || {
        let _ = tx.send(run_inner(s, &dir));
    });
    match rx.recv_timeout(timeout) {
        Ok(v) => {
            let _ = thread.join();
            v
        }
        // The job's thread is left behind: the process reports and goes on.
        Err(_) => Verdict::Hung,
    }
}

fn config(s: &Scenario, plan: FaultPlan, dir: &std::path::Path) -> EnvConfig {
    let mut cfg = EnvConfig::default();
    cfg.batch_size = 64;
    cfg.arbiters = 2;
    cfg.heartbeat_timeout = Duration::from_millis(300);
    cfg.checkpoint.interval = Some(Duration::from_millis(20));
    cfg.checkpoint.directory = dir.to_owned();
    cfg.checkpoint.mode = if s.mode == Mode::AtLeastOnce {
        CheckpointMode::AtLeastOnce
    } else {
        CheckpointMode::ExactlyOnce
    };
    cfg.checkpoint.unaligned = s.mode == Mode::Unaligned;
    cfg.restart = Some(RestartStrategy::FixedDelay {
        attempts: 10,
        delay: Duration::from_millis(5),
    });
    cfg.faults = plan;
    // A thousand runs restart a thousand times: the table tells, not stderr.
    cfg.stderr_warnings = false;
    cfg
}

fn run_inner(s: Scenario, dir: &std::path::Path) -> Verdict {
    let plan = FaultPlan::new(s.faults());
    let env = Env::with_config(config(&s, plan, dir));
    let hold = Hold::new();
    let h = hold.clone();
    let n = s.n;
    let before_hold = if s.moment == Moment::AfterCheckpoint {
        0.5
    } else {
        1.0
    };
    let ids = env
        .add_source("ids", move |cx| {
            Ok(HeldIds::new(cx, n, before_hold, h.clone()))
        })
        .uid("ids")
        .set_parallelism(2);
    let mapped = ids.map(|x: u64| x).uid("map").set_parallelism(2);
    let mapped = if s.mode == Mode::BackupStateless {
        mapped.with_backup()
    } else {
        mapped
    };
    let counted = mapped
        .key_by(|x: &u64| x % KEYS)
        .process(
            |k: &u64, c: &mut ValueState<u64>, x: u64, out: &mut Collector<(u64, u64, u64)>| {
                let n = c.get_or_insert_with(|| 0);
                *n += 1;
                out.collect((*k, *n, x));
            },
        )
        .uid("count")
        .set_parallelism(2);
    let counted = if s.mode == Mode::BackupStateful {
        counted.with_backup()
    } else {
        counted
    };
    let out = counted.collect();
    let job = match env.start("chaos") {
        Ok(j) => j,
        Err(e) => return Verdict::Failed(e.to_string()),
    };
    if s.moment == Moment::AfterCheckpoint {
        if let Err(e) = wait_for_checkpoint(&job, 1, Duration::from_secs(20)) {
            return Verdict::Failed(format!("no checkpoint: {e}"));
        }
    }
    hold.release();
    if let Err(e) = job.wait() {
        return Verdict::Failed(e.to_string());
    }
    check(n, s.mode.exactly_once(), &out.take())
}

/// The verdict on what the sink committed.
pub fn check(n: u64, exactly_once: bool, got: &[(u64, u64, u64)]) -> Verdict {
    let mut seen = vec![0u32; n as usize];
    for &(_, _, id) in got {
        if let Some(s) = seen.get_mut(id as usize) {
            *s += 1;
        }
    }
    let lost = seen.iter().filter(|&&c| c == 0).count() as u64;
    if lost > 0 {
        return Verdict::Lost(lost);
    }
    if !exactly_once {
        return Verdict::Ok;
    }
    let dup = seen.iter().filter(|&&c| c > 1).count() as u64;
    if dup > 0 {
        return Verdict::Duplicated(dup);
    }
    let mut per_key: HashMap<u64, Vec<u64>> = HashMap::new();
    for &(k, c, _) in got {
        per_key.entry(k).or_default().push(c);
    }
    for (k, mut counts) in per_key {
        counts.sort_unstable();
        if counts.iter().enumerate().any(|(i, &c)| c != i as u64 + 1) {
            return Verdict::WrongState(format!("key {k}: counts are not 1..={}", counts.len()));
        }
    }
    Verdict::Ok
}

/// Runs `runs` scenarios from `seed` on (`seed + i` each), `n` records each; calls `each`
/// after every run. The verdicts, in order.
pub fn campaign(
    seed: u64,
    runs: u64,
    n: u64,
    timeout: Duration,
    mut each: impl FnMut(&Scenario, &Verdict, Duration),
) -> Vec<(Scenario, Verdict)> {
    let root = std::env::temp_dir().join(format!("weir-chaos-{}", std::process::id()));
    let mut out = Vec::with_capacity(runs as usize);
    for i in 0..runs {
        let s = Scenario::from_seed(seed.wrapping_add(i), n);
        let dir = root.join(s.seed.to_string());
        let started = Instant::now();
        let v = run(s, &dir, timeout);
        let _ = std::fs::remove_dir_all(&dir);
        each(&s, &v, started.elapsed());
        out.push((s, v));
    }
    let _ = std::fs::remove_dir_all(&root);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_finds_each_kind_of_wrong_output() {
        let good = vec![(0, 1, 0), (1, 1, 1), (0, 2, 2)];
        assert_eq!(check(3, true, &good), Verdict::Ok);
        assert_eq!(check(4, true, &good), Verdict::Lost(1));
        let mut dup = good.clone();
        dup.push((1, 2, 1));
        assert_eq!(check(3, true, &dup), Verdict::Duplicated(1));
        assert_eq!(check(3, false, &dup), Verdict::Ok);
        let wrong = vec![(0, 1, 0), (1, 1, 1), (0, 3, 2)];
        assert!(matches!(check(3, true, &wrong), Verdict::WrongState(_)));
    }

    #[test]
    fn a_seed_is_always_the_same_scenario() {
        let a = Scenario::from_seed(9, 1_000);
        let b = Scenario::from_seed(9, 1_000);
        assert_eq!(a.to_string(), b.to_string());
        let all: std::collections::HashSet<(Mode, Moment)> = (0..200)
            .map(|s| {
                let s = Scenario::from_seed(s, 1_000);
                (s.mode, s.moment)
            })
            .collect();
        assert_eq!(all.len(), Mode::ALL.len() * Moment::ALL.len());
    }
}
