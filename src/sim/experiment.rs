//! One time-mode experiment: the cluster scaled from a node list, jobs drawn from a trace for each
//! seed, every scheduler run on the same jobs in the same world and facility, and the results
//! summed up the way the comparison needs them: facility energy (what the site's meter reads:
//! GPUs busy and idle, hosts, power supplies, suspended nodes) over a common horizon per seed
//! (until the last job of the slowest scheduler ends), the GPUs' own energy and the always-on
//! energy beside it, every job accounted for (finished, killed at its limit, never started), the
//! headline ratios of heshare as it ships against the best baseline per seed with their spread,
//! heshare-oracle apart, and heshare's predictor error against the world.
//!
//! The CLI (`cli::simulate_time`) only parses arguments and prints this.

use super::engine::{self, KillCause, RunMetrics, WorkloadParams};
use super::meter::{HostSpec, PowerSaving};
use super::packing::{Pod, TypicalPods};
use super::priority::QueueOrder;
use super::schedulers::{self, NAMES, is_baseline};
use super::trace::TraceJob;
use super::world::World;
use crate::cluster::Node;
use crate::config::Config;
use serde::Serialize;

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub load: f64,
    pub jobs: usize,
    pub seeds: Vec<u64>,
    pub max_duration_s: f64,
    pub users: u32,
    /// How each node's host is charged.
    pub host: HostSpec,
    /// Slurm's power saving (off: every node always on).
    pub saving: PowerSaving,
    /// How Slurm orders the queue (multifactor adds heshare's site factor).
    pub queue: QueueOrder,
    pub policies: Vec<String>,
    pub threads: usize,
    /// How jobs recur and what their users label.
    pub recurrence: super::templates::Recurrence,
    /// Days per row of the learning curve.
    pub curve_days: usize,
    /// What users do with a job killed at its limit.
    pub reruns: engine::Reruns,
    /// Replay the trace as recorded (`sim::replay`, a site's sacct): each row one job at its
    /// own submission (as `arrivals` scales and cuts it), instead of `jobs` drawn from the rows
    /// at `load`.
    pub recorded: bool,
    /// How a replay as recorded departs from the record, where asked.
    pub arrivals: super::replay::Scaling,
}

/// Keeps `scale` of the nodes of each GPU model (at least one), in file order, so the scaled
/// cluster has the original's model mix.
pub fn scale_nodes(nodes: &[Node], scale: f64) -> Vec<Node> {
    let mut out = Vec::new();
    let mut types: Vec<Option<usize>> = nodes.iter().map(|n| n.gpu_type).collect();
    types.sort_unstable();
    types.dedup();
    for t in types.into_iter().flatten() {
        let of_type: Vec<&Node> = nodes.iter().filter(|n| n.gpu_type == Some(t)).collect();
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss
        )]
        let keep = ((of_type.len() as f64 * scale).round() as usize).clamp(1, of_type.len());
        // Evenly spaced, so node sizes within a model keep their mix too.
        out.extend((0..keep).map(|k| of_type[k * of_type.len() / keep].clone()));
    }
    out.sort_by_key(|n| nodes.iter().position(|m| m.name == n.name));
    out
}

/// Kills at the time limit by cause (see [`KillCause`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct KillCounts {
    pub slow_type: usize,
    pub small_share: usize,
    pub lowered_clock: usize,
    pub neighbours: usize,
}

impl KillCounts {
    fn of(causes: impl Iterator<Item = KillCause>) -> KillCounts {
        let mut k = KillCounts::default();
        for c in causes {
            match c {
                KillCause::Type => k.slow_type += 1,
                KillCause::Share => k.small_share += 1,
                KillCause::Clock => k.lowered_clock += 1,
                KillCause::Neighbour => k.neighbours += 1,
            }
        }
        k
    }

    pub fn total(&self) -> usize {
        self.slow_type + self.small_share + self.lowered_clock + self.neighbours
    }
}

impl std::iter::Sum for KillCounts {
    fn sum<I: Iterator<Item = KillCounts>>(iter: I) -> KillCounts {
        iter.fold(KillCounts::default(), |a, b| KillCounts {
            slow_type: a.slow_type + b.slow_type,
            small_share: a.small_share + b.small_share,
            lowered_clock: a.lowered_clock + b.lowered_clock,
            neighbours: a.neighbours + b.neighbours,
        })
    }
}

