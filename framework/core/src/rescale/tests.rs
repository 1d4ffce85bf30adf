use super::*;
use crate::key_group::{key_group_of, subtask_for_key_group};
use std::collections::BTreeMap;

type Groups = Vec<(usize, Vec<(u64, u64)>)>;

/// [`super::redistribute`] to `to` subtasks by count.
fn redistribute(
    rule: &Rule,
    old: &[(usize, Vec<u8>)],
    to: usize,
    max: usize,
) -> Result<Vec<(usize, Vec<u8>)>, String> {
    super::redistribute(rule, old, &Owners::by_count(max, to))
}

/// [`super::fit`] with every operator's key groups by count.
fn fit(
    states: &mut HashMap<(String, usize), Vec<u8>>,
    chains: Chains,
    had: &HashMap<String, usize>,
    ops: &[(String, usize, &Rule)],
    inputs: &[ChannelInput],
    max: usize,
) -> Result<Vec<String>, String> {
    let ops: Vec<(String, Owners, &Rule)> = ops
        .iter()
        .map(|(u, p, r)| (u.clone(), Owners::by_count(max, *p), *r))
        .collect();
    super::fit(states, chains, had, &HashMap::new(), &ops, inputs, max)
}

fn keyed_payloads(keys: std::ops::Range<u64>, p: usize, max: usize) -> Vec<(usize, Vec<u8>)> {
    let mut per: Vec<BTreeMap<usize, Vec<(u64, u64)>>> = vec![BTreeMap::new(); p];
    for k in keys {
        let kg = key_group_of(&k, max);
        per[subtask_for_key_group(kg, max, p)]
            .entry(kg)
            .or_default()
            .push((k, k * 10));
    }
    per.into_iter()
        .enumerate()
        .map(|(j, m)| {
            let groups: Groups = m.into_iter().collect();
            (j, crate::checkpoint::encode(&groups).unwrap())
        })
        .collect()
}

#[test]
fn keyed_state_follows_its_key_groups_for_every_change() {
    let max = 16;
    for from in 1..=max {
        for to in [1, 2, 3, 5, 7, 16] {
            let old = keyed_payloads(0..500, from, max);
            let new = redistribute(&Rule::Keyed { own: None }, &old, to, max).unwrap();
            assert_eq!(new.len(), to);
            let mut seen = 0;
            for (j, payload) in new {
                let groups: Groups = crate::checkpoint::decode(&payload).unwrap();
                for (kg, entries) in groups {
                    assert_eq!(subtask_for_key_group(kg, max, to), j, "{from}->{to}");
                    for (k, v) in entries {
                        assert_eq!(key_group_of(&k, max), kg);
                        assert_eq!(v, k * 10);
                        seen += 1;
                    }
                }
            }
            assert_eq!(seen, 500, "{from}->{to}: every key once");
        }
    }
}

#[test]
fn a_group_held_twice_is_refused() {
    let mut old = keyed_payloads(0..100, 2, 8);
    old.push((2, old[0].1.clone()));
    let e = redistribute(&Rule::Keyed { own: None }, &old, 3, 8).unwrap_err();
    assert!(e.contains("held twice"), "{e}");
}

/// Every key group of `payloads` (keyed, with own fields first if `own`) with its entries,
/// decoded whole as CBOR values: what the state means, whatever its bytes.
fn meaning(payloads: &[(usize, Vec<u8>)], own: bool) -> BTreeMap<u64, (usize, Value)> {
    let mut groups = BTreeMap::new();
    for (j, p) in payloads {
        let v: Value = crate::checkpoint::decode(p).unwrap();
        let list = if own {
            v.into_array().unwrap().pop().unwrap()
        } else {
            v
        };
        for pair in list.into_array().unwrap() {
            let mut pair = pair.into_array().unwrap();
            let entries = pair.pop().unwrap();
            let kg = u64::try_from(pair.pop().unwrap().as_integer().unwrap()).unwrap();
            assert!(
                groups.insert(kg, (*j, entries)).is_none(),
                "group {kg} twice"
            );
        }
    }
    groups
}

