use super::merge::merge_payload;
use super::*;

type Payload = Vec<(usize, Vec<(u64, String)>)>;

fn delta(full: bool, entries: &[(usize, u64, Option<&str>)]) -> KeyedDelta {
    let mut d = KeyedDelta::new(full);
    for (g, k, v) in entries {
        d.push(*g, k, v.map(|v| (*k, v.to_owned())).as_ref())
            .expect("encodes");
    }
    d
}

type Run = (Vec<u8>, RunRef);

fn merged(runs: &[Run]) -> Result<Payload, String> {
    merged_of(runs, None)
}

/// The payload of `runs` (of the groups `range`), its groups' entries sorted.
fn merged_of(runs: &[Run], range: Option<Range<u32>>) -> Result<Payload, String> {
    let readers = runs
        .iter()
        .map(|(r, rf)| {
            RunReader::new(std::io::Cursor::new(r.as_slice()), rf, range.clone()).map(|x| (x, rf))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let bytes = merge_payload(readers)?;
    let mut p: Payload = ciborium::from_reader(bytes.as_slice()).map_err(|e| e.to_string())?;
    for (_, entries) in &mut p {
        entries.sort();
    }
    Ok(p)
}

#[test]
fn a_chain_merges_to_the_newest_entry_of_each_key() {
    let base = encode(&delta(
        true,
        &[(300, 3, Some("c")), (0, 1, Some("a")), (0, 2, Some("b"))],
    ));
    let d1 = encode(&delta(false, &[(7, 4, Some("d")), (0, 1, Some("a2"))]));
    let d2 = encode(&delta(
        false,
        &[(0, 2, None), (7, 4, Some("d2")), (9, 5, None)],
    ));
    assert_eq!(
        merged(&[base.clone(), d1.clone(), d2]).expect("merges"),
        vec![
            (0, vec![(1, "a2".into())]),
            (7, vec![(4, "d2".into())]),
            (300, vec![(3, "c".into())]),
        ]
    );
    assert_eq!(
        merged(&[base, d1]).expect("merges"),
        vec![
            (0, vec![(1, "a2".into()), (2, "b".into())]),
            (7, vec![(4, "d".into())]),
            (300, vec![(3, "c".into())]),
        ]
    );
}

#[test]
fn a_payload_reads_back_as_a_run() {
    let payload = crate::checkpoint::encode(&vec![
        (2usize, vec![(5u64, "e".to_owned()), (4, "d".into())]),
        (9, vec![(1, "a".into())]),
    ])
    .expect("encodes");
    let run = encode(&KeyedDelta::from_payload(payload, false).expect("reads"));
    let p = merged(&[run]).expect("merges");
    assert_eq!(
        p,
        vec![
            (2, vec![(4, "d".into()), (5, "e".into())]),
            (9, vec![(1, "a".into())])
        ]
    );
    // With the operator's own fields first.
    let own = crate::checkpoint::encode(&("own", vec![(3usize, vec![(1u64, "x".to_owned())])]))
        .expect("encodes");
    let d = KeyedDelta::from_payload(own, true).expect("reads");
    let (run, rf) = encode(&d);
    let bytes = merge_payload(vec![(
        RunReader::new(std::io::Cursor::new(run.as_slice()), &rf, None).expect("opens"),
        &rf,
    )])
    .expect("merges");
    let back: (String, Payload) = ciborium::from_reader(bytes.as_slice()).expect("decodes");
    assert_eq!(back, ("own".into(), vec![(3, vec![(1, "x".into())])]));
}

#[test]
fn damaged_runs_are_named_not_misread() {
    let (run, rf) = encode(&delta(true, &[(0, 1, Some("a")), (1, 2, Some("b"))]));
    // A bit flipped in the block (its last bytes: the end of the frame).
    let blocks_end = run.len() - TRAILER - (4 + INDEX_LINE);
    let mut flipped = run.clone();
    flipped[blocks_end - 6] ^= 1;
    let err = merged(&[(flipped, rf.clone())]).expect_err("a flipped bit is found");
    assert!(err.contains("corrupted"), "{err}");
    // A bit flipped in the index.
    let mut flipped = run.clone();
    flipped[blocks_end + 6] ^= 1;
    let err = merged(&[(flipped, rf.clone())]).expect_err("a flipped index bit is found");
    assert!(err.contains("corrupted"), "{err}");
    let err = merged(&[(run[..run.len() - 5].to_vec(), rf.clone())]).expect_err("a truncated run");
    assert!(err.contains("corrupted"), "{err}");
    // Another run's bytes under this reference.
    let other = encode(&delta(true, &[(0, 1, Some("b")), (1, 2, Some("a"))]));
    let err = merged(&[(other.0, rf)]).expect_err("another run");
    assert!(err.contains("checksum"), "{err}");
}

/// Blocks of `run` (from its index).
fn blocks_of(run: &Run) -> Vec<Block> {
    RunReader::new(std::io::Cursor::new(run.0.as_slice()), &run.1, None)
        .expect("opens")
        .blocks
        .into()
}

#[test]
fn a_range_reads_only_the_blocks_of_its_groups() {
    // 32 groups of 2 keys with 40 KB values: blocks of about 256 KB, 5 or 6 groups each.
    let big = "x".repeat(40 << 10);
    let entries: Vec<(usize, u64, Option<&str>)> = (0..64u64)
        .map(|k| ((k / 2) as usize, k, Some(big.as_str())))
        .collect();
    let base = encode(&delta(true, &entries));
    let d1 = encode(&delta(false, &[(3, 6, None), (20, 40, Some("new"))]));
    let blocks = blocks_of(&base);
    assert!(blocks.len() >= 4, "{blocks:?}");
    for w in blocks.windows(2) {
        assert!(w[0].last <= w[1].first, "blocks in group order: {blocks:?}");
    }
    let chain = [base.clone(), d1];
    let whole = merged(&chain).expect("merges");
    for range in [0..1, 3..4, 5..17, 16..32, 31..200, 40..50] {
        let part = merged_of(&chain, Some(range.clone())).expect("merges");
        let expected: Payload = whole
            .iter()
            .filter(|(g, _)| range.contains(&(*g as u32)))
            .cloned()
            .collect();
        assert_eq!(part, expected, "groups {range:?}");
    }
    // A block the range does not need is not read: damaged, the range still reads.
    let last = *blocks.last().expect("blocks");
    let mut damaged = base.0.clone();
    damaged[last.offset as usize + 20] ^= 0xff;
    let damaged = (damaged, base.1.clone());
    let part = merged_of(std::slice::from_ref(&damaged), Some(0..blocks[0].last + 1))
        .expect("reads around the damage");
    assert_eq!(part.len() as u32, blocks[0].last + 1);
    let err = merged_of(&[damaged], Some(last.first..last.last + 1))
        .expect_err("the damaged block is read");
    assert!(err.contains("corrupted"), "{err}");
}

#[test]
fn runs_of_the_first_format_still_read() {
    // WEIRRUN1: one frame of records ending with kind 0; the checksum the whole file's.
    let mut run = MAGIC_V1.to_vec();
    let mut frame = lz4_flex::frame::FrameEncoder::new(&mut run);
    for (g, k) in [(1u32, 1u64), (4, 2)] {
        let mut key = Vec::new();
        ciborium::into_writer(&k, &mut key).expect("encodes");
        let mut value = Vec::new();
        ciborium::into_writer(&(k, format!("v{k}")), &mut value).expect("encodes");
        record(&mut frame, ENTRY, g, &key, &value).expect("writes");
    }
    record(&mut frame, END, 0, &[], &[]).expect("writes");
    frame.finish().expect("writes");
    let rf = RunRef {
        file: "old".into(),
        len: run.len() as u64,
        crc32: crc32fast::hash(&run),
    };
    let old = (run, rf);
    assert_eq!(
        merged(std::slice::from_ref(&old)).expect("reads"),
        vec![(1, vec![(1, "v1".into())]), (4, vec![(2, "v2".into())])]
    );
    assert_eq!(
        merged_of(std::slice::from_ref(&old), Some(2..8)).expect("reads"),
        vec![(4, vec![(2, "v2".into())])]
    );
    let mut flipped = old.0.clone();
    let n = flipped.len();
    flipped[n - 6] ^= 1;
    assert!(merged(&[(flipped, old.1)]).is_err());
}

#[test]
fn records_are_in_key_byte_order_and_a_key_written_twice_keeps_its_last_entry() {
    // Keys shorter and longer than 8 encoded bytes, sharing prefixes, one written twice.
    let keys = [
        "abcdefghij",
        "a",
        "abcdefghi",
        "ab",
        "",
        "abcdefghij",
        "abcdefgh",
        "b",
        "a\0",
    ];
    let mut d = KeyedDelta::new(false);
    for (n, k) in keys.iter().enumerate() {
        d.push(3, *k, Some(&(k.to_string(), n as u64)))
            .expect("encodes");
    }
    let (run, rf) = encode(&d);
    let mut r = RunReader::new(std::io::Cursor::new(run.as_slice()), &rf, None).expect("opens");
    let mut rec = Record::default();
    let mut got: Vec<(Vec<u8>, (String, u64))> = Vec::new();
    while r.next(&mut rec).expect("reads") {
        got.push((
            rec.key.clone(),
            ciborium::from_reader(rec.value.as_slice()).expect("decodes"),
        ));
    }
    let mut expected: Vec<(Vec<u8>, (String, u64))> = Vec::new();
    for (n, k) in keys.iter().enumerate() {
        let mut enc = Vec::new();
        ciborium::into_writer(k, &mut enc).expect("encodes");
        expected.retain(|(e, _)| *e != enc);
        expected.push((enc, (k.to_string(), n as u64)));
    }
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(got, expected);
}

#[test]
fn materializing_a_chain_writes_one_equal_base() {
    let dir = std::env::temp_dir().join(format!("weir-runs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let chain = vec![
        write(
            &dir,
            "s/1.full",
            &delta(true, &[(0, 1, Some("a")), (4, 2, Some("b"))]),
        )
        .expect("writes"),
        write(
            &dir,
            "s/2.delta",
            &delta(false, &[(4, 2, None), (5, 3, Some("c"))]),
        )
        .expect("writes"),
    ];
    let base = materialize(&dir, &chain, "s/3.merged").expect("merges");
    assert_eq!(
        payload(&dir, &chain).expect("reads"),
        payload(&dir, &[base]).expect("reads")
    );
    let _ = std::fs::remove_dir_all(&dir);
}
