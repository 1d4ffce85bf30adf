//! The rule engine: from a look at a job ([`Observation`]) and the time, which rules were
//! violated, which triggered, and whether a trigger alerts, acts or is held back (cool-down,
//! budget). Pure: no I/O and no clock of its own, so that its counting is tested with a
//! simulated clock. It does not make REST calls (`observe`, `act`) or write logs (`mod`).
//!
//! The rules, for each rule:
//! - A rule that reads checkpoint statistics is evaluated once per new checkpoint outcome (a
//!   checkpoint completed or failed since its last evaluation), with the values of that look;
//!   a rule on backpressure alone, at every look. A look with no new outcome leaves the
//!   checkpoint rules as they were: one slow checkpoint is counted once, however often the
//!   agent looks.
//! - A violation (every condition holds) adds one to the rule's count; a healthy evaluation
//!   takes `decay` off it. At `consecutive` the rule triggers and its count starts again.
//! - A trigger alerts in `alert` mode, and in `alert-then-act` for the rule's first
//!   `alert_first` triggers; otherwise it acts, unless an action was taken less than
//!   `cooldown` ago or `max_actions_per_hour` were taken in the last hour: then it is
//!   suppressed (and says why). An action resets every rule's count: the job it judged is
//!   gone.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use super::rules::{Action, Mode, Rule, Rules};

/// What one look at a job found. `None`: the server does not report it (Flink has no job
/// level `checkpointStartDelay`, say), or has nothing yet.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Observation {
    /// The job looked at.
    pub job_id: String,
    /// Checkpoints completed so far.
    pub completed_checkpoints: Option<u64>,
    /// Checkpoints failed so far.
    pub failed_checkpoints: Option<u64>,
    /// The latest completed checkpoint's duration, ms.
    pub last_checkpoint_duration_ms: Option<u64>,
    /// The slowest subtask's checkpoint start delay, ms.
    pub checkpoint_start_delay_ms: Option<u64>,
    /// The barrier alignment time, ms.
    pub checkpoint_alignment_ms: Option<u64>,
    /// The highest backpressure ratio of any subtask (0 to 1).
    pub backpressure: Option<f64>,
    /// The vertex that subtask belongs to.
    pub backpressured_vertex: Option<String>,
}

impl Observation {
    /// The values a decision quotes, by metric name.
    pub fn values(&self) -> BTreeMap<&'static str, serde_json::Value> {
        let mut m = BTreeMap::new();
        let mut put = |k: &'static str, v: Option<serde_json::Value>| {
            if let Some(v) = v {
                m.insert(k, v);
            }
        };
        put(
            "lastCheckpointDuration",
            self.last_checkpoint_duration_ms.map(Into::into),
        );
        put(
            "checkpointStartDelay",
            self.checkpoint_start_delay_ms.map(Into::into),
        );
        put(
            "checkpointAlignmentTime",
            self.checkpoint_alignment_ms.map(Into::into),
        );
        put("backpressure", self.backpressure.map(Into::into));
        put(
            "backpressuredVertex",
            self.backpressured_vertex.clone().map(Into::into),
        );
        put(
            "numberOfCompletedCheckpoints",
            self.completed_checkpoints.map(Into::into),
        );
        put(
            "numberOfFailedCheckpoints",
            self.failed_checkpoints.map(Into::into),
        );
        m
    }
}

/// What an evaluation of a rule came to.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Verdict {
    /// Not every condition held.
    Healthy,
    /// Every condition held; not yet `consecutive` times.
    Violation,
    /// Triggered, and only alerts.
    Alert,
    /// Triggered, and takes these actions.
    Act(Vec<Action>),
    /// Triggered in a mode that acts, but held back.
    Suppressed(Suppression),
}

impl Verdict {
    /// Its name in the decision log.
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Healthy => "healthy",
            Verdict::Violation => "violation",
            Verdict::Alert => "alert",
            Verdict::Act(_) => "act",
            Verdict::Suppressed(_) => "suppressed",
        }
    }

    /// Whether the rule triggered.
    pub fn triggered(&self) -> bool {
        matches!(
            self,
            Verdict::Alert | Verdict::Act(_) | Verdict::Suppressed(_)
        )
    }
}

