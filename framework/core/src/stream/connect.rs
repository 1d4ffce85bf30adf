//! Two-input streams: [`DataStream::connect`] and [`DataStream::connect_broadcast`],
//! [`ConnectedStreams`] and [`BroadcastConnectedStreams`], and the two-input node they add.
//! Not `union` (one input, several producers), nor the two-input operators
//! (`operator::connect`).

use crate::erased::{unbox, AnyBox};
use crate::graph::{Built, Node, OpEnv, Port};
use crate::hooks::Operator;
use crate::operator::connect::{
    co_sides, BroadcastAdapter, BroadcastProcessFunction, CoAdapter, CoProcessFunction,
    HookedBroadcast, HookedCo, InputSelection, SelectionCell, TwoInput,
};
use crate::operator::{BoxOutput, Collector};
use crate::sync::Arc;
use crate::Data;

use super::{core, restore_initial, DataStream};

impl<T: Data> DataStream<T> {
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
