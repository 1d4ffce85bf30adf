//! The logical graph: operators (nodes), their typed output ports, and the edges between them.
//!
//! The typed API (`stream`) checks every type when the graph is built; here types are erased
//! behind small traits whose typed implementations were captured at that moment
//! ([`NodeBuilder`], [`PortType`], [`EdgeOutput`]). Erased values travel as `Box<dyn Any>`
//! and are downcast exactly where they were typed, so a mismatch is an internal bug, not a user
//! error. This module owns the graph's shape; it does not decide chaining or placement (`plan`).

use std::any::Any;
use std::task::{Context, Poll};

use crate::sync::AtomicWaker;

use crate::channel::{channel, Event, Receiver, Sender};
use crate::config::EnvConfig;
use crate::error::{PlanError, TaskError};
use crate::metrics::OperatorCounters;
use crate::operator::connect::SelectionCell;
use crate::operator::{BoxOutput, OperatorInfo, Tee};
use crate::partition::{OutputConfig, PartitionKind, Partitioning};
use crate::sync::Arc;
use crate::task::{GateStep, InputGate, SourceStep};
use crate::Data;

pub(crate) type NodeId = usize;
/// A type-erased value: a `BoxOutput<T>`, a `Sender<T>` or a `Receiver<T>`.
pub(crate) type AnyBox = Box<dyn Any + Send>;

/// Downcasts an erased value that was typed by the same graph.
pub(crate) fn unbox<T: 'static>(b: AnyBox) -> T {
    match b.downcast::<T>() {
        Ok(v) => *v,
        Err(_) => unreachable!(
            "internal error: graph wiring type mismatch for {}",
            std::any::type_name::<T>()
        ),
    }
}

/// What a node's builder gets for one subtask.
pub(crate) struct OpEnv {
    pub(crate) info: Arc<OperatorInfo>,
    pub(crate) counters: Arc<OperatorCounters>,
    pub(crate) config: EnvConfig,
    /// The state this subtask starts from (`with_initial_state`).
    pub(crate) initial_state: Option<crate::hooks::StateSnapshot>,
    /// The state of this operator subtask in the checkpoint the job restores, if any.
    pub(crate) restored: Option<Vec<u8>>,
    /// Input records this subtask processed before this instance (a promoted backup):
    /// injected faults count from there.
    pub(crate) fault_offset: u64,
}

impl OpEnv {
    /// An error restoring this operator's checkpointed state.
    pub(crate) fn restore_error(&self, message: impl std::fmt::Display) -> TaskError {
        TaskError::Checkpoint {
            uid: self.info.uid.clone(),
            subtask: self.info.subtask,
            message: format!("cannot restore: {message}"),
        }
    }
}

/// One subtask's instance of a node.
pub(crate) enum Built {
    /// A source: drives itself.
    Source(Box<dyn SourceStep>),
    /// An operator: one erased `BoxOutput<In_i>` per logical input.
    Inputs {
        heads: Vec<AnyBox>,
        selection: Option<Arc<SelectionCell>>,
    },
}

/// Builds a node's per-subtask instance, given the (erased) output of each of its ports.
pub(crate) trait NodeBuilder: Send {
    fn build(&self, env: &OpEnv, outputs: Vec<AnyBox>) -> Result<Built, TaskError>;
}

impl<F> NodeBuilder for F
where
    F: Fn(&OpEnv, Vec<AnyBox>) -> Result<Built, TaskError> + Send,
{
    fn build(&self, env: &OpEnv, outputs: Vec<AnyBox>) -> Result<Built, TaskError> {
        self(env, outputs)
    }
}