#[test]
fn entries_of_every_kind_are_dealt_as_they_were_written() {
    // Entries of nested values of every kind the head reader steps over.
    type Entry = (
        String,
        (Vec<u8>, BTreeMap<String, i64>, Option<f64>),
        Vec<(i64, bool)>,
    );
    let (max, from, to) = (32, 3, 5);
    let mut per: Vec<BTreeMap<usize, Vec<Entry>>> = vec![BTreeMap::new(); from];
    for k in 0..300u64 {
        let key = format!("key-{k}-{}", "x".repeat((k % 40) as usize));
        let kg = key_group_of(&key, max);
        let entry = (
            key,
            (
                vec![k as u8; (k % 30) as usize],
                [("n".to_owned(), -(k as i64))].into(),
                (k % 2 == 0).then_some(k as f64 / 3.0),
            ),
            vec![(k as i64 * 1000, k % 3 == 0)],
        );
        per[subtask_for_key_group(kg, max, from)]
            .entry(kg)
            .or_default()
            .push(entry);
    }
    let old: Vec<(usize, Vec<u8>)> = per
        .into_iter()
        .enumerate()
        .map(|(j, m)| {
            let groups: Vec<(usize, Vec<Entry>)> = m.into_iter().collect();
            (j, crate::checkpoint::encode(&groups).unwrap())
        })
        .collect();
    let new = redistribute(&Rule::Keyed { own: None }, &old, to, max).unwrap();
    let (before, after) = (meaning(&old, false), meaning(&new, false));
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>()
    );
    for (kg, (j, entries)) in &after {
        assert_eq!(*j, subtask_for_key_group(*kg as usize, max, to));
        assert_eq!(entries, &before[kg].1, "group {kg}");
    }
    // A new subtask's payload reads back as the keyed operator's restore reads it: groups
    // ascending.
    for (_, p) in &new {
        let groups: Vec<(usize, Vec<Entry>)> = crate::checkpoint::decode(p).unwrap();
        assert!(groups.windows(2).all(|w| w[0].0 < w[1].0));
    }
}

#[test]
fn own_fields_are_dealt_and_groups_follow_them() {
    let (max, from, to) = (8, 2, 3);
    let fields = vec![("offsets".to_owned(), Redistribution::Split)];
    let old: Vec<(usize, Vec<u8>)> = keyed_payloads(0..60, from, max)
        .into_iter()
        .map(|(j, groups)| {
            let own: crate::hooks::StateSnapshot = crate::checkpoint::decode(&snapshot(vec![(
                "offsets",
                ints(&[j as i64 * 10, j as i64 * 10 + 1]),
            )]))
            .unwrap();
            let groups: Groups = crate::checkpoint::decode(&groups).unwrap();
            (j, crate::checkpoint::encode(&(own, groups)).unwrap())
        })
        .collect();
    let rule = Rule::Keyed { own: Some(fields) };
    let new = redistribute(&rule, &old, to, max).unwrap();
    let (before, after) = (meaning(&old, true), meaning(&new, true));
    assert_eq!(before.len(), after.len());
    let mut offsets = Vec::new();
    for (j, p) in &new {
        let (own, groups): (crate::hooks::StateSnapshot, Groups) =
            crate::checkpoint::decode(p).unwrap();
        let map: Value = crate::checkpoint::decode(&own.bytes).unwrap();
        offsets.extend(map.into_map().unwrap().remove(0).1.into_array().unwrap());
        for (kg, _) in groups {
            assert_eq!(subtask_for_key_group(kg, max, to), *j);
        }
    }
    assert_eq!(Value::Array(offsets), ints(&[0, 1, 10, 11]));
    // Own fields expected, and not there.
    let plain = keyed_payloads(0..60, from, max);
    let e = redistribute(&rule, &plain, to, max).unwrap_err();
    assert!(
        e.contains("old subtask 0") && e.contains("own fields"),
        "{e}"
    );
}

