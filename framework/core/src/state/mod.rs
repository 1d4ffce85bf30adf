//! Keyed state: what a keyed operator keeps per key.
//!
//! Two ways to hold it, one storage. A [`KeyedProcessFunction`](crate::KeyedProcessFunction)
//! declares a per-key state type and receives `&mut` to the current key's state with every
//! record. A derived operator (`#[derive(Operator)]`) on a keyed stream declares fields of the
//! keyed state types ([`ValueState`], [`MapState`], [`ListState`], [`ReducingState`]) with
//! `#[weir(state)]`; before each record the runtime puts the current key's values into those
//! fields and takes them back after, so `self.flag.value()` is the flag of the record's key.
//! Either way the runtime keeps one entry per key, snapshots it grouped by key group (the unit
//! that rescale and the buffer-queue backup move), and drops a key whose states are all empty.
//!
//! A keyed state field may have a time to live ([`StateTtl`], Flink's `StateTtlConfig`):
//! an expired value is never returned, is cleaned when its key is next seen and incrementally
//! in the background of processing, and is left out of snapshots (module `ttl`).
//!
//! This module owns the containers and the TTL bookkeeping, not their snapshots (the keyed
//! operators in `operator` write those).

mod backend;
pub(crate) mod changes;
#[cfg(feature = "disk-state")]
pub(crate) mod disk;
#[cfg(not(feature = "disk-state"))]
#[path = "disk_stub.rs"]
pub(crate) mod disk;
pub(crate) mod promoted;
pub(crate) mod sharded;
pub(crate) mod touch;
mod ttl;

use std::collections::HashMap;
use std::hash::Hash;
use std::marker::PhantomData;

use rustc_hash::FxBuildHasher;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub use backend::{DiskBackend, StateBackend};
pub use ttl::{Slot, StateTtl, TtlUpdate};

/// A type that can be a keyed `#[weir(state)]` field of a derived operator: a container whose
/// value is per key ([`ValueState`], [`MapState`], [`ListState`], [`ReducingState`]).
///
/// The runtime asks two things of it: whether it holds nothing (a key whose states are all
/// empty is dropped), and whether it was written since the last ask (a state with a
/// [`StateTtl`] is stamped when written).
pub trait KeyedStateType: Default + Serialize + DeserializeOwned + Send + 'static {
    /// Whether the state holds nothing for its key.
    fn is_empty(&self) -> bool;
    /// Whether the state was written since the last call, and forgets it.
    fn take_written(&mut self) -> bool;
}

/// One optional value per key (Flink's `ValueState`).
///
/// ```
/// let mut s = weir::ValueState::<u64>::default();
/// assert_eq!(s.value(), None);
/// s.update(3);
/// *s.get_or_insert_with(|| 0) += 1;
/// assert_eq!(s.value(), Some(&4));
/// s.clear();
/// assert!(s.value().is_none());
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
#[serde(bound(serialize = "T: Serialize", deserialize = "T: Deserialize<'de>"))]
pub struct ValueState<T> {
    value: Option<T>,
    #[serde(skip)]
    written: bool,
}

impl<T: PartialEq> PartialEq for ValueState<T> {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl<T: Eq> Eq for ValueState<T> {}

impl<T> Default for ValueState<T> {
    fn default() -> Self {
        ValueState {
            value: None,
            written: false,
        }
    }
}

impl<T> ValueState<T> {
    /// The value, if set.
    pub fn value(&self) -> Option<&T> {
        self.value.as_ref()
    }
    /// Sets the value.
    pub fn update(&mut self, v: T) {
        self.written = true;
        self.value = Some(v);
    }
    /// Removes the value and returns it.
    pub fn take(&mut self) -> Option<T> {
        self.written = true;
        self.value.take()
    }
    /// Clears the value.
    pub fn clear(&mut self) {
        self.written = true;
        self.value = None;
    }
    /// The value, set by `f` first if empty.
    pub fn get_or_insert_with(&mut self, f: impl FnOnce() -> T) -> &mut T {
        self.written = true;
        self.value.get_or_insert_with(f)
    }
    /// The value, mutably, if set (a change through it counts as a write).
    pub fn value_mut(&mut self) -> Option<&mut T> {
        self.written = true;
        self.value.as_mut()
    }
}

impl<T: Serialize + DeserializeOwned + Send + 'static> KeyedStateType for ValueState<T> {
    fn is_empty(&self) -> bool {
        self.value.is_none()
    }
    fn take_written(&mut self) -> bool {
        std::mem::take(&mut self.written)
    }
}

