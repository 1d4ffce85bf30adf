//! One source subtask's reader: its partitions and the offset each is read from, the
//! consumer's assignment, polling and decoding, the discovery of partitions and topics added
//! while it runs, and its position in checkpoints (with the group commit when one completes).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::{owner, Decode, KafkaSource, Malformed, RecordView, StartFrom, Topics};
use crate::{boxed, CALL_TIMEOUT};
use weir::error::SourceError;
use weir::source::{Source, SourceContext, SourceStatus, SourceWaker, Splits};
use weir::Data;

impl<T: Data> KafkaSource<T> {
    /// Opens subtask `cx`'s reader: its partitions and where each starts.
    pub(super) fn open(&self, cx: SourceContext) -> Result<Reader<T>, SourceError> {
        let at = |what: &str| format!("kafka source `{}`: {what}", self.label);
        let consumer: BaseConsumer = self
            .config
            .client()
            .set("group.id", self.group())
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("isolation.level", "read_committed")
            .set(
                "enable.partition.eof",
                if self.bounded { "true" } else { "false" },
            )
            .create()
            .map_err(|e| SourceError::Setup {
                source: format!("{}: {e}", at("cannot create the consumer")).into(),
            })?;
        let mut reader = Reader {
            consumer,
            label: self.label.clone(),
            want: self.topics.clone(),
            only: self.only.clone(),
            cx,
            decode: self.decode.clone(),
            malformed: self.malformed,
            bounded: self.bounded,
            topics: Vec::new(),
            splits: Splits::new([]),
            owned: 0,
            done: 0,
            assigned: false,
            taken: VecDeque::new(),
            discovery: self.discovery(),
            next_discovery: Instant::now(),
        };
        let found = reader.partitions_now()?;
        if let Topics::Names(names) = &self.topics {
            // A named topic must exist; a pattern may match nothing yet.
            if let Some(missing) = names.iter().find(|n| !found.iter().any(|(t, _)| t == *n)) {
                return Err(SourceError::External {
                    what: format!("kafka source `{missing}`: no such topic on the brokers"),
                    source: format!("brokers {}", self.config.brokers()).into(),
                });
            }
        }
        if let (Some(listed), Some((_, count))) = (&self.only, found.first()) {
            if let Some(p) = listed.iter().find(|p| **p < 0 || **p >= *count) {
                return Err(SourceError::Setup {
                    source: at(&format!("partition {p} is not one of its {count}")).into(),
                });
            }
        }
        reader.add_partitions(&found, self.start)?;
        if let Some(d) = reader.discovery {
            reader.next_discovery = Instant::now() + d;
        }
        Ok(reader)
    }
}

/// The positions of the last checkpoints taken, for the group commit when one completes.
const TAKEN: usize = 16;

/// A source subtask's position: the next offset of each of its partitions, by topic.
type Position = Vec<(String, i32, i64)>;

/// One topic a reader reads some partitions of.
struct TopicState {
    name: String,
    /// The topic's place among the reader's: the high half of its partitions' split ids.
    index: u64,
    /// The next offset to read, per owned partition.
    next: BTreeMap<i32, i64>,
    /// Partitions read to their end (bounded): the client reported it.
    done: BTreeSet<i32>,
    /// Partitions paused by watermark alignment: unassigned from the consumer, read again
    /// from `next` when resumed.
    paused: BTreeSet<i32>,
}

impl TopicState {
    fn split(&self, p: i32) -> u64 {
        (self.index << 32) | u64::from(p.unsigned_abs())
    }

    /// The partition of this topic that split `id` names, if it is one of this topic's.
    fn partition_of(&self, id: u64) -> Option<i32> {
        (id >> 32 == self.index)
            .then(|| i32::try_from(id & 0xffff_ffff).ok())
            .flatten()
    }
}

/// One subtask's reader.
pub(super) struct Reader<T> {
    consumer: BaseConsumer,
    label: String,
    want: Topics,
    only: Option<Vec<i32>>,
    cx: SourceContext,
    decode: Decode<T>,
    malformed: Malformed,
    bounded: bool,
    /// The topics it reads partitions of, in the order it found them.
    topics: Vec<TopicState>,
    /// Its partitions as watermark splits, and where the last batch's records came from.
    splits: Splits,
    /// Partitions owned, and read to their end (bounded).
    owned: usize,
    done: usize,
    /// The consumer was assigned its partitions (at the first poll, after a restore's seek).
    assigned: bool,
    /// Positions of the last checkpoints, by id.
    taken: VecDeque<(u64, Position)>,
    /// How often it looks for new partitions and topics, and when next.
    discovery: Option<Duration>,
    next_discovery: Instant,
}

