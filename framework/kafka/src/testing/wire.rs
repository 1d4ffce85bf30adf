//! The Kafka wire protocol side of the test helpers: one connection to the test broker
//! ([`Wire`]) that reads a partition's log as it is and applies the transaction markers
//! itself ([`Markers`]), and asks for partitions and offsets (Metadata, Fetch, ListOffsets)
//! with the `kafka-protocol` crate's codecs on a `std` TCP stream.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_request::ApiVersionsRequest;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader, TopicName};
use kafka_protocol::messages::{
    ApiVersionsResponse, FetchResponse, ListOffsetsResponse, MetadataResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, Message, StrBytes};
use kafka_protocol::records::{Record, RecordBatchDecoder};
use kafka_protocol::ResponseError;

use super::{CommittedRecord, KafkaTestError, PartitionOffsets, TIMEOUT};

/// The highest request versions the reader speaks (the fields it sets mean the same up to
/// them; Fetch 13 names topics by id).
const METADATA_MAX: i16 = 12;
const FETCH_MAX: i16 = 12;
const LIST_OFFSETS_MAX: i16 = 9;
/// Isolation levels of Fetch and ListOffsets.
const READ_UNCOMMITTED: i8 = 0;
const READ_COMMITTED: i8 = 1;
/// The most a fetch asks for (the broker returns at least one whole batch regardless).
const FETCH_BYTES: i32 = 8 << 20;
/// How long a fetch may return nothing below the high watermark before the reader gives up.
const STALL: Duration = Duration::from_secs(10);
/// A record batch's header: base offset (8), length (4), then from the length on the
/// partition leader epoch (4), magic (1), CRC (4), attributes (2), last offset delta (4).
const BATCH_LOG_OVERHEAD: usize = 12;
const MAGIC_AT: usize = 16;
const LAST_OFFSET_DELTA_AT: usize = 23;
/// Control record types (the key's second i16).
const CONTROL_ABORT: i16 = 0;
const CONTROL_COMMIT: i16 = 1;

/// One connection to the (single) broker speaking the wire protocol, with the versions it
/// supports.
pub(super) struct Wire {
    broker: String,
    stream: TcpStream,
    correlation: i32,
    versions: HashMap<i16, (i16, i16)>,
}

impl Wire {
    pub(super) fn connect(brokers: &str) -> Result<Self, KafkaTestError> {
        let broker = brokers
            .split(',')
            .next()
            .unwrap_or(brokers)
            .trim()
            .to_owned();
        let connect_error = |source| KafkaTestError::Connect {
            broker: broker.clone(),
            source,
        };
        let stream = TcpStream::connect(&broker).map_err(connect_error)?;
        stream
            .set_read_timeout(Some(TIMEOUT))
            .and_then(|()| stream.set_write_timeout(Some(TIMEOUT)))
            .and_then(|()| stream.set_nodelay(true))
            .map_err(connect_error)?;
        let mut wire = Wire {
            broker,
            stream,
            correlation: 0,
            versions: HashMap::new(),
        };
        let reply = wire.call(&ApiVersionsRequest::default(), 0)?;
        if reply.error_code != 0 {
            return Err(wire.protocol("ApiVersions", format!("error code {}", reply.error_code)));
        }
        wire.versions = reply
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        Ok(wire)
    }

    fn protocol(&self, api: &'static str, message: String) -> KafkaTestError {
        KafkaTestError::Protocol {
            broker: self.broker.clone(),
            api,
            message,
        }
    }

    /// The highest version of `R` both sides speak, at most `max`.
    fn version<R: Api>(&self, max: i16) -> Result<i16, KafkaTestError> {
        let api = R::NAME;
        let (min, broker_max) = self
            .versions
            .get(&(R::KEY as i16))
            .copied()
            .ok_or_else(|| self.protocol(api, "not supported by the broker".into()))?;
        let version = broker_max.min(max).min(R::VERSIONS.max);
        if version < min.max(R::VERSIONS.min) {
            return Err(self.protocol(
                api,
                format!(
                    "the broker speaks versions {min}..={broker_max}, the reader {}..={max}",
                    R::VERSIONS.min
                ),
            ));
        }
        Ok(version)
    }

