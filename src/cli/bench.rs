//! `heshare bench`: decision latency for one job against a cluster the size of the Alibaba
//! openb cluster (6212 GPUs), partly occupied by sharing and exclusive jobs. The figure that
//! matters is the plugin's own: `slurm::request::decide_with` on a live snapshot, which is what
//! job_submit runs while slurmctld holds its locks. `policy::place` on the full view (what the
//! simulator's heshare-whole-view runs) and on one idle GPU per type are shown beside it.
//!
//! Absolute times depend on the machine, so every figure is also given as a ratio to a baseline
//! measured in the same run on the same view: a best-fit scan (the GPU with the least free share
//! that still fits the job, as Slurm's gres/mps best-fit picks), the least work a sharing-aware
//! scheduler does per job.

use super::ConfigArg;
use crate::cluster::{Node, OPENB_GPU_NODES, idle_view, parse_node_list};
use crate::config::Config;
use crate::model::{JobKind, full_speed_share};
use crate::policy::{ClusterView, JobRequest, PlacedJob, ShareRequest, place};
use crate::sim::rng::SplitMix;
use crate::slurm::request::{Live, Options, Site, Submission, decide_with, parse_tres_per_node};
use crate::slurm::snapshot::{Holding, NodeInfo, Snapshot};
use crate::units::SharePct;
use anyhow::Result;
use std::hint::black_box;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Node list in the openb CSV form [default: the bundled openb GPU node list].
    #[arg(long, value_name = "FILE")]
    cluster: Option<PathBuf>,
    /// Decisions to time.
    #[arg(long, default_value_t = 2000)]
    decisions: usize,
    /// Fraction of GPUs that already run jobs.
    #[arg(long, default_value_t = 0.6)]
    occupancy: f64,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Keys in the (generated) profile store the unlabelled jobs are looked up in.
    #[arg(long, default_value_t = 100_000)]
    profiles: usize,
    /// Time the node helper instead: this many Prolog+Epilog pairs of the `heshare` binary on the
    /// model backend (bundled catalog, state in a temporary directory), against starting the
    /// same binary for `--version`.
    #[arg(long, value_name = "ROUNDS")]
    node_helper: Option<usize>,
    /// Also write the decision timings as JSON (`scripts/doc-tables.py bench` makes the docs' table
    /// from one or more such files).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// One timed path, in microseconds.
#[derive(serde::Serialize)]
struct TimedRow {
    name: &'static str,
    p50_us: f64,
    p99_us: f64,
    mean_us: f64,
}

/// Fills `view` to `occupancy`: a third of the busy GPUs hold one exclusive training job, the
/// rest one to three inference jobs of one user at their full-speed shares.
fn occupy(cfg: &Config, view: &mut ClusterView, occupancy: f64, rng: &mut SplitMix) {
    let training = cfg.classes_of(JobKind::Training);
    let inference = cfg.classes_of(JobKind::Inference);
    let reference = &cfg.gpu_types[cfg.reference_gpu];
    for slot in &mut view.gpus {
        if rng.unit() >= occupancy {
            continue;
        }
        let user: std::sync::Arc<str> = format!("user{}", rng.below(50)).into();
        if rng.unit() < 1.0 / 3.0 || inference.is_empty() {
            let class = training[rng.below(training.len())];
            slot.jobs.push(PlacedJob {
                class,
                share: SharePct::FULL,
                user,
                exclusive: true,
            });
            continue;
        }
        let gpu = &cfg.gpu_types[slot.gpu_type];
        let mut used = 0u32;
        for _ in 0..=rng.below(3) {
            let class = inference[rng.below(inference.len())];
            let share = full_speed_share(
                &cfg.classes[class],
                gpu,
                reference,
                cfg.policy.mps_share_step_pct,
            );
            if used + u32::from(share.get()) > 100 {
                break;
            }
            used += u32::from(share.get());
            slot.jobs.push(PlacedJob {
                class,
                share,
                user: user.clone(),
                exclusive: false,
            });
        }
    }
}

