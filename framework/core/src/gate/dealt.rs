//! Channel state dealt to a new parallelism (`rescale::channels`), read back as the gate
//! restores it: each new subtask replays its own key groups' records, in order, once.

use std::collections::HashMap;

use crate::gate::{ChannelState, InFlight};
use crate::key_group::{key_group_of, subtask_for_key_group};
use crate::rescale::channels::{fit, ChannelInput, Dealing};
use crate::time::Watermark;

const MAX: usize = 128;

/// [`fit`] with every operator's key groups by count.
fn fit_by_count(
    states: &mut HashMap<(String, usize), Vec<u8>>,
    old: &HashMap<String, usize>,
    new: &HashMap<&str, usize>,
    inputs: &[ChannelInput],
) -> Result<Vec<String>, String> {
    let (no_old, no_new) = (HashMap::new(), HashMap::new());
    let tables = crate::rescale::channels::Tables {
        old: &no_old,
        new: &no_new,
    };
    fit(states, old, new, tables, inputs, MAX)
}

/// Records are ids `x`, keyed by `x % 300`.
fn owner(x: u64, p: usize) -> usize {
    subtask_for_key_group(key_group_of(&(x % 300), MAX), MAX, p)
}

/// Channel state of subtask `j` of `p` for keyed records `keys` (each as sent to its
/// owner), in batches of 10, with a watermark after each batch.
fn keyed_state(keys: &[u64], j: usize, p: usize) -> Vec<u8> {
    let mine: Vec<u64> = keys.iter().copied().filter(|&k| owner(k, p) == j).collect();
    let mut in_flight = Vec::new();
    for (i, c) in mine.chunks(10).enumerate() {
        in_flight.push(InFlight::Batch((i % 2) as u32, c.to_vec()));
        in_flight.push(InFlight::Mark(0, Watermark::At(i as _)));
    }
    crate::checkpoint::encode(&ChannelState::<u64> {
        marks: None,
        in_flight,
    })
    .expect("encodes")
}

fn restored(payload: &[u8], keep: Option<(usize, usize)>) -> Vec<u64> {
    let mut s = ChannelState::<u64>::decode(payload).expect("decodes");
    if let Some((j, p)) = keep {
        s.keep(Box::new(move |k: &u64| owner(*k, p) == j));
    }
    assert!(s.marks.is_none());
    s.in_flight
        .into_iter()
        .flat_map(|f| match f {
            InFlight::Batch(_, b) => b,
            InFlight::Mark(..) => panic!("a watermark was kept"),
        })
        .collect()
}

fn input(dealing: Dealing) -> ChannelInput {
    ChannelInput {
        owner: "count".into(),
        input: 0,
        dealing,
        upstream: vec!["src".into()],
    }
}

#[test]
fn keyed_in_flight_data_goes_to_the_new_owner_of_each_key_in_order() {
    let keys: Vec<u64> = (0..2_000).collect();
    for (had, now) in [(2, 3), (3, 1), (1, 4), (4, 2)] {
        let mut states = HashMap::new();
        for j in 0..had {
            states.insert(("count#in0".to_owned(), j), keyed_state(&keys, j, had));
        }
        let old = HashMap::from([("count".to_owned(), had), ("src".to_owned(), 1)]);
        let new = HashMap::from([("count", now), ("src", 1)]);
        let dealt =
            fit_by_count(&mut states, &old, &new, &[input(Dealing::ByKeyGroup)]).expect("deals");
        assert_eq!(dealt, ["count#in0"]);
        let mut all = Vec::new();
        for j in 0..now {
            let got = states
                .get(&("count#in0".to_owned(), j))
                .map(|p| restored(p, Some((j, now))))
                .unwrap_or_default();
            assert!(got.iter().all(|&x| owner(x, now) == j), "{had}->{now}");
            // Each key's records in the order sent (ascending here).
            let mut last = HashMap::new();
            for &x in &got {
                let before = last.insert(x % 300, x);
                assert!(
                    before < Some(x),
                    "{had}->{now}: key {} out of order",
                    x % 300
                );
            }
            all.extend(got);
        }
        all.sort_unstable();
        assert_eq!(all, keys, "{had}->{now}: every record once");
    }
}

