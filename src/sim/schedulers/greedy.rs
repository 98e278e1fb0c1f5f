//! Energy-greedy: what a site gets from an energy-first rule without heshare's sharing or its
//! bounds. Per job, the GPU type with room now on which it needs the least energy, and on its
//! GPU the clock Zeus would pick (You, Chung, Chowdhury, NSDI'23: least `eta * E + (1 - eta) *
//! MaxPower * T` at Zeus's default `eta` 0.5), both predicted with the catalog (Zeus profiles
//! each job online; the catalog stands in for its profile). Whole GPUs; the type goes into the
//! job's GRES and Slurm's `select/cons_tres` picks the node (`sim::cons_tres`).

use super::{Placement, Scheduler, zeus};
use crate::model::{Tenant, predict};
use crate::sim::cons_tres::{GresRequest, select};
use crate::sim::engine::State;
use crate::units::{Mhz, SharePct};

pub struct EnergyGreedy {
    pub eta: f64,
}

impl Default for EnergyGreedy {
    fn default() -> EnergyGreedy {
        EnergyGreedy { eta: 0.5 }
    }
}

impl Scheduler for EnergyGreedy {
    fn name(&self) -> &'static str {
        "energy-greedy"
    }
    fn place(&mut self, st: &State<'_>, j: usize) -> Option<Placement> {
        let job = &st.jobs[j];
        let class = &st.cfg.classes[job.class];
        let reference = &st.cfg.gpu_types[st.cfg.reference_gpu];
        let mut types: Vec<(f64, usize)> = (0..st.cfg.gpu_types.len())
            .filter(|&t| st.type_allowed(job, t))
            .map(|t| {
                let gt = &st.cfg.gpu_types[t];
                let tenant = [Tenant {
                    class,
                    share: SharePct::FULL,
                    user: 0,
                }];
                // The job's energy alone on this type at the clock Zeus would give it.
                let clock = zeus::zeus_clock(st, t, &tenant, self.eta);
                let p = predict(gt, reference, &tenant, clock, st.params);
                (p.jobs[0].energy().0, t)
            })
            .collect();
        types.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
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
    fn clock(&mut self, st: &State<'_>, gpu: usize) -> Mhz {
        zeus::Zeus { eta: self.eta }.clock(st, gpu)
    }
}
