//! `heshare simulate --mode time`: parses the arguments, runs `sim::experiment`, prints its report
//! (and writes its JSON and chart).

use super::simulate::{Mode, SimulateArgs, inputs};
use crate::config::Config;
use crate::sim::experiment::{self, Report, Spec};
use crate::sim::schedulers::NAMES;
use anyhow::{Context, Result, anyhow, bail};
use serde::Serialize;
use std::io::Write;

#[derive(Serialize)]
struct Output<'a> {
    mode: Mode,
    trace: String,
    cluster: String,
    scale: f64,
    #[serde(flatten)]
    report: &'a Report,
}

pub fn run(out: &mut impl Write, cfg: &Config, args: &SimulateArgs, load: f64) -> Result<()> {
    if !(args.scale > 0.0 && args.scale <= 1.0) {
        bail!("--scale {} is outside (0, 1]", args.scale);
    }
    if args.jobs == 0 {
        bail!("--jobs must be at least 1");
    }
    let (all_nodes, cluster_label, trace, trace_label) = inputs(cfg, args)?;
    let nodes = experiment::scale_nodes(&all_nodes, args.scale);
    let spec = Spec {
        load,
        jobs: args.jobs,
        seeds: (0..args.seeds.unwrap_or(3)).map(|s| 42 + s).collect(),
        max_duration_s: args.max_duration,
        users: args.users,
        suspend_time_s: args.suspend_time,
        policies: if args.policies.is_empty() {
            NAMES.iter().map(|s| (*s).to_owned()).collect()
        } else {
            args.policies.clone()
        },
        threads: std::thread::available_parallelism().map_or(1, usize::from),
    };
    // Drawn on stderr, and only when it is a terminal.
    let bar =
        indicatif::ProgressBar::new((spec.policies.len() * spec.seeds.len() * spec.jobs) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} jobs finished ({per_sec}, eta {eta})",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let report =
        experiment::run(cfg, &nodes, &trace, &spec, &|| bar.inc(1)).map_err(|e| anyhow!(e))?;
    bar.finish_and_clear();
    print(out, &report, &trace_label, &cluster_label, args.scale)?;
    if let Some(path) = &args.plot {
        plot(path, &report)?;
    }
    if let Some(path) = &args.json {
        let o = Output {
            mode: args.mode,
            trace: trace_label,
            cluster: cluster_label,
            scale: args.scale,
            report: &report,
        };
        std::fs::write(path, serde_json::to_string_pretty(&o)? + "\n")
            .with_context(|| format!("{}: cannot write", path.display()))?;
    }
    Ok(())
}

