//! The Kafka source: a topic's partitions shared among the source's subtasks, each read from
//! a checkpointed offset.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::{boxed, KafkaConfig, CALL_TIMEOUT};
use weir::error::SourceError;
use weir::source::{Source, SourceContext, SourceStatus, SourceWaker, Splits};
use weir::stream::DataStream;
use weir::time::WatermarkStrategy;
use weir::Data;
use weir::Env;

/// Where a partition is read from when the job does not restore a checkpoint (a restored
/// job always resumes at the checkpointed offsets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartFrom {
    /// The oldest record the broker still has.
    Earliest,
    /// After the last record at the job's start: only what is written from then on.
    Latest,
    /// The first record whose timestamp is at or after this many milliseconds since the
    /// Unix epoch (the end of the partition if there is none).
    Timestamp(i64),
    /// The offsets last committed by the source's consumer group; the earliest where the
    /// group has committed none.
    GroupOffsets,
}

/// What to do with a record the decoder refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// Fail the job, naming the record's topic, partition and offset (every restart would
    /// meet it again, so the job does not restart).
    Fail,
    /// Skip it, with a warning naming where it is.
    Skip,
}

/// A record as read, borrowed from the client's buffer: what a decoder sees.
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a> {
    /// The partition it was read from.
    pub partition: i32,
    /// Its offset in that partition: with the partition, the record's identity.
    pub offset: i64,
    /// Its timestamp, in milliseconds since the Unix epoch, if it has one.
    pub timestamp: Option<i64>,
    /// Its key.
    pub key: Option<&'a [u8]>,
    /// Its value (payload).
    pub value: Option<&'a [u8]>,
}

/// A record as read, owned: what [`KafkaSource::records`] emits.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KafkaRecord {
    /// The partition it was read from.
    pub partition: i32,
    /// Its offset in that partition.
    pub offset: i64,
    /// Its timestamp, in milliseconds since the Unix epoch, if it has one.
    pub timestamp: Option<i64>,
    /// Its key.
    pub key: Option<Vec<u8>>,
    /// Its value.
    pub value: Option<Vec<u8>>,
}

type Decode<T> = Arc<dyn Fn(&RecordView<'_>) -> Result<T, String> + Send + Sync>;

/// A topic read by a job (Flink's `KafkaSource`): add it with [`KafkaEnvExt::kafka_source`].
///
/// Partition `p` is read by subtask `p % parallelism`. A subtask's checkpointed position is
/// the next offset of each of its partitions; read_committed, so records of open or aborted
/// transactions are not read. Records are decoded from a [`RecordView`] by the function
/// given to [`new`](Self::new), on the subtask's thread, without a copy of the payload.
pub struct KafkaSource<T> {
    pub(super) config: KafkaConfig,
    pub(super) only: Option<Vec<i32>>,
    topic: String,
    decode: Decode<T>,
    start: StartFrom,
    bounded: bool,
    group: Option<String>,
    malformed: Malformed,
}

impl<T> Clone for KafkaSource<T> {
    fn clone(&self) -> Self {
        KafkaSource {
            config: self.config.clone(),
            only: self.only.clone(),
            topic: self.topic.clone(),
            decode: self.decode.clone(),
            start: self.start,
            bounded: self.bounded,
            group: self.group.clone(),
            malformed: self.malformed,
        }
    }
}

impl<T> std::fmt::Debug for KafkaSource<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSource")
            .field("brokers", &self.config.brokers())
            .field("topic", &self.topic)
            .field("start", &self.start)
            .field("bounded", &self.bounded)
            .field("group", &self.group)
            .field("malformed", &self.malformed)
            .finish()
    }
}

impl KafkaSource<KafkaRecord> {
    /// Reads `topic`'s records as they are ([`KafkaRecord`]: partition, offset, timestamp,
    /// key, value).
    pub fn records(config: KafkaConfig, topic: impl Into<String>) -> Self {
        KafkaSource::new(config, topic, |r| {
            Ok(KafkaRecord {
                partition: r.partition,
                offset: r.offset,
                timestamp: r.timestamp,
                key: r.key.map(<[u8]>::to_vec),
                value: r.value.map(<[u8]>::to_vec),
            })
        })
    }
}

