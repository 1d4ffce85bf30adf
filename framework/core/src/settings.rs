//! Live settings: the names a running job's settings are changed by (Flink's option names
//! where they exist), how each value is read and checked, which of them apply live and which
//! need a fast restart, and the record of every change.
//!
//! A change request is a list of `(name, value)` pairs. [`parse`] reads every pair before
//! anything changes, so one bad value refuses the whole request and names the setting; the
//! controller then applies what is live (checkpoint settings at the next checkpoint trigger,
//! alignment settings in each subtask between two checkpoints, operator `#[weir(config)]`
//! fields through system mail between batches) and records the change in the job's history.
//! This module owns names, values and records; it does not apply anything (`controller`).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::checkpoint::{CheckpointConfig, CheckpointMode};

/// `execution.checkpointing.interval`: a duration, or `off` for checkpoints only on demand.
pub const INTERVAL: &str = "execution.checkpointing.interval";
/// `execution.checkpointing.timeout`.
pub const TIMEOUT: &str = "execution.checkpointing.timeout";
/// `execution.checkpointing.min-pause`.
pub const MIN_PAUSE: &str = "execution.checkpointing.min-pause";
/// `execution.checkpointing.mode`: `EXACTLY_ONCE` or `AT_LEAST_ONCE`.
pub const MODE: &str = "execution.checkpointing.mode";
/// `execution.checkpointing.unaligned.enabled`: `true` or `false`.
pub const UNALIGNED: &str = "execution.checkpointing.unaligned.enabled";
/// `execution.checkpointing.aligned-checkpoint-timeout`: a duration, or `off`.
pub const ALIGNED_TIMEOUT: &str = "execution.checkpointing.aligned-checkpoint-timeout";
/// `execution.checkpointing.tolerable-failed-checkpoints`.
pub const TOLERABLE: &str = "execution.checkpointing.tolerable-failed-checkpoints";
/// `execution.checkpointing.max-concurrent-checkpoints`.
pub const MAX_CONCURRENT: &str = "execution.checkpointing.max-concurrent-checkpoints";
/// `weir.source.rate`: the sources' total rate in records per second, or `off`.
pub const SOURCE_RATE: &str = "weir.source.rate";
/// `weir.rate-control.enabled`: `true` or `false`: the sources' rate follows the PID estimator.
pub const RATE_ENABLED: &str = "weir.rate-control.enabled";
/// `weir.rate-control.initial-rate`: records/s before the first estimate, or `none`.
pub const RATE_INITIAL: &str = "weir.rate-control.initial-rate";
/// `weir.rate-control.min-rate`: the lowest rate an estimate gives, records/s.
pub const RATE_MIN: &str = "weir.rate-control.min-rate";
/// `weir.rate-control.max-rate`: the highest rate an estimate gives, records/s, or `none`.
pub const RATE_MAX: &str = "weir.rate-control.max-rate";
/// `weir.rate-control.pid.proportional`: the PID estimator's proportional gain.
pub const RATE_P: &str = "weir.rate-control.pid.proportional";
/// `weir.rate-control.pid.integral`: its integral gain.
pub const RATE_I: &str = "weir.rate-control.pid.integral";
/// `weir.rate-control.pid.derivative`: its derivative gain.
pub const RATE_D: &str = "weir.rate-control.pid.derivative";
/// `weir.rate-control.update-interval`: how often a new rate is estimated.
pub const RATE_INTERVAL: &str = "weir.rate-control.update-interval";
/// `operator.<uid>.<key>`: a `#[weir(config)]` field of operator `<uid>`.
pub const OPERATOR_PREFIX: &str = "operator.";
/// `backup.<uid>.heartbeat-interval` and `backup.<uid>.heartbeat-timeout`: the buffer-queue
/// backup policy of operator `<uid>`.
pub const BACKUP_PREFIX: &str = "backup.";

