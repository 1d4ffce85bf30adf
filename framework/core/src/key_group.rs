//! Keys, key groups and which subtask owns them.
//!
//! A key is hashed with a hash that is the same in every process and run (FxHash of the key's
//! `Hash` impl, then a murmur3 finalizer), reduced to one of `max_parallelism` key groups, and a
//! key group belongs to subtask `kg * parallelism / max_parallelism` (Flink's assignment), or,
//! for an operator rebalanced by load, to the subtask a table ([`Owners`]) names
//! ([`balance_by_load`]). Key groups are the unit of state redistribution when an operator is
//! rescaled or rebalanced; this module owns only the arithmetic, not the state, nor the
//! counting of each key group's records (`partition`).

use std::hash::{Hash, Hasher};

/// Default number of key groups, as in Flink.
pub const DEFAULT_MAX_PARALLELISM: usize = 128;

/// A stable 64-bit hash of a key.
#[inline]
pub fn key_hash<K: Hash + ?Sized>(key: &K) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    key.hash(&mut h);
    fmix64(h.finish())
}

/// The key group of a key.
///
/// ```
/// let kg = weir::key_group::key_group_of(&42u64, 128);
/// assert!(kg < 128);
/// assert_eq!(kg, weir::key_group::key_group_of(&42u64, 128));
/// ```
#[inline]
pub fn key_group_of<K: Hash + ?Sized>(key: &K, max_parallelism: usize) -> usize {
    (key_hash(key) % max_parallelism as u64) as usize
}

/// The subtask that owns key group `kg` when the operator runs with `parallelism` subtasks.
///
/// ```
/// use weir::key_group::subtask_for_key_group;
/// assert_eq!(subtask_for_key_group(0, 128, 2), 0);
/// assert_eq!(subtask_for_key_group(127, 128, 2), 1);
/// ```
#[inline]
pub fn subtask_for_key_group(kg: usize, max_parallelism: usize, parallelism: usize) -> usize {
    kg * parallelism / max_parallelism
}

/// The range of key groups owned by `subtask`.
pub fn key_group_range(
    subtask: usize,
    max_parallelism: usize,
    parallelism: usize,
) -> std::ops::Range<usize> {
    let start = (subtask * max_parallelism).div_ceil(parallelism);
    let end = ((subtask + 1) * max_parallelism).div_ceil(parallelism);
    start..end
}

/// Which subtask of a keyed operator owns each key group: by count, contiguous ranges of
/// (nearly) equal size (Flink's assignment, the default), or by load, a table made from the
/// records each key group received ([`balance_by_load`]).
///
/// ```
/// use weir::key_group::Owners;
/// let by_count = Owners::by_count(8, 2);
/// assert_eq!(by_count.owner(3), 0);
/// let by_load = Owners::table(vec![1, 0, 0, 0, 0, 0, 0, 1], 2).unwrap();
/// assert_eq!(by_load.runs_of(1), vec![0..1, 7..8]);
/// assert_eq!(by_load.range_of(1), None);
/// assert_eq!(by_load.range_of(0), Some(1..7));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owners {
    parallelism: usize,
    max_parallelism: usize,
    /// Key group -> subtask, when not by count.
    table: Option<std::sync::Arc<[u32]>>,
}

impl Owners {
    /// Contiguous ranges: key group `kg` to subtask `kg * parallelism / max_parallelism`.
    pub fn by_count(max_parallelism: usize, parallelism: usize) -> Self {
        Owners {
            parallelism,
            max_parallelism,
            table: None,
        }
    }

    /// The assignment `table` (key group -> subtask) at `parallelism`; an error names what
    /// does not fit (a subtask out of range, or no key group at all).
    pub fn table(table: Vec<u32>, parallelism: usize) -> Result<Self, String> {
        if table.is_empty() {
            return Err("a key-group table needs at least one key group".into());
        }
        if let Some((kg, s)) = table
            .iter()
            .enumerate()
            .find(|(_, &s)| s as usize >= parallelism)
        {
            return Err(format!(
                "key group {kg} is assigned to subtask {s}, but the operator has {parallelism} subtasks"
            ));
        }
        let by_count = Owners::by_count(table.len(), parallelism);
        if table
            .iter()
            .enumerate()
            .all(|(kg, &s)| by_count.owner(kg) == s as usize)
        {
            return Ok(by_count);
        }
        Ok(Owners {
            parallelism,
            max_parallelism: table.len(),
            table: Some(table.into()),
        })
    }

