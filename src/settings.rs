//! Every scalar setting of `heshare.toml` defined once: its section, name, role, unit, range and
//! meaning. Its default is the one its section's `Default` gives (`config.rs`), read back here
//! through serde, so that no value is written twice. Validation checks ranges from this table,
//! `heshare settings` prints it, and `docs/configuration.md` is generated from it (a test fails
//! when the page is stale). The catalog's `[gpu.*]` and `[class.*]` entries are data, not
//! settings: `config.rs` checks them.

use std::fmt::Write as _;

/// What a setting does, so that a site sees which settings move decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// A price or a bound the decision's cost is computed with.
    Decision,
    /// A threshold rule the one cost is still to replace (kept until the scenario suite says
    /// the cost does as well without it).
    Rule,
    /// A hard limit a decision never crosses, with its reason.
    Constraint,
    /// How profiles learn from the jobs' runs (what a belief about a job rests on).
    Learning,
    /// A fact about the hardware the model predicts with.
    Model,
    /// A fact about the site's Slurm (mirrored from slurm.conf or its users' habits).
    Site,
    /// Where things are and how often they run: no effect on what is decided.
    Operation,
}

impl Role {
    pub fn label(self) -> &'static str {
        match self {
            Role::Decision => "decision",
            Role::Rule => "rule",
            Role::Constraint => "constraint",
            Role::Learning => "learning",
            Role::Model => "model",
            Role::Site => "site",
            Role::Operation => "operation",
        }
    }

    /// Whether a setting of this role changes what heshare decides for a job.
    pub fn steers(self) -> bool {
        matches!(
            self,
            Role::Decision | Role::Rule | Role::Constraint | Role::Learning
        )
    }
}

/// The values a setting accepts beyond its TOML type (which serde checks).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Range {
    /// A finite number within `min..=max`.
    Number { min: f64, max: f64 },
    /// Anything of the right type; `config.rs` checks what depends on other settings (a path
    /// that must be absolute, a name that must be in the catalog).
    Any,
}

/// One setting.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    pub section: &'static str,
    pub name: &'static str,
    pub role: Role,
    /// Unit of the value ("" for a count, a ratio or a flag).
    pub unit: &'static str,
    pub range: Range,
    pub meaning: &'static str,
}

impl Setting {
    pub fn key(&self) -> String {
        format!("{}.{}", self.section, self.name)
    }
}

const fn num(min: f64, max: f64) -> Range {
    Range::Number { min, max }
}

use Role::{Constraint, Decision, Learning, Model, Operation, Rule, Site};

