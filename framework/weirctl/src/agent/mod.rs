//! The control agent (`weirctl agent`): a loop outside the job that looks at it over its REST
//! API (Weir's, or a Flink cluster's for the metrics both have), judges what it sees by rules,
//! and alerts or acts: savepoint, fast restart, live settings, rescale. It is seed 002's
//! platform agent: "checkpoints slow three times in a row while backpressure is above 80 %:
//! take a savepoint and restart the job", with an alert-only start and a cool-down.
//!
//! Everything it decides is a JSON line on its output, with the values that made it decide:
//! `decision` (every evaluation of a rule), `alert`, `action` (each action's outcome),
//! `job` (the job it watches changed), `look_failed` (the server did not answer; it backs
//! off), and `status` (its own counters, every `status_every` and at the end).
//!
//! It owns the loop, the log and the alerts; [`Rules`] (`rules`) are parsed and checked
//! there, judged by the [`Engine`] (`engine`, pure and clock-free), read by `observe` and
//! carried out by `act`. It never panics on what a server answers, and a server that is away
//! or slow only makes it look less often.
//!
//! ```no_run
//! use std::sync::atomic::AtomicBool;
//! use weirctl::agent::{Agent, AgentConfig, JobSelector, Rules};
//! let rules = Rules::from_file("rules.toml".as_ref())?;
//! let mut agent = Agent::new(AgentConfig::new("http://127.0.0.1:8081", rules)
//!     .job(JobSelector::Name("fraud-detection".into()))
//!     .token(Some("…".into())));
//! agent.run(&AtomicBool::new(false), &mut std::io::stdout())?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod act;
mod engine;
mod observe;
mod rules;

pub use act::Outcome;
pub use engine::{Decision, Engine, Observation, Suppression, Verdict};
pub use observe::{find_job, observe, JobSelector, LookError};
pub use rules::{Action, AlertTargets, Conditions, Mode, Rule, Rules, RulesError};

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::client::RestClient;

/// How an agent runs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AgentConfig {
    /// The REST server.
    pub url: String,
    /// The bearer token for actions.
    pub token: Option<String>,
    /// The job to watch.
    pub job: JobSelector,
    /// Its rules.
    pub rules: Rules,
    /// Decide and alert, but take no action.
    pub dry_run: bool,
    /// Time between two status lines (default 60 s).
    pub status_every: Duration,
}

impl AgentConfig {
    /// An agent of the server at `url` with `rules`, watching its one running job.
    pub fn new(url: &str, rules: Rules) -> AgentConfig {
        AgentConfig {
            url: url.to_owned(),
            token: None,
            job: JobSelector::Only,
            rules,
            dry_run: false,
            status_every: Duration::from_secs(60),
        }
    }

    /// Watch this job.
    pub fn job(mut self, job: JobSelector) -> Self {
        self.job = job;
        self
    }

    /// Use this token for actions.
    pub fn token(mut self, token: Option<String>) -> Self {
        self.token = token;
        self
    }

    /// Take no action, only say what would be done.
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// A status line this often.
    pub fn status_every(mut self, every: Duration) -> Self {
        self.status_every = every;
        self
    }
}

/// The agent's own counters (its `status` line).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct AgentStatus {
    /// Looks at the job that got an answer.
    pub looks: u64,
    /// Looks that did not (server away, no job).
    pub look_failures: u64,
    /// Rule evaluations.
    pub evaluations: u64,
    /// Evaluations that found every condition of their rule holding.
    pub violations: u64,
    /// Triggers that alerted only.
    pub alerts: u64,
    /// Triggers that acted (or would have, in a dry run).
    pub actions: u64,
    /// Actions that failed.
    pub action_failures: u64,
    /// Triggers held back by the cool-down or the budget.
    pub suppressed: u64,
    /// Alerts a target did not take (a webhook away, a file not writable).
    pub alert_failures: u64,
    /// The job watched now.
    pub job: Option<String>,
    /// The last failure to look, if the last look failed.
    pub last_error: Option<String>,
}

