//! Built-in sources and sinks, and both policies for malformed JSON Lines.

mod common;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use weir::{BadLine, Collector, Env, JobError, ProcessFunction, SourceError};

use common::{assert_multiset_eq, cfg, configs, part_files, read_part_lines, InstanceId, TempDir};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct User {
    id: u64,
    name: String,
    followers: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Answer {
    id: u64,
    ts_ms: u64,
    user: User,
    question_id: u64,
    likes: u64,
    favorites: u64,
    comments: u64,
    content: String,
}

fn answers_path() -> &'static str {
    concat!(env!("CARGO_MANIFEST_DIR"), "/data/answers_sample.jsonl")
}

/// The sample, parsed sequentially.
fn answers() -> Vec<Answer> {
    std::fs::read_to_string(answers_path())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn by_id(mut v: Vec<Answer>) -> Vec<Answer> {
    v.sort_by_key(|a| a.id);
    v
}

/// Tags every record with the id of the instance that processed it.
#[derive(Debug, Clone, Default)]
struct TagInstance {
    id: InstanceId,
}

impl<T: Send + 'static> ProcessFunction<T, (u64, T)> for TagInstance {
    fn process(&mut self, x: T, out: &mut Collector<(u64, T)>) {
        out.collect((self.id.get(), x));
    }
}

// ---------------------------------------------------------------------------------------------
// generate, from_collection

#[test]
fn generate_at_parallelism_1_keeps_order_and_at_3_covers_every_index() {
    for (tag, cfg, n) in configs() {
        let env = Env::with_config(cfg.clone());
        let out = env.generate(n, |i| i * 2).collect();
        let r = env.execute("gen1").unwrap();
        assert!(
            out.take().into_iter().eq((0..n).map(|i| i * 2)),
            "{tag}: parallelism 1 emits f(0), f(1), ... in order"
        );
        assert_eq!(r.operators[0].records_out, n);

        let env = Env::with_config(cfg.clone());
        let out = env.generate(n, |i| i * 2).set_parallelism(3).collect();
        let r = env.execute("gen3").unwrap();
        assert_multiset_eq(out.take(), (0..n).map(|i| i * 2).collect(), tag);
        assert_eq!(r.operators[0].parallelism, 3);
        assert_eq!(r.operators[0].records_out, n);
    }
}

/// The shares of `0..n` are contiguous, cover it, and differ in size by one at most, for any
/// `n` (an endless generator is `generate(u64::MAX, ..)`).
#[test]
fn share_of_covers_huge_ranges() {
    for n in [10u64, 1 << 40, u64::MAX / 2, u64::MAX] {
        for p in [1usize, 2, 3, 7] {
            let shares: Vec<std::ops::Range<u64>> = (0..p)
                .map(|subtask| {
                    weir::source::SourceContext {
                        subtask,
                        parallelism: p,
                    }
                    .share_of(n)
                })
                .collect();
            assert_eq!(shares[0].start, 0, "n {n} p {p}");
            assert_eq!(shares[p - 1].end, n, "n {n} p {p}");
            for w in shares.windows(2) {
                assert_eq!(w[0].end, w[1].start, "n {n} p {p}: {shares:?}");
            }
            let sizes: Vec<u64> = shares.iter().map(|r| r.end - r.start).collect();
            let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            assert!(hi - lo <= 1, "n {n} p {p}: {sizes:?}");
        }
    }
}

#[test]
fn empty_sources_end_cleanly() {
    let env = Env::new();
    let a = env.generate(0, |i| i).set_parallelism(3).collect();
    let b = env.from_collection(Vec::<String>::new()).collect();
    // Fewer items than subtasks: some subtasks have nothing.
    let c = env
        .from_collection(vec![7u8, 8])
        .set_parallelism(3)
        .collect();
    let r = common::execute_within(&env, "empty").unwrap();
    assert_eq!(r.operators.len(), 6);
    assert!(a.take().is_empty());
    assert!(b.take().is_empty());
    assert_eq!(common::sorted(c.take()), vec![7, 8]);
}

