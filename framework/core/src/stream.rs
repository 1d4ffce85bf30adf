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
use crate::hooks::{KeyedFields, Operator, StateSnapshot};
use crate::operator::apply::ApplyOp;
use crate::operator::connect::{
    co_sides, BroadcastAdapter, BroadcastProcessFunction, CoAdapter, CoProcessFunction,
    HookedBroadcast, HookedCo, InputSelection, SelectionCell, TwoInput,
};
use crate::operator::filter::FilterOp;
use crate::operator::flat_map::FlatMapOp;
use crate::operator::keyed::{Hooks, KeyedFn, KeyedOp, KeyedProcessFunction, ReduceFn};
use crate::operator::keyed_apply::{check_state_fields, AppliedTo, KeyedApplyOp};
use crate::operator::local::LocalAggregateOp;
use crate::operator::lookup::op::LookupOp;
use crate::operator::lookup::{AsyncLookup, LookupConfig};
use crate::operator::map::MapOp;
use crate::operator::process::{ProcessFunction, ProcessOp};
use crate::operator::split::SplitOp;
use crate::operator::timers::Timers;
use crate::operator::window::AggregateFunction;
use crate::operator::{BoxOutput, Collector, OpCore};
use crate::partition::{hash_routing, PartitionKind, Partitioning};
use crate::sink::file::{DisplayLines, FormatLines, JsonLines, LineFileSink, StagedLineSink};
use crate::sink::{CollectSink, DiscardSink, Sink, SinkContext, SinkOp, StdoutSink};
use crate::sync::Arc;
use crate::{Data, Key};

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

    /// The side output `tag` of the operator that produced this stream (Flink's
    /// `getSideOutput`): the records its function emitted with `ctx.output(&tag, value)`.
    /// Taking the same tag twice gives the same stream. The operator must be a
    /// `process`, `process_with` or `apply` (keyed or not) or a window function; a tag named
    /// like another of the operator's with another type is refused when the job is planned.
    /// See [`OutputTag`](crate::OutputTag) for an example.
    pub fn get_side_output<S: Data>(&self, tag: &crate::OutputTag<S>) -> DataStream<S> {
        let mut g = self.graph.borrow_mut();
        let fail = |g: &mut Graph, message: String| {
            g.errors.push(PlanError::BadConfig {
                key: "get_side_output",
                message,
            });
            DataStream {
                graph: self.graph.clone(),
                producers: Vec::new(),
                partition: PartitionKind::Auto,
                timestamps: None,
                _t: PhantomData,
            }
        };
        let id = match self.producers.as_slice() {
            [(id, _)] => g.settable(*id),
            _ => {
                g.errors.push(PlanError::NotAnOperator {
                    method: "get_side_output",
                });
                return fail(&mut g, format!("side output `{}`", tag.name()));
            }
        };
        let node = &mut g.nodes[id];
        let (op, n_ports) = (node.name.clone(), node.ports.len());
        let Some(tags) = node.side_outputs.as_mut() else {
            return fail(
                &mut g,
                format!(
                    "operator `{op}` has no side outputs (`{}`): only process functions, \
                     derived operators and window functions emit them, from their context",
                    tag.name()
                ),
            );
        };
        let port = match tags.iter().find(|t| &*t.name == tag.name()) {
            Some(t) if t.type_id == std::any::TypeId::of::<S>() => t.port,
            Some(t) => {
                let had = t.type_name;
                return fail(
                    &mut g,
                    format!(
                        "operator `{op}`: side output `{}` was taken as `{had}` and now as `{}`",
                        tag.name(),
                        std::any::type_name::<S>()
                    ),
                );
            }
            None => {
                tags.push(crate::graph::SideTag {
                    name: std::sync::Arc::from(tag.name()),
                    type_id: std::any::TypeId::of::<S>(),
                    type_name: std::any::type_name::<S>(),
                    port: n_ports,
                });
                node.ports.push(Port::<S>::boxed());
                n_ports
            }
        };
        drop(g);
        DataStream::new(self.graph.clone(), id, port)
    }

    /// The operator that produced this stream may emit side outputs (its functions have a
    /// context).
    pub(crate) fn with_side_outputs(self) -> Self {
        self.set("side outputs", |n| {
            n.side_outputs.get_or_insert_with(Vec::new);
        });
        self
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

    /// Partitions the stream by key: records with equal keys reach the same subtask of the
    /// next (keyed) operator.
    pub fn key_by<K, KF>(self, key_fn: KF) -> KeyedStream<T, K, KF>
    where
        K: Key,
        KF: Fn(&T) -> K + Clone + Send + 'static,
    {
        KeyedStream {
            stream: self,
            key_fn,
            _k: PhantomData,
        }
    }

    /// Partitions the stream by the record's own key field (see [`RecordKey`]).
    ///
    /// [`RecordKey`]: crate::RecordKey
    #[allow(clippy::type_complexity)]
    pub fn key_by_field(self) -> KeyedStream<T, T::Key, fn(&T) -> T::Key>
    where
        T: crate::RecordKey,
    {
        self.key_by(T::record_key as fn(&T) -> T::Key)
    }

    /// One stream of the records of `self` and of every stream in `others`.
    pub fn union(mut self, others: impl IntoIterator<Item = DataStream<T>>) -> DataStream<T> {
        for o in others {
            self.producers.extend(o.producers);
        }
        self
    }

    /// Connects two streams for a two-input operator.
    pub fn connect<B: Data>(self, other: DataStream<B>) -> ConnectedStreams<T, B> {
        ConnectedStreams {
            first: self,
            second: other,
        }
    }

    /// Connects with a stream that is broadcast to every subtask of the operator (Flink's
    /// broadcast state pattern).
    pub fn connect_broadcast<B: Data>(
        self,
        broadcast: DataStream<B>,
    ) -> BroadcastConnectedStreams<T, B> {
        BroadcastConnectedStreams {
            main: self,
            broadcast: broadcast.broadcast(),
            broadcast_first: false,
        }
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

    /// Adds a sink made per subtask by `factory`.
    pub fn add_sink<S, F>(self, name: &str, factory: F) -> SinkStream
    where
        S: Sink<T>,
        F: Fn(&SinkContext) -> Result<S, crate::error::SinkError> + Send + 'static,
    {
        let part = self.partitioning();
        let builder = Box::new(move |env: &OpEnv, _outputs: Vec<AnyBox>| {
            use crate::checkpoint::StartPoint;
            let cx = SinkContext {
                uid: env.info.uid.clone(),
                subtask: env.info.subtask,
                parallelism: env.info.parallelism,
                checkpointing: env.config.checkpoint.interval.is_some(),
            };
            let mut sink = factory(&cx).map_err(|source| crate::error::TaskError::Sink {
                uid: env.info.uid.clone(),
                subtask: env.info.subtask,
                source,
            })?;
            // A sink error, typed (a refused restore, a broker that cannot be reached), not a
            // state error: its class decides whether a restart may help.
            sink.initialize(env.restored.as_deref()).map_err(|source| {
                crate::error::TaskError::Sink {
                    uid: env.info.uid.clone(),
                    subtask: env.info.subtask,
                    source,
                }
            })?;
            // After `initialize`, which committed what a restored checkpoint staged.
            let epoch = match env.start {
                StartPoint::Promoted => env.counters.sink_epoch(),
                StartPoint::Checkpoint(id) => env.counters.sink_restarted(Some(id)),
                StartPoint::Fresh => env.counters.sink_restarted(None),
            };
            let op: BoxOutput<T> = Box::new(SinkOp {
                since_barrier: 0,
                epoch,
                sink: Box::new(sink),
                info: env.info.clone(),
                counters: env.counters.clone(),
                fault: env
                    .config
                    .faults
                    .for_instance(&env.info.uid, env.info.subtask),
            });
            Ok(Built::Inputs {
                heads: vec![Box::new(op) as AnyBox],
                selection: None,
            })
        });
        let mut g = self.graph.borrow_mut();
        let id = g.add_node(Node {
            name: name.to_owned(),
            uid: None,
            parallelism: None,
            part_of: None,
            is_source: false,
            n_inputs: 1,
            side_outputs: None,
            ports: Vec::new(),
            builder,
            initial_state: None,
            backup: None,
            stateless: false,
            rescale: crate::rescale::Rule::Refused(
                "it is a sink: what it staged for the next commit belongs to its subtask".into(),
            ),
        });
        self.edges_into(&mut g, id, 0, part);
        drop(g);
        SinkStream {
            stream: DataStream::<()>::new(self.graph.clone(), id, 0),
        }
    }

    /// Collects every record into memory; read them after the job with the returned handle.
    pub fn collect(self) -> CollectSink<T> {
        let handle = CollectSink::default();
        let h = handle.clone();
        self.add_sink("collect", move |cx| Ok(h.instance(cx)));
        handle
    }

    /// Collects into an existing handle: a job resumed from a savepoint of another job that
    /// collected into `sink` commits each record once across both (commits are idempotent
    /// per subtask and checkpoint).
    pub fn collect_into(self, sink: &CollectSink<T>) -> SinkStream {
        let h = sink.clone();
        self.add_sink("collect", move |cx| Ok(h.instance(cx)))
    }

    /// A sink that writes files into `dir`: `make` builds each subtask's sink over the
    /// directory, which `execute` checks is writable before any record moves.
    fn file_sink<S, F>(self, name: &str, dir: &std::path::Path, make: F) -> SinkStream
    where
        S: Sink<T>,
        F: Fn(&std::path::Path, &SinkContext) -> Result<S, crate::error::SinkError>
            + Send
            + 'static,
    {
        let owned = dir.to_owned();
        self.add_sink(name, move |cx| make(&owned, cx))
            .writes_into(dir)
    }

    /// Drops every record (counted).
    pub fn discard(self) -> SinkStream {
        self.add_sink("discard", |_| Ok(DiscardSink))
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

impl<T: Data + std::fmt::Display> DataStream<T> {
    /// Writes each record's `Display` form as a line to stdout.
    pub fn print(self) -> SinkStream {
        self.add_sink("print", |_| Ok(StdoutSink))
    }

    /// Writes each record's `Display` form as a line, exactly once with checkpoints on (two-
    /// phase commit): each checkpoint interval is staged in a hidden file and becomes visible
    /// as `part-{uid}-{subtask}-{checkpoint}` in `dir` only when its checkpoint completes (the
    /// last interval as `part-{uid}-{subtask}-final` at the end of the input). Readers see
    /// only committed output; a restored job commits what its checkpoint staged and drops the
    /// failed attempt's staging files. For records without `Display` (tuples, serde
    /// structs), [`write_text_exactly_once_with`](Self::write_text_exactly_once_with) or
    /// [`write_jsonl_exactly_once`](Self::write_jsonl_exactly_once).
    pub fn write_text_exactly_once(self, dir: impl AsRef<std::path::Path>) -> SinkStream {
        self.file_sink("write_text", dir.as_ref(), move |dir, cx| {
            StagedLineSink::create(dir, cx, DisplayLines)
        })
    }

    /// Writes each record's `Display` form as a line to `part-{uid}-{subtask}` in `dir`.
    pub fn write_text(self, dir: impl AsRef<std::path::Path>) -> SinkStream {
        self.file_sink("write_text", dir.as_ref(), move |dir, cx| {
            LineFileSink::create(dir, cx, DisplayLines)
        })
    }
}

impl<T: Data> DataStream<T> {
    /// Writes each record as a line of JSON to `part-{uid}-{subtask}` in `dir`.
    pub fn write_jsonl(self, dir: impl AsRef<std::path::Path>) -> SinkStream {
        self.file_sink("write_jsonl", dir.as_ref(), move |dir, cx| {
            LineFileSink::create(dir, cx, JsonLines)
        })
    }

    /// Writes each record as a line of JSON, exactly once with checkpoints on: the files and
    /// their commit are those of [`write_text_exactly_once`](Self::write_text_exactly_once)
    /// (`part-{uid}-{subtask}-{checkpoint}` once the checkpoint completes, `…-final` at the
    /// end). A record that cannot be encoded fails the job, naming the file.
    ///
    /// ```
    /// #[derive(Clone, serde::Serialize, serde::Deserialize)]
    /// struct Alert { card: u64, amount_cents: u64 }
    ///
    /// let dir = std::env::temp_dir().join(format!("weir-doc-jsonl-eo-{}", std::process::id()));
    /// let env = weir::Env::new();
    /// env.generate(3, |i| Alert { card: i, amount_cents: 100 * i })
    ///     .write_jsonl_exactly_once(&dir)
    ///     .uid("alerts");
    /// env.execute("alerts").unwrap();
    /// let text = std::fs::read_to_string(dir.join("part-alerts-0-final")).unwrap();
    /// assert_eq!(text.lines().next(), Some(r#"{"card":0,"amount_cents":0}"#));
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    pub fn write_jsonl_exactly_once(self, dir: impl AsRef<std::path::Path>) -> SinkStream {
        self.file_sink("write_jsonl", dir.as_ref(), move |dir, cx| {
            StagedLineSink::create(dir, cx, JsonLines)
        })
    }

    /// Like [`write_text`](Self::write_text), each record formatted by `format`, which
    /// appends the line (without its newline) to the buffer it is given: no `Display`
    /// wrapper needed, and no allocation per record (the buffer is reused).
    ///
    /// ```
    /// use std::fmt::Write;
    /// let dir = std::env::temp_dir().join(format!("weir-doc-text-with-{}", std::process::id()));
    /// let env = weir::Env::new();
    /// env.from_collection(vec![("a".to_string(), 1u64), ("b".to_string(), 2)])
    ///     .write_text_with(&dir, |(word, n): &(String, u64), out: &mut String| {
    ///         write!(out, "{word}\t{n}")
    ///     })
    ///     .uid("counts");
    /// env.execute("counts").unwrap();
    /// let text = std::fs::read_to_string(dir.join("part-counts-0")).unwrap();
    /// assert_eq!(text, "a\t1\nb\t2\n");
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    pub fn write_text_with<F>(self, dir: impl AsRef<std::path::Path>, format: F) -> SinkStream
    where
        F: Fn(&T, &mut String) -> std::fmt::Result + Send + Sync + 'static,
    {
        let format = std::sync::Arc::new(format);
        self.file_sink("write_text", dir.as_ref(), move |dir, cx| {
            LineFileSink::create(dir, cx, FormatLines::new(format.clone()))
        })
    }

    /// Like [`write_text_exactly_once`](Self::write_text_exactly_once), each record
    /// formatted by `format` (as in [`write_text_with`](Self::write_text_with)).
    pub fn write_text_exactly_once_with<F>(
        self,
        dir: impl AsRef<std::path::Path>,
        format: F,
    ) -> SinkStream
    where
        F: Fn(&T, &mut String) -> std::fmt::Result + Send + Sync + 'static,
    {
        let format = std::sync::Arc::new(format);
        self.file_sink("write_text", dir.as_ref(), move |dir, cx| {
            StagedLineSink::create(dir, cx, FormatLines::new(format.clone()))
        })
    }
}

impl<A: Data, B: Data> DataStream<Result<A, B>> {
    /// Splits `Ok` and `Err` records into two streams (side outputs), without copying.
    pub fn split(self) -> (DataStream<A>, DataStream<B>) {
        self.split_named("split", false)
    }

    pub(crate) fn split_named(
        self,
        name: &str,
        part_of_source: bool,
    ) -> (DataStream<A>, DataStream<B>) {
        let builder = Box::new(move |env: &OpEnv, mut outputs: Vec<AnyBox>| {
            let side_next = unbox::<BoxOutput<B>>(outputs.remove(1));
            let next = unbox::<BoxOutput<A>>(outputs.remove(0));
            let op: BoxOutput<Result<A, B>> = Box::new(SplitOp {
                core: core(env, next),
                side: Collector::with_capacity(0),
                side_next,
            });
            Ok(Built::Inputs {
                heads: vec![Box::new(op) as AnyBox],
                selection: None,
            })
        });
        let part = self.partitioning();
        let mut g = self.graph.borrow_mut();
        let owner = match (part_of_source, self.producers.as_slice()) {
            (true, [(id, _)]) => Some(*id),
            _ => None,
        };
        let id = g.add_node(Node {
            name: name.to_owned(),
            uid: None,
            parallelism: None,
            part_of: owner,
            is_source: false,
            n_inputs: 1,
            side_outputs: None,
            ports: vec![Port::<A>::boxed(), Port::<B>::boxed()],
            builder,
            initial_state: None,
            backup: None,
            stateless: false,
            rescale: crate::rescale::Rule::Stateless,
        });
        self.edges_into(&mut g, id, 0, part);
        drop(g);
        (
            DataStream::new(self.graph.clone(), id, 0),
            DataStream::new(self.graph.clone(), id, 1),
        )
    }
}

/// The end of a stream: a sink. Settings apply to the sink operator.
pub struct SinkStream {
    stream: DataStream<()>,
}

impl SinkStream {
    /// Sets the sink's uid.
    pub fn uid(self, uid: &str) -> Self {
        SinkStream {
            stream: self.stream.uid(uid),
        }
    }
    /// Sets the sink's display name.
    pub fn name(self, name: &str) -> Self {
        SinkStream {
            stream: self.stream.name(name),
        }
    }
    /// Sets the sink's parallelism.
    pub fn set_parallelism(self, parallelism: usize) -> Self {
        SinkStream {
            stream: self.stream.set_parallelism(parallelism),
        }
    }

    /// Declares a directory the sink writes into: the job checks, before any record moves,
    /// that it can be created and written (and fails naming it and the OS error if not). The
    /// file sinks (`write_text`, `write_jsonl`, ...) declare theirs; call this for a custom
    /// sink made with `add_sink`.
    pub fn writes_into(self, dir: impl AsRef<std::path::Path>) -> Self {
        let dir = dir.as_ref().to_owned();
        self.stream.graph.borrow_mut().output_dirs.push(dir);
        self
    }
}

/// A stream partitioned by key (see [`DataStream::key_by`]). Cloning it lets several
/// operators take the same keyed stream (each gets every record).
///
/// ```
/// let env = weir::Env::new();
/// let keyed = env.from_collection(vec![1u64, 2, 3, 4]).key_by(|x: &u64| x % 2);
/// let sums = keyed.clone().reduce(|a: u64, b: u64| a + b).collect();
/// let all = keyed.reduce(|a: u64, _b: u64| a).collect();
/// env.execute("keyed-clone-doc").unwrap();
/// assert_eq!(sums.take().len(), 4);
/// assert_eq!(all.take().len(), 4);
/// ```
pub struct KeyedStream<T, K, KF> {
    pub(crate) stream: DataStream<T>,
    pub(crate) key_fn: KF,
    _k: PhantomData<fn() -> K>,
}

impl<T, K, KF: Clone> Clone for KeyedStream<T, K, KF> {
    fn clone(&self) -> Self {
        KeyedStream {
            stream: self.stream.clone(),
            key_fn: self.key_fn.clone(),
            _k: PhantomData,
        }
    }
}

impl<T, K, KF> KeyedStream<T, K, KF>
where
    T: Data,
    K: Key,
    KF: Fn(&T) -> K + Clone + Send + 'static,
{
    /// Runs a [`KeyedProcessFunction`] with per-key state. (A function that also derives
    /// [`Operator`], for live config and snapshots of its own fields, is added with
    /// [`apply`](Self::apply).)
    pub fn process_with<O, P>(self, f: P) -> DataStream<O>
    where
        O: Data,
        P: KeyedProcessFunction<K, T, O> + Clone,
    {
        self.keyed_function("keyed_process", f, None)
    }

    /// The node of a keyed process function, with its hooks if it has them.
    fn keyed_function<O, P>(
        self,
        name: &str,
        f: P,
        hooks: Option<fn() -> Hooks<P>>,
    ) -> DataStream<O>
    where
        O: Data,
        P: KeyedProcessFunction<K, T, O> + Clone,
    {
        let key_fn = self.key_fn.clone();
        let ts = self.stream.timestamps.clone();
        let builder = one_input_builder::<T, O, _>(move |env, next| {
            let timers = Timers::new(env.backed_up);
            let incremental = incremental_for(env)?;
            let mut op = KeyedOp {
                key_fn: key_fn.clone(),
                f: f.clone(),
                state: crate::state::KeyedState::open(
                    &env.config.state_backend,
                    env.hands_state || incremental.is_some(),
                    &env.info.uid,
                    env.info.subtask,
                    env.config.max_parallelism,
                )
                .map_err(|e| env.restore_error(e))?,
                incremental,
                core: core(env, next),
                max_parallelism: env.config.max_parallelism,
                hooks: hooks.map(|h| h()),
                ts: ts.clone(),
                timers,
                timer_budget: env.config.batch_size.max(1),
                handed: (0, 0),
                _in: PhantomData,
            };
            let restored = match (env.take_promoted_image(), &env.restored) {
                (Some(image), _) => {
                    op.restore_promoted(image)?;
                    true
                }
                (None, Some(payload)) => {
                    op.restore(payload)?;
                    true
                }
                (None, None) => false,
            };
            if restored && op.incremental.is_some() {
                // A new chain: the first checkpoint copies every restored key.
                op.state.log_all();
            }
            op.apply_live_config(&env.live_config)
                .map_err(|e| env.restore_error(format!("cannot apply live config: {e}")))?;
            Ok(Box::new(op) as BoxOutput<T>)
        });
        let rule = keyed_rule(hooks.map(|h| (h().fields)()));
        self.hashed(name, builder)
            .rescale_rule(rule)
            .with_side_outputs()
    }

    /// Adds a node fed by this stream, hash-partitioned by key.
    fn hashed<O: Data>(
        self,
        name: &str,
        builder: Box<dyn crate::graph::NodeBuilder>,
    ) -> DataStream<O> {
        let hash_key = self.key_fn;
        self.stream.add_operator(name, builder, move || {
            Partitioning::Hash(hash_routing::<T, K, KF>(hash_key.clone()))
        })
    }

    /// Runs `f(key, state, record, out)` per record with per-key state `S` (created with
    /// `Default` on a key's first record).
    ///
    /// ```
    /// use weir::{Collector, Env, ValueState};
    /// let env = Env::new();
    /// let out = env
    ///     .from_collection(vec![1u64, 2, 3, 4, 5])
    ///     .key_by(|x: &u64| x % 2)
    ///     .process(|k: &u64, n: &mut ValueState<u64>, _x: u64, out: &mut Collector<(u64, u64)>| {
    ///         let c = n.get_or_insert_with(|| 0);
    ///         *c += 1;
    ///         out.collect((*k, *c));
    ///     })
    ///     .collect();
    /// env.execute("keyed-doc").unwrap();
    /// assert!(out.take().contains(&(1, 3)));
    /// ```
    pub fn process<O, S, F>(self, f: F) -> DataStream<O>
    where
        O: Data,
        S: Default + Data,
        F: KeyedClosure<K, S, T, O>,
    {
        self.process_with(KeyedFn::<F, S>::new(f))
            .name("keyed_process")
    }

    /// Runs a user operator with derived hooks (`#[derive(Operator)]`) on the keyed stream.
    ///
    /// Either a [`ProcessFunction`] whose `#[weir(state)]` fields of keyed state types
    /// ([`ValueState`](crate::ValueState), [`MapState`](crate::MapState),
    /// [`ListState`](crate::ListState), [`ReducingState`](crate::ReducingState)) are per key
    /// (the runtime puts the record's key's values in them before each record), or a
    /// [`KeyedProcessFunction`] (per-key `State`). Either way its `#[weir(config)]` fields can
    /// be changed while the job runs, and per-key state is stored by key group, so
    /// checkpoints, savepoints, the buffer-queue backup and rescale carry it. Per-subtask
    /// fields must say so with `#[weir(operator_state)]`; `execute` refuses an unmarked one.
    ///
    /// ```
    /// use weir::{Collector, Env, Operator, ProcessFunction, ValueState};
    ///
    /// #[derive(Clone, Default, Operator)]
    /// struct Running {
    ///     #[weir(state)]
    ///     sum: ValueState<u64>,
    /// }
    /// impl ProcessFunction<(u64, u64), (u64, u64)> for Running {
    ///     fn process(&mut self, (k, v): (u64, u64), out: &mut Collector<(u64, u64)>) {
    ///         let s = self.sum.get_or_insert_with(|| 0);
    ///         *s += v;
    ///         out.collect((k, *s));
    ///     }
    /// }
    ///
    /// let env = Env::new();
    /// let out = env
    ///     .from_collection(vec![(1, 1), (2, 10), (1, 2), (2, 20)])
    ///     .key_by(|r: &(u64, u64)| r.0)
    ///     .apply(Running::default())
    ///     .collect();
    /// env.execute("keyed-apply-doc").unwrap();
    /// let mut got = out.take();
    /// got.sort();
    /// assert_eq!(got, vec![(1, 1), (1, 3), (2, 10), (2, 30)]);
    /// ```
    pub fn apply<O, M, P>(self, op: P) -> DataStream<O>
    where
        O: Data,
        P: KeyedOperator<K, T, O, M>,
    {
        if let Err(e) = P::__check() {
            self.stream.graph.borrow_mut().errors.push(e);
        }
        P::__add(op, self)
    }

    /// Rolling reduce: emits each key's running reduction after every record.
    pub fn reduce<F>(self, f: F) -> DataStream<T>
    where
        F: FnMut(T, T) -> T + Clone + Send + 'static,
    {
        self.process_with(ReduceFn(f)).name("reduce")
    }

    /// Maps each record with `init`, then reduces per key with `f` (a rolling reduce over a
    /// different type).
    pub fn reduce_by<U, I, F>(self, init: I, f: F) -> DataStream<U>
    where
        U: Data,
        I: FnMut(T) -> U + Clone + Send + 'static,
        F: FnMut(U, U) -> U + Clone + Send + 'static,
    {
        let mut init = init;
        let mut f = f;
        self.process(
            move |_k: &K, s: &mut crate::ValueState<U>, x: T, out: &mut Collector<U>| {
                let v = init(x);
                let next = match s.take() {
                    None => v,
                    Some(acc) => f(acc, v),
                };
                out.collect(next.clone());
                s.update(next);
            },
        )
        .name("reduce")
    }
}

/// A closure `KeyedStream::process` runs: `FnMut(&key, &mut state, record, &mut out)`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a keyed process closure `FnMut(&K, &mut S, T, &mut Collector<O>)`",
    label = "`KeyedStream::process` takes a closure",
    note = "for a struct that implements `KeyedProcessFunction`, use `process_with(..)`; for a struct that derives `Operator`, use `apply(..)`"
)]
pub trait KeyedClosure<K, S, T, O>:
    FnMut(&K, &mut S, T, &mut Collector<O>) + Clone + Send + 'static
{
}

impl<K, S, T, O, F> KeyedClosure<K, S, T, O> for F where
    F: FnMut(&K, &mut S, T, &mut Collector<O>) + Clone + Send + 'static
{
}

/// What [`KeyedStream::apply`] runs: a derived operator ([`ProcessFunction`] with keyed
/// `#[weir(state)]` fields, marker [`PerRecord`]) or a [`KeyedProcessFunction`] that derives
/// [`Operator`] (marker [`PerKeyState`]). The marker is inferred; apps never name it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be applied to a keyed stream",
    note = "derive `Operator` and implement `ProcessFunction` (keyed `#[weir(state)]` fields) or `KeyedProcessFunction` for it; a closure goes to `process(..)`"
)]
pub trait KeyedOperator<K, I, O, M>: Operator + Clone + Sized {
    #[doc(hidden)]
    fn __check() -> Result<(), PlanError>;
    #[doc(hidden)]
    fn __add<KF>(self, stream: KeyedStream<I, K, KF>) -> DataStream<O>
    where
        I: Data,
        O: Data,
        K: Key,
        KF: Fn(&I) -> K + Clone + Send + 'static;
}

