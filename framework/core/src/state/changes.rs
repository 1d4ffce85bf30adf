//! What changed in a keyed operator's state, and an image of that state built from changes.
//!
//! A keyed subtask that hands its state to someone over and over (its buffer-queue backup,
//! every `state_interval`) should not encode every key each time. This module owns:
//!
//! - [`ChangeLog`]: which keys were written since the last hand-off. Each key's entry carries
//!   the generation it was last logged in; a key is logged (its one clone) the first time it
//!   is written in a generation, so a record costs one comparison, not an allocation. Off
//!   until the first hand-off asks for changes: a job with no such consumer pays nothing more.
//! - [`KeyedDelta`]: the changed entries, each encoded on its own (CBOR is self-delimiting),
//!   with their key groups; or every entry (`full`).
//! - [`KeyedImage`]: the receiving side: entries by key group and encoded key, updated by
//!   deltas off the sender's thread (the backup's; a delta's entry replaces the key's, so a
//!   delta taken since an older point than the image applies as well), and turned back into
//!   the operator's snapshot payload, byte for byte the CBOR `Vec<(usize, Vec<entry>)>` the
//!   keyed operator's restore reads, without decoding an entry; or cloned, its key groups
//!   shared, for a promoted backup to read in ([`Restored::Image`]).
//!
//! It does not own when hand-offs happen or what the receiver does with the payload (the
//! backup's claims and buffer queue), nor the entry's form (the keyed operator's: only
//! whether an entry carries timers, its array's length, is read here).

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

/// The generation a key entry was last logged in, kept beside its state.
pub(crate) type Generation = u64;

/// The keys written since the last [`take`](ChangeLog::take), each once.
#[derive(Debug)]
pub(crate) struct ChangeLog<K> {
    /// The current generation; entries logged in it carry it.
    generation: Generation,
    /// Keys first written in this generation.
    keys: Vec<K>,
    /// Logging is on (someone takes changes).
    on: bool,
    /// The next take must be everything (the state was changed outside the log).
    all: bool,
    /// The generation whose entries are being copied for a checkpoint ([`NOT_COPYING`]:
    /// none): an entry still in it is copied before it is written (see `checkpoint::copy`).
    copying: Generation,
}

/// [`ChangeLog::copying`] when no copy is under way.
const NOT_COPYING: Generation = Generation::MAX;

impl<K> Default for ChangeLog<K> {
    fn default() -> Self {
        ChangeLog {
            generation: 1,
            keys: Vec::new(),
            on: false,
            all: true,
            copying: NOT_COPYING,
        }
    }
}

impl<K> ChangeLog<K> {
    /// A log that is on from the start: the first take is what changed since the state was
    /// restored (a backed-up operator's, whose backup holds the restored state already).
    pub(crate) fn tracking() -> Self {
        ChangeLog {
            on: true,
            all: false,
            ..ChangeLog::default()
        }
    }

    /// The state was changed where the log cannot see (a function given every key's state):
    /// the next take is everything.
    pub(crate) fn lose_track(&mut self) {
        self.all = true;
    }
}

impl<K: Clone> ChangeLog<K> {
    /// Logs `key`, written now, whose entry carries `at` (updated). `true`: the entry is one a
    /// checkpoint still has to copy, and must be copied before it is written.
    #[inline(always)]
    #[must_use]
    pub(crate) fn touch(&mut self, key: &K, at: &mut Generation) -> bool {
        // One comparison on the common path: the key was logged in this generation already.
        if *at == self.generation {
            return false;
        }
        self.first_touch(key, at)
    }

    #[cold]
    #[inline(never)]
    fn first_touch(&mut self, key: &K, at: &mut Generation) -> bool {
        if !self.on {
            return false;
        }
        let copy = *at == self.copying;
        *at = self.generation;
        self.keys.push(key.clone());
        copy
    }

    /// Starts copying what changed since the last take for a checkpoint: the keys, whose
    /// entries carry [`copying`](Self::copying) until copied; `None` if the state was changed
    /// outside the log (the checkpoint must take everything). Logging goes on in a new
    /// generation.
    pub(crate) fn begin_copy(&mut self) -> Option<Vec<K>> {
        if self.all || !self.on {
            return None;
        }
        self.copying = self.generation;
        self.take(false)
    }