/// A map per key (Flink's `MapState`).
///
/// ```
/// let mut s = weir::MapState::<String, u32>::default();
/// s.put("a".into(), 1);
/// assert_eq!(s.get("a"), Some(&1));
/// assert_eq!(s.remove("a"), Some(1));
/// assert!(s.is_empty());
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
#[serde(bound(
    serialize = "K: Serialize + Hash + Eq, V: Serialize",
    deserialize = "K: Deserialize<'de> + Hash + Eq, V: Deserialize<'de>"
))]
pub struct MapState<K, V> {
    map: HashMap<K, V>,
    #[serde(skip)]
    written: bool,
}

impl<K: Hash + Eq, V: PartialEq> PartialEq for MapState<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.map == other.map
    }
}

impl<K, V> Default for MapState<K, V> {
    fn default() -> Self {
        MapState {
            map: HashMap::new(),
            written: false,
        }
    }
}

impl<K: Hash + Eq, V> MapState<K, V> {
    /// The value under `k`.
    pub fn get<Q>(&self, k: &Q) -> Option<&V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.get(k)
    }
    /// Mutable value under `k`.
    pub fn get_mut<Q>(&mut self, k: &Q) -> Option<&mut V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.written = true;
        self.map.get_mut(k)
    }
    /// Sets `k` to `v`, returning the old value.
    pub fn put(&mut self, k: K, v: V) -> Option<V> {
        self.written = true;
        self.map.insert(k, v)
    }
    /// Removes `k`.
    pub fn remove<Q>(&mut self, k: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.written = true;
        self.map.remove(k)
    }
    /// Whether `k` is present.
    pub fn contains<Q>(&self, k: &Q) -> bool
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.contains_key(k)
    }
    /// The entry for `k`.
    pub fn entry(&mut self, k: K) -> std::collections::hash_map::Entry<'_, K, V> {
        self.written = true;
        self.map.entry(k)
    }
    /// All entries, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.map.iter()
    }
    /// Removes every entry.
    pub fn clear(&mut self) {
        self.written = true;
        self.map.clear()
    }
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.map.len()
    }
    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

impl<K, V> KeyedStateType for MapState<K, V>
where
    K: Serialize + DeserializeOwned + Hash + Eq + Send + 'static,
    V: Serialize + DeserializeOwned + Send + 'static,
{
    fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    fn take_written(&mut self) -> bool {
        std::mem::take(&mut self.written)
    }
}

/// A list per key (Flink's `ListState`).
///
/// ```
/// let mut s = weir::ListState::<u32>::default();
/// s.add(1);
/// s.add_all([2, 3]);
/// assert_eq!(s.get(), &[1, 2, 3]);
/// s.update(vec![9]);
/// assert_eq!(s.iter().sum::<u32>(), 9);
/// s.clear();
/// assert!(s.is_empty());
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
#[serde(bound(serialize = "T: Serialize", deserialize = "T: Deserialize<'de>"))]
pub struct ListState<T> {
    items: Vec<T>,
    #[serde(skip)]
    written: bool,
}

impl<T: PartialEq> PartialEq for ListState<T> {
    fn eq(&self, other: &Self) -> bool {
        self.items == other.items
    }
}

impl<T> Default for ListState<T> {
    fn default() -> Self {
        ListState {
            items: Vec::new(),
            written: false,
        }
    }
}

impl<T> ListState<T> {
    /// The elements, in the order added.
    pub fn get(&self) -> &[T] {
        &self.items
    }
    /// The elements, in the order added.
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.items.iter()
    }
    /// Appends one element.
    pub fn add(&mut self, v: T) {
        self.written = true;
        self.items.push(v);
    }
    /// Appends every element of `vs`.
    pub fn add_all(&mut self, vs: impl IntoIterator<Item = T>) {
        self.written = true;
        self.items.extend(vs);
    }
    /// Replaces the elements with `vs`.
    pub fn update(&mut self, vs: Vec<T>) {
        self.written = true;
        self.items = vs;
    }
    /// Removes every element and returns them.
    pub fn take(&mut self) -> Vec<T> {
        self.written = true;
        std::mem::take(&mut self.items)
    }
    /// Removes every element.
    pub fn clear(&mut self) {
        self.written = true;
        self.items.clear();
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.items.len()
    }
    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

