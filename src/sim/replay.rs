//! A site's jobs replayed as its accounting recorded them (`sacct`): each row one run,
//! submitted when it was, asking what it asked (typed or not, whole GPUs or an MPS share), with
//! the time limit it had, and as much work as its recorded runtime on the GPU type it ran on.
//!
//! What accounting does not record (what the job is, hence its speed on the other types, its
//! power and its clock sensitivity) is drawn once per recurring job, the runs one user submits
//! from one account under one job name (what heshare's profile keys recognise), as
//! `engine::generate_jobs` draws a template's. Rows no node of the cluster can hold are not
//! queued to wait forever: they are left out and named.

use super::engine::SimJob;
use super::rng::SplitMix;
use super::trace::TraceJob;
use super::world::World;
use crate::cluster::Node;
use crate::config::Config;
use crate::model::JobKind;
use std::collections::HashMap;

/// How a replay departs from the record, only where the user asks (`--load`, `--jobs`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scaling {
    /// Each submission's time from the trace start is multiplied by this (below 1: the same
    /// jobs arrive closer together, offering more load).
    pub time: f64,
    /// Only the first this many jobs of the record (by submission).
    pub first: Option<usize>,
}

impl Scaling {
    pub const AS_RECORDED: Scaling = Scaling {
        time: 1.0,
        first: None,
    };
}

/// A row the replay leaves out, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct LeftOut {
    pub id: String,
    pub why: String,
}

/// The jobs of a replay as recorded.
#[derive(Debug, Clone)]
pub struct Replay {
    pub jobs: Vec<SimJob>,
    /// When each job started in the record (seconds from the trace start), as `jobs`.
    pub recorded_start_s: Vec<f64>,
    /// Each job's JobID in the record, as `jobs`.
    pub ids: Vec<String>,
    pub left_out: Vec<LeftOut>,
    /// Jobs whose record names neither the GPU type nor a node of the cluster it ran on: their
    /// work is set against the slowest type their request allows.
    pub type_unknown: usize,
}

/// How many GPU types the cluster has.
fn present(per_node: &[u32]) -> usize {
    per_node.iter().filter(|&&n| n > 0).count()
}

