//! A fault drill of the fraud job: the detector runs with a backup per subtask, faults are
//! injected one at a time each after a checkpoint completed (a panic, a hang, a lost
//! arbiter: whatever [`Drill::faults`] lists), the thresholds are changed live at a known
//! transaction, and the alerts are checked against [`reference`](super::reference).
//!
//! Every step waits for an event of the job (a checkpoint completed, the source holding at a
//! bound, a fault fired, a promotion or restart done), never for a time.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use weir::{Env, EnvConfig, JobHandle, RestartStrategy};
use weir_testing::{wait_for_checkpoint, FaultKind, FaultPlan, RecordFaults};

use super::source::{Release, TransactionSource};
use super::{reference, transaction, Alert, ArmedFaults, FraudDetector, Thresholds};

/// How long a drill waits for any one event before it gives up.
const STEP_TIMEOUT: Duration = Duration::from_secs(120);

/// What to run.
#[derive(Debug, Clone)]
pub struct Drill {
    /// Transactions to generate.
    pub transactions: u64,
    /// Distinct cards.
    pub cards: u64,
    /// Seed of the transactions.
    pub seed: u64,
    /// The detector's parallelism (the source runs at 1, so each card's transactions keep
    /// their order and the reference is exact).
    pub parallelism: usize,
    /// Faults to inject, in order, each once a checkpoint completed.
    pub faults: Vec<FaultKind>,
    /// Thresholds to switch to, live, before the faults; `None`: keep the defaults.
    pub change_to: Option<Thresholds>,
    /// Checkpoint interval.
    pub checkpoint_interval: Duration,
    /// Where checkpoints go.
    pub checkpoint_dir: PathBuf,
}

/// What a drill saw.
#[derive(Debug, Clone)]
pub struct DrillReport {
    /// Alerts the job committed.
    pub alerts: usize,
    /// Alerts of the reference the job missed (the first few).
    pub missing: Vec<Alert>,
    /// Alerts the job raised that the reference did not, or raised twice (the first few).
    pub unexpected: Vec<Alert>,
    /// Faults that fired.
    pub faults_fired: usize,
    /// Backup promotions and job restarts that recovered from them.
    pub promotions: u64,
    /// Job restarts.
    pub restarts: u64,
    /// The transaction from which the changed thresholds held.
    pub changed_at: Option<u64>,
    /// Size of the last completed checkpoint, bytes.
    pub last_checkpoint_size: u64,
    /// Checkpoints completed.
    pub checkpoints: u64,
    /// Wall time of the job.
    pub elapsed: Duration,
}

impl DrillReport {
    /// Whether the job alerted exactly what the reference does.
    pub fn matches_reference(&self) -> bool {
        self.missing.is_empty() && self.unexpected.is_empty()
    }
}

/// The drill job's configuration: checkpoints, restarts, and `plan` (which releases hung
/// subtasks).
fn config(drill: &Drill, plan: FaultPlan) -> EnvConfig {
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(drill.checkpoint_interval);
    cfg.checkpoint.directory = drill.checkpoint_dir.clone();
    cfg.restart = Some(RestartStrategy::FixedDelay {
        attempts: 10,
        delay: Duration::ZERO,
    });
    cfg.faults = plan;
    cfg
}

