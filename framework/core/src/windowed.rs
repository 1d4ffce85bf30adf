//! The window API: [`KeyedStream::window`] and [`WindowedStream`] (allowed lateness, the
//! late-data output, and what is computed per window). The windows themselves and the
//! operator are in [`crate::window`].
//!
//! ```
//! use std::time::Duration;
//! use weir::time::WatermarkStrategy;
//! use weir::window::{AggregateFunction, TumblingEventTimeWindows};
//! use weir::{Env, LateData};
//!
//! #[derive(Clone)]
//! struct Count;
//! impl AggregateFunction<(u64, i64), u64> for Count {
//!     type Acc = u64;
//!     fn add(&self, n: &mut u64, _x: (u64, i64)) { *n += 1 }
//!     fn merge(&self, n: &mut u64, other: &u64) { *n += other }
//!     fn result(&self, n: &u64) -> u64 { *n }
//! }
//!
//! // One record per batch, a watermark after each: the example is deterministic.
//! let mut cfg = weir::EnvConfig::default();
//! cfg.batch_size = 1;
//! let env = Env::with_config(cfg);
//! let wm = WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_secs(1))
//!     .with_timestamp_assigner(|r: &(u64, i64)| r.1)
//!     .with_watermark_interval(Duration::ZERO);
//! let late = LateData::new();
//! let counts = env
//!     .from_collection(vec![(1, 100), (2, 200), (1, 9_000), (1, 12_000), (1, 50)])
//!     .assign_timestamps_and_watermarks(wm)
//!     .key_by(|r: &(u64, i64)| r.0)
//!     .window(TumblingEventTimeWindows::of(Duration::from_secs(10)))
//!     .side_output_late_data(&late)
//!     .aggregate_window(Count, |key: &u64, fired: &weir::window::Fired, n| (*key, fired.window.start, n))
//!     .collect();
//! let late = late.stream().expect("attached").collect();
//! env.execute("windows-doc").unwrap();
//! let mut got = counts.take();
//! got.sort();
//! assert_eq!(got, vec![(1, 0, 2), (1, 10_000, 1), (2, 0, 1)]);
//! assert_eq!(late.take(), vec![(1, 50)], "after the watermark passed 9 999");
//! ```

use std::cell::RefCell;
use std::marker::PhantomData;
use std::rc::Rc;
use std::time::Duration;

use crate::erased::{unbox, AnyBox};
use crate::error::PlanError;
use crate::graph::{Built, OpEnv};
use crate::operator::window::op::chain::Chain;
use crate::operator::window::op::{WindowOp, WindowSpec, WATERMARK_FIELD};
use crate::operator::window::triggered::{Assign, Triggered};
use crate::operator::window::{
    AggregateFunction, Aggregated, DefaultTrigger, Domain, Evictor, Fired, NoEvictor,
    ProcessWindowFunction, Processed, Reducing, Trigger, WindowAssigner, WindowFn, Windowing,
};
use crate::operator::BoxOutput;
use crate::partition::{hash_routing, Partitioning};
use crate::stream::{core, DataStream, KeyedStream};
use crate::{Data, Key};

/// Where a window operator's late records go (Flink's `OutputTag` for
/// `sideOutputLateData`): attach it with [`WindowedStream::side_output_late_data`], then take
/// the stream with [`stream`](Self::stream) once the window's result stream is built.
pub struct LateData<T> {
    stream: Rc<RefCell<Option<DataStream<T>>>>,
}

impl<T> Clone for LateData<T> {
    fn clone(&self) -> Self {
        LateData {
            stream: self.stream.clone(),
        }
    }
}

impl<T> Default for LateData<T> {
    fn default() -> Self {
        LateData {
            stream: Rc::new(RefCell::new(None)),
        }
    }
}

impl<T> LateData<T> {
    /// A late-data output not attached yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The late records of the window operator this was attached to (`None` before its
    /// result stream was built).
    pub fn stream(&self) -> Option<DataStream<T>> {
        self.stream.borrow().clone()
    }
}