fn print(out: &mut impl Write, r: &Report, trace: &str, cluster: &str, scale: f64) -> Result<()> {
    writeln!(
        out,
        "time mode: {} jobs x {} seeds from {trace}, on {cluster} scaled {scale:.2} ({} nodes, {} GPUs), load {:.2}",
        r.jobs_per_seed,
        r.seeds.len(),
        r.nodes,
        r.gpus,
        r.load
    )?;
    writeln!(
        out,
        "jobs run in a world of measured workloads (Zeus, Gavel, EDP), not heshare's predictor; energy over a common horizon per seed, idle nodes suspended after {:.0} s; heshare's snapshot every {:.0} s",
        r.suspend_time_s, r.snapshot_period_s
    )?;
    writeln!(
        out,
        "{:<16} {:>9} {:>9} {:>9} {:>8} {:>9} {:>8} {:>8} {:>9} {:>9} {:>9} {:>6} {:>6} {:>6} {:>7} {:>9}",
        "policy",
        "kWh",
        "always-on",
        "busy kWh",
        "kJ/job",
        "mean JCT",
        "wait",
        "run",
        "p50 JCT",
        "p99 JCT",
        "makespan",
        "alloc",
        "util",
        "viol",
        "missing",
        "sim job/s"
    )?;
    for row in &r.rows {
        writeln!(
            out,
            "{:<16} {:>9.1} {:>9.1} {:>9.1} {:>8.1} {:>8.0}s {:>7.0}s {:>7.0}s {:>8.0}s {:>8.0}s {:>8.0}s {:>5.1}% {:>5.1}% {:>6} {:>7} {:>9.0}",
            row.policy,
            row.energy_kwh,
            row.energy_always_on_kwh,
            row.busy_energy_kwh,
            row.energy_per_job_kj,
            row.mean_jct_s,
            row.mean_wait_s,
            row.mean_run_s,
            row.p50_jct_s,
            row.p99_jct_s,
            row.makespan_s,
            100.0 * row.alloc_rate,
            100.0 * row.utilisation,
            row.violations,
            row.unstarted + row.unfinished,
            row.sim_jobs_per_s
        )?;
    }
    writeln!(
        out,
        "energy lower bound (each job alone on its most efficient type and clock, no idle): {:.1} kWh",
        r.energy_lower_bound_kwh
    )?;
    if r.missing_jobs() > 0 {
        for row in r.rows.iter().filter(|x| x.unstarted + x.unfinished > 0) {
            writeln!(
                out,
                "WARNING: {}: {} jobs never started and {} never finished (of {}): its JCT covers finished jobs only",
                row.policy, row.unstarted, row.unfinished, row.jobs
            )?;
        }
    }
    let ratios = |out: &mut dyn Write, title: &str, rs: &[experiment::Ratio]| -> Result<()> {
        if rs.is_empty() {
            return Ok(());
        }
        writeln!(
            out,
            "{title} (per seed, min / median / max; lower is better):"
        )?;
        for x in rs {
            writeln!(
                out,
                "  {:<26} {:.2}x / {:.2}x / {:.2}x  (best baseline: {})",
                x.metric, x.min, x.median, x.max, x.best_baseline
            )?;
        }
        Ok(())
    };
    ratios(out, "heshare as it ships vs the best baseline", &r.shipped)?;
    ratios(
        out,
        "heshare-ideal (omniscient upper bound, not what ships) vs the best baseline",
        &r.ideal,
    )?;
    if !r.predictor_error.is_empty() {
        writeln!(
            out,
            "predictor error: heshare's catalog vs the world, each of heshare's jobs alone on the type it ran on at the default clock (1.00 = exact)"
        )?;
        writeln!(
            out,
            "  {:<22} {:<9} {:>7} {:>28} {:>14}",
            "class", "type", "jobs", "runtime pred/real [p10,p90]", "energy pred/real"
        )?;
        for e in &r.predictor_error {
            writeln!(
                out,
                "  {:<22} {:<9} {:>7} {:>10.2} [{:>5.2}, {:>5.2}]     {:>14.2}",
                e.class,
                e.gpu_type,
                e.jobs,
                e.runtime_median,
                e.runtime_p10,
                e.runtime_p90,
                e.energy_median
            )?;
        }
    }
    Ok(())
}

fn plot(path: &std::path::Path, r: &Report) -> Result<()> {
    let panel = |title, unit, f: &dyn Fn(&experiment::PolicyRow) -> f64| crate::report::BarPanel {
        title,
        unit,
        values: r.rows.iter().map(|x| (x.policy.clone(), f(x))).collect(),
        highlight: Some("heshare"),
    };
    let panels = [
        panel(
            "GPU energy per job (common horizon, idle suspended)",
            "kJ",
            &|x| x.energy_per_job_kj,
        ),
        panel("GPU energy, always on", "kWh", &|x| x.energy_always_on_kwh),
        panel("Mean job completion time", "s", &|x| x.mean_jct_s),
        panel("p99 job completion time", "s", &|x| x.p99_jct_s),
    ];
    let title = format!(
        "Time mode: {} jobs x {} seeds, {} GPUs, load {:.2}",
        r.jobs_per_seed,
        r.seeds.len(),
        r.gpus,
        r.load
    );
    std::fs::write(path, crate::report::bar_chart_svg(&title, &panels))
        .with_context(|| format!("{}: cannot write", path.display()))
}
