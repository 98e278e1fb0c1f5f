//! Time mode: a discrete-event simulation of jobs arriving, running (alone or sharing a GPU),
//! and finishing, with every GPU's power integrated over time.
//!
//! Events are ordered by (time, sequence number), so equal times resolve in creation order and a
//! seed fixes the whole run. A job's progress rate comes from the same model the policy uses
//! (`model::predict` for the jobs on its GPU at that GPU's clock); whenever a GPU's set of jobs
//! or clock changes, its jobs' progress is brought up to date, their rates recomputed and their
//! finish events re-issued (stale ones are recognised by a version number).

use super::packing::{NodeRes, Pod};
use super::rng::SplitMix;
use super::schedulers::{Placement, Scheduler};
use super::trace::TraceJob;
use crate::config::Config;
use crate::model::{JobKind, ModelParams, Tenant, alone_runtime, predict};
use crate::policy::{ClusterView, GpuSlot, PlacedJob};
use crate::units::{Mhz, SharePct};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

/// A job as the simulator runs it.
#[derive(Debug, Clone)]
pub struct SimJob {
    /// Index into `Config::classes`.
    pub class: usize,
    pub num_gpus: u32,
    /// The share the trace asked for, per GPU (1000 = whole GPUs).
    pub gpu_milli: u32,
    pub gpu_types: Vec<usize>,
    pub user: u32,
    pub submit_s: f64,
    /// Work, in seconds alone on a whole reference GPU at its default clock.
    pub work_s: f64,
    pub pod: Pod,
    // Running state.
    pub gpus: Vec<usize>,
    pub share: SharePct,
    pub exclusive: bool,
    pub start_s: Option<f64>,
    pub finish_s: Option<f64>,
    done_s: f64,
    rate: f64,
    last_s: f64,
    version: u32,
    pub energy_j: f64,
}

/// One GPU of the simulated cluster.
#[derive(Debug, Clone)]
pub struct SimGpu {
    pub node: usize,
    pub gpu_type: usize,
    /// Index of this GPU on its node.
    pub index: u32,
    /// Jobs on it, in arrival order.
    pub jobs: Vec<usize>,
    pub clock: Mhz,
    power_w: f64,
    /// Attributed power per job in `jobs`.
    job_power_w: Vec<f64>,
    last_s: f64,
    pub busy_energy_j: f64,
    pub idle_energy_j: f64,
    pub busy_share_s: f64,
    busy_frac: f64,
}

impl SimGpu {
    pub fn used_share(&self, jobs: &[SimJob]) -> u32 {
        self.jobs
            .iter()
            .map(|&j| u32::from(jobs[j].share.get()))
            .sum()
    }

    pub fn held_exclusively(&self, jobs: &[SimJob]) -> bool {
        self.jobs.iter().any(|&j| jobs[j].exclusive)
    }
}

/// A node: its GPUs (indices into `State::gpus`) and its CPU/memory/GPU bookkeeping.
#[derive(Debug, Clone)]
pub struct SimNode {
    pub name: String,
    pub gpus: Vec<usize>,
    pub res: NodeRes,
    busy_gpus: usize,
    idle_since: f64,
    /// Idle energy of this node's GPUs during stretches when all of them were idle.
    whole_idle_j: f64,
}

/// Everything a scheduler may look at.
pub struct State<'a> {
    pub cfg: &'a Config,
    pub params: ModelParams,
    pub nodes: Vec<SimNode>,
    pub gpus: Vec<SimGpu>,
    pub jobs: Vec<SimJob>,
    /// The same cluster as `policy::ClusterView`, kept in step for heshare's placement.
    pub view: ClusterView,
    /// `view`'s GPUs grouped by type and occupants, kept in step with it.
    pub groups: crate::policy::GpuGroups,
    pub now: f64,
}

