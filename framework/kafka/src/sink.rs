//! The Kafka sink: at-least-once, or exactly-once with one transaction per subtask and
//! checkpoint.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{Offset, TopicPartitionList};

use crate::{boxed, KafkaConfig, CALL_TIMEOUT};
use weir::error::{PlanError, SinkError};
use weir::sink::{Sink, SinkContext};
use weir::stream::{DataStream, SinkStream};
use weir::Data;

/// One lock per transactional id in this process: a restarted subtask's sink waits for its
/// failed predecessor's commit in flight (a blocking call on another thread) before it reads
/// which checkpoint was committed last. Kafka brokers make `init_transactions` wait for such
/// a commit themselves; some brokers (the test broker) do not.
fn transaction_lock(id: &str) -> Arc<Mutex<()>> {
    static LOCKS: std::sync::OnceLock<Mutex<std::collections::HashMap<String, Arc<Mutex<()>>>>> =
        std::sync::OnceLock::new();
    let mut locks = LOCKS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    locks.entry(id.to_owned()).or_default().clone()
}

/// librdkafka's `transaction.timeout.ms` default.
const DEFAULT_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

/// The committed offset a final commit (end of input) records: above every checkpoint id.
const FINAL_MARK: i64 = i64::MAX >> 1;

/// How the sink delivers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// Written through; at every checkpoint barrier the sink waits until the broker has
    /// acknowledged every record so far. After a failure, what was written after the
    /// restored checkpoint is written again (duplicates, nothing lost).
    AtLeastOnce,
    /// One Kafka transaction per subtask and checkpoint, committed when the checkpoint
    /// completes: read_committed readers see every record once. Transactional ids are
    /// `{prefix}-{sink uid}-{subtask}`.
    ExactlyOnce {
        /// Unique per job among the jobs writing to the same cluster.
        prefix: String,
    },
}

type Encode<T> = Arc<dyn Fn(&T, &mut Vec<u8>) -> Result<(), String> + Send + Sync>;
type KeyOf<T> = Arc<dyn Fn(&T, &mut Vec<u8>) + Send + Sync>;
type PartitionOf<T> = Arc<dyn Fn(&T) -> u64 + Send + Sync>;

/// A topic written by a job (Flink's `KafkaSink`): add it with
/// [`KafkaStreamExt::sink_to_kafka`].
///
/// Records are encoded by the function given to [`new`](Self::new), which appends a
/// record's value to a buffer; [`key_by`](Self::key_by) gives them keys (the partition is
/// then the key's hash, as with any Kafka producer; without keys librdkafka spreads them),
/// and [`partition_by`](Self::partition_by) picks their partitions.
pub struct KafkaSink<T> {
    config: KafkaConfig,
    topic: String,
    encode: Encode<T>,
    key: Option<KeyOf<T>>,
    partition: Option<PartitionOf<T>>,
    delivery: Delivery,
    lease: Option<crate::group::Lease>,
}

impl<T> std::fmt::Debug for KafkaSink<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSink")
            .field("brokers", &self.config.brokers())
            .field("topic", &self.topic)
            .field("delivery", &self.delivery)
            .finish()
    }
}

impl<T: Data> KafkaSink<T> {
    /// Writes to `topic`, each record's value appended to the buffer by `encode` (an `Err`
    /// fails the job, naming the record's topic). At least once until
    /// [`exactly_once`](Self::exactly_once) is asked for.
    pub fn new(
        config: KafkaConfig,
        topic: impl Into<String>,
        encode: impl Fn(&T, &mut Vec<u8>) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        KafkaSink {
            config,
            topic: topic.into(),
            encode: Arc::new(encode),
            key: None,
            partition: None,
            delivery: Delivery::AtLeastOnce,
            lease: None,
        }
    }

    /// Gives each record the key `key` appends to the buffer.
    pub fn key_by(mut self, key: impl Fn(&T, &mut Vec<u8>) + Send + Sync + 'static) -> Self {
        self.key = Some(Arc::new(key));
        self
    }

