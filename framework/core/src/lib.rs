//! # Weir
//!
//! Stream processing in which every operator instance is an actix actor.
//!
//! An app builds a typed dataflow graph with [`Env`]: sources, then `map`, `flat_map`,
//! `filter`, `key_by` + keyed `process`/`reduce`, `union`, `connect` (optionally with a
//! broadcast side), then sinks; [`Env::execute`] runs it. Each operator runs as
//! `parallelism` subtasks; forward edges of equal parallelism are chained into one actor.
//! Records travel in batches over bounded channels (credit-based backpressure), and every
//! subtask has a two-lane mailbox: control mail is served between any two data batches.
//!
//! ```
//! use weir::Env;
//!
//! let env = Env::new();
//! let sums = env
//!     .generate(1_000, |i| i)
//!     .map(|x| x * 2)
//!     .key_by(|x: &u64| x % 10)
//!     .reduce(|a, b| a + b)
//!     .collect();
//! env.execute("sums").unwrap();
//! assert!(sums.take().contains(&((0..1_000u64).filter(|x| x * 2 % 10 == 0).map(|x| x * 2).sum())));
//! ```
//!
//! Public modules: [`stream`] (the API), [`source`] and [`sink`], [`lookup`] (async
//! enrichment with a cache), [`key_group`] (how keys map to subtasks), [`checkpoint`],
//! [`rate`], [`hooks`], [`error`], [`settings`], [`state`], [`time`]; with the feature
//! `rest` (a default), `rest`; with the feature `faults`, `fault` (fault injection for tests).
//! The workspace's other crates build on these: `weir-kafka` (the Kafka connector),
//! `weir-testing` (faults and exactly-once checks for tests), `weirctl` (the command line and
//! control agent) and `weir-nexmark` (the Nexmark benchmark).
//!
//! # Layers
//!
//! The crate's top-level modules form layers; a module imports only modules of its own layer
//! or of layers below it, and no two modules import each other, directly or through others
//! (`tests/tests/layering.rs` checks both on every test run). Top to bottom:
//!
//! | layer | modules | owns |
//! |---|---|---|
//! | API | `env`, `stream`, `windowed`, `job`, `rest` | building graphs, starting jobs, the [`JobHandle`] and [`JobMonitor`], the REST control plane |
//! | controller | `controller` | a job's lifecycle as typed states, its deployment, the commands that change it, the view it publishes |
//! | protocols | `sampler`, `savepoint`, `detector` | plain structs the controller drives: metrics and rate control, savepoint requests, failure detection |
//! | physical plan | `plan` | uids, chaining, channels; building every subtask's chain |
//! | logical graph | `graph` | nodes and edges, typed ports that build channels and gates |
//! | subtask actors | `task`, `backup`, `gate` | the subtask actor and its two-lane mailbox, buffer-queue backups, input gates |
//! | operators | `operator`, [`source`], [`sink`], `partition` | per-batch operator chains, sources, sinks, network outputs |
//! | core | `config`, `restart`, `failure`, [`checkpoint`], `channel`, `metrics`, `event`, `state`, [`key_group`], `rescale`, `replace`, [`settings`], [`time`], [`error`], [`hooks`], [`rate`], `fault`, `erased`, [`api_types`] | settings, checkpoint protocol and store, credit channels, counters, the events subtasks report, shared vocabulary, the REST wire types |
//! | sync | `sync` | std or loom primitives (the loom shim) |
//!
//! The order is the one imports take, not the order data is transformed in: the API builds
//! the logical graph and hands it to `job`, which plans it and starts a controller; the
//! controller runs the plan (so it imports `plan`), and the plan reads the graph (so it
//! imports `graph`), whose typed ports build the gates and channels below.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod api_types;
mod backup;
mod channel;
pub mod checkpoint;
mod config;
mod controller;
mod detector;
mod env;
mod erased;
pub mod error;
mod event;
mod failure;
/// Fault injection for tests (feature `faults`; `weir-testing` turns it on). Without the
/// feature the module is private: a job's config has no faults to set.
#[cfg(feature = "faults")]
pub mod fault;
#[cfg(not(feature = "faults"))]
#[allow(dead_code, unused_imports)] // the API only tests call
mod fault;
mod gate;
mod graph;
pub mod hooks;
mod job;
pub mod key_group;
mod metrics;
mod operator;
mod partition;
mod plan;
pub mod rate;
mod replace;
mod rescale;
#[cfg(feature = "rest")]
pub mod rest;
mod restart;
mod sampler;
mod savepoint;
pub mod settings;
pub mod sink;
pub mod source;
pub mod state;
pub mod stream;
mod sync;
mod task;
pub mod time;
mod windowed;