impl State<'_> {
    /// Predicted behaviour of `gpu`'s jobs at `clock`.
    pub fn predict_gpu(&self, gpu: usize, clock: Mhz) -> crate::model::GpuPrediction {
        let g = &self.gpus[gpu];
        let tenants: Vec<Tenant<'_>> = g
            .jobs
            .iter()
            .map(|&j| Tenant {
                class: &self.cfg.classes[self.jobs[j].class],
                share: self.jobs[j].share,
                user: self.jobs[j].user,
            })
            .collect();
        let gt = &self.cfg.gpu_types[g.gpu_type];
        predict(
            gt,
            &self.cfg.gpu_types[self.cfg.reference_gpu],
            &tenants,
            clock,
            self.params,
        )
    }

    pub fn type_allowed(&self, job: &SimJob, gpu_type: usize) -> bool {
        job.gpu_types.is_empty() || job.gpu_types.contains(&gpu_type)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Event {
    Arrival(usize),
    Finish(usize, u32),
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Queued {
    t: f64,
    seq: u64,
    ev: Event,
}

impl Eq for Queued {}
impl Ord for Queued {
    // Reversed for BinaryHeap (a max-heap): earliest time, then lowest sequence number first.
    fn cmp(&self, o: &Self) -> Ordering {
        o.t.total_cmp(&self.t).then(o.seq.cmp(&self.seq))
    }
}
impl PartialOrd for Queued {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// Workload generation parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkloadParams {
    /// Offered GPU load: mean requested GPU share in use over capacity.
    pub load: f64,
    pub jobs: usize,
    /// Longer trace durations are cut to this (the openb tail reaches 145 days).
    pub max_duration_s: f64,
    pub users: u32,
    pub seed: u64,
}

/// Draws `params.jobs` GPU jobs from the trace's (num_gpu, gpu_milli, gpu_spec, duration)
/// distribution with Poisson arrivals sized so that the offered load is `params.load` of
/// `gpu_count` GPUs. Job classes are assigned as documented in `slurm-conf/heshare.toml`: a share
/// becomes the inference class whose demand is nearest its fraction, a whole-GPU job a training
/// class drawn uniformly.
pub fn generate_jobs(
    cfg: &Config,
    trace: &[TraceJob],
    gpu_count: usize,
    params: WorkloadParams,
) -> Vec<SimJob> {
    // A different stream from the placement-mode shuffle of the same seed.
    let mut rng = SplitMix::new(params.seed ^ 0x005E_ED0F_70B5);
    let gpu_jobs: Vec<&TraceJob> = trace.iter().filter(|j| j.num_gpus > 0).collect();
    if gpu_jobs.is_empty() || gpu_count == 0 {
        return vec![];
    }
    let training = cfg.classes_of(JobKind::Training);
    let inference = cfg.classes_of(JobKind::Inference);
    let duration = |j: &TraceJob| j.duration_s.clamp(1.0, params.max_duration_s);
    let demand = |j: &TraceJob| f64::from(j.num_gpus) * f64::from(j.gpu_milli) / 1000.0;
    #[allow(clippy::cast_precision_loss)]
    let mean_gpu_seconds = gpu_jobs
        .iter()
        .map(|j| demand(j) * duration(j))
        .sum::<f64>()
        / gpu_jobs.len() as f64;
    #[allow(clippy::cast_precision_loss)]
    let mean_gap = mean_gpu_seconds / (params.load * gpu_count as f64);
    let mut t = 0.0;
    (0..params.jobs)
        .map(|_| {
            let src = gpu_jobs[rng.below(gpu_jobs.len())];
            t += rng.exp(mean_gap);
            let fraction = f64::from(src.gpu_milli) / 1000.0;
            let class = if src.gpu_milli < 1000 && !inference.is_empty() {
                *inference
                    .iter()
                    .min_by(|&&a, &&b| {
                        (cfg.classes[a].demand - fraction)
                            .abs()
                            .total_cmp(&(cfg.classes[b].demand - fraction).abs())
                    })
                    .unwrap_or(&inference[0])
            } else if !training.is_empty() {
                training[rng.below(training.len())]
            } else {
                0
            };
            let user = u32::try_from(rng.below(params.users.max(1) as usize)).unwrap_or(0);
            SimJob {
                class,
                num_gpus: src.num_gpus,
                gpu_milli: src.gpu_milli,
                gpu_types: src.gpu_types.clone(),
                user,
                submit_s: t,
                work_s: duration(src),
                pod: Pod::from_trace(src),
                gpus: vec![],
                share: SharePct::FULL,
                exclusive: true,
                start_s: None,
                finish_s: None,
                done_s: 0.0,
                rate: 0.0,
                last_s: 0.0,
                version: 0,
                energy_j: 0.0,
            }
        })
        .collect()
}

/// What one run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct RunMetrics {
    pub jobs: usize,
    pub busy_energy_j: f64,
    /// Idle energy with every GPU always on.
    pub idle_energy_j: f64,
    /// Idle energy when idle nodes power down after `suspend_time_s` (Slurm's SuspendTime).
    pub idle_energy_power_saving_j: f64,
    pub jct_s: Vec<f64>,
    pub makespan_s: f64,
    /// Allocated GPU share-time over capacity-time.
    pub alloc_rate: f64,
    /// SM-busy GPU time over capacity-time (the model's busy share).
    pub utilisation: f64,
    pub violations: usize,
    /// Sum over jobs of the least energy each could need alone (best type and clock, no idle).
    pub energy_lower_bound_j: f64,
}

/// Builds the simulated cluster from a node list.
pub fn build_state<'a>(
    cfg: &'a Config,
    nodes: &[crate::cluster::Node],
    jobs: Vec<SimJob>,
) -> State<'a> {
    let mut gpus = Vec::new();
    let mut sim_nodes = Vec::new();
    let mut view = ClusterView::default();
    for n in nodes {
        let Some(t) = n.gpu_type else { continue };
        let first = gpus.len();
        for index in 0..n.gpus {
            let gt = &cfg.gpu_types[t];
            gpus.push(SimGpu {
                node: sim_nodes.len(),
                gpu_type: t,
                index,
                jobs: vec![],
                clock: gt.default_sm_clock,
                power_w: gt.idle_power.0,
                job_power_w: vec![],
                last_s: 0.0,
                busy_energy_j: 0.0,
                idle_energy_j: 0.0,
                busy_share_s: 0.0,
                busy_frac: 0.0,
            });
            view.gpus.push(GpuSlot {
                node: n.name.clone(),
                index,
                gpu_type: t,
                jobs: vec![],
            });
        }
        sim_nodes.push(SimNode {
            name: n.name.clone(),
            gpus: (first..gpus.len()).collect(),
            res: NodeRes::new(
                Some(t),
                i64::try_from(n.cpu_milli).unwrap_or(i64::MAX),
                i64::try_from(n.memory_mib).unwrap_or(i64::MAX),
                n.gpus,
            ),
            busy_gpus: 0,
            idle_since: 0.0,
            whole_idle_j: 0.0,
        });
    }
    State {
        cfg,
        params: ModelParams {
            contention_kappa: cfg.policy.contention_kappa,
        },
        nodes: sim_nodes,
        gpus,
        jobs,
        groups: crate::policy::GpuGroups::new(&view),
        view,
        now: 0.0,
    }
}