    /// Sends `request` as `version` and reads its reply.
    fn call<R: Api>(&mut self, request: &R, version: i16) -> Result<R::Response, KafkaTestError> {
        let api = R::NAME;
        let key = R::KEY;
        self.correlation += 1;
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(StrBytes::from_static_str("weir-testing-kafka")));
        let mut body = BytesMut::new();
        header
            .encode(&mut body, key.request_header_version(version))
            .and_then(|()| request.encode(&mut body, version))
            .map_err(|e| self.protocol(api, format!("encoding v{version}: {e}")))?;
        let size = i32::try_from(body.len())
            .map_err(|_| self.protocol(api, "request too large".into()))?;
        let io_error = |source| KafkaTestError::Io {
            broker: self.broker.clone(),
            api,
            source,
        };
        self.stream
            .write_all(&size.to_be_bytes())
            .and_then(|()| self.stream.write_all(&body))
            .map_err(io_error)?;
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).map_err(io_error)?;
        let size = usize::try_from(i32::from_be_bytes(size))
            .map_err(|_| self.protocol(api, "negative reply size".into()))?;
        let mut reply = vec![0u8; size];
        self.stream.read_exact(&mut reply).map_err(io_error)?;
        let mut reply = Bytes::from(reply);
        let header = ResponseHeader::decode(&mut reply, key.response_header_version(version))
            .map_err(|e| self.protocol(api, format!("decoding the reply header: {e}")))?;
        if header.correlation_id != self.correlation {
            return Err(self.protocol(
                api,
                format!(
                    "reply to request {} where {} was expected",
                    header.correlation_id, self.correlation
                ),
            ));
        }
        R::Response::decode(&mut reply, version)
            .map_err(|e| self.protocol(api, format!("decoding the v{version} reply: {e}")))
    }

    fn broker_error(
        &self,
        api: &'static str,
        topic: &str,
        partition: Option<i32>,
        code: i16,
    ) -> KafkaTestError {
        KafkaTestError::Broker {
            broker: self.broker.clone(),
            api,
            topic: topic.to_owned(),
            partition,
            error: ResponseError::try_from_code(code).unwrap_or(ResponseError::Unknown(code)),
        }
    }

    /// The topic's partition ids, sorted (Metadata).
    fn partitions(&mut self, topic: &str) -> Result<Vec<i32>, KafkaTestError> {
        let version = self.version::<MetadataRequest>(METADATA_MAX)?;
        let request = MetadataRequest::default()
            .with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(topic_name(topic)))
            ]))
            .with_allow_auto_topic_creation(version < 4);
        let reply = self.call(&request, version)?;
        let found = reply
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
            .ok_or_else(|| self.broker_error("Metadata", topic, None, 3))?;
        if found.error_code != 0 {
            return Err(self.broker_error("Metadata", topic, None, found.error_code));
        }
        let mut partitions = Vec::with_capacity(found.partitions.len());
        for p in &found.partitions {
            if p.error_code != 0 {
                return Err(self.broker_error(
                    "Metadata",
                    topic,
                    Some(p.partition_index),
                    p.error_code,
                ));
            }
            partitions.push(p.partition_index);
        }
        partitions.sort_unstable();
        Ok(partitions)
    }

    /// The latest offset of each partition at `isolation`.
    fn latest(
        &mut self,
        topic: &str,
        partitions: &[i32],
        isolation: i8,
    ) -> Result<HashMap<i32, i64>, KafkaTestError> {
        let version = self.version::<ListOffsetsRequest>(LIST_OFFSETS_MAX)?;
        let request = ListOffsetsRequest::default()
            .with_replica_id((-1).into())
            .with_isolation_level(isolation)
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(
                    partitions
                        .iter()
                        .map(|&p| {
                            ListOffsetsPartition::default()
                                .with_partition_index(p)
                                .with_timestamp(-1)
                        })
                        .collect(),
                )]);
        let reply = self.call(&request, version)?;
        let mut latest = HashMap::new();
        for t in reply.topics.iter().filter(|t| t.name.0.as_str() == topic) {
            for p in &t.partitions {
                if p.error_code != 0 {
                    return Err(self.broker_error(
                        "ListOffsets",
                        topic,
                        Some(p.partition_index),
                        p.error_code,
                    ));
                }
                latest.insert(p.partition_index, p.offset);
            }
        }
        if let Some(&missing) = partitions.iter().find(|p| !latest.contains_key(p)) {
            return Err(self.protocol(
                "ListOffsets",
                format!("no offset for topic `{topic}` partition {missing} in the reply"),
            ));
        }
        Ok(latest)
    }

    /// One read_uncommitted fetch of `partition` at `offset`; `None` when the reply has no
    /// data for the partition.
    fn fetch(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: i32,
    ) -> Result<Option<PartitionData>, KafkaTestError> {
        let version = self.version::<FetchRequest>(FETCH_MAX)?;
        let request = FetchRequest::default()
            .with_replica_id((-1).into())
            .with_max_wait_ms(100)
            .with_min_bytes(1)
            .with_max_bytes(max_bytes)
            .with_isolation_level(READ_UNCOMMITTED)
            .with_topics(vec![FetchTopic::default()
                .with_topic(topic_name(topic))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(partition)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(max_bytes)])]);
        let reply = self.call(&request, version)?;
        if reply.error_code != 0 {
            return Err(self.broker_error("Fetch", topic, Some(partition), reply.error_code));
        }
        let data = reply
            .responses
            .into_iter()
            .flat_map(|t| t.partitions)
            .find(|p| p.partition_index == partition);
        if let Some(data) = &data {
            if data.error_code != 0 {
                return Err(self.broker_error("Fetch", topic, Some(partition), data.error_code));
            }
        }
        Ok(data)
    }

    /// High watermark and last stable offset from Fetch replies (which carry both).
    pub(super) fn partition_offsets(
        &mut self,
        topic: &str,
    ) -> Result<Vec<PartitionOffsets>, KafkaTestError> {
        let mut offsets = Vec::new();
        for partition in self.partitions(topic)? {
            let started = Instant::now();
            let data = loop {
                if let Some(data) = self.fetch(topic, partition, 0, 1)? {
                    break data;
                }
                if started.elapsed() > STALL {
                    return Err(self.stuck(topic, partition, 0, -1));
                }
            };
            offsets.push(PartitionOffsets {
                partition,
                high_watermark: data.high_watermark,
                last_stable: data.last_stable_offset,
            });
        }
        Ok(offsets)
    }

    /// High watermark and last stable offset from ListOffsets.
    pub(super) fn list_offsets(
        &mut self,
        topic: &str,
    ) -> Result<Vec<PartitionOffsets>, KafkaTestError> {
        let partitions = self.partitions(topic)?;
        let high = self.latest(topic, &partitions, READ_UNCOMMITTED)?;
        let stable = self.latest(topic, &partitions, READ_COMMITTED)?;
        Ok(partitions
            .into_iter()
            .map(|partition| PartitionOffsets {
                partition,
                high_watermark: high[&partition],
                last_stable: stable[&partition],
            })
            .collect())
    }

    fn stuck(&self, topic: &str, partition: i32, offset: i64, end: i64) -> KafkaTestError {
        KafkaTestError::Stuck {
            broker: self.broker.clone(),
            topic: topic.to_owned(),
            partition,
            offset,
            high_watermark: end,
            waited: STALL,
        }
    }

    /// The committed records of one partition below `end`, applying the markers.
    pub(super) fn read_partition(
        &mut self,
        topic: &str,
        partition: i32,
        end: i64,
    ) -> Result<Vec<CommittedRecord>, KafkaTestError> {
        let mut markers = Markers::new(partition);
        let mut next = 0i64;
        let mut stalled = Instant::now();
        while next < end {
            let Some(data) = self.fetch(topic, partition, next, FETCH_BYTES)? else {
                // No data for it in this reply (tansu answers so at times): fetch again.
                if stalled.elapsed() > STALL {
                    return Err(self.stuck(topic, partition, next, end));
                }
                continue;
            };
            let mut records = data.records.unwrap_or_default();
            let before = next;
            while let Some(mut batch) = self.next_batch(&mut records, topic, partition)? {
                let decoded = RecordBatchDecoder::decode(&mut batch.bytes).map_err(|e| {
                    self.batch_error(topic, partition, batch.base, format!("cannot decode: {e}"))
                })?;
                for record in decoded.records {
                    if record.offset < next || record.offset >= end {
                        continue;
                    }
                    markers
                        .apply(record)
                        .map_err(|m| self.batch_error(topic, partition, batch.base, m))?;
                }
                next = next.max(batch.base + i64::from(batch.last_offset_delta) + 1);
            }
            if next > before {
                stalled = Instant::now();
            } else if stalled.elapsed() > STALL {
                return Err(self.stuck(topic, partition, next, end));
            }
        }
        Ok(markers.into_visible())
    }

    /// The next whole record batch of a Fetch reply's `records`, split off them; `None` at
    /// their end or at a partial batch (fetched again next round).
    fn next_batch(
        &self,
        records: &mut Bytes,
        topic: &str,
        partition: i32,
    ) -> Result<Option<Batch>, KafkaTestError> {
        if records.len() < BATCH_LOG_OVERHEAD {
            return Ok(None);
        }
        let base = i64::from_be_bytes(header_bytes(records, 0));
        let length = i32::from_be_bytes(header_bytes(records, 8));
        let error = |message: String| self.batch_error(topic, partition, base, message);
        let size = usize::try_from(length)
            .ok()
            .and_then(|l| l.checked_add(BATCH_LOG_OVERHEAD))
            .ok_or_else(|| error(format!("negative length {length}")))?;
        if size > records.len() {
            return Ok(None); // a partial batch at the end of the reply: fetched again next round
        }
        if size < LAST_OFFSET_DELTA_AT + 4 {
            return Err(error(format!("length {length} is too short")));
        }
        let bytes = records.split_to(size);
        if bytes[MAGIC_AT] != 2 {
            return Err(error(format!(
                "magic {} (only record batch v2 is read)",
                bytes[MAGIC_AT]
            )));
        }
        let last_offset_delta = i32::from_be_bytes(header_bytes(&bytes, LAST_OFFSET_DELTA_AT));
        Ok(Some(Batch {
            base,
            last_offset_delta,
            bytes,
        }))
    }

    fn batch_error(
        &self,
        topic: &str,
        partition: i32,
        base: i64,
        message: String,
    ) -> KafkaTestError {
        KafkaTestError::Batch {
            broker: self.broker.clone(),
            topic: topic.to_owned(),
            partition,
            offset: base,
            message,
        }
    }
}

