//! The Kafka source: the partitions of a topic, a list of topics or the topics a pattern
//! matches, shared among the source's subtasks, each read from a checkpointed offset; and the
//! periodic discovery of partitions and topics added while the job runs.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// The topic it was read from.
    pub topic: &'a str,
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
    /// The topic it was read from.
    pub topic: String,
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

/// Topics read by a job (Flink's `KafkaSource`): add it with [`KafkaEnvExt::kafka_source`].
///
/// One topic ([`new`](Self::new)), a list ([`with_topics`](Self::with_topics)) or every
/// topic a regular expression matches ([`with_topic_pattern`](Self::with_topic_pattern)).
/// Partition `p` of a single topic is read by subtask `p % parallelism`; with several topics,
/// by subtask `(h + p) % parallelism`, `h` a stable hash of the topic's name (so the
/// partitions of each topic spread over the subtasks, as in Flink). A subtask's checkpointed
/// position is the next offset of each of its partitions; read_committed, so records of open
/// or aborted transactions are not read. Records are decoded from a [`RecordView`] by the
/// function given, on the subtask's thread, without a copy of the payload.
///
/// An unbounded source looks for partitions and matching topics added while it runs every
/// 5 minutes by default ([`discover_every`](Self::discover_every)), as Flink's does, and
/// reads a new one from its earliest offset.
pub struct KafkaSource<T> {
    pub(super) config: KafkaConfig,
    pub(super) only: Option<Vec<i32>>,
    topics: Topics,
    /// The topic, the topics or the pattern, for messages and the default group.
    label: String,
    decode: Decode<T>,
    start: StartFrom,
    bounded: bool,
    group: Option<String>,
    malformed: Malformed,
    discovery: Discovery,
}

/// Which topics a source reads.
#[derive(Debug, Clone)]
enum Topics {
    Names(Vec<String>),
    Pattern(regex::Regex),
}

impl Topics {
    fn matches(&self, name: &str) -> bool {
        match self {
            Topics::Names(names) => names.iter().any(|n| n == name),
            // Internal topics (`__consumer_offsets`, ...) are never a pattern's.
            Topics::Pattern(re) => !name.starts_with("__") && re.is_match(name),
        }
    }

    /// One named topic: partition `p` goes to subtask `p % parallelism`, as before topic
    /// lists existed (checkpoints of such sources restore unchanged).
    fn single(&self) -> bool {
        matches!(self, Topics::Names(n) if n.len() == 1)
    }
}

/// How often an unbounded source looks for new partitions and topics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Discovery {
    /// Every 5 minutes when unbounded (Flink's default), never when bounded.
    Default,
    Every(Duration),
    Off,
}

/// Flink's `partition.discovery.interval.ms` default.
const DEFAULT_DISCOVERY: Duration = Duration::from_secs(300);

/// The subtask of `parallelism` that reads partition `p` of `topic`.
fn owner(topic: &str, p: i32, single: bool, parallelism: usize) -> usize {
    let start = if single {
        0
    } else {
        // FNV-1a: the same in every process and run.
        let h = topic.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        (h % parallelism.max(1) as u64) as usize
    };
    (start + usize::try_from(p).unwrap_or(0)) % parallelism.max(1)
}

impl<T> Clone for KafkaSource<T> {
    fn clone(&self) -> Self {
        KafkaSource {
            config: self.config.clone(),
            only: self.only.clone(),
            topics: self.topics.clone(),
            label: self.label.clone(),
            decode: self.decode.clone(),
            start: self.start,
            bounded: self.bounded,
            group: self.group.clone(),
            malformed: self.malformed,
            discovery: self.discovery,
        }
    }
}

impl<T> std::fmt::Debug for KafkaSource<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSource")
            .field("brokers", &self.config.brokers())
            .field("topics", &self.label)
            .field("start", &self.start)
            .field("bounded", &self.bounded)
            .field("group", &self.group)
            .field("malformed", &self.malformed)
            .field("discovery", &self.discovery)
            .finish()
    }
}

