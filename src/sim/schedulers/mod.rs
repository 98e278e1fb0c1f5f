//! The schedulers compared in time mode, one file each behind one trait. Each baseline follows
//! the rule of the system it names (cited in its file); heshare calls the same `policy`
//! functions the Slurm plugin calls.

use super::engine::{SimJob, State};
use crate::units::{Mhz, SharePct};

mod fgd;
mod gavel;
mod heshare;
mod slurm;
mod zeus;

pub use fgd::{Fgd, FgdPwr};
pub use gavel::Gavel;
pub use heshare::Heshare;
pub use slurm::{SlurmExclusive, SlurmMps};
pub use zeus::Zeus;

/// Where a job starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    /// Global GPU indices, all on one node.
    pub gpus: Vec<usize>,
    pub share: SharePct,
    pub exclusive: bool,
}

/// A scheduler in time mode.
pub trait Scheduler {
    fn name(&self) -> &'static str;
    /// Where job `j` should start now, or `None` to keep it waiting.
    fn place(&mut self, st: &State<'_>, j: usize) -> Option<Placement>;
    /// The SM clock for `gpu` after its set of jobs changed. Plain Slurm leaves the default.
    fn clock(&mut self, st: &State<'_>, gpu: usize) -> Mhz {
        st.cfg.gpu_types[st.gpus[gpu].gpu_type].default_sm_clock
    }
}

/// The scheduler names `--policies` accepts, in report order.
pub const NAMES: [&str; 7] = [
    "slurm-exclusive",
    "slurm-mps",
    "fgd",
    "fgd-pwr",
    "gavel",
    "zeus",
    "heshare",
];

/// Builds a scheduler by name; the error lists the known names.
pub fn by_name<'a>(
    name: &str,
    st: &State<'a>,
    typical: &'a super::packing::TypicalPods,
) -> Result<Box<dyn Scheduler + 'a>, String> {
    Ok(match name {
        "slurm-exclusive" => Box::new(SlurmExclusive),
        "slurm-mps" => Box::new(SlurmMps),
        "fgd" => Box::new(Fgd::new(typical)),
        "fgd-pwr" => Box::new(FgdPwr::new(typical)),
        "gavel" => Box::new(Gavel),
        "zeus" => Box::new(Zeus::default()),
        "heshare" => Box::new(Heshare::new(st)),
        other => {
            return Err(format!(
                "unknown policy \"{other}\" (known: {})",
                NAMES.join(", ")
            ));
        }
    })
}

/// The MPS percentage for a trace share: gres/mps counts whole percents, rounded up.
pub fn trace_share(job: &SimJob) -> SharePct {
    let pct = job.gpu_milli.div_ceil(10).clamp(1, 100);
    SharePct::new(u8::try_from(pct).unwrap_or(100)).unwrap_or(SharePct::FULL)
}

pub fn is_share(job: &SimJob) -> bool {
    job.num_gpus == 1 && job.gpu_milli < 1000
}

/// Whether `node` has the CPU and memory the job asks for.
pub fn node_fits_host(st: &State<'_>, node: usize, job: &SimJob) -> bool {
    let r = &st.nodes[node].res;
    r.cpu_left >= job.pod.cpu_milli && r.memory_left >= job.pod.memory_mib
}

/// The job's GPUs on `node` if it has enough idle GPUs of an allowed type (first ones).
pub fn idle_gpus_on(st: &State<'_>, node: usize, job: &SimJob) -> Option<Vec<usize>> {
    if !node_fits_host(st, node, job) {
        return None;
    }
    let idle: Vec<usize> = st.nodes[node]
        .gpus
        .iter()
        .copied()
        .filter(|&g| st.gpus[g].jobs.is_empty() && st.type_allowed(job, st.gpus[g].gpu_type))
        .take(job.num_gpus as usize)
        .collect();
    (idle.len() == job.num_gpus as usize).then_some(idle)
}

/// Slurm's default: the first node in order with enough idle GPUs, whole GPUs.
pub fn first_fit_whole(st: &State<'_>, job: &SimJob) -> Option<Placement> {
    (0..st.nodes.len())
        .find_map(|n| idle_gpus_on(st, n, job))
        .map(|gpus| Placement {
            gpus,
            share: SharePct::FULL,
            exclusive: true,
        })
}
