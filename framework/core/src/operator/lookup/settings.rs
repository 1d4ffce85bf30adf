//! A lookup's settings as they change while it runs: the live keys (`cache`, `cache.size`,
//! `cache.ttl`, `timeout`, `capacity`, `retries`), their text forms, and the validation that
//! refuses a bad change before anything is touched. Applying a change (resizing the cache,
//! starting a load) is the operator's (`op`); this module only parses and checks.

use std::time::Duration;

use super::{CacheKind, CacheStrategy, LookupConfig, OnTimeout};
use crate::hooks::ConfigError;

/// The keys [`Settings::parse`] knows, in the order error messages list them.
pub(crate) const KEYS: &[&str] = &[
    "cache",
    "cache.size",
    "cache.ttl",
    "timeout",
    "capacity",
    "retries",
];

/// The settings of one lookup subtask now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    pub(crate) ordered: bool,
    pub(crate) capacity: usize,
    pub(crate) timeout: Duration,
    pub(crate) retries: u32,
    pub(crate) on_timeout: OnTimeout,
    pub(crate) cache: CacheKind,
    /// The LRU cache's size (kept while another strategy is on, for a switch back).
    pub(crate) size: usize,
    /// The LRU cache's time to live (`None`: entries do not expire).
    pub(crate) ttl: Option<Duration>,
}

/// One accepted change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    Cache(CacheKind),
    Size(usize),
    Ttl(Option<Duration>),
    Timeout(Duration),
    Capacity(usize),
    Retries(u32),
}

impl Settings {
    pub(crate) fn new(c: &LookupConfig) -> Self {
        let (cache, size, ttl) = match c.cache {
            CacheStrategy::None => (CacheKind::None, LookupConfig::DEFAULT_LRU_SIZE, None),
            CacheStrategy::All => (CacheKind::All, LookupConfig::DEFAULT_LRU_SIZE, None),
            CacheStrategy::Lru { size, ttl } => (CacheKind::Lru, size, ttl),
        };
        Settings {
            ordered: c.ordered,
            capacity: c.capacity,
            timeout: c.timeout,
            retries: c.retries,
            on_timeout: c.on_timeout,
            cache,
            size,
            ttl,
        }
    }

    /// Parses `key = value` for the lookup `operator` (its uid, named in errors); a refusal
    /// says which key or value is wrong and what is expected.
    pub(crate) fn parse(operator: &str, key: &str, value: &str) -> Result<Change, ConfigError> {
        let bad = |expected: &str, message: String| ConfigError::BadValue {
            operator: operator.to_owned(),
            key: key.to_owned(),
            value: value.to_owned(),
            expected: expected.to_owned(),
            message,
        };
        let v = value.trim();
        match key {
            "cache" => CacheKind::parse(v)
                .map(Change::Cache)
                .map_err(|m| bad("none|all|lru", m)),
            "cache.size" => positive(v)
                .map(Change::Size)
                .map_err(|m| bad("a positive integer", m)),
            "cache.ttl" => match v {
                "none" | "off" => Ok(Change::Ttl(None)),
                _ => parse_duration(v)
                    .map(|d| Change::Ttl(Some(d)))
                    .map_err(|m| bad("a duration such as 30s or 500ms, or none", m)),
            },
            "timeout" => parse_duration(v)
                .map(Change::Timeout)
                .map_err(|m| bad("a duration such as 30s or 500ms", m)),
            "capacity" => positive(v)
                .map(Change::Capacity)
                .map_err(|m| bad("a positive integer", m)),
            "retries" => v
                .parse::<u32>()
                .map(Change::Retries)
                .map_err(|e| bad("a non-negative integer", e.to_string())),
            _ => Err(ConfigError::UnknownKey {
                operator: operator.to_owned(),
                key: key.to_owned(),
                known: KEYS.iter().map(|k| (*k).to_owned()).collect(),
            }),
        }
    }

    /// Records an accepted change.
    pub(crate) fn apply(&mut self, change: Change) {
        match change {
            Change::Cache(k) => self.cache = k,
            Change::Size(n) => self.size = n,
            Change::Ttl(t) => self.ttl = t,
            Change::Timeout(d) => self.timeout = d,
            Change::Capacity(n) => self.capacity = n,
            Change::Retries(n) => self.retries = n,
        }
    }
}

fn positive(v: &str) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(0) => Err("it must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// A positive duration: a number and a unit (`ms`, `s`, `m`, `h`), e.g. `500ms`, `30s`,
/// `1.5s`, `2m`.
pub(crate) fn parse_duration(v: &str) -> Result<Duration, String> {
    let split = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("`{v}` has no unit (ms, s, m or h)"))?;
    let (number, unit) = v.split_at(split);
    let n: f64 = number
        .parse()
        .map_err(|_| format!("`{number}` is not a number"))?;
    let seconds = match unit.trim() {
        "ms" => n / 1000.0,
        "s" => n,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        other => return Err(format!("unknown unit `{other}` (ms, s, m or h)")),
    };
    let d = Duration::try_from_secs_f64(seconds).map_err(|e| e.to_string())?;
    if d.is_zero() {
        return Err("it must be longer than zero".into());
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units_and_refuse_the_rest() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["", "30", "s", "-1s", "0s", "3 parsecs", "1e9h"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn every_key_is_checked_and_a_refusal_names_it() {
        assert_eq!(
            Settings::parse("enrich", "cache", "lru"),
            Ok(Change::Cache(CacheKind::Lru))
        );
        assert_eq!(
            Settings::parse("enrich", "cache.ttl", "none"),
            Ok(Change::Ttl(None))
        );
        assert_eq!(
            Settings::parse("enrich", "retries", "3"),
            Ok(Change::Retries(3))
        );
        let e = Settings::parse("enrich", "cache", "bogus").unwrap_err();
        assert!(e.to_string().contains("`cache`") && e.to_string().contains("bogus"));
        let e = Settings::parse("enrich", "cache.size", "-1").unwrap_err();
        assert!(matches!(e, ConfigError::BadValue { ref key, .. } if key == "cache.size"));
        let e = Settings::parse("enrich", "capacity", "0").unwrap_err();
        assert!(e.to_string().contains("at least 1"), "{e}");
        let e = Settings::parse("enrich", "colour", "red").unwrap_err();
        assert!(
            matches!(e, ConfigError::UnknownKey { ref known, .. } if known.len() == KEYS.len()),
            "{e}"
        );
    }
}
