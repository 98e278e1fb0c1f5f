//! heshare: energy-aware, heterogeneity-aware GPU sharing for Slurm.
//!
//! The library holds everything the `heshare` binary, the Slurm plugin and the simulator share:
//! unit types, the configuration, the performance/power model and the placement and sharing
//! policy. `model` and `policy` are pure; I/O lives at the edges (`config` reads files, `cli`
//! talks to the terminal).

pub mod cli;
pub mod cluster;
pub mod command;
pub mod config;
pub mod contention;
pub mod logging;
pub mod model;
pub mod node;
pub mod policy;
pub mod profile;
pub mod report;
pub mod settings;
pub mod sim;
pub mod slurm;
pub mod units;

/// The `SLURM_VERSION_NUMBER` of the headers this build found (e.g. `0x160508` for 22.05.8), or
/// `None` when it was built without Slurm headers (no plugin then).
pub const SLURM_VERSION_NUMBER: Option<&str> = option_env!("HESHARE_SLURM_VERSION_NUMBER");
