//! Bad input never kills a job that asked to skip it: property tests feed arbitrary bytes
//! (valid JSON lines, bytes that are not UTF-8, NUL bytes, lines over the maximum length,
//! junk, blank lines, `\r\n` endings, a missing final newline) to the line sources and check,
//! against a model computed from the bytes alone, that nothing panics, every good line comes
//! out exactly once and in order, and every bad one is reported exactly once with its file,
//! line number, byte offset and kind — read straight through the `Source` trait (also
//! resuming from a position taken mid-file, as a restore does, and with the file split by
//! byte range among several subtasks), under the `Fail` policy, and through a real job with
//! a side output.

mod common;

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use weir::source::jsonl::{
    FailingJsonl, JsonlReader, LineReader, LocatedLines, SkippingJsonl, SkippingLines, TextLines,
};
use weir::source::{Source, SourceContext, SourceStatus};
use weir::{BadLine, BadLineKind, Env, EnvConfig, SourceError};

use common::{assert_multiset_eq, TempDir};

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
struct Rec {
    id: u64,
    #[serde(default)]
    name: String,
}

/// One line as generated (rendered to bytes by [`render`]).
#[derive(Debug, Clone)]
enum Spec {
    /// A record with a name of this many bytes.
    Good(usize),
    /// A record of exactly the maximum length.
    Exact,
    /// Only white space.
    Blank(Vec<u8>),
    /// A record with an invalid UTF-8 byte in its name.
    NotUtf8(u8),
    /// A record with a NUL byte in its name.
    Nul,
    /// This many bytes over the maximum.
    Long(usize),
    /// Arbitrary bytes (no `\n`).
    Junk(Vec<u8>),
}

fn spec() -> impl Strategy<Value = Spec> {
    prop_oneof![
        6 => (0usize..40).prop_map(Spec::Good),
        1 => Just(Spec::Exact),
        1 => prop::collection::vec(prop::sample::select(vec![b' ', b'\t', b'\r']), 0..4)
            .prop_map(Spec::Blank),
        1 => (0x80u8..=0xff).prop_map(Spec::NotUtf8),
        1 => Just(Spec::Nul),
        1 => prop_oneof![1usize..300, Just(70_000usize)].prop_map(Spec::Long),
        2 => prop::collection::vec(any::<u8>().prop_filter("no newline", |b| *b != b'\n'), 0..30)
            .prop_map(Spec::Junk),
    ]
}

/// An input: its lines, their endings (`\r\n` or `\n`), whether the last has one, and the
/// maximum line length.
fn input() -> impl Strategy<Value = (Vec<(Spec, bool)>, bool, usize)> {
    (
        prop::collection::vec((spec(), any::<bool>()), 0..30),
        any::<bool>(),
        prop_oneof![Just(64usize), Just(100_000usize)],
    )
}

fn record(id: u64, name: Vec<u8>) -> Vec<u8> {
    let mut v = format!("{{\"id\":{id},\"name\":\"").into_bytes();
    v.extend(name);
    v.extend_from_slice(b"\"}");
    v
}

/// The bytes of an input.
fn render(lines: &[(Spec, bool)], final_newline: bool, max: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, (spec, crlf)) in lines.iter().enumerate() {
        let id = i as u64;
        let line = match spec {
            Spec::Good(n) => record(id, vec![b'g'; *n]),
            Spec::Exact => {
                let base = record(id, Vec::new()).len();
                record(id, vec![b'e'; max.saturating_sub(base)])
            }
            Spec::Blank(ws) => ws.clone(),
            Spec::NotUtf8(b) => record(id, vec![b'a', *b, b'z']),
            Spec::Nul => record(id, b"a\0z".to_vec()),
            Spec::Long(over) => record(id, vec![b'l'; max + over]),
            Spec::Junk(bytes) => bytes.clone(),
        };
        out.extend(line);
        if i + 1 < lines.len() || final_newline {
            out.extend_from_slice(if *crlf { b"\r\n" } else { b"\n" });
        }
    }
    out
}