impl<T: Data> KafkaSource<T> {
    /// Reads `topic`, decoding each record with `decode` (an `Err` is a malformed record:
    /// see [`on_malformed`](Self::on_malformed)). Starts at the earliest offsets, unbounded.
    pub fn new(
        config: KafkaConfig,
        topic: impl Into<String>,
        decode: impl Fn(&RecordView<'_>) -> Result<T, String> + Send + Sync + 'static,
    ) -> Self {
        KafkaSource {
            config,
            only: None,
            topic: topic.into(),
            decode: Arc::new(decode),
            start: StartFrom::Earliest,
            bounded: false,
            group: None,
            malformed: Malformed::Fail,
        }
    }

    /// Where to start without a checkpoint to restore.
    pub fn start_from(mut self, start: StartFrom) -> Self {
        self.start = start;
        self
    }

    /// Ends the input once each partition has been read to its end (the first time the
    /// client finds no more records in it, as Flink's `setBounded(OffsetsInitializer.latest())`
    /// ends at the offsets of the start): the job then finishes. Records written after a
    /// partition's end was found are not read.
    pub fn bounded(mut self) -> Self {
        self.bounded = true;
        self
    }

    /// The consumer group offsets are committed to when a checkpoint completes (for lag
    /// monitoring), and read by [`StartFrom::GroupOffsets`]. Default: `weir-{topic}`.
    pub fn group_id(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// What to do with a record `decode` refuses (default [`Malformed::Fail`]).
    pub fn on_malformed(mut self, policy: Malformed) -> Self {
        self.malformed = policy;
        self
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    fn group(&self) -> String {
        self.group
            .clone()
            .unwrap_or_else(|| format!("weir-{}", self.topic))
    }

    /// Opens subtask `cx`'s reader: its partitions and where each starts.
    fn open(&self, cx: SourceContext) -> Result<Reader<T>, SourceError> {
        let at = |what: &str| format!("kafka source `{}`: {what}", self.topic);
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
        let metadata = consumer
            .fetch_metadata(Some(&self.topic), CALL_TIMEOUT)
            .map_err(|e| SourceError::External {
                what: at("cannot read the topic's metadata"),
                source: boxed(e),
            })?;
        let count = metadata
            .topics()
            .iter()
            .find(|t| t.name() == self.topic)
            .filter(|t| t.error().is_none())
            .map(|t| t.partitions().len())
            .unwrap_or(0);
        if count == 0 {
            return Err(SourceError::External {
                what: at("no such topic on the brokers"),
                source: format!("brokers {}", self.config.brokers()).into(),
            });
        }
        let partitions: Vec<i32> = match &self.only {
            None => (0..count as i32)
                .filter(|p| *p as usize % cx.parallelism == cx.subtask)
                .collect(),
            Some(listed) => {
                if let Some(p) = listed.iter().find(|p| **p < 0 || **p as usize >= count) {
                    return Err(SourceError::Setup {
                        source: at(&format!("partition {p} is not one of its {count}")).into(),
                    });
                }
                listed
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| i % cx.parallelism == cx.subtask)
                    .map(|(_, p)| *p)
                    .collect()
            }
        };
        let mut next = BTreeMap::new();
        for &p in &partitions {
            let (low, high) = consumer
                .fetch_watermarks(&self.topic, p, CALL_TIMEOUT)
                .map_err(|e| SourceError::External {
                    what: at(&format!("cannot read partition {p}'s offsets")),
                    source: boxed(e),
                })?;
            let start = match self.start {
                StartFrom::Earliest => low,
                StartFrom::Latest => high,
                StartFrom::Timestamp(ts) => {
                    let mut tpl = TopicPartitionList::new();
                    tpl.add_partition_offset(&self.topic, p, Offset::Offset(ts))
                        .map_err(|e| SourceError::External {
                            what: at("bad start timestamp"),
                            source: boxed(e),
                        })?;
                    let found = consumer.offsets_for_times(tpl, CALL_TIMEOUT).map_err(|e| {
                        SourceError::External {
                            what: at(&format!(
                                "cannot look up partition {p}'s offset for time {ts}"
                            )),
                            source: boxed(e),
                        }
                    })?;
                    match found.find_partition(&self.topic, p).map(|e| e.offset()) {
                        Some(Offset::Offset(o)) => o,
                        _ => high,
                    }
                }
                StartFrom::GroupOffsets => {
                    let mut tpl = TopicPartitionList::new();
                    tpl.add_partition(&self.topic, p);
                    let found = consumer.committed_offsets(tpl, CALL_TIMEOUT).map_err(|e| {
                        SourceError::External {
                            what: at(&format!("cannot read the group's offset of partition {p}")),
                            source: boxed(e),
                        }
                    })?;
                    match found.find_partition(&self.topic, p).map(|e| e.offset()) {
                        Some(Offset::Offset(o)) => o.max(low),
                        _ => low,
                    }
                }
            };
            next.insert(p, start);
        }
        Ok(Reader {
            consumer,
            topic: self.topic.clone(),
            decode: self.decode.clone(),
            malformed: self.malformed,
            bounded: self.bounded,
            splits: Splits::new(partitions.iter().map(|p| *p as u64)),
            partitions,
            next,
            done: BTreeSet::new(),
            assigned: false,
            taken: VecDeque::new(),
        })
    }
}

/// Kafka sources on an [`Env`]: `use weir_kafka::KafkaEnvExt` and call
/// `env.kafka_source(name, source)`.
pub trait KafkaEnvExt {
    /// Adds a Kafka source (see [`KafkaSource`]). Each subtask reads its partitions.
    fn kafka_source<T: Data>(&self, name: &str, source: KafkaSource<T>) -> DataStream<T>;

    /// Adds a Kafka source whose records get their event time and watermarks from
    /// `strategy` (see [`Env::add_source_with_watermarks`]), per partition: a subtask's
    /// watermark is the minimum over its partitions that are not idle, so a partition read
    /// behind the others does not have its records dropped as late. A partition with no
    /// record for the strategy's idleness timeout stops holding the watermark back until its
    /// next record; without an idleness timeout an empty partition holds it back for ever (as
    /// in Flink). A bounded source's partition read to its end no longer counts.
    fn kafka_source_with_watermarks<T: Data>(
        &self,
        name: &str,
        source: KafkaSource<T>,
        strategy: WatermarkStrategy<T>,
    ) -> DataStream<T>;
}

impl KafkaEnvExt for Env {
    fn kafka_source<T: Data>(&self, name: &str, source: KafkaSource<T>) -> DataStream<T> {
        self.add_source(name, move |cx| source.open(cx))
    }

    fn kafka_source_with_watermarks<T: Data>(
        &self,
        name: &str,
        source: KafkaSource<T>,
        strategy: WatermarkStrategy<T>,
    ) -> DataStream<T> {
        self.add_source_with_watermarks(name, move |cx| source.open(cx), strategy)
    }
}

/// The positions of the last checkpoints taken, for the group commit when one completes.
const TAKEN: usize = 16;

/// One subtask's reader.
struct Reader<T> {
    consumer: BaseConsumer,
    topic: String,
    decode: Decode<T>,
    malformed: Malformed,
    bounded: bool,
    /// The partitions this subtask owns.
    partitions: Vec<i32>,
    /// Its partitions as watermark splits, and where the last batch's records came from.
    splits: Splits,
    /// The next offset to read, per owned partition.
    next: BTreeMap<i32, i64>,
    /// Partitions read to their end (bounded): the client reported it.
    done: BTreeSet<i32>,
    /// The consumer was assigned its partitions (at the first poll, after a restore's seek).
    assigned: bool,
    /// Positions of the last checkpoints, by id.
    taken: VecDeque<(u64, Vec<(i32, i64)>)>,
}

impl<T> Reader<T> {
    fn at(&self, what: String) -> String {
        format!("kafka source `{}`: {what}", self.topic)
    }

    fn assign(&mut self) -> Result<(), SourceError> {
        let mut tpl = TopicPartitionList::new();
        for (&p, &o) in &self.next {
            tpl.add_partition_offset(&self.topic, p, Offset::Offset(o))
                .map_err(|e| SourceError::External {
                    what: self.at(format!("bad offset {o} for partition {p}")),
                    source: boxed(e),
                })?;
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
    fn offsets(&self) -> Vec<(i32, i64)> {
        self.next.iter().map(|(p, o)| (*p, *o)).collect()
    }

    fn finished(&self) -> bool {
        self.bounded && self.done.len() == self.partitions.len()
    }

    /// Partition `p` is read to its end: stop fetching it (bounded).
    fn close_partition(&mut self, p: i32) {
        if self.done.insert(p) {
            self.splits.end(p as u64);
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition(&self.topic, p);
            if let Err(e) = self.consumer.pause(&tpl) {
                tracing::debug!(topic = %self.topic, partition = p, error = %e, "cannot pause a finished partition");
            }
        }
    }
}

impl<T: Data> Source<T> for Reader<T> {
    fn poll_batch(&mut self, out: &mut Vec<T>, max: usize) -> Result<SourceStatus, SourceError> {
        if !self.assigned {
            self.assign()?;
        }
        self.splits.start_batch();
        if self.partitions.is_empty() {
            // More subtasks than partitions: this one has nothing to read.
            return Ok(if self.bounded {
                SourceStatus::End
            } else {
                SourceStatus::Idle { until: None }
            });
        }
        while out.len() < max && !self.finished() {
            let message = match self.consumer.poll(Duration::ZERO) {
                None => break,
                Some(Ok(m)) => m,
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    // Read to the partition's end as the broker has it now.
                    if self.bounded {
                        self.close_partition(p);
                    }
                    continue;
                }
                Some(Err(e)) => {
                    // librdkafka retries broker trouble itself; these are reports.
                    tracing::warn!(topic = %self.topic, error = %e, "kafka consumer");
                    break;
                }
            };
            let (p, o) = (message.partition(), message.offset());
            if !self.next.contains_key(&p) {
                continue;
            }
            if self.bounded && self.done.contains(&p) {
                continue;
            }
            let view = RecordView {
                partition: p,
                offset: o,
                timestamp: message.timestamp().to_millis(),
                key: message.key(),
                value: message.payload(),
            };
            match (self.decode)(&view) {
                Ok(record) => {
                    out.push(record);
                    self.splits.record_from(p as u64);
                }
                Err(error) => {
                    let at = format!("topic {} partition {p} offset {o}", self.topic);
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
            self.next.insert(p, o + 1);
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
        let restored: Vec<(i32, i64)> = weir::checkpoint::decode(position)
            .map_err(|message| SourceError::BadPosition { message })?;
        for (p, o) in restored {
            match self.next.get_mut(&p) {
                Some(n) => *n = o,
                None => {
                    return Err(SourceError::BadPosition {
                        message: self.at(format!(
                            "the checkpoint has partition {p}, which this subtask does not read \
                             (its partitions: {:?})",
                            self.partitions
                        )),
                    })
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
        for (p, o) in offsets {
            // A bad offset cannot come from here; and the commit is for monitoring only.
            let _ = tpl.add_partition_offset(&self.topic, p, Offset::Offset(o));
        }
        if let Err(e) = self.consumer.commit(&tpl, CommitMode::Async) {
            tracing::warn!(topic = %self.topic, error = %e, "cannot commit the source's offsets to its group (monitoring only)");
        }
        Ok(())
    }
}
