//! What a backed-up operator whose snapshot is keyed entries (`(key, entry)` items by key
//! group, after its own fields) hands its buffer-queue backup: the keys written since the
//! last hand-off, each key's entry encoded on its own, or its removal, as the keyed operator
//! hands its changed entries (`state::changes`). The cost of a hand-off is then the change,
//! not the state. The window operator (`window::op`) and derived operators on keyed streams
//! (`keyed_apply`) use it.
//!
//! The entries are the items of the operator's snapshot, so the backup's image of them is that
//! snapshot's payload (`KeyedImage::payload`), which a promoted backup restores as it restores
//! a checkpoint. This module owns the change log and the delta; not the entries (the
//! operators') nor the image (`state::changes`).

use std::collections::HashSet;

use rustc_hash::FxBuildHasher;

use crate::checkpoint::StateWriter;
use crate::key_group::key_group_of;
use crate::state::changes::KeyedDelta;

/// The keys written since the last hand-off; before the first, everything is to hand (a
/// restored operator's keys were not written here).
pub(crate) struct Changed<K> {
    keys: HashSet<K, FxBuildHasher>,
    all: bool,
}

impl<K> Default for Changed<K> {
    fn default() -> Self {
        Changed {
            keys: HashSet::default(),
            all: true,
        }
    }
}

/// The keys written since `changed` started, and whether everything is to hand (before the
/// first hand-off); `changed` starts again.
pub(crate) fn take<K>(changed: &mut Option<Changed<K>>) -> (HashSet<K, FxBuildHasher>, bool) {
    let c = std::mem::replace(
        changed.get_or_insert_with(Changed::default),
        Changed {
            keys: HashSet::default(),
            all: false,
        },
    );
    (c.keys, c.all)
}

impl<K> Changed<K> {
    /// Everything is to hand (nothing was handed since the operator started).
    pub(crate) fn all(&self) -> bool {
        self.all
    }
}

/// Logs `key` as written (with a backup; nothing without one).
#[inline]
pub(crate) fn mark<K: crate::Key>(changed: &mut Option<Changed<K>>, key: &K) {
    if let Some(c) = changed {
        if !c.keys.contains(key) {
            c.keys.insert(key.clone());
        }
    }
}

/// Hands to `w` what changed since the last hand-off (every key when `w` asks for everything,
/// or at the first): `(key, entry)` for each written key still in `keys`, its removal for one
/// that is gone, and the operator's own fields `own` (encoded). `changed` starts again.
pub(crate) fn hand_changes<'a, K, E>(
    w: &mut StateWriter,
    info: &super::OperatorInfo,
    max_parallelism: usize,
    changed: &mut Option<Changed<K>>,
    own: Vec<u8>,
    keys: impl Iterator<Item = &'a K>,
    get: impl Fn(&K) -> Option<&'a E>,
) -> Result<(), String>
where
    K: crate::Key + 'a,
    E: serde::Serialize + 'a,
{
    let full = w.changes_of(&info.uid) == Some(true);
    let delta = delta(w, max_parallelism, changed, full, own, keys, get)?;
    w.put_changes(
        &info.uid,
        info.key_groups.as_ref().map(|r| (r.start, r.end)),
        delta,
    );
    Ok(())
}

/// What changed since `changed` started (everything if `full`, or at the first), as a delta
/// of `(key, entry)` items and removals with the operator's own fields `own` (encoded), each
/// entry encoded on its own; `w` is told of the progress now and then. `changed` starts
/// again. An incremental checkpoint's delta (`window::op`) and a hand-off's are this.
pub(crate) fn delta<'a, K, E>(
    w: &StateWriter,
    max_parallelism: usize,
    changed: &mut Option<Changed<K>>,
    full: bool,
    own: Vec<u8>,
    keys: impl Iterator<Item = &'a K>,
    get: impl Fn(&K) -> Option<&'a E>,
) -> Result<KeyedDelta, String>
where
    K: crate::Key + 'a,
    E: serde::Serialize + 'a,
{
    let (changed, all) = take(changed);
    let full = full || all;
    let mut delta = KeyedDelta::new(full);
    let mut n = 0usize;
    let mut push = |key: &K| -> Result<(), String> {
        n += 1;
        if n.is_multiple_of(4096) {
            w.progress();
        }
        let group = key_group_of(key, max_parallelism);
        match get(key) {
            Some(entry) => delta.push(group, key, Some(&(key, entry))),
            None => delta.push::<K, (&K, ())>(group, key, None),
        }
    };
    if full {
        keys.into_iter().try_for_each(&mut push)?;
    } else {
        changed.iter().try_for_each(&mut push)?;
    }
    delta.own = Some(own);
    Ok(delta)
}
