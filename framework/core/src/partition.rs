//! Network outputs: how records of one subtask are spread over the channels of the next
//! operator's subtasks.
//!
//! - **forward**: to the subtask with the same index (equal parallelism); the default when
//!   parallelism is equal.
//! - **rebalance**: round robin per record; the default when parallelism differs.
//! - **broadcast**: every record to every subtask; each batch is built once and shared
//!   (`Arc`), never copied per receiver.
//! - **hash**: by key, through key groups (`key_group`), so a key always reaches the subtask
//!   that owns its state.
//!
//! The rule every partitioner keeps: records sent from one subtask to one receiver arrive in
//! the order they were emitted, and batches that find no credit wait in a FIFO (the subtask
//! takes no new input until it is empty), so nothing is dropped or reordered. This module
//! does not own channels (`channel`) or chaining (`plan`).

use std::collections::VecDeque;
use std::task::{Context, Poll};

use crate::channel::{Barrier, Batch, Event, Full, Sender};
use crate::error::TaskError;
use crate::key_group::key_hash;
use crate::metrics::QueueUsage;
use crate::operator::{BoxOutput, Output};
use crate::Data;

/// How an edge distributes records (the resolved kind, after `Auto`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PartitionKind {
    /// Forward if parallelism is equal, else rebalance.
    Auto,
    Forward,
    Rebalance,
    Broadcast,
    Hash,
}

/// Settings a network output needs.
#[derive(Debug, Clone)]
pub(crate) struct OutputConfig {
    pub(crate) batch_size: usize,
    pub(crate) subtask: usize,
    pub(crate) max_parallelism: usize,
    /// Which receiver owns each key group (a keyed edge's).
    pub(crate) owners: crate::key_group::Owners,
    /// Where a keyed edge counts the records it sends to each key group.
    pub(crate) load: Option<std::sync::Arc<KeyGroupLoad>>,
    /// Whether it counts them with one receiver too (an operator to be rescaled by load).
    pub(crate) load_when_single: bool,
    /// Whether it tells its channels what it holds for them (the output of a backed-up
    /// subtask, whose output positions count it: `OutputChannel::position`).
    pub(crate) counts_unsent: bool,
    /// The receiving operator (named when its key selector panics).
    pub(crate) target_uid: std::sync::Arc<String>,
    /// Records this subtask already sent on the edge (a promoted backup resumes its
    /// predecessor's round robin where the replay starts).
    pub(crate) routed_before: u64,
    /// Whether batches follow the receivers' batch limits now (the job's [`AdaptBatches`]).
    pub(crate) adaptive_batch: AdaptBatches,
}