#[test]
fn other_in_flight_data_goes_whole_to_one_new_subtask() {
    let mut states = HashMap::new();
    for j in 0..3u64 {
        let batch: Vec<u64> = (j * 100..j * 100 + 50).collect();
        let payload = crate::checkpoint::encode(&ChannelState::<u64> {
            marks: None,
            in_flight: vec![InFlight::Batch(0, batch)],
        })
        .expect("encodes");
        states.insert(("count#in0".to_owned(), j as usize), payload);
    }
    let old = HashMap::from([("count".to_owned(), 3), ("src".to_owned(), 2)]);
    let new = HashMap::from([("count", 2), ("src", 2)]);
    fit_by_count(&mut states, &old, &new, &[input(Dealing::Any)]).expect("deals");
    let zero = restored(&states[&("count#in0".to_owned(), 0)], None);
    let one = restored(&states[&("count#in0".to_owned(), 1)], None);
    let expect_zero: Vec<u64> = (0..50).chain(200..250).collect();
    assert_eq!(zero, expect_zero);
    assert_eq!(one, (100..150).collect::<Vec<u64>>());
}

#[test]
fn unchanged_shapes_are_left_alone_and_a_changed_sender_drops_the_watermarks() {
    let keys: Vec<u64> = (0..100).collect();
    let payload = keyed_state(&keys, 0, 1);
    let mut states = HashMap::from([(("count#in0".to_owned(), 0), payload.clone())]);
    let old = HashMap::from([("count".to_owned(), 1), ("src".to_owned(), 1)]);
    let same = HashMap::from([("count", 1), ("src", 1)]);
    let dealt = fit_by_count(&mut states, &old, &same, &[input(Dealing::ByKeyGroup)])
        .expect("nothing to deal");
    assert!(dealt.is_empty());
    assert_eq!(states[&("count#in0".to_owned(), 0)], payload);
    let more_senders = HashMap::from([("count", 1), ("src", 3)]);
    fit_by_count(
        &mut states,
        &old,
        &more_senders,
        &[input(Dealing::ByKeyGroup)],
    )
    .expect("deals");
    assert_eq!(restored(&states[&("count#in0".to_owned(), 0)], None), keys);
}

#[test]
fn a_broadcast_input_is_refused_and_bad_payloads_are_named() {
    let mut states = HashMap::from([(("count#in0".to_owned(), 0), vec![0x01])]);
    let old = HashMap::from([("count".to_owned(), 1), ("src".to_owned(), 1)]);
    let new = HashMap::from([("count", 2), ("src", 1)]);
    let e = fit_by_count(&mut states, &old, &new, &[input(Dealing::Not("broadcast"))])
        .expect_err("refused");
    assert!(e.contains("`count`") && e.contains("broadcast"), "{e}");
    let mut states = HashMap::from([(("count#in0".to_owned(), 0), vec![0x01])]);
    let e = fit_by_count(&mut states, &old, &new, &[input(Dealing::Any)]).expect_err("bad");
    assert!(e.contains("count#in0") && e.contains("subtask 0"), "{e}");
}

#[test]
fn in_flight_data_of_an_operator_without_that_input_is_refused() {
    let mut states = HashMap::from([(("sink#in0".to_owned(), 0), batches_of(vec![vec![1]]))]);
    let old = HashMap::from([("sink".to_owned(), 1)]);
    let new = HashMap::from([("sink", 1)]);
    let e = fit_by_count(&mut states, &old, &new, &[]).expect_err("no input to replay on");
    assert!(e.contains("sink#in0") && e.contains("`sink`"), "{e}");
    // Of an operator the job no longer has: left alone.
    let new = HashMap::from([("other", 1)]);
    assert!(fit_by_count(&mut states, &old, &new, &[])
        .expect("nothing")
        .is_empty());
}

#[test]
fn the_format_without_watermarks_is_dealt_too() {
    let payload = crate::checkpoint::encode(&vec![vec![1u64, 2], vec![3]]).expect("encodes");
    let mut states = HashMap::from([(("count#in0".to_owned(), 1), payload)]);
    let old = HashMap::from([("count".to_owned(), 2), ("src".to_owned(), 1)]);
    let new = HashMap::from([("count", 1), ("src", 1)]);
    fit_by_count(&mut states, &old, &new, &[input(Dealing::Any)]).expect("deals");
    assert_eq!(
        restored(&states[&("count#in0".to_owned(), 0)], None),
        [1, 2, 3]
    );
}

