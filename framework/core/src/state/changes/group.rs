//! One key group's entries in a backup's image (`KeyedImage`): encoded key -> encoded entry.
//!
//! A short entry (up to [`INLINE`] bytes: a key's few numbers and a short string) is kept in
//! the table's slot itself, so that applying a hand-off's entry to it misses the cache once
//! (the slot), and a new key costs no allocation. A longer one is kept in one buffer of the
//! group's, the entries' bytes back to back: with an allocation per entry, applying a large
//! state's hand-off waited on each entry's allocation (somewhere in the heap, in no order a
//! hand-off can follow), and a copy of a group still shared with a checkpoint's writer or a
//! promoted backup made an allocation per entry. An update of the same size is written in
//! place; another is appended and the bytes it replaced are left dead; once dead bytes pass
//! [`COMPACT_MIN`] and outweigh live ones, the live ones are moved together
//! ([`GroupEntries::compact`]), before the append that would grow the buffer. A copy of the
//! group is a copy of its table and of its buffer (dead bytes included).
//!
//! It owns the table and the buffer; not what the entries mean (`changes`).

use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

use super::KeyBytes;

/// Entries of up to this many bytes are kept in the table's slot (a slot is then 64 bytes
/// with a short key).
const INLINE: usize = 38;

/// Where an entry's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// In the slot: the first `len` bytes.
    Inline(u8, [u8; INLINE]),
    /// In the group's buffer.
    At { start: usize, len: usize },
}

impl Place {
    /// The bytes of the buffer an entry there holds (none for an inline one).
    fn buffered(&self) -> usize {
        match self {
            Place::Inline(..) => 0,
            Place::At { len, .. } => *len,
        }
    }
}

/// Dead bytes below which a buffer is never compacted (a small group's churn is cheap to keep).
const COMPACT_MIN: usize = 4096;

/// See the module doc.
#[derive(Debug, Clone, Default)]
pub(super) struct GroupEntries {
    index: HashMap<KeyBytes, Place, FxBuildHasher>,
    bytes: Vec<u8>,
    /// Bytes of `bytes` that no entry holds.
    dead: usize,
}

/// The bytes of an entry at `place`, `bytes` the group's buffer.
#[inline]
fn bytes_at<'a>(bytes: &'a [u8], place: &'a Place) -> &'a [u8] {
    match place {
        Place::Inline(len, inline) => &inline[..usize::from(*len)],
        // Every place in the buffer is within it (`append`, `compact`).
        Place::At { start, len } => &bytes[*start..*start + *len],
    }
}

impl GroupEntries {
    /// Number of entries.
    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The entry of the key whose encoding is `key`.
    #[inline]
    pub(super) fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.index.get(key).map(|p| bytes_at(&self.bytes, p))
    }

    /// Sets the entry of `key` to `entry`; returns the one it replaced, as `f` reads it.
    #[inline]
    pub(super) fn put<R>(
        &mut self,
        key: &[u8],
        entry: &[u8],
        f: impl FnOnce(&[u8]) -> R,
    ) -> Option<R> {
        let GroupEntries { index, bytes, dead } = self;
        let Some(place) = index.get_mut(key) else {
            let place = self.place(entry);
            self.index.insert(KeyBytes::new(key), place);
            return None;
        };
        let old = f(bytes_at(bytes, place));
        match place {
            // Most updates keep the entry's size: written in place.
            Place::Inline(len, inline) if usize::from(*len) == entry.len() => {
                inline[..entry.len()].copy_from_slice(entry);
            }
            Place::At { start, len } if *len == entry.len() => {
                bytes[*start..*start + *len].copy_from_slice(entry);
            }
            _ => {
                // The old bytes go dead; the entry holds none until it is placed again (a
                // compaction meanwhile keeps it, empty).
                *dead += place.buffered();
                *place = Place::Inline(0, [0; INLINE]);
                let placed = self.place(entry);
                if let Some(p) = self.index.get_mut(key) {
                    *p = placed;
                }
            }
        }
        Some(old)
    }

    /// Where `entry` goes: in a slot if short, else appended to the buffer (compacted first
    /// if dead bytes outweigh live ones).
    fn place(&mut self, entry: &[u8]) -> Place {
        if let Some((len, inline)) = super::inline(entry) {
            return Place::Inline(len, inline);
        }
        if self.wants_compaction() {
            self.compact();
        }
        let start = self.bytes.len();
        self.bytes.extend_from_slice(entry);
        Place::At {
            start,
            len: entry.len(),
        }
    }

    /// Removes the entry of `key`; returns it, as `f` reads it.
    pub(super) fn remove<R>(&mut self, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let place = self.index.remove(key)?;
        let old = f(bytes_at(&self.bytes, &place));
        self.dead += place.buffered();
        if self.dead == self.bytes.len() {
            // Nothing left in the buffer.
            self.bytes = Vec::new();
            self.dead = 0;
        } else if self.wants_compaction() {
            self.compact();
        }
        Some(old)
    }

    /// Every entry, in an order that stays the same while the group is not written.
    pub(super) fn values(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.index.values().map(|p| bytes_at(&self.bytes, p))
    }

    /// Whether dead bytes pass [`COMPACT_MIN`] and outweigh live ones.
    fn wants_compaction(&self) -> bool {
        self.dead > COMPACT_MIN && self.dead > self.bytes.len() / 2
    }

    /// Moves the live entries of the buffer together into a new one, dropping the dead bytes
    /// (the table's order is kept: only places change).
    fn compact(&mut self) {
        let mut bytes = Vec::with_capacity(self.bytes.len() - self.dead);
        for place in self.index.values_mut() {
            if let Place::At { start, len } = place {
                let live = *start..*start + *len;
                *start = bytes.len();
                bytes.extend_from_slice(&self.bytes[live]);
            }
        }
        self.bytes = bytes;
        self.dead = 0;
    }
}

