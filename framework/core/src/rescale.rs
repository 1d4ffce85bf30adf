//! Rescaling state: how each operator's checkpointed state is dealt to a new number of
//! subtasks, and what the operators that cannot be rescaled say instead.
//!
//! Every operator node carries a [`Rule`], set where its type is known (`stream`): stateless
//! operators need nothing; keyed operators (both keyed forms) store their per-key state by key
//! group, so a new subtask takes exactly the groups it owns (its range by count, or its
//! groups in a table made by load: [`Owners`]) from whichever old subtasks held them, and a
//! rebalance by load is a change of owners at the same parallelism; per-subtask state of derived
//! operators (`#[weir(operator_state)]`) is split or unioned field by field, as Flink's
//! operator list state. Sources and sinks keep state that belongs to one subtask (a read
//! position, staged output) and refuse with their reason. The in-flight data of unaligned
//! checkpoints (channel state) is dealt the way it was routed, in [`channels`].
//!
//! [`redistribute`] works on the payloads as the checkpoint holds them (CBOR), so the same code
//! serves a live rescale (payloads handed over in memory), a restart from a checkpoint taken
//! before a rescale, and a savepoint restored at another parallelism. Keyed payloads are dealt
//! at the byte level: each key group's bytes are found by the CBOR item heads and copied whole
//! into the new subtask's payload, no entry decoded (a keyed subtask's state is most of a
//! job's). This module owns the arithmetic on payloads; it does not take snapshots
//! (`operator`, `task`), read them from checkpoint files (`checkpoint::store`) or decide when
//! to rescale (`controller`).

use std::collections::HashMap;
use std::time::Duration;

use ciborium::Value;

pub(crate) mod channels;

pub(crate) use channels::{ChannelInput, Dealing};

use crate::checkpoint::store::{Chained, Chains};
use crate::hooks::{Redistribution, StateField, StateScope};
use crate::key_group::Owners;
use crate::state::changes;

/// What a rescale did ([`JobMonitor::rescale`](crate::JobMonitor::rescale)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RescaleReport {
    /// The checkpoint the job was rescaled at (0 if nothing changed).
    pub checkpoint: u64,
    /// Each operator whose parallelism changed.
    pub changes: Vec<ParallelismChange>,
    /// Operators a job-wide rescale left as they were, and why (a source, a sink, ...).
    pub kept: Vec<(String, String)>,
    /// From the request to the new subtasks running.
    pub duration: Duration,
    /// From the sources' pause at the rescale barrier to the new subtasks running: the time
    /// no new input entered the job.
    pub pause: Duration,
    /// Operators whose key groups were assigned again by load (a rebalance, or a rescale of
    /// an operator set to [`key_groups_by_load`](crate::DataStream::key_groups_by_load)).
    pub rebalanced: Vec<Rebalanced>,
}

/// One operator's key groups assigned again by observed load.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Rebalanced {
    /// The operator's uid.
    pub uid: String,
    /// The load the key groups were assigned by (records its inputs sent it since its key
    /// groups were last assigned), as the old assignment dealt it: per old subtask.
    pub load_before: Vec<u64>,
    /// The same records as the new assignment deals them: per new subtask.
    pub load_after: Vec<u64>,
    /// Key groups whose subtask changed (at the same parallelism; at another, the rescale
    /// moves most of them anyway).
    pub moved: usize,
}

impl Rebalanced {
    /// The hottest subtask's share of the load before and after (0 to 1).
    ///
    /// ```
    /// # fn show(r: &weir::Rebalanced) {
    /// let (before, after) = r.hottest_share();
    /// println!("hottest subtask: {:.0} % -> {:.0} %", before * 100.0, after * 100.0);
    /// # }
    /// ```
    pub fn hottest_share(&self) -> (f64, f64) {
        let share = |v: &[u64]| {
            let total: u64 = v.iter().sum();
            v.iter()
                .max()
                .map_or(0.0, |&m| m as f64 / total.max(1) as f64)
        };
        (share(&self.load_before), share(&self.load_after))
    }
}

/// Rescales of a job so far (`numRescales`, and the last one's report).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RescaleStats {
    /// Completed rescales.
    pub num_rescales: u64,
    /// The last completed rescale.
    pub last: Option<RescaleReport>,
    /// The checkpoint a rescale in progress waits for.
    pub in_progress: Option<u64>,
}