/// Why a trigger did not act.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Suppression {
    /// An action was taken less than the cool-down ago.
    Cooldown {
        /// Until the cool-down ends.
        remaining: Duration,
    },
    /// The hour's actions are used up.
    Budget {
        /// Actions in the last hour.
        used: u32,
        /// The limit.
        per_hour: u32,
    },
}

impl std::fmt::Display for Suppression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Suppression::Cooldown { remaining } => write!(
                f,
                "cool-down: the last action was too recent ({} ms left)",
                remaining.as_millis()
            ),
            Suppression::Budget { used, per_hour } => write!(
                f,
                "budget: {used} actions in the last hour, at most {per_hour}"
            ),
        }
    }
}

/// One rule's evaluation.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Decision {
    /// The rule.
    pub rule: String,
    /// When (the engine's clock).
    pub at: Duration,
    /// What it came to.
    pub verdict: Verdict,
    /// The rule's violation count after it.
    pub count: u32,
    /// The count that triggers it.
    pub consecutive: u32,
    /// Which trigger of the rule this is (1 for the first), when it triggered.
    pub trigger: Option<u32>,
    /// The conditions that held, by name.
    pub breached: Vec<&'static str>,
}

#[derive(Debug, Clone, Default)]
struct RuleState {
    count: u32,
    triggers: u32,
    /// The checkpoint outcomes (completed, failed) at its last evaluation.
    seen: Option<(u64, u64)>,
}

/// The rule engine of one agent.
#[derive(Debug)]
pub struct Engine {
    rules: Rules,
    state: Vec<RuleState>,
    /// When actions were taken, the last hour's.
    actions: VecDeque<Duration>,
    job: Option<String>,
}

const HOUR: Duration = Duration::from_secs(3600);

impl Engine {
    /// An engine for `rules`, every count at zero.
    pub fn new(rules: Rules) -> Engine {
        let state = vec![RuleState::default(); rules.rules.len()];
        Engine {
            rules,
            state,
            actions: VecDeque::new(),
            job: None,
        }
    }

    /// Its rules.
    pub fn rules(&self) -> &Rules {
        &self.rules
    }

    /// Evaluates every rule on `obs`, taken at `now` (any monotonic clock: the time since
    /// the agent started, or a simulated one). A rule with nothing new to judge gives no
    /// decision. A new job (another id) starts every rule's count again.
    pub fn evaluate(&mut self, now: Duration, obs: &Observation) -> Vec<Decision> {
        if self.job.as_deref() != Some(obs.job_id.as_str()) {
            self.job = Some(obs.job_id.clone());
            for s in &mut self.state {
                s.count = 0;
                s.seen = None;
            }
        }
        while self
            .actions
            .front()
            .is_some_and(|t| now.saturating_sub(*t) >= HOUR)
        {
            self.actions.pop_front();
        }
        let outcomes = (
            obs.completed_checkpoints.unwrap_or(0),
            obs.failed_checkpoints.unwrap_or(0),
        );
        let mut decisions = Vec::new();
        let mut acted = false;
        for i in 0..self.rules.rules.len() {
            let rule = &self.rules.rules[i];
            let state = &mut self.state[i];
            let new_failures = if rule.when.reads_checkpoints() {
                match new_failures(&mut state.seen, outcomes) {
                    Some(n) => n,
                    None => continue,
                }
            } else {
                0
            };
            let breached = breached(rule, obs, new_failures);
            let violated = !breached.is_empty() && breached.len() == conditions(rule);
            let mut trigger = None;
            let verdict = if violated {
                state.count += 1;
                if state.count >= rule.consecutive {
                    state.count = 0;
                    state.triggers += 1;
                    trigger = Some(state.triggers);
                    let mode = self.rules.mode_of(rule);
                    let alert_only = mode == Mode::Alert
                        || (mode == Mode::AlertThenAct && state.triggers <= self.rules.alert_first);
                    if alert_only {
                        Verdict::Alert
                    } else if let Some(why) = self.held_back(now, acted) {
                        Verdict::Suppressed(why)
                    } else {
                        acted = true;
                        self.actions.push_back(now);
                        Verdict::Act(rule.actions.clone())
                    }
                } else {
                    Verdict::Violation
                }
            } else {
                state.count = state.count.saturating_sub(rule.decay);
                Verdict::Healthy
            };
            let state = &self.state[i];
            decisions.push(Decision {
                rule: rule.name.clone(),
                at: now,
                verdict,
                count: state.count,
                consecutive: rule.consecutive,
                trigger,
                breached,
            });
        }
        if acted {
            for s in &mut self.state {
                s.count = 0;
            }
            for d in &mut decisions {
                d.count = 0;
            }
        }
        decisions
    }

