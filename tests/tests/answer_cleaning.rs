//! The answer-cleaning job against a plain sequential computation: the output lines (read back
//! from the part files) must equal, as multisets, what parsing, filtering, levelling and
//! formatting each input line one by one gives; malformed lines must reach the side output.

use std::path::{Path, PathBuf};

use serde_json::Value;
use weir::{Env, EnvConfig};
use weir_examples::answers::{
    answer_json, build_answer_cleaning, read_part_files, uid, BadRecord, Input, Summary,
};

const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/answers_sample.jsonl");
const LEVELS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/levels.jsonl");

/// A fresh, empty directory for one test.
fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "weir-test-answer-cleaning-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The thresholds of `levels.jsonl`, read independently of the crate under test.
fn levels_file() -> Vec<(u64, String)> {
    let text = std::fs::read_to_string(LEVELS).unwrap();
    let mut v: Vec<(u64, String)> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let t: Value = serde_json::from_str(l).unwrap();
            (
                t["min_likes"].as_u64().unwrap(),
                t["level"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    v.sort();
    v
}

/// What the job should output for `lines`, computed one line at a time: (output lines,
/// malformed lines).
fn sequential(lines: &[String], levels: &[(u64, String)]) -> (Vec<String>, Vec<String>) {
    let mut out = Vec::new();
    let mut bad = Vec::new();
    for line in lines {
        if line.trim().is_empty() {
            continue; // blank lines hold no record
        }
        let Some(a) = parse(line) else {
            bad.push(line.clone());
            continue;
        };
        let (id, user, likes, content) = a;
        let Some((_, level)) = levels.iter().rev().find(|(min, _)| likes >= *min) else {
            bad.push(line.clone());
            continue;
        };
        let c = content.trim();
        if c.is_empty() || c.starts_with("[spam]") {
            continue;
        }
        out.push(format!("{id},{user},{likes},{level}"));
    }
    out.sort();
    bad.sort();
    (out, bad)
}

/// (id, user id, likes, content) of an answer line with every field of the right type.
fn parse(line: &str) -> Option<(u64, u64, u64, String)> {
    let v: Value = serde_json::from_str(line).ok()?;
    for f in [
        "id",
        "ts_ms",
        "question_id",
        "likes",
        "favorites",
        "comments",
    ] {
        v.get(f)?.as_u64()?;
    }
    let user = v.get("user")?;
    user.get("id")?.as_u64()?;
    user.get("name")?.as_str()?;
    user.get("followers")?.as_u64()?;
    Some((
        v["id"].as_u64()?,
        user["id"].as_u64()?,
        v["likes"].as_u64()?,
        v.get("content")?.as_str()?.to_owned(),
    ))
}

fn read_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Runs the job; returns (sorted output lines, sorted malformed lines, summary).
fn run(input: &Input, dir: &Path, parallelism: usize) -> (Vec<String>, Vec<String>, Summary) {
    let (out, bad, summary) = run_with(EnvConfig::default(), input, dir, parallelism);
    (out, bad.into_iter().map(|b| b.line).collect(), summary)
}

/// [`run`] with `config`, returning the whole malformed records (sorted by line).
fn run_with(
    config: EnvConfig,
    input: &Input,
    dir: &Path,
    parallelism: usize,
) -> (Vec<String>, Vec<BadRecord>, Summary) {
    let env = Env::with_config(config);
    let handles = build_answer_cleaning(&env, input, dir, parallelism);
    let result = env.execute("answer-cleaning-test").unwrap();
    let summary = Summary::new(&result, &handles);
    let mut out = read_part_files(dir, uid::SINK).unwrap();
    out.sort();
    let mut bad: Vec<BadRecord> = read_part_files(dir, uid::MALFORMED)
        .unwrap()
        .iter()
        .map(|l| serde_json::from_str::<BadRecord>(l).unwrap())
        .collect();
    bad.sort_by(|a, b| (&a.line, &a.path, a.line_number).cmp(&(&b.line, &b.path, b.line_number)));
    // Every part file of the sink exists, one per subtask.
    for s in 0..parallelism {
        assert!(dir.join(format!("part-{}-{s}", uid::SINK)).is_file());
    }
    (out, bad, summary)
}

fn check_summary(summary: &Summary, n_in: usize, out: &[String], bad: &[String]) {
    assert_eq!(summary.records_read, n_in as u64);
    assert_eq!(summary.written, out.len() as u64);
    assert_eq!(summary.malformed, bad.len() as u64);
    assert_eq!(
        summary.written + summary.dropped + summary.malformed,
        n_in as u64
    );
    // Per-level counts agree with the output lines.
    let mut per_level = std::collections::BTreeMap::new();
    for l in out {
        *per_level
            .entry(l.rsplit(',').next().unwrap().to_owned())
            .or_insert(0u64) += 1;
    }
    assert_eq!(summary.per_level, per_level);
}

#[test]
fn sample_file_matches_sequential_at_parallelism_1_and_2() {
    let lines = read_lines(Path::new(SAMPLE));
    assert_eq!(lines.len(), 1000);
    let (expected, expected_bad) = sequential(&lines, &levels_file());
    assert!(expected_bad.is_empty());
    assert!(expected.len() > 900 && expected.len() < 1000);
    for p in [1, 2] {
        let inputs = [
            Input::lines(SAMPLE),
            Input::lines(SAMPLE).with_levels(LEVELS),
        ];
        for (k, input) in inputs.into_iter().enumerate() {
            let dir = temp_dir(&format!("sample-{p}-{k}"));
            let (out, bad, summary) = run(&input, &dir, p);
            assert_eq!(out, expected, "parallelism {p}, {input:?}");
            assert!(bad.is_empty());
            check_summary(&summary, lines.len(), &out, &bad);
            assert_eq!(summary.dropped, 51);
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}

#[test]
fn generated_input_matches_sequential() {
    let (n, seed) = (20_000u64, 7);
    let lines: Vec<String> = (0..n).map(|i| answer_json(seed, i)).collect();
    let (expected, expected_bad) = sequential(&lines, &levels_file());
    assert!(expected_bad.is_empty());
    for p in [1, 2] {
        let dir = temp_dir(&format!("generated-{p}"));
        let (out, bad, summary) = run(&Input::generated(n, seed), &dir, p);
        assert_eq!(out, expected, "parallelism {p}");
        assert!(bad.is_empty());
        check_summary(&summary, n as usize, &out, &bad);
        // All five levels occur, and some answers are dropped.
        assert_eq!(summary.per_level.len(), 5, "{:?}", summary.per_level);
        assert!(summary.dropped > 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn malformed_lines_go_to_the_side_output() {
    let dir = temp_dir("malformed");
    let input_dir = dir.join("in");
    let out_dir = dir.join("out");
    std::fs::create_dir_all(&input_dir).unwrap();
    let mut lines = read_lines(Path::new(SAMPLE));
    let malformed = [
        "this is not json".to_owned(),
        r#"{"id":1,"ts_ms":2}"#.to_owned(),
        r#"{"id":"x","ts_ms":0,"user":{"id":1,"name":"n","followers":0},"question_id":1,"likes":1,"favorites":0,"comments":0,"content":"c"}"#.to_owned(),
        lines[10][..lines[10].len() / 2].to_owned(),
        r#"{"id":5,"ts_ms":0,"user":{"id":1,"name":"n","followers":0},"question_id":1,"likes":-4,"favorites":0,"comments":0,"content":"c"}"#.to_owned(),
    ];
    for (k, bad) in malformed.iter().enumerate() {
        lines.insert(100 * k + 7, bad.clone());
    }
    // Two files (so two source subtasks both read), with a blank line that holds no record.
    std::fs::write(input_dir.join("a.jsonl"), lines[..500].join("\n") + "\n\n").unwrap();
    std::fs::write(input_dir.join("b.jsonl"), lines[500..].join("\n")).unwrap();
    let (expected, expected_bad) = sequential(&lines, &levels_file());
    let mut sorted_bad = malformed.to_vec();
    sorted_bad.sort();
    assert_eq!(expected_bad, sorted_bad);
    for p in [1, 2] {
        let (out, bad, summary) = run(&Input::lines(&input_dir).with_levels(LEVELS), &out_dir, p);
        assert_eq!(out, expected, "parallelism {p}");
        assert_eq!(bad, expected_bad, "parallelism {p}");
        check_summary(&summary, lines.len(), &out, &bad);
        let _ = std::fs::remove_dir_all(&out_dir);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn likes_below_every_threshold_are_malformed_not_lost() {
    let dir = temp_dir("thresholds");
    let levels = dir.join("levels.jsonl");
    std::fs::write(
        &levels,
        "{\"min_likes\":10,\"level\":\"ten\"}\n{\"min_likes\":100,\"level\":\"hundred\"}\n",
    )
    .unwrap();
    let lines = read_lines(Path::new(SAMPLE));
    let table = vec![(10, "ten".to_owned()), (100, "hundred".to_owned())];
    let (expected, expected_bad) = sequential(&lines, &table);
    assert!(!expected_bad.is_empty());
    let out_dir = dir.join("out");
    let (out, bad, summary) = run(&Input::lines(SAMPLE).with_levels(&levels), &out_dir, 2);
    assert_eq!(out, expected);
    assert_eq!(bad, expected_bad);
    check_summary(&summary, lines.len(), &out, &bad);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_missing_input_fails_the_job() {
    let dir = temp_dir("missing");
    let env = Env::new();
    build_answer_cleaning(&env, &Input::lines(dir.join("nope.jsonl")), &dir, 1);
    let err = env.execute("missing").unwrap_err().to_string();
    assert!(err.contains("nope.jsonl"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// One input line of [`every_kind_of_bad_line_is_kept_with_its_file_line_and_offset`]: its
/// bytes, and the error text expected on the side output (`None`: a good line).
struct In {
    bytes: Vec<u8>,
    bad: Option<&'static str>,
}

#[test]
fn every_kind_of_bad_line_is_kept_with_its_file_line_and_offset() {
    const MAX: usize = 4096;
    let dir = temp_dir("kinds");
    let (input_dir, out_dir) = (dir.join("in"), dir.join("out"));
    std::fs::create_dir_all(&input_dir).unwrap();
    let good = read_lines(Path::new(SAMPLE));
    let with_inserted = |line: &str, at: usize, bytes: &[u8]| {
        let mut v = line.as_bytes().to_vec();
        let at = line.find("\"content\":\"").unwrap() + 11 + at;
        v.splice(at..at, bytes.iter().copied());
        v
    };
    let mut lines: Vec<In> = good[..200]
        .iter()
        .map(|l| In {
            bytes: l.as_bytes().to_vec(),
            bad: None,
        })
        .collect();
    // Line numbers are 1-based and count every line (the blank ones too).
    let bad = [
        (12, with_inserted(&good[3], 2, b"\xff\xfe"), "not UTF-8"),
        (40, with_inserted(&good[5], 0, b"\0"), "NUL byte"),
        (
            75,
            with_inserted(&good[7], 0, "long ".repeat(MAX).as_bytes()),
            "more than the maximum of 4096",
        ),
        (90, b"{\"not\": an answer".to_vec(), "expected value"),
        (120, b"   ".to_vec(), ""), // blank: no record, but a line
    ];
    for (at, bytes, why) in bad {
        let bad = (!why.is_empty()).then_some(why);
        lines.insert(at - 1, In { bytes, bad });
    }
    // A last line cut short: no newline, not a whole answer.
    let cut = good[9].as_bytes()[..good[9].len() / 2].to_vec();
    lines.push(In {
        bytes: cut,
        bad: Some("EOF while parsing"),
    });
    // One file: the lines with `\n` between them, none after the last.
    let file = input_dir.join("answers.jsonl");
    let mut text = Vec::new();
    let mut expected_bad = Vec::new();
    let mut kept = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let offset = text.len() as u64;
        text.extend_from_slice(&l.bytes);
        if i + 1 < lines.len() {
            text.push(b'\n');
        }
        match l.bad {
            None if l.bytes.iter().all(u8::is_ascii_whitespace) => {}
            None => kept.push(String::from_utf8(l.bytes.clone()).unwrap()),
            Some(why) => {
                let shown = &l.bytes[..l.bytes.len().min(1024)];
                expected_bad.push((
                    String::from_utf8_lossy(shown).into_owned(),
                    i as u64 + 1,
                    offset,
                    why,
                ));
            }
        }
    }
    std::fs::write(&file, &text).unwrap();
    let (expected_out, none_bad) = sequential(&kept, &levels_file());
    assert!(none_bad.is_empty());
    expected_bad.sort();
    let mut config = EnvConfig::default();
    config.max_line_bytes = MAX;
    for p in [1, 2] {
        let input = Input::lines(&input_dir).with_levels(LEVELS);
        let (out, bad, summary) = run_with(config.clone(), &input, &out_dir, p);
        assert_eq!(out, expected_out, "parallelism {p}: every good line once");
        let mut got: Vec<(String, u64, u64, &str)> = bad
            .iter()
            .map(|b| {
                assert_eq!(b.path.as_deref(), Some(file.to_str().unwrap()));
                let why = expected_bad
                    .iter()
                    .find(|e| Some(e.1) == b.line_number)
                    .map_or("", |e| e.3);
                assert!(
                    b.error.contains(why),
                    "line {:?}: {}",
                    b.line_number,
                    b.error
                );
                (
                    b.line.clone(),
                    b.line_number.unwrap(),
                    b.byte_offset.unwrap(),
                    why,
                )
            })
            .collect();
        got.sort();
        assert_eq!(
            got, expected_bad,
            "parallelism {p}: every bad line once, located"
        );
        // Every non-blank line read, each one written, dropped or malformed.
        let n_in = kept.len() + expected_bad.len();
        assert_eq!(summary.records_read, n_in as u64);
        assert_eq!(summary.malformed, expected_bad.len() as u64);
        assert_eq!(
            summary.written + summary.dropped + summary.malformed,
            n_in as u64
        );
        let _ = std::fs::remove_dir_all(&out_dir);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_line_over_the_default_maximum_is_kept_too() {
    // The default maximum (16 MiB): one line a byte over it, between two good ones.
    let max = EnvConfig::default().max_line_bytes;
    let dir = temp_dir("default-max");
    let (input, out_dir) = (dir.join("in.jsonl"), dir.join("out"));
    let good = read_lines(Path::new(SAMPLE));
    let mut text = Vec::with_capacity(max + 4096);
    text.extend_from_slice(good[0].as_bytes());
    text.push(b'\n');
    let long_at = text.len() as u64;
    text.resize(text.len() + max + 1, b'x');
    text.push(b'\n');
    text.extend_from_slice(good[1].as_bytes());
    text.push(b'\n');
    std::fs::write(&input, &text).unwrap();
    let (out, bad, _) = run_with(EnvConfig::default(), &Input::lines(&input), &out_dir, 1);
    let (expected, _) = sequential(&good[..2], &levels_file());
    assert_eq!(out, expected);
    assert_eq!(bad.len(), 1);
    assert_eq!(
        (bad[0].line_number, bad[0].byte_offset, bad[0].line.len()),
        (Some(2), Some(long_at), 1024)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
