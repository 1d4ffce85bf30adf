//! The Kafka source: the partitions of a topic, a list of topics or the topics a pattern
//! matches, shared among the source's subtasks, each read from a checkpointed offset; and the
//! periodic discovery of partitions and topics added while the job runs. This file is the
//! source's builder, which partitions a subtask owns and the `Env` extension; a subtask's
//! reader (assignment, polling, discovery, checkpointed positions) is `reader`.

use std::sync::Arc;
use std::time::Duration;

use crate::KafkaConfig;
use weir::error::SourceError;
use weir::stream::DataStream;
use weir::time::WatermarkStrategy;
use weir::Data;
use weir::Env;

mod reader;

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
