//! Faults keyed by record ([`RecordFaults`]), for user operators, and panic hooks that keep
//! the expected panics of injected faults off stderr ([`quiet_injected_panics`],
//! [`quiet_released_hangs`]).
//!
//! A [`FaultPlan`] fault fires at the `K`-th record an operator instance sees in the current
//! run. That count is ambiguous for a second fault under restart-all: a restarted instance
//! counts from zero at its restored position, which is not known in advance. A record fault
//! fires instead the first time an instance sees a chosen *record* (compared by a key of the
//! operator's choosing: the record itself, an id field, a line): that record is the same in
//! every restart attempt, in a promoted backup and in a job restarted from a savepoint. Each
//! fault fires once per [`RecordFaults`] (its state is shared by every clone: by every
//! instance of the operator in every attempt), so a job with `k` faults fails `k` times.
//!
//! Use it in your own operator: call [`RecordFaults::check`] before processing a record
//! (or wrap a closure with [`RecordFaults::wrap`]).
//!
//! ```
//! use std::time::Duration;
//! use weir_testing::{quiet_injected_panics, ExactlyOnce, FaultKind, RecordFaults};
//! quiet_injected_panics();
//! let faults = RecordFaults::new("double", FaultKind::Panic, vec![300u64, 700]);
//! let mut cfg = weir::EnvConfig::default();
//! cfg.checkpoint.interval = Some(Duration::from_millis(10));
//! cfg.restart = Some(weir::RestartStrategy::FixedDelay { attempts: 5, delay: Duration::ZERO });
//! cfg.faults = faults.plan().clone();
//! let env = weir::Env::with_config(cfg);
//! let out = env.generate(1_000, |i| i).map(faults.wrap(|x: u64| x * 2)).uid("double").collect();
//! env.execute("record-faults-doc").unwrap();
//! assert_eq!(faults.fired(), 2); // the job failed twice, and recovered
//! ExactlyOnce::new((0..1_000).map(|i| i * 2)).check(out.take()).assert_exactly_once();
//! ```

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Once};
use std::time::Duration;

use weir::fault::{FaultKind, FaultPlan};

/// Faults that fire the first time an operator instance sees chosen records (see the module
/// documentation). Clones share the faults: put one in your operator (its prototype is cloned
/// per subtask, per attempt and for a backup) and keep one to read [`fired`](Self::fired).
///
/// How each fails ([`FaultKind`]):
/// - `Panic`: `panic!("injected fault: ...")` before the record is processed.
/// - `Hang`: the thread sleeps (in 5 ms steps) until the job releases the hung subtasks of
///   [`plan`](Self::plan) (when it stops or restarts), then panics with `injected hang of ...
///   released`. Put that plan into `EnvConfig::faults`, or a hang lasts until the job's
///   5 s join timeout.
/// - `StopArbiter`: stops the arbiter thread the instance runs on and returns: its loop ends
///   after the current poll, so the instance may process (and emit) more records first.
/// - `Pause(d)`: blocks the thread for `d` and returns.
///
/// ```
/// use weir_testing::{FaultKind, RecordFaults};
/// let faults = RecordFaults::new("op", FaultKind::Pause(std::time::Duration::ZERO), vec!["b"]);
/// assert_eq!(faults.check(&"a"), None);
/// assert_eq!(faults.check(&"b"), Some(0)); // fired (a pause returns)
/// assert_eq!(faults.check(&"b"), None); // once
/// assert_eq!(faults.fired(), 1);
/// ```
pub struct RecordFaults<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for RecordFaults<K> {
    fn clone(&self) -> Self {
        RecordFaults {
            inner: self.inner.clone(),
        }
    }
}

// The faults' state is atomics, consistent at every point a fault can panic; the `on_fire`
// callback is the user's, called before the fault fails. A panic does not break them.
impl<K> std::panic::RefUnwindSafe for RecordFaults<K> {}
impl<K> std::panic::UnwindSafe for RecordFaults<K> {}

type OnFire = Box<dyn Fn(usize) + Send + Sync>;

struct Inner<K> {
    name: String,
    kind: FaultKind,
    records: Vec<K>,
    fired: Vec<AtomicBool>,
    /// In order: the fault the next record can fire (the others wait for it).
    next: AtomicUsize,
    in_order: bool,
    plan: FaultPlan,
    on_fire: Option<OnFire>,
}

impl<K: fmt::Debug> fmt::Debug for RecordFaults<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordFaults")
            .field("name", &self.inner.name)
            .field("kind", &self.inner.kind)
            .field("records", &self.inner.records)
            .field(
                "fired",
                &self
                    .inner
                    .fired
                    .iter()
                    .filter(|f| f.load(Ordering::SeqCst))
                    .count(),
            )
            .field("in_order", &self.inner.in_order)
            .finish()
    }
}

