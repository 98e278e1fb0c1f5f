//! Time mode: a discrete-event simulation of jobs arriving, running (alone or sharing a GPU),
//! and finishing, with every GPU's power integrated over time.
//!
//! Events are ordered by (time, sequence number), so equal times resolve in creation order and a
//! seed fixes the whole run. Schedulers decide with heshare's predictor (the catalog); the engine
//! advances jobs with the [`World`], the ground truth: whenever a GPU's set of jobs or clock
//! changes, its jobs' progress is brought up to date, their true rates recomputed and their
//! finish events re-issued (stale ones are recognised by a version number).
//!
//! Rules every scheduler runs under alike:
//! * **MPS serialises users.** NVIDIA MPS runs one user's server per GPU at a time; another
//!   user's clients wait until it exits. On a GPU shared through MPS only the jobs of the user
//!   who came first progress; the others hold their shares and wait (DESIGN fact 10). Slurm does
//!   not keep users apart, so a scheduler that mixes users pays for it here.
//! * **Energy** is metered per GPU (busy and idle) and per node (whole-node idle stretches, for
//!   Slurm-style power saving) in one place, [`EnergyMeter`], and can be closed at any horizon
//!   at or after the run's end, so schedulers are compared over a common one.
//! * **Every job is accounted for**: jobs never started or never finished are counted, not
//!   dropped.

use super::packing::{NodeRes, Pod};
use super::rng::SplitMix;
use super::schedulers::{Placement, Scheduler};
use super::trace::TraceJob;
use super::world::{JobTruth, Occupant, Runs, World};
use crate::config::Config;
use crate::model::{JobKind, ModelParams, Tenant, predict};
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
    /// Work: for training, seconds alone on a whole reference GPU at its default clock; for an
    /// inference service, the seconds of stream it serves at full pace.
    pub work_s: f64,
    /// The time limit its user gave (whole hours covering the work): what schedulers may read.
    pub limit_s: f64,
    /// The truth the world keeps about this job (schedulers must not read it).
    pub truth: JobTruth,
    pub pod: Pod,
    // Running state.
    pub gpus: Vec<usize>,
    pub share: SharePct,
    pub exclusive: bool,
    pub start_s: Option<f64>,
    pub finish_s: Option<f64>,
    /// Runs outside MPS, time-sliced beside another user's MPS server (set when it starts).
    pub native: bool,
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
    /// Jobs on it, in arrival order (MPS serves the first one's user first).
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
    /// The node's size (what Slurm's node table says).
    pub cpu_milli: u64,
    pub memory_mib: u64,
    busy_gpus: usize,
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
    /// Bumped whenever a job arrives, starts or finishes: a scheduler that keeps a picture of
    /// the cluster knows when it must look again.
    pub version: u64,
}

impl State<'_> {
    /// What heshare's predictor (not the world) says of `gpu`'s jobs at `clock`.
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
/// class drawn uniformly. Each job's truth (its measured workload, its errors against the
/// catalog) is drawn from `world` with a stream of its own, so the same seed gives every
/// scheduler the same jobs.
pub fn generate_jobs(
    cfg: &Config,
    world: &World,
    trace: &[TraceJob],
    gpu_count: usize,
    params: WorkloadParams,
) -> Vec<SimJob> {
    // A different stream from the placement-mode shuffle of the same seed.
    let mut rng = SplitMix::new(params.seed ^ 0x005E_ED0F_70B5);
    let mut truths = SplitMix::new(params.seed ^ 0x0745_70F3_041D);
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
            let work_s = duration(src);
            SimJob {
                class,
                num_gpus: src.num_gpus,
                gpu_milli: src.gpu_milli,
                gpu_types: src.gpu_types.clone(),
                user,
                submit_s: t,
                work_s,
                limit_s: (work_s / 3600.0).ceil().max(1.0) * 3600.0,
                truth: world.draw(class, fraction.min(1.0), &mut truths),
                pod: Pod::from_trace(src),
                gpus: vec![],
                share: SharePct::FULL,
                exclusive: true,
                start_s: None,
                finish_s: None,
                native: false,
                done_s: 0.0,
                rate: 0.0,
                last_s: 0.0,
                version: 0,
                energy_j: 0.0,
            }
        })
        .collect()
}

