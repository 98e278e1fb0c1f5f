//! heshare-whole-view: heshare's policy as a different scheduler, not what ships and not an
//! upper bound of it (the oracle, `sim::oracle`, is the shipped path told the truth). `policy::place` sees every GPU's occupants at
//! every moment and is asked again whenever resources free, then puts the job on the exact GPU it
//! chose (no Slurm in between); at every join and leave `policy::optimize` sets the GPU's clock
//! (what the node helper does). A job that asked for a fraction of a GPU lets heshare size its
//! share ("auto"); a whole-GPU job keeps whole GPUs. The shipped path is `shipped.rs`.

use super::{Placement, Scheduler, is_share, node_fits_host};
use crate::policy::{GpuSlot, JobRequest, PlaceContext, ShareParams, ShareRequest, place_slots};
use crate::sim::engine::State;
use crate::units::{Mhz, SharePct};
use rustc_hash::FxHashMap;
use std::collections::HashMap;

/// For job `j` of `n` whole GPUs: the idle GPUs of the first node (in cluster order) of each GPU
/// type with at least `n` idle GPUs of that type and room for the job's CPUs and memory, which
/// is where `place` on the whole view would put it.
fn first_nodes_with_idle(st: &State<'_>, j: usize, n: usize) -> Vec<usize> {
    let types = st.cfg.gpu_types.len();
    let mut done = vec![false; types];
    let mut idle = vec![0usize; types];
    let mut out = Vec::new();
    for (k, node) in st.nodes.iter().enumerate() {
        // Regression: a big job once waited forever for the first node of a type with enough
        // idle GPUs but too few CPUs, never shown a node of the same type that could host it.
        if !node_fits_host(st, k, &st.jobs[j]) {
            continue;
        }
        idle.iter_mut().for_each(|c| *c = 0);
        for &g in &node.gpus {
            if st.gpus[g].jobs.is_empty() {
                idle[st.gpus[g].gpu_type] += 1;
            }
        }
        for t in 0..types {
            if !done[t] && idle[t] >= n {
                done[t] = true;
                out.extend(
                    node.gpus
                        .iter()
                        .copied()
                        .filter(|&g| st.gpus[g].gpu_type == t && st.gpus[g].jobs.is_empty()),
                );
            }
        }
    }
    out.sort_unstable();
    out
}

pub struct HeshareIdeal {
    node_index: HashMap<String, usize>,
    params: ShareParams,
    /// Remembered sharing plans for the whole run; decisions need no reason text here.
    ctx: PlaceContext,
    /// Per running job, what the node helper is told of it.
    hints: FxHashMap<usize, Hints>,
}

impl HeshareIdeal {
    pub fn new(st: &State<'_>) -> HeshareIdeal {
        HeshareIdeal {
            node_index: st
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (n.name.clone(), i))
                .collect(),
            params: ShareParams::of(st.cfg),
            ctx: PlaceContext::simulation(),
            hints: FxHashMap::default(),
        }
    }
}

impl Scheduler for HeshareIdeal {
    fn name(&self) -> &'static str {
        "heshare-whole-view"
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
            time_limit_s: Some(job.limit_s),
            reference_share: None,
            // What its user knows it needs, as it would ask gres/mps (the trace's share).
            demand_pct: is_share(job).then(|| super::trace_share(job).get()),
            learned: None,
        };
        // One GPU per group of identical GPUs (or the idle ones for several whole GPUs): the
        // decision `place` makes on the whole view, without scanning six thousand GPUs.
        let slots: Vec<&GpuSlot> = if job.num_gpus == 1 {
            st.groups
                .firsts_for(&req.user, st.cfg.policy.allow_cross_user_sharing)
                .into_iter()
                .map(|g| &st.view.gpus[g])
                .collect()
        } else {
            first_nodes_with_idle(st, j, job.num_gpus as usize)
                .into_iter()
                .map(|g| &st.view.gpus[g])
                .collect()
        };
        let mut plan = place_slots(st.cfg, &slots, &[], &req, &mut self.ctx).ok()?;
        let fits = |plan: &crate::policy::Plan| {
            plan.decision
                .node
                .as_deref()
                .and_then(|n| self.node_index.get(n))
                .is_some_and(|&k| node_fits_host(st, k, job))
        };
        if !fits(&plan) {
            // The first GPU of a group sits on a node too small for this job: decide again among
            // the GPUs whose nodes can host it (rare, so the whole view).
            let hosts: Vec<&GpuSlot> = st
                .view
                .gpus
                .iter()
                .enumerate()
                .filter(|(g, _)| node_fits_host(st, st.gpus[*g].node, job))
                .map(|(_, s)| s)
                .collect();
            plan = place_slots(st.cfg, &hosts, &[], &req, &mut self.ctx).ok()?;
            if !fits(&plan) {
                return None;
            }
        }
        let d = plan.decision;
        self.hints.insert(
            j,
            Hints {
                limit_type: d.limit_type.as_deref().and_then(|t| st.cfg.gpu_type(t)),
                demand_pct: req.demand_pct,
                class: HintClass::Catalog(job.class),
                limit_s: None,
            },
        );
        let node = *self.node_index.get(d.node.as_deref()?)?;
        // It decides on the whole view; a node this attempt may not use (powered down before
        // powered-up ones are tried, a backfill reservation) waits for a later attempt.
        if !st.usable(node) {
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
        node_helper_clock(st, gpu, &mut self.ctx, self.params, &self.hints)
    }

    fn finished(&mut self, _st: &State<'_>, j: usize) {
        self.hints.remove(&j);
    }
}

