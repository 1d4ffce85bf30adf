//! `paper`: the BQBS paper's experiments (seed 000: Tables 5 to 8) run on Weir, as one
//! command that writes a report. The `paper` binary is its command line:
//!
//! ```text
//! cargo run --release -p weir-paper --bin paper -- --out target/paper-report [--quick]
//! ```
//!
//! Each experiment runs one of the harness binaries (`etl`, `recovery`, `criticality`) as a
//! child process per configuration and reads the one JSON line it prints; while a child runs,
//! its `/proc/<pid>/stat` and `/proc/<pid>/status` are sampled (CPU ticks, `VmRSS`, `VmHWM`)
//! for the CPU and memory figures ([`proc`], [`analysis`]). The output directory gets
//! `results.json` ([`results::Results`]), `report.md` ([`report`]: the measured tables beside
//! what the paper's text states, [`reference`]) and SVG charts ([`charts`]); `results.json` is
//! then checked ([`validate`]).
//!
//! The crate depends on no Weir crate: what it measures is what the harnesses of
//! `weir-benches` print, and `paper` builds them (`cargo build --release -p weir-benches
//! --bins`) before it runs them.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod analysis;
pub mod charts;
pub mod experiments;
pub mod proc;
pub mod reference;
pub mod report;
pub mod results;
pub mod validate;

#[cfg(test)]
mod tests;
