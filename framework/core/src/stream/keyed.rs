//! The keyed half of the API: [`DataStream::key_by`], [`KeyedStream`] and what runs on it
//! (keyed process functions, derived keyed operators, reduce), with the traits that say what
//! a keyed operator may be ([`KeyedClosure`], [`KeyedOperator`]). Not windows on a keyed
//! stream (`windowed`), nor the keyed operator itself (`operator::keyed`).

use std::marker::PhantomData;

use crate::error::PlanError;
use crate::graph::OpEnv;
use crate::hooks::{KeyedFields, Operator};
use crate::operator::keyed::{Hooks, KeyedFn, KeyedOp, KeyedProcessFunction, ReduceFn};
use crate::operator::keyed_apply::{check_state_fields, AppliedTo, KeyedApplyOp};
use crate::operator::process::ProcessFunction;
use crate::operator::timers::Timers;
use crate::operator::{BoxOutput, Collector};
use crate::partition::{hash_routing, Partitioning};
use crate::{Data, Key};

use super::{apply_live_config, core, one_input_builder, restore_initial, DataStream};

impl<T: Data> DataStream<T> {
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
            )
            .backed_up(env.backed_up);
            if let Some(payload) = env.take_restored_payload() {
                // A checkpoint being restored wins over the job's initial state.
                op.restore(&payload).map_err(|e| env.restore_error(e))?;
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