/// Idle energy of the cluster, per node, kept in one place: every GPU's idle draw (always-on
/// accounting) and each node's whole-idle stretches (a node whose GPUs are all idle is powered
/// down after `suspend_time_s`, as Slurm's power saving does).
#[derive(Debug, Clone, PartialEq)]
pub struct EnergyMeter {
    pub suspend_time_s: f64,
    /// Per node: the idle power of all its GPUs, when it became wholly idle (or `None` while a
    /// GPU is busy), and the idle energy of its closed whole-idle stretches with power saving.
    nodes: Vec<(f64, Option<f64>, f64)>,
}

impl EnergyMeter {
    fn new(st: &State<'_>, suspend_time_s: f64) -> EnergyMeter {
        EnergyMeter {
            suspend_time_s,
            nodes: st
                .nodes
                .iter()
                .map(|n| {
                    let w: f64 = n
                        .gpus
                        .iter()
                        .map(|&g| st.cfg.gpu_types[st.gpus[g].gpu_type].idle_power.0)
                        .sum();
                    (w, Some(0.0), 0.0)
                })
                .collect(),
        }
    }

    /// Node `n` got its first busy GPU at `t`.
    fn wake(&mut self, n: usize, t: f64) {
        let (w, since, closed) = &mut self.nodes[n];
        if let Some(s) = since.take() {
            *closed += *w * (t - s).max(0.0).min(self.suspend_time_s);
        }
    }

    /// Node `n`'s last busy GPU went idle at `t`.
    fn rest(&mut self, n: usize, t: f64) {
        self.nodes[n].1 = Some(t);
    }

    /// Idle energy with power saving, if every stretch still open closes at `horizon`.
    fn saving_until(&self, horizon: f64) -> f64 {
        self.nodes
            .iter()
            .map(|&(w, since, closed)| {
                closed + since.map_or(0.0, |s| w * (horizon - s).max(0.0).min(self.suspend_time_s))
            })
            .sum()
    }

    /// Idle power of the whole cluster (every GPU idle).
    fn idle_w(&self) -> f64 {
        self.nodes.iter().map(|n| n.0).sum()
    }
}

/// A job's realised runtime against heshare's prediction, alone on the GPU type it ran on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PredictionError {
    pub class: usize,
    pub gpu_type: usize,
    /// Predicted over realised runtime alone at the default clock (1 = exact).
    pub runtime_ratio: f64,
    /// Predicted over realised energy alone at the default clock.
    pub energy_ratio: f64,
}

/// What one run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct RunMetrics {
    pub jobs: usize,
    /// Jobs that never started, and jobs that started but never finished.
    pub unstarted: usize,
    pub unfinished: usize,
    pub busy_energy_j: f64,
    /// Idle energy with every GPU always on, until the run's end.
    pub idle_energy_j: f64,
    pub meter: EnergyMeter,
    /// JCT of every finished job.
    pub jct_s: Vec<f64>,
    /// Mean wait (submit to start) and mean run (start to finish) of the finished jobs.
    pub mean_wait_s: f64,
    pub mean_run_s: f64,
    pub makespan_s: f64,
    /// Allocated GPU share-time over capacity-time.
    pub alloc_rate: f64,
    /// SM-busy GPU time over capacity-time (the world's busy share).
    pub utilisation: f64,
    /// Jobs that ran slower than their bound allows, against running alone on a whole GPU of the
    /// type they got at its default clock, in the world.
    pub violations: usize,
    /// Sum over jobs of the least energy each could need alone (best type and clock, no idle),
    /// as the world measures it.
    pub energy_lower_bound_j: f64,
    pub errors: Vec<PredictionError>,
}