/// What a line source must make of a line: the model.
#[derive(Debug, Clone, PartialEq)]
enum Expect<T> {
    Good(T),
    Bad {
        line: u64,
        byte_offset: u64,
        kind: BadLineKind,
        text: String,
    },
}

/// The lines of `bytes` as the line sources must read them, with `parse` for the good ones
/// (`Err(last)`: the line does not parse; `last`: it is the last line, without a newline).
fn model<T>(
    bytes: &[u8],
    max: usize,
    parse: impl Fn(&str, bool) -> Result<T, BadLineKind>,
) -> Vec<Expect<T>> {
    let mut out = Vec::new();
    let mut offset = 0u64;
    let mut segments: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    let unterminated = !bytes.ends_with(b"\n");
    if segments.last().is_some_and(|s| s.is_empty()) {
        segments.pop(); // nothing after the last newline
    }
    let n = segments.len();
    for (i, seg) in segments.into_iter().enumerate() {
        let (line, at) = (i as u64 + 1, offset);
        offset += seg.len() as u64 + 1;
        let bad = |kind, shown: &[u8]| Expect::Bad {
            line,
            byte_offset: at,
            kind,
            text: String::from_utf8_lossy(shown).into_owned(),
        };
        if seg.len() > max {
            out.push(bad(BadLineKind::TooLong, &seg[..1024.min(max)]));
            continue;
        }
        let mut end = seg.len();
        while end > 0 && seg[end - 1] == b'\r' {
            end -= 1;
        }
        let content = &seg[..end];
        if content.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if content.contains(&0) {
            out.push(bad(BadLineKind::Nul, content));
            continue;
        }
        let Ok(text) = std::str::from_utf8(content) else {
            out.push(bad(BadLineKind::NotUtf8, content));
            continue;
        };
        match parse(text, i + 1 == n && unterminated) {
            Ok(v) => out.push(Expect::Good(v)),
            Err(kind) => out.push(bad(kind, content)),
        }
    }
    out
}

fn json_model(bytes: &[u8], max: usize) -> Vec<Expect<Rec>> {
    model(bytes, max, |s, last| {
        serde_json::from_str::<Rec>(s).map_err(|_| {
            if last {
                BadLineKind::Truncated
            } else {
                BadLineKind::Unparsable
            }
        })
    })
}

fn text_model(bytes: &[u8], max: usize) -> Vec<Expect<String>> {
    model(bytes, max, |s, _| Ok(s.to_owned()))
}

/// What a skipping source emitted, as the model writes it; checks the path of bad lines.
fn observed<T>(got: Vec<Result<T, BadLine>>, path: &Path) -> Vec<Expect<T>> {
    got.into_iter()
        .map(|r| match r {
            Ok(v) => Expect::Good(v),
            Err(b) => {
                assert_eq!(b.path, path.display().to_string());
                assert!(!b.error.is_empty());
                Expect::Bad {
                    line: b.line,
                    byte_offset: b.byte_offset,
                    kind: b.kind,
                    text: b.text,
                }
            }
        })
        .collect()
}

/// Polls `src` `batches` times at most (`usize::MAX`: to its end).
fn drain<T, S: Source<T>>(src: &mut S, batch: usize, batches: usize) -> Vec<T> {
    let mut out = Vec::new();
    for _ in 0..batches {
        match src
            .poll_batch(&mut out, batch)
            .expect("a skipping source never fails")
        {
            SourceStatus::End => break,
            SourceStatus::More => {}
            SourceStatus::Idle { .. } => panic!("a file source never idles"),
        }
    }
    out
}

/// Reads all of a skipping source made by `make`, in two runs: `first` batches, then a new
/// source resumed from the first one's position (a restore).
fn read_resuming<T, S: Source<T>>(make: impl Fn() -> S, batch: usize, first: usize) -> Vec<T> {
    let mut src = make();
    let mut out = drain(&mut src, batch, first);
    let position = src.position().expect("line sources are replayable");
    let mut resumed = make();
    resumed.seek(&position).expect("a position it gave");
    out.extend(drain(&mut resumed, batch, usize::MAX));
    out
}