    /// Logs every one of `entries` (a key and the generation its entry carries) as written
    /// now: the next take holds every key, and is not "everything" for want of a log.
    pub(crate) fn log_all<'a>(&mut self, entries: impl Iterator<Item = (&'a K, &'a mut Generation)>)
    where
        K: 'a,
    {
        self.on = true;
        self.all = false;
        for (key, at) in entries {
            if *at != self.generation {
                *at = self.generation;
                self.keys.push(key.clone());
            }
        }
    }

    /// The generation being copied.
    pub(crate) fn copying(&self) -> Generation {
        self.copying
    }

    /// The copy is done.
    pub(crate) fn end_copy(&mut self) {
        self.copying = NOT_COPYING;
    }

    /// The generation a new entry starts with, logging its key.
    #[inline]
    pub(crate) fn inserted(&mut self, key: &K) -> Generation {
        if self.on {
            self.keys.push(key.clone());
            self.generation
        } else {
            0
        }
    }

    /// The generation the last [`take`](Self::take) closed: the entries written before it,
    /// since the take before, carry it.
    pub(crate) fn taken_generation(&self) -> Generation {
        self.generation - 1
    }

    /// The keys written since the last take, or `None` if the taker must take everything
    /// (the first take, `full`, or after [`lose_track`](Self::lose_track)). Logging is on from
    /// here, in a new generation.
    pub(crate) fn take(&mut self, full: bool) -> Option<Vec<K>> {
        self.on = true;
        self.generation += 1;
        let keys = std::mem::take(&mut self.keys);
        if std::mem::take(&mut self.all) || full {
            None
        } else {
            Some(keys)
        }
    }
}

/// Changed keyed entries, each encoded on its own: `bytes[key]` is the key's CBOR (its
/// identity in a [`KeyedImage`]), `bytes[entry]` the whole entry's (or `None`: the key is
/// gone).
#[derive(Debug, Default, Clone)]
pub(crate) struct KeyedDelta {
    /// Every entry of the state, not only changed ones: it replaces the image.
    pub(crate) full: bool,
    /// The operator's own (non-keyed) fields, encoded, if it has them: always whole.
    pub(crate) own: Option<Vec<u8>>,
    /// All encoded keys and entries, back to back.
    pub(crate) bytes: Vec<u8>,
    /// Per entry: its key group, its key's range in `bytes`, its entry's range (or none).
    pub(crate) index: Vec<DeltaEntry>,
    /// Entries that carry timers, and keys removed (entries without one): a promoted backup
    /// reads a hand-off with neither without applying it (`pending`).
    pub(crate) timed: usize,
    pub(crate) removed: usize,
}

/// One entry of a [`KeyedDelta`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeltaEntry {
    pub(crate) group: u32,
    pub(crate) key: (u32, u32),
    pub(crate) entry: Option<(u32, u32)>,
    /// The key's bytes' [`key_bytes_hash`], taken while they are in cache (a promotion finds
    /// a hand-off's entries by it without reading them: `pending`).
    pub(crate) hash: u64,
}

impl KeyedDelta {
    /// An empty delta (`full`: of a state with no key).
    pub(crate) fn new(full: bool) -> Self {
        KeyedDelta {
            full,
            ..KeyedDelta::default()
        }
    }

    /// Room for `entries` more entries of `bytes` encoded bytes in all.
    pub(crate) fn reserve(&mut self, entries: usize, bytes: usize) {
        self.index.reserve(entries);
        self.bytes.reserve(bytes);
    }

    /// Empties the delta, keeping its buffers.
    pub(crate) fn clear(&mut self) {
        self.full = false;
        self.own = None;
        self.bytes.clear();
        self.index.clear();
        self.timed = 0;
        self.removed = 0;
    }

