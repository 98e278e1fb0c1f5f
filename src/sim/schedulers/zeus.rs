//! Zeus (You, Chung, Chowdhury, NSDI'23): each job alone on its GPU at the operating point that
//! minimises Zeus's energy-time cost `eta * E + (1 - eta) * MaxPower * T` (its default
//! `eta_knob` = 0.5), here over the GPU's supported SM clocks, predicted with the catalog (Zeus
//! profiles each job online; the catalog stands in for its profile). Placement as plain Slurm:
//! whole GPUs (`sim::cons_tres`).

use super::{Placement, Scheduler};
use crate::model::{Tenant, predict};
use crate::sim::cons_tres::{GresRequest, select};
use crate::sim::engine::State;
use crate::units::Mhz;

pub struct Zeus {
    pub eta: f64,
}

impl Default for Zeus {
    fn default() -> Zeus {
        Zeus { eta: 0.5 }
    }
}

/// The clock of type `t` with the least Zeus cost for `tenants`.
pub fn zeus_clock(st: &State<'_>, t: usize, tenants: &[Tenant<'_>], eta: f64) -> Mhz {
    let gt = &st.cfg.gpu_types[t];
    let reference = &st.cfg.gpu_types[st.cfg.reference_gpu];
    let mut best = (f64::INFINITY, gt.default_sm_clock);
    for &f in &gt.sm_clocks {
        let p = predict(gt, reference, tenants, f, st.params);
        // Cost per unit of work: every job on the GPU advances at 1/runtime.
        let time: f64 = p.jobs.iter().map(|j| j.runtime.0).fold(0.0, f64::max);
        let cost = eta * p.power.0 * time + (1.0 - eta) * gt.max_power.0 * time;
        if cost < best.0 {
            best = (cost, f);
        }
    }
    best.1
}

impl Scheduler for Zeus {
    fn name(&self) -> &'static str {
        "zeus"
    }
    fn place(&mut self, st: &State<'_>, j: usize) -> Option<Placement> {
        let job = &st.jobs[j];
        select(st, job, &GresRequest::whole(job))
    }
    fn clock(&mut self, st: &State<'_>, gpu: usize) -> Mhz {
        let g = &st.gpus[gpu];
        let tenants: Vec<Tenant<'_>> = g
            .jobs
            .iter()
            .map(|&j| Tenant {
                class: &st.cfg.classes[st.jobs[j].class],
                share: st.jobs[j].share,
                user: st.jobs[j].user,
            })
            .collect();
        zeus_clock(st, g.gpu_type, &tenants, self.eta)
    }
}
