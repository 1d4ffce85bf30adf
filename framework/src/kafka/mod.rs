//! Kafka: a replayable source and a (transactional) sink, on librdkafka (feature `kafka`).
