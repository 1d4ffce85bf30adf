//! Hand-offs a promoted backup reads without applying them.
//!
//! A backup applies its primary's hand-offs to its image a part at a time, between its
//! batches; when the primary fails, what it had not applied yet (at worst a hand-off of every
//! key, taken just before) used to be applied by the promotion, which then took as long as
//! that apply (65-95 ms for a million entries on two threads). Instead the promotion hands
//! the promoted operator the image as it is plus those hand-offs ([`PromotedImage`]), each
//! shared (no copy) and given a table of its entries by the hash of their encoded key
//! ([`Pending`]): the primary hashed each key as it encoded it, so building the table reads
//! only the hand-off's index, in order, and writes one slot an entry (14-19 ns an entry here,
//! against 60-150 for applying it). The promoted operator looks a
//! key up in the pending hand-offs, newest first, then in the image (`state::promoted`); the
//! backup goes on applying them to its own image as before.
//!
//! What cannot be read this way is applied at the promotion as before
//! ([`PromotedImage::whole`]): a hand-off that carries timers (they are restored when the
//! operator is built, from the image) or removes a key (the image's entry would come back),
//! a base snapshot or a hand-off of everything still in the log.
//!
//! It owns the pending hand-offs' tables; not the image (`changes`) nor when hand-offs are
//! applied (`backup::image`).

use std::sync::Arc;

use super::{KeyedDelta, KeyedImage};

/// The hash a pending hand-off's entries are found by: of the encoded key's bytes.
#[inline]
pub(crate) fn key_bytes_hash(key: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    crate::key_group::fmix64(rustc_hash::FxBuildHasher.hash_one(key))
}

/// Entries `from..` of a hand-off (the rest are in the image), found by key.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    delta: Arc<KeyedDelta>,
    from: usize,
    /// Open addressing, at most half full, 4 bytes a slot (the table is new memory at a
    /// promotion, and a fresh page costs about as much as the entries written to it): the
    /// entry's position after `from` plus one in the low `bits` (`0`: empty), the top of its
    /// hash above them. Shared by the clones (a backup's whole hand-off keeps its table
    /// for every promotion: [`Building`]).
    table: Arc<Vec<u32>>,
    bits: u32,
}

impl Pending {
    /// Whether entries of `delta` can be read without applying it: none carries timers or
    /// removes a key (see the module doc; counted over the whole hand-off, whichever part is
    /// pending).
    pub(crate) fn readable(delta: &KeyedDelta) -> bool {
        delta.timed == 0 && delta.removed == 0
    }

    /// Entries `from..` of `delta` (one [`readable`](Self::readable)), found by key. Reads
    /// only the hand-off's index (each entry's hash is in it), not its bytes.
    pub(crate) fn new(delta: Arc<KeyedDelta>, from: usize) -> Pending {
        let mut b = Building::new(delta, from);
        b.step(usize::MAX);
        b.pending
    }

    /// The encoded entry of the key encoded as `key` (whose [`key_bytes_hash`] is `hash`), if
    /// this hand-off has it.
    #[inline]
    pub(crate) fn get(&self, key: &[u8], hash: u64) -> Option<&[u8]> {
        let mask = self.table.len() - 1;
        let (tag, positions) = (tag(hash, self.bits), low_bits(self.bits));
        let mut s = hash as usize & mask;
        loop {
            let slot = self.table[s];
            if slot == 0 {
                return None;
            }
            if slot & !positions == tag {
                let e = &self.delta.index[self.from + (slot & positions) as usize - 1];
                if e.hash == hash && &self.delta.bytes[e.key.0 as usize..e.key.1 as usize] == key {
                    let (a, b) = e.entry?;
                    return Some(&self.delta.bytes[a as usize..b as usize]);
                }
            }
            s = (s + 1) & mask;
        }
    }

    /// The encoded entries from the `skip`th on, in the hand-off's order (each entry is one:
    /// none removes a key).
    pub(crate) fn entries(&self, skip: usize) -> impl Iterator<Item = &[u8]> + '_ {
        let d = &self.delta;
        d.index[(self.from + skip).min(d.index.len())..]
            .iter()
            .filter_map(|e| e.entry.map(|(a, b)| &d.bytes[a as usize..b as usize]))
    }

    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.delta.index.len() - self.from
    }
}

/// A [`Pending`] whose table is built a part at a time: a backup builds the table of a
/// hand-off of the whole state it takes as it is (`backup::image`) between its batches, so
/// that a promotion finds it built (a million entries' table took 30-36 ms to build at the
/// promotion).
#[derive(Debug)]
pub(crate) struct Building {
    pending: Pending,
    /// Entries in the table: `from..from + built`.
    built: usize,
}

