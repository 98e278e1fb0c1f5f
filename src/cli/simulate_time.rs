//! `heshare simulate --mode time`: the seven schedulers side by side on jobs drawn from a trace,
//! with energy and completion times, and heshare's ratios to the best baseline.

use super::simulate::{Mode, SimulateArgs, inputs, median};
use crate::cluster::Node;
use crate::config::Config;
use crate::sim::engine::{self, RunMetrics, WorkloadParams};
use crate::sim::packing::{Pod, TypicalPods};
use crate::sim::schedulers::{self, NAMES};
use anyhow::{Context, Result, anyhow, bail};
use serde::Serialize;
use std::io::Write;

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

#[derive(Serialize)]
struct PolicyRow {
    policy: String,
    energy_kwh: f64,
    busy_energy_kwh: f64,
    energy_power_saving_kwh: f64,
    energy_per_job_kj: f64,
    mean_jct_s: f64,
    p50_jct_s: f64,
    p99_jct_s: f64,
    makespan_s: f64,
    alloc_rate: f64,
    utilisation: f64,
    violations: usize,
    /// Simulation speed: jobs simulated per second of wall time (machine-dependent).
    sim_jobs_per_s: f64,
}

#[derive(Serialize)]
struct Output {
    mode: Mode,
    load: f64,
    seeds: Vec<u64>,
    jobs_per_seed: usize,
    gpus: usize,
    trace: String,
    cluster: String,
    results: Vec<PolicyRow>,
    energy_lower_bound_kwh: f64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    crate::report::percentile(sorted, p).unwrap_or(f64::NAN)
}

