//! `heshare profiles update|list|show|forget`: the profile store for admins. `update` is what a
//! timer runs on the controller (`slurm-conf/heshare-profiles.{service,timer}`); the plugin
//! reloads the store when it changes.

use super::{ConfigArg, Exit, load_config};
use crate::config::Config;
use crate::profile::store::{self, StoreFile};
use crate::profile::{Asked, ProfileKey, derive};
use anyhow::{Context, Result, anyhow};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(clap::Subcommand, Debug)]
pub enum ProfilesCommand {
    /// File what the accounting logs gained since the last update ([profiles] logs) and replace
    /// the store atomically.
    Update {
        #[command(flatten)]
        config: ConfigArg,
        /// The store [default: [profiles] store].
        #[arg(long, value_name = "FILE")]
        store: Option<PathBuf>,
    },
    /// One line per profile: key, runs, GPU types, last run.
    List {
        #[command(flatten)]
        config: ConfigArg,
        #[arg(long, value_name = "FILE")]
        store: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// A profile's runs per GPU type and the class it decides with.
    Show {
        #[command(flatten)]
        config: ConfigArg,
        #[arg(long, value_name = "FILE")]
        store: Option<PathBuf>,
        key: String,
    },
    /// Drop a profile (its next runs start it again).
    Forget {
        #[command(flatten)]
        config: ConfigArg,
        #[arg(long, value_name = "FILE")]
        store: Option<PathBuf>,
        key: String,
    },
}

fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn open(cfg: &Config, store: Option<&Path>) -> Result<(PathBuf, StoreFile)> {
    let path = store.map_or_else(|| cfg.profiles.store.clone(), Path::to_owned);
    let file = store::load(&path)?.ok_or_else(|| {
        anyhow!(
            "{}: no profile store yet (`heshare profiles update` makes it)",
            path.display()
        )
    })?;
    Ok((path, file))
}

/// A profile key as `heshare profiles list` prints it.
fn parse_key(key: &str) -> Result<ProfileKey> {
    ProfileKey::parse(key)
        .with_context(|| format!("\"{key}\" is not a profile key (LEVEL:OWNER:REST)"))
}

/// What profile `key` in the store (`store`, else `[profiles] store`) says of a job labelled
/// `label` (a catalog class, if any) asking for a share or not, as the plugin derives it now.
pub fn learned_for(
    cfg: &Config,
    store: Option<&Path>,
    key: &str,
    label: Option<&str>,
    share: bool,
) -> Result<crate::profile::Learned> {
    let (path, f) = open(cfg, store)?;
    let k = parse_key(key).context("--profile")?;
    let label = match label {
        Some(l) => Some(
            cfg.class(l)
                .ok_or_else(|| anyhow!("--class: unknown class \"{l}\""))?,
        ),
        None => None,
    };
    crate::profile::lookup(
        cfg,
        &f.book,
        std::slice::from_ref(&k),
        Asked { label, share },
        now_s(),
        cfg.profiles.derive_settings(),
    )
    .ok_or_else(|| {
        anyhow!(
            "--profile: {} has no profile {key} that decides (too few runs, or runs too unlike \
             to be one job: `heshare profiles show {key}`)",
            path.display()
        )
    })
}

/// Writes the jobs' energy notes to slurmdbd (`slurm::dbd`), where the cluster has one; what it
/// did, in lines for the update's output.
fn energy_notes(store: &mut StoreFile, now: f64) -> Vec<String> {
    use crate::slurm::dbd::{self, Accounting};
    // The admin's SLURM_CONF names the cluster, as for any Slurm client; only an absolute path.
    let slurm_conf = std::env::var_os("SLURM_CONF")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute());
    match Accounting::detect(slurm_conf) {
        Ok(Accounting::Slurmdbd(d)) => {
            store.accounting_storage = Some("accounting_storage/slurmdbd".into());
            let p = dbd::publish(&d, &mut store.energy, now);
            let mut lines = vec![format!(
                "energy notes in slurmdbd: {} written, {} already there, {} waiting for their job \
                 to finish in slurmdbd",
                p.written, p.unchanged, p.waiting
            )];
            for (job, why) in &p.refused {
                lines.push(format!(
                    "energy note not written for job {job}: its AdminComment could not be \
                     stored as written ({why}); its energy is in `heshare report`"
                ));
            }
            if !p.given_up.is_empty() {
                lines.push(format!(
                    "energy notes given up after {} days without slurmdbd taking them: jobs {}",
                    dbd::GIVE_UP_S / 86_400.0,
                    p.given_up.join(",")
                ));
            }
            if let Some(e) = p.stopped {
                lines.push(format!(
                    "energy notes stopped, the rest wait for the next update: {e}"
                ));
            }
            lines
        }
        Ok(Accounting::None(kind)) => {
            store.energy.clear();
            let first = store.accounting_storage.as_deref() != Some(kind.as_str());
            store.accounting_storage = Some(kind.clone());
            if first {
                vec![format!(
                    "energy notes: this cluster has no slurmdbd (AccountingStorageType={kind}), \
                     so jobs' energy stays in heshare's records and `heshare report` (said once)"
                )]
            } else {
                Vec::new()
            }
        }
        Err(e) => {
            store.energy.retain(|_, j| now - j.end_s < dbd::GIVE_UP_S);
            vec![format!(
                "energy notes wait for the next update: cannot ask slurmctld about accounting: {e}"
            )]
        }
    }
}

