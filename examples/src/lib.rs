//! The runnable Weir apps, as a library so benchmarks and tests reuse them.
//!
//! - [`answers`]: answer cleaning, the ETL job of the BQBS paper (the example
//!   `answer_cleaning` and the benchmark `etl` run it).
//! - [`fraud`]: fraud detection, Flink's tutorial (the example `fraud_detection`): one
//!   derived operator with per-card state, a TTL and live thresholds, and a fault drill.
//! - [`sensors`]: side outputs, from a keyed process function's context.
//! - [`words`]: word count over generated or read text lines (the example `wordcount`).
//! - [`rng`]: a tiny seeded generator for deterministic test input.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod answers;
pub mod fraud;
pub mod rng;
pub mod sensors;
pub mod words;
