use super::load::States;
use super::*;

/// [`load_latest`]'s checkpoint and (whole) states.
fn latest(root: &Path, uids: &[String]) -> Option<(u64, States)> {
    load_latest(root, uids).map(|l| (l.checkpoint, l.states))
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weir-store-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn a_payload_is_one_byte_string_and_the_array_form_of_earlier_files_reads() {
    let env = SnapshotEnvelope {
        format_version: FORMAT_VERSION,
        uid: "op".into(),
        subtask: 0,
        checkpoint_id: 1,
        key_groups: None,
        payload: (0..=255u8).collect(),
        payload_crc32: None,
        chain: None,
    };
    let bytes = crate::checkpoint::encode(&env).expect("encodes");
    // 256 payload bytes: a 3-byte head and the bytes, not 24 + 2 * 232 bytes of integers.
    let head = [0x59, 0x01, 0x00];
    let at = bytes
        .windows(3)
        .position(|w| w == head)
        .expect("a byte string of 256");
    assert_eq!(&bytes[at + 3..at + 259], env.payload.as_slice());
    assert_eq!(
        crate::checkpoint::decode::<SnapshotEnvelope>(&bytes),
        Ok(env.clone())
    );
    // An earlier build's file: the same envelope with the payload as an array.
    #[derive(Serialize)]
    struct Earlier<'a> {
        format_version: u32,
        uid: &'a str,
        subtask: usize,
        checkpoint_id: u64,
        key_groups: Option<(usize, usize)>,
        payload: &'a Vec<u8>,
        payload_crc32: Option<u32>,
    }
    let earlier = crate::checkpoint::encode(&Earlier {
        format_version: env.format_version,
        uid: &env.uid,
        subtask: env.subtask,
        checkpoint_id: env.checkpoint_id,
        key_groups: env.key_groups,
        payload: &env.payload,
        payload_crc32: env.payload_crc32,
    })
    .expect("encodes");
    assert!(
        earlier.len() > bytes.len() + 200,
        "the array form is larger"
    );
    assert_eq!(
        crate::checkpoint::decode::<SnapshotEnvelope>(&earlier),
        Ok(env)
    );
}

#[test]
fn state_files_round_trip_and_are_checked() {
    let root = tmp("roundtrip");
    let env = SnapshotEnvelope {
        format_version: FORMAT_VERSION,
        uid: "count".into(),
        subtask: 1,
        checkpoint_id: 7,
        key_groups: Some((64, 128)),
        payload: vec![1, 2, 3],
        payload_crc32: None,
        chain: None,
    };
    let (name, size) = write_state(&root, &env).unwrap();
    assert!(size > 3);
    assert_eq!(read_state(&root, 7, &name, "count", 1).unwrap(), env);
    let wrong = read_state(&root, 7, &name, "count", 0).unwrap_err();
    assert!(wrong.to_string().contains("expected count/0"), "{wrong}");
    std::fs::write(checkpoint_dir(&root, 7).join(&name), b"\xff\x00garbage").unwrap();
    assert!(matches!(
        read_state(&root, 7, &name, "count", 1),
        Err(CheckpointError::Invalid { .. })
    ));
    std::fs::remove_dir_all(&root).unwrap();
}

fn checkpoint_with_state(root: &Path, id: u64, payload: &[u8]) {
    let env = SnapshotEnvelope {
        format_version: FORMAT_VERSION,
        uid: "count".into(),
        subtask: 0,
        checkpoint_id: id,
        key_groups: None,
        payload: payload.to_vec(),
        payload_crc32: Some(crc32fast::hash(payload)),
        chain: None,
    };
    let (name, size) = write_state(root, &env).unwrap();
    let mut states = BTreeMap::new();
    states.insert("count".to_string(), BTreeMap::from([(0usize, name)]));
    write_metadata(root, &CheckpointMetadata::of(id, states, size, Vec::new())).unwrap();
}

/// Checkpoint `id` (metadata only) referencing `runs`.
fn checkpoint_with_runs(root: &Path, id: u64, runs: &[&str]) {
    write_metadata(
        root,
        &CheckpointMetadata::of(
            id,
            BTreeMap::new(),
            0,
            runs.iter().map(|r| r.to_string()).collect(),
        ),
    )
    .unwrap();
}

#[test]
fn retention_deletes_only_runs_no_kept_checkpoint_references() {
    let root = tmp("runs-gc");
    let run = |name: &str| {
        let p = root.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, b"run").unwrap();
        p
    };
    let (a, b, shared) = (
        run("shared/op-0/1-x.delta"),
        run("shared/op-0/2-x.delta"),
        run("shared/op-0/1-x.base"),
    );
    // A run of checkpoint 3, in progress: no metadata names it yet.
    let pending = run("shared/op-0/3-x.delta");
    // Left by a crash: referenced by nothing.
    let stray = run("shared/op-1/2-y.full");
    checkpoint_with_runs(&root, 1, &["shared/op-0/1-x.delta", "shared/op-0/1-x.base"]);
    checkpoint_with_runs(&root, 2, &["shared/op-0/1-x.base", "shared/op-0/2-x.delta"]);
    retain(&root, 1);
    assert!(!checkpoint_dir(&root, 1).exists());
    assert!(!a.exists(), "referenced only by the deleted checkpoint");
    assert!(!stray.exists(), "referenced by nothing");
    assert!(
        b.exists() && shared.exists(),
        "referenced by the kept checkpoint"
    );
    assert!(pending.exists(), "a run of a checkpoint in progress");
    // Nothing kept can be read: nothing is deleted.
    run("shared/op-1/2-z.full");
    std::fs::write(checkpoint_dir(&root, 2).join("_metadata"), b"garbage").unwrap();
    retain(&root, 1);
    assert!(root.join("shared/op-1/2-z.full").exists());
    let _ = std::fs::remove_dir_all(&root);
}