impl<T: Serialize + DeserializeOwned + Send + 'static> KeyedStateType for ListState<T> {
    fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    fn take_written(&mut self) -> bool {
        std::mem::take(&mut self.written)
    }
}

/// How a [`ReducingState`] combines a new value with the one it holds.
///
/// ```
/// use weir::{Reduce, ReducingState};
/// struct Longest;
/// impl Reduce<String> for Longest {
///     fn reduce(acc: String, v: String) -> String {
///         if v.len() > acc.len() { v } else { acc }
///     }
/// }
/// let mut s = ReducingState::<String, Longest>::default();
/// s.add("ab".into());
/// s.add("abc".into());
/// s.add("x".into());
/// assert_eq!(s.get().map(String::as_str), Some("abc"));
/// ```
pub trait Reduce<T>: 'static {
    /// The reduction of what is held (`acc`) and a new value.
    fn reduce(acc: T, v: T) -> T;
}

/// Sums values (`+`).
#[derive(Debug)]
pub struct Sum;
/// Keeps the smallest value.
#[derive(Debug)]
pub struct Min;
/// Keeps the largest value.
#[derive(Debug)]
pub struct Max;

impl<T: std::ops::Add<Output = T>> Reduce<T> for Sum {
    fn reduce(acc: T, v: T) -> T {
        acc + v
    }
}
impl<T: Ord> Reduce<T> for Min {
    fn reduce(acc: T, v: T) -> T {
        acc.min(v)
    }
}
impl<T: Ord> Reduce<T> for Max {
    fn reduce(acc: T, v: T) -> T {
        acc.max(v)
    }
}

/// One value per key that every added value is reduced into (Flink's `ReducingState`); the
/// reduction is a type ([`Sum`], [`Min`], [`Max`] or your own [`Reduce`]), so it costs no
/// space per key.
///
/// ```
/// let mut total = weir::ReducingState::<u64, weir::state::Sum>::default();
/// total.add(2);
/// total.add(40);
/// assert_eq!(total.get(), Some(&42));
/// ```
#[derive(Debug, Serialize, Deserialize)]
#[serde(transparent)]
#[serde(bound(serialize = "T: Serialize", deserialize = "T: Deserialize<'de>"))]
pub struct ReducingState<T, R> {
    value: Option<T>,
    #[serde(skip)]
    written: bool,
    #[serde(skip)]
    _reduce: PhantomData<fn() -> R>,
}

impl<T: Clone, R> Clone for ReducingState<T, R> {
    fn clone(&self) -> Self {
        ReducingState {
            value: self.value.clone(),
            written: self.written,
            _reduce: PhantomData,
        }
    }
}