/// Runs the jobs of `st` to completion under `sched`.
pub fn run(
    st: &mut State<'_>,
    sched: &mut dyn Scheduler,
    suspend_time_s: f64,
    mut progress: impl FnMut(usize),
) -> RunMetrics {
    let mut heap = BinaryHeap::new();
    let mut seq = 0u64;
    for j in 0..st.jobs.len() {
        heap.push(Queued {
            t: st.jobs[j].submit_s,
            seq,
            ev: Event::Arrival(j),
        });
        seq += 1;
    }
    let mut waiting: VecDeque<usize> = VecDeque::new();
    let mut done = 0usize;
    let mut idle_saving = 0.0;
    while let Some(Queued { t, ev, .. }) = heap.pop() {
        st.now = t;
        match ev {
            Event::Arrival(j) => {
                // Backfill: a job that fits now starts now, even with others waiting (they
                // fit nowhere, so it delays none of them in this reservation-free model).
                if try_start(
                    st,
                    sched,
                    j,
                    &mut heap,
                    &mut seq,
                    &mut idle_saving,
                    suspend_time_s,
                ) {
                    continue;
                }
                waiting.push_back(j);
            }
            Event::Finish(j, v) => {
                if st.jobs[j].version != v || st.jobs[j].finish_s.is_some() {
                    continue;
                }
                let freed_node = st.gpus[st.jobs[j].gpus[0]].node;
                finish(st, sched, j, &mut heap, &mut seq);
                done += 1;
                progress(done);
                // Freed resources: start what now fits, in queue order (backfill without
                // reservations, within a bounded look-ahead as Slurm's bf_max_job_test does).
                // Only this node gained room since every waiting job last failed, so a job that
                // cannot use it is not asked about again.
                let mut k = 0;
                while k < waiting.len() && k < 100 {
                    let wj = waiting[k];
                    if could_use(st, wj, freed_node)
                        && try_start(
                            st,
                            sched,
                            wj,
                            &mut heap,
                            &mut seq,
                            &mut idle_saving,
                            suspend_time_s,
                        )
                    {
                        waiting.remove(k);
                    } else {
                        k += 1;
                    }
                }
            }
        }
    }
    let end = st.now;
    let mut m = RunMetrics {
        jobs: st.jobs.len(),
        busy_energy_j: 0.0,
        idle_energy_j: 0.0,
        idle_energy_power_saving_j: idle_saving,
        jct_s: st
            .jobs
            .iter()
            .filter_map(|j| j.finish_s.map(|f| f - j.submit_s))
            .collect(),
        makespan_s: end,
        alloc_rate: 0.0,
        utilisation: 0.0,
        violations: 0,
        energy_lower_bound_j: 0.0,
    };
    for g in 0..st.gpus.len() {
        advance_gpu(st, g, end);
    }
    // Close the idle stretch of every node at the end of the run.
    for n in 0..st.nodes.len() {
        if st.nodes[n].busy_gpus == 0 {
            let idle_w: f64 = st.nodes[n]
                .gpus
                .iter()
                .map(|&g| st.cfg.gpu_types[st.gpus[g].gpu_type].idle_power.0)
                .sum();
            let stretch = end - st.nodes[n].idle_since;
            m.idle_energy_power_saving_j += idle_w * stretch.min(suspend_time_s);
            st.nodes[n].whole_idle_j += idle_w * stretch;
        }
    }
    // Idle GPUs on nodes that stay up (some other GPU busy) always draw idle power.
    m.idle_energy_power_saving_j += partial_node_idle(st);
    let capacity_time = st.gpus.len() as f64 * end.max(1e-9);
    let mut alloc = 0.0;
    for g in &st.gpus {
        m.busy_energy_j += g.busy_energy_j;
        m.idle_energy_j += g.idle_energy_j;
        m.utilisation += g.busy_share_s;
    }
    let reference = &st.cfg.gpu_types[st.cfg.reference_gpu];
    let mut lower_bounds: std::collections::HashMap<(usize, Vec<usize>), f64> =
        std::collections::HashMap::new();
    for j in &st.jobs {
        let (Some(s), Some(f)) = (j.start_s, j.finish_s) else {
            continue;
        };
        alloc += f64::from(j.num_gpus) * j.share.fraction() * (f - s);
        let class = &st.cfg.classes[j.class];
        let gt = &st.cfg.gpu_types[st.gpus[j.gpus[0]].gpu_type];
        let alone = alone_runtime(class, gt, reference).0 * j.work_s / class.reference_runtime_s;
        let bound = class.slowdown_bound.unwrap_or(st.cfg.policy.slowdown_bound);
        if (f - s) > alone * bound * (1.0 + 1e-6) {
            m.violations += 1;
        }
        // The best energy per unit of work depends only on the class and the allowed types.
        let per_work = *lower_bounds
            .entry((j.class, j.gpu_types.clone()))
            .or_insert_with(|| lower_bound_per_work(st, j.class, &j.gpu_types));
        m.energy_lower_bound_j += per_work * j.work_s * f64::from(j.num_gpus);
    }
    m.alloc_rate = alloc / capacity_time;
    m.utilisation /= capacity_time;
    m
}

