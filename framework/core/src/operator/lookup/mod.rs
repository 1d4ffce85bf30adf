//! Async lookups: enrich each record by an asynchronous call to an outside service (a
//! dimension table, a feature store), with a cache in front — Flink's async I/O for Weir.
//!
//! An app implements [`AsyncLookup`] (the record's key, the call, how a value joins the
//! record) and adds it with [`DataStream::lookup`](crate::DataStream::lookup) and a
//! [`LookupConfig`]:
//!
//! - at most `capacity` calls are in flight per subtask; while the operator holds that many
//!   unfinished records it takes no more input (backpressure, as a full output does);
//! - results come out in input order (`ordered`, the default) or as they complete;
//! - each call has a `timeout`; a call that times out or fails is retried `retries` times,
//!   then [`OnTimeout`] decides: fail the job naming operator, subtask and key, or send the
//!   record to the side output of timed-out records (the second stream `lookup` returns);
//! - the cache is `none`, `all` (every entry loaded at open by [`AsyncLookup::load_all`]) or
//!   an LRU with a size and an optional time to live.
//!
//! While the job runs, `JobMonitor::update_config(uid, key, value)` changes `cache`
//! (`none|all|lru`), `cache.size`, `cache.ttl` (`30s`, `500ms`, `none`), `timeout`,
//! `capacity` and `retries`, between two batches and without a restart; a bad key or value is
//! refused with a [`ConfigError`](crate::ConfigError) naming it and changes nothing. A
//! restarted subtask applies the changes again.
//!
//! **Checkpoints** hold the records whose results have not been emitted yet (in input
//! order): inputs of calls in flight or waiting for capacity are re-issued after a restore,
//! and results an ordered lookup holds back behind a slower call are restored as results. A
//! barrier is never held back by a call in flight. The cache is not state: it refills (an
//! `all` cache is loaded again). So a restart from a checkpoint loses and repeats nothing.
//!
//! [`LookupMetrics`] (from [`LookupConfig::metrics`]) reads hits, misses, cache size and
//! strategy, calls in flight, timeouts and retries of every subtask while the job runs.
//!
//! ```
//! use weir::lookup::{AsyncLookup, CacheStrategy, LookupConfig, LookupFuture};
//!
//! /// Customer names from a (here: pretend) remote service.
//! #[derive(Clone)]
//! struct Names;
//!
//! impl AsyncLookup<u64> for Names {
//!     type Key = u64;
//!     type Value = String;
//!     type Out = (u64, String);
//!     type Error = String;
//!     fn key(&mut self, order: &u64) -> u64 {
//!         order % 10
//!     }
//!     fn lookup(&mut self, customer: &u64) -> LookupFuture<String, String> {
//!         let customer = *customer;
//!         Box::pin(async move { Ok(format!("customer-{customer}")) })
//!     }
//!     fn enrich(&mut self, order: u64, name: &String) -> (u64, String) {
//!         (order, name.clone())
//!     }
//! }
//!
//! let config = LookupConfig::new()
//!     .capacity(8)
//!     .cache(CacheStrategy::Lru { size: 100, ttl: None });
//! let metrics = config.metrics();
//! let env = weir::Env::new();
//! let (named, _timed_out) = env.generate(100, |i| i).lookup(Names, config);
//! let out = named.uid("names").collect();
//! env.execute("lookup-doc").unwrap();
//! let out = out.take();
//! assert_eq!(out[..2], [(0, "customer-0".to_string()), (1, "customer-1".to_string())]);
//! let stats = metrics.stats();
//! assert_eq!(stats.hits + stats.misses, 100);
//! assert!(stats.misses >= 10 && stats.misses <= 10 + 8, "{stats:?}");
//! ```
//!
//! This module owns the API and the metrics handle; `op` the operator, `cache` the cache,
//! `settings` the live keys. The actor loop that polls the operator is `task`'s.

mod cache;
pub(crate) mod op;
mod settings;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use crate::sync::{lock, Arc, Mutex};

/// What [`AsyncLookup::lookup`] returns: a boxed future of the value (or the service's
/// error). It runs on the subtask's thread (an actix arbiter), polled by the operator.
pub type LookupFuture<V, E> = Pin<Box<dyn Future<Output = Result<V, E>> + Send + 'static>>;