/// Every setting, section by section, in the order the reference page lists them.
pub const SETTINGS: &[Setting] = &[
    // [policy]
    Setting {
        section: "policy",
        name: "time_value_kwh_per_gpu_hour",
        role: Decision,
        unit: "kWh per GPU-hour",
        range: num(0.0, 1000.0),
        meaning: "What an hour of a job's completion time is worth in facility energy, per GPU \
                  the job asks for (a share asks for one). Every option's cost is its facility \
                  energy plus its completion time and the delay it imposes on waiting work at this \
                  rate. The default argues from owning a GPU (about $15,000 with its part of the \
                  server over five years, $0.34 an hour) against industrial electricity (about \
                  $0.11 a kWh).",
    },
    Setting {
        section: "policy",
        name: "slowdown_bound",
        role: Decision,
        unit: "x runtime alone",
        range: num(1.0, 100.0),
        meaning: "A job may run at most this many times slower than alone on its GPU at the \
                  default clock (a class may set its own). 1 allows no slowdown.",
    },
    Setting {
        section: "policy",
        name: "mps_share_step_pct",
        role: Constraint,
        unit: "% of a GPU",
        range: num(1.0, 50.0),
        meaning: "MPS shares heshare sizes are multiples of this.",
    },
    Setting {
        section: "policy",
        name: "allow_cross_user_sharing",
        role: Constraint,
        unit: "",
        range: Range::Any,
        meaning: "Whether jobs of different users may share one GPU. MPS serves one user per GPU \
                  at a time, so the model time-slices them when this is on.",
    },
    Setting {
        section: "policy",
        name: "max_jobs_per_gpu",
        role: Constraint,
        unit: "jobs",
        range: num(1.0, 48.0),
        meaning: "At most this many jobs share one GPU (MPS serves at most 48 clients per GPU).",
    },
    Setting {
        section: "policy",
        name: "resize_asked_shares",
        role: Constraint,
        unit: "",
        range: Range::Any,
        meaning: "Whether heshare may give a batch job's explicit `--gres=mps:P` on one GPU another \
                  share or a whole GPU, where its profile prices that option lowest. Off, a \
                  user's request is kept as asked. On, Slurm accounts a whole GPU as gres/gpu \
                  and the job's own `srun --gres=mps:Q` steps fail, so a job whose script \
                  launches steps that ask for GRES is never resized.",
    },
    Setting {
        section: "policy",
        name: "priority_range",
        role: Constraint,
        unit: "priority points",
        range: num(0.0, 1_000_000.0),
        meaning: "heshare's site factor stays within plus or minus this (Slurm's job priority \
                  units). Read as `nice_range` too, its older name.",
    },
    Setting {
        section: "policy",
        name: "limit_type",
        role: Site,
        unit: "",
        range: Range::Any,
        meaning: "The GPU type users write their time limits for: `slowest` (the slowest type a \
                  job's request allows) or a catalog type. heshare never offers a type, share or \
                  clock on which a job's predicted runtime exceeds its limit so read.",
    },
    Setting {
        section: "policy",
        name: "reference_gpu",
        role: Model,
        unit: "",
        range: Range::Any,
        meaning: "The catalog type on which the job classes' runtimes and demands are measured \
                  (required).",
    },
    Setting {
        section: "policy",
        name: "contention_kappa",
        role: Model,
        unit: "slowdown per busy share",
        range: num(0.0, 10.0),
        meaning: "Slowdown a job suffers per unit of memory-intensive busy time of its co-located \
                  jobs.",
    },
    Setting {
        section: "policy",
        name: "time_slice_efficiency",
        role: Model,
        unit: "",
        range: num(0.05, 1.0),
        meaning: "Of the GPU time several users' contexts share by time-slicing, the part that \
                  does work.",
    },
    Setting {
        section: "policy",
        name: "offer_margin",
        role: Rule,
        unit: "score points of 100",
        range: num(0.0, 100.0),
        meaning: "Other GPU types whose best option scores within this many points of the best \
                  one's are offered to Slurm too, so the job starts on whichever frees first; 0 \
                  offers one type. To be replaced by the cost's own noise.",
    },
    Setting {
        section: "policy",
        name: "demand_margin",
        role: Rule,
        unit: "fraction of the demand",
        range: num(0.0, 3.0),
        meaning: "Shares and clocks are sized for an inference class's demand times (1 + this): \
                  the upper end of what a job of the class may need. To be replaced by the \
                  spread of the belief about the job.",
    },
    // [profiles]
    Setting {
        section: "profiles",
        name: "enabled",
        role: Learning,
        unit: "",
        range: Range::Any,
        meaning: "Decide jobs by their profiles (false: every job as without a store).",
    },
    Setting {
        section: "profiles",
        name: "store",
        role: Operation,
        unit: "path",
        range: Range::Any,
        meaning: "The store `heshare profiles update` writes and the plugin reads (absolute).",
    },
    Setting {
        section: "profiles",
        name: "logs",
        role: Operation,
        unit: "paths",
        range: Range::Any,
        meaning: "The accounting logs the update reads: absolute paths, with `*` in the file name \
                  for one log per node in a shared directory.",
    },
    Setting {
        section: "profiles",
        name: "min_runs",
        role: Learning,
        unit: "runs",
        range: num(1.0, 1000.0),
        meaning: "Runs a profile keeps before it decides.",
    },
    Setting {
        section: "profiles",
        name: "quantile",
        role: Learning,
        unit: "",
        range: num(0.5, 1.0),
        meaning: "The quantile of a job's runs its runtime and need are taken at, and its time \
                  limit held at where its runs say the limit does not cover the run alone on the \
                  type `limit_type` names (on a type its runs never measured, of the belief \
                  widened by the catalog's spread of speed exponents).",
    },
    Setting {
        section: "profiles",
        name: "half_life_days",
        role: Learning,
        unit: "days",
        range: num(0.01, 3650.0),
        meaning: "Runs count half as much every this many days.",
    },
    Setting {
        section: "profiles",
        name: "max_samples",
        role: Learning,
        unit: "runs",
        range: num(1.0, 1024.0),
        meaning: "Runs kept per key and GPU type (the newest).",
    },
    Setting {
        section: "profiles",
        name: "disagree_factor",
        role: Learning,
        unit: "x",
        range: num(1.0, 100.0),
        meaning: "A label whose class predicts the job's measured power off by more than this \
                  factor is set aside for the profile.",
    },
    Setting {
        section: "profiles",
        name: "max_spread",
        role: Learning,
        unit: "x (p90 / p10)",
        range: num(1.0, 1000.0),
        meaning: "Runs of one key on one type spread wider than this are different jobs: the \
                  profile does not decide.",
    },
    Setting {
        section: "profiles",
        name: "saturated_margin",
        role: Learning,
        unit: "fraction of the need",
        range: num(0.0, 10.0),
        meaning: "A service whose run filled its share may have needed more: its need is taken \
                  this much above what it measured.",
    },
    // [power]
    Setting {
        section: "power",
        name: "resume_s",
        role: Site,
        unit: "s",
        range: num(0.0, 86_400.0),
        meaning: "Seconds a powered-down node takes to boot and rejoin (a job Slurm starts on one \
                  waits this long).",
    },
    Setting {
        section: "power",
        name: "suspend_time_s",
        role: Site,
        unit: "s",
        range: num(0.0, 31_536_000.0),
        meaning: "slurm.conf's `SuspendTime`: a node a job wakes stays on this long after the job \
                  ends. Unset: power saving off, no node ever sleeps.",
    },
    // [live]
    Setting {
        section: "live",
        name: "snapshot_period_s",
        role: Operation,
        unit: "s",
        range: num(1.0, 3600.0),
        meaning: "How often the snapshot thread in slurmctld reads the node and job tables.",
    },
    Setting {
        section: "live",
        name: "snapshot_max_age_s",
        role: Operation,
        unit: "s",
        range: num(1.0, 86_400.0),
        meaning: "A snapshot older than this (and never less than `snapshot_period_s`) is not \
                  trusted: decisions fall back to one idle GPU per type and say so.",
    },
    Setting {
        section: "live",
        name: "reroute_pending",
        role: Operation,
        unit: "",
        range: Range::Any,
        meaning: "Re-decide pending jobs heshare placed on each new snapshot, and move those whose \
                  offer changed.",
    },
    Setting {
        section: "live",
        name: "reroute_max_jobs",
        role: Operation,
        unit: "jobs",
        range: num(0.0, 100_000.0),
        meaning: "At most this many pending jobs are re-decided per snapshot, in Slurm's priority \
                  order.",
    },
    Setting {
        section: "live",
        name: "status_log_period_s",
        role: Operation,
        unit: "s",
        range: num(1.0, 86_400.0),
        meaning: "How often the snapshot thread writes its status line to slurmctld's log.",
    },
    // [node]
    Setting {
        section: "node",
        name: "backend",
        role: Operation,
        unit: "",
        range: Range::Any,
        meaning: "`auto` (NVML when it initialises, else the model with a warning), `nvml`, or \
                  `model` (the power model drives clocks and energy: for machines without an \
                  NVIDIA driver; every record says so).",
    },
    Setting {
        section: "node",
        name: "state_dir",
        role: Operation,
        unit: "path",
        range: Range::Any,
        meaning: "Per-node state (who shares which GPU), one subdirectory per Slurm node name.",
    },
    Setting {
        section: "node",
        name: "accounting_log",
        role: Operation,
        unit: "path",
        range: Range::Any,
        meaning: "One JSON line per finished job (and per closed idle interval).",
    },
    Setting {
        section: "node",
        name: "mps_control",
        role: Operation,
        unit: "path",
        range: Range::Any,
        meaning: "The MPS control program: run as root, so it and its directories must be \
                  root-owned and writable by no one else (checked before use).",
    },
    Setting {
        section: "node",
        name: "mps_pipe_dir",
        role: Operation,
        unit: "path",
        range: Range::Any,
        meaning: "MPS pipe directories, one subdirectory per node and GPU index.",
    },
    Setting {
        section: "node",
        name: "mps_log_dir",
        role: Operation,
        unit: "path",
        range: Range::Any,
        meaning: "MPS log directories, one subdirectory per node and GPU index.",
    },
    Setting {
        section: "node",
        name: "command_timeout_s",
        role: Operation,
        unit: "s",
        range: num(0.1, 600.0),
        meaning: "Slurm has no Prolog timeout by default: the helper gives up on a hung command \
                  after this long.",
    },
    Setting {
        section: "node",
        name: "gpu_type",
        role: Operation,
        unit: "",
        range: Range::Any,
        meaning: "The catalog type of this node's GPUs where NVML's device name matches no catalog \
                  name or alias.",
    },
    Setting {
        section: "node",
        name: "node_gpu_types",
        role: Operation,
        unit: "",
        range: Range::Any,
        meaning: "The same, per Slurm node name, for one file shared by nodes of several types.",
    },
    Setting {
        section: "node",
        name: "other_user_share",
        role: Operation,
        unit: "",
        range: Range::Any,
        meaning: "An MPS share that lands beside another user's MPS server: `time-slice` (run it \
                  outside MPS at once) or `wait` (for that user's jobs to end).",
    },
    Setting {
        section: "node",
        name: "gpu_settings",
        role: Operation,
        unit: "",
        range: Range::Any,
        meaning: "`manage` (lock the clock the optimizer picks, reset it when the GPU empties, \
                  turn NVML accounting on) or `read-only` (change nothing on the GPU; the clock \
                  is only logged).",
    },
    Setting {
        section: "node",
        name: "mps_library_path",
        role: Operation,
        unit: "paths",
        range: Range::Any,
        meaning: "Directories given to the MPS control daemon as its `LD_LIBRARY_PATH` \
                  (absolute, root-owned, checked before every use). Empty: none.",
    },
];