/// Operations on streams of one record type.
pub(crate) trait PortType: Send {
    /// Combines the outputs of every consumer of a port (none: discard).
    fn tee(&self, outs: Vec<AnyBox>) -> AnyBox;
    /// A channel of this type: (`Sender<T>`, `Receiver<T>`).
    fn channel(&self, capacity: usize, waker: Arc<AtomicWaker>) -> (AnyBox, AnyBox);
    /// The input gate over `receivers` that feeds `head`, replaying restored channel state
    /// (unaligned checkpoints) before any new input.
    fn gate(
        &self,
        receivers: Vec<AnyBox>,
        head: AnyBox,
        replay: Option<&[u8]>,
    ) -> Result<Box<dyn InputGate>, String>;
    /// A dual channel into a backed-up subtask: (`Sender<T>`, `Arc<Dual<T>>`, the primary's
    /// `Receiver<T>`, the backup's `Receiver<T>`).
    fn dual_channel(
        &self,
        capacity: usize,
        primary_waker: Arc<AtomicWaker>,
        backup_waker: Arc<AtomicWaker>,
    ) -> (AnyBox, AnyBox, AnyBox, AnyBox);
    /// The channel behind a `Sender<T>`, as an output of a backed-up subtask.
    fn output_fence(&self, sender: &AnyBox) -> Box<dyn crate::backup::OutputFence>;
    /// The backup group of a subtask whose input is of this type, and its first primary's
    /// claims (`Claims<T>`).
    fn backup_group(
        &self,
        spec: crate::backup::GroupSpec,
        duals: Vec<AnyBox>,
        backup_rx: Vec<AnyBox>,
        backup_waker: Arc<AtomicWaker>,
        outputs: Vec<(usize, Vec<Box<dyn crate::backup::OutputFence>>)>,
    ) -> (std::sync::Arc<dyn crate::backup::BackupGroup>, AnyBox);
    /// The gate of a backed-up primary (`claims`: a `Claims<T>`).
    fn claimed_gate(
        &self,
        receivers: Vec<AnyBox>,
        head: AnyBox,
        claims: AnyBox,
    ) -> Box<dyn InputGate>;
}

pub(crate) struct Port<T>(std::marker::PhantomData<fn() -> T>);

impl<T: Data> Port<T> {
    pub(crate) fn boxed() -> Box<dyn PortType> {
        Box::new(Port::<T>(std::marker::PhantomData))
    }
}

impl<T: Data> PortType for Port<T> {
    fn tee(&self, outs: Vec<AnyBox>) -> AnyBox {
        let outs = outs.into_iter().map(unbox::<BoxOutput<T>>).collect();
        Box::new(Tee::<T>::boxed(outs))
    }
    fn channel(&self, capacity: usize, waker: Arc<AtomicWaker>) -> (AnyBox, AnyBox) {
        let (tx, rx) = channel::<T>(capacity, waker);
        (Box::new(tx), Box::new(rx))
    }
    fn gate(
        &self,
        receivers: Vec<AnyBox>,
        head: AnyBox,
        replay: Option<&[u8]>,
    ) -> Result<Box<dyn InputGate>, String> {
        let receivers: Vec<Receiver<T>> = receivers.into_iter().map(unbox).collect();
        let replay: std::collections::VecDeque<Vec<T>> = match replay {
            None => Default::default(),
            Some(bytes) => crate::checkpoint::decode::<Vec<Vec<T>>>(bytes)?.into(),
        };
        let mut gate = TypedGate::new(receivers, unbox::<BoxOutput<T>>(head), None);
        gate.replay = replay;
        Ok(Box::new(gate))
    }
    fn dual_channel(
        &self,
        capacity: usize,
        primary_waker: Arc<AtomicWaker>,
        backup_waker: Arc<AtomicWaker>,
    ) -> (AnyBox, AnyBox, AnyBox, AnyBox) {
        let (tx, dual, rx_p, rx_b) =
            crate::channel::dual_channel::<T>(capacity, primary_waker, backup_waker);
        (Box::new(tx), Box::new(dual), Box::new(rx_p), Box::new(rx_b))
    }
    fn output_fence(&self, sender: &AnyBox) -> Box<dyn crate::backup::OutputFence> {
        let tx = sender
            .downcast_ref::<Sender<T>>()
            .expect("internal error: graph wiring type mismatch");
        Box::new(
            tx.handle()
                .expect("internal error: an output of a backed-up operator is a dual channel"),
        )
    }
    fn backup_group(
        &self,
        spec: crate::backup::GroupSpec,
        duals: Vec<AnyBox>,
        backup_rx: Vec<AnyBox>,
        backup_waker: Arc<AtomicWaker>,
        outputs: Vec<(usize, Vec<Box<dyn crate::backup::OutputFence>>)>,
    ) -> (std::sync::Arc<dyn crate::backup::BackupGroup>, AnyBox) {
        let duals = duals.into_iter().map(unbox).collect();
        let backup_rx = backup_rx.into_iter().map(unbox).collect();
        let group =
            crate::backup::TypedGroup::<T>::new(spec, duals, backup_rx, backup_waker, outputs);
        let claims: AnyBox = Box::new(group.claims());
        (group, claims)
    }
    fn claimed_gate(
        &self,
        receivers: Vec<AnyBox>,
        head: AnyBox,
        claims: AnyBox,
    ) -> Box<dyn InputGate> {
        let receivers = receivers.into_iter().map(unbox).collect();
        typed_gate::<T>(
            receivers,
            unbox(head),
            Some(Box::new(unbox::<crate::backup::Claims<T>>(claims))),
        )
    }
}