/// Settings that exist but change the job graph or its runtime: they need a fast restart.
const NOT_LIVE: &[(&str, &str)] = &[
    (
        "parallelism.default",
        "the parallelism changes by a live rescale (PATCH /jobs/{id}/parallelism), not a setting",
    ),
    (
        "pipeline.max-parallelism",
        "the number of key groups is fixed for the life of the job's state: it needs a fast restart from a savepoint",
    ),
    (
        "execution.checkpointing.dir",
        "the checkpoint directory is where the job's restore point lives: it needs a fast restart",
    ),
    (
        "pipeline.operator-chaining",
        "chaining changes the job graph: it needs a fast restart",
    ),
];

/// Every live setting name (operator fields are `operator.<uid>.<key>`).
pub const LIVE: &[&str] = &[
    INTERVAL,
    TIMEOUT,
    MIN_PAUSE,
    MODE,
    UNALIGNED,
    ALIGNED_TIMEOUT,
    TOLERABLE,
    MAX_CONCURRENT,
    SOURCE_RATE,
    RATE_ENABLED,
    RATE_INITIAL,
    RATE_MIN,
    RATE_MAX,
    RATE_P,
    RATE_I,
    RATE_D,
    RATE_INTERVAL,
];

/// A setting change that cannot be applied: the request changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SettingError {
    /// No setting has this name.
    #[error("unknown setting `{name}` (live settings: {}, operator.<uid>.<key> and backup.<uid>.heartbeat-interval|heartbeat-timeout)", LIVE.join(", "))]
    Unknown {
        /// The name given.
        name: String,
    },
    /// The value does not fit the setting.
    #[error("setting `{name}`: {message}")]
    BadValue {
        /// The setting.
        name: String,
        /// What is wrong with the value.
        message: String,
    },
    /// The setting exists but cannot change while the job runs.
    #[error("setting `{name}` does not apply live: {why}")]
    NotLive {
        /// The setting.
        name: String,
        /// Why, and what to do instead.
        why: String,
    },
    /// An operator refused its field's new value (or has no such field).
    #[error("setting `{name}`: {message}")]
    Operator {
        /// The setting.
        name: String,
        /// The operator's answer.
        message: String,
    },
    /// The job cannot take the change now (it is restarting, rescaling, or has ended).
    #[error("settings cannot change now: {0}")]
    Busy(String),
}

/// How a change would apply (`POST /jobs/{id}/config/plan`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Applies {
    /// Live, with no restart, at this point.
    Live {
        /// When it takes effect.
        at: String,
    },
    /// Only by a fast restart (or another call), for this reason.
    FastRestart {
        /// Why.
        why: String,
    },
}

/// One change of a plan: the setting, its value now and the one asked for, how it applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedChange {
    /// The setting.
    pub name: String,
    /// Its value now (`None`: not known, e.g. an operator field never changed).
    pub old: Option<String>,
    /// The value asked for.
    pub new: String,
    /// How it applies.
    pub applies: Applies,
}

/// One entry of a job's settings history.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChangeRecord {
    /// When, ms since the Unix epoch.
    pub at_ms: u64,
    /// Who asked (the REST token's id, `rust` for the Rust API, `rollback`).
    pub caller: String,
    /// (setting, old value, new value).
    pub changes: Vec<(String, Option<String>, String)>,
    /// `applied`, or why not.
    pub outcome: String,
}

/// A change of one field of [`RateControlConfig`](crate::rate::RateControlConfig).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum RateChange {
    Enabled(bool),
    Initial(Option<f64>),
    Min(f64),
    Max(Option<f64>),
    Proportional(f64),
    Integral(f64),
    Derivative(f64),
    UpdateInterval(Duration),
}

