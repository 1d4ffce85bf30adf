//! The agent's rules file: how often to look, what counts as unhealthy, how to answer it
//! (alert, act, or alert first and act later), and the limits on acting (cool-down, actions
//! per hour). TOML, read with serde; a bad file is refused with the line, column and field of
//! the first thing wrong. This module owns parsing and validation only: evaluation is
//! `engine`'s, the REST calls `observe`'s and `act`'s.
//!
//! ```
//! let rules = weirctl::agent::Rules::parse(r#"
//! interval = "5s"
//! mode = "alert-then-act"
//! alert_first = 2
//! cooldown = "10min"
//!
//! [[rule]]
//! name = "slow-checkpoints-under-backpressure"
//! last_checkpoint_duration = "60s"
//! backpressure = 0.8
//! consecutive = 3
//!
//! [[rule.action]]
//! kind = "savepoint"
//! dir = "/var/weir/savepoints"
//!
//! [[rule.action]]
//! kind = "restart"
//! graph = "main"
//! "#, "rules.toml").unwrap();
//! assert_eq!(rules.rules[0].consecutive, 3);
//!
//! let err = weirctl::agent::Rules::parse("[[rule]]\nname = \"x\"\nbackpressure = 1.5\n", "rules.toml")
//!     .unwrap_err();
//! assert_eq!(err.to_string(),
//!     "rules.toml line 3, column 16, field `backpressure`: a ratio between 0 and 1, got 1.5");
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// What the agent does when a rule triggers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Only alert.
    Alert,
    /// Alert and take the rule's actions.
    Act,
    /// Alert only for the first `alert_first` triggers of a rule, then act.
    AlertThenAct,
}

impl Mode {
    /// The name used in the rules file.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Alert => "alert",
            Mode::Act => "act",
            Mode::AlertThenAct => "alert-then-act",
        }
    }
}

/// The agent's settings and rules.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Rules {
    /// Time between two looks at the job (default 10 s).
    pub interval: Duration,
    /// How long one REST call may take (default 10 s).
    pub request_timeout: Duration,
    /// How long an action may take, a savepoint or a restart (default 10 min).
    pub action_timeout: Duration,
    /// The default mode of every rule (default `alert-then-act`).
    pub mode: Mode,
    /// In `alert-then-act`, the triggers of a rule that only alert (default 2).
    pub alert_first: u32,
    /// After an action, no other action for this long (default 10 min).
    pub cooldown: Duration,
    /// At most this many actions in any hour (default 3).
    pub max_actions_per_hour: u32,
    /// Tries again an action that failed for a reason that may pass (unreachable, busy,
    /// 5xx) this many times (default 2).
    pub retries: u32,
    /// Where alerts go.
    pub alert: AlertTargets,
    /// The rules, at least one.
    pub rules: Vec<Rule>,
}

/// Where alerts go: every trigger, suppression and action outcome is one JSON line.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct AlertTargets {
    /// To the agent's output (default true).
    #[serde(default = "yes")]
    pub stdout: bool,
    /// Appended to this file.
    #[serde(default)]
    pub file: Option<PathBuf>,
    /// POSTed to this `http://` URL (this build has no TLS).
    #[serde(default, deserialize_with = "webhook")]
    pub webhook: Option<String>,
}

impl Default for AlertTargets {
    fn default() -> Self {
        AlertTargets {
            stdout: true,
            file: None,
            webhook: None,
        }
    }
}

/// One rule: its conditions (all must hold), how many violations in a row trigger it, and
/// what it does then.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Rule {
    /// Its name, in every decision it makes.
    pub name: String,
    /// What must hold for a violation.
    pub when: Conditions,
    /// Violations that trigger it (default 3).
    pub consecutive: u32,
    /// A healthy evaluation lowers the violation count by this much (default 1; as much as
    /// `consecutive` makes it "in a row").
    pub decay: u32,
    /// Its mode, if not the agent's.
    pub mode: Option<Mode>,
    /// What it does when it acts, in order; an action that fails stops the ones after it.
    pub actions: Vec<Action>,
}