    /// Adds one entry: `entry` encoded, an array whose first item is `key` (its bytes are
    /// the key's identity), or, without an entry, `key` encoded (the key is gone).
    pub(crate) fn push<Key, E>(
        &mut self,
        group: usize,
        key: &Key,
        entry: Option<&E>,
    ) -> Result<(), String>
    where
        Key: serde::Serialize + ?Sized,
        E: serde::Serialize + ?Sized,
    {
        let k0 = self.bytes.len();
        let (key, entry) = match entry {
            Some(e) => {
                // The entry is an array whose first item is the key, encoded as the key is
                // alone: its bytes are the key's identity, with one encoding, not two.
                ciborium::into_writer(e, &mut self.bytes).map_err(|e| e.to_string())?;
                let end = self.bytes.len();
                let key_at = entry_key(&self.bytes[k0..end])?;
                let range = (k0 + key_at.start, k0 + key_at.end);
                #[cfg(debug_assertions)]
                {
                    let mut alone = Vec::new();
                    let _ = ciborium::into_writer(key, &mut alone);
                    debug_assert_eq!(
                        alone.as_slice(),
                        &self.bytes[range.0..range.1],
                        "an entry's first item is its key"
                    );
                }
                (range, Some((k0, end)))
            }
            None => {
                ciborium::into_writer(key, &mut self.bytes).map_err(|e| e.to_string())?;
                ((k0, self.bytes.len()), None)
            }
        };
        if self.bytes.len() > u32::MAX as usize {
            return Err("a state delta over 4 GiB".into());
        }
        match entry {
            Some((a, _)) => self.timed += usize::from(is_timed(&self.bytes[a..])),
            None => self.removed += 1,
        }
        self.index.push(DeltaEntry {
            group: group as u32,
            key: (key.0 as u32, key.1 as u32),
            entry: entry.map(|(a, b)| (a as u32, b as u32)),
            hash: key_bytes_hash(&self.bytes[key.0..key.1]),
        });
        Ok(())
    }

    /// Adds every entry of `other` after this delta's (and its own fields, if it has them).
    pub(crate) fn append(&mut self, other: &KeyedDelta) -> Result<(), String> {
        let base = self.bytes.len();
        if base + other.bytes.len() > u32::MAX as usize {
            return Err("a state delta over 4 GiB".into());
        }
        let at = |r: (u32, u32)| (r.0 + base as u32, r.1 + base as u32);
        self.bytes.extend_from_slice(&other.bytes);
        self.index.extend(other.index.iter().map(|e| DeltaEntry {
            key: at(e.key),
            entry: e.entry.map(at),
            ..*e
        }));
        self.timed += other.timed;
        self.removed += other.removed;
        if let Some(own) = &other.own {
            self.own = Some(own.clone());
        }
        Ok(())
    }
}

impl KeyedDelta {
    /// Every entry of a keyed operator's snapshot `payload` (as [`KeyedImage::payload`]
    /// writes it, with the operator's own fields first if `own`), as a full delta, reading
    /// only the CBOR item heads. An error names what does not fit.
    pub(crate) fn from_payload(payload: Vec<u8>, own: bool) -> Result<KeyedDelta, String> {
        let mut d = KeyedDelta::new(true);
        let at = |n: usize| u32::try_from(n).map_err(|_| "a state over 4 GiB".to_owned());
        let own_at = entries_of(&payload, own, |group, key, entry| {
            d.timed += usize::from(is_timed(&payload[entry.clone()]));
            d.index.push(DeltaEntry {
                group,
                hash: key_bytes_hash(&payload[key.clone()]),
                key: (at(key.start)?, at(key.end)?),
                entry: Some((at(entry.start)?, at(entry.end)?)),
            });
            Ok(())
        })?;
        d.own = own_at.map(|r| payload[r].to_vec());
        // The entries are read where they are: no copy of the state.
        d.bytes = payload;
        Ok(d)
    }
}

/// What a keyed subtask restores: its snapshot payload, or (a promoted backup) a clone of the
/// image its backup kept and the hand-offs not applied to it yet (`pending`), read key by key
/// as the operator meets its keys (`state::promoted`): a promotion then costs no decoding of
/// the whole state, and no applying.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Restored {
    Payload(Vec<u8>),
    Image(PromotedImage),
}

