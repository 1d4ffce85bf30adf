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

use crate::channel::{Batch, Event, Full, Sender};
use crate::error::TaskError;
use crate::key_group::{key_hash, subtask_for_key_group};
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
    /// The receiving operator (named when its key selector panics).
    pub(crate) target_uid: std::sync::Arc<String>,
    /// Records this subtask already sent on the edge (a promoted backup resumes its
    /// predecessor's round robin where the replay starts).
    pub(crate) routed_before: u64,
}

/// Builds a keyed (hash) output for a given set of channels.
pub(crate) type HashOutputFactory<T> =
    Box<dyn Fn(Vec<Sender<T>>, OutputConfig) -> BoxOutput<T> + Send>;

/// The typed partitioning of one edge.
pub(crate) enum Partitioning<T> {
    Auto,
    Forward,
    Rebalance,
    Broadcast,
    Hash(HashOutputFactory<T>),
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
            (Partitioning::Hash(make), _) => make(senders, cfg),
            (_, PartitionKind::Broadcast) => Box::new(BroadcastOutput::new(senders, cfg)),
            (_, PartitionKind::Forward) => Box::new(NetOutput::new(senders, OneTarget, cfg)),
            _ => {
                let n = senders.len();
                let start = ((cfg.subtask as u64 + cfg.routed_before) % n.max(1) as u64) as usize;
                Box::new(NetOutput::new(senders, RoundRobin { next: start, n }, cfg))
            }
        }
    }
}

/// Builds the hash output for a key selector.
pub(crate) fn hash_output_factory<T, K, KF>(key_fn: KF) -> HashOutputFactory<T>
where
    T: Data,
    K: std::hash::Hash,
    KF: FnMut(&T) -> K + Clone + Send + 'static,
{
    Box::new(move |senders, cfg| {
        let router = ByKey::new(key_fn.clone(), cfg.max_parallelism, senders.len());
        Box::new(NetOutput::new(senders, router, cfg)) as BoxOutput<T>
    })
}

/// Chooses the receiver of one record.
pub(crate) trait Router<T>: Send {
    fn route(&mut self, record: &T) -> usize;
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
/// group -> subtask), and with a power-of-two number of key groups (the default 128) the key
/// group is a mask of the hash: no division per record (two were a third of a keyed
/// pipeline's sending thread). The same assignment as `key_group_of` and
/// `subtask_for_key_group`.
pub(crate) struct ByKey<KF> {
    key_fn: KF,
    max_parallelism: u64,
    /// `max_parallelism - 1` when it is a power of two.
    mask: Option<u64>,
    owner: Box<[u32]>,
}

impl<KF> ByKey<KF> {
    fn new(key_fn: KF, max_parallelism: usize, n: usize) -> Self {
        let owner = (0..max_parallelism)
            .map(|kg| subtask_for_key_group(kg, max_parallelism, n) as u32)
            .collect();
        ByKey {
            key_fn,
            max_parallelism: max_parallelism as u64,
            mask: max_parallelism
                .is_power_of_two()
                .then(|| max_parallelism as u64 - 1),
            owner,
        }
    }
}

impl<T, K, KF> Router<T> for ByKey<KF>
where
    KF: FnMut(&T) -> K + Send,
    K: std::hash::Hash,
{
    #[inline]
    fn route(&mut self, record: &T) -> usize {
        let h = key_hash(&(self.key_fn)(record));
        let kg = match self.mask {
            Some(m) => h & m,
            None => h % self.max_parallelism,
        };
        self.owner[kg as usize] as usize
    }
}

/// Batches that found no credit, in send order.
struct PendingQueue<T> {
    queue: VecDeque<(usize, Event<T>)>,
    /// The last watermark sent (metrics).
    watermark: Option<crate::time::EventTime>,
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

/// The [`Output`] methods every network output shares (it has `senders`, `pending` and a
/// `flush` that moves partial batches into `pending`): in-band events go to every channel
/// behind the records already emitted.
macro_rules! network_output_plumbing {
    () => {
        fn finish(&mut self) -> Result<(), TaskError> {
            self.flush();
            for t in 0..self.senders.len() {
                self.pending.send(&self.senders, t, Event::EndOfInput);
            }
            Ok(())
        }
        fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TaskError>> {
            self.pending.poll(&self.senders, cx).map(Ok)
        }
        fn usage(&self, usage: &mut QueueUsage) {
            self.pending.usage(&self.senders, usage)
        }
        fn control(&mut self, _c: &mut crate::operator::Control<'_>) {}
        fn barrier(
            &mut self,
            id: u64,
            _w: &mut crate::checkpoint::StateWriter,
        ) -> Result<(), TaskError> {
            // Records before the barrier go before it, on every channel.
            self.flush();
            for t in 0..self.senders.len() {
                self.pending.send(&self.senders, t, Event::Barrier(id));
            }
            Ok(())
        }
        fn notify_complete(&mut self, _id: u64) -> Result<(), TaskError> {
            Ok(())
        }
        fn watermark(&mut self, w: crate::time::Watermark) -> Result<(), TaskError> {
            // Records before the watermark go before it, on every channel.
            self.flush();
            if let crate::time::Watermark::At(t) = w {
                self.pending.watermark = Some(t);
            }
            for t in 0..self.senders.len() {
                self.pending.send(&self.senders, t, Event::Watermark(w));
            }
            Ok(())
        }
    };
}

/// Point-to-point output: forward, rebalance or hash, per the router.
pub(crate) struct NetOutput<T, R> {
    senders: Vec<Sender<T>>,
    bufs: Vec<Vec<T>>,
    router: R,
    batch_size: usize,
    pending: PendingQueue<T>,
    /// For errors: the receiving operator and this sending subtask.
    target_uid: std::sync::Arc<String>,
    subtask: usize,
}

impl<T: Clone, R> NetOutput<T, R> {
    fn new(senders: Vec<Sender<T>>, router: R, cfg: OutputConfig) -> Self {
        let bufs = (0..senders.len())
            .map(|_| Vec::with_capacity(cfg.batch_size))
            .collect();
        NetOutput {
            senders,
            bufs,
            router,
            batch_size: cfg.batch_size,
            pending: PendingQueue::new(),
            target_uid: cfg.target_uid,
            subtask: cfg.subtask,
        }
    }

    #[inline]
    fn send_buf(&mut self, t: usize) {
        let full = std::mem::replace(&mut self.bufs[t], Vec::with_capacity(self.batch_size));
        self.pending
            .send(&self.senders, t, Event::Batch(Batch::Owned(full)));
    }
}

impl<T: Send + Sync + Clone, R: Router<T>> Output<T> for NetOutput<T, R> {
    #[inline]
    fn push(&mut self, batch: &mut Vec<T>) -> Result<(), TaskError> {
        // One receiver: every record goes to it, so the router (a key selector and its hash,
        // per record) is not run; a keyed receiver runs the key selector itself.
        if R::SINGLE || self.senders.len() == 1 {
            if self.bufs[0].is_empty() && batch.len() >= self.batch_size {
                let full = std::mem::replace(batch, Vec::with_capacity(self.batch_size));
                self.pending
                    .send(&self.senders, 0, Event::Batch(Batch::Owned(full)));
            } else {
                self.bufs[0].append(batch);
                if self.bufs[0].len() >= self.batch_size {
                    self.send_buf(0);
                }
            }
            return Ok(());
        }
        // The router may run user code (a key selector): a panic names the keyed operator.
        let routed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for r in batch.drain(..) {
                let t = self.router.route(&r);
                let buf = &mut self.bufs[t];
                buf.push(r);
                if buf.len() >= self.batch_size {
                    let full = std::mem::replace(buf, Vec::with_capacity(self.batch_size));
                    self.pending
                        .send(&self.senders, t, Event::Batch(Batch::Owned(full)));
                }
            }
        }));
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
        for t in 0..self.bufs.len() {
            if !self.bufs[t].is_empty() {
                self.send_buf(t);
            }
        }
    }
    network_output_plumbing!();
}

