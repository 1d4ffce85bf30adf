//! The primary's keyed state as its backup holds it: a [`KeyedImage`] built from what the
//! primary hands over (a base snapshot, then changes), applied off the primary's thread.
//!
//! The primary only appends ([`StateImage::push`]); the backup actor applies what was
//! appended between its batches ([`StateImage::apply`]); a promotion takes the whole state
//! ([`StateImage::snapshot`]: a clone sharing the image's key groups, and the hand-offs not
//! applied yet, shared, to be read without applying them: `changes::pending`). A checkpoint of a
//! backed-up keyed operator is written from the image too: the primary hands its changes at
//! the barrier and holds the image at that point
//! ([`StateImage::hold`]); the checkpoint's writer thread builds the snapshot from the image
//! ([`Held::resolve`]), so the primary's thread pays for what changed, never for the whole
//! state. The backup actor does not apply past a held point until it is resolved or dropped.
//!
//! A hand-off of the whole state (every key changed) is not applied: the backup takes it as
//! its state as it is ([`StateImage::adopt`]) and builds its table for a promotion
//! (`changes::pending::Building`) between its batches; changes after it apply it first.
//!
//! This module owns the image and its order; when hand-offs happen and which restart point
//! they make are the buffer queue's and the claims'.

use std::collections::{BTreeMap, VecDeque};

use crate::state::changes::{Building, KeyedDelta, KeyedImage, Pending, PromotedImage};
use std::sync::Arc;

use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::{lock, try_lock, Mutex};

/// What is applied to the image, in order.
#[derive(Debug)]
enum Item {
    /// The image becomes this snapshot, with the operator's own fields first if `own`.
    Base { payload: Vec<u8>, own: bool },
    /// Changes (everything, if `full`), shared with a promoted backup that reads them
    /// before they are applied here.
    Changes(Arc<KeyedDelta>),
}

#[derive(Debug, Default)]
struct Applied {
    image: KeyedImage,
    /// Changes taken off the log and applied in part: the entries before the cursor.
    current: Option<(Arc<KeyedDelta>, usize)>,
    /// A hand-off of the whole state taken as it is, not applied ([`StateImage::adopt`]):
    /// the state is its entries (item `applied - 1`), and `image` is empty. Its table for a
    /// promotion is built a part at a time by the backup actor's applying, when it has
    /// nothing to apply.
    whole: Option<Building>,
    /// Items applied: the image is the state after item `applied - 1`.
    applied: u64,
    /// A base could not be read: the image is not the primary's state.
    broken: Option<String>,
}

#[derive(Debug, Default)]
struct Log {
    /// Items appended, not applied; the first is item number `first`.
    items: VecDeque<Item>,
    first: u64,
}

/// How far [`StateImage::apply_locked`] goes.
#[derive(Debug, Clone, Copy)]
enum Upto {
    /// Up to the first held point (the backup actor's applying).
    Held,
    /// Up to this point, whatever is held (a checkpoint's own held point).
    Point(u64),
    /// Everything appended, whatever is held (a promotion): a large part on two threads
    /// (the primary's no longer runs).
    All,
}

/// See the module doc.
#[derive(Debug)]
pub(crate) struct StateImage {
    /// Locked before `log`, which is locked before `holds`.
    applied: Mutex<Applied>,
    log: Mutex<Log>,
    /// Points held for a checkpoint (item count -> holders): applying stops there.
    holds: Mutex<BTreeMap<u64, usize>>,
    /// Time spent applying, in all (ns), whoever applied: the primary paces its handoffs by
    /// what they cost on both sides ([`applying_ns`](Self::applying_ns)).
    spent_ns: AtomicU64,
    /// A promotion waits for `applied`: a checkpoint's writer applying under that lock lets
    /// it go first ([`Held::resolve`]).
    promoting: AtomicBool,
    /// Held by a promotion from before it raises `promoting` until it has the whole state:
    /// one promotion at a time, and what a writer that let one go first waits on. Locked
    /// before `applied`.
    promotion: Mutex<()>,
}

