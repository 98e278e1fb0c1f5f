//! Time mode: a discrete-event simulation of jobs arriving, running (alone or sharing a GPU),
//! and finishing or being killed at their time limit, on nodes that Slurm's power saving may
//! suspend and resume.
//!
//! Events are ordered by (time, sequence number), so equal times resolve in creation order and a
//! seed fixes the whole run. Schedulers decide with heshare's predictor (the catalog); the engine
//! advances jobs with the [`World`], the ground truth: whenever a GPU's set of jobs or clock
//! changes, its jobs' progress is brought up to date, their true rates recomputed and their
//! finish events re-issued (stale ones are recognised by a version number). The engine says what
//! changed to the [`EnergyMeter`], which alone accounts energy.
//!
//! Rules every scheduler runs under alike, as Slurm and the hardware apply them:
//! * **MPS serialises users.** NVIDIA MPS runs one user's server per GPU at a time (DESIGN fact
//!   10). A share that lands beside another user's MPS server runs outside MPS, time-sliced with
//!   it, where the site's node rule says so (`[node] other_user_share = "time-slice"`, what
//!   heshare's node helper does and what gres/shard gives any Slurm site), else it waits for that
//!   user's jobs to end. Every scheduler that shares gets the same rule.
//! * **Time limits are enforced**: a job still running at its start plus its limit is killed, as
//!   Slurm kills it; its work is lost and its energy counted, and its user submits it again with
//!   a longer limit ([`Reruns`]): the rerun queues like any job and is part of the same job.
//! * **Backfill with a reservation**, as Slurm's backfill makes: the first waiting job that
//!   cannot start gets the node where it could start soonest, judged by the running jobs' time
//!   limits; a job behind it may start now only where it does not delay that, i.e. elsewhere or
//!   within its limit before then. (The reservation is judged from the job's request as its
//!   trace entry gives it.)
//! * **Power saving as Slurm does it** (when `SuspendTime` is set): a node idle that long is
//!   powered down; every powered-up node is tried before a booting one and both before a
//!   powered-down one (Slurm's node sets, whatever their weight), and a job on a powered-down
//!   node waits for it to boot (its time limit starts then, as Slurm restarts it).
//! * **Every job is accounted for**: jobs never started, never finished or killed are counted,
//!   not dropped.

use super::meter::{EnergyMeter, Facility, PowerState};
use super::packing::{NodeRes, Pod};
use super::priority::QueueOrder;
use super::rng::SplitMix;
use super::schedulers::{Placement, Scheduler, trace_share};
use super::templates::{self, Recurrence};
use super::trace::TraceJob;
use super::world::{JobTruth, Occupant, Runs, World};
use crate::config::{Config, OtherUserShare};
use crate::model::{JobKind, ModelParams, Tenant, predict};
use crate::policy::{ClusterView, GpuSlot, PlacedJob};
use crate::units::{Mhz, SharePct};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

/// A job as the simulator runs it.
#[derive(Debug, Clone)]
pub struct SimJob {
    /// Index into `Config::classes`: what the job truly is (the world's business).
    pub class: usize,
    /// The user's script it is a run of (`templates`), and which run.
    pub template: usize,
    pub run: usize,
    /// The class its user gives (`--gpu-class`): its true one, a wrong one, or none.
    pub label: Option<usize>,
    pub num_gpus: u32,
    /// The share the trace asked for, per GPU (1000 = whole GPUs).
    pub gpu_milli: u32,
    pub gpu_types: Vec<usize>,
    pub user: u32,
    pub submit_s: f64,
    /// Work: for training, seconds alone on a whole reference GPU at its default clock; for an
    /// inference service, the seconds of stream it serves at full pace.
    pub work_s: f64,
    /// The time limit its user gave: what schedulers may read (see [`generate_jobs`]).
    pub limit_s: f64,
    /// The truth the world keeps about this job (schedulers must not read it).
    pub truth: JobTruth,
    pub pod: Pod,
    // Running state.
    pub gpus: Vec<usize>,
    pub share: SharePct,
    pub exclusive: bool,
    /// When Slurm allocated it resources (its start, unless its node had to boot first).
    pub alloc_s: Option<f64>,
    /// When it started running: its time limit counts from here.
    pub start_s: Option<f64>,
    pub finish_s: Option<f64>,
    /// Killed at its time limit at this time (its work lost).
    pub killed_s: Option<f64>,
    /// Allocated on a node that is still booting.
    pub booting: bool,
    /// Runs outside MPS, time-sliced beside another user's MPS server (set when it starts).
    pub native: bool,
    /// It ran outside MPS or waited for another user's server at some point: the node helper
    /// says nothing of its neighbours.
    pub sliced: bool,
    /// What the node helper measures of it: GPU busy seconds (summed over its GPUs), the SM
    /// clock of its first GPU over time (when it changed), and its GPU energy at its end.
    pub busy_s: f64,
    pub clocks: Vec<(f64, u32)>,
    /// Busy seconds of the other jobs on its GPU while it ran, as the node helper measures them.
    pub neighbour_busy_s: f64,
    pub energy_j: f64,
    /// It shared a GPU with another job at some point: its runtime is not its alone runtime.
    pub crowded: bool,
    /// The job this is a run of: its own index for a job of the trace, the killed job's for a
    /// rerun its user submitted after a kill (see [`Reruns`]).
    pub origin: usize,
    /// 0 for the trace's submission, 1 for the first rerun, and so on.
    pub attempt: u32,
    done_s: f64,
    rate: f64,
    /// The other jobs' busy share of its GPU now.
    neighbour_busy: f64,
    /// Its part of its GPU's busy time now.
    busy: f64,
    last_s: f64,
    version: u32,
}

impl SimJob {
    /// A job of the trace row `src` not yet submitted: its class and truth (the world's), which
    /// run of which template it is, its label, user, submission, work (seconds on a type of rate
    /// one) and time limit.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        class: usize,
        (template, run): (usize, usize),
        label: Option<usize>,
        src: &TraceJob,
        user: u32,
        submit_s: f64,
        work_s: f64,
        limit_s: f64,
        truth: JobTruth,
    ) -> SimJob {
        SimJob {
            class,
            template,
            run,
            label,
            num_gpus: src.num_gpus,
            gpu_milli: src.gpu_milli,
            gpu_types: src.gpu_types.clone(),
            user,
            submit_s,
            work_s,
            limit_s,
            truth,
            pod: Pod::from_trace(src),
            gpus: vec![],
            share: SharePct::FULL,
            exclusive: true,
            alloc_s: None,
            start_s: None,
            finish_s: None,
            killed_s: None,
            booting: false,
            native: false,
            sliced: false,
            busy_s: 0.0,
            clocks: Vec::new(),
            neighbour_busy_s: 0.0,
            neighbour_busy: 0.0,
            energy_j: 0.0,
            crowded: false,
            origin: 0,
            attempt: 0,
            done_s: 0.0,
            rate: 0.0,
            busy: 0.0,
            last_s: 0.0,
            version: 0,
        }
    }

    /// Whether it holds resources now (running or waiting for its node to boot).
    pub fn allocated(&self) -> bool {
        self.alloc_s.is_some() && self.finish_s.is_none() && self.killed_s.is_none()
    }

    /// The same job submitted again at `at`, as its user does after a kill: the same request
    /// and work from the start, its time limit `limit_factor` times the one it was killed at.
    pub fn rerun(&self, at: f64, limit_factor: f64) -> SimJob {
        SimJob {
            submit_s: at,
            limit_s: self.limit_s * limit_factor,
            attempt: self.attempt + 1,
            gpus: vec![],
            share: SharePct::FULL,
            exclusive: true,
            alloc_s: None,
            start_s: None,
            finish_s: None,
            killed_s: None,
            booting: false,
            native: false,
            sliced: false,
            busy_s: 0.0,
            clocks: Vec::new(),
            neighbour_busy_s: 0.0,
            neighbour_busy: 0.0,
            energy_j: 0.0,
            crowded: false,
            done_s: 0.0,
            rate: 0.0,
            busy: 0.0,
            last_s: 0.0,
            version: 0,
            ..self.clone()
        }
    }

    /// When it is expected to end by its time limit (a booting job: from `boot_until`).
    pub fn ends_by_limit(&self, boot_until: f64) -> f64 {
        self.start_s.unwrap_or(boot_until) + self.limit_s
    }
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
    last_s: f64,
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

/// A node: its GPUs (indices into `State::gpus`), its CPU/memory/GPU bookkeeping and its power
/// state.
#[derive(Debug, Clone)]
pub struct SimNode {
    pub name: String,
    pub gpus: Vec<usize>,
    pub res: NodeRes,
    /// The node's size (what Slurm's node table says).
    pub cpu_milli: u64,
    pub memory_mib: u64,
    /// Jobs allocated here (running or waiting for the boot).
    pub jobs: usize,
    pub power: PowerState,
    /// When a booting node is up.
    pub boot_until: f64,
    /// Whether a scheduler may place a job here in the present attempt (the engine's passes:
    /// powered up first, then booting, then powered down; a backfill reservation).
    pub usable: bool,
    /// Bumped whenever a job is allocated here or the power state changes: a pending suspend of
    /// an older epoch is void.
    epoch: u64,
    running_vcpus: f64,
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
    /// Bumped whenever a job arrives, starts or finishes, or a node changes power state: a
    /// scheduler that keeps a picture of the cluster knows when it must look again.
    pub version: u64,
    /// How Slurm orders the waiting jobs (multifactor: age and the site factor).
    pub queue: QueueOrder,
    /// What users do with a job killed at its limit.
    pub reruns: Reruns,
    /// The earliest time at or after `now` a job may be submitted (an arrival queued, or a kill
    /// its user answers with a rerun); infinite when none is. A scheduler whose snapshot nobody
    /// would read before its next period may skip taking it.
    pub next_submit_s: f64,
}

/// What a user does when Slurm kills a job at its time limit: submits it again at once, from
/// the start, with a longer limit, up to `max` times. A site sees those reruns queue for the
/// same GPUs as everything else; a world in which a kill ended the job would hand a policy that
/// kills the capacity its reruns need for free.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Reruns {
    /// Reruns of one job at most (0: a kill ends it, as a failed job).
    pub max: u32,
    /// Each rerun's limit over the limit it was killed at.
    pub limit_factor: f64,
}

impl Default for Reruns {
    /// Twice, each time with the limit doubled: after two kills its user gives up on it.
    fn default() -> Self {
        Reruns {
            max: 2,
            limit_factor: 2.0,
        }
    }
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