/// Whether job `j` could possibly start on `node`: an allowed GPU type, enough idle GPUs for a
/// whole-GPU job or a GPU not held exclusively with room left for a share. A cheap necessary
/// condition; the scheduler still decides.
fn could_use(st: &State<'_>, j: usize, node: usize) -> bool {
    let job = &st.jobs[j];
    let n = &st.nodes[node];
    if n.res.cpu_left < job.pod.cpu_milli || n.res.memory_left < job.pod.memory_mib {
        return false;
    }
    let allowed = |g: usize| st.type_allowed(job, st.gpus[g].gpu_type);
    if job.num_gpus == 1 && job.gpu_milli < 1000 {
        n.gpus.iter().any(|&g| {
            allowed(g)
                && !st.gpus[g].held_exclusively(&st.jobs)
                && st.gpus[g].used_share(&st.jobs) < 100
        })
    } else {
        n.gpus
            .iter()
            .filter(|&&g| allowed(g) && st.gpus[g].jobs.is_empty())
            .count()
            >= job.num_gpus as usize
    }
}

/// Idle energy of idle GPUs on nodes that were up because another of their GPUs was busy:
/// everything in `idle_energy_j` that is not a whole-node idle stretch.
fn partial_node_idle(st: &State<'_>) -> f64 {
    st.gpus.iter().map(|g| g.idle_energy_j).sum::<f64>()
        - st.nodes.iter().map(|n| n.whole_idle_j).sum::<f64>()
}

