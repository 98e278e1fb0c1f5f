//! `heshare simulate --mode time`: parses the arguments, runs `sim::experiment`, prints its report
//! (and writes its JSON and chart).

use super::simulate::{Mode, SimulateArgs, inputs};
use crate::config::Config;
use crate::sim::experiment::{self, Report, Spec};
use crate::sim::meter::{HostSpec, PowerSaving};
use crate::sim::priority::QueueOrder;
use crate::sim::schedulers::DEFAULT;
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
    let scale = args.scale();
    if !(scale > 0.0 && scale <= 1.0) {
        bail!("--scale {scale} is outside (0, 1]");
    }
    let jobs = args.jobs.unwrap_or(20_000);
    if jobs == 0 {
        bail!("--jobs must be at least 1");
    }
    let (all_nodes, cluster_label, trace, trace_label) = inputs(cfg, args)?;
    let nodes = experiment::scale_nodes(&all_nodes, scale);
    // A site's sacct is replayed as it ran; --load and --jobs scale and cut that replay.
    let recorded = args.trace_format == crate::sim::trace::TraceFormat::Sacct;
    let mut notes = Vec::new();
    // A replay's jobs are named by their JobIDs (`--jobs-csv`), as the replay built them.
    let (jobs, load, arrivals, ids) = if recorded {
        let (jobs, load, arrivals, ids) =
            replay_notes(cfg, args, &trace, &trace_label, &nodes, &mut notes)?;
        (jobs, load, arrivals, Some(ids))
    } else {
        (jobs, load, crate::sim::replay::Scaling::AS_RECORDED, None)
    };
    let saving = power_saving(args)?;
    let queue = queue_order(args)?;
    let host = match args.host_power.as_str() {
        "sourced" => HostSpec::Sourced,
        w => match w.parse::<f64>() {
            Ok(x) if x.is_finite() && x >= 0.0 => HostSpec::Flat(crate::units::Watts(x)),
            _ => bail!("--host-power {w}: use sourced or a number of watts (>= 0)"),
        },
    };
    let fraction = |name: &str, v: f64| {
        if (0.0..=1.0).contains(&v) {
            Ok(v)
        } else {
            Err(anyhow!("{name} {v} is outside 0..=1"))
        }
    };
    let (labelled, mislabelled) = (
        fraction("--labelled", args.labelled)?,
        fraction("--mislabelled", args.mislabelled)?,
    );
    let fast_limits = fraction("--fast-limits", args.fast_limits)?;
    if labelled + mislabelled > 1.0 + 1e-9 {
        bail!("--labelled {labelled} and --mislabelled {mislabelled} add up to more than 1");
    }
    if !(args.runs_per_template >= 1.0 && args.runs_per_template <= 1e6) {
        bail!(
            "--runs-per-template {} is outside 1..=1000000",
            args.runs_per_template
        );
    }
    if !(0.0..=2.0).contains(&args.run_noise) {
        bail!("--run-noise {} is outside 0..=2", args.run_noise);
    }
    let spec = Spec {
        curve_days: args.curve_days.max(1),
        recurrence: crate::sim::templates::Recurrence {
            runs_per_template: args.runs_per_template,
            run_noise: args.run_noise,
            labelled,
            mislabelled,
            fast_limits,
        },
        load,
        jobs,
        seeds: (0..args.seeds.unwrap_or(3)).map(|s| 42 + s).collect(),
        max_duration_s: args.max_duration,
        users: args.users,
        host,
        saving,
        queue,
        policies: if args.policies.is_empty() {
            DEFAULT.iter().map(|s| (*s).to_owned()).collect()
        } else {
            args.policies.clone()
        },
        threads: std::thread::available_parallelism().map_or(1, usize::from),
        reruns: crate::sim::engine::Reruns {
            max: args.reruns,
            ..crate::sim::engine::Reruns::default()
        },
        recorded,
        arrivals,
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
    print(
        out,
        &report,
        &trace_label,
        &cluster_label,
        scale,
        cfg.policy.resize_asked_shares,
        &notes,
    )?;
    if recorded {
        other_power_saving(out, cfg, &nodes, &trace, &spec)?;
    }
    if let Some(path) = &args.jobs_csv {
        jobs_csv(path, &report, ids.as_deref())?;
    }
    if let Some(path) = &args.plot {
        plot(path, &report)?;
    }
    if let Some(path) = &args.json {
        let o = Output {
            mode: args.mode,
            trace: trace_label,
            cluster: cluster_label,
            scale,
            report: &report,
        };
        std::fs::write(path, serde_json::to_string_pretty(&o)? + "\n")
            .with_context(|| format!("{}: cannot write", path.display()))?;
    }
    Ok(())
}