/// A setting's value (`section`, `name`) where a file sets it to a number, with the way the file
/// wrote it.
pub type NumberLookup<'a> = dyn Fn(&str, &str) -> Option<(f64, String)> + 'a;

/// Range problems of a parsed file, as `(field, message)`: a number outside its setting's range.
/// `number(section, name)` gives a setting's value where the file sets it to a number, with the
/// way the file wrote it. Types are serde's to check, and cross-references `config.rs`'s.
pub fn out_of_range(number: &NumberLookup<'_>) -> Vec<(String, String)> {
    let mut errs = Vec::new();
    for s in SETTINGS {
        let Range::Number { min, max } = s.range else {
            continue;
        };
        let Some((x, written)) = number(s.section, s.name) else {
            continue;
        };
        if !(x.is_finite() && x >= min && x <= max) {
            let unit = match s.unit {
                "" | "x" => String::new(),
                u => format!(" ({u})"),
            };
            errs.push((s.key(), format!("{written} is outside {min}..={max}{unit}")));
        }
    }
    errs
}

/// `out_of_range`'s lookup on a `toml::Table` (the tests' files; `config` reads its own
/// `toml_edit` document).
#[cfg(test)]
pub fn number_in(doc: &toml::Table) -> impl Fn(&str, &str) -> Option<(f64, String)> + '_ {
    move |section, name| {
        #[allow(clippy::cast_precision_loss)]
        match doc.get(section).and_then(|t| t.get(name))? {
            v @ toml::Value::Float(f) => Some((*f, v.to_string())),
            v @ toml::Value::Integer(i) => Some((*i as f64, v.to_string())),
            _ => None,
        }
    }
}

