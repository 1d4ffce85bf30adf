//! Async lookups (`DataStream::lookup`): every record enriched once with its key's value at an
//! exactly-once sink, in input order when ordered; the cache strategy changed live under load
//! (seen in the metrics, no restart) and bad changes refused; timed-out calls retried, then
//! sent to the side output or failing the job by name; faults while calls are in flight lose
//! and repeat nothing; at most `capacity` calls in flight.
//!
//! Every wait is on an event (a metric reached, calls seen in flight, a restart counted),
//! never on the clock. The lookups' futures complete after yielding a few times (out of order)
//! or when the test releases them.

mod common;

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use common::{within_timeout, TempDir, TIMEOUT};
use weir::lookup::{
    AsyncLookup, CacheKind, CacheStrategy, LoadFuture, LookupConfig, LookupFuture, OnTimeout,
};
use weir::source::{Source, SourceStatus};
use weir::{ConfigError, Env, EnvConfig, JobError, JobHandle, RestartStrategy, SourceError};
use weir_testing::{
    encode_display, quiet_injected_panics, read_committed, ExactlyOnce, FaultKind, RecordFaults,
    TwoPhaseFileSink,
};

const KEYS: u64 = 50;
/// The key that never answers, in the timeout tests.
const HANGS: u64 = 7;

/// The dimension table: the value of key `k`.
fn value_of(k: u64) -> u64 {
    k * 1000 + 7
}

/// Pending `left` times (waking itself each time), then ready: calls complete out of order.
struct YieldThen {
    left: u64,
}

impl Future for YieldThen {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.left == 0 {
            return Poll::Ready(());
        }
        self.left -= 1;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// A clock that ticks every millisecond on a thread of its own and wakes the calls waiting
/// for it: a service's latency, without sleeping on the subtask's thread.
struct Ticker {
    ticks: AtomicU64,
    waiting: Mutex<Vec<Waker>>,
}

fn ticker() -> &'static Ticker {
    static TICKER: std::sync::OnceLock<&'static Ticker> = std::sync::OnceLock::new();
    TICKER.get_or_init(|| {
        let t: &'static Ticker = Box::leak(Box::new(Ticker {
            ticks: AtomicU64::new(0),
            waiting: Mutex::new(Vec::new()),
        }));
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(1));
            t.ticks.fetch_add(1, Ordering::SeqCst);
            let woken = std::mem::take(&mut *t.waiting.lock().unwrap());
            woken.into_iter().for_each(Waker::wake);
        });
        t
    })
}

/// Ready once the ticker has ticked twice (1 to 2 ms from now).
async fn latency() {
    let t = ticker();
    let until = t.ticks.load(Ordering::SeqCst) + 2;
    futures::future::poll_fn(move |cx| {
        if t.ticks.load(Ordering::SeqCst) >= until {
            return Poll::Ready(());
        }
        t.waiting.lock().unwrap().push(cx.waker().clone());
        // A tick between the look and the registration is seen here.
        if t.ticks.load(Ordering::SeqCst) >= until {
            return Poll::Ready(());
        }
        Poll::Pending
    })
    .await
}

/// Calls in flight as the service sees them: from `lookup` until the future completes or is
/// dropped (timed out).
#[derive(Default)]
struct Calls {
    now: AtomicU64,
    max: AtomicU64,
    total: AtomicU64,
}

struct CallGuard(Arc<Calls>);

