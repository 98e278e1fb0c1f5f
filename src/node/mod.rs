//! The node helper: what runs on each compute node as Slurm's Prolog, Epilog and TaskProlog. It
//! carries out the plugin's decision (MPS daemons, the SM clock the sharing optimizer picks for
//! the jobs on each GPU) and accounts each job's GPU energy, splitting a shared GPU's measured
//! energy by the work the driver measured per process (the model only where it measured
//! nothing). It runs as root and checks what it touches (`secure`). Decisions come from the same
//! pure `policy` and `model` code the plugin and the simulator use; this module holds the I/O
//! around them.

pub mod attribution;
pub mod gpu;
pub mod helper;
pub mod mps;
pub mod record;
pub mod secure;
pub mod state;

pub use helper::{JobEnv, NodeHelper, STEPS, task_exports};