fn lower_bound_per_work(st: &State<'_>, class_idx: usize, allowed: &[usize]) -> f64 {
    let class = &st.cfg.classes[class_idx];
    let reference = &st.cfg.gpu_types[st.cfg.reference_gpu];
    let mut best = f64::INFINITY;
    for (t, gt) in st.cfg.gpu_types.iter().enumerate() {
        if !(allowed.is_empty() || allowed.contains(&t)) {
            continue;
        }
        for &f in &gt.sm_clocks {
            let p = predict(
                gt,
                reference,
                &[Tenant {
                    class,
                    share: SharePct::FULL,
                    user: 0,
                }],
                f,
                st.params,
            );
            best = best.min(p.jobs[0].energy().0 / class.reference_runtime_s);
        }
    }
    if best.is_finite() { best } else { 0.0 }
}

/// Brings `gpu`'s energy and its jobs' progress up to `t`.
fn advance_gpu(st: &mut State<'_>, gpu: usize, t: f64) {
    let g = &mut st.gpus[gpu];
    let dt = (t - g.last_s).max(0.0);
    if g.jobs.is_empty() {
        g.idle_energy_j += g.power_w * dt;
    } else {
        g.busy_energy_j += g.power_w * dt;
        g.busy_share_s += g.busy_frac * dt;
        for (k, &j) in g.jobs.iter().enumerate() {
            st.jobs[j].energy_j += g.job_power_w[k] * dt;
        }
    }
    g.last_s = t;
    let jobs: Vec<usize> = st.gpus[gpu].jobs.clone();
    for j in jobs {
        let job = &mut st.jobs[j];
        job.done_s += job.rate * (t - job.last_s).max(0.0);
        job.last_s = t;
    }
}

/// Applies the scheduler's clock to `gpu`, recomputes its jobs' rates and power, and re-issues
/// their finish events.
fn refresh_gpu(
    st: &mut State<'_>,
    sched: &mut dyn Scheduler,
    gpu: usize,
    heap: &mut BinaryHeap<Queued>,
    seq: &mut u64,
) {
    let t = st.now;
    if st.gpus[gpu].jobs.is_empty() {
        let gt = &st.cfg.gpu_types[st.gpus[gpu].gpu_type];
        let (clock, idle_w) = (gt.default_sm_clock, gt.idle_power.0);
        let g = &mut st.gpus[gpu];
        g.clock = clock;
        g.power_w = idle_w;
        g.job_power_w.clear();
        g.busy_frac = 0.0;
        return;
    }
    let clock = sched.clock(st, gpu);
    let pred = st.predict_gpu(gpu, clock);
    let g = &mut st.gpus[gpu];
    g.clock = clock;
    g.power_w = pred.power.0;
    g.job_power_w = pred.jobs.iter().map(|p| p.power.0).collect();
    g.busy_frac = pred.jobs.iter().map(|p| p.busy).sum::<f64>().min(1.0);
    let jobs = g.jobs.clone();
    for (k, j) in jobs.into_iter().enumerate() {
        let class = &st.cfg.classes[st.jobs[j].class];
        // Reference-seconds of work done per second.
        let rate_here = class.reference_runtime_s / pred.jobs[k].runtime.0;
        let job = &mut st.jobs[j];
        // A multi-GPU job moves at the pace of its slowest GPU; all its GPUs are alike here.
        job.rate = rate_here;
        job.version += 1;
        let left = (job.work_s - job.done_s).max(0.0);
        heap.push(Queued {
            t: t + left / job.rate.max(1e-12),
            seq: *seq,
            ev: Event::Finish(j, job.version),
        });
        *seq += 1;
    }
}