#[test]
fn from_collection_keeps_order_at_parallelism_1_and_covers_all_at_3() {
    for (tag, cfg, n) in configs() {
        let items: Vec<String> = (0..n).map(|i| format!("item-{}", (i * 7919) % n)).collect();
        let env = Env::with_config(cfg.clone());
        let out = env.from_collection(items.clone()).collect();
        env.execute("coll1").unwrap();
        assert!(
            out.take() == items,
            "{tag}: parallelism 1 keeps the collection's order"
        );

        let env = Env::with_config(cfg.clone());
        let out = env
            .from_collection(items.clone())
            .set_parallelism(3)
            .map(|s: String| s.len())
            .set_parallelism(3)
            .collect();
        let r = env.execute("coll3").unwrap();
        assert_multiset_eq(out.take(), items.iter().map(String::len).collect(), tag);
        assert_eq!(r.operators[0].name, "collection");
        assert_eq!(r.operators[0].records_out, n);
    }
}

// ---------------------------------------------------------------------------------------------
// read_jsonl, read_lines

#[test]
fn read_jsonl_file_at_parallelism_1_and_3() {
    let expected = answers();
    assert_eq!(expected.len(), 1000);
    for (tag, cfg, _) in configs() {
        let env = Env::with_config(cfg.clone());
        let out = env.read_jsonl::<Answer>(answers_path()).collect();
        let r = env.execute("jsonl1").unwrap();
        assert!(out.take() == expected, "{tag}: records in file order");
        assert_eq!(r.operators[0].name, "read_jsonl");
        assert_eq!(
            (r.operators[0].records_out, r.operators[0].records_rejected),
            (1000, 0)
        );

        // One file, three subtasks: one reads it, the others have nothing; nothing twice.
        let env = Env::with_config(cfg.clone());
        let out = env
            .read_jsonl::<Answer>(answers_path())
            .set_parallelism(3)
            .collect();
        env.execute("jsonl3").unwrap();
        assert_eq!(by_id(out.take()), expected, "{tag}");
    }
}