/// The plugin's snapshot of `view`: each node carrying its type as a feature, each busy GPU
/// freeing at a random time within two days.
fn snapshot_of(cfg: &Config, nodes: &[Node], view: &ClusterView, rng: &mut SplitMix) -> Snapshot {
    let infos: Vec<NodeInfo> = nodes
        .iter()
        .filter_map(|n| {
            let t = n.gpu_type?;
            Some(NodeInfo {
                name: n.name.as_str().into(),
                features: vec![cfg.gpu_types[t].name.clone()],
                gpus: (0..n.gpus).map(|i| (i, t)).collect(),
                cpus: u32::try_from(n.cpu_milli / 1000).unwrap_or(u32::MAX),
                memory_mib: n.memory_mib,
                power: crate::policy::SlotPower::Up,
            })
        })
        .collect();
    let index: std::collections::HashMap<&str, usize> = infos
        .iter()
        .enumerate()
        .map(|(i, n)| (&*n.name, i))
        .collect();
    let mut holdings = Vec::new();
    for g in &view.gpus {
        let frees = 60.0 + rng.unit() * 172_800.0;
        for j in &g.jobs {
            holdings.push(Holding {
                node: index[&*g.node],
                gpu_index: g.index,
                job: j.clone(),
                frees_in_s: frees,
                hold_s: frees * 2.0,
            });
        }
    }
    Snapshot::build(cfg, 1.0e9, &infos, &holdings, &[])
}

/// A profile store of `n` keys, each a script of a catalog class with four runs on each of two
/// types (generated data: the model's runtime and power with 10% noise).
fn synthetic_book(cfg: &Config, n: usize, rng: &mut SplitMix) -> crate::profile::Book {
    use crate::profile::{Book, Identity, Observation, Outcome, Sample, keys};
    let reference = &cfg.gpu_types[cfg.reference_gpu];
    let mut book = Book::default();
    let limits = crate::profile::LearnLimits { max_samples: 32 };
    for i in 0..n {
        let class = &cfg.classes[rng.below(cfg.classes.len())];
        let share = class.kind == JobKind::Inference;
        let script = format!("#!/bin/sh\npython job_{i}.py\n");
        let uid = u32::try_from(i % 5000).unwrap_or(0);
        let k = keys(&Identity {
            uid,
            account: "",
            name: Some("job"),
            script: Some(&script),
            command: None,
            request: if share { "mps:30" } else { "gpu:1" },
        });
        for _ in 0..2 {
            let t = rng.below(cfg.gpu_types.len());
            let gpu = &cfg.gpu_types[t];
            for r in 0..4 {
                let noise = 0.9 + 0.2 * rng.unit();
                book.learn(
                    &Observation {
                        // The script key only: the name and request keys are shared by many.
                        keys: k[..1].to_vec(),
                        uid,
                        account: String::new(),
                        gpu_type: gpu.name.clone(),
                        outcome: Outcome::Completed,
                        energy_valid: true,
                        time_limit_s: None,
                        sample: Sample {
                            id: format!("b:{i}:{t}:{r}"),
                            end_s: f64::from(r),
                            runtime_s: crate::model::alone_runtime(class, gpu, reference).0 * noise,
                            share_pct: share.then_some(50),
                            gpus: 1,
                            stretch: 1.0,
                            dyn_frac: Some(class.power_util * noise),
                            busy: Some(crate::model::need(class, gpu, reference).min(0.5) * noise),
                            memory_gib: Some(class.memory_gib),
                            // A shared run measured its neighbours: the derivation weighs them.
                            neighbour_busy: share.then_some(0.3),
                            alone: !share,
                        },
                    },
                    limits,
                );
            }
        }
    }
    book
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    crate::report::percentile(sorted, p).unwrap_or(Duration::ZERO)
}

/// The GPU with the least free share that still fits `want` percent.
fn best_fit(view: &ClusterView, want: u32) -> Option<usize> {
    view.gpus
        .iter()
        .enumerate()
        .filter_map(|(i, g)| {
            let free = if g.jobs.iter().any(|j| j.exclusive) {
                0
            } else {
                100 - g
                    .jobs
                    .iter()
                    .map(|j| u32::from(j.share.get()))
                    .sum::<u32>()
                    .min(100)
            };
            (free >= want).then_some((free, i))
        })
        .min()
        .map(|(_, i)| i)
}