impl RateChange {
    /// Applies the change to `c`.
    pub(crate) fn apply(self, c: &mut crate::rate::RateControlConfig) {
        match self {
            RateChange::Enabled(e) => c.enabled = e,
            RateChange::Initial(r) => c.initial_rate = r,
            RateChange::Min(r) => c.min_rate = r,
            RateChange::Max(r) => c.max_rate = r,
            RateChange::Proportional(g) => c.proportional = g,
            RateChange::Integral(g) => c.integral = g,
            RateChange::Derivative(g) => c.derivative = g,
            RateChange::UpdateInterval(d) => c.update_interval = d,
        }
    }
}

/// The setting that names a field of [`RateControlConfig`](crate::rate::RateControlConfig)
/// (as [`RateConfigError::field`](crate::rate::RateConfigError) names it).
pub(crate) fn rate_setting(field: &str) -> &'static str {
    match field {
        "initial_rate" => RATE_INITIAL,
        "min_rate" => RATE_MIN,
        "max_rate" => RATE_MAX,
        "proportional" => RATE_P,
        "integral" => RATE_I,
        "derivative" => RATE_D,
        "update_interval" => RATE_INTERVAL,
        _ => RATE_ENABLED,
    }
}

/// Whether `name` is one of the rate settings (`weir.source.rate`, `weir.rate-control.*`).
pub(crate) fn is_rate(name: &str) -> bool {
    name == SOURCE_RATE || name.starts_with("weir.rate-control.")
}

/// The live rate settings of `c`, by name, as their values are written.
pub(crate) fn rate_values(c: &crate::rate::RateControlConfig) -> BTreeMap<String, String> {
    let rate = |r: Option<f64>| r.map_or("none".into(), |r| r.to_string());
    let mut m = BTreeMap::new();
    m.insert(
        SOURCE_RATE.into(),
        match (c.enabled, c.max_rate) {
            (true, Some(r)) if c.min_rate == r => r.to_string(),
            (true, _) => "controlled".into(),
            _ => "off".into(),
        },
    );
    m.insert(RATE_ENABLED.into(), c.enabled.to_string());
    m.insert(RATE_INITIAL.into(), rate(c.initial_rate));
    m.insert(RATE_MIN.into(), c.min_rate.to_string());
    m.insert(RATE_MAX.into(), rate(c.max_rate));
    m.insert(RATE_P.into(), c.proportional.to_string());
    m.insert(RATE_I.into(), c.integral.to_string());
    m.insert(RATE_D.into(), c.derivative.to_string());
    m.insert(RATE_INTERVAL.into(), format_duration(c.update_interval));
    m
}

/// A parsed setting.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Parsed {
    Interval(Option<Duration>),
    Timeout(Duration),
    MinPause(Duration),
    Mode(CheckpointMode),
    Unaligned(bool),
    AlignedTimeout(Option<Duration>),
    Tolerable(u32),
    MaxConcurrent(usize),
    SourceRate(Option<f64>),
    /// One field of the rate controller's configuration.
    Rate(RateChange),
    Operator {
        uid: String,
        key: String,
    },
    /// A backed-up operator's heartbeat interval or timeout.
    Backup {
        uid: String,
        timeout: bool,
        value: Duration,
    },
}

impl Parsed {
    /// When it takes effect.
    pub(crate) fn takes_effect(&self) -> &'static str {
        match self {
            Parsed::Interval(_) | Parsed::MinPause(_) | Parsed::MaxConcurrent(_) => {
                "at the next checkpoint trigger"
            }
            Parsed::Timeout(_) | Parsed::Tolerable(_) => "for checkpoints triggered from now on",
            Parsed::Mode(_) | Parsed::Unaligned(_) | Parsed::AlignedTimeout(_) => {
                "in each subtask at its next checkpoint (one in progress finishes as it began)"
            }
            Parsed::SourceRate(_) => "at once, in every source subtask",
            Parsed::Rate(_) => "at once: the rate controller starts over with it (keeping the current rate until its first estimate)",
            Parsed::Backup { .. } => "at the next heartbeat check of each backed-up subtask",
            Parsed::Operator { .. } => "at once, between two batches of every subtask",
        }
    }
}

