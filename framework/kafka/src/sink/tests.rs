use super::*;

#[test]
fn a_sink_whose_member_lost_its_lease_neither_fences_nor_commits() {
    // No broker: the lease is checked before any call to one.
    let sink = KafkaSink::new(
        crate::KafkaConfig::new("127.0.0.1:1"),
        "out",
        |v: &u64, out: &mut Vec<u8>| {
            out.extend_from_slice(&v.to_le_bytes());
            Ok(())
        },
    )
    .exactly_once("p")
    .lease(crate::group::Lease::lost());
    let cx = SinkContext {
        uid: "out".into(),
        subtask: 0,
        parallelism: 1,
        checkpointing: true,
    };
    let mut writer = sink.open(&cx).expect("a writer (nothing is contacted yet)");
    let err = writer.initialize(None).expect_err("refused");
    let message = err.to_string();
    assert!(matches!(err, SinkError::External { .. }), "{message}");
    assert!(message.contains("not starting its producer"), "{message}");
    assert!(message.contains("frozen past its session"), "{message:?}");
    let err = writer.commit_open(3).expect_err("refused");
    assert!(
        err.to_string().contains("not committing checkpoint 3"),
        "{err}"
    );
}

#[test]
fn epochs_round_trip_with_and_without_keys() {
    let mut a = Epoch::default();
    a.bytes.extend_from_slice(b"k1v1");
    a.ends.push((2, 4, ANY_PARTITION));
    a.bytes.extend_from_slice(b"v2");
    a.ends.push((NO_KEY, 6, 3));
    let b = Epoch::default();
    let bytes = Epoch::encode_all([(3, &a), (4, &b)].into_iter());
    let back = Epoch::decode_all(&bytes).unwrap();
    assert_eq!(back, vec![(3, a.clone()), (4, b)]);
    let records: Vec<_> = back[0].1.records().collect();
    assert_eq!(
        records,
        vec![
            (None, Some(&b"k1"[..]), &b"v1"[..]),
            (Some(3), None, &b"v2"[..])
        ]
    );
    assert!(Epoch::decode_all(&bytes[..bytes.len() - 1]).is_err());
}