#[test]
fn read_jsonl_directory_splits_every_file_by_byte_range() {
    let all = answers();
    let dir = TempDir::new("jsonl-dir");
    // Five files of 200 lines, named so that sorting by name gives f0..f4. Of each file,
    // subtask 0 reads the lines that start in its first half (by bytes), subtask 1 the rest.
    let mut halves: [Vec<u64>; 2] = Default::default();
    let text = std::fs::read_to_string(answers_path()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for (f, chunk) in lines.chunks(200).enumerate() {
        let bytes = chunk.join("\n") + "\n";
        dir.write(&format!("f{f}.jsonl"), bytes.as_bytes());
        let mut start = 0;
        for (line, a) in chunk.iter().zip(&all[f * 200..(f + 1) * 200]) {
            let half = usize::from(start >= bytes.len() / 2);
            halves[half].push(a.id);
            start += line.len() + 1;
        }
    }
    // A subdirectory is not a file to read.
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    dir.write("sub/ignored.jsonl", b"{not json}\n");
    for (tag, cfg, _) in configs() {
        let env = Env::with_config(cfg.clone());
        let out = env
            .read_jsonl::<Answer>(dir.path())
            .set_parallelism(2)
            .process(TagInstance::default())
            .set_parallelism(2)
            .collect();
        env.execute("jsonl-dir").unwrap();
        let got = out.take();
        assert_eq!(
            by_id(got.iter().map(|(_, a)| a.clone()).collect()),
            all,
            "{tag}"
        );
        // Per subtask, in arrival order: its half of f0, of f1, ... of f4.
        let mut per: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for (i, a) in &got {
            per.entry(*i).or_default().push(a.id);
        }
        let mut seqs: Vec<Vec<u64>> = per.into_values().collect();
        let mut want = halves.to_vec();
        seqs.sort();
        want.sort();
        assert_eq!(seqs, want, "{tag}");
    }
}

#[test]
fn read_lines_skips_blank_lines_and_strips_line_endings() {
    let dir = TempDir::new("lines");
    let file = dir.write(
        "a.txt",
        b"alpha\n\nbeta\r\n   \n\tgamma delta \n\r\n\n\t \nlast-without-newline",
    );
    let expected = ["alpha", "beta", "\tgamma delta ", "last-without-newline"];
    for (tag, cfg) in [
        ("default", weir::EnvConfig::default()),
        ("batch 1", cfg(1, 1)),
    ] {
        let env = Env::with_config(cfg.clone());
        let out = env.read_lines(&file).collect();
        let r = env.execute("lines").unwrap();
        assert_eq!(out.take(), expected, "{tag}");
        assert_eq!(r.operators[0].name, "read_lines");
        assert_eq!(r.operators[0].records_out, 4, "{tag}");
    }
    // A directory of several files at parallelism 3.
    dir.write("b.txt", b"one\ntwo\n\nthree\n");
    dir.write("c.txt", b"\n\nfour\n");
    let env = Env::new();
    let out = env.read_lines(dir.path()).set_parallelism(3).collect();
    env.execute("lines-dir").unwrap();
    let mut want: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
    want.extend(["one", "two", "three", "four"].map(String::from));
    assert_multiset_eq(out.take(), want, "directory");
}

#[test]
fn read_lines_fails_on_a_line_that_is_not_utf8() {
    let dir = TempDir::new("lines-bad");
    let file = dir.write("bad.txt", b"ok\n\nstill ok\nbad \xff\xfe here\nafter\n");
    let env = Env::new();
    env.read_lines(&file).uid("text").discard();
    match env.execute("lines-bad") {
        Err(JobError::SourceFailed {
            uid,
            subtask,
            source:
                SourceError::Malformed {
                    path,
                    line,
                    byte_offset,
                    ..
                },
            ..
        }) => {
            assert_eq!((uid.as_str(), subtask), ("text", 0));
            assert_eq!(path, file);
            assert_eq!((line, byte_offset), (4, 13));
        }
        other => panic!("expected a Malformed source error, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Sinks

#[test]
fn write_text_writes_one_part_file_per_subtask() {
    const N: u64 = 20_000;
    for p in [1, 3] {
        let dir = TempDir::new("text-out");
        let out_dir = dir.path().join("out");
        let env = Env::new();
        env.generate(N, |i| i)
            .set_parallelism(2)
            .map(|x: u64| format!("line {x}"))
            .set_parallelism(2)
            .write_text(&out_dir)
            .uid("text-out")
            .set_parallelism(p);
        let r = env.execute("write_text").unwrap();
        let names: Vec<String> = part_files(&out_dir)
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        let want: Vec<String> = (0..p).map(|s| format!("part-text-out-{s}")).collect();
        assert_eq!(names, want);
        assert_multiset_eq(
            read_part_lines(&out_dir),
            (0..N).map(|x| format!("line {x}")).collect(),
            &format!("parallelism {p}"),
        );
        let sink = r.operator("text-out").unwrap();
        assert_eq!((sink.name.as_str(), sink.parallelism), ("write_text", p));
        assert_eq!(sink.records_in, N);
    }
}

#[test]
fn write_jsonl_round_trips_records() {
    let expected = answers();
    for p in [1, 2] {
        let dir = TempDir::new("jsonl-out");
        let env = Env::with_config(cfg(64, 2));
        env.read_jsonl::<Answer>(answers_path())
            .write_jsonl(dir.path())
            .uid("json-out")
            .set_parallelism(p);
        let r = env.execute("write_jsonl").unwrap();
        assert_eq!(part_files(dir.path()).len(), p);
        let back: Vec<Answer> = read_part_lines(dir.path())
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(by_id(back), expected, "parallelism {p}");
        assert_eq!(r.operator("json-out").unwrap().records_in, 1000);
        // And the written files read back through the framework as a directory.
        let env = Env::new();
        let again = env
            .read_jsonl::<Answer>(dir.path())
            .set_parallelism(p)
            .collect();
        env.execute("read-back").unwrap();
        assert_eq!(by_id(again.take()), expected, "parallelism {p}");
    }
}

#[test]
fn discard_counts_its_input() {
    for p in [1, 3] {
        let env = Env::new();
        env.generate(50_000, |i| i)
            .set_parallelism(2)
            .filter(|x: &u64| !x.is_multiple_of(5))
            .set_parallelism(2)
            .discard()
            .uid("drop")
            .set_parallelism(p);
        let r = env.execute("discard").unwrap();
        let d = r.operator("drop").unwrap();
        assert_eq!(
            (d.name.as_str(), d.parallelism, d.records_in, d.records_out),
            ("discard", p, 40_000, 0)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Malformed JSON Lines

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
struct Rec {
    id: u64,
    name: String,
}

/// Lines 3 (invalid JSON), 6 (wrong field type) and 8 (invalid UTF-8) are bad; 5 is blank.
const BAD_LINES: [u64; 3] = [3, 6, 8];

fn malformed_lines() -> Vec<Vec<u8>> {
    vec![
        br#"{"id":1,"name":"a"}"#.to_vec(),
        br#"{"id":2,"name":"b"}"#.to_vec(),
        br#"{"id":3,"name":"#.to_vec(),
        br#"{"id":4,"name":"d"}"#.to_vec(),
        b"".to_vec(),
        br#"{"id":"six","name":"f"}"#.to_vec(),
        br#"{"id":7,"name":"g"}"#.to_vec(),
        b"{\"id\":8,\"name\":\"\xff\xfe\"}".to_vec(),
        br#"{"id":9,"name":"i"}"#.to_vec(),
    ]
}

fn write_malformed(dir: &TempDir, name: &str) -> std::path::PathBuf {
    let mut bytes = Vec::new();
    for l in malformed_lines() {
        bytes.extend_from_slice(&l);
        bytes.push(b'\n');
    }
    dir.write(name, &bytes)
}

fn good_recs() -> Vec<Rec> {
    [(1, "a"), (2, "b"), (4, "d"), (7, "g"), (9, "i")]
        .into_iter()
        .map(|(id, n)| Rec {
            id,
            name: n.to_owned(),
        })
        .collect()
}

#[test]
fn malformed_jsonl_fail_policy_names_the_first_bad_line() {
    let dir = TempDir::new("malformed-fail");
    let file = write_malformed(&dir, "input.jsonl");
    for batch in [1, 2, 1024] {
        let env = Env::with_config(cfg(batch, 2));
        let out = env.read_jsonl::<Rec>(&file).uid("in").collect();
        let err =
            common::execute_within(&env, "malformed").expect_err("a malformed line fails the job");
        let msg = err.to_string();
        match err {
            JobError::SourceFailed {
                job,
                uid,
                subtask,
                source:
                    SourceError::Malformed {
                        path,
                        line,
                        byte_offset,
                        message,
                    },
            } => {
                assert_eq!(
                    (job.as_str(), uid.as_str(), subtask),
                    ("malformed", "in", 0)
                );
                assert_eq!(path, file);
                assert_eq!(line, BAD_LINES[0], "the first bad line");
                assert_eq!(
                    byte_offset, 40,
                    "after two lines of 19 bytes and their newlines"
                );
                assert!(!message.is_empty());
            }
            other => panic!("expected SourceFailed/Malformed, got {other:?}"),
        }
        assert!(msg.contains(&file.display().to_string()), "{msg}");
        assert!(msg.contains("line 3"), "{msg}");
        // Nothing after the bad line was delivered.
        assert!(out.take().iter().all(|r| r.id < 3), "batch {batch}");
    }
    // The first bad line may also be the invalid UTF-8 one.
    let f2 = dir.write(
        "utf8.jsonl",
        b"{\"id\":1,\"name\":\"a\"}\n{\"id\":2,\"name\":\"\xc3\x28\"}\n",
    );
    let env = Env::new();
    env.read_jsonl::<Rec>(&f2).discard();
    match env.execute("utf8") {
        Err(JobError::SourceFailed {
            source: SourceError::Malformed { path, line, .. },
            ..
        }) => assert_eq!((path, line), (f2, 2)),
        other => panic!("expected SourceFailed/Malformed, got {other:?}"),
    }
}

#[test]
fn malformed_jsonl_skip_policy_emits_bad_lines_and_counts_them() {
    let dir = TempDir::new("malformed-skip");
    let file = write_malformed(&dir, "input.jsonl");
    let raw = malformed_lines();
    for batch in [1, 2, 1024] {
        let env = Env::with_config(cfg(batch, 2));
        let (good, bad) = env.read_jsonl_skipping::<Rec>(&file);
        let good = good.uid("src").collect();
        let bad = bad.collect();
        let r = env.execute("skip").unwrap();
        assert_eq!(
            good.take(),
            good_recs(),
            "batch {batch}: good records in order"
        );
        let bad: Vec<BadLine> = bad.take();
        let lines: Vec<u64> = bad.iter().map(|b| b.line).collect();
        assert_eq!(lines, BAD_LINES, "batch {batch}");
        for b in &bad {
            assert_eq!(b.path, file.display().to_string());
            assert_eq!(
                b.text,
                String::from_utf8_lossy(&raw[b.line as usize - 1]),
                "line {}",
                b.line
            );
            assert!(!b.error.is_empty());
        }
        let src = r.operators.iter().find(|o| o.name == "read_jsonl").unwrap();
        assert_eq!(src.uid, "src");
        assert_eq!(src.records_rejected, 3, "batch {batch}");
        assert_eq!(src.records_out, 8, "batch {batch}: every non-blank line");
        assert_eq!(r.operator("src").unwrap().records_rejected, 3);
    }
}

#[test]
fn malformed_jsonl_skip_policy_over_a_directory_in_parallel() {
    let dir = TempDir::new("malformed-dir");
    let a = write_malformed(&dir, "a.jsonl");
    let b = write_malformed(&dir, "b.jsonl");
    dir.write("c.jsonl", b"{\"id\":10,\"name\":\"j\"}\n");
    let env = Env::with_config(cfg(2, 1));
    let (good, bad) = env.read_jsonl_skipping::<Rec>(dir.path());
    let good = good.set_parallelism(2).collect();
    let bad = bad.collect();
    let r = env.execute("skip-dir").unwrap();
    let mut want = good_recs();
    want.extend(good_recs());
    want.push(Rec {
        id: 10,
        name: "j".into(),
    });
    assert_multiset_eq(good.take(), want, "good");
    let got: Vec<(String, u64)> = bad.take().into_iter().map(|b| (b.path, b.line)).collect();
    let mut expected = Vec::new();
    for f in [&a, &b] {
        for l in BAD_LINES {
            expected.push((f.display().to_string(), l));
        }
    }
    assert_multiset_eq(got, expected, "bad lines");
    let src = r.operators.iter().find(|o| o.name == "read_jsonl").unwrap();
    assert_eq!((src.parallelism, src.records_rejected), (2, 6));
}

#[test]
fn missing_input_is_an_io_source_error_naming_the_path() {
    let dir = TempDir::new("missing");
    let missing = dir.path().join("no-such-file.jsonl");
    let env = Env::new();
    env.read_jsonl::<Rec>(&missing).uid("in").discard();
    let err = common::execute_within(&env, "missing").unwrap_err();
    let msg = err.to_string();
    match err {
        JobError::SourceFailed {
            uid,
            source: SourceError::Io { path, source },
            ..
        } => {
            assert_eq!(uid, "in");
            assert_eq!(path, missing);
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("expected SourceFailed/Io, got {other:?}"),
    }
    assert!(msg.contains(&missing.display().to_string()), "{msg}");

    // The same for read_lines, and at parallelism 2 (every subtask fails the same way).
    let env = Env::new();
    env.read_lines(&missing).set_parallelism(2).discard();
    assert!(matches!(
        env.execute("missing-lines"),
        Err(JobError::SourceFailed { source: SourceError::Io { ref path, .. }, .. }) if path == &missing
    ));
}

// ---------------------------------------------------------------------------------------------
// sinks for records without `Display`: formatters, exactly-once JSON Lines

/// The visible (committed) files of an exactly-once sink in `dir`; fails on a staging file
/// left behind.
fn committed_lines(dir: &std::path::Path) -> Vec<String> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        assert!(!name.starts_with('.'), "staging file left behind: {name}");
        let text = std::fs::read_to_string(entry.path()).unwrap();
        lines.extend(text.lines().map(str::to_owned));
    }
    lines
}

#[test]
fn text_sinks_take_a_formatter_so_tuples_need_no_display_wrapper() {
    use std::fmt::Write;
    let dir = TempDir::new("text-with");
    let (through, staged) = (dir.path().join("through"), dir.path().join("staged"));
    let env = Env::new();
    let pairs = env
        .generate(1_000, |i| (format!("k{}", i % 10), i))
        .set_parallelism(2);
    pairs
        .clone()
        .write_text_with(&through, |(k, v): &(String, u64), out: &mut String| {
            write!(out, "{k}={v}")
        })
        .uid("through")
        .set_parallelism(2);
    pairs
        .write_text_exactly_once_with(&staged, |(k, v): &(String, u64), out: &mut String| {
            write!(out, "{k}\t{v}")
        })
        .uid("staged");
    env.execute("text-with").unwrap();
    assert_eq!(part_files(&through).len(), 2, "one part file per subtask");
    let expect = |sep: &str| -> Vec<String> {
        (0..1_000u64)
            .map(|i| format!("k{}{sep}{i}", i % 10))
            .collect()
    };
    assert_multiset_eq(read_part_lines(&through), expect("="), "write_text_with");
    assert_multiset_eq(
        committed_lines(&staged),
        expect("\t"),
        "write_text_exactly_once_with",
    );
}

#[test]
fn a_formatter_that_fails_fails_the_job_naming_the_file() {
    let dir = TempDir::new("text-with-fails");
    let env = Env::new();
    env.generate(10, |i| i)
        .write_text_with(dir.path(), |x: &u64, _: &mut String| {
            if *x == 7 {
                Err(std::fmt::Error)
            } else {
                Ok(())
            }
        })
        .uid("out");
    let err = env.execute("text-with-fails").unwrap_err();
    let text = err.to_string();
    assert!(text.contains("part-out-0"), "{text}");
    assert!(text.contains("formatter"), "{text}");
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Alert {
    card: u64,
    amount_cents: u64,
    note: String,
}

/// `write_jsonl_exactly_once` under two injected panics (restart-all from checkpoints):
/// every record is committed once, only committed files are visible, and the job's result
/// tells committed records from processed ones (replays included).
#[test]
fn write_jsonl_exactly_once_commits_every_record_once_across_injected_failures() {
    use weir_testing::{quiet_injected_panics, ExactlyOnce, FaultKind, RecordFaults};
    quiet_injected_panics();
    const N: u64 = 20_000;
    let dir = TempDir::new("jsonl-eo");
    let out = dir.path().join("out");
    // Both ids in source subtask 0's share (0..10,000), which reaches `alert` in order: the
    // first fault stops the job before 8,000 gets there, so two restarts however fast either
    // subtask runs (ids of both shares could fire in one attempt).
    let faults = RecordFaults::new("alert", FaultKind::Panic, vec![3_000u64, 8_000]);
    let mut cfg = weir::EnvConfig::default();
    cfg.checkpoint.interval = Some(std::time::Duration::from_millis(10));
    cfg.checkpoint.directory = dir.path().join("checkpoints");
    cfg.restart = Some(weir::RestartStrategy::FixedDelay {
        attempts: 5,
        delay: std::time::Duration::ZERO,
    });
    cfg.faults = faults.plan().clone();
    // Slow enough that checkpoints complete between the faults.
    cfg.rate_control = weir::rate::RateControlConfig::fixed(200_000.0);
    let env = Env::with_config(cfg);
    let wrapped = faults.wrap(|i: u64| Alert {
        card: i,
        amount_cents: i * 3,
        note: format!("\"quoted\" {i}"),
    });
    env.generate(N, |i| i)
        .set_parallelism(2)
        .map(wrapped)
        .uid("alert")
        .set_parallelism(2)
        .write_jsonl_exactly_once(&out)
        .uid("alerts")
        .set_parallelism(2);
    let handle = env.start("jsonl-exactly-once").unwrap();
    let result = common::within_timeout(move || handle.wait()).unwrap();
    assert_eq!(faults.fired(), 2, "{faults:?}");
    let alerts: Vec<Alert> = committed_lines(&out)
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for a in &alerts {
        assert_eq!(
            (a.amount_cents, &a.note),
            (a.card * 3, &format!("\"quoted\" {}", a.card))
        );
    }
    ExactlyOnce::new(0..N)
        .check(alerts.iter().map(|a| a.card))
        .assert_exactly_once();
    let sink = result.operator("alerts").unwrap();
    assert!(sink.records_in >= N, "{sink:?}");
    assert_eq!(sink.records_committed, N, "{sink:?}");
    assert!(result.checkpoints.unwrap().num_restarts >= 2);
}

// ---------------------------------------------------------------------------------------------
// what the job's result says about sinks and checkpoints

#[test]
fn the_result_counts_committed_records_at_sinks_only() {
    let env = Env::new();
    let out = env
        .generate(1_000, |i| i)
        .uid("src")
        .set_parallelism(2)
        .filter(|x| x % 2 == 0)
        .uid("even")
        .collect();
    let r = env.execute("committed-counts").unwrap();
    assert_eq!(out.len(), 500);
    let (src, even) = (r.operator("src").unwrap(), r.operator("even").unwrap());
    assert_eq!((src.records_out, src.records_committed), (1_000, 0));
    assert_eq!((even.records_in, even.records_committed), (1_000, 0));
    let sink = r.operators.last().unwrap();
    assert_eq!((sink.records_in, sink.records_committed), (500, 500));
    assert!(r.checkpoints.is_none(), "checkpoints off: no statistics");
}

#[test]
fn a_job_too_short_for_a_checkpoint_still_reports_checkpoint_statistics() {
    let dir = TempDir::new("short-ckpt");
    let mut cfg = weir::EnvConfig::default();
    cfg.checkpoint.interval = Some(std::time::Duration::from_secs(3600));
    cfg.checkpoint.directory = dir.path().to_owned();
    let env = Env::with_config(cfg);
    env.generate(10, |i| i).discard();
    let r = env.execute("short").unwrap();
    let stats = r
        .checkpoints
        .expect("checkpoints on: statistics, zero or not");
    assert_eq!(stats.number_of_completed_checkpoints, 0);
    assert_eq!(stats.num_restarts, 0);
    assert_eq!(r.operators.last().unwrap().records_committed, 10);
}