/// Reads one setting; nothing is applied.
pub(crate) fn parse(name: &str, value: &str) -> Result<Parsed, SettingError> {
    let s = Setting {
        name,
        value: value.trim(),
    };
    if let Some(parsed) = checkpoint_setting(&s)? {
        return Ok(parsed);
    }
    if let Some(parsed) = rate_control_setting(&s)? {
        return Ok(parsed);
    }
    prefixed_setting(&s)
}

/// A setting being read: its name and its trimmed value.
struct Setting<'a> {
    name: &'a str,
    value: &'a str,
}

impl Setting<'_> {
    /// The value is refused, for `message`.
    fn bad(&self, message: String) -> SettingError {
        SettingError::BadValue {
            name: self.name.to_owned(),
            message,
        }
    }

    /// The value as a duration.
    fn duration(&self) -> Result<Duration, SettingError> {
        parse_duration(self.value).map_err(|m| self.bad(m))
    }

    /// The value as a duration, or `off` / `none`.
    fn optional(&self) -> Result<Option<Duration>, SettingError> {
        let v = self.value;
        if v.eq_ignore_ascii_case("off") || v.eq_ignore_ascii_case("none") {
            Ok(None)
        } else {
            self.duration().map(Some)
        }
    }

    /// `d`, unless it is zero.
    fn positive(&self, d: Option<Duration>) -> Result<Option<Duration>, SettingError> {
        match d {
            Some(d) if d.is_zero() => Err(self.bad("must be above zero (or `off`)".into())),
            d => Ok(d),
        }
    }
}

/// A checkpoint setting (`checkpoint.*`); `None` if `s` names none.
fn checkpoint_setting(s: &Setting<'_>) -> Result<Option<Parsed>, SettingError> {
    let (name, value) = (s.name, s.value);
    let bad = |message: String| s.bad(message);
    Ok(Some(match name {
        INTERVAL => Parsed::Interval(s.positive(s.optional()?)?),
        TIMEOUT => match s.duration()? {
            d if d.is_zero() => return Err(bad("must be above zero".into())),
            d => Parsed::Timeout(d),
        },
        MIN_PAUSE => Parsed::MinPause(s.duration()?),
        MODE => Parsed::Mode(
            match value.to_ascii_uppercase().replace('-', "_").as_str() {
                "EXACTLY_ONCE" => CheckpointMode::ExactlyOnce,
                "AT_LEAST_ONCE" => CheckpointMode::AtLeastOnce,
                _ => {
                    return Err(bad(format!(
                        "must be EXACTLY_ONCE or AT_LEAST_ONCE, got `{value}`"
                    )))
                }
            },
        ),
        UNALIGNED => Parsed::Unaligned(match value {
            "true" => true,
            "false" => false,
            _ => return Err(bad(format!("must be true or false, got `{value}`"))),
        }),
        ALIGNED_TIMEOUT => Parsed::AlignedTimeout(s.positive(s.optional()?)?),
        TOLERABLE => Parsed::Tolerable(
            value
                .parse()
                .map_err(|_| bad(format!("must be a whole number ≥ 0, got `{value}`")))?,
        ),
        MAX_CONCURRENT => match value.parse::<usize>() {
            Ok(n) if n > 0 => Parsed::MaxConcurrent(n),
            _ => return Err(bad(format!("must be a whole number ≥ 1, got `{value}`"))),
        },
        _ => return Ok(None),
    }))
}

