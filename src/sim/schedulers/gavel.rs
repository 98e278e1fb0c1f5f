//! Gavel (Narayanan et al., OSDI'20): heterogeneity-aware placement by throughput. Gavel
//! allocates GPU types in proportion to each job's throughput on them; online, with whole GPUs,
//! that is: start the job on the idle GPU type where it runs fastest (its throughput relative to
//! the reference type, the same per-class speeds Gavel measured), first node of that type.
//! Exclusive GPUs, default clocks.

use super::{Placement, Scheduler, idle_gpus_on};
use crate::model::relative_speed;
use crate::sim::engine::State;
use crate::units::SharePct;

pub struct Gavel;

impl Scheduler for Gavel {
    fn name(&self) -> &'static str {
        "gavel"
    }
    fn place(&mut self, st: &State<'_>, j: usize) -> Option<Placement> {
        let job = &st.jobs[j];
        let class = &st.cfg.classes[job.class];
        let reference = &st.cfg.gpu_types[st.cfg.reference_gpu];
        let mut best: Option<(f64, Vec<usize>)> = None;
        for n in 0..st.nodes.len() {
            let Some(gpus) = idle_gpus_on(st, n, job) else {
                continue;
            };
            let speed = relative_speed(
                class,
                &st.cfg.gpu_types[st.gpus[gpus[0]].gpu_type],
                reference,
            );
            if best.as_ref().is_none_or(|(b, _)| speed > *b) {
                best = Some((speed, gpus));
            }
        }
        best.map(|(_, gpus)| Placement {
            gpus,
            share: SharePct::FULL,
            exclusive: true,
        })
    }
}
