//! The scenario suite: named worlds heshare is judged on together, so that no change is kept for
//! its effect on one. Each world says where its cluster, its jobs and its power come from; the
//! suite runs every world through `experiment::run` (the same schedulers, the same shipped path)
//! and sums them up: per world heshare as it ships, heshare told every job's class, heshare told
//! every job's truth (the oracle) and the best baseline; over worlds the worst world and the
//! geometric mean.
//!
//! Worlds live here and only here: nothing in the decision code knows which world it runs in.
//! A world changes the cluster, the trace, the site's power and the users, never a setting.
//! Pure: the data are the bundled files, compiled in.

use super::experiment::{self, Report, Spec};
use super::meter::{HostSpec, PowerSaving};
use super::templates::Recurrence;
use super::trace::{OPENB_DEFAULT_PODS, TraceFormat, TraceJob};
use crate::cluster::{Node, OPENB_GPU_NODES, parse_node_list};
use crate::config::Config;
use serde::Serialize;
use std::path::Path;

/// The suite's version: bumped whenever a world changes, so that results name what they ran.
/// 2: the site-example world. 3: the fast-limits world.
pub const VERSION: u32 = 3;

/// The seed the gavel world's rows are generated with (the suite's version when it was made:
/// its rows stay the same when other worlds change).
const GAVEL_ROWS_SEED: u64 = 1;

const OPENB_MULTIGPU50: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/alibaba-openb/openb_pod_list_multigpu50.csv"
));
const SITE_EXAMPLE_CONF: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/site-example/slurm.conf"
));
const SITE_EXAMPLE_SACCT: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/site-example/sacct.txt"
));
const OPENB_GPUSPEC33: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/alibaba-openb/openb_pod_list_gpuspec33.csv"
));

/// Where a world's nodes come from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum ClusterSource {
    /// The openb GPU node list, keeping this fraction of each model's nodes.
    Openb { scale: f64 },
    /// Gavel's 36 K80 + 36 P100 + 36 V100 (`gavel_workload`).
    Gavel,
    /// The made-up example site's slurm.conf (`data/site-example`), whole.
    SiteExample,
}

/// Where a world's jobs are drawn from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum JobSource {
    /// openb's default pod list.
    OpenbDefault,
    /// openb's `multigpu50` list: the default list with 909 more multi-GPU pods. It has no
    /// times: a pod of the default list keeps its duration there, an added pod is given the
    /// duration of a default-list pod with as many GPUs (drawn, seeded).
    OpenbMultigpu50,
    /// openb's `gpuspec33` list: a third of the GPU pods constrained to GPU models, as in
    /// production.
    OpenbGpuspec33,
    /// Gavel's generator over its 26 job types (`gavel_workload`), this many rows.
    Gavel { rows: usize },
    /// The example site's sacct export, replayed as recorded (`sim::replay`).
    SiteExampleSacct,
}

/// One world of the suite.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct World {
    pub name: &'static str,
    /// Where its cluster, jobs and power come from, in a sentence.
    pub about: &'static str,
    pub cluster: ClusterSource,
    pub jobs_from: JobSource,
    pub load: f64,
    /// Jobs per seed in the full suite and in the quick one.
    pub jobs: usize,
    pub quick_jobs: usize,
    pub host: HostSpec,
    /// Slurm's SuspendTime, `None` for power saving off.
    pub suspend_time_s: Option<f64>,
    pub recurrence: Recurrence,
}

