//! Testing utilities for Weir jobs: run your own jobs under faults the way Weir tests itself, and
//! check that what reached a sink is exactly what was expected.
//!
//! - Faults: [`FaultPlan`] makes operator `uid` fail at its `K`-th record (panic, hang, stop
//!   its arbiter, pause), or at its snapshot of a checkpoint ([`Fault::at_snapshot`],
//!   [`Fault::at_hand_over`]: during a rescale or a fast restart); [`RecordFaults`] makes an
//!   operator of yours fail the first time it
//!   sees chosen records, the same in every restart attempt and in a promoted backup;
//!   [`StorageFaults`] makes the next checkpoints' files fail to be written, as on a full or
//!   read-only disk ([`DiskTrouble`]). The
//!   panic hooks [`quiet_injected_panics`] and [`quiet_released_hangs`] keep the expected
//!   panics off stderr.
//! - Checks: [`ExactlyOnce`] compares the ids that reached a sink with the expected ones
//!   (missing, duplicated, unexpected); [`TwoPhaseFileSink`] is an exactly-once part-file
//!   sink whose committed output [`read_committed`] reads back.
//! - Events: [`wait_for_checkpoint`] waits until a running job has completed `n`
//!   checkpoints, so a test acts on an event, not after a sleep; [`Fault::after_checkpoints`]
//!   fires a fault only once `n` checkpoints completed, [`Fault::after_backups_started`]
//!   once a backed-up subtask's backup was started `n` times (replaced, or started again
//!   after a promotion); [`HeldIds`] holds part of its input
//!   until the test releases it ([`Hold`]), so the input does not run out before the event.
//! - Load: [`PacedSink`] takes a fixed number of records per second.
//!
//! A job that fails twice, recovers from its checkpoints, and still delivers every record
//! once:
//!
//! ```
//! use std::time::Duration;
//! use weir_testing::{quiet_injected_panics, ExactlyOnce, FaultKind, RecordFaults};
//! quiet_injected_panics();
//! let faults = RecordFaults::new("square", FaultKind::Panic, vec![2_000u64, 6_000]);
//! let mut cfg = weir::EnvConfig::default();
//! cfg.checkpoint.interval = Some(Duration::from_millis(10));
//! cfg.restart = Some(weir::RestartStrategy::FixedDelay { attempts: 3, delay: Duration::ZERO });
//! cfg.faults = faults.plan().clone();
//! let env = weir::Env::with_config(cfg);
//! let out = env
//!     .generate(10_000, |i| i)
//!     .map(faults.wrap(|x: u64| x * x))
//!     .uid("square")
//!     .collect();
//! env.execute("testing-doc").unwrap();
//! assert_eq!(faults.fired(), 2);
//! let report = ExactlyOnce::new((0..10_000u64).map(|x| x * x)).check(out.take());
//! assert!(report.is_exactly_once(), "{report}");
//! ```
//!
//! The fault mechanism of [`FaultPlan`] lives in `weir::fault` (the core's feature `faults`,
//! which this crate turns on: a job's own build has no fault hooks to configure); this crate
//! is where tests and benchmarks meet it:
//!
//! ```
//! use weir_testing::{Fault, FaultKind, FaultPlan};
//! let plan = FaultPlan::new(vec![Fault::new("flat_map", FaultKind::Panic, 500_000)]);
//! let mut cfg = weir::EnvConfig::default();
//! cfg.faults = plan.clone();
//! assert_eq!(plan.fired(), 0);
//! ```

mod checkpoints;
mod exactly_once;
mod faults;
mod held;
mod paced_sink;
mod part_files;
pub mod s3;

pub use checkpoints::{wait_for_checkpoint, CheckpointWaitError, POLL_INTERVAL};
pub use exactly_once::{ExactlyOnce, ExactlyOnceReport, EXAMPLES};
pub use faults::{
    panic_message, quiet_injected_panics, quiet_injected_panics_with, quiet_released_hangs,
    RecordFaults,
};
pub use held::{HeldIds, Hold};
pub use paced_sink::PacedSink;
pub use part_files::{
    clear_part_files, encode_display, encode_json, encode_string, parse_part_name, part_name,
    read_committed, Committed, Encode, PartFileStats, PartKind, TwoPhaseFileSink, FINAL_COMMIT,
};
pub use weir::fault::{DiskTrouble, Fault, FaultKind, FaultPlan, FaultPoint, StorageFaults};