impl Building {
    /// Entries `from..` of `delta` (one [`Pending::readable`]), none in the table yet.
    pub(crate) fn new(delta: Arc<KeyedDelta>, from: usize) -> Building {
        debug_assert!(Pending::readable(&delta));
        let n = delta.index.len().saturating_sub(from);
        // Positions fit in 32 bits: a hand-off's bytes do (`KeyedDelta::push`).
        let bits = usize::BITS - n.leading_zeros();
        let slots = (n * 2).next_power_of_two().max(2);
        Building {
            pending: Pending {
                delta,
                from,
                table: Arc::new(vec![0u32; slots]),
                bits,
            },
            built: 0,
        }
    }

    /// The hand-off.
    pub(crate) fn delta(&self) -> &Arc<KeyedDelta> {
        &self.pending.delta
    }

    /// Puts up to `budget` more entries in the table; how many it put.
    pub(crate) fn step(&mut self, budget: usize) -> usize {
        let Pending {
            delta,
            from,
            table,
            bits,
        } = &mut self.pending;
        let entries = delta.index.get(*from..).unwrap_or_default();
        let to = entries.len().min(self.built.saturating_add(budget));
        let Some(table) = Arc::get_mut(table) else {
            // Shared: built already (`pending`).
            return 0;
        };
        let mask = table.len() - 1;
        for (i, e) in entries.iter().enumerate().take(to).skip(self.built) {
            let mut s = e.hash as usize & mask;
            while table[s] != 0 {
                s = (s + 1) & mask;
            }
            table[s] = tag(e.hash, *bits) | (i + 1) as u32;
        }
        let put = to - self.built;
        self.built = to;
        put
    }

    /// Whether every entry is in the table.
    pub(crate) fn is_built(&self) -> bool {
        self.built == self.pending.len()
    }

    /// The hand-off with its table (shared), the rest of it built first.
    pub(crate) fn pending(&mut self) -> Pending {
        self.step(usize::MAX);
        debug_assert!(self.is_built());
        self.pending.clone()
    }
}

/// The top `32 - bits` bits of `hash`, in a slot's place above the position's `bits`.
#[inline]
fn tag(hash: u64, bits: u32) -> u32 {
    ((hash >> 32) as u32) & !low_bits(bits)
}

/// A mask of the low `bits` bits of a slot.
#[inline]
fn low_bits(bits: u32) -> u32 {
    u32::MAX.checked_shr(32 - bits).unwrap_or(0)
}

/// What a promoted backup restores: its backup's image, and the hand-offs the backup had not
/// applied to it yet, newest first (see the module doc).
#[derive(Debug, Clone, Default)]
pub(crate) struct PromotedImage {
    pub(crate) image: KeyedImage,
    pub(crate) pending: Vec<Pending>,
}

impl PromotedImage {
    /// The image alone (nothing pending).
    pub(crate) fn of(image: KeyedImage) -> Self {
        PromotedImage {
            image,
            pending: Vec::new(),
        }
    }

    /// The whole state as one image: the pending hand-offs applied, oldest first (for what
    /// restores a whole state: an operator on disk, one that restores a payload).
    pub(crate) fn whole(self) -> KeyedImage {
        let mut image = self.image;
        for p in self.pending.iter().rev() {
            image.apply_part(&p.delta, p.from, p.delta.index.len());
        }
        image
    }

    /// The whole state as the keyed operator's snapshot payload (taking `self`: no copy of
    /// the pending hand-offs' tables to apply them).
    pub(crate) fn payload(self) -> Vec<u8> {
        self.whole().payload()
    }

    /// The operator's own fields, encoded, if it has them: the newest hand-off's.
    pub(crate) fn own(&self) -> Option<&[u8]> {
        match self.pending.first() {
            Some(p) => p.delta.own.as_deref(),
            None => self.image.own(),
        }
    }

    /// Entries pending, in all hand-offs.
    pub(crate) fn pending_entries(&self) -> usize {
        self.pending.iter().map(Pending::len).sum()
    }
}