pub fn run(out: &mut impl Write, cfg: &Config, args: &BenchArgs) -> Result<()> {
    if let Some(rounds) = args.node_helper {
        return node_helper(out, rounds.max(1), args.json.as_deref());
    }
    let (text, label) = super::read_or_bundled(
        args.cluster.as_deref(),
        OPENB_GPU_NODES,
        "bundled openb GPU node list",
    )?;
    let nodes = parse_node_list(&text, Path::new(&label), cfg)?;
    let mut view = idle_view(&nodes);
    let mut rng = SplitMix::new(args.seed);
    occupy(cfg, &mut view, args.occupancy.clamp(0.0, 1.0), &mut rng);
    let busy = view.gpus.iter().filter(|g| !g.jobs.is_empty()).count();

    let requests: Vec<JobRequest> = (0..args.decisions.max(1))
        .map(|_| {
            let class = &cfg.classes[rng.below(cfg.classes.len())];
            let share = if class.kind == JobKind::Inference {
                ShareRequest::Auto
            } else {
                ShareRequest::Exclusive
            };
            JobRequest {
                share,
                user: format!("user{}", rng.below(50)),
                ..JobRequest::new(&class.name)
            }
        })
        .collect();

    let time = |f: &mut dyn FnMut(&JobRequest)| -> Vec<Duration> {
        let mut v: Vec<Duration> = requests
            .iter()
            .map(|r| {
                let t = Instant::now();
                f(r);
                t.elapsed()
            })
            .collect();
        v.sort_unstable();
        v
    };
    // Warm caches and the allocator before measuring.
    for r in requests.iter().take(20) {
        black_box(place(cfg, &view, r).ok());
    }
    let mut failures = 0usize;
    let heshare = time(&mut |r| {
        if place(cfg, black_box(&view), r).is_err() {
            failures += 1;
        }
    });
    let reference = &cfg.gpu_types[cfg.reference_gpu];
    let baseline = time(&mut |r| {
        let want = match (r.share, cfg.class(&r.class)) {
            (ShareRequest::Auto, Some(c)) => u32::from(
                full_speed_share(c, reference, reference, cfg.policy.mps_share_step_pct).get(),
            ),
            _ => 100,
        };
        black_box(best_fit(black_box(&view), want));
    });
    let type_view = ClusterView::idle_types(cfg);
    let by_type = time(&mut |r| {
        black_box(place(cfg, black_box(&type_view), r).ok());
    });
    // The plugin's path: a snapshot of the same cluster (each busy GPU frees within two days),
    // and job_submit's decision on it, with the sharing plans kept between submissions.
    let snapshot = snapshot_of(cfg, &nodes, &view, &mut rng);
    let site = Site {
        present: crate::config::slurm_gpu_types_of(&nodes, cfg),
        feature_types: snapshot.feature_types.clone(),
    };
    let live = Live {
        snapshot: Some(&snapshot),
        now_s: snapshot.taken_at_s,
        max_age_s: cfg.live.snapshot_max_age_s,
    };
    let mut ctx = crate::policy::PlaceContext::default();
    let gres = parse_tres_per_node(Some("gres:gpu:1")).ok().flatten();
    let plugin = time(&mut |r| {
        let opts = Options {
            gpu_share: (r.share == ShareRequest::Auto).then(|| "auto".to_owned()),
            gpu_class: Some(r.class.clone()),
            energy_policy: None,
        };
        let sub = Submission {
            time_limit_s: Some(4.0 * 3600.0),
            ..Submission::new(gres.as_ref(), &opts, &r.user)
        };
        black_box(decide_with(cfg, &site, live, black_box(&sub), &mut ctx));
    });

    // The same plugin path for jobs nobody labelled, each a run of a script with a profile in a
    // generated store of `--profiles` keys: its keys made from its script, looked up, derived,
    // decided. The store is generated (the catalog's classes with noise), not measured.
    let book = synthetic_book(cfg, args.profiles.max(1), &mut rng);
    let bytes = serde_json::to_vec(&crate::profile::store::StoreFile {
        book: book.clone(),
        ..crate::profile::store::StoreFile::new()
    })?;
    let t = Instant::now();
    let parsed = crate::profile::store::parse(&bytes, Path::new("bench"))?;
    let parse_ms = t.elapsed().as_secs_f64() * 1e3;
    black_box(parsed);
    let mut hits = 0usize;
    let mut k = 0usize;
    let plugin_profiled = time(&mut |r| {
        k += 1;
        let key_of = (k * 7919) % args.profiles.max(1);
        let script = format!("#!/bin/sh\npython job_{key_of}.py\n");
        let share = r.share == ShareRequest::Auto;
        let ask = parse_tres_per_node(Some(if share { "gres:mps:30" } else { "gres:gpu:1" }))
            .ok()
            .flatten();
        let keys = crate::profile::keys(&crate::profile::Identity {
            uid: u32::try_from(key_of % 5000).unwrap_or(0),
            account: "",
            name: Some("job"),
            script: Some(&script),
            command: None,
            request: &ask.as_ref().map(|a| a.request_string()).unwrap_or_default(),
        });
        let learned = crate::profile::lookup(
            cfg,
            &book,
            &keys,
            crate::profile::Asked { label: None, share },
            0.0,
            cfg.profiles.derive_settings(),
        );
        hits += usize::from(learned.is_some());
        let opts = Options::default();
        let sub = Submission {
            time_limit_s: Some(4.0 * 3600.0),
            learned: learned.as_ref(),
            ..Submission::new(ask.as_ref(), &opts, &r.user)
        };
        black_box(decide_with(cfg, &site, live, black_box(&sub), &mut ctx));
    });

    let us = |d: Duration| d.as_secs_f64() * 1e6;
    writeln!(
        out,
        "cluster: {label}: {} nodes, {} GPUs, {busy} busy ({:.0}%), seed {}",
        nodes.len(),
        view.gpus.len(),
        100.0 * busy as f64 / view.gpus.len().max(1) as f64,
        args.seed
    )?;
    writeln!(
        out,
        "decisions timed: {} ({} found no feasible GPU)",
        requests.len(),
        failures
    )?;
    writeln!(
        out,
        "{:<34} {:>12} {:>12} {:>12}",
        "", "p50 (us)", "p99 (us)", "mean (us)"
    )?;
    let mean = |v: &[Duration]| v.iter().map(|d| us(*d)).sum::<f64>() / v.len().max(1) as f64;
    let row = |out: &mut dyn Write, name: &str, v: &[Duration]| {
        writeln!(
            out,
            "{name:<34} {:>12.1} {:>12.1} {:>12.1}",
            us(percentile(v, 0.5)),
            us(percentile(v, 0.99)),
            mean(v)
        )
    };
    let paths: [(&'static str, &[Duration]); 5] = [
        ("plugin job_submit (live snapshot)", &plugin),
        ("  unlabelled, by profile (store)", &plugin_profiled),
        ("heshare place (full view)", &heshare),
        ("heshare place (one idle GPU/type)", &by_type),
        ("baseline: best-fit scan", &baseline),
    ];
    for (name, v) in paths {
        row(out, name, v)?;
    }
    if let Some(path) = &args.json {
        let rows: Vec<TimedRow> = paths
            .iter()
            .map(|&(name, v)| TimedRow {
                name: name.trim(),
                p50_us: us(percentile(v, 0.5)),
                p99_us: us(percentile(v, 0.99)),
                mean_us: mean(v),
            })
            .collect();
        let doc = serde_json::json!({
            "cluster": label,
            "gpus": view.gpus.len(),
            "busy_gpus": busy,
            "decisions": requests.len(),
            "profile_keys": args.profiles.max(1),
            "store_mb": bytes.len() as f64 / 1e6,
            "store_parse_ms": parse_ms,
            "rows": rows,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?)
            .map_err(|e| anyhow::anyhow!("{}: cannot write: {e}", path.display()))?;
    }
    let ratio = |a: &[Duration], b: &[Duration], p: f64| {
        us(percentile(a, p)) / us(percentile(b, p)).max(1e-3)
    };
    writeln!(
        out,
        "ratio plugin job_submit / best-fit scan: p50 {:.1}x, p99 {:.1}x",
        ratio(&plugin, &baseline, 0.5),
        ratio(&plugin, &baseline, 0.99)
    )?;
    writeln!(
        out,
        "profile store: {} keys (generated: the catalog's classes with noise), {:.1} MB as written, parsed in {parse_ms:.0} ms (the plugin's thread does it when the file changes); {hits} of {} lookups found a profile",
        args.profiles.max(1),
        bytes.len() as f64 / 1e6,
        requests.len()
    )?;
    writeln!(
        out,
        "ratio profiled job_submit / best-fit scan: p50 {:.1}x, p99 {:.1}x",
        ratio(&plugin_profiled, &baseline, 0.5),
        ratio(&plugin_profiled, &baseline, 0.99)
    )?;
    writeln!(
        out,
        "ratio full view / best-fit scan: p50 {:.1}x, p99 {:.1}x",
        ratio(&heshare, &baseline, 0.5),
        ratio(&heshare, &baseline, 0.99)
    )?;
    Ok(())
}

/// Wall time of `heshare prolog` and `heshare epilog` as slurmd runs them: a process per hook,
/// on a GPU that already holds three sharing jobs, so each run re-optimises a set of four.
fn node_helper(out: &mut impl Write, rounds: usize, json: Option<&Path>) -> Result<()> {
    use anyhow::Context;
    use std::process::Command;
    let exe = std::env::current_exe().context("cannot find the heshare binary")?;
    let dir = std::env::temp_dir().join(format!("heshare-bench-node-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let d = dir.display();
    let config = dir.join("heshare.toml");
    std::fs::write(
        &config,
        format!(
            "{}\n[node]\nbackend = \"model\"\nstate_dir = \"{d}/state\"\naccounting_log = \"{d}/accounting.jsonl\"\nmps_control = \"{d}/none\"\nmps_pipe_dir = \"{d}/mps\"\nmps_log_dir = \"{d}/mpslog\"\n",
            super::BUNDLED_CONFIG
        ),
    )?;
    let hook = |what: &str, id: usize, class: &str| -> Result<Duration> {
        let t = Instant::now();
        let o = Command::new(&exe)
            .arg(what)
            .env("HESHARE_CONFIG", &config)
            .env("SLURM_JOB_ID", id.to_string())
            .env("SLURM_JOB_USER", "bench")
            .env("SLURM_JOB_UID", "1000")
            .env("SLURMD_NODENAME", "bench")
            .env("SLURM_JOB_GPUS", "0")
            .env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "25")
            .env("SPANK_HESHARE_CLASS", class)
            .env("SPANK_HESHARE_GPU_TYPE", "a100")
            .output()?;
        let took = t.elapsed();
        anyhow::ensure!(
            o.status.success(),
            "{what} failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        Ok(took)
    };
    let result = (|| -> Result<(Vec<Duration>, Vec<Duration>, Vec<Duration>)> {
        for (i, class) in ["llm-infer", "whisper-infer", "sd-infer"]
            .iter()
            .enumerate()
        {
            hook("prolog", 1_000_000 + i, class)?;
        }
        let (mut pro, mut epi, mut base) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..rounds {
            let t = Instant::now();
            let o = Command::new(&exe).arg("--version").output()?;
            anyhow::ensure!(o.status.success(), "heshare --version failed");
            base.push(t.elapsed());
            pro.push(hook("prolog", i, "vit-infer")?);
            epi.push(hook("epilog", i, "vit-infer")?);
        }
        for v in [&mut pro, &mut epi, &mut base] {
            v.sort_unstable();
        }
        Ok((pro, epi, base))
    })();
    let _ = std::fs::remove_dir_all(&dir);
    let (pro, epi, base) = result?;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    writeln!(
        out,
        "node helper, model backend, {rounds} Prolog+Epilog pairs on a GPU shared by 4 jobs"
    )?;
    writeln!(
        out,
        "{:<34} {:>10} {:>10} {:>10}",
        "", "p50 (ms)", "p99 (ms)", "max (ms)"
    )?;
    let paths: [(&'static str, &[Duration]); 3] = [
        ("heshare prolog", &pro),
        ("heshare epilog", &epi),
        ("baseline: heshare --version", &base),
    ];
    for (name, v) in paths {
        writeln!(
            out,
            "{name:<34} {:>10.2} {:>10.2} {:>10.2}",
            ms(percentile(v, 0.5)),
            ms(percentile(v, 0.99)),
            ms(*v.last().unwrap_or(&Duration::ZERO))
        )?;
    }
    if let Some(path) = json {
        let rows: Vec<TimedRow> = paths
            .iter()
            .map(|&(name, v)| TimedRow {
                name,
                p50_us: ms(percentile(v, 0.5)) * 1e3,
                p99_us: ms(percentile(v, 0.99)) * 1e3,
                mean_us: v.iter().map(|d| d.as_secs_f64() * 1e6).sum::<f64>()
                    / v.len().max(1) as f64,
            })
            .collect();
        let doc = serde_json::json!({ "node_helper_rounds": rounds, "rows": rows });
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?)
            .map_err(|e| anyhow::anyhow!("{}: cannot write: {e}", path.display()))?;
    }
    let r = |v: &[Duration]| ms(percentile(v, 0.5)) / ms(percentile(&base, 0.5)).max(1e-6);
    writeln!(
        out,
        "ratio to starting the binary (p50): prolog {:.2}x, epilog {:.2}x",
        r(&pro),
        r(&epi)
    )?;
    Ok(())
}