impl<T: PartialEq, R> PartialEq for ReducingState<T, R> {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl<T, R> Default for ReducingState<T, R> {
    fn default() -> Self {
        ReducingState {
            value: None,
            written: false,
            _reduce: PhantomData,
        }
    }
}

impl<T, R: Reduce<T>> ReducingState<T, R> {
    /// Reduces `v` into the value held (or holds `v` if there is none).
    pub fn add(&mut self, v: T) {
        self.written = true;
        self.value = Some(match self.value.take() {
            None => v,
            Some(acc) => R::reduce(acc, v),
        });
    }
    /// The reduction so far, if any value was added.
    pub fn get(&self) -> Option<&T> {
        self.value.as_ref()
    }
    /// Removes the value and returns it.
    pub fn take(&mut self) -> Option<T> {
        self.written = true;
        self.value.take()
    }
    /// Clears the value.
    pub fn clear(&mut self) {
        self.written = true;
        self.value = None;
    }
}

impl<T, R> KeyedStateType for ReducingState<T, R>
where
    T: Serialize + DeserializeOwned + Send + 'static,
    R: 'static,
{
    fn is_empty(&self) -> bool {
        self.value.is_none()
    }
    fn take_written(&mut self) -> bool {
        std::mem::take(&mut self.written)
    }
}

/// The states of every key a keyed subtask has seen.
#[derive(Debug)]
pub struct KeyedState<K, S> {
    pub(crate) map: Entries<K, S>,
    /// The keys written since the state was last handed over ([`changes`]).
    pub(crate) changes: changes::ChangeLog<K>,
    /// Entries a checkpoint's copy had still to take when they were written, copied just
    /// before (`copy`).
    pub(crate) saved: Vec<(K, S)>,
    /// A promoted backup's state not read in yet ([`promoted`]): a key the map does not hold
    /// is looked for there.
    pub(crate) promoted: Option<Box<promoted::Promoted>>,
}

/// The entries, as they are kept: with the change log's generation beside each state only
/// when changes are logged (a backed-up operator's), so the others keep the smaller entry.
#[derive(Debug)]
pub(crate) enum Entries<K, S> {
    /// Changes are not logged.
    Plain(HashMap<K, S, FxBuildHasher>),
    /// Each state with the generation it was last logged in.
    Logged(TrackedMap<K, S>),
    /// On disk, the keys in use cached ([`StateBackend::Disk`]); generations kept as in
    /// `Logged`.
    Disk(Box<disk::DiskEntries<K, S>>),
}

/// Entries looked up before any of them is read (a checkpoint's copy, a hand-off): enough
/// lookups under way at once to overlap their cache misses, few enough that the entries are
/// still in the cache when they are encoded.
pub(crate) const LOOKAHEAD: usize = 128;

/// Tracked entries by key: the map of an operator whose changes are logged (a backed-up one's,
/// or one with incremental checkpoints). In tables that grow one at a time ([`sharded`]):
/// one table of the whole stopped a keyed operator for 190 ms at 1.8M keys (a backed-up
/// primary so stopped past its heartbeat timeout is taken for hung), and held twice the
/// table while it grew.
pub(crate) type TrackedMap<K, S> = sharded::ShardedMap<K, Tracked<S>>;

/// A key's state and the generation of the change log it was last logged in.
#[derive(Debug)]
pub(crate) struct Tracked<S> {
    pub(crate) state: S,
    /// In a cell, so that a checkpoint's copy marks what it copied through the shared
    /// references it looked the entries up with (`checkpoint::copy`).
    pub(crate) logged: std::cell::Cell<changes::Generation>,
}

impl<S> Tracked<S> {
    pub(crate) fn new(state: S, logged: changes::Generation) -> Self {
        Tracked {
            state,
            logged: std::cell::Cell::new(logged),
        }
    }
}

/// A tracked entry's key and state (one function for every map that holds tracked entries).
type StateOf<'a, K, S> = fn((&'a K, &'a Tracked<S>)) -> (&'a K, &'a S);
type StateMut<'a, K, S> = fn((&'a K, &'a mut Tracked<S>)) -> (&'a K, &'a mut S);

fn state_of<'a, K, S>((k, t): (&'a K, &'a Tracked<S>)) -> (&'a K, &'a S) {
    (k, &t.state)
}

fn state_mut<'a, K, S>((k, t): (&'a K, &'a mut Tracked<S>)) -> (&'a K, &'a mut S) {
    (k, &mut t.state)
}

impl<K, S> Default for KeyedState<K, S> {
    fn default() -> Self {
        KeyedState::tracking(false)
    }
}