pub fn run(out: &mut impl Write, cfg: &Config, args: &SimulateArgs, load: f64) -> Result<()> {
    if !(args.scale > 0.0 && args.scale <= 1.0) {
        bail!("--scale {} is outside (0, 1]", args.scale);
    }
    if args.jobs == 0 {
        bail!("--jobs must be at least 1");
    }
    let (all_nodes, cluster_label, trace, trace_label) = inputs(cfg, args)?;
    let nodes = scale_nodes(&all_nodes, args.scale);
    let gpus: usize = nodes.iter().map(|n| n.gpus as usize).sum();
    let names: Vec<String> = if args.policies.is_empty() {
        NAMES.iter().map(|s| (*s).to_owned()).collect()
    } else {
        args.policies.clone()
    };
    for n in &names {
        if !NAMES.contains(&n.as_str()) {
            bail!(
                "unknown time-mode policy \"{n}\" (known: {})",
                NAMES.join(", ")
            );
        }
    }
    let seeds: Vec<u64> = (0..args.seeds.unwrap_or(3)).map(|s| 42 + s).collect();
    let pods: Vec<Pod> = trace.iter().map(Pod::from_trace).collect();
    let typical = TypicalPods::from_pods(&pods);

    let tasks: Vec<(usize, u64)> = names
        .iter()
        .enumerate()
        .flat_map(|(p, _)| seeds.iter().map(move |&s| (p, s)))
        .collect();
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .max(1);
    // Drawn on stderr, and only when it is a terminal.
    let bar = indicatif::ProgressBar::new((tasks.len() * args.jobs) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} jobs finished ({per_sec}, eta {eta})",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut results: Vec<(usize, u64, RunMetrics, f64)> = Vec::new();
    for chunk in tasks.chunks(threads) {
        let got: Vec<Result<(usize, u64, RunMetrics, f64)>> = std::thread::scope(|s| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|&(p, seed)| {
                    let (nodes, trace, typical, name, bar) =
                        (&nodes, &trace, &typical, &names[p], &bar);
                    s.spawn(move || -> Result<(usize, u64, RunMetrics, f64)> {
                        let wl = WorkloadParams {
                            load,
                            jobs: args.jobs,
                            max_duration_s: args.max_duration,
                            users: args.users,
                            seed,
                        };
                        let jobs = engine::generate_jobs(cfg, trace, gpus, wl);
                        let mut st = engine::build_state(cfg, nodes, jobs);
                        let mut sched =
                            schedulers::by_name(name, &st, typical).map_err(|e| anyhow!(e))?;
                        let started = std::time::Instant::now();
                        let m =
                            engine::run(&mut st, sched.as_mut(), args.suspend_time, |_| bar.inc(1));
                        Ok((p, seed, m, started.elapsed().as_secs_f64()))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .map_err(|_| anyhow!("a simulation thread panicked"))
                        .and_then(|r| r)
                })
                .collect()
        });
        for r in got {
            results.push(r?);
        }
    }

    bar.finish_and_clear();
    let mut rows = Vec::new();
    let mut bound_kwh = Vec::new();
    for (p, name) in names.iter().enumerate() {
        let runs: Vec<&RunMetrics> = results.iter().filter(|r| r.0 == p).map(|r| &r.2).collect();
        #[allow(clippy::cast_precision_loss)]
        let n = runs.len().max(1) as f64;
        let mean = |f: &dyn Fn(&RunMetrics) -> f64| runs.iter().map(|m| f(m)).sum::<f64>() / n;
        let mut jct: Vec<f64> = runs.iter().flat_map(|m| m.jct_s.iter().copied()).collect();
        jct.sort_by(f64::total_cmp);
        #[allow(clippy::cast_precision_loss)]
        let energy_j = mean(&|m| m.busy_energy_j + m.idle_energy_j);
        #[allow(clippy::cast_precision_loss)]
        rows.push(PolicyRow {
            policy: name.clone(),
            energy_kwh: energy_j / 3.6e6,
            busy_energy_kwh: mean(&|m| m.busy_energy_j) / 3.6e6,
            energy_power_saving_kwh: mean(&|m| m.busy_energy_j + m.idle_energy_power_saving_j)
                / 3.6e6,
            energy_per_job_kj: mean(&|m| {
                (m.busy_energy_j + m.idle_energy_j) / m.jobs.max(1) as f64
            }) / 1e3,
            mean_jct_s: jct.iter().sum::<f64>() / jct.len().max(1) as f64,
            p50_jct_s: percentile(&jct, 0.5),
            p99_jct_s: percentile(&jct, 0.99),
            makespan_s: mean(&|m| m.makespan_s),
            alloc_rate: mean(&|m| m.alloc_rate),
            utilisation: mean(&|m| m.utilisation),
            violations: runs.iter().map(|m| m.violations).sum(),
            sim_jobs_per_s: {
                let secs: f64 = results.iter().filter(|r| r.0 == p).map(|r| r.3).sum();
                (runs.len() * args.jobs) as f64 / secs.max(1e-9)
            },
        });
        bound_kwh.push(mean(&|m| m.energy_lower_bound_j) / 3.6e6);
    }
    let lower_bound = median(&mut bound_kwh);

    writeln!(
        out,
        "time mode: {} jobs x {} seeds from {trace_label}, on {cluster_label} scaled {:.2} ({} nodes, {gpus} GPUs), load {:.2}",
        args.jobs,
        seeds.len(),
        args.scale,
        nodes.len(),
        load
    )?;
    writeln!(
        out,
        "{:<16} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6} {:>6} {:>6} {:>10}",
        "policy",
        "kWh",
        "busy kWh",
        "kWh(sav)",
        "kJ/job",
        "mean JCT",
        "p50 JCT",
        "p99 JCT",
        "makespan",
        "alloc",
        "util",
        "viol",
        "sim jobs/s"
    )?;
    for r in &rows {
        writeln!(
            out,
            "{:<16} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>8.0}s {:>8.0}s {:>8.0}s {:>8.0}s {:>5.1}% {:>5.1}% {:>6} {:>10.0}",
            r.policy,
            r.energy_kwh,
            r.busy_energy_kwh,
            r.energy_power_saving_kwh,
            r.energy_per_job_kj,
            r.mean_jct_s,
            r.p50_jct_s,
            r.p99_jct_s,
            r.makespan_s,
            100.0 * r.alloc_rate,
            100.0 * r.utilisation,
            r.violations,
            r.sim_jobs_per_s
        )?;
    }
    writeln!(
        out,
        "energy lower bound (each job alone on its most efficient type and clock, no idle): {lower_bound:.1} kWh"
    )?;
    let baselines: Vec<&PolicyRow> = rows.iter().filter(|r| r.policy != "heshare").collect();
    if let (Some(h), false) = (
        rows.iter().find(|r| r.policy == "heshare"),
        baselines.is_empty(),
    ) {
        let best_e = baselines
            .iter()
            .min_by(|a, b| a.energy_per_job_kj.total_cmp(&b.energy_per_job_kj))
            .context("baselines")?;
        let best_t = baselines
            .iter()
            .min_by(|a, b| a.mean_jct_s.total_cmp(&b.mean_jct_s))
            .context("baselines")?;
        writeln!(
            out,
            "heshare vs best baseline: energy per job {:.2}x ({}), mean JCT {:.2}x ({})",
            h.energy_per_job_kj / best_e.energy_per_job_kj,
            best_e.policy,
            h.mean_jct_s / best_t.mean_jct_s,
            best_t.policy
        )?;
        // Always-on idle energy grows with the makespan, which a few long jobs decide; the
        // busy and power-saving figures show the part the scheduler controls.
        let best_of = |f: &dyn Fn(&PolicyRow) -> f64| {
            baselines
                .iter()
                .map(|r| (f(r), r.policy.as_str()))
                .min_by(|a, b| a.0.total_cmp(&b.0))
        };
        if let (Some((bb, bn)), Some((sb, sn))) = (
            best_of(&|r| r.busy_energy_kwh),
            best_of(&|r| r.energy_power_saving_kwh),
        ) {
            writeln!(
                out,
                "heshare vs best baseline: busy energy {:.2}x ({bn}), energy with idle nodes suspended {:.2}x ({sn})",
                h.busy_energy_kwh / bb,
                h.energy_power_saving_kwh / sb
            )?;
        }
    }
    if let Some(path) = &args.plot {
        let panel = |title, unit, f: &dyn Fn(&PolicyRow) -> f64| crate::report::BarPanel {
            title,
            unit,
            values: rows.iter().map(|r| (r.policy.clone(), f(r))).collect(),
            highlight: Some("heshare"),
        };
        let panels = [
            panel("GPU energy per job (busy + idle)", "kJ", &|r| {
                r.energy_per_job_kj
            }),
            panel("GPU energy with idle nodes suspended", "kWh", &|r| {
                r.energy_power_saving_kwh
            }),
            panel("Mean job completion time", "s", &|r| r.mean_jct_s),
            panel("p99 job completion time", "s", &|r| r.p99_jct_s),
        ];
        let title = format!(
            "Time mode: {} jobs x {} seeds, {gpus} GPUs, load {load:.2}",
            args.jobs,
            seeds.len()
        );
        std::fs::write(path, crate::report::bar_chart_svg(&title, &panels))
            .with_context(|| format!("{}: cannot write", path.display()))?;
    }
    if let Some(path) = &args.json {
        let o = Output {
            mode: args.mode,
            load,
            seeds,
            jobs_per_seed: args.jobs,
            gpus,
            trace: trace_label,
            cluster: cluster_label,
            results: rows,
            energy_lower_bound_kwh: lower_bound,
        };
        std::fs::write(path, serde_json::to_string_pretty(&o)? + "\n")
            .with_context(|| format!("{}: cannot write", path.display()))?;
    }
    Ok(())
}