    /// Whether a scheduler may place a job on node `n` in the present attempt.
    pub fn usable(&self, n: usize) -> bool {
        self.nodes[n].usable
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Event {
    Arrival(usize),
    Finish(usize, u32),
    /// The job's time limit, from the start it had.
    Kill(usize),
    /// The node has been idle for `SuspendTime` (if still at this epoch).
    Suspend(usize, u64),
    /// The node has finished powering down.
    PoweredOff(usize, u64),
    /// The node has booted.
    NodeUp(usize),
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
    /// How jobs recur as runs of their users' scripts, and what users say of them.
    pub recurrence: Recurrence,
}

/// Draws `params.jobs` GPU jobs from the trace's (num_gpu, gpu_milli, gpu_spec, duration)
/// distribution with Poisson arrivals sized so that the offered load is `params.load` of
/// `gpu_count` GPUs. Job classes are assigned as documented in `slurm-conf/heshare.toml`: a share
/// becomes the inference class whose demand is nearest its fraction, a whole-GPU job a training
/// class drawn uniformly. Each job's truth (its measured workload, its errors against the
/// catalog) is drawn from `world` with a stream of its own, so the same seed gives every
/// scheduler the same jobs.
///
/// A job's time limit is what a user who has run it before would give a plain Slurm cluster
/// that may start it on any type its request allows: its true runtime alone at the default clock
/// on the slowest of those types present (`present`), rounded up to whole hours.
pub fn generate_jobs(
    cfg: &Config,
    world: &World,
    trace: &[TraceJob],
    gpu_count: usize,
    present: &[usize],
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
    let rec = params.recurrence;
    // Templates and runs come from a stream of their own, so the arrival times and the trace
    // rows drawn for new templates stay those of the other streams.
    let mut recur = SplitMix::new(params.seed ^ 0x7E4D_1A7E_5EED);
    // Which scripts' users write their limit for the fastest type: a stream of its own, drawn
    // only where some do, so that the other worlds' jobs stay what they were.
    let mut limits = SplitMix::new(params.seed ^ 0xFA57_1317_5EED);
    // Per template: its (trace row, class, user, truth, label, limit for the fastest type), made
    // at its first run; and how many runs it had.
    let slots = templates::count(rec, params.jobs);
    // (trace row, class, user, truth, label, limit written for the fastest type)
    type Drawn = (usize, usize, u32, JobTruth, Option<usize>, bool);
    let mut made: Vec<Option<Drawn>> = vec![
        None;
        if rec.runs_per_template > 1.0 {
            slots
        } else {
            0
        }
    ];
    let mut runs: Vec<usize> = vec![0; made.len()];
    (0..params.jobs)
        .map(|_| {
            let row = rng.below(gpu_jobs.len());
            t += rng.exp(mean_gap);
            let slot = templates::pick(&mut recur, rec, slots);
            let (template, (row, class, user, base_truth, label, fast_limit)) = match slot
                .and_then(|k| made[k].map(|m| (k, m)))
            {
                Some(known) => known,
                None => {
                    let src = gpu_jobs[row];
                    let fraction = f64::from(src.gpu_milli) / 1000.0;
                    // A trace that names each job's class (Gavel's job types) is followed.
                    let named = src
                        .class
                        .as_deref()
                        .and_then(|n| cfg.classes.iter().position(|c| c.name == n));
                    let class = if let Some(c) = named {
                        c
                    } else if src.gpu_milli < 1000 && !inference.is_empty() {
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
                    let truth = world.draw(class, fraction.min(1.0), &mut truths);
                    let label = match templates::label(&mut recur, rec) {
                        templates::Label::None => None,
                        templates::Label::True => Some(class),
                        // Another class, any kind: users copy scripts and their options.
                        templates::Label::Wrong => {
                            let other = recur.below(cfg.classes.len().max(2) - 1);
                            Some(
                                if other >= class { other + 1 } else { other }
                                    .min(cfg.classes.len().saturating_sub(1)),
                            )
                        }
                    };
                    let fast_limit = rec.fast_limits > 0.0 && limits.unit() < rec.fast_limits;
                    let made_now = (row, class, user, truth, label, fast_limit);
                    match slot {
                        Some(k) => {
                            made[k] = Some(made_now);
                            (k, made_now)
                        }
                        // Nothing recurs: a template of its own.
                        None => {
                            runs.push(0);
                            (runs.len() - 1, made_now)
                        }
                    }
                }
            };
            runs[template] += 1;
            let src = gpu_jobs[row];
            // This run's work and, for a service, its load, around its template's.
            let work_s = duration(src) * templates::noise(&mut recur, rec.run_noise);
            let mut truth = base_truth;
            if world.kind(class) == JobKind::Inference {
                truth.demand *= templates::noise(&mut recur, rec.run_noise / 2.0);
            }
            let alone = present
                .iter()
                .filter(|&&p| src.gpu_types.is_empty() || src.gpu_types.contains(&p))
                .map(|&p| work_s / world.alone_rate(class, &truth, p).max(1e-12));
            // Its user's limit covers this run alone on the slowest type it allows, rounded up to
            // the hour; or, for a script tried on the fastest type only, the run there.
            let written_for = if fast_limit {
                let fastest = alone.fold(f64::INFINITY, f64::min);
                if fastest.is_finite() { fastest } else { work_s }
            } else {
                alone.fold(work_s, f64::max)
            };
            SimJob::new(
                class,
                (template, runs[template]),
                label,
                src,
                user,
                t,
                work_s,
                (written_for / 3600.0).ceil().max(1.0) * 3600.0,
                truth,
            )
        })
        .collect()
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

/// Why a job was killed at its time limit, graded by the world (its truth), not by any
/// scheduler's prediction: the first of these counterfactuals that holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillCause {
    /// Alone on a whole GPU of the type it got, at the default clock, it outlasts its limit:
    /// too slow a type for it (or too long a job for its limit anywhere).
    Type,
    /// Alone with the share it held, at the default clock, it would still have outlasted its
    /// limit: too small a share.
    Share,
    /// It would have finished with what it held at the default clock, and its GPU ran below
    /// that clock during its run.
    Clock,
    /// It would have finished alone with what it held at the default clock: its neighbours on
    /// the GPU (contention, or another user's context time-sliced with it) slowed it.
    Neighbour,
}

/// What one run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct RunMetrics {
    /// The trace's jobs (a job and its reruns are one job).
    pub jobs: usize,
    /// Runs that never started, and runs that started but never finished (nor were killed).
    pub unstarted: usize,
    pub unfinished: usize,
    /// Runs Slurm killed at their time limit (a job killed twice counts twice).
    pub killed: usize,
    /// Reruns users submitted after kills (see [`Reruns`]).
    pub reruns: usize,
    /// Jobs whose last run was killed, with no rerun left: their work never completed.
    pub failed: usize,
    /// Of the killed runs, the ones that would have finished within their limit alone on the
    /// type they got at its default clock: killed by the scheduler's clock, share or co-location.
    pub killed_by_sharing_or_clock: usize,
    /// GPU energy the killed runs drew (their work was lost).
    pub killed_gpu_energy_j: f64,
    /// The job (trace index) of each killed run, for comparing runs of the same jobs.
    pub killed_jobs: Vec<usize>,
    /// The killed runs themselves (indices into the run's jobs, same order).
    pub killed_runs: Vec<usize>,
    /// Why each of `killed_jobs` was killed (same order), as the world grades it.
    pub kill_causes: Vec<KillCause>,
    /// Per killed run (same order), whether the scheduler left it as its user asked.
    pub killed_as_asked: Vec<bool>,
    /// The facility meter, to be closed at a horizon at or after the run's end.
    pub meter: EnergyMeter,
    /// JCT of every job whose last run finished: from its first submission to that finish,
    /// its killed runs and their reruns' waits and boots included.
    pub jct_s: Vec<f64>,
    /// JCT of every job that started: as `jct_s`, and a job that failed for good counted until
    /// its last kill plus a run of its work alone on the type it had at the default clock (what
    /// its user waits at least).
    pub jct_all_s: Vec<f64>,
    /// Of the jobs in `jct_s`, the mean time waiting (each run's submit to start, summed over
    /// its runs) and running (each run's start to end, summed): they add up to its JCT.
    pub mean_wait_s: f64,
    pub mean_run_s: f64,
    /// When the last job finished or was killed.
    pub makespan_s: f64,
    /// Allocated GPU share-time over capacity-time.
    pub alloc_rate: f64,
    /// SM-busy GPU time over capacity-time (the world's busy share).
    pub utilisation: f64,
    /// Jobs that ran slower than their bound allows, against running alone on a whole GPU of the
    /// type they got at its default clock, in the world.
    pub violations: usize,
    /// Powered-down nodes booted for a job.
    pub resumes: usize,
    /// The site factor of every job that started, as it was when it started (0 for a
    /// scheduler that sets none).
    pub site_factors: Vec<i32>,
    pub errors: Vec<PredictionError>,
    /// By the day jobs were submitted on: what the day's jobs cost and took.
    pub daily: Vec<Period>,
    /// How heshare used profiles (heshare as it ships only).
    pub profiles: Option<super::learning::ProfileStats>,
    /// Per job of the workload (in its order, reruns folded into the job they rerun): when its
    /// first run started, its JCT as `jct_all_s` counts it, and the GPU energy of all its runs
    /// (what a replay compares job by job across schedulers).
    pub by_job: Vec<JobOutcome>,
}

/// What became of one job of the workload.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct JobOutcome {
    pub submit_s: f64,
    pub start_s: Option<f64>,
    pub jct_s: Option<f64>,
    pub gpu_energy_j: f64,
}

/// The jobs submitted in one stretch of simulated time.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Period {
    /// Jobs that ended (their last run finished or was killed), and the GPU energy of all their
    /// runs as the meter split it (each job's GPUs' power by share and draw), summed.
    pub jobs: usize,
    pub gpu_energy_j: f64,
    /// Summed JCT (as `jct_all_s`).
    pub jct_s: f64,
    pub violations: usize,
}

/// A simulated day, seconds.
pub const DAY_S: f64 = 86_400.0;

impl Period {
    pub fn add(&mut self, o: &Period) {
        self.jobs += o.jobs;
        self.gpu_energy_j += o.gpu_energy_j;
        self.jct_s += o.jct_s;
        self.violations += o.violations;
    }
}

impl RunMetrics {
    /// The meter closed at `horizon` (at or after this run's end).
    pub fn energy_until(&self, horizon: f64) -> super::meter::EnergyTotals {
        self.meter
            .close(self.makespan_s, horizon.max(self.makespan_s))
    }
}

/// Builds the simulated cluster from a node list.
pub fn build_state<'a>(
    cfg: &'a Config,
    nodes: &[crate::cluster::Node],
    mut jobs: Vec<SimJob>,
) -> State<'a> {
    // Every job given is one of the trace's: a run of itself.
    for (i, j) in jobs.iter_mut().enumerate() {
        j.origin = i;
        j.attempt = 0;
    }
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
                last_s: 0.0,
                busy_share_s: 0.0,
                busy_frac: 0.0,
            });
            view.gpus.push(GpuSlot {
                node: n.name.as_str().into(),
                index,
                gpu_type: t,
                jobs: vec![],
                power: crate::policy::SlotPower::Up,
                node_gpus: n.gpus,
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
            jobs: 0,
            power: PowerState::Up,
            boot_until: 0.0,
            usable: true,
            epoch: 0,
            running_vcpus: 0.0,
        });
    }
    State {
        cfg,
        params: ModelParams::of(cfg),
        nodes: sim_nodes,
        gpus,
        jobs,
        groups: crate::policy::GpuGroups::new(&view),
        view,
        now: 0.0,
        version: 0,
        queue: QueueOrder::default(),
        reruns: Reruns::default(),
        // Until the engine runs, every moment may bring a submission.
        next_submit_s: 0.0,
    }
}

/// The facility of `st`'s nodes: hosts as `spec` says, power saving as `saving` says.
pub fn facility_of(
    st: &State<'_>,
    spec: super::meter::HostSpec,
    saving: super::meter::PowerSaving,
) -> Facility {
    let nodes: Vec<(&str, f64)> = st
        .nodes
        .iter()
        .map(|n| {
            let t = n.res.gpu_type.unwrap_or(0);
            #[allow(clippy::cast_precision_loss)]
            let vcpus = n.cpu_milli as f64 / 1000.0;
            (st.cfg.gpu_types[t].name.as_str(), vcpus)
        })
        .collect();
    Facility::new(&nodes, spec, saving)
}

/// The engine's working set for one run.
struct Run<'w> {
    world: &'w World,
    heap: BinaryHeap<Queued>,
    seq: u64,
    meter: EnergyMeter,
    /// A share beside another user's MPS server runs outside MPS (the site's node rule).
    time_slice: bool,
    /// Nodes booting and powered down now (a pass is tried only where there are some).
    booting: usize,
    off: usize,
    /// Jobs holding resources now.
    allocated: usize,
    site_factors: Vec<i32>,
    /// Times of the queued arrivals and kills (a kill may bring a rerun), earliest first; a
    /// superseded kill stays until its time passes, which only makes `next_submit_s` early.
    submits: BinaryHeap<std::cmp::Reverse<TotalF64>>,
    /// User `k`'s name in the view, `u<k>`, made once.
    users: Vec<std::sync::Arc<str>>,
}

/// An `f64` ordered by `total_cmp`, for the heap of submission times.
#[derive(Debug, Clone, Copy, PartialEq)]
struct TotalF64(f64);

impl Eq for TotalF64 {}

impl PartialOrd for TotalF64 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for TotalF64 {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl Run<'_> {
    fn user(&mut self, k: u32) -> std::sync::Arc<str> {
        let k = k as usize;
        while self.users.len() <= k {
            self.users.push(format!("u{}", self.users.len()).into());
        }
        self.users[k].clone()
    }

