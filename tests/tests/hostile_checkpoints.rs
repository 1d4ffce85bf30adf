//! Checkpoint files are hostile input too: real checkpoint files of a job, with bytes flipped
//! or cut off, rewritten with a format version this build does not know (checksums right, as
//! another version of Weir would write them), or put in place of another file (one
//! operator's or subtask's state for another's, an older checkpoint's file, a state file for
//! the metadata), never panic the restore and never come back as wrong state. A damaged newest
//! checkpoint is skipped for the one before (or the job starts afresh); whatever the job
//! restores, its keyed counts continue exactly where the restored source position says. A
//! wrong version or a misplaced file is always found: the job restores an older checkpoint
//! and warns that it skipped the newest, saying why.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use ciborium::Value;
use common::TempDir;
use proptest::prelude::*;
use weir::{Collector, Env, EnvConfig, RestoreLatest, ValueState};
use weir_testing::{wait_for_checkpoint, HeldIds, Hold};

const N: u64 = 4_000;
const KEYS: u64 = 7;

/// The job: ids `0..N` (held at half until `hold` is released) -> a running count per key.
fn job(env: &Env, hold: Hold) -> weir::CollectSink<(u64, u64, u64)> {
    env.add_source("ids", move |cx| Ok(HeldIds::new(cx, N, 0.5, hold.clone())))
        .uid("ids")
        .set_parallelism(2)
        .key_by(|x: &u64| x % KEYS)
        .process(
            |k: &u64, c: &mut ValueState<u64>, x: u64, out: &mut Collector<(u64, u64, u64)>| {
                let n = c.get_or_insert_with(|| 0);
                *n += 1;
                out.collect((*k, *n, x));
            },
        )
        .uid("count")
        .set_parallelism(2)
        .collect()
}

fn config(dir: &Path) -> EnvConfig {
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(Duration::from_millis(10));
    cfg.checkpoint.directory = dir.to_owned();
    cfg.checkpoint.retained = 3;
    cfg.stderr_warnings = false;
    cfg
}

/// A checkpoint directory with three complete checkpoints of a cancelled run (made once),
/// and its files (relative paths).
fn original() -> &'static (TempDir, Vec<PathBuf>) {
    static ORIGINAL: OnceLock<(TempDir, Vec<PathBuf>)> = OnceLock::new();
    ORIGINAL.get_or_init(|| {
        let dir = TempDir::new("hostile-original");
        let env = Env::with_config(config(dir.path()));
        let _out = job(&env, Hold::new());
        let running = env.start("hostile").expect("start");
        wait_for_checkpoint(&running, 4, common::TIMEOUT).expect("checkpoints");
        running.cancel();
        let _ = running.wait();
        let mut files = Vec::new();
        collect_files(dir.path(), dir.path(), &mut files);
        files.sort();
        assert!(
            files.iter().any(|f| f.ends_with("_metadata")),
            "no checkpoint written: {files:?}"
        );
        (dir, files)
    })
}

fn collect_files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_files(root, &path, out);
        } else {
            out.push(path.strip_prefix(root).expect("under root").to_owned());
        }
    }
}

/// The name and id of the newest complete checkpoint directory (`chk-<highest id>` with a
/// `_metadata`): the one a restore would take.
fn newest_checkpoint(files: &[PathBuf]) -> (std::ffi::OsString, u64) {
    files
        .iter()
        .filter(|f| f.file_name().is_some_and(|n| n == "_metadata"))
        .filter_map(|f| {
            f.parent()?
                .file_name()?
                .to_str()?
                .strip_prefix("chk-")?
                .parse::<u64>()
                .ok()
        })
        .max()
        .map(|id| (format!("chk-{id}").into(), id))
        .expect("a complete checkpoint")
}

fn copy_tree(from: &Path, to: &Path, files: &[PathBuf]) {
    for f in files {
        let dest = to.join(f);
        std::fs::create_dir_all(dest.parent().expect("parent")).expect("mkdir");
        std::fs::copy(from.join(f), dest).expect("copy");
    }
}

/// What to do to one file.
#[derive(Debug, Clone)]
enum Damage {
    /// Flip these bits (byte index modulo the length, bit).
    Flip(Vec<(usize, u8)>),
    /// Keep only this share of the bytes (per mille).
    Truncate(u16),
    /// The same contents with this format version (not the one this build writes), and
    /// checksums that match: what another version of Weir would write.
    WrongVersion(u32),
    /// Put another checkpoint file in its place (picked among the newest checkpoint's other
    /// files and the same-named files of older checkpoints).
    WrongFile(prop::sample::Index),
}