/// The input gate over `receivers` feeding `head`; with `claims`, the gate of a backed-up
/// primary (each batch is claimed in the buffer queue first, output is flushed per batch).
pub(crate) fn typed_gate<T: Data>(
    receivers: Vec<Receiver<T>>,
    head: BoxOutput<T>,
    claims: Option<Box<crate::backup::Claims<T>>>,
) -> Box<dyn InputGate> {
    Box::new(TypedGate::new(receivers, head, claims))
}

/// The typed partitioning of an edge.
pub(crate) trait EdgeOutput: Send {
    fn kind(&self) -> PartitionKind;
    fn output(&self, resolved: PartitionKind, senders: Vec<AnyBox>, cfg: OutputConfig) -> AnyBox;
}

impl<T: Data> EdgeOutput for Partitioning<T> {
    fn kind(&self) -> PartitionKind {
        Partitioning::kind(self)
    }
    fn output(&self, resolved: PartitionKind, senders: Vec<AnyBox>, cfg: OutputConfig) -> AnyBox {
        let senders: Vec<Sender<T>> = senders.into_iter().map(unbox).collect();
        Box::new(Partitioning::output(self, resolved, senders, cfg))
    }
}

/// A logical operator.
pub(crate) struct Node {
    pub(crate) name: String,
    pub(crate) uid: Option<String>,
    pub(crate) parallelism: Option<usize>,
    /// A node that is part of another (a source's side-output split): it shares that node's
    /// parallelism and is named after it.
    pub(crate) part_of: Option<NodeId>,
    pub(crate) is_source: bool,
    pub(crate) n_inputs: usize,
    pub(crate) ports: Vec<Box<dyn PortType>>,
    pub(crate) builder: Box<dyn NodeBuilder>,
    /// One state snapshot per subtask to start from (`with_initial_state`).
    pub(crate) initial_state: Option<Vec<crate::hooks::StateSnapshot>>,
    /// Each subtask has an active backup (buffer-queue backup).
    pub(crate) backup: Option<crate::backup::BackupPolicy>,
    /// The operator keeps no state between records (a backup replays less).
    pub(crate) stateless: bool,
}

/// A connection from an output port to a logical input of another node.
pub(crate) struct Edge {
    pub(crate) from: NodeId,
    pub(crate) port: usize,
    pub(crate) to: NodeId,
    pub(crate) input: usize,
    pub(crate) partition: Box<dyn EdgeOutput>,
}

/// The whole logical graph, plus errors found while it was built (reported by `execute`).
#[derive(Default)]
pub(crate) struct Graph {
    pub(crate) nodes: Vec<Node>,
    pub(crate) edges: Vec<Edge>,
    pub(crate) errors: Vec<PlanError>,
}

