//! The heshare policy: the one cost options are ranked by (`cost`), placement of one job on the cluster, the sharing optimizer for the jobs on
//! one GPU, and the priority adjustment. Pure and deterministic: no I/O, no clock, no globals, so
//! the Slurm plugin, the node helper and the simulator call the same functions.

pub mod belief;
pub mod cost;
pub mod groups;
pub mod node_clock;
pub mod placement;
pub mod priority;
pub mod queue;
pub mod score;
pub mod share;

pub use groups::GpuGroups;
pub use placement::{
    Candidate, ClusterView, CostTerms, Decision, EnergyPolicy, GpuSlot, JobRequest, PlaceContext,
    PlacedJob, PlacementError, Plan, ShareRequest, SlotPower, keeps_default_clock, limit_cap,
    place, place_slots, place_with, sized_class,
};
pub use queue::TypeQueue;
pub use share::{ShareError, ShareJob, ShareParams, SharePlan, ShareSpec, optimize};
