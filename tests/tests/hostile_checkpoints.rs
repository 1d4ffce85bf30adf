//! Checkpoint files are hostile input too: real checkpoint files of a job, with bytes flipped
//! or cut off, never panic the restore and never come back as wrong state. A damaged newest
//! checkpoint is skipped for the one before (or the job starts afresh); whatever the job
//! restores, its keyed counts continue exactly where the restored source position says.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use common::TempDir;
use proptest::prelude::*;
use weir::testing::{wait_for_checkpoint, HeldIds, Hold};
use weir::{Collector, Env, EnvConfig, RestoreLatest, ValueState};

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

/// The name of the newest checkpoint directory (`chk-<highest id>`).
fn newest_checkpoint(files: &[PathBuf]) -> std::ffi::OsString {
    files
        .iter()
        .filter_map(|f| {
            f.parent()?
                .file_name()?
                .to_str()?
                .strip_prefix("chk-")?
                .parse::<u64>()
                .ok()
        })
        .max()
        .map(|id| format!("chk-{id}").into())
        .expect("a checkpoint")
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
}

fn damage(path: &Path, d: &Damage) {
    let mut bytes = std::fs::read(path).expect("read");
    if bytes.is_empty() {
        return;
    }
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
    }
    std::fs::write(path, bytes).expect("write");
}

fn damages() -> impl Strategy<Value = Damage> {
    prop_oneof![
        proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4).prop_map(Damage::Flip),
        (0u16..1000).prop_map(Damage::Truncate),
    ]
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
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn a_damaged_checkpoint_never_panics_or_restores_wrong_state(
        pick in any::<prop::sample::Index>(),
        how in damages(),
    ) {
        let (orig, files) = original();
        let dir = TempDir::new("hostile-case");
        copy_tree(orig.path(), dir.path(), files);
        // A file of the newest checkpoint: the one a restore would take.
        let newest = newest_checkpoint(files);
        let victims: Vec<&PathBuf> = files
            .iter()
            .filter(|f| f.parent().and_then(|p| p.file_name()) == Some(newest.as_os_str()))
            .collect();
        let victim = victims[pick.index(victims.len())];
        damage(&dir.path().join(victim), &how);

        let mut cfg = config(dir.path());
        cfg.checkpoint.restore_latest = Some(RestoreLatest::if_any(dir.path()));
        let env = Env::with_config(cfg);
        let hold = Hold::new();
        hold.release();
        let out = job(&env, hold);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            common::execute_within(&env, "hostile")
        }));
        let result = result.map_err(|_| TestCaseError::fail(format!("{victim:?} {how:?}: the restore panicked")))?;
        match result {
            Ok(_) => {
                let got = out.take();
                check_consistent(&got).map_err(|e| TestCaseError::fail(format!("{victim:?} {how:?}: {e}")))?;
            }
            // A damage that makes the state not fit the job (say, a parallelism in the
            // metadata) is a clear error naming the checkpoint, not a panic.
            Err(e) => {
                let text = e.to_string();
                prop_assert!(!text.contains("panicked"), "{victim:?} {how:?}: {text}");
                prop_assert!(text.contains("checkpoint") || text.contains("restore"), "{victim:?} {how:?}: {text}");
            }
        }
    }
}
