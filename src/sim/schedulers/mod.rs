//! The schedulers compared in time mode, one file each behind one trait. Each baseline follows
//! the rule of the system it names (cited in its file); heshare calls the same `policy`
//! functions the Slurm plugin calls.

use super::engine::{SimJob, State};
use crate::units::{Mhz, SharePct};

mod fgd;
mod gavel;
mod greedy;
mod ideal;
pub mod shipped;
mod slurm;
mod zeus;

pub use fgd::{Fgd, FgdPwr};
pub use gavel::Gavel;
pub use greedy::EnergyGreedy;
pub use ideal::HeshareIdeal;
pub use shipped::{Knowledge, Shipped};
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
    /// Called before every event with the jobs waiting, in queue order: a scheduler with a
    /// clock of its own (heshare's snapshot thread) acts here. True if it changed something a
    /// waiting job may now start on.
    fn tick(&mut self, _st: &State<'_>, _waiting: &[usize]) -> bool {
        false
    }
    /// Job `j`'s site factor (Slurm's priority/multifactor adds it to the job's priority): what
    /// heshare's plugin sets; 0 for schedulers that set none.
    fn site_factor(&self, _j: usize) -> i32 {
        0
    }
    /// True once after site factors of waiting jobs changed (the queue is then re-sorted).
    fn take_reordered(&mut self) -> bool {
        false
    }
    /// Job `j` started (after `place` was taken).
    fn started(&mut self, _st: &State<'_>, _j: usize) {}
    /// Job `j` finished.
    fn finished(&mut self, _st: &State<'_>, _j: usize) {}
    /// How heshare's decisions used profiles (heshare as it ships only).
    fn profile_stats(&self) -> Option<crate::sim::learning::ProfileStats> {
        None
    }
    /// Whether the scheduler left job `j` as its user asked (heshare without a label or profile
    /// for it), or changed only its share, to more than asked, so a kill of it comes from its
    /// own request, not from a choice the scheduler made.
    fn left_as_asked(&self, _j: usize) -> bool {
        false
    }
}

/// The scheduler names `--policies` accepts, in report order: the baselines, heshare as it
/// ships, heshare told every job's class, heshare told every job's truth (the oracle), and
/// heshare-whole-view (heshare's policy placing on the exact GPU with every GPU in view and no
/// Slurm in between: a different scheduler, run only when named).
pub const NAMES: [&str; 11] = [
    "slurm-exclusive",
    "slurm-mps",
    "fgd",
    "fgd-pwr",
    "gavel",
    "zeus",
    "energy-greedy",
    "heshare",
    "heshare-labelled",
    "heshare-oracle",
    "heshare-whole-view",
];

/// The schedulers a run compares unless told otherwise (`simulate`'s default, every world of the
/// suite): every name but heshare-whole-view, the last.
pub const DEFAULT: &[&str] = match NAMES.split_last() {
    Some((_, rest)) => rest,
    None => &[],
};

/// The names of the baselines (everything that is not heshare).
pub fn is_baseline(name: &str) -> bool {
    !name.starts_with("heshare")
}

/// Builds a scheduler by name; the error lists the known names.
pub fn by_name<'a>(
    name: &str,
    st: &State<'a>,
    typical: &'a super::packing::TypicalPods,
    world: &'a super::world::World,
) -> Result<Box<dyn Scheduler + 'a>, String> {
    Ok(match name {
        "slurm-exclusive" => Box::new(SlurmExclusive),
        "slurm-mps" => Box::new(SlurmMps),
        "fgd" => Box::new(Fgd::new(typical)),
        "fgd-pwr" => Box::new(FgdPwr::new(typical)),
        "gavel" => Box::new(Gavel),
        "zeus" => Box::new(Zeus::default()),
        "energy-greedy" => Box::new(EnergyGreedy::default()),
        "heshare" => Box::new(Shipped::new(st, Knowledge::Learned)),
        "heshare-labelled" => Box::new(Shipped::new(st, Knowledge::Labelled)),
        "heshare-oracle" => Box::new(Shipped::new(st, Knowledge::Oracle(world))),
        "heshare-whole-view" => Box::new(HeshareIdeal::new(st)),
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

/// The job's GPUs on `node` if it may be used now and has enough idle GPUs of an allowed type
/// (first ones).
pub fn idle_gpus_on(st: &State<'_>, node: usize, job: &SimJob) -> Option<Vec<usize>> {
    if !st.usable(node) || !node_fits_host(st, node, job) {
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
