//! The exactly-once check of what reached a sink: per id, how often it was expected and how
//! often it arrived. An id that arrived more often than expected is *duplicated* (each extra
//! copy counts), one that arrived less often is *missing*, one that was not expected at all
//! is *unexpected*.
//!
//! ```
//! use weir_testing::ExactlyOnce;
//! let env = weir::Env::new();
//! let out = env.generate(1_000, |i| i).map(|x| x * 2).collect();
//! env.execute("exactly-once-doc").unwrap();
//! let report = ExactlyOnce::new((0..1_000u64).map(|i| i * 2)).check(out.take());
//! assert!(report.is_exactly_once(), "{report}");
//! ```

use std::fmt;
use std::hash::Hash;

use rustc_hash::FxHashMap;

/// How many ids of each kind a [`ExactlyOnceReport`] keeps as examples.
pub const EXAMPLES: usize = 10;

/// What a sink must receive: every id as often as it occurs here (usually once).
///
/// ```
/// use weir_testing::ExactlyOnce;
/// let expected = ExactlyOnce::new(["a", "b", "c"]);
/// let report = expected.check(["a", "c", "c", "z"]);
/// assert_eq!((report.duplicates, report.missing, report.unexpected), (1, 1, 1));
/// assert_eq!(report.missing_ids, ["b"]);
/// ```
#[derive(Debug, Clone)]
pub struct ExactlyOnce<Id> {
    want: FxHashMap<Id, u64>,
    total: u64,
}

impl<Id: Hash + Eq + Ord + Clone> ExactlyOnce<Id> {
    /// The expectation of `ids` (an id listed `k` times must arrive `k` times).
    ///
    /// ```
    /// use weir_testing::ExactlyOnce;
    /// let e = ExactlyOnce::new([1u64, 2, 2]);
    /// assert_eq!(e.expected(), 3);
    /// assert!(e.check([2, 1, 2]).is_exactly_once());
    /// assert_eq!(e.check([1, 2]).missing_ids, [2]);
    /// ```
    pub fn new(ids: impl IntoIterator<Item = Id>) -> Self {
        let mut want = FxHashMap::default();
        let mut total = 0;
        for id in ids {
            *want.entry(id).or_insert(0) += 1;
            total += 1;
        }
        ExactlyOnce { want, total }
    }

    /// How many ids are expected (with their multiplicities).
    ///
    /// ```
    /// assert_eq!(weir_testing::ExactlyOnce::new(0..5u32).expected(), 5);
    /// ```
    pub fn expected(&self) -> u64 {
        self.total
    }

    /// Compares the ids that reached the sink (in any order) with the expected ones.
    ///
    /// ```
    /// use weir_testing::ExactlyOnce;
    /// let env = weir::Env::new();
    /// let out = env.generate(100, |i| i).filter(|x| x % 3 != 0).collect();
    /// env.execute("check-doc").unwrap();
    /// let report = ExactlyOnce::new((0..100u64).filter(|x| x % 3 != 0)).check(out.take());
    /// assert_eq!(report.received, 66);
    /// assert!(report.is_exactly_once(), "{report}");
    /// ```
    pub fn check(&self, received: impl IntoIterator<Item = Id>) -> ExactlyOnceReport<Id> {
        let mut seen: FxHashMap<Id, u64> = FxHashMap::default();
        let mut n = 0u64;
        for id in received {
            *seen.entry(id).or_insert(0) += 1;
            n += 1;
        }
        let mut r = ExactlyOnceReport {
            expected: self.total,
            received: n,
            duplicates: 0,
            missing: 0,
            unexpected: 0,
            duplicate_ids: Vec::new(),
            missing_ids: Vec::new(),
            unexpected_ids: Vec::new(),
        };
        let (mut dup, mut missing, mut unexpected) = (Vec::new(), Vec::new(), Vec::new());
        for (id, &got) in &seen {
            match self.want.get(id) {
                None => {
                    r.unexpected += got;
                    unexpected.push(id.clone());
                }
                Some(&w) if got > w => {
                    r.duplicates += got - w;
                    dup.push(id.clone());
                }
                Some(_) => {}
            }
        }
        for (id, &w) in &self.want {
            let got = seen.get(id).copied().unwrap_or(0);
            if got < w {
                r.missing += w - got;
                missing.push(id.clone());
            }
        }
        r.duplicate_ids = smallest(dup);
        r.missing_ids = smallest(missing);
        r.unexpected_ids = smallest(unexpected);
        r
    }
}

