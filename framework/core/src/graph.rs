//! The logical graph: operators (nodes), their typed output ports, and the edges between them.
//!
//! The typed API (`stream`) checks every type when the graph is built; here types are erased
//! behind small traits whose typed implementations were captured at that moment
//! ([`NodeBuilder`], [`PortType`], [`EdgeOutput`]). Erased values travel as `Box<dyn Any>`
//! and are downcast exactly where they were typed, so a mismatch is an internal bug, not a user
//! error. This module owns the graph's shape; it does not decide chaining or placement (`plan`).

use crate::sync::AtomicWaker;

use crate::channel::{channel, Receiver, Sender};
use crate::config::EnvConfig;
use crate::erased::{unbox, AnyBox};
use crate::error::{PlanError, TaskError};
use crate::metrics::OperatorCounters;
use crate::operator::connect::SelectionCell;
use crate::operator::step::{InputGate, SourceStep};
use crate::operator::{BoxOutput, OperatorInfo, Tee};
use crate::partition::{OutputConfig, PartitionKind, Partitioning};
use crate::sync::Arc;
use crate::Data;

pub(crate) type NodeId = usize;
/// What a node's builder gets for one subtask.
pub(crate) struct OpEnv {
    pub(crate) info: Arc<OperatorInfo>,
    pub(crate) counters: Arc<OperatorCounters>,
    pub(crate) config: EnvConfig,
    /// The state this subtask starts from (`with_initial_state`).
    pub(crate) initial_state: Option<crate::hooks::StateSnapshot>,
    /// The state of this operator subtask in the checkpoint the job restores, if any.
    pub(crate) restored: Option<Vec<u8>>,
    /// A promoted backup's keyed state as its backup kept it (instead of `restored`): taken
    /// by the keyed operator that reads it in key by key (`state::promoted`).
    pub(crate) promoted_image: std::sync::Mutex<Option<crate::state::changes::PromotedImage>>,
    /// Where this instance starts from.
    pub(crate) start: crate::checkpoint::StartPoint,
    /// Input records this subtask processed before this instance (a promoted backup):
    /// injected faults count from there.
    pub(crate) fault_offset: u64,
    /// The config changes made to this operator while the job ran (key, value), in order: a
    /// restarted or promoted instance applies them after its state, so a failover does not
    /// undo a live change.
    pub(crate) live_config: Vec<(String, String)>,
    /// The operator has a buffer-queue backup.
    pub(crate) backed_up: bool,
    /// Its backup takes its state between checkpoints too (`BackupPolicy::state_interval`):
    /// a keyed operator then logs its changes for those handoffs.
    pub(crate) hands_state: bool,
    /// The side outputs taken from this operator, for its `OpCore` (`stream::core`).
    pub(crate) sides: std::sync::Mutex<Option<crate::operator::side::SideOutputs>>,
}

impl OpEnv {
    /// Takes the operator's side outputs (none after the first call).
    pub(crate) fn take_sides(&self) -> crate::operator::side::SideOutputs {
        self.sides
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .unwrap_or_default()
    }

