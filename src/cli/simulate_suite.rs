//! `heshare simulate --suite [--quick]`: every world of `sim::suite` through every policy, and
//! one table of heshare (learned, labelled, oracle) against the best baseline per world, with
//! the worst world and the geometric mean over worlds.

use super::simulate::SimulateArgs;
use crate::config::Config;
use crate::sim::experiment;
use crate::sim::suite::{self, Size, Summary, WorldResult};
use anyhow::{Context, Result, anyhow, bail};
use serde::Serialize;
use std::io::Write;

#[derive(Serialize)]
struct Output<'a> {
    suite_version: u32,
    quick: bool,
    seeds: u64,
    wall_s: f64,
    worlds: &'a [WorldResult],
    summary: &'a [Summary],
}

pub fn run(out: &mut impl Write, cfg: &Config, args: &SimulateArgs) -> Result<()> {
    let one_world = [
        ("--trace", args.trace.is_some()),
        ("--cluster", args.cluster.is_some()),
        ("--gres-conf", args.gres_conf.is_some()),
        ("--scale", args.scale.is_some()),
        ("--load", args.load.is_some()),
        ("--slurm-conf", args.slurm_conf.is_some()),
        ("--suspend-time", args.suspend_time.is_some()),
        ("--policies", !args.policies.is_empty()),
        ("--plot", args.plot.is_some()),
    ];
    if let Some((name, _)) = one_world.iter().find(|(_, given)| *given) {
        bail!("{name} describes one world; --suite runs its own (see `sim::suite`)");
    }
    if args.mode != super::simulate::Mode::Time {
        bail!("--suite runs in time mode only");
    }
    if args.jobs == Some(0) {
        bail!("--jobs must be at least 1");
    }
    let size = Size {
        seeds: args.seeds.unwrap_or(if args.quick { 1 } else { 3 }),
        quick: args.quick,
        jobs: args.jobs,
    };
    let all = suite::worlds();
    for name in &args.worlds {
        if !all.iter().any(|w| w.name == name) {
            bail!(
                "--worlds: unknown world \"{name}\" (known: {})",
                all.iter().map(|w| w.name).collect::<Vec<_>>().join(", ")
            );
        }
    }
    let chosen: Vec<suite::World> = all
        .into_iter()
        .filter(|w| args.worlds.is_empty() || args.worlds.iter().any(|n| n == w.name))
        .collect();
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let started = std::time::Instant::now();
    let mut results = Vec::new();
    for w in chosen {
        let t0 = std::time::Instant::now();
        let p = suite::prepare(cfg, &w).map_err(|e| anyhow!("world {}: {e}", w.name))?;
        let spec = suite::spec(&w, size, threads);
        let report = experiment::run(&p.cfg, &p.nodes, &p.trace, &spec, &|| {})
            .map_err(|e| anyhow!("world {}: {e}", w.name))?;
        let wall = t0.elapsed().as_secs_f64();
        eprintln!("world {}: {wall:.0} s", w.name);
        results.push(suite::result_of(&w, p.refused_rows, report, wall).map_err(|e| anyhow!(e))?);
    }
    let summary = suite::summarise(&results);
    let wall_s = started.elapsed().as_secs_f64();
    print(out, &results, &summary, size, wall_s, cfg)?;
    if let Some(path) = &args.json {
        let o = Output {
            suite_version: suite::VERSION,
            quick: size.quick,
            seeds: size.seeds,
            wall_s,
            worlds: &results,
            summary: &summary,
        };
        std::fs::write(path, serde_json::to_string_pretty(&o)? + "\n")
            .with_context(|| format!("{}: cannot write", path.display()))?;
    }
    Ok(())
}

fn print(
    out: &mut impl Write,
    results: &[WorldResult],
    summary: &[Summary],
    size: Size,
    wall_s: f64,
    cfg: &Config,
) -> Result<()> {
    writeln!(
        out,
        "scenario suite v{} ({}, {} seed{}): heshare against the best baseline per seed and \
         metric, median over seeds",
        suite::VERSION,
        if size.quick { "quick" } else { "full" },
        size.seeds,
        if size.seeds == 1 { "" } else { "s" }
    )?;
    if !cfg.policy.resize_asked_shares {
        writeln!(
            out,
            "explicit shares kept as asked (resize_asked_shares off); caused kills: runs killed \
             that plain Slurm (slurm-mps) never killed"
        )?;
    }
    writeln!(
        out,
        "{:<17} {:>5} {:>6}  {:<22} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7} {:>7}",
        "world",
        "GPUs",
        "jobs",
        "policy",
        "kJ/job",
        "JCT s",
        "p99 s",
        "caused",
        "energy",
        "JCT",
        "p99"
    )?;
    let yes = |b: bool| if b { "holds" } else { "does not hold" };
    for w in results {
        let b = &w.best_baseline;
        writeln!(
            out,
            "{:<17} {:>5} {:>6}  {:<22} {:>9.0} {:>9.0} {:>9.0} {:>7} {:>7} {:>7} {:>7}",
            w.world.name,
            w.gpus,
            w.jobs_per_seed,
            format!("best: {}", b.policy),
            b.energy_per_job_kj,
            b.mean_jct_s,
            b.p99_jct_s,
            "-",
            "1",
            "1",
            "1"
        )?;
        for h in &w.heshare {
            writeln!(
                out,
                "{:<17} {:>5} {:>6}  {:<22} {:>9.0} {:>9.0} {:>9.0} {:>7} {:>6.2}x {:>6.2}x {:>6.2}x",
                "",
                "",
                "",
                h.policy,
                h.energy_per_job_kj,
                h.mean_jct_s,
                h.p99_jct_s,
                h.caused_kills.map_or("-".to_owned(), |k| k.to_string()),
                h.energy_ratio,
                h.mean_jct_ratio,
                h.p99_jct_ratio
            )?;
        }
        writeln!(
            out,
            "{:<17} oracle <= labelled <= learned: energy {}, mean JCT {}; heshare {:.0} jobs/s, \
             world {:.0} s",
            "",
            yes(w.ordered_energy),
            yes(w.ordered_jct),
            w.heshare_jobs_per_s,
            w.wall_s
        )?;
        if w.refused_rows > 0 {
            writeln!(
                out,
                "{:<17} {} trace rows no node of this cluster holds (Slurm refuses them) not drawn",
                "", w.refused_rows
            )?;
        }
        if w.missing_jobs > 0 {
            writeln!(
                out,
                "{:<17} WARNING: {} jobs never started or never finished, over every run",
                "", w.missing_jobs
            )?;
        }
    }
    writeln!(
        out,
        "over {} worlds: geometric mean of the ratios (worst world)",
        results.len()
    )?;
    for s in summary {
        writeln!(
            out,
            "  {:<17} energy {:.2}x (worst {} {:.2}x), mean JCT {:.2}x (worst {} {:.2}x), p99 JCT {:.2}x",
            s.policy,
            s.energy_geomean,
            s.worst_energy.0,
            s.worst_energy.1,
            s.mean_jct_geomean,
            s.worst_mean_jct.0,
            s.worst_mean_jct.1,
            s.p99_jct_geomean
        )?;
    }
    writeln!(out, "suite wall time {wall_s:.0} s")?;
    writeln!(out, "worlds:")?;
    for w in results {
        writeln!(out, "  {}: {}", w.world.name, squeeze(w.world.about))?;
    }
    Ok(())
}

/// The world's sentence on one line (its source text is wrapped).
fn squeeze(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
