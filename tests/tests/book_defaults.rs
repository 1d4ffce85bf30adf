//! The defaults the book quotes are the code's.
//!
//! Each quote below is built from the value in code (`EnvConfig::default()`,
//! `RateControlConfig::default()`, `BackupPolicy::default()`, ...) and must appear in its
//! chapter, whitespace aside. And every "default" in the book's prose that a number follows
//! closely must lie inside one of these quotes, or inside a phrase of [`NOT_CHECKED`] that
//! says why it needs none: a new quoted default fails this test until it is checked here.

use std::path::{Path, PathBuf};
use std::time::Duration;

use weir::rate::RateControlConfig;
use weir::{BackupPolicy, EnvConfig};

fn book_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../book/src")
}

/// A chapter's prose: fenced code blocks removed, every run of whitespace one space.
fn prose(chapter: &str) -> String {
    let path = book_dir().join(chapter);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push_str(line);
            out.push(' ');
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `d` as the book writes it: whole seconds as `1 s`, else milliseconds as `2 ms`.
fn dur(d: Duration) -> String {
    if d >= Duration::from_secs(1) && d.subsec_nanos() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// `bytes` in whole MiB, as the book writes it.
fn mib(bytes: usize) -> usize {
    assert_eq!(
        bytes % (1 << 20),
        0,
        "{bytes} bytes is not a whole number of MiB"
    );
    bytes >> 20
}

/// Phrases with "default" and a number that quote no config default, and why.
const NOT_CHECKED: &[(&str, &str, &str)] = &[
    (
        "backpressure.md",
        "with Spark's defaults: | field | default | Spark setting |",
        "introduces a table whose rows are checked",
    ),
    (
        "kafka.md",
        "(librdkafka's default is 60 s)",
        "librdkafka's setting, not Weir's config",
    ),
    (
        "kafka.md",
        "(15 min by default); Flink's 1 h default trips that cap",
        "a Kafka broker's and Flink's settings",
    ),
];

/// (chapter, quote built from the code).
fn quotes() -> Vec<(&'static str, String)> {
    let c = EnvConfig::default();
    let rc = RateControlConfig::default();
    let b = BackupPolicy::default();
    let mut q = vec![
        // Line sources.
        (
            "sources-and-sinks.md",
            format!(
                "more bytes before its `\\n` than `EnvConfig::max_line_bytes` (default {} MiB)",
                mib(c.max_line_bytes)
            ),
        ),
        // Batches and channels.
        (
            "batches-and-credit.md",
            format!("`EnvConfig::batch_size` records (default {})", c.batch_size),
        ),
        (
            "batches-and-credit.md",
            format!("`EnvConfig::linger` (default {})", dur(c.linger)),
        ),
        (
            "batches-and-credit.md",
            format!(
                "`EnvConfig::channel_capacity` batches (default {},",
                c.channel_capacity
            ),
        ),
        (
            "backpressure.md",
            format!(
                "With the defaults (batch {}, windows {} to {}) that is at most {} records per \
                 channel, and {} behind a consumer that needs more than the {} target",
                c.batch_size,
                c.channel_capacity,
                c.max_channel_capacity,
                c.batch_size * c.max_channel_capacity,
                c.batch_size * c.channel_capacity,
                dur(c.latency_target.expect("adaptive by default"))
            ),
        ),
        (
            "batches-and-credit.md",
            format!(
                "`EnvConfig::latency_target` (default `Some({})`)",
                dur(c.latency_target.expect("adaptive by default"))
            ),
        ),
        (
            "batches-and-credit.md",
            format!(
                "`EnvConfig::max_channel_capacity` batches (default {})",
                c.max_channel_capacity
            ),
        ),
        (
            "backpressure.md",
            format!(
                "`EnvConfig::metrics_interval` (default {}, at least 10 ms)",
                dur(c.metrics_interval)
            ),
        ),
        // Rate control: the table and the prose after it.
        (
            "backpressure.md",
            format!("| `proportional` (`kp`) | {:?} |", rc.proportional),
        ),
        (
            "backpressure.md",
            format!("| `integral` (`ki`) | {:?} |", rc.integral),
        ),
        (
            "backpressure.md",
            format!("| `derivative` (`kd`) | {:?} |", rc.derivative),
        ),
        (
            "backpressure.md",
            format!("| `min_rate` | {} records/s |", rc.min_rate),
        ),
        (
            "backpressure.md",
            format!(
                "With the default gains the formula reads simply: since `kp = {}` and `kd = {}`",
                rc.proportional, rc.derivative
            ),
        ),
        (
            "backpressure.md",
            format!(
                "With the defaults ({} and {}) the first rate is set",
                dur(c.metrics_interval),
                dur(rc.update_interval)
            ),
        ),
        (
            "backpressure.md",
            format!("(Spark's defaults, {} updates)", dur(rc.update_interval)),
        ),
        (
            "backpressure.md",
            format!("| `update_interval` (`B`) | {} |", dur(rc.update_interval)),
        ),
        // The disk state backend.
        (
            "state.md",
            format!(
                "`DiskBackend::memory_budget` per keyed subtask (default {} MiB: three quarters",
                mib(weir::DiskBackend::default().memory_budget)
            ),
        ),
        // Key groups.
        (
            "runtime-model.md",
            format!(
                "`max_parallelism` **key groups** (default {})",
                c.max_parallelism
            ),
        ),
        // Backup.
        (
            "backup.md",
            format!(
                "`with_backup()` uses the default [`BackupPolicy`]: heartbeat every {}, a primary \
                 that has not answered for {} is declared hung, a buffer queue of at most {} MiB \
                 per subtask, and {}-record batches",
                dur(b.heartbeat_interval),
                dur(b.heartbeat_timeout),
                b.max_memory >> 20,
                b.batch_size.expect("a default backup batch size"),
            ),
        ),
        (
            "backup.md",
            format!(
                "`BackupPolicy::state_share` of the primary's time (default {} %)",
                (b.state_share * 100.0).round()
            ),
        ),
        (
            "backup.md",
            format!(
                "Keep it above the restore time of the state (the default, {}, is above it",
                dur(b.heartbeat_timeout)
            ),
        ),
        (
            "backup.md",
            format!(
                "hung at the default {} heartbeat timeout",
                dur(b.heartbeat_timeout)
            ),
        ),
        // Derived operators.
        (
            "defining-operators.md",
            format!(
                "the stable type name (default: the struct's name) and the state format version \
                 (default {})",
                <Plain as weir::Operator>::STATE_VERSION
            ),
        ),
        // Not a default, next to one: the bench's own setting.
        (
            "backpressure.md",
            format!(
                "channel capacity {}, which the bench sets, not the default",
                SLOW_SINK_CAPACITY
            ),
        ),
    ];
    // The restart strategy with checkpoints on.
    if let weir::RestartStrategy::ExponentialDelay {
        initial,
        max,
        attempts_before_reset,
        ..
    } = weir::RestartStrategy::default_with_checkpoints()
    {
        q.push((
            "checkpoints.md",
            format!(
                "default is an exponential delay from {} ms to {} s, at most {} restarts in a row",
                initial.as_millis(),
                max.as_secs(),
                attempts_before_reset
            ),
        ));
        q.push((
            "failures.md",
            format!(
                "default since 1.19), with a bound. The first restart waits {} ms, each next \
                 one twice as long up to {} s",
                initial.as_millis(),
                max.as_secs()
            ),
        ));
    }
    // The agent's rules, as a file that sets nothing but one rule reads.
    let a = weirctl::agent::Rules::parse(
        "[[rule]]\nname = \"r\"\nbackpressure = 0.5\n[[rule.action]]\nkind = \"savepoint\"\ndir = \"/sp\"\n",
        "book",
    )
    .expect("a minimal rules file reads");
    let mode = match a.mode {
        weirctl::agent::Mode::Alert => "alert",
        weirctl::agent::Mode::Act => "act",
        weirctl::agent::Mode::AlertThenAct => "alert-then-act",
    };
    q.push((
        "agent.md",
        format!(
            "With the defaults (batches of {},{:03} records, {} batches per channel)",
            c.batch_size / 1000,
            c.batch_size % 1000,
            c.channel_capacity
        ),
    ));
    for row in [
        format!(
            "| `interval` | {} | time between two looks |",
            dur(a.interval)
        ),
        format!("| `request_timeout` | {} |", dur(a.request_timeout)),
        format!("| `action_timeout` | {} |", dur(a.action_timeout)),
        format!("| `mode` | `{mode}` |"),
        format!("| `alert_first` | {} |", a.alert_first),
        format!("| `cooldown` | {} |", dur(a.cooldown)),
        format!("| `max_actions_per_hour` | {} |", a.max_actions_per_hour),
        format!("| `retries` | {} |", a.retries),
        format!("| rule `consecutive` | {} |", a.rules[0].consecutive),
        format!("| rule `decay` | {} |", a.rules[0].decay),
    ] {
        q.push(("agent.md", row));
    }
    if rc.max_rate.is_none() {
        q.push(("backpressure.md", "| `max_rate` | none |".into()));
    }
    if rc.initial_rate.is_none() {
        q.push((
            "backpressure.md",
            "| `initial_rate` | none (unthrottled".into(),
        ));
    }
    if c.arbiters == std::thread::available_parallelism().map_or(2, |n| n.get()) {
        q.push((
            "runtime-model.md",
            "(`EnvConfig::arbiters`, by default one per core)".into(),
        ));
    }
    q
}

/// A derived operator with no `#[weir(version)]`: the default state format version.
#[derive(Clone, Default, weir::Operator)]
struct Plain {
    #[weir(state)]
    seen: u64,
}

/// The channel capacity `benches/src/bin/slow_sink.rs` sets for the run the book quotes.
const SLOW_SINK_CAPACITY: usize = 8;

fn chapters() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(book_dir())
        .expect("the book's sources")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .collect();
    v.sort();
    v
}

#[test]
fn every_default_the_book_quotes_is_the_one_in_code() {
    let mut wrong = Vec::new();
    for (chapter, quote) in quotes() {
        if !prose(chapter).contains(&quote) {
            wrong.push(format!("{chapter}: expected «{quote}»"));
        }
    }
    assert!(
        wrong.is_empty(),
        "the book does not quote the code's defaults (or was reworded: update \
         tests/tests/book_defaults.rs):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn every_quoted_default_in_the_book_is_checked() {
    let quotes = quotes();
    let mut unchecked = Vec::new();
    for chapter in chapters() {
        let text = prose(&chapter);
        let lower = text.to_ascii_lowercase();
        // Where each checked or excused phrase is, in this chapter.
        let spans: Vec<(usize, usize)> = quotes
            .iter()
            .filter(|(c, _)| *c == chapter)
            .map(|(_, q)| q.as_str())
            .chain(
                NOT_CHECKED
                    .iter()
                    .filter(|(c, _, _)| *c == chapter)
                    .map(|(_, p, _)| *p),
            )
            .flat_map(|p| {
                text.match_indices(p)
                    .map(|(i, m)| (i, i + m.len()))
                    .collect::<Vec<_>>()
            })
            .collect();
        for (at, _) in lower.match_indices("default") {
            let rest = &lower[at + "default".len()..];
            // Code: `::default()`, `default_parallelism`, ...
            if rest.starts_with('(') || rest.starts_with('_') {
                continue;
            }
            let window: String = rest.chars().take(80).collect();
            if !window.chars().any(|ch| ch.is_ascii_digit()) {
                continue;
            }
            if !spans.iter().any(|&(s, e)| s <= at && at < e) {
                let context: String = text[at..].chars().take(100).collect();
                unchecked.push(format!("{chapter}: «{context}…»"));
            }
        }
    }
    assert!(
        unchecked.is_empty(),
        "defaults quoted in the book that no check compares with the code (add them to \
         tests/tests/book_defaults.rs):\n{}",
        unchecked.join("\n")
    );
}

#[test]
fn the_bench_the_book_quotes_sets_its_channel_capacity() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../benches/src/bin/slow_sink.rs");
    let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    assert!(
        src.contains(&format!("cfg.channel_capacity = {SLOW_SINK_CAPACITY};")),
        "{path:?} no longer sets the channel capacity the book's backpressure chapter quotes"
    );
}