impl<T> Reader<T> {
    fn at(&self, what: String) -> String {
        format!("kafka source `{}`: {what}", self.label)
    }

    /// The topics it wants as the brokers have them now, with their partition counts.
    fn partitions_now(&self) -> Result<Vec<(String, i32)>, SourceError> {
        let metadata = match &self.want {
            Topics::Names(names) if names.len() == 1 => {
                self.consumer.fetch_metadata(Some(&names[0]), CALL_TIMEOUT)
            }
            _ => self.consumer.fetch_metadata(None, CALL_TIMEOUT),
        }
        .map_err(|e| SourceError::External {
            what: self.at("cannot read the topics' metadata".into()),
            source: boxed(e),
        })?;
        let mut found: Vec<(String, i32)> = metadata
            .topics()
            .iter()
            .filter(|t| t.error().is_none() && !t.partitions().is_empty())
            .filter(|t| self.want.matches(t.name()))
            .map(|t| (t.name().to_owned(), t.partitions().len() as i32))
            .collect();
        if let Topics::Names(names) = &self.want {
            // The listed order, so the first is the single topic's.
            found.sort_by_key(|(t, _)| names.iter().position(|n| n == t));
        } else {
            found.sort();
        }
        Ok(found)
    }

    /// The partitions of `found` this subtask owns.
    fn owned_of(&self, found: &[(String, i32)]) -> Vec<(String, i32)> {
        let (subtask, parallelism) = (self.cx.subtask, self.cx.parallelism);
        let mut out = Vec::new();
        for (topic, count) in found {
            match &self.only {
                Some(listed) => out.extend(
                    listed
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| i % parallelism == subtask)
                        .map(|(_, p)| (topic.clone(), *p)),
                ),
                None => out.extend(
                    (0..*count)
                        .filter(|p| owner(topic, *p, self.want.single(), parallelism) == subtask)
                        .map(|p| (topic.clone(), p)),
                ),
            }
        }
        out
    }

    /// Where partition `p` of `topic` starts under `start`.
    fn start_of(&self, topic: &str, p: i32, start: StartFrom) -> Result<i64, SourceError> {
        let (low, high) = self
            .consumer
            .fetch_watermarks(topic, p, CALL_TIMEOUT)
            .map_err(|e| SourceError::External {
                what: self.at(format!("cannot read {topic} partition {p}'s offsets")),
                source: boxed(e),
            })?;
        Ok(match start {
            StartFrom::Earliest => low,
            StartFrom::Latest => high,
            StartFrom::Timestamp(ts) => {
                let mut tpl = TopicPartitionList::new();
                tpl.add_partition_offset(topic, p, Offset::Offset(ts))
                    .map_err(|e| SourceError::External {
                        what: self.at("bad start timestamp".into()),
                        source: boxed(e),
                    })?;
                let found = self
                    .consumer
                    .offsets_for_times(tpl, CALL_TIMEOUT)
                    .map_err(|e| SourceError::External {
                        what: self.at(format!(
                            "cannot look up {topic} partition {p}'s offset for time {ts}"
                        )),
                        source: boxed(e),
                    })?;
                match found.find_partition(topic, p).map(|e| e.offset()) {
                    Some(Offset::Offset(o)) => o,
                    _ => high,
                }
            }
            StartFrom::GroupOffsets => {
                let mut tpl = TopicPartitionList::new();
                tpl.add_partition(topic, p);
                let found = self
                    .consumer
                    .committed_offsets(tpl, CALL_TIMEOUT)
                    .map_err(|e| SourceError::External {
                        what: self.at(format!(
                            "cannot read the group's offset of {topic} partition {p}"
                        )),
                        source: boxed(e),
                    })?;
                match found.find_partition(topic, p).map(|e| e.offset()) {
                    Some(Offset::Offset(o)) => o.max(low),
                    _ => low,
                }
            }
        })
    }

    /// Starts reading the partitions of `found` it owns and does not read yet, at `start`;
    /// those it adds once assigned are assigned too. How many it added.
    fn add_partitions(
        &mut self,
        found: &[(String, i32)],
        start: StartFrom,
    ) -> Result<usize, SourceError> {
        let mut added = TopicPartitionList::new();
        let mut n = 0;
        for (topic, p) in self.owned_of(found) {
            let t = match self.topics.iter().position(|t| t.name == topic) {
                Some(t) => t,
                None => {
                    self.topics.push(TopicState {
                        name: topic.clone(),
                        index: self.topics.len() as u64,
                        next: BTreeMap::new(),
                        done: BTreeSet::new(),
                        paused: BTreeSet::new(),
                    });
                    self.topics.len() - 1
                }
            };
            if self.topics[t].next.contains_key(&p) {
                continue;
            }
            let o = self.start_of(&topic, p, start)?;
            self.topics[t].next.insert(p, o);
            self.splits.add(self.topics[t].split(p));
            self.owned += 1;
            n += 1;
            if self.assigned {
                added
                    .add_partition_offset(&topic, p, Offset::Offset(o))
                    .map_err(|e| SourceError::External {
                        what: self.at(format!("bad offset {o} for {topic} partition {p}")),
                        source: boxed(e),
                    })?;
            }
        }
        if self.assigned && n > 0 {
            self.consumer
                .incremental_assign(&added)
                .map_err(|e| SourceError::External {
                    what: self.at("cannot assign the new partitions".into()),
                    source: boxed(e),
                })?;
        }
        Ok(n)
    }

    /// Looks for partitions and topics added since its start (read from their earliest
    /// offsets). Broker trouble is reported and tried again at the next interval.
    fn discover(&mut self, now: Instant) -> Result<(), SourceError> {
        let Some(every) = self.discovery else {
            return Ok(());
        };
        if now < self.next_discovery {
            return Ok(());
        }
        self.next_discovery = now + every;
        match self.partitions_now() {
            Ok(found) => {
                let n = self.add_partitions(&found, StartFrom::Earliest)?;
                if n > 0 {
                    tracing::info!(source = %self.label, subtask = self.cx.subtask, partitions = n, "kafka source: new partitions found");
                }
            }
            Err(e) => {
                tracing::warn!(source = %self.label, error = %e, "kafka source: cannot look for new partitions; trying again later")
            }
        }
        Ok(())
    }

    fn assign(&mut self) -> Result<(), SourceError> {
        let mut tpl = TopicPartitionList::new();
        for t in &self.topics {
            for (&p, &o) in t.next.iter().filter(|(p, _)| !t.paused.contains(p)) {
                tpl.add_partition_offset(&t.name, p, Offset::Offset(o))
                    .map_err(|e| SourceError::External {
                        what: self.at(format!("bad offset {o} for {} partition {p}", t.name)),
                        source: boxed(e),
                    })?;
            }
        }
        self.consumer
            .assign(&tpl)
            .map_err(|e| SourceError::External {
                what: self.at("cannot assign the partitions".into()),
                source: boxed(e),
            })?;
        self.assigned = true;
        Ok(())
    }

    /// The next offset of each owned partition: the position.
    fn offsets(&self) -> Position {
        self.topics
            .iter()
            .flat_map(|t| t.next.iter().map(|(p, o)| (t.name.clone(), *p, *o)))
            .collect()
    }

    fn finished(&self) -> bool {
        self.bounded && self.done == self.owned
    }

    /// The end of a partition `p` was reached: closes it (with one topic), or each topic's
    /// partition `p` that is read up to the broker's end (with several).
    fn close_at_end(&mut self, p: i32) {
        if self.topics.len() == 1 {
            return self.close_partition(0, p);
        }
        for t in 0..self.topics.len() {
            let topic = &self.topics[t];
            let Some(&next) = topic.next.get(&p) else {
                continue;
            };
            if topic.done.contains(&p) {
                continue;
            }
            match self.consumer.fetch_watermarks(&topic.name, p, CALL_TIMEOUT) {
                Ok((_, high)) if next >= high => self.close_partition(t, p),
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(topic = %topic.name, partition = p, error = %e, "cannot read a partition's end")
                }
            }
        }
    }

    /// Watermark alignment: the partitions of the splits in `paused` are unassigned from
    /// the consumer (what it fetched of them is dropped), every other paused one is assigned
    /// again at its next offset. Unassigning rather than pausing the consumer's fetch keeps
    /// nothing of a paused partition buffered in the client.
    fn pause_partitions(&mut self, paused: &[u64]) -> Result<(), SourceError> {
        let (mut stop, mut resume) = (TopicPartitionList::new(), TopicPartitionList::new());
        for topic in &mut self.topics {
            let wanted: BTreeSet<i32> = paused
                .iter()
                .filter_map(|id| topic.partition_of(*id))
                .filter(|p| topic.next.contains_key(p) && !topic.done.contains(p))
                .collect();
            for p in wanted.difference(&topic.paused) {
                stop.add_partition(&topic.name, *p);
            }
            for p in topic.paused.difference(&wanted) {
                let o = topic.next.get(p).copied().unwrap_or_default();
                resume
                    .add_partition_offset(&topic.name, *p, Offset::Offset(o))
                    .map_err(|e| SourceError::External {
                        what: format!(
                            "kafka source `{}`: bad offset {o} for {} partition {p}",
                            self.label, topic.name
                        ),
                        source: boxed(e),
                    })?;
            }
            topic.paused = wanted;
        }
        if !self.assigned {
            // Assigned at the first poll, without the paused ones.
            return Ok(());
        }
        if stop.count() > 0 {
            self.consumer
                .incremental_unassign(&stop)
                .map_err(|e| SourceError::External {
                    what: self.at("cannot pause partitions (watermark alignment)".into()),
                    source: boxed(e),
                })?;
        }
        if resume.count() > 0 {
            self.consumer
                .incremental_assign(&resume)
                .map_err(|e| SourceError::External {
                    what: self.at("cannot resume partitions (watermark alignment)".into()),
                    source: boxed(e),
                })?;
        }
        Ok(())
    }

    /// Partition `p` of topic `t` is read to its end: stop fetching it (bounded).
    fn close_partition(&mut self, t: usize, p: i32) {
        let topic = &mut self.topics[t];
        if topic.next.contains_key(&p) && topic.done.insert(p) {
            self.done += 1;
            self.splits.end(topic.split(p));
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition(&topic.name, p);
            if let Err(e) = self.consumer.pause(&tpl) {
                tracing::debug!(topic = %topic.name, partition = p, error = %e, "cannot pause a finished partition");
            }
        }
    }
}