/// Every record to every receiver; one shared batch per send.
pub(crate) struct BroadcastOutput<T> {
    senders: Vec<Sender<T>>,
    buf: Vec<T>,
    batch_size: usize,
    pending: PendingQueue<T>,
}

impl<T: Clone> BroadcastOutput<T> {
    fn new(senders: Vec<Sender<T>>, cfg: OutputConfig) -> Self {
        BroadcastOutput {
            senders,
            buf: Vec::with_capacity(cfg.batch_size),
            batch_size: cfg.batch_size,
            pending: PendingQueue::new(),
        }
    }

    fn send_buf(&mut self) {
        let full = std::mem::replace(&mut self.buf, Vec::with_capacity(self.batch_size));
        if self.senders.len() == 1 {
            self.pending
                .send(&self.senders, 0, Event::Batch(Batch::Owned(full)));
            return;
        }
        let shared = std::sync::Arc::new(full);
        for t in 0..self.senders.len() {
            self.pending.send(
                &self.senders,
                t,
                Event::Batch(Batch::Shared(shared.clone())),
            );
        }
    }
}

impl<T: Send + Sync + Clone> Output<T> for BroadcastOutput<T> {
    fn push(&mut self, batch: &mut Vec<T>) -> Result<(), TaskError> {
        self.buf.append(batch);
        if self.buf.len() >= self.batch_size {
            self.send_buf();
        }
        Ok(())
    }
    fn flush(&mut self) {
        if !self.buf.is_empty() {
            self.send_buf();
        }
    }
    network_output_plumbing!();
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;
    use crate::key_group::key_group_of;

    /// The table and the mask give the same owner as the key group arithmetic, for a
    /// power-of-two number of key groups and for another.
    #[test]
    fn by_key_routes_each_key_to_its_key_groups_owner() {
        for max in [128usize, 100, 1] {
            for n in 1..=max.min(7) {
                let mut router = ByKey::new(|x: &u64| *x, max, n);
                for key in 0..5_000u64 {
                    let want = subtask_for_key_group(key_group_of(&key, max), max, n);
                    assert_eq!(Router::route(&mut router, &key), want, "{key} {max} {n}");
                }
            }
        }
    }
}