/// One record batch of a Fetch reply, its header read.
struct Batch {
    /// Its base offset.
    base: i64,
    /// The offset of its last record, relative to `base`.
    last_offset_delta: i32,
    /// The whole batch, header included.
    bytes: Bytes,
}

/// The transaction markers applied to one partition's log, record by record: records of
/// non-transactional batches are visible at once; a transactional batch's records wait, by
/// producer, for that producer's next control record, COMMIT making them visible and ABORT
/// dropping them.
struct Markers {
    partition: i32,
    visible: Vec<CommittedRecord>,
    pending: HashMap<i64, Vec<CommittedRecord>>,
}

impl Markers {
    fn new(partition: i32) -> Self {
        Markers {
            partition,
            visible: Vec::new(),
            pending: HashMap::new(),
        }
    }

    /// Applies the next record of the log; an error (its message) for a control record
    /// without a type.
    fn apply(&mut self, record: Record) -> Result<(), String> {
        if record.control {
            let kind = record
                .key
                .as_ref()
                .filter(|k| k.len() >= 4)
                .map(|k| (&k[2..4]).get_i16())
                .ok_or_else(|| {
                    format!("control record at offset {} without a type", record.offset)
                })?;
            match kind {
                CONTROL_COMMIT => {
                    let epoch = record.producer_epoch;
                    self.visible.extend(
                        self.pending
                            .remove(&record.producer_id)
                            .unwrap_or_default()
                            .into_iter()
                            .map(|r| CommittedRecord {
                                committed_by_epoch: Some(epoch),
                                ..r
                            }),
                    );
                }
                CONTROL_ABORT => {
                    self.pending.remove(&record.producer_id);
                }
                _ => {} // other control records (leader change) end no transaction
            }
            return Ok(());
        }
        let committed = CommittedRecord {
            partition: self.partition,
            offset: record.offset,
            key: record.key.map(|k| k.to_vec()),
            value: record.value.map(|v| v.to_vec()),
            producer: (record.producer_id, record.producer_epoch),
            committed_by_epoch: None,
        };
        if record.transactional {
            self.pending
                .entry(record.producer_id)
                .or_default()
                .push(committed);
        } else {
            self.visible.push(committed);
        }
        Ok(())
    }