impl Graph {
    pub(crate) fn add_node(&mut self, node: Node) -> NodeId {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    pub(crate) fn add_edge(&mut self, edge: Edge) {
        self.edges.push(edge);
    }

    /// The node that builder settings (`uid`, `set_parallelism`, ...) apply to.
    pub(crate) fn settable(&self, id: NodeId) -> NodeId {
        self.nodes[id].part_of.unwrap_or(id)
    }
}

/// The typed input side of one logical input of a subtask: its channels and the operator
/// they feed.
struct TypedGate<T> {
    receivers: Vec<Receiver<T>>,
    ended: Vec<bool>,
    n_ended: usize,
    /// Round robin: the channel to look at first next time.
    next: usize,
    head: BoxOutput<T>,
    scratch: Vec<T>,
    /// Channels whose batches are being recorded as channel state (unaligned checkpoint).
    recording: Vec<bool>,
    recorded: Vec<Vec<T>>,
    /// Restored channel state, processed before any new input.
    replay: std::collections::VecDeque<Vec<T>>,
    /// A backed-up primary's claims on its buffer queue.
    claims: Option<Box<crate::backup::Claims<T>>>,
}

/// Records a backed-up primary copies out of a claimed batch at a time.
const CLAIMED_CHUNK: usize = 128;

impl<T: Data> TypedGate<T> {
    fn new(
        receivers: Vec<Receiver<T>>,
        head: BoxOutput<T>,
        claims: Option<Box<crate::backup::Claims<T>>>,
    ) -> Self {
        let n = receivers.len();
        TypedGate {
            receivers,
            ended: vec![false; n],
            n_ended: 0,
            next: 0,
            head,
            scratch: Vec::new(),
            recording: vec![false; n],
            recorded: Vec::new(),
            replay: Default::default(),
            claims,
        }
    }

    fn end_channel(&mut self, idx: usize) -> Result<GateStep, TaskError> {
        if self.ended[idx] {
            return Ok(GateStep::Empty);
        }
        self.ended[idx] = true;
        self.n_ended += 1;
        let all = self.n_ended == self.receivers.len();
        if all {
            self.head.finish()?;
        }
        Ok(GateStep::ChannelEnded { channel: idx, all })
    }