/// The config change, once the source holds at `bound` and a checkpoint started after that
/// completed: every transaction before the bound is judged with the old thresholds.
fn change_thresholds(
    job: &JobHandle,
    release: &Release,
    bound: u64,
    th: Thresholds,
) -> Result<(), String> {
    wait_until("the source holds at the first bound", || {
        release.is_waiting_at(bound)
    })?;
    // A checkpoint started after the source held has passed the detector behind every
    // transaction before the bound (aligned barriers).
    let done = completed(job);
    wait_for_checkpoint(job, done + 2, STEP_TIMEOUT).map_err(|e| e.to_string())?;
    for (key, value) in [
        ("small_cents", th.small_cents),
        ("large_cents", th.large_cents),
        ("window_ms", th.window_ms),
    ] {
        job.update_config("detector", key, &value.to_string())
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Runs `drill`: the job, its faults and its config change; then compares with the reference.
pub fn run(drill: &Drill) -> Result<DrillReport, String> {
    let plan = FaultPlan::new(Vec::new());
    let faults = ArmedFaults::new(
        drill
            .faults
            .iter()
            .map(|k| RecordFaults::new("detector", *k, vec![()]).released_by(&plan))
            .collect(),
    );
    let env = Env::with_config(config(drill, plan));
    let release = Release::new(0);
    let (seed, cards, n, r) = (drill.seed, drill.cards, drill.transactions, release.clone());
    let detector = FraudDetector {
        faults: Some(faults.clone()),
        ..FraudDetector::default()
    };
    let alerts = env
        .add_source("transactions", move |_cx| {
            Ok(TransactionSource::new(seed, cards, n, r.clone()))
        })
        .uid("transactions")
        .set_parallelism(1)
        .key_by(|t: &super::Transaction| t.card)
        .apply(detector)
        .uid("detector")
        .set_parallelism(drill.parallelism)
        .with_backup()
        .collect();
    let started = Instant::now();
    let job = env.start("fraud-drill").map_err(|e| e.to_string())?;

    let steps = drill.faults.len() + 1;
    let bound = |i: usize| n * (i as u64 + 1) / (steps as u64 + 1);
    let mut changed_at = None;
    // Step 0: the config change, at a bound every earlier transaction has passed.
    release.release(bound(0));
    if let Some(th) = drill.change_to {
        change_thresholds(&job, &release, bound(0), th)?;
        changed_at = Some(bound(0));
    }
    // One step per fault: a checkpoint completed, then the fault armed, then more input.
    for k in 0..drill.faults.len() {
        let done = completed(&job);
        wait_for_checkpoint(&job, done + 1, STEP_TIMEOUT).map_err(|e| e.to_string())?;
        let before = recoveries(&job);
        faults.arm(k);
        release.release(bound(k + 1));
        wait_until("the fault fired", || faults.fired(k))?;
        wait_until("the job recovered", || recoveries(&job) > before)?;
    }
    release.release(n);
    let result = job.wait().map_err(|e| e.to_string())?;
    let elapsed = started.elapsed();

    let mut got = alerts.take();
    got.sort();
    let default = Thresholds::default();
    let expected = reference((0..n).map(|i| transaction(seed, i, cards)), |id| {
        match (changed_at, drill.change_to) {
            (Some(at), Some(th)) if id >= at => th,
            _ => default,
        }
    });
    let (missing, unexpected) = differences(&expected, &got);
    let stats = result.checkpoints.clone().unwrap_or_default();
    Ok(DrillReport {
        alerts: got.len(),
        missing,
        unexpected,
        faults_fired: (0..drill.faults.len()).filter(|&k| faults.fired(k)).count(),
        promotions: result.backups.iter().map(|b| b.promotions).sum(),
        restarts: stats.num_restarts,
        changed_at,
        last_checkpoint_size: stats.last_checkpoint_size,
        checkpoints: stats.number_of_completed_checkpoints,
        elapsed,
    })
}

/// Checkpoints the job has completed so far.
fn completed(job: &JobHandle) -> u64 {
    job.checkpoint_stats()
        .map_or(0, |s| s.number_of_completed_checkpoints)
}

/// Promotions plus restarts so far.
fn recoveries(job: &JobHandle) -> u64 {
    let promotions: u64 = job.backup_metrics().iter().map(|b| b.promotions).sum();
    promotions + job.checkpoint_stats().map_or(0, |s| s.num_restarts)
}

/// Waits for `cond` (an event of the job), giving up after [`STEP_TIMEOUT`].
fn wait_until(what: &str, cond: impl Fn() -> bool) -> Result<(), String> {
    let deadline = Instant::now() + STEP_TIMEOUT;
    while !cond() {
        if Instant::now() > deadline {
            return Err(format!("drill: {what}: not within {STEP_TIMEOUT:?}"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// Alerts of `expected` not in `got`, and alerts of `got` not in `expected` (a duplicate
/// counts), both sorted; the first ten of each.
fn differences(expected: &[Alert], got: &[Alert]) -> (Vec<Alert>, Vec<Alert>) {
    let (mut i, mut j) = (0, 0);
    let (mut missing, mut unexpected) = (Vec::new(), Vec::new());
    while i < expected.len() || j < got.len() {
        match (expected.get(i), got.get(j)) {
            (Some(e), Some(g)) if e == g => {
                i += 1;
                j += 1;
            }
            (Some(e), Some(g)) if e < g => {
                missing.push(e.clone());
                i += 1;
            }
            (Some(_), Some(g)) | (None, Some(g)) => {
                unexpected.push(g.clone());
                j += 1;
            }
            (Some(e), None) => {
                missing.push(e.clone());
                i += 1;
            }
            (None, None) => break,
        }
    }
    missing.truncate(10);
    unexpected.truncate(10);
    (missing, unexpected)
}