    /// Why an action now would be held back, if it would.
    fn held_back(&self, now: Duration, acted_this_look: bool) -> Option<Suppression> {
        if let Some(last) = self.actions.back() {
            let since = now.saturating_sub(*last);
            if acted_this_look || since < self.rules.cooldown {
                return Some(Suppression::Cooldown {
                    remaining: self.rules.cooldown.saturating_sub(since),
                });
            }
        }
        let used = self.actions.len() as u32;
        if used >= self.rules.max_actions_per_hour {
            return Some(Suppression::Budget {
                used,
                per_hour: self.rules.max_actions_per_hour,
            });
        }
        None
    }

    /// Actions taken in the hour before `now`.
    pub fn actions_in_last_hour(&self, now: Duration) -> u32 {
        self.actions
            .iter()
            .filter(|t| now.saturating_sub(**t) < HOUR)
            .count() as u32
    }
}

/// The checkpoint failures since the outcomes (completed, failed) a rule last saw, which
/// become `seen`; `None` when there is nothing new to judge (the first look, a baseline, or
/// the same outcomes again). Counters that went back (a restarted server) give 0: only the
/// latest values are judged.
fn new_failures(seen: &mut Option<(u64, u64)>, outcomes: (u64, u64)) -> Option<u64> {
    let before = seen.replace(outcomes)?;
    if before == outcomes {
        return None;
    }
    let (c, f) = before;
    Some(if outcomes.0 < c || outcomes.1 < f {
        0
    } else {
        outcomes.1 - f
    })
}

fn conditions(rule: &Rule) -> usize {
    let w = &rule.when;
    [
        w.last_checkpoint_duration.is_some(),
        w.checkpoint_start_delay.is_some(),
        w.checkpoint_alignment_time.is_some(),
        w.backpressure.is_some(),
        w.failed_checkpoints.is_some(),
    ]
    .iter()
    .filter(|x| **x)
    .count()
}

