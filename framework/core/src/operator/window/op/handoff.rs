//! What a backed-up window operator hands its buffer-queue backup: the keys whose windows
//! changed since the last hand-off (records added, windows fired, slices purged, keys gone),
//! each key's windows encoded on their own, as the keyed operator hands its changed entries
//! (`state::changes`). The cost of a hand-off is then the change, not the state.
//!
//! The entries are `(key, windows)`, the items of the operator's snapshot, so the backup's
//! image of them is the operator's snapshot payload (`KeyedImage::payload`), which a
//! promoted backup restores as it restores a checkpoint. This module owns the change log and
//! the hand-off; not the windows (`op`) nor the image (`state::changes`).

use std::collections::HashSet;

use rustc_hash::FxBuildHasher;

use super::{Inner, WindowOp, STATE_NAME, STATE_VERSION, WATERMARK_FIELD};
use crate::checkpoint::StateWriter;
use crate::error::TaskError;
use crate::key_group::key_group_of;
use crate::operator::window::WindowFn;

/// The keys written since the last hand-off; before the first, everything is to hand (a
/// restored operator's keys were not written here).
pub(super) struct Changed<K> {
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

/// Logs `key` as written (with a backup; nothing without one).
#[inline]
pub(super) fn mark<K: crate::Key>(changed: &mut Option<Changed<K>>, key: &K) {
    if let Some(c) = changed {
        if !c.keys.contains(key) {
            c.keys.insert(key.clone());
        }
    }
}

impl<KF, K, I, R, G> WindowOp<KF, K, I, R, G>
where
    K: crate::Key,
    G: WindowFn<K, I, R>,
{
    /// The operator's own fields (its watermark), as its snapshot and hand-offs carry them.
    pub(super) fn own_fields(&self) -> Result<crate::hooks::StateSnapshot, TaskError> {
        use crate::hooks::__private as p;
        let mut fields = Vec::new();
        p::put_field(
            &mut fields,
            STATE_NAME,
            WATERMARK_FIELD,
            &vec![self.inner.watermark],
        )
        .and_then(|()| p::encode(STATE_NAME, STATE_VERSION, fields))
        .map_err(|e| self.core.state_error(e.to_string()))
    }

    /// Hands what changed since the last hand-off to `w` (every key when `w` asks for
    /// everything): each changed key's windows, or its removal.
    pub(super) fn hand_changes(&mut self, w: &mut StateWriter) -> Result<(), TaskError> {
        let own = self.own_fields()?;
        let own = crate::checkpoint::encode(&own).map_err(|e| self.core.state_error(e))?;
        let Inner { keys, changed, .. } = &mut self.inner;
        let changed = std::mem::replace(
            changed.get_or_insert_with(Changed::default),
            Changed {
                keys: HashSet::default(),
                all: false,
            },
        );
        let full = changed.all || w.changes_of(&self.core.info.uid) == Some(true);
        let mut delta = crate::state::changes::KeyedDelta::new(full);
        let max_parallelism = self.max_parallelism;
        let mut n = 0usize;
        let mut push = |key: &K| -> Result<(), String> {
            n += 1;
            if n.is_multiple_of(4096) {
                w.progress();
            }
            let group = key_group_of(key, max_parallelism);
            match keys.get(key) {
                Some(windows) => delta.push(group, key, Some(&(key, windows))),
                None => delta.push::<K, (&K, ())>(group, key, None),
            }
        };
        let pushed = if full {
            keys.keys().try_for_each(&mut push)
        } else {
            changed.keys.iter().try_for_each(&mut push)
        };
        pushed.map_err(|e| self.core.state_error(e))?;
        delta.own = Some(own);
        let info = &self.core.info;
        w.put_changes(
            &info.uid,
            info.key_groups.as_ref().map(|r| (r.start, r.end)),
            delta,
        );
        Ok(())
    }
}
