//! The command line: flags are parsed into clap structs, turned into validated library inputs,
//! and the results printed as tables or JSON. `anyhow` lives here only.
//!
//! Exit codes: 0 success; 1 the command ran but its answer is "no" (config invalid, no GPU can
//! run the job); 2 bad usage or unreadable input.

use crate::config::{Config, LoadError, check_slurm_gres};
use crate::policy::{ClusterView, EnergyPolicy, JobRequest, Plan, ShareRequest, place};
use crate::units::{Joules, Seconds};
use anyhow::{Context, Result, anyhow};
use clap::{Parser, Subcommand, ValueEnum};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

mod bench;
mod node;
mod profiles;
mod report;
mod simulate;
mod simulate_suite;
mod simulate_time;

/// The configuration shipped in the repository, used when no other is found.
pub use crate::config::BUNDLED_CONFIG;
const BUNDLED_NAME: &str = "slurm-conf/heshare.toml (bundled)";
/// Where an installed cluster keeps its configuration ($HESHARE_SYSTEM_CONFIG overrides it, so
/// tests on a machine with heshare installed still see the bundled default).
const SYSTEM_CONFIG: &str = "/etc/slurm/heshare.toml";

#[derive(Parser, Debug)]
#[command(
    name = "heshare",
    version,
    about = "Energy-aware, heterogeneity-aware GPU sharing for Slurm"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Validate heshare.toml (and optionally a slurm.conf's Gres= lines against its catalog).
    CheckConfig {
        #[command(flatten)]
        config: ConfigArg,
        /// A slurm.conf whose Gres=gpu:TYPE:N entries must name catalog types.
        #[arg(long, value_name = "FILE")]
        slurm_conf: Option<PathBuf>,
    },
    /// Print the reference of every heshare.toml setting (role, unit, default, range, meaning),
    /// as docs/configuration.md has it.
    Settings,
    /// Decide where and how one job should run, and show the ranked candidates.
    Plan(PlanArgs),
    /// Measure decision latency on a cluster view the size of the Alibaba openb cluster.
    Bench(bench::BenchArgs),
    /// Replay a trace through the schedulers and compare them.
    Simulate(Box<simulate::SimulateArgs>),
    /// Slurm Prolog (as root on the compute node): join the job to its GPUs, start MPS, set the
    /// clock.
    Prolog(node::HookArgs),
    /// Slurm Epilog: account the job's GPU energy, reset or re-optimise the clock, stop MPS.
    Epilog(node::HookArgs),
    /// Slurm TaskProlog: print the MPS `export` lines a sharing job's tasks need.
    TaskProlog(node::HookArgs),
    /// Inspect or repair a node's helper state.
    #[command(subcommand)]
    Node(node::NodeCommand),
    /// Energy accounting tables, CSV/JSON, an SVG chart and a Prometheus textfile.
    Report(report::ReportArgs),
    /// Profiles learned from the accounting records: update the store, list, show, forget.
    #[command(subcommand)]
    Profiles(profiles::ProfilesCommand),
    /// Internal to `profiles update`: set a finished job's AdminComment in slurmdbd to the text
    /// on standard input through libslurm (exit 0: set; 3: no such job).
    #[command(hide = true)]
    DbdAdminComment {
        #[arg(long)]
        cluster: String,
        #[arg(long)]
        job: u32,
    },
}