/// Every world, in the order the suite prints them.
pub fn worlds() -> Vec<World> {
    let base = World {
        name: "openb",
        about: "openb default slice: 5% of the openb GPU nodes (310 GPUs of P100, T4, V100, A10, \
                A100 as G2/G3), jobs drawn from openb's default pod list, sourced host power, \
                SuspendTime 600 s",
        cluster: ClusterSource::Openb { scale: 0.05 },
        jobs_from: JobSource::OpenbDefault,
        load: 0.7,
        jobs: 20_000,
        quick_jobs: 3_000,
        host: HostSpec::Sourced,
        suspend_time_s: Some(600.0),
        recurrence: Recurrence::default(),
    };
    vec![
        base.clone(),
        World {
            name: "openb-busy",
            about: "the openb slice at load 0.9",
            load: 0.9,
            ..base.clone()
        },
        World {
            name: "gavel",
            about: "Gavel's cluster (36 K80, 36 P100, 36 V100; 8-GPU servers assumed) and jobs \
                    drawn as Gavel's generator draws them (26 job types, multi-GPU, Philly \
                    durations); K80 from Gavel's throughputs, its power the catalog's perturbed; \
                    load 0.5 of its GPUs in V100 time, about 0.75 of what its K80s, P100s and \
                    V100s can do",
            cluster: ClusterSource::Gavel,
            jobs_from: JobSource::Gavel { rows: 5_000 },
            // Load counts GPUs as V100s; its K80s and P100s run Gavel's jobs at 0.22x and 0.75x
            // a V100 (Gavel's throughputs), so 0.7 would offer more than it can ever finish and
            // its queue would only grow.
            load: 0.5,
            jobs: 10_000,
            quick_jobs: 1_500,
            ..base.clone()
        },
        World {
            name: "openb-multigpu50",
            about: "the openb slice with openb's multigpu50 pod list (50% more whole-GPU demand)",
            jobs_from: JobSource::OpenbMultigpu50,
            ..base.clone()
        },
        World {
            name: "openb-gpuspec33",
            about: "the openb slice with openb's gpuspec33 pod list (a third of GPU pods \
                    constrained to models)",
            jobs_from: JobSource::OpenbGpuspec33,
            ..base.clone()
        },
        World {
            name: "always-on",
            about: "the openb slice without power saving (SuspendTime off, Slurm's default)",
            suspend_time_s: None,
            ..base.clone()
        },
        World {
            name: "big-servers",
            about: "the openb slice with big servers: a flat 300 W per awake node for its host",
            host: HostSpec::Flat(crate::units::Watts(300.0)),
            ..base.clone()
        },
        World {
            name: "few-repeats",
            about: "the openb slice where a script runs 2 times on average",
            recurrence: Recurrence {
                runs_per_template: 2.0,
                ..Recurrence::default()
            },
            ..base.clone()
        },
        World {
            name: "many-repeats",
            about: "the openb slice where a script runs 20 times on average",
            recurrence: Recurrence {
                runs_per_template: 20.0,
                ..Recurrence::default()
            },
            ..base.clone()
        },
        World {
            name: "some-labels",
            about: "the openb slice where 30% of scripts carry their true --gpu-class and 10% a \
                    wrong one",
            recurrence: Recurrence {
                labelled: 0.3,
                mislabelled: 0.1,
                ..Recurrence::default()
            },
            ..base.clone()
        },
        World {
            name: "fast-limits",
            about: "the openb slice where 20% of scripts' users write their time limit for the \
                    fastest GPU type their request allows, not the slowest",
            recurrence: Recurrence {
                fast_limits: 0.2,
                ..Recurrence::default()
            },
            ..base.clone()
        },
        World {
            name: "openb-large",
            about: "a larger openb slice: 20% of the openb GPU nodes (about 1,240 GPUs)",
            cluster: ClusterSource::Openb { scale: 0.2 },
            jobs: 40_000,
            quick_jobs: 6_000,
            ..base.clone()
        },
        World {
            name: "site-example",
            about: "a made-up site as an admin gives it: its slurm.conf (16 A100, 48 V100, 32 T4 \
                    on 18 nodes, MPS on the A100 and T4 nodes, SuspendTime 600 s) and a week of \
                    its sacct export (300 jobs) replayed as recorded",
            cluster: ClusterSource::SiteExample,
            jobs_from: JobSource::SiteExampleSacct,
            load: 0.05,
            jobs: 300,
            quick_jobs: 300,
            ..base
        },
    ]
}

/// A world made concrete: the site's catalog, its nodes and its trace.
pub struct Prepared {
    pub cfg: Config,
    pub nodes: Vec<Node>,
    pub trace: Vec<TraceJob>,
    /// GPU rows of the trace no node of the cluster can ever hold (too many GPUs, cores or
    /// memory for every node of its allowed models): Slurm refuses such a job at submission
    /// ("Requested node configuration is not available"), so the world does not draw them.
    pub refused_rows: usize,
}