/// A source rate or rate-controller setting; `None` if `s` names none.
fn rate_control_setting(s: &Setting<'_>) -> Result<Option<Parsed>, SettingError> {
    let (name, value) = (s.name, s.value);
    let bad = |message: String| s.bad(message);
    Ok(Some(match name {
        SOURCE_RATE => {
            if value.eq_ignore_ascii_case("off") {
                Parsed::SourceRate(None)
            } else {
                match value.parse::<f64>() {
                    Ok(r) if r.is_finite() && r > 0.0 => Parsed::SourceRate(Some(r)),
                    _ => {
                        return Err(bad(format!(
                            "must be records per second above zero, or `off`, got `{value}`"
                        )))
                    }
                }
            }
        }
        RATE_ENABLED => Parsed::Rate(RateChange::Enabled(match value {
            "true" => true,
            "false" => false,
            _ => return Err(bad(format!("must be true or false, got `{value}`"))),
        })),
        RATE_INITIAL => Parsed::Rate(RateChange::Initial(optional_rate(value).map_err(bad)?)),
        RATE_MAX => Parsed::Rate(RateChange::Max(optional_rate(value).map_err(bad)?)),
        RATE_MIN => Parsed::Rate(RateChange::Min(
            optional_rate(value)
                .map_err(bad)?
                .ok_or_else(|| bad("must be records per second above zero".into()))?,
        )),
        RATE_P | RATE_I | RATE_D => {
            let g = match value.parse::<f64>() {
                Ok(g) if g.is_finite() && g >= 0.0 => g,
                _ => return Err(bad(format!("must be a number ≥ 0, got `{value}`"))),
            };
            Parsed::Rate(match name {
                RATE_P => RateChange::Proportional(g),
                RATE_I => RateChange::Integral(g),
                _ => RateChange::Derivative(g),
            })
        }
        RATE_INTERVAL => match s.duration()? {
            d if d < Duration::from_millis(1) => return Err(bad("must be at least 1 ms".into())),
            d => Parsed::Rate(RateChange::UpdateInterval(d)),
        },
        _ => return Ok(None),
    }))
}

/// A setting of one backed-up operator (`backup.<uid>.*`) or one operator
/// (`operator.<uid>.<key>`); otherwise a setting that cannot change while the job runs, or
/// an unknown one.
fn prefixed_setting(s: &Setting<'_>) -> Result<Parsed, SettingError> {
    let name = s.name;
    let bad = |message: String| s.bad(message);
    Ok(if let Some(rest) = name.strip_prefix(BACKUP_PREFIX) {
        let (uid, timeout) = match rest.rsplit_once('.') {
            Some((uid, "heartbeat-timeout")) if !uid.is_empty() => (uid, true),
            Some((uid, "heartbeat-interval")) if !uid.is_empty() => (uid, false),
            _ => {
                return Err(bad(
                    "backup settings are `backup.<uid>.heartbeat-interval` and `backup.<uid>.heartbeat-timeout`".into(),
                ))
            }
        };
        match s.duration()? {
            d if d.is_zero() => return Err(bad("must be above zero".into())),
            d => Parsed::Backup {
                uid: uid.to_owned(),
                timeout,
                value: d,
            },
        }
    } else if let Some(rest) = name.strip_prefix(OPERATOR_PREFIX) {
        // Keys may have dots (`cache.size`); a uid with dots is found by the job,
        // which knows its uids (`resolve_operator`).
        match rest.split_once('.') {
            Some((uid, key)) if !uid.is_empty() && !key.is_empty() => Parsed::Operator {
                uid: uid.to_owned(),
                key: key.to_owned(),
            },
            _ => return Err(bad("operator settings are `operator.<uid>.<key>`".into())),
        }
    } else if let Some((_, why)) = NOT_LIVE.iter().find(|(n, _)| *n == name) {
        return Err(SettingError::NotLive {
            name: name.to_owned(),
            why: (*why).to_owned(),
        });
    } else {
        return Err(SettingError::Unknown {
            name: name.to_owned(),
        });
    })
}

/// The operator and key of `operator.<uid>.<key>` given the job's operator uids: the longest
/// uid the path begins with (uids and keys may both have dots), else up to the first dot.
pub(crate) fn resolve_operator<'a>(
    uid: &str,
    key: &str,
    uids: impl IntoIterator<Item = &'a str>,
) -> (String, String) {
    let path = format!("{uid}.{key}");
    uids.into_iter()
        .filter(|u| {
            path.len() > u.len() + 1 && path.starts_with(u) && path.as_bytes()[u.len()] == b'.'
        })
        .max_by_key(|u| u.len())
        .map_or_else(
            || (uid.to_owned(), key.to_owned()),
            |u| (u.to_owned(), path[u.len() + 1..].to_owned()),
        )
}

