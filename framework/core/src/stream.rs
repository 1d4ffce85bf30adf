//! The typed dataflow API: [`DataStream`], [`KeyedStream`], [`ConnectedStreams`] and
//! [`BroadcastConnectedStreams`].
//!
//! Each method adds one operator to the job's graph and returns the stream of its output.
//! Settings that name an operator (`uid`, `name`, `set_parallelism`) apply to the operator
//! that produced the stream, as in Flink. The partitioning methods (`forward`, `rebalance`,
//! `broadcast`, `key_by`) choose how the *next* operator receives the stream.
//!
//! ```
//! use weir::Env;
//! let env = Env::new();
//! let counts = env
//!     .from_collection(vec!["a b".to_string(), "b c".into(), "c".into()])
//!     .flat_map(|line: String| line.split(' ').map(str::to_owned).collect::<Vec<_>>())
//!     .key_by(|w: &String| w.clone())
//!     .reduce_by(|w| (w, 1u64), |(w, a), (_, b)| (w, a + b))
//!     .collect();
//! env.execute("doc").unwrap();
//! let mut final_counts = std::collections::BTreeMap::new();
//! for (w, n) in counts.take() { final_counts.insert(w, n); }
//! assert_eq!(final_counts["c"], 2);
//! ```

use std::cell::RefCell;
use std::marker::PhantomData;
use std::rc::Rc;

use crate::erased::{unbox, AnyBox};
use crate::error::PlanError;
use crate::graph::{Built, Edge, Graph, Node, NodeId, OpEnv, Port};
use crate::hooks::{Operator, StateSnapshot};
use crate::operator::apply::ApplyOp;
use crate::operator::filter::FilterOp;
use crate::operator::flat_map::FlatMapOp;
use crate::operator::keyed_apply::{check_state_fields, AppliedTo};
use crate::operator::local::LocalAggregateOp;
use crate::operator::lookup::op::LookupOp;
use crate::operator::lookup::{AsyncLookup, LookupConfig};
use crate::operator::map::MapOp;
use crate::operator::process::{ProcessFunction, ProcessOp};
use crate::operator::window::AggregateFunction;
use crate::operator::{BoxOutput, OpCore};
use crate::partition::{PartitionKind, Partitioning};
use crate::{Data, Key};

mod connect;
mod keyed;
mod side;
mod sinks;

pub use connect::{BroadcastConnectedStreams, ConnectedStreams};
pub use keyed::{KeyedClosure, KeyedOperator, KeyedStream, PerKeyState, PerRecord};
pub use sinks::SinkStream;

pub(crate) type SharedGraph = Rc<RefCell<Graph>>;

/// A stream of records of type `T`.
pub struct DataStream<T> {
    pub(crate) graph: SharedGraph,
    /// The output ports this stream is the union of.
    pub(crate) producers: Vec<(NodeId, usize)>,
    pub(crate) partition: PartitionKind,
    /// The records' event time, where the stream has one (a watermark strategy upstream,
    /// kept by operators that keep the record type: filter, rebalance, key_by).
    pub(crate) timestamps: Option<crate::time::Timestamps<T>>,
    pub(crate) _t: PhantomData<fn() -> T>,
}

impl<T> Clone for DataStream<T> {
    fn clone(&self) -> Self {
        DataStream {
            graph: self.graph.clone(),
            producers: self.producers.clone(),
            partition: self.partition,
            timestamps: self.timestamps.clone(),
            _t: PhantomData,
        }
    }
}

/// The node of a one-input operator with these output ports and the defaults: no uid or
/// parallelism of its own, no backup, and no checkpointed state (operators with state say how
/// it is redistributed where their type is known, `rescale_rule`).
fn operator_node(
    name: &str,
    builder: Box<dyn crate::graph::NodeBuilder>,
    ports: Vec<Box<dyn crate::graph::PortType>>,
) -> Node {
    Node {
        name: name.to_owned(),
        uid: None,
        parallelism: None,
        part_of: None,
        is_source: false,
        n_inputs: 1,
        side_outputs: None,
        ports,
        builder,
        initial_state: None,
        backup: None,
        stateless: false,
        rescale: crate::rescale::Rule::Stateless,
    }
}