/// Whether some node of `nodes` can hold `job` alone.
fn fits_some_node(job: &TraceJob, nodes: &[Node]) -> bool {
    nodes.iter().any(|n| {
        n.gpu_type
            .is_some_and(|t| job.gpu_types.is_empty() || job.gpu_types.contains(&t))
            && n.gpus >= job.num_gpus
            && n.cpu_milli >= job.cpu_milli
            && n.memory_mib >= job.memory_mib
    })
}

/// `cfg` with the K80 entry a site with K80s adds, unless it has one.
fn with_k80(cfg: &Config) -> Result<Config, String> {
    if cfg.resolve_gpu_type("K80").is_some() {
        return Ok(cfg.clone());
    }
    let text = format!(
        "{}\n{}",
        crate::config::BUNDLED_CONFIG,
        super::gavel_workload::K80_CATALOG
    );
    let k80 = Config::parse(&text, Path::new("k80.toml"))
        .map_err(|e| format!("the K80 catalog entry: {e}"))?;
    let t = k80
        .gpu_type("k80")
        .ok_or_else(|| "the K80 catalog entry has no k80".to_owned())?;
    let mut out = cfg.clone();
    out.gpu_types.push(k80.gpu_types[t].clone());
    Ok(out)
}

/// Durations for a pod list without times: the default list's, by pod name, else a default-list
/// duration of a pod with as many GPUs (seeded, deterministic).
fn with_durations(mut jobs: Vec<TraceJob>, default: &[TraceJob]) -> Vec<TraceJob> {
    let by_name: std::collections::HashMap<&str, f64> = default
        .iter()
        .map(|j| (j.id.as_str(), j.duration_s))
        .collect();
    let mut rng = super::rng::SplitMix::new(0x0D07_A7E5);
    for j in &mut jobs {
        if let Some(&d) = by_name.get(j.id.as_str()) {
            j.duration_s = d;
            continue;
        }
        let same: Vec<f64> = default
            .iter()
            .filter(|d| d.num_gpus == j.num_gpus && d.gpu_milli == j.gpu_milli)
            .map(|d| d.duration_s)
            .collect();
        let pool = if same.is_empty() {
            default
                .iter()
                .filter(|d| d.num_gpus > 0)
                .map(|d| d.duration_s)
                .collect()
        } else {
            same
        };
        if !pool.is_empty() {
            j.duration_s = pool[rng.below(pool.len())];
        }
    }
    jobs
}

/// The catalog, nodes and trace of world `w` for a site whose heshare.toml is `cfg`.
pub fn prepare(cfg: &Config, w: &World) -> Result<Prepared, String> {
    let cfg = match w.cluster {
        ClusterSource::Gavel => with_k80(cfg)?,
        ClusterSource::Openb { .. } | ClusterSource::SiteExample => cfg.clone(),
    };
    let nodes = match w.cluster {
        ClusterSource::Openb { scale } => {
            let all = parse_node_list(OPENB_GPU_NODES, Path::new("openb node list"), &cfg)
                .map_err(|e| e.to_string())?;
            experiment::scale_nodes(&all, scale)
        }
        ClusterSource::Gavel => parse_node_list(
            &super::gavel_workload::cluster_csv(),
            Path::new("gavel cluster"),
            &cfg,
        )
        .map_err(|e| e.to_string())?,
        ClusterSource::SiteExample => crate::cluster::slurm::parse_slurm_nodes(
            SITE_EXAMPLE_CONF,
            Path::new("site-example/slurm.conf"),
            None,
            &cfg,
        )
        .map_err(|e| e.to_string())?,
    };
    let openb = |text: &str, label: &str| {
        super::trace::parse(text, TraceFormat::Openb, Path::new(label), &cfg)
            .map_err(|e| e.to_string())
    };
    let trace = match w.jobs_from {
        JobSource::OpenbDefault => openb(OPENB_DEFAULT_PODS, "openb default pod list")?,
        JobSource::OpenbGpuspec33 => openb(OPENB_GPUSPEC33, "openb gpuspec33 pod list")?,
        JobSource::OpenbMultigpu50 => with_durations(
            openb(OPENB_MULTIGPU50, "openb multigpu50 pod list")?,
            &openb(OPENB_DEFAULT_PODS, "openb default pod list")?,
        ),
        JobSource::Gavel { rows } => super::gavel_workload::jobs(&cfg, rows, GAVEL_ROWS_SEED),
        JobSource::SiteExampleSacct => super::trace::parse(
            SITE_EXAMPLE_SACCT,
            TraceFormat::Sacct,
            Path::new("site-example/sacct.txt"),
            &cfg,
        )
        .map_err(|e| e.to_string())?,
    };
    let before = trace.len();
    let trace: Vec<TraceJob> = trace
        .into_iter()
        .filter(|j| j.num_gpus == 0 || fits_some_node(j, &nodes))
        .collect();
    Ok(Prepared {
        refused_rows: before - trace.len(),
        cfg,
        nodes,
        trace,
    })
}

