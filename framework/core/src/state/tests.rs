use super::*;

/// The pass over the map finds exactly the entries written since the previous take (new
/// and changed ones), whatever else the map holds.
#[test]
fn the_logged_pass_finds_what_was_written_since_the_last_take() {
    let mut state = KeyedState::<u64, u64>::tracking(true);
    for k in 0..10 {
        *state.write(&k, || 0).expect("an entry") = k;
    }
    state.restore(100, 100); // restored: not a change
    let _ = state.changes.take(false);
    *state.write(&3, || 0).expect("an entry") = 30;
    *state.write(&3, || 0).expect("an entry") = 31;
    *state.write(&11, || 0).expect("an entry") = 11;
    let keys = state.changes.take(false).expect("logged keys");
    let mut seen = Vec::new();
    let n = state
        .try_for_each_changed(|k, s| {
            seen.push((*k, *s));
            Ok(())
        })
        .expect("a logged map")
        .expect("no error");
    seen.sort_unstable();
    assert_eq!(seen, vec![(3, 31), (11, 11)]);
    assert_eq!(n, keys.len());
    // Written after this take: the next pass, not this generation's.
    *state.write(&4, || 0).expect("an entry") = 40;
    let mut again = Vec::new();
    let _ = state.try_for_each_changed(|k, _| {
        again.push(*k);
        Ok(())
    });
    again.sort_unstable();
    assert_eq!(again, vec![3, 11]);
    assert!(KeyedState::<u64, u64>::tracking(false)
        .try_for_each_changed(|_, _| Ok(()))
        .is_none());
}

#[test]
fn writes_are_seen_once_and_reads_are_not_writes() {
    let mut v = ValueState::<u64>::default();
    assert!(!v.take_written());
    let _ = v.value();
    assert!(!v.take_written());
    v.update(1);
    assert!(v.take_written());
    assert!(!v.take_written());
    let mut m = MapState::<u64, u64>::default();
    let _ = m.get(&1);
    assert!(!m.take_written());
    m.put(1, 1);
    assert!(m.take_written() && !KeyedStateType::is_empty(&m));
}

fn cbor<T: Serialize>(v: &T) -> Vec<u8> {
    let mut out = Vec::new();
    ciborium::into_writer(v, &mut out).expect("encode");
    out
}

#[test]
fn snapshots_keep_the_plain_form() {
    // A ValueState serializes as its Option, so snapshots of earlier versions still read.
    let mut v = ValueState::<u64>::default();
    v.update(7);
    let plain: Option<u64> = ciborium::from_reader(cbor(&v).as_slice()).expect("decode");
    assert_eq!(plain, Some(7));
    let m: MapState<u64, u64> =
        ciborium::from_reader(cbor(&HashMap::from([(1u64, 2u64)])).as_slice()).expect("decode");
    assert_eq!(m.get(&1), Some(&2));
}

#[test]
fn reducing_state_reduces_with_its_type() {
    let mut s = ReducingState::<u64, Max>::default();
    for v in [3, 9, 2] {
        s.add(v);
    }
    assert_eq!(s.get(), Some(&9));
    let mut m = ReducingState::<u64, Min>::default();
    for v in [3, 9, 2] {
        m.add(v);
    }
    assert_eq!(m.take(), Some(2));
    assert!(KeyedStateType::is_empty(&m));
}