/// A keyed subtask's state, encoded, built from [`KeyedDelta`]s: what its backup holds.
///
/// Its key groups are shared (`Arc`): a clone costs one reference per key group, not a copy
/// of the state, and a group is copied only when a delta writes to it while a clone still
/// holds it. A promoted backup starts from such a clone (see [`Restored::Image`]).
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct KeyedImage {
    own: Option<Vec<u8>>,
    groups: BTreeMap<u32, Arc<Entries>>,
    /// Entries that carry timers (an entry without timers is a 2-item array).
    timed: usize,
}

/// One key group's entries: encoded key -> encoded entry ([`group`]).
type Entries = group::GroupEntries;

/// An encoded key, kept in the table itself when short (a number, a short string: most
/// keys), so that finding a key reads no memory but the table's and its entry's. It hashes
/// and compares as its bytes.
type KeyBytes = SmallBytes<22>;

/// Bytes kept inline when `N` or fewer, else on the heap. Hashes, compares and derefs as its
/// bytes.
#[derive(Clone)]
enum SmallBytes<const N: usize> {
    Inline(u8, [u8; N]),
    Heap(Box<[u8]>),
}

impl<const N: usize> SmallBytes<N> {
    fn new(bytes: &[u8]) -> Self {
        match inline(bytes) {
            Some((len, inline)) => SmallBytes::Inline(len, inline),
            None => SmallBytes::Heap(bytes.into()),
        }
    }
}

/// `bytes` as a length and an array of `N` (the rest zeros), if they fit.
fn inline<const N: usize>(bytes: &[u8]) -> Option<(u8, [u8; N])> {
    let len = u8::try_from(bytes.len())
        .ok()
        .filter(|_| bytes.len() <= N)?;
    let mut inline = [0u8; N];
    inline[..bytes.len()].copy_from_slice(bytes);
    Some((len, inline))
}

impl<const N: usize> std::ops::Deref for SmallBytes<N> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            SmallBytes::Inline(len, inline) => &inline[..usize::from(*len)],
            SmallBytes::Heap(bytes) => bytes,
        }
    }
}

impl<const N: usize> std::ops::DerefMut for SmallBytes<N> {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            SmallBytes::Inline(len, inline) => &mut inline[..usize::from(*len)],
            SmallBytes::Heap(bytes) => bytes,
        }
    }
}

impl<const N: usize> std::borrow::Borrow<[u8]> for SmallBytes<N> {
    fn borrow(&self) -> &[u8] {
        self
    }
}

impl<const N: usize> std::hash::Hash for SmallBytes<N> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // As the bytes hash: the table is searched with them (`Borrow<[u8]>`).
        (**self).hash(state)
    }
}

impl<const N: usize> PartialEq for SmallBytes<N> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<const N: usize> Eq for SmallBytes<N> {}

impl<const N: usize> std::fmt::Debug for SmallBytes<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

/// Entries of a hand-off looked up together before they are applied (see
/// [`KeyedImage::apply_part`]).
const APPLY_LOOKAHEAD: usize = 32;

/// Where `entries` (ordered by key group) split in two halves of whole key groups, near the
/// middle; `None` if they are of one group, or not ordered by group.
fn split_by_group(entries: &[DeltaEntry]) -> Option<usize> {
    let g = entries.get(entries.len() / 2)?.group;
    if !entries.is_sorted_by_key(|e| e.group) {
        return None;
    }
    // Before the middle's group; or after it, if that group is the first.
    let split = match entries.partition_point(|e| e.group < g) {
        0 => entries.partition_point(|e| e.group <= g),
        split => split,
    };
    (split < entries.len()).then_some(split)
}

/// Applies `entries` of `d` to `groups`, a key group's run of them at a time (a hand-off is
/// ordered by group: its table is found once, and stays in cache while they are applied), a
/// few at a time within it (see [`touch_entries`]); returns the change in the number of
/// entries that carry timers.
fn apply_to(
    groups: &mut BTreeMap<u32, Arc<Entries>>,
    d: &KeyedDelta,
    entries: &[DeltaEntry],
) -> isize {
    let mut timed = 0isize;
    for run in entries.chunk_by(|a, b| a.group == b.group) {
        let g = run[0].group;
        let group = Arc::make_mut(groups.entry(g).or_default());
        for chunk in run.chunks(APPLY_LOOKAHEAD) {
            touch_entries(group, d, chunk);
            for e in chunk {
                timed += apply_entry(group, d, e);
            }
        }
        if group.is_empty() {
            groups.remove(&g);
        }
    }
    timed
}