impl<K: PartialEq + Send + Sync + 'static> RecordFaults<K> {
    /// Faults of `kind` at `records` (keys compared with `==`), in the operator `name` (used in
    /// the panic messages). Any of them fires when its record comes; see
    /// [`in_order`](Self::in_order).
    ///
    /// ```
    /// use weir_testing::{FaultKind, RecordFaults};
    /// let f = RecordFaults::new("parse", FaultKind::Panic, vec![3u64, 5]);
    /// assert_eq!((f.len(), f.fired()), (2, 0));
    /// assert_eq!(f.check(&4), None);
    /// assert!(std::panic::catch_unwind(|| f.check(&5)).is_err());
    /// assert!(f.has_fired(1) && !f.has_fired(0));
    /// ```
    pub fn new(name: &str, kind: FaultKind, records: Vec<K>) -> Self {
        let fired = records.iter().map(|_| AtomicBool::new(false)).collect();
        RecordFaults {
            inner: Arc::new(Inner {
                name: name.to_owned(),
                kind,
                records,
                fired,
                next: AtomicUsize::new(0),
                in_order: false,
                plan: FaultPlan::new(Vec::new()),
                on_fire: None,
            }),
        }
    }

    fn configure(&mut self) -> &mut Inner<K> {
        Arc::get_mut(&mut self.inner)
            .expect("configure RecordFaults before cloning it or checking a record")
    }

    /// Fires the faults only in the order given: fault `k + 1` waits until fault `k` has
    /// fired (its record seen again earlier, in a replay, does nothing). Configure before
    /// cloning.
    ///
    /// ```
    /// use weir_testing::{FaultKind, RecordFaults};
    /// let f = RecordFaults::new("op", FaultKind::Pause(Default::default()), vec![1u8, 2]).in_order();
    /// assert_eq!(f.check(&2), None); // waits for fault 0
    /// assert_eq!(f.check(&1), Some(0));
    /// assert_eq!(f.check(&2), Some(1));
    /// ```
    pub fn in_order(mut self) -> Self {
        self.configure().in_order = true;
        self
    }

    /// Releases hangs with `plan` (put that plan into `EnvConfig::faults`) instead of a plan
    /// of their own: for a job that also has [`FaultPlan`] faults. Configure before cloning.
    ///
    /// ```
    /// use weir_testing::{Fault, FaultKind, FaultPlan, RecordFaults};
    /// let plan = FaultPlan::new(vec![Fault::new("sink", FaultKind::Panic, 10)]);
    /// let f = RecordFaults::new("op", FaultKind::Hang, vec![7u64]).released_by(&plan);
    /// assert_eq!(f.plan(), &plan);
    /// ```
    pub fn released_by(mut self, plan: &FaultPlan) -> Self {
        self.configure().plan = plan.clone();
        self
    }

    /// Calls `f(k)` in the failing thread when fault `k` fires, just before it fails (to take
    /// the time of the fault, say). Configure before cloning.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// use weir_testing::{FaultKind, RecordFaults};
    /// let seen = Arc::new(AtomicUsize::new(usize::MAX));
    /// let s = seen.clone();
    /// let f = RecordFaults::new("op", FaultKind::Pause(Default::default()), vec!['x', 'y'])
    ///     .on_fire(move |k| s.store(k, Ordering::SeqCst));
    /// f.check(&'y');
    /// assert_eq!(seen.load(Ordering::SeqCst), 1);
    /// ```
    pub fn on_fire(mut self, f: impl Fn(usize) + Send + Sync + 'static) -> Self {
        self.configure().on_fire = Some(Box::new(f));
        self
    }

    /// The plan whose release ends a hang: put it into `EnvConfig::faults`.
    ///
    /// ```
    /// use weir_testing::{FaultKind, RecordFaults};
    /// let f = RecordFaults::new("op", FaultKind::Hang, vec![1u64]);
    /// let mut cfg = weir::EnvConfig::default();
    /// cfg.faults = f.plan().clone();
    /// assert!(cfg.faults.is_empty()); // no plan faults, only the release
    /// ```
    pub fn plan(&self) -> &FaultPlan {
        &self.inner.plan
    }

    /// The number of faults.
    ///
    /// ```
    /// let f = weir_testing::RecordFaults::new("op", weir_testing::FaultKind::Panic, vec![1, 2, 3]);
    /// assert_eq!(f.len(), 3);
    /// ```
    pub fn len(&self) -> usize {
        self.inner.records.len()
    }

    /// Whether there are no faults.
    ///
    /// ```
    /// let f = weir_testing::RecordFaults::<u64>::new("op", weir_testing::FaultKind::Panic, vec![]);
    /// assert!(f.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.inner.records.is_empty()
    }

    /// The key of fault `k`'s record.
    ///
    /// ```
    /// let f = weir_testing::RecordFaults::new("op", weir_testing::FaultKind::Panic, vec![10, 20]);
    /// assert_eq!(f.record(1), Some(&20));
    /// ```
    pub fn record(&self, k: usize) -> Option<&K> {
        self.inner.records.get(k)
    }

    /// How many faults have fired.
    ///
    /// ```
    /// let f = weir_testing::RecordFaults::new("op", weir_testing::FaultKind::Panic, vec![1]);
    /// assert_eq!(f.fired(), 0);
    /// ```
    pub fn fired(&self) -> usize {
        self.inner
            .fired
            .iter()
            .filter(|f| f.load(Ordering::SeqCst))
            .count()
    }

    /// Whether fault `k` has fired.
    ///
    /// ```
    /// let f = weir_testing::RecordFaults::new("op", weir_testing::FaultKind::Panic, vec![1]);
    /// assert!(!f.has_fired(0));
    /// ```
    pub fn has_fired(&self, k: usize) -> bool {
        self.inner
            .fired
            .get(k)
            .is_some_and(|f| f.load(Ordering::SeqCst))
    }

    /// [`in_order`](Self::in_order): the last fault that fired, if any (in any order: the
    /// highest-numbered one that fired).
    ///
    /// ```
    /// use weir_testing::{FaultKind, RecordFaults};
    /// let f = RecordFaults::new("op", FaultKind::Pause(Default::default()), vec![1u8, 2]).in_order();
    /// assert_eq!(f.last_fired(), None);
    /// f.check(&1);
    /// assert_eq!(f.last_fired(), Some(0));
    /// ```
    pub fn last_fired(&self) -> Option<usize> {
        if self.inner.in_order {
            return self.inner.next.load(Ordering::SeqCst).checked_sub(1);
        }
        self.inner
            .fired
            .iter()
            .rposition(|f| f.load(Ordering::SeqCst))
    }

    /// Call before processing a record whose key is `record`: if it is a fault's record and
    /// that fault has not fired yet, fires it, which for `Panic` and `Hang` does not return.
    /// `Some(k)` if fault `k` fired and returned (`StopArbiter`, `Pause`); `None` otherwise.
    ///
    /// ```
    /// use weir_testing::{FaultKind, RecordFaults};
    /// let f = RecordFaults::new("op", FaultKind::Panic, vec![2u64]);
    /// assert_eq!(f.check(&1), None);
    /// let panic = std::panic::catch_unwind(|| f.check(&2)).unwrap_err();
    /// assert!(panic.downcast_ref::<String>().unwrap().starts_with("injected fault"));
    /// assert_eq!(f.check(&2), None); // fired once
    /// ```
    #[inline]
    pub fn check(&self, record: &K) -> Option<usize> {
        let i = &*self.inner;
        let k = if i.in_order {
            let k = i.next.load(Ordering::Relaxed);
            if i.records.get(k).is_none_or(|r| r != record)
                || i.fired[k].swap(true, Ordering::SeqCst)
            {
                return None;
            }
            i.next.store(k + 1, Ordering::SeqCst);
            k
        } else {
            let k = i.records.iter().position(|r| r == record)?;
            if i.fired[k].swap(true, Ordering::SeqCst) {
                return None;
            }
            k
        };
        if let Some(f) = &i.on_fire {
            f(k);
        }
        tracing::warn!(operator = %i.name, fault = k, kind = ?i.kind, "injecting a record fault");
        match i.kind {
            FaultKind::Panic => panic!(
                "injected fault: operator `{}` panics at record fault {k}",
                i.name
            ),
            FaultKind::Hang => {
                while !i.plan.is_released() {
                    std::thread::sleep(Duration::from_millis(5));
                }
                panic!("injected hang of `{}` released", i.name);
            }
            FaultKind::StopArbiter => {
                // The arbiter's loop ends after this poll: every actor on it is dropped and
                // reported lost.
                actix_rt::Arbiter::current().stop();
            }
            FaultKind::Pause(d) => std::thread::sleep(d),
        }
        Some(k)
    }

    /// `f` with the faults checked before each record (the record is its own key): for
    /// `map`, or any closure that takes records by value.
    ///
    /// ```
    /// use weir_testing::{FaultKind, RecordFaults};
    /// let faults = RecordFaults::new("double", FaultKind::Pause(Default::default()), vec![5u64]);
    /// let env = weir::Env::new();
    /// let out = env.generate(10, |i| i).map(faults.wrap(|x: u64| x * 2)).collect();
    /// env.execute("wrap-doc").unwrap();
    /// assert_eq!(out.take().len(), 10);
    /// assert_eq!(faults.fired(), 1);
    /// ```
    pub fn wrap<U, F>(&self, mut f: F) -> impl FnMut(K) -> U + Clone + Send + 'static
    where
        F: FnMut(K) -> U + Clone + Send + 'static,
    {
        let faults = self.clone();
        move |record| {
            faults.check(&record);
            f(record)
        }
    }
}

