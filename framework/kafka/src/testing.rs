//! Tests of Kafka jobs against a real broker: where the broker is ([`brokers`]), topics for one
//! test ([`unique_topic`], [`create_topic`]), input ([`produce_ids`]), and what a sink
//! committed, read back independently of the client under test ([`read_committed`],
//! [`partition_offsets`], [`assert_no_transaction_left_open`], [`ids`]).
//!
//! This module owns the test side of Kafka only: it sets up topics and input with librdkafka's
//! plain (non-transactional) clients, and reads output back over the Kafka wire protocol itself
//! (the `kafka-protocol` crate's codecs on a `std` TCP stream). It reads each partition's log
//! as it is, uncommitted and aborted records included, and applies the transaction markers
//! (COMMIT, ABORT control records) itself. So the check does not trust the broker's
//! read_committed filtering, which the test broker gets wrong (tansu hands read_committed
//! readers aborted records too), nor the client whose output it checks. That reader is the
//! module `wire`; this one has the helpers tests call.
//!
//! The broker is named by the environment variable `WEIR_KAFKA_BROKERS` (`host:port`; the
//! first of a comma-separated list is the one read from: the reader expects one broker, as
//! the test broker is). `tests/run` starts the test broker, tansu, and sets it; a test that
//! needs it takes it with [`required_brokers`] (which panics without it) and is marked ignored
//! when it is not there, so that it never passes without running. `tests/run` also sets
//! `WEIR_KAFKA_BROKER_KIND=tansu` ([`broker_is_tansu`]), for the few checks where tansu 0.6
//! deviates from Kafka: ListOffsets answers (see [`list_offsets`]), read_committed fetches
//! (aborted records included), transactions never time out, and a fenced producer's commit
//! times out instead of failing with a fencing error.
//!
//! ```no_run
//! use weir_kafka::testing as kafka;
//! # fn main() -> Result<(), kafka::KafkaTestError> {
//! let brokers = kafka::required_brokers(); // panics naming WEIR_KAFKA_BROKERS if unset
//! let input = kafka::unique_topic("orders-in");
//! kafka::create_topic(&brokers, &input, 4)?;
//! kafka::produce_ids(&brokers, &input, 4, 0..1_000)?;
//! let output = kafka::unique_topic("orders-out");
//! kafka::create_topic(&brokers, &output, 2)?;
//! // ... run a job reading `input` and writing `output` with an exactly-once sink ...
//! let committed = kafka::read_committed(&brokers, &output)?;
//! let mut got = kafka::ids(&committed);
//! got.sort_unstable();
//! assert_eq!(got, (0..1_000).collect::<Vec<u64>>());
//! // No transaction left open: everything written is decided.
//! kafka::assert_no_transaction_left_open(&brokers, &output, std::time::Duration::from_secs(10));
//! # Ok(())
//! # }
//! ```

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kafka_protocol::ResponseError;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};

mod wire;
use wire::Wire;

/// The Kafka client the helpers use (librdkafka's Rust binding), for tests that drive a
/// producer or consumer of their own with the same version (a transactional producer, a
/// consumer group's committed offsets).
pub use rdkafka;

/// The environment variable naming the test broker (`host:port`).
pub const BROKERS_ENV: &str = "WEIR_KAFKA_BROKERS";