/// One scheduler on one seed, with its energy closed at the seed's common horizon.
#[derive(Debug, Clone, Serialize)]
pub struct SeedRun {
    pub policy: String,
    pub seed: u64,
    pub jobs: usize,
    pub unstarted: usize,
    pub unfinished: usize,
    /// Runs killed at their time limit, and of those the ones the scheduler's clock, share or
    /// co-location killed (they would have finished alone on their type at its default clock).
    pub killed: usize,
    pub killed_by_sharing_or_clock: usize,
    /// Reruns users submitted after kills, and jobs that failed for good (last run killed).
    pub reruns: usize,
    pub failed: usize,
    /// Runs killed here of jobs plain Slurm given the same requests (the slurm-mps run of the
    /// seed) never killed: the kills this scheduler's own choices caused. `None` without that
    /// run.
    pub killed_not_by_plain_slurm: Option<usize>,
    /// Of those, the runs heshare left as their users asked, or only gave more share (no label,
    /// no profile): killed by their own request where plain Slurm's placement happened to spare
    /// them.
    pub killed_not_by_plain_slurm_as_asked: Option<usize>,
    /// The others (not left as asked), by cause as the world grades it.
    pub killed_not_by_plain_slurm_causes: Option<KillCounts>,
    /// The facility meter: every node at the wall, awake or suspended, over the horizon.
    pub facility_kwh: f64,
    /// The same if no node were ever suspended.
    pub facility_always_on_kwh: f64,
    /// What the GPUs drew (busy and idle on awake nodes), and the busy GPUs' part of it.
    pub gpu_kwh: f64,
    pub busy_gpu_kwh: f64,
    /// Hosts of awake nodes (before supply losses).
    pub host_kwh: f64,
    /// GPU energy of the jobs killed at their limit (lost work).
    pub killed_gpu_kwh: f64,
    /// Facility energy per finished job.
    pub energy_per_job_kj: f64,
    pub gpu_energy_per_job_kj: f64,
    /// Over every job that started, a killed one with its rerun (see `RunMetrics::jct_all_s`).
    pub mean_jct_s: f64,
    /// Over the finished jobs only.
    pub mean_jct_finished_s: f64,
    pub mean_wait_s: f64,
    pub mean_run_s: f64,
    pub p99_jct_s: f64,
    pub makespan_s: f64,
    pub horizon_s: f64,
    pub alloc_rate: f64,
    pub utilisation: f64,
    pub violations: usize,
    pub resumes: usize,
    /// The site factor of the jobs that started (0 for schedulers that set none).
    pub site_factor: SiteFactorStats,
    pub energy_lower_bound_kwh: f64,
    /// Simulation speed (machine-dependent).
    pub sim_jobs_per_s: f64,
    #[serde(skip)]
    pub jct_s: Vec<f64>,
    #[serde(skip)]
    pub site_factors: Vec<i32>,
    #[serde(skip)]
    pub errors: Vec<engine::PredictionError>,
    pub daily: Vec<engine::Period>,
    pub profiles: Option<super::learning::ProfileStats>,
    /// Each job's outcome, in workload order (`--jobs-csv`).
    #[serde(skip)]
    pub by_job: Vec<engine::JobOutcome>,
}

/// The spread of a scheduler's site factors over the jobs that started.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SiteFactorStats {
    pub jobs: usize,
    pub nonzero: usize,
    pub mean: f64,
    pub p05: i32,
    pub p95: i32,
    pub min: i32,
    pub max: i32,
}

impl SiteFactorStats {
    pub fn of(factors: &[i32]) -> SiteFactorStats {
        let mut v = factors.to_vec();
        v.sort_unstable();
        let at = |q: f64| -> i32 {
            if v.is_empty() {
                return 0;
            }
            #[allow(
                clippy::cast_precision_loss,
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss
            )]
            let i = ((v.len() - 1) as f64 * q).round() as usize;
            v[i.min(v.len() - 1)]
        };
        #[allow(clippy::cast_precision_loss)]
        let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len().max(1) as f64;
        SiteFactorStats {
            jobs: v.len(),
            nonzero: v.iter().filter(|&&x| x != 0).count(),
            mean,
            p05: at(0.05),
            p95: at(0.95),
            min: v.first().copied().unwrap_or(0),
            max: v.last().copied().unwrap_or(0),
        }
    }
}

/// One scheduler over all seeds (means over seeds, JCT percentiles over all jobs, counts summed).
#[derive(Debug, Clone, Serialize)]
pub struct PolicyRow {
    pub policy: String,
    pub jobs: usize,
    pub unstarted: usize,
    pub unfinished: usize,
    pub killed: usize,
    pub killed_by_sharing_or_clock: usize,
    pub reruns: usize,
    pub failed: usize,
    pub killed_not_by_plain_slurm: Option<usize>,
    pub killed_not_by_plain_slurm_as_asked: Option<usize>,
    pub killed_not_by_plain_slurm_causes: Option<KillCounts>,
    pub facility_kwh: f64,
    pub facility_always_on_kwh: f64,
    pub gpu_kwh: f64,
    pub host_kwh: f64,
    pub killed_gpu_kwh: f64,
    pub energy_per_job_kj: f64,
    pub gpu_energy_per_job_kj: f64,
    pub mean_jct_s: f64,
    pub mean_jct_finished_s: f64,
    pub mean_wait_s: f64,
    pub mean_run_s: f64,
    pub p50_jct_s: f64,
    pub p99_jct_s: f64,
    pub makespan_s: f64,
    pub alloc_rate: f64,
    pub utilisation: f64,
    pub violations: usize,
    pub resumes: usize,
    pub site_factor: SiteFactorStats,
    /// Simulation speed over all seeds: their jobs over their seconds (machine-dependent).
    pub sim_jobs_per_s: f64,
}