/// A rule's conditions; those set must all hold for a violation. A condition whose metric
/// the server does not report never holds.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Conditions {
    /// The last checkpoint took longer than this (`lastCheckpointDuration`); a checkpoint
    /// that failed (declined, timed out) counts as slow.
    pub last_checkpoint_duration: Option<Duration>,
    /// The slowest subtask's checkpoint start delay is longer than this
    /// (`checkpointStartDelay`).
    pub checkpoint_start_delay: Option<Duration>,
    /// The barrier alignment took longer than this (`checkpointAlignmentTime`).
    pub checkpoint_alignment_time: Option<Duration>,
    /// The most backpressured subtask of the job is backpressured more than this share of
    /// the time (0 to 1, Flink's backpressure `ratio`).
    pub backpressure: Option<f64>,
    /// At least this many checkpoints failed since the rule's last evaluation.
    pub failed_checkpoints: Option<u64>,
}

impl Conditions {
    /// Whether a condition reads the checkpoint statistics: such a rule is evaluated once
    /// per new checkpoint outcome (completed or failed), not once per look.
    pub fn reads_checkpoints(&self) -> bool {
        self.last_checkpoint_duration.is_some()
            || self.checkpoint_start_delay.is_some()
            || self.checkpoint_alignment_time.is_some()
            || self.failed_checkpoints.is_some()
    }

    fn is_empty(&self) -> bool {
        !self.reads_checkpoints() && self.backpressure.is_none()
    }
}

/// What a rule does when it acts.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
#[non_exhaustive]
pub enum Action {
    /// Takes a savepoint into `dir` and waits for it (the job runs on).
    Savepoint {
        /// Where the savepoint goes.
        dir: String,
    },
    /// Takes a savepoint into `dir`, then stops the job (for a platform that submits it
    /// again, as with Flink).
    Stop {
        /// Where the savepoint goes.
        dir: String,
    },
    /// A fast restart: the job switches to the registered graph `graph` (its own, to
    /// restart as it is) from an in-memory savepoint, keeping its state; Weir only.
    Restart {
        /// The registered graph version.
        graph: String,
        /// Drop the state of operators the graph does not have.
        #[serde(default)]
        allow_dropping_state: bool,
    },
    /// Changes live settings (Flink's option names, e.g.
    /// `execution.checkpointing.unaligned.enabled = true`, `weir.source.rate = 10000`).
    Set {
        /// Name to value.
        #[serde(deserialize_with = "setting_values")]
        settings: BTreeMap<String, String>,
    },
    /// Changes the parallelism of a vertex, or of the whole job.
    Rescale {
        /// The new parallelism.
        parallelism: std::num::NonZeroU32,
        /// The vertex id (default: the job's operators that follow its parallelism).
        #[serde(default)]
        vertex: Option<String>,
    },
}

impl Action {
    /// Its kind, as in the rules file.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Savepoint { .. } => "savepoint",
            Action::Stop { .. } => "stop",
            Action::Restart { .. } => "restart",
            Action::Set { .. } => "set",
            Action::Rescale { .. } => "rescale",
        }
    }
}

/// Why a rules file was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RulesError {
    /// The file cannot be read.
    #[error("cannot read the rules file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid rules.
    #[error("{origin} line {line}, column {column}{}: {message}", field.as_ref().map(|f| format!(", field `{f}`")).unwrap_or_default())]
    Invalid {
        /// The file's name.
        origin: String,
        /// 1-based.
        line: usize,
        /// 1-based.
        column: usize,
        /// The field the line sets, when there is one.
        field: Option<String>,
        /// What is wrong.
        message: String,
    },
}

impl Default for Rules {
    /// The seed's rule, alert only: checkpoints slower than 60 s three times in a row while
    /// backpressure is above 80 %.
    fn default() -> Self {
        Rules {
            interval: Duration::from_secs(10),
            request_timeout: Duration::from_secs(10),
            action_timeout: Duration::from_secs(600),
            mode: Mode::Alert,
            alert_first: 2,
            cooldown: Duration::from_secs(600),
            max_actions_per_hour: 3,
            retries: 2,
            alert: AlertTargets::default(),
            rules: vec![Rule {
                name: "slow-checkpoints-under-backpressure".into(),
                when: Conditions {
                    last_checkpoint_duration: Some(Duration::from_secs(60)),
                    backpressure: Some(0.8),
                    ..Conditions::default()
                },
                consecutive: 3,
                decay: 1,
                mode: None,
                actions: Vec::new(),
            }],
        }
    }
}