pub(crate) fn core<U>(env: &OpEnv, next: BoxOutput<U>) -> OpCore<U> {
    let mut core = OpCore::new(
        env.info.clone(),
        env.counters.clone(),
        next,
        env.config.batch_size,
    );
    core.fault = env
        .config
        .faults
        .for_operator(
            &env.info.uid,
            env.info.subtask,
            matches!(env.start, crate::checkpoint::StartPoint::Promoted),
        )
        .map(|p| p.starting_at(env.fault_offset));
    core.next.sides = env.take_sides();
    core
}

/// Builder of an `apply` node: the operator, restored from its initial state if any.
fn apply_builder<T, U, P>(op: P) -> Box<dyn crate::graph::NodeBuilder>
where
    T: Data,
    U: Data,
    P: ProcessFunction<T, U> + Operator + Clone,
{
    Box::new(move |env: &OpEnv, mut outputs: Vec<AnyBox>| {
        let next = unbox::<BoxOutput<U>>(outputs.remove(0));
        let mut f = op.clone();
        restore_initial(&mut f, env)?;
        let head: BoxOutput<T> = Box::new(ApplyOp(ProcessOp {
            f,
            core: core(env, next),
        }));
        Ok(Built::Inputs {
            heads: vec![Box::new(head) as AnyBox],
            selection: None,
        })
    })
}

/// Restores an operator instance from its subtask's initial state, if one was given, then
/// applies the config changes made while the job ran.
fn restore_initial<P: Operator>(op: &mut P, env: &OpEnv) -> Result<(), crate::error::TaskError> {
    if let Some(payload) = &env.restored {
        // A checkpoint being restored wins over the job's initial state.
        crate::operator::apply::restore_hooked(op, payload).map_err(|e| env.restore_error(e))?;
    } else if let Some(snap) = &env.initial_state {
        op.restore_state(snap)
            .map_err(|source| crate::error::TaskError::State {
                uid: env.info.uid.clone(),
                subtask: env.info.subtask,
                source,
            })?;
    }
    apply_live_config(op, env)
}

/// Applies the config changes made to this operator while the job ran (they were accepted
/// then, so a refusal now is a bug worth failing on).
fn apply_live_config<P: Operator>(op: &mut P, env: &OpEnv) -> Result<(), crate::error::TaskError> {
    for (key, value) in &env.live_config {
        op.on_config(key, value)
            .map_err(|e| env.restore_error(format!("cannot apply live config: {e}")))?;
    }
    Ok(())
}

/// One-input operator node builder from a typed constructor.
fn one_input_builder<T, U, B>(build: B) -> Box<dyn crate::graph::NodeBuilder>
where
    T: Data,
    U: Data,
    B: Fn(&OpEnv, BoxOutput<U>) -> Result<BoxOutput<T>, crate::error::TaskError> + Send + 'static,
{
    Box::new(move |env: &OpEnv, mut outputs: Vec<AnyBox>| {
        let next = unbox::<BoxOutput<U>>(outputs.remove(0));
        Ok(Built::Inputs {
            heads: vec![Box::new(build(env, next)?) as AnyBox],
            selection: None,
        })
    })
}

impl<T: Data> DataStream<T> {
    pub(crate) fn new(graph: SharedGraph, node: NodeId, port: usize) -> Self {
        DataStream {
            graph,
            producers: vec![(node, port)],
            partition: PartitionKind::Auto,
            timestamps: None,
            _t: PhantomData,
        }
    }

    fn edges_into(
        &self,
        g: &mut Graph,
        to: NodeId,
        input: usize,
        part: impl Fn() -> Partitioning<T>,
    ) {
        for &(from, port) in &self.producers {
            g.add_edge(Edge {
                from,
                port,
                to,
                input,
                partition: Box::new(part()),
            });
        }
    }

    fn partitioning(&self) -> impl Fn() -> Partitioning<T> {
        let kind = self.partition;
        move || match kind {
            PartitionKind::Forward => Partitioning::Forward,
            PartitionKind::Rebalance => Partitioning::Rebalance,
            PartitionKind::Broadcast => Partitioning::Broadcast,
            PartitionKind::Auto | PartitionKind::Hash => Partitioning::Auto,
        }
    }