#[derive(clap::Args, Debug)]
struct ConfigArg {
    /// heshare.toml to use [default: $HESHARE_CONFIG, else /etc/slurm/heshare.toml, else the
    /// bundled slurm-conf/heshare.toml].
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct PlanArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Job class from the config (e.g. bert-train).
    #[arg(long, required_unless_present_any = ["job", "profile"], conflicts_with = "job")]
    class: Option<String>,
    /// Number of GPUs.
    #[arg(long, default_value_t = 1)]
    gpus: u32,
    /// auto, exclusive, or an MPS percentage 1..=100.
    #[arg(long, default_value = "auto", value_parser = ShareRequest::parse)]
    share: ShareRequest,
    /// The submitting user (jobs of different users do not share a GPU unless allowed).
    #[arg(long, default_value = "")]
    user: String,
    /// Allowed GPU types, comma separated (catalog names or aliases).
    #[arg(long, value_delimiter = ',')]
    gpu_types: Vec<String>,
    /// performance (time first), balanced (the site's time value) or energy (energy first).
    #[arg(long, value_enum)]
    energy_policy: Option<EnergyPolicyArg>,
    /// The job's time limit in seconds (as `sbatch -t`).
    #[arg(long, value_name = "SECS", value_parser = parse_limit)]
    time_limit: Option<f64>,
    /// Decide the job as its profile in the store says (a key as `heshare profiles list`
    /// prints it): its runs' runtimes, and with --time-limit the chance of a kill per option.
    #[arg(long, value_name = "KEY", conflicts_with = "job")]
    profile: Option<String>,
    /// The profile store [default: [profiles] store].
    #[arg(long, value_name = "FILE", requires = "profile")]
    store: Option<PathBuf>,
    /// Print each option's cost in its terms: facility energy (J), completion time (s), the
    /// delay it imposes on waiting work (s), the chance of a kill at the time limit and its
    /// expected cost (J), and the cost at the job's exchange rate (J).
    #[arg(long)]
    explain: bool,
    /// The job as JSON instead of flags ("-" for standard input).
    #[arg(long, value_name = "FILE")]
    job: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq)]
enum Format {
    Table,
    Json,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum EnergyPolicyArg {
    Performance,
    Balanced,
    Energy,
}

impl From<EnergyPolicyArg> for EnergyPolicy {
    fn from(a: EnergyPolicyArg) -> EnergyPolicy {
        match a {
            EnergyPolicyArg::Performance => EnergyPolicy::Performance,
            EnergyPolicyArg::Balanced => EnergyPolicy::Balanced,
            EnergyPolicyArg::Energy => EnergyPolicy::Energy,
        }
    }
}

/// An error that already printed what it had to say and only carries the exit code.
#[derive(Debug)]
struct Exit(u8);

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit {}", self.0)
    }
}
impl std::error::Error for Exit {}

pub fn main() -> ExitCode {
    // slurm.conf's Prolog=, Epilog= and TaskProlog= take a program without arguments: the
    // installed links heshare-prolog, heshare-epilog and heshare-task-prolog name the hook.
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let hook = args
        .first()
        .and_then(|a| Path::new(a).file_name())
        .and_then(|n| n.to_str())
        .and_then(|n| match n {
            "heshare-prolog" => Some("prolog"),
            "heshare-epilog" => Some("epilog"),
            "heshare-task-prolog" => Some("task-prolog"),
            _ => None,
        });
    if let Some(h) = hook {
        args.insert(1, h.into());
    }
    let cli = Cli::parse_from(args);
    crate::logging::install_stderr();
    let mut out = std::io::stdout().lock();
    let result = match cli.command {
        Command::CheckConfig { config, slurm_conf } => {
            check_config(&mut out, &config, slurm_conf.as_deref())
        }
        Command::Settings => out
            .write_all(crate::config::settings_reference().as_bytes())
            .map_err(Into::into),
        Command::Plan(args) => plan(&mut out, &args),
        Command::Bench(args) => {
            load_config(&args.config.config).and_then(|(cfg, _)| bench::run(&mut out, &cfg, &args))
        }
        Command::Simulate(args) => load_config(&args.config.config)
            .and_then(|(cfg, _)| simulate::run(&mut out, &cfg, &args)),
        Command::Prolog(args) => node::hook(&args, node::Hook::Prolog),
        Command::Epilog(args) => node::hook(&args, node::Hook::Epilog),
        Command::TaskProlog(args) => node::task_prolog(&mut out, &args),
        Command::Node(cmd) => node::node(&mut out, &cmd),
        Command::Report(args) => report::run(&mut out, &args),
        Command::Profiles(cmd) => profiles::run(&mut out, &cmd),
        Command::DbdAdminComment { cluster, job } => dbd_admin_comment(&cluster, job),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(Exit(code)) = e.downcast_ref::<Exit>() {
                return ExitCode::from(*code);
            }
            // A closed pipe (`heshare plan | head`) is not a failure.
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            eprintln!("heshare: {e:#}");
            ExitCode::from(if e.downcast_ref::<LoadError>().is_some() {
                1
            } else {
                2
            })
        }
    }
}