/// How long the helpers wait for the broker (a topic's creation, deliveries, a reply).
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// What went wrong talking to the test broker, naming the broker, the topic (and partition)
/// and the step that failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KafkaTestError {
    /// No TCP connection to the broker.
    #[error("Kafka broker {broker}: cannot connect: {source}")]
    Connect {
        /// The broker's address.
        broker: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The connection failed during a request (reset, timed out, closed).
    #[error("Kafka broker {broker}: {api} request failed: {source}")]
    Io {
        /// The broker's address.
        broker: String,
        /// The request (Metadata, Fetch, ...).
        api: &'static str,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A request could not be encoded, or a reply not decoded, or the broker supports no
    /// version of a request that the reader speaks.
    #[error("Kafka broker {broker}: {api}: {message}")]
    Protocol {
        /// The broker's address.
        broker: String,
        /// The request.
        api: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The broker answered with an error code.
    #[error("Kafka broker {broker}: {api} of topic `{topic}`{}: {error}", partition_suffix(*.partition))]
    Broker {
        /// The broker's address.
        broker: String,
        /// The request.
        api: &'static str,
        /// The topic.
        topic: String,
        /// The partition, when the error is a partition's.
        partition: Option<i32>,
        /// The broker's error.
        error: ResponseError,
    },
    /// A record batch in a partition's log could not be decoded.
    #[error("Kafka broker {broker}: topic `{topic}` partition {partition}: record batch at offset {offset}: {message}")]
    Batch {
        /// The broker's address.
        broker: String,
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The batch's base offset.
        offset: i64,
        /// What is wrong with it.
        message: String,
    },
    /// Fetches made no progress below the partition's high watermark.
    #[error("Kafka broker {broker}: topic `{topic}` partition {partition}: fetches at offset {offset} returned no record batch for {waited:?}, high watermark {high_watermark}")]
    Stuck {
        /// The broker's address.
        broker: String,
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The offset fetched at.
        offset: i64,
        /// The partition's high watermark.
        high_watermark: i64,
        /// How long it fetched in vain.
        waited: Duration,
    },
    /// A librdkafka client (admin, producer) failed.
    #[error("Kafka brokers {brokers}: topic `{topic}`: {what}: {source}")]
    Client {
        /// The brokers the client was given.
        brokers: String,
        /// The topic.
        topic: String,
        /// The step that failed.
        what: &'static str,
        /// librdkafka's error (boxed: it is large).
        source: Box<KafkaError>,
    },
    /// Records produced by [`produce_ids`] were not delivered.
    #[error("Kafka brokers {brokers}: topic `{topic}`: {failed} of {total} records not delivered, the first: {first}")]
    Delivery {
        /// The brokers.
        brokers: String,
        /// The topic.
        topic: String,
        /// How many failed.
        failed: usize,
        /// How many were produced.
        total: usize,
        /// The first failure.
        first: String,
    },
    /// The broker did not reach the expected state in time.
    #[error(
        "Kafka brokers {brokers}: topic `{topic}`: timed out after {waited:?} waiting for {what}"
    )]
    Timeout {
        /// The brokers.
        brokers: String,
        /// The topic.
        topic: String,
        /// What did not happen.
        what: String,
        /// How long it waited.
        waited: Duration,
    },
}

fn partition_suffix(partition: Option<i32>) -> String {
    partition.map_or_else(String::new, |p| format!(" partition {p}"))
}

/// The test broker, from `WEIR_KAFKA_BROKERS`, or `None` when it is not set.
///
/// A test that returns early on `None` would pass without running: mark a test that needs the
/// broker `#[ignore = "..."]` unless it is there (Weir's own tests do so with the feature
/// `kafka-broker` of their crate, which `tests/run` turns on once it started the broker), and
/// take the broker with [`required_brokers`].
pub fn brokers() -> Option<String> {
    std::env::var(BROKERS_ENV)
        .ok()
        .map(|b| b.trim().to_owned())
        .filter(|b| !b.is_empty())
}

/// The test broker, from `WEIR_KAFKA_BROKERS`; panics naming the variable when it is not set:
/// a test that needs the broker fails without it, it never passes without running.
pub fn required_brokers() -> String {
    brokers().unwrap_or_else(|| {
        panic!(
            "{BROKERS_ENV} is not set: this test needs the Kafka test broker (host:port); \
             tests/run starts tansu, the test broker, and sets it"
        )
    })
}

/// Whether the test broker is tansu (`WEIR_KAFKA_BROKER_KIND=tansu`, which `.ci/run` sets),
/// for tests that check its behaviour where it deviates from Kafka's.
pub fn broker_is_tansu() -> bool {
    std::env::var("WEIR_KAFKA_BROKER_KIND").is_ok_and(|kind| kind == "tansu")
}