    /// Writes each record to partition `partition(record)` modulo the topic's partition
    /// count (Flink's custom `KafkaPartitioner`), whatever its key. Keeping the partition of
    /// the input (a job whose keys are co-partitioned) gives each output partition one
    /// writer.
    ///
    /// ```
    /// use weir_kafka::{KafkaConfig, KafkaSink};
    ///
    /// // Ids go to partition `id % partitions`.
    /// let sink = KafkaSink::new(KafkaConfig::new("localhost:9092"), "out", |id: &u64, out: &mut Vec<u8>| {
    ///     out.extend_from_slice(id.to_string().as_bytes());
    ///     Ok(())
    /// })
    /// .partition_by(|id| *id);
    /// ```
    pub fn partition_by(mut self, partition: impl Fn(&T) -> u64 + Send + Sync + 'static) -> Self {
        self.partition = Some(Arc::new(partition));
        self
    }

    /// Exactly once, with transactional ids `{prefix}-{sink uid}-{subtask}`: the prefix must
    /// be the same in every run of the job (a restored job fences its failed predecessor by
    /// these ids) and differ between jobs.
    ///
    /// The job must take checkpoints, and librdkafka's `transaction.timeout.ms` (set it with
    /// [`KafkaConfig::set`]; default 60 s, and brokers cap it at their
    /// `transaction.max.timeout.ms`, 15 min by default) must be at least twice the
    /// checkpoint interval: a transaction stays open from one checkpoint to the completion of
    /// the next. Both are checked when the job is planned.
    ///
    /// How a failure is recovered: the sink's checkpointed state is the records of its
    /// transactions not yet committed at the barrier. Each transaction also commits the
    /// checkpoint id as the offset of a group of the sink's own (named like its
    /// transactional id), so a restored sink reads there whether the failed process
    /// committed checkpoint `n`'s transaction; if not, it writes those records again in a
    /// new transaction (librdkafka cannot resume another producer's transaction). Starting
    /// its producer fences the failed one and aborts its open transaction.
    pub fn exactly_once(mut self, prefix: impl Into<String>) -> Self {
        self.delivery = Delivery::ExactlyOnce {
            prefix: prefix.into(),
        };
        self
    }

    /// In a [`KafkaGroup`](crate::KafkaGroup)'s partition job: the member's lease on the
    /// partition ([`PartitionTask::lease`](crate::PartitionTask::lease)). An exactly-once
    /// sink then starts its producer (fencing the transactional id's other producers) and
    /// commits only while the lease is held, so a member resumed after its session ran out
    /// does not fence the partition's new owner; it fails instead, and its member joins the
    /// group again.
    pub fn lease(mut self, lease: crate::group::Lease) -> Self {
        self.lease = Some(lease);
        self
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The transaction timeout librdkafka will use.
    fn transaction_timeout(&self) -> Result<Duration, String> {
        match self.config.get("transaction.timeout.ms") {
            None => Ok(DEFAULT_TRANSACTION_TIMEOUT),
            Some(v) => v
                .trim()
                .parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|_| format!("`transaction.timeout.ms` is `{v}`, not milliseconds")),
        }
    }

    /// Checks the sink's settings against the job's config: exactly once needs checkpoints
    /// and a transaction timeout of at least twice the checkpoint interval.
    pub fn check_config(&self, cfg: &weir::EnvConfig) -> Result<(), PlanError> {
        if !matches!(self.delivery, Delivery::ExactlyOnce { .. }) {
            return Ok(());
        }
        let bad = |message: String| PlanError::BadConfig {
            key: "kafka sink transaction.timeout.ms",
            message,
        };
        let timeout = self
            .transaction_timeout()
            .map_err(|m| bad(format!("exactly-once kafka sink to `{}`: {m}", self.topic)))?;
        let Some(interval) = cfg.checkpoint.interval else {
            return Err(PlanError::BadConfig {
                key: "checkpoint.interval",
                message: format!(
                    "the exactly-once kafka sink to `{}` commits its transactions when \
                     checkpoints complete, and the job takes none",
                    self.topic
                ),
            });
        };
        if timeout < interval * 2 {
            return Err(bad(format!(
                "exactly-once kafka sink to `{}`: transaction.timeout.ms {} ms is under twice \
                 the checkpoint interval ({} ms): a transaction stays open from one checkpoint \
                 to the completion of the next, and the broker would abort it",
                self.topic,
                timeout.as_millis(),
                interval.as_millis()
            )));
        }
        Ok(())
    }

