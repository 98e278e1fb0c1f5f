//! heshare: `policy::place` on the live cluster view (the same function the Slurm plugin calls)
//! and, at every join and leave, `policy::optimize` for the GPU's clock (what the node helper
//! does). A job that asked for a fraction of a GPU lets heshare size its share ("auto"); a
//! whole-GPU job keeps whole GPUs.

use super::{Placement, Scheduler, node_fits_host};
use crate::model::ModelParams;
use crate::policy::{JobRequest, ShareJob, ShareParams, ShareRequest, ShareSpec, optimize, place};
use crate::sim::engine::State;
use crate::units::{Mhz, SharePct};
use std::collections::HashMap;

pub struct Heshare {
    node_index: HashMap<String, usize>,
    params: ShareParams,
}

impl Heshare {
    pub fn new(st: &State<'_>) -> Heshare {
        Heshare {
            node_index: st
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (n.name.clone(), i))
                .collect(),
            params: ShareParams {
                model: ModelParams {
                    contention_kappa: st.cfg.policy.contention_kappa,
                },
                share_step_pct: st.cfg.policy.mps_share_step_pct,
            },
        }
    }
}

impl Scheduler for Heshare {
    fn name(&self) -> &'static str {
        "heshare"
    }

    fn place(&mut self, st: &State<'_>, j: usize) -> Option<Placement> {
        let job = &st.jobs[j];
        let req = JobRequest {
            class: st.cfg.classes[job.class].name.clone(),
            gpus: job.num_gpus,
            share: if job.num_gpus == 1 && job.gpu_milli < 1000 {
                ShareRequest::Auto
            } else {
                ShareRequest::Exclusive
            },
            user: format!("u{}", job.user),
            gpu_types: job
                .gpu_types
                .iter()
                .map(|&t| st.cfg.gpu_types[t].name.clone())
                .collect(),
            energy_policy: None,
        };
        let plan = place(st.cfg, &st.view, &req).ok()?;
        let d = plan.decision;
        let node = *self.node_index.get(d.node.as_deref()?)?;
        if !node_fits_host(st, node, job) {
            return None;
        }
        let gpus: Vec<usize> = d
            .gpu_indices
            .iter()
            .filter_map(|&i| st.nodes[node].gpus.get(usize::try_from(i).ok()?).copied())
            .collect();
        (gpus.len() == job.num_gpus as usize).then(|| Placement {
            gpus,
            share: if d.exclusive {
                SharePct::FULL
            } else {
                SharePct::new(d.share_pct).unwrap_or(SharePct::FULL)
            },
            exclusive: d.exclusive,
        })
    }

    fn clock(&mut self, st: &State<'_>, gpu: usize) -> Mhz {
        let g = &st.gpus[gpu];
        let gt = &st.cfg.gpu_types[g.gpu_type];
        let jobs: Vec<ShareJob<'_>> = g
            .jobs
            .iter()
            .map(|&j| {
                let class = &st.cfg.classes[st.jobs[j].class];
                ShareJob {
                    class,
                    share: ShareSpec::Fixed(st.jobs[j].share),
                    user: st.jobs[j].user,
                    bound: class.slowdown_bound.unwrap_or(st.cfg.policy.slowdown_bound),
                }
            })
            .collect();
        optimize(
            gt,
            &st.cfg.gpu_types[st.cfg.reference_gpu],
            &jobs,
            self.params,
        )
        .map_or(gt.default_sm_clock, |p| p.clock)
    }
}