/// A topic name no other test (of this or another process) uses: `prefix`, the process id, a
/// counter and the time in nanoseconds, joined by `-`.
pub fn unique_topic(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{prefix}-{}-{n}-{nanos}", std::process::id())
}

/// Creates `topic` with `partitions` partitions (replication factor 1) and waits until the
/// broker's metadata shows all of them.
pub fn create_topic(brokers: &str, topic: &str, partitions: i32) -> Result<(), KafkaTestError> {
    let client_error = |what, source| KafkaTestError::Client {
        brokers: brokers.to_owned(),
        topic: topic.to_owned(),
        what,
        source: Box::new(source),
    };
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .map_err(|e| client_error("creating the admin client", e))?;
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
    let results = futures::executor::block_on(admin.create_topics([&new], &options))
        .map_err(|e| client_error("creating the topic", e))?;
    for result in results {
        if let Err((_, code)) = result {
            return Err(client_error(
                "creating the topic",
                KafkaError::AdminOp(code),
            ));
        }
    }
    let start = Instant::now();
    loop {
        let shown = admin
            .inner()
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .map(|m| {
                m.topics()
                    .iter()
                    .find(|t| t.name() == topic && t.error().is_none())
                    .map_or(0, |t| t.partitions().len())
            })
            .unwrap_or(0);
        if shown == usize::try_from(partitions).unwrap_or(usize::MAX) {
            return Ok(());
        }
        if start.elapsed() > TIMEOUT {
            return Err(KafkaTestError::Timeout {
                brokers: brokers.to_owned(),
                topic: topic.to_owned(),
                what: format!("the metadata to show {partitions} partitions (it shows {shown})"),
                waited: start.elapsed(),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Delivery reports of [`produce_ids`]: how many records failed, and the first failure.
#[derive(Default)]
struct Deliveries {
    failed: Mutex<(usize, Option<String>)>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((error, message)) = result {
            use rdkafka::message::Message as _;
            let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
            failed.0 += 1;
            if failed.1.is_none() {
                failed.1 = Some(format!(
                    "partition {} key {:?}: {error}",
                    message.partition(),
                    message.key().map(String::from_utf8_lossy)
                ));
            }
        }
    }
}

/// Produces the ids `ids` to `topic`, not in a transaction: key and value are the id in
/// decimal ASCII, the partition is `id % partitions`. Returns once every record is delivered
/// (acknowledged by the broker), or with an error naming the first that was not.
pub fn produce_ids(
    brokers: &str,
    topic: &str,
    partitions: i32,
    ids: Range<u64>,
) -> Result<(), KafkaTestError> {
    let partitions = u64::try_from(partitions.max(1)).unwrap_or(1);
    produce(
        brokers,
        topic,
        ids.map(|id| {
            let text = id.to_string().into_bytes();
            let partition = i32::try_from(id % partitions).unwrap_or(0);
            (partition, Some(text.clone()), text)
        }),
    )
}

/// An id of [`produce_ids`] read back: the record's value, decimal ASCII (a source's
/// decoder).
pub fn decode_id(r: &crate::RecordView<'_>) -> Result<u64, String> {
    let text = std::str::from_utf8(r.value.unwrap_or_default()).map_err(|e| e.to_string())?;
    text.parse::<u64>().map_err(|e| format!("`{text}`: {e}"))
}

/// An id written as [`produce_ids`] writes it, decimal ASCII (a sink's encoder).
pub fn encode_id(id: &u64, out: &mut Vec<u8>) -> Result<(), String> {
    out.extend_from_slice(id.to_string().as_bytes());
    Ok(())
}

/// Produces `values` to partition `partition` of `topic`, without keys, not in a
/// transaction (a malformed record among good ones, say); returns once every one is
/// delivered.
pub fn produce_values(
    brokers: &str,
    topic: &str,
    partition: i32,
    values: &[&[u8]],
) -> Result<(), KafkaTestError> {
    produce(
        brokers,
        topic,
        values.iter().map(|v| (partition, None, v.to_vec())),
    )
}

/// Produces `(partition, key, value)` records, idempotently, waiting for every delivery.
fn produce(
    brokers: &str,
    topic: &str,
    records: impl Iterator<Item = (i32, Option<Vec<u8>>, Vec<u8>)>,
) -> Result<(), KafkaTestError> {
    let client_error = |what, source| KafkaTestError::Client {
        brokers: brokers.to_owned(),
        topic: topic.to_owned(),
        what,
        source: Box::new(source),
    };
    let producer: BaseProducer<Deliveries> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create_with_context(Deliveries::default())
        .map_err(|e| client_error("creating the producer", e))?;
    let mut total = 0;
    for (partition, key, value) in records {
        total += 1;
        let mut record = BaseRecord::<[u8], [u8]>::to(topic)
            .payload(value.as_slice())
            .partition(partition);
        if let Some(k) = &key {
            record = record.key(k.as_slice());
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => return Err(client_error("producing", e)),
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer
        .flush(TIMEOUT)
        .map_err(|e| client_error("flushing", e))?;
    let failed = producer
        .context()
        .failed
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    match failed {
        (0, _) => Ok(()),
        (n, first) => Err(KafkaTestError::Delivery {
            brokers: brokers.to_owned(),
            topic: topic.to_owned(),
            failed: n,
            total,
            first: first.unwrap_or_default(),
        }),
    }
}

/// A record a read_committed reader sees: not transactional, or in a committed transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedRecord {
    /// Its partition.
    pub partition: i32,
    /// Its offset in the partition.
    pub offset: i64,
    /// Its key.
    pub key: Option<Vec<u8>>,
    /// Its value.
    pub value: Option<Vec<u8>>,
    /// The producer that wrote it, as `(producer id, epoch)` (`(-1, -1)`: not idempotent).
    pub producer: (i64, i16),
    /// The epoch of the COMMIT marker that made it visible (`None`: not transactional). A
    /// Kafka broker refuses a produce with an epoch older than the producer's current one
    /// (a fenced producer), so the two differ only where a broker let a fenced write in.
    pub committed_by_epoch: Option<i16>,
}

/// A partition's end offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionOffsets {
    /// The partition.
    pub partition: i32,
    /// The offset after the last record (read_uncommitted's end).
    pub high_watermark: i64,
    /// The last stable offset: the first offset of the earliest open transaction, or the high
    /// watermark when none is open (read_committed's end).
    pub last_stable: i64,
}

/// The records of `topic` that a correct read_committed reader sees, ordered by (partition,
/// offset): each partition's log is read from offset 0 to its high watermark as it is
/// (read_uncommitted), and the transaction markers are applied here: records of
/// non-transactional batches are visible; a transactional batch's records wait for their
/// producer's next control record in the partition, COMMIT makes them visible and ABORT
/// drops them; records whose transaction has no marker yet are not visible (an open
/// transaction). Control records themselves are not returned.
///
/// This is what a read_committed reader sees once every transaction is decided: while one is
/// open, a consumer stops at the last stable offset (its first record), and later records,
/// committed or not transactional, reach it only when the open transaction ends; they are
/// returned here already. Check [`partition_offsets`] for open transactions.
pub fn read_committed(brokers: &str, topic: &str) -> Result<Vec<CommittedRecord>, KafkaTestError> {
    let mut wire = Wire::connect(brokers)?;
    let ends = wire.partition_offsets(topic)?;
    let mut all = Vec::new();
    for end in ends {
        all.extend(wire.read_partition(topic, end.partition, end.high_watermark)?);
    }
    Ok(all)
}

/// Each partition's high watermark and last stable offset, ordered by partition, as the
/// partition's Fetch replies state them (a read_uncommitted fetch at offset 0). A partition
/// with an open transaction has `last_stable < high_watermark`.
///
/// Not from ListOffsets: the test broker (tansu 0.6) answers ListOffsets wrongly, see
/// [`list_offsets`].
pub fn partition_offsets(
    brokers: &str,
    topic: &str,
) -> Result<Vec<PartitionOffsets>, KafkaTestError> {
    Wire::connect(brokers)?.partition_offsets(topic)
}

/// Asserts that no transaction stays open in `topic`: polls [`partition_offsets`] until every
/// partition's last stable offset reaches its high watermark, for at most `within`.
///
/// On the test broker ([`broker_is_tansu`]) an open transaction left at the deadline is
/// reported on stderr, not asserted: tansu 0.6 at times leaves a killed producer's
/// transaction open on one partition after its successor's `init_transactions` aborted the
/// rest of it (its records stay invisible, so a read_committed check of the ids still
/// holds).
///
/// # Panics
///
/// If a transaction is still open after `within` (on a real Kafka broker), naming the
/// partitions and their offsets, or if the offsets cannot be read.
pub fn assert_no_transaction_left_open(brokers: &str, topic: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let open: Vec<PartitionOffsets> = partition_offsets(brokers, topic)
            .unwrap_or_else(|e| panic!("reading the offsets of {topic}: {e}"))
            .into_iter()
            .filter(|p| p.last_stable < p.high_watermark)
            .collect();
        if open.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            if broker_is_tansu() {
                eprintln!("the test broker left a transaction open in {topic}: {open:?}");
                return;
            }
            panic!("transactions still open in {topic} after {within:?}: {open:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Each partition's latest offsets as ListOffsets states them (timestamp -1, isolation levels
/// read_uncommitted for the high watermark and read_committed for the last stable offset),
/// ordered by partition. A correct broker gives the same as [`partition_offsets`]; the test
/// broker (tansu 0.6) does not: its latest offset is the last batch's base offset + 1 (short
/// by the batch's other records), and its read_committed answer with a transaction open is
/// 0. Clients that use ListOffsets (librdkafka's watermark queries, a consumer's
/// `auto.offset.reset=latest`) see those values; tests can compare.
pub fn list_offsets(brokers: &str, topic: &str) -> Result<Vec<PartitionOffsets>, KafkaTestError> {
    Wire::connect(brokers)?.list_offsets(topic)
}

/// The ids in `records`' values (decimal ASCII, as [`produce_ids`] writes them), in order.
///
/// # Panics
///
/// If a value is missing or not a decimal `u64`, naming its partition and offset.
pub fn ids(records: &[CommittedRecord]) -> Vec<u64> {
    records
        .iter()
        .map(|r| {
            let value = r.value.as_deref().unwrap_or_else(|| {
                panic!(
                    "partition {} offset {}: record without a value",
                    r.partition, r.offset
                )
            });
            std::str::from_utf8(value)
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| {
                    panic!(
                        "partition {} offset {}: value {:?} is not a decimal id",
                        r.partition,
                        r.offset,
                        String::from_utf8_lossy(value)
                    )
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_topics_differ_and_are_legal_names() {
        let a = unique_topic("t");
        let b = unique_topic("t");
        assert_ne!(a, b);
        assert!(a
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_'));
        assert!(a.len() < 249);
    }

    #[test]
    fn ids_parse_values() {
        let r = |offset, v: &str| CommittedRecord {
            partition: 1,
            offset,
            key: None,
            value: Some(v.as_bytes().to_vec()),
            producer: (-1, -1),
            committed_by_epoch: None,
        };
        assert_eq!(ids(&[r(0, "7"), r(1, "42")]), vec![7, 42]);
        let bad = std::panic::catch_unwind(|| ids(&[r(5, "x")]));
        let message = bad.err().and_then(|p| p.downcast::<String>().ok());
        assert!(message.is_some_and(|m| m.contains("partition 1 offset 5")));
    }
}
