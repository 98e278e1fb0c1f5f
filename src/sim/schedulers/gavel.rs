//! Gavel (Narayanan et al., OSDI'20): heterogeneity-aware placement by throughput. Gavel
//! allocates GPU types in proportion to each job's throughput on them; online, with whole GPUs,
//! that is: start the job on the GPU type where it runs fastest among those with room now (its
//! throughput relative to the reference type, the same per-class speeds Gavel measured).
//!
//! As a Slurm site would run it: a job_submit rule names the type in the job's GRES
//! (`gpu:TYPE:N`), and Slurm's own `select/cons_tres` picks the node and GPUs of that type
//! (`sim::cons_tres`). Exclusive GPUs, default clocks.

use super::{Placement, Scheduler};
use crate::model::relative_speed;
use crate::sim::cons_tres::{GresRequest, select};
use crate::sim::engine::State;

pub struct Gavel;

impl Scheduler for Gavel {
    fn name(&self) -> &'static str {
        "gavel"
    }
    fn place(&mut self, st: &State<'_>, j: usize) -> Option<Placement> {
        let job = &st.jobs[j];
        let class = &st.cfg.classes[job.class];
        let reference = &st.cfg.gpu_types[st.cfg.reference_gpu];
        let mut types: Vec<(f64, usize)> = (0..st.cfg.gpu_types.len())
            .filter(|&t| st.type_allowed(job, t))
            .map(|t| (relative_speed(class, &st.cfg.gpu_types[t], reference), t))
            .collect();
        // Fastest first; equal speeds in catalog order.
        types.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        types.into_iter().find_map(|(_, t)| {
            select(
                st,
                job,
                &GresRequest {
                    types: vec![t],
                    ..GresRequest::whole(job)
                },
            )
        })
    }
}