impl Damage {
    /// Whether the damage is always found: then the newest checkpoint must be skipped.
    fn always_found(&self) -> bool {
        matches!(self, Damage::WrongVersion(_) | Damage::WrongFile(_))
    }
}

fn cbor(value: &Value) -> Vec<u8> {
    let mut bytes = Vec::new();
    ciborium::into_writer(value, &mut bytes).expect("encode CBOR");
    bytes
}

fn field<'a>(map: &'a mut [(Value, Value)], name: &str) -> Option<&'a mut Value> {
    map.iter_mut()
        .find(|(k, _)| k.as_text() == Some(name))
        .map(|(_, v)| v)
}

/// `bytes` (a state file or a `_metadata`) with format version `version`; the metadata's own
/// checksum (CRC-32 of its encoding with the checksum null) made to match again.
fn with_version(bytes: &[u8], version: u32) -> Vec<u8> {
    let mut value: Value = ciborium::from_reader(bytes).expect("a checkpoint file is CBOR");
    assert_eq!(cbor(&value), bytes, "re-encoding reproduces the file");
    let map = value.as_map_mut().expect("a checkpoint file is a map");
    *field(map, "format_version").expect("a format version") = Value::from(version);
    if let Some(crc) = field(map, "crc32") {
        *crc = Value::Null;
        let sum = crc32fast::hash(&cbor(&value));
        let map = value.as_map_mut().expect("a map");
        *field(map, "crc32").expect("checked") = Value::from(sum);
    }
    cbor(&value)
}

/// Damages `victim` (relative to `root`, a file of the newest checkpoint `newest`); `files`
/// are every file under `root`. Returns the replacement's path for `WrongFile`.
fn damage(
    root: &Path,
    files: &[PathBuf],
    newest: &std::ffi::OsStr,
    victim: &Path,
    d: &Damage,
) -> Option<PathBuf> {
    let path = root.join(victim);
    let mut bytes = std::fs::read(&path).expect("read");
    if bytes.is_empty() {
        return None;
    }
    let mut replacement = None;
    match d {
        Damage::Flip(bits) => {
            let len = bytes.len();
            for &(at, bit) in bits {
                bytes[at % len] ^= 1 << (bit % 8);
            }
        }
        Damage::Truncate(per_mille) => {
            let keep = bytes.len() * usize::from(*per_mille) / 1000;
            bytes.truncate(keep);
        }
        Damage::WrongVersion(v) => bytes = with_version(&bytes, *v),
        Damage::WrongFile(pick) => {
            let in_newest = |f: &PathBuf| f.parent().and_then(|p| p.file_name()) == Some(newest);
            let candidates: Vec<&PathBuf> = files
                .iter()
                .filter(|f| *f != victim)
                .filter(|f| in_newest(f) || f.file_name() == victim.file_name())
                .collect();
            let other = candidates[pick.index(candidates.len())];
            bytes = std::fs::read(root.join(other)).expect("read");
            replacement = Some(other.clone());
        }
    }
    std::fs::write(&path, bytes).expect("write");
    replacement
}

fn damages() -> impl Strategy<Value = Damage> {
    prop_oneof![
        proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4).prop_map(Damage::Flip),
        (0u16..1000).prop_map(Damage::Truncate),
        prop_oneof![
            Just(0u32),
            Just(2),
            any::<u32>().prop_filter("not 1", |v| *v != 1)
        ]
        .prop_map(Damage::WrongVersion),
        any::<prop::sample::Index>().prop_map(Damage::WrongFile),
    ]
}

/// The checkpoint a job whose checkpoints are under `root` resumed from, as it logged it.
fn restored_from(root: &Path) -> Option<u64> {
    let dir = format!(" dir={}", root.display());
    let line = common::logged()
        .lines()
        .find(|l| {
            l.contains("resuming from the latest checkpoint of an earlier run") && l.contains(&dir)
        })?
        .to_owned();
    let at = line.find(" checkpoint=")? + " checkpoint=".len();
    line[at..].split(' ').next()?.parse().ok()
}