impl KafkaSource<KafkaRecord> {
    /// Reads `topic`'s records as they are ([`KafkaRecord`]: partition, offset, timestamp,
    /// key, value).
    pub fn records(config: KafkaConfig, topic: impl Into<String>) -> Self {
        KafkaSource::new(config, topic, |r| {
            Ok(KafkaRecord {
                topic: r.topic.to_owned(),
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
        let topic = topic.into();
        KafkaSource {
            config,
            only: None,
            label: topic.clone(),
            topics: Topics::Names(vec![topic]),
            decode: Arc::new(decode),
            start: StartFrom::Earliest,
            bounded: false,
            group: None,
            malformed: Malformed::Fail,
            discovery: Discovery::Default,
        }
    }

    /// Reads every topic of `topics` (Flink's `setTopics`), as [`new`](Self::new) reads one:
    /// [`RecordView::topic`] says which a record came from.
    ///
    /// ```
    /// use weir_kafka::{KafkaConfig, KafkaSource};
    /// let kafka = KafkaConfig::new("127.0.0.1:9092");
    /// let s = KafkaSource::with_topics(kafka, ["orders", "returns"], |r| Ok(r.topic.to_owned()));
    /// assert_eq!(s.topic(), "orders, returns");
    /// ```
    pub fn with_topics<S: Into<String>>(
        config: KafkaConfig,
        topics: impl IntoIterator<Item = S>,
        decode: impl Fn(&RecordView<'_>) -> Result<T, String> + Send + Sync + 'static,
    ) -> Self {
        let names: Vec<String> = topics.into_iter().map(Into::into).collect();
        let mut s = KafkaSource::new(config, String::new(), decode);
        s.label = names.join(", ");
        s.topics = Topics::Names(names);
        s
    }

    /// Reads every topic whose whole name matches the regular expression `pattern` (Flink's
    /// `setTopicPattern`; internal topics, named `__...`, never match), and those created
    /// later once discovery finds them. A bad pattern is an error naming it.
    ///
    /// ```
    /// use weir_kafka::{KafkaConfig, KafkaSource};
    /// let kafka = KafkaConfig::new("127.0.0.1:9092");
    /// let s = KafkaSource::with_topic_pattern(kafka.clone(), "orders-.*", |r| Ok(r.offset)).unwrap();
    /// assert_eq!(s.topic(), "orders-.*");
    /// assert!(KafkaSource::with_topic_pattern(kafka, "orders-(", |r| Ok(r.offset)).is_err());
    /// ```
    pub fn with_topic_pattern(
        config: KafkaConfig,
        pattern: &str,
        decode: impl Fn(&RecordView<'_>) -> Result<T, String> + Send + Sync + 'static,
    ) -> Result<Self, SourceError> {
        let re =
            regex::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| SourceError::Setup {
                source: format!("kafka source: bad topic pattern `{pattern}`: {e}").into(),
            })?;
        let mut s = KafkaSource::new(config, pattern, decode);
        s.topics = Topics::Pattern(re);
        Ok(s)
    }

    /// Looks for partitions and matching topics added while the job runs every `interval`
    /// (Flink's `partition.discovery.interval.ms`; default 5 minutes for an unbounded source);
    /// `None` turns it off. A bounded source never looks: it ends with what it found at its
    /// start.
    pub fn discover_every(mut self, interval: Option<Duration>) -> Self {
        self.discovery = match interval {
            Some(d) if !d.is_zero() => Discovery::Every(d),
            _ => Discovery::Off,
        };
        self
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

    /// The topic; for a list, the topics joined with `, `; for a pattern, the pattern.
    pub fn topic(&self) -> &str {
        &self.label
    }

    /// Whether it reads one named topic (group mode needs one).
    pub(crate) fn is_single_topic(&self) -> bool {
        self.topics.single()
    }

    fn group(&self) -> String {
        self.group
            .clone()
            .unwrap_or_else(|| format!("weir-{}", self.label))
    }

    fn discovery(&self) -> Option<Duration> {
        match self.discovery {
            _ if self.bounded || self.only.is_some() => None,
            Discovery::Default => Some(DEFAULT_DISCOVERY),
            Discovery::Every(d) => Some(d),
            Discovery::Off => None,
        }
    }

    /// Opens subtask `cx`'s reader: its partitions and where each starts.
    fn open(&self, cx: SourceContext) -> Result<Reader<T>, SourceError> {
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
}

impl TopicState {
    fn split(&self, p: i32) -> u64 {
        (self.index << 32) | u64::from(p.unsigned_abs())
    }
}

/// One subtask's reader.
struct Reader<T> {
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
            for (&p, &o) in &t.next {
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
            // Not ours, already read (a fetch from before a reassignment), or finished.
            if topic.next.get(&p).is_none_or(|next| o < *next) || topic.done.contains(&p) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_topic_keeps_partition_p_on_subtask_p_mod_parallelism() {
        for p in 0..16 {
            assert_eq!(owner("orders", p, true, 3), p as usize % 3);
        }
    }

    #[test]
    fn the_partitions_of_several_topics_spread_over_every_subtask() {
        for parallelism in [1, 2, 3, 5] {
            for topic in ["a", "orders", "returns-2026"] {
                let mut per = vec![0; parallelism];
                for p in 0..(parallelism as i32 * 4) {
                    per[owner(topic, p, false, parallelism)] += 1;
                }
                assert!(
                    per.iter().all(|&n| n == 4),
                    "{topic} p={parallelism}: {per:?}"
                );
            }
        }
        assert_eq!(owner("x", 7, false, 4), owner("x", 7, false, 4), "stable");
    }

    #[test]
    fn a_pattern_matches_whole_names_and_never_internal_topics() {
        let t = Topics::Pattern(regex::Regex::new("^(?:orders-.*)$").unwrap());
        assert!(t.matches("orders-eu"));
        assert!(!t.matches("old-orders-eu"));
        assert!(
            !Topics::Pattern(regex::Regex::new("^(?:.*)$").unwrap()).matches("__consumer_offsets")
        );
        assert!(Topics::Names(vec!["a".into(), "b".into()]).matches("b"));
        assert!(!Topics::Names(vec!["a".into(), "b".into()]).single());
    }
}