/// What [`AsyncLookup::load_all`] returns: every (key, value) pair of the table.
pub type LoadFuture<K, V, E> = LookupFuture<Vec<(K, V)>, E>;

/// An asynchronous enrichment of records of type `T`. One instance per subtask (cloned from
/// the one given to [`DataStream::lookup`](crate::DataStream::lookup)); calls run on the
/// subtask's thread, so a future need not be fast to create but must not block.
pub trait AsyncLookup<T>: Clone + Send + 'static {
    /// What the service and the cache are keyed by.
    type Key: Clone + Eq + std::hash::Hash + std::fmt::Debug + Send + 'static;
    /// What the service answers for a key.
    type Value: Send + 'static;
    /// The enriched record.
    type Out: crate::Data;
    /// The service's error (a failed call is retried like a timed-out one).
    type Error: std::fmt::Display + Send + 'static;

    /// The key of `record`.
    fn key(&mut self, record: &T) -> Self::Key;

    /// Looks `key` up. The future is dropped if it times out.
    fn lookup(&mut self, key: &Self::Key) -> LookupFuture<Self::Value, Self::Error>;

    /// Joins a record with the value of its key.
    fn enrich(&mut self, record: T, value: &Self::Value) -> Self::Out;

    /// Every (key, value) pair, for the `all` cache (at open, and when `cache` is changed to
    /// `all` while the job runs). `None` (the default): this lookup has no such loader, and
    /// the `all` cache is refused.
    fn load_all(&mut self) -> Option<LoadFuture<Self::Key, Self::Value, Self::Error>> {
        None
    }
}

/// The cache strategy a lookup starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheStrategy {
    /// No cache: every record is a call.
    None,
    /// Every entry, loaded at open by [`AsyncLookup::load_all`]; a key it lacks is a miss
    /// (a call, whose answer is then kept).
    All,
    /// The `size` most recently used entries, each for `ttl` after it was fetched (`None`:
    /// until evicted).
    Lru {
        /// Entries kept at most.
        size: usize,
        /// How long an entry is valid.
        ttl: Option<Duration>,
    },
}

/// The name of a cache strategy: the value of the live key `cache`, and what the metrics
/// report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CacheKind {
    /// `none`.
    None,
    /// `all`.
    All,
    /// `lru`.
    Lru,
}

impl CacheKind {
    fn code(self) -> u8 {
        match self {
            CacheKind::None => 0,
            CacheKind::All => 1,
            CacheKind::Lru => 2,
        }
    }
    fn from_code(c: u8) -> Self {
        match c {
            1 => CacheKind::All,
            2 => CacheKind::Lru,
            _ => CacheKind::None,
        }
    }
}

impl std::fmt::Display for CacheKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CacheKind::None => "none",
            CacheKind::All => "all",
            CacheKind::Lru => "lru",
        })
    }
}

impl CacheKind {
    /// The strategy named `s` (`none`, `all`, `lru`). Not `FromStr`: a public parser impl
    /// would show up in every compiler hint that lists `FromStr` types.
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(CacheKind::None),
            "all" => Ok(CacheKind::All),
            "lru" => Ok(CacheKind::Lru),
            other => Err(format!("unknown cache strategy `{other}`")),
        }
    }
}

/// What happens to a record whose call timed out on every attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnTimeout {
    /// The job fails, naming the operator, the subtask and the key (the restart strategy
    /// then applies).
    Fail,
    /// The record goes to the side output of timed-out records, and the job goes on.
    SideOutput,
}

/// How a lookup runs: see the [module doc](self). Built with chained setters, checked when
/// the job is planned (`execute` refuses a capacity, size or duration of zero).
///
/// ```
/// use std::time::Duration;
/// use weir::lookup::{CacheStrategy, LookupConfig, OnTimeout};
/// let config = LookupConfig::new()
///     .capacity(64)
///     .unordered()
///     .timeout(Duration::from_millis(200))
///     .retries(2)
///     .on_timeout(OnTimeout::SideOutput)
///     .cache(CacheStrategy::Lru { size: 10_000, ttl: Some(Duration::from_secs(60)) });
/// assert_eq!(config.metrics().stats().hits, 0);
/// ```
#[derive(Debug, Clone)]
pub struct LookupConfig {
    pub(crate) ordered: bool,
    pub(crate) capacity: usize,
    pub(crate) timeout: Duration,
    pub(crate) retries: u32,
    pub(crate) on_timeout: OnTimeout,
    pub(crate) cache: CacheStrategy,
    pub(crate) metrics: LookupMetrics,
}

