//! The copy of a keyed state that an incremental checkpoint takes, a little at a time.
//!
//! At a barrier nothing of the state is copied: the keys written since the previous checkpoint
//! (the change log's generation, `state::changes`) become the ones to copy, and the log goes on
//! in a new generation. The operator then copies a chunk of them between units of work
//! ([`Incremental::step`]) and hands each chunk to its chain's thread to sort and write
//! (`incremental`); an entry still to copy that a record is about to write is
//! copied first (copy-on-write, `KeyedState::write` and the keyed operator's loop). The
//! operator's pause at the barrier is one swap of the log; what it spends on the checkpoint
//! after that is encoding the changed entries, a chunk between units of work, into buffers
//! that go back and forth between it and the thread (the disk backend's entries are cloned
//! and encoded on the thread); sorting, compressing and writing run on the other thread.
//!
//! A chain starts from nothing: every key of a new instance is a change (a restored
//! instance logs its restored keys), so its first checkpoint copies everything the same way;
//! so does the one after a run could not be written (the chain starts again). A checkpoint
//! taken while the operator has timers (a key's timers are not copied with it yet), or after
//! the state was changed where the log cannot see, hands the whole state encoded at the
//! barrier.
//!
//! This module owns the copy's progress; not the entries' form (the keyed operator's) nor the
//! runs (`checkpoint::runs`).

use std::hash::Hash;
use std::path::{Path, PathBuf};

use super::incremental::{ChainPart, ChainWriter};
use crate::state::changes::KeyedDelta;
use crate::state::{Entries, KeyedState, Tracked, LOOKAHEAD};

/// Entries copied per step: about a fifth of a millisecond of clones for small states.
pub(crate) const STEP: usize = 4096;

/// A keyed subtask's incremental checkpoints: its chain's thread and the copy under way.
pub(crate) struct Incremental<K> {
    writer: ChainWriter,
    copy: Option<Copy<K>>,
    max_parallelism: usize,
    /// A checkpoint took the whole state outside the chain (unaligned, or handed over): the
    /// runs before it may be collected once it is complete, so the next one starts a chain.
    restart: bool,
}

/// The copy of checkpoint `id`'s changed entries.
struct Copy<K> {
    id: u64,
    root: PathBuf,
    keys: std::vec::IntoIter<K>,
    /// It holds every key: a new chain.
    full: bool,
}

/// How a keyed entry is encoded: `(group, key, state)` to the delta.
pub(crate) type EncodeEntry<K, S> =
    fn(&mut KeyedDelta, usize, &K, Option<&S>) -> Result<(), String>;