impl Calls {
    fn enter(self: &Arc<Self>) -> CallGuard {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(n, Ordering::SeqCst);
        self.total.fetch_add(1, Ordering::SeqCst);
        CallGuard(self.clone())
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Permits the test hands out: a call waits for one before it answers.
#[derive(Clone, Default)]
struct Permits(Arc<Mutex<PermitState>>);

#[derive(Default)]
struct PermitState {
    available: u64,
    unlimited: bool,
    waiting: Vec<Waker>,
}

impl Permits {
    fn give(&self, n: u64) {
        let mut s = self.0.lock().unwrap();
        s.available += n;
        s.waiting.drain(..).for_each(Waker::wake);
    }
    fn open(&self) {
        let mut s = self.0.lock().unwrap();
        s.unlimited = true;
        s.waiting.drain(..).for_each(Waker::wake);
    }
    async fn take(self) {
        futures::future::poll_fn(move |cx| {
            let mut s = self.0.lock().unwrap();
            if s.unlimited {
                return Poll::Ready(());
            }
            if s.available > 0 {
                s.available -= 1;
                return Poll::Ready(());
            }
            s.waiting.push(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}

/// The lookup of every test: key `id % KEYS`, value [`value_of`], out `(id, value)`.
#[derive(Clone, Default)]
struct Dim {
    /// This key never answers.
    hang: Option<u64>,
    /// Calls wait for a permit.
    permits: Option<Permits>,
    /// Panics in `enrich` at these ids.
    faults: Option<RecordFaults<u64>>,
    /// Calls take a millisecond or two (else they complete after a few polls).
    latency: bool,
    calls: Arc<Calls>,
}

impl AsyncLookup<u64> for Dim {
    type Key = u64;
    type Value = u64;
    type Out = (u64, u64);
    type Error = String;

    fn key(&mut self, id: &u64) -> u64 {
        id % KEYS
    }

    fn lookup(&mut self, key: &u64) -> LookupFuture<u64, String> {
        let key = *key;
        let guard = self.calls.enter();
        let hangs = self.hang == Some(key);
        let permits = self.permits.clone();
        let slow = self.latency;
        Box::pin(async move {
            let _guard = guard;
            if slow {
                latency().await;
            }
            if hangs {
                futures::future::pending::<()>().await;
            }
            if let Some(p) = permits {
                p.take().await;
            }
            YieldThen { left: key % 4 }.await;
            Ok(value_of(key))
        })
    }

    fn enrich(&mut self, id: u64, value: &u64) -> (u64, u64) {
        if let Some(f) = &self.faults {
            f.check(&id);
        }
        (id, *value)
    }

    fn load_all(&mut self) -> Option<LoadFuture<u64, u64, String>> {
        Some(Box::pin(async {
            YieldThen { left: 3 }.await;
            Ok((0..KEYS).map(|k| (k, value_of(k))).collect())
        }))
    }
}

fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn checkpointed(dir: &TempDir) -> EnvConfig {
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(Duration::from_millis(20));
    cfg.checkpoint.directory = dir.path().join("checkpoints");
    cfg
}

/// The committed `id value` lines of `dir`: checks every id of `expected` is there once
/// with its key's value; returns the ids in file order (by subtask, then checkpoint).
fn committed_ids(dir: &Path, expected: impl IntoIterator<Item = u64>) -> Vec<u64> {
    let committed = read_committed(dir).expect("read the sink's output");
    assert_eq!(committed.uncommitted_files, 0, "the job finished");
    let ids: Vec<u64> = committed
        .lines
        .iter()
        .map(|line| {
            let (id, v) = line.split_once(' ').expect("`id value` lines");
            let (id, v): (u64, u64) = (id.parse().unwrap(), v.parse().unwrap());
            assert_eq!(
                v,
                value_of(id % KEYS),
                "id {id} enriched with its key's value"
            );
            id
        })
        .collect();
    let report = ExactlyOnce::new(expected).check(ids.iter().copied());
    assert!(report.is_exactly_once(), "{report}");
    ids
}

/// Places where the next id is smaller than the one before.
fn descents(ids: &[u64]) -> usize {
    ids.windows(2).filter(|w| w[1] < w[0]).count()
}

#[test]
fn every_id_is_enriched_once_and_ordered_mode_keeps_input_order() {
    let n = 20_000;
    for ordered in [true, false] {
        let dir = TempDir::new("lookup-exact");
        let out = dir.path().join("out");
        let env = Env::with_config(checkpointed(&dir));
        let config = LookupConfig::new().capacity(32).cache(CacheStrategy::Lru {
            size: 16,
            ttl: None,
        });
        let config = if ordered { config } else { config.unordered() };
        let metrics = config.metrics();
        // Two chains source -> lookup -> format -> sink (forward): each sink subtask gets one
        // lookup subtask's output.
        let (enriched, _) = env
            .generate(n, |i| i)
            .set_parallelism(2)
            .lookup(Dim::default(), config);
        let o = out.clone();
        enriched
            .uid("enrich")
            .set_parallelism(2)
            .map(|(id, v): (u64, u64)| format!("{id} {v}"))
            .set_parallelism(2)
            .add_sink("exactly_once", move |cx| {
                TwoPhaseFileSink::create(&o, cx, encode_display::<String>)
            })
            .set_parallelism(2);
        let handle = env.start("lookup-exact").expect("start");
        within_timeout(move || handle.wait()).expect("the job finishes");
        let ids = committed_ids(&out, 0..n);
        let stats = metrics.stats();
        assert_eq!(stats.hits + stats.misses, n, "{stats:?}");
        assert!(
            stats.misses >= KEYS,
            "every key was fetched once at least: {stats:?}"
        );
        assert_eq!((stats.in_flight, stats.timeouts), (0, 0), "{stats:?}");
        if ordered {
            // Increasing per subtask: one descent, where subtask 1's ids start.
            assert!(descents(&ids) <= 1, "ordered: {} descents", descents(&ids));
        }
    }
}

/// Ids 0, 1, 2, ... at most 64 per poll and a poll per millisecond, until told to stop; then
/// it ends and says at which id.
struct Endless {
    next: u64,
    stop: Arc<AtomicBool>,
    ended_at: Arc<AtomicU64>,
}

impl Source<u64> for Endless {
    fn poll_batch(&mut self, out: &mut Vec<u64>, max: usize) -> Result<SourceStatus, SourceError> {
        if self.stop.load(Ordering::SeqCst) {
            self.ended_at.store(self.next, Ordering::SeqCst);
            return Ok(SourceStatus::End);
        }
        let stop = self.next + (max as u64).min(64);
        out.extend(self.next..stop);
        self.next = stop;
        Ok(SourceStatus::Idle {
            until: Some(Duration::from_millis(1)),
        })
    }
    fn position(&self) -> Option<Vec<u8>> {
        Some(self.next.to_le_bytes().to_vec())
    }
    fn seek(&mut self, position: &[u8]) -> Result<(), SourceError> {
        let bytes: [u8; 8] = position.try_into().map_err(|_| SourceError::BadPosition {
            message: format!("8 bytes expected, got {}", position.len()),
        })?;
        self.next = u64::from_le_bytes(bytes);
        Ok(())
    }
}

struct Running {
    handle: JobHandle,
    stop: Arc<AtomicBool>,
    ended_at: Arc<AtomicU64>,
    _dir: TempDir,
    out: std::path::PathBuf,
}

impl Running {
    /// Stops the input, waits for the end, and checks every id once with its value.
    fn finish(self) {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.wait().expect("the job finishes");
        let end = self.ended_at.load(Ordering::SeqCst);
        assert!(end > 0, "the source ran");
        committed_ids(&self.out, 0..end);
    }
}

/// endless ids -> lookup "enrich" -> format (panics when `arm` is set) -> exactly-once sink.
fn start_endless(name: &str, config: LookupConfig, arm: Arc<AtomicBool>) -> Running {
    start_endless_at(name, config, arm, None)
}

/// As [`start_endless`], the lookup and format at `parallelism` if given.
fn start_endless_at(
    name: &str,
    config: LookupConfig,
    arm: Arc<AtomicBool>,
    parallelism: Option<usize>,
) -> Running {
    let dim = Dim {
        latency: parallelism.is_some(),
        ..Default::default()
    };
    let dir = TempDir::new(name);
    let out = dir.path().join("out");
    let mut cfg = checkpointed(&dir);
    cfg.restart = Some(RestartStrategy::FixedDelay {
        attempts: 3,
        delay: Duration::ZERO,
    });
    let env = Env::with_config(cfg);
    let (stop, ended_at) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let (s, e) = (stop.clone(), Arc::clone(&ended_at));
    let (enriched, _) = env
        .add_source("ids", move |_cx| {
            Ok(Endless {
                next: 0,
                stop: s.clone(),
                ended_at: e.clone(),
            })
        })
        .uid("ids")
        .set_parallelism(1)
        .lookup(dim, config);
    let enriched = enriched.uid("enrich");
    let enriched = match parallelism {
        Some(p) => enriched.set_parallelism(p),
        None => enriched,
    };
    let o = out.clone();
    enriched
        .map(move |(id, v): (u64, u64)| {
            if arm.swap(false, Ordering::SeqCst) {
                panic!("injected fault: downstream of the lookup");
            }
            format!("{id} {v}")
        })
        .uid("format")
        .add_sink("exactly_once", move |cx| {
            TwoPhaseFileSink::create(&o, cx, encode_display::<String>)
        })
        .uid("exactly_once")
        .set_parallelism(1);
    Running {
        handle: env.start(name).expect("start"),
        stop,
        ended_at,
        _dir: dir,
        out,
    }
}

fn restarts(job: &JobHandle) -> u64 {
    job.checkpoint_stats().map_or(0, |s| s.num_restarts)
}

#[test]
fn the_cache_strategy_changes_live_under_load_and_bad_changes_are_refused() {
    let config = LookupConfig::new().cache(CacheStrategy::All);
    let metrics = config.metrics();
    let job = start_endless("lookup-live", config, Arc::default());
    let h = &job.handle;
    wait_until("the loaded cache answers", || {
        let s = metrics.stats();
        s.strategy == Some(CacheKind::All) && s.hits >= 2_000
    });
    let s = metrics.stats();
    assert_eq!(
        (s.misses, s.cache_size),
        (0, KEYS),
        "every key was loaded: {s:?}"
    );

    // Refused, naming what is wrong; nothing changes.
    match h.update_config("enrich", "cache", "bogus") {
        Err(e @ ConfigError::BadValue { .. }) => {
            let text = e.to_string();
            assert!(text.contains("`cache`") && text.contains("bogus"), "{text}");
            assert!(text.contains("none|all|lru"), "{text}");
        }
        other => panic!("cache=bogus: {other:?}"),
    }
    match h.update_config("enrich", "cache.size", "-1") {
        Err(e @ ConfigError::BadValue { .. }) => {
            assert!(e.to_string().contains("`cache.size`"), "{e}")
        }
        other => panic!("cache.size=-1: {other:?}"),
    }
    match h.update_config("enrich", "cache.colour", "red") {
        Err(ConfigError::UnknownKey { key, known, .. }) => {
            assert_eq!(key, "cache.colour");
            assert!(known.iter().any(|k| k == "cache.ttl"), "{known:?}");
        }
        other => panic!("an unknown key: {other:?}"),
    }
    assert!(h.update_config("enrich", "timeout", "soon").is_err());
    let hits = metrics.stats().hits;
    wait_until("more records were answered", || {
        metrics.stats().hits > hits + 500
    });
    let s = metrics.stats();
    assert_eq!(
        (s.strategy, s.misses, s.cache_size),
        (Some(CacheKind::All), 0, KEYS),
        "refused changes changed nothing: {s:?}"
    );

    // An LRU of 10 entries over 50 keys in turn: every key is evicted before it comes again.
    h.update_config("enrich", "cache.size", "10")
        .expect("cache.size=10");
    h.update_config("enrich", "cache", "lru")
        .expect("cache=lru");
    wait_until("the LRU misses its evicted keys", || {
        let s = metrics.stats();
        s.strategy == Some(CacheKind::Lru) && s.misses > 5 * KEYS
    });
    assert!(metrics.stats().cache_size <= 10, "{:?}", metrics.stats());
    for (key, value) in [
        ("cache.ttl", "500ms"),
        ("timeout", "2s"),
        ("capacity", "8"),
        ("retries", "1"),
    ] {
        h.update_config("enrich", key, value)
            .unwrap_or_else(|e| panic!("{key}={value}: {e}"));
    }
    h.update_config("enrich", "cache", "none")
        .expect("cache=none");
    wait_until("no cache", || {
        let s = metrics.stats();
        s.strategy == Some(CacheKind::None) && s.cache_size == 0
    });
    assert_eq!(restarts(h), 0, "numRestarts: the changes needed no restart");
    assert!(h.monitor().failures().is_empty());
    job.finish();
}

#[test]
fn a_restarted_subtask_applies_the_live_changes_again() {
    quiet_injected_panics();
    let arm = Arc::new(AtomicBool::new(false));
    let config = LookupConfig::new().cache(CacheStrategy::All);
    let metrics = config.metrics();
    let job = start_endless("lookup-reapply", config, arm.clone());
    let h = &job.handle;
    wait_until("the loaded cache answers", || metrics.stats().hits >= 1_000);
    h.update_config("enrich", "cache.size", "10")
        .expect("cache.size=10");
    h.update_config("enrich", "cache", "lru")
        .expect("cache=lru");
    wait_until("the change took effect", || {
        metrics.stats().strategy == Some(CacheKind::Lru)
    });
    let before = metrics.stats().misses;
    arm.store(true, Ordering::SeqCst);
    wait_until("the job restarted", || restarts(h) == 1);
    // The new instance starts from the job's config (`all`) and applies the change again.
    wait_until("the restarted lookup misses again", || {
        metrics.stats().misses > before + 5 * KEYS
    });
    let s = metrics.stats();
    assert_eq!(s.strategy, Some(CacheKind::Lru), "{s:?}");
    assert!(s.cache_size <= 10, "{s:?}");
    job.finish();
}

/// The enriched records and the timed-out ones.
type Outputs = (Vec<(u64, u64)>, Vec<u64>);

/// ids 0..n -> lookup "enrich" of `dim` -> (enriched, timed out), both collected.
fn run_with_timeouts(
    name: &str,
    n: u64,
    dim: Dim,
    config: LookupConfig,
) -> Result<Outputs, JobError> {
    let env = Env::new();
    let (enriched, timed_out) = env.generate(n, |i| i).lookup(dim, config);
    let (enriched, timed_out) = (enriched.uid("enrich").collect(), timed_out.collect());
    let handle = env.start(name)?;
    within_timeout(move || handle.wait())?;
    Ok((enriched.take(), timed_out.take()))
}

#[test]
fn a_call_that_never_answers_is_retried_then_sent_to_the_side_output() {
    let n = 1_000;
    let dim = Dim {
        hang: Some(HANGS),
        ..Default::default()
    };
    let calls = dim.calls.clone();
    let config = LookupConfig::new()
        .timeout(Duration::from_millis(50))
        .retries(1)
        .on_timeout(OnTimeout::SideOutput);
    let metrics = config.metrics();
    let (enriched, timed_out) = run_with_timeouts("lookup-side", n, dim, config).expect("job");
    let hanging: Vec<u64> = (0..n).filter(|i| i % KEYS == HANGS).collect();
    assert_eq!(timed_out, hanging, "the timed-out records, in order");
    let expected: Vec<(u64, u64)> = (0..n)
        .filter(|i| i % KEYS != HANGS)
        .map(|i| (i, value_of(i % KEYS)))
        .collect();
    assert_eq!(enriched, expected, "the others, enriched and in order");
    let s = metrics.stats();
    let k = hanging.len() as u64;
    assert_eq!((s.timeouts, s.retries, s.in_flight), (2 * k, k, 0), "{s:?}");
    assert_eq!(
        calls.now.load(Ordering::SeqCst),
        0,
        "timed-out calls were dropped"
    );
}

#[test]
fn retries_that_all_time_out_fail_the_job_naming_operator_and_key() {
    let dim = Dim {
        hang: Some(HANGS),
        ..Default::default()
    };
    let config = LookupConfig::new()
        .timeout(Duration::from_millis(30))
        .retries(2);
    let metrics = config.metrics();
    let e = run_with_timeouts("lookup-fail", 1_000, dim, config).unwrap_err();
    let text = e.to_string();
    match &e {
        JobError::LookupFailed {
            uid, subtask, key, ..
        } => assert_eq!((uid.as_str(), *subtask, key.as_str()), ("enrich", 0, "7")),
        other => panic!("expected LookupFailed, got {other:?}"),
    }
    assert!(
        text.contains("`enrich`") && text.contains("key 7"),
        "{text}"
    );
    assert!(
        text.contains("timed out") && text.contains("3 attempts"),
        "{text}"
    );
    let s = metrics.stats();
    assert!(s.retries >= 2 && s.timeouts >= 3, "{s:?}");
}

#[test]
fn faults_while_calls_are_in_flight_lose_and_repeat_nothing() {
    quiet_injected_panics();
    let n = 20_000;
    // A panic downstream of the lookup, then one in the lookup's own function.
    for (faulty, ordered) in [("format", true), ("enrich", false)] {
        let faults = RecordFaults::new(faulty, FaultKind::Panic, vec![3_000u64, 12_000]);
        let dir = TempDir::new("lookup-faults");
        let out = dir.path().join("out");
        let mut cfg = checkpointed(&dir);
        cfg.checkpoint.interval = Some(Duration::from_millis(10));
        cfg.restart = Some(RestartStrategy::FixedDelay {
            attempts: 5,
            delay: Duration::ZERO,
        });
        cfg.faults = faults.plan().clone();
        let env = Env::with_config(cfg);
        let dim = Dim {
            faults: (faulty == "enrich").then(|| faults.clone()),
            latency: true,
            ..Default::default()
        };
        let calls = dim.calls.clone();
        let config = LookupConfig::new().capacity(64);
        let config = if ordered { config } else { config.unordered() };
        let (enriched, _) = env.generate(n, |i| i).lookup(dim, config);
        let f = faults.clone();
        let format = move |(id, v): (u64, u64)| {
            if faulty == "format" {
                f.check(&id);
            }
            format!("{id} {v}")
        };
        let o = out.clone();
        enriched
            .uid("enrich")
            .map(format)
            .uid("format")
            .add_sink("exactly_once", move |cx| {
                TwoPhaseFileSink::create(&o, cx, encode_display::<String>)
            });
        let handle = env.start("lookup-faults").expect("start");
        let result = within_timeout(move || handle.wait()).expect("the job recovers");
        assert_eq!(faults.fired(), 2, "{faulty}: {faults:?}");
        let restarts = result.checkpoints.map_or(0, |c| c.num_restarts);
        assert!(restarts >= 2, "{faulty}: {restarts} restarts");
        committed_ids(&out, 0..n);
        assert!(
            calls.total.load(Ordering::SeqCst) >= n,
            "a call per record at least"
        );
    }
}

#[test]
fn at_most_capacity_calls_are_in_flight() {
    let n = 300;
    let k = 4;
    let permits = Permits::default();
    let dim = Dim {
        permits: Some(permits.clone()),
        ..Default::default()
    };
    let calls = dim.calls.clone();
    let config = LookupConfig::new().capacity(k as usize);
    let metrics = config.metrics();
    let env = Env::new();
    let (enriched, _) = env.generate(n, |i| i).lookup(dim, config);
    let out = enriched.uid("enrich").collect();
    let handle = env.start("lookup-capacity").expect("start");
    for round in 0..10 {
        wait_until(&format!("round {round}: {k} calls in flight"), || {
            calls.now.load(Ordering::SeqCst) == k
        });
        let s = metrics.stats();
        assert!(s.in_flight <= k, "{s:?}");
        assert_eq!(calls.max.load(Ordering::SeqCst), k, "never more than {k}");
        permits.give(k);
    }
    permits.open();
    within_timeout(move || handle.wait()).expect("the job finishes");
    assert_eq!(calls.max.load(Ordering::SeqCst), k, "never more than {k}");
    let expected: Vec<(u64, u64)> = (0..n).map(|i| (i, value_of(i % KEYS))).collect();
    assert_eq!(out.take(), expected);
}

#[test]
fn a_lookup_rescaled_with_calls_in_flight_loses_and_repeats_nothing() {
    let config = LookupConfig::new().capacity(64).cache(CacheStrategy::Lru {
        size: 10,
        ttl: None,
    });
    let metrics = config.metrics();
    let job = start_endless_at("lookup-rescale", config, Arc::default(), Some(2));
    let h = &job.handle;
    wait_until("calls are made", || metrics.stats().misses > 1_000);
    // Calls take a millisecond or more: a rescale's barrier finds some in flight.
    wait_until("calls in flight", || metrics.stats().in_flight > 0);
    for to in [3, 1] {
        let report = h.rescale("enrich", to).expect("the rescale succeeds");
        assert!(
            report
                .changes
                .iter()
                .any(|c| c.uid == "enrich" && c.to == to),
            "{report:?}"
        );
        let misses = metrics.stats().misses;
        wait_until("calls are made at the new parallelism", || {
            metrics.stats().misses > misses + 1_000
        });
    }
    assert_eq!(restarts(h), 0, "no failure");
    assert_eq!(
        metrics.subtasks().len(),
        1,
        "the retired subtasks' gauges are gone"
    );
    job.finish();
}

#[test]
fn a_config_out_of_range_is_refused_before_the_job_starts() {
    for (config, what) in [
        (LookupConfig::new().capacity(0), "lookup capacity"),
        (
            LookupConfig::new().timeout(Duration::ZERO),
            "lookup timeout",
        ),
        (
            LookupConfig::new().cache(CacheStrategy::Lru { size: 0, ttl: None }),
            "lookup cache size",
        ),
    ] {
        let env = Env::new();
        let (enriched, _) = env.generate(10, |i| i).lookup(Dim::default(), config);
        enriched.collect();
        let e = env.execute("lookup-bad-config").unwrap_err();
        assert!(
            matches!(e, JobError::Plan { .. }) && e.to_string().contains(what),
            "{what}: {e}"
        );
    }
}

#[test]
fn a_backed_up_lookup_is_refused_before_the_job_starts_naming_it() {
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(Duration::from_millis(50));
    let env = Env::with_config(cfg);
    let (enriched, _) = env
        .generate(10, |i| i)
        .lookup(Dim::default(), LookupConfig::new());
    enriched.uid("enrich").with_backup().collect();
    let e = env.execute("lookup-backup").unwrap_err();
    let text = e.to_string();
    assert!(
        matches!(e, JobError::Plan { .. }) && text.contains("enrich") && text.contains("lookup"),
        "{text}"
    );
}

/// `GET` `path` of `server`: the JSON body.
fn rest_get(server: &weir::rest::RestServer, path: &str) -> serde_json::Value {
    let mut resp = ureq::get(format!("http://{}{path}", server.addr()))
        .call()
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let text = resp.body_mut().read_to_string().expect("a body");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("GET {path}: {e}: {text}"))
}

#[test]
fn the_lookup_metrics_are_served_over_rest_and_follow_a_live_change() {
    use weir::rest::{RestConfig, RestServer};
    let server = RestServer::start(RestConfig::default()).expect("the server starts");
    let config = LookupConfig::new().cache(CacheStrategy::All);
    let metrics = config.metrics();
    let job = start_endless("lookup-rest", config, Arc::default());
    let h = &job.handle;
    server.register(h.monitor());
    wait_until("the loaded cache answers", || metrics.stats().hits >= 1_000);
    let vid = h
        .vertices()
        .into_iter()
        .find(|v| v.operators.iter().any(|o| o == "enrich"))
        .expect("the lookup's vertex")
        .id;
    let base = format!("/jobs/{}/vertices/{vid}/metrics", h.id());
    let names = rest_get(&server, &base);
    let listed: Vec<&str> = names
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    for n in [
        "0.enrich.cacheHits",
        "0.enrich.cacheStrategy",
        "0.enrich.cacheSize",
    ] {
        assert!(listed.contains(&n), "{n} in {listed:?}");
    }
    let read = |name: &str| -> String {
        let body = rest_get(&server, &format!("{base}?get=0.enrich.{name}"));
        body[0]["value"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: {body}"))
            .to_owned()
    };
    assert_eq!(read("cacheStrategy"), "all");
    assert_eq!(read("cacheSize"), KEYS.to_string());
    assert!(read("cacheHits").parse::<u64>().expect("a count") >= 1_000);
    // The live change through the settings call, seen over REST.
    let changes = [
        ("operator.enrich.cache.size".to_owned(), "10".to_owned()),
        ("operator.enrich.cache".to_owned(), "lru".to_owned()),
    ];
    h.update_settings(&changes).expect("a live change");
    wait_until("the strategy over REST", || read("cacheStrategy") == "lru");
    wait_until("misses over REST", || {
        read("cacheMisses").parse::<u64>().expect("a count") > KEYS
    });
    let prom = ureq::get(format!("http://{}/metrics", server.addr()))
        .call()
        .expect("metrics")
        .body_mut()
        .read_to_string()
        .expect("text");
    assert!(
        prom.lines().any(|l| l.starts_with("weir_operator_gauge")
            && l.contains("name=\"cacheMisses\"")
            && l.contains("operator=\"enrich\"")),
        "{prom}"
    );
    assert_eq!(restarts(h), 0);
    job.finish();
}