/// Flips one bit of the file at byte `at`.
fn flip(file: &Path, at: usize) {
    let mut bytes = std::fs::read(file).unwrap();
    let at = at % bytes.len();
    bytes[at] ^= 0x01;
    std::fs::write(file, bytes).unwrap();
}

#[test]
fn a_flipped_bit_anywhere_is_found_not_restored() {
    let root = tmp("bitflip");
    let uids = vec!["count".to_string()];
    checkpoint_with_state(&root, 1, b"one");
    // Every bit position of checkpoint 2's state file and metadata: each flip makes it
    // unreadable (so 1 is restored) or leaves what it holds the same; never wrong state.
    for name in ["count-0.state", "_metadata"] {
        let len = {
            checkpoint_with_state(&root, 2, b"two-two-two");
            std::fs::metadata(checkpoint_dir(&root, 2).join(name))
                .unwrap()
                .len() as usize
        };
        for at in 0..len {
            checkpoint_with_state(&root, 2, b"two-two-two");
            flip(&checkpoint_dir(&root, 2).join(name), at);
            match latest(&root, &uids) {
                Some((2, states)) => assert_eq!(
                    states.get(&("count".to_string(), 0)),
                    Some(&b"two-two-two".to_vec()),
                    "{name} byte {at}: a flipped bit restored as state"
                ),
                Some((1, states)) => {
                    assert_eq!(states[&("count".to_string(), 0)], b"one".to_vec())
                }
                other => panic!("{name} byte {at}: {:?}", other.map(|(id, _)| id)),
            }
        }
    }
    std::fs::remove_dir_all(&root).unwrap();
}

/// `bytes` with every occurrence of `from` replaced by `to` (same length).
fn replaced(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let mut out = bytes.to_vec();
    let at = out
        .windows(from.len())
        .position(|w| w == from)
        .expect("the bytes are there");
    out[at..at + to.len()].copy_from_slice(to);
    out
}