    /// The assignment recorded as `table` (None: by count) at `parallelism`.
    pub(crate) fn of(
        table: Option<&std::sync::Arc<[u32]>>,
        max_parallelism: usize,
        parallelism: usize,
    ) -> Self {
        Owners {
            parallelism,
            max_parallelism,
            table: table.cloned(),
        }
    }

    /// The subtask that owns key group `kg`.
    #[inline]
    pub fn owner(&self, kg: usize) -> usize {
        match &self.table {
            Some(t) => t.get(kg).map_or(0, |&s| s as usize),
            None => subtask_for_key_group(kg, self.max_parallelism, self.parallelism),
        }
    }

    /// The number of subtasks.
    pub fn parallelism(&self) -> usize {
        self.parallelism
    }

    /// The number of key groups.
    pub fn max_parallelism(&self) -> usize {
        self.max_parallelism
    }

    /// The table, if the assignment is not by count.
    pub fn as_table(&self) -> Option<&[u32]> {
        self.table.as_deref()
    }

    pub(crate) fn shared_table(&self) -> Option<&std::sync::Arc<[u32]>> {
        self.table.as_ref()
    }

    /// The key groups of `subtask`, as runs of consecutive groups in order.
    pub fn runs_of(&self, subtask: usize) -> Vec<std::ops::Range<usize>> {
        let Some(t) = &self.table else {
            let r = key_group_range(subtask, self.max_parallelism, self.parallelism);
            return if r.is_empty() { Vec::new() } else { vec![r] };
        };
        let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
        for (kg, &s) in t.iter().enumerate() {
            if s as usize != subtask {
                continue;
            }
            match runs.last_mut() {
                Some(last) if last.end == kg => last.end = kg + 1,
                _ => runs.push(kg..kg + 1),
            }
        }
        runs
    }

    /// The key groups of `subtask` if they are one range (always, by count).
    pub fn range_of(&self, subtask: usize) -> Option<std::ops::Range<usize>> {
        let runs = self.runs_of(subtask);
        match runs.as_slice() {
            [] => Some(0..0),
            [r] => Some(r.clone()),
            _ => None,
        }
    }

    /// Each subtask's share of `loads` (records per key group): what this assignment gives
    /// each subtask of that load.
    pub fn subtask_loads(&self, loads: &[u64]) -> Vec<u64> {
        let mut per = vec![0u64; self.parallelism];
        for (kg, &l) in loads.iter().enumerate() {
            if let Some(slot) = per.get_mut(self.owner(kg)) {
                *slot += l;
            }
        }
        per
    }
}

/// Key groups assigned to `parallelism` subtasks by `loads` (records per key group): the
/// heaviest group first, each to the subtask with the least load so far (ties: fewer key
/// groups, then the group's current owner in `current`, then the lowest index), so that the
/// hottest subtask carries as little as the groups allow. Groups with no load are dealt
/// afterwards to even out the number of groups. The result is `current` when that is as
/// balanced, else by count when that is.
///
/// ```
/// use weir::key_group::{balance_by_load, Owners};
/// // One hot key group (half the load) among 8.
/// let loads = [700, 100, 100, 100, 100, 100, 100, 100];
/// let by_count = Owners::by_count(8, 2);
/// let by_load = balance_by_load(&loads, 2, Some(&by_count));
/// assert_eq!(by_count.subtask_loads(&loads), vec![1000, 400]);
/// assert_eq!(by_load.subtask_loads(&loads), vec![700, 700]);
/// ```
pub fn balance_by_load(loads: &[u64], parallelism: usize, current: Option<&Owners>) -> Owners {
    let max = loads.len();
    let p = parallelism.max(1);
    let by_count = Owners::by_count(max, p);
    if max == 0 {
        return by_count;
    }
    let mut order: Vec<usize> = (0..max).collect();
    order.sort_by(|&a, &b| loads[b].cmp(&loads[a]).then(a.cmp(&b)));
    let mut load = vec![0u64; p];
    let mut count = vec![0usize; p];
    let mut table = vec![0u32; max];
    for kg in order {
        let was = current.map(|c| c.owner(kg)).filter(|&s| s < p);
        let s = (0..p)
            .min_by_key(|&s| (load[s], count[s], Some(s) != was, s))
            .unwrap_or(0);
        load[s] += loads[kg];
        count[s] += 1;
        table[kg] = s as u32;
    }
    let hottest = |o: &Owners| o.subtask_loads(loads).into_iter().max().unwrap_or(0);
    let best = match Owners::table(table, p) {
        Ok(by_load) if hottest(&by_load) < hottest(&by_count) => by_load,
        _ => by_count,
    };
    // The greedy deal is not always the best: a current assignment at least as balanced
    // stays (no key group moves for nothing).
    match current {
        Some(c) if c.parallelism() == p && hottest(c) <= hottest(&best) => c.clone(),
        _ => best,
    }
}

