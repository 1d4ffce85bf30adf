//! Channel state dealt to a new parallelism: the in-flight data an unaligned checkpoint stored
//! per subtask and logical input (`gate::ChannelState`, under `<uid>#in<input>`) goes to the
//! new subtasks the way its records would have been routed, as Flink does since 1.13.
//!
//! - A keyed input (one hash-partitioned edge): each new subtask takes the in-flight data of
//!   every old subtask whose key groups overlap its own, and on restore keeps only the records
//!   of its own key groups ([`ChannelState::keep`](crate::gate::ChannelState::keep)). A key's
//!   records were all in one old subtask's channels, in order, so they stay in order.
//! - A rebalance input: old subtask `i`'s in-flight data goes whole to new subtask `i mod n`.
//! - A forward input (or `Auto` at equal parallelism, which is forward): the same if it was
//!   not forward when the data was recorded; if it was, and its sender or receiver changed
//!   parallelism, it is refused: subtask `i`'s data came from sender `i` (a keyed sender's key
//!   groups), and replaying it elsewhere would put a key's records behind the newer ones.
//! - A broadcast input, or one fed by keyed and other edges, is refused with the reason (each
//!   old subtask holds its own copy of the broadcast data: there is no owner to deal it to).
//!
//! Channel state that holds no records (every unaligned checkpoint stores an entry per input)
//! is dropped wherever the shape changed, and never refused.
//!
//! Watermarks in flight are dropped when the input's shape changed (its operator or one of
//! its senders has another parallelism): they were per channel of the old shape, and a
//! watermark applied to another channel could make its records late. Dropping one only
//! delays event time until the senders' next watermark; it never makes a record late.
//!
//! Like the rest of `rescale`, this works on the CBOR the checkpoint holds (no record type):
//! the records are carried as `ciborium::Value`s, and only the restoring gate, which knows
//! the type and the key selector, filters them. It does not read files or build gates.

use std::collections::{BTreeSet, HashMap};

use ciborium::Value;

use crate::key_group::Owners;

/// The key-group tables of operators rebalanced by load (uid -> table) when the states were
/// taken (`old`) and now (`new`); an operator in neither has its key groups by count.
#[derive(Clone, Copy)]
pub(crate) struct Tables<'a> {
    pub(crate) old: &'a HashMap<String, std::sync::Arc<[u32]>>,
    pub(crate) new: &'a HashMap<&'a str, std::sync::Arc<[u32]>>,
}

/// How the channel state of one logical input follows a change of parallelism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dealing {
    /// A single keyed edge: by key group (filtered by the restoring gate).
    ByKeyGroup,
    /// Any subtask may take any record: old subtask `i` to new subtask `i mod n`.
    Any,
    /// Forward (or `Auto`): as `Any` if it was not forward when recorded (unequal
    /// parallelism), refused if it was and a side changed.
    Forward,
    /// Cannot be dealt to another parallelism, and why.
    Not(&'static str),
}

/// One logical input of an operator, as a restore deals its channel state.
#[derive(Debug, Clone)]
pub(crate) struct ChannelInput {
    /// The uid of the operator (chain head) the input belongs to.
    pub(crate) owner: String,
    /// The input's index.
    pub(crate) input: usize,
    pub(crate) dealing: Dealing,
    /// The uids of the operators sending into it.
    pub(crate) upstream: Vec<String>,
}

impl ChannelInput {
    /// The uid the input's channel state is stored under.
    pub(crate) fn state_uid(&self) -> String {
        format!("{}#in{}", self.owner, self.input)
    }
}

/// Deals, in `states`, the channel state of each of `inputs` whose operator or senders changed
/// parallelism (`old`: uid -> parallelism when the states were taken; `new`: uid -> now).
/// Returns the inputs dealt (by state uid).
pub(crate) fn fit(
    states: &mut HashMap<(String, usize), Vec<u8>>,
    old: &HashMap<String, usize>,
    new: &HashMap<&str, usize>,
    tables: Tables<'_>,
    inputs: &[ChannelInput],
    max_parallelism: usize,
) -> Result<Vec<String>, String> {
    // In-flight data of an operator that runs but has no such input (it was chained since,
    // `controller::states::deploying` re-plans so that it is not): it would be lost.
    for ((uid, _), payload) in states.iter() {
        let Some((owner, _)) = owner_of(uid) else {
            continue;
        };
        if new.contains_key(owner)
            && !inputs.iter().any(|i| i.state_uid() == *uid)
            && carries_records(payload)
        {
            return Err(format!(
                "in-flight data `{uid}` of an unaligned checkpoint has no input channel of `{owner}` to be replayed on"
            ));
        }
    }
    let mut dealt = Vec::new();
    for input in inputs {
        let uid = input.state_uid();
        let keys: Vec<(String, usize)> =
            states.keys().filter(|(u, _)| *u == uid).cloned().collect();
        if keys.is_empty() {
            continue;
        }
        let Some(&now) = new.get(input.owner.as_str()) else {
            continue;
        };
        let had = old
            .get(&input.owner)
            .copied()
            .or_else(|| keys.iter().map(|(_, j)| j + 1).max())
            .unwrap_or(now);
        // A sender whose parallelism is not recorded counts as changed: its watermarks are
        // dropped, which only delays event time.
        let senders_changed = input.upstream.iter().any(|u| {
            old.get(u)
                .zip(new.get(u.as_str()))
                .is_none_or(|(a, b)| a != b)
        });
        let (old_table, new_table) = (
            tables.old.get(&input.owner),
            tables.new.get(input.owner.as_str()),
        );
        if had == now && !senders_changed && old_table == new_table {
            continue;
        }
        let mut by_old: Vec<(usize, Vec<u8>)> = keys
            .into_iter()
            .filter_map(|k| states.remove(&k).map(|p| (k.1, p)))
            .collect();
        // Entries without records: nothing to deal (their watermarks go, as below).
        by_old.retain(|(_, p)| carries_records(p));
        if by_old.is_empty() {
            dealt.push(uid);
            continue;
        }
        let was_forward = input.upstream.iter().all(|u| old.get(u) == Some(&had));
        let refusal = match input.dealing {
            Dealing::Not(why) if had != now => Some(why),
            Dealing::Forward if was_forward => Some(
                "it came over a forward edge from the sender subtask of the same index, and replayed at another subtask a key's records would come after newer ones",
            ),
            _ => None,
        };
        if let Some(why) = refusal {
            return Err(format!(
                "operator `{}` has in-flight data of an unaligned checkpoint on input {}, which cannot be dealt from parallelism {had} to {now} (senders: {}): {why}",
                input.owner,
                input.input,
                input.upstream.join(", ")
            ));
        }
        by_old.sort_by_key(|(j, _)| *j);
        let owners = (
            Owners::of(old_table, max_parallelism, had.max(1)),
            Owners::of(new_table, max_parallelism, now.max(1)),
        );
        let parts = deal(&by_old, owners, now, input.dealing)
            .map_err(|why| format!("channel state `{uid}`: {why}"))?;
        for (j, payload) in parts {
            states.insert((uid.clone(), j), payload);
        }
        dealt.push(uid);
    }
    Ok(dealt)
}