/// [`KeyedOperator`] marker: a [`ProcessFunction`] with keyed fields.
#[derive(Debug)]
pub struct PerRecord;
/// [`KeyedOperator`] marker: a [`KeyedProcessFunction`] with per-key `State`.
#[derive(Debug)]
pub struct PerKeyState;

impl<K, I, O, P> KeyedOperator<K, I, O, PerRecord> for P
where
    P: ProcessFunction<I, O> + Operator + KeyedFields + Clone,
{
    fn __check() -> Result<(), PlanError> {
        check_state_fields::<P>(P::NAME, AppliedTo::KeyedStream)
    }
    fn __add<KF>(self, stream: KeyedStream<I, K, KF>) -> DataStream<O>
    where
        I: Data,
        O: Data,
        K: Key,
        KF: Fn(&I) -> K + Clone + Send + 'static,
    {
        let key_fn = stream.key_fn.clone();
        let builder = one_input_builder::<I, O, _>(move |env, next| {
            let mut op = KeyedApplyOp::new(
                key_fn.clone(),
                self.clone(),
                core(env, next),
                env.config.max_parallelism,
            );
            if let Some(payload) = &env.restored {
                // A checkpoint being restored wins over the job's initial state.
                op.restore(payload).map_err(|e| env.restore_error(e))?;
                apply_live_config(op.function_mut(), env)?;
            } else {
                restore_initial(op.function_mut(), env)?;
            }
            Ok(Box::new(op) as BoxOutput<I>)
        });
        stream
            .hashed(P::NAME, builder)
            .rescale_rule(keyed_rule(Some(P::state_fields())))
            .with_side_outputs()
    }
}