    /// The sink of one subtask, for a sink of yours that wraps it (add it with
    /// [`DataStream::add_sink`]; [`KafkaStreamExt::sink_to_kafka`] does that and also checks the
    /// job's config, as [`check_config`](Self::check_config) does).
    pub fn subtask_sink(&self, cx: &SinkContext) -> Result<impl Sink<T>, SinkError> {
        self.open(cx)
    }

    fn open(&self, cx: &SinkContext) -> Result<Writer<T>, SinkError> {
        let mut client = self.config.client();
        let mode = match &self.delivery {
            Delivery::AtLeastOnce => {
                client.set("enable.idempotence", "true");
                Mode::AtLeastOnce
            }
            Delivery::ExactlyOnce { prefix } => {
                let id = format!("{prefix}-{}-{}", cx.uid, cx.subtask);
                client.set("transactional.id", &id);
                let marks: BaseConsumer = self
                    .config
                    .client()
                    .set("group.id", &id)
                    .set("enable.auto.commit", "false")
                    .create()
                    .map_err(|e| SinkError::Setup {
                        message: format!("kafka sink `{}`: cannot create a consumer: {e}", id),
                    })?;
                Mode::ExactlyOnce(Box::new(Transactions {
                    lease: self.lease.clone(),
                    lock: transaction_lock(&id),
                    id,
                    marks,
                    open: false,
                    txn: None,
                    waiting: VecDeque::new(),
                    current_sent: false,
                }))
            }
        };
        let producer: BaseProducer<Deliveries> = client
            .create_with_context(Deliveries::default())
            .map_err(|e| SinkError::Setup {
                message: format!(
                    "kafka sink to `{}`: cannot create the producer: {e}",
                    self.topic
                ),
            })?;
        let partition = match &self.partition {
            None => None,
            Some(f) => Some((f.clone(), self.partition_count(&producer)?)),
        };
        Ok(Writer {
            producer,
            topic: self.topic.clone(),
            encode: self.encode.clone(),
            key: self.key.clone(),
            partition,
            mode,
            current: Epoch::default(),
        })
    }
}

impl<T> KafkaSink<T> {
    /// How many partitions the topic has (for [`partition_by`](Self::partition_by)).
    fn partition_count(&self, producer: &BaseProducer<Deliveries>) -> Result<u64, SinkError> {
        let metadata = producer
            .client()
            .fetch_metadata(Some(&self.topic), CALL_TIMEOUT)
            .map_err(|e| SinkError::External {
                what: format!(
                    "kafka sink to `{}`: cannot read the topic's metadata",
                    self.topic
                ),
                source: boxed(e),
            })?;
        let count = metadata
            .topics()
            .iter()
            .find(|t| t.name() == self.topic && t.error().is_none())
            .map_or(0, |t| t.partitions().len());
        if count == 0 {
            return Err(SinkError::Setup {
                message: format!(
                    "kafka sink to `{}`: no such topic on the brokers {} (partition_by needs its partitions)",
                    self.topic,
                    self.config.brokers()
                ),
            });
        }
        Ok(count as u64)
    }
}

