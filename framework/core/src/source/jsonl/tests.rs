use super::*;

fn file(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-jsonl-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("in.txt");
    std::fs::write(&f, bytes).unwrap();
    f
}

fn cx(subtask: usize, parallelism: usize) -> SourceContext {
    SourceContext {
        subtask,
        parallelism,
    }
}

fn texts(r: &mut LineReader) -> Vec<(u64, u64, String)> {
    let mut out = Vec::new();
    while let Some(s) = r.next_text().unwrap() {
        let s = s.to_owned();
        out.push((r.line_number().unwrap(), r.byte_offset(), s));
    }
    out
}

#[test]
fn each_subtask_reads_the_lines_that_start_in_its_range() {
    // 30 bytes: ranges of 3 subtasks are [0, 10), [10, 20), [20, 30).
    let f = file("ranges", b"aaaaaaaa\nbbbbbbbbb\ncccc\n\ndd\nee");
    let got: Vec<_> = (0..3)
        .map(|k| texts(&mut LineReader::new(&f, cx(k, 3)).unwrap()))
        .collect();
    let owned = |v: &[(u64, u64, &str)]| {
        v.iter()
            .map(|(l, o, s)| (*l, *o, s.to_string()))
            .collect::<Vec<_>>()
    };
    // "bbbbbbbbb" starts at 9 and runs past 10: subtask 0's, and subtask 1 passes over
    // its end; "cccc" (19..23) is subtask 1's; the blank line 4 at 24 is passed over.
    assert_eq!(
        got,
        [
            owned(&[(1, 0, "aaaaaaaa"), (2, 9, "bbbbbbbbb")]),
            owned(&[(3, 19, "cccc")]),
            owned(&[(5, 25, "dd"), (6, 28, "ee")]),
        ]
    );
    std::fs::remove_dir_all(f.parent().unwrap()).unwrap();
}

#[test]
fn a_position_of_another_parallelism_is_refused() {
    let f = file("other-p", b"a\nb\nc\nd\n");
    let mut r = LineReader::new(&f, cx(1, 2)).unwrap();
    r.next_text().unwrap();
    let position = r.encoded_position().unwrap();
    let mut other = LineReader::new(&f, cx(1, 3)).unwrap();
    assert!(matches!(
        other.seek_encoded(&position),
        Err(SourceError::BadPosition { .. })
    ));
    // A position of the older line source (whole files dealt round robin) means the same
    // at parallelism 1, and nothing certain at another.
    let old = crate::checkpoint::encode(&(0u64, 4u64, 2u64)).unwrap();
    let mut one = LineReader::new(&f, cx(0, 1)).unwrap();
    one.seek_encoded(&old).unwrap();
    assert_eq!(texts(&mut one), [(3, 4, "c".into()), (4, 6, "d".into())]);
    assert!(matches!(
        LineReader::new(&f, cx(0, 2)).unwrap().seek_encoded(&old),
        Err(SourceError::BadPosition { .. })
    ));
    std::fs::remove_dir_all(f.parent().unwrap()).unwrap();
}
