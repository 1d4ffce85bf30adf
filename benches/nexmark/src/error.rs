//! What can go wrong setting up a Nexmark run.

/// A Nexmark configuration or query name that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NexmarkError {
    /// A setting of [`GeneratorConfig`](super::GeneratorConfig) is out of its range.
    #[error("nexmark generator: `{setting}` = {value} is not allowed: {why}")]
    BadSetting {
        /// The setting's name.
        setting: &'static str,
        /// What it was set to.
        value: String,
        /// What it must be.
        why: &'static str,
    },
    /// A source subtask context with parallelism 0 or a subtask index past it.
    #[error("nexmark source: subtask {subtask} of parallelism {parallelism} does not exist")]
    BadSubtask {
        /// The subtask index.
        subtask: usize,
        /// The source's parallelism.
        parallelism: usize,
    },
    /// A query name that is not one of the suite's.
    #[error("unknown nexmark query `{name}` (known: {known})")]
    UnknownQuery {
        /// The name asked for.
        name: String,
        /// The known names, comma-separated.
        known: String,
    },
    /// A query of the suite that has no Weir implementation yet.
    #[error("nexmark query `{name}` is not implemented yet (implemented: {implemented})")]
    NotImplemented {
        /// The query's name.
        name: String,
        /// The implemented queries, comma-separated.
        implemented: String,
    },
}