/// The text of a panic (a `String` or `&str` payload; empty otherwise), for panic hooks
/// that tell injected faults from real failures.
pub fn panic_message(info: &std::panic::PanicHookInfo<'_>) -> String {
    let payload = info.payload();
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Whether `message` is the panic a released hang ends with.
fn is_released_hang(message: &str) -> bool {
    message.starts_with("injected hang of")
}

/// Installs, once per process, a panic hook that silences the panic a released hang ends with
/// (`injected hang of ... released`, in the old attempt's thread when the job restarts or
/// ends, from a [`FaultKind::Hang`] of a [`FaultPlan`] or of [`RecordFaults`]): it is
/// expected, and printing it (with a backtrace if `RUST_BACKTRACE` is set) would hold up the
/// stop of that thread's arbiter, so the restart. Other panics go to the hook installed before.
///
/// ```
/// weir_testing::quiet_released_hangs();
/// weir_testing::quiet_released_hangs(); // once per process
/// let r = std::panic::catch_unwind(|| panic!("injected hang of `op` released"));
/// assert!(r.is_err()); // unwinds as before, without a word on stderr
/// ```
pub fn quiet_released_hangs() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !is_released_hang(&panic_message(info)) {
                previous(info)
            }
        }));
    });
}

/// Installs, once per process, a panic hook for injected faults: a panic `injected fault:
/// ...` prints that one line, prefixed by `prefix` (the default hook, with `RUST_BACKTRACE`
/// set, would capture and print a backtrace in the failing thread before it unwinds, tens of
/// milliseconds that a recovery measurement would count), and `injected hang of ...
/// released` prints nothing. Other panics go to the hook installed before. The prefix of the
/// first call stays.
///
/// ```
/// weir_testing::quiet_injected_panics_with("my-test: ");
/// let r = std::panic::catch_unwind(|| panic!("injected fault: operator `op` panics"));
/// assert!(r.is_err()); // stderr: "my-test: injected fault: operator `op` panics"
/// ```
pub fn quiet_injected_panics_with(prefix: &str) {
    static ONCE: Once = Once::new();
    let prefix = prefix.to_owned();
    ONCE.call_once(move || {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = panic_message(info);
            if message.starts_with("injected fault") {
                eprintln!("{prefix}{message}");
            } else if !is_released_hang(&message) {
                previous(info)
            }
        }));
    });
}