impl<K, I, O, P> KeyedOperator<K, I, O, PerKeyState> for P
where
    P: KeyedProcessFunction<K, I, O> + Operator + Clone,
{
    fn __check() -> Result<(), PlanError> {
        check_state_fields::<P>(P::NAME, AppliedTo::KeyedFunction)
    }
    fn __add<KF>(self, stream: KeyedStream<I, K, KF>) -> DataStream<O>
    where
        I: Data,
        O: Data,
        K: Key,
        KF: Fn(&I) -> K + Clone + Send + 'static,
    {
        stream.keyed_function(P::NAME, self, Some(Hooks::<P>::of))
    }
}

/// The rescale rule of a keyed operator: its key groups, and its own per-subtask fields (if it
/// derives `Operator`).
/// A keyed subtask's incremental checkpoints, if on (`CheckpointConfig::incremental`, with
/// checkpoints on) and the operator has no buffer-queue backup (whose checkpoints are made from
/// the backup's copy).
fn incremental_for<K: Key>(
    env: &OpEnv,
) -> Result<Option<crate::checkpoint::copy::Incremental<K>>, crate::error::TaskError> {
    let c = &env.config.checkpoint;
    if !c.incremental || c.interval.is_none() || env.backed_up {
        return Ok(None);
    }
    crate::checkpoint::copy::Incremental::start(
        &env.info.uid,
        env.info.subtask,
        env.config.max_parallelism,
    )
    .map(Some)
    .map_err(|e| crate::error::TaskError::Checkpoint {
        uid: env.info.uid.clone(),
        subtask: env.info.subtask,
        message: format!("cannot start incremental checkpoints: {e}"),
    })
}