impl Default for LookupConfig {
    fn default() -> Self {
        LookupConfig::new()
    }
}

impl LookupConfig {
    /// The LRU size used when `cache` is switched to `lru` and no size was ever given.
    pub const DEFAULT_LRU_SIZE: usize = 10_000;

    /// Ordered, 100 calls in flight, a 10 s timeout, no retry, fail on timeout, no cache.
    pub fn new() -> Self {
        LookupConfig {
            ordered: true,
            capacity: 100,
            timeout: Duration::from_secs(10),
            retries: 0,
            on_timeout: OnTimeout::Fail,
            cache: CacheStrategy::None,
            metrics: LookupMetrics::default(),
        }
    }

    /// Results in input order (the default).
    pub fn ordered(mut self) -> Self {
        self.ordered = true;
        self
    }

    /// Results as their calls complete (never across a checkpoint barrier unrecorded: what
    /// is in flight at a barrier is in its checkpoint).
    pub fn unordered(mut self) -> Self {
        self.ordered = false;
        self
    }

    /// Calls in flight per subtask, at most (at least 1).
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }

    /// How long one call may take.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Calls made again after a timeout or an error, before [`OnTimeout`] applies (an error
    /// after the last retry fails the job whatever the policy).
    pub fn retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }

    /// What happens to a record whose call timed out on every attempt.
    pub fn on_timeout(mut self, policy: OnTimeout) -> Self {
        self.on_timeout = policy;
        self
    }

    /// The cache strategy at start.
    pub fn cache(mut self, cache: CacheStrategy) -> Self {
        self.cache = cache;
        self
    }

    /// The metrics of the lookup this config is given to (a handle: clone it, read it while
    /// the job runs).
    pub fn metrics(&self) -> LookupMetrics {
        self.metrics.clone()
    }

    /// What is out of range, for `execute` to refuse.
    pub(crate) fn validate(&self) -> Result<(), crate::error::PlanError> {
        let bad = |key, message: &str| {
            Err(crate::error::PlanError::BadConfig {
                key,
                message: message.to_owned(),
            })
        };
        if self.capacity == 0 {
            return bad("lookup capacity", "must be at least 1");
        }
        if self.timeout.is_zero() {
            return bad("lookup timeout", "must be longer than zero");
        }
        if let CacheStrategy::Lru { size, ttl } = self.cache {
            if size == 0 {
                return bad("lookup cache size", "must be at least 1");
            }
            if ttl.is_some_and(|t| t.is_zero()) {
                return bad("lookup cache ttl", "must be longer than zero (or None)");
            }
        }
        Ok(())
    }
}

/// The counters of one lookup subtask, shared by its successive instances (a restarted
/// subtask counts on). Written once per batch or poll, never per record.
#[derive(Debug, Default)]
pub(crate) struct LookupCounters {
    pub(crate) hits: AtomicU64,
    pub(crate) misses: AtomicU64,
    pub(crate) timeouts: AtomicU64,
    pub(crate) retries: AtomicU64,
    pub(crate) in_flight: AtomicU64,
    pub(crate) cache_size: AtomicU64,
    pub(crate) strategy: AtomicU8,
}

/// The metrics of one lookup operator, per subtask: a cloneable handle, readable while the
/// job runs (from [`LookupConfig::metrics`]).
#[derive(Debug, Clone, Default)]
pub struct LookupMetrics {
    inner: Arc<Mutex<Registry>>,
}

#[derive(Debug, Default)]
struct Registry {
    /// The running subtasks' counters, by subtask index.
    subtasks: std::collections::BTreeMap<usize, Arc<LookupCounters>>,
    /// What subtasks removed by a rescale to fewer counted (hits, misses, timeouts, retries).
    retired: [u64; 4],
}