impl RunMetrics {
    /// Idle energy until `horizon` (at or after this run's end): always on, and with idle nodes
    /// suspended. After the run ends every GPU is idle.
    pub fn idle_until(&self, horizon: f64) -> (f64, f64) {
        let extra = (horizon - self.makespan_s).max(0.0);
        (
            self.idle_energy_j + self.meter.idle_w() * extra,
            self.meter.saving_until(horizon.max(self.makespan_s)),
        )
    }
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
            cpu_milli: n.cpu_milli,
            memory_mib: n.memory_mib,
            busy_gpus: 0,
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
        version: 0,
    }
}

/// The engine's working set for one run.
struct Run<'w> {
    world: &'w World,
    heap: BinaryHeap<Queued>,
    seq: u64,
    meter: EnergyMeter,
}

impl Run<'_> {
    fn push(&mut self, t: f64, ev: Event) {
        self.heap.push(Queued {
            t,
            seq: self.seq,
            ev,
        });
        self.seq += 1;
    }
}

/// Runs the jobs of `st` to completion under `sched`, in `world`.
pub fn run(
    st: &mut State<'_>,
    world: &World,
    sched: &mut dyn Scheduler,
    suspend_time_s: f64,
    mut progress: impl FnMut(usize),
) -> RunMetrics {
    let mut r = Run {
        world,
        heap: BinaryHeap::new(),
        seq: 0,
        meter: EnergyMeter::new(st, suspend_time_s),
    };
    for j in 0..st.jobs.len() {
        let t = st.jobs[j].submit_s;
        r.push(t, Event::Arrival(j));
    }
    let mut waiting: VecDeque<usize> = VecDeque::new();
    let mut done = 0usize;
    loop {
        let Some(Queued { t, ev, .. }) = r.heap.pop() else {
            // Nothing left to happen: give every waiting job one more chance on the cluster as
            // it is (the engine otherwise retries only what a freed node could take).
            if waiting.is_empty()
                || !start_waiting(st, sched, &mut r, &mut waiting, None, usize::MAX)
            {
                break;
            }
            continue;
        };
        // A finish event a later rate change superseded is not an event: taking its time would
        // move the clock (and the makespan and energy horizon) to a moment nothing happens at.
        if let Event::Finish(j, v) = ev {
            if st.jobs[j].version != v || st.jobs[j].finish_s.is_some() {
                continue;
            }
        }
        st.now = t;
        let waiting_now: Vec<usize> = waiting.iter().copied().collect();
        if sched.tick(st, &waiting_now) {
            start_waiting(st, sched, &mut r, &mut waiting, None, 100);
        }
        match ev {
            Event::Arrival(j) => {
                // Backfill: a job that fits now starts now, even with others waiting (they
                // fit nowhere, so it delays none of them in this reservation-free model).
                if !try_start(st, sched, &mut r, j) {
                    waiting.push_back(j);
                    st.version += 1;
                }
            }
            Event::Finish(j, _) => {
                let freed_node = st.gpus[st.jobs[j].gpus[0]].node;
                finish(st, sched, &mut r, j);
                done += 1;
                progress(done);
                // Freed resources: start what now fits, in queue order (backfill without
                // reservations, within a bounded look-ahead as Slurm's bf_max_job_test does).
                start_waiting(st, sched, &mut r, &mut waiting, Some(freed_node), 100);
            }
        }
    }
    close(st, world, r.meter)
}

/// Tries the first `depth` waiting jobs, in queue order (only those that could use `freed` when
/// given: it is the only node that gained room since they last failed). True if any started.
fn start_waiting(
    st: &mut State<'_>,
    sched: &mut dyn Scheduler,
    r: &mut Run<'_>,
    waiting: &mut VecDeque<usize>,
    freed: Option<usize>,
    depth: usize,
) -> bool {
    let mut started = false;
    let mut k = 0;
    let mut tried = 0;
    while k < waiting.len() && tried < depth {
        let wj = waiting[k];
        tried += 1;
        if freed.is_none_or(|n| could_use(st, wj, n)) && try_start(st, sched, r, wj) {
            waiting.remove(k);
            started = true;
        } else {
            k += 1;
        }
    }
    started
}