impl PartialEq for PromotedImage {
    fn eq(&self, other: &Self) -> bool {
        self.image == other.image
            && self.pending.len() == other.pending.len()
            && self
                .pending
                .iter()
                .zip(&other.pending)
                .all(|(a, b)| Arc::ptr_eq(&a.delta, &b.delta) && a.from == b.from)
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;

    fn delta(entries: &[(u64, &str)]) -> KeyedDelta {
        let mut d = KeyedDelta::new(false);
        for (k, v) in entries {
            d.push((k % 4) as usize, k, Some(&(*k, v.to_string())))
                .expect("encodes");
        }
        d
    }

    fn key(k: u64) -> Vec<u8> {
        let mut b = Vec::new();
        ciborium::into_writer(&k, &mut b).expect("encodes");
        b
    }

    fn value(entry: &[u8]) -> String {
        let (_, v): (u64, String) = ciborium::from_reader(entry).expect("decodes");
        v
    }

    #[test]
    fn every_pending_entry_is_found_by_its_key_and_no_other_key_is() {
        let entries: Vec<(u64, String)> = (0..5000).map(|k| (k * 7, format!("v{k}"))).collect();
        let refs: Vec<(u64, &str)> = entries.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let p = Pending::new(Arc::new(delta(&refs)), 1000);
        assert_eq!(p.len(), 4000);
        for (i, (k, v)) in entries.iter().enumerate() {
            let b = key(*k);
            let found = p.get(&b, key_bytes_hash(&b)).map(value);
            // The first 1000 are in the image already: not this one's to give.
            assert_eq!(found, (i >= 1000).then(|| v.clone()), "key {k}");
            let other = key(k + 1);
            assert_eq!(p.get(&other, key_bytes_hash(&other)), None);
        }
        let read: Vec<String> = p.entries(3990).map(value).collect();
        assert_eq!(
            read,
            (4990..5000).map(|k| format!("v{k}")).collect::<Vec<_>>()
        );
        assert_eq!(p.entries(5000).count(), 0);
    }

    #[test]
    fn a_table_built_a_part_at_a_time_finds_what_one_built_at_once_does() {
        let entries: Vec<(u64, String)> = (0..3000).map(|k| (k * 3, format!("v{k}"))).collect();
        let refs: Vec<(u64, &str)> = entries.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let d = Arc::new(delta(&refs));
        let mut b = Building::new(d.clone(), 0);
        let mut put = 0;
        for _ in 0..10 {
            put += b.step(97);
        }
        assert_eq!(put, 970, "a budget at a time");
        let p = b.pending(); // the rest first
        assert_eq!(b.step(5), 0, "nothing left");
        let at_once = Pending::new(d, 0);
        assert_eq!(p.table, at_once.table);
        for (k, v) in &entries {
            let b = key(*k);
            assert_eq!(p.get(&b, key_bytes_hash(&b)).map(value), Some(v.clone()));
        }
        assert!(
            Arc::ptr_eq(&p.table, &b.pending().table),
            "shared, not copied"
        );
    }

    #[test]
    fn a_hand_off_with_timers_or_a_removed_key_is_not_read_unapplied() {
        let mut timed = delta(&[(1, "a")]);
        timed
            .push(0, &2u64, Some(&(2u64, "b", vec![(5u64, 0u8)])))
            .expect("encodes");
        assert!(!Pending::readable(&timed));
        assert!(Pending::readable(&delta(&[(1, "a")])));
        let mut gone = delta(&[(1, "a")]);
        gone.push::<u64, ()>(0, &3u64, None).expect("encodes");
        assert!(!Pending::readable(&gone));
    }

    #[test]
    fn the_whole_state_applies_the_pending_hand_offs_oldest_first() {
        let mut image = KeyedImage::default();
        let first = delta(&[(1, "a"), (2, "a"), (3, "a")]);
        image.apply_part(&first, 0, 2);
        let second = Arc::new(delta(&[(2, "b"), (4, "b")]));
        let third = Arc::new(delta(&[(4, "c")]));
        let promoted = PromotedImage {
            image: image.clone(),
            pending: vec![
                Pending::new(third, 0),
                Pending::new(second, 0),
                Pending::new(Arc::new(first), 2),
            ],
        };
        assert_eq!(promoted.pending_entries(), 1 + 2 + 1);
        let whole = promoted.whole();
        let got: Vec<(u64, String)> = [1u64, 2, 3, 4]
            .iter()
            .map(|k| {
                (
                    *k,
                    value(whole.get((k % 4) as u32, &key(*k)).expect("held")),
                )
            })
            .collect();
        let want = [(1, "a"), (2, "b"), (3, "a"), (4, "c")];
        assert_eq!(
            got,
            want.map(|(k, v)| (k, v.to_string())).to_vec(),
            "each key's newest entry"
        );
    }
}