#[test]
fn an_entry_nested_deeper_than_the_stack_goes_is_dealt_and_a_cut_one_refused() {
    // Key group 1 of 2 holds one entry: 200 000 arrays, one inside the other.
    let depth = 200_000;
    let mut payload = vec![0x81, 0x82, 0x01, 0x81];
    payload.extend(std::iter::repeat_n(0x81u8, depth));
    payload.push(0x00);
    let new = redistribute(&Rule::Keyed { own: None }, &[(0, payload.clone())], 2, 2).unwrap();
    assert_eq!(new[1].1, payload, "dealt as it was");
    assert_eq!(new[0].1, vec![0x80], "nothing for the other subtask");
    let cut = payload[..payload.len() - 1].to_vec();
    let e = redistribute(&Rule::Keyed { own: None }, &[(0, cut)], 2, 2).unwrap_err();
    assert!(
        e.contains("key group 1's entries") && e.contains("ends inside"),
        "{e}"
    );
}

#[test]
fn a_malformed_payload_is_refused_with_what_and_where() {
    let max = 8;
    let keyed = Rule::Keyed { own: None };
    let good = keyed_payloads(0..100, 2, max);
    let refused = |bad: Vec<u8>| {
        let old = vec![good[0].clone(), (1, bad)];
        let e = redistribute(&keyed, &old, 3, max).unwrap_err();
        assert!(e.starts_with("old subtask 1's keyed state: "), "{e}");
        e
    };
    // Not a list.
    let e = refused(crate::checkpoint::encode(&7u32).unwrap());
    assert!(e.contains("not a key-group list"), "{e}");
    let e = refused(crate::checkpoint::encode(&vec![1u32]).unwrap());
    assert!(e.contains("not a (key group, entries) pair"), "{e}");
    // A key group beyond max_parallelism, and a negative one.
    let e = refused(crate::checkpoint::encode(&vec![(9u64, vec![(1u64, 2u64)])]).unwrap());
    assert!(e.contains("key group 9 out of range"), "{e}");
    let e = refused(crate::checkpoint::encode(&vec![(-1i64, vec![(1u64, 2u64)])]).unwrap());
    assert!(e.contains("negative key group"), "{e}");
    // Entries that are not a list.
    let e = refused(crate::checkpoint::encode(&vec![(5u64, "entries")]).unwrap());
    assert!(e.contains("key group 5's entries are not a list"), "{e}");
    // Cut short, and with bytes after the list.
    let whole = &good[1].1;
    let e = refused(whole[..whole.len() - 3].to_vec());
    assert!(e.contains("ends inside"), "{e}");
    let mut longer = whole.clone();
    longer.push(0);
    let e = refused(longer);
    assert!(e.contains("1 bytes after the key-group list"), "{e}");
    // A group held by two old subtasks names both.
    let e = redistribute(&keyed, &[good[1].clone(), (4, good[1].1.clone())], 3, max).unwrap_err();
    assert!(
        e.contains("old subtask 4") && e.contains("old subtask 1 holds it too"),
        "{e}"
    );
}

fn snapshot(fields: Vec<(&str, Value)>) -> Vec<u8> {
    let map = Value::Map(
        fields
            .into_iter()
            .map(|(k, v)| (Value::Text(k.into()), v))
            .collect(),
    );
    crate::checkpoint::encode(&crate::hooks::StateSnapshot {
        operator: "Op".into(),
        version: 1,
        bytes: crate::checkpoint::encode(&map).unwrap(),
    })
    .unwrap()
}

fn ints(v: &[i64]) -> Value {
    Value::Array(v.iter().map(|&i| Value::Integer(i.into())).collect())
}

#[test]
fn split_fields_are_dealt_and_union_fields_copied() {
    let rule = Rule::Subtask(vec![
        ("offsets".into(), Redistribution::Split),
        ("seen".into(), Redistribution::Union),
    ]);
    let old = vec![
        (
            0,
            snapshot(vec![("offsets", ints(&[1, 2, 3])), ("seen", ints(&[10]))]),
        ),
        (
            1,
            snapshot(vec![("offsets", ints(&[4])), ("seen", ints(&[20]))]),
        ),
    ];
    let new = redistribute(&rule, &old, 3, 128).unwrap();
    let mut all = Vec::new();
    for (_, p) in &new {
        let s: crate::hooks::StateSnapshot = crate::checkpoint::decode(p).unwrap();
        let map: Value = crate::checkpoint::decode(&s.bytes).unwrap();
        let map = map.into_map().unwrap();
        let get = |n: &str| {
            map.iter()
                .find(|(k, _)| k.as_text() == Some(n))
                .unwrap()
                .1
                .clone()
        };
        assert_eq!(get("seen"), ints(&[10, 20]));
        all.extend(get("offsets").into_array().unwrap());
    }
    assert_eq!(Value::Array(all), ints(&[1, 2, 3, 4]));
}

