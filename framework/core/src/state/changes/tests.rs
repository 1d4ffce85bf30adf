use super::*;

type Payload = Vec<(usize, Vec<(u64, String)>)>;

fn decode(bytes: &[u8]) -> Payload {
    let mut p: Payload = ciborium::from_reader(bytes).expect("the image's payload decodes");
    for (_, entries) in &mut p {
        entries.sort();
    }
    p
}

fn delta(full: bool, entries: &[(usize, u64, Option<&str>)]) -> KeyedDelta {
    let mut d = KeyedDelta::new(full);
    for (g, k, v) in entries {
        d.push(*g, k, v.map(|v| (*k, v.to_owned())).as_ref())
            .expect("encodes");
    }
    d
}

#[test]
fn skip_steps_over_nested_and_indefinite_items_whole() {
    // [_ 1, [2, "ab"], {_ "a": [_ ], "b": tag(1) 5}], then a trailing 0.
    let item: &[u8] = &[
        0x9f, 0x01, 0x82, 0x02, 0x62, b'a', b'b', 0xbf, 0x61, b'a', 0x9f, 0xff, 0x61, b'b', 0xc1,
        0x05, 0xff, 0xff,
    ];
    let mut bytes = item.to_vec();
    bytes.push(0x00);
    let mut r = Reader { b: &bytes, at: 0 };
    r.skip().expect("skips");
    assert_eq!(r.at, item.len());
    r.skip().expect("skips the trailing 0");
    assert_eq!(r.at, bytes.len());
    // Cut short anywhere inside, it is an error, never a success.
    for cut in 1..item.len() {
        let mut r = Reader {
            b: &item[..cut],
            at: 0,
        };
        assert!(r.skip().is_err(), "cut at {cut}");
    }
    // [[_ 1], 3]: a level of indefinite length inside a definite one, items after it.
    let mut r = Reader {
        b: &[0x82, 0x9f, 0x01, 0xff, 0x03, 0x00],
        at: 0,
    };
    r.skip().expect("skips");
    assert_eq!(r.at, 5);
    // An array that says it holds 2^64 - 1 items, with none: an error, not a long loop.
    let huge = [0x9b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
    assert!(Reader { b: &huge, at: 0 }.skip().is_err());
    // 100,000 arrays deep: no stack overflow.
    let mut deep = vec![0x81; 100_000];
    deep.push(0x00);
    let mut r = Reader { b: &deep, at: 0 };
    r.skip().expect("skips");
    assert_eq!(r.at, deep.len());
}

#[test]
fn heads_are_what_ciborium_writes() {
    for n in [0u64, 1, 23, 24, 255, 256, 65_535, 65_536, 1 << 32, u64::MAX] {
        let mut ours = Vec::new();
        head(&mut ours, UNSIGNED, n);
        let mut theirs = Vec::new();
        ciborium::into_writer(&n, &mut theirs).expect("encodes");
        assert_eq!(ours, theirs, "{n}");
    }
    let v: Vec<u8> = vec![1; 300];
    let mut ours = Vec::new();
    head(&mut ours, ARRAY, 300);
    for x in &v {
        ciborium::into_writer(x, &mut ours).expect("encodes");
    }
    let mut theirs = Vec::new();
    ciborium::into_writer(&v, &mut theirs).expect("encodes");
    assert_eq!(ours, theirs);
}

#[test]
fn an_image_applies_deltas_in_order_and_reads_as_the_payload() {
    let mut image = KeyedImage::default();
    image.apply(delta(
        true,
        &[(0, 1, Some("a")), (0, 2, Some("b")), (300, 3, Some("c"))],
    ));
    image.apply(delta(false, &[(0, 1, Some("a2")), (7, 4, Some("d"))]));
    image.apply(delta(false, &[(0, 2, None), (7, 4, Some("d2"))]));
    assert_eq!(
        decode(&image.payload()),
        vec![
            (0, vec![(1, "a2".into())]),
            (7, vec![(4, "d2".into())]),
            (300, vec![(3, "c".into())]),
        ]
    );
    assert_eq!(image.keys(), 3);
    // A full delta replaces everything.
    image.apply(delta(true, &[(1, 5, Some("e"))]));
    assert_eq!(decode(&image.payload()), vec![(1, vec![(5, "e".into())])]);
    // An empty state reads as an empty payload.
    image.apply(delta(true, &[]));
    assert_eq!(decode(&image.payload()), vec![]);
}

#[test]
fn a_snapshot_loads_as_the_image_it_was_written_from() {
    // Written by serde, as the keyed operator writes its snapshot: entries with a
    // nested value of every kind the reader must step over.
    type Entry = (
        String,
        (
            Vec<u8>,
            std::collections::BTreeMap<String, i64>,
            Option<f64>,
        ),
        Vec<(i64, bool)>,
    );
    let entry = |k: &str| -> Entry {
        (
            k.to_owned(),
            (vec![1, 2, 3], [("x".to_owned(), -5i64)].into(), Some(1.5)),
            vec![(-1, true)],
        )
    };
    type Groups = Vec<(usize, Vec<Entry>)>;
    let groups: Groups = vec![
        (3, vec![entry("a"), entry("b")]),
        (70_000, vec![entry(&"long".repeat(30))]),
    ];
    let mut bytes = Vec::new();
    ciborium::into_writer(&groups, &mut bytes).expect("encodes");
    let mut image = KeyedImage::default();
    image.load(&bytes, false).expect("loads");
    assert_eq!(image.keys(), 3);
    let mut back: Groups = ciborium::from_reader(image.payload().as_slice()).expect("decodes");
    for (_, e) in &mut back {
        e.sort_by(|a, b| a.0.cmp(&b.0));
    }
    assert_eq!(back, groups);
    // A delta on a loaded image replaces one key's entry.
    let mut d = KeyedDelta::new(false);
    let changed = entry("b");
    d.push(
        3,
        &changed.0,
        Some(&(
            changed.0.clone(),
            (
                vec![9u8],
                std::collections::BTreeMap::<String, i64>::new(),
                None::<f64>,
            ),
            Vec::<(i64, bool)>::new(),
        )),
    )
    .expect("encodes");
    image.apply(d);
    assert_eq!(image.keys(), 3);
    // With the operator's own fields first.
    let mut with_own = Vec::new();
    ciborium::into_writer(&(("own", 1u8), &groups), &mut with_own).expect("encodes");
    image.load(&with_own, true).expect("loads");
    let (own, mut back): ((String, u8), Groups) =
        ciborium::from_reader(image.payload().as_slice()).expect("decodes");
    for (_, e) in &mut back {
        e.sort_by(|a, b| a.0.cmp(&b.0));
    }
    assert_eq!((own, back), (("own".to_owned(), 1), groups));
    // Bad input is an error, and the image is then empty.
    assert!(image.load(&with_own[..with_own.len() - 1], true).is_err());
    assert_eq!(image.keys(), 0);
    assert!(image.load(&[0xff], false).is_err());
    assert!(
        image.load(&with_own, false).is_err(),
        "own fields read as a group"
    );
}

#[test]
fn own_fields_come_first_as_a_pair() {
    let mut d = delta(true, &[(2, 1, Some("x"))]);
    let mut own = Vec::new();
    ciborium::into_writer(&("fields", 7u32), &mut own).expect("encodes");
    d.own = Some(own);
    let mut image = KeyedImage::default();
    image.apply(d);
    let (own, groups): ((String, u32), Payload) =
        ciborium::from_reader(image.payload().as_slice()).expect("decodes");
    assert_eq!(own, ("fields".into(), 7));
    assert_eq!(groups, vec![(2, vec![(1, "x".into())])]);
}

#[test]
fn a_log_takes_each_written_key_once_per_generation() {
    let mut log = ChangeLog::<u64>::default();
    let mut at = [0 as Generation; 3];
    let _ = log.touch(&0, &mut at[0]);
    assert_eq!(log.take(false), None, "the first take is everything");
    let _ = log.touch(&0, &mut at[0]);
    let _ = log.touch(&0, &mut at[0]);
    let _ = log.touch(&2, &mut at[2]);
    assert_eq!(log.take(false), Some(vec![0, 2]));
    assert_eq!(log.take(false), Some(vec![]));
    let _ = log.touch(&1, &mut at[1]);
    log.lose_track();
    assert_eq!(log.take(false), None);
    let _ = log.touch(&1, &mut at[1]);
    assert_eq!(log.take(true), None, "asked for everything");
    assert_eq!(log.inserted(&5), log.generation);
    assert_eq!(log.take(false), Some(vec![5]));
}

#[test]
fn a_handoff_applied_on_two_threads_is_the_one_applied_on_one() {
    let mut base = KeyedImage::default();
    let all: Vec<(usize, u64, Option<&str>)> = (0..4000u64)
        .map(|k| ((k % 40) as usize, k, Some("base")))
        .collect();
    base.apply(delta(true, &all));
    // Updates (one longer than before), removals (all of group 7's keys), new keys and
    // new groups, ordered by group as the backup orders a hand-off.
    let mut changes: Vec<(usize, u64, Option<&str>)> = Vec::new();
    for k in 0..6000u64 {
        // The base's keys in their groups; new keys in new groups too.
        let g = if k < 4000 { k % 40 } else { 40 + k % 10 } as usize;
        let v = match k % 5 {
            _ if g == 7 => None,
            0 => Some("changed"),
            1 => None,
            _ => Some("x"),
        };
        changes.push((g, k, v));
    }
    changes.sort_by_key(|c| c.0);
    let d = delta(false, &changes);
    let held = base.clone();
    let mut one = base.clone();
    one.apply_part(&d, 0, d.index.len());
    let mut two = base.clone();
    two.apply_part_parallel(&d, 0, 1000);
    two.apply_part_parallel(&d, 1000, d.index.len());
    assert_eq!(two, one);
    assert!(!two.groups.contains_key(&7), "a group emptied is dropped");
    assert_eq!(decode(&two.payload()), decode(&one.payload()));
    assert_eq!(base, held, "a clone sharing the groups is not written");
    // One group only, or entries not ordered by group: one thread, the same result.
    let d = delta(
        false,
        &[(3, 1, Some("a")), (3, 2, None), (3, 5000, Some("b"))],
    );
    let (mut one, mut two) = (base.clone(), base.clone());
    one.apply_part(&d, 0, 3);
    two.apply_part_parallel(&d, 0, 3);
    assert_eq!(two, one);
    for unordered in [
        [
            (9, 1, Some("a")),
            (2, 2, None),
            (9, 3, Some("b")),
            (1, 5, Some("c")),
        ],
        // A middle the halves would split at, with a larger group before it.
        [
            (30, 30, Some("a")),
            (2, 2, None),
            (5, 5, Some("b")),
            (9, 9, Some("c")),
        ],
    ] {
        let d = delta(false, &unordered);
        let (mut one, mut two) = (base.clone(), base.clone());
        one.apply_part(&d, 0, 4);
        two.apply_part_parallel(&d, 0, 4);
        assert_eq!(two, one);
    }
}

#[test]
fn small_bytes_keep_short_ones_inline_and_long_ones_on_the_heap_alike() {
    assert_eq!(std::mem::size_of::<KeyBytes>(), 24);
    for len in [0usize, 1, 22, 23, 300] {
        let bytes: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let mut k = KeyBytes::new(&bytes);
        assert_eq!(&*k, &bytes[..]);
        assert_eq!(matches!(k, SmallBytes::Inline(..)), len <= 22, "{len}");
        assert_eq!(KeyBytes::new(&bytes), k, "equal as bytes");
        // Written through, as bytes.
        k.iter_mut().for_each(|b| *b = !*b);
        assert!(k.iter().zip(&bytes).all(|(a, b)| *a == !*b));
    }
}

#[test]
fn timers_are_counted_alike_on_two_threads() {
    // Entries with timers are 3-item arrays; every third key has them, before and after.
    let entry = |d: &mut KeyedDelta, g: usize, k: u64, v: &str, timed: bool| {
        if timed {
            d.push(g, &k, Some(&(k, v, 1u64))).expect("encodes");
        } else {
            d.push(g, &k, Some(&(k, v))).expect("encodes");
        }
    };
    let mut base = KeyedDelta::new(true);
    for k in 0..3000u64 {
        entry(&mut base, (k / 100) as usize, k, "a", k % 3 == 0);
    }
    let mut image = KeyedImage::default();
    image.apply(base);
    assert_eq!(image.timed, 1000);
    // Keys 0..1500 change: the timed ones lose their timers, every fifth gains them; keys
    // 1500..1800 are removed (100 of them timed); 3000..3300 are new, all timed.
    let mut d = KeyedDelta::new(false);
    for k in 0..3300u64 {
        let g = (k / 100) as usize;
        match k {
            0..1500 => entry(&mut d, g, k, "b", k % 5 == 0),
            1500..1800 => d.push::<u64, (u64, &str)>(g, &k, None).expect("encodes"),
            1800..3000 => {}
            _ => entry(&mut d, g, k, "c", true),
        }
    }
    let want = 1000 - 500 + 300 - 100 + 300;
    let mut one = image.clone();
    one.apply_part(&d, 0, d.index.len());
    assert_eq!(one.timed, want);
    let mut two = image.clone();
    two.apply_part_parallel(&d, 0, d.index.len());
    assert_eq!(two.timed, want);
    assert_eq!(two, one);
}