/// Each job's outcome under each policy and seed (`--jobs-csv`); `ids` name the jobs (a
/// replay's JobIDs), else their place in the workload.
fn jobs_csv(path: &std::path::Path, r: &Report, ids: Option<&[String]>) -> Result<()> {
    use std::fmt::Write as _;
    let mut s = String::from("policy,seed,job,submit_s,start_s,jct_s,gpu_kwh\n");
    let opt = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x:.0}"));
    for run in &r.runs {
        for (k, j) in run.by_job.iter().enumerate() {
            let id = ids
                .and_then(|i| i.get(k))
                .map_or_else(|| k.to_string(), Clone::clone);
            let _ = writeln!(
                s,
                "{},{},{id},{:.0},{},{},{:.4}",
                run.policy,
                run.seed,
                j.submit_s,
                opt(j.start_s),
                opt(j.jct_s),
                j.gpu_energy_j / 3.6e6
            );
        }
    }
    std::fs::write(path, s).with_context(|| format!("{}: cannot write", path.display()))
}

/// A replay as recorded, answered the other way of power saving too: plain Slurm and heshare
/// on the same jobs with the site's power saving off where it is on, and on (Slurm's usual
/// 600 s idle, the boot time given) where it is off, so an admin sees what each part saves.
fn other_power_saving(
    out: &mut impl Write,
    cfg: &Config,
    nodes: &[crate::cluster::Node],
    trace: &[crate::sim::trace::TraceJob],
    spec: &Spec,
) -> Result<()> {
    let mut other = spec.clone();
    other.saving.suspend_time_s = match spec.saving.suspend_time_s {
        Some(_) => None,
        None => Some(600.0),
    };
    other.policies = vec!["slurm-mps".to_owned(), "heshare".to_owned()];
    let r = experiment::run(cfg, nodes, trace, &other, &|| {}).map_err(|e| anyhow!(e))?;
    let kwh = |name: &str| {
        r.rows
            .iter()
            .find(|x| x.policy == name)
            .map_or(f64::NAN, |x| x.facility_kwh)
    };
    let how = match other.saving.suspend_time_s {
        Some(s) => format!("with power saving (SuspendTime={s:.0}, the other settings as above)"),
        None => "without power saving (SuspendTime off, every node always on)".to_owned(),
    };
    writeln!(
        out,
        "{how}: plain Slurm as configured (slurm-mps) {:.1} kWh, heshare {:.1} kWh (mean over seeds){}",
        kwh("slurm-mps"),
        kwh("heshare"),
        r.verdict.map_or(String::new(), |v| format!(
            "; {:.1}% of jobs more than {:.0}% later, {:.1}% more than {:.0}% sooner",
            100.0 * v.later,
            100.0 * v.margin,
            100.0 * v.sooner,
            100.0 * v.margin
        ))
    )?;
    Ok(())
}