    /// The earliest queued arrival or kill at or after `now`.
    fn next_submit_s(&mut self, now: f64) -> f64 {
        while self.submits.peek().is_some_and(|t| t.0.0 < now) {
            self.submits.pop();
        }
        self.submits.peek().map_or(f64::INFINITY, |t| t.0.0)
    }

    fn push(&mut self, t: f64, ev: Event) {
        if matches!(ev, Event::Arrival(_) | Event::Kill(_)) {
            self.submits.push(std::cmp::Reverse(TotalF64(t)));
        }
        self.heap.push(Queued {
            t,
            seq: self.seq,
            ev,
        });
        self.seq += 1;
    }

    fn set_power(&mut self, st: &mut State<'_>, n: usize, p: PowerState) {
        let t = st.now;
        let old = st.nodes[n].power;
        if old == p {
            return;
        }
        self.booting -= usize::from(old == PowerState::Booting);
        self.off -= usize::from(old == PowerState::Off);
        self.booting += usize::from(p == PowerState::Booting);
        self.off += usize::from(p == PowerState::Off);
        st.nodes[n].power = p;
        st.nodes[n].epoch += 1;
        st.version += 1;
        self.meter.state(t, n, p);
    }

    /// Node `n` has no job from now on: with power saving, it is suspended `SuspendTime` later
    /// unless a job comes first.
    fn idle_from_now(&mut self, st: &mut State<'_>, n: usize) {
        let t = st.now;
        self.meter.allocated(t, n, false);
        if let Some(s) = self.meter.facility().saving.suspend_time_s {
            let e = st.nodes[n].epoch;
            self.push(t + s, Event::Suspend(n, e));
        }
    }
}

/// Where the first waiting job that could not start will start, judged from the running jobs'
/// time limits: the node, and when.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Reservation {
    node: usize,
    shadow_s: f64,
}

/// Runs the jobs of `st` to completion under `sched`, in `world`, metered in `facility`.
pub fn run(
    st: &mut State<'_>,
    world: &World,
    sched: &mut dyn Scheduler,
    facility: Facility,
    mut progress: impl FnMut(usize),
) -> RunMetrics {
    let gpu_idle: Vec<f64> = st.gpus.iter().map(|g| world.idle_w(g.gpu_type)).collect();
    let nodes_gpus: Vec<Vec<usize>> = st.nodes.iter().map(|n| n.gpus.clone()).collect();
    let mut r = Run {
        world,
        heap: BinaryHeap::new(),
        seq: 0,
        meter: EnergyMeter::new(facility, nodes_gpus, gpu_idle, st.jobs.len()),
        time_slice: st.cfg.node.other_user_share == OtherUserShare::TimeSlice,
        booting: 0,
        off: 0,
        allocated: 0,
        site_factors: Vec::new(),
        submits: BinaryHeap::new(),
        users: Vec::new(),
    };
    for j in 0..st.jobs.len() {
        let t = st.jobs[j].submit_s;
        r.push(t, Event::Arrival(j));
    }
    for n in 0..st.nodes.len() {
        r.idle_from_now(st, n);
    }
    let mut waiting: VecDeque<usize> = VecDeque::new();
    let mut order = QueueKeeper::default();
    let mut arrivals_left = st.jobs.len();
    let mut done = 0usize;
    let mut makespan = 0.0f64;
    loop {
        // Nothing but power saving left to happen (every job arrived, none holds resources):
        // give every waiting job one more chance on the cluster as it is (the engine otherwise
        // retries only what a freed node could take), else the run is over.
        if arrivals_left == 0 && r.allocated == 0 {
            if waiting.is_empty()
                || !start_waiting(st, sched, &mut r, &mut waiting, None, usize::MAX)
            {
                break;
            }
            continue;
        }
        let Some(Queued { t, ev, .. }) = r.heap.pop() else {
            if waiting.is_empty()
                || !start_waiting(st, sched, &mut r, &mut waiting, None, usize::MAX)
            {
                break;
            }
            continue;
        };
        // A finish event a later rate change superseded is not an event: taking its time would
        // move the clock (and the makespan and energy horizon) to a moment nothing happens at.
        match ev {
            Event::Finish(j, v)
                if st.jobs[j].version != v || !st.jobs[j].allocated() || st.jobs[j].booting =>
            {
                continue;
            }
            Event::Kill(j) if !st.jobs[j].allocated() || st.jobs[j].booting => continue,
            Event::Suspend(n, e) | Event::PoweredOff(n, e) if st.nodes[n].epoch != e => {
                continue;
            }
            _ => {}
        }
        st.now = t;
        st.next_submit_s = r.next_submit_s(t);
        let waiting_now: Vec<usize> = waiting.iter().copied().collect();
        let changed = sched.tick(st, &waiting_now);
        if sched.take_reordered() || order.stale(st, &waiting) {
            order.sort(st, sched, &mut waiting);
        }
        if changed {
            start_waiting(st, sched, &mut r, &mut waiting, None, 100);
        }
        match ev {
            Event::Arrival(j) => {
                arrivals_left -= 1;
                // Backfill: a job that fits now starts now, even with others waiting, where it
                // does not delay the reservation of the first of them.
                let res = waiting.front().and_then(|&h| reserve(st, h));
                if !try_start(st, sched, &mut r, j, res) {
                    order.insert(st, sched, &mut waiting, j);
                    st.version += 1;
                }
            }
            Event::Finish(j, _) | Event::Kill(j) => {
                let freed_node = st.gpus[st.jobs[j].gpus[0]].node;
                let killed = matches!(ev, Event::Kill(_)) && {
                    for &g in &st.jobs[j].gpus.clone() {
                        advance_gpu(st, g, t);
                    }
                    // A job whose work completes at its limit finished in time.
                    let job = &st.jobs[j];
                    job.work_s - job.done_s > 1e-9 * job.work_s.max(1.0)
                };
                finish(st, sched, &mut r, j, killed);
                makespan = makespan.max(t);
                if killed && st.jobs[j].attempt < st.reruns.max {
                    // Its user submits it again: a new arrival, now.
                    let again = st.jobs[j].rerun(t, st.reruns.limit_factor);
                    st.jobs.push(again);
                    r.meter.add_job();
                    r.push(t, Event::Arrival(st.jobs.len() - 1));
                    arrivals_left += 1;
                } else {
                    done += 1;
                    progress(done);
                }
                // Freed resources: start what now fits, in queue order (backfill within a bounded
                // look-ahead, as Slurm's bf_max_job_test does).
                start_waiting(st, sched, &mut r, &mut waiting, Some(freed_node), 100);
            }
            Event::Suspend(n, _) => {
                if st.nodes[n].jobs == 0 && st.nodes[n].power == PowerState::Up {
                    r.set_power(st, n, PowerState::PoweringDown);
                    let e = st.nodes[n].epoch;
                    let timeout = r.meter.facility().saving.suspend_timeout_s;
                    r.push(t + timeout, Event::PoweredOff(n, e));
                }
            }
            Event::PoweredOff(n, _) => {
                if st.nodes[n].power == PowerState::PoweringDown {
                    r.set_power(st, n, PowerState::Off);
                }
            }
            Event::NodeUp(n) => {
                boot_done(st, sched, &mut r, n);
                start_waiting(st, sched, &mut r, &mut waiting, Some(n), 100);
            }
        }
    }
    let mut m = close(st, world, r, makespan);
    m.profiles = sched.profile_stats();
    m.killed_as_asked = m
        .killed_runs
        .iter()
        .map(|&k| sched.left_as_asked(k))
        .collect();
    m
}

/// Why `j`, killed at its limit, was killed (see [`KillCause`]).
fn kill_cause(st: &State<'_>, world: &World, j: &SimJob) -> KillCause {
    let t = st.gpus[j.gpus[0]].gpu_type;
    let outlasts = |rate: f64| j.work_s / rate.max(1e-12) > j.limit_s;
    if outlasts(world.alone_rate(j.class, &j.truth, t)) {
        return KillCause::Type;
    }
    if !j.exclusive && outlasts(world.alone_rate_with(j.class, &j.truth, t, j.share)) {
        return KillCause::Share;
    }
    let default = st.cfg.gpu_types[t].default_sm_clock.0;
    if j.clocks.iter().any(|&(_, mhz)| mhz < default) {
        return KillCause::Clock;
    }
    KillCause::Neighbour
}

/// Keeps the waiting queue in Slurm's priority order. Below `PriorityMaxAge` every job's age
/// factor grows at the same rate, so the order only changes when a job arrives (put in its
/// place), when site factors change (the scheduler says so), and once the oldest waiting job
/// reaches the maximum age (from then on the queue is sorted at every event).
#[derive(Debug, Default)]
struct QueueKeeper {
    /// Some waiting job had reached the maximum age at the last sort.
    capped: bool,
}

impl QueueKeeper {
    fn stale(&self, st: &State<'_>, waiting: &VecDeque<usize>) -> bool {
        st.queue.multifactor
            && (self.capped
                || waiting
                    .iter()
                    .any(|&j| st.now - st.jobs[j].submit_s >= st.queue.max_age_s))
    }

    fn sort(&mut self, st: &State<'_>, sched: &dyn Scheduler, waiting: &mut VecDeque<usize>) {
        st.queue.sort(
            st.now,
            waiting,
            |j| st.jobs[j].submit_s,
            |j| sched.site_factor(j),
        );
        self.capped = st.queue.multifactor
            && waiting
                .iter()
                .any(|&j| st.now - st.jobs[j].submit_s >= st.queue.max_age_s);
    }

    /// Puts a newly waiting job `j` where its priority puts it (at the back when every job
    /// has the same site factor: it is the youngest).
    fn insert(
        &mut self,
        st: &State<'_>,
        sched: &dyn Scheduler,
        waiting: &mut VecDeque<usize>,
        j: usize,
    ) {
        let q = st.queue;
        let p = |k: usize| q.priority(st.now, st.jobs[k].submit_s, sched.site_factor(k));
        let pj = p(j);
        // The first job it outranks (strictly: among equals the older one stays ahead).
        let at = if q.multifactor {
            waiting.iter().position(|&k| p(k) < pj)
        } else {
            None
        };
        match at {
            Some(i) => waiting.insert(i, j),
            None => waiting.push_back(j),
        }
    }
}

/// Tries the first `depth` waiting jobs, in queue order (only those that could use `freed` when
/// given: it is the only node that gained room since they last failed). The first job that
/// cannot start gets a reservation; the jobs behind it start only where they do not delay it.
/// True if any started.
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
    let mut res: Option<Option<Reservation>> = None;
    while k < waiting.len() && tried < depth {
        let wj = waiting[k];
        tried += 1;
        let blocking = res.flatten();
        if freed.is_none_or(|n| could_use(st, wj, n)) && try_start(st, sched, r, wj, blocking) {
            waiting.remove(k);
            started = true;
            continue;
        }
        if res.is_none() {
            res = Some(reserve(st, wj));
        }
        k += 1;
    }
    started
}