/// The [`EXAMPLES`] smallest of `ids`, in order.
fn smallest<Id: Ord>(mut ids: Vec<Id>) -> Vec<Id> {
    if ids.len() > EXAMPLES {
        ids.select_nth_unstable(EXAMPLES - 1);
        ids.truncate(EXAMPLES);
    }
    ids.sort_unstable();
    ids
}

/// The outcome of [`ExactlyOnce::check`]. Its `Display` names the counts and a few ids of
/// each kind; `is_exactly_once` is the verdict.
///
/// ```
/// use weir_testing::ExactlyOnce;
/// let report = ExactlyOnce::new(0..5u64).check([0, 1, 1, 3, 4, 9]);
/// assert!(!report.is_exactly_once());
/// assert_eq!(
///     report.to_string(),
///     "expected 5 ids, received 6: 1 duplicated (e.g. [1]), 1 missing (e.g. [2]), \
///      1 unexpected (e.g. [9])"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExactlyOnceReport<Id> {
    /// Ids expected (with multiplicities).
    pub expected: u64,
    /// Ids received.
    pub received: u64,
    /// Extra copies of expected ids (an id received `k` times more than expected counts `k`).
    pub duplicates: u64,
    /// Expected ids not received (as often as expected).
    pub missing: u64,
    /// Received ids that were not expected at all (every copy counts).
    pub unexpected: u64,
    /// The smallest [`EXAMPLES`] duplicated ids, in order.
    pub duplicate_ids: Vec<Id>,
    /// The smallest [`EXAMPLES`] missing ids, in order.
    pub missing_ids: Vec<Id>,
    /// The smallest [`EXAMPLES`] unexpected ids, in order.
    pub unexpected_ids: Vec<Id>,
}

impl<Id> ExactlyOnceReport<Id> {
    /// Whether every expected id arrived as often as expected, and nothing else did.
    ///
    /// ```
    /// use weir_testing::ExactlyOnce;
    /// assert!(ExactlyOnce::new([7u8, 8]).check([8, 7]).is_exactly_once());
    /// assert!(!ExactlyOnce::new([7u8, 8]).check([8, 8, 7]).is_exactly_once());
    /// ```
    pub fn is_exactly_once(&self) -> bool {
        self.duplicates == 0 && self.missing == 0 && self.unexpected == 0
    }
}

impl<Id: fmt::Debug> ExactlyOnceReport<Id> {
    /// Panics with the report unless the output was exactly once.
    ///
    /// ```
    /// use weir_testing::ExactlyOnce;
    /// ExactlyOnce::new(0..3u64).check([2, 0, 1]).assert_exactly_once();
    /// let bad = std::panic::catch_unwind(|| ExactlyOnce::new(0..3u64).check([0]).assert_exactly_once());
    /// assert!(bad.is_err());
    /// ```
    #[track_caller]
    pub fn assert_exactly_once(&self) {
        assert!(self.is_exactly_once(), "not exactly once: {self}");
    }
}

impl<Id: fmt::Debug> fmt::Display for ExactlyOnceReport<Id> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "expected {} ids, received {}",
            self.expected, self.received
        )?;
        if self.is_exactly_once() {
            return f.write_str(": each exactly once");
        }
        let mut sep = ": ";
        for (n, what, ids) in [
            (self.duplicates, "duplicated", &self.duplicate_ids),
            (self.missing, "missing", &self.missing_ids),
            (self.unexpected, "unexpected", &self.unexpected_ids),
        ] {
            if n > 0 {
                write!(f, "{sep}{n} {what} (e.g. {ids:?})")?;
                sep = ", ";
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_every_extra_and_missing_copy_and_keeps_the_smallest_examples() {
        let e = ExactlyOnce::new((0..100u64).chain([5, 5]));
        let got: Vec<u64> = (20..100).chain([5, 7, 7, 7, 200, 200, 150]).collect();
        let r = e.check(got);
        // 0..20 but 5 and 7 missing, 5 (expected 3 times) came once, 7 came twice too often.
        assert_eq!(r.missing, 18 + 2, "{r}");
        assert_eq!(r.duplicates, 2, "{r}");
        assert_eq!(r.unexpected, 3, "{r}");
        assert_eq!(r.missing_ids, [0, 1, 2, 3, 4, 5, 6, 8, 9, 10]);
        assert_eq!(r.duplicate_ids, [7]);
        assert_eq!(r.unexpected_ids, [150, 200]);
        assert_eq!(r.expected, 102);
        assert_eq!(r.received, 87);
    }

    #[test]
    fn an_exact_match_says_so() {
        let r = ExactlyOnce::new(["x".to_string()]).check(["x".to_string()]);
        assert_eq!(
            r.to_string(),
            "expected 1 ids, received 1: each exactly once"
        );
    }
}
