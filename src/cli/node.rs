//! `heshare prolog|epilog|task-prolog` (run by slurmd) and `heshare node status|repair` (run by
//! admins). Slurm drains the node when a Prolog or Epilog exits non-zero, so every failure says
//! on stderr what went wrong; notes also go to the node's helper.log beside its state.

use super::{ConfigArg, load_config};
use crate::config::Config;
use crate::node::{JobEnv, NodeHelper, task_exports};
use anyhow::{Context, Result};
use std::io::Write;

#[derive(clap::Args, Debug)]
pub struct HookArgs {
    #[command(flatten)]
    config: ConfigArg,
}

#[derive(clap::Subcommand, Debug)]
pub enum NodeCommand {
    /// Show which jobs share each GPU of a node, its clocks and attributed energy.
    Status {
        #[command(flatten)]
        config: ConfigArg,
        /// Slurm node name [default: $SLURMD_NODENAME, else the host name].
        #[arg(long)]
        node: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// What NVML says of this machine's GPUs: driver, names, energy counters, power limits,
    /// supported clocks; with --try-lock, whether a locked clock can be set (and reset).
    Gpus {
        #[command(flatten)]
        config: ConfigArg,
        #[arg(long)]
        try_lock: bool,
    },
    /// Read every GPU with jobs once: energy counter and per-process work, so processes are tied
    /// to their jobs while they run (the measured energy split needs it). Run it every few
    /// seconds as root: slurm-conf/heshare-sample.{service,timer} do.
    Sample {
        #[command(flatten)]
        config: ConfigArg,
        #[arg(long)]
        node: Option<String>,
    },
    /// Append records a killed helper left pending, reset clocks of GPUs without jobs, stop MPS
    /// daemons without sharing jobs; with --end-job, end a job whose Epilog never finished.
    Repair {
        #[command(flatten)]
        config: ConfigArg,
        #[arg(long)]
        node: Option<String>,
        /// A job id to end as its Epilog would have (repeatable).
        #[arg(long = "end-job", value_name = "JOBID")]
        end_jobs: Vec<String>,
    },
}

#[derive(Clone, Copy, Debug)]
pub enum Hook {
    Prolog,
    Epilog,
}

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn node_name(explicit: Option<String>) -> String {
    explicit
        .or_else(|| env_var("SLURMD_NODENAME"))
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .unwrap_or_else(|| "localhost".into())
}

/// Appends timestamped lines to the node's helper.log; a failure to log must not fail the job.
fn log_notes(cfg: &Config, node: &str, what: &str, notes: &[String]) {
    if notes.is_empty() {
        return;
    }
    let path = cfg.node.state_dir.join(node).join("helper.log");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut text = String::new();
    for n in notes {
        eprintln!("heshare {what}: {n}");
        text.push_str(&format!("{now} {what}: {n}\n"));
    }
    let dir = cfg.node.state_dir.join(node);
    let opened = crate::node::secure::ensure_own_dir(&dir, 0o700)
        .map_err(std::io::Error::other)
        .and_then(|()| crate::node::secure::open_append(&path));
    match opened {
        Ok(mut f) => {
            let _ = f.write_all(text.as_bytes());
        }
        Err(e) => eprintln!("heshare {what}: {}: not logged: {e}", path.display()),
    }
}

/// slurm.conf as slurmd reads it: `SLURM_CONF`, which slurmd sets in the Prolog's and Epilog's
/// environment (the job cannot: only `SPANK_*` entries come from it), else the default path.
/// Unreadable when the helper needs it: the GPU type comes from elsewhere.
fn slurm_conf_path() -> std::path::PathBuf {
    std::env::var_os("SLURM_CONF")
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| "/etc/slurm/slurm.conf".into())
}

