//! Plain Slurm, the two ways admins run GPUs today (Slurm 22.05 `select/cons_tres`):
//! * `slurm-exclusive`: every job gets whole GPUs (`--gres=gpu:N`), first fit in node order,
//!   default clocks. A job that asked for a fraction still holds a whole GPU.
//! * `slurm-mps`: `gres/mps` shares for fractional jobs at the percentage they asked for, on the
//!   GPU whose free share fits most tightly (best fit); whole-GPU jobs first fit. A GPU serves
//!   either `gpu` or `mps` jobs, never both (Slurm's rule), and clocks stay at the default
//!   (Slurm rejects `--gpu-freq` with MPS).

use super::{Placement, Scheduler, first_fit_whole, is_share, node_fits_host, trace_share};
use crate::sim::engine::State;

pub struct SlurmExclusive;

impl Scheduler for SlurmExclusive {
    fn name(&self) -> &'static str {
        "slurm-exclusive"
    }
    fn place(&mut self, st: &State<'_>, j: usize) -> Option<Placement> {
        first_fit_whole(st, &st.jobs[j])
    }
}

pub struct SlurmMps;

impl Scheduler for SlurmMps {
    fn name(&self) -> &'static str {
        "slurm-mps"
    }
    fn place(&mut self, st: &State<'_>, j: usize) -> Option<Placement> {
        let job = &st.jobs[j];
        if !is_share(job) {
            return first_fit_whole(st, job);
        }
        let want = u32::from(trace_share(job).get());
        let mut best: Option<(u32, usize)> = None;
        for (g, gpu) in st.gpus.iter().enumerate() {
            if !st.type_allowed(job, gpu.gpu_type)
                || gpu.held_exclusively(&st.jobs)
                || !st.cfg.gpu_types[gpu.gpu_type].mps
            {
                continue;
            }
            let used = gpu.used_share(&st.jobs);
            if used + want > 100 || !node_fits_host(st, gpu.node, job) {
                continue;
            }
            let left = 100 - used - want;
            if best.is_none_or(|(b, _)| left < b) {
                best = Some((left, g));
            }
        }
        best.map(|(_, g)| Placement {
            gpus: vec![g],
            share: trace_share(job),
            exclusive: false,
        })
    }
}