/// The reservation of waiting job `h`: the node where its request (as its trace entry gives
/// it) fits soonest as the jobs there end by their time limits, and when. `None` where no node
/// could ever take it.
fn reserve(st: &State<'_>, h: usize) -> Option<Reservation> {
    let job = &st.jobs[h];
    let share = super::schedulers::is_share(job);
    let want = u32::from(trace_share(job).get());
    let mut best: Option<Reservation> = None;
    // Per node, reused: its GPUs the job may have, and the jobs there with when each ends at
    // the latest.
    let mut allowed: Vec<usize> = Vec::new();
    let mut ending: Vec<(f64, usize)> = Vec::new();
    let mut here: Vec<usize> = Vec::new();
    for (n, node) in st.nodes.iter().enumerate() {
        if node.power == PowerState::PoweringDown
            || i64::try_from(node.cpu_milli).unwrap_or(i64::MAX) < job.pod.cpu_milli
            || i64::try_from(node.memory_mib).unwrap_or(i64::MAX) < job.pod.memory_mib
        {
            continue;
        }
        allowed.clear();
        allowed.extend(
            node.gpus
                .iter()
                .copied()
                .filter(|&g| st.type_allowed(job, st.gpus[g].gpu_type)),
        );
        if allowed.len() < job.num_gpus as usize {
            continue;
        }
        // The jobs here, by when they end at the latest.
        here.clear();
        here.extend(
            node.gpus
                .iter()
                .flat_map(|&g| st.gpus[g].jobs.iter().copied()),
        );
        here.sort_unstable();
        here.dedup();
        let end = |j: usize| st.jobs[j].ends_by_limit(node.boot_until);
        ending.clear();
        ending.extend(here.iter().map(|&j| (end(j), j)));
        // Stable, by end alone: the order `here` had among equal ends stays.
        ending.sort_by(|a, b| a.0.total_cmp(&b.0));
        here.clear();
        here.extend(ending.iter().map(|&(_, j)| j));
        let fits = |gone: usize| {
            let left = &here[gone..];
            let cpu: i64 = left.iter().map(|&j| st.jobs[j].pod.cpu_milli).sum();
            let mem: i64 = left.iter().map(|&j| st.jobs[j].pod.memory_mib).sum();
            if i64::try_from(node.cpu_milli).unwrap_or(i64::MAX) - cpu < job.pod.cpu_milli
                || i64::try_from(node.memory_mib).unwrap_or(i64::MAX) - mem < job.pod.memory_mib
            {
                return false;
            }
            let on = |g: usize| st.gpus[g].jobs.iter().filter(|j| left.contains(j));
            if share {
                allowed.iter().any(|&g| {
                    !on(g).clone().any(|&j| st.jobs[j].exclusive)
                        && on(g)
                            .map(|&j| u32::from(st.jobs[j].share.get()))
                            .sum::<u32>()
                            + want
                            <= 100
                })
            } else {
                allowed.iter().filter(|&&g| on(g).next().is_none()).count() >= job.num_gpus as usize
            }
        };
        let Some(gone) = (0..=here.len()).find(|&k| fits(k)) else {
            continue;
        };
        let at = if gone == 0 {
            st.now.max(node.boot_until)
        } else {
            ending[gone - 1].0.max(st.now)
        };
        if best.is_none_or(|b| at < b.shadow_s) {
            best = Some(Reservation {
                node: n,
                shadow_s: at,
            });
        }
    }
    best
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

/// Brings `gpu`'s jobs' progress and its busy time up to `t`.
fn advance_gpu(st: &mut State<'_>, gpu: usize, t: f64) {
    let g = &mut st.gpus[gpu];
    let dt = (t - g.last_s).max(0.0);
    if !g.jobs.is_empty() {
        g.busy_share_s += g.busy_frac * dt;
    }
    g.last_s = t;
    let jobs: Vec<usize> = st.gpus[gpu].jobs.clone();
    for j in jobs {
        let job = &mut st.jobs[j];
        let dt = (t - job.last_s).max(0.0);
        job.done_s += job.rate * dt;
        job.busy_s += job.busy * dt;
        job.neighbour_busy_s += job.neighbour_busy * dt;
        job.last_s = t;
    }
}

/// The user MPS serves on `gpu` now: the first MPS client's, when the GPU is shared.
fn mps_user(st: &State<'_>, gpu: usize) -> Option<u32> {
    let g = &st.gpus[gpu];
    let first = *g.jobs.iter().find(|&&j| !st.jobs[j].native)?;
    (!st.jobs[first].exclusive).then_some(st.jobs[first].user)
}

/// Applies the scheduler's clock to `gpu`, recomputes its jobs' true rates and power, tells the
/// meter, and re-issues their finish events.
fn refresh_gpu(st: &mut State<'_>, sched: &mut dyn Scheduler, r: &mut Run<'_>, gpu: usize) {
    let t = st.now;
    let node_up = st.nodes[st.gpus[gpu].node].power == PowerState::Up;
    if st.gpus[gpu].jobs.is_empty() || !node_up {
        // Idle, or holding jobs that wait for their node to boot: nothing runs.
        let clock = st.cfg.gpu_types[st.gpus[gpu].gpu_type].default_sm_clock;
        let g = &mut st.gpus[gpu];
        g.clock = clock;
        g.busy_frac = 0.0;
        for &j in &g.jobs {
            st.jobs[j].rate = 0.0;
            st.jobs[j].busy = 0.0;
            st.jobs[j].neighbour_busy = 0.0;
            st.jobs[j].version += 1;
        }
        r.meter.gpu(t, gpu, 0.0, &[]);
        return;
    }
    let clock = sched.clock(st, gpu);
    let serving = mps_user(st, gpu);
    let runs: Vec<Runs> = st.gpus[gpu]
        .jobs
        .iter()
        .map(|&j| {
            let job = &st.jobs[j];
            if job.native {
                Runs::Native
            } else if serving.is_none_or(|u| u == job.user) {
                Runs::Mps
            } else {
                Runs::Waits
            }
        })
        .collect();
    let truth = {
        let g = &st.gpus[gpu];
        let occ: Vec<Occupant<'_>> = g
            .jobs
            .iter()
            .zip(&runs)
            .map(|(&j, &runs)| {
                let job = &st.jobs[j];
                Occupant {
                    class: job.class,
                    truth: &job.truth,
                    share: job.share,
                    runs,
                }
            })
            .collect();
        r.world.gpu(g.gpu_type, f64::from(clock.0), &occ)
    };
    let attributed: Vec<(usize, f64)> = st.gpus[gpu]
        .jobs
        .iter()
        .copied()
        .zip(truth.job_power_w.iter().copied())
        .collect();
    r.meter.gpu(t, gpu, truth.power_w, &attributed);
    let g = &mut st.gpus[gpu];
    g.clock = clock;
    g.busy_frac = truth.busy;
    let jobs = g.jobs.clone();
    let crowded = jobs.len() > 1;
    // The node helper's neighbours: the MPS server's other clients (a context time-sliced with
    // the server's does not run beside them).
    let clients: f64 = truth
        .job_busy
        .iter()
        .zip(&runs)
        .filter(|(_, r)| **r == Runs::Mps)
        .map(|(b, _)| b)
        .sum();
    for (k, j) in jobs.into_iter().enumerate() {
        let job = &mut st.jobs[j];
        // A multi-GPU job moves at the pace of its slowest GPU; all its GPUs are alike here.
        job.rate = truth.rate[k];
        job.busy = truth.job_busy[k];
        job.neighbour_busy = if runs[k] == Runs::Mps {
            (clients - truth.job_busy[k]).max(0.0)
        } else {
            0.0
        };
        job.sliced |= runs[k] != Runs::Mps;
        job.crowded |= crowded;
        if job.gpus.first() == Some(&gpu) && job.clocks.last().is_none_or(|c| c.1 != clock.0) {
            job.clocks.push((t, clock.0));
        }
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

/// The power states a placement attempt may use, in Slurm's order: powered-up nodes, then
/// booting ones, then powered-down ones.
const PASSES: [&[PowerState]; 3] = [
    &[PowerState::Up],
    &[PowerState::Up, PowerState::Booting],
    &[PowerState::Up, PowerState::Booting, PowerState::Off],
];

/// Asks the scheduler where job `j` starts, pass by pass, under `res` (the reserved node is not
/// usable unless the job ends by its limit before the reservation); starts it there.
fn try_start(
    st: &mut State<'_>,
    sched: &mut dyn Scheduler,
    r: &mut Run<'_>,
    j: usize,
    res: Option<Reservation>,
) -> bool {
    let blocked = res
        .filter(|b| st.now + st.jobs[j].limit_s > b.shadow_s)
        .map(|b| b.node);
    let mut placed = None;
    for (k, pass) in PASSES.iter().enumerate() {
        if (k == 1 && r.booting == 0) || (k == 2 && r.off == 0) {
            continue;
        }
        for (n, node) in st.nodes.iter_mut().enumerate() {
            node.usable = pass.contains(&node.power) && blocked != Some(n);
        }
        placed = sched.place(st, j);
        if placed.is_some() {
            break;
        }
    }
    for node in &mut st.nodes {
        node.usable = node.power == PowerState::Up;
    }
    let Some(Placement {
        gpus,
        share,
        exclusive,
    }) = placed
    else {
        return false;
    };
    let t = st.now;
    for &g in &gpus {
        advance_gpu(st, g, t);
    }
    let node = st.gpus[gpus[0]].node;
    if st.nodes[node].power == PowerState::Off {
        r.set_power(st, node, PowerState::Booting);
        let resume = r.meter.facility().saving.resume_s;
        st.nodes[node].boot_until = t + resume;
        r.push(t + resume, Event::NodeUp(node));
    }
    r.site_factors.push(sched.site_factor(j));
    let up = st.nodes[node].power == PowerState::Up;
    // A share beside another user's MPS server: the site's node rule runs it outside MPS.
    let native = !exclusive
        && r.time_slice
        && gpus
            .iter()
            .any(|&g| mps_user(st, g).is_some_and(|u| u != st.jobs[j].user));
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
        job.alloc_s = Some(t);
        job.booting = !up;
        job.last_s = t;
    }
    if up {
        begin(st, r, j);
    }
    let mut pod = st.jobs[j].pod.clone();
    pod.gpu_milli = if pod.num_gpus == 0 {
        0
    } else {
        u32::from(share.get()) * 10
    };
    st.nodes[node].res.take(&pod, &local);
    if st.nodes[node].jobs == 0 {
        r.meter.allocated(t, node, true);
    }
    st.nodes[node].jobs += 1;
    r.allocated += 1;
    // A pending suspend is void.
    st.nodes[node].epoch += 1;
    for &g in &gpus {
        st.gpus[g].jobs.push(j);
        let user = r.user(st.jobs[j].user);
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

/// Job `j` starts running now: its limit starts, its cores draw.
fn begin(st: &mut State<'_>, r: &mut Run<'_>, j: usize) {
    let t = st.now;
    let job = &mut st.jobs[j];
    job.start_s = Some(t);
    job.booting = false;
    job.last_s = t;
    let limit = job.limit_s;
    #[allow(clippy::cast_precision_loss)]
    let vcpus = job.pod.cpu_milli.max(0) as f64 / 1000.0;
    r.push(t + limit, Event::Kill(j));
    let node = st.gpus[st.jobs[j].gpus[0]].node;
    st.nodes[node].running_vcpus += vcpus;
    r.meter.vcpus(t, node, st.nodes[node].running_vcpus);
}

/// Node `n` has booted: its jobs start.
fn boot_done(st: &mut State<'_>, sched: &mut dyn Scheduler, r: &mut Run<'_>, n: usize) {
    if st.nodes[n].power != PowerState::Booting {
        return;
    }
    r.set_power(st, n, PowerState::Up);
    let mut jobs: Vec<usize> = st.nodes[n]
        .gpus
        .iter()
        .flat_map(|&g| st.gpus[g].jobs.iter().copied())
        .filter(|&j| st.jobs[j].booting)
        .collect();
    jobs.sort_unstable();
    jobs.dedup();
    for &j in &jobs {
        begin(st, r, j);
    }
    let t = st.now;
    for g in st.nodes[n].gpus.clone() {
        advance_gpu(st, g, t);
        refresh_gpu(st, sched, r, g);
    }
    if st.nodes[n].jobs == 0 {
        r.idle_from_now(st, n);
    }
}

/// Job `j` leaves its GPUs: finished, or killed at its time limit.
fn finish(st: &mut State<'_>, sched: &mut dyn Scheduler, r: &mut Run<'_>, j: usize, killed: bool) {
    let t = st.now;
    let gpus = st.jobs[j].gpus.clone();
    for &g in &gpus {
        advance_gpu(st, g, t);
    }
    if killed {
        st.jobs[j].killed_s = Some(t);
    } else {
        st.jobs[j].finish_s = Some(t);
    }
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
    #[allow(clippy::cast_precision_loss)]
    let vcpus = st.jobs[j].pod.cpu_milli.max(0) as f64 / 1000.0;
    if st.jobs[j].start_s.is_some() {
        let n = &mut st.nodes[node];
        n.running_vcpus = (n.running_vcpus - vcpus).max(0.0);
        r.meter.vcpus(t, node, n.running_vcpus);
    }
    for &g in &gpus {
        let pos = st.gpus[g].jobs.iter().position(|&x| x == j);
        if let Some(p) = pos {
            st.gpus[g].jobs.remove(p);
            st.view.gpus[g].jobs.remove(p);
            st.groups.update(g, &st.view.gpus[g]);
        }
        refresh_gpu(st, sched, r, g);
    }
    st.nodes[node].jobs -= 1;
    r.allocated -= 1;
    if st.nodes[node].jobs == 0 {
        st.nodes[node].epoch += 1;
        r.idle_from_now(st, node);
    }
    st.version += 1;
    // Every GPU it held was flushed to now above: its energy is whole.
    st.jobs[j].energy_j = r.meter.job_energy_j().get(j).copied().unwrap_or(0.0);
    sched.finished(st, j);
}

fn close(st: &mut State<'_>, world: &World, r: Run<'_>, makespan: f64) -> RunMetrics {
    let end = makespan;
    for g in 0..st.gpus.len() {
        advance_gpu(st, g, end);
    }
    let meter = r.meter;
    let energy = meter.job_energy_j();
    // The trace's jobs come first; reruns follow in the order they were submitted, so a job's
    // last run is its rerun with the highest index.
    let jobs = st.jobs.iter().take_while(|j| j.attempt == 0).count();
    let mut last: Vec<usize> = (0..jobs).collect();
    for (k, j) in st.jobs.iter().enumerate().skip(jobs) {
        last[j.origin] = k;
    }
    let killed_runs: Vec<usize> = st
        .jobs
        .iter()
        .enumerate()
        .filter(|(_, j)| j.killed_s.is_some())
        .map(|(k, _)| k)
        .collect();
    let mut m = RunMetrics {
        jobs,
        unstarted: st.jobs.iter().filter(|j| j.alloc_s.is_none()).count(),
        unfinished: st.jobs.iter().filter(|j| j.allocated()).count(),
        killed: killed_runs.len(),
        reruns: st.jobs.len() - jobs,
        failed: last
            .iter()
            .filter(|&&k| st.jobs[k].killed_s.is_some())
            .count(),
        killed_by_sharing_or_clock: 0,
        killed_gpu_energy_j: killed_runs.iter().map(|&k| energy[k]).sum(),
        killed_jobs: killed_runs.iter().map(|&k| st.jobs[k].origin).collect(),
        killed_runs,
        kill_causes: Vec::new(),
        killed_as_asked: Vec::new(),
        resumes: meter.resumes(),
        site_factors: r.site_factors,
        meter,
        jct_s: Vec::new(),
        jct_all_s: Vec::new(),
        mean_wait_s: 0.0,
        mean_run_s: 0.0,
        makespan_s: end,
        alloc_rate: 0.0,
        utilisation: 0.0,
        violations: 0,
        errors: Vec::new(),
        daily: Vec::new(),
        profiles: None,
        by_job: vec![JobOutcome::default(); jobs],
    };
    for j in &st.jobs {
        m.by_job[j.origin].gpu_energy_j += j.energy_j;
    }
    for (o, out) in m.by_job.iter_mut().enumerate() {
        out.submit_s = st.jobs[o].submit_s;
    }
    #[allow(clippy::cast_precision_loss)]
    let capacity_time = st.gpus.len() as f64 * end.max(1e-9);
    let mut alloc = 0.0;
    for g in &st.gpus {
        m.utilisation += g.busy_share_s;
    }
    // The cast is exact: days from the start are few.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let day = |submit_s: f64| (submit_s / DAY_S).floor().max(0.0) as usize;
    // Per job of the trace, over its runs: time waiting (submit to start) and running.
    let mut waited = vec![0.0; jobs];
    let mut ran = vec![0.0; jobs];
    let reference = &st.cfg.gpu_types[st.cfg.reference_gpu];
    for j in &st.jobs {
        let Some(s) = j.start_s else { continue };
        let Some(f) = j.finish_s.or(j.killed_s) else {
            continue;
        };
        waited[j.origin] += s - j.submit_s;
        ran[j.origin] += f - s;
        alloc += f64::from(j.num_gpus) * j.share.fraction() * (f - s);
        // A run's energy goes to the day its job was first submitted on.
        let wk = day(st.jobs[j.origin].submit_s);
        if m.daily.len() <= wk {
            m.daily.resize(wk + 1, Period::default());
        }
        m.daily[wk].gpu_energy_j += j.energy_j;
        let t = st.gpus[j.gpus[0]].gpu_type;
        let real_rate = world.alone_rate(j.class, &j.truth, t);
        let alone = j.work_s / real_rate.max(1e-12);
        if j.killed_s.is_some() {
            m.kill_causes.push(kill_cause(st, world, j));
            if alone <= j.limit_s {
                m.killed_by_sharing_or_clock += 1;
            }
            continue;
        }
        let class = &st.cfg.classes[j.class];
        let gt = &st.cfg.gpu_types[t];
        let bound = class.slowdown_bound.unwrap_or(st.cfg.policy.slowdown_bound);
        if (f - s) > alone * bound * (1.0 + 1e-6) {
            m.violations += 1;
            m.daily[wk].violations += 1;
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
        let predicted_rate = class.reference_runtime_s / p.jobs[0].runtime.0;
        let real_power = world.alone_power_w(j.class, &j.truth, t);
        m.errors.push(PredictionError {
            class: j.class,
            gpu_type: t,
            runtime_ratio: real_rate / predicted_rate.max(1e-12),
            energy_ratio: (p.power.0 / predicted_rate.max(1e-12))
                / (real_power / real_rate.max(1e-12)),
        });
    }
    // Per job of the trace: its JCT runs from its first submission to the end of its last run.
    let (mut wait_sum, mut run_sum) = (0.0, 0.0);
    for (o, &k) in last.iter().enumerate() {
        let first = &st.jobs[o];
        if first.start_s.is_none() {
            continue;
        }
        m.by_job[o].start_s = first.start_s;
        let wk = day(first.submit_s);
        let j = &st.jobs[k];
        let jct = if let Some(f) = j.finish_s {
            m.jct_s.push(f - first.submit_s);
            wait_sum += waited[o];
            run_sum += ran[o];
            f - first.submit_s
        } else if let Some(kill) = j.killed_s {
            // Failed for good: until its last kill, plus the least its user still waits for
            // the work (a run alone on the type it had at the default clock).
            let t = st.gpus[j.gpus[0]].gpu_type;
            kill - first.submit_s + j.work_s / world.alone_rate(j.class, &j.truth, t).max(1e-12)
        } else {
            // A rerun that never started or never ended: not a completion to time.
            continue;
        };
        m.jct_all_s.push(jct);
        m.by_job[o].jct_s = Some(jct);
        if m.daily.len() <= wk {
            m.daily.resize(wk + 1, Period::default());
        }
        m.daily[wk].jobs += 1;
        m.daily[wk].jct_s += jct;
    }
    #[allow(clippy::cast_precision_loss)]
    let n = m.jct_s.len().max(1) as f64;
    m.mean_wait_s = wait_sum / n;
    m.mean_run_s = run_sum / n;
    m.alloc_rate = alloc / capacity_time;
    m.utilisation /= capacity_time;
    m
}

/// The least facility energy the jobs could need in the world, each alone on its most
/// efficient allowed type present and clock, charged what it keeps on while it runs (its GPUs'
/// idle and context power and its share of their node's host, in proportion to the GPU time it
/// uses, as with perfect packing), its work and its cores, at the wall; no idle hardware, no
/// waiting.
pub fn energy_lower_bound_j(st: &State<'_>, world: &World, facility: &Facility) -> f64 {
    let types = st.cfg.gpu_types.len();
    // Per type: the least host power per GPU of its nodes, and that node's per-vCPU power.
    let mut host: Vec<Option<(f64, f64)>> = vec![None; types];
    for (n, node) in st.nodes.iter().enumerate() {
        let Some(t) = node.res.gpu_type else { continue };
        let h = &facility.hosts[n];
        #[allow(clippy::cast_precision_loss)]
        let per_gpu = h.idle_w / node.gpus.len().max(1) as f64;
        if host[t].is_none_or(|(w, _)| per_gpu < w) {
            host[t] = Some((per_gpu, h.vcpu_w));
        }
    }
    let psu = facility.psu_efficiency.max(1e-9);
    let mut total = 0.0;
    for job in &st.jobs {
        let mut best = f64::INFINITY;
        #[allow(clippy::cast_precision_loss)]
        let vcpus = job.pod.cpu_milli.max(0) as f64 / 1000.0;
        for (t, gt) in st.cfg.gpu_types.iter().enumerate() {
            let Some((host_w, vcpu_w)) = host[t] else {
                continue;
            };
            if !st.type_allowed(job, t) {
                continue;
            }
            for &f in gt.sm_clocks.iter().step_by(4) {
                let a = world.alone_point(t, f64::from(f.0), job.class, &job.truth);
                let runtime = job.work_s / a.rate.max(1e-12);
                let per_gpu = (a.static_w + host_w) * a.busy + a.work_w;
                let e = (per_gpu * f64::from(job.num_gpus) + vcpu_w * vcpus) * runtime / psu;
                best = best.min(e);
            }
        }
        if best.is_finite() {
            total += best;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{OPENB_GPU_NODES, parse_node_list};
    use crate::config::BUNDLED_CONFIG;
    use crate::sim::meter::{HostSpec, PowerSaving};
    use crate::sim::packing::TypicalPods;
    use crate::sim::schedulers::{NAMES, Placement, Scheduler, by_name};
    use crate::sim::trace::{OPENB_DEFAULT_PODS, TraceFormat, parse};
    use crate::units::Watts;
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
            let node = st.gpus[p.gpus[0]].node;
            assert!(
                p.gpus.iter().all(|&g| st.gpus[g].node == node),
                "all GPUs on one node"
            );
            assert!(
                st.usable(node),
                "{}: placed on a node it may not use",
                self.name()
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
        fn tick(&mut self, st: &State<'_>, waiting: &[usize]) -> bool {
            self.inner.tick(st, waiting)
        }
        fn started(&mut self, st: &State<'_>, j: usize) {
            self.inner.started(st, j);
        }
        fn finished(&mut self, st: &State<'_>, j: usize) {
            self.inner.finished(st, j);
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

    fn present(nodes: &[crate::cluster::Node]) -> Vec<usize> {
        let mut p: Vec<usize> = nodes.iter().filter_map(|n| n.gpu_type).collect();
        p.sort_unstable();
        p.dedup();
        p
    }

    /// The first `n` two-GPU T4 nodes of `nodes`.
    fn t4_pairs(
        cfg: &Config,
        nodes: &[crate::cluster::Node],
        n: usize,
    ) -> Vec<crate::cluster::Node> {
        let t4 = cfg.gpu_type("t4").expect("t4");
        let out: Vec<crate::cluster::Node> = nodes
            .iter()
            .filter(|n| n.gpu_type == Some(t4) && n.gpus == 2)
            .take(n)
            .cloned()
            .collect();
        assert_eq!(out.len(), n);
        out
    }

    /// `jobs` jobs drawn for a cluster of `gpus` T4s at load 0.5, every one new: the scenarios
    /// below then set what they test.
    fn t4_jobs(
        cfg: &Config,
        world: &World,
        trace: &[TraceJob],
        (gpus, jobs, seed): (usize, usize, u64),
    ) -> Vec<SimJob> {
        generate_jobs(
            cfg,
            world,
            trace,
            gpus,
            &[cfg.gpu_type("t4").expect("t4")],
            WorkloadParams {
                load: 0.5,
                jobs,
                max_duration_s: 1000.0,
                users: 1,
                seed,
                recurrence: Recurrence::independent(),
            },
        )
    }

    fn typical(trace: &[TraceJob]) -> TypicalPods {
        TypicalPods::from_pods(&trace.iter().map(Pod::from_trace).collect::<Vec<_>>())
    }

    fn saving(suspend: Option<f64>) -> PowerSaving {
        PowerSaving {
            suspend_time_s: suspend,
            ..PowerSaving::default()
        }
    }

    fn simulate<'a>(
        cfg: &'a Config,
        nodes: &[crate::cluster::Node],
        trace: &[TraceJob],
        typical: &'a TypicalPods,
        name: &str,
        seed: u64,
    ) -> (RunMetrics, State<'a>, f64) {
        let gpus = nodes.iter().map(|n| n.gpus as usize).sum();
        let wl = WorkloadParams {
            load: 0.8,
            jobs: 400,
            max_duration_s: 20_000.0,
            users: 3,
            seed,
            recurrence: Recurrence::independent(),
        };
        let world = World::new(cfg);
        let jobs = generate_jobs(cfg, &world, trace, gpus, &present(nodes), wl);
        let mut st = build_state(cfg, nodes, jobs);
        let fac = facility_of(&st, HostSpec::Sourced, saving(Some(600.0)));
        let bound = energy_lower_bound_j(&st, &world, &fac);
        let inner = by_name(name, &st, typical, &world).expect("known");
        let mut sched = Checked { inner, checks: 0 };
        let mut finished = 0;
        let m = run(&mut st, &world, &mut sched, fac, |n| finished = n);
        assert!(sched.checks > 0);
        assert_eq!(
            finished, m.jobs,
            "{name}: progress reports every job's last finish or kill"
        );
        assert_eq!(st.jobs.len(), m.jobs + m.reruns, "{name}");
        (m, st, bound)
    }

    /// heshare learns only from runs that ended and were filed by an update: nothing submitted
    /// before the first update is decided with a profile, and recurring unlabelled jobs are.
    #[test]
    fn heshare_learns_from_ended_runs_after_an_update() {
        let (cfg, nodes, trace) = setup();
        let typical = typical(&trace);
        let gpus = nodes.iter().map(|n| n.gpus as usize).sum();
        let wl = WorkloadParams {
            load: 0.6,
            jobs: 600,
            max_duration_s: 4000.0,
            users: 3,
            seed: 11,
            recurrence: Recurrence {
                runs_per_template: 20.0,
                ..Recurrence::default()
            },
        };
        let world = World::new(&cfg);
        let jobs = generate_jobs(&cfg, &world, &trace, gpus, &present(&nodes), wl);
        assert!(
            jobs.iter().all(|j| j.label.is_none()),
            "nobody labels by default"
        );
        let early = jobs
            .iter()
            .filter(|j| j.submit_s < crate::sim::schedulers::shipped::PROFILE_UPDATE_S)
            .count();
        let mut st = build_state(&cfg, &nodes, jobs);
        let fac = facility_of(&st, HostSpec::Sourced, saving(Some(600.0)));
        let mut sched = by_name("heshare", &st, &typical, &world).expect("known");
        let m = run(&mut st, &world, sched.as_mut(), fac, |_| {});
        let p = m.profiles.expect("heshare reports its profiles");
        assert_eq!(
            p.submitted,
            600 + m.reruns,
            "reruns are submitted like any job"
        );
        assert!(early > 0 && p.as_asked >= early, "{early} early: {p:?}");
        assert!(p.with_profile > 100, "{p:?}");
        assert!(p.taught > 0 && p.taught <= p.submitted, "{p:?}");
        assert_eq!(p.foreign, 0, "{p:?}");
        // Every run heshare placed by a profile ended once, with the kill chance its cost
        // priced: no more than it placed, no more kills than happened, no chance above one.
        let k = p.kill_price;
        assert!(k.unpriced + k.priced > 100, "{k:?}");
        assert!(
            k.unpriced + k.priced <= p.with_profile + p.labelled,
            "{k:?} {p:?}"
        );
        assert!(
            k.unpriced_killed <= k.unpriced && k.priced_killed <= k.priced,
            "{k:?}"
        );
        assert!(k.unpriced_killed + k.priced_killed <= m.killed, "{k:?}");
        assert!(
            k.priced_expected >= crate::sim::learning::KillPrice::PRICED * k.priced as f64
                && k.priced_expected <= k.priced as f64,
            "{k:?}"
        );
    }

    /// A job heshare has no label and no profile for is left as its user asked: Slurm runs it
    /// with its own GRES, `mps:P` for a share (not a whole GPU it never asked for), whether or
    /// not the site opted in to resizing explicit shares (`resize_asked_shares`).
    #[test]
    fn heshare_leaves_a_job_it_knows_nothing_of_as_asked() {
        let (mut cfg, nodes, trace) = setup();
        let typical = typical(&trace);
        let gpus = nodes.iter().map(|n| n.gpus as usize).sum();
        // Every job a script of its own and nobody labels: nothing recurs, so nothing is
        // learned (an account's request-level profile may match, but never resizes a share).
        let wl = WorkloadParams {
            load: 0.8,
            jobs: 400,
            max_duration_s: 20_000.0,
            users: 3,
            seed: 5,
            recurrence: Recurrence {
                labelled: 0.0,
                ..Recurrence::independent()
            },
        };
        for resize in [false, true] {
            cfg.policy.resize_asked_shares = resize;
            let world = World::new(&cfg);
            let jobs = generate_jobs(&cfg, &world, &trace, gpus, &present(&nodes), wl);
            assert!(jobs.iter().all(|j| j.label.is_none()));
            let mut st = build_state(&cfg, &nodes, jobs);
            let fac = facility_of(&st, HostSpec::Sourced, saving(Some(600.0)));
            let mut sched = by_name("heshare", &st, &typical, &world).expect("known");
            let m = run(&mut st, &world, sched.as_mut(), fac, |_| {});
            let p = m.profiles.expect("heshare reports its profiles");
            assert!(p.as_asked > 300, "{p:?}");
            let mut shares = 0;
            for j in st.jobs.iter().filter(|j| j.alloc_s.is_some()) {
                if crate::sim::schedulers::is_share(j) && !j.exclusive {
                    shares += 1;
                    assert_eq!(j.share, crate::sim::schedulers::trace_share(j));
                } else {
                    assert!(!crate::sim::schedulers::is_share(j), "a share made whole");
                    assert!(j.exclusive && j.share == SharePct::FULL);
                    assert_eq!(j.gpus.len(), j.num_gpus as usize);
                }
            }
            assert!(shares > 20, "{shares} share jobs");
        }
    }

    #[test]
    fn every_job_ends_once_and_energy_adds_up_under_every_scheduler() {
        let (cfg, nodes, trace) = setup();
        let typical = typical(&trace);
        for name in NAMES {
            let (m, st, bound) = simulate(&cfg, &nodes, &trace, &typical, name, 7);
            assert_eq!(
                m.jct_s.len() + m.failed,
                m.jobs,
                "{name}: every job finished or failed for good"
            );
            assert_eq!(
                m.reruns + m.failed,
                m.killed,
                "{name}: each kill, a rerun or the end"
            );
            for (k, j) in st.jobs.iter().enumerate() {
                let s = j.start_s.expect("started");
                match (j.finish_s, j.killed_s) {
                    (Some(f), None) => {
                        assert!(j.submit_s <= s && s <= f, "{name}: job {k}");
                        assert!(
                            (j.done_s - j.work_s).abs() <= 1e-6 * j.work_s.max(1.0),
                            "{name}: work {} of {}",
                            j.done_s,
                            j.work_s
                        );
                        assert!(f - s <= j.limit_s + 1e-6, "{name}: ran past its limit");
                    }
                    (None, Some(x)) => {
                        assert!(
                            (x - s - j.limit_s).abs() < 1e-6,
                            "{name}: killed at its limit"
                        );
                        assert!(j.done_s < j.work_s, "{name}: a killed job's work is lost");
                    }
                    other => panic!("{name}: job {k} ended as {other:?}"),
                }
            }
            assert!(
                st.gpus.iter().all(|g| g.jobs.is_empty()),
                "{name}: GPUs empty at the end"
            );
            let e = m.energy_until(m.makespan_s);
            let attributed: f64 = m.meter.job_energy_j().iter().sum();
            assert!(
                (attributed - e.busy_gpu_j).abs() <= 1e-6 * e.busy_gpu_j,
                "{name}: jobs' energy {attributed} vs busy GPUs {}",
                e.busy_gpu_j
            );
            // Idle GPUs on awake nodes are charged: the GPUs drew more than the busy ones did.
            assert!(e.gpu_j > e.busy_gpu_j, "{name}: {e:?}");
            assert!(
                e.facility_j > e.gpu_j + e.host_j,
                "{name}: supplies lose something"
            );
            assert!(bound <= e.facility_j, "{name}: below the lower bound");
            assert!(
                m.alloc_rate > 0.0 && m.alloc_rate <= 1.0 && m.utilisation <= m.alloc_rate + 1e-9,
                "{name}"
            );
        }
    }

    /// A job whose limit is 0.3x its runtime alone is killed at it, submitted again at once
    /// with 0.6x, killed again, and finishes with 1.2x: one job, two kills, two reruns, its JCT
    /// from its first submission to its last finish, all three runs' energy counted. With one
    /// rerun allowed it fails for good after its second kill.
    #[test]
    fn a_killed_job_is_run_again_with_a_doubled_limit_and_counted_once() {
        let (cfg, nodes, trace) = setup();
        let node = t4_pairs(&cfg, &nodes, 1);
        let world = World::new(&cfg);
        let mut jobs = t4_jobs(&cfg, &world, &trace, (2, 1, 1));
        let class = cfg.classes_of(JobKind::Training)[0];
        let j = &mut jobs[0];
        j.class = class;
        j.truth = world.draw(class, 1.0, &mut SplitMix::new(2));
        (j.num_gpus, j.gpu_milli, j.submit_s, j.work_s) = (1, 1000, 100.0, 1000.0);
        (j.pod.num_gpus, j.pod.gpu_milli) = (1, 1000);
        j.gpu_types = vec![];
        let t4 = cfg.gpu_type("t4").expect("t4");
        let alone = 1000.0 / world.alone_rate(class, &j.truth, t4);
        j.limit_s = 0.3 * alone;
        for max in [2, 1] {
            let mut st = build_state(&cfg, &node, jobs.clone());
            st.reruns = Reruns {
                max,
                limit_factor: 2.0,
            };
            let fac = facility_of(&st, HostSpec::Flat(Watts(100.0)), saving(None));
            let m = run(
                &mut st,
                &world,
                &mut crate::sim::schedulers::SlurmExclusive,
                fac,
                |_| {},
            );
            assert_eq!((m.jobs, m.killed), (1, 2));
            assert_eq!(m.reruns, usize::try_from(max).expect("small"));
            assert_eq!(m.killed_jobs, [0, 0], "both kills are job 0's");
            let runs = &st.jobs;
            for k in 1..runs.len() {
                let (before, again) = (&runs[k - 1], &runs[k]);
                assert_eq!(
                    (again.origin, again.attempt),
                    (0, u32::try_from(k).expect("k"))
                );
                assert_eq!(
                    Some(again.submit_s),
                    before.killed_s,
                    "submitted at the kill"
                );
                assert!((again.limit_s - 2.0 * before.limit_s).abs() < 1e-9);
            }
            let energy = m.meter.job_energy_j();
            assert_eq!(energy.len(), runs.len());
            assert!(
                energy.iter().all(|&e| e > 0.0),
                "every run drew: {energy:?}"
            );
            if max == 2 {
                let f = runs[2].finish_s.expect("the second rerun finishes");
                assert_eq!(m.failed, 0);
                assert_eq!(m.jct_s, [f - 100.0]);
                assert_eq!(m.jct_all_s, m.jct_s);
                // Waiting and running add up to its JCT; it ran 0.3x + 0.6x + 1x its runtime.
                assert!((m.mean_wait_s + m.mean_run_s - (f - 100.0)).abs() < 1e-6);
                assert!(
                    (m.mean_run_s - 1.9 * alone).abs() < 1e-6 * alone,
                    "{}",
                    m.mean_run_s
                );
            } else {
                let k = runs[1].killed_s.expect("killed twice");
                assert_eq!(m.failed, 1);
                assert!(m.jct_s.is_empty(), "it never finished");
                assert!((m.jct_all_s[0] - (k - 100.0 + alone)).abs() < 1e-6);
            }
        }
    }

    /// A kill is put down to the first counterfactual that explains it, graded by the world:
    /// too long alone on a whole GPU of its type, then too long alone with its share, then a
    /// lowered clock, else its neighbours.
    #[test]
    fn a_kill_is_put_down_to_the_first_counterfactual_that_explains_it() {
        let (cfg, nodes, trace) = setup();
        let node = t4_pairs(&cfg, &nodes, 1);
        let world = World::new(&cfg);
        let mut jobs = t4_jobs(&cfg, &world, &trace, (2, 1, 1));
        let class = cfg.classes_of(JobKind::Training)[0];
        jobs[0].class = class;
        jobs[0].truth = world.draw(class, 1.0, &mut SplitMix::new(2));
        jobs[0].work_s = 1000.0;
        let mut st = build_state(&cfg, &node, jobs);
        let mut j = st.jobs[0].clone();
        j.gpus = vec![0];
        let t = st.gpus[0].gpu_type;
        let whole = 1000.0 / world.alone_rate(class, &j.truth, t);
        let fifth = SharePct::new(20).expect("pct");
        let shared = 1000.0 / world.alone_rate_with(class, &j.truth, t, fifth);
        assert!(shared > 1.05 * whole, "{shared} vs {whole}");
        let default = cfg.gpu_types[t].default_sm_clock.0;
        (j.exclusive, j.share, j.clocks) = (false, fifth, vec![(0.0, default)]);
        j.limit_s = 0.9 * whole;
        assert_eq!(kill_cause(&st, &world, &j), KillCause::Type);
        j.limit_s = 0.5 * (whole + shared);
        assert_eq!(kill_cause(&st, &world, &j), KillCause::Share);
        j.limit_s = 1.1 * shared;
        assert_eq!(kill_cause(&st, &world, &j), KillCause::Neighbour);
        j.clocks.push((10.0, default - 200));
        assert_eq!(kill_cause(&st, &world, &j), KillCause::Clock);
        // Whole GPUs are never short of share.
        (j.exclusive, j.limit_s, j.clocks) = (true, 0.5 * (whole + shared), vec![]);
        assert_eq!(kill_cause(&st, &world, &j), KillCause::Neighbour);
        st.jobs[0] = j;
    }

    /// One t4 node of two GPUs, one job alone on GPU 0 from time 0 at the default clock, power
    /// saving off, each awake node charged a flat 100 W: the meter must read exactly what the
    /// world's power says, the idle GPU beside the job included.
    #[test]
    fn facility_energy_of_one_job_is_what_the_world_and_the_host_draw() {
        let (cfg, nodes, trace) = setup();
        let t4 = cfg.gpu_type("t4").expect("t4");
        let node = t4_pairs(&cfg, &nodes, 1);
        let world = World::new(&cfg);
        let mut jobs = t4_jobs(&cfg, &world, &trace, (2, 1, 1));
        let class = cfg.classes_of(JobKind::Training)[0];
        let j = &mut jobs[0];
        j.class = class;
        j.truth = world.draw(class, 1.0, &mut SplitMix::new(2));
        (j.num_gpus, j.gpu_milli, j.submit_s, j.work_s) = (1, 1000, 0.0, 1000.0);
        (
            j.pod.num_gpus,
            j.pod.gpu_milli,
            j.pod.cpu_milli,
            j.pod.memory_mib,
        ) = (1, 1000, 0, 0);
        j.gpu_types = vec![];
        j.limit_s = 1e6;
        let mut st = build_state(&cfg, &node, jobs);
        let fac = facility_of(&st, HostSpec::Flat(Watts(100.0)), saving(None));
        let m = run(
            &mut st,
            &world,
            &mut crate::sim::schedulers::SlurmExclusive,
            fac,
            |_| {},
        );
        let clock = f64::from(cfg.gpu_types[t4].default_sm_clock.0);
        let job = &st.jobs[0];
        let busy = world.gpu(
            t4,
            clock,
            &[Occupant {
                class,
                truth: &job.truth,
                share: SharePct::FULL,
                runs: Runs::Mps,
            }],
        );
        let runtime = 1000.0 / busy.rate[0];
        assert!((m.makespan_s - runtime).abs() < 1e-6);
        let idle = world.idle_w(t4);
        let expected = (busy.power_w + idle + 100.0) * runtime;
        let e = m.energy_until(runtime);
        assert!(
            (e.facility_j - expected).abs() < 1e-6 * expected,
            "{e:?} vs {expected}"
        );
        assert!((e.gpu_j - (busy.power_w + idle) * runtime).abs() < 1e-6 * expected);
        // An hour more of an idle cluster: the node idles on (power saving is off).
        let later = m.energy_until(runtime + 3600.0);
        assert!(
            (later.facility_j - expected - (2.0 * idle + 100.0) * 3600.0).abs() < 1e-6 * expected
        );
    }

    /// A scheduler that places like plain Slurm but locks every GPU at its lowest clock: the
    /// world must see the jobs run far slower than their bound allows, and kill those that run
    /// past their limit.
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
    fn violations_and_kills_are_counted_in_the_world_and_can_be_many() {
        let (cfg, nodes, trace) = setup();
        let world = World::new(&cfg);
        let gpus = nodes.iter().map(|n| n.gpus as usize).sum();
        let wl = WorkloadParams {
            load: 0.5,
            jobs: 200,
            max_duration_s: 20_000.0,
            users: 3,
            seed: 5,
            recurrence: Recurrence::independent(),
        };
        let jobs = generate_jobs(&cfg, &world, &trace, gpus, &present(&nodes), wl);
        let mut st = build_state(&cfg, &nodes, jobs);
        let fac = facility_of(&st, HostSpec::Sourced, saving(None));
        let m = run(&mut st, &world, &mut Crawl, fac, |_| {});
        assert!(
            m.violations + m.killed > 100,
            "{} + {} of 200",
            m.violations,
            m.killed
        );
        assert!(m.killed > 10, "{} killed", m.killed);
        assert_eq!(
            m.killed, m.killed_by_sharing_or_clock,
            "every limit covers the slowest type at its default clock: the clock killed them"
        );
        assert!(m.killed_gpu_energy_j > 0.0);
    }

    /// Every job on GPU 0 with a share of `share` percent while it has room.
    struct OnGpu0 {
        share: u8,
    }

    impl Scheduler for OnGpu0 {
        fn name(&self) -> &'static str {
            "on-gpu0"
        }
        fn place(&mut self, st: &State<'_>, _j: usize) -> Option<Placement> {
            (st.usable(st.gpus[0].node)
                && st.gpus[0].used_share(&st.jobs) + u32::from(self.share) <= 100)
                .then(|| Placement {
                    gpus: vec![0],
                    share: SharePct::new(self.share).expect("a percentage"),
                    exclusive: false,
                })
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
            recurrence: Recurrence::independent(),
        };
        let mut jobs = generate_jobs(&cfg, &world, &trace, gpus, &present(&nodes), wl);
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
            j.limit_s = 1e7;
        }
        (cfg, nodes, world, jobs)
    }

    /// Two users' shares on one GPU through MPS: the second user's job holds its share but makes
    /// no progress until the first user's job has left (one MPS server per GPU at a time), unless
    /// the site's node rule runs it outside MPS, time-sliced, at once; the rule is the same for
    /// every scheduler.
    #[test]
    fn mps_serves_one_user_at_a_time_under_the_sites_rule() {
        let (cfg, nodes, world, mut jobs) = two_shares_on_gpu0("vit-infer", 300);
        for (k, j) in jobs.iter_mut().enumerate() {
            j.truth.demand = 0.1;
            j.submit_s = k as f64;
            j.work_s = 1000.0;
        }
        let finish = |users: [u32; 2], rule: OtherUserShare| {
            let mut js = jobs.clone();
            js[0].user = users[0];
            js[1].user = users[1];
            let mut c = cfg.clone();
            c.node.other_user_share = rule;
            let mut st = build_state(&c, &nodes, js);
            let fac = facility_of(&st, HostSpec::Sourced, saving(None));
            run(&mut st, &world, &mut OnGpu0 { share: 40 }, fac, |_| {});
            (
                st.jobs[0].finish_s.expect("done"),
                st.jobs[1].finish_s.expect("done"),
                st.jobs[1].native,
            )
        };
        for rule in [OtherUserShare::Wait, OtherUserShare::TimeSlice] {
            let (a, b, native) = finish([1, 1], rule);
            assert!(
                (b - a - 1.0).abs() < 1.0 && !native,
                "one user's jobs share the GPU: {a} {b}"
            );
        }
        let (a, b, native) = finish([1, 2], OtherUserShare::Wait);
        assert!(
            b >= a + 999.0 && !native,
            "the second user waits for the first: {a} {b}"
        );
        // Outside MPS the second user's light service runs at once, time-sliced, and keeps pace.
        let (a, b, native) = finish([1, 2], OtherUserShare::TimeSlice);
        assert!(
            native && (b - a - 1.0).abs() < 1.0,
            "the second user runs beside the first: {a} {b}"
        );
    }

    /// What the node helper measures of a job's neighbours is the busy time they had while it
    /// ran: a neighbour that came and went within its run gave it all of its own busy time.
    #[test]
    fn a_jobs_neighbour_busy_time_is_its_neighbours_busy_time_beside_it() {
        // A long service and a short one on GPU 0, of `users`, under the site's rule for
        // another user's share.
        let run_two = |users: [u32; 2], rule: OtherUserShare| {
            let (mut cfg, nodes, world, mut jobs) = two_shares_on_gpu0("vit-infer", 300);
            cfg.node.other_user_share = rule;
            for (k, j) in jobs.iter_mut().enumerate() {
                j.truth.demand = 0.2;
                j.submit_s = 10.0 * k as f64;
                j.user = users[k];
            }
            jobs[0].work_s = 2000.0;
            jobs[1].work_s = 500.0;
            let mut st = build_state(&cfg, &nodes, jobs);
            let fac = facility_of(&st, HostSpec::Sourced, saving(None));
            run(&mut st, &world, &mut OnGpu0 { share: 40 }, fac, |_| {});
            st.jobs
        };
        let jobs = run_two([1, 1], OtherUserShare::Wait);
        let (a, b) = (&jobs[0], &jobs[1]);
        assert!(b.finish_s.expect("done") < a.finish_s.expect("done"));
        assert!(b.busy_s > 0.0 && a.busy_s > b.busy_s);
        assert!(
            (a.neighbour_busy_s - b.busy_s).abs() <= 1e-9 * b.busy_s,
            "{} vs {}",
            a.neighbour_busy_s,
            b.busy_s
        );
        assert!(b.neighbour_busy_s > 0.0 && b.neighbour_busy_s < a.busy_s);
        assert!(!a.sliced && !b.sliced);
        // Another user's job time-sliced outside MPS runs beside no client: neither is the
        // other's neighbour, and the one outside says nothing of its neighbours.
        let jobs = run_two([1, 2], OtherUserShare::TimeSlice);
        let (a, b) = (&jobs[0], &jobs[1]);
        assert!(
            b.native && b.sliced && !a.sliced,
            "{} {}",
            b.native,
            a.sliced
        );
        assert!(a.neighbour_busy_s.abs() < 1e-12 && b.busy_s > 0.0);
        // Alone, nothing beside it.
        let (cfg, nodes, world, mut jobs) = two_shares_on_gpu0("vit-infer", 300);
        jobs.truncate(1);
        let mut st = build_state(&cfg, &nodes, jobs);
        let fac = facility_of(&st, HostSpec::Sourced, saving(None));
        run(&mut st, &world, &mut OnGpu0 { share: 40 }, fac, |_| {});
        assert!(st.jobs[0].busy_s > 0.0);
        assert!(st.jobs[0].neighbour_busy_s.abs() < 1e-12);
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
        let fac = facility_of(&st, HostSpec::Sourced, saving(Some(600.0)));
        let m = run(&mut st, &world, &mut OnGpu0 { share: 50 }, fac, |_| {});
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

    /// Places each job on the last usable node with an idle GPU of an allowed type: the opposite
    /// of Slurm's preference, so only the engine's power passes can keep it on powered-up nodes.
    struct LastNode;

    impl Scheduler for LastNode {
        fn name(&self) -> &'static str {
            "last-node"
        }
        fn place(&mut self, st: &State<'_>, j: usize) -> Option<Placement> {
            (0..st.nodes.len())
                .rev()
                .filter(|&n| st.usable(n))
                .find_map(|n| {
                    crate::sim::schedulers::idle_gpus_on(st, n, &st.jobs[j]).map(|gpus| Placement {
                        gpus,
                        share: SharePct::FULL,
                        exclusive: true,
                    })
                })
        }
    }

    /// Slurm's power saving: an idle node is suspended after SuspendTime (and SuspendTimeout);
    /// a powered-up node is used before a powered-down one whatever the scheduler prefers; a job
    /// on a powered-down node waits for the boot, which is in its wait and not in its limit.
    #[test]
    fn powered_up_nodes_come_first_and_a_resumed_node_makes_its_job_wait() {
        let (cfg, _, trace) = setup();
        let nodes = parse_node_list(OPENB_GPU_NODES, Path::new("n.csv"), &cfg).expect("nodes");
        let two = t4_pairs(&cfg, &nodes, 2);
        let world = World::new(&cfg);
        let mut jobs = t4_jobs(&cfg, &world, &trace, (4, 3, 4));
        let class = cfg.classes_of(JobKind::Training)[0];
        for (k, j) in jobs.iter_mut().enumerate() {
            j.class = class;
            (j.num_gpus, j.gpu_milli) = (1, 1000);
            (
                j.pod.num_gpus,
                j.pod.gpu_milli,
                j.pod.cpu_milli,
                j.pod.memory_mib,
            ) = (1, 1000, 0, 0);
            j.gpu_types = vec![];
            j.work_s = 10_000.0;
            j.limit_s = 1e7;
            // One job on the last node first; then two more while the first node sleeps.
            j.submit_s = [0.0, 500.0, 501.0][k];
        }
        let mut st = build_state(&cfg, &two, jobs);
        let fac = facility_of(
            &st,
            HostSpec::Sourced,
            PowerSaving {
                suspend_time_s: Some(100.0),
                suspend_timeout_s: 30.0,
                resume_s: 300.0,
                resume_timeout_s: 600.0,
            },
        );
        let m = run(&mut st, &world, &mut LastNode, fac, |_| {});
        let node_of = |j: usize| st.gpus[st.jobs[j].gpus[0]].node;
        assert_eq!(node_of(0), 1, "the scheduler's own choice");
        // At 500 s node 0 is powered down, node 1 up with a free GPU: Slurm uses node 1.
        assert_eq!(node_of(1), 1, "a powered-up node before a powered-down one");
        assert_eq!(st.jobs[1].start_s, Some(500.0));
        // At 501 s node 1 is full: node 0 is resumed, and the job waits for its boot.
        assert_eq!(node_of(2), 0);
        assert_eq!(st.jobs[2].alloc_s, Some(501.0));
        assert_eq!(
            st.jobs[2].start_s,
            Some(801.0),
            "started when the node was up"
        );
        assert_eq!(m.resumes, 1);
        let e = m.energy_until(m.makespan_s);
        assert!(e.off_j > 0.0 && e.always_on_j > e.facility_j, "{e:?}");
    }

    /// Backfill with a reservation: with a two-GPU job waiting for the only two-GPU node, a
    /// one-GPU job may start on that node only if its limit ends before the reservation.
    #[test]
    fn backfill_does_not_delay_the_first_waiting_job() {
        let (cfg, nodes, trace) = setup();
        let node = t4_pairs(&cfg, &nodes, 1);
        let world = World::new(&cfg);
        let mk = |jobs: &mut Vec<SimJob>, limits: [f64; 4]| {
            let class = cfg.classes_of(JobKind::Training)[0];
            for (k, j) in jobs.iter_mut().enumerate() {
                j.class = class;
                j.gpu_milli = 1000;
                j.num_gpus = if k == 1 { 2 } else { 1 };
                (
                    j.pod.num_gpus,
                    j.pod.gpu_milli,
                    j.pod.cpu_milli,
                    j.pod.memory_mib,
                ) = (j.num_gpus, 1000, 0, 0);
                j.gpu_types = vec![];
                j.limit_s = limits[k];
                j.work_s = 100.0;
                j.submit_s = [0.0, 1.0, 2.0, 3.0][k];
            }
        };
        let base = t4_jobs(&cfg, &world, &trace, (2, 4, 6));
        // Job 0 holds one GPU for up to 1000 s; job 1 wants both and reserves the node at
        // 1000 s; job 2 (limit 5000 s) would delay it; job 3 (limit 500 s) would not.
        let mut jobs = base.clone();
        mk(&mut jobs, [1000.0, 1000.0, 5000.0, 500.0]);
        let mut st = build_state(&cfg, &node, jobs);
        let fac = facility_of(&st, HostSpec::Sourced, saving(None));
        run(
            &mut st,
            &world,
            &mut crate::sim::schedulers::SlurmExclusive,
            fac,
            |_| {},
        );
        let start = |j: usize| st.jobs[j].start_s.expect("ran");
        assert_eq!(start(3), 3.0, "a short job backfills at once");
        assert!(
            start(2) >= start(1),
            "the long job waits behind the reservation: {} vs {}",
            start(2),
            start(1)
        );
    }

    /// The queue is Slurm's priority order: under multifactor a waiting job with a larger site
    /// factor goes ahead of older ones; under basic (first come, first served) it does not.
    #[test]
    fn the_site_factor_orders_the_queue_under_multifactor_only() {
        struct Favour(usize);
        impl Scheduler for Favour {
            fn name(&self) -> &'static str {
                "favour"
            }
            fn place(&mut self, st: &State<'_>, j: usize) -> Option<Placement> {
                crate::sim::schedulers::SlurmExclusive.place(st, j)
            }
            fn site_factor(&self, j: usize) -> i32 {
                if j == self.0 { 50 } else { 0 }
            }
        }
        let (cfg, nodes, trace) = setup();
        let node = t4_pairs(&cfg, &nodes, 1);
        let world = World::new(&cfg);
        let mut jobs = t4_jobs(&cfg, &world, &trace, (2, 4, 6));
        // Four jobs that each take the whole node, one after the other.
        let class = cfg.classes_of(JobKind::Training)[0];
        for (k, j) in jobs.iter_mut().enumerate() {
            j.class = class;
            (j.num_gpus, j.gpu_milli) = (2, 1000);
            (
                j.pod.num_gpus,
                j.pod.gpu_milli,
                j.pod.cpu_milli,
                j.pod.memory_mib,
            ) = (2, 1000, 0, 0);
            j.gpu_types = vec![];
            j.limit_s = 10_000.0;
            j.work_s = 100.0;
            j.submit_s = [0.0, 1.0, 2.0, 3.0][k];
        }
        let order = |queue: QueueOrder| {
            let mut st = build_state(&cfg, &node, jobs.clone());
            st.queue = queue;
            let fac = facility_of(&st, HostSpec::Sourced, saving(None));
            let m = run(&mut st, &world, &mut Favour(3), fac, |_| {});
            let mut by_start: Vec<usize> = (0..4).collect();
            by_start.sort_by(|&a, &b| {
                st.jobs[a]
                    .start_s
                    .expect("ran")
                    .total_cmp(&st.jobs[b].start_s.expect("ran"))
            });
            (by_start, m.site_factors)
        };
        let (multi, factors) = order(QueueOrder::default());
        assert_eq!(
            multi,
            [0, 3, 1, 2],
            "the favoured job goes ahead of older ones"
        );
        assert_eq!(factors.iter().filter(|&&f| f == 50).count(), 1);
        assert_eq!(order(QueueOrder::basic()).0, [0, 1, 2, 3]);
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
            recurrence: Recurrence::independent(),
        };
        let mut jobs = generate_jobs(&cfg, &world, &trace, gpus, &present(&nodes), wl);
        // No node has 64 GPUs.
        jobs[10].num_gpus = 64;
        jobs[10].gpu_milli = 1000;
        jobs[10].pod.num_gpus = 64;
        let typical = typical(&trace);
        for name in NAMES {
            let mut st = build_state(&cfg, &nodes, jobs.clone());
            let mut sched = by_name(name, &st, &typical, &world).expect("known");
            let fac = facility_of(&st, HostSpec::Sourced, saving(Some(600.0)));
            let m = run(&mut st, &world, sched.as_mut(), fac, |_| {});
            assert_eq!((m.unstarted, m.unfinished), (1, 0), "{name}");
            assert_eq!(m.jct_s.len() + m.failed, 49, "{name}");
        }
    }

    #[test]
    fn a_seed_fixes_the_run() {
        let (cfg, nodes, trace) = setup();
        let typical = typical(&trace);
        let (a, _, _) = simulate(&cfg, &nodes, &trace, &typical, "heshare", 3);
        let (b, _, _) = simulate(&cfg, &nodes, &trace, &typical, "heshare", 3);
        assert_eq!(a, b);
        let (c, _, _) = simulate(&cfg, &nodes, &trace, &typical, "heshare", 4);
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
    fn offered_load_sets_the_arrival_rate_and_limits_cover_the_slowest_type() {
        let (cfg, nodes, trace) = setup();
        let gpus: usize = nodes.iter().map(|n| n.gpus as usize).sum();
        let wl = |load| WorkloadParams {
            load,
            jobs: 3000,
            max_duration_s: 20_000.0,
            users: 3,
            seed: 1,
            recurrence: Recurrence::independent(),
        };
        let world = World::new(&cfg);
        let p = present(&nodes);
        let lo = generate_jobs(&cfg, &world, &trace, gpus, &p, wl(0.4));
        let hi = generate_jobs(&cfg, &world, &trace, gpus, &p, wl(0.8));
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
        for j in &hi {
            for &t in p.iter().filter(|&&t| st_allowed(j, t)) {
                let alone = j.work_s / world.alone_rate(j.class, &j.truth, t);
                assert!(alone <= j.limit_s + 1e-6, "limit {} < {alone}", j.limit_s);
            }
            assert!(j.limit_s % 3600.0 == 0.0);
        }
    }

    /// A script whose user wrote its limit for the fastest type: every run of it fits there,
    /// some pass it on a slower type; the other scripts' runs, and the jobs of a world where
    /// nobody does so, are the ones they were.
    #[test]
    fn a_script_with_a_limit_for_the_fastest_type_passes_it_on_a_slower_one() {
        let (cfg, nodes, trace) = setup();
        let gpus: usize = nodes.iter().map(|n| n.gpus as usize).sum();
        let wl = |fast_limits| WorkloadParams {
            load: 0.7,
            jobs: 2000,
            max_duration_s: 40_000.0,
            users: 3,
            seed: 3,
            recurrence: Recurrence {
                fast_limits,
                ..Recurrence::default()
            },
        };
        let world = World::new(&cfg);
        let p = present(&nodes);
        let none = generate_jobs(&cfg, &world, &trace, gpus, &p, wl(0.0));
        let some = generate_jobs(&cfg, &world, &trace, gpus, &p, wl(0.5));
        assert_eq!(none.len(), some.len());
        let alone = |j: &SimJob| {
            p.iter()
                .filter(|&&t| st_allowed(j, t))
                .map(|&t| j.work_s / world.alone_rate(j.class, &j.truth, t))
                .collect::<Vec<f64>>()
        };
        let (mut fast, mut short) = (0, 0);
        for (a, b) in none.iter().zip(&some) {
            assert_eq!(
                (a.submit_s, a.work_s, a.template),
                (b.submit_s, b.work_s, b.template)
            );
            let times = alone(b);
            let fastest = times.iter().copied().fold(f64::INFINITY, f64::min);
            assert!(
                fastest <= b.limit_s + 1e-6,
                "limit {} < {fastest}",
                b.limit_s
            );
            assert!(b.limit_s <= a.limit_s && b.limit_s % 3600.0 == 0.0);
            if b.limit_s < a.limit_s {
                fast += 1;
                if times.iter().any(|&t| t > b.limit_s) {
                    short += 1;
                }
            }
        }
        assert!(
            fast > 100 && short > 10,
            "{fast} fast limits, {short} too short somewhere"
        );
        // Every run of one script has the one limit rule: a run with a shorter limit than its
        // plain world's is of a script whose other runs never got a longer one than theirs.
        let fast_templates: std::collections::HashSet<usize> = none
            .iter()
            .zip(&some)
            .filter(|(a, b)| b.limit_s < a.limit_s)
            .map(|(_, b)| b.template)
            .collect();
        for (a, b) in none.iter().zip(&some) {
            if !fast_templates.contains(&b.template) {
                assert_eq!(a.limit_s, b.limit_s, "template {}", b.template);
            }
        }
    }

    fn st_allowed(j: &SimJob, t: usize) -> bool {
        j.gpu_types.is_empty() || j.gpu_types.contains(&t)
    }
}