impl<T, K, KF> KeyedStream<T, K, KF>
where
    T: Data,
    K: Key,
    KF: Fn(&T) -> K + Clone + Send + 'static,
{
    /// Groups each key's records into windows: of event time (the stream must have
    /// timestamps: a watermark strategy at its source, `assign_timestamps_and_watermarks`,
    /// or `with_timestamps` after a map; windows fire on the watermark), of the wall clock
    /// (`TumblingProcessingTimeWindows` and the like), or one global window per key (fired by
    /// a trigger).
    pub fn window<W: WindowAssigner>(self, assigner: W) -> WindowedStream<T, K, KF> {
        let assign = assigner.windowing().map(|w| w.0);
        let domain = assign.as_ref().map_or(Domain::Event, |a| a.domain);
        WindowedStream {
            assign,
            keyed: self,
            lateness: Duration::ZERO,
            late: None,
            trigger: DefaultTrigger(domain),
            custom_trigger: false,
            evictor: None,
        }
    }
}

/// A keyed stream grouped into windows: say what is computed per window, and optionally
/// when windows fire ([`trigger`](Self::trigger)) and what they drop
/// ([`evictor`](Self::evictor)).
pub struct WindowedStream<T, K, KF, Tr = DefaultTrigger, Ev = NoEvictor> {
    keyed: KeyedStream<T, K, KF>,
    assign: Result<Assign, String>,
    lateness: Duration,
    late: Option<LateData<T>>,
    trigger: Tr,
    custom_trigger: bool,
    evictor: Option<Ev>,
}