fn try_start(
    st: &mut State<'_>,
    sched: &mut dyn Scheduler,
    j: usize,
    heap: &mut BinaryHeap<Queued>,
    seq: &mut u64,
    idle_saving: &mut f64,
    suspend_time_s: f64,
) -> bool {
    let Some(Placement {
        gpus,
        share,
        exclusive,
    }) = sched.place(st, j)
    else {
        return false;
    };
    let t = st.now;
    for &g in &gpus {
        advance_gpu(st, g, t);
    }
    let node = st.gpus[gpus[0]].node;
    let local: Vec<usize> = gpus
        .iter()
        .map(|&g| usize::try_from(st.gpus[g].index).unwrap_or(0))
        .collect();
    {
        let job = &mut st.jobs[j];
        job.gpus = gpus.clone();
        job.share = share;
        job.exclusive = exclusive;
        job.start_s = Some(t);
        job.last_s = t;
    }
    let mut pod = st.jobs[j].pod.clone();
    pod.gpu_milli = if pod.num_gpus == 0 {
        0
    } else {
        u32::from(share.get()) * 10
    };
    st.nodes[node].res.take(&pod, &local);
    for &g in &gpus {
        if st.gpus[g].jobs.is_empty() {
            let n = &mut st.nodes[node];
            if n.busy_gpus == 0 {
                let idle_w: f64 = n
                    .gpus
                    .iter()
                    .map(|&x| st.cfg.gpu_types[st.gpus[x].gpu_type].idle_power.0)
                    .sum();
                let stretch = t - n.idle_since;
                *idle_saving += idle_w * stretch.min(suspend_time_s);
                n.whole_idle_j += idle_w * stretch;
            }
            n.busy_gpus += 1;
        }
        st.gpus[g].jobs.push(j);
        let user = format!("u{}", st.jobs[j].user);
        st.view.gpus[g].jobs.push(PlacedJob {
            class: st.jobs[j].class,
            share,
            user,
            exclusive,
        });
        st.groups.update(g, &st.view.gpus[g]);
    }
    for &g in &gpus {
        refresh_gpu(st, sched, g, heap, seq);
    }
    true
}