#[inline]
pub(crate) fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_all_groups_and_agree_with_assignment() {
        for max in [1usize, 7, 128, 1000] {
            for p in 1..=max.min(9) {
                let mut next = 0;
                for s in 0..p {
                    let r = key_group_range(s, max, p);
                    assert_eq!(r.start, next);
                    for kg in r.clone() {
                        assert_eq!(subtask_for_key_group(kg, max, p), s, "max {max} p {p}");
                    }
                    next = r.end;
                }
                assert_eq!(next, max);
            }
        }
    }

    #[test]
    fn every_parallelism_gets_balanced_key_groups() {
        // No "barrel effect": with any parallelism, subtasks differ by one key group at most
        // (so none has more than ⌈groups / p⌉).
        for max in [DEFAULT_MAX_PARALLELISM, 100, 7] {
            for p in 1..=max {
                let sizes: Vec<usize> = (0..p).map(|s| key_group_range(s, max, p).len()).collect();
                let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                assert!(hi - lo <= 1, "max {max} p {p}: {sizes:?}");
                assert!(*hi <= max.div_ceil(p), "max {max} p {p}");
                assert_eq!(sizes.iter().sum::<usize>(), max);
            }
        }
    }

    #[test]
    fn a_hot_key_group_gets_a_subtask_of_its_own_and_the_rest_are_spread() {
        // One group with half the load among 128: by count its subtask carries ~3/4 at
        // p = 2; by load the hot group is alone and the other 127 are together.
        let mut loads = vec![100u64; 128];
        loads[37] = 127 * 100;
        let by_count = Owners::by_count(128, 2);
        let by_load = balance_by_load(&loads, 2, Some(&by_count));
        let (c, l) = (
            by_count.subtask_loads(&loads),
            by_load.subtask_loads(&loads),
        );
        assert_eq!(c.iter().sum::<u64>(), l.iter().sum::<u64>());
        assert_eq!(*l.iter().max().unwrap(), 12_700);
        assert_eq!(*c.iter().max().unwrap(), 12_700 + 63 * 100);
        assert_eq!(by_load.runs_of(by_load.owner(37)), vec![37..38]);
        for p in 1..=9 {
            let o = balance_by_load(&loads, p, None);
            let per = o.subtask_loads(&loads);
            // Never worse than by count, and within one group's load of the mean (or the
            // hot group alone).
            let hottest = *per.iter().max().unwrap();
            let by_count = *Owners::by_count(128, p)
                .subtask_loads(&loads)
                .iter()
                .max()
                .unwrap();
            assert!(hottest <= by_count, "p {p}: {per:?}");
            let mean = loads.iter().sum::<u64>() / p as u64;
            assert!(hottest <= (mean + 12_700).max(12_700), "p {p}: {per:?}");
            assert_eq!((0..128).filter(|&kg| o.owner(kg) < p).count(), 128);
        }
    }

    #[test]
    fn an_even_load_stays_by_count_and_a_table_by_count_is_by_count() {
        let loads = vec![7u64; 128];
        for p in [1, 2, 3, 4] {
            let current = Owners::by_count(128, p);
            assert_eq!(balance_by_load(&loads, p, Some(&current)), current);
            assert_eq!(balance_by_load(&[0; 128], p, None), current);
        }
        let table: Vec<u32> = (0..128)
            .map(|kg| subtask_for_key_group(kg, 128, 3) as u32)
            .collect();
        assert_eq!(Owners::table(table, 3).unwrap(), Owners::by_count(128, 3));
        let e = Owners::table(vec![0, 1, 2], 2).unwrap_err();
        assert!(e.contains("key group 2") && e.contains("2 subtasks"), "{e}");
    }

    #[test]
    fn hash_is_stable() {
        // Fixed values: a change here breaks the mapping of saved state to subtasks.
        assert_eq!(key_group_of(&0u64, 128), key_group_of(&0u64, 128));
        assert_eq!(key_hash("a"), key_hash(&"a".to_string()));
        let spread: std::collections::HashSet<usize> =
            (0u64..10_000).map(|k| key_group_of(&k, 128)).collect();
        assert_eq!(spread.len(), 128);
    }
}