/// A table that puts every third key group on subtask 0 and deals the rest round robin
/// over `p` (non-contiguous runs on every subtask).
fn scattered(max: usize, p: usize) -> Owners {
    let table = (0..max)
        .map(|kg| if kg % 3 == 0 { 0 } else { (kg % p) as u32 })
        .collect();
    Owners::table(table, p).unwrap()
}

#[test]
fn a_rebalance_deals_keyed_state_by_table_and_back() {
    let max = 16;
    let rule = Rule::Keyed { own: None };
    for p in [2, 3, 4] {
        for to in [p, p + 1, 1] {
            let table = scattered(max, p);
            let old = keyed_payloads(0..500, p, max);
            // By count -> by table (a rebalance when `to == p`).
            let mut states: HashMap<(String, usize), Vec<u8>> = old
                .iter()
                .map(|(j, b)| (("count".to_owned(), *j), b.clone()))
                .collect();
            let target = scattered(max, to);
            let ops = [("count".to_owned(), target.clone(), &rule)];
            let had = HashMap::from([("count".to_owned(), p)]);
            let moved = super::fit(
                &mut states,
                Chains::new(),
                &had,
                &HashMap::new(),
                &ops,
                &[],
                max,
            )
            .unwrap();
            assert_eq!(moved, vec!["count".to_owned()], "{p} -> {to}");
            let mut seen = 0;
            for ((_, j), payload) in &states {
                let groups: Groups = crate::checkpoint::decode(payload).unwrap();
                for (kg, entries) in groups {
                    assert_eq!(target.owner(kg), *j, "{p} -> {to}");
                    seen += entries.len();
                }
            }
            assert_eq!(seen, 500);
            // And back to by count, from the table the states were taken with.
            let tables: HashMap<String, std::sync::Arc<[u32]>> = target
                .shared_table()
                .map(|t| ("count".to_owned(), t.clone()))
                .into_iter()
                .collect();
            let had = HashMap::from([("count".to_owned(), to)]);
            let ops = [("count".to_owned(), Owners::by_count(max, p), &rule)];
            super::fit(&mut states, Chains::new(), &had, &tables, &ops, &[], max).unwrap();
            let mut back: Vec<(usize, Vec<u8>)> =
                states.iter().map(|((_, j), b)| (*j, b.clone())).collect();
            back.sort();
            assert_eq!(back, old, "{p} -> {to} -> {p}");
            // The same table before and after: nothing moves.
            let mut states: HashMap<(String, usize), Vec<u8>> = HashMap::new();
            let ops = [("count".to_owned(), table.clone(), &rule)];
            let tables =
                HashMap::from([("count".to_owned(), table.shared_table().unwrap().clone())]);
            states.insert(("count".to_owned(), 0), old[0].1.clone());
            let had = HashMap::from([("count".to_owned(), p)]);
            let moved =
                super::fit(&mut states, Chains::new(), &had, &tables, &ops, &[], max).unwrap();
            assert!(moved.is_empty());
        }
    }
}

#[test]
fn a_scalar_per_subtask_field_is_refused_with_its_name() {
    let rule = Rule::Subtask(vec![("count".into(), Redistribution::Split)]);
    let old = vec![(0, snapshot(vec![("count", Value::Integer(3.into()))]))];
    let e = redistribute(&rule, &old, 2, 128).unwrap_err();
    assert!(
        e.contains("`count`") && e.contains("not a collection"),
        "{e}"
    );
}

