//! The Slurm integration: the decision logic of the `job_submit/heshare` plugin (pure, in
//! `request`), what a user's request promises and heshare may change of it (pure, in
//! `contract`), the plugin's picture of the live cluster (pure, in `snapshot`) and, when built
//! against the Slurm headers, the C-ABI entry points slurmctld loads and the snapshot thread.

pub mod contract;
pub mod request;
pub mod snapshot;

#[cfg(slurm_headers)]
mod bindings;
#[cfg(slurm_headers)]
pub mod ffi;
#[cfg(slurm_headers)]
mod live;