impl<K: Hash + Eq, S> KeyedState<K, S> {
    /// The state of one key.
    pub fn get(&self, key: &K) -> Option<&S> {
        match &self.map {
            Entries::Plain(m) => m.get(key),
            Entries::Logged(m) => m.get(key).map(|t| &t.state),
            // The cached keys: every key once `end_of_input` is called (`load_all`).
            Entries::Disk(d) => d.cache.get(key).map(|t| &t.state),
        }
    }
    /// Every key and its state, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &S)> {
        let (mut plain, mut logged, mut disk) = (None, None, None);
        match &self.map {
            Entries::Plain(m) => plain = Some(m.iter()),
            Entries::Logged(m) => logged = Some(m.iter().map(state_of as StateOf<'_, K, S>)),
            Entries::Disk(d) => disk = Some(d.cache.iter().map(state_of as StateOf<'_, K, S>)),
        }
        let logged = logged.into_iter().flatten();
        plain
            .into_iter()
            .flatten()
            .chain(logged)
            .chain(disk.into_iter().flatten())
    }
    /// Every key and its mutable state.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut S)> {
        self.changes.lose_track();
        let (mut plain, mut logged, mut disk) = (None, None, None);
        match &mut self.map {
            Entries::Plain(m) => plain = Some(m.iter_mut()),
            Entries::Logged(m) => {
                logged = Some(m.iter_mut().map(state_mut as StateMut<'_, K, S>));
            }
            Entries::Disk(d) => {
                disk = Some(d.cache.iter_mut().map(state_mut as StateMut<'_, K, S>));
            }
        }
        let logged = logged.into_iter().flatten();
        plain
            .into_iter()
            .flatten()
            .chain(logged)
            .chain(disk.into_iter().flatten())
    }
    /// Number of keys.
    pub fn len(&self) -> usize {
        match &self.map {
            Entries::Plain(m) => m.len(),
            Entries::Logged(m) => m.len(),
            Entries::Disk(d) => d.len(),
        }
    }
    /// Whether no key has state.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K, S> KeyedState<K, S> {
    /// An empty state whose changes are logged from the start if `tracked` (a backed-up
    /// operator's: its backup holds the state it starts from).
    pub(crate) fn tracking(tracked: bool) -> Self {
        if tracked {
            KeyedState {
                map: Entries::Logged(TrackedMap::default()),
                changes: changes::ChangeLog::tracking(),
                saved: Vec::new(),
                promoted: None,
            }
        } else {
            KeyedState {
                map: Entries::Plain(HashMap::default()),
                changes: changes::ChangeLog::default(),
                saved: Vec::new(),
                promoted: None,
            }
        }
    }
}

impl<K, S> KeyedState<K, S>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    S: Clone + Serialize + DeserializeOwned,
{
    /// The state of `key` to write, created with `new` if it has none; logged as changed.
    pub(crate) fn write(&mut self, key: &K, new: impl FnOnce() -> S) -> Option<&mut S> {
        let KeyedState {
            map,
            changes,
            saved,
            promoted,
        } = self;
        match map {
            Entries::Plain(map) => {
                if !map.contains_key(key) {
                    map.insert(key.clone(), new());
                }
                map.get_mut(key)
            }
            Entries::Logged(map) => {
                if !map.contains_key(key) {
                    let restored = match promoted.as_deref_mut().map(|p| p.get(key)) {
                        Some(Err(e)) => {
                            if let Some(p) = promoted.as_deref_mut() {
                                p.fail(e);
                            }
                            return None;
                        }
                        Some(Ok(s)) => s,
                        None => None,
                    };
                    let Some(state) = restored else {
                        let logged = changes.inserted(key);
                        let state = new();
                        map.insert(key.clone(), Tracked::new(state, logged));
                        return map.get_mut(key).map(|t| &mut t.state);
                    };
                    // Restored, read in now: written below as any held entry.
                    map.insert(key.clone(), Tracked::new(state, 0));
                }
                let t = map.get_mut(key)?;
                if changes.touch(key, t.logged.get_mut()) {
                    saved.push((key.clone(), t.state.clone()));
                }
                Some(&mut t.state)
            }
            Entries::Disk(d) => {
                if !d.cache.contains_key(key) {
                    match d.load(key, changes, new) {
                        Ok(t) => d.insert(key.clone(), t),
                        Err(e) => {
                            d.fail(e);
                            return None;
                        }
                    }
                }
                let t = d.cache.get_mut(key)?;
                if changes.touch(key, t.logged.get_mut()) {
                    saved.push((key.clone(), t.state.clone()));
                }
                Some(&mut t.state)
            }
        }
    }

    /// Logs every key as changed, if changes are logged: the next copy of what changed takes
    /// the whole state (a restored instance's first incremental checkpoint, or one after its
    /// chain broke).
    pub(crate) fn log_all(&mut self) {
        match &mut self.map {
            // Keys not read in yet would be missed: the next copy takes the whole state.
            Entries::Logged(_) if self.promoted.is_some() => self.changes.lose_track(),
            Entries::Logged(map) => self
                .changes
                .log_all(map.iter_mut().map(|(k, t)| (k, t.logged.get_mut()))),
            // Every key would be read from disk to be logged: the next copy takes the whole
            // state instead, as one taken where the log cannot see.
            Entries::Disk(_) => self.changes.lose_track(),
            Entries::Plain(_) => {}
        }
    }

    /// Sets `key`'s state (a restore): not a change to hand over.
    pub(crate) fn restore(&mut self, key: K, state: S) {
        match &mut self.map {
            Entries::Plain(m) => {
                m.insert(key, state);
            }
            Entries::Logged(m) => {
                m.insert(key, Tracked::new(state, 0));
            }
            Entries::Disk(d) => d.restore(key, state),
        }
    }

    /// An empty state kept by `backend` (for subtask `subtask` of `uid`), whose changes are
    /// logged from the start if `tracked` (see [`tracking`](Self::tracking)).
    pub(crate) fn open(
        backend: &StateBackend,
        tracked: bool,
        uid: &str,
        subtask: usize,
        max_parallelism: usize,
    ) -> Result<Self, String> {
        match backend {
            StateBackend::Memory => Ok(KeyedState::tracking(tracked)),
            StateBackend::Disk(cfg) => Ok(KeyedState {
                map: Entries::Disk(Box::new(disk::DiskEntries::open(
                    cfg,
                    uid,
                    subtask,
                    max_parallelism,
                )?)),
                ..KeyedState::tracking(tracked)
            }),
        }
    }

    /// Whether the states are on disk.
    pub(crate) fn on_disk(&self) -> bool {
        matches!(self.map, Entries::Disk(_))
    }

    /// Whether the entries carry the change log's generations (logged, or on disk).
    pub(crate) fn logs_changes(&self) -> bool {
        !matches!(self.map, Entries::Plain(_))
    }

    /// Calls `f` with every key and state (on disk: by key group ascending, each group's keys
    /// together); stops at `f`'s first error.
    pub(crate) fn try_for_each(
        &mut self,
        mut f: impl FnMut(&K, &S) -> Result<(), String>,
        tick: &dyn Fn(),
    ) -> Result<(), String> {
        self.read_in_all()?;
        match &mut self.map {
            Entries::Disk(d) => d.for_each(f, tick),
            _ => self.iter().try_for_each(|(k, s)| f(k, s)),
        }
    }

    /// The entries written before the change log's last `take` (since the one before), in
    /// the map's order, given to `f`; returns how many, or `None` for a map that does not log
    /// its changes in memory. One pass over the map: cheaper than looking each changed key up
    /// once they are a fair share of it (the lookups miss every cache).
    pub(crate) fn try_for_each_changed(
        &self,
        mut f: impl FnMut(&K, &S) -> Result<(), String>,
    ) -> Option<Result<usize, String>> {
        let Entries::Logged(map) = &self.map else {
            return None;
        };
        let g = self.changes.taken_generation();
        let mut n = 0;
        // The changed entries a group at a time, their states touched before any of them is
        // given to `f` (`touch`: their heap parts' misses under way together).
        let mut group: Vec<(&K, &S)> = Vec::with_capacity(LOOKAHEAD);
        let mut give = |group: &mut Vec<(&K, &S)>| {
            group.iter().for_each(|(_, s)| {
                touch::touch(*s);
            });
            group.drain(..).try_for_each(|(k, s)| {
                n += 1;
                f(k, s)
            })
        };
        for (k, t) in map.iter().filter(|(_, t)| t.logged.get() == g) {
            group.push((k, &t.state));
            if group.len() == LOOKAHEAD {
                if let Err(e) = give(&mut group) {
                    return Some(Err(e));
                }
            }
        }
        let last = give(&mut group);
        Some(last.map(|()| n))
    }

    /// Whether `key` has an entry (in memory, or not read in yet from a promoted backup's).
    pub(crate) fn holds(&mut self, key: &K) -> Result<bool, String> {
        self.read(key, |s| s.is_some())
    }

    /// A promoted backup's state starts from its backup's image, read in as the operator
    /// meets the keys ([`promoted`]).
    pub(crate) fn start_promoted(&mut self, p: promoted::Promoted) {
        self.promoted = Some(Box::new(p));
    }

    /// Reads in up to `n` more entries of a promoted backup's state (a part of the rest at a
    /// time, as the operator works); then it is all in the map.
    pub(crate) fn read_in(&mut self, n: usize) -> Result<(), String> {
        let (Some(p), Entries::Logged(map)) = (self.promoted.as_deref_mut(), &mut self.map) else {
            return Ok(());
        };
        let done = p.read_in(n, |k: K, state: S| {
            map.get_or_insert_with(k, || Tracked::new(state, 0));
        })?;
        if done {
            // An error met looking a key up goes with the operator, not with the reader.
            let failed = p.take_error();
            self.promoted = None;
            if let Some(e) = failed {
                return Err(e);
            }
        }
        Ok(())
    }

    fn read_in_all(&mut self) -> Result<(), String> {
        self.read_in(usize::MAX)
    }

    /// Calls `f` with `key`'s state (read from disk if it is not cached there, or from a
    /// promoted backup's image if it is not read in yet).
    pub(crate) fn read<R>(
        &mut self,
        key: &K,
        f: impl FnOnce(Option<&S>) -> R,
    ) -> Result<R, String> {
        match &mut self.map {
            Entries::Disk(d) => match d.cache.get(key) {
                Some(t) => Ok(f(Some(&t.state))),
                None => Ok(f(d.stored(key)?.as_ref().map(|t| &t.state))),
            },
            // One lookup: a hand-off reads each changed key, most of them not in any cache.
            Entries::Logged(map) => match map.get(key) {
                Some(t) => Ok(f(Some(&t.state))),
                None => match self.promoted.as_deref_mut() {
                    Some(p) => Ok(f(p.get::<K, S>(key)?.as_ref())),
                    None => Ok(f(None)),
                },
            },
            Entries::Plain(map) => Ok(f(map.get(key))),
        }
    }

    /// [`read`](Self::read)s each of `keys` in turn, stopping at `f`'s first error. In memory,
    /// a few keys are looked up before any of them is given to `f`: the lookups are then
    /// independent, so the processor waits for their cache misses together (a lookup between
    /// two calls of `f` waited for its own; at a million keys most of a hand-off's time).
    pub(crate) fn read_each(
        &mut self,
        keys: &[K],
        mut f: impl FnMut(&K, Option<&S>) -> Result<(), String>,
    ) -> Result<(), String> {
        match &self.map {
            Entries::Logged(map) if self.promoted.is_none() => {
                let mut found: Vec<Option<&S>> = Vec::with_capacity(LOOKAHEAD.min(keys.len()));
                for chunk in keys.chunks(LOOKAHEAD) {
                    found.clear();
                    found.extend(chunk.iter().map(|k| map.get(k).map(|t| &t.state)));
                    // Their heap parts too (`touch`), before the first is given to `f`.
                    found.iter().flatten().for_each(|s| {
                        touch::touch(*s);
                    });
                    for (k, s) in chunk.iter().zip(&found) {
                        f(k, *s)?;
                    }
                }
                Ok(())
            }
            _ => keys.iter().try_for_each(|k| self.read(k, |s| f(k, s))?),
        }
    }

    /// Brings every key's state into memory (before `end_of_input`, which is given them all):
    /// on disk, every key not cached; in memory, a promoted backup's keys not read in yet.
    pub(crate) fn load_all(&mut self) -> Result<(), String> {
        match &mut self.map {
            Entries::Disk(d) => d.load_all(),
            _ => self.read_in_all(),
        }
    }

    /// The first error since the last call of the disk store, or of reading in a promoted
    /// backup's state.
    pub(crate) fn take_error(&mut self) -> Option<String> {
        match &mut self.map {
            Entries::Disk(d) => d.take_error(),
            _ => self.promoted.as_deref_mut().and_then(|p| p.take_error()),
        }
    }
}

#[cfg(test)]
mod tests;