/// Applies entry `e` of `d` to its key group's `group`; returns the change in the number of
/// entries that carry timers.
#[inline]
fn apply_entry(group: &mut Entries, d: &KeyedDelta, e: &DeltaEntry) -> isize {
    let key = &d.bytes[e.key.0 as usize..e.key.1 as usize];
    let Some((a, b)) = e.entry else {
        return group.remove(key, is_timed).map_or(0, |t| -isize::from(t));
    };
    let entry = &d.bytes[a as usize..b as usize];
    let added = isize::from(is_timed(entry));
    let removed = group.put(key, entry, is_timed).map_or(0, isize::from);
    added - removed
}

/// Finds the entries of `chunk` (of one key group) already held and reads a byte of each
/// (and of the delta's), all before any is written: the lookups do not depend on each other,
/// so their cache misses overlap, where one entry's apply after another waited for each in
/// turn. The writes after it find everything in cache.
fn touch_entries(group: &Entries, d: &KeyedDelta, chunk: &[DeltaEntry]) {
    let mut sum = 0u8;
    // First the delta's bytes (the keys, hashed next), in a loop of loads alone: many are in
    // flight at once; in the lookups' loop, only as many as fit beside them.
    for e in chunk {
        sum ^= d.bytes[e.key.0 as usize];
    }
    for e in chunk {
        let key = &d.bytes[e.key.0 as usize..e.key.1 as usize];
        if let Some(v) = group.get(key) {
            sum ^= v.first().copied().unwrap_or(0);
        }
    }
    std::hint::black_box(sum);
}

/// Whether an encoded keyed entry carries timers: `[key, state, timers]`, not `[key, state]`.
pub(crate) fn is_timed(entry: &[u8]) -> bool {
    entry.first() == Some(&(0x80 | 3))
}

impl KeyedImage {
    /// Applies `d`: its entries replace the keys' (a full delta replaces everything).
    #[cfg(test)]
    pub(crate) fn apply(&mut self, d: KeyedDelta) {
        self.apply_part(&d, 0, d.index.len());
    }

    /// Applies entries `from..to` of `d` (all of them, in parts, make [`apply`](Self::apply)).
    pub(crate) fn apply_part(&mut self, d: &KeyedDelta, from: usize, to: usize) {
        self.begin_part(d, from);
        let entries = d.index.get(from..to).unwrap_or_default();
        let timed = apply_to(&mut self.groups, d, entries);
        self.add_timed(timed);
    }