impl PartialEq for GroupEntries {
    /// Equal as maps: the same keys with the same entries, wherever their bytes are.
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && self
                .index
                .iter()
                .all(|(k, p)| other.get(k) == Some(bytes_at(&self.bytes, p)))
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;

    #[test]
    fn it_holds_what_a_map_holds_through_resizes_removals_and_compactions() {
        let mut g = GroupEntries::default();
        let mut want: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let mut compactions = 0;
        for i in 0u32..40_000 {
            let key = (i % 700).to_le_bytes().to_vec();
            // Sizes vary: some updates are in place, some move the entry.
            let entry = vec![i as u8; 1 + (i as usize * 7) % 90];
            let dead_before = g.dead;
            if i % 13 == 0 {
                assert_eq!(
                    g.remove(&key, <[u8]>::to_vec),
                    want.remove(&key),
                    "remove {i}"
                );
            } else {
                assert_eq!(
                    g.put(&key, &entry, <[u8]>::to_vec),
                    want.insert(key, entry),
                    "put {i}"
                );
            }
            if g.dead < dead_before {
                compactions += 1;
            }
            assert!(g.dead <= g.bytes.len(), "dead bytes are part of the buffer");
        }
        assert!(compactions > 0, "the buffer was compacted");
        assert_eq!(g.len(), want.len());
        for (k, v) in &want {
            assert_eq!(g.get(k), Some(&v[..]));
        }
        let mut values: Vec<Vec<u8>> = g.values().map(<[u8]>::to_vec).collect();
        let mut expected: Vec<Vec<u8>> = want.values().cloned().collect();
        values.sort();
        expected.sort();
        assert_eq!(values, expected);
        // Equal as maps, whatever the layout.
        let mut other = GroupEntries::default();
        for (k, v) in &want {
            other.put(k, v, |_| ());
        }
        assert_eq!(g, other);
        other.put(&0u32.to_le_bytes(), b"changed", |_| ());
        assert_ne!(g, other);
    }

    #[test]
    fn short_entries_stay_in_their_slots_and_long_ones_in_the_buffer() {
        // A short key's slot is a cache line's 64 bytes.
        assert_eq!(std::mem::size_of::<(KeyBytes, Place)>(), 64);
        let mut g = GroupEntries::default();
        g.put(b"k", &[1; INLINE], |_| ());
        assert!(g.bytes.is_empty(), "inline");
        // Longer: to the buffer; shorter again: back in the slot, the buffer's bytes dead.
        assert_eq!(g.put(b"k", &[2; INLINE + 1], <[u8]>::len), Some(INLINE));
        assert_eq!((g.bytes.len(), g.dead), (INLINE + 1, 0));
        assert_eq!(g.put(b"k", &[3; 5], <[u8]>::len), Some(INLINE + 1));
        assert_eq!(g.dead, INLINE + 1);
        assert_eq!(g.get(b"k"), Some(&[3u8; 5][..]));
    }

    #[test]
    fn an_emptied_group_frees_its_buffer() {
        let mut g = GroupEntries::default();
        g.put(b"k", &[1; 100], |_| ());
        assert_eq!(g.remove(b"k", <[u8]>::len), Some(100));
        assert!(g.is_empty());
        assert_eq!((g.bytes.capacity(), g.dead), (0, 0));
        assert_eq!(g.remove(b"k", <[u8]>::len), None);
    }
}