/// Kafka sinks on a [`DataStream`]: `use weir_kafka::KafkaStreamExt` and call
/// `stream.sink_to_kafka(name, sink)`.
pub trait KafkaStreamExt<T: Data> {
    /// Writes the stream to Kafka (see [`KafkaSink`]). The sink's settings are checked
    /// against the job's config when it is planned (an exactly-once sink needs checkpoints,
    /// and a transaction timeout longer than the checkpoint interval).
    fn sink_to_kafka(self, name: &str, sink: KafkaSink<T>) -> SinkStream;
}

impl<T: Data> KafkaStreamExt<T> for DataStream<T> {
    fn sink_to_kafka(self, name: &str, sink: KafkaSink<T>) -> SinkStream {
        let sink = Arc::new(sink);
        let checked = sink.clone();
        self.check_config(move |cfg| checked.check_config(cfg))
            .add_sink(name, move |cx| sink.open(cx))
    }
}

/// Delivery reports, counted by the producer's callback (on the subtask's thread, in `poll`
/// and `flush`).
#[derive(Default)]
struct Deliveries {
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.failed.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut first) = self.first_error.lock() {
                first.get_or_insert_with(|| e.to_string());
            }
        }
    }
}

/// Records encoded into one buffer: `(key end or NO_KEY, value end, partition or
/// ANY_PARTITION)` per record, each starting where the previous ended.
#[derive(Default, Debug, Clone, PartialEq)]
struct Epoch {
    bytes: Vec<u8>,
    ends: Vec<(u32, u32, i32)>,
}

const NO_KEY: u32 = u32::MAX;
/// The producer picks the partition (librdkafka's `RD_KAFKA_PARTITION_UA`).
const ANY_PARTITION: i32 = -1;

/// A record as encoded: its partition if chosen, key, value.
type Encoded<'a> = (Option<i32>, Option<&'a [u8]>, &'a [u8]);

impl Epoch {
    fn records(&self) -> impl Iterator<Item = Encoded<'_>> {
        self.records_from(0)
    }

    /// The records from the `first`-th on.
    fn records_from(&self, first: usize) -> impl Iterator<Item = Encoded<'_>> {
        let mut start = match first {
            0 => 0,
            i => self.ends[i - 1].1 as usize,
        };
        self.ends[first..].iter().map(move |&(k, v, p)| {
            let key = (k != NO_KEY).then(|| &self.bytes[start..k as usize]);
            let vs = if k == NO_KEY { start } else { k as usize };
            start = v as usize;
            let partition = (p != ANY_PARTITION).then_some(p);
            (partition, key, &self.bytes[vs..v as usize])
        })
    }

    /// Appends `epochs` as bytes: per epoch its id, record count, byte count, ends (key,
    /// value, partition), bytes.
    fn encode_all<'a>(epochs: impl Iterator<Item = (u64, &'a Epoch)>) -> Vec<u8> {
        let mut out = Vec::new();
        for (id, e) in epochs {
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&(e.ends.len() as u64).to_le_bytes());
            out.extend_from_slice(&(e.bytes.len() as u64).to_le_bytes());
            for (k, v, p) in &e.ends {
                out.extend_from_slice(&k.to_le_bytes());
                out.extend_from_slice(&v.to_le_bytes());
                out.extend_from_slice(&p.to_le_bytes());
            }
            out.extend_from_slice(&e.bytes);
        }
        out
    }

    fn decode_all(mut bytes: &[u8]) -> Result<Vec<(u64, Epoch)>, String> {
        fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
            if b.len() < n {
                return Err(format!("truncated: {} bytes left, {n} needed", b.len()));
            }
            let (head, tail) = b.split_at(n);
            *b = tail;
            Ok(head)
        }
        let u64_of = |s: &[u8]| u64::from_le_bytes(s.try_into().unwrap_or([0; 8]));
        let u32_of = |s: &[u8]| u32::from_le_bytes(s.try_into().unwrap_or([0; 4]));
        let mut epochs = Vec::new();
        while !bytes.is_empty() {
            let id = u64_of(take(&mut bytes, 8)?);
            let n = u64_of(take(&mut bytes, 8)?) as usize;
            let len = u64_of(take(&mut bytes, 8)?) as usize;
            let mut ends = Vec::with_capacity(n.min(bytes.len() / 12));
            for _ in 0..n {
                let k = u32_of(take(&mut bytes, 4)?);
                let v = u32_of(take(&mut bytes, 4)?);
                let p = u32_of(take(&mut bytes, 4)?) as i32;
                if v as usize > len || (k != NO_KEY && k > v) {
                    return Err(format!("record end {v} beyond the epoch's {len} bytes"));
                }
                if p < ANY_PARTITION {
                    return Err(format!("bad partition {p}"));
                }
                ends.push((k, v, p));
            }
            let data = take(&mut bytes, len)?.to_vec();
            epochs.push((id, Epoch { bytes: data, ends }));
        }
        Ok(epochs)
    }
}