    /// Takes the image a promoted backup's keyed operator starts from, if it has one.
    pub(crate) fn take_promoted_image(&self) -> Option<crate::state::changes::PromotedImage> {
        self.promoted_image
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    /// The snapshot payload the operator restores: a promoted backup's image (its backup's
    /// copy of the entries the primary handed, taken here) as a payload, else the
    /// checkpoint's. For operators that restore whole payloads; the keyed operator reads its
    /// image key by key (`take_promoted_image`).
    pub(crate) fn take_restored_payload(&self) -> Option<std::borrow::Cow<'_, [u8]>> {
        match self.take_promoted_image() {
            Some(image) => Some(std::borrow::Cow::Owned(image.payload())),
            None => self.restored.as_deref().map(std::borrow::Cow::Borrowed),
        }
    }

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
    /// The side output named `name` over `out`, this port's (erased) output.
    fn side(&self, name: std::sync::Arc<str>, out: AnyBox) -> Box<dyn crate::operator::side::Side>;
    /// A channel of this type: (`Sender<T>`, `Receiver<T>`).
    fn channel(&self, credit: crate::channel::Credit, waker: Arc<AtomicWaker>) -> (AnyBox, AnyBox);
    /// The input gate over `receivers` that feeds `head`, replaying restored channel state
    /// (unaligned checkpoints) before any new input; with `owned` (a keyed input, see
    /// [`EdgeOutput::owned_by`]), only the replayed records of this subtask's key groups.
    fn gate(
        &self,
        receivers: Vec<AnyBox>,
        head: AnyBox,
        replay: Option<&[u8]>,
        owned: Option<AnyBox>,
    ) -> Result<Box<dyn InputGate>, String>;
    /// A dual channel into a backed-up subtask: (`Sender<T>`, `Arc<Dual<T>>`, the primary's
    /// `Receiver<T>`, the backup's `Receiver<T>`).
    fn dual_channel(
        &self,
        credit: crate::channel::Credit,
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
    fn side(&self, name: std::sync::Arc<str>, out: AnyBox) -> Box<dyn crate::operator::side::Side> {
        crate::operator::side::Slot::boxed(name, unbox::<BoxOutput<T>>(out))
    }
    fn channel(&self, credit: crate::channel::Credit, waker: Arc<AtomicWaker>) -> (AnyBox, AnyBox) {
        let (tx, rx) = channel::<T>(credit, waker);
        (Box::new(tx), Box::new(rx))
    }
    fn gate(
        &self,
        receivers: Vec<AnyBox>,
        head: AnyBox,
        replay: Option<&[u8]>,
        owned: Option<AnyBox>,
    ) -> Result<Box<dyn InputGate>, String> {
        let receivers: Vec<Receiver<T>> = receivers.into_iter().map(unbox).collect();
        let mut replay = match replay {
            None => crate::gate::ChannelState {
                marks: None,
                in_flight: Vec::new(),
            },
            Some(bytes) => crate::gate::ChannelState::decode(bytes)?,
        };
        if let Some(owned) = owned {
            replay.keep(unbox::<crate::partition::Owned<T>>(owned));
        }
        Ok(crate::gate::replaying_gate(
            receivers,
            unbox::<BoxOutput<T>>(head),
            replay,
        ))
    }
    fn dual_channel(
        &self,
        credit: crate::channel::Credit,
        primary_waker: Arc<AtomicWaker>,
        backup_waker: Arc<AtomicWaker>,
    ) -> (AnyBox, AnyBox, AnyBox, AnyBox) {
        let (tx, dual, rx_p, rx_b) =
            crate::channel::dual_channel::<T>(credit, primary_waker, backup_waker);
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
        let group = crate::backup::TypedGroup::<T>::new(
            spec,
            duals,
            backup_rx,
            backup_waker,
            outputs,
            crate::gate::typed_gate::<T>,
        );
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
        crate::gate::typed_gate::<T>(
            receivers,
            unbox(head),
            Some(Box::new(unbox::<crate::backup::Claims<T>>(claims))),
        )
    }
}

/// The typed partitioning of an edge.
pub(crate) trait EdgeOutput: Send {
    fn kind(&self) -> PartitionKind;
    fn output(&self, resolved: PartitionKind, senders: Vec<AnyBox>, cfg: OutputConfig) -> AnyBox;
    /// On a keyed edge, a boxed [`Owned<T>`](crate::partition::Owned): whether a record
    /// belongs to `subtask` of `owners`' assignment (restored channel state dealt by key
    /// group).
    fn owned_by(&self, owners: &crate::key_group::Owners, subtask: usize) -> Option<AnyBox>;
}

impl<T: Data> EdgeOutput for Partitioning<T> {
    fn kind(&self) -> PartitionKind {
        Partitioning::kind(self)
    }
    fn output(&self, resolved: PartitionKind, senders: Vec<AnyBox>, cfg: OutputConfig) -> AnyBox {
        let senders: Vec<Sender<T>> = senders.into_iter().map(unbox).collect();
        Box::new(Partitioning::output(self, resolved, senders, cfg))
    }
    fn owned_by(&self, owners: &crate::key_group::Owners, subtask: usize) -> Option<AnyBox> {
        Partitioning::owned_by(self, owners, subtask).map(|owned| Box::new(owned) as AnyBox)
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
    /// The side outputs taken from the operator (each an output port after its own), or
    /// `None` for an operator whose functions have no context to emit them from.
    pub(crate) side_outputs: Option<Vec<SideTag>>,
    pub(crate) ports: Vec<Box<dyn PortType>>,
    pub(crate) builder: Box<dyn NodeBuilder>,
    /// One state snapshot per subtask to start from (`with_initial_state`).
    pub(crate) initial_state: Option<Vec<crate::hooks::StateSnapshot>>,
    /// Each subtask has an active backup (buffer-queue backup).
    pub(crate) backup: Option<crate::backup::BackupPolicy>,
    /// The operator keeps no state between records (a backup replays less).
    pub(crate) stateless: bool,
    /// How its state follows a change of parallelism (`rescale`).
    pub(crate) rescale: crate::rescale::Rule,
}

/// A side output taken from an operator ([`OutputTag`](crate::OutputTag)): its name, its
/// record type, and the port it leaves by.
pub(crate) struct SideTag {
    pub(crate) name: std::sync::Arc<str>,
    pub(crate) type_id: std::any::TypeId,
    pub(crate) type_name: &'static str,
    pub(crate) port: usize,
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
    /// Directories sinks write into, checked before the job starts
    /// ([`SinkStream::writes_into`](crate::SinkStream::writes_into)).
    pub(crate) output_dirs: Vec<std::path::PathBuf>,
    /// Nodes that cannot be backed up, and why (refused when the job is planned).
    pub(crate) no_backup: Vec<(NodeId, &'static str)>,
    /// Readings operators publish beside their counters, by node.
    pub(crate) gauges: Vec<(NodeId, std::sync::Arc<dyn crate::metrics::OperatorGauges>)>,
    /// Checks of an operator's settings against the job's config (a Kafka sink's
    /// transaction timeout against the checkpoint interval), run when the job is planned.
    pub(crate) config_checks: Vec<ConfigCheck>,
    /// The job's watermark alignment groups, by name.
    pub(crate) alignment: crate::time::alignment::Groups,
    /// Keyed operators whose key groups are assigned by load, not by count: each one's
    /// table (key group -> subtask) at its parallelism now (set by a rebalance, dropped by a
    /// rescale that is not by load).
    pub(crate) key_groups: std::collections::HashMap<NodeId, std::sync::Arc<[u32]>>,
    /// Keyed operators set to be rebalanced by load whenever they are rescaled
    /// ([`DataStream::key_groups_by_load`](crate::DataStream::key_groups_by_load)).
    pub(crate) by_load: std::collections::HashSet<NodeId>,
}

/// A check of an operator's settings against the job's config ([`Graph::config_checks`]).
pub(crate) type ConfigCheck = Box<dyn Fn(&EnvConfig) -> Result<(), PlanError> + Send + Sync>;

impl Graph {
    /// The operators' published readings, by uid (`plan_uids`: the planned uid of each node).
    pub(crate) fn gauges_by_uid(&self, plan_uids: &[String]) -> crate::metrics::GaugesByUid {
        self.gauges
            .iter()
            .filter_map(|(n, g)| Some((plan_uids.get(*n)?.clone(), g.clone())))
            .collect()
    }

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
