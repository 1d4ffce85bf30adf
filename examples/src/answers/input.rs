//! Generated input: deterministic answer lines ([`answer_json`], seed [`DEFAULT_SEED`]) and
//! a file of them ([`write_answers`]).
//!
//! Owns the generator and its word list. It does not say where a job's input comes from
//! (`Input` in `graph`) nor parse the lines (`clean`).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use crate::rng::SplitMix64;

/// The seed of the generated input when none is given.
pub const DEFAULT_SEED: u64 = 0;

const WORDS: &[&str] = &[
    "stream",
    "batch",
    "checkpoint",
    "watermark",
    "latency",
    "throughput",
    "state",
    "key",
    "window",
    "join",
    "map",
    "reduce",
    "filter",
    "sink",
    "source",
    "barrier",
    "snapshot",
    "restore",
    "kernel",
    "thread",
    "pool",
    "queue",
    "async",
    "tokio",
    "rust",
    "flink",
    "actor",
    "record",
    "event",
    "time",
    "question",
    "answer",
    "user",
    "vote",
    "like",
    "test",
    "build",
    "compile",
];

/// Appends `n` as decimal digits.
#[inline]
fn push_u64(s: &mut String, n: u64) {
    let _ = write!(s, "{n}");
}

/// The JSON line (without newline) of generated answer `index` of the stream `seed`.
///
/// Deterministic in `(seed, index)`. About 2.5% of answers have empty content and 2.5% start
/// with `[spam]`; likes are spread over all five default levels (about 50% `L0`, 30% `L1`,
/// 13% `L2`, 5.5% `L3`, 1.5% `L4`); content is 50 to 200 characters of words.
///
/// ```
/// use weir_examples::answers::{answer_json, parse_answer};
/// let a = parse_answer(&answer_json(7, 3)).unwrap();
/// assert_eq!(a.id, 3);
/// assert_eq!(answer_json(7, 3), answer_json(7, 3));
/// ```
pub fn answer_json(seed: u64, index: u64) -> String {
    let mut r = SplitMix64::for_item(seed, index);
    let ts = 1_700_000_000_000 + index * 10 + r.below(10);
    let user = r.below(100_000);
    let u = r.unit();
    let followers = (u * u * u * 50_000.0) as u64;
    let question = r.below(1_000_000);
    let likes = match r.below(1000) {
        0..=499 => r.below(10),
        500..=799 => r.range(10, 100),
        800..=929 => r.range(100, 1000),
        930..=984 => r.range(1000, 10_000),
        _ => r.range(10_000, 100_000),
    };
    let favorites = likes / r.range(2, 12) + r.below(3);
    let comments = r.below(50);
    let kind = r.below(1000);
    let mut s = String::with_capacity(360);
    s.push_str("{\"id\":");
    push_u64(&mut s, index);
    s.push_str(",\"ts_ms\":");
    push_u64(&mut s, ts);
    s.push_str(",\"user\":{\"id\":");
    push_u64(&mut s, user);
    s.push_str(",\"name\":\"user");
    push_u64(&mut s, user);
    s.push_str("\",\"followers\":");
    push_u64(&mut s, followers);
    s.push_str("},\"question_id\":");
    push_u64(&mut s, question);
    s.push_str(",\"likes\":");
    push_u64(&mut s, likes);
    s.push_str(",\"favorites\":");
    push_u64(&mut s, favorites);
    s.push_str(",\"comments\":");
    push_u64(&mut s, comments);
    s.push_str(",\"content\":\"");
    if kind >= 25 {
        let start = s.len();
        if kind < 50 {
            s.push_str("[spam] ");
        }
        let target = 50 + r.below(151) as usize;
        while s.len() - start < target {
            if s.len() > start && !s.ends_with(' ') {
                s.push(' ');
            }
            s.push_str(WORDS[r.below(WORDS.len() as u64) as usize]);
        }
    }
    s.push_str("\"}");
    s
}

/// Writes `records` generated answers (seed `seed`) to `path`, one per line.
pub fn write_answers(path: &Path, records: u64, seed: u64) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut w = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    for i in 0..records {
        w.write_all(answer_json(seed, i).as_bytes())?;
        w.write_all(b"\n")?;
    }
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answers::{
        clean, clean_line, default_levels, parse_answer, ContentFlag, Thresholds,
    };
    use std::collections::BTreeMap;

    #[test]
    fn generated_answers_parse_and_spread_over_levels() {
        let levels = Thresholds::from_vec(default_levels());
        let mut per_level = BTreeMap::new();
        let (mut empty, mut spam) = (0, 0);
        for i in 0..20_000 {
            let line = answer_json(DEFAULT_SEED, i);
            let a = parse_answer(&line).unwrap();
            assert_eq!(a.id, i);
            let len = a.content.len();
            assert!(len == 0 || (50..=215).contains(&len), "{len}");
            let c = clean_line(line, &levels).unwrap();
            assert_eq!(c, clean(&a, &levels).unwrap());
            *per_level.entry(c.level.to_string()).or_insert(0u64) += 1;
            match c.content_flag {
                ContentFlag::Empty => empty += 1,
                ContentFlag::Spam => spam += 1,
                ContentFlag::Ok => {}
            }
        }
        assert_eq!(per_level.len(), 5, "{per_level:?}");
        assert!(per_level.values().all(|&n| n > 100), "{per_level:?}");
        assert!((300..700).contains(&empty), "{empty}");
        assert!((300..700).contains(&spam), "{spam}");
    }
}