    /// Adds a one-input operator fed by this stream.
    pub(crate) fn add_operator<U: Data>(
        &self,
        name: &str,
        builder: Box<dyn crate::graph::NodeBuilder>,
        part: impl Fn() -> Partitioning<T>,
    ) -> DataStream<U> {
        let mut g = self.graph.borrow_mut();
        let id = g.add_node(operator_node(name, builder, vec![Port::<U>::boxed()]));
        self.edges_into(&mut g, id, 0, part);
        drop(g);
        DataStream::new(self.graph.clone(), id, 0)
    }

    /// Adds a one-input operator with a second output (a side output of type `S`), fed by
    /// this stream: the main stream and the side stream.
    pub(crate) fn add_operator_with_side<U: Data, S: Data>(
        &self,
        name: &str,
        builder: Box<dyn crate::graph::NodeBuilder>,
        part: impl Fn() -> Partitioning<T>,
    ) -> (DataStream<U>, DataStream<S>, NodeId) {
        let mut g = self.graph.borrow_mut();
        let ports = vec![Port::<U>::boxed(), Port::<S>::boxed()];
        let id = g.add_node(operator_node(name, builder, ports));
        self.edges_into(&mut g, id, 0, part);
        drop(g);
        (
            DataStream::new(self.graph.clone(), id, 0),
            DataStream::new(self.graph.clone(), id, 1),
            id,
        )
    }

    /// Sets how the state of the operator that produced this stream follows a rescale.
    pub(crate) fn rescale_rule(self, rule: crate::rescale::Rule) -> Self {
        self.set("rescale_rule", |n| n.rescale = rule);
        self
    }

    fn add_one<U: Data, B>(self, name: &str, build: B) -> DataStream<U>
    where
        B: Fn(&OpEnv, BoxOutput<U>) -> Result<BoxOutput<T>, crate::error::TaskError>
            + Send
            + 'static,
    {
        let part = self.partitioning();
        self.add_operator(name, one_input_builder::<T, U, B>(build), part)
    }

    fn set(&self, method: &'static str, f: impl FnOnce(&mut Node)) {
        let mut g = self.graph.borrow_mut();
        match self.producers.as_slice() {
            [(id, _)] => {
                let id = g.settable(*id);
                f(&mut g.nodes[id])
            }
            _ => g.errors.push(PlanError::NotAnOperator { method }),
        }
    }

    /// Sets the stable uid of the operator that produced this stream (state is matched by it).
    pub fn uid(self, uid: &str) -> Self {
        self.set("uid", |n| n.uid = Some(uid.to_owned()));
        self
    }

    /// Sets the display name of the operator that produced this stream.
    pub fn name(self, name: &str) -> Self {
        self.set("name", |n| n.name = name.to_owned());
        self
    }

    /// Sets the parallelism of the operator that produced this stream.
    pub fn set_parallelism(self, parallelism: usize) -> Self {
        self.set("set_parallelism", |n| n.parallelism = Some(parallelism));
        self
    }

    /// Assigns the key groups of the keyed operator that produced this stream by observed
    /// load whenever it is rescaled, instead of by count: the records its inputs sent to
    /// each key group since its key groups were last assigned are dealt so that the hottest
    /// subtask carries as little as the groups allow ([`balance_by_load`]). A running job
    /// can also rebalance any keyed operator at its parallelism now with
    /// [`JobMonitor::rebalance`](crate::JobMonitor::rebalance). Refused when the job is planned
    /// for an operator without keyed state.
    ///
    /// ```no_run
    /// use weir::Env;
    ///
    /// let env = Env::new();
    /// env.from_collection((0u64..1_000).map(|i| (i % 10, 1u64)).collect())
    ///     .key_by(|r: &(u64, u64)| r.0)
    ///     .reduce(|a, b| (a.0, a.1 + b.1))
    ///     .uid("sum")
    ///     .key_groups_by_load()
    ///     .collect();
    /// ```
    ///
    /// [`balance_by_load`]: crate::key_group::balance_by_load
    pub fn key_groups_by_load(self) -> Self {
        let mut g = self.graph.borrow_mut();
        match self.producers.as_slice() {
            [(id, _)] => {
                let id = g.settable(*id);
                g.by_load.insert(id);
            }
            _ => g.errors.push(PlanError::NotAnOperator {
                method: "key_groups_by_load",
            }),
        }
        drop(g);
        self
    }