/// The reference page: every setting with its role, unit, default, range and meaning.
/// `defaults` gives a setting's default as the page shows it (its TOML text in backticks, or
/// words where it has none).
pub fn markdown(defaults: &dyn Fn(&Setting) -> String) -> String {
    let mut out = String::from(
        "# heshare.toml settings\n\n\
         Generated from `src/settings.rs` by `heshare settings`; a test fails when this page is \
         stale. Roles: *decision* (a price or bound the cost uses), *rule* (a threshold the one \
         cost is still to replace), *constraint* (a limit never crossed), *learning* (how \
         profiles learn), *model* (hardware facts), *site* (mirrors slurm.conf), *operation* \
         (no effect on decisions). The GPU catalog (`[gpu.NAME]`) and the job classes \
         (`[class.NAME]`) are data, described in `slurm-conf/heshare.toml`.\n\n",
    );
    let steering: Vec<&Setting> = SETTINGS.iter().filter(|s| s.role.steers()).collect();
    let _ = writeln!(
        out,
        "{} settings change what heshare decides for a job: {}.\n",
        steering.len(),
        steering
            .iter()
            .map(|s| format!("`{}`", s.key()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut section = "";
    for s in SETTINGS {
        if s.section != section {
            section = s.section;
            let _ = writeln!(out, "## [{section}]\n");
            let _ = writeln!(out, "| setting | role | unit | default | range |");
            let _ = writeln!(out, "|---|---|---|---|---|");
            for t in SETTINGS.iter().filter(|t| t.section == section) {
                let range = match t.range {
                    Range::Number { min, max } => format!("{min} to {max}"),
                    Range::Any => String::new(),
                };
                let _ = writeln!(
                    out,
                    "| `{}` | {} | {} | {} | {} |",
                    t.name,
                    t.role.label(),
                    t.unit,
                    defaults(t),
                    range
                );
            }
            out.push('\n');
            for t in SETTINGS.iter().filter(|t| t.section == section) {
                let _ = writeln!(out, "- `{}`: {}", t.name, t.meaning);
            }
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_is_listed_once_with_a_range_that_holds_something() {
        let mut keys: Vec<String> = SETTINGS.iter().map(Setting::key).collect();
        let n = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), n, "a setting is listed twice");
        for s in SETTINGS {
            if let Range::Number { min, max } = s.range {
                assert!(min <= max, "{}", s.key());
            }
            assert!(s.meaning.ends_with('.'), "{}: a sentence", s.key());
        }
    }

    #[test]
    fn a_number_out_of_range_is_named_with_its_range_and_unit() {
        let doc: toml::Table = toml::from_str(
            "[policy]\nslowdown_bound = 0.5\nmax_jobs_per_gpu = 8\n[live]\nsnapshot_period_s = 0\n",
        )
        .expect("toml");
        let errs = out_of_range(&number_in(&doc));
        assert_eq!(
            errs,
            [
                (
                    "policy.slowdown_bound".to_owned(),
                    "0.5 is outside 1..=100 (x runtime alone)".to_owned()
                ),
                (
                    "live.snapshot_period_s".to_owned(),
                    "0 is outside 1..=3600 (s)".to_owned()
                ),
            ]
        );
    }
}