fn finish(
    st: &mut State<'_>,
    sched: &mut dyn Scheduler,
    j: usize,
    heap: &mut BinaryHeap<Queued>,
    seq: &mut u64,
) {
    let t = st.now;
    let gpus = st.jobs[j].gpus.clone();
    for &g in &gpus {
        advance_gpu(st, g, t);
    }
    st.jobs[j].finish_s = Some(t);
    let node = st.gpus[gpus[0]].node;
    let local: Vec<usize> = gpus
        .iter()
        .map(|&g| usize::try_from(st.gpus[g].index).unwrap_or(0))
        .collect();
    let mut pod = st.jobs[j].pod.clone();
    pod.gpu_milli = if pod.num_gpus == 0 {
        0
    } else {
        u32::from(st.jobs[j].share.get()) * 10
    };
    st.nodes[node].res.release(&pod, &local);
    for &g in &gpus {
        let pos = st.gpus[g].jobs.iter().position(|&x| x == j);
        if let Some(p) = pos {
            st.gpus[g].jobs.remove(p);
            st.view.gpus[g].jobs.remove(p);
            st.groups.update(g, &st.view.gpus[g]);
        }
        if st.gpus[g].jobs.is_empty() {
            let n = &mut st.nodes[node];
            n.busy_gpus -= 1;
            if n.busy_gpus == 0 {
                n.idle_since = t;
            }
        }
        refresh_gpu(st, sched, g, heap, seq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::BUNDLED_CONFIG;
    use crate::cluster::{OPENB_GPU_NODES, parse_node_list};
    use crate::sim::packing::TypicalPods;
    use crate::sim::schedulers::{NAMES, Placement, Scheduler, by_name};
    use crate::sim::trace::{OPENB_DEFAULT_PODS, TraceFormat, parse};
    use std::path::Path;

    /// Wraps a scheduler and checks the cluster's invariants every time it is asked to place.
    struct Checked<'a> {
        inner: Box<dyn Scheduler + 'a>,
        checks: usize,
    }

    impl Scheduler for Checked<'_> {
        fn name(&self) -> &'static str {
            self.inner.name()
        }
        fn place(&mut self, st: &State<'_>, j: usize) -> Option<Placement> {
            for g in &st.gpus {
                let used = g.used_share(&st.jobs);
                assert!(used <= 100, "a GPU is shared {used}%");
                assert!(
                    !g.held_exclusively(&st.jobs) || g.jobs.len() == 1,
                    "an exclusive job has company"
                );
            }
            self.checks += 1;
            let p = self.inner.place(st, j)?;
            let job = &st.jobs[j];
            assert_eq!(p.gpus.len(), job.num_gpus as usize);
            assert!(
                p.gpus
                    .iter()
                    .all(|&g| st.gpus[g].node == st.gpus[p.gpus[0]].node),
                "all GPUs on one node"
            );
            assert!(
                p.gpus
                    .iter()
                    .all(|&g| st.type_allowed(job, st.gpus[g].gpu_type))
            );
            Some(p)
        }
        fn clock(&mut self, st: &State<'_>, gpu: usize) -> Mhz {
            let c = self.inner.clock(st, gpu);
            assert!(st.cfg.gpu_types[st.gpus[gpu].gpu_type].supports_clock(c));
            c
        }
    }

    fn setup() -> (Config, Vec<crate::cluster::Node>, Vec<TraceJob>) {
        let cfg = Config::parse(BUNDLED_CONFIG, Path::new("h.toml")).expect("valid");
        let nodes = parse_node_list(OPENB_GPU_NODES, Path::new("n.csv"), &cfg).expect("nodes");
        let trace = parse(
            OPENB_DEFAULT_PODS,
            TraceFormat::Openb,
            Path::new("p.csv"),
            &cfg,
        )
        .expect("trace");
        // Two nodes of each model: a small cluster keeps queues and sharing busy.
        let mut small = Vec::new();
        for t in 0..cfg.gpu_types.len() {
            small.extend(
                nodes
                    .iter()
                    .filter(|n| n.gpu_type == Some(t))
                    .take(2)
                    .cloned(),
            );
        }
        (cfg, small, trace)
    }

    fn typical(trace: &[TraceJob]) -> TypicalPods {
        TypicalPods::from_pods(&trace.iter().map(Pod::from_trace).collect::<Vec<_>>())
    }

    fn simulate<'a>(
        cfg: &'a Config,
        nodes: &[crate::cluster::Node],
        trace: &[TraceJob],
        typical: &'a TypicalPods,
        name: &str,
        seed: u64,
    ) -> (RunMetrics, State<'a>) {
        let gpus = nodes.iter().map(|n| n.gpus as usize).sum();
        let wl = WorkloadParams {
            load: 0.8,
            jobs: 400,
            max_duration_s: 20_000.0,
            users: 3,
            seed,
        };
        let jobs = generate_jobs(cfg, trace, gpus, wl);
        let mut st = build_state(cfg, nodes, jobs);
        let inner = by_name(name, &st, typical).expect("known");
        let mut sched = Checked { inner, checks: 0 };
        let mut finished = 0;
        let m = run(&mut st, &mut sched, 600.0, |n| finished = n);
        assert!(sched.checks > 0);
        assert_eq!(
            finished,
            st.jobs.len(),
            "{name}: progress reports every finish"
        );
        (m, st)
    }

    #[test]
    fn every_job_finishes_once_and_energy_adds_up_under_every_scheduler() {
        let (cfg, nodes, trace) = setup();
        let typical = typical(&trace);
        for name in NAMES {
            let (m, st) = simulate(&cfg, &nodes, &trace, &typical, name, 7);
            assert_eq!(m.jct_s.len(), st.jobs.len(), "{name}: every job finished");
            for j in &st.jobs {
                let (s, f) = (j.start_s.expect("started"), j.finish_s.expect("finished"));
                assert!(
                    j.submit_s <= s && s <= f,
                    "{name}: submit {} start {s} finish {f}",
                    j.submit_s
                );
                assert!(
                    (j.done_s - j.work_s).abs() <= 1e-6 * j.work_s.max(1.0),
                    "{name}: work {} of {}",
                    j.done_s,
                    j.work_s
                );
            }
            assert!(
                st.gpus.iter().all(|g| g.jobs.is_empty()),
                "{name}: GPUs empty at the end"
            );
            let attributed: f64 = st.jobs.iter().map(|j| j.energy_j).sum();
            assert!(
                (attributed - m.busy_energy_j).abs() <= 1e-6 * m.busy_energy_j,
                "{name}: jobs' energy {attributed} vs busy {}",
                m.busy_energy_j
            );
            assert!(
                m.idle_energy_power_saving_j <= m.idle_energy_j + 1e-6,
                "{name}: power saving cannot cost more"
            );
            assert!(
                m.energy_lower_bound_j <= m.busy_energy_j,
                "{name}: below the lower bound"
            );
            assert!(
                m.alloc_rate > 0.0 && m.alloc_rate <= 1.0 && m.utilisation <= m.alloc_rate + 1e-9,
                "{name}"
            );
        }
    }

    #[test]
    fn a_seed_fixes_the_run() {
        let (cfg, nodes, trace) = setup();
        let typical = typical(&trace);
        let (a, _) = simulate(&cfg, &nodes, &trace, &typical, "heshare", 3);
        let (b, _) = simulate(&cfg, &nodes, &trace, &typical, "heshare", 3);
        assert_eq!(a, b);
        let (c, _) = simulate(&cfg, &nodes, &trace, &typical, "heshare", 4);
        assert_ne!(a, c);
    }

    #[test]
    fn events_run_in_time_then_creation_order() {
        let mut h = BinaryHeap::new();
        h.push(Queued {
            t: 5.0,
            seq: 0,
            ev: Event::Arrival(0),
        });
        h.push(Queued {
            t: 1.0,
            seq: 2,
            ev: Event::Arrival(2),
        });
        h.push(Queued {
            t: 1.0,
            seq: 1,
            ev: Event::Arrival(1),
        });
        let order: Vec<Event> = std::iter::from_fn(|| h.pop().map(|q| q.ev)).collect();
        assert_eq!(
            order,
            vec![Event::Arrival(1), Event::Arrival(2), Event::Arrival(0)]
        );
    }

    #[test]
    fn offered_load_sets_the_arrival_rate() {
        let (cfg, nodes, trace) = setup();
        let gpus: usize = nodes.iter().map(|n| n.gpus as usize).sum();
        let wl = |load| WorkloadParams {
            load,
            jobs: 3000,
            max_duration_s: 20_000.0,
            users: 3,
            seed: 1,
        };
        let lo = generate_jobs(&cfg, &trace, gpus, wl(0.4));
        let hi = generate_jobs(&cfg, &trace, gpus, wl(0.8));
        let span = |j: &[SimJob]| j.last().expect("jobs").submit_s;
        assert!(
            (span(&lo) / span(&hi) - 2.0).abs() < 1e-9,
            "half the load, twice the span"
        );
        #[allow(clippy::cast_precision_loss)]
        let offered: f64 = hi
            .iter()
            .map(|j| f64::from(j.num_gpus) * f64::from(j.gpu_milli) / 1000.0 * j.work_s)
            .sum::<f64>()
            / (span(&hi) * gpus as f64);
        assert!((offered - 0.8).abs() < 0.15, "offered load {offered}");
    }
}
