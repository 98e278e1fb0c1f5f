//! `heshare simulate`: replay a trace through the schedulers and compare them.

use super::ConfigArg;
use crate::cluster::{OPENB_GPU_NODES, parse_cluster};
use crate::config::Config;
use crate::sim::packing::{self, LoadPoint, PackingPolicy, Pod, TypicalPods};
use crate::sim::trace::{self, OPENB_DEFAULT_PODS, TraceFormat};
use anyhow::{Context, Result, bail};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct SimulateArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// time: jobs arrive (Poisson), run, share and finish, with energy over time; placement: the
    /// FGD (ATC'23) allocation protocol, nothing finishes.
    #[arg(long, value_enum, default_value_t = Mode::Time)]
    pub(super) mode: Mode,
    /// Trace file [default: the bundled openb default pod list].
    #[arg(long, value_name = "FILE")]
    pub(super) trace: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = TraceFormat::Openb)]
    pub(super) trace_format: TraceFormat,
    /// The cluster: a site's slurm.conf (its NodeName lines; in time mode it is read as
    /// --slurm-conf too, unless one is given), `scontrol show node --oneliner` output, or a node
    /// list in the openb CSV form [default: the bundled openb GPU node list].
    #[arg(long, value_name = "FILE")]
    pub(super) cluster: Option<PathBuf>,
    /// The gres.conf that types --cluster's untyped `Gres=gpu:N` (its `Name=gpu Type=...`
    /// lines).
    #[arg(long, value_name = "FILE")]
    pub(super) gres_conf: Option<PathBuf>,
    /// Offered GPU load as a fraction of the cluster's GPUs [default: 0.7 in time mode; 1.0 in
    /// placement mode, the arrived demand at which FGD reports].
    #[arg(long)]
    pub(super) load: Option<f64>,
    /// Number of seeds (42, 43, ... as FGD's) [default: 10 in placement mode, 3 in time mode].
    #[arg(long)]
    pub(super) seeds: Option<u64>,
    /// Schedulers to compare, comma separated [default: all of the mode's]. Time mode:
    /// slurm-exclusive, slurm-mps, fgd, fgd-pwr, gavel, zeus, heshare. Placement mode: random,
    /// dotprod, gpu-clustering, gpu-packing, bestfit, fgd.
    #[arg(long, value_delimiter = ',')]
    pub(super) policies: Vec<String>,
    /// Time mode: fraction of the node list's nodes kept (per GPU model, at least one each)
    /// [default: 0.05 of the bundled openb list; 1, the whole cluster, with --cluster].
    #[arg(long)]
    pub(super) scale: Option<f64>,
    /// Time mode: jobs per run [default: 20000; with --suite, each world's own].
    #[arg(long)]
    pub(super) jobs: Option<usize>,
    /// Time mode: trace durations are cut to this many seconds (the openb tail reaches 145 days).
    #[arg(long, default_value_t = 172_800.0)]
    pub(super) max_duration: f64,
    /// Time mode: users the jobs are spread over.
    #[arg(long, default_value_t = 20)]
    pub(super) users: u32,
    /// Time mode: Slurm's SuspendTime, seconds a node stays idle before it is powered down, or
    /// `off` (Slurm's own default: every node always on) [default: 600, or --slurm-conf's].
    #[arg(long, value_name = "SECS|off")]
    pub(super) suspend_time: Option<String>,
    /// Time mode: Slurm's SuspendTimeout, seconds powering down takes [default: 30, or
    /// --slurm-conf's].
    #[arg(long, value_name = "SECS")]
    pub(super) suspend_timeout: Option<f64>,
    /// Time mode: seconds a powered-down node takes to boot and rejoin (bare-metal GPU servers
    /// POST for minutes; clouds 600-1800 s); must be within ResumeTimeout.
    #[arg(long, value_name = "SECS", default_value_t = 300.0)]
    pub(super) resume_time: f64,
    /// Time mode: Slurm's ResumeTimeout [default: 600, or --slurm-conf's].
    #[arg(long, value_name = "SECS")]
    pub(super) resume_timeout: Option<f64>,
    /// Time mode: Slurm's PriorityType that orders the queue: `multifactor` (age and the site
    /// factor heshare sets) or `basic` (first come, first served, no site factor) [default:
    /// multifactor, or --slurm-conf's].
    #[arg(long, value_name = "multifactor|basic")]
    pub(super) priority: Option<String>,
    /// Time mode: Slurm's PriorityWeightAge [default: 1000, or --slurm-conf's].
    #[arg(long, value_name = "N")]
    pub(super) priority_weight_age: Option<u32>,
    /// Time mode: read SuspendTime, SuspendTimeout, ResumeTimeout, PriorityType,
    /// PriorityWeightAge and PriorityMaxAge from this slurm.conf (the options above override it).
    #[arg(long, value_name = "FILE")]
    pub(super) slurm_conf: Option<PathBuf>,
    /// Time mode: how each node's host (CPUs, memory, fans, NICs, power supplies) is charged:
    /// `sourced` (SPECpower idle per socket, PWR's CPU power per allocated core, 92% supplies,
    /// 10 W suspended) or a flat number of watts per awake node.
    #[arg(long, value_name = "sourced|WATTS", default_value = "sourced")]
    pub(super) host_power: String,
    /// Time mode: how many times a user submits a job again after Slurm killed it at its time
    /// limit (at once, from the start, each time with the limit doubled); 0: a kill ends it.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub(super) reruns: u32,
    /// Time mode: mean runs of each user's script (template); each job is a new one with
    /// probability 1/R (1: nothing recurs).
    #[arg(long, value_name = "R", default_value_t = 10.0)]
    pub(super) runs_per_template: f64,
    /// Time mode: log-space spread of a run's work around its script's.
    #[arg(long, value_name = "SIGMA", default_value_t = 0.15)]
    pub(super) run_noise: f64,
    /// Time mode: fraction of scripts whose users give their true --gpu-class (the rest give
    /// none, or a wrong one with --mislabelled).
    #[arg(long, value_name = "F", default_value_t = 0.0)]
    pub(super) labelled: f64,
    /// Time mode: fraction of scripts whose users give a wrong --gpu-class.
    #[arg(long, value_name = "F", default_value_t = 0.0)]
    pub(super) mislabelled: f64,
    /// Time mode: fraction of scripts whose users write their time limit for the fastest GPU
    /// type their request allows instead of the slowest (on a slower type their runs pass it).
    #[arg(long, value_name = "F", default_value_t = 0.0)]
    pub(super) fast_limits: f64,
    /// Time mode: days per row of the learning curve (7: per simulated week).
    #[arg(long, value_name = "DAYS", default_value_t = 1)]
    pub(super) curve_days: usize,
    /// Run the scenario suite instead of one world: every world of `sim::suite` (its own
    /// cluster, jobs, load and site), each through every policy, summed up in one table. The
    /// options that describe one world (--trace, --cluster, --load, --scale, power, users and
    /// recurrence) do not apply; --seeds (default 3) and --jobs (every world) do.
    #[arg(long)]
    pub(super) suite: bool,
    /// With --suite: one seed and each world's quick job count.
    #[arg(long, requires = "suite")]
    pub(super) quick: bool,
    /// With --suite: only these worlds, comma separated [default: all of them].
    #[arg(long, requires = "suite", value_delimiter = ',')]
    pub(super) worlds: Vec<String>,
    /// Also write the results as JSON.
    #[arg(long, value_name = "FILE")]
    pub(super) json: Option<PathBuf>,
    /// Time mode: write each job's outcome under each policy and seed as CSV
    /// (`policy,seed,job,submit_s,start_s,jct_s,gpu_kwh`; `job` is the sacct JobID in a replay as
    /// recorded, else the job's place in the workload; an empty start or JCT: it never started
    /// or never ended).
    #[arg(long, value_name = "FILE")]
    pub(super) jobs_csv: Option<PathBuf>,
    /// Also draw the results as an SVG chart.
    #[arg(long, value_name = "FILE.svg")]
    pub(super) plot: Option<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Mode {
    Time,
    Placement,
}