/// Whether a job's network outputs follow their receivers' batch limits now: on when
/// `EnvConfig::adaptive_batch_size` is on and rate control is off. One flag per job, shared by
/// every output of every deployment, flipped when rate control is turned on or off while the
/// job runs: a rate-limited source is paced at the slow consumer's capacity and sends in
/// bursts, which need the slack of full batches (smaller batches would make it wait for
/// credit most of the time), while rate control keeps the queues short by itself.
#[derive(Debug, Clone)]
pub(crate) struct AdaptBatches(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl AdaptBatches {
    /// The flag for a job configured with `cfg`.
    pub(crate) fn new(cfg: &crate::config::EnvConfig) -> Self {
        let flag = AdaptBatches(Default::default());
        flag.follow(cfg);
        flag
    }

    /// Sets the flag from `cfg` (its batch setting and its rate control now).
    pub(crate) fn follow(&self, cfg: &crate::config::EnvConfig) {
        let on = cfg.adaptive_batch_size && !cfg.rate_control.enabled;
        self.0.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether batches follow the receivers' limits now (read once per batch sent).
    #[inline]
    fn on(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A flag fixed at `on` (tests).
    #[cfg(test)]
    pub(crate) fn fixed(on: bool) -> Self {
        AdaptBatches(std::sync::Arc::new(std::sync::atomic::AtomicBool::new(on)))
    }
}

/// Records sent to each key group of a keyed operator since its key groups were last
/// assigned, counted by its senders' routers: each counts in a table of its own (an add to
/// a cache-resident slot per record, no branch) and adds it here at a flush at most every
/// [`LOAD_EVERY`] and when it is dropped (no shared write per record). A rebalance by load assigns the key
/// groups by these counts.
///
/// Routers count only while the operator's load is observed ([`observe`](Self::observe)):
/// from the start for an operator set to be assigned by load, and from the first rebalance
/// asked for on another (a keyed edge that counts pays an add per record; one that does not,
/// a flag read per batch).
#[derive(Debug)]
pub(crate) struct KeyGroupLoad {
    counts: Box<[std::sync::atomic::AtomicU64]>,
    observing: std::sync::atomic::AtomicBool,
}

impl KeyGroupLoad {
    /// Zero counts for `max_parallelism` key groups.
    pub(crate) fn new(max_parallelism: usize) -> Self {
        KeyGroupLoad {
            counts: (0..max_parallelism).map(|_| Default::default()).collect(),
            observing: Default::default(),
        }
    }

    /// Routers count from now on (at their next batch).
    pub(crate) fn observe(&self) {
        self.observing
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether routers count.
    pub(crate) fn is_observed(&self) -> bool {
        self.observing.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The counts now.
    pub(crate) fn counts(&self) -> Vec<u64> {
        self.counts
            .iter()
            .map(|c| c.load(std::sync::atomic::Ordering::Relaxed))
            .collect()
    }

    /// Starts counting again from zero.
    pub(crate) fn reset(&self) {
        for c in self.counts.iter() {
            c.store(0, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Adds `counts` (a router's since it last added them) and zeroes them.
    fn add(&self, counts: &mut [u64]) {
        for (slot, n) in self.counts.iter().zip(counts.iter_mut()) {
            if *n > 0 {
                slot.fetch_add(*n, std::sync::atomic::Ordering::Relaxed);
                *n = 0;
            }
        }
    }
}

/// Builds a keyed (hash) output for a given set of channels.
pub(crate) type HashOutputFactory<T> =
    Box<dyn Fn(Vec<Sender<T>>, OutputConfig) -> BoxOutput<T> + Send>;

/// Whether a record belongs to one subtask of a keyed input (its key group is in the
/// subtask's range): restored channel state dealt by key group keeps only its own records.
pub(crate) type Owned<T> = Box<dyn FnMut(&T) -> bool + Send>;

/// A keyed edge: its output, and the test of which subtask a record belongs to
/// (`owned(owners, subtask)`).
pub(crate) struct HashRouting<T> {
    output: HashOutputFactory<T>,
    owned: OwnedFactory<T>,
}

/// Makes the [`Owned`] test of one subtask of an assignment.
type OwnedFactory<T> = Box<dyn Fn(&crate::key_group::Owners, usize) -> Owned<T> + Send>;

/// The typed partitioning of one edge.
pub(crate) enum Partitioning<T> {
    Auto,
    Forward,
    Rebalance,
    Broadcast,
    Hash(HashRouting<T>),
}

impl<T: Data> Partitioning<T> {
    pub(crate) fn kind(&self) -> PartitionKind {
        match self {
            Partitioning::Auto => PartitionKind::Auto,
            Partitioning::Forward => PartitionKind::Forward,
            Partitioning::Rebalance => PartitionKind::Rebalance,
            Partitioning::Broadcast => PartitionKind::Broadcast,
            Partitioning::Hash(_) => PartitionKind::Hash,
        }
    }

    /// The output of one upstream subtask over `senders` (one per connected downstream
    /// subtask, in index order; one only for forward).
    pub(crate) fn output(
        &self,
        resolved: PartitionKind,
        senders: Vec<Sender<T>>,
        cfg: OutputConfig,
    ) -> BoxOutput<T> {
        match (self, resolved) {
            (Partitioning::Hash(hash), _) => (hash.output)(senders, cfg),
            (_, PartitionKind::Broadcast) => Box::new(BroadcastOutput::new(senders, cfg)),
            (_, PartitionKind::Forward) => Box::new(NetOutput::new(senders, OneTarget, cfg)),
            _ => {
                let n = senders.len();
                let start = ((cfg.subtask as u64 + cfg.routed_before) % n.max(1) as u64) as usize;
                Box::new(NetOutput::new(senders, RoundRobin { next: start, n }, cfg))
            }
        }
    }

    /// On a keyed edge, the test of whether a record belongs to `subtask` (of `owners`'
    /// assignment); None on other edges: any subtask may take any record.
    pub(crate) fn owned_by(
        &self,
        owners: &crate::key_group::Owners,
        subtask: usize,
    ) -> Option<Owned<T>> {
        match self {
            Partitioning::Hash(hash) => Some((hash.owned)(owners, subtask)),
            _ => None,
        }
    }
}

/// The routing of a keyed edge with key selector `key_fn`.
pub(crate) fn hash_routing<T, K, KF>(key_fn: KF) -> HashRouting<T>
where
    T: Data,
    K: std::hash::Hash,
    KF: FnMut(&T) -> K + Clone + Send + 'static,
{
    let owned_fn = key_fn.clone();
    HashRouting {
        output: Box::new(move |senders, cfg| {
            let owners = if cfg.owners.parallelism() == senders.len() {
                cfg.owners.clone()
            } else {
                crate::key_group::Owners::by_count(cfg.max_parallelism, senders.len())
            };
            let load = cfg.load.clone().map(|l| (l, cfg.load_when_single));
            let router = ByKey::new(key_fn.clone(), &owners, load);
            Box::new(NetOutput::new(senders, router, cfg)) as BoxOutput<T>
        }),
        owned: Box::new(move |owners, subtask| {
            let mut router = ByKey::new(owned_fn.clone(), owners, None);
            Box::new(move |record: &T| router.route(record) == subtask) as Owned<T>
        }),
    }
}

/// Chooses the receiver of one record.
pub(crate) trait Router<T>: Send {
    fn route(&mut self, record: &T) -> usize;
    /// The output sent what it had (a flush): a router that counts may publish its counts.
    fn flushed(&mut self) {}
    /// The records of `batch` go to the one receiver without being routed: a router that
    /// counts load may count them.
    fn unrouted(&mut self, _batch: &[T]) {}
    /// Whether [`route_counted`](Self::route_counted) should route the next batch (read
    /// once per batch).
    fn counting(&self) -> bool {
        false
    }
    /// [`route`](Self::route), counting the record's key group.
    fn route_counted(&mut self, record: &T) -> usize {
        self.route(record)
    }
    /// Whether every record goes to receiver 0 (lets whole batches move without a per-record
    /// loop).
    const SINGLE: bool = false;
}

pub(crate) struct OneTarget;
impl<T> Router<T> for OneTarget {
    #[inline]
    fn route(&mut self, _: &T) -> usize {
        0
    }
    const SINGLE: bool = true;
}

pub(crate) struct RoundRobin {
    next: usize,
    n: usize,
}
impl<T> Router<T> for RoundRobin {
    #[inline]
    fn route(&mut self, _: &T) -> usize {
        let t = self.next;
        self.next += 1;
        if self.next == self.n {
            self.next = 0;
        }
        t
    }
}

/// Hash partitioning by key group. The key group's owner comes from a table made once (key
/// group -> subtask: by count or by load, [`Owners`](crate::key_group::Owners)), and with a
/// power-of-two number of key groups (the default 128) the key group is a mask of the hash:
/// no division per record (two were a third of a keyed pipeline's sending thread). The same
/// assignment as `key_group_of` and `Owners::owner`. With `load`, it counts the records of
/// each key group.
pub(crate) struct ByKey<KF> {
    key_fn: KF,
    max_parallelism: u64,
    /// `max_parallelism - 1` when it is a power of two.
    mask: Option<u64>,
    owner: Box<[u32]>,
    /// Records routed to each key group since they were last added to `load`.
    counts: Box<[u64]>,
    /// Where the counts go, and whether records to a single receiver are counted too.
    load: Option<(std::sync::Arc<KeyGroupLoad>, bool)>,
    /// When the counts were last added to `load`.
    added_at: std::time::Instant,
}

/// How often a router adds its counts to its operator's (at a flush): often enough for a
/// rebalance to see the load of the last moments, rarely enough that the shared adds cost
/// nothing per record.
const LOAD_EVERY: std::time::Duration = std::time::Duration::from_millis(10);

impl<KF> Drop for ByKey<KF> {
    fn drop(&mut self) {
        if let Some((shared, _)) = &self.load {
            shared.add(&mut self.counts);
        }
    }
}

impl<KF> ByKey<KF> {
    fn new(
        key_fn: KF,
        owners: &crate::key_group::Owners,
        load: Option<(std::sync::Arc<KeyGroupLoad>, bool)>,
    ) -> Self {
        let max_parallelism = owners.max_parallelism();
        let owner = (0..max_parallelism)
            .map(|kg| owners.owner(kg) as u32)
            .collect();
        ByKey {
            key_fn,
            max_parallelism: max_parallelism as u64,
            mask: max_parallelism
                .is_power_of_two()
                .then(|| max_parallelism as u64 - 1),
            owner,
            counts: vec![0; max_parallelism].into(),
            load,
            added_at: std::time::Instant::now(),
        }
    }
}

impl<KF> ByKey<KF> {
    /// The key group of `record`'s key.
    #[inline]
    fn key_group<T, K>(&mut self, record: &T) -> usize
    where
        KF: FnMut(&T) -> K,
        K: std::hash::Hash,
    {
        let h = key_hash(&(self.key_fn)(record));
        (match self.mask {
            Some(m) => h & m,
            None => h % self.max_parallelism,
        }) as usize
    }
}

impl<T, K, KF> Router<T> for ByKey<KF>
where
    KF: FnMut(&T) -> K + Send,
    K: std::hash::Hash,
{
    #[inline]
    fn route(&mut self, record: &T) -> usize {
        let kg = self.key_group(record);
        self.owner[kg] as usize
    }

    fn counting(&self) -> bool {
        self.load.as_ref().is_some_and(|(l, _)| l.is_observed())
    }

    #[inline]
    fn route_counted(&mut self, record: &T) -> usize {
        let kg = self.key_group(record);
        self.counts[kg] += 1;
        self.owner[kg] as usize
    }

    fn flushed(&mut self) {
        if let Some((shared, _)) = &self.load {
            if self.added_at.elapsed() >= LOAD_EVERY {
                shared.add(&mut self.counts);
                self.added_at = std::time::Instant::now();
            }
        }
    }

    fn unrouted(&mut self, batch: &[T]) {
        // Counted when the operator's key groups are to be assigned by load on a rescale
        // (from one subtask to more); otherwise one receiver needs no key.
        if self
            .load
            .as_ref()
            .is_some_and(|(_, when_single)| *when_single)
            && self.counting()
        {
            for r in batch {
                self.route_counted(r);
            }
        }
    }
}

/// Batches that found no credit, in send order.
struct PendingQueue<T> {
    queue: VecDeque<(usize, Event<T>)>,
    /// The last watermark sent (metrics).
    watermark: Option<crate::time::EventTime>,
}

impl<T: Clone> PendingQueue<T> {
    /// Records waiting here for receiver `t`.
    fn unsent_for(&self, t: usize) -> u64 {
        self.queue
            .iter()
            .filter(|(x, _)| *x == t)
            .map(|(_, e)| match e {
                Event::Batch(b) => b.len() as u64,
                _ => 0,
            })
            .sum()
    }
}

impl<T: Clone> PendingQueue<T> {
    fn new() -> Self {
        PendingQueue {
            queue: VecDeque::new(),
            watermark: None,
        }
    }

    #[inline]
    fn send(&mut self, senders: &[Sender<T>], target: usize, event: Event<T>) {
        if self.queue.is_empty() {
            match senders[target].try_send(event) {
                Ok(()) => {}
                Err(Full(event)) => self.queue.push_back((target, event)),
            }
        } else {
            self.queue.push_back((target, event));
        }
    }

    fn usage(&self, senders: &[Sender<T>], usage: &mut QueueUsage) {
        for s in senders {
            let (q, c) = s.usage();
            usage.queued += q;
            usage.capacity += c;
        }
        usage.queued += self.queue.len();
        usage.watermark = usage.watermark.max(self.watermark);
    }

    /// Sends barrier `id` ahead of everything waiting for credit here and in the channels
    /// (an unaligned checkpoint): what waits here goes into its channel first, without
    /// credit, for the barrier to overtake (`Sender::send_overtaking`). A channel that keeps
    /// barriers in band (into a backed-up subtask) gets them back here, the barrier behind.
    fn send_overtaking(&mut self, senders: &[Sender<T>], barrier: Barrier) {
        let mut per_target: Vec<Vec<Event<T>>> = (0..senders.len()).map(|_| Vec::new()).collect();
        for (t, e) in self.queue.drain(..) {
            per_target[t].push(e);
        }
        for (t, before) in per_target.into_iter().enumerate() {
            if let Err(before) = senders[t].send_overtaking(barrier, before) {
                self.queue.extend(before.into_iter().map(|e| (t, e)));
                self.queue.push_back((t, Event::Barrier(barrier)));
            }
        }
    }

    fn poll(&mut self, senders: &[Sender<T>], cx: &mut Context<'_>) -> Poll<()> {
        while let Some((target, event)) = self.queue.pop_front() {
            if let Err(Full(event)) = senders[target].send_or_register(cx, event) {
                self.queue.push_front((target, event));
                return Poll::Pending;
            }
        }
        Poll::Ready(())
    }
}

/// The [`Output`] methods every network output shares (it has `senders`, `pending`, a
/// `flush_all` that moves every buffered record into `pending`, and `cut_all`, which sends
/// what waits in its buffers over a receiver's batch limit): in-band events go to every
/// channel behind the records already emitted.
macro_rules! network_output_plumbing {
    () => {
        fn finish(&mut self) -> Result<(), TaskError> {
            self.flush_all();
            for t in 0..self.senders.len() {
                self.pending.send(&self.senders, t, Event::EndOfInput);
            }
            self.publish_unsent();
            Ok(())
        }
        fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TaskError>> {
            // Batches waiting for credit go first; then what a smaller batch limit left in
            // the buffers is cut and sent, until a channel refuses again.
            let polled = loop {
                if self.pending.poll(&self.senders, cx).is_pending() {
                    break Poll::Pending;
                }
                if self.cut_all() {
                    break Poll::Ready(Ok(()));
                }
            };
            self.publish_unsent();
            polled
        }
        fn usage(&self, usage: &mut QueueUsage) {
            self.pending.usage(&self.senders, usage)
        }
        fn control(&mut self, _c: &mut crate::operator::Control<'_>) {}
        fn barrier(
            &mut self,
            id: u64,
            w: &mut crate::checkpoint::StateWriter,
        ) -> Result<(), TaskError> {
            // Records before the barrier go before it, on every channel.
            self.flush_all();
            let barrier = Barrier {
                id,
                hand_over: w.hand_over,
            };
            if w.unaligned {
                // It overtakes them (they are the checkpoint's channel state downstream).
                self.pending.send_overtaking(&self.senders, barrier);
                self.publish_unsent();
                return Ok(());
            }
            for t in 0..self.senders.len() {
                self.pending.send(&self.senders, t, Event::Barrier(barrier));
            }
            self.publish_unsent();
            Ok(())
        }
        fn notify_complete(&mut self, _id: u64) -> Result<(), TaskError> {
            Ok(())
        }
        fn watermark(&mut self, w: crate::time::Watermark) -> Result<(), TaskError> {
            // Records before the watermark go before it, on every channel.
            self.flush_all();
            if let crate::time::Watermark::At(t) = w {
                self.pending.watermark = Some(t);
            }
            for t in 0..self.senders.len() {
                self.pending.send(&self.senders, t, Event::Watermark(w));
            }
            self.publish_unsent();
            Ok(())
        }
    };
}

/// The records a batch to `sender` should hold: the edge's batch size, or less when the
/// receiver asks for smaller batches (`Sender::batch_limit`, adaptive batch size), but not
/// below an eighth of the batch size, so per-batch costs stay a small share of a record's (a
/// consumer slower than that keeps batches of an eighth and waits over the target).
#[inline]
fn limit_of<T: Clone>(sender: &Sender<T>, batch_size: usize, adaptive: &AdaptBatches) -> usize {
    if !adaptive.on() {
        return batch_size;
    }
    let floor = (batch_size / 8).max(1) as u64;
    sender.batch_limit().clamp(floor, batch_size.max(1) as u64) as usize
}

/// The first `n` records of `buf`, taken out (the rest stays, in order).
fn take_front<T>(buf: &mut Vec<T>, n: usize) -> Vec<T> {
    let rest = buf.split_off(n);
    std::mem::replace(buf, rest)
}

/// Point-to-point output: forward, rebalance or hash, per the router.
pub(crate) struct NetOutput<T, R> {
    senders: Vec<Sender<T>>,
    bufs: Vec<Vec<T>>,
    /// Records per batch for each receiver now (at most `batch_size`), read from its channel
    /// at every batch sent.
    limits: Vec<usize>,
    router: R,
    batch_size: usize,
    adaptive: AdaptBatches,
    pending: PendingQueue<T>,
    /// For errors: the receiving operator and this sending subtask.
    target_uid: std::sync::Arc<String>,
    subtask: usize,
    /// Tells its channels what it holds for them (a backed-up subtask's output).
    counts_unsent: bool,
}

impl<T: Clone, R> NetOutput<T, R> {
    fn new(senders: Vec<Sender<T>>, router: R, cfg: OutputConfig) -> Self {
        let bufs = (0..senders.len())
            .map(|_| Vec::with_capacity(cfg.batch_size))
            .collect();
        NetOutput {
            limits: senders
                .iter()
                .map(|s| limit_of(s, cfg.batch_size, &cfg.adaptive_batch))
                .collect(),
            senders,
            bufs,
            router,
            batch_size: cfg.batch_size,
            adaptive: cfg.adaptive_batch.clone(),
            pending: PendingQueue::new(),
            target_uid: cfg.target_uid,
            subtask: cfg.subtask,
            counts_unsent: cfg.counts_unsent,
        }
    }

    /// Tells each channel what this output holds for it (a backed-up subtask's).
    fn publish_unsent(&self) {
        if !self.counts_unsent {
            return;
        }
        for (t, s) in self.senders.iter().enumerate() {
            s.set_unsent(self.bufs[t].len() as u64 + self.pending.unsent_for(t));
        }
    }

    /// Sends `full` to receiver `t` and reads the receiver's batch limit for the next batch.
    #[inline]
    fn send_batch(&mut self, t: usize, full: Vec<T>) {
        self.pending
            .send(&self.senders, t, Event::Batch(Batch::Owned(full)));
        self.limits[t] = limit_of(&self.senders[t], self.batch_size, &self.adaptive);
    }

    #[inline]
    fn send_buf(&mut self, t: usize) {
        let full = std::mem::replace(&mut self.bufs[t], Vec::with_capacity(self.limits[t]));
        self.send_batch(t, full);
    }

    /// Sends what `bufs[t]` holds at or over the receiver's limit: whole, if under twice the
    /// limit (or the limit is the batch size); else cut into batches of the limit, one at a
    /// time while nothing waits for credit. Records beyond that wait in the buffer (the
    /// subtask takes no input meanwhile: `poll_pending` is not ready), so one input batch
    /// never turns into a queue of small batches. Returns whether the buffer is under the
    /// limit.
    fn cut(&mut self, t: usize) -> bool {
        loop {
            let (limit, len) = (self.limits[t], self.bufs[t].len());
            if len < limit {
                return true;
            }
            if limit >= self.batch_size || len < 2 * limit {
                self.send_buf(t);
            } else if self.pending.queue.is_empty() {
                let chunk = take_front(&mut self.bufs[t], limit);
                self.send_batch(t, chunk);
            } else {
                return false;
            }
        }
    }

    fn cut_all(&mut self) -> bool {
        let mut under = true;
        for t in 0..self.bufs.len() {
            under &= self.cut(t);
        }
        under
    }

    /// Every buffered record into `pending` (before an in-band event), in batches of at
    /// most the limit.
    fn flush_all(&mut self) {
        for t in 0..self.bufs.len() {
            while self.bufs[t].len() > self.limits[t] {
                let chunk = take_front(&mut self.bufs[t], self.limits[t]);
                self.send_batch(t, chunk);
            }
            if !self.bufs[t].is_empty() {
                self.send_buf(t);
            }
        }
    }
}

impl<T: Send + Sync + Clone, R: Router<T>> Output<T> for NetOutput<T, R> {
    #[inline]
    fn push(&mut self, batch: &mut Vec<T>) -> Result<(), TaskError> {
        // One receiver: every record goes to it, so the router (a key selector and its hash,
        // per record) is not run; a keyed receiver runs the key selector itself.
        if R::SINGLE || self.senders.len() == 1 {
            self.router.unrouted(batch);
            let limit = self.limits[0];
            if self.bufs[0].is_empty()
                && batch.len() >= limit
                && (limit >= self.batch_size || batch.len() < 2 * limit)
            {
                // A whole batch moves as it is.
                let full = std::mem::replace(batch, Vec::with_capacity(self.batch_size));
                self.send_batch(0, full);
            } else {
                self.bufs[0].append(batch);
                self.cut(0);
            }
            self.publish_unsent();
            return Ok(());
        }
        // The router may run user code (a key selector): a panic names the keyed operator.
        // Two loops, so that one that does not count pays nothing per record for it.
        let counting = self.router.counting();
        let routed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if counting {
                for r in batch.drain(..) {
                    let t = self.router.route_counted(&r);
                    self.bufs[t].push(r);
                    if self.bufs[t].len() >= self.limits[t] {
                        self.cut(t);
                    }
                }
            } else {
                for r in batch.drain(..) {
                    let t = self.router.route(&r);
                    self.bufs[t].push(r);
                    if self.bufs[t].len() >= self.limits[t] {
                        self.cut(t);
                    }
                }
            }
        }));
        self.publish_unsent();
        routed.map_err(|payload| TaskError::Panic {
            uid: self.target_uid.to_string(),
            subtask: self.subtask,
            message: format!(
                "in its key selector (run by upstream subtask {}): {}",
                self.subtask,
                crate::error::panic_message(&*payload)
            ),
        })
    }
    fn flush(&mut self) {
        self.router.flushed();
        // What waits over a limit for credit is sent by `poll_pending`; partial batches go.
        for t in 0..self.bufs.len() {
            if self.cut(t) && !self.bufs[t].is_empty() {
                self.send_buf(t);
            }
        }
        self.publish_unsent();
    }
    network_output_plumbing!();
}

/// Every record to every receiver; one shared batch per send.
pub(crate) struct BroadcastOutput<T> {
    senders: Vec<Sender<T>>,
    buf: Vec<T>,
    batch_size: usize,
    adaptive: AdaptBatches,
    /// Records per batch now: the smallest limit of the receivers (at most `batch_size`).
    limit: usize,
    pending: PendingQueue<T>,
    /// Tells its channels what it holds for them (a backed-up subtask's output).
    counts_unsent: bool,
}

impl<T: Clone> BroadcastOutput<T> {
    /// Tells each channel what this output holds for it (a backed-up subtask's).
    fn publish_unsent(&self) {
        if !self.counts_unsent {
            return;
        }
        for (t, s) in self.senders.iter().enumerate() {
            s.set_unsent(self.buf.len() as u64 + self.pending.unsent_for(t));
        }
    }

    fn new(senders: Vec<Sender<T>>, cfg: OutputConfig) -> Self {
        BroadcastOutput {
            buf: Vec::with_capacity(cfg.batch_size),
            batch_size: cfg.batch_size,
            adaptive: cfg.adaptive_batch.clone(),
            limit: senders
                .iter()
                .map(|s| limit_of(s, cfg.batch_size, &cfg.adaptive_batch))
                .min()
                .unwrap_or(cfg.batch_size),
            senders,
            pending: PendingQueue::new(),
            counts_unsent: cfg.counts_unsent,
        }
    }

    fn send_chunk(&mut self, full: Vec<T>) {
        if self.senders.len() == 1 {
            self.pending
                .send(&self.senders, 0, Event::Batch(Batch::Owned(full)));
        } else {
            let shared = std::sync::Arc::new(full);
            for t in 0..self.senders.len() {
                self.pending.send(
                    &self.senders,
                    t,
                    Event::Batch(Batch::Shared(shared.clone())),
                );
            }
        }
        self.limit = self
            .senders
            .iter()
            .map(|s| limit_of(s, self.batch_size, &self.adaptive))
            .min()
            .unwrap_or(self.batch_size);
    }

    fn send_buf(&mut self) {
        let full = std::mem::replace(&mut self.buf, Vec::with_capacity(self.limit));
        self.send_chunk(full);
    }

    /// As `NetOutput::flush_all`.
    fn flush_all(&mut self) {
        while self.buf.len() > self.limit {
            let chunk = take_front(&mut self.buf, self.limit);
            self.send_chunk(chunk);
        }
        if !self.buf.is_empty() {
            self.send_buf();
        }
    }

    /// As `NetOutput::cut`, for the one buffer.
    fn cut_all(&mut self) -> bool {
        loop {
            let (limit, len) = (self.limit, self.buf.len());
            if len < limit {
                return true;
            }
            if limit >= self.batch_size || len < 2 * limit {
                self.send_buf();
            } else if self.pending.queue.is_empty() {
                let chunk = take_front(&mut self.buf, limit);
                self.send_chunk(chunk);
            } else {
                return false;
            }
        }
    }
}

impl<T: Send + Sync + Clone> Output<T> for BroadcastOutput<T> {
    fn push(&mut self, batch: &mut Vec<T>) -> Result<(), TaskError> {
        self.buf.append(batch);
        self.cut_all();
        self.publish_unsent();
        Ok(())
    }
    fn flush(&mut self) {
        if self.cut_all() && !self.buf.is_empty() {
            self.send_buf();
        }
        self.publish_unsent();
    }
    network_output_plumbing!();
}

#[cfg(all(test, not(weir_loom)))]
mod tests;