impl<K> Incremental<K>
where
    K: crate::Key,
{
    /// Incremental checkpoints for subtask `subtask` of operator `uid`.
    pub(crate) fn start(uid: &str, subtask: usize, max_parallelism: usize) -> Result<Self, String> {
        Ok(Incremental {
            writer: ChainWriter::start(uid, subtask)?,
            copy: None,
            max_parallelism,
            restart: false,
        })
    }

    /// Whether a copy is under way (the operator should [`step`](Self::step) it).
    pub(crate) fn copying(&self) -> bool {
        self.copy.is_some()
    }

    /// Barrier `id` (runs under `root`): starts copying what changed since the previous
    /// checkpoint (every key, if the chain broke), with the operator's own fields `own`
    /// (encoded) if it has them, and returns the chain the checkpoint's state file will
    /// reference; or `None` if this checkpoint must take the whole state encoded now (`base`:
    /// the operator has timers; or its state changed where the log cannot see): then
    /// [`whole`](Self::whole).
    pub(crate) fn begin<S: crate::Data>(
        &mut self,
        id: u64,
        root: &Path,
        state: &mut KeyedState<K, S>,
        base: bool,
        own: Option<Vec<u8>>,
        encode: EncodeEntry<K, S>,
    ) -> Option<ChainPart> {
        // A copy still under way (a barrier came before it was done) ends here.
        self.finish(state, encode);
        if base {
            return None;
        }
        let full = self.writer.needs_base() || std::mem::take(&mut self.restart);
        if full {
            // Everything again, copied as any change is.
            state.log_all();
        }
        let keys = state.changes.begin_copy()?;
        self.writer.begin(id, root);
        if let Some(own) = own {
            self.writer.encode(Box::new(move |d| {
                d.own = Some(own);
                Ok(())
            }));
        }
        self.copy = Some(Copy {
            id,
            root: root.to_owned(),
            keys: keys.into_iter(),
            full,
        });
        Some(self.writer.part(id))
    }

    /// Barrier `id`'s checkpoint takes the whole state: `payload`, the operator's snapshot
    /// (its own fields first if `own`), encoded at the barrier. The change log starts again.
    pub(crate) fn whole<S>(
        &mut self,
        id: u64,
        root: &Path,
        state: &mut KeyedState<K, S>,
        payload: Vec<u8>,
        own: bool,
    ) -> ChainPart {
        let _ = state.changes.take(true);
        self.writer.begin(id, root);
        self.writer.encode(Box::new(move |d| {
            *d = KeyedDelta::from_payload(payload, own)?;
            Ok(())
        }));
        self.writer.seal(id, root, true);
        self.writer.part(id)
    }

    /// The operator's state was taken whole, outside the chain, for a checkpoint (an
    /// unaligned one, or one handed over in memory): once that checkpoint is complete,
    /// retention may delete the runs the chain holds, so the next checkpoint starts a new
    /// chain with every key.
    pub(crate) fn taken_whole(&mut self) {
        self.restart = true;
    }

    /// Copies up to `budget` entries of the copy under way, unless the chain's thread has
    /// enough to encode already; seals it when done.
    pub(crate) fn step<S: crate::Data>(
        &mut self,
        state: &mut KeyedState<K, S>,
        budget: usize,
        encode: EncodeEntry<K, S>,
    ) {
        if !self.writer.busy() {
            self.copy_some(state, budget, encode);
        }
    }

    fn copy_some<S: crate::Data>(
        &mut self,
        state: &mut KeyedState<K, S>,
        budget: usize,
        encode: EncodeEntry<K, S>,
    ) {
        let Some(copy) = self.copy.as_mut() else {
            return;
        };
        let max_parallelism = self.max_parallelism;
        let g = state.changes.copying();
        // Entries cloned, encoded on the chain's thread (the disk backend's): the saved
        // ones first.
        let mut chunk: Vec<(K, Option<S>)> = Vec::new();
        if !matches!(state.map, Entries::Logged(_)) {
            chunk.extend(
                std::mem::take(&mut state.saved)
                    .into_iter()
                    .map(|(k, s)| (k, Some(s))),
            );
        }
        if let Entries::Logged(map) = &mut state.map {
            // Encoded here, into a delta the chain's thread appends to its own: cloning the
            // entries instead, and dropping them on that thread, cost more than encoding
            // (glibc frees of another thread's allocations, at 1M entries a second).
            let mut part = self.writer.spare();
            let saved = std::mem::take(&mut state.saved);
            let keys: Vec<K> = copy.keys.by_ref().take(budget).collect();
            let encoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let group = |k: &K| crate::key_group::key_group_of(k, max_parallelism);
                for (k, s) in &saved {
                    encode(&mut part, group(k), k, Some(s))?;
                }
                // A few hundred entries are looked up (and their states touched) first, then
                // encoded: lookups one after another are independent, so the processor waits
                // for their cache misses together (a lookup between two encodings waited for
                // its own: two misses in a large table, most of a copy's cost), and the
                // entries are still in the cache when they are encoded.
                let mut found: Vec<Found<'_, S>> = Vec::with_capacity(LOOKAHEAD);
                for keys in keys.chunks(LOOKAHEAD) {
                    found.clear();
                    found.extend(keys.iter().map(|k| match map.get(k) {
                        Some(t) if t.logged.get() == g => Found::Changed(t),
                        // Written since the barrier: copied then (`saved`).
                        Some(_) => Found::Copied,
                        None => Found::Removed,
                    }));
                    // And their heap parts (`state::touch`): the encodings below find them
                    // in the cache too.
                    for t in &found {
                        if let Found::Changed(t) = t {
                            crate::state::touch::touch(&t.state);
                        }
                    }
                    for (k, t) in keys.iter().zip(&found) {
                        match t {
                            // A key logged twice is copied once.
                            Found::Changed(t) if t.logged.get() == g => {
                                // Copied: a later write is logged as any other.
                                t.logged.set(0);
                                encode(&mut part, group(k), k, Some(&t.state))?;
                            }
                            Found::Changed(_) | Found::Copied => {}
                            Found::Removed => encode(&mut part, group(k), k, None)?,
                        }
                    }
                }
                Ok::<(), String>(())
            }));
            let part = match encoded {
                Ok(Ok(())) => Ok(part),
                Ok(Err(e)) => Err(e),
                Err(p) => Err(format!("panicked: {}", crate::error::panic_message(&*p))),
            };
            if part.as_ref().map_or(true, |p| !p.index.is_empty()) {
                self.writer.hand(part);
            }
        } else if let Entries::Disk(d) = &mut state.map {
            copy_from_disk(d, &mut copy.keys, g, budget, &mut chunk);
        } else {
            copy.keys = Vec::new().into_iter();
        }
        if !chunk.is_empty() {
            self.writer.encode(Box::new(move |d| {
                chunk.iter().try_for_each(|(k, s)| {
                    encode(
                        d,
                        crate::key_group::key_group_of(k, max_parallelism),
                        k,
                        s.as_ref(),
                    )
                })
            }));
        }
        if copy.keys.len() == 0 {
            state.changes.end_copy();
            if let Some(done) = self.copy.take() {
                self.writer.seal(done.id, &done.root, done.full);
            }
        }
    }

    /// Copies everything left of the copy under way (a barrier or the end of the input).
    pub(crate) fn finish<S: crate::Data>(
        &mut self,
        state: &mut KeyedState<K, S>,
        encode: EncodeEntry<K, S>,
    ) {
        while self.copy.is_some() {
            self.copy_some(state, STEP, encode);
        }
    }
}