#[test]
fn chains_are_read_range_by_range_and_dealt_as_whole_payloads_are() {
    let max = 16;
    let root = std::env::temp_dir().join(format!("weir-rescale-chains-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let fields = vec![
        ("offsets".to_owned(), Redistribution::Split),
        ("seen".to_owned(), Redistribution::Union),
    ];
    let rule = Rule::Keyed { own: Some(fields) };
    // 600 keys with 2 KB values: each old subtask's run has blocks of a few groups.
    let value = "v".repeat(2048);
    for from in [1, 2, 3, 4] {
        let mut chains = Chains::new();
        for (i, groups) in keyed_payloads(0..600, from, max) {
            let groups: Groups = crate::checkpoint::decode(&groups).unwrap();
            let groups: Vec<(usize, Vec<(u64, String)>)> = groups
                .into_iter()
                .map(|(g, e)| {
                    (
                        g,
                        e.into_iter()
                            .map(|(k, _)| (k, format!("{value}{k}")))
                            .collect(),
                    )
                })
                .collect();
            let own: crate::hooks::StateSnapshot = crate::checkpoint::decode(&snapshot(vec![
                ("offsets", ints(&[i as i64 * 10, i as i64 * 10 + 1])),
                ("seen", ints(&[i as i64])),
            ]))
            .unwrap();
            let payload = crate::checkpoint::encode(&(own, groups)).unwrap();
            let delta = changes::KeyedDelta::from_payload(payload, true).unwrap();
            let file = format!("s/{from}-{i}.run");
            let run = crate::checkpoint::runs::write(&root, &file, &delta).unwrap();
            let chain = Chained {
                root: root.clone(),
                runs: vec![run],
            };
            chains.insert(("count".to_owned(), i), chain);
        }
        let whole: Vec<(usize, Vec<u8>)> = (0..from)
            .map(|i| (i, chains[&("count".to_owned(), i)].payload().unwrap()))
            .collect();
        for to in [1, 2, 3, 5] {
            let mut states = HashMap::new();
            let had = HashMap::from([("count".to_owned(), from)]);
            let ops = [("count".to_owned(), to, &rule)];
            fit(&mut states, chains.clone(), &had, &ops, &[], max).unwrap();
            let expected: HashMap<(String, usize), Vec<u8>> = if from == to {
                whole
                    .iter()
                    .map(|(i, p)| (("count".to_owned(), *i), p.clone()))
                    .collect()
            } else {
                redistribute(&rule, &whole, to, max)
                    .unwrap()
                    .into_iter()
                    .map(|(j, p)| (("count".to_owned(), j), p))
                    .collect()
            };
            assert_eq!(states, expected, "{from} -> {to}");
        }
        // State of a subtask the recorded parallelism does not have: refused, named.
        if from > 1 {
            let had = HashMap::from([("count".to_owned(), from - 1)]);
            let ops = [("count".to_owned(), 3, &rule)];
            let e = fit(&mut HashMap::new(), chains.clone(), &had, &ops, &[], max)
                .expect_err("inconsistent");
            assert!(e.contains("subtask") && e.contains("parallelism"), "{e}");
        }
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn fit_moves_only_what_changed_and_names_refusals() {
    let mut states: HashMap<(String, usize), Vec<u8>> = HashMap::new();
    for (j, p) in keyed_payloads(0..50, 2, 8) {
        states.insert(("count".into(), j), p);
    }
    states.insert(("src".into(), 0), vec![1]);
    let keyed = Rule::Keyed { own: None };
    let refused = Rule::Refused("a source's position belongs to its subtask".into());
    let ops = [
        ("count".to_string(), 4, &keyed),
        ("src".to_string(), 1, &refused),
    ];
    let moved = fit(&mut states, Chains::new(), &HashMap::new(), &ops, &[], 8).unwrap();
    assert_eq!(moved, vec!["count".to_string()]);
    assert_eq!(states.keys().filter(|(u, _)| u == "count").count(), 4);
    let ops = [("src".to_string(), 2, &refused)];
    let e = fit(&mut states, Chains::new(), &HashMap::new(), &ops, &[], 8).unwrap_err();
    assert!(e.contains("`src`") && e.contains("position"), "{e}");
}
