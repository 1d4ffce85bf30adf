//! Kafka for Weir: a replayable source and an exactly-once sink, on librdkafka.
//!
//! - [`KafkaSource`] reads a topic, a list of topics or the topics a pattern matches.
//!   Partitions go to subtasks by a fixed rule (partition `p` of one topic to subtask
//!   `p % parallelism`); the next offset of each partition is the source's checkpointed
//!   position, so a restored job seeks there and reads every record once. When a checkpoint
//!   completes, the positions are also committed to the consumer group (for monitoring:
//!   restores never read them). Each record is known by (topic, partition, offset). An
//!   unbounded source looks for new partitions and matching topics every few minutes.
//! - [`KafkaSink`] writes a topic, at least once (flushed at every checkpoint barrier) or
//!   exactly once: one Kafka transaction per subtask and checkpoint, committed when the
//!   checkpoint completes. What a transaction holds is also in the checkpoint, so a job
//!   restored from checkpoint `n` finishes `n`'s transaction, whether or not the failed
//!   process committed it (see [`KafkaSink::exactly_once`]).
//!
//! This module owns the clients and their settings; it does not own the job's checkpoints
//! (the checkpoint subsystem asks the source for its position and the sink for its staged
//! transaction) or the broker. Any Apache Kafka 3.x or 4.x cluster works: settings given
//! with [`KafkaConfig::set`] (SASL, TLS, timeouts) go to librdkafka as they are; TLS and SASL
//! need the crate feature `tls`. With the feature `testing`, [`testing`] reads back what a
//! sink committed and talks to the test broker.
//!
//! ```no_run
//! use std::time::Duration;
//! use weir_kafka::{KafkaConfig, KafkaEnvExt, KafkaSink, KafkaSource, KafkaStreamExt, StartFrom};
//!
//! let kafka = KafkaConfig::new("127.0.0.1:9092");
//! let mut cfg = weir::EnvConfig::default();
//! cfg.checkpoint.interval = Some(Duration::from_millis(500));
//! let env = weir::Env::with_config(cfg);
//! let source = KafkaSource::new(kafka.clone(), "orders", |r| {
//!     std::str::from_utf8(r.value.unwrap_or_default())
//!         .map(str::to_uppercase)
//!         .map_err(|e| e.to_string())
//! })
//! .start_from(StartFrom::Earliest);
//! let sink = KafkaSink::new(kafka, "orders-upper", |s: &String, out: &mut Vec<u8>| {
//!     out.extend_from_slice(s.as_bytes());
//!     Ok(())
//! })
//! .exactly_once("orders-job");
//! env.kafka_source("orders", source).sink_to_kafka("orders-upper", sink);
//! env.execute("orders-job").unwrap();
//! ```

mod group;
mod sink;
mod source;

pub use group::{GroupMember, KafkaGroup, PartitionTask, TaskEvent};
pub use sink::{Delivery, KafkaSink, KafkaStreamExt};
pub use source::{KafkaEnvExt, KafkaRecord, KafkaSource, Malformed, RecordView, StartFrom};

/// Reading back what a Kafka sink committed, and the test broker (feature `testing`).
#[cfg(feature = "testing")]
pub mod testing;

use std::time::Duration;

use rdkafka::ClientConfig;

/// How long a blocking client call (metadata, a transaction's commit) may take before the
/// subtask fails (and restarts) rather than wait on.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the brokers are, and librdkafka settings passed through as they are.
///
/// ```
/// let kafka = weir_kafka::KafkaConfig::new("broker-1:9092,broker-2:9092")
///     .set("security.protocol", "SASL_SSL")
///     .set("sasl.mechanism", "PLAIN");
/// assert_eq!(kafka.brokers(), "broker-1:9092,broker-2:9092");
/// ```
#[derive(Debug, Clone)]
pub struct KafkaConfig {
    brokers: String,
    settings: Vec<(String, String)>,
}

impl KafkaConfig {
    /// The bootstrap brokers, `host:port` separated by commas.
    pub fn new(brokers: impl Into<String>) -> Self {
        KafkaConfig {
            brokers: brokers.into(),
            settings: Vec::new(),
        }
    }

    /// Sets a librdkafka property for every client made from this config (a later call for
    /// the same key wins). Weir sets what its guarantees need itself (`enable.auto.commit`,
    /// `transactional.id`, `isolation.level`, ...) after these, so those cannot be undone here.
    pub fn set(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings.push((key.into(), value.into()));
        self
    }

    /// The bootstrap brokers.
    pub fn brokers(&self) -> &str {
        &self.brokers
    }

    /// The value set for `key`, if any.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.settings
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A client config with the brokers and the user's settings.
    pub(crate) fn client(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.brokers);
        for (k, v) in &self.settings {
            c.set(k, v);
        }
        c
    }
}

/// A librdkafka error as the source of a Weir error.
pub(crate) fn boxed(e: rdkafka::error::KafkaError) -> Box<dyn std::error::Error + Send + Sync> {
    Box::new(e)
}