/// A ratio of heshare's to the best baseline's value, per seed (best baseline per seed), with
/// its spread.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    pub metric: &'static str,
    /// The baseline best on this metric most often over the seeds.
    pub best_baseline: String,
    pub min: f64,
    pub median: f64,
    pub max: f64,
    pub per_seed: Vec<f64>,
}

/// One simulated week of the learning curve (jobs by the week they were submitted in).
#[derive(Debug, Clone, Serialize)]
pub struct WeekRow {
    /// The days (from 1) whose jobs the row covers.
    pub first_day: usize,
    pub last_day: usize,
    pub heshare_jobs: usize,
    pub heshare_energy: Option<f64>,
    pub heshare_jct: Option<f64>,
    pub labelled_energy: Option<f64>,
    pub labelled_jct: Option<f64>,
    /// Bound violations among the period's jobs, all seeds.
    pub heshare_violations: usize,
    pub labelled_violations: usize,
}

/// The predictor's error for one class on one GPU type, over the jobs that ran there.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorRow {
    pub class: String,
    pub gpu_type: String,
    pub jobs: usize,
    /// Predicted over realised runtime alone at the default clock: median, 10th, 90th percentile.
    pub runtime_median: f64,
    pub runtime_p10: f64,
    pub runtime_p90: f64,
    pub energy_median: f64,
}

/// Everything one experiment found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The offered load: drawn at, or (`recorded`) what the recorded jobs offered.
    pub load: f64,
    /// Whether the trace was replayed as recorded (`Spec::recorded`).
    pub recorded: bool,
    pub seeds: Vec<u64>,
    pub jobs_per_seed: usize,
    pub gpus: usize,
    pub nodes: usize,
    pub host: String,
    pub saving: PowerSaving,
    pub queue: QueueOrder,
    pub reruns: engine::Reruns,
    pub snapshot_period_s: f64,
    pub rows: Vec<PolicyRow>,
    /// heshare as it ships against the best baseline.
    pub shipped: Vec<Ratio>,
    /// heshare with every job labelled truly (no profiles) against the best baseline.
    pub labelled: Vec<Ratio>,
    /// heshare as it ships against heshare with true labels, per seed.
    pub learned_vs_labelled: Vec<Ratio>,
    /// Week by week, heshare's and heshare-labelled's GPU energy per job and mean JCT against
    /// the best baseline's that week (median over seeds).
    pub learning_curve: Vec<WeekRow>,
    /// How heshare's decisions used profiles, summed over seeds.
    pub profiles: Option<super::learning::ProfileStats>,
    pub recurrence: super::templates::Recurrence,
    /// heshare told every job's truth (`sim::oracle`) against the best baseline: what heshare's
    /// decisions give with nothing left to learn.
    pub oracle: Vec<Ratio>,
    pub predictor_error: Vec<ErrorRow>,
    pub energy_lower_bound_kwh: f64,
    /// The world's GPU power figures and where each came from.
    pub world_power: Vec<super::world::TypePower>,
    pub runs: Vec<SeedRun>,
    /// heshare against plain Slurm on the same jobs, job by job, where both ran.
    pub verdict: Option<Verdict>,
}

/// What an admin asks of a replay: the energy heshare would have saved against plain Slurm as
/// configured (`slurm-mps`: shares as MPS, as the site's Slurm runs them) on the same jobs, and
/// how many jobs it would have made wait or run longer. Medians over seeds.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Verdict {
    /// Facility kWh plain Slurm used less heshare's, over the common horizon of each seed.
    pub kwh_saved: f64,
    /// The same as a fraction of plain Slurm's.
    pub saved_fraction: f64,
    /// Jobs whose JCT under heshare exceeds plain Slurm's by more than `margin` of it, and
    /// those it shortens by more than that, as fractions of the jobs both completed.
    pub later: f64,
    pub sooner: f64,
    pub margin: f64,
}

/// How far a job's JCT must move for the verdict to count it later or sooner: a tenth, the
/// change a user notices in a job's turnaround.
const VERDICT_MARGIN: f64 = 0.1;