fn keyed_rule(own: Option<&[crate::hooks::StateField]>) -> crate::rescale::Rule {
    match own.map(crate::rescale::Rule::fields) {
        None => crate::rescale::Rule::Keyed { own: None },
        Some(Ok(fields)) => crate::rescale::Rule::Keyed { own: Some(fields) },
        Some(Err(why)) => crate::rescale::Rule::Refused(why),
    }
}

fn two_input_node<A: Data, B: Data, O: Data, C, MK>(
    first: DataStream<A>,
    second: DataStream<B>,
    name: &str,
    selection: InputSelection,
    make: MK,
) -> DataStream<O>
where
    C: TwoInput<A, B, O>,
    MK: Fn(&OpEnv) -> Result<C, crate::error::TaskError> + Send + 'static,
{
    let builder = Box::new(move |env: &OpEnv, mut outputs: Vec<AnyBox>| {
        let next = unbox::<BoxOutput<O>>(outputs.remove(0));
        let cell = Arc::new(SelectionCell::new(selection));
        let mut op = make(env)?;
        if let Some(payload) = &env.restored {
            op.restore(payload).map_err(|e| env.restore_error(e))?;
        }
        let (a, b) = co_sides::<C, A, B, O>(op, core(env, next), cell.clone());
        Ok(Built::Inputs {
            heads: vec![
                Box::new(Box::new(a) as BoxOutput<A>) as AnyBox,
                Box::new(Box::new(b) as BoxOutput<B>) as AnyBox,
            ],
            selection: Some(cell),
        })
    });
    let pa = first.partitioning();
    let pb = second.partitioning();
    let graph = first.graph.clone();
    let mut g = graph.borrow_mut();
    let id = g.add_node(Node {
        name: name.to_owned(),
        uid: None,
        parallelism: None,
        part_of: None,
        is_source: false,
        n_inputs: 2,
        side_outputs: None,
        ports: vec![Port::<O>::boxed()],
        builder,
        initial_state: None,
        backup: None,
        stateless: false,
        rescale: crate::rescale::Rule::Refused(
            "two-input operators keep their state per subtask, not by key group, for now".into(),
        ),
    });
    first.edges_into(&mut g, id, 0, pa);
    second.edges_into(&mut g, id, 1, pb);
    drop(g);
    DataStream::new(graph, id, 0)
}