    /// Backs up the operator that produced this stream with the default [`BackupPolicy`](crate::BackupPolicy)
    /// (heartbeat every 50 ms, timeout 250 ms): each subtask gets an active backup on another
    /// thread, fed the same batches, which takes over in milliseconds when the primary
    /// panics, hangs or loses its thread, with nothing lost or duplicated downstream. The
    /// operator must be deterministic (the backup recomputes what the primary's output
    /// lacked), have one input, and not be next to another backed-up operator.
    ///
    /// ```no_run
    /// use weir::Env;
    ///
    /// let env = Env::new();
    /// env.from_collection((0..1000u64).collect::<Vec<_>>())
    ///     .map(|x| x * 2)
    ///     .uid("double")
    ///     .with_backup()
    ///     .collect();
    /// env.execute("backed-up").unwrap();
    /// ```
    pub fn with_backup(self) -> Self {
        self.with_backup_policy(crate::BackupPolicy::default())
    }

    /// Backs up the operator that produced this stream with `policy` (see
    /// [`with_backup`](Self::with_backup)).
    pub fn with_backup_policy(self, policy: crate::BackupPolicy) -> Self {
        self.set("with_backup", |n| n.backup = Some(policy));
        self
    }

    /// Marks the operator that produced this stream as keeping no state between records.
    fn stateless(self) -> Self {
        self.set("stateless", |n| n.stateless = true);
        self
    }

    /// The next operator receives this stream from the subtask with the same index (needs
    /// equal parallelism).
    pub fn forward(mut self) -> Self {
        self.partition = PartitionKind::Forward;
        self
    }

    /// The next operator receives this stream round robin over its subtasks.
    pub fn rebalance(mut self) -> Self {
        self.partition = PartitionKind::Rebalance;
        self
    }

    /// Every subtask of the next operator receives every record.
    pub fn broadcast(mut self) -> Self {
        self.partition = PartitionKind::Broadcast;
        self
    }

    /// Applies `f` to every record.
    pub fn map<U, F>(self, f: F) -> DataStream<U>
    where
        U: Data,
        F: FnMut(T) -> U + Clone + Send + 'static,
    {
        self.add_one("map", move |env, next| {
            Ok(Box::new(MapOp {
                f: f.clone(),
                core: core(env, next),
            }))
        })
        .stateless()
    }

    /// Keeps the records for which `f` is true.
    pub fn filter<F>(self, f: F) -> DataStream<T>
    where
        F: FnMut(&T) -> bool + Clone + Send + 'static,
    {
        let timestamps = self.timestamps.clone();
        let mut out = self
            .add_one("filter", move |env, next| {
                Ok(Box::new(FilterOp {
                    f: f.clone(),
                    core: core(env, next),
                }))
            })
            .stateless();
        out.timestamps = timestamps;
        out
    }

    /// The records' event time is `f(record)` from here on (for windows), with no watermark
    /// generated: the watermarks come from upstream. After a `map` the timestamps of the
    /// stream before it are not known any more (records carry no timestamp field); give
    /// them again this way.
    ///
    /// ```
    /// # use weir::Env;
    /// let env = Env::new();
    /// env.generate(10, |i| (i, i as i64 * 1_000))
    ///     .map(|(id, ts): (u64, i64)| (id * 2, ts))
    ///     .with_timestamps(|r: &(u64, i64)| r.1)
    ///     .discard();
    /// ```
    pub fn with_timestamps(
        mut self,
        f: impl Fn(&T) -> crate::time::EventTime + Send + Sync + 'static,
    ) -> Self {
        self.timestamps = Some(std::sync::Arc::new(f));
        self
    }