/// Records per second above zero, or `none`.
fn optional_rate(value: &str) -> Result<Option<f64>, String> {
    if value.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    match value.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(Some(r)),
        _ => Err(format!(
            "must be records per second above zero, or `none`, got `{value}`"
        )),
    }
}

/// The plan of one requested change: live (and when), or why it needs a fast restart. An
/// unknown name or a bad value is an error, as it would be when applied.
pub(crate) fn plan_one(
    name: &str,
    value: &str,
    current: &BTreeMap<String, String>,
) -> Result<PlannedChange, SettingError> {
    let applies = match parse(name, value) {
        Ok(p) => Applies::Live {
            at: p.takes_effect().to_owned(),
        },
        Err(SettingError::NotLive { why, .. }) => Applies::FastRestart { why },
        Err(e) => return Err(e),
    };
    Ok(PlannedChange {
        name: name.to_owned(),
        old: current.get(name).cloned(),
        new: value.to_owned(),
        applies,
    })
}

/// The live checkpoint settings of `c`, by name, as their values are written.
pub(crate) fn checkpoint_values(c: &CheckpointConfig) -> BTreeMap<String, String> {
    let d = |d: Duration| format_duration(d);
    let mut m = BTreeMap::new();
    m.insert(INTERVAL.into(), c.interval.map_or("off".into(), d));
    m.insert(TIMEOUT.into(), d(c.timeout));
    m.insert(MIN_PAUSE.into(), d(c.min_pause));
    m.insert(
        MODE.into(),
        match c.mode {
            CheckpointMode::ExactlyOnce => "EXACTLY_ONCE".into(),
            CheckpointMode::AtLeastOnce => "AT_LEAST_ONCE".into(),
        },
    );
    m.insert(UNALIGNED.into(), c.unaligned.to_string());
    m.insert(
        ALIGNED_TIMEOUT.into(),
        c.aligned_checkpoint_timeout.map_or("off".into(), d),
    );
    m.insert(TOLERABLE.into(), c.tolerable_failed_checkpoints.to_string());
    m.insert(MAX_CONCURRENT.into(), c.max_concurrent.to_string());
    m
}