/// One operator's change of parallelism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParallelismChange {
    /// The operator's uid.
    pub uid: String,
    /// Its parallelism before.
    pub from: usize,
    /// And after.
    pub to: usize,
}

/// Why a rescale was refused or did not happen. Whatever the error, the job runs on at the
/// parallelism it had, and nothing was lost.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RescaleError {
    /// A rebalance by load of an operator whose load was not being counted: counting starts
    /// now ([`JobMonitor::rebalance`](crate::JobMonitor::rebalance) asks again after a while).
    #[error("the load of operator `{uid}` was not being counted: counting starts now")]
    LoadNotObserved {
        /// The operator.
        uid: String,
    },
    /// No operator has this uid.
    #[error("no operator has uid `{uid}` (the job has: {known})")]
    UnknownOperator {
        /// The uid asked for.
        uid: String,
        /// The job's operator uids, comma-separated.
        known: String,
    },
    /// The parallelism is 0 or above the job's `max_parallelism`.
    #[error("parallelism {parallelism} for `{uid}` is out of range: it must be 1 to max_parallelism ({max})")]
    Parallelism {
        /// The operator.
        uid: String,
        /// The parallelism asked for.
        parallelism: usize,
        /// The job's `max_parallelism`.
        max: usize,
    },
    /// The operator cannot change parallelism.
    #[error("operator `{uid}` cannot be rescaled: {reason}")]
    NotRescalable {
        /// The operator.
        uid: String,
        /// Why.
        reason: String,
    },
    /// The job's graph is not valid at the new parallelism (a forward edge between operators
    /// of different parallelism, ...).
    #[error("the job cannot run at that parallelism: {0}")]
    Plan(String),
    /// Another rescale, a savepoint or a restart is in progress.
    #[error("cannot rescale now: {0}")]
    Busy(String),
    /// The job's settings do not allow it.
    #[error("cannot rescale this job: {0}")]
    Unsupported(String),
    /// The rescale was abandoned before it changed anything (its checkpoint failed, or the
    /// job failed and recovers at its old parallelism).
    #[error("rescale abandoned, parallelism unchanged: {0}")]
    Aborted(String),
    /// The new subtasks could not start; the job went back to its old parallelism.
    #[error("rescale rolled back to the old parallelism: {0}")]
    RolledBack(String),
    /// The job ended before it answered.
    #[error("the job ended before the rescale completed")]
    JobEnded,
}

/// How an operator's checkpointed state follows a change of its parallelism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rule {
    /// It keeps no state (map, filter, flat_map, a process function without hooks).
    Stateless,
    /// Per-key state grouped by key group; with `own`, preceded by the operator's own
    /// per-subtask fields (a derived operator's `StateSnapshot`) and how each is dealt.
    Keyed {
        own: Option<Vec<(String, Redistribution)>>,
    },
    /// A derived operator's per-subtask fields (a `StateSnapshot`), each split or unioned.
    Subtask(Vec<(String, Redistribution)>),
    /// It cannot change parallelism, for this reason.
    Refused(String),
}

impl Rule {
    /// The rule of a derived operator's own (per-subtask) fields: each field's redistribution,
    /// or why it has none (an unmarked per-subtask field on a non-keyed stream).
    pub(crate) fn fields(fields: &[StateField]) -> Result<Vec<(String, Redistribution)>, String> {
        let mut out = Vec::new();
        for f in fields {
            match f.scope {
                StateScope::Keyed => {}
                StateScope::Subtask {
                    redistribution,
                    marked: true,
                } => out.push((f.name.to_owned(), redistribution)),
                StateScope::Subtask { marked: false, .. } => {
                    return Err(format!(
                        "its state field `{}` has no rule for dealing it to another number of subtasks: mark it `#[weir(operator_state)]` (split) or `#[weir(operator_state(union))]`",
                        f.name
                    ))
                }
            }
        }
        Ok(out)
    }

    /// Why this operator cannot be rescaled, if it cannot.
    pub(crate) fn refusal(&self) -> Option<&str> {
        match self {
            Rule::Refused(why) => Some(why),
            _ => None,
        }
    }
}