fn batches_of(batches: Vec<Vec<u64>>) -> Vec<u8> {
    crate::checkpoint::encode(&ChannelState::<u64> {
        marks: None,
        in_flight: batches.into_iter().map(|b| InFlight::Batch(0, b)).collect(),
    })
    .expect("encodes")
}

#[test]
fn entries_without_records_are_dropped_and_never_refused() {
    // Every unaligned checkpoint stores an entry per input, most of them empty.
    let mut states = HashMap::from([
        (("count#in0".to_owned(), 0), batches_of(vec![])),
        (("count#in0".to_owned(), 1), batches_of(vec![vec![]])),
    ]);
    let old = HashMap::from([("count".to_owned(), 2), ("src".to_owned(), 1)]);
    let new = HashMap::from([("count", 3), ("src", 1)]);
    let dealt = fit_by_count(&mut states, &old, &new, &[input(Dealing::Not("broadcast"))])
        .expect("nothing in flight: nothing to refuse");
    assert_eq!(dealt, ["count#in0"]);
    assert!(states.is_empty(), "{:?}", states.keys());
    assert!(!crate::rescale::channels::carries_records(&batches_of(
        vec![vec![]]
    )));
    assert!(crate::rescale::channels::carries_records(&batches_of(
        vec![vec![], vec![7]]
    )));
    // Of an operator with no such input now: dropped too, not refused.
    let mut states = HashMap::from([(("sink#in0".to_owned(), 0), batches_of(vec![]))]);
    let old = HashMap::from([("sink".to_owned(), 1)]);
    let new = HashMap::from([("sink", 1)]);
    fit_by_count(&mut states, &old, &new, &[]).expect("empty");
}

#[test]
fn in_flight_data_of_a_forward_edge_stays_with_its_sender_or_is_refused() {
    let payload = batches_of(vec![vec![1, 2, 3]]);
    // Forward when recorded (equal parallelism): refused once a side changes.
    let mut states = HashMap::from([(("count#in0".to_owned(), 1), payload.clone())]);
    let old = HashMap::from([("count".to_owned(), 2), ("src".to_owned(), 2)]);
    let new = HashMap::from([("count", 3), ("src", 3)]);
    let e = fit_by_count(&mut states, &old, &new, &[input(Dealing::Forward)])
        .expect_err("a key's records would be reordered");
    assert!(
        e.contains("forward") && e.contains("`count`") && e.contains("src"),
        "{e}"
    );
    // `Auto` at unequal parallelism was a rebalance: dealt as any.
    let mut states = HashMap::from([(("count#in0".to_owned(), 1), payload)]);
    let old = HashMap::from([("count".to_owned(), 2), ("src".to_owned(), 1)]);
    let new = HashMap::from([("count", 1), ("src", 1)]);
    fit_by_count(&mut states, &old, &new, &[input(Dealing::Forward)]).expect("rebalanced");
    assert_eq!(
        restored(&states[&("count#in0".to_owned(), 0)], None),
        [1, 2, 3]
    );
}

#[test]
fn channel_state_uids_are_told_from_operator_uids() {
    use crate::rescale::channels::owner_of;
    assert_eq!(owner_of("count#in1"), Some(("count", 1)));
    assert_eq!(owner_of("a#inner#in0"), Some(("a#inner", 0)));
    assert_eq!(owner_of("a#inner"), None);
    assert_eq!(owner_of("count"), None);
    // An operator named like a channel state's owner is not mistaken for one.
    let mut states = HashMap::from([(("a#inner".to_owned(), 0), vec![1, 2])]);
    let old = HashMap::from([("a".to_owned(), 1), ("a#inner".to_owned(), 1)]);
    let new = HashMap::from([("a", 1), ("a#inner", 1)]);
    fit_by_count(&mut states, &old, &new, &[]).expect("an operator's state, not channel state");
}