impl<T: Data> Source<T> for Reader<T> {
    fn poll_batch(&mut self, out: &mut Vec<T>, max: usize) -> Result<SourceStatus, SourceError> {
        self.discover(Instant::now())?;
        if !self.assigned {
            self.assign()?;
        }
        self.splits.start_batch();
        if self.owned == 0 {
            // More subtasks than partitions, or no topic yet: nothing to read now.
            return Ok(if self.bounded {
                SourceStatus::End
            } else {
                SourceStatus::Idle {
                    until: self.discovery,
                }
            });
        }
        while out.len() < max && !self.finished() {
            let message = match self.consumer.poll(Duration::ZERO) {
                None => break,
                Some(Ok(m)) => m,
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    // Read to the partition's end as the broker has it now. The client does
                    // not say of which topic: with several, each whose partition `p` is read
                    // up to the broker's end is.
                    if self.bounded {
                        self.close_at_end(p);
                    }
                    continue;
                }
                Some(Err(e)) => {
                    // librdkafka retries broker trouble itself; these are reports.
                    tracing::warn!(source = %self.label, error = %e, "kafka consumer");
                    break;
                }
            };
            let (p, o) = (message.partition(), message.offset());
            // Only assigned topics' records come: with one, no name to compare per record.
            let t = match self.topics.len() {
                1 => 0,
                _ => match self.topics.iter().position(|t| t.name == message.topic()) {
                    Some(t) => t,
                    None => continue,
                },
            };
            let topic = &self.topics[t];
            // Not ours, already read (a fetch from before a reassignment), finished, or
            // paused (fetched before the pause: read again from `next` when resumed).
            if topic.next.get(&p).is_none_or(|next| o < *next)
                || topic.done.contains(&p)
                || topic.paused.contains(&p)
            {
                continue;
            }
            let view = RecordView {
                topic: &topic.name,
                partition: p,
                offset: o,
                timestamp: message.timestamp().to_millis(),
                key: message.key(),
                value: message.payload(),
            };
            match (self.decode)(&view) {
                Ok(record) => {
                    out.push(record);
                    self.splits.record_from(topic.split(p));
                }
                Err(error) => {
                    let at = format!("topic {} partition {p} offset {o}", topic.name);
                    match self.malformed {
                        Malformed::Fail => {
                            return Err(SourceError::BadRecord { at, message: error })
                        }
                        Malformed::Skip => {
                            tracing::warn!(%at, %error, "skipping a malformed kafka record")
                        }
                    }
                }
            }
            self.topics[t].next.insert(p, o + 1);
        }
        Ok(if self.finished() {
            SourceStatus::End
        } else if out.len() >= max {
            SourceStatus::More
        } else {
            // Woken when the client's queue gets a record; the delay is a safety net.
            SourceStatus::Idle {
                until: Some(Duration::from_millis(100)),
            }
        })
    }

    fn splits(&self) -> Option<&Splits> {
        Some(&self.splits)
    }

    fn set_waker(&mut self, waker: SourceWaker) {
        self.consumer.set_nonempty_callback(move || waker.wake());
    }

    fn pause_splits(&mut self, paused: &[u64]) -> Result<bool, SourceError> {
        self.pause_partitions(paused)?;
        Ok(true)
    }

    fn position(&self) -> Option<Vec<u8>> {
        weir::checkpoint::encode(&self.offsets()).ok()
    }

    fn checkpoint_position(&mut self, checkpoint: u64) -> Option<Vec<u8>> {
        let next = self.offsets();
        let bytes = weir::checkpoint::encode(&next).ok();
        if self.taken.len() == TAKEN {
            self.taken.pop_front();
        }
        self.taken.push_back((checkpoint, next));
        bytes
    }

    fn seek(&mut self, position: &[u8]) -> Result<(), SourceError> {
        let restored: Position = match weir::checkpoint::decode::<Position>(position) {
            Ok(r) => r,
            // A checkpoint of a one-topic source from before topic lists: its partitions.
            Err(_) => match (
                weir::checkpoint::decode::<Vec<(i32, i64)>>(position),
                self.want.single(),
            ) {
                (Ok(old), true) => {
                    let name = self
                        .topics
                        .first()
                        .map(|t| t.name.clone())
                        .unwrap_or_default();
                    old.into_iter().map(|(p, o)| (name.clone(), p, o)).collect()
                }
                (Err(message), _) => return Err(SourceError::BadPosition { message }),
                (Ok(_), false) => {
                    return Err(SourceError::BadPosition {
                        message: self.at("the checkpoint is of a source of one topic".into()),
                    })
                }
            },
        };
        let mut seen = BTreeSet::new();
        for (topic, p, o) in restored {
            let slot = self
                .topics
                .iter_mut()
                .find(|t| t.name == topic)
                .and_then(|t| t.next.get_mut(&p));
            match slot {
                Some(n) => {
                    *n = o;
                    seen.insert((topic, p));
                }
                None if matches!(self.want, Topics::Pattern(_)) => {
                    // The topic is gone (or no longer this subtask's): nothing to read of it.
                    tracing::warn!(source = %self.label, %topic, partition = p, "kafka source: a checkpointed partition is not there any more");
                }
                None => {
                    return Err(SourceError::BadPosition {
                        message: self.at(format!(
                            "the checkpoint has {topic} partition {p}, which this subtask does \
                             not read (its partitions: {:?})",
                            self.offsets()
                                .iter()
                                .map(|(t, p, _)| format!("{t}/{p}"))
                                .collect::<Vec<_>>()
                        )),
                    })
                }
            }
        }
        // Partitions found since that checkpoint was taken: read from their start, as when
        // discovery finds them.
        let unseen: Vec<(String, i32)> = self
            .topics
            .iter()
            .flat_map(|t| t.next.keys().map(|p| (t.name.clone(), *p)))
            .filter(|k| !seen.contains(k))
            .collect();
        if self.discovery.is_some() || matches!(self.want, Topics::Pattern(_)) {
            for (topic, p) in unseen {
                let o = self.start_of(&topic, p, StartFrom::Earliest)?;
                if let Some(n) = self
                    .topics
                    .iter_mut()
                    .find(|t| t.name == topic)
                    .and_then(|t| t.next.get_mut(&p))
                {
                    *n = o;
                }
            }
        }
        if self.assigned {
            self.assign()?;
        }
        Ok(())
    }

    fn notify_complete(&mut self, checkpoint: u64) -> Result<(), SourceError> {
        let mut offsets = None;
        while self.taken.front().is_some_and(|(id, _)| *id <= checkpoint) {
            offsets = self.taken.pop_front().map(|(_, o)| o);
        }
        let Some(offsets) = offsets else {
            return Ok(());
        };
        let mut tpl = TopicPartitionList::new();
        for (topic, p, o) in offsets {
            // A bad offset cannot come from here; and the commit is for monitoring only.
            let _ = tpl.add_partition_offset(&topic, p, Offset::Offset(o));
        }
        if let Err(e) = self.consumer.commit(&tpl, CommitMode::Async) {
            tracing::warn!(source = %self.label, error = %e, "cannot commit the source's offsets to its group (monitoring only)");
        }
        Ok(())
    }
}