fn close(st: &mut State<'_>, world: &World, meter: EnergyMeter) -> RunMetrics {
    let end = st.now;
    for g in 0..st.gpus.len() {
        advance_gpu(st, g, end);
    }
    let mut m = RunMetrics {
        jobs: st.jobs.len(),
        unstarted: st.jobs.iter().filter(|j| j.start_s.is_none()).count(),
        unfinished: st
            .jobs
            .iter()
            .filter(|j| j.start_s.is_some() && j.finish_s.is_none())
            .count(),
        busy_energy_j: 0.0,
        idle_energy_j: 0.0,
        meter,
        jct_s: st
            .jobs
            .iter()
            .filter_map(|j| j.finish_s.map(|f| f - j.submit_s))
            .collect(),
        mean_wait_s: 0.0,
        mean_run_s: 0.0,
        makespan_s: end,
        alloc_rate: 0.0,
        utilisation: 0.0,
        violations: 0,
        energy_lower_bound_j: 0.0,
        errors: Vec::new(),
    };
    let finished: Vec<(f64, f64, f64)> = st
        .jobs
        .iter()
        .filter_map(|j| Some((j.submit_s, j.start_s?, j.finish_s?)))
        .collect();
    #[allow(clippy::cast_precision_loss)]
    let n = finished.len().max(1) as f64;
    m.mean_wait_s = finished.iter().map(|(a, s, _)| s - a).sum::<f64>() / n;
    m.mean_run_s = finished.iter().map(|(_, s, f)| f - s).sum::<f64>() / n;
    let capacity_time = st.gpus.len() as f64 * end.max(1e-9);
    let mut alloc = 0.0;
    for g in &st.gpus {
        m.busy_energy_j += g.busy_energy_j;
        m.idle_energy_j += g.idle_energy_j;
        m.utilisation += g.busy_share_s;
    }
    let reference = &st.cfg.gpu_types[st.cfg.reference_gpu];
    for j in &st.jobs {
        let (Some(s), Some(f)) = (j.start_s, j.finish_s) else {
            continue;
        };
        alloc += f64::from(j.num_gpus) * j.share.fraction() * (f - s);
        let class = &st.cfg.classes[j.class];
        let t = st.gpus[j.gpus[0]].gpu_type;
        let gt = &st.cfg.gpu_types[t];
        let real_rate = world.alone_rate(j.class, &j.truth, t);
        let alone = j.work_s / real_rate.max(1e-12);
        let bound = class.slowdown_bound.unwrap_or(st.cfg.policy.slowdown_bound);
        if (f - s) > alone * bound * (1.0 + 1e-6) {
            m.violations += 1;
        }
        // heshare's predictor for the same job alone on this type at the default clock.
        let p = predict(
            gt,
            reference,
            &[Tenant {
                class,
                share: SharePct::FULL,
                user: 0,
            }],
            gt.default_sm_clock,
            st.params,
        );
        let predicted_rate = match class.kind {
            JobKind::Training => class.reference_runtime_s / p.jobs[0].runtime.0,
            JobKind::Inference => class.reference_runtime_s / p.jobs[0].runtime.0,
        };
        let real_power = world.alone_power_w(j.class, &j.truth, t);
        m.errors.push(PredictionError {
            class: j.class,
            gpu_type: t,
            runtime_ratio: real_rate / predicted_rate.max(1e-12),
            energy_ratio: (p.power.0 / predicted_rate.max(1e-12))
                / (real_power / real_rate.max(1e-12)),
        });
        m.energy_lower_bound_j += lower_bound_j(st, world, j) * f64::from(j.num_gpus);
    }
    m.alloc_rate = alloc / capacity_time;
    m.utilisation /= capacity_time;
    m
}