impl<T, K, KF, Tr, Ev> WindowedStream<T, K, KF, Tr, Ev>
where
    T: Data,
    K: Key,
    KF: Fn(&T) -> K + Clone + Send + 'static,
    Tr: Trigger<T>,
    Ev: Evictor<T>,
{
    /// Fires the windows as `trigger` says instead of the window kind's own trigger
    /// (Flink's `WindowedStream.trigger`).
    pub fn trigger<Tr2: Trigger<T>>(self, trigger: Tr2) -> WindowedStream<T, K, KF, Tr2, Ev> {
        WindowedStream {
            keyed: self.keyed,
            assign: self.assign,
            lateness: self.lateness,
            late: self.late,
            trigger,
            custom_trigger: true,
            evictor: self.evictor,
        }
    }

    /// Removes records from each window before or after its function runs (Flink's
    /// `WindowedStream.evictor`): the windows then keep their records, not an accumulator.
    pub fn evictor<Ev2: Evictor<T>>(self, evictor: Ev2) -> WindowedStream<T, K, KF, Tr, Ev2> {
        WindowedStream {
            keyed: self.keyed,
            assign: self.assign,
            lateness: self.lateness,
            late: self.late,
            trigger: self.trigger,
            custom_trigger: self.custom_trigger,
            evictor: Some(evictor),
        }
    }

    /// Records up to `lateness` behind the watermark still update their windows (which fire
    /// again); the windows' state is kept that much longer.
    pub fn allowed_lateness(mut self, lateness: Duration) -> Self {
        self.lateness = lateness;
        self
    }

    /// Late records (beyond the allowed lateness) go to `late` instead of being dropped.
    pub fn side_output_late_data(mut self, late: &LateData<T>) -> Self {
        self.late = Some(late.clone());
        self
    }

    /// Aggregates each window incrementally; emits the result when it fires.
    pub fn aggregate<O, A>(self, agg: A) -> DataStream<O>
    where
        O: Data,
        A: AggregateFunction<T, O>,
    {
        self.aggregate_window(agg, |_: &K, _: &Fired, o: O| o)
    }

    /// Aggregates each window incrementally; emits `f(key, fired, result)` when it fires
    /// (Flink's `aggregate(agg, processWindowFunction)`).
    pub fn aggregate_window<O, R, A, F>(self, agg: A, f: F) -> DataStream<R>
    where
        O: Data,
        R: Data,
        A: AggregateFunction<T, O>,
        F: FnMut(&K, &Fired, O) -> R + Clone + Send + 'static,
    {
        self.build(
            "window_aggregate",
            Aggregated {
                agg,
                then: f,
                _o: PhantomData,
            },
        )
    }

    /// Reduces each window's records with `f`; emits the reduction when it fires.
    pub fn reduce<F>(self, f: F) -> DataStream<T>
    where
        F: Fn(T, T) -> T + Clone + Send + 'static,
    {
        self.aggregate(Reducing(f))
    }

    /// Runs `f` over each window's records when it fires (they are kept until then).
    pub fn process<R, P>(self, f: P) -> DataStream<R>
    where
        R: Data,
        P: ProcessWindowFunction<K, T, R>,
    {
        self.build("window_process", Processed(f))
    }

    fn build<R: Data, G: WindowFn<K, T, R>>(self, name: &str, g: G) -> DataStream<R> {
        let stream = &self.keyed.stream;
        let assign = self.assign.clone().unwrap_or_else(|message| {
            stream.graph.borrow_mut().errors.push(PlanError::BadConfig {
                key: "window",
                message,
            });
            Assign {
                domain: Domain::Event,
                windowing: Some(Windowing::Tumbling { size: 1, offset: 0 }),
            }
        });
        let needs_timestamps = assign.domain == Domain::Event;
        if needs_timestamps && stream.timestamps.is_none() {
            stream.graph.borrow_mut().errors.push(PlanError::BadConfig {
                key: "window",
                message: "the stream has no timestamps: give its source a watermark strategy \
                          (add_source_with_watermarks), or call assign_timestamps_and_watermarks \
                          or with_timestamps after the last map"
                    .into(),
            });
        }
        match (assign, self.custom_trigger || self.evictor.is_some()) {
            (
                Assign {
                    domain: Domain::Event,
                    windowing: Some(windowing),
                },
                false,
            ) => self.build_sliced(name, windowing, g),
            (assign, _) => self.build_triggered(name, assign, g),
        }
    }

    /// Windows run by their trigger (and evictor), as a keyed process function.
    fn build_triggered<R: Data, G: WindowFn<K, T, R>>(
        self,
        name: &str,
        assign: Assign,
        g: G,
    ) -> DataStream<R> {
        let stream = self.keyed.stream.clone();
        // Late records leave through a side output of the process function (a name no
        // user tag of a window function is likely to take).
        let late_tag = self
            .late
            .as_ref()
            .map(|_| crate::OutputTag::<T>::new("weir::late-data"));
        let f = Triggered {
            assign,
            g,
            trigger: self.trigger,
            evictor: self.evictor,
            ts: stream.timestamps.clone(),
            lateness: i64::try_from(self.lateness.as_millis()).unwrap_or(i64::MAX),
            late: late_tag.clone(),
            _p: PhantomData,
        };
        let out = self.keyed.process_with(f).name(name);
        if let (Some(handle), Some(tag)) = (self.late, late_tag) {
            let mut late = out.get_side_output(&tag);
            late.timestamps = stream.timestamps.clone();
            *handle.stream.borrow_mut() = Some(late);
        }
        out
    }

    /// Event-time windows with their own trigger: the slicing window operator.
    fn build_sliced<R: Data, G: WindowFn<K, T, R>>(
        self,
        name: &str,
        windowing: Windowing,
        g: G,
    ) -> DataStream<R> {
        let stream = self.keyed.stream;
        let ts = stream
            .timestamps
            .clone()
            .unwrap_or_else(|| std::sync::Arc::new(|_: &T| 0));
        let spec = WindowSpec {
            ts,
            windowing,
            lateness: i64::try_from(self.lateness.as_millis()).unwrap_or(i64::MAX),
            late_attached: self.late.is_some(),
            backed_up: false,
        };
        let key_fn = self.keyed.key_fn.clone();
        let builder = Box::new(move |env: &OpEnv, mut outputs: Vec<AnyBox>| {
            let late = unbox::<BoxOutput<T>>(outputs.remove(1));
            let next = unbox::<BoxOutput<R>>(outputs.remove(0));
            let restored = env.take_restored_payload();
            let chain = Chain::start(&env.info, &env.config, env.backed_up)?;
            let op = WindowOp::new(
                key_fn.clone(),
                g.clone(),
                WindowSpec {
                    backed_up: env.backed_up,
                    ..spec.clone()
                },
                core(env, next),
                late,
                &env.config,
                restored.as_deref(),
            )
            .map_err(|e| env.restore_error(e))?
            .with_chain(chain);
            Ok(Built::Inputs {
                heads: vec![Box::new(Box::new(op) as BoxOutput<T>) as AnyBox],
                selection: None,
            })
        });
        let hash_key = self.keyed.key_fn;
        let (out, late, _) = stream.add_operator_with_side::<R, T>(name, builder, move || {
            Partitioning::Hash(hash_routing::<T, K, KF>(hash_key.clone()))
        });
        // The windows are keyed state; the operator's watermark is its own, taken the lowest
        // after a rescale (union).
        let out = out
            .rescale_rule(crate::rescale::Rule::Keyed {
                own: Some(vec![(
                    WATERMARK_FIELD.to_owned(),
                    crate::hooks::Redistribution::Union,
                )]),
            })
            .with_side_outputs();
        if let Some(handle) = self.late {
            let mut late = late;
            late.timestamps = stream.timestamps.clone();
            *handle.stream.borrow_mut() = Some(late);
        }
        out
    }
}