    /// The visible records, by offset (records of transactions without a marker are not).
    fn into_visible(mut self) -> Vec<CommittedRecord> {
        self.visible.sort_unstable_by_key(|r| r.offset);
        self.visible
    }
}

/// `N` bytes of a batch header at `at` (the caller checked the length).
fn header_bytes<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&bytes[at..at + N]);
    out
}

fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

/// The requests the reader sends: their API key, name and reply (kafka-protocol's own
/// `Request` trait needs the broker side's decoders too).
trait Api: Encodable + Message {
    const KEY: ApiKey;
    const NAME: &'static str;
    type Response: Decodable;
}

impl Api for ApiVersionsRequest {
    const KEY: ApiKey = ApiKey::ApiVersions;
    const NAME: &'static str = "ApiVersions";
    type Response = ApiVersionsResponse;
}

impl Api for MetadataRequest {
    const KEY: ApiKey = ApiKey::Metadata;
    const NAME: &'static str = "Metadata";
    type Response = MetadataResponse;
}

impl Api for ListOffsetsRequest {
    const KEY: ApiKey = ApiKey::ListOffsets;
    const NAME: &'static str = "ListOffsets";
    type Response = ListOffsetsResponse;
}

impl Api for FetchRequest {
    const KEY: ApiKey = ApiKey::Fetch;
    const NAME: &'static str = "Fetch";
    type Response = FetchResponse;
}