/// The payloads of one operator for its new subtasks: `old` holds one payload per old subtask
/// that wrote one (index, payload), or for a keyed operator several parts of one (each some
/// of its key groups, with its own fields); the result has one per new subtask that has state.
///
/// ```text
/// keyed, 2 -> 3 subtasks, 128 key groups:  old 0 = groups 0..64, old 1 = 64..128
///                                          new 0 = 0..43, new 1 = 43..86, new 2 = 86..128
/// ```
pub(crate) fn redistribute(
    rule: &Rule,
    old: &[(usize, Vec<u8>)],
    new: &Owners,
) -> Result<Vec<(usize, Vec<u8>)>, String> {
    if old.is_empty() {
        return Ok(Vec::new());
    }
    let new_parallelism = new.parallelism();
    match rule {
        Rule::Stateless => Ok(Vec::new()),
        Rule::Refused(why) => Err(why.clone()),
        Rule::Keyed { own } => keyed(own.as_deref(), old, new),
        Rule::Subtask(fields) => {
            let snaps = old
                .iter()
                .map(|(_, p)| crate::checkpoint::decode::<crate::hooks::StateSnapshot>(p))
                .collect::<Result<Vec<_>, _>>()?;
            let dealt = deal_snapshots(&snaps, fields, new_parallelism)?;
            dealt
                .into_iter()
                .enumerate()
                .map(|(j, s)| Ok((j, crate::checkpoint::encode(&s)?)))
                .collect()
        }
    }
}

/// Keyed payloads without own fields (`old`: (old subtask, payload)) dealt to
/// `new_parallelism` subtasks, as a rescale deals them: what `weir-benches`' `state` bench
/// times (through `weir::__bench`).
pub fn deal_keyed(
    old: &[(usize, Vec<u8>)],
    new_parallelism: usize,
    max_parallelism: usize,
) -> Result<Vec<(usize, Vec<u8>)>, String> {
    redistribute(
        &Rule::Keyed { own: None },
        old,
        &Owners::by_count(max_parallelism, new_parallelism),
    )
}

/// Key groups: every new subtask gets the groups `new` assigns it, from every old payload.
///
/// Works on the payloads' bytes: each key group's `[group, entries]` pair is found by its
/// CBOR item heads ([`held_groups`]), no entry decoded, and a new subtask's payload is the
/// pairs of its groups copied behind a new list head (after its own fields, dealt as
/// [`deal_snapshots`] deals them).
fn keyed(
    own: Option<&[(String, Redistribution)]>,
    old: &[(usize, Vec<u8>)],
    new: &Owners,
) -> Result<Vec<(usize, Vec<u8>)>, String> {
    let (max_parallelism, new_parallelism) = (new.max_parallelism(), new.parallelism());
    // Per key group: the old subtask that held it and the bytes of its pair.
    let mut groups: Vec<Option<(usize, &[u8])>> = vec![None; max_parallelism];
    let mut owns = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (subtask, payload) in old {
        let bad = |what: &str| format!("old subtask {subtask}'s keyed state: {what}");
        let held = held_groups(payload, own.is_some(), max_parallelism).map_err(|e| bad(&e))?;
        // Parts of one old subtask's state (a ranged read) each carry its own fields.
        if seen.insert(*subtask) {
            owns.extend(held.own);
        }
        for (kg, pair) in held.groups {
            let slot = groups
                .get_mut(kg)
                .ok_or_else(|| bad(&format!("key group {kg} out of range")))?;
            if let Some((first, _)) = slot {
                return Err(bad(&format!(
                    "key group {kg} is held twice (old subtask {first} holds it too)"
                )));
            }
            *slot = Some((*subtask, pair));
        }
    }
    let dealt_own = match own {
        Some(fields) => Some(deal_snapshots(&owns, fields, new_parallelism)?),
        None => None,
    };
    let mut out = Vec::with_capacity(new_parallelism);
    for j in 0..new_parallelism {
        let mine: Vec<&[u8]> = new
            .runs_of(j)
            .into_iter()
            .flat_map(|run| groups.get(run).unwrap_or_default().iter().flatten())
            .map(|(_, pair)| *pair)
            .collect();
        let size: usize = mine.iter().map(|pair| pair.len()).sum();
        let mut payload = Vec::with_capacity(size + 32);
        if let Some(owns) = &dealt_own {
            let own = owns
                .get(j)
                .ok_or_else(|| format!("no own fields dealt to new subtask {j}"))?;
            changes::head(&mut payload, changes::ARRAY, 2);
            ciborium::into_writer(own, &mut payload)
                .map_err(|e| format!("new subtask {j}'s own fields: {e}"))?;
        }
        changes::head(&mut payload, changes::ARRAY, mine.len() as u64);
        for pair in mine {
            payload.extend_from_slice(pair);
        }
        out.push((j, payload));
    }
    Ok(out)
}