/// A group member's lease on its partition ran out: the process was frozen past its
/// session, and the partition may have a new owner.
#[derive(Debug, thiserror::Error)]
#[error("this group member was frozen past its session: the partition may be another member's now")]
struct LeaseLost;

enum Mode {
    AtLeastOnce,
    ExactlyOnce(Box<Transactions>),
}

/// The exactly-once sink's transactions.
///
/// Records between two barriers form an epoch; at barrier `n` the epoch is staged as `n`'s.
/// At most one staged epoch is in the open transaction (`txn`): it is committed when a
/// checkpoint at or after it completes. Epochs staged while `txn` is busy wait (`waiting`),
/// and so do records after a barrier (`current_sent` is false) until the transaction before
/// them is committed: a transaction never holds records of two checkpoints' sides.
struct Transactions {
    /// The transactional id; also the group whose committed offset marks the last
    /// committed checkpoint.
    id: String,
    /// Held while committing, and while starting (see [`transaction_lock`]).
    lock: Arc<Mutex<()>>,
    /// The group member's lease on the partition, checked before fencing and committing.
    lease: Option<crate::group::Lease>,
    /// A consumer of that group: its metadata goes with each commit, and a restore reads
    /// the group's offset.
    marks: BaseConsumer,
    /// A transaction has begun.
    open: bool,
    /// The staged epoch in the open transaction.
    txn: Option<(u64, Epoch)>,
    /// Staged epochs not yet sent.
    waiting: VecDeque<(u64, Epoch)>,
    /// The records since the last barrier are in the open transaction (else held).
    current_sent: bool,
}

struct Writer<T> {
    producer: BaseProducer<Deliveries>,
    topic: String,
    encode: Encode<T>,
    key: Option<KeyOf<T>>,
    /// The partitioner and the topic's partition count.
    partition: Option<(PartitionOf<T>, u64)>,
    mode: Mode,
    /// Records since the last barrier (exactly once), encoded.
    current: Epoch,
}

impl<T> Writer<T> {
    fn external(&self, what: impl std::fmt::Display, e: KafkaError) -> SinkError {
        let who = match &self.mode {
            Mode::ExactlyOnce(t) => format!("kafka sink `{}` to `{}`", t.id, self.topic),
            Mode::AtLeastOnce => format!("kafka sink to `{}`", self.topic),
        };
        SinkError::External {
            what: format!("{who}: {what}"),
            source: boxed(e),
        }
    }

    /// Fails unless the group member's lease (if any) is held: `what` is about to fence
    /// or commit.
    fn check_lease(&self, what: &str) -> Result<(), SinkError> {
        let Mode::ExactlyOnce(t) = &self.mode else {
            return Ok(());
        };
        match &t.lease {
            Some(lease) if !lease.held() => Err(SinkError::External {
                what: format!("kafka sink `{}` to `{}`: not {what}", t.id, self.topic),
                source: Box::new(LeaseLost),
            }),
            _ => Ok(()),
        }
    }