    /// One step of a backed-up primary: replay first, then its channels; every batch is
    /// claimed before it is processed and its output flushed after.
    fn try_step_claimed(&mut self, blocked: &dyn Fn(usize) -> bool) -> Result<GateStep, TaskError> {
        let Some(claims) = self.claims.as_mut() else {
            unreachable!("internal error: claimed step without claims")
        };
        // The subtask takes input only when its output has nothing waiting for credit: every
        // earlier batch's output is in the channels, the state is between two batches.
        claims.maybe_hand_state(&mut self.head)?;
        let (idx, seq, event) = match claims.next_replay() {
            Some(crate::backup::Replay::Batch(id, payload)) => (
                id.0 as usize,
                id.1,
                Event::Batch(crate::channel::Batch::Shared(payload)),
            ),
            Some(crate::backup::Replay::End(c)) => return self.end_channel(c),
            None => {
                let n = self.receivers.len();
                let mut found = None;
                for k in 0..n {
                    let idx = (self.next + k) % n;
                    if self.ended[idx] || blocked(idx) {
                        continue;
                    }
                    let Some((seq, event)) = self.receivers[idx].try_recv_at() else {
                        continue;
                    };
                    match event {
                        Event::Barrier(id) if claims.is_stale(id) => continue,
                        Event::Batch(_) if claims.is_claimed(idx, seq) => {
                            tracing::debug!(
                                channel = idx,
                                seq,
                                "skipping a batch claimed before the promotion"
                            );
                            continue;
                        }
                        _ => {}
                    }
                    self.next = (idx + 1) % n;
                    found = Some((idx, seq, event));
                    break;
                }
                match found {
                    Some(f) => f,
                    None => {
                        claims.settle();
                        return Ok(GateStep::Empty);
                    }
                }
            }
        };
        match event {
            Event::Batch(batch) => {
                let payload = match batch {
                    crate::channel::Batch::Shared(a) => a,
                    crate::channel::Batch::Owned(v) => std::sync::Arc::new(v),
                };
                claims.claim((idx as u32, seq), &payload)?;
                let len = payload.len();
                if self.recording[idx] {
                    self.recorded.push(payload.to_vec());
                }
                // The buffer queue keeps the batch: the operator gets copies, a slice at a
                // time, so a whole second copy of the batch never exists at once.
                for chunk in payload.chunks(CLAIMED_CHUNK) {
                    self.scratch.extend_from_slice(chunk);
                    self.head.push(&mut self.scratch)?;
                }
                drop(payload);
                self.head.flush();
                // Output all out: the step can be released now (not at the next one).
                let waker = futures::task::noop_waker();
                if self
                    .head
                    .poll_pending(&mut Context::from_waker(&waker))
                    .is_ready()
                {
                    claims.settle();
                }
                Ok(GateStep::Batch(len))
            }
            Event::Barrier(id) => Ok(GateStep::Barrier { channel: idx, id }),
            Event::EndOfInput => self.end_channel(idx),
        }
    }
}

impl<T: Data> InputGate for TypedGate<T> {
    fn try_step(&mut self, blocked: &dyn Fn(usize) -> bool) -> Result<GateStep, TaskError> {
        if self.claims.is_some() {
            return self.try_step_claimed(blocked);
        }
        if let Some(mut batch) = self.replay.pop_front() {
            let len = batch.len();
            self.head.push(&mut batch)?;
            return Ok(GateStep::Batch(len));
        }
        let n = self.receivers.len();
        for k in 0..n {
            let idx = (self.next + k) % n;
            if self.ended[idx] || blocked(idx) {
                continue;
            }
            let Some(event) = self.receivers[idx].try_recv() else {
                continue;
            };
            self.next = (idx + 1) % n;
            return match event {
                Event::Batch(batch) => {
                    let len = batch.len();
                    batch.move_into(&mut self.scratch);
                    if self.recording[idx] {
                        self.recorded.push(self.scratch.clone());
                    }
                    self.head.push(&mut self.scratch)?;
                    Ok(GateStep::Batch(len))
                }
                Event::Barrier(id) => Ok(GateStep::Barrier { channel: idx, id }),
                Event::EndOfInput => self.end_channel(idx),
            };
        }
        Ok(GateStep::Empty)
    }
    fn flush(&mut self) {
        self.head.flush()
    }
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.head.poll_pending(cx)
    }
    fn is_ended(&self) -> bool {
        self.n_ended == self.receivers.len()
    }
    fn queued(&self) -> usize {
        self.receivers.iter().map(Receiver::queued).sum()
    }
    fn capacity(&self) -> usize {
        self.receivers.iter().map(Receiver::capacity).sum()
    }
    fn queued_records(&self) -> usize {
        self.receivers.iter().map(Receiver::queued_records).sum()
    }
    fn output_usage(&self, usage: &mut crate::operator::QueueUsage) {
        self.head.usage(usage)
    }
    fn control(&mut self, c: &mut crate::operator::Control<'_>) {
        self.head.control(c)
    }
    fn channels(&self) -> usize {
        self.receivers.len()
    }
    fn peek_barrier(&self) -> Option<u64> {
        self.receivers
            .iter()
            .zip(&self.ended)
            .filter(|(_, e)| !**e)
            .filter_map(|(r, _)| r.peek_barrier())
            .max()
    }
    fn set_recording(&mut self, channel: usize, on: bool) {
        self.recording[channel] = on;
    }
    fn take_channel_state(&mut self) -> Result<Vec<u8>, String> {
        let state = crate::checkpoint::encode(&self.recorded);
        self.recorded.clear();
        self.recording.iter_mut().for_each(|r| *r = false);
        state
    }
    fn is_channel_ended(&self, channel: usize) -> bool {
        self.ended[channel]
    }
    fn barrier(
        &mut self,
        id: u64,
        w: &mut crate::checkpoint::StateWriter,
    ) -> Result<(), TaskError> {
        self.head.barrier(id, w)?;
        if let Some(c) = self.claims.as_mut() {
            c.on_barrier(id, w);
        }
        Ok(())
    }
    fn notify_complete(&mut self, id: u64) -> Result<(), TaskError> {
        self.head.notify_complete(id)?;
        if let Some(c) = self.claims.as_mut() {
            c.on_complete(id);
        }
        Ok(())
    }
}