/// What each old subtask's chain (`chained`, assigned by `had`) holds of each new
/// subtask's key groups (assigned by `now`): one (old subtask, payload) per run of
/// consecutive groups that an old and a new subtask share, each read from only the runs'
/// blocks of those groups, each with the old subtask's own fields ([`keyed`] takes them once
/// per old subtask).
fn read_ranges(
    chained: &[(usize, Chained)],
    had: &Owners,
    now: &Owners,
) -> Result<Vec<(usize, Vec<u8>)>, String> {
    let mut parts = Vec::new();
    for (i, chain) in chained {
        let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
        for kg in 0..now.max_parallelism() {
            if had.owner(kg) != *i {
                continue;
            }
            let j = now.owner(kg);
            match runs.last_mut() {
                Some(r) if r.end == kg && now.owner(r.start) == j => r.end = kg + 1,
                _ => runs.push(kg..kg + 1),
            }
        }
        for meet in runs {
            let part = chain
                .payload_of(meet)
                .map_err(|why| format!("old subtask {i}: {why}"))?;
            parts.push((*i, part));
        }
    }
    Ok(parts)
}

/// What one keyed payload holds, found by [`held_groups`].
struct Held<'a> {
    /// The operator's own fields, if the payload has them.
    own: Option<crate::hooks::StateSnapshot>,
    /// Each key group's number and the bytes of its whole `[group, entries]` pair, in the
    /// payload's order.
    groups: Vec<(usize, &'a [u8])>,
}

/// Finds the key groups of a keyed operator's snapshot `payload` (the CBOR
/// `Vec<(usize, Vec<entry>)>`, preceded by the operator's own fields as a pair if `own`) by
/// reading item heads only: no entry is decoded. The list and its pairs must have a known
/// length, as every writer of keyed payloads gives them. An error names what does not fit,
/// and where (a byte offset into the payload).
fn held_groups(payload: &[u8], own: bool, max_parallelism: usize) -> Result<Held<'_>, String> {
    let mut r = changes::Reader { b: payload, at: 0 };
    let mut snapshot = None;
    if own {
        r.expect_array(2)
            .map_err(|e| format!("not an (own fields, key groups) pair: {e}"))?;
        let start = r.at;
        r.skip().map_err(|e| format!("its own fields: {e}"))?;
        let snap = crate::checkpoint::decode(&payload[start..r.at])
            .map_err(|e| format!("its own fields: {e}"))?;
        snapshot = Some(snap);
    }
    let n = r
        .array()
        .map_err(|e| format!("not a key-group list: {e}"))?;
    let mut groups = Vec::with_capacity(usize::try_from(n).unwrap_or(0).min(max_parallelism));
    for _ in 0..n {
        let start = r.at;
        r.expect_array(2).map_err(|e| {
            format!("the item at byte {start} is not a (key group, entries) pair: {e}")
        })?;
        let kg = match r.head() {
            Ok((0, Some(kg))) => usize::try_from(kg)
                .ok()
                .filter(|&kg| kg < max_parallelism)
                .ok_or_else(|| {
                    format!("key group {kg} out of range (max_parallelism is {max_parallelism})")
                })?,
            Ok((1, Some(_))) => return Err(format!("a negative key group number at byte {start}")),
            Ok(other) => {
                return Err(format!(
                    "the pair at byte {start} has no key group number (found {other:?})"
                ))
            }
            Err(e) => return Err(format!("the pair at byte {start}: {e}")),
        };
        match payload.get(r.at) {
            Some(b) if b >> 5 == changes::ARRAY => {}
            found => {
                return Err(format!(
                    "key group {kg}'s entries are not a list (found {found:02x?} at byte {})",
                    r.at
                ))
            }
        }
        r.skip()
            .map_err(|e| format!("key group {kg}'s entries: {e}"))?;
        groups.push((kg, &payload[start..r.at]));
    }
    if r.at != payload.len() {
        return Err(format!(
            "{} bytes after the key-group list",
            payload.len() - r.at
        ));
    }
    Ok(Held {
        own: snapshot,
        groups,
    })
}