    /// Gives the records their event time and generates watermarks from `strategy` here
    /// (Flink's `assignTimestampsAndWatermarks`): each subtask emits the highest timestamp it
    /// saw minus the bound, after its batches, at most once per watermark interval, and
    /// drops the watermarks from upstream. (Idleness is detected at sources:
    /// [`Env::add_source_with_watermarks`](crate::Env::add_source_with_watermarks).)
    pub fn assign_timestamps_and_watermarks(
        self,
        strategy: crate::time::WatermarkStrategy<T>,
    ) -> DataStream<T> {
        if strategy.assigner().is_none() {
            self.graph.borrow_mut().errors.push(PlanError::BadConfig {
                key: "watermark strategy",
                message: "assign_timestamps_and_watermarks: the strategy has no timestamp assigner (with_timestamp_assigner)".into(),
            });
        }
        if let Some(a) = strategy.alignment() {
            self.graph.borrow_mut().errors.push(PlanError::BadConfig {
                key: "watermark alignment",
                message: format!(
                    "assign_timestamps_and_watermarks: alignment group `{}` pauses a source's \
                     reading, which an operator inside the stream cannot do; give the strategy \
                     to add_source_with_watermarks",
                    a.group
                ),
            });
        }
        let timestamps = strategy.assigner().cloned();
        let mut out = self
            .add_one("watermarks", move |env, next| {
                Ok(Box::new(crate::operator::watermark::WatermarkOp {
                    generator: strategy.generator(),
                    core: core(env, next),
                    failed: None,
                }))
            })
            .stateless();
        out.timestamps = timestamps;
        out
    }

    /// Emits every item of `f(record)`.
    pub fn flat_map<U, I, F>(self, f: F) -> DataStream<U>
    where
        U: Data,
        I: IntoIterator<Item = U>,
        F: FnMut(T) -> I + Clone + Send + 'static,
    {
        self.add_one("flat_map", move |env, next| {
            Ok(Box::new(FlatMapOp {
                f: f.clone(),
                core: core(env, next),
            }))
        })
        .stateless()
    }

    /// Runs a [`ProcessFunction`] (or a closure `FnMut(T, &mut Collector<U>)`) per record.
    pub fn process<U, P>(self, f: P) -> DataStream<U>
    where
        U: Data,
        P: ProcessFunction<T, U> + Clone,
    {
        self.add_one("process", move |env, next| {
            Ok(Box::new(ProcessOp {
                f: f.clone(),
                core: core(env, next),
            }))
        })
        .with_side_outputs()
    }

