//! Where a keyed operator's states live: the choice a job makes ([`StateBackend`]).
//!
//! This module owns the choice and its settings, checked at build time; not the stores
//! themselves (the in-memory maps of `state`, the disk store of `state::disk`).

use std::path::PathBuf;

/// Where keyed operators keep their per-key states (`EnvConfig::state_backend`; Flink's
/// `state.backend.type`).
///
/// Either way the typed state API is the same, and so are checkpoints and savepoints: a
/// savepoint taken with one backend restores with the other.
///
/// ```
/// let mut cfg = weir::EnvConfig::default();
/// assert_eq!(cfg.state_backend, weir::StateBackend::Memory);
/// cfg.state_backend = weir::StateBackend::disk(64 << 20);
/// assert!(cfg.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StateBackend {
    /// In hash maps in memory (the default): the fastest, for state that fits in memory.
    #[default]
    Memory,
    /// In an embedded LSM store on local disk, the keys in use cached in memory up to a
    /// budget: for state larger than memory (Flink's RocksDB backend). Needs weir's feature
    /// `disk-state` (on by default).
    Disk(DiskBackend),
}

impl StateBackend {
    /// The disk backend with `memory_budget` bytes per keyed subtask, under the system's
    /// temporary directory.
    pub fn disk(memory_budget: usize) -> Self {
        StateBackend::Disk(DiskBackend {
            memory_budget,
            ..DiskBackend::default()
        })
    }

    /// Checks the settings; the error says which one is wrong.
    pub(crate) fn validate(&self) -> Result<(), String> {
        match self {
            StateBackend::Memory => Ok(()),
            StateBackend::Disk(d) => {
                if cfg!(not(feature = "disk-state")) {
                    return Err(
                        "the disk backend needs weir's feature `disk-state`, which this build \
                         leaves out"
                            .into(),
                    );
                }
                if d.memory_budget < DiskBackend::MIN_BUDGET {
                    return Err(format!(
                        "memory_budget of the disk backend must be at least {} bytes (1 MiB), \
                         not {}",
                        DiskBackend::MIN_BUDGET,
                        d.memory_budget
                    ));
                }
                if d.directory.as_os_str().is_empty() {
                    return Err("directory of the disk backend must not be empty".into());
                }
                Ok(())
            }
        }
    }
}

/// Settings of [`StateBackend::Disk`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DiskBackend {
    /// Where the stores go (default: `weir-state` under the system's temporary directory);
    /// each keyed subtask has a store of its own in a new directory under it, deleted when
    /// the subtask ends. What is there is a working copy: checkpoints are what a restore
    /// reads.
    pub directory: PathBuf,
    /// Memory for one keyed subtask's states, in bytes (default 64 MiB): three quarters hold
    /// the keys in use, decoded; the rest is the store's block cache and write buffer.
    pub memory_budget: usize,
}

impl DiskBackend {
    /// The smallest budget (1 MiB).
    pub const MIN_BUDGET: usize = 1 << 20;
}

impl Default for DiskBackend {
    fn default() -> Self {
        DiskBackend {
            directory: std::env::temp_dir().join("weir-state"),
            memory_budget: 64 << 20,
        }
    }
}