/// Per-subtask fields of derived operators: `snaps` (one per old subtask, in subtask order)
/// dealt to `n` new subtasks. A split field's elements (of a list, or entries of a map) are
/// dealt out in contiguous runs; a union field's elements all go to every new subtask.
fn deal_snapshots(
    snaps: &[crate::hooks::StateSnapshot],
    fields: &[(String, Redistribution)],
    n: usize,
) -> Result<Vec<crate::hooks::StateSnapshot>, String> {
    let Some(first) = snaps.first() else {
        return Ok(Vec::new());
    };
    let maps = snaps
        .iter()
        .map(|s| {
            let v: Value = crate::checkpoint::decode(&s.bytes)?;
            v.into_map().map_err(|_| {
                format!(
                    "operator `{}`: its state is not a map of fields",
                    s.operator
                )
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let mut per_new: Vec<Vec<(Value, Value)>> = vec![Vec::new(); n];
    for (name, how) in fields {
        // Every old subtask's value of the field, flattened into elements.
        let mut elements: Vec<Value> = Vec::new();
        let mut is_map = false;
        for map in &maps {
            let Some((_, v)) = map.iter().find(|(k, _)| k.as_text() == Some(name)) else {
                continue;
            };
            match v {
                Value::Array(items) => elements.extend(items.iter().cloned()),
                Value::Map(entries) => {
                    is_map = true;
                    elements.extend(
                        entries
                            .iter()
                            .map(|(k, v)| Value::Array(vec![k.clone(), v.clone()])),
                    );
                }
                _ => {
                    return Err(format!(
                        "operator `{}`: per-subtask field `{name}` is not a collection (a list, set or map), so it cannot be split or unioned",
                        first.operator
                    ))
                }
            }
        }
        for (j, slot) in per_new.iter_mut().enumerate() {
            let mine: Vec<Value> = match how {
                Redistribution::Union => elements.clone(),
                Redistribution::Split => {
                    let (a, b) = (j * elements.len() / n, (j + 1) * elements.len() / n);
                    elements[a..b].to_vec()
                }
            };
            let value = if is_map {
                Value::Map(
                    mine.into_iter()
                        .filter_map(|e| match e {
                            Value::Array(mut kv) if kv.len() == 2 => {
                                let v = kv.pop()?;
                                Some((kv.pop()?, v))
                            }
                            _ => None,
                        })
                        .collect(),
                )
            } else {
                Value::Array(mine)
            };
            slot.push((Value::Text(name.clone()), value));
        }
    }
    per_new
        .into_iter()
        .map(|fields| {
            Ok(crate::hooks::StateSnapshot {
                operator: first.operator.clone(),
                version: first.version,
                bytes: crate::checkpoint::encode(&Value::Map(fields))?,
            })
        })
        .collect()
}

/// Redistributes, in `states` ((uid, subtask) -> payload), the state of every operator whose
/// parallelism differs from `old_parallelism` (uid -> parallelism when the states were taken;
/// where it is not recorded, one more than the highest subtask with state), and the channel
/// state (unaligned checkpoints) of each of `inputs` whose operator or senders changed.
///
/// States of incremental checkpoints come as `chains`, not read yet: a keyed operator's
/// chains, where its parallelism changed, are read key-group range by range (each new
/// subtask's part of each old subtask's chain, only the runs' blocks of those groups); any
/// other chain is read whole. Chains of operators not in `operators` are not read at all.
pub(crate) fn fit(
    states: &mut HashMap<(String, usize), Vec<u8>>,
    chains: Chains,
    old_parallelism: &HashMap<String, usize>,
    old_key_groups: &HashMap<String, std::sync::Arc<[u32]>>,
    operators: &[(String, Owners, &Rule)],
    inputs: &[ChannelInput],
    max_parallelism: usize,
) -> Result<Vec<String>, String> {
    let mut chains = chains;
    let mut moved = Vec::new();
    for (uid, new_owners, rule) in operators {
        let new_p = &new_owners.parallelism();
        let (mut old, chained) = take_states(states, &mut chains, uid);
        let highest = old
            .last()
            .map(|(s, _)| *s)
            .max(chained.last().map(|(s, _)| *s));
        let had = old_parallelism
            .get(uid)
            .copied()
            .or_else(|| highest.map(|s| s + 1));
        let ranged = matches!(rule, Rule::Keyed { .. }) && old.is_empty();
        if let (Some(had), Some(highest)) = (had, highest) {
            if highest >= had {
                return Err(format!(
                    "operator `{uid}` has state of subtask {highest}, but ran at parallelism {had} when it was taken"
                ));
            }
        }
        // Keyed state moves when its key groups' owners changed: with the parallelism, or
        // by a rebalance (other operators chained to a rebalanced one keep theirs).
        let keyed = matches!(rule, Rule::Keyed { .. });
        let old_owners = had.map(|had| Owners::of(old_key_groups.get(uid), max_parallelism, had));
        let changed = |had: usize| {
            had != *new_p || (keyed && old_owners.as_ref().is_some_and(|o| o != new_owners))
        };
        match (had, &old_owners) {
            (Some(had), Some(old_owners)) if changed(had) && ranged && !chained.is_empty() => {
                let parts = read_ranges(&chained, old_owners, new_owners)
                    .map_err(|why| format!("operator `{uid}`: {why}"))?;
                let dealt = redistribute(rule, &parts, new_owners).map_err(|why| {
                    format!("operator `{uid}` cannot go from parallelism {had} to {new_p}: {why}")
                })?;
                moved.push(uid.clone());
                for (j, p) in dealt {
                    states.insert((uid.clone(), j), p);
                }
                continue;
            }
            _ => {
                for (s, chain) in chained {
                    let p = chain
                        .payload()
                        .map_err(|why| format!("operator `{uid}` subtask {s}: {why}"))?;
                    old.push((s, p));
                }
                old.sort_by_key(|(s, _)| *s);
            }
        }
        match had {
            Some(had) if changed(had) && !old.is_empty() => {
                let dealt = redistribute(rule, &old, new_owners).map_err(|why| {
                    format!("operator `{uid}` cannot go from parallelism {had} to {new_p}: {why}")
                })?;
                moved.push(uid.clone());
                for (j, p) in dealt {
                    states.insert((uid.clone(), j), p);
                }
            }
            _ => {
                for (j, p) in old {
                    states.insert((uid.clone(), j), p);
                }
            }
        }
    }
    moved.extend(fit_channels(
        states,
        old_parallelism,
        old_key_groups,
        operators,
        inputs,
        max_parallelism,
    )?);
    Ok(moved)
}

/// The states of operator `uid` taken out of `states` and `chains` (not read yet), each by
/// subtask in subtask order.
#[allow(clippy::type_complexity)]
fn take_states(
    states: &mut HashMap<(String, usize), Vec<u8>>,
    chains: &mut Chains,
    uid: &str,
) -> (Vec<(usize, Vec<u8>)>, Vec<(usize, Chained)>) {
    let mut old: Vec<(usize, Vec<u8>)> = Vec::new();
    let keys: Vec<(String, usize)> = states
        .keys()
        .filter(|(u, _)| u.as_str() == uid)
        .cloned()
        .collect();
    for key in keys {
        if let Some(p) = states.remove(&key) {
            old.push((key.1, p));
        }
    }
    let keys: Vec<(String, usize)> = chains
        .keys()
        .filter(|(u, _)| u.as_str() == uid)
        .cloned()
        .collect();
    let mut chained: Vec<(usize, Chained)> = keys
        .into_iter()
        .filter_map(|key| chains.remove(&key).map(|c| (key.1, c)))
        .collect();
    chained.sort_by_key(|(s, _)| *s);
    old.sort_by_key(|(s, _)| *s);
    (old, chained)
}

/// The channel state of each of `inputs` whose operator or senders changed, dealt to the
/// new subtasks (see [`fit`], and `channels::fit`); returns the inputs dealt (by state uid).
fn fit_channels(
    states: &mut HashMap<(String, usize), Vec<u8>>,
    old_parallelism: &HashMap<String, usize>,
    old_key_groups: &HashMap<String, std::sync::Arc<[u32]>>,
    operators: &[(String, Owners, &Rule)],
    inputs: &[ChannelInput],
    max_parallelism: usize,
) -> Result<Vec<String>, String> {
    let now: HashMap<&str, usize> = operators
        .iter()
        .map(|(uid, o, _)| (uid.as_str(), o.parallelism()))
        .collect();
    let tables: HashMap<&str, std::sync::Arc<[u32]>> = operators
        .iter()
        .filter_map(|(uid, o, _)| Some((uid.as_str(), o.shared_table()?.clone())))
        .collect();
    let tables = channels::Tables {
        old: old_key_groups,
        new: &tables,
    };
    channels::fit(
        states,
        old_parallelism,
        &now,
        tables,
        inputs,
        max_parallelism,
    )
}

#[cfg(test)]
mod tests;