    /// Sends one record, waiting for room in the client's queue if it is full.
    fn send(&self, (partition, key, value): Encoded<'_>) -> Result<(), SinkError> {
        loop {
            let mut record = BaseRecord::to(&self.topic).payload(value);
            if let Some(k) = key {
                record = record.key(k);
            }
            if let Some(p) = partition {
                record = record.partition(p);
            }
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    self.producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => return Err(self.external("cannot send a record", e)),
            }
        }
    }

    fn send_epoch(&self, epoch: &Epoch) -> Result<(), SinkError> {
        for record in epoch.records() {
            self.send(record)?;
        }
        self.producer.poll(Duration::ZERO);
        Ok(())
    }

    /// Fails if the broker refused a record since the last check.
    fn check_deliveries(&self) -> Result<(), SinkError> {
        let ctx = self.producer.context();
        let failed = ctx.failed.swap(0, Ordering::Relaxed);
        if failed == 0 {
            return Ok(());
        }
        let first = ctx
            .first_error
            .lock()
            .ok()
            .and_then(|mut e| e.take())
            .unwrap_or_default();
        Err(SinkError::External {
            what: format!(
                "kafka sink to `{}`: {failed} records were not delivered",
                self.topic
            ),
            source: first.into(),
        })
    }

    fn flush(&self) -> Result<(), SinkError> {
        self.producer
            .flush(CALL_TIMEOUT)
            .map_err(|e| self.external("cannot flush", e))?;
        self.check_deliveries()
    }

    fn begin(&mut self) -> Result<(), SinkError> {
        self.producer
            .begin_transaction()
            .map_err(|e| self.external("cannot begin a transaction", e))?;
        if let Mode::ExactlyOnce(t) = &mut self.mode {
            t.open = true;
        }
        Ok(())
    }

    /// Commits the open transaction, recording `mark` as the sink group's offset.
    fn commit_open(&mut self, mark: i64) -> Result<(), SinkError> {
        let Mode::ExactlyOnce(t) = &self.mode else {
            return Ok(());
        };
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, 0, Offset::Offset(mark))
            .map_err(|e| self.external("bad commit mark", e))?;
        let group = t.marks.group_metadata().ok_or_else(|| SinkError::Setup {
            message: format!("kafka sink `{}`: its consumer has no group metadata", t.id),
        })?;
        let lock = t.lock.clone();
        let _held = lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.check_lease(&format!("committing checkpoint {mark}'s transaction"))?;
        self.producer
            .send_offsets_to_transaction(&tpl, &group, CALL_TIMEOUT)
            .map_err(|e| self.external(format!("cannot add checkpoint mark {mark}"), e))?;
        self.producer
            .commit_transaction(CALL_TIMEOUT)
            .map_err(|e| {
                self.external(
                    format!("cannot commit the transaction of checkpoint {mark}"),
                    e,
                )
            })?;
        // The same mark once more, outside the transaction: a broker whose offset reads
        // miss transactional commits at times (the test broker) still shows it. A crash
        // between the two leaves the transactional one, which Kafka brokers keep.
        if let Mode::ExactlyOnce(t) = &self.mode {
            if let Err(e) = t.marks.commit(&tpl, rdkafka::consumer::CommitMode::Sync) {
                tracing::warn!(id = %t.id, error = %e, "cannot commit the checkpoint mark outside the transaction");
            }
        }
        if let Mode::ExactlyOnce(t) = &mut self.mode {
            t.open = false;
        }
        Ok(())
    }

    /// The last checkpoint whose transaction was committed, as the sink group's offset.
    fn committed_mark(&self) -> Result<Option<i64>, SinkError> {
        let Mode::ExactlyOnce(t) = &self.mode else {
            return Ok(None);
        };
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&self.topic, 0);
        let found = t
            .marks
            .committed_offsets(tpl, CALL_TIMEOUT)
            .map_err(|e| self.external("cannot read the last committed checkpoint", e))?;
        Ok(
            match found.find_partition(&self.topic, 0).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => Some(o),
                _ => None,
            },
        )
    }

    /// Commits every staged epoch up to `checkpoint`, then opens the next transaction.
    fn commit_up_to(&mut self, checkpoint: u64) -> Result<(), SinkError> {
        let final_commit = checkpoint == weir::checkpoint::FINAL_COMMIT;
        let Mode::ExactlyOnce(t) = &mut self.mode else {
            return Ok(());
        };
        if final_commit {
            // The end of input: what came after the last barrier is committed too.
            let rest = std::mem::take(&mut self.current);
            if t.current_sent && t.txn.is_none() {
                t.txn = Some((checkpoint, rest));
            } else {
                t.waiting.push_back((checkpoint, rest));
            }
            t.current_sent = false;
        }
        let mark = |id: u64| {
            if id == weir::checkpoint::FINAL_COMMIT {
                FINAL_MARK
            } else {
                id as i64
            }
        };
        // The open transaction's staged epoch.
        if let Some((id, _)) = &t.txn {
            if *id <= checkpoint {
                let m = mark(*id);
                self.commit_open(m)?;
                if let Mode::ExactlyOnce(t) = &mut self.mode {
                    t.txn = None;
                }
            }
        }
        // Staged epochs that waited: one transaction for all of them.
        let ready: Vec<(u64, Epoch)> = {
            let Mode::ExactlyOnce(t) = &mut self.mode else {
                return Ok(());
            };
            if t.txn.is_some() {
                // Still busy with an epoch after `checkpoint`.
                return Ok(());
            }
            let n = t
                .waiting
                .iter()
                .take_while(|(id, _)| *id <= checkpoint)
                .count();
            t.waiting.drain(..n).collect()
        };
        if let Some(last) = ready.last().map(|(id, _)| *id) {
            if !self.is_open() {
                self.begin()?;
            }
            for (_, e) in &ready {
                self.send_epoch(e)?;
            }
            self.commit_open(mark(last))?;
        }
        if final_commit {
            return Ok(());
        }
        // The next transaction: the next waiting epoch, or the records since the barrier.
        if !self.is_open() {
            self.begin()?;
        }
        let Mode::ExactlyOnce(t) = &mut self.mode else {
            return Ok(());
        };
        if let Some(next) = t.waiting.pop_front() {
            let epoch = next.1.clone();
            t.txn = Some(next);
            self.send_epoch(&epoch)?;
        } else if !t.current_sent {
            t.current_sent = true;
            let current = std::mem::take(&mut self.current);
            self.send_epoch(&current)?;
            self.current = current;
        }
        Ok(())
    }

    fn is_open(&self) -> bool {
        matches!(&self.mode, Mode::ExactlyOnce(t) if t.open)
    }
}

