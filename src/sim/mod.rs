//! The what-if simulator: replays traces through the same policy code the Slurm plugin runs, next
//! to faithful implementations of the schedulers people use today.

pub mod cons_tres;
pub mod engine;
pub mod experiment;
pub mod gavel_workload;
pub mod learning;
pub mod meter;
pub mod oracle;
pub mod packing;
pub mod priority;
pub mod replay;
pub mod rng;
pub mod schedulers;
pub mod suite;
pub mod templates;
pub mod trace;
pub mod world;