impl Rules {
    /// Reads and checks the rules file at `path`.
    pub fn from_file(path: &Path) -> Result<Rules, RulesError> {
        let text = std::fs::read_to_string(path).map_err(|source| RulesError::Read {
            path: path.to_owned(),
            source,
        })?;
        Rules::parse(&text, &path.display().to_string())
    }

    /// Reads and checks rules from `text`; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Rules, RulesError> {
        let at = |offset: usize, message: String| invalid(text, origin, offset, message);
        let raw: RawRules = toml::from_str(text)
            .map_err(|e| at(e.span().map_or(0, |s| s.start), e.message().to_owned()))?;
        let d = Rules::default();
        let mode = raw.mode.unwrap_or(Mode::AlertThenAct);
        if raw.rules.is_empty() {
            return Err(at(
                text.len(),
                "no [[rule]]: a rules file needs at least one rule".into(),
            ));
        }
        let mut rules = Vec::with_capacity(raw.rules.len());
        for spanned in raw.rules {
            let start = spanned.span().start;
            let r = spanned.into_inner();
            let rule = Rule {
                when: Conditions {
                    last_checkpoint_duration: r.last_checkpoint_duration.map(|d| d.0),
                    checkpoint_start_delay: r.checkpoint_start_delay.map(|d| d.0),
                    checkpoint_alignment_time: r.checkpoint_alignment_time.map(|d| d.0),
                    backpressure: r.backpressure.map(|b| b.0),
                    failed_checkpoints: r.failed_checkpoints,
                },
                name: r.name,
                consecutive: r.consecutive.map_or(3, std::num::NonZeroU32::get),
                decay: r.decay.unwrap_or(1),
                mode: r.mode,
                actions: r.action,
            };
            if rule.when.is_empty() {
                return Err(at(start, format!(
                    "rule `{}` has no condition: set at least one of last_checkpoint_duration, checkpoint_start_delay, checkpoint_alignment_time, backpressure, failed_checkpoints",
                    rule.name
                )));
            }
            let acts = rule.mode.unwrap_or(mode) != Mode::Alert;
            if acts && rule.actions.is_empty() {
                return Err(at(start, format!(
                    "rule `{}` acts (mode {}) but has no [[rule.action]]: add one, or set mode = \"alert\"",
                    rule.name,
                    rule.mode.unwrap_or(mode).name()
                )));
            }
            if rules.iter().any(|o: &Rule| o.name == rule.name) {
                return Err(at(start, format!("two rules are named `{}`", rule.name)));
            }
            rules.push(rule);
        }
        Ok(Rules {
            interval: raw.interval.map_or(d.interval, |d| d.0),
            request_timeout: raw.request_timeout.map_or(d.request_timeout, |d| d.0),
            action_timeout: raw.action_timeout.map_or(d.action_timeout, |d| d.0),
            mode,
            alert_first: raw.alert_first.unwrap_or(d.alert_first),
            cooldown: raw.cooldown.map_or(d.cooldown, |d| d.0),
            max_actions_per_hour: raw.max_actions_per_hour.unwrap_or(d.max_actions_per_hour),
            retries: raw.retries.unwrap_or(d.retries),
            alert: raw.alert.unwrap_or_default(),
            rules,
        })
    }

    /// The mode `rule` runs in.
    pub fn mode_of(&self, rule: &Rule) -> Mode {
        rule.mode.unwrap_or(self.mode)
    }
}