#[test]
fn a_damaged_checksum_field_name_does_not_turn_the_checksum_off() {
    let root = tmp("crcname");
    let uids = vec!["count".to_string()];
    checkpoint_with_state(&root, 1, b"one");
    checkpoint_with_state(&root, 2, b"two");
    // Two flipped bits: the checksum's field name, and the payload (`two` -> `twn`).
    let file = checkpoint_dir(&root, 2).join("count-0.state");
    let bytes = std::fs::read(&file).unwrap();
    let bytes = replaced(&bytes, b"payload_crc32", b"payload_crc33");
    let bytes = replaced(&bytes, b"two", b"twn");
    std::fs::write(&file, bytes).unwrap();
    let e = read_state(&root, 2, "count-0.state", "count", 0).unwrap_err();
    assert!(e.to_string().contains("payload_crc33"), "{e}");
    assert_eq!(latest(&root, &uids).unwrap().0, 1);
    // The metadata's checksum likewise.
    let meta = checkpoint_dir(&root, 1).join("_metadata");
    let bytes = replaced(&std::fs::read(&meta).unwrap(), b"crc32", b"crc33");
    std::fs::write(&meta, bytes).unwrap();
    assert!(read_metadata(&root, 1).is_err());
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn files_of_earlier_versions_without_checksums_still_read() {
    let root = tmp("nocrc");
    let env = SnapshotEnvelope {
        format_version: FORMAT_VERSION,
        uid: "count".into(),
        subtask: 0,
        checkpoint_id: 1,
        key_groups: None,
        payload: b"old".to_vec(),
        payload_crc32: None,
        chain: None,
    };
    let (name, _) = write_state(&root, &env).unwrap();
    assert_eq!(
        read_state(&root, 1, &name, "count", 0).unwrap().payload,
        b"old"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_corrupted_or_partial_checkpoint_falls_back_to_the_previous_one() {
    let root = tmp("fallback");
    let uids = vec!["count".to_string()];
    checkpoint_with_state(&root, 1, b"one");
    checkpoint_with_state(&root, 2, b"two");
    assert_eq!(latest(&root, &uids).unwrap().0, 2);
    // Corrupt checkpoint 2's state file: it is skipped, 1 is restored.
    let file = checkpoint_dir(&root, 2).join("count-0.state");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
    let (id, states) = latest(&root, &uids).unwrap();
    assert_eq!(id, 1);
    assert_eq!(states[&("count".to_string(), 0)], b"one".to_vec());
    // A partial _metadata is not complete either.
    let meta = checkpoint_dir(&root, 1).join("_metadata");
    std::fs::write(&meta, b"\xa1").unwrap();
    assert!(latest(&root, &uids).is_none());
    // State of an operator the job no longer has is ignored, not an error.
    checkpoint_with_state(&root, 3, b"three");
    let (id, states) = latest(&root, &["other".to_string()]).unwrap();
    assert_eq!((id, states.len()), (3, 0));
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn metadata_of_an_unknown_format_version_is_not_read_as_this_one() {
    let root = tmp("version");
    let uids = vec!["count".to_string()];
    checkpoint_with_state(&root, 1, b"one");
    checkpoint_with_state(&root, 2, b"two");
    // Checkpoint 2's metadata as a later version would write it: checksum and all right.
    let mut meta = read_metadata(&root, 2).unwrap();
    meta.format_version = FORMAT_VERSION + 1;
    write_metadata(&root, &meta).unwrap();
    let e = read_metadata(&root, 2).unwrap_err();
    assert!(
        matches!(e, CheckpointError::Invalid { .. })
            && e.to_string().contains(&format!(
                "format version {} (this build reads {FORMAT_VERSION})",
                FORMAT_VERSION + 1
            ))
            && e.to_string().contains("_metadata"),
        "{e}"
    );
    let (id, states) = latest(&root, &uids).unwrap();
    assert_eq!(
        (id, &states[&("count".to_string(), 0)]),
        (1, &b"one".to_vec())
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_file_where_the_checkpoint_directory_goes_fails_its_writes_with_the_path() {
    let root = tmp("blocked");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(checkpoint_dir(&root, 3), b"not a directory").unwrap();
    let env = SnapshotEnvelope {
        format_version: FORMAT_VERSION,
        uid: "count".into(),
        subtask: 0,
        checkpoint_id: 3,
        key_groups: None,
        payload: b"three".to_vec(),
        payload_crc32: None,
        chain: None,
    };
    let e = write_state(&root, &env).unwrap_err();
    assert!(
        matches!(&e, CheckpointError::Io { path, .. } if path.ends_with("chk-3")),
        "{e}"
    );
    let meta = CheckpointMetadata::of(3, BTreeMap::new(), 0, Vec::new());
    let e = write_metadata(&root, &meta).unwrap_err();
    assert!(e.to_string().contains("chk-3"), "{e}");
    assert!(completed(&root).is_empty());
    // The next checkpoint has a directory of its own.
    checkpoint_with_state(&root, 4, b"four");
    assert_eq!(completed(&root), vec![4]);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn injected_storage_faults_fail_writes_as_the_disk_would() {
    let root = tmp("injected");
    let disk = crate::fault::StorageFaults::new(&root, DiskTrouble::Full);
    checkpoint_with_state(&root, 1, b"one");
    disk.fail_next(1);
    let env = SnapshotEnvelope {
        format_version: FORMAT_VERSION,
        uid: "count".into(),
        subtask: 0,
        checkpoint_id: 2,
        key_groups: None,
        payload: vec![7; 1000],
        payload_crc32: None,
        chain: None,
    };
    let e = write_state(&root, &env).unwrap_err();
    assert!(
        e.to_string().contains("chk-2/count-0.tmp")
            && e.to_string().contains("No space left on device"),
        "{e}"
    );
    // Half of it was written, as on a full disk; no state file.
    let tmp_len = std::fs::metadata(checkpoint_dir(&root, 2).join("count-0.tmp"))
        .unwrap()
        .len();
    assert!(tmp_len > 0);
    assert!(!checkpoint_dir(&root, 2).join("count-0.state").exists());
    assert_eq!(disk.failed_checkpoints(), vec![2]);
    // Room again: checkpoint 3 completes, and retention clears 2's remains.
    checkpoint_with_state(&root, 3, b"three");
    assert_eq!(completed(&root), vec![3, 1]);
    retain(&root, 1);
    assert!(!checkpoint_dir(&root, 2).exists());
    let ro = crate::fault::StorageFaults::new(&root, DiskTrouble::ReadOnly);
    ro.fail_next(1);
    let e = write_metadata(&root, &read_metadata(&root, 3).unwrap()).unwrap_err();
    assert!(e.to_string().contains("Read-only file system"), "{e}");
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn only_checkpoints_with_metadata_are_complete_and_retention_keeps_the_newest() {
    let root = tmp("retain");
    for id in 1..=4 {
        let meta = CheckpointMetadata::of(id, BTreeMap::new(), 0, Vec::new());
        if id != 3 {
            write_metadata(&root, &meta).unwrap();
        } else {
            std::fs::create_dir_all(checkpoint_dir(&root, id)).unwrap();
        }
    }
    assert_eq!(completed(&root), vec![4, 2, 1]);
    retain(&root, 2);
    assert_eq!(completed(&root), vec![4, 2]);
    assert!(
        !checkpoint_dir(&root, 3).exists(),
        "incomplete and older: deleted"
    );
    assert_eq!(read_metadata(&root, 4).unwrap().checkpoint_id, 4);
    std::fs::remove_dir_all(&root).unwrap();
}