    /// [`apply_part`](Self::apply_part) on two threads, each applying its own key groups
    /// (`d`'s entries are ordered by key group, as the backup orders a hand-off): for a
    /// promotion, which waits for what its backup had not applied yet while the primary's
    /// thread no longer runs.
    pub(crate) fn apply_part_parallel(&mut self, d: &KeyedDelta, from: usize, to: usize) {
        self.begin_part(d, from);
        let entries = d.index.get(from..to).unwrap_or_default();
        let Some(split) = split_by_group(entries) else {
            // One group, or not ordered by group: one thread.
            let timed = apply_to(&mut self.groups, d, entries);
            self.add_timed(timed);
            return;
        };
        // The right half's groups (and only they) are taken out of the image, applied beside
        // the left's, and put back. They are handed over through a lock (uncontended: one
        // thread holds it at a time) so that if no thread can be started, this one applies
        // them and none is lost.
        let (left, right) = entries.split_at(split);
        let right_groups = std::sync::Mutex::new(self.groups.split_off(&right[0].group));
        let apply_right = || {
            let mut groups = match right_groups.lock() {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
            apply_to(&mut groups, d, right)
        };
        let (l, r) = std::thread::scope(|s| {
            let other = std::thread::Builder::new()
                .name("weir-backup-apply".into())
                .spawn_scoped(s, apply_right);
            let l = apply_to(&mut self.groups, d, left);
            let r = match other {
                Ok(h) => h.join(),
                Err(_) => Ok(apply_right()),
            };
            (l, r)
        });
        let mut right_groups = match right_groups.into_inner() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        self.groups.append(&mut right_groups);
        match r {
            Ok(r) => self.add_timed(l + r),
            Err(p) => std::panic::resume_unwind(p),
        }
    }

    /// The start of a delta's application: a full delta replaces everything.
    fn begin_part(&mut self, d: &KeyedDelta, from: usize) {
        if from == 0 {
            if d.full {
                self.groups.clear();
                self.timed = 0;
            }
            self.own = d.own.clone();
        }
    }

    fn add_timed(&mut self, change: isize) {
        self.timed = self.timed.saturating_add_signed(change);
    }

    /// The encoded entry of the key whose encoding is `key`, in key group `group`.
    pub(crate) fn get(&self, group: u32, key: &[u8]) -> Option<&[u8]> {
        self.groups.get(&group)?.get(key)
    }

    /// The operator's own fields, encoded, if it has them.
    pub(crate) fn own(&self) -> Option<&[u8]> {
        self.own.as_deref()
    }

    /// Whether some entry carries timers.
    pub(crate) fn has_timers(&self) -> bool {
        self.timed > 0
    }

    /// The key groups held, ascending.
    pub(crate) fn group_numbers(&self) -> Vec<u32> {
        self.groups.keys().copied().collect()
    }

    /// Drops key group `group` (its entries freed here if no clone holds them).
    pub(crate) fn remove_group(&mut self, group: u32) {
        if let Some(entries) = self.groups.remove(&group) {
            self.timed -= entries.values().filter(|e| is_timed(e)).count();
        }
    }

    /// The encoded entries of key group `group`, in an order that stays the same while the
    /// image is not written.
    pub(crate) fn entries_in(&self, group: u32) -> impl Iterator<Item = &[u8]> + '_ {
        self.groups.get(&group).into_iter().flat_map(|g| g.values())
    }

    /// Number of keys.
    #[cfg(test)]
    fn keys(&self) -> usize {
        self.groups.values().map(|g| g.len()).sum()
    }

    /// Replaces the image with the state of a keyed operator's snapshot `payload` (as
    /// [`payload`](Self::payload) writes it, with the operator's own fields first if `own`),
    /// reading only the CBOR item heads, not the entries. An error names what does not fit;
    /// the image is then empty.
    pub(crate) fn load(&mut self, payload: &[u8], own: bool) -> Result<(), String> {
        *self = KeyedImage::default();
        let loaded = self.load_inner(payload, own);
        if loaded.is_err() {
            *self = KeyedImage::default();
        }
        loaded
    }

    fn load_inner(&mut self, payload: &[u8], own: bool) -> Result<(), String> {
        let (groups, timed) = (&mut self.groups, &mut self.timed);
        let own_at = entries_of(payload, own, |group, key, entry| {
            *timed += usize::from(is_timed(&payload[entry.clone()]));
            // A key twice (not in a payload Weir writes): the later entry replaces the
            // earlier, and so does its count.
            let replaced = Arc::make_mut(groups.entry(group).or_default()).put(
                &payload[key],
                &payload[entry],
                is_timed,
            );
            *timed -= usize::from(replaced == Some(true));
            Ok(())
        })?;
        self.own = own_at.map(|r| payload[r].to_vec());
        Ok(())
    }

    /// The snapshot payload of this state: the CBOR of `Vec<(usize, Vec<entry>)>` (keys in
    /// ascending key group), preceded by the operator's own fields as a pair
    /// `(own, groups)` if it has them: what the keyed operator's restore reads.
    pub(crate) fn payload(&self) -> Vec<u8> {
        let size: usize = self
            .groups
            .values()
            .flat_map(|g| g.values())
            .map(|e| e.len())
            .sum();
        let groups = self.groups.iter().map(|(g, e)| (*g, e.len(), e.values()));
        write_payload(self.own.as_deref(), size, groups)
    }