impl crate::metrics::OperatorGauges for LookupMetrics {
    fn names(&self) -> &'static [&'static str] {
        &[
            "cacheHits",
            "cacheMisses",
            "cacheSize",
            "cacheStrategy",
            "inFlight",
            "timeouts",
            "retries",
        ]
    }

    fn read(&self) -> Vec<(usize, Vec<String>)> {
        lock(&self.inner)
            .subtasks
            .iter()
            .map(|(&i, c)| {
                let n = |a: &AtomicU64| a.load(Ordering::Relaxed).to_string();
                let strategy = CacheKind::from_code(c.strategy.load(Ordering::Relaxed));
                (
                    i,
                    vec![
                        n(&c.hits),
                        n(&c.misses),
                        n(&c.cache_size),
                        strategy.to_string(),
                        n(&c.in_flight),
                        n(&c.timeouts),
                        n(&c.retries),
                    ],
                )
            })
            .collect()
    }
}

/// A reading of [`LookupMetrics`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LookupStats {
    /// Records answered from the cache.
    pub hits: u64,
    /// Records that needed a call (first attempts; retries are counted apart).
    pub misses: u64,
    /// Entries in the cache now.
    pub cache_size: u64,
    /// Calls in flight now.
    pub in_flight: u64,
    /// Calls that timed out.
    pub timeouts: u64,
    /// Calls made again after a timeout or an error.
    pub retries: u64,
    /// The cache strategy now (in [`LookupMetrics::stats`]: `None` when the subtasks differ
    /// or none has started).
    pub strategy: Option<CacheKind>,
}

impl LookupMetrics {
    /// The counters of `subtask` of `parallelism` (created at its first start, kept across
    /// restarts). Subtasks beyond `parallelism` (a rescale to fewer) are retired: their
    /// counts stay in the sums, their gauges go.
    pub(crate) fn register(&self, subtask: usize, parallelism: usize) -> Arc<LookupCounters> {
        let mut r = lock(&self.inner);
        let gone: Vec<usize> = r.subtasks.range(parallelism..).map(|(i, _)| *i).collect();
        for i in gone {
            if let Some(c) = r.subtasks.remove(&i) {
                for (slot, counter) in
                    r.retired
                        .iter_mut()
                        .zip([&c.hits, &c.misses, &c.timeouts, &c.retries])
                {
                    *slot += counter.load(Ordering::Relaxed);
                }
            }
        }
        r.subtasks.entry(subtask).or_default().clone()
    }

    /// Every running subtask's reading, by subtask index.
    pub fn subtasks(&self) -> Vec<LookupStats> {
        lock(&self.inner)
            .subtasks
            .values()
            .map(|c| LookupStats {
                hits: c.hits.load(Ordering::Relaxed),
                misses: c.misses.load(Ordering::Relaxed),
                cache_size: c.cache_size.load(Ordering::Relaxed),
                in_flight: c.in_flight.load(Ordering::Relaxed),
                timeouts: c.timeouts.load(Ordering::Relaxed),
                retries: c.retries.load(Ordering::Relaxed),
                strategy: Some(CacheKind::from_code(c.strategy.load(Ordering::Relaxed))),
            })
            .collect()
    }

    /// The sum over subtasks (the strategy if they all have the same), with what subtasks
    /// removed by a rescale counted.
    pub fn stats(&self) -> LookupStats {
        let all = self.subtasks();
        let [hits, misses, timeouts, retries] = lock(&self.inner).retired;
        let mut sum = LookupStats {
            hits,
            misses,
            timeouts,
            retries,
            strategy: all.first().and_then(|s| s.strategy),
            ..Default::default()
        };
        for s in &all {
            sum.hits += s.hits;
            sum.misses += s.misses;
            sum.cache_size += s.cache_size;
            sum.in_flight += s.in_flight;
            sum.timeouts += s.timeouts;
            sum.retries += s.retries;
            if s.strategy != sum.strategy {
                sum.strategy = None;
            }
        }
        sum
    }
}

impl LookupCounters {
    pub(crate) fn set_strategy(&self, kind: CacheKind) {
        self.strategy.store(kind.code(), Ordering::Relaxed);
    }
}