/// The warning the restore logged for skipping checkpoint directory `dir`, if any.
fn skip_warning(dir: &Path) -> Option<String> {
    let dir = format!("checkpoint={}", dir.display());
    common::logged()
        .lines()
        .find(|l| l.contains("checkpoint unreadable; trying an older one") && l.contains(&dir))
        .map(str::to_owned)
}

/// Every key's counts continue without a gap from where the restore put them, up to the
/// key's total, and every id comes at most once.
fn check_consistent(got: &[(u64, u64, u64)]) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    let mut per_key: HashMap<u64, Vec<u64>> = HashMap::new();
    for &(k, c, id) in got {
        if !seen.insert(id) {
            return Err(format!("id {id} twice"));
        }
        per_key.entry(k).or_default().push(c);
    }
    for k in 0..KEYS {
        let total = (0..N).filter(|x| x % KEYS == k).count() as u64;
        let mut counts = per_key.remove(&k).unwrap_or_default();
        counts.sort_unstable();
        let first = counts.first().copied().unwrap_or(total + 1);
        let expected: Vec<u64> = (first..=total).collect();
        if counts != expected {
            return Err(format!(
                "key {k}: counts {}..{} ({} of them) do not continue to {total}",
                first,
                counts.last().copied().unwrap_or(0),
                counts.len()
            ));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn a_damaged_checkpoint_never_panics_or_restores_wrong_state(
        pick in any::<prop::sample::Index>(),
        how in damages(),
    ) {
        common::logged();
        let (orig, files) = original();
        let dir = TempDir::new("hostile-case");
        copy_tree(orig.path(), dir.path(), files);
        // A file of the newest complete checkpoint: the one a restore would take.
        let (newest, newest_id) = newest_checkpoint(files);
        let victims: Vec<&PathBuf> = files
            .iter()
            .filter(|f| f.parent().and_then(|p| p.file_name()) == Some(newest.as_os_str()))
            .collect();
        let victim = victims[pick.index(victims.len())];
        let replacement = damage(dir.path(), files, &newest, victim, &how);

        let mut cfg = config(dir.path());
        cfg.checkpoint.restore_latest = Some(RestoreLatest::if_any(dir.path()));
        let env = Env::with_config(cfg);
        let hold = Hold::new();
        hold.release();
        let out = job(&env, hold);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            common::execute_within(&env, "hostile")
        }));
        let case = format!("{victim:?} {how:?} (replaced by {replacement:?})");
        let result = result.map_err(|_| TestCaseError::fail(format!("{case}: the restore panicked")))?;
        match result {
            Ok(_) => {
                let got = out.take();
                check_consistent(&got).map_err(|e| TestCaseError::fail(format!("{case}: {e}")))?;
                if how.always_found() {
                    // The log says what was restored (the result's statistics may predate
                    // the deployment of a job this short).
                    let restored = restored_from(dir.path());
                    prop_assert!(
                        restored.is_some_and(|id| id < newest_id),
                        "{case}: restored {restored:?}, not an older checkpoint than {newest_id}"
                    );
                    let newest_dir = victim.parent().map(|p| dir.path().join(p)).expect("in a checkpoint");
                    let warning = skip_warning(&newest_dir);
                    prop_assert!(warning.is_some(), "{case}: no warning that {} was skipped", newest_dir.display());
                    let warning = warning.unwrap_or_default();
                    let is_state = |p: &Path| p.extension().is_some_and(|e| e == "state");
                    let why = match (&how, &replacement) {
                        (Damage::WrongVersion(v), _) => Some(format!("format version {v} (this build reads 1)")),
                        (_, Some(r)) if is_state(victim) && is_state(r) => Some("is invalid: holds ".to_owned()),
                        (_, Some(r)) if !is_state(victim) && !is_state(r) => Some("_metadata is invalid: holds checkpoint".to_owned()),
                        _ => None,
                    };
                    if let Some(why) = why {
                        prop_assert!(warning.contains(&why), "{case}: the warning says `{why}`: {warning}");
                    }
                }
            }
            // A damage that makes the state not fit the job (say, a parallelism in the
            // metadata) is a clear error naming the checkpoint, not a panic.
            Err(e) => {
                let text = e.to_string();
                prop_assert!(!how.always_found(), "{case}: an older checkpoint was there to restore: {text}");
                prop_assert!(!text.contains("panicked"), "{case}: {text}");
                prop_assert!(text.contains("checkpoint") || text.contains("restore"), "{case}: {text}");
            }
        }
    }
}