/// Finds and loads the configuration; returns it with a label saying where it came from.
fn load_config(explicit: &Option<PathBuf>) -> Result<(Config, String)> {
    let from_env = std::env::var_os("HESHARE_CONFIG").map(PathBuf::from);
    let path = explicit.clone().or(from_env).or_else(|| {
        let p = std::env::var_os("HESHARE_SYSTEM_CONFIG")
            .map_or_else(|| PathBuf::from(SYSTEM_CONFIG), PathBuf::from);
        p.exists().then_some(p)
    });
    match path {
        Some(p) => {
            let cfg = Config::load(&p)?;
            Ok((cfg, p.display().to_string()))
        }
        None => Ok((
            Config::parse(BUNDLED_CONFIG, Path::new(BUNDLED_NAME))?,
            BUNDLED_NAME.to_owned(),
        )),
    }
}

/// The text of `path`, or of the bundled file when none is given, with a label for messages.
fn read_or_bundled(
    path: Option<&Path>,
    bundled: &str,
    bundled_label: &str,
) -> Result<(String, String)> {
    match path {
        Some(p) => Ok((
            std::fs::read_to_string(p).with_context(|| format!("{}: cannot read", p.display()))?,
            p.display().to_string(),
        )),
        None => Ok((bundled.to_owned(), bundled_label.to_owned())),
    }
}

fn check_config(out: &mut impl Write, arg: &ConfigArg, slurm_conf: Option<&Path>) -> Result<()> {
    let (cfg, label) = match load_config(&arg.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return Err(Exit(1).into());
        }
    };
    writeln!(
        out,
        "{label}: ok: {} GPU types ({}), {} job classes, reference {}",
        cfg.gpu_types.len(),
        cfg.gpu_type_names(),
        cfg.classes.len(),
        cfg.gpu_types[cfg.reference_gpu].name
    )?;
    for r in &cfg.retired {
        eprintln!("warning: {r}");
    }
    if let Some(sc) = slurm_conf {
        let text = std::fs::read_to_string(sc)
            .with_context(|| format!("{}: cannot read", sc.display()))?;
        let findings = check_slurm_gres(&text, &cfg);
        if !findings.is_empty() {
            for f in &findings {
                eprintln!("{}:{}: {}", sc.display(), f.line, f.message);
            }
            return Err(Exit(1).into());
        }
        writeln!(
            out,
            "{}: ok: every Gres=gpu type is in the catalog",
            sc.display()
        )?;
        // Warnings, not errors: heshare still works, but offers fewer choices to Slurm.
        let features = crate::config::slurm_feature_types(&text, &cfg);
        let present = crate::config::slurm_gpu_types(&text, &cfg);
        let lacking: Vec<&str> = present
            .iter()
            .filter(|&&(t, _)| !features[t])
            .map(|&(t, _)| cfg.gpu_types[t].name.as_str())
            .collect();
        if lacking.is_empty() {
            writeln!(
                out,
                "{}: ok: every GPU node carries its GPU type as a feature",
                sc.display()
            )?;
        } else {
            eprintln!(
                "{}: warning: nodes with {} GPUs do not all carry the type as a feature (Features=TYPE) or mix GPU types; heshare offers jobs those types one at a time instead of letting Slurm start them on whichever acceptable type frees first",
                sc.display(),
                lacking.join(", ")
            );
        }
        match crate::config::priority_warning(&text, &cfg) {
            Some(w) => eprintln!("{}: warning: {w}", sc.display()),
            None if cfg.policy.priority_range > 0 => writeln!(
                out,
                "{}: ok: PriorityType=priority/multifactor adds heshare's site factor (within +-{})",
                sc.display(),
                cfg.policy.priority_range
            )?,
            None => {}
        }
        if let Some(w) = crate::config::power_warning(&text, &cfg) {
            eprintln!("{}: warning: {w}", sc.display());
        }
        let gres_conf = sc.with_file_name("gres.conf");
        if let Ok(g) = std::fs::read_to_string(&gres_conf) {
            if crate::config::gres_conf_all_sharing(&g) == Some(false) {
                eprintln!(
                    "{}: warning: gres/mps without Flags=all_sharing (one_sharing, Slurm's default): once one MPS job runs on a node every later MPS job must use that same GPU, so shares wait beside idle GPUs; add Flags=all_sharing to the Name=mps lines",
                    gres_conf.display()
                );
            }
        }
    }
    Ok(())
}