/// The verdict of `done`'s heshare runs against its slurm-mps runs, seed by seed.
fn verdict(spec: &Spec, done: &[Done], kwh: &dyn Fn(&Done) -> f64) -> Option<Verdict> {
    let of = |name: &str, seed: u64| {
        done.iter()
            .find(|d| d.seed == seed && spec.policies[d.policy] == name)
    };
    // Per seed: kWh saved, the fraction saved, jobs later, jobs sooner.
    let mut per_seed: Vec<[f64; 4]> = Vec::new();
    for &seed in &spec.seeds {
        let (Some(h), Some(p)) = (of("heshare", seed), of("slurm-mps", seed)) else {
            continue;
        };
        let (mut later, mut sooner, mut both) = (0usize, 0usize, 0usize);
        for (a, b) in h.metrics.by_job.iter().zip(&p.metrics.by_job) {
            if let (Some(x), Some(y)) = (a.jct_s, b.jct_s) {
                both += 1;
                later += usize::from(x > y * (1.0 + VERDICT_MARGIN));
                sooner += usize::from(x < y * (1.0 - VERDICT_MARGIN));
            }
        }
        let (eh, ep) = (kwh(h), kwh(p));
        #[allow(clippy::cast_precision_loss)]
        let n = both.max(1) as f64;
        #[allow(clippy::cast_precision_loss)]
        per_seed.push([
            ep - eh,
            (ep - eh) / ep.max(1e-12),
            later as f64 / n,
            sooner as f64 / n,
        ]);
    }
    if per_seed.is_empty() {
        return None;
    }
    let med = |i: usize| median_of(&per_seed.iter().map(|x| x[i]).collect::<Vec<f64>>());
    Some(Verdict {
        kwh_saved: med(0),
        saved_fraction: med(1),
        later: med(2),
        sooner: med(3),
        margin: VERDICT_MARGIN,
    })
}

impl Report {
    /// Jobs that never started or never finished, over every run.
    pub fn missing_jobs(&self) -> usize {
        self.rows.iter().map(|r| r.unstarted + r.unfinished).sum()
    }

    /// The ratio of heshare as it ships to the best baseline on `metric`, if measured.
    pub fn shipped_ratio(&self, metric: &str) -> Option<&Ratio> {
        self.shipped.iter().find(|r| r.metric == metric)
    }
}

/// How `policy`'s decisions used profiles, summed over its runs (`None` if it reports none).
pub fn profiles_of(runs: &[SeedRun], policy: &str) -> Option<super::learning::ProfileStats> {
    runs.iter()
        .filter(|r| r.policy == policy)
        .filter_map(|r| r.profiles.clone())
        .reduce(|mut a, b| {
            a += b;
            a
        })
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    crate::report::percentile(sorted, p).unwrap_or(f64::NAN)
}

fn median_of(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    percentile(&s, 0.5)
}

/// Runs the experiment. `progress` is called with each finished job (from worker threads).
pub fn run(
    cfg: &Config,
    nodes: &[Node],
    trace: &[TraceJob],
    spec: &Spec,
    progress: &(dyn Fn() + Sync),
) -> Result<Report, String> {
    for n in &spec.policies {
        if !NAMES.contains(&n.as_str()) {
            return Err(format!(
                "unknown time-mode policy \"{n}\" (known: {})",
                NAMES.join(", ")
            ));
        }
    }
    let world = World::new(cfg);
    // The site's heshare.toml mirrors its slurm.conf's power saving, as check-config asks.
    let mut site = cfg.clone();
    site.power = crate::config::PowerSettings {
        resume_s: spec.saving.resume_s,
        suspend_time_s: spec.saving.suspend_time_s,
    };
    let cfg = &site;
    let gpus: usize = nodes.iter().map(|n| n.gpus as usize).sum();
    let mut present: Vec<usize> = nodes.iter().filter_map(|n| n.gpu_type).collect();
    present.sort_unstable();
    present.dedup();
    let pods: Vec<Pod> = trace.iter().map(Pod::from_trace).collect();
    let typical = TypicalPods::from_pods(&pods);
    let tasks: Vec<(usize, u64)> = spec
        .policies
        .iter()
        .enumerate()
        .flat_map(|(p, _)| spec.seeds.iter().map(move |&s| (p, s)))
        .collect();
    // Runs take the next task as they finish one (a saturated world's slowest run would hold
    // a batch of them back): `threads` at once.
    let one = |p: usize, seed: u64| -> Result<Done, String> {
        let wl = WorkloadParams {
            load: spec.load,
            jobs: spec.jobs,
            max_duration_s: spec.max_duration_s,
            users: spec.users,
            seed,
            recurrence: spec.recurrence,
        };
        let jobs = if spec.recorded {
            super::replay::recorded_jobs(cfg, &world, trace, nodes, seed, spec.arrivals).jobs
        } else {
            engine::generate_jobs(cfg, &world, trace, gpus, &present, wl)
        };
        let mut st = engine::build_state(cfg, nodes, jobs);
        st.queue = spec.queue;
        st.reruns = spec.reruns;
        let facility = engine::facility_of(&st, spec.host, spec.saving);
        // The bound is the workload's, the same for every scheduler of a seed.
        let bound = (p == 0).then(|| engine::energy_lower_bound_j(&st, &world, &facility));
        let mut sched = schedulers::by_name(&spec.policies[p], &st, &typical, &world)?;
        let started = std::time::Instant::now();
        let metrics = engine::run(&mut st, &world, sched.as_mut(), facility, |_| progress());
        Ok(Done {
            policy: p,
            seed,
            metrics,
            secs: started.elapsed().as_secs_f64(),
            bound_j: bound,
        })
    };
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut got: Vec<(usize, Result<Done, String>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..spec.threads.clamp(1, tasks.len().max(1)))
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&(p, seed)) = tasks.get(k) else {
                            break mine;
                        };
                        mine.push((k, one(p, seed)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|h| {
                h.join().unwrap_or_else(|_| {
                    vec![(usize::MAX, Err("a simulation thread panicked".to_owned()))]
                })
            })
            .collect()
    });
    got.sort_by_key(|(k, _)| *k);
    let mut done: Vec<Done> = Vec::with_capacity(got.len());
    for (_, r) in got {
        done.push(r?);
    }
    Ok(summarise(
        cfg,
        spec,
        gpus,
        nodes.len(),
        &done,
        world.power_table(),
    ))
}