/// A changed key's entry, as a copy's lookup finds it.
enum Found<'a, S> {
    /// As it was at the barrier.
    Changed(&'a Tracked<S>),
    /// Written since the barrier, and copied then.
    Copied,
    /// Gone since: copied as removed.
    Removed,
}

/// Copies up to `budget` of the `keys` left from the disk backend `d` into `chunk`, each as
/// it was at the barrier (generation `g`). A read that fails fails the operator (at its next
/// step) and ends the copy: its checkpoint never completes.
fn copy_from_disk<K: crate::Key, S: crate::Data>(
    d: &mut crate::state::disk::DiskEntries<K, S>,
    keys: &mut std::vec::IntoIter<K>,
    g: crate::state::changes::Generation,
    budget: usize,
    chunk: &mut Vec<(K, Option<S>)>,
) {
    for k in keys.by_ref().take(budget) {
        match d.cache.get_mut(&k) {
            Some(t) if t.logged.get() == g => {
                t.logged.set(0);
                chunk.push((k, Some(t.state.clone())));
            }
            Some(_) => {}
            // Written back since the barrier: the store has it as it was then, unless it was
            // written since (and copied then).
            None => match d.stored(&k) {
                Ok(Some(t)) if t.logged.get() == g => chunk.push((k, Some(t.state))),
                Ok(Some(_)) => {}
                Ok(None) => chunk.push((k, None)),
                Err(e) => {
                    // The operator fails with it at its next step; this copy's checkpoint
                    // never completes.
                    d.fail(e);
                    *keys = Vec::new().into_iter();
                    break;
                }
            },
        }
    }
}