/// The conditions of `rule` that hold on `obs`.
fn breached(rule: &Rule, obs: &Observation, new_failures: u64) -> Vec<&'static str> {
    let w = &rule.when;
    let over = |limit: Option<Duration>, v: Option<u64>| match (limit, v) {
        (Some(limit), Some(v)) => Some(v as u128 > limit.as_millis()),
        (Some(_), None) => Some(false),
        (None, _) => None,
    };
    let mut out = Vec::new();
    // A checkpoint that failed since the last evaluation was slow too (declined, timed out).
    let slow = over(w.last_checkpoint_duration, obs.last_checkpoint_duration_ms)
        .map(|slow| slow || new_failures > 0);
    if slow == Some(true) {
        out.push("last_checkpoint_duration");
    }
    if over(w.checkpoint_start_delay, obs.checkpoint_start_delay_ms) == Some(true) {
        out.push("checkpoint_start_delay");
    }
    if over(w.checkpoint_alignment_time, obs.checkpoint_alignment_ms) == Some(true) {
        out.push("checkpoint_alignment_time");
    }
    if let (Some(limit), Some(b)) = (w.backpressure, obs.backpressure) {
        if b > limit {
            out.push("backpressure");
        }
    }
    if let Some(n) = w.failed_checkpoints {
        if new_failures >= n.max(1) {
            out.push("failed_checkpoints");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn rules(extra: &str) -> Rules {
        let cooldown = if extra.contains("cooldown") {
            ""
        } else {
            "cooldown = \"10min\""
        };
        Rules::parse(
            &format!(
                r#"
{cooldown}
{extra}
[[rule]]
name = "slow"
last_checkpoint_duration = "1s"
backpressure = 0.8
consecutive = 3

[[rule.action]]
kind = "savepoint"
dir = "/sp"

[[rule.action]]
kind = "restart"
graph = "main"
"#
            ),
            "test",
        )
        .unwrap()
    }

    /// A simulated job: each `checkpoint` completes one more with `ms` duration under
    /// `backpressure`; the clock moves a second per look.
    struct Sim {
        engine: Engine,
        now: Duration,
        obs: Observation,
    }

    impl Sim {
        fn new(rules: Rules) -> Sim {
            let mut sim = Sim {
                engine: Engine::new(rules),
                now: Duration::ZERO,
                obs: Observation {
                    job_id: "j1".into(),
                    completed_checkpoints: Some(0),
                    failed_checkpoints: Some(0),
                    ..Observation::default()
                },
            };
            // The first look is the baseline.
            assert!(sim.look().is_empty());
            sim
        }

        fn look(&mut self) -> Vec<Decision> {
            self.now += S;
            self.engine.evaluate(self.now, &self.obs)
        }

        fn checkpoint(&mut self, ms: u64, backpressure: f64) -> Decision {
            *self.obs.completed_checkpoints.as_mut().unwrap() += 1;
            self.obs.last_checkpoint_duration_ms = Some(ms);
            self.obs.backpressure = Some(backpressure);
            let mut d = self.look();
            assert_eq!(d.len(), 1);
            d.remove(0)
        }

        fn slow(&mut self) -> Decision {
            self.checkpoint(5_000, 0.95)
        }

        fn fine(&mut self) -> Decision {
            self.checkpoint(50, 0.1)
        }

        /// `n` slow checkpoints; the verdict of the last.
        fn slow_times(&mut self, n: usize) -> Verdict {
            let mut last = None;
            for _ in 0..n {
                last = Some(self.slow().verdict);
            }
            last.unwrap()
        }
    }

    #[test]
    fn three_slow_checkpoints_in_a_row_under_backpressure_trigger() {
        let mut sim = Sim::new(rules("mode = \"act\""));
        let d = sim.slow();
        assert_eq!((d.verdict.clone(), d.count), (Verdict::Violation, 1));
        assert_eq!(d.breached, vec!["last_checkpoint_duration", "backpressure"]);
        assert_eq!(sim.slow().count, 2);
        let d = sim.slow();
        assert!(
            matches!(&d.verdict, Verdict::Act(a) if a.len() == 2),
            "{d:?}"
        );
        assert_eq!((d.trigger, d.count), (Some(1), 0));
    }

    #[test]
    fn one_condition_alone_is_no_violation() {
        let mut sim = Sim::new(rules("mode = \"act\""));
        for _ in 0..5 {
            // Slow, but no backpressure: a large state, not a stuck job.
            let d = sim.checkpoint(5_000, 0.2);
            assert_eq!(
                (d.verdict, d.breached),
                (Verdict::Healthy, vec!["last_checkpoint_duration"])
            );
            // Backpressure, but quick checkpoints.
            assert_eq!(sim.checkpoint(100, 0.99).verdict, Verdict::Healthy);
        }
    }

    #[test]
    fn the_same_checkpoint_is_judged_once_however_often_the_agent_looks() {
        let mut sim = Sim::new(rules("mode = \"act\""));
        assert_eq!(sim.slow().count, 1);
        for _ in 0..10 {
            assert!(sim.look().is_empty(), "no new checkpoint, no decision");
        }
        assert_eq!(sim.slow().count, 2);
    }

    #[test]
    fn a_failed_checkpoint_counts_as_slow() {
        let mut sim = Sim::new(rules("mode = \"act\""));
        sim.obs.backpressure = Some(0.9);
        sim.obs.last_checkpoint_duration_ms = Some(10);
        for n in 1..=2 {
            *sim.obs.failed_checkpoints.as_mut().unwrap() += 1;
            let d = sim.look().remove(0);
            assert_eq!((d.verdict, d.count), (Verdict::Violation, n));
        }
    }

    #[test]
    fn healthy_checkpoints_decay_the_count() {
        let mut sim = Sim::new(rules("mode = \"act\""));
        sim.slow();
        sim.slow();
        let d = sim.fine();
        assert_eq!((d.verdict, d.count), (Verdict::Healthy, 1));
        assert_eq!(
            sim.slow().count,
            2,
            "decay 1: one healthy checkpoint takes one off"
        );
        assert!(sim.slow().verdict.triggered());

        // decay = consecutive: strictly in a row.
        let mut r = rules("mode = \"act\"");
        r.rules[0].decay = 3;
        let mut sim = Sim::new(r);
        sim.slow();
        sim.slow();
        assert_eq!(sim.fine().count, 0);
        assert_eq!(sim.slow_times(2), Verdict::Violation);
        assert!(sim.slow().verdict.triggered());
    }

    #[test]
    fn alert_then_act_alerts_for_the_first_triggers() {
        let mut sim = Sim::new(rules("mode = \"alert-then-act\"\nalert_first = 2"));
        assert_eq!(sim.slow_times(3), Verdict::Alert);
        assert_eq!(sim.slow_times(3), Verdict::Alert);
        assert!(matches!(sim.slow_times(3), Verdict::Act(_)));
    }

    #[test]
    fn alert_mode_never_acts() {
        let mut sim = Sim::new(rules("mode = \"alert\""));
        for _ in 0..10 {
            assert_eq!(sim.slow_times(3), Verdict::Alert);
        }
    }

    #[test]
    fn the_cool_down_holds_a_second_action_back_until_it_ends() {
        let mut sim = Sim::new(rules("mode = \"act\"\ncooldown = \"60s\""));
        assert!(matches!(sim.slow_times(3), Verdict::Act(_)));
        // Three more slow ones, 3 s after the action: held back.
        match sim.slow_times(3) {
            Verdict::Suppressed(Suppression::Cooldown { remaining }) => {
                assert_eq!(remaining, Duration::from_secs(57))
            }
            v => panic!("expected the cool-down, got {v:?}"),
        }
        // A minute later it may act again.
        sim.now += Duration::from_secs(60);
        assert!(matches!(sim.slow_times(3), Verdict::Act(_)));
    }

    #[test]
    fn the_budget_caps_actions_per_hour() {
        let mut sim = Sim::new(rules(
            "mode = \"act\"\ncooldown = \"1s\"\nmax_actions_per_hour = 2",
        ));
        assert!(matches!(sim.slow_times(3), Verdict::Act(_)));
        assert!(matches!(sim.slow_times(3), Verdict::Act(_)));
        assert_eq!(
            sim.slow_times(3),
            Verdict::Suppressed(Suppression::Budget {
                used: 2,
                per_hour: 2
            })
        );
        assert_eq!(sim.engine.actions_in_last_hour(sim.now), 2);
        // An hour after the first, one is free again.
        sim.now += Duration::from_secs(3600);
        assert_eq!(sim.engine.actions_in_last_hour(sim.now), 0);
        assert!(matches!(sim.slow_times(3), Verdict::Act(_)));
    }

    #[test]
    fn an_action_starts_every_count_again() {
        let mut r = rules("mode = \"act\"\ncooldown = \"1s\"");
        let mut other = r.rules[0].clone();
        other.name = "backpressure".into();
        other.when = crate::agent::Conditions {
            backpressure: Some(0.5),
            ..Default::default()
        };
        other.consecutive = 100;
        r.rules.push(other);
        let mut sim = Sim {
            engine: Engine::new(r),
            now: Duration::ZERO,
            obs: Observation {
                job_id: "j1".into(),
                completed_checkpoints: Some(1),
                failed_checkpoints: Some(0),
                last_checkpoint_duration_ms: Some(5_000),
                backpressure: Some(0.9),
                ..Observation::default()
            },
        };
        let first = sim.look();
        assert_eq!(first.len(), 1, "the backpressure rule judges every look");
        assert_eq!(first[0].rule, "backpressure");
        let mut acted = Vec::new();
        for _ in 0..3 {
            *sim.obs.completed_checkpoints.as_mut().unwrap() += 1;
            acted = sim.look();
        }
        assert!(matches!(acted[0].verdict, Verdict::Act(_)));
        assert_eq!(acted[1].count, 0, "the other rule's count starts again too");
        assert_eq!(sim.look()[0].count, 1);
    }

    #[test]
    fn a_new_job_starts_the_counts_again() {
        let mut sim = Sim::new(rules("mode = \"act\""));
        sim.slow();
        sim.slow();
        sim.obs.job_id = "j2".into();
        assert!(sim.look().is_empty(), "a baseline for the new job");
        assert_eq!(sim.slow().count, 1);
    }

    #[test]
    fn an_unknown_metric_never_holds() {
        let mut sim = Sim::new(rules("mode = \"act\""));
        for _ in 0..5 {
            *sim.obs.completed_checkpoints.as_mut().unwrap() += 1;
            sim.obs.last_checkpoint_duration_ms = Some(5_000);
            sim.obs.backpressure = None;
            let d = sim.look().remove(0);
            assert_eq!(d.verdict, Verdict::Healthy);
        }
    }
}