/// The trace's jobs as recorded on `nodes`, what is not recorded drawn from `seed`.
pub fn recorded_jobs(
    cfg: &Config,
    world: &World,
    trace: &[TraceJob],
    nodes: &[Node],
    seed: u64,
    scaling: Scaling,
) -> Replay {
    let mut truths = SplitMix::new(seed ^ 0x0745_70F3_041D);
    let mut draws = SplitMix::new(seed ^ 0x005E_ED0F_70B5);
    let training = cfg.classes_of(JobKind::Training);
    let inference = cfg.classes_of(JobKind::Inference);
    // The most GPUs of each type one node has.
    let mut per_node = vec![0u32; cfg.gpu_types.len()];
    // The types some node of which takes MPS shares.
    let mut mps = vec![false; cfg.gpu_types.len()];
    for n in nodes {
        if let Some(t) = n.gpu_type {
            per_node[t] = per_node[t].max(n.gpus);
            mps[t] |= n.mps;
        }
    }
    let node_type: HashMap<&str, usize> = nodes
        .iter()
        .filter_map(|n| Some((n.name.as_str(), n.gpu_type?)))
        .collect();
    let mut rows: Vec<&TraceJob> = trace.iter().filter(|j| j.num_gpus > 0).collect();
    rows.sort_by(|a, b| a.submit_s.total_cmp(&b.submit_s));
    let mut users: HashMap<&str, u32> = HashMap::new();
    // Per recurring job (user, account, name): its index, class, truth and runs so far.
    type Recurring = (usize, usize, super::world::JobTruth, usize);
    let mut templates: HashMap<(&str, &str, &str), Recurring> = HashMap::new();
    let mut out = Replay {
        jobs: Vec::new(),
        recorded_start_s: Vec::new(),
        ids: Vec::new(),
        left_out: Vec::new(),
        type_unknown: 0,
    };
    for row in rows {
        if scaling.first.is_some_and(|n| out.jobs.len() >= n) {
            break;
        }
        let share = row.gpu_milli < 1000;
        let allowed: Vec<usize> = (0..cfg.gpu_types.len())
            .filter(|t| row.gpu_types.is_empty() || row.gpu_types.contains(t))
            .filter(|&t| per_node[t] > 0 && (!share || mps[t]))
            .collect();
        // Slurm runs an untyped gres/mps share only where nodes have gres/mps: where some type
        // has none, the share is held to the types that do, as Slurm would hold it.
        let held;
        let src = if share && row.gpu_types.is_empty() && allowed.len() < present(&per_node) {
            held = TraceJob {
                gpu_types: allowed.clone(),
                ..row.clone()
            };
            &held
        } else {
            row
        };
        if !allowed.iter().any(|&t| per_node[t] >= src.num_gpus) {
            let most = allowed.iter().map(|&t| per_node[t]).max().unwrap_or(0);
            out.left_out.push(LeftOut {
                id: src.id.clone(),
                why: if allowed.is_empty() {
                    if share {
                        "no node of a type it allows takes MPS shares (gres/mps)".to_owned()
                    } else {
                        "no node has a GPU type it allows".to_owned()
                    }
                } else {
                    format!(
                        "it asks {} GPUs on one node; the cluster's nodes of the types it allows have at most {most}",
                        src.num_gpus
                    )
                },
            });
            continue;
        }
        let rec = src.recorded.clone().unwrap_or_default();
        let next_user = u32::try_from(users.len()).unwrap_or(u32::MAX);
        let user = *users.entry(row.user.as_str()).or_insert(next_user);
        let fraction = f64::from(src.gpu_milli) / 1000.0;
        let next = templates.len();
        let key = (
            row.user.as_str(),
            row.recorded.as_ref().map_or("", |r| r.account.as_str()),
            row.recorded.as_ref().map_or("", |r| r.name.as_str()),
        );
        let entry = templates.entry(key).or_insert_with(|| {
            let named = src
                .class
                .as_deref()
                .and_then(|n| cfg.classes.iter().position(|c| c.name == n));
            let class = match named {
                Some(c) => c,
                // A share is a service: the one whose demand is nearest its share.
                None if src.gpu_milli < 1000 && !inference.is_empty() => *inference
                    .iter()
                    .min_by(|&&a, &&b| {
                        (cfg.classes[a].demand - fraction)
                            .abs()
                            .total_cmp(&(cfg.classes[b].demand - fraction).abs())
                    })
                    .unwrap_or(&inference[0]),
                None if !training.is_empty() => training[draws.below(training.len())],
                None => 0,
            };
            let truth = world.draw(class, fraction.min(1.0), &mut truths);
            (next, class, truth, 0)
        });
        entry.3 += 1;
        let (template, class, truth, run) = *entry;
        let ran_on = rec
            .ran_on
            .or_else(|| {
                rec.first_node
                    .as_deref()
                    .and_then(|n| node_type.get(n).copied())
            })
            .filter(|t| allowed.contains(t));
        let slowest = |on: &[usize]| {
            on.iter().copied().min_by(|&a, &b| {
                world
                    .alone_rate(class, &truth, a)
                    .total_cmp(&world.alone_rate(class, &truth, b))
            })
        };
        let on = match ran_on {
            Some(t) => t,
            None => {
                out.type_unknown += 1;
                slowest(&allowed).unwrap_or(cfg.reference_gpu)
            }
        };
        let runtime = src.duration_s.max(1.0);
        let work_s = runtime * world.alone_rate(class, &truth, on).max(1e-12);
        // A limit the recorded run finished within held on its type; without one, an hour
        // above the slowest allowed type's run, as `generate_jobs` writes limits.
        let slowest_run = allowed
            .iter()
            .map(|&t| work_s / world.alone_rate(class, &truth, t).max(1e-12))
            .fold(runtime, f64::max);
        let limit_s = rec.limit_s.map_or_else(
            || (slowest_run / 3600.0).ceil().max(1.0) * 3600.0,
            |l| l.max(runtime),
        );
        out.recorded_start_s.push(rec.start_s);
        out.ids.push(row.id.clone());
        out.jobs.push(SimJob::new(
            class,
            (template, run),
            None,
            src,
            user,
            src.submit_s * scaling.time,
            work_s,
            limit_s,
            truth,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BUNDLED_CONFIG;
    use crate::sim::trace::{TraceFormat, parse};
    use std::path::Path;

    fn cfg() -> Config {
        Config::parse(BUNDLED_CONFIG, Path::new("heshare.toml")).expect("bundled config")
    }

    const SACCT: &str = "\
JobID|Submit|Start|End|AllocTRES|User|Timelimit|Account|JobName|ReqTRES|NodeList
10|2026-03-01T10:00:00|2026-03-01T10:00:05|2026-03-01T11:00:05|cpu=8,gres/gpu:a100=1,gres/gpu=1|ann|02:00:00|ml|train|cpu=8,gres/gpu=1|a01
11|2026-03-01T10:10:00|2026-03-01T10:10:00|2026-03-01T10:40:00|cpu=8,gres/gpu=1|ann|02:00:00|ml|train|cpu=8,gres/gpu=1|t01
12|2026-03-01T10:20:00|2026-03-01T10:21:00|2026-03-01T10:51:00|cpu=4,gres/mps=25|bob|1-00:00:00|ml|serve|cpu=4,gres/mps=25|t01
13|2026-03-01T10:30:00|2026-03-01T10:31:00|2026-03-01T12:31:00|cpu=32,gres/gpu:a100=8,gres/gpu=8|bob|UNLIMITED|ml|big|cpu=32,gres/gpu:a100=8|a01
14|2026-03-01T10:40:00|Unknown|Unknown|cpu=8,gres/gpu=1|ann|02:00:00|ml|train|cpu=8,gres/gpu=1|None assigned
";

    fn nodes(cfg: &Config) -> Vec<Node> {
        crate::cluster::slurm::parse_slurm_nodes(
            "NodeName=a01 CPUs=64 Gres=gpu:a100:4\nNodeName=t01 CPUs=32 Gres=gpu:t4:4,mps:400\n",
            Path::new("slurm.conf"),
            None,
            cfg,
        )
        .expect("nodes")
    }

    /// Every row that ran is one job at its own submission, with its limit and its runtime on
    /// the type it ran on; a user's job name recurs as one template; what fits no node is named.
    #[test]
    fn rows_replay_as_they_ran() {
        let cfg = cfg();
        let world = World::new(&cfg);
        let trace = parse(SACCT, TraceFormat::Sacct, Path::new("sacct.txt"), &cfg).expect("parses");
        assert_eq!(trace.len(), 4, "the row that never ran is not a job");
        let r = recorded_jobs(&cfg, &world, &trace, &nodes(&cfg), 42, Scaling::AS_RECORDED);
        assert_eq!(r.type_unknown, 0);
        assert_eq!(r.left_out.len(), 1);
        assert_eq!(r.left_out[0].id, "13");
        assert!(r.left_out[0].why.contains("at most 4"), "{:?}", r.left_out);
        let submits: Vec<f64> = r.jobs.iter().map(|j| j.submit_s).collect();
        assert_eq!(submits, [0.0, 600.0, 1200.0]);
        let (a100, t4) = (
            cfg.gpu_type("a100").expect("a100"),
            cfg.gpu_type("t4").expect("t4"),
        );
        // 10 ran an hour on an A100 (AllocTRES typed it), 11 half an hour on t01's T4s: one
        // template, two runs of one truth.
        let runtime = |j: &SimJob, t: usize| j.work_s / world.alone_rate(j.class, &j.truth, t);
        assert!((runtime(&r.jobs[0], a100) - 3600.0).abs() < 1e-6);
        assert!((runtime(&r.jobs[1], t4) - 1800.0).abs() < 1e-6);
        assert_eq!((r.jobs[0].template, r.jobs[0].run), (r.jobs[1].template, 1));
        assert_eq!(r.jobs[1].run, 2);
        assert_eq!(r.jobs[0].class, r.jobs[1].class);
        assert!(r.jobs[0].gpu_types.is_empty(), "asked untyped (ReqTRES)");
        assert_eq!((r.jobs[0].limit_s, r.jobs[2].limit_s), (7200.0, 86_400.0));
        // 12 is bob's 25% MPS share: a service, its own template and user, held to the type
        // whose nodes take MPS shares, as Slurm holds an untyped gres/mps.
        assert_eq!((r.jobs[2].num_gpus, r.jobs[2].gpu_milli), (1, 250));
        assert_eq!(r.jobs[2].gpu_types, vec![t4]);
        assert_eq!(world.kind(r.jobs[2].class), JobKind::Inference);
        assert_ne!(r.jobs[2].template, r.jobs[0].template);
        assert_ne!(r.jobs[2].user, r.jobs[0].user);
        let skipped = crate::sim::trace::sacct_unreplayable(SACCT);
        assert_eq!(skipped, vec![(6, "14".to_owned(), "never started")]);
    }

    /// On an uncongested site, plain Slurm replaying the record starts every job when the
    /// record says it started, give or take the scheduler's granularity: the replay is the
    /// site's own week, not another workload. (The example's jobs started within 3 s of their
    /// submission, on nodes that were up: power saving off here.)
    #[test]
    fn plain_slurm_replays_the_recorded_starts_of_an_uncongested_week() {
        use crate::sim::meter::{HostSpec, PowerSaving};
        use crate::sim::packing::{Pod, TypicalPods};
        let cfg = cfg();
        let world = World::new(&cfg);
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/site-example");
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).expect("example");
        let nodes =
            crate::cluster::parse_cluster(&read("slurm.conf"), Path::new("slurm.conf"), None, &cfg)
                .expect("example cluster");
        let trace = parse(
            &read("sacct.txt"),
            TraceFormat::Sacct,
            Path::new("sacct.txt"),
            &cfg,
        )
        .expect("example trace");
        let r = recorded_jobs(&cfg, &world, &trace, &nodes, 42, Scaling::AS_RECORDED);
        assert_eq!(r.jobs.len(), 300);
        let recorded = r.recorded_start_s.clone();
        let pods: Vec<Pod> = trace.iter().map(Pod::from_trace).collect();
        let typical = TypicalPods::from_pods(&pods);
        let mut st = crate::sim::engine::build_state(&cfg, &nodes, r.jobs);
        let saving = PowerSaving {
            suspend_time_s: None,
            ..PowerSaving::default()
        };
        let fac = crate::sim::engine::facility_of(&st, HostSpec::Sourced, saving);
        let mut sched = crate::sim::schedulers::by_name("slurm-mps", &st, &typical, &world)
            .expect("plain Slurm");
        let m = crate::sim::engine::run(&mut st, &world, sched.as_mut(), fac, |_| {});
        let mut worst: f64 = 0.0;
        for (o, (out, rec)) in m.by_job.iter().zip(&recorded).enumerate() {
            let start = out
                .start_s
                .unwrap_or_else(|| panic!("job {o} never started"));
            worst = worst.max((start - rec).abs());
        }
        // Slurm's backfill runs every bf_interval (30 s by default): a start within one of the
        // record's is the same start.
        assert!(worst <= 30.0, "a start {worst:.0} s off the record");
    }
}