fn read_job(path: &Path) -> Result<JobRequest> {
    let (text, label) = if path == Path::new("-") {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .context("reading the job from standard input")?;
        (s, "<stdin>".to_owned())
    } else {
        (
            std::fs::read_to_string(path)
                .with_context(|| format!("{}: cannot read", path.display()))?,
            path.display().to_string(),
        )
    };
    serde_json::from_str(&text).map_err(|e| anyhow!("{label}:{}:{}: {e}", e.line(), e.column()))
}

fn plan(out: &mut impl Write, args: &PlanArgs) -> Result<()> {
    let (cfg, label) = load_config(&args.config.config)?;
    let mut req = match &args.job {
        Some(p) => read_job(p)?,
        None => JobRequest {
            class: args.class.clone().unwrap_or_default(),
            gpus: args.gpus,
            share: args.share,
            user: args.user.clone(),
            gpu_types: args.gpu_types.clone(),
            energy_policy: args.energy_policy.map(Into::into),
            time_limit_s: args.time_limit,
            reference_share: None,
            demand_pct: None,
            learned: None,
        },
    };
    if let Some(key) = &args.profile {
        let learned = profiles::learned_for(
            &cfg,
            args.store.as_deref(),
            key,
            args.class.as_deref(),
            matches!(args.share, ShareRequest::Pct(_)),
        )?;
        // As the plugin names it: the user's class, else the profile's family.
        if req.class.is_empty() {
            req.class = learned.class_family().to_owned();
        }
        req.learned = Some(learned.class);
    }
    let view = ClusterView::idle_types(&cfg);
    let plan = match place(&cfg, &view, &req) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("heshare: {e}");
            return Err(Exit(1).into());
        }
    };
    match args.format {
        Format::Json => {
            writeln!(out, "{}", serde_json::to_string_pretty(&plan)?)?;
        }
        Format::Table if args.explain => print_costs(out, &plan, &label)?,
        Format::Table => print_plan(out, &plan, &label)?,
    }
    Ok(())
}

/// A time limit in seconds: positive and finite.
fn parse_limit(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("\"{s}\" is not a number of seconds above 0")),
    }
}

/// How a candidate uses its GPUs, as the plan tables print it.
fn share_label(c: &crate::policy::Candidate) -> String {
    if c.exclusive {
        format!("{}x whole", c.gpus)
    } else {
        format!("{}%", c.share_pct)
    }
}