/// One scheduler's run on one seed.
struct Done {
    policy: usize,
    seed: u64,
    metrics: RunMetrics,
    secs: f64,
    /// The seed's energy lower bound, computed by its first policy's run.
    bound_j: Option<f64>,
}

/// The kills of a run that plain Slurm's run of the same jobs (`plain`, sorted) did not have,
/// leaving out the runs the scheduler left as their users asked, by cause. `killed` gives the
/// job of each killed run; `causes` and `as_asked` go with it.
fn caused_kills(
    plain: &[usize],
    killed: &[usize],
    causes: &[KillCause],
    as_asked: &[bool],
) -> KillCounts {
    KillCounts::of(
        killed
            .iter()
            .zip(causes)
            .zip(as_asked)
            .filter(|((j, _), asked)| plain.binary_search(j).is_err() && !**asked)
            .map(|((_, &c), _)| c),
    )
}

fn summarise(
    cfg: &Config,
    spec: &Spec,
    gpus: usize,
    nodes: usize,
    done: &[Done],
    world_power: Vec<super::world::TypePower>,
) -> Report {
    // The common horizon of each seed: the end of its slowest scheduler's run.
    let horizon = |seed: u64| {
        done.iter()
            .filter(|d| d.seed == seed)
            .map(|d| d.metrics.makespan_s)
            .fold(0.0, f64::max)
    };
    // The jobs plain Slurm killed (any run of) with the same requests, per seed, sorted.
    let plain_of = |seed: u64| {
        done.iter()
            .find(|d| d.seed == seed && spec.policies[d.policy] == "slurm-mps")
            .map(|d| {
                let mut k = d.metrics.killed_jobs.clone();
                k.sort_unstable();
                k.dedup();
                k
            })
    };
    let bound = |seed: u64| {
        done.iter()
            .filter(|d| d.seed == seed)
            .find_map(|d| d.bound_j)
            .unwrap_or(0.0)
    };
    let mut runs: Vec<SeedRun> = Vec::new();
    for d in done {
        let m = &d.metrics;
        let h = horizon(d.seed);
        let e = m.energy_until(h);
        let plain = plain_of(d.seed);
        let plain_kills = plain.as_deref();
        let mut jct = m.jct_all_s.clone();
        jct.sort_by(f64::total_cmp);
        #[allow(clippy::cast_precision_loss)]
        let finished = m.jct_s.len().max(1) as f64;
        #[allow(clippy::cast_precision_loss)]
        runs.push(SeedRun {
            policy: spec.policies[d.policy].clone(),
            seed: d.seed,
            jobs: m.jobs,
            unstarted: m.unstarted,
            unfinished: m.unfinished,
            killed: m.killed,
            killed_by_sharing_or_clock: m.killed_by_sharing_or_clock,
            reruns: m.reruns,
            failed: m.failed,
            killed_not_by_plain_slurm: plain_kills.map(|p| {
                m.killed_jobs
                    .iter()
                    .filter(|j| p.binary_search(j).is_err())
                    .count()
            }),
            killed_not_by_plain_slurm_as_asked: plain_kills.map(|p| {
                m.killed_jobs
                    .iter()
                    .zip(&m.killed_as_asked)
                    .filter(|(j, asked)| **asked && p.binary_search(j).is_err())
                    .count()
            }),
            killed_not_by_plain_slurm_causes: plain_kills
                .map(|p| caused_kills(p, &m.killed_jobs, &m.kill_causes, &m.killed_as_asked)),
            facility_kwh: e.facility_j / 3.6e6,
            facility_always_on_kwh: e.always_on_j / 3.6e6,
            gpu_kwh: e.gpu_j / 3.6e6,
            busy_gpu_kwh: e.busy_gpu_j / 3.6e6,
            host_kwh: e.host_j / 3.6e6,
            killed_gpu_kwh: m.killed_gpu_energy_j / 3.6e6,
            energy_per_job_kj: e.facility_j / finished / 1e3,
            gpu_energy_per_job_kj: e.gpu_j / finished / 1e3,
            #[allow(clippy::cast_precision_loss)]
            mean_jct_s: jct.iter().sum::<f64>() / jct.len().max(1) as f64,
            mean_jct_finished_s: m.jct_s.iter().sum::<f64>() / finished,
            mean_wait_s: m.mean_wait_s,
            mean_run_s: m.mean_run_s,
            p99_jct_s: percentile(&jct, 0.99),
            makespan_s: m.makespan_s,
            horizon_s: h,
            alloc_rate: m.alloc_rate,
            utilisation: m.utilisation,
            violations: m.violations,
            resumes: m.resumes,
            energy_lower_bound_kwh: bound(d.seed) / 3.6e6,
            sim_jobs_per_s: m.jobs as f64 / d.secs.max(1e-9),
            site_factor: SiteFactorStats::of(&m.site_factors),
            site_factors: m.site_factors.clone(),
            jct_s: jct,
            errors: m.errors.clone(),
            daily: m.daily.clone(),
            profiles: m.profiles.clone(),
            by_job: m.by_job.clone(),
        });
    }
    let mut rows = Vec::new();
    for name in &spec.policies {
        let rs: Vec<&SeedRun> = runs.iter().filter(|r| &r.policy == name).collect();
        #[allow(clippy::cast_precision_loss)]
        let n = rs.len().max(1) as f64;
        let mean = |f: &dyn Fn(&SeedRun) -> f64| rs.iter().map(|r| f(r)).sum::<f64>() / n;
        let mut jct: Vec<f64> = rs.iter().flat_map(|r| r.jct_s.iter().copied()).collect();
        jct.sort_by(f64::total_cmp);
        #[allow(clippy::cast_precision_loss)]
        rows.push(PolicyRow {
            policy: name.clone(),
            jobs: rs.iter().map(|r| r.jobs).sum(),
            unstarted: rs.iter().map(|r| r.unstarted).sum(),
            unfinished: rs.iter().map(|r| r.unfinished).sum(),
            killed: rs.iter().map(|r| r.killed).sum(),
            killed_by_sharing_or_clock: rs.iter().map(|r| r.killed_by_sharing_or_clock).sum(),
            reruns: rs.iter().map(|r| r.reruns).sum(),
            failed: rs.iter().map(|r| r.failed).sum(),
            killed_not_by_plain_slurm: rs
                .iter()
                .map(|r| r.killed_not_by_plain_slurm)
                .sum::<Option<usize>>(),
            killed_not_by_plain_slurm_as_asked: rs
                .iter()
                .map(|r| r.killed_not_by_plain_slurm_as_asked)
                .sum::<Option<usize>>(),
            killed_not_by_plain_slurm_causes: rs
                .iter()
                .map(|r| r.killed_not_by_plain_slurm_causes)
                .sum::<Option<KillCounts>>(),
            facility_kwh: mean(&|r| r.facility_kwh),
            facility_always_on_kwh: mean(&|r| r.facility_always_on_kwh),
            gpu_kwh: mean(&|r| r.gpu_kwh),
            host_kwh: mean(&|r| r.host_kwh),
            killed_gpu_kwh: mean(&|r| r.killed_gpu_kwh),
            energy_per_job_kj: mean(&|r| r.energy_per_job_kj),
            gpu_energy_per_job_kj: mean(&|r| r.gpu_energy_per_job_kj),
            mean_jct_s: jct.iter().sum::<f64>() / jct.len().max(1) as f64,
            mean_jct_finished_s: mean(&|r| r.mean_jct_finished_s),
            mean_wait_s: mean(&|r| r.mean_wait_s),
            mean_run_s: mean(&|r| r.mean_run_s),
            p50_jct_s: percentile(&jct, 0.5),
            p99_jct_s: percentile(&jct, 0.99),
            makespan_s: mean(&|r| r.makespan_s),
            alloc_rate: mean(&|r| r.alloc_rate),
            utilisation: mean(&|r| r.utilisation),
            violations: rs.iter().map(|r| r.violations).sum(),
            resumes: rs.iter().map(|r| r.resumes).sum(),
            site_factor: SiteFactorStats::of(
                &rs.iter()
                    .flat_map(|r| r.site_factors.iter().copied())
                    .collect::<Vec<_>>(),
            ),
            // Every seed's jobs over all the seconds they took (each seed runs as many jobs): a
            // slow seed counts for the time it takes, as a mean of rates would not let it.
            #[allow(clippy::cast_precision_loss)]
            sim_jobs_per_s: rs.len() as f64
                / rs.iter()
                    .map(|r| 1.0 / r.sim_jobs_per_s.max(1e-9))
                    .sum::<f64>()
                    .max(1e-12),
        });
    }
    let ratios = |who: &str| -> Vec<Ratio> {
        type Metric = (&'static str, fn(&SeedRun) -> f64);
        let metrics: [Metric; 6] = [
            ("facility energy per job", |r| r.energy_per_job_kj),
            ("mean JCT", |r| r.mean_jct_s),
            ("p99 JCT", |r| r.p99_jct_s),
            ("makespan", |r| r.makespan_s),
            ("GPU energy per job", |r| r.gpu_energy_per_job_kj),
            ("facility energy, always on", |r| r.facility_always_on_kwh),
        ];
        let mut out = Vec::new();
        for (metric, f) in metrics {
            let mut per_seed = Vec::new();
            let mut winners: Vec<String> = Vec::new();
            for &seed in &spec.seeds {
                let Some(h) = runs.iter().find(|r| r.seed == seed && r.policy == who) else {
                    continue;
                };
                let best = runs
                    .iter()
                    .filter(|r| r.seed == seed && is_baseline(&r.policy))
                    .min_by(|a, b| f(a).total_cmp(&f(b)));
                if let Some(b) = best {
                    per_seed.push(f(h) / f(b));
                    winners.push(b.policy.clone());
                }
            }
            if per_seed.is_empty() {
                continue;
            }
            winners.sort();
            let best_baseline = winners
                .iter()
                .max_by_key(|w| winners.iter().filter(|x| x == w).count())
                .cloned()
                .unwrap_or_default();
            let mut sorted = per_seed.clone();
            sorted.sort_by(f64::total_cmp);
            out.push(Ratio {
                metric,
                best_baseline,
                min: sorted[0],
                median: median_of(&sorted),
                max: sorted[sorted.len() - 1],
                per_seed,
            });
        }
        out
    };
    let shipped = ratios("heshare");
    let labelled = ratios("heshare-labelled");
    let oracle = ratios("heshare-oracle");
    // heshare learning its profiles against heshare told every job's true class, per seed.
    let mut learned_vs_labelled = Vec::new();
    {
        type Metric = (&'static str, fn(&SeedRun) -> f64);
        let metrics: [Metric; 3] = [
            ("facility energy per job", |r| r.energy_per_job_kj),
            ("mean JCT", |r| r.mean_jct_s),
            ("bound violations", |r| {
                #[allow(clippy::cast_precision_loss)]
                let v = r.violations as f64;
                v
            }),
        ];
        for (metric, f) in metrics {
            let per_seed: Vec<f64> = spec
                .seeds
                .iter()
                .filter_map(|&seed| {
                    let a = runs
                        .iter()
                        .find(|r| r.seed == seed && r.policy == "heshare")?;
                    let b = runs
                        .iter()
                        .find(|r| r.seed == seed && r.policy == "heshare-labelled")?;
                    Some(f(a) / f(b).max(1e-9))
                })
                .collect();
            if per_seed.is_empty() {
                continue;
            }
            let mut sorted = per_seed.clone();
            sorted.sort_by(f64::total_cmp);
            learned_vs_labelled.push(Ratio {
                metric,
                best_baseline: "heshare-labelled".into(),
                min: sorted[0],
                median: median_of(&sorted),
                max: sorted[sorted.len() - 1],
                per_seed,
            });
        }
    }
    // Period by period: each period's jobs' GPU energy per job against the best baseline's.
    let days = runs.iter().map(|r| r.daily.len()).max().unwrap_or(0);
    let per = spec.curve_days.max(1);
    let periods = days.div_ceil(per);
    let mut learning_curve = Vec::new();
    for w in 0..periods {
        let sum = |r: &SeedRun| {
            let mut p = engine::Period::default();
            for d in r.daily.iter().skip(w * per).take(per) {
                p.add(d);
            }
            p
        };
        let per_job = |r: &SeedRun| {
            Some(sum(r)).filter(|x| x.jobs > 0).map(|x| {
                #[allow(clippy::cast_precision_loss)]
                let n = x.jobs as f64;
                (x.gpu_energy_j / n, x.jct_s / n, x.jobs)
            })
        };
        let ratio_of = |who: &str, pick: fn((f64, f64, usize)) -> f64| -> Option<f64> {
            let mut v: Vec<f64> = spec
                .seeds
                .iter()
                .filter_map(|&seed| {
                    let h = runs.iter().find(|r| r.seed == seed && r.policy == who)?;
                    let best = runs
                        .iter()
                        .filter(|r| r.seed == seed && is_baseline(&r.policy))
                        .filter_map(|r| per_job(r).map(pick))
                        .fold(f64::INFINITY, f64::min);
                    let mine = per_job(h).map(pick)?;
                    best.is_finite().then(|| mine / best.max(1e-9))
                })
                .collect();
            v.sort_by(f64::total_cmp);
            (!v.is_empty()).then(|| median_of(&v))
        };
        let jobs = runs
            .iter()
            .filter(|r| r.policy == "heshare")
            .filter_map(|r| per_job(r).map(|x| x.2))
            .sum::<usize>();
        let violations = |who: &str| -> usize {
            runs.iter()
                .filter(|r| r.policy == who)
                .map(|r| sum(r).violations)
                .sum()
        };
        learning_curve.push(WeekRow {
            heshare_violations: violations("heshare"),
            labelled_violations: violations("heshare-labelled"),
            first_day: w * per + 1,
            last_day: ((w + 1) * per).min(days),
            heshare_jobs: jobs,
            heshare_energy: ratio_of("heshare", |x| x.0),
            heshare_jct: ratio_of("heshare", |x| x.1),
            labelled_energy: ratio_of("heshare-labelled", |x| x.0),
            labelled_jct: ratio_of("heshare-labelled", |x| x.1),
        });
    }
    let profiles = profiles_of(&runs, "heshare");
    // Predictor error over the finished jobs of heshare's own runs (of every run when heshare was
    // not among the policies): what its decisions were based on against what the world did.
    let mut by: std::collections::BTreeMap<(usize, usize), Vec<(f64, f64)>> =
        std::collections::BTreeMap::new();
    let any_heshare = runs.iter().any(|r| r.policy == "heshare");
    for r in runs
        .iter()
        .filter(|r| !any_heshare || r.policy == "heshare")
    {
        for e in &r.errors {
            by.entry((e.class, e.gpu_type))
                .or_default()
                .push((e.runtime_ratio, e.energy_ratio));
        }
    }
    let predictor_error = by
        .into_iter()
        .map(|((c, t), v)| {
            let mut rt: Vec<f64> = v.iter().map(|x| x.0).collect();
            let mut en: Vec<f64> = v.iter().map(|x| x.1).collect();
            rt.sort_by(f64::total_cmp);
            en.sort_by(f64::total_cmp);
            ErrorRow {
                class: cfg.classes[c].name.clone(),
                gpu_type: cfg.gpu_types[t].name.clone(),
                jobs: v.len(),
                runtime_median: percentile(&rt, 0.5),
                runtime_p10: percentile(&rt, 0.1),
                runtime_p90: percentile(&rt, 0.9),
                energy_median: percentile(&en, 0.5),
            }
        })
        .collect();
    let bounds: Vec<f64> = runs.iter().map(|r| r.energy_lower_bound_kwh).collect();
    let verdict = verdict(spec, done, &|d: &Done| {
        runs.iter()
            .find(|r| r.seed == d.seed && r.policy == spec.policies[d.policy])
            .map_or(0.0, |r| r.facility_kwh)
    });
    Report {
        load: spec.load,
        recorded: spec.recorded,
        seeds: spec.seeds.clone(),
        jobs_per_seed: spec.jobs,
        gpus,
        nodes,
        host: match spec.host {
            HostSpec::Sourced => {
                "sourced (SPECpower idle per socket, PWR CPU busy power, 92% supplies, 10 W off)"
                    .to_owned()
            }
            HostSpec::Flat(w) => format!("flat {:.0} W per awake node", w.0),
        },
        saving: spec.saving,
        queue: spec.queue,
        reruns: spec.reruns,
        snapshot_period_s: cfg.live.snapshot_period_s,
        rows,
        shipped,
        labelled,
        learned_vs_labelled,
        learning_curve,
        profiles,
        recurrence: spec.recurrence,
        oracle,
        predictor_error,
        energy_lower_bound_kwh: median_of(&bounds),
        world_power,
        runs,
        verdict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kills of jobs plain Slurm also killed, and runs left as their users asked, are not
    /// counted against the policy; the rest are counted by cause, run by run (job 7's rerun was
    /// left as asked, its first run was not).
    #[test]
    fn caused_kills_leave_out_plain_slurms_and_the_ones_left_as_asked() {
        let killed = [2, 5, 7, 9, 11, 7];
        let causes = [
            KillCause::Share,
            KillCause::Neighbour,
            KillCause::Clock,
            KillCause::Type,
            KillCause::Neighbour,
            KillCause::Type,
        ];
        let asked = [false, false, false, true, false, true];
        let k = caused_kills(&[5, 6], &killed, &causes, &asked);
        assert_eq!(
            k,
            KillCounts {
                slow_type: 0,
                small_share: 1,
                lowered_clock: 1,
                neighbours: 1,
            }
        );
        assert_eq!(k.total(), 3);
        let both = [k, k].into_iter().map(Some).sum::<Option<KillCounts>>();
        assert_eq!(both.map(|b| b.total()), Some(6));
        assert_eq!(
            [Some(k), None].into_iter().sum::<Option<KillCounts>>(),
            None,
            "a seed without plain Slurm's run leaves the sum unknown"
        );
    }
}