impl<K: Hash + Eq> std::fmt::Debug for Incremental<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Incremental")
            .field("copying", &self.copy.as_ref().map(|c| (c.id, c.keys.len())))
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::store::{self, CheckpointMetadata};
    use std::collections::BTreeMap;

    fn encode(
        d: &mut KeyedDelta,
        group: usize,
        key: &u64,
        state: Option<&u64>,
    ) -> Result<(), String> {
        match state {
            Some(s) => d.push(group, key, Some(&(key, s))),
            None => d.push::<u64, (u64, u64)>(group, key, None),
        }
    }

    fn checkpoint(root: &Path, id: u64, runs: Vec<String>) {
        let meta = CheckpointMetadata::of(id, BTreeMap::new(), 0, runs);
        store::write_metadata(root, &meta).expect("writes");
    }

    fn restored(root: &Path, chain: &[crate::checkpoint::runs::RunRef]) -> BTreeMap<u64, u64> {
        let payload = crate::checkpoint::runs::payload(root, chain).expect("reads");
        let groups: Vec<(usize, Vec<(u64, u64)>)> =
            crate::checkpoint::decode(&payload).expect("decodes");
        groups.into_iter().flat_map(|(_, e)| e).collect()
    }

    #[test]
    fn copies_see_the_state_at_the_barrier_and_a_whole_checkpoint_starts_a_new_chain() {
        let root = std::env::temp_dir().join(format!("weir-copy-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let mut state = KeyedState::<u64, u64>::tracking(true);
        for k in 0..100 {
            *state.write(&k, || 0).expect("an entry") = k;
        }
        let mut inc = Incremental::<u64>::start("op", 0, 128).expect("starts");
        let p1 = inc
            .begin(1, &root, &mut state, false, None, encode)
            .expect("a copy");
        // Written after the barrier, before its copy: the checkpoint has the old value.
        *state.write(&7, || 0).expect("an entry") = 700;
        inc.finish(&mut state, encode);
        let c1 = p1.wait(&|| false).expect("checkpoint 1");
        let at_1 = restored(&root, &c1.runs);
        assert_eq!(at_1.len(), 100);
        assert_eq!(at_1[&7], 7, "the value at the barrier");
        // Checkpoint 2 took the state whole (unaligned): once complete, with one checkpoint
        // retained, the runs of 1 are collected.
        inc.taken_whole();
        checkpoint(&root, 1, c1.runs.iter().map(|r| r.file.clone()).collect());
        checkpoint(&root, 2, Vec::new());
        store::retain(&root, 1);
        assert!(c1.runs.iter().all(|r| !root.join(&r.file).exists()));
        *state.write(&5, || 0).expect("an entry") = 500;
        let p3 = inc
            .begin(3, &root, &mut state, false, None, encode)
            .expect("a copy");
        inc.finish(&mut state, encode);
        let c3 = p3.wait(&|| false).expect("checkpoint 3");
        let at_3 = restored(&root, &c3.runs);
        assert_eq!(at_3.len(), 100, "a new chain with every key");
        assert_eq!((at_3[&5], at_3[&7]), (500, 700));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn an_entry_that_panics_as_it_is_encoded_fails_its_checkpoint_not_the_operator() {
        fn panicky(
            d: &mut KeyedDelta,
            group: usize,
            key: &u64,
            state: Option<&u64>,
        ) -> Result<(), String> {
            if *key == 13 {
                panic!("injected: key 13 cannot be encoded");
            }
            encode(d, group, key, state)
        }
        let root = std::env::temp_dir().join(format!("weir-copy-panic-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let mut state = KeyedState::<u64, u64>::tracking(true);
        for k in 0..100 {
            *state.write(&k, || 0).expect("an entry") = k;
        }
        let mut inc = Incremental::<u64>::start("op", 0, 128).expect("starts");
        let p1 = inc
            .begin(1, &root, &mut state, false, None, panicky)
            .expect("a copy");
        inc.finish(&mut state, panicky);
        let err = p1.wait(&|| false).expect_err("checkpoint 1 fails");
        assert!(err.contains("panicked") && err.contains("key 13"), "{err}");
        // The next checkpoint writes every key again, as a new chain.
        *state.write(&5, || 0).expect("an entry") = 500;
        let p2 = inc
            .begin(2, &root, &mut state, false, None, encode)
            .expect("a copy");
        inc.finish(&mut state, encode);
        let c2 = p2.wait(&|| false).expect("checkpoint 2");
        let at_2 = restored(&root, &c2.runs);
        assert_eq!(at_2.len(), 100, "a new chain with every key");
        assert_eq!((at_2[&5], at_2[&13]), (500, 13));
        let _ = std::fs::remove_dir_all(&root);
    }
}
