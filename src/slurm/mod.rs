//! The Slurm integration: what a job asks (TRES strings and SPANK options, pure, in `ask`), the
//! decision translated into a job description change (pure, in `request`), heshare's part of
//! AdminComment (pure, in `admin_comment`), re-deciding pending jobs (pure, in `revisit`), what
//! a user's request promises and heshare may change of it (pure, in `contract`), the plugin's
//! picture of the live cluster (pure, in `snapshot`), the accounting database through Slurm's
//! clients (`dbd`, where each job's energy note is written) and, when built against the Slurm
//! headers,
//! the C-ABI entry points slurmctld loads and the snapshot thread.

pub mod admin_comment;
pub mod ask;
pub mod contract;
pub mod dbd;
pub mod request;
pub mod revisit;
pub mod snapshot;

#[cfg(slurm_headers)]
mod bindings;
#[cfg(slurm_headers)]
pub mod ffi;
#[cfg(slurm_headers)]
mod live;
