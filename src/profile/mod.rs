//! Profiles learned from what the node helper measured of a job's earlier runs, so that jobs
//! nobody labelled are placed and clocked as labelled ones are.
//!
//! * `key`: who a job is, from what `job_submit` sees (script, name, account and request).
//! * `learn`: the store in memory; runs filed per key and GPU type.
//! * `derive`: from a profile to a job class the model predicts with.
//! * `neighbours`: what its shared runs say of how much busy neighbours slow it.
//! * `wire`: a learned class as the SPANK environment value the node helper reads.
//! * `store`: the store on disk and its update from the accounting logs (the only I/O here).
//!
//! `key`, `learn` and `derive` are pure: the plugin, the node helper and the simulator run the
//! same code.

pub mod derive;
pub mod key;
pub mod learn;
pub mod neighbours;
pub mod store;
pub mod wire;

pub use derive::{Asked, DeriveSettings, Learned, derive, family_prior, lookup};
pub use key::{Identity, Level, ProfileKey, keys};
pub use learn::{Book, Filed, LearnLimits, Observation, Outcome, Profile, Sample};