fn invalid(text: &str, origin: &str, offset: usize, message: String) -> RulesError {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    let line_text = text[line_start..].lines().next().unwrap_or("");
    // The key the line sets (`key = value`), unless it is a table header.
    let field = line_text
        .split_once('=')
        .filter(|_| !line_text.trim_start().starts_with('['))
        .map(|(k, _)| k.trim().trim_matches('"').to_owned())
        .filter(|k| !k.is_empty());
    RulesError::Invalid {
        origin: origin.to_owned(),
        line,
        column,
        field,
        message,
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRules {
    interval: Option<Dur>,
    request_timeout: Option<Dur>,
    action_timeout: Option<Dur>,
    mode: Option<Mode>,
    alert_first: Option<u32>,
    cooldown: Option<Dur>,
    max_actions_per_hour: Option<u32>,
    retries: Option<u32>,
    alert: Option<AlertTargets>,
    #[serde(default, rename = "rule")]
    rules: Vec<toml::Spanned<RawRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: String,
    last_checkpoint_duration: Option<Dur>,
    checkpoint_start_delay: Option<Dur>,
    checkpoint_alignment_time: Option<Dur>,
    backpressure: Option<Ratio>,
    failed_checkpoints: Option<u64>,
    consecutive: Option<std::num::NonZeroU32>,
    decay: Option<u32>,
    mode: Option<Mode>,
    #[serde(default)]
    action: Vec<Action>,
}

/// A duration: a string with a unit (`500ms`, `30s`, `10min`, `1h`) or a number of ms.
struct Dur(Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Ms(u64),
            Text(String),
        }
        match Raw::deserialize(d).map_err(|_| {
            serde::de::Error::custom("a duration: a string with a unit (\"500ms\", \"30s\", \"10min\") or a number of milliseconds")
        })? {
            Raw::Ms(ms) => Ok(Dur(Duration::from_millis(ms))),
            Raw::Text(t) => weir::settings::parse_duration(&t)
                .map(Dur)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// A share between 0 and 1.
struct Ratio(f64);

impl<'de> Deserialize<'de> for Ratio {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if (0.0..=1.0).contains(&v) {
            Ok(Ratio(v))
        } else {
            Err(serde::de::Error::custom(format!(
                "a ratio between 0 and 1, got {v}"
            )))
        }
    }
}

fn yes() -> bool {
    true
}

fn webhook<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let url = String::deserialize(d)?;
    if url.starts_with("http://") {
        Ok(Some(url))
    } else {
        Err(serde::de::Error::custom(format!(
            "an http:// URL (this build has no TLS), got `{url}`"
        )))
    }
}

/// Setting values as the REST API takes them: strings; numbers and booleans are written out.
fn setting_values<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum V {
        S(String),
        B(bool),
        I(i64),
        F(f64),
    }
    let raw = BTreeMap::<String, V>::deserialize(d)?;
    if raw.is_empty() {
        return Err(serde::de::Error::custom(
            "at least one setting (e.g. { \"execution.checkpointing.unaligned.enabled\" = true })",
        ));
    }
    Ok(raw
        .into_iter()
        .map(|(k, v)| {
            let v = match v {
                V::S(s) => s,
                V::B(b) => b.to_string(),
                V::I(i) => i.to_string(),
                V::F(f) => f.to_string(),
            };
            (k, v)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        Rules::parse(text, "r.toml").unwrap_err().to_string()
    }

    const RULE: &str = "[[rule]]\nname = \"slow\"\nlast_checkpoint_duration = \"2s\"\n";

    #[test]
    fn a_full_file_reads_with_defaults_for_what_it_leaves_out() {
        let r = Rules::parse(
            r#"
interval = 500
mode = "act"
cooldown = "1h"

[alert]
file = "/tmp/alerts.jsonl"
webhook = "http://127.0.0.1:9/hook"

[[rule]]
name = "slow"
last_checkpoint_duration = "2s"
backpressure = 1
decay = 3

[[rule.action]]
kind = "set"
settings = { "execution.checkpointing.unaligned.enabled" = true, "weir.source.rate" = 5000 }

[[rule.action]]
kind = "rescale"
parallelism = 4
vertex = "abc"

[[rule]]
name = "failing"
failed_checkpoints = 2
mode = "alert"
"#,
            "r.toml",
        )
        .unwrap();
        assert_eq!(r.interval, Duration::from_millis(500));
        assert_eq!(r.mode, Mode::Act);
        assert_eq!(r.cooldown, Duration::from_secs(3600));
        assert_eq!(r.alert_first, 2);
        assert_eq!(r.max_actions_per_hour, 3);
        assert!(r.alert.stdout);
        assert_eq!(r.alert.webhook.as_deref(), Some("http://127.0.0.1:9/hook"));
        let slow = &r.rules[0];
        assert_eq!(slow.when.backpressure, Some(1.0));
        assert_eq!(slow.consecutive, 3);
        assert_eq!(slow.decay, 3);
        assert_eq!(
            slow.actions[0],
            Action::Set {
                settings: [
                    (
                        "execution.checkpointing.unaligned.enabled".into(),
                        "true".into()
                    ),
                    ("weir.source.rate".into(), "5000".into())
                ]
                .into()
            }
        );
        assert_eq!(slow.actions[1].kind(), "rescale");
        assert_eq!(r.mode_of(&r.rules[1]), Mode::Alert);
        assert!(r.rules[1].when.reads_checkpoints());
    }

    #[test]
    fn a_bad_file_names_the_line_and_the_field() {
        assert_eq!(
            err(&format!("{RULE}treshold = 3\n")),
            "r.toml line 4, column 1, field `treshold`: unknown field `treshold`, expected one of `name`, `last_checkpoint_duration`, `checkpoint_start_delay`, `checkpoint_alignment_time`, `backpressure`, `failed_checkpoints`, `consecutive`, `decay`, `mode`, `action`"
        );
        let e = err(&format!("mode = \"alert\"\n{RULE}consecutive = 0\n"));
        assert!(
            e.starts_with("r.toml line 5, column 15, field `consecutive`:"),
            "{e}"
        );
        let e = err("interval = \"soon\"\n");
        assert!(
            e.starts_with("r.toml line 1, column 12, field `interval`: `soon` is not a duration"),
            "{e}"
        );
        let e = err(&format!("mode = \"sometimes\"\n{RULE}"));
        assert!(
            e.contains("line 1") && e.contains("field `mode`") && e.contains("alert-then-act"),
            "{e}"
        );
        let e = err(&format!("{RULE}[[rule.action]]\nkind = \"reboot\"\n"));
        assert!(
            e.contains("line 5") && e.contains("field `kind`") && e.contains("reboot"),
            "{e}"
        );
        let e = err(&format!(
            "{RULE}[[rule.action]]\nkind = \"savepoint\"\ndirectory = \"/x\"\n"
        ));
        assert!(e.contains("directory"), "{e}");
        let e = err("[alert]\nwebhook = \"https://x\"\n");
        assert!(
            e.contains("field `webhook`") && e.contains("http://"),
            "{e}"
        );
        let e = err("interval = \"5s\"\n[[rule]\n");
        assert!(e.starts_with("r.toml line 2"), "{e}");
    }

    #[test]
    fn a_rule_must_say_when_and_what() {
        let e = err("mode = \"alert\"\n[[rule]]\nname = \"x\"\n");
        assert!(
            e.starts_with("r.toml line 2") && e.contains("has no condition"),
            "{e}"
        );
        let e = err(RULE);
        assert!(
            e.starts_with("r.toml line 1") && e.contains("no [[rule.action]]"),
            "{e}"
        );
        let e = err("mode = \"alert\"\n");
        assert!(e.contains("no [[rule]]"), "{e}");
        let e = err(&format!("mode = \"alert\"\n{RULE}{RULE}"));
        assert!(e.contains("two rules are named `slow`"), "{e}");
        let e = err(&format!(
            "mode = \"alert\"\n{RULE}[[rule]]\nlast_checkpoint_duration = 1\n"
        ));
        assert!(e.contains("missing field `name`"), "{e}");
    }

    #[test]
    fn the_default_is_the_seeds_rule_alert_only() {
        let d = Rules::default();
        assert_eq!(d.mode, Mode::Alert);
        assert_eq!(d.rules[0].consecutive, 3);
        assert_eq!(d.rules[0].when.backpressure, Some(0.8));
    }
}