/// How big a run of the suite is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Size {
    pub seeds: u64,
    /// Jobs per seed: the worlds' own (full or quick), or this many in every world.
    pub quick: bool,
    pub jobs: Option<usize>,
}

/// The spec world `w` runs with.
pub fn spec(w: &World, size: Size, threads: usize) -> Spec {
    // A replay as recorded has the record's jobs, whatever the size asks.
    let recorded = w.jobs_from == JobSource::SiteExampleSacct;
    Spec {
        load: w.load,
        jobs: if recorded {
            w.jobs
        } else {
            size.jobs
                .unwrap_or(if size.quick { w.quick_jobs } else { w.jobs })
        },
        seeds: (0..size.seeds.max(1)).map(|s| 42 + s).collect(),
        max_duration_s: 172_800.0,
        users: 20,
        host: w.host,
        saving: PowerSaving {
            suspend_time_s: w.suspend_time_s,
            ..PowerSaving::default()
        },
        queue: super::priority::QueueOrder::default(),
        policies: super::schedulers::DEFAULT
            .iter()
            .map(|s| (*s).to_owned())
            .collect(),
        threads,
        recurrence: w.recurrence,
        curve_days: 7,
        reruns: super::engine::Reruns::default(),
        recorded,
        arrivals: super::replay::Scaling::AS_RECORDED,
    }
}

/// One of heshare's rows in a world against the best baseline (medians over seeds of per-seed
/// ratios, the best baseline per seed and metric, as `experiment` computes them).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeshareRow {
    pub policy: String,
    pub energy_per_job_kj: f64,
    pub mean_jct_s: f64,
    pub p99_jct_s: f64,
    /// Runs killed here that plain Slurm (slurm-mps) never killed.
    pub caused_kills: Option<usize>,
    pub energy_ratio: f64,
    pub mean_jct_ratio: f64,
    pub p99_jct_ratio: f64,
    /// The ratios of each seed (the median above is theirs): the spread a change must leave
    /// before it counts as one.
    pub energy_ratio_per_seed: Vec<f64>,
    pub mean_jct_ratio_per_seed: Vec<f64>,
}

/// One world's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct WorldResult {
    pub world: World,
    pub gpus: usize,
    pub jobs_per_seed: usize,
    pub seeds: Vec<u64>,
    /// Trace rows no node can hold, not drawn (see `Prepared::refused_rows`).
    pub refused_rows: usize,
    /// Jobs that never started or never finished, over every run (0 unless something is wrong).
    pub missing_jobs: usize,
    /// The baseline with the least facility energy per job (means over seeds).
    pub best_baseline: experiment::PolicyRow,
    /// heshare, heshare-labelled, heshare-oracle.
    pub heshare: Vec<HeshareRow>,
    /// Whether oracle <= labelled <= learned holds, on facility energy per job and on mean JCT
    /// (means over seeds).
    pub ordered_energy: bool,
    pub ordered_jct: bool,
    /// Jobs simulated per second of wall time by heshare (learned) in this world.
    pub heshare_jobs_per_s: f64,
    /// How the oracle's decisions went, summed over seeds: how many had the true profile.
    pub oracle_profiles: Option<super::learning::ProfileStats>,
    /// Every policy's row (means over seeds).
    pub rows: Vec<experiment::PolicyRow>,
    pub wall_s: f64,
}