    /// Whether no key has an entry.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

impl KeyedDelta {
    /// The snapshot payload of the state this delta holds whole (`full`), as
    /// [`KeyedImage::payload`] writes it; its index must be ordered by key group (as a backup
    /// orders a hand-off it takes). Keys removed (none in a whole state) are left out.
    pub(crate) fn whole_payload(&self) -> Vec<u8> {
        let runs: Vec<&[DeltaEntry]> = self.index.chunk_by(|a, b| a.group == b.group).collect();
        let entry = |e: &DeltaEntry| e.entry.map(|(a, b)| &self.bytes[a as usize..b as usize]);
        let groups = runs.iter().map(|run| {
            let n = run.iter().filter(|e| e.entry.is_some()).count();
            (run[0].group, n, run.iter().filter_map(entry))
        });
        write_payload(self.own.as_deref(), self.bytes.len(), groups)
    }
}

/// Writes a keyed operator's snapshot payload (see [`KeyedImage::payload`]): the own fields
/// first if any, then each key group's number, its entries' count and their bytes; `size`:
/// about the entries' bytes in all.
fn write_payload<'a, E: Iterator<Item = &'a [u8]>>(
    own: Option<&[u8]>,
    size: usize,
    groups: impl ExactSizeIterator<Item = (u32, usize, E)>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(size + 16 * groups.len() + 16);
    if let Some(own) = own {
        head(&mut out, ARRAY, 2);
        out.extend_from_slice(own);
    }
    head(&mut out, ARRAY, groups.len() as u64);
    for (g, n, entries) in groups {
        head(&mut out, ARRAY, 2);
        head(&mut out, UNSIGNED, u64::from(g));
        head(&mut out, ARRAY, n as u64);
        for e in entries {
            out.extend_from_slice(e);
        }
    }
    out
}

/// Walks a keyed operator's snapshot `payload` (the CBOR `Vec<(usize, Vec<entry>)>`, preceded
/// by the operator's own fields as a pair if `own`), reading only item heads: `f` is given each
/// entry's key group and the ranges of its key and of the whole entry. Returns the range of the
/// own fields; an error names what does not fit.
fn entries_of(
    payload: &[u8],
    own: bool,
    mut f: impl FnMut(u32, Range<usize>, Range<usize>) -> Result<(), String>,
) -> Result<Option<Range<usize>>, String> {
    let mut r = Reader { b: payload, at: 0 };
    let mut own_at = None;
    if own {
        r.expect_array(2)?;
        let start = r.at;
        r.skip()?;
        own_at = Some(start..r.at);
    }
    for _ in 0..r.array()? {
        r.expect_array(2)?;
        let group = r.unsigned()?;
        let group = u32::try_from(group).map_err(|_| format!("key group {group} out of range"))?;
        for _ in 0..r.array()? {
            let start = r.at;
            r.skip()?;
            let key = entry_key(&payload[start..r.at])?;
            f(group, start + key.start..start + key.end, start..r.at)?;
        }
    }
    if r.at != payload.len() {
        return Err(format!("{} bytes after the state", payload.len() - r.at));
    }
    Ok(own_at)
}

/// Where the key is in an encoded keyed entry: the first item of its array.
fn entry_key(entry: &[u8]) -> Result<Range<usize>, String> {
    let mut r = Reader { b: entry, at: 0 };
    r.array()?;
    let start = r.at;
    r.skip()?;
    Ok(start..r.at)
}

pub(crate) const UNSIGNED: u8 = 0;
pub(crate) const ARRAY: u8 = 4;

/// A CBOR item head: major type `major` with argument `n`, in its shortest form (RFC 8949
/// section 3).
pub(crate) fn head(out: &mut Vec<u8>, major: u8, n: u64) {
    let m = major << 5;
    if n < 24 {
        out.push(m | n as u8);
    } else if n <= u64::from(u8::MAX) {
        out.extend_from_slice(&[m | 24, n as u8]);
    } else if n <= u64::from(u16::MAX) {
        out.push(m | 25);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else if n <= u64::from(u32::MAX) {
        out.push(m | 26);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(m | 27);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// Reads CBOR item heads and skips items (RFC 8949): enough to find where each entry of a
/// snapshot begins and ends.
pub(crate) struct Reader<'a> {
    pub(crate) b: &'a [u8],
    pub(crate) at: usize,
}

/// An item head: major type, and its argument (`None`: indefinite length).
pub(crate) type Head = (u8, Option<u64>);

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, String> {
        let b = *self.b.get(self.at).ok_or("the state ends inside an item")?;
        self.at += 1;
        Ok(b)
    }

    pub(crate) fn head(&mut self) -> Result<Head, String> {
        let first = self.byte()?;
        let (major, info) = (first >> 5, first & 0x1f);
        let n = match info {
            0..=23 => Some(u64::from(info)),
            24..=27 => {
                let len = 1usize << (info - 24);
                let end = self.at + len;
                let bytes = self
                    .b
                    .get(self.at..end)
                    .ok_or("the state ends inside a head")?;
                self.at = end;
                Some(bytes.iter().fold(0u64, |n, b| (n << 8) | u64::from(*b)))
            }
            31 if matches!(major, 2..=5 | 7) => None,
            _ => return Err(format!("a malformed item head {first:#04x}")),
        };
        Ok((major, n))
    }

    pub(crate) fn array(&mut self) -> Result<u64, String> {
        match self.head()? {
            (4, Some(n)) => Ok(n),
            other => Err(format!(
                "an array of known length expected, found {other:?}"
            )),
        }
    }

    pub(crate) fn expect_array(&mut self, len: u64) -> Result<(), String> {
        match self.array()? {
            n if n == len => Ok(()),
            n => Err(format!("an array of {len} expected, found one of {n}")),
        }
    }

    pub(crate) fn unsigned(&mut self) -> Result<u64, String> {
        match self.head()? {
            (0, Some(n)) => Ok(n),
            other => Err(format!("an unsigned integer expected, found {other:?}")),
        }
    }

    /// Skips one whole item.
    pub(crate) fn skip(&mut self) -> Result<(), String> {
        // Without recursion, so that no payload can overflow the stack however deeply it
        // nests: `left` counts the items still to skip at the current level (`None`: up to
        // a break); `outer` keeps the levels around it, and is needed (allocated) only
        // where a level of indefinite length is entered or left.
        let mut left: Option<u64> = Some(1);
        let mut outer: Vec<Option<u64>> = Vec::new();
        loop {
            match left {
                Some(0) => match outer.pop() {
                    Some(l) => {
                        left = l;
                        continue;
                    }
                    None => return Ok(()),
                },
                Some(n) => left = Some(n - 1),
                None if self.b.get(self.at) == Some(&0xff) => {
                    self.at += 1;
                    left = outer
                        .pop()
                        .ok_or("internal error: a break with no open item")?;
                    continue;
                }
                None => {}
            }
            let more = match self.head()? {
                (0 | 1 | 7, Some(_)) => 0,
                (2 | 3, Some(len)) => {
                    self.at = usize::try_from(len)
                        .ok()
                        .and_then(|l| self.at.checked_add(l))
                        .filter(|e| *e <= self.b.len())
                        .ok_or("the state ends inside a string")?;
                    0
                }
                (4, Some(len)) => len,
                (5, Some(len)) => len.checked_mul(2).ok_or("a map too large")?,
                (6, Some(_)) => 1,
                (2..=5, None) => {
                    outer.push(left);
                    left = None;
                    continue;
                }
                (7, None) => return Err("a break outside an indefinite-length item".into()),
                (major, _) => return Err(format!("an unknown item of major type {major}")),
            };
            if more > 0 {
                left = match left {
                    Some(n) => Some(n.checked_add(more).ok_or("an item too large")?),
                    None => {
                        outer.push(None);
                        Some(more)
                    }
                };
            }
        }
    }
}

mod group;
mod pending;
pub(crate) use pending::{key_bytes_hash, Building, Pending, PromotedImage};
#[cfg(test)]
mod tests;