/// Two streams feeding one two-input operator.
pub struct ConnectedStreams<A, B> {
    first: DataStream<A>,
    second: DataStream<B>,
}

impl<A: Data, B: Data> ConnectedStreams<A, B> {
    /// Runs a [`CoProcessFunction`].
    pub fn process<O, P>(self, f: P) -> DataStream<O>
    where
        O: Data,
        P: CoProcessFunction<A, B, O> + Clone,
    {
        two_input_node(
            self.first,
            self.second,
            "co_process",
            InputSelection::All,
            move |_| Ok(CoAdapter(f.clone())),
        )
    }

    /// Runs a [`CoProcessFunction`] with derived hooks (`#[derive(Operator)]`); see
    /// [`DataStream::apply`].
    pub fn apply<O, P>(self, op: P) -> DataStream<O>
    where
        O: Data,
        P: CoProcessFunction<A, B, O> + Operator + Clone,
    {
        two_input_node(
            self.first,
            self.second,
            P::NAME,
            InputSelection::All,
            move |env| {
                let mut f = op.clone();
                restore_initial(&mut f, env)?;
                Ok(HookedCo(f))
            },
        )
    }

    /// Maps records of both inputs to one output type.
    pub fn map<O, F1, F2>(self, f1: F1, f2: F2) -> DataStream<O>
    where
        O: Data,
        F1: FnMut(A) -> O + Clone + Send + 'static,
        F2: FnMut(B) -> O + Clone + Send + 'static,
    {
        #[derive(Clone)]
        struct CoMap<F1, F2>(F1, F2);
        impl<A, B, O, F1, F2> CoProcessFunction<A, B, O> for CoMap<F1, F2>
        where
            F1: FnMut(A) -> O + Send + 'static,
            F2: FnMut(B) -> O + Send + 'static,
        {
            fn process1(&mut self, a: A, out: &mut Collector<O>) {
                out.collect((self.0)(a))
            }
            fn process2(&mut self, b: B, out: &mut Collector<O>) {
                out.collect((self.1)(b))
            }
        }
        self.process(CoMap(f1, f2)).name("co_map")
    }
}