/// Entries a checkpoint's writer applies between two looks at [`StateImage::promoting`]
/// (about 2 ms): what a promotion waits for the lock at most.
#[cfg(not(weir_loom))]
const RESOLVE_PART: usize = 16_384;
/// One entry at a time in the loom models, so that a promotion can come between two.
#[cfg(weir_loom)]
const RESOLVE_PART: usize = 1;

/// What is left of a hand-off at a promotion beyond which it is applied on two threads.
const PARALLEL_MIN: usize = 65_536;

impl StateImage {
    pub(crate) fn new() -> Self {
        StateImage {
            applied: Mutex::new(Applied::default()),
            log: Mutex::new(Log::default()),
            holds: Mutex::new(BTreeMap::new()),
            spent_ns: AtomicU64::new(0),
            promoting: AtomicBool::new(false),
            promotion: Mutex::new(()),
        }
    }

    /// Time spent applying handoffs so far (ns), by the backup actor, a checkpoint's writer
    /// or a promotion.
    pub(crate) fn applying_ns(&self) -> u64 {
        self.spent_ns.load(Ordering::Relaxed)
    }

    /// Appends a base snapshot: the state the changes after it start from.
    pub(crate) fn push_base(&self, payload: Vec<u8>, own: bool) {
        self.push_item(Item::Base { payload, own });
    }

    /// Appends changes; returns the point just after them (for [`hold`](Self::hold)).
    pub(crate) fn push(&self, delta: KeyedDelta) -> u64 {
        self.push_item(Item::Changes(Arc::new(delta)))
    }

    fn push_item(&self, item: Item) -> u64 {
        let mut log = lock(&self.log);
        log.items.push_back(item);
        log.first + log.items.len() as u64
    }

    /// Whether items wait to be applied (taken, or in part).
    #[cfg(test)]
    pub(crate) fn has_pending(&self) -> bool {
        !lock(&self.log).items.is_empty() || lock(&self.applied).current.is_some()
    }

    /// Applies what was appended, up to the first held point, about `budget` entries at
    /// most (the backup actor answers its heartbeats between two calls); with nothing to
    /// apply, builds that much more of an adopted whole's table. Returns whether it stopped
    /// for its budget (more can be done now). It never waits: while a checkpoint's
    /// writer thread builds its snapshot from the image, the backup actor goes on taking its
    /// batches (waiting, its channels would fill and stop the upstream and so the primary).
    pub(crate) fn apply(&self, budget: usize) -> bool {
        let Some(mut applied) = try_lock(&self.applied) else {
            return false;
        };
        self.apply_locked(&mut applied, Upto::Held, budget)
    }

    /// Applies up to `upto`, about `budget` entries at most; returns whether it stopped for
    /// its budget.
    fn apply_locked(&self, applied: &mut Applied, upto: Upto, budget: usize) -> bool {
        let started = std::time::Instant::now();
        let more = self.apply_some(applied, upto, budget);
        let spent = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.spent_ns.fetch_add(spent, Ordering::Relaxed);
        more
    }