pub fn hook(args: &HookArgs, which: Hook) -> Result<()> {
    // Runs as root: whatever it creates is root's alone unless it says otherwise.
    crate::node::secure::private_umask();
    let (cfg, _) = load_config(&args.config.config)?;
    let what = match which {
        Hook::Prolog => "prolog",
        Hook::Epilog => "epilog",
    };
    let Some(job) =
        JobEnv::from_vars(&env_var).with_context(|| format!("{what}: bad job environment"))?
    else {
        return Ok(()); // no GPUs: nothing to do
    };
    let mut helper = NodeHelper::new(&cfg, &job.node).with_slurm_conf(slurm_conf_path());
    let result = match which {
        Hook::Prolog => helper.prolog(&job),
        Hook::Epilog => helper.epilog(&job),
    };
    let mut notes = std::mem::take(&mut helper.warnings);
    if let Err(e) = &result {
        notes.push(format!("job {}: FAILED: {e}", job.job_id));
    }
    log_notes(&cfg, &job.node, what, &notes);
    result.with_context(|| format!("{what} of job {}", job.job_id))
}

pub fn task_prolog(out: &mut impl Write, args: &HookArgs) -> Result<()> {
    let (cfg, _) = load_config(&args.config.config)?;
    let text = task_exports(&cfg, &env_var).context("task-prolog: bad task environment")?;
    out.write_all(text.as_bytes())?;
    Ok(())
}

pub fn node(out: &mut impl Write, cmd: &NodeCommand) -> Result<()> {
    crate::node::secure::private_umask();
    match cmd {
        NodeCommand::Status { config, node, json } => {
            let (cfg, _) = load_config(&config.config)?;
            let name = node_name(node.clone());
            let mut helper = NodeHelper::new(&cfg, &name);
            let st = helper.status()?;
            if *json {
                serde_json::to_writer_pretty(&mut *out, &st)?;
                writeln!(out)?;
                return Ok(());
            }
            writeln!(out, "node {} (backend: {})", st.node, st.backend.as_str())?;
            writeln!(
                out,
                "{:>4}  {:<10}  {:<20}  {:>9}  {:>4}  {:>14}  {:>14}",
                "gpu", "type", "jobs", "clock", "mps", "jobs J", "idle J"
            )?;
            for g in &st.gpus {
                let clock = g
                    .locked_mhz
                    .map_or_else(|| "default".to_owned(), |m| format!("{m} MHz"));
                writeln!(
                    out,
                    "{:>4}  {:<10}  {:<20}  {:>9}  {:>4}  {:>14.1}  {:>14.1}",
                    g.gpu,
                    g.gpu_type,
                    if g.jobs.is_empty() {
                        "-".to_owned()
                    } else {
                        g.jobs.join(",")
                    },
                    clock,
                    if g.mps_daemon { "on" } else { "-" },
                    g.attributed_jobs_j,
                    g.attributed_idle_j
                )?;
            }
            if st.pending_records > 0 {
                writeln!(
                    out,
                    "{} record(s) wait for the accounting log",
                    st.pending_records
                )?;
            }
            Ok(())
        }
        NodeCommand::Gpus { config, try_lock } => gpus(out, config, *try_lock),
        NodeCommand::Sample { config, node } => {
            let (cfg, _) = load_config(&config.config)?;
            let name = node_name(node.clone());
            let mut helper = NodeHelper::new(&cfg, &name);
            let result = helper.sample();
            let mut notes = std::mem::take(&mut helper.warnings);
            if let Err(e) = &result {
                notes.push(format!("FAILED: {e}"));
            }
            log_notes(&cfg, &name, "sample", &notes);
            let read = result?;
            if !read.is_empty() {
                writeln!(out, "node {name}: read GPUs {read:?}")?;
            }
            Ok(())
        }
        NodeCommand::Repair {
            config,
            node,
            end_jobs,
        } => {
            let (cfg, _) = load_config(&config.config)?;
            let name = node_name(node.clone());
            let mut helper = NodeHelper::new(&cfg, &name);
            let ended = helper.repair_node(end_jobs)?;
            for n in &helper.warnings {
                writeln!(out, "{n}")?;
            }
            for id in ended {
                writeln!(out, "job {id}: ended, record written")?;
            }
            writeln!(out, "node {name}: repaired")?;
            Ok(())
        }
    }
}