/// A running agent: its engine, its clients and its counters.
#[derive(Debug)]
pub struct Agent {
    cfg: AgentConfig,
    engine: Engine,
    looker: RestClient,
    actor: RestClient,
    alerts: Option<RestClient>,
    started: Instant,
    status: AgentStatus,
    failures_in_row: u32,
}

impl Agent {
    /// An agent as `cfg` says; it calls nothing before its first look.
    pub fn new(cfg: AgentConfig) -> Agent {
        let r = &cfg.rules;
        let looker = RestClient::new(&cfg.url, cfg.token.clone(), r.request_timeout);
        let actor = RestClient::new(&cfg.url, cfg.token.clone(), r.action_timeout)
            .allow_anonymous_changes();
        let alerts = r
            .alert
            .webhook
            .as_ref()
            .map(|w| RestClient::new(w, None, r.request_timeout));
        Agent {
            engine: Engine::new(cfg.rules.clone()),
            cfg,
            looker,
            actor,
            alerts,
            started: Instant::now(),
            status: AgentStatus::default(),
            failures_in_row: 0,
        }
    }

    /// Its counters.
    pub fn status(&self) -> &AgentStatus {
        &self.status
    }

    /// Looks until `stop` is set, then writes a last status line. Fails only when `out`
    /// cannot be written.
    pub fn run(&mut self, stop: &AtomicBool, out: &mut dyn Write) -> std::io::Result<()> {
        let mut next_status = Instant::now() + self.cfg.status_every;
        while !stop.load(Ordering::Relaxed) {
            let wait = self.look(out)?;
            if Instant::now() >= next_status {
                self.write_status(out)?;
                next_status = Instant::now() + self.cfg.status_every;
            }
            let until = Instant::now() + wait;
            while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                std::thread::sleep((until - Instant::now()).min(Duration::from_millis(20)));
            }
        }
        self.write_status(out)
    }

    /// One look: find the job if need be, observe it, judge, alert and act. Returns how long
    /// to wait before the next look (longer after failures: doubling up to a minute, or the
    /// interval if that is longer).
    pub fn look(&mut self, out: &mut dyn Write) -> std::io::Result<Duration> {
        let interval = self.cfg.rules.interval;
        match self.look_once(out) {
            Ok(()) => {
                self.failures_in_row = 0;
                self.status.last_error = None;
                self.status.looks += 1;
                Ok(interval)
            }
            Err(LookFailed::Io(e)) => Err(e),
            Err(LookFailed::Look(e)) => {
                self.status.look_failures += 1;
                self.failures_in_row = self.failures_in_row.saturating_add(1);
                if matches!(e, LookError::NoJob(_)) && self.status.job.is_some() {
                    let gone = self.status.job.take();
                    line(
                        out,
                        json!({ "event": "job", "job": null, "previous": gone, "why": e.to_string() }),
                    )?;
                }
                let backoff = interval
                    .saturating_mul(1 << self.failures_in_row.min(10))
                    .min(interval.max(Duration::from_secs(60)));
                self.status.last_error = Some(e.to_string());
                line(
                    out,
                    json!({ "event": "look_failed", "error": e.to_string(), "retryInMs": backoff.as_millis() as u64 }),
                )?;
                Ok(backoff)
            }
        }
    }

    fn look_once(&mut self, out: &mut dyn Write) -> Result<(), LookFailed> {
        let id = match &self.status.job {
            Some(id) => id.clone(),
            None => {
                let id = find_job(&self.looker, &self.cfg.job)?;
                line(out, json!({ "event": "job", "job": id }))?;
                self.status.job = Some(id.clone());
                id
            }
        };
        let Some(obs) = observe(&self.looker, &id)? else {
            return Ok(());
        };
        let now = self.started.elapsed();
        let decisions = self.engine.evaluate(now, &obs);
        let values = obs.values();
        for d in decisions {
            self.status.evaluations += 1;
            if d.verdict != Verdict::Healthy {
                self.status.violations += 1;
            }
            let mut entry = json!({
                "event": "decision",
                "job": id,
                "rule": d.rule,
                "verdict": d.verdict.name(),
                "count": d.count,
                "consecutive": d.consecutive,
                "breached": d.breached,
                "values": values,
            });
            if let Some(t) = d.trigger {
                entry["trigger"] = t.into();
            }
            if let Verdict::Suppressed(why) = &d.verdict {
                entry["why"] = why.to_string().into();
            }
            if let Verdict::Act(actions) = &d.verdict {
                entry["actions"] = actions.iter().map(Action::kind).collect::<Vec<_>>().into();
                entry["dryRun"] = self.cfg.dry_run.into();
            }
            line(out, entry.clone())?;
            match &d.verdict {
                Verdict::Alert => {
                    self.status.alerts += 1;
                    self.alert(out, &entry)?;
                }
                Verdict::Suppressed(_) => {
                    self.status.suppressed += 1;
                    self.alert(out, &entry)?;
                }
                Verdict::Act(actions) => {
                    self.status.actions += 1;
                    self.alert(out, &entry)?;
                    if !self.cfg.dry_run {
                        self.act(out, &id, &d.rule, actions)?;
                    }
                }
                Verdict::Healthy | Verdict::Violation => {}
            }
        }
        Ok(())
    }

    fn act(
        &mut self,
        out: &mut dyn Write,
        id: &str,
        rule: &str,
        actions: &[Action],
    ) -> std::io::Result<()> {
        let r = &self.cfg.rules;
        let (actor, retries, timeout) = (self.actor.clone(), r.retries, r.action_timeout);
        act::run_actions(&actor, id, actions, retries, timeout, |o| {
            if !o.ok {
                self.status.action_failures += 1;
            }
            let entry = json!({
                "event": "action",
                "job": id,
                "rule": rule,
                "kind": o.kind,
                "ok": o.ok,
                "tries": o.tries,
                "durationMs": o.duration.as_millis() as u64,
                "detail": o.detail,
            });
            line(out, entry.clone())?;
            if !o.ok {
                self.alert(out, &entry)?;
            }
            Ok(())
        })
    }

    /// Sends `entry` to the alert targets as an `alert` line.
    fn alert(&mut self, out: &mut dyn Write, entry: &Value) -> std::io::Result<()> {
        let mut alert = entry.clone();
        alert["event"] = "alert".into();
        alert["time"] = now_ms().into();
        let text = alert.to_string();
        if self.cfg.rules.alert.stdout {
            out.write_all(format!("{text}\n").as_bytes())?;
            out.flush()?;
        }
        let mut failed = Vec::new();
        if let Some(path) = &self.cfg.rules.alert.file {
            let written = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .and_then(|mut f| writeln!(f, "{text}"));
            if let Err(e) = written {
                failed.push(format!("cannot append to {}: {e}", path.display()));
            }
        }
        if let Some(hook) = &self.alerts {
            if let Err(e) = hook.post_json(alert) {
                failed.push(format!("webhook: {e}"));
            }
        }
        for why in failed {
            self.status.alert_failures += 1;
            line(out, json!({ "event": "alert_failed", "error": why }))?;
        }
        Ok(())
    }

    /// Writes its `status` line: its counters, uptime and actions in the last hour.
    pub fn write_status(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let mut v = json!(self.status);
        v["event"] = "status".into();
        v["uptimeMs"] = (self.started.elapsed().as_millis() as u64).into();
        v["actionsInLastHour"] = self
            .engine
            .actions_in_last_hour(self.started.elapsed())
            .into();
        line(out, v)
    }
}

enum LookFailed {
    Look(LookError),
    Io(std::io::Error),
}

impl From<LookError> for LookFailed {
    fn from(e: LookError) -> Self {
        LookFailed::Look(e)
    }
}

impl From<std::io::Error> for LookFailed {
    fn from(e: std::io::Error) -> Self {
        LookFailed::Io(e)
    }
}

/// Writes `v` as one JSON line, stamped with the time unless it has one.
fn line(out: &mut dyn Write, mut v: Value) -> std::io::Result<()> {
    if v.get("time").is_none() {
        v["time"] = now_ms().into();
    }
    // One write a line, so that a reader of a shared buffer never sees half of one.
    out.write_all(format!("{v}\n").as_bytes())?;
    out.flush()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