    fn apply_some(&self, applied: &mut Applied, upto: Upto, mut budget: usize) -> bool {
        let parallel = matches!(upto, Upto::All);
        loop {
            if let Some((delta, at)) = applied.current.take() {
                let to = delta.index.len().min(at.saturating_add(budget));
                if parallel && to - at >= PARALLEL_MIN {
                    applied.image.apply_part_parallel(&delta, at, to);
                } else {
                    applied.image.apply_part(&delta, at, to);
                }
                budget -= to - at;
                if to < delta.index.len() {
                    applied.current = Some((delta, to));
                    return true;
                }
                applied.applied += 1;
            }
            if budget == 0 {
                return true;
            }
            let Some(item) = self.next_item(applied, upto) else {
                if applied.current.is_some() {
                    continue; // an adopted whole, to apply after all
                }
                // Nothing to apply now: the backup actor builds more of an adopted whole's
                // table meanwhile.
                return matches!(upto, Upto::Held)
                    && applied.whole.as_mut().is_some_and(|w| {
                        w.step(budget);
                        !w.is_built()
                    });
            };
            match item {
                Item::Changes(mut delta) => {
                    if delta.full {
                        applied.broken = None;
                        // Replaces an adopted whole (its image is empty) as it replaces
                        // an image.
                        applied.whole = None;
                    }
                    // Applied a key group at a time: a group's table (and the entries
                    // inserted with it) stays in cache while its entries are applied; in the
                    // order the primary found them, every entry would miss it. A delta's
                    // entries are the state at one point, each key once at most or alike
                    // (read at the same time): their order does not matter.
                    // Not shared unless a promotion read it (then copied once).
                    by_group(&mut Arc::make_mut(&mut delta).index);
                    if delta.full && Pending::readable(&delta) {
                        Self::adopt(applied, delta);
                        budget = budget.saturating_sub(1);
                    } else {
                        applied.current = Some((delta, 0));
                    }
                }
                Item::Base { payload, own } => {
                    applied.whole = None;
                    applied.broken = applied.image.load(&payload, own).err();
                    if let Some(e) = &applied.broken {
                        tracing::error!(error = %e, "a backup cannot read its primary's state");
                    }
                    applied.applied += 1;
                    budget = budget.saturating_sub(1);
                }
            }
        }
    }

    /// The next item to apply, taken off the log, if one may be applied now (up to `upto`).
    /// Changes after an adopted whole stay in the log: the whole becomes `current` instead,
    /// item `applied - 1` again, to be applied first.
    fn next_item(&self, applied: &mut Applied, upto: Upto) -> Option<Item> {
        let mut log = lock(&self.log);
        // The first held point is read under the log's lock: a primary holds a point
        // before it appends anything after it, so an item seen here past a held
        // point is never applied (read before the lock, a hold made meanwhile could
        // be passed, and its checkpoint would fail).
        let upto = match upto {
            Upto::Held => lock(&self.holds).keys().next().copied().unwrap_or(u64::MAX),
            Upto::Point(at) => at,
            Upto::All => u64::MAX,
        };
        if applied.applied >= upto {
            return None;
        }
        if matches!(log.items.front(), Some(Item::Changes(d)) if !d.full) {
            if let Some(whole) = applied.whole.take() {
                applied.applied -= 1;
                applied.current = Some((whole.delta().clone(), 0));
                return None;
            }
        }
        let item = log.items.pop_front()?;
        log.first += 1;
        Some(item)
    }

    /// Takes `delta`, a hand-off of the whole state (readable as it is: `changes::pending`),
    /// as the state, without applying it: the image it replaces is dropped. Applying a
    /// million entries took the backup 100-200 ms of the machine's other core, and slowed
    /// the primary's records beside it; a checkpoint's payload is written from the hand-off
    /// itself ([`KeyedDelta::whole_payload`]), and a promotion reads it as it reads any
    /// hand-off not applied. Changes after it apply it after all, first.
    fn adopt(applied: &mut Applied, delta: Arc<KeyedDelta>) {
        applied.image = KeyedImage::default();
        applied.whole = Some(Building::new(delta, 0));
        applied.broken = None;
        applied.applied += 1;
    }