/// The FGD paper's published medians over 10 seeds on the default openb pod list (allocation %
/// at 100% and 130% arrived demand; fgd-atc23-results/fgd_results_summary.csv).
const FGD_PUBLISHED: [(PackingPolicy, f64, f64); 6] = [
    (PackingPolicy::Random, 86.25, 87.39),
    (PackingPolicy::DotProd, 90.56, 90.80),
    (PackingPolicy::GpuClustering, 91.58, 91.80),
    (PackingPolicy::GpuPacking, 91.81, 92.06),
    (PackingPolicy::BestFit, 92.91, 93.11),
    (PackingPolicy::Fgd, 95.23, 95.40),
];

#[derive(Serialize)]
struct PolicyResult {
    policy: &'static str,
    alloc_rate: f64,
    alloc_rate_min: f64,
    alloc_rate_max: f64,
    gpu_power_kw: f64,
    pods_failed: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    published_alloc_rate: Option<f64>,
    per_seed: Vec<f64>,
}

#[derive(Serialize)]
struct Output {
    mode: Mode,
    load: f64,
    seeds: Vec<u64>,
    trace: String,
    cluster: String,
    gpus: usize,
    results: Vec<PolicyResult>,
}

pub(super) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub fn run(out: &mut impl Write, cfg: &Config, args: &SimulateArgs) -> Result<()> {
    if args.suite {
        return super::simulate_suite::run(out, cfg, args);
    }
    let load = args.load.unwrap_or(match args.mode {
        Mode::Time => 0.7,
        Mode::Placement => 1.0,
    });
    if !(load > 0.0 && load <= 10.0) {
        bail!("--load {load} is outside (0, 10]");
    }
    if args.seeds == Some(0) {
        bail!("--seeds must be at least 1");
    }
    match args.mode {
        Mode::Placement => run_placement(out, cfg, args, load),
        Mode::Time => super::simulate_time::run(out, cfg, args, load),
    }
}

