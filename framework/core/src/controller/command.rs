//! Commands to a running job's controller from outside it — the Rust [`JobHandle`] and its
//! monitors, and through them REST, `weirctl` and the agent — through one typed channel.
//! Every change to a job is one of these: the controller is the only writer of the job's
//! state, and takes commands one at a time in the order they arrive. Each command carries
//! the sender of its answer; the controller answers every command it takes, and a command it
//! never takes (the job ended first) is answered by the dropped sender, which the caller sees
//! as "the job ended".
//!
//! [`JobHandle`]: crate::JobHandle

use futures::channel::mpsc;

use crate::rate::RateControlConfig;
use crate::savepoint::SavepointRequest;

/// Where a command's answer goes: a plain channel, so a caller can wait for it from any
/// thread, inside an executor or not; a dropped sender means the job ended first.
pub(crate) type Reply<T> = std::sync::mpsc::Sender<T>;

/// A command to a job's controller.
#[derive(Debug)]
pub(crate) enum Command {
    /// Stop the job; it ends with [`JobError::Cancelled`](crate::JobError::Cancelled). The
    /// answer comes once every subtask has stopped.
    Cancel(Reply<()>),
    /// Take a savepoint (then stop the job if the request says so).
    Savepoint(SavepointRequest),
    /// Trigger a checkpoint now (not a savepoint); answered with its id once triggered.
    TriggerCheckpoint(Reply<Result<u64, String>>),
    /// Replace the sources' rate control (already validated); answered once applied.
    SetRateControl(RateControlConfig, Reply<()>),
    /// Change operators' parallelism; answered once the job runs at the new parallelism (or
    /// with why it does not).
    Rescale(RescaleRequest),
    /// Change live settings, all or none (checked, then applied; recorded in the history).
    Settings(SettingsRequest),
    /// Return the settings to their values at the last completed checkpoint.
    RollbackSettings(Reply<Result<crate::settings::RollbackReport, crate::settings::SettingError>>),
    /// Change one `#[weir(config)]` field of an operator in every subtask.
    Configure(ConfigureRequest),
    /// Replace the job's graph (fast restart); answered once the new graph committed its
    /// first checkpoint, or with why not.
    Replace(ReplaceRequest),
}

/// A graph replacement.
pub(crate) struct ReplaceRequest {
    pub(crate) graph: Box<crate::graph::Graph>,
    pub(crate) options: crate::replace::ReplaceOptions,
    pub(crate) reply: Reply<Result<crate::replace::ReplaceReport, crate::replace::ReplaceError>>,
}

impl std::fmt::Debug for ReplaceRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplaceRequest")
            .field("operators", &self.graph.nodes.len())
            .field("options", &self.options)
            .finish()
    }
}

/// A settings change: (name, value) pairs as asked for, and who asked (for the history).
#[derive(Debug)]
pub(crate) struct SettingsRequest {
    pub(crate) changes: Vec<(String, String)>,
    pub(crate) caller: String,
    pub(crate) reply:
        Reply<Result<Vec<crate::settings::PlannedChange>, crate::settings::SettingError>>,
}

/// An operator field change: `key` of operator `uid` set to `value` in every subtask.
#[derive(Debug)]
pub(crate) struct ConfigureRequest {
    pub(crate) uid: String,
    pub(crate) key: String,
    pub(crate) value: String,
    pub(crate) reply: Reply<Result<(), crate::hooks::ConfigError>>,
}

/// What to rescale.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RescaleTarget {
    /// These operators (uid, parallelism).
    Operators(Vec<(String, usize)>),
    /// Every operator that follows the job's default parallelism and can be rescaled.
    Job(usize),
    /// This keyed operator's key groups assigned again by observed load, at its parallelism.
    Rebalance(String),
}

/// A rescale command.
#[derive(Debug)]
pub(crate) struct RescaleRequest {
    pub(crate) target: RescaleTarget,
    pub(crate) reply: Reply<Result<crate::rescale::RescaleReport, crate::rescale::RescaleError>>,
}

/// The sending side of a controller's command channel; cloneable, usable from any thread.
#[derive(Debug, Clone)]
pub(crate) struct Commands(mpsc::UnboundedSender<Command>);

/// The receiving side, owned by the controller.
pub(crate) type CommandInbox = mpsc::UnboundedReceiver<Command>;

impl Commands {
    /// A new command channel.
    pub(crate) fn channel() -> (Commands, CommandInbox) {
        let (tx, rx) = mpsc::unbounded();
        (Commands(tx), rx)
    }

    /// Asks the job to stop; does not wait for the answer (every subtask stopped).
    pub(crate) fn cancel(&self) {
        let (reply, _answer) = std::sync::mpsc::channel();
        self.send(Command::Cancel(reply));
    }

    /// Sends `command`; `false` if the controller has ended (the command's answer sender is
    /// dropped with it, so whoever waits for the answer learns it too).
    pub(crate) fn send(&self, command: Command) -> bool {
        self.0.unbounded_send(command).is_ok()
    }
}