/// The payloads of `old` (old subtask, `ChannelState` CBOR) of an input at parallelism `had`,
/// dealt to `now` subtasks, watermarks dropped; subtasks that get nothing are left out.
fn deal(
    old: &[(usize, Vec<u8>)],
    (had, owners): (Owners, Owners),
    now: usize,
    dealing: Dealing,
) -> Result<Vec<(usize, Vec<u8>)>, String> {
    let mut entries: Vec<(usize, Vec<Value>)> = Vec::with_capacity(old.len());
    for (j, payload) in old {
        entries.push((
            *j,
            in_flight(payload).map_err(|e| format!("subtask {j}: {e}"))?,
        ));
    }
    // Which old subtasks' data each new subtask takes, in old subtask order.
    let mut takes: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); now];
    match dealing {
        Dealing::ByKeyGroup => {
            for kg in 0..owners.max_parallelism() {
                if let Some(t) = takes.get_mut(owners.owner(kg)) {
                    t.insert(had.owner(kg));
                }
            }
        }
        Dealing::Any | Dealing::Forward | Dealing::Not(_) => {
            for (j, _) in &entries {
                takes[j % now.max(1)].insert(*j);
            }
        }
    }
    let mut out = Vec::new();
    for (to, from) in takes.into_iter().enumerate() {
        let mut list = Vec::new();
        for (j, e) in &entries {
            if from.contains(j) {
                list.extend(e.iter().cloned());
            }
        }
        if list.is_empty() {
            continue;
        }
        let state = Value::Map(vec![
            (Value::Text("marks".into()), Value::Null),
            (Value::Text("in_flight".into()), Value::Array(list)),
        ]);
        out.push((
            to,
            crate::checkpoint::encode(&state).map_err(|e| e.to_string())?,
        ));
    }
    Ok(out)
}

/// The operator and input of a channel-state uid (`<owner>#in<input>`; the last `#in`, so an
/// operator uid may itself contain `#in`), None for any other uid.
pub(crate) fn owner_of(uid: &str) -> Option<(&str, usize)> {
    let (owner, input) = uid.rsplit_once("#in")?;
    let input = input.parse().ok()?;
    Some((owner, input))
}

/// Whether a `ChannelState` payload holds any record (an unreadable one counts as holding
/// some: dealing it reports what is wrong).
pub(crate) fn carries_records(payload: &[u8]) -> bool {
    let Ok(batches) = in_flight(payload) else {
        return true;
    };
    batches.iter().any(|batch| {
        // `{"Batch": [channel, [records...]]}`
        let records = match batch {
            Value::Map(tagged) => tagged.first().and_then(|(_, v)| match v {
                Value::Array(cr) => cr.get(1),
                _ => None,
            }),
            _ => None,
        };
        !matches!(records, Some(Value::Array(r)) if r.is_empty())
    })
}

/// The batches of one `ChannelState` payload (its watermarks dropped), also of the format
/// before watermarks were kept (an array of batches).
fn in_flight(payload: &[u8]) -> Result<Vec<Value>, String> {
    let value: Value = crate::checkpoint::decode(payload).map_err(|e| e.to_string())?;
    match value {
        Value::Map(fields) => {
            let list = fields
                .into_iter()
                .find(|(k, _)| k.as_text() == Some("in_flight"))
                .map(|(_, v)| v)
                .ok_or("no `in_flight` field")?;
            let Value::Array(list) = list else {
                return Err("`in_flight` is not an array".into());
            };
            let mut batches = Vec::with_capacity(list.len());
            for (i, item) in list.into_iter().enumerate() {
                let tag = match &item {
                    Value::Map(tagged) if tagged.len() == 1 => tagged[0].0.as_text(),
                    _ => None,
                };
                match tag {
                    Some("Batch") => batches.push(item),
                    Some("Mark") => {}
                    _ => {
                        return Err(format!(
                            "in-flight element {i} is neither a batch nor a watermark"
                        ))
                    }
                }
            }
            Ok(batches)
        }
        Value::Array(list) => Ok(list
            .into_iter()
            .map(|batch| {
                Value::Map(vec![(
                    Value::Text("Batch".into()),
                    Value::Array(vec![Value::Integer(0.into()), batch]),
                )])
            })
            .collect()),
        _ => Err("not a channel state".into()),
    }
}