/// The least busy energy `job` could need in the world: alone on its most efficient allowed type
/// at its most efficient clock, with no idle energy.
fn lower_bound_j(st: &State<'_>, world: &World, job: &SimJob) -> f64 {
    let mut best = f64::INFINITY;
    for (t, gt) in st.cfg.gpu_types.iter().enumerate() {
        if !(job.gpu_types.is_empty() || job.gpu_types.contains(&t)) {
            continue;
        }
        for &f in gt.sm_clocks.iter().step_by(4) {
            let g = world.gpu(
                t,
                f64::from(f.0),
                &[Occupant {
                    class: job.class,
                    truth: &job.truth,
                    share: SharePct::FULL,
                    runs: Runs::Mps,
                }],
            );
            let dynamic = g.power_w - world.idle_w(t);
            best = best.min(dynamic * job.work_s / g.rate[0].max(1e-12));
        }
    }
    if best.is_finite() { best } else { 0.0 }
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

/// The user MPS serves on `gpu` now: the first MPS client's, when the GPU is shared.
fn mps_user(st: &State<'_>, gpu: usize) -> Option<u32> {
    let g = &st.gpus[gpu];
    let first = *g.jobs.iter().find(|&&j| !st.jobs[j].native)?;
    (!st.jobs[first].exclusive).then_some(st.jobs[first].user)
}

/// Applies the scheduler's clock to `gpu`, recomputes its jobs' true rates and power, and
/// re-issues their finish events.
fn refresh_gpu(st: &mut State<'_>, sched: &mut dyn Scheduler, r: &mut Run<'_>, gpu: usize) {
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
    let serving = mps_user(st, gpu);
    let truth = {
        let g = &st.gpus[gpu];
        let occ: Vec<Occupant<'_>> = g
            .jobs
            .iter()
            .map(|&j| {
                let job = &st.jobs[j];
                Occupant {
                    class: job.class,
                    truth: &job.truth,
                    share: job.share,
                    runs: if job.native {
                        Runs::Native
                    } else if serving.is_none_or(|u| u == job.user) {
                        Runs::Mps
                    } else {
                        Runs::Waits
                    },
                }
            })
            .collect();
        r.world.gpu(g.gpu_type, f64::from(clock.0), &occ)
    };
    let g = &mut st.gpus[gpu];
    g.clock = clock;
    g.power_w = truth.power_w;
    g.job_power_w = truth.job_power_w;
    g.busy_frac = truth.busy;
    let jobs = g.jobs.clone();
    for (k, j) in jobs.into_iter().enumerate() {
        let job = &mut st.jobs[j];
        // A multi-GPU job moves at the pace of its slowest GPU; all its GPUs are alike here.
        job.rate = truth.rate[k];
        job.version += 1;
        if job.rate > 0.0 {
            let left = (job.work_s - job.done_s).max(0.0);
            let when = t + left / job.rate;
            let v = job.version;
            r.push(when, Event::Finish(j, v));
        }
        // A blocked job (rate 0) gets its finish event when a later refresh unblocks it.
    }
}

fn try_start(st: &mut State<'_>, sched: &mut dyn Scheduler, r: &mut Run<'_>, j: usize) -> bool {
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
    // A share beside another user's MPS server: heshare's node helper runs it outside MPS.
    let native = !exclusive
        && sched.time_slices_other_users()
        && gpus
            .iter()
            .any(|&g| mps_user(st, g).is_some_and(|u| u != st.jobs[j].user));
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
        job.native = native;
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
            if st.nodes[node].busy_gpus == 0 {
                r.meter.wake(node, t);
            }
            st.nodes[node].busy_gpus += 1;
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
        refresh_gpu(st, sched, r, g);
    }
    st.version += 1;
    sched.started(st, j);
    true
}