/// What a replay as recorded holds and leaves out, said in `notes`: the jobs it replays, the
/// load they offer the cluster over the span they are submitted in, and how `--load` (arrivals
/// closer together or further apart) and `--jobs` (the first jobs only) depart from the record.
/// Returns the replay's jobs, the load they offer, its scaling and its jobs' JobIDs.
fn replay_notes(
    cfg: &Config,
    args: &SimulateArgs,
    trace: &[crate::sim::trace::TraceJob],
    trace_label: &str,
    nodes: &[crate::cluster::Node],
    notes: &mut Vec<String>,
) -> Result<(usize, f64, crate::sim::replay::Scaling, Vec<String>)> {
    use crate::sim::replay::{Replay, Scaling, recorded_jobs};
    let world = crate::sim::world::World::new(cfg);
    let by_id: std::collections::HashMap<&str, &crate::sim::trace::TraceJob> =
        trace.iter().map(|t| (t.id.as_str(), t)).collect();
    let gpus: f64 = nodes.iter().map(|n| f64::from(n.gpus)).sum();
    // The span a replay's submissions and runs cover, and the load its jobs offer over it.
    let offered = |r: &Replay, time: f64| {
        let rows: Vec<&crate::sim::trace::TraceJob> = r
            .ids
            .iter()
            .filter_map(|id| by_id.get(id.as_str()).copied())
            .collect();
        let first = rows
            .iter()
            .map(|t| t.submit_s * time)
            .fold(f64::INFINITY, f64::min);
        let end = rows
            .iter()
            .map(|t| t.submit_s * time + t.duration_s)
            .fold(first, f64::max);
        let demand: f64 = rows
            .iter()
            .map(|t| f64::from(t.num_gpus) * f64::from(t.gpu_milli) / 1000.0 * t.duration_s)
            .sum();
        let span = (end - first).max(1.0);
        (span, demand / (gpus.max(1.0) * span))
    };
    let as_recorded = recorded_jobs(cfg, &world, trace, nodes, 42, Scaling::AS_RECORDED);
    if as_recorded.jobs.is_empty() {
        bail!(
            "{trace_label}: no row of the trace can run on this cluster ({} left out)",
            as_recorded.left_out.len()
        );
    }
    if args.jobs == Some(0) {
        bail!("--jobs must be at least 1");
    }
    // Each replay is built once: without --jobs the cut is the whole record, and without
    // --load the replay is the cut.
    let cut_jobs = args.jobs.map(|n| {
        recorded_jobs(
            cfg,
            &world,
            trace,
            nodes,
            42,
            Scaling {
                time: 1.0,
                first: Some(n),
            },
        )
    });
    let cut = cut_jobs.as_ref().unwrap_or(&as_recorded);
    let (_, recorded_load) = offered(cut, 1.0);
    // The load the cut jobs offer falls as their arrivals spread (their runs do not): the time
    // factor that offers `--load`, by bisection in log time.
    let time = args.load.map_or(1.0, |target| {
        let (mut lo, mut hi) = (-12.0f64, 12.0f64);
        for _ in 0..60 {
            let mid = 0.5 * (lo + hi);
            if offered(cut, mid.exp()).1 > target {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        (0.5 * (lo + hi)).exp()
    });
    let scaling = Scaling {
        time,
        first: args.jobs,
    };
    let scaled = args
        .load
        .map(|_| recorded_jobs(cfg, &world, trace, nodes, 42, scaling));
    let r = scaled.as_ref().unwrap_or(cut);
    let (span, load) = offered(r, scaling.time);
    notes.push(format!(
        "replayed as recorded: every sacct row that ran, at its own submission over {:.1} days, with its request, time limit and runtime on the type it ran on; what sacct does not record (each recurring job's kind, speed on the other types, power) is drawn per seed",
        span / 86_400.0
    ));
    if let Some(l) = args.load {
        let reached = if (load - l).abs() > 0.01 * l {
            " (the most they can: submitted all at once, the longest run sets the span)"
        } else {
            ""
        };
        notes.push(format!(
            "arrivals scaled (--load {l}): submissions {:.3}x as far apart as recorded, so the jobs offer load {load:.2} instead of the {recorded_load:.2} they offered{reached}",
            scaling.time
        ));
    }
    if let Some(n) = args.jobs {
        notes.push(format!(
            "cut (--jobs {n}): the first {} of the {} jobs the record holds",
            r.jobs.len(),
            as_recorded.jobs.len()
        ));
    }
    if args.cluster.is_none() {
        notes.push(
            "note: these jobs are replayed on the bundled openb slice, not on the cluster they ran on: give --cluster /etc/slurm/slurm.conf (or scontrol show node --oneliner output)"
                .to_owned(),
        );
    }
    let name = |v: Vec<String>| {
        let shown: Vec<String> = v.iter().take(5).cloned().collect();
        let more = v.len().saturating_sub(shown.len());
        format!(
            "{}{}",
            shown.join("; "),
            if more > 0 {
                format!("; and {more} more")
            } else {
                String::new()
            }
        )
    };
    if !r.left_out.is_empty() {
        notes.push(format!(
            "left out, no node can hold them: {} jobs: {}",
            r.left_out.len(),
            name(
                r.left_out
                    .iter()
                    .map(|l| format!("{} ({})", l.id, l.why))
                    .collect()
            )
        ));
    }
    if let Some(path) = &args.trace {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("{}: cannot read", path.display()))?;
        let skipped = crate::sim::trace::sacct_unreplayable(&text);
        if !skipped.is_empty() {
            notes.push(format!(
                "left out, no run to replay: {} GPU rows: {}",
                skipped.len(),
                name(
                    skipped
                        .iter()
                        .map(|(line, id, why)| format!("{id} (line {line}, {why})"))
                        .collect()
                )
            ));
        }
    }
    if r.type_unknown > 0 {
        notes.push(format!(
            "{} jobs name neither the GPU type nor a node of this cluster they ran on (export NodeList, or --cluster the cluster they ran on): their runtime is taken as on the slowest type they allow",
            r.type_unknown
        ));
    }
    Ok((r.jobs.len(), load, scaling, r.ids.clone()))
}

/// How Slurm orders the queue: multifactor with age weighted 1000 over 7 days, then
/// `--slurm-conf`, then the options given.
fn queue_order(args: &SimulateArgs) -> Result<QueueOrder> {
    let mut q = QueueOrder::default();
    if let Some((path, text)) = args.slurm_conf()? {
        // slurm.conf without PriorityType means Slurm's default, priority/basic.
        q.multifactor = false;
        q = q
            .from_slurm_conf(&text, &path.display().to_string())
            .map_err(|e| anyhow!(e))?;
    }
    match args.priority.as_deref() {
        None => {}
        Some(p) if p.eq_ignore_ascii_case("multifactor") => q.multifactor = true,
        Some(p) if p.eq_ignore_ascii_case("basic") => q.multifactor = false,
        Some(p) => bail!("--priority {p}: use multifactor or basic"),
    }
    if let Some(w) = args.priority_weight_age {
        q.weight_age = f64::from(w);
    }
    Ok(q)
}

/// Slurm's power saving for the run: defaults (SuspendTime 600 s), then `--slurm-conf`, then
/// the options given.
fn power_saving(args: &SimulateArgs) -> Result<PowerSaving> {
    let mut s = PowerSaving {
        suspend_time_s: Some(600.0),
        resume_s: args.resume_time,
        ..PowerSaving::default()
    };
    if let Some((path, text)) = args.slurm_conf()? {
        // slurm.conf without SuspendTime means Slurm's default: power saving off.
        s.suspend_time_s = None;
        s = s
            .from_slurm_conf(&text, &path.display().to_string())
            .map_err(|e| anyhow!(e))?;
    }
    if let Some(t) = &args.suspend_time {
        s.suspend_time_s = if t.eq_ignore_ascii_case("off") {
            None
        } else {
            match t.parse::<f64>() {
                Ok(x) if x.is_finite() && x >= 0.0 => Some(x),
                _ => bail!("--suspend-time {t}: use a number of seconds or off"),
            }
        };
    }
    if let Some(x) = args.suspend_timeout {
        s.suspend_timeout_s = x;
    }
    if let Some(x) = args.resume_timeout {
        s.resume_timeout_s = x;
    }
    for (name, v) in [
        ("--suspend-timeout", s.suspend_timeout_s),
        ("--resume-time", s.resume_s),
        ("--resume-timeout", s.resume_timeout_s),
    ] {
        if !(v.is_finite() && v >= 0.0) {
            bail!("{name} {v}: must be a number of seconds >= 0");
        }
    }
    if s.suspend_time_s.is_some() && s.resume_s > s.resume_timeout_s {
        bail!(
            "nodes take {:.0} s to boot (--resume-time) but ResumeTimeout is {:.0} s: Slurm would mark every resumed node DOWN and requeue its jobs; raise ResumeTimeout",
            s.resume_s,
            s.resume_timeout_s
        );
    }
    Ok(s)
}

/// `resize`: the site's opt-in to resizing explicit shares (`[policy] resize_asked_shares`),
/// without which no share is kept with a margin or given a whole GPU.
fn print(
    out: &mut impl Write,
    r: &Report,
    trace: &str,
    cluster: &str,
    scale: f64,
    resize: bool,
    notes: &[String],
) -> Result<()> {
    writeln!(
        out,
        "time mode: {} jobs{} x {} seeds from {trace}, on {cluster} scaled {scale:.2} ({} nodes, {} GPUs), {}load {:.2}",
        r.jobs_per_seed,
        if r.recorded { " as recorded" } else { "" },
        r.seeds.len(),
        r.nodes,
        r.gpus,
        if r.recorded { "offered " } else { "" },
        r.load
    )?;
    for n in notes {
        writeln!(out, "{n}")?;
    }
    let saving = match r.saving.suspend_time_s {
        Some(s) => format!(
            "idle nodes powered down after {s:.0} s (SuspendTime; {:.0} s to power down, {:.0} s to boot)",
            r.saving.suspend_timeout_s, r.saving.resume_s
        ),
        None => "power saving off (every node always on)".to_owned(),
    };
    writeln!(
        out,
        "jobs run in a world of measured workloads (Zeus, Gavel, EDP), not heshare's predictor; the facility meter counts every node at the wall: GPUs busy and idle, hosts {}; {saving}; energy over a common horizon per seed; heshare's snapshot every {:.0} s",
        r.host, r.snapshot_period_s
    )?;
    let reruns = match r.reruns.max {
        0 => "a job killed at its time limit fails for good".to_owned(),
        n => format!(
            "a job killed at its time limit is submitted again by its user at once, from the start, with {:.0}x the limit, up to {n} times",
            r.reruns.limit_factor
        ),
    };
    writeln!(out, "{reruns}")?;
    writeln!(
        out,
        "{:<16} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8} {:>8} {:>9} {:>9} {:>6} {:>6} {:>6} {:>6} {:>7} {:>9}",
        "policy",
        "facility",
        "always-on",
        "GPU kWh",
        "host kWh",
        "kJ/job",
        "GPU kJ/j",
        "mean JCT",
        "wait",
        "run",
        "p99 JCT",
        "makespan",
        "util",
        "viol",
        "killed",
        "resume",
        "missing",
        "sim job/s"
    )?;
    for row in &r.rows {
        writeln!(
            out,
            "{:<16} {:>9.1} {:>9.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.0}s {:>7.0}s {:>7.0}s {:>8.0}s {:>8.0}s {:>5.1}% {:>6} {:>6} {:>6} {:>7} {:>9.0}",
            row.policy,
            row.facility_kwh,
            row.facility_always_on_kwh,
            row.gpu_kwh,
            row.host_kwh,
            row.energy_per_job_kj,
            row.gpu_energy_per_job_kj,
            row.mean_jct_s,
            row.mean_wait_s,
            row.mean_run_s,
            row.p99_jct_s,
            row.makespan_s,
            100.0 * row.utilisation,
            row.violations,
            row.killed,
            row.resumes,
            row.unstarted + row.unfinished,
            row.sim_jobs_per_s
        )?;
    }
    writeln!(
        out,
        "(facility and always-on: kWh at the wall per seed; kJ/job: facility energy per finished job; mean/p99 JCT: every job from its submission to the end of its last run, its users' reruns after kills included (one that failed for good: until its last kill plus a run alone); killed: runs killed at their time limit, all seeds)"
    )?;
    writeln!(
        out,
        "energy lower bound (each job alone on its most efficient type and clock, charged what it keeps on, no idle hardware): {:.1} kWh",
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
    let queue = if r.queue.multifactor {
        format!(
            "priority/multifactor, PriorityWeightAge={:.0} over PriorityMaxAge={:.1} days",
            r.queue.weight_age,
            r.queue.max_age_s / 86_400.0
        )
    } else {
        "priority/basic: first come, first served, site factors unused".to_owned()
    };
    writeln!(out, "queue order: {queue}")?;
    for row in r.rows.iter().filter(|x| x.site_factor.nonzero > 0) {
        let f = &row.site_factor;
        writeln!(
            out,
            "site factor: {}: {} of {} started jobs nonzero; mean {:+.2}, 5-95% {:+}..{:+}, min {:+}, max {:+}",
            row.policy, f.nonzero, f.jobs, f.mean, f.p05, f.p95, f.min, f.max
        )?;
    }
    for row in r.rows.iter().filter(|x| x.killed > 0) {
        // The world's reason for the kills the policy's own choices caused (the jobs it did
        // not leave as their users asked): what an admin would look at first.
        let causes = row
            .killed_not_by_plain_slurm_causes
            .filter(|c| c.total() > 0)
            .map_or(String::new(), |c| {
                format!(
                    " (by cause: {} too slow a type, {} too small a share, {} a lowered clock, {} neighbours)",
                    c.slow_type, c.small_share, c.lowered_clock, c.neighbours
                )
            });
        let plain = match (
            row.killed_not_by_plain_slurm,
            row.killed_not_by_plain_slurm_as_asked,
        ) {
            (Some(k), Some(a)) if a > 0 => format!(
                "; {k} of jobs plain Slurm never killed with the same requests, {a} of them left as their users asked (or only given more share){causes}"
            ),
            (Some(k), _) => {
                format!("; {k} of jobs plain Slurm never killed with the same requests{causes}")
            }
            (None, _) => String::new(),
        };
        writeln!(
            out,
            "killed at their time limit: {}: {} runs ({} by its clock, share or co-location{plain}; {:.1} kWh of GPU energy lost); {} reruns, {} jobs failed for good",
            row.policy,
            row.killed,
            row.killed_by_sharing_or_clock,
            row.killed_gpu_kwh,
            row.reruns,
            row.failed
        )?;
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
    if let (true, Some(v)) = (r.recorded, r.verdict) {
        writeln!(
            out,
            "verdict: on these jobs heshare would have used {:.1} kWh {} than plain Slurm as configured (slurm-mps), {:.1}% of its facility energy; {:.1}% of jobs would have finished more than {:.0}% later, {:.1}% more than {:.0}% sooner (median over seeds)",
            v.kwh_saved.abs(),
            if v.kwh_saved >= 0.0 { "less" } else { "more" },
            100.0 * v.saved_fraction.abs(),
            100.0 * v.later,
            100.0 * v.margin,
            100.0 * v.sooner,
            100.0 * v.margin
        )?;
    }
    ratios(out, "heshare as it ships vs the best baseline", &r.shipped)?;
    ratios(
        out,
        "heshare-labelled (every job its true class, no profiles) vs the best baseline",
        &r.labelled,
    )?;
    ratios(
        out,
        "heshare as it ships (labels as users give them, profiles learned) vs heshare-labelled",
        &r.learned_vs_labelled,
    )?;
    let rec = &r.recurrence;
    if r.recorded {
        writeln!(
            out,
            "workload: as recorded; the runs one user submitted from one account under one job name are one recurring job, as heshare's profile keys recognise it; nobody labelled (no --gpu-class in the record)"
        )?;
    } else {
        writeln!(
            out,
            "workload: each job a run of a user's script, {:.1} runs per script on average (run-to-run spread {:.2}); {:.0}% of scripts labelled truly, {:.0}% wrongly, the rest unlabelled (baselines are not affected by labels); time limits cover a run alone on the slowest type its request allows{}",
            rec.runs_per_template,
            rec.run_noise,
            100.0 * rec.labelled,
            100.0 * rec.mislabelled,
            if rec.fast_limits > 0.0 {
                format!(
                    ", except {:.0}% of scripts' users', written for the fastest",
                    100.0 * rec.fast_limits
                )
            } else {
                String::new()
            }
        )?;
    }
    if let Some(p) = &r.profiles {
        #[allow(clippy::cast_precision_loss)]
        let pct = |n: usize| 100.0 * n as f64 / p.submitted.max(1) as f64;
        let resized = if resize {
            "; resize_asked_shares on: a profiled share may be sized or made whole by the cost"
        } else {
            "; explicit shares kept as asked (resize_asked_shares off)"
        };
        writeln!(
            out,
            "profiles: heshare decided {:.1}% of its {} GPU jobs with a profile (script {}, name {}, request {}), {:.1}% by a label alone, {:.1}% with neither{resized}; {} labels set aside by the job's runs ({} of them wrong); {} runs filed, {} profiles",
            pct(p.with_profile),
            p.submitted,
            p.by_level[0],
            p.by_level[1],
            p.by_level[2],
            pct(p.labelled),
            pct(p.as_asked),
            p.overruled,
            p.overruled_wrong,
            p.taught,
            p.profiles
        )?;
        let k = p.kill_price;
        writeln!(
            out,
            "kill price: of the {} runs heshare placed by a label or a profile, {} were priced at under a {:.2}% chance of a kill at their limit and {} of them were killed; {} at more, whose chances add up to {:.1} kills, and {} were killed",
            k.unpriced + k.priced,
            k.unpriced,
            100.0 * crate::sim::learning::KillPrice::PRICED,
            k.unpriced_killed,
            k.priced,
            k.priced_expected,
            k.priced_killed
        )?;
    }
    if !r.learning_curve.is_empty() {
        writeln!(
            out,
            "learning curve (jobs by when they were submitted; their GPU energy per job and mean JCT against the best baseline's same jobs, median over seeds):"
        )?;
        let f = |x: Option<f64>| x.map_or("    -".to_owned(), |v| format!("{v:.2}x"));
        for w in &r.learning_curve {
            writeln!(
                out,
                "  days {:>2}-{:<2}: heshare {} energy {} JCT {:>4} viol ({} jobs); heshare-labelled {} energy {} JCT {:>4} viol",
                w.first_day,
                w.last_day,
                f(w.heshare_energy),
                f(w.heshare_jct),
                w.heshare_violations,
                w.heshare_jobs,
                f(w.labelled_energy),
                f(w.labelled_jct),
                w.labelled_violations
            )?;
        }
    }
    ratios(
        out,
        "heshare-oracle (the shipped path told every job's truth) vs the best baseline",
        &r.oracle,
    )?;
    writeln!(
        out,
        "world GPU power (not the catalog's): idle / busy max / context W"
    )?;
    for p in &r.world_power {
        writeln!(
            out,
            "  {:<9} {:>6.1} ({:?}) / {:>6.1} ({:?}) / {:>5.1} ({:?})",
            p.gpu_type,
            p.idle_w,
            p.idle_source,
            p.max_w,
            p.max_source,
            p.context_w,
            p.context_source
        )?;
    }
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
            "Facility energy per finished job (common horizon)",
            "kJ",
            &|x| x.energy_per_job_kj,
        ),
        panel("GPU energy per finished job", "kJ", &|x| {
            x.gpu_energy_per_job_kj
        }),
        panel("Mean job completion time", "s", &|x| x.mean_jct_s),
        panel("p99 job completion time", "s", &|x| x.p99_jct_s),
    ];
    let title = format!(
        "Time mode: {} jobs{} x {} seeds, {} GPUs, {}load {:.2}",
        r.jobs_per_seed,
        if r.recorded { " as recorded" } else { "" },
        r.seeds.len(),
        r.gpus,
        if r.recorded { "offered " } else { "" },
        r.load
    );
    std::fs::write(path, crate::report::bar_chart_svg(&title, &panels))
        .with_context(|| format!("{}: cannot write", path.display()))
}