/// A main stream connected with a broadcast stream.
pub struct BroadcastConnectedStreams<A, B> {
    main: DataStream<A>,
    broadcast: DataStream<B>,
    broadcast_first: bool,
}

impl<A: Data, B: Data> BroadcastConnectedStreams<A, B> {
    /// Reads the whole broadcast input before the first main record (for a bounded broadcast
    /// side such as rules or thresholds loaded at start). The main input waits meanwhile,
    /// backpressuring its upstream.
    pub fn broadcast_first(mut self) -> Self {
        self.broadcast_first = true;
        self
    }

    /// Runs a [`BroadcastProcessFunction`] with derived hooks (`#[derive(Operator)]`); see
    /// [`DataStream::apply`]. Checkpoints and savepoints snapshot both the broadcast state
    /// and the operator's own `#[weir(state)]` fields (as [`process`](Self::process) does
    /// the broadcast state), and a restored job starts from them.
    pub fn apply<O, P>(self, op: P) -> DataStream<O>
    where
        O: Data,
        P: BroadcastProcessFunction<A, B, O> + Operator + Clone,
    {
        let selection = if self.broadcast_first {
            InputSelection::Second
        } else {
            InputSelection::All
        };
        two_input_node(self.main, self.broadcast, P::NAME, selection, move |env| {
            let mut f = op.clone();
            restore_initial(&mut f, env)?;
            Ok(HookedBroadcast(BroadcastAdapter {
                f,
                state: P::State::default(),
            }))
        })
    }

    /// Runs a [`BroadcastProcessFunction`].
    pub fn process<O, P>(self, f: P) -> DataStream<O>
    where
        O: Data,
        P: BroadcastProcessFunction<A, B, O> + Clone,
    {
        let selection = if self.broadcast_first {
            InputSelection::Second
        } else {
            InputSelection::All
        };
        two_input_node(
            self.main,
            self.broadcast,
            "broadcast_process",
            selection,
            move |_| {
                Ok(BroadcastAdapter {
                    f: f.clone(),
                    state: P::State::default(),
                })
            },
        )
    }
}