    /// Pre-aggregates on each subtask, without a shuffle: the local half of a local-global
    /// aggregation (Flink's two-phase aggregation). Records are folded with `agg` per key
    /// (`key_fn`) into one partial accumulator per key on this subtask; once the input
    /// watermark is at or past `complete_at(&key)` the key's partial goes on as
    /// `(key, partial)`, before the watermark. Key by the same key after it and merge the
    /// partials ([`AggregateFunction::merge`]): far fewer records cross the shuffle when many
    /// records of a subtask share a key (a max per window over per-auction counts, say).
    ///
    /// A key may go on in several partials: one per subtask, and one more each time a
    /// checkpoint barrier comes while it is open, since the operator sends every open partial
    /// on before a barrier and so keeps no state across checkpoints (restore and rescale have
    /// nothing of it to carry). Records of a key already complete go on at once, as a partial
    /// of their own. It cannot be backed up (`with_backup` is refused when the job is
    /// planned): its open partials are not handed to a backup.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::time::WatermarkStrategy;
    /// use weir::window::{AggregateFunction, TumblingEventTimeWindows};
    /// use weir::Env;
    ///
    /// /// Counts records (here: the local partials).
    /// #[derive(Clone)]
    /// struct Count;
    /// impl AggregateFunction<(u64, i64), u64> for Count {
    ///     type Acc = u64;
    ///     fn add(&self, n: &mut u64, _x: (u64, i64)) { *n += 1 }
    ///     fn merge(&self, n: &mut u64, other: &u64) { *n += other }
    ///     fn result(&self, n: &u64) -> u64 { *n }
    /// }
    /// /// Sums the partials of a second (the global step).
    /// #[derive(Clone)]
    /// struct Sum;
    /// impl AggregateFunction<(i64, u64), u64> for Sum {
    ///     type Acc = u64;
    ///     fn add(&self, n: &mut u64, p: (i64, u64)) { *n += p.1 }
    ///     fn merge(&self, n: &mut u64, other: &u64) { *n += other }
    ///     fn result(&self, n: &u64) -> u64 { *n }
    /// }
    ///
    /// let env = Env::new();
    /// let wm = WatermarkStrategy::for_bounded_out_of_orderness(Duration::ZERO)
    ///     .with_timestamp_assigner(|r: &(u64, i64)| r.1);
    /// let second = |r: &(u64, i64)| r.1.div_euclid(1_000) * 1_000;
    /// let per_second = env
    ///     .from_collection((0..3_000u64).map(|i| (i, i as i64)).collect::<Vec<_>>())
    ///     .assign_timestamps_and_watermarks(wm)
    ///     .local_aggregate(second, |start: &i64| start + 999, Count)
    ///     .with_timestamps(|p: &(i64, u64)| p.0)
    ///     .key_by(|p: &(i64, u64)| p.0)
    ///     .window(TumblingEventTimeWindows::of(Duration::from_secs(1)))
    ///     .aggregate_window(Sum, |start: &i64, _: &weir::window::Fired, n| (*start, n))
    ///     .collect();
    /// env.execute("local-aggregate-doc").unwrap();
    /// let mut got = per_second.take();
    /// got.sort();
    /// assert_eq!(got, vec![(0, 1_000), (1_000, 1_000), (2_000, 1_000)]);
    /// ```
    pub fn local_aggregate<K, O, KF, CF, A>(
        self,
        key_fn: KF,
        complete_at: CF,
        agg: A,
    ) -> DataStream<(K, A::Acc)>
    where
        K: Key,
        KF: Fn(&T) -> K + Clone + Send + 'static,
        CF: Fn(&K) -> crate::time::EventTime + Clone + Send + 'static,
        A: AggregateFunction<T, O>,
        O: 'static,
    {
        let out = self.add_one("local_aggregate", move |env, next| {
            Ok(Box::new(LocalAggregateOp {
                key_fn: key_fn.clone(),
                complete_at: complete_at.clone(),
                agg: agg.clone(),
                groups: std::collections::HashMap::new(),
                open: std::collections::BTreeMap::new(),
                watermark: crate::time::EventTime::MIN,
                core: core(env, next),
                _io: PhantomData,
            }))
        });
        let id = out.producers[0].0;
        out.graph.borrow_mut().no_backup.push((
            id,
            "a local aggregation's open partials are not handed to a buffer-queue backup \
             (they go on before each checkpoint barrier: it recovers by restart)",
        ));
        out
    }

    /// Runs a user operator with derived hooks (`#[derive(Operator)]` on a
    /// [`ProcessFunction`]): like [`process`](Self::process), and its `#[weir(config)]` fields
    /// can be changed while the job runs ([`JobMonitor::update_config`]) and its
    /// `#[weir(state)]` fields snapshotted ([`JobMonitor::snapshot_state`]) and restored
    /// ([`with_initial_state`](Self::with_initial_state)). The node's default name is the
    /// operator's type name.
    ///
    /// [`JobMonitor::update_config`]: crate::JobMonitor::update_config
    /// [`JobMonitor::snapshot_state`]: crate::JobMonitor::snapshot_state
    pub fn apply<U, P>(self, op: P) -> DataStream<U>
    where
        U: Data,
        P: ProcessFunction<T, U> + Operator + Clone,
    {
        if let Err(e) = check_state_fields::<P>(P::NAME, AppliedTo::Stream) {
            self.graph.borrow_mut().errors.push(e);
        }
        let part = self.partitioning();
        let rule = match crate::rescale::Rule::fields(P::state_fields()) {
            Ok(fields) if fields.is_empty() && P::state_fields().is_empty() => {
                crate::rescale::Rule::Stateless
            }
            Ok(fields) => crate::rescale::Rule::Subtask(fields),
            Err(why) => crate::rescale::Rule::Refused(why),
        };
        self.add_operator(P::NAME, apply_builder::<T, U, P>(op), part)
            .rescale_rule(rule)
            .with_side_outputs()
    }

    /// Starts the operator that produced this stream from these states, one per subtask (as
    /// returned by [`JobMonitor::snapshot_state`](crate::JobMonitor::snapshot_state)).
    pub fn with_initial_state(self, snapshots: Vec<StateSnapshot>) -> Self {
        self.set("with_initial_state", |n| n.initial_state = Some(snapshots));
        self
    }