impl SimulateArgs {
    /// The fraction of the cluster's nodes a time-mode run keeps.
    pub(super) fn scale(&self) -> f64 {
        self.scale
            .unwrap_or(if self.cluster.is_some() { 1.0 } else { 0.05 })
    }

    /// The slurm.conf Slurm's settings are read from: --slurm-conf, else --cluster where that
    /// is a slurm.conf (not scontrol output, which carries no settings).
    pub(super) fn slurm_conf(&self) -> Result<Option<(PathBuf, String)>> {
        if let Some(p) = &self.slurm_conf {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("{}: cannot read", p.display()))?;
            return Ok(Some((p.clone(), text)));
        }
        let Some(p) = &self.cluster else {
            return Ok(None);
        };
        let text =
            std::fs::read_to_string(p).with_context(|| format!("{}: cannot read", p.display()))?;
        Ok(crate::cluster::slurm::is_slurm_conf(&text).then(|| (p.clone(), text)))
    }
}

/// The node list and trace the arguments name, or the bundled ones.
pub(super) fn inputs(
    cfg: &Config,
    args: &SimulateArgs,
) -> Result<(
    Vec<crate::cluster::Node>,
    String,
    Vec<crate::sim::trace::TraceJob>,
    String,
)> {
    let (node_text, cluster_label) = super::read_or_bundled(
        args.cluster.as_deref(),
        OPENB_GPU_NODES,
        "openb GPU node list (bundled)",
    )?;
    let gres = match &args.gres_conf {
        Some(p) => Some((
            std::fs::read_to_string(p).with_context(|| format!("{}: cannot read", p.display()))?,
            p.clone(),
        )),
        None => None,
    };
    let nodes = parse_cluster(
        &node_text,
        Path::new(&cluster_label),
        gres.as_ref().map(|(t, p)| (t.as_str(), p.as_path())),
        cfg,
    )?;
    let (trace_text, trace_label) = super::read_or_bundled(
        args.trace.as_deref(),
        OPENB_DEFAULT_PODS,
        "openb default pod list (bundled)",
    )?;
    let jobs = trace::parse(&trace_text, args.trace_format, Path::new(&trace_label), cfg)?;
    if jobs.is_empty() {
        bail!("{trace_label}: the trace has no jobs");
    }
    Ok((nodes, cluster_label, jobs, trace_label))
}

