//! FGD (Weng et al., USENIX ATC'23) and FGD with PWR (Lettich et al., CCGrid'25), with the same
//! scores as in placement mode (`sim::packing`), over the live cluster.
//! * `fgd`: the node and GPU that least increase fragmentation against the trace's typical pods.
//! * `fgd-pwr`: PWR's power score (the fall in the node's power, PWR's step model of
//!   `GetEnergyConsumptionNode`: a GPU with any allocation draws its full power, an idle one its
//!   idle power; a CPU package with any allocated core its full power, else its idle power,
//!   packages counted from the node's vCPUs), min-max normalised to 0..=100 over the feasible
//!   nodes as PWR's NormalizeScore does, added with equal weight to FGD's score. The power
//!   figures are PWR's own table (`data/pwr-ccgrid25-power-model`); for a GPU model it lacks
//!   (H100), the datasheet's maximum (the catalog's) as full power and PWR's A100 ratio (50 of
//!   400 W) of it as idle, so its score has something to score.
//!
//! Default clocks; first best node in node order. A fractional job's share is the trace's request
//! (`gpu_milli`, rounded up to whole percents) on whatever type it lands on, as for slurm-mps:
//! every sharing baseline sizes shares the same way. Shares are served through MPS on the
//! simulated Slurm cluster, under the same node rule for another user's share as every
//! scheduler's; FGD, like Slurm's gres/mps, does not look at users.
//!
//! The gap to a Slurm site: FGD and PWR choose the node and the GPU themselves, as their
//! Kubernetes scheduler plugins do. Slurm has no select plugin for either, so a Slurm site
//! could not run them as simulated here: they stand for the best their rules could do.

use super::{Placement, Scheduler, is_share, trace_share};
use crate::sim::engine::State;
use crate::sim::packing::{NodeRes, Pod, Scorer, TypicalPods};
use crate::units::SharePct;

pub struct Fgd<'a> {
    scorer: Scorer<'a>,
}

impl<'a> Fgd<'a> {
    pub fn new(typical: &'a TypicalPods) -> Fgd<'a> {
        Fgd {
            scorer: Scorer::new(typical),
        }
    }
}

/// The pod as FGD sees it: the share rounded to whole percents, as Slurm would allocate it.
fn pod_of(st: &State<'_>, j: usize) -> Pod {
    let job = &st.jobs[j];
    let mut pod = job.pod.clone();
    pod.gpu_milli = if is_share(job) {
        u32::from(trace_share(job).get()) * 10
    } else {
        1000
    };
    pod
}

fn placement(st: &State<'_>, j: usize, node: usize, local: &[usize]) -> Placement {
    let job = &st.jobs[j];
    let gpus = local.iter().map(|&l| st.nodes[node].gpus[l]).collect();
    if is_share(job) {
        Placement {
            gpus,
            share: trace_share(job),
            exclusive: false,
        }
    } else {
        Placement {
            gpus,
            share: SharePct::FULL,
            exclusive: true,
        }
    }
}

fn mps_ok(st: &State<'_>, node: usize, pod: &Pod) -> bool {
    pod.gpu_milli >= 1000
        || st
            .cfg
            .gpu_types
            .get(st.nodes[node].res.gpu_type.unwrap_or(usize::MAX))
            .is_some_and(|g| g.mps)
}

impl Scheduler for Fgd<'_> {
    fn name(&self) -> &'static str {
        "fgd"
    }
    fn place(&mut self, st: &State<'_>, j: usize) -> Option<Placement> {
        let pod = pod_of(st, j);
        let mut best: Option<(i64, usize, Vec<usize>)> = None;
        for n in 0..st.nodes.len() {
            let res = &st.nodes[n].res;
            if !st.usable(n) || !res.fits(&pod) || !mps_ok(st, n, &pod) {
                continue;
            }
            let (s, gpus) = self.scorer.fgd(res, &pod);
            if best.as_ref().is_none_or(|(b, _, _)| s > *b) {
                best = Some((s, n, gpus));
            }
        }
        best.map(|(_, n, gpus)| placement(st, j, n, &gpus))
    }
}

pub struct FgdPwr<'a> {
    scorer: Scorer<'a>,
}

impl<'a> FgdPwr<'a> {
    pub fn new(typical: &'a TypicalPods) -> FgdPwr<'a> {
        FgdPwr {
            scorer: Scorer::new(typical),
        }
    }
}

/// PWR's step power of a node in watts (GPUs and CPU packages), with `res` as its resources.
fn node_power(st: &State<'_>, node: usize, res: &NodeRes) -> f64 {
    let Some(t) = res.gpu_type else { return 0.0 };
    let g = &st.cfg.gpu_types[t];
    let (idle, full) = crate::sim::meter::pwr_gpu(&g.name)
        .unwrap_or((g.max_power.0 * 50.0 / 400.0, g.max_power.0));
    let gpus: f64 = res
        .gpu_left
        .iter()
        .map(|&l| if l < 1000 { full } else { idle })
        .sum();
    let (cpu_idle, cpu_full, cores) = crate::sim::meter::pwr_cpu(&g.name);
    #[allow(clippy::cast_precision_loss)]
    let capacity = st.nodes[node].cpu_milli as f64;
    #[allow(clippy::cast_precision_loss)]
    let left = res.cpu_left.max(0) as f64;
    let real = (capacity / 1000.0 / 2.0).ceil();
    let idle_cores = (left / 1000.0 / 2.0).floor();
    let packages = (real / cores.max(1.0)).ceil();
    let active = ((real - idle_cores).max(0.0) / cores.max(1.0)).ceil();
    gpus + cpu_idle * (packages - active) + cpu_full * active
}

impl Scheduler for FgdPwr<'_> {
    fn name(&self) -> &'static str {
        "fgd-pwr"
    }
    fn place(&mut self, st: &State<'_>, j: usize) -> Option<Placement> {
        let pod = pod_of(st, j);
        // (node, fgd score, pwr raw score, gpus)
        let mut cands: Vec<(usize, i64, f64, Vec<usize>)> = Vec::new();
        for n in 0..st.nodes.len() {
            let res = &st.nodes[n].res;
            if !st.usable(n) || !res.fits(&pod) || !mps_ok(st, n, &pod) {
                continue;
            }
            let (fgd, gpus) = self.scorer.fgd(res, &pod);
            let mut after = res.clone();
            after.take(&pod, &gpus);
            cands.push((
                n,
                fgd,
                node_power(st, n, res) - node_power(st, n, &after),
                gpus,
            ));
        }
        let (lo, hi) = cands
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), c| {
                (l.min(c.2), h.max(c.2))
            });
        let norm = |p: f64| {
            if hi > lo {
                ((p - lo) * 100.0 / (hi - lo)).floor()
            } else {
                100.0
            }
        };
        let mut best: Option<(f64, usize)> = None;
        for (k, c) in cands.iter().enumerate() {
            #[allow(clippy::cast_precision_loss)]
            let s = 0.5 * c.1 as f64 + 0.5 * norm(c.2);
            if best.is_none_or(|(b, _)| s > b) {
                best = Some((s, k));
            }
        }
        best.map(|(_, k)| placement(st, j, cands[k].0, &cands[k].3))
    }
}