fn ratio(r: &[experiment::Ratio], metric: &str) -> f64 {
    r.iter()
        .find(|x| x.metric == metric)
        .map_or(f64::NAN, |x| x.median)
}

fn per_seed(r: &[experiment::Ratio], metric: &str) -> Vec<f64> {
    r.iter()
        .find(|x| x.metric == metric)
        .map_or_else(Vec::new, |x| x.per_seed.clone())
}

/// Sums up one world's report.
pub fn result_of(
    world: &World,
    refused_rows: usize,
    report: Report,
    wall_s: f64,
) -> Result<WorldResult, String> {
    let best_baseline = report
        .rows
        .iter()
        .filter(|r| super::schedulers::is_baseline(&r.policy))
        .min_by(|a, b| a.energy_per_job_kj.total_cmp(&b.energy_per_job_kj))
        .cloned()
        .ok_or_else(|| format!("{}: no baseline ran", world.name))?;
    let mut heshare = Vec::new();
    for (name, ratios) in [
        ("heshare", &report.shipped),
        ("heshare-labelled", &report.labelled),
        ("heshare-oracle", &report.oracle),
    ] {
        let row = report
            .rows
            .iter()
            .find(|r| r.policy == name)
            .ok_or_else(|| format!("{}: {name} did not run", world.name))?;
        heshare.push(HeshareRow {
            policy: name.to_owned(),
            energy_per_job_kj: row.energy_per_job_kj,
            mean_jct_s: row.mean_jct_s,
            p99_jct_s: row.p99_jct_s,
            caused_kills: row.killed_not_by_plain_slurm,
            energy_ratio: ratio(ratios, "facility energy per job"),
            mean_jct_ratio: ratio(ratios, "mean JCT"),
            p99_jct_ratio: ratio(ratios, "p99 JCT"),
            energy_ratio_per_seed: per_seed(ratios, "facility energy per job"),
            mean_jct_ratio_per_seed: per_seed(ratios, "mean JCT"),
        });
    }
    let ordered = |f: fn(&HeshareRow) -> f64| {
        let (l, b, o) = (f(&heshare[0]), f(&heshare[1]), f(&heshare[2]));
        o <= b && b <= l
    };
    let heshare_jobs_per_s = report
        .rows
        .iter()
        .find(|r| r.policy == "heshare")
        .map_or(f64::NAN, |r| r.sim_jobs_per_s);
    Ok(WorldResult {
        oracle_profiles: experiment::profiles_of(&report.runs, "heshare-oracle"),
        missing_jobs: report.missing_jobs(),
        world: world.clone(),
        gpus: report.gpus,
        jobs_per_seed: report.jobs_per_seed,
        refused_rows,
        ordered_energy: ordered(|r| r.energy_per_job_kj),
        ordered_jct: ordered(|r| r.mean_jct_s),
        best_baseline,
        heshare,
        heshare_jobs_per_s,
        wall_s,
        seeds: report.seeds,
        rows: report.rows,
    })
}

/// Over all worlds, per heshare policy: the geometric mean of its ratios and its worst world.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub policy: String,
    pub energy_geomean: f64,
    pub mean_jct_geomean: f64,
    pub p99_jct_geomean: f64,
    pub worst_energy: (String, f64),
    pub worst_mean_jct: (String, f64),
}