fn finish(st: &mut State<'_>, sched: &mut dyn Scheduler, r: &mut Run<'_>, j: usize) {
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
                r.meter.rest(node, t);
            }
        }
        refresh_gpu(st, sched, r, g);
    }
    st.version += 1;
    sched.finished(st, j);
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
        let world = World::new(cfg);
        let jobs = generate_jobs(cfg, &world, trace, gpus, wl);
        let mut st = build_state(cfg, nodes, jobs);
        let inner = by_name(name, &st, typical).expect("known");
        let mut sched = Checked { inner, checks: 0 };
        let mut finished = 0;
        let m = run(&mut st, &world, &mut sched, 600.0, |n| finished = n);
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
                m.idle_until(m.makespan_s).1 <= m.idle_energy_j + 1e-6,
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

    /// A scheduler that places like plain Slurm but locks every GPU at its lowest clock: the
    /// world must see the jobs run far slower than their bound allows.
    struct Crawl;

    impl Scheduler for Crawl {
        fn name(&self) -> &'static str {
            "crawl"
        }
        fn place(&mut self, st: &State<'_>, j: usize) -> Option<Placement> {
            let job = &st.jobs[j];
            crate::sim::cons_tres::select(st, job, &crate::sim::cons_tres::GresRequest::whole(job))
        }
        fn clock(&mut self, st: &State<'_>, gpu: usize) -> Mhz {
            st.cfg.gpu_types[st.gpus[gpu].gpu_type].sm_clocks[0]
        }
    }

    #[test]
    fn violations_are_counted_in_the_world_and_can_be_many() {
        let (cfg, nodes, trace) = setup();
        let world = World::new(&cfg);
        let gpus = nodes.iter().map(|n| n.gpus as usize).sum();
        let wl = WorkloadParams {
            load: 0.5,
            jobs: 200,
            max_duration_s: 20_000.0,
            users: 3,
            seed: 5,
        };
        let mut st = build_state(&cfg, &nodes, generate_jobs(&cfg, &world, &trace, gpus, wl));
        let m = run(&mut st, &world, &mut Crawl, 600.0, |_| {});
        assert!(m.violations > 100, "{} of 200", m.violations);
    }

    /// Every job on GPU 0 with a share of `share` percent while it has room; `time_slice`: a
    /// share beside another user's server runs outside MPS (heshare's node helper).
    struct OnGpu0 {
        share: u8,
        time_slice: bool,
    }

    impl Scheduler for OnGpu0 {
        fn name(&self) -> &'static str {
            "on-gpu0"
        }
        fn place(&mut self, st: &State<'_>, _j: usize) -> Option<Placement> {
            (st.gpus[0].used_share(&st.jobs) + u32::from(self.share) <= 100).then(|| Placement {
                gpus: vec![0],
                share: SharePct::new(self.share).expect("a percentage"),
                exclusive: false,
            })
        }
        fn time_slices_other_users(&self) -> bool {
            self.time_slice
        }
    }

    /// Two one-GPU jobs of `class` asking `milli` of a GPU and nothing of the host, on the small
    /// cluster: the cluster, its world and the jobs, for a test to time as it needs.
    fn two_shares_on_gpu0(
        class: &str,
        milli: u32,
    ) -> (Config, Vec<crate::cluster::Node>, World, Vec<SimJob>) {
        let (cfg, nodes, trace) = setup();
        let world = World::new(&cfg);
        let gpus = nodes.iter().map(|n| n.gpus as usize).sum();
        let wl = WorkloadParams {
            load: 0.5,
            jobs: 2,
            max_duration_s: 1000.0,
            users: 1,
            seed: 3,
        };
        let mut jobs = generate_jobs(&cfg, &world, &trace, gpus, wl);
        let class = cfg
            .classes
            .iter()
            .position(|c| c.name == class)
            .expect("class");
        for j in &mut jobs {
            j.class = class;
            j.num_gpus = 1;
            j.gpu_milli = milli;
            j.pod.num_gpus = 1;
            j.pod.gpu_milli = milli;
            j.pod.cpu_milli = 0;
            j.pod.memory_mib = 0;
        }
        (cfg, nodes, world, jobs)
    }

    /// Two users' shares on one GPU through MPS: the second user's job holds its share but makes
    /// no progress until the first user's job has left (one MPS server per GPU at a time), unless
    /// the scheduler's node helper runs it outside MPS, time-sliced, at once.
    #[test]
    fn mps_serves_one_user_at_a_time_for_every_scheduler() {
        let (cfg, nodes, world, mut jobs) = two_shares_on_gpu0("vit-infer", 300);
        for (k, j) in jobs.iter_mut().enumerate() {
            j.truth.demand = 0.1;
            j.submit_s = k as f64;
            j.work_s = 1000.0;
        }
        let finish = |users: [u32; 2], time_slice: bool| {
            let mut js = jobs.clone();
            js[0].user = users[0];
            js[1].user = users[1];
            let mut st = build_state(&cfg, &nodes, js);
            let mut sched = OnGpu0 {
                share: 40,
                time_slice,
            };
            run(&mut st, &world, &mut sched, 600.0, |_| {});
            (
                st.jobs[0].finish_s.expect("done"),
                st.jobs[1].finish_s.expect("done"),
                st.jobs[1].native,
            )
        };
        for time_slice in [false, true] {
            let (a, b, native) = finish([1, 1], time_slice);
            assert!(
                (b - a - 1.0).abs() < 1.0 && !native,
                "one user's jobs share the GPU: {a} {b}"
            );
        }
        let (a, b, native) = finish([1, 2], false);
        assert!(
            b >= a + 999.0 && !native,
            "the second user waits for the first: {a} {b}"
        );
        // Outside MPS the second user's light service runs at once, time-sliced, and keeps pace.
        let (a, b, native) = finish([1, 2], true);
        assert!(
            native && (b - a - 1.0).abs() < 1.0,
            "the second user runs beside the first: {a} {b}"
        );
    }

    /// Regression: a finish event superseded by a later rate change moved the clock when it
    /// was popped, so the makespan (and every energy horizon after it) ended at a moment when
    /// nothing happened.
    #[test]
    fn superseded_finish_events_do_not_move_the_clock() {
        let (cfg, nodes, world, mut jobs) = two_shares_on_gpu0("resnet18-train", 500);
        for (k, j) in jobs.iter_mut().enumerate() {
            j.user = 1;
            j.truth.contention = 1.0;
            // A long job, then a short one beside it: the long one slows while the short one
            // runs (its first finish event is superseded by a later one), then speeds up again
            // (and that later one is superseded by an earlier one).
            j.submit_s = if k == 0 { 0.0 } else { 10.0 };
            j.work_s = if k == 0 { 10_000.0 } else { 100.0 };
        }
        let mut st = build_state(&cfg, &nodes, jobs);
        let mut sched = OnGpu0 {
            share: 50,
            time_slice: false,
        };
        let m = run(&mut st, &world, &mut sched, 600.0, |_| {});
        let last = st
            .jobs
            .iter()
            .map(|j| j.finish_s.expect("finished"))
            .fold(0.0, f64::max);
        assert!(
            st.jobs[1].finish_s < st.jobs[0].finish_s,
            "the short job ends first"
        );
        assert!(
            (m.makespan_s - last).abs() < 1e-6,
            "makespan {} but the last job ended at {last}",
            m.makespan_s
        );
    }

    /// Regression: jobs a scheduler never started vanished from the metrics. They are counted.
    #[test]
    fn jobs_that_never_start_are_counted_not_dropped() {
        let (cfg, nodes, trace) = setup();
        let world = World::new(&cfg);
        let gpus = nodes.iter().map(|n| n.gpus as usize).sum();
        let wl = WorkloadParams {
            load: 0.5,
            jobs: 50,
            max_duration_s: 20_000.0,
            users: 3,
            seed: 9,
        };
        let mut jobs = generate_jobs(&cfg, &world, &trace, gpus, wl);
        // No node has 64 GPUs.
        jobs[10].num_gpus = 64;
        jobs[10].gpu_milli = 1000;
        jobs[10].pod.num_gpus = 64;
        let typical = typical(&trace);
        for name in NAMES {
            let mut st = build_state(&cfg, &nodes, jobs.clone());
            let mut sched = by_name(name, &st, &typical).expect("known");
            let m = run(&mut st, &world, sched.as_mut(), 600.0, |_| {});
            assert_eq!((m.unstarted, m.unfinished), (1, 0), "{name}");
            assert_eq!(m.jct_s.len(), 49, "{name}");
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
        let world = World::new(&cfg);
        let lo = generate_jobs(&cfg, &world, &trace, gpus, wl(0.4));
        let hi = generate_jobs(&cfg, &world, &trace, gpus, wl(0.8));
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