fn run_placement(out: &mut impl Write, cfg: &Config, args: &SimulateArgs, load: f64) -> Result<()> {
    let (nodes, cluster_label, jobs, trace_label) = inputs(cfg, args)?;
    let pods: Vec<Pod> = jobs.iter().map(Pod::from_trace).collect();
    let typical = TypicalPods::from_pods(&pods);
    let cluster = packing::cluster_nodes(&nodes);
    let gpus: usize = cluster.iter().map(|n| n.gpu_left.len()).sum();
    let policies: Vec<PackingPolicy> = if args.policies.is_empty() {
        PackingPolicy::ALL.to_vec()
    } else {
        args.policies
            .iter()
            .map(|n| {
                <PackingPolicy as clap::ValueEnum>::from_str(n, true).map_err(|_| {
                    anyhow::anyhow!(
                        "unknown placement-mode policy \"{n}\" (known: {})",
                        PackingPolicy::ALL.map(PackingPolicy::name).join(", ")
                    )
                })
            })
            .collect::<Result<_>>()?
    };
    let seeds: Vec<u64> = (0..args.seeds.unwrap_or(10)).map(|s| 42 + s).collect();
    let bundled = args.trace.is_none() && args.cluster.is_none();

    // Seeds are independent runs: spread them over the cores.
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .max(1);
    let mut results = Vec::new();
    for &policy in &policies {
        let mut points: Vec<(u64, LoadPoint)> = Vec::new();
        for chunk in seeds.chunks(threads) {
            let got: Vec<(u64, Option<LoadPoint>)> = std::thread::scope(|s| {
                let handles: Vec<_> = chunk
                    .iter()
                    .map(|&seed| {
                        let (cluster, pods, typical) = (&cluster, &pods, &typical);
                        s.spawn(move || {
                            (
                                seed,
                                packing::run(cfg, cluster, pods, typical, policy, seed, &[load])
                                    .pop(),
                            )
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or((0, None)))
                    .collect()
            });
            for (seed, p) in got {
                let p = p.with_context(|| {
                    format!("{}: seed {seed} never reached load {}", policy.name(), load)
                })?;
                points.push((seed, p));
            }
        }
        points.sort_by_key(|(s, _)| *s);
        let per_seed: Vec<f64> = points.iter().map(|(_, p)| p.alloc_pct).collect();
        let mut v = per_seed.clone();
        let mut power: Vec<f64> = points.iter().map(|(_, p)| p.gpu_power_w / 1000.0).collect();
        #[allow(clippy::cast_precision_loss)]
        let mut failed: Vec<f64> = points.iter().map(|(_, p)| p.pods_failed as f64).collect();
        let published = FGD_PUBLISHED
            .iter()
            .find(|(p, _, _)| *p == policy)
            .and_then(|(_, at100, at130)| {
                if !bundled {
                    None
                } else if (load - 1.0).abs() < 1e-9 {
                    Some(*at100)
                } else if (load - 1.3).abs() < 1e-9 {
                    Some(*at130)
                } else {
                    None
                }
            });
        results.push(PolicyResult {
            policy: policy.name(),
            alloc_rate: median(&mut v),
            alloc_rate_min: v.first().copied().unwrap_or(f64::NAN),
            alloc_rate_max: v.last().copied().unwrap_or(f64::NAN),
            gpu_power_kw: median(&mut power),
            pods_failed: median(&mut failed),
            published_alloc_rate: published,
            per_seed,
        });
    }

    writeln!(
        out,
        "placement mode (FGD protocol): {trace_label} on {cluster_label}, {gpus} GPUs, load {:.2}, {} seeds",
        load,
        seeds.len()
    )?;
    writeln!(
        out,
        "{:<16} {:>12} {:>16} {:>12} {:>12} {:>14}",
        "policy", "alloc % (med)", "min..max", "paper med", "GPU kW", "pods failed"
    )?;
    for r in &results {
        let paper = r.published_alloc_rate.map_or("-".to_owned(), |p| {
            format!("{p:.2} ({:+.2})", r.alloc_rate - p)
        });
        writeln!(
            out,
            "{:<16} {:>12.2} {:>7.2}..{:<7.2} {:>12} {:>12.1} {:>14.0}",
            r.policy,
            r.alloc_rate,
            r.alloc_rate_min,
            r.alloc_rate_max,
            paper,
            r.gpu_power_kw,
            r.pods_failed
        )?;
    }
    if let Some(path) = &args.json {
        let o = Output {
            mode: args.mode,
            load,
            seeds,
            trace: trace_label,
            cluster: cluster_label,
            gpus,
            results,
        };
        std::fs::write(path, serde_json::to_string_pretty(&o)? + "\n")
            .with_context(|| format!("{}: cannot write", path.display()))?;
    }
    Ok(())
}