/// A duration as Flink writes them: `100ms`, `1s`, `2min`, `1h`, a bare number is ms.
///
/// ```
/// # use std::time::Duration;
/// assert_eq!(weir::settings::parse_duration("250 ms"), Ok(Duration::from_millis(250)));
/// assert_eq!(weir::settings::parse_duration("2min"), Ok(Duration::from_secs(120)));
/// assert!(weir::settings::parse_duration("soon").is_err());
/// ```
pub fn parse_duration(v: &str) -> Result<Duration, String> {
    let v = v.trim();
    let split = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let (num, unit) = (v[..split].trim(), v[split..].trim());
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{v}` is not a duration (e.g. 100ms, 1s, 2min)"))?;
    let ms = match unit.to_ascii_lowercase().as_str() {
        "" | "ms" | "milli" | "millis" | "milliseconds" => n,
        "s" | "sec" | "secs" | "second" | "seconds" => n * 1e3,
        "m" | "min" | "mins" | "minute" | "minutes" => n * 60e3,
        "h" | "hour" | "hours" => n * 3_600e3,
        "us" | "µs" | "micros" => n / 1e3,
        other => return Err(format!("`{other}` is not a unit of time (ms, s, min, h)")),
    };
    if !ms.is_finite() || !(0.0..=1e15).contains(&ms) {
        return Err(format!("`{v}` is out of range"));
    }
    Ok(Duration::from_micros((ms * 1e3).round() as u64))
}

/// A duration the way [`parse_duration`] reads it back.
pub(crate) fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if !d.as_micros().is_multiple_of(1000) {
        format!("{}us", d.as_micros())
    } else if !ms.is_multiple_of(1000) || ms == 0 {
        format!("{ms}ms")
    } else {
        format!("{}s", ms / 1000)
    }
}

/// What [`JobMonitor::rollback_settings`](crate::JobMonitor::rollback_settings) did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RollbackReport {
    /// The changes made.
    pub applied: Vec<PlannedChange>,
    /// Settings changed since the last checkpoint with no earlier value known.
    pub kept: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bad_value_names_its_setting() {
        for (name, value) in [
            (INTERVAL, "0ms"),
            (INTERVAL, "fast"),
            (TIMEOUT, "0"),
            (MODE, "SOMETIMES"),
            (UNALIGNED, "yes"),
            (TOLERABLE, "-1"),
            (MAX_CONCURRENT, "0"),
            (SOURCE_RATE, "-5"),
            (SOURCE_RATE, "NaN"),
            ("operator.x", "1"),
        ] {
            let e = parse(name, value).unwrap_err();
            assert!(e.to_string().contains(name), "{name}={value}: {e}");
        }
        assert!(matches!(
            parse("no.such.setting", "1"),
            Err(SettingError::Unknown { .. })
        ));
        assert!(matches!(
            parse("pipeline.max-parallelism", "256"),
            Err(SettingError::NotLive { .. })
        ));
    }

    #[test]
    fn values_read_back_as_written() {
        let c = CheckpointConfig {
            interval: Some(Duration::from_millis(1500)),
            ..CheckpointConfig::default()
        };
        for (name, value) in checkpoint_values(&c) {
            parse(&name, &value).unwrap_or_else(|e| panic!("{name}={value}: {e}"));
        }
        assert_eq!(
            parse(INTERVAL, "1500ms"),
            Ok(Parsed::Interval(Some(Duration::from_millis(1500))))
        );
        assert_eq!(parse(INTERVAL, "off"), Ok(Parsed::Interval(None)));
        assert_eq!(
            parse("operator.rules.threshold", "7"),
            Ok(Parsed::Operator {
                uid: "rules".into(),
                key: "threshold".into()
            })
        );
        assert_eq!(format_duration(Duration::from_millis(100)), "100ms");
        assert_eq!(format_duration(Duration::from_secs(2)), "2s");
    }

    #[test]
    fn an_operator_setting_finds_its_uid_when_keys_or_uids_have_dots() {
        let uids = ["enrich", "rules.v2", "rules"];
        let r = |path: &str| {
            let Ok(Parsed::Operator { uid, key }) = parse(&format!("operator.{path}"), "1") else {
                panic!("{path}");
            };
            resolve_operator(&uid, &key, uids)
        };
        assert_eq!(
            r("enrich.cache.size"),
            ("enrich".into(), "cache.size".into())
        );
        assert_eq!(
            r("rules.v2.threshold"),
            ("rules.v2".into(), "threshold".into())
        );
        assert_eq!(r("rules.threshold"), ("rules".into(), "threshold".into()));
        assert_eq!(r("nobody.key.x"), ("nobody".into(), "key.x".into()));
    }

    #[test]
    fn a_plan_says_live_or_fast_restart_and_why() {
        let current = BTreeMap::from([(INTERVAL.to_string(), "1s".to_string())]);
        let p = plan_one(INTERVAL, "100ms", &current).unwrap();
        assert_eq!(p.old.as_deref(), Some("1s"));
        assert!(matches!(p.applies, Applies::Live { .. }));
        let p = plan_one("pipeline.max-parallelism", "256", &current).unwrap();
        assert!(
            matches!(p.applies, Applies::FastRestart { ref why } if why.contains("key groups"))
        );
        assert!(plan_one(MODE, "bogus", &current).is_err());
    }
}