fn on_off(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

fn gpus(out: &mut impl Write, config: &ConfigArg, try_lock: bool) -> Result<()> {
    use crate::node::gpu::{GpuControl, NvmlGpus};
    use crate::units::Mhz;
    let (cfg, _) = load_config(&config.config)?;
    // Only --try-lock changes anything (a clock, then its reset); nothing turns accounting on.
    let mut nvml = NvmlGpus::init_with(false).context("no NVIDIA driver to ask")?;
    writeln!(out, "driver {}", nvml.driver_version()?)?;
    let count = nvml.device_count()?;
    writeln!(out, "{count} GPU(s)")?;
    let helper = NodeHelper::new(&cfg, "localhost");
    for i in 0..count {
        let name = nvml.name(i)?;
        let matched = helper
            .catalog_type_of(&name)
            .unwrap_or_else(|| "no catalog type: set [node] gpu_type".into());
        writeln!(out, "GPU {i}: {name} (catalog: {matched})")?;
        let show = |r: Result<String, crate::node::gpu::GpuError>| match r {
            Ok(v) => v,
            Err(e) => format!("unavailable: {e}"),
        };
        let e1 = nvml.energy_mj(i);
        std::thread::sleep(std::time::Duration::from_millis(500));
        let e2 = nvml.energy_mj(i);
        let energy = match (e1, e2) {
            (Ok(a), Ok(b)) => format!(
                "{a} mJ, then {b} mJ 0.5 s later ({:.1} W)",
                b.saturating_sub(a) as f64 / 500.0
            ),
            (Err(e), _) | (_, Err(e)) => format!("unavailable: {e}"),
        };
        writeln!(out, "  energy counter: {energy}")?;
        writeln!(
            out,
            "  power now: {}",
            show(nvml.power(i).map(|w| format!("{:.1} W", w.0)))
        )?;
        writeln!(
            out,
            "  power limit: {}",
            show(
                nvml.power_limits(i).map(|(n, lo, hi)| format!(
                    "{:.0} W (settable {:.0}..={:.0} W)",
                    n.0, lo.0, hi.0
                ))
            )
        )?;
        let clocks = nvml.supported_clocks(i);
        writeln!(
            out,
            "  supported SM clocks: {}",
            show(
                clocks
                    .as_ref()
                    .map_err(|e| crate::node::gpu::GpuError::NvmlInit(e.to_string()))
                    .map(|c| format!(
                        "{} steps, {}..={} MHz",
                        c.len(),
                        c.first().map_or(0, |m| m.0),
                        c.last().map_or(0, |m| m.0)
                    ))
            )
        )?;
        writeln!(
            out,
            "  SM clock now: {}",
            show(nvml.sm_clock(i).map(|m| m.to_string()))
        )?;
        writeln!(
            out,
            "  compute processes: {}",
            show(nvml.running_pids(i).map(|p| format!("{p:?}")))
        )?;
        // Settings as they are: read, never changed here.
        writeln!(
            out,
            "  modes: compute {}, accounting {}, persistence {}, MIG {}",
            show(nvml.compute_mode(i)),
            show(nvml.accounting_enabled(i).map(|b| on_off(b).to_owned())),
            show(nvml.persistence_mode(i).map(|b| on_off(b).to_owned())),
            show(
                nvml.mig_mode(i)
                    .map(|(c, p)| format!("current {c}, pending {p}"))
            )
        )?;
        if !try_lock {
            writeln!(
                out,
                "  locked clock: not tried (--try-lock sets one and resets it)"
            )?;
        }
        if try_lock {
            let target = clocks
                .ok()
                .and_then(|c| c.get(c.len() / 2).copied())
                .unwrap_or(Mhz(0));
            match nvml.lock_clock(i, target) {
                Ok(()) => {
                    std::thread::sleep(std::time::Duration::from_millis(200));
                    let now = show(nvml.sm_clock(i).map(|m| m.to_string()));
                    let reset = nvml.reset_clock(i);
                    writeln!(
                        out,
                        "  locked clock {target}: set (SM clock then {now}); reset: {}",
                        match reset {
                            Ok(()) => "ok".to_owned(),
                            Err(e) => format!("FAILED: {e}"),
                        }
                    )?;
                }
                Err(e) => writeln!(out, "  locked clock {target}: refused: {e}")?,
            }
        }
    }
    Ok(())
}