/// Sums up the suite.
pub fn summarise(results: &[WorldResult]) -> Vec<Summary> {
    let mut out = Vec::new();
    for name in ["heshare", "heshare-labelled", "heshare-oracle"] {
        let rows: Vec<(&str, &HeshareRow)> = results
            .iter()
            .filter_map(|w| {
                w.heshare
                    .iter()
                    .find(|r| r.policy == name)
                    .map(|r| (w.world.name, r))
            })
            .collect();
        if rows.is_empty() {
            continue;
        }
        #[allow(clippy::cast_precision_loss)]
        let geo = |f: fn(&HeshareRow) -> f64| {
            (rows.iter().map(|(_, r)| f(r).ln()).sum::<f64>() / rows.len() as f64).exp()
        };
        let worst = |f: fn(&HeshareRow) -> f64| {
            rows.iter()
                .max_by(|a, b| f(a.1).total_cmp(&f(b.1)))
                .map(|(w, r)| ((*w).to_owned(), f(r)))
                .unwrap_or_default()
        };
        out.push(Summary {
            policy: name.to_owned(),
            energy_geomean: geo(|r| r.energy_ratio),
            mean_jct_geomean: geo(|r| r.mean_jct_ratio),
            p99_jct_geomean: geo(|r| r.p99_jct_ratio),
            worst_energy: worst(|r| r.energy_ratio),
            worst_mean_jct: worst(|r| r.mean_jct_ratio),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BUNDLED_CONFIG;

    fn cfg() -> Config {
        Config::parse(BUNDLED_CONFIG, Path::new("h.toml")).expect("valid")
    }

    #[test]
    fn every_world_prepares_with_jobs_and_gpus() {
        let cfg = cfg();
        let ws = worlds();
        let mut names: Vec<&str> = ws.iter().map(|w| w.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ws.len(), "world names are unique");
        for w in &ws {
            let p = prepare(&cfg, w).unwrap_or_else(|e| panic!("{}: {e}", w.name));
            assert!(!p.nodes.is_empty(), "{}", w.name);
            assert!(
                p.trace
                    .iter()
                    .all(|j| j.num_gpus == 0 || fits_some_node(j, &p.nodes)),
                "{}: a row no node holds is drawn",
                w.name
            );
            assert!(p.trace.iter().any(|j| j.num_gpus > 0), "{}", w.name);
            // openb's default list has one pod deleted while pending (no run time); no world adds
            // any.
            let timeless = p
                .trace
                .iter()
                .filter(|j| j.num_gpus > 0 && j.duration_s <= 0.0)
                .count();
            assert!(
                timeless <= 1,
                "{}: {timeless} GPU jobs without a duration",
                w.name
            );
        }
    }

    #[test]
    fn the_multigpu_list_keeps_the_default_durations_and_adds_big_jobs() {
        let cfg = cfg();
        let w = worlds()
            .into_iter()
            .find(|w| w.jobs_from == JobSource::OpenbMultigpu50)
            .expect("the multigpu world");
        let p = prepare(&cfg, &w).expect("prepares");
        let default = super::super::trace::parse(
            OPENB_DEFAULT_PODS,
            TraceFormat::Openb,
            Path::new("d"),
            &cfg,
        )
        .expect("parses");
        let first = default.iter().find(|j| j.num_gpus > 0).expect("a GPU pod");
        let same = p.trace.iter().find(|j| j.id == first.id).expect("kept");
        assert!((same.duration_s - first.duration_s).abs() < 1e-9);
        let big = |t: &[TraceJob]| t.iter().filter(|j| j.num_gpus >= 2).count();
        assert!(big(&p.trace) > 5 * big(&default));
    }

    #[test]
    fn the_gavel_world_adds_k80_to_the_catalog_only_there() {
        let cfg = cfg();
        assert!(cfg.resolve_gpu_type("K80").is_none());
        let w = worlds()
            .into_iter()
            .find(|w| w.cluster == ClusterSource::Gavel)
            .expect("the gavel world");
        let p = prepare(&cfg, &w).expect("prepares");
        let k80 = p.cfg.resolve_gpu_type("K80").expect("added");
        assert!(p.nodes.iter().any(|n| n.gpu_type == Some(k80)));
        // Everything else of the site's catalog is as it was.
        assert_eq!(p.cfg.classes, cfg.classes);
        assert_eq!(p.cfg.policy, cfg.policy);
        assert_eq!(&p.cfg.gpu_types[..cfg.gpu_types.len()], &cfg.gpu_types[..]);
    }
}