pub use backup::{BackupMetrics, BackupPolicy};
pub use checkpoint::coordinator::{
    CheckpointRecord, CheckpointStats, CheckpointStatus, CheckpointSummary, MinMaxAvg,
    SubtaskCheckpoint,
};
pub use checkpoint::store::CheckpointError;
pub use checkpoint::{CheckpointConfig, CheckpointMode, RestoreLatest};
pub use config::EnvConfig;
pub use controller::{JobResult, JobStatus, OperatorResult};
pub use env::Env;
pub use error::{JobError, PlanError, SinkError, SourceError};
pub use failure::{FailureClass, FailureOutcome, FailureRecord, PromotionRecord};
pub use hooks::{ConfigError, ConfigKey, Operator, StateError, StateSnapshot};
pub use job::{Canceller, JobHandle, JobMonitor, PendingPing, RollbackReport};
pub use metrics::{BackpressureLevel, JobMetrics, OperatorMetrics, SubtaskMetrics};
pub use operator::connect::{BroadcastProcessFunction, CoProcessFunction, InputSelection};
pub use operator::keyed::{KeyedFn, KeyedProcessFunction};
pub use operator::lookup;
pub use operator::process::ProcessFunction;
pub use operator::side::{OutputTag, ProcessContext};
pub use operator::timers::{KeyedContext, TimeDomain};
pub use operator::window;
pub use operator::{Collector, OperatorInfo};
pub use plan::{VertexInfo, VertexInput};
pub use replace::{ReplaceError, ReplaceOptions, ReplaceReport};
pub use rescale::{ParallelismChange, Rebalanced, RescaleError, RescaleReport, RescaleStats};
pub use restart::RestartStrategy;
pub use sink::CollectSink;
pub use source::jsonl::{BadLine, BadLineKind, Line, MalformedPolicy};
pub use source::text::Text;
pub use state::{
    DiskBackend, KeyedState, ListState, MapState, Reduce, ReducingState, StateBackend, StateTtl,
    TtlUpdate, ValueState,
};
pub use stream::{
    DataStream, KeyedClosure, KeyedOperator, KeyedStream, PerKeyState, PerRecord, SinkStream,
};
pub use task::SubtaskStatus;
pub use weir_macros::{Operator, Record};
pub use windowed::{LateData, WindowedStream};

/// Support for generated code; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::hooks::__private::*;
}

/// Internals the workspace's criterion benches time (`weir-benches`); not a public API.
#[doc(hidden)]
pub mod __bench {
    pub use crate::checkpoint::store::state_file_bytes;
    pub use crate::rescale::deal_keyed;
}

/// What a stream element must be: cloneable (for broadcast and fan-out), shareable across
/// threads, serializable (for snapshots and channel state), and owned.
pub trait Data:
    Clone + Send + Sync + serde::Serialize + serde::de::DeserializeOwned + 'static
{
}

impl<T> Data for T where
    T: Clone + Send + Sync + serde::Serialize + serde::de::DeserializeOwned + 'static
{
}

/// What a key must be: [`Data`] that hashes and compares.
///
/// Keys that are equal must serialize to the same bytes (as derived `Eq`, `Hash` and
/// `Serialize` do): state kept encoded (on disk, in a backup's copy) is found by the key's
/// encoding, as Flink's RocksDB backend finds it by the key's serialized bytes.
pub trait Key: Data + std::hash::Hash + Eq {}

impl<T> Key for T where T: Data + std::hash::Hash + Eq {}

/// A record that names its own key field (`#[derive(Record)]` with `#[weir(key)]`), so
/// [`DataStream::key_by_field`] needs no closure.
pub trait RecordKey {
    /// The key's type.
    type Key: Key;
    /// The record's key.
    fn record_key(&self) -> Self::Key;
}

/// A record that carries its event time (`#[derive(Record)]` with `#[weir(event_time)]`), in
/// milliseconds since the Unix epoch.
pub trait EventTime {
    /// The record's event time.
    fn event_time(&self) -> u64;
}

/// The book's chapter "Event time and windows": its Rust examples run as this crate's
/// doctests, so the chapter cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../../book/src/event-time.md")]
pub struct BookEventTime;

/// The book's chapter "State backends and checkpoint storage": its example compiles as this
/// crate's doctest.
#[cfg(doctest)]
#[doc = include_str!("../../../book/src/state.md")]
pub struct BookState;

/// The book's chapter "Rescaling a running job": its examples compile as this crate's
/// doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../book/src/rescaling.md")]
pub struct BookRescaling;