/// `plan --explain`: every option's cost (`policy::cost`) in its terms, best first.
fn print_costs(out: &mut impl Write, plan: &Plan, label: &str) -> std::io::Result<()> {
    use crate::policy::cost;
    writeln!(out, "config: {label}")?;
    let rate = plan.decision.time_value_w.map_or_else(
        || "the job's --energy-policy ranks by one term first".to_owned(),
        |r| format!("{r:.0} J per second of time"),
    );
    writeln!(
        out,
        "cost = facility energy + {rate} x (completion time + delay imposed on waiting work) + P(kill) x (energy until the limit + the limit's time at that rate)"
    )?;
    writeln!(
        out,
        "{:>4}  {:<10} {:>10} {:>9} {:>12} {:>10} {:>10} {:>10} {:>7} {:>12} {:>12}",
        "rank",
        "gpu_type",
        "share",
        "clock",
        "energy J",
        "wait s",
        "time s",
        "delay s",
        "P(kill)",
        "kill J",
        "cost J"
    )?;
    for (i, c) in plan.candidates.iter().enumerate() {
        // A job whose limit is not known against its own runs has no kill priced ("-"), nor
        // one ranked by one term first.
        let (p_kill, kill_j) = match plan.decision.time_value_w {
            Some(rate) if c.limit_s > 0.0 => (
                format!("{:.1}%", c.kill_probability * 100.0),
                format!("{:.0}", cost::kill_j(c, cost::Exchange::Rate(rate))),
            ),
            _ => ("-".to_owned(), "-".to_owned()),
        };
        writeln!(
            out,
            "{:>4}  {:<10} {:>10} {:>5} MHz {:>12.0} {:>10.0} {:>10.0} {:>10.0} {:>7} {:>12} {:>12.0}",
            i + 1,
            c.gpu_type,
            share_label(c),
            c.sm_clock_mhz,
            cost::energy_j(c),
            c.wait_s,
            cost::time_s(c),
            c.imposed_delay_s,
            p_kill,
            kill_j,
            c.cost_j
        )?;
    }
    let d = &plan.decision;
    writeln!(out)?;
    writeln!(out, "offered: {}", d.offered.join(", "))?;
    writeln!(out, "reason:  {}", d.reason)
}

fn print_plan(out: &mut impl Write, plan: &Plan, label: &str) -> std::io::Result<()> {
    writeln!(out, "config: {label}")?;
    writeln!(
        out,
        "{:>4}  {:<10} {:>10} {:>9} {:>12} {:>12} {:>8} {:>6}",
        "rank", "gpu_type", "share", "clock", "runtime", "energy", "slowdown", "score"
    )?;
    for (i, c) in plan.candidates.iter().enumerate() {
        writeln!(
            out,
            "{:>4}  {:<10} {:>10} {:>5} MHz {:>12} {:>12} {:>7.2}x {:>6.1}",
            i + 1,
            c.gpu_type,
            share_label(c),
            c.sm_clock_mhz,
            Seconds(c.predicted_runtime_s).to_string(),
            Joules(c.predicted_energy_j).to_string(),
            c.slowdown,
            c.score
        )?;
    }
    let d = &plan.decision;
    writeln!(out)?;
    writeln!(
        out,
        "decision: {} {} at {} MHz, site factor {:+}",
        d.gpu_type,
        if d.exclusive {
            "exclusive".to_owned()
        } else {
            format!("mps:{}", d.share_pct)
        },
        d.sm_clock_mhz,
        d.site_factor
    )?;
    writeln!(out, "reason:   {}", d.reason)
}

/// `heshare dbd-admin-comment`: the child process `slurm::dbd` runs where sacctmgr would rewrite
/// the text.
fn dbd_admin_comment(cluster: &str, job: u32) -> Result<()> {
    use std::io::Read;
    let mut text = String::new();
    std::io::stdin().read_to_string(&mut text)?;
    match crate::slurm::dbd::set_through_libslurm(cluster, job, &text) {
        Ok(true) => Ok(()),
        Ok(false) => Err(anyhow::Error::new(Exit(3))),
        Err(e) => Err(anyhow::anyhow!("job {job}: {e}")),
    }
}