    /// The whole state after everything appended, as a clone of the image (its key groups
    /// shared: no copy of the state) and the hand-offs not applied to it yet, shared and
    /// ready to be read (`changes::pending`): what a promoted backup starts from. The backup
    /// goes on applying them to its image afterwards, in order, before anything its promoted
    /// primary hands it.
    ///
    /// What cannot be read that way is applied here, a large hand-off on two threads (the
    /// primary's no longer runs); a checkpoint held before such a promotion then finds the
    /// image moved on, and fails; a checkpoint's writer applying under the lock lets it go
    /// first (within a part).
    pub(crate) fn snapshot(&self) -> Result<PromotedImage, String> {
        let _one = lock(&self.promotion);
        self.promoting.store(true, Ordering::SeqCst);
        let mut applied = lock(&self.applied);
        self.promoting.store(false, Ordering::SeqCst);
        let started = std::time::Instant::now();
        if let Some(image) = self.readable(&mut applied) {
            tracing::debug!(pending = image.pending_entries(), took = ?started.elapsed(), "a promotion takes what its backup had not applied as it is");
            return Ok(image);
        }
        let pending = self.pending_entries(&applied);
        self.apply_locked(&mut applied, Upto::All, usize::MAX);
        tracing::debug!(pending, took = ?started.elapsed(), "a promotion applied what its backup had not");
        let applied = &mut *applied;
        match (&applied.broken, applied.whole.as_mut()) {
            (Some(e), _) => Err(e.clone()),
            (None, Some(whole)) => Ok(PromotedImage {
                image: applied.image.clone(),
                pending: vec![whole.pending()],
            }),
            (None, None) => Ok(PromotedImage::of(applied.image.clone())),
        }
    }

    /// The whole state as it is: the image and the hand-offs not applied to it yet (an
    /// adopted whole, the one in part, those in the log), newest first, ready to be read
    /// without applying them; `None` if one cannot be (a base, timers, a removed key:
    /// `changes::pending`), or the image cannot be read beside them (broken, or with timers,
    /// which the promoted operator restores from it). A whole hand-off still in the log
    /// replaces the image and everything before it.
    fn readable(&self, applied: &mut Applied) -> Option<PromotedImage> {
        if applied.broken.is_some() {
            return None;
        }
        let mut parts: Vec<(Arc<KeyedDelta>, usize)> = applied.current.iter().cloned().collect();
        for item in &lock(&self.log).items {
            match item {
                Item::Changes(d) => parts.push((d.clone(), 0)),
                Item::Base { .. } => return None,
            }
        }
        let cut = parts.iter().rposition(|(d, from)| d.full && *from == 0);
        let parts = &parts[cut.unwrap_or(0)..];
        if parts.iter().any(|(d, _)| !Pending::readable(d)) {
            return None;
        }
        let mut pending: Vec<Pending> = (parts.iter().rev())
            .map(|(d, from)| Pending::new(d.clone(), *from))
            .collect();
        if cut.is_some() {
            return Some(PromotedImage {
                image: KeyedImage::default(),
                pending,
            });
        }
        if applied.image.has_timers() {
            return None;
        }
        // An adopted whole is the oldest, over the empty image (never beside `current`).
        pending.extend(applied.whole.as_mut().map(Building::pending));
        Some(PromotedImage {
            image: applied.image.clone(),
            pending,
        })
    }

    /// Entries appended and not applied yet (`applied` locked).
    fn pending_entries(&self, applied: &Applied) -> usize {
        let current = applied
            .current
            .as_ref()
            .map_or(0, |(d, at)| d.index.len() - at);
        let log = lock(&self.log);
        current
            + log
                .items
                .iter()
                .map(|i| match i {
                    Item::Changes(d) => d.index.len(),
                    Item::Base { .. } => 0,
                })
                .sum::<usize>()
    }

    /// Holds the image at point `at` (from [`push`](Self::push)) until the returned
    /// [`Held`] is resolved or dropped.
    pub(crate) fn hold(self: &Arc<Self>, at: u64) -> Held {
        *lock(&self.holds).entry(at).or_default() += 1;
        Held {
            image: self.clone(),
            at,
        }
    }

    fn release(&self, at: u64) {
        let mut holds = lock(&self.holds);
        if let Some(n) = holds.get_mut(&at) {
            *n -= 1;
            if *n == 0 {
                holds.remove(&at);
            }
        }
    }
}