/// [`quiet_injected_panics_with`] without a prefix.
///
/// ```
/// weir_testing::quiet_injected_panics();
/// let r = std::panic::catch_unwind(|| panic!("injected fault: operator `op` panics"));
/// assert!(r.is_err()); // stderr: one line, no backtrace
/// ```
pub fn quiet_injected_panics() {
    quiet_injected_panics_with("");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_fire_once_each_and_in_order_when_asked() {
        let pause = FaultKind::Pause(Duration::ZERO);
        let any = RecordFaults::new("op", pause, vec![3u32, 1]);
        assert_eq!(any.check(&1), Some(1));
        assert_eq!(any.last_fired(), Some(1));
        assert_eq!(any.check(&3), Some(0));
        assert_eq!(any.check(&1), None);
        assert_eq!(any.fired(), 2);

        let ordered = RecordFaults::new("op", pause, vec![3u32, 1]).in_order();
        let clone = ordered.clone();
        assert_eq!(clone.check(&1), None);
        assert_eq!(clone.check(&3), Some(0));
        assert_eq!(ordered.check(&3), None);
        assert_eq!(ordered.check(&1), Some(1));
        assert_eq!(ordered.last_fired(), Some(1));
    }

    #[test]
    fn a_job_releases_the_hangs_of_its_plan_when_it_stops() {
        let faults = RecordFaults::new("op", FaultKind::Hang, vec![u64::MAX]);
        assert!(!faults.plan().is_released());
        let mut cfg = weir::EnvConfig::default();
        cfg.faults = faults.plan().clone();
        let env = weir::Env::with_config(cfg);
        let _ = env
            .generate(10, |i| i)
            .map(faults.wrap(|x: u64| x))
            .collect();
        env.execute("record-faults-released").unwrap();
        assert!(faults.plan().is_released());
        assert_eq!(faults.fired(), 0);
    }

    #[test]
    fn a_hang_waits_for_the_plans_release() {
        let faults = RecordFaults::new("op", FaultKind::Hang, vec![1u8]);
        let f = faults.clone();
        let t = std::thread::spawn(move || std::panic::catch_unwind(|| f.check(&1)));
        while faults.fired() == 0 {
            std::thread::yield_now();
        }
        assert!(!t.is_finished());
        faults.plan().release();
        assert!(t.join().unwrap().is_err(), "a released hang panics");
    }
}