/// What subtasks `0..parallelism` read (`read(k)`), one after the other.
fn by_subtasks<T>(parallelism: usize, read: impl Fn(usize) -> Vec<T>) -> Vec<T> {
    (0..parallelism).flat_map(read).collect()
}

const CX: SourceContext = SourceContext {
    subtask: 0,
    parallelism: 1,
};

/// The first malformed line of a model, and the good records before it.
fn up_to_first_bad<T: Clone>(model: &[Expect<T>]) -> (Vec<T>, Option<(u64, u64)>) {
    let mut good = Vec::new();
    for e in model {
        match e {
            Expect::Good(v) => good.push(v.clone()),
            Expect::Bad {
                line, byte_offset, ..
            } => return (good, Some((*line, *byte_offset))),
        }
    }
    (good, None)
}

/// Reads a failing source to its end or its error: (records, (line, byte offset) of the
/// error, if any).
fn read_failing<T, S: Source<T>>(src: &mut S, path: &Path) -> (Vec<T>, Option<(u64, u64)>) {
    let mut out = Vec::new();
    loop {
        let mut batch = Vec::new();
        match src.poll_batch(&mut batch, 3) {
            Ok(status) => {
                out.extend(batch);
                if status == SourceStatus::End {
                    return (out, None);
                }
            }
            Err(SourceError::Malformed {
                path: p,
                line,
                byte_offset,
                message,
            }) => {
                // The records of the failing batch before the bad line were read too.
                out.extend(batch);
                assert_eq!(p, path);
                assert!(!message.is_empty());
                return (out, Some((line, byte_offset)));
            }
            Err(e) => panic!("unexpected source error: {e}"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn line_sources_report_every_line_once_in_place(
        (lines, final_newline, max) in input(),
        batch in 1usize..8,
        first in 0usize..6,
        parallelism in 1usize..5,
    ) {
        let dir = TempDir::new("prop-sources");
        let bytes = render(&lines, final_newline, max);
        let file = dir.write("in.jsonl", &bytes);
        // Subtask k of `parallelism` reads the k-th byte range of the file: their lines,
        // subtask after subtask, are the file's, in order.
        let cx = |subtask| SourceContext { subtask, parallelism };

        // JSON Lines, skipping, each subtask read in two runs as across a restore.
        let expected = json_model(&bytes, max);
        let got: Vec<_> = by_subtasks(parallelism, |k| read_resuming(
            || SkippingJsonl(JsonlReader::<Rec>::new(&file, cx(k)).unwrap().with_max_line_bytes(max)),
            batch,
            first,
        ));
        prop_assert_eq!(&observed(got, &file), &expected);

        // Text lines, skipping.
        let expected_text = text_model(&bytes, max);
        let got: Vec<_> = by_subtasks(parallelism, |k| read_resuming(
            || SkippingLines(LineReader::new(&file, cx(k)).unwrap().with_max_line_bytes(max)),
            batch,
            first,
        ));
        prop_assert_eq!(&observed(got, &file), &expected_text);

        // Located lines: every good line's number and offset too (a later range counts the
        // lines before it), as one subtask reads them.
        let located_by = |k, p| read_resuming(
            || LocatedLines::new(
                LineReader::new(&file, SourceContext { subtask: k, parallelism: p })
                    .unwrap()
                    .with_max_line_bytes(max),
            ),
            batch,
            first,
        );
        let got: Vec<_> = by_subtasks(parallelism, |k| located_by(k, parallelism));
        prop_assert_eq!(got, located_by(0, 1));

        // The `Fail` policy: the good records up to the first bad line, then an error there.
        let mut failing = FailingJsonl(
            JsonlReader::<Rec>::new(&file, CX).unwrap().with_max_line_bytes(max),
        );
        prop_assert_eq!(read_failing(&mut failing, &file), up_to_first_bad(&expected));
        let mut failing = TextLines(LineReader::new(&file, CX).unwrap().with_max_line_bytes(max));
        prop_assert_eq!(read_failing(&mut failing, &file), up_to_first_bad(&expected_text));
    }
}

fn config(max: usize) -> EnvConfig {
    let mut c = common::cfg(4, 2);
    c.max_line_bytes = max;
    c
}

/// (path, line, byte offset, kind, text) of the bad lines a model expects in `file`.
type Located = (String, u64, u64, BadLineKind, String);

fn expected_in<T: Clone>(
    model: &[Expect<T>],
    file: &Path,
    good: &mut Vec<T>,
    bad: &mut Vec<Located>,
) {
    for e in model {
        match e {
            Expect::Good(v) => good.push(v.clone()),
            Expect::Bad {
                line,
                byte_offset,
                kind,
                text,
            } => bad.push((
                file.display().to_string(),
                *line,
                *byte_offset,
                *kind,
                text.clone(),
            )),
        }
    }
}

fn located(b: BadLine) -> Located {
    (b.path, b.line, b.byte_offset, b.kind, b.text)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn a_job_with_a_side_output_keeps_every_line(
        (a, a_newline, max) in input(),
        (b, b_newline, _) in input(),
    ) {
        let dir = TempDir::new("prop-job");
        let files: Vec<(PathBuf, Vec<u8>)> = [("a.jsonl", &a, a_newline), ("b.jsonl", &b, b_newline)]
            .into_iter()
            .map(|(name, lines, nl)| {
                let bytes = render(lines, nl, max);
                (dir.write(name, &bytes), bytes)
            })
            .collect();

        // JSON Lines, three subtasks (each reads a byte range of both files), a side output
        // of bad lines.
        let (mut good, mut bad) = (Vec::new(), Vec::new());
        for (f, bytes) in &files {
            expected_in(&json_model(bytes, max), f, &mut good, &mut bad);
        }
        let env = Env::with_config(config(max));
        let (ok, malformed) = env.read_jsonl_skipping::<Rec>(dir.path());
        let ok = ok.uid("in").set_parallelism(3).collect();
        let malformed = malformed.collect();
        let r = common::execute_within(&env, "prop-jsonl").unwrap();
        prop_assert_eq!(r.operator("in").unwrap().records_rejected, bad.len() as u64);
        assert_multiset_eq(ok.take(), good, "good records");
        assert_multiset_eq(malformed.take().into_iter().map(located).collect(), bad, "bad lines");

        // Text lines, the same way.
        let (mut good, mut bad) = (Vec::new(), Vec::new());
        for (f, bytes) in &files {
            expected_in(&text_model(bytes, max), f, &mut good, &mut bad);
        }
        let env = Env::with_config(config(max));
        let (ok, malformed) = env.read_lines_skipping(dir.path());
        let ok = ok.set_parallelism(2).collect();
        let malformed = malformed.collect();
        common::execute_within(&env, "prop-lines").unwrap();
        assert_multiset_eq(ok.take(), good, "good lines");
        assert_multiset_eq(malformed.take().into_iter().map(located).collect(), bad, "bad text lines");
    }
}

#[test]
fn a_job_without_the_skip_policy_fails_at_the_bad_line() {
    let dir = TempDir::new("fail-coordinates");
    let file = dir.write(
        "in.jsonl",
        b"{\"id\":1}\n\n{\"id\":2,\"name\":\"a\0b\"}\n{\"id\":3}\n",
    );
    let env = Env::new();
    env.read_jsonl::<Rec>(&file).discard();
    let err = common::execute_within(&env, "fail").unwrap_err();
    let msg = err.to_string();
    match err {
        weir::JobError::SourceFailed {
            source:
                SourceError::Malformed {
                    path,
                    line,
                    byte_offset,
                    ..
                },
            ..
        } => assert_eq!((path, line, byte_offset), (file.clone(), 3, 10)),
        other => panic!("expected SourceFailed/Malformed, got {other:?}"),
    }
    assert!(msg.contains("line 3 (byte offset 10)"), "{msg}");
    assert!(msg.contains("NUL byte"), "{msg}");
}