/// Orders `index` by key group, in one pass (a counting sort: a comparison sort of a
/// million entries kept the backup actor from its batches for tens of milliseconds).
fn by_group(index: &mut Vec<crate::state::changes::DeltaEntry>) {
    let Some(max) = index.iter().map(|e| e.group).max() else {
        return;
    };
    let mut starts = vec![0usize; max as usize + 2];
    for e in index.iter() {
        starts[e.group as usize + 1] += 1;
    }
    for g in 1..starts.len() {
        starts[g] += starts[g - 1];
    }
    let mut sorted = index.clone();
    for e in index.iter() {
        let at = &mut starts[e.group as usize];
        sorted[*at] = *e;
        *at += 1;
    }
    *index = sorted;
}

/// The image held at one point (a checkpoint's barrier); dropping it lets the image go on.
#[derive(Debug)]
pub(crate) struct Held {
    image: Arc<StateImage>,
    at: u64,
}

impl Held {
    /// The state at the held point, as the keyed operator's snapshot payload. The image is
    /// locked while what the backup had not applied yet is applied (the lock held between
    /// parts: a later checkpoint's resolve must not apply past this point between two; the
    /// backup actor does not wait for the lock) and cloned (its key groups shared); the
    /// payload is built from the clone with the lock free (the hold keeps the backup from
    /// writing to the shared groups meanwhile). A promotion waiting for the lock goes first:
    /// the writer lets the lock go, waits for the promotion to have the whole state, and
    /// goes on; its checkpoint fails only if the promotion passed its point.
    pub(crate) fn resolve(self) -> Result<Vec<u8>, String> {
        let image = loop {
            let mut applied = lock(&self.image.applied);
            if !self.apply_to_point(&mut applied) {
                drop(applied);
                // The promotion holds this until it has the whole state.
                drop(lock(&self.image.promotion));
                continue;
            }
            // Past the point with the next item in part: a later checkpoint's writer
            // applied it while this one waited for the lock.
            if applied.applied != self.at || applied.current.is_some() {
                return Err(format!(
                    "the backup's copy of the state is at hand-off {}{} and the checkpoint's at {} (a promotion or a later checkpoint's writer came between)",
                    applied.applied,
                    if applied.current.is_some() { " and the next in part" } else { "" },
                    self.at
                ));
            }
            if let Some(e) = &applied.broken {
                return Err(e.clone());
            }
            if let Some(whole) = &applied.whole {
                let whole = whole.delta().clone();
                drop(applied);
                return Ok(whole.whole_payload());
            }
            break applied.image.clone();
        };
        Ok(image.payload())
    }

