//! The Slurm integration: the decision logic of the `job_submit/heshare` plugin (pure, in
//! `request`) and, when built against the Slurm headers, the C-ABI entry points slurmctld loads.

pub mod request;

#[cfg(slurm_headers)]
pub mod ffi;
