//! Slurm's own choice of node and GPUs for a job's GRES request, as `select/cons_tres` of Slurm
//! 22.05 makes it (src/plugins/select/cons_tres/job_test.c, `_eval_nodes`), for the schedulers
//! that hand their decision to Slurm: plain Slurm (whole GPUs or gres/mps) and heshare's shipped
//! path (the plugin rewrites the request, Slurm places it).
//!
//! * Usable nodes: enough free CPU and memory, a GPU type the request allows (a node-feature
//!   constraint or a typed GRES), and GPUs for it: that many idle GPUs for `gpu:N`, one GPU with
//!   that much MPS room for `mps:P` (a GPU serves either `gpu` or `mps` jobs; gres.conf
//!   `Flags=all_sharing`, as heshare's install advice sets, so any GPU of the node may).
//! * With `--prefer`, the preferred types are tried first, then the required ones.
//! * Among usable nodes of equal weight (all here), the consecutive set (in node order) with the
//!   fewest available CPUs that suffices, and in it the single node with the fewest available
//!   CPUs: Slurm's "tightest fit".
//! * GPUs within the node: first fit in index (gres.conf) order.

use super::engine::{SimJob, State};
use super::schedulers::Placement;
use crate::units::SharePct;

/// A job's GRES request as Slurm holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct GresRequest {
    pub gpus: u32,
    /// `mps:P` instead of `gpu:N`.
    pub mps_pct: Option<u8>,
    /// GPU types the job may run on (typed GRES or feature constraint); empty = any.
    pub types: Vec<usize>,
    /// `--prefer`: tried first.
    pub prefer: Option<usize>,
}

impl GresRequest {
    /// The request a job's trace entry makes of plain Slurm: whole GPUs of its allowed types.
    pub fn whole(job: &SimJob) -> GresRequest {
        GresRequest {
            gpus: job.num_gpus,
            mps_pct: None,
            types: job.gpu_types.clone(),
            prefer: None,
        }
    }

    /// What the job's user asks of Slurm: `--gres=mps:P` (its trace share) for a fraction of
    /// one GPU, else whole GPUs of its allowed types.
    pub fn as_asked(job: &SimJob) -> GresRequest {
        GresRequest {
            mps_pct: crate::sim::schedulers::is_share(job)
                .then(|| crate::sim::schedulers::trace_share(job).get()),
            ..GresRequest::whole(job)
        }
    }
}

/// Where Slurm starts the job now, or `None` if no node can take it.
pub fn select(st: &State<'_>, job: &SimJob, req: &GresRequest) -> Option<Placement> {
    if let Some(p) = req.prefer {
        if req.types.is_empty() || req.types.contains(&p) {
            if let Some(pl) = pass(st, job, req, &[p]) {
                return Some(pl);
            }
        }
    }
    pass(st, job, req, &req.types)
}

/// The GPUs `node` gives the request, if it can take it.
fn gpus_on(
    st: &State<'_>,
    job: &SimJob,
    req: &GresRequest,
    types: &[usize],
    node: usize,
) -> Option<Vec<usize>> {
    let n = &st.nodes[node];
    if !st.usable(node)
        || n.res.cpu_left < job.pod.cpu_milli
        || n.res.memory_left < job.pod.memory_mib
    {
        return None;
    }
    let allowed = |g: usize| types.is_empty() || types.contains(&st.gpus[g].gpu_type);
    match req.mps_pct {
        Some(p) => n
            .gpus
            .iter()
            .copied()
            .find(|&g| {
                allowed(g)
                    && !st.gpus[g].held_exclusively(&st.jobs)
                    && st.gpus[g].used_share(&st.jobs) + u32::from(p) <= 100
            })
            .map(|g| vec![g]),
        None => {
            let idle: Vec<usize> = n
                .gpus
                .iter()
                .copied()
                .filter(|&g| allowed(g) && st.gpus[g].jobs.is_empty())
                .take(req.gpus as usize)
                .collect();
            (idle.len() == req.gpus as usize).then_some(idle)
        }
    }
}

/// A run of consecutive usable nodes: its CPUs and its best node so far.
#[derive(Debug, Clone)]
struct Run {
    cpus: i64,
    best: Pick,
}

/// A usable node: its free CPUs and the GPUs it gives the job.
#[derive(Debug, Clone)]
struct Pick {
    cpus: i64,
    gpus: Vec<usize>,
}

fn pass(st: &State<'_>, job: &SimJob, req: &GresRequest, types: &[usize]) -> Option<Placement> {
    let mut best: Option<Run> = None;
    let mut run: Option<Run> = None;
    let close = |run: &mut Option<Run>, best: &mut Option<Run>| {
        if let Some(r) = run.take() {
            if best.as_ref().is_none_or(|b| r.cpus < b.cpus) {
                *best = Some(r);
            }
        }
    };
    for node in 0..st.nodes.len() {
        match gpus_on(st, job, req, types, node) {
            Some(gpus) => {
                let pick = Pick {
                    cpus: st.nodes[node].res.cpu_left,
                    gpus,
                };
                match run.as_mut() {
                    Some(r) => {
                        r.cpus += pick.cpus;
                        if pick.cpus < r.best.cpus {
                            r.best = pick;
                        }
                    }
                    None => {
                        run = Some(Run {
                            cpus: pick.cpus,
                            best: pick,
                        });
                    }
                }
            }
            None => close(&mut run, &mut best),
        }
    }
    close(&mut run, &mut best);
    let gpus = best?.best.gpus;
    let share = match req.mps_pct {
        Some(p) => SharePct::new(p).unwrap_or(SharePct::FULL),
        None => SharePct::FULL,
    };
    Some(Placement {
        gpus,
        share,
        exclusive: req.mps_pct.is_none(),
    })
}