    /// One stream of the records of `self` and of every stream in `others`.
    pub fn union(mut self, others: impl IntoIterator<Item = DataStream<T>>) -> DataStream<T> {
        for o in others {
            self.producers.extend(o.producers);
        }
        self
    }

    /// Adds a check of the job's config, run when the job is planned: a connector whose
    /// settings must agree with the job's (a Kafka sink's transaction timeout must outlast
    /// the checkpoint interval) refuses a job that cannot work, naming why, before it starts.
    ///
    /// ```
    /// use weir::{Env, EnvConfig, PlanError};
    /// let env = Env::new();
    /// env.generate(10, |i| i)
    ///     .check_config(|cfg: &EnvConfig| match cfg.checkpoint.interval {
    ///         Some(_) => Ok(()),
    ///         None => Err(PlanError::BadConfig {
    ///             key: "checkpoint.interval",
    ///             message: "this sink commits at checkpoints, and the job takes none".into(),
    ///         }),
    ///     })
    ///     .collect();
    /// assert!(env.execute("needs-checkpoints").is_err());
    /// ```
    pub fn check_config<F>(self, check: F) -> Self
    where
        F: Fn(&crate::EnvConfig) -> Result<(), crate::error::PlanError> + Send + Sync + 'static,
    {
        self.graph.borrow_mut().config_checks.push(Box::new(check));
        self
    }

    /// Enriches every record by an asynchronous call (`lookup`), with at most
    /// `config.capacity` calls in flight per subtask, a timeout and a cache in front; see
    /// [`crate::lookup`]. Returns the enriched records and the side output of records whose
    /// call timed out on every attempt ([`OnTimeout::SideOutput`]; empty otherwise). The node
    /// is named `lookup`; its live keys (`cache`, `cache.size`, `cache.ttl`, `timeout`,
    /// `capacity`, `retries`) change through
    /// [`JobMonitor::update_config`](crate::JobMonitor::update_config) by its uid.
    ///
    /// [`OnTimeout::SideOutput`]: crate::lookup::OnTimeout::SideOutput
    pub fn lookup<L>(self, lookup: L, config: LookupConfig) -> (DataStream<L::Out>, DataStream<T>)
    where
        L: AsyncLookup<T>,
    {
        if let Err(e) = config.validate() {
            self.graph.borrow_mut().errors.push(e);
        }
        let gauges = std::sync::Arc::new(config.metrics());
        let builder = Box::new(move |env: &OpEnv, mut outputs: Vec<AnyBox>| {
            let side = unbox::<BoxOutput<T>>(outputs.remove(1));
            let next = unbox::<BoxOutput<L::Out>>(outputs.remove(0));
            let (core, restored) = (core(env, next), env.restored.as_deref());
            let op = LookupOp::new(
                lookup.clone(),
                &config,
                core,
                side,
                restored,
                &env.live_config,
            )
            .map_err(|e| env.restore_error(e))?;
            Ok(Built::Inputs {
                heads: vec![Box::new(Box::new(op) as BoxOutput<T>) as AnyBox],
                selection: None,
            })
        });
        let part = self.partitioning();
        let mut g = self.graph.borrow_mut();
        let id = g.add_node(Node {
            name: "lookup".to_owned(),
            uid: None,
            parallelism: None,
            part_of: None,
            is_source: false,
            n_inputs: 1,
            side_outputs: None,
            ports: vec![Port::<L::Out>::boxed(), Port::<T>::boxed()],
            builder,
            initial_state: None,
            backup: None,
            stateless: false,
            // The unfinished records are dealt out like operator list state.
            rescale: crate::rescale::Rule::Subtask(vec![(
                crate::operator::lookup::op::STATE_FIELD.to_owned(),
                crate::hooks::Redistribution::Split,
            )]),
        });
        g.gauges.push((id, gauges));
        g.no_backup.push((
            id,
            "an async lookup's calls in flight are not replayed by a buffer-queue backup yet \
             (its checkpoints carry them: it recovers by restart)",
        ));
        self.edges_into(&mut g, id, 0, part);
        drop(g);
        (
            DataStream::new(self.graph.clone(), id, 0),
            DataStream::new(self.graph.clone(), id, 1),
        )
    }
}
