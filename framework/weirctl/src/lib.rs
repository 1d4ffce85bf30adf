//! `weirctl`: watch and steer running jobs over their REST API (Weir's, or a Flink cluster's
//! for the calls both have), from the command line or by rules.
//!
//! - [`cli`]: the command line, `weirctl <command>`; the binary only runs [`cli::run`].
//! - [`agent`]: the control agent (`weirctl agent --rules rules.toml`), which watches a job
//!   and alerts, takes savepoints, restarts, changes settings or rescales by rule.
//! - [`client`]: the small blocking REST client both use.
//!
//! This crate owns the client side of the control plane only; the server (Flink's REST API
//! on a running job) is `weir::rest`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod agent;
pub mod cli;
pub mod client;
