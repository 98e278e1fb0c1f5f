//! Plain Slurm, the two ways admins run GPUs today (Slurm 22.05 `select/cons_tres`, modelled in
//! `sim::cons_tres`: tightest-fit node, first-fit GPUs):
//! * `slurm-exclusive`: every job gets whole GPUs (`--gres=gpu:N`), default clocks. A job that
//!   asked for a fraction still holds a whole GPU.
//! * `slurm-mps`: `gres/mps` shares for fractional jobs at the percentage their trace entry asked
//!   for (`gpu_milli`, rounded up to whole percents), whole GPUs for the others. A GPU serves
//!   either `gpu` or `mps` jobs, never both (Slurm's rule), clocks stay at the default (Slurm
//!   rejects `--gpu-freq` with MPS), and Slurm does not keep users apart on a GPU.

use super::{Placement, Scheduler};
use crate::sim::cons_tres::{GresRequest, select};
use crate::sim::engine::State;

pub struct SlurmExclusive;

impl Scheduler for SlurmExclusive {
    fn name(&self) -> &'static str {
        "slurm-exclusive"
    }
    fn place(&mut self, st: &State<'_>, j: usize) -> Option<Placement> {
        let job = &st.jobs[j];
        select(st, job, &GresRequest::whole(job))
    }
}

pub struct SlurmMps;

impl Scheduler for SlurmMps {
    fn name(&self) -> &'static str {
        "slurm-mps"
    }
    fn place(&mut self, st: &State<'_>, j: usize) -> Option<Placement> {
        let job = &st.jobs[j];
        select(st, job, &GresRequest::as_asked(job))
    }
}
