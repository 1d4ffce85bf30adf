//! Stress runs of Weir: correctness checks too long or too random for the test suite, run as
//! commands of their own. The `chaos` binary is the command line of [`chaos`]: seeded fault
//! scenarios over every fault-tolerance mode, each run checked record by record and key by key.
//!
//! ```text
//! cargo run --release -p weir-stress --bin chaos -- --runs 25 --seed 1
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod chaos;