/// What the plugin's SPANK environment tells the node helper about a job: the type its time
/// limit is written for, what its user said it needs of a reference GPU, and what it is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hints {
    pub limit_type: Option<usize>,
    pub demand_pct: Option<u8>,
    pub class: HintClass,
    /// A profiled job's time limit, which caps its learned runtime.
    pub limit_s: Option<f64>,
}

/// What the node helper is told a job is (`SPANK_HESHARE_CLASS` or `SPANK_HESHARE_PROFILE`).
#[derive(Debug, Clone, Default, PartialEq)]
pub enum HintClass {
    /// A catalog class (the label its user gave, or the truth for heshare-whole-view).
    Catalog(usize),
    /// The class its profile placed it with.
    Learned(std::sync::Arc<crate::model::JobClass>),
    /// Nothing: the helper keeps the GPU at its default clock.
    #[default]
    Unknown,
}

/// The SM clock the node helper locks for `gpu`'s jobs: the sharing optimizer on their classes
/// (sized as `hints` say), shares and bounds, each bound capped by the job's time limit (the
/// default clock if it finds none within every bound).
pub fn node_helper_clock(
    st: &State<'_>,
    gpu: usize,
    ctx: &mut PlaceContext,
    params: ShareParams,
    hints: &FxHashMap<usize, Hints>,
) -> Mhz {
    let g = &st.gpus[gpu];
    let gt = &st.cfg.gpu_types[g.gpu_type];
    use crate::policy::node_clock::{Tenant, clock_of, node_clock, tenant_bound};
    let none = Hints::default();
    let mut tenants: Vec<Tenant<'_>> = Vec::with_capacity(g.jobs.len());
    for &j in &g.jobs {
        let h = hints.get(&j).unwrap_or(&none);
        // As the plugin's SPANK environment tells the node helper of the job: the class it is
        // predicted with (a catalog class sized as placement sized it), the one its bound is
        // read against, and a profile's with its time limit.
        let (class, model, learned) = match &h.class {
            HintClass::Catalog(c) => {
                let raw = &st.cfg.classes[*c];
                let sized = st.cfg.class_on(&raw.name, h.demand_pct, gt).unwrap_or(raw);
                (Some(sized), Some(raw), None)
            }
            HintClass::Learned(c) => (Some(c.as_ref()), Some(c.as_ref()), Some(c.as_ref())),
            HintClass::Unknown => (None, None, None),
        };
        let learned_limit = learned.zip(h.limit_s);
        tenants.push(Tenant {
            class,
            share: st.jobs[j].share,
            user: st.jobs[j].user,
            bound: tenant_bound(st.cfg, gt, model, None, h.limit_type, learned_limit),
            keeps_default: learned_limit
                .is_some_and(|(c, l)| crate::policy::keeps_default_clock(st.cfg, c, gt, l)),
            risk: learned_limit.map(|(c, l)| {
                crate::policy::belief::LimitRisk::of(
                    st.cfg,
                    c,
                    gt,
                    h.limit_type.and_then(|t| st.cfg.gpu_types.get(t)),
                    l,
                )
            }),
        });
    }
    node_clock(&tenants, |jobs| {
        clock_of(&ctx.optimize(st.cfg, g.gpu_type, jobs, params))
    })
    .unwrap_or(gt.default_sm_clock)
}