impl<T: Data> Sink<T> for Writer<T> {
    fn write_batch(&mut self, batch: &mut Vec<T>) -> Result<(), SinkError> {
        let transactional = matches!(self.mode, Mode::ExactlyOnce(_));
        let send_now = match &self.mode {
            Mode::AtLeastOnce => true,
            Mode::ExactlyOnce(t) => t.current_sent,
        };
        let from = self.current.ends.len();
        for record in batch.iter() {
            let start = self.current.bytes.len();
            let key_end = match &self.key {
                Some(key) => {
                    key(record, &mut self.current.bytes);
                    self.current.bytes.len() as u32
                }
                None => NO_KEY,
            };
            (self.encode)(record, &mut self.current.bytes).map_err(|message| {
                self.current.bytes.truncate(start);
                SinkError::Encode {
                    path: format!("kafka topic {}", self.topic).into(),
                    message,
                }
            })?;
            if self.current.bytes.len() > u32::MAX as usize {
                return Err(SinkError::Encode {
                    path: format!("kafka topic {}", self.topic).into(),
                    message: "more than 4 GiB of records between two checkpoints".into(),
                });
            }
            let partition = match &self.partition {
                // Below the count, an i32: the count came from the broker as a usize of i32s.
                Some((f, count)) => (f(record) % count) as i32,
                None => ANY_PARTITION,
            };
            self.current
                .ends
                .push((key_end, self.current.bytes.len() as u32, partition));
        }
        batch.clear();
        if send_now {
            for record in self.current.records_from(from) {
                self.send(record)?;
            }
            self.producer.poll(Duration::ZERO);
        }
        if !transactional {
            // Written through: the buffer is only scratch.
            self.current.bytes.clear();
            self.current.ends.clear();
            self.check_deliveries()?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        match self.mode {
            Mode::AtLeastOnce => self.flush(),
            // Committed by the final commit.
            Mode::ExactlyOnce(_) => Ok(()),
        }
    }

    fn pre_commit(&mut self, checkpoint: u64) -> Result<Option<Vec<u8>>, SinkError> {
        let Mode::ExactlyOnce(t) = &mut self.mode else {
            self.flush()?;
            return Ok(None);
        };
        let epoch = std::mem::take(&mut self.current);
        if t.current_sent && t.txn.is_none() {
            t.txn = Some((checkpoint, epoch));
        } else {
            t.waiting.push_back((checkpoint, epoch));
        }
        t.current_sent = false;
        let staged = t.txn.iter().chain(t.waiting.iter()).map(|(id, e)| (*id, e));
        Ok(Some(Epoch::encode_all(staged)))
    }

    fn commit(&mut self, checkpoint: u64) -> Result<(), SinkError> {
        self.commit_up_to(checkpoint)?;
        self.check_deliveries()
    }

    fn initialize(&mut self, restored: Option<&[u8]>) -> Result<(), SinkError> {
        let Mode::ExactlyOnce(t) = &self.mode else {
            return Ok(());
        };
        let lock = t.lock.clone();
        let held = lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.check_lease("starting its producer (that would fence the partition's new owner)")?;
        // Fences a failed predecessor with the same id and aborts its open transaction.
        self.producer
            .init_transactions(CALL_TIMEOUT)
            .map_err(|e| self.external("cannot initialize transactions", e))?;
        let restored = match restored {
            None => None,
            Some(state) => Some((
                Epoch::decode_all(state).map_err(|message| SinkError::Encode {
                    path: format!("kafka topic {} (restored state)", self.topic).into(),
                    message,
                })?,
                self.committed_mark()?,
            )),
        };
        // The predecessor is fenced: its commits from now on fail.
        drop(held);
        if let Some((staged, committed)) = restored {
            // The restored state's last staged epoch is its checkpoint's (pre_commit stages
            // one at every barrier). A mark past it means a later checkpoint's records are
            // committed already: a checkpoint that a newer run went on from, or another
            // member's (a process restored the partition while its owner still ran).
            if let (Some((restored, _)), Some(mark)) = (staged.last(), committed) {
                if mark > *restored as i64 {
                    let Mode::ExactlyOnce(t) = &self.mode else {
                        return Ok(());
                    };
                    return Err(SinkError::RestoredBehind {
                        what: format!("kafka sink `{}` to `{}`", t.id, self.topic),
                        restored: *restored,
                        committed: if mark == FINAL_MARK {
                            weir::checkpoint::FINAL_COMMIT
                        } else {
                            mark as u64
                        },
                    });
                }
            }
            let redo: Vec<&(u64, Epoch)> = staged
                .iter()
                .filter(|(id, _)| committed.is_none_or(|c| (*id as i64) > c))
                .collect();
            if let Some(last) = redo.last().map(|(id, _)| *id) {
                tracing::info!(
                    topic = %self.topic,
                    checkpoints = ?redo.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
                    "writing the restored checkpoint's uncommitted transaction again"
                );
                self.begin()?;
                for (_, e) in &redo {
                    self.send_epoch(e)?;
                }
                self.commit_open(last as i64)?;
            }
        }
        self.begin()?;
        if let Mode::ExactlyOnce(t) = &mut self.mode {
            t.current_sent = true;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