    /// Applies up to the held point, a part at a time; `false` if it stopped for a
    /// promotion waiting for the lock. Applies nothing once the point is reached (or passed:
    /// `current` is then the item after it in part, which a later checkpoint's writer took).
    fn apply_to_point(&self, applied: &mut Applied) -> bool {
        while applied.applied < self.at
            && self
                .image
                .apply_locked(applied, Upto::Point(self.at), RESOLVE_PART)
        {
            if self.image.promoting.load(Ordering::SeqCst) {
                return false;
            }
        }
        true
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.image.release(self.at);
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;

    fn delta(full: bool, entries: &[(u64, &str)]) -> KeyedDelta {
        let mut d = KeyedDelta::new(full);
        for (k, v) in entries {
            d.push(0, k, Some(&(*k, v.to_string()))).expect("encodes");
        }
        d
    }

    /// A delta whose entries carry a timer: a promotion cannot read it unapplied.
    fn timed_delta(entries: &[(u64, &str)]) -> KeyedDelta {
        let mut d = KeyedDelta::new(false);
        for (k, v) in entries {
            d.push(0, k, Some(&(*k, v.to_string(), vec![(5u64, 0u8)])))
                .expect("encodes");
        }
        d
    }

    /// Changes of keys `0..n`, each `"v"` (over the empty image: not taken as a whole).
    fn many(n: u64) -> KeyedDelta {
        let mut d = KeyedDelta::new(false);
        for k in 0..n {
            d.push(0, &k, Some(&(k, "v".to_string()))).expect("encodes");
        }
        d
    }

    /// Runs `f` under the image's lock as a checkpoint's writer does while a promotion
    /// waits for that lock (what `snapshot` does before it waits), then lets the promotion
    /// go.
    fn with_promotion_waiting<R>(image: &StateImage, f: impl FnOnce(&mut Applied) -> R) -> R {
        let promotion = lock(&image.promotion);
        image.promoting.store(true, Ordering::SeqCst);
        let r = f(&mut lock(&image.applied));
        image.promoting.store(false, Ordering::SeqCst);
        drop(promotion);
        r
    }

    /// Each entry's key and value (its timers, if any, left out).
    fn state(payload: Vec<u8>) -> Vec<(u64, String)> {
        let groups: Vec<(usize, Vec<Vec<ciborium::Value>>)> =
            ciborium::from_reader(payload.as_slice()).expect("decodes");
        let mut all: Vec<(u64, String)> = groups
            .into_iter()
            .flat_map(|(_, e)| e)
            .map(|e| e[..2].to_vec())
            .map(|e| {
                ciborium::Value::Array(e)
                    .deserialized()
                    .expect("a key and a value")
            })
            .collect();
        all.sort();
        all
    }

    #[test]
    fn a_handoff_is_ordered_by_key_group_keeping_each_groups_order() {
        let mut d = KeyedDelta::new(false);
        for (g, k) in [(5usize, 1u64), (0, 2), (5, 3), (2, 4), (0, 5), (5, 6)] {
            d.push(g, &k, Some(&(k, String::new()))).expect("encodes");
        }
        let keys = |d: &KeyedDelta| -> Vec<(u32, u32)> {
            d.index.iter().map(|e| (e.group, e.key.0)).collect()
        };
        let before = keys(&d);
        by_group(&mut d.index);
        let mut want = before.clone();
        want.sort_by_key(|(g, _)| *g);
        assert_eq!(keys(&d), want, "stable, by group");
        let mut empty = Vec::new();
        by_group(&mut empty);
        assert!(empty.is_empty());
    }

    #[test]
    fn a_held_point_is_what_the_checkpoint_gets_whatever_comes_after() {
        let image = Arc::new(StateImage::new());
        image.push(delta(true, &[(1, "a")]));
        let at = image.push(delta(false, &[(2, "b")]));
        let held = image.hold(at);
        image.push(delta(false, &[(1, "later")]));
        image.apply(1); // one entry: the first delta
        image.apply(usize::MAX); // stops at the held point
        assert!(image.has_pending());
        assert_eq!(
            state(held.resolve().expect("resolves")),
            vec![(1, "a".into()), (2, "b".into())]
        );
        image.apply(usize::MAX); // released: goes on
        assert!(!image.has_pending());
        assert_eq!(
            state(image.snapshot().expect("whole").payload()),
            vec![(1, "later".into()), (2, "b".into())]
        );
    }

    #[test]
    fn a_dropped_hold_releases_and_a_promotion_past_a_hold_fails_it() {
        let image = Arc::new(StateImage::new());
        let at = image.push(delta(true, &[(1, "a")]));
        drop(image.hold(at));
        image.push(delta(false, &[(1, "b")]));
        image.apply(usize::MAX);
        assert!(!image.has_pending());
        let at = image.push(delta(false, &[(1, "c")]));
        let held = image.hold(at);
        image.push(timed_delta(&[(1, "d")]));
        let whole = image.snapshot().expect("whole");
        assert!(whole.pending.is_empty(), "timers: applied at the promotion");
        assert_eq!(state(whole.payload()), vec![(1, "d".into())]);
        assert!(held.resolve().is_err());
    }

    #[test]
    fn a_promotion_reads_what_was_not_applied_and_the_backup_applies_it_after() {
        let image = Arc::new(StateImage::new());
        // (Changes over the empty image: a whole hand-off would be taken as it is.)
        image.push(delta(false, &[(1, "a"), (2, "a"), (3, "a")]));
        image.apply(2); // the first hand-off in part
        let at = image.push(delta(false, &[(1, "b")]));
        let held = image.hold(at);
        image.push(delta(false, &[(2, "c")]));
        let promoted = image.snapshot().expect("whole");
        assert_eq!(
            promoted.pending.len(),
            3,
            "the rest of the first and both others"
        );
        assert_eq!(promoted.pending_entries(), 1 + 1 + 1);
        let want = vec![(1, "b".into()), (2, "c".into()), (3, "a".into())];
        assert_eq!(state(promoted.payload()), want);
        // Nothing was applied for it: the held point is still there to resolve.
        assert_eq!(
            state(held.resolve().expect("not passed")),
            vec![(1, "b".into()), (2, "a".into()), (3, "a".into())]
        );
        image.apply(usize::MAX);
        assert!(!image.has_pending());
        assert_eq!(state(image.snapshot().expect("whole").payload()), want);
    }

    #[test]
    fn a_checkpoints_writer_lets_a_waiting_promotion_go_first() {
        let image = Arc::new(StateImage::new());
        let at = image.push(many(RESOLVE_PART as u64 * 2 + 10));
        let held = image.hold(at);
        // The writer stops after its first part and lets the lock go.
        with_promotion_waiting(&image, |applied| {
            assert!(!held.apply_to_point(applied), "stopped for the promotion");
            assert_eq!(applied.applied, 0, "the hand-off is applied in part");
        });
        // Nothing came after the held point: the writer goes on and its checkpoint is whole.
        let payload = held
            .resolve()
            .expect("the promotion did not pass the point");
        assert_eq!(state(payload).len(), RESOLVE_PART * 2 + 10);
        // A promotion that passes the held point fails the checkpoint.
        let at = image.push(delta(false, &[(1, "barrier")]));
        let held = image.hold(at);
        image.push(timed_delta(&[(1, "later")]));
        let whole = state(image.snapshot().expect("whole").payload());
        assert_eq!(whole.len(), RESOLVE_PART * 2 + 10);
        assert_eq!(whole[1], (1, "later".into()));
        let e = held.resolve().expect_err("the promotion passed the point");
        assert!(e.contains("a promotion or a later checkpoint"), "{e}");
        assert!(
            !image.promoting.load(Ordering::SeqCst),
            "lowered after a promotion"
        );
    }

    #[test]
    fn a_whole_handoff_is_taken_as_it_is_and_applied_only_under_changes() {
        let image = Arc::new(StateImage::new());
        image.push(delta(false, &[(9, "old")]));
        let mut whole = KeyedDelta::new(true);
        for (g, k) in [(3usize, 1u64), (0, 2), (3, 3), (1, 4)] {
            whole
                .push(g, &k, Some(&(k, format!("w{k}"))))
                .expect("encodes");
        }
        whole.own = Some(vec![0x05]);
        let at = image.push(whole);
        let held = image.hold(at);
        image.apply(usize::MAX);
        {
            let applied = lock(&image.applied);
            assert!(applied.whole.is_some(), "taken as it is");
            assert!(applied.image.is_empty(), "the old image dropped");
            assert_eq!(applied.applied, 2);
        }
        let want: Vec<(u64, String)> = (1..=4).map(|k| (k, format!("w{k}"))).collect();
        // The checkpoint's payload is the hand-off's, in the image's form: groups
        // ascending, each once, the own fields first.
        let payload = held.resolve().expect("resolves");
        let mut read = KeyedImage::default();
        read.load(&payload, true).expect("an image's payload");
        assert_eq!(read.own(), Some(&[0x05u8][..]));
        assert_eq!(read.group_numbers(), vec![0, 1, 3]);
        let (_, groups): (ciborium::Value, ciborium::Value) =
            ciborium::from_reader(payload.as_slice()).expect("a pair");
        let mut groups_only = Vec::new();
        ciborium::into_writer(&groups, &mut groups_only).expect("encodes");
        assert_eq!(state(groups_only), want);
        // A promotion reads it as a hand-off not applied, over the empty image.
        let promoted = image.snapshot().expect("whole");
        assert_eq!(promoted.pending.len(), 1);
        assert_eq!(promoted.own(), Some(&[0x05u8][..]));
        // Changes after it: the whole is applied first, then they are; counted once each.
        let mut changes = delta(false, &[(2, "c")]);
        changes.own = Some(vec![0x06]); // (an operator's own fields go with every hand-off)
        image.push(changes);
        image.apply(1);
        let promoted = image.snapshot().expect("whole");
        assert_eq!(
            promoted.pending.len(),
            2,
            "the whole's rest and the changes"
        );
        image.apply(usize::MAX);
        {
            let applied = lock(&image.applied);
            assert!(applied.whole.is_none() && applied.current.is_none());
            assert_eq!(applied.applied, 3);
        }
        let mut want = want;
        want[1].1 = "c".into();
        let promoted = image.snapshot().expect("whole");
        assert!(promoted.pending.is_empty(), "all applied");
        let (_, groups): (ciborium::Value, ciborium::Value) =
            ciborium::from_reader(promoted.payload().as_slice()).expect("a pair");
        let mut groups_only = Vec::new();
        ciborium::into_writer(&groups, &mut groups_only).expect("encodes");
        assert_eq!(state(groups_only), want);
    }

    #[test]
    fn a_whole_handoff_still_in_the_log_replaces_what_is_before_it_at_a_promotion() {
        let image = Arc::new(StateImage::new());
        let at = image.push(delta(false, &[(1, "barrier"), (5, "gone")]));
        let held = image.hold(at);
        image.push(delta(true, &[(1, "w"), (2, "w")])); // behind the held point
        image.push(delta(false, &[(2, "after")]));
        image.apply(usize::MAX); // stops at the held point
        let promoted = image.snapshot().expect("whole");
        assert!(promoted.image.is_empty(), "replaced by the whole hand-off");
        assert_eq!(
            promoted.pending.len(),
            2,
            "read as they are, nothing applied"
        );
        assert_eq!(
            state(promoted.payload()),
            vec![(1, "w".into()), (2, "after".into())]
        );
        // Nothing was applied for the promotion: the checkpoint's point is still there.
        assert_eq!(
            state(held.resolve().expect("not passed")),
            vec![(1, "barrier".into()), (5, "gone".into())]
        );
    }

    #[test]
    fn a_checkpoint_whose_point_a_later_writer_passed_fails_and_the_later_one_is_whole() {
        let image = Arc::new(StateImage::new());
        let first = image.hold(image.push(delta(false, &[(1, "c0")])));
        image.push(many(RESOLVE_PART as u64 * 3));
        let second = image.hold(image.push(delta(false, &[(2, "c")])));
        // Up to the first point.
        image.apply(usize::MAX);
        // The second checkpoint's writer applies a part past the first point, then lets a
        // promotion go first; the first one's writer takes the lock meanwhile.
        with_promotion_waiting(&image, |applied| {
            assert!(!second.apply_to_point(applied), "stopped for the promotion");
            assert!(applied.current.is_some(), "the big hand-off in part");
        });
        let e = first.resolve().expect_err("its point was passed");
        assert!(e.contains("the next in part"), "{e}");
        let whole = state(second.resolve().expect("its point is reached, not passed"));
        assert_eq!(whole.len(), RESOLVE_PART * 3);
        assert_eq!(whole[2], (2, "c".into()));
    }

    #[test]
    fn an_unreadable_base_breaks_the_image_until_a_full_delta() {
        let image = StateImage::new();
        image.push_base(vec![0xff], false);
        assert!(image.snapshot().is_err());
        image.push(delta(true, &[(3, "x")]));
        assert_eq!(
            state(image.snapshot().expect("whole").payload()),
            vec![(3, "x".into())]
        );
    }
}