pub fn run(out: &mut impl Write, cmd: &ProfilesCommand) -> Result<()> {
    match cmd {
        ProfilesCommand::Update { config, store } => {
            let (cfg, _) = load_config(&config.config)?;
            let path = store.clone().unwrap_or_else(|| cfg.profiles.store.clone());
            // A test hook, as the node helper's: killed between writing and renaming.
            let kill = std::env::var("HESHARE_TEST_KILL_AT").ok();
            let before_rename = || {
                if kill.as_deref() == Some("profiles:written") {
                    // SAFETY: raise() sends a signal to this process; SIGKILL cannot be caught.
                    unsafe {
                        libc::raise(libc::SIGKILL);
                    }
                }
            };
            let now = now_s();
            let mut said = Vec::new();
            let mut notes = |store: &mut StoreFile| said = energy_notes(store, now);
            let r = store::update_with(&cfg, &path, now, &before_rename, Some(&mut notes))?;
            let skipped: Vec<String> = r.skipped.iter().map(|(w, n)| format!("{n} {w}")).collect();
            writeln!(
                out,
                "{}: {} logs, {} records, {} runs taught, {} profiles{}{}",
                path.display(),
                r.logs,
                r.records,
                r.taught,
                r.profiles,
                if skipped.is_empty() {
                    String::new()
                } else {
                    format!("; skipped: {}", skipped.join(", "))
                },
                if r.foreign > 0 {
                    format!("; {} keys of another user or account refused", r.foreign)
                } else {
                    String::new()
                },
            )?;
            for line in &said {
                writeln!(out, "{line}")?;
            }
            if r.unreadable_count > 0 {
                eprintln!(
                    "heshare: {} lines were not records, e.g. {}",
                    r.unreadable_count,
                    r.unreadable.join("; ")
                );
            }
            Ok(())
        }
        ProfilesCommand::List {
            config,
            store,
            json,
        } => {
            let (cfg, _) = load_config(&config.config)?;
            let (_, f) = open(&cfg, store.as_deref())?;
            if *json {
                let rows: Vec<serde_json::Value> = f
                    .book
                    .profiles
                    .iter()
                    .map(|(k, p)| {
                        serde_json::json!({
                            "key": k,
                            "runs": p.runs(),
                            "gpu_types": p.types.keys().collect::<Vec<_>>(),
                            "last_s": p.last_s,
                        })
                    })
                    .collect();
                writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
                return Ok(());
            }
            writeln!(
                out,
                "{:<56} {:>6}  {:<24} last run",
                "key", "runs", "gpu types"
            )?;
            let now = now_s();
            for (k, p) in &f.book.profiles {
                let types: Vec<&str> = p.types.keys().map(String::as_str).collect();
                writeln!(
                    out,
                    "{k:<56} {:>6}  {:<24} {:.1} d ago",
                    p.runs(),
                    types.join(","),
                    (now - p.last_s).max(0.0) / 86_400.0
                )?;
            }
            Ok(())
        }
        ProfilesCommand::Show { config, store, key } => {
            let (cfg, _) = load_config(&config.config)?;
            let (_, f) = open(&cfg, store.as_deref())?;
            let k = parse_key(key)?;
            let Some(p) = f.book.get(&k) else {
                eprintln!("heshare: no profile {key}");
                return Err(Exit(1).into());
            };
            writeln!(out, "{key}: {} runs", p.runs())?;
            writeln!(
                out,
                "  {:<10} {:>5} {:>5} {:>12} {:>12} {:>9} {:>7} {:>6}",
                "gpu type",
                "runs",
                "kept",
                "runtime p50",
                "runtime p90",
                "dyn power",
                "busy",
                "filled"
            )?;
            let mut throttled = 0;
            for (t, runs) in &p.types {
                let v = |f: &dyn Fn(&crate::profile::Sample) -> Option<f64>, q: f64| {
                    let x: Vec<f64> = runs.samples.iter().filter_map(f).collect();
                    let w = vec![1.0; x.len()];
                    crate::profile::learn::weighted_quantile(&x, &w, q)
                };
                let show =
                    |x: Option<f64>, unit: &str| x.map_or("-".into(), |x| format!("{x:.2}{unit}"));
                // Runs their share (or GPU) throttled: what they measured is a floor of their
                // need, and the profile sizes it one `saturated_margin` higher.
                let filled = runs
                    .samples
                    .iter()
                    .filter(|s| {
                        s.busy.is_some_and(|b| {
                            crate::profile::learn::filled_its_share(b, s.share_pct)
                        })
                    })
                    .count();
                throttled += filled;
                writeln!(
                    out,
                    "  {t:<10} {:>5} {:>5} {:>12} {:>12} {:>9} {:>7} {:>6}{}",
                    runs.runs,
                    runs.samples.len(),
                    show(v(&|s| Some(s.runtime_s), 0.5), " s"),
                    show(v(&|s| Some(s.runtime_s), 0.9), " s"),
                    show(v(&|s| s.dyn_frac, 0.5), ""),
                    show(v(&|s| s.busy, 0.5), ""),
                    filled,
                    if runs.limit_kills.is_empty() {
                        String::new()
                    } else {
                        format!("  ({} killed at the limit)", runs.limit_kills.len())
                    },
                )?;
            }
            if throttled > 0 {
                writeln!(
                    out,
                    "  {throttled} kept runs filled what they held (90% busy or more): throttled by their share, they measured a floor of the job's need, taken [profiles] saturated_margin above it"
                )?;
            }
            let share = k.as_str().contains("mps%3A");
            match derive(
                &cfg,
                &k,
                p,
                Asked { label: None, share },
                now_s(),
                cfg.profiles.derive_settings(),
            ) {
                Some(l) => {
                    let c = &l.class;
                    writeln!(
                        out,
                        "decides as: {} job, {:.0} s on the reference {} ({}), speed exponent {:.2}, clock-bound {:.2}, power {:.2}, demand {:.2}, {:.1} GiB",
                        l.class_family(),
                        c.reference_runtime_s,
                        cfg.gpu_types[cfg.reference_gpu].name,
                        if c.measured_speed
                            .iter()
                            .any(|(t, _)| *t == cfg.gpu_types[cfg.reference_gpu].name)
                        {
                            "measured"
                        } else {
                            "carried from the types it ran on"
                        },
                        c.speed_exponent,
                        c.clock_bound_fraction,
                        c.power_util,
                        c.demand,
                        c.memory_gib,
                    )?;
                    for (t, s) in &c.measured_speed {
                        writeln!(out, "  measured on {t}: {s:.3}x the reference type's speed")?;
                    }
                    // The spread its chance of a kill is priced with (`policy::belief`).
                    match c.runtime_log_sd {
                        Some(sd) => writeln!(
                            out,
                            "  runtime from run to run: log-sd {sd:.3} (one run in ten over {:.0}% longer than the median)",
                            ((crate::policy::belief::normal_quantile(0.9) * sd).exp() - 1.0)
                                * 100.0
                        )?,
                        None => writeln!(
                            out,
                            "  runtime from run to run: not measured (no type with two runs alone)"
                        )?,
                    }
                    for k in &c.limit_kills {
                        let t = &k.gpu_type;
                        let limit = k
                            .limit_s
                            .map_or(String::new(), |l| format!(" (limits up to {l} s)"));
                        match k.share_pct {
                            Some(s) => writeln!(
                                out,
                                "  killed at its time limit on {t} with {s}%{limit}: there a GPU of its own at the default clock while its share would be no larger"
                            )?,
                            None => writeln!(
                                out,
                                "  killed at its time limit on {t} with whole GPUs{limit}: not offered {t} to a job with no longer a limit"
                            )?,
                        }
                    }
                    match c.neighbours {
                        Some(n) => writeln!(
                            out,
                            "  beside busy neighbours: contention 1 + {:.2} x their busy share, its runs measured up to {:.0}% busy",
                            n.per_busy,
                            n.up_to_busy * 100.0
                        )?,
                        None => writeln!(
                            out,
                            "  beside busy neighbours: never measured (the kill of a share heshare sizes is priced over the catalog's measured pairs)"
                        )?,
                    }
                }
                None => writeln!(
                    out,
                    "decides nothing yet: fewer than {} runs kept",
                    cfg.profiles.min_runs
                )?,
            }
            Ok(())
        }
        ProfilesCommand::Forget { config, store, key } => {
            let (cfg, _) = load_config(&config.config)?;
            let path = store.clone().unwrap_or_else(|| cfg.profiles.store.clone());
            let _lock = store::lock(&path)?;
            let (path, mut f) = open(&cfg, Some(&path))?;
            if !f.book.forget(key) {
                eprintln!("heshare: no profile {key} in {}", path.display());
                return Err(Exit(1).into());
            }
            store::save(&path, &f, &|| {})?;
            writeln!(out, "{}: forgot {key}", path.display())?;
            Ok(())
        }
    }
}
