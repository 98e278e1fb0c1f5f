//! `heshare.toml`: the GPU catalog, the job classes and the policy knobs, loaded and validated.
//!
//! Loading happens in two passes. Serde rejects unknown and mistyped fields (with the TOML span of
//! the offending key); `validate` then checks ranges and cross-references and turns every problem
//! into a [`ConfigError`] that names file, line and field, found again in the source with
//! `toml_edit`. The validated [`Config`] holds plain model types with no optional fields left, so
//! the pure model and policy code never re-checks them.

use crate::model::{GpuType, JobClass, JobKind};
use crate::units::{Mhz, Watts};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// The shipped `slurm-conf/heshare.toml`, built in: the default where no file is configured,
/// and the configuration tests decide with.
pub const BUNDLED_CONFIG: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/slurm-conf/heshare.toml"
));

/// One problem in a config file, located as precisely as the source allows.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    pub file: PathBuf,
    /// 1-based line; `None` when the problem is the absence of something.
    pub line: Option<usize>,
    /// Dotted key path, e.g. `gpu.a100.default_sm_clock_mhz`.
    pub field: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{l}: ", self.file.display())?,
            None => write!(f, "{}: ", self.file.display())?,
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        write!(f, "{}", self.message)
    }
}

/// Every problem found in one file; a config is either wholly valid or rejected with all of them.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}", join_errors(.0))]
    Invalid(Vec<ConfigError>),
}

fn join_errors(errs: &[ConfigError]) -> String {
    errs.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Settings an earlier heshare read and this one does not, with why: a file that still sets one
/// loads as if it did not, and `heshare check-config` (and slurmctld's log) names each one to
/// remove. A setting leaves `heshare.toml` through this list, never by making a file that
/// loaded before fail.
const RETIRED: &[(&str, &str, &str)] = &[
    (
        "policy",
        "energy_weight",
        "placement and the clock trade time for energy at [policy] time_value_kwh_per_gpu_hour",
    ),
    (
        "policy",
        "spare_energy_weight",
        "placement prices the delay an option imposes on waiting work at [policy] \
         time_value_kwh_per_gpu_hour",
    ),
    (
        "policy",
        "no_margin_backlog",
        "shares are sized with their full margins whatever the queue; the delay a share imposes \
         on waiting work is priced by placement's cost",
    ),
    (
        "policy",
        "limit_headroom",
        "a profiled job's time limit is held at the profile's quantile on every type, wider where \
         its runs did not measure the type",
    ),
    (
        "policy",
        "max_auto_share_pct",
        "an auto share or a whole GPU on an idle GPU is whichever placement's cost ranks first",
    ),
    (
        "profiles",
        "whole_first_runs",
        "a job with neither label nor profile runs as its user asked",
    ),
    (
        "profiles",
        "whole_first_runs_idle",
        "a job with neither label nor profile runs as its user asked",
    ),
    (
        "profiles",
        "first_run_margin",
        "a job with neither label nor profile runs as its user asked",
    ),
    (
        "profiles",
        "whole_share_idle",
        "whether a profiled share gets a whole GPU is placement's cost, which prices the delay \
         a whole GPU imposes on waiting work, not a count of spare GPUs",
    ),
    (
        "profiles",
        "whole_out_of_time",
        "a share its profile finishes within its time limit nowhere runs as its user asked",
    ),
    (
        "profiles",
        "whole_out_of_time_idle",
        "a share its profile finishes within its time limit nowhere runs as its user asked",
    ),
    (
        "profiles",
        "min_runtime_s",
        "every run that completed teaches, however short: its runtime and energy are the job's",
    ),
    (
        "profiles",
        "neighbour_min_busy",
        "every shared run beside busy neighbours measures their slowdown, weighed by how busy \
         they were",
    ),
    (
        "policy",
        "contention_worst",
        "the chance of a kill beside busy neighbours of a share heshare sizes is priced over the \
         catalog's measured pairs, or the job's own measured sensitivity, in the option's cost",
    ),
    (
        "profiles",
        "size_shares",
        "a profiled `--gres=mps:P` is sized by its profile exactly where [policy] \
         resize_asked_shares lets heshare resize it",
    ),
];

/// `src` (parsed as `doc`) with every [`RETIRED`] setting commented out in place (every byte kept
/// or blanked, so offsets and lines of what is left stay those of the file), and where each one
/// was, with why it is no longer read.
fn strip_retired_in(
    src: &str,
    doc: &toml_edit::ImDocument<String>,
) -> (String, Vec<(String, usize, &'static str)>) {
    let mut out = src.as_bytes().to_vec();
    let mut found = Vec::new();
    for &(section, name, why) in RETIRED {
        let Some(table) = doc.get(section).and_then(toml_edit::Item::as_table) else {
            continue;
        };
        let Some((key, item)) = table.get_key_value(name) else {
            continue;
        };
        let (Some(k), Some(v)) = (key.span(), item.as_value().and_then(toml_edit::Value::span))
        else {
            continue;
        };
        // `#` where the key starts makes its line a comment; a value running over more lines
        // (an array) is blanked there.
        out[k.start] = b'#';
        for b in &mut out[k.start + 1..v.end.min(src.len())] {
            if *b != b'\n' && *b != b'\r' {
                *b = b' ';
            }
        }
        found.push((
            format!("{section}.{name}"),
            line_of_offset(src, k.start),
            why,
        ));
    }
    found.sort_by_key(|f| f.1);
    // Only ASCII bytes were written over whole characters' bytes: a multi-byte character in a
    // blanked range becomes spaces, so the text stays UTF-8.
    (
        String::from_utf8(out).unwrap_or_else(|_| src.to_owned()),
        found,
    )
}

/// `[policy]`: how heshare decides. Each field's meaning, unit, range and role is defined once,
/// in [`crate::settings::SETTINGS`]; its default here.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyKnobs {
    pub slowdown_bound: f64,
    pub mps_share_step_pct: u8,
    pub allow_cross_user_sharing: bool,
    /// `nice_range`, its name when heshare used nice, is read as the same.
    #[serde(alias = "nice_range")]
    pub priority_range: u32,
    /// No default: `validate` requires a catalog type.
    pub reference_gpu: String,
    pub contention_kappa: f64,
    pub max_jobs_per_gpu: u8,
    pub offer_margin: f64,
    pub demand_margin: f64,
    pub limit_type: String,
    pub time_slice_efficiency: f64,
    pub time_value_kwh_per_gpu_hour: f64,
    pub resize_asked_shares: bool,
}

impl Default for PolicyKnobs {
    fn default() -> Self {
        PolicyKnobs {
            slowdown_bound: 1.25,
            mps_share_step_pct: 5,
            allow_cross_user_sharing: true,
            priority_range: 100,
            reference_gpu: String::new(),
            contention_kappa: 0.334,
            max_jobs_per_gpu: 8,
            offer_margin: 35.0,
            demand_margin: 0.15,
            limit_type: "slowest".to_owned(),
            time_slice_efficiency: 0.8,
            // See `time_value_kwh_per_gpu_hour` in `settings.rs` for the argument.
            time_value_kwh_per_gpu_hour: 3.0,
            resize_asked_shares: false,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClockRange {
    min: u32,
    max: u32,
    /// Fractional steps exist (Volta lists clocks 7.5 MHz apart, rounded down).
    step: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct GpuTypeSpec {
    #[serde(default)]
    description: String,
    #[serde(default)]
    aliases: Vec<String>,
    idle_power_w: f64,
    max_power_w: f64,
    memory_gib: f64,
    relative_throughput: f64,
    #[serde(default)]
    sm_clocks_mhz: Option<Vec<u32>>,
    #[serde(default)]
    sm_clock_range_mhz: Option<ClockRange>,
    default_sm_clock_mhz: u32,
    dvfs_static_fraction: f64,
    dvfs_exponent: f64,
    #[serde(default = "yes")]
    mps: bool,
    #[serde(default)]
    host_power_w: f64,
    #[serde(default)]
    speed_uncertainty: f64,
    #[serde(default)]
    context_power_w: Option<f64>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobClassSpec {
    kind: JobKind,
    #[serde(default)]
    description: String,
    reference_runtime_s: f64,
    speed_exponent: f64,
    clock_bound_fraction: f64,
    #[serde(default)]
    clock_knee: f64,
    power_util: f64,
    mem_intensity: f64,
    memory_gib: f64,
    #[serde(default)]
    sm_occupancy: Option<f64>,
    #[serde(default)]
    demand: Option<f64>,
    #[serde(default)]
    slowdown_bound: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    policy: PolicyKnobs,
    gpu: BTreeMap<String, GpuTypeSpec>,
    class: BTreeMap<String, JobClassSpec>,
    #[serde(default)]
    node: NodeSettings,
    #[serde(default)]
    live: LiveSettings,
    #[serde(default)]
    power: PowerSettings,
    #[serde(default)]
    profiles: ProfileSettings,
}

/// `[power]`: what the site's power saving makes a decision cost (mirror slurm.conf's
/// `SuspendTime` and the nodes' real boot time; `check-config --slurm-conf` compares them).
/// Each field's meaning, unit, range and role: [`crate::settings::SETTINGS`]; its default:
/// `Default` below.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PowerSettings {
    pub resume_s: f64,
    pub suspend_time_s: Option<f64>,
}

impl Default for PowerSettings {
    fn default() -> Self {
        PowerSettings {
            resume_s: 300.0,
            suspend_time_s: None,
        }
    }
}

/// `[live]`: the plugin's snapshot of the running cluster (and the simulator's model of it).
/// Each field's meaning, unit, range and role: [`crate::settings::SETTINGS`]; its default:
/// `Default` below.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LiveSettings {
    pub snapshot_period_s: f64,
    pub snapshot_max_age_s: f64,
    pub reroute_pending: bool,
    pub reroute_max_jobs: u32,
    pub status_log_period_s: f64,
}

impl Default for LiveSettings {
    fn default() -> Self {
        LiveSettings {
            snapshot_period_s: 15.0,
            snapshot_max_age_s: 120.0,
            reroute_pending: true,
            reroute_max_jobs: 1000,
            status_log_period_s: 600.0,
        }
    }
}

/// `[profiles]`: profiles learned from the node helper's accounting records (`heshare profiles
/// update` builds the store; the plugin reloads it when it changes).
/// Each field's meaning, unit, range and role: [`crate::settings::SETTINGS`]; its default:
/// `Default` below.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProfileSettings {
    pub enabled: bool,
    pub store: PathBuf,
    pub logs: Vec<String>,
    pub min_runs: u32,
    pub quantile: f64,
    pub half_life_days: f64,
    pub max_samples: u32,
    pub disagree_factor: f64,
    pub max_spread: f64,
    pub saturated_margin: f64,
}

impl Default for ProfileSettings {
    fn default() -> Self {
        ProfileSettings {
            enabled: true,
            store: PathBuf::from("/var/lib/heshare/profiles.json"),
            logs: vec!["/var/log/heshare/accounting.jsonl".into()],
            min_runs: 2,
            quantile: 0.9,
            half_life_days: 30.0,
            max_samples: 16,
            disagree_factor: 2.0,
            max_spread: 2.0,
            saturated_margin: 0.25,
        }
    }
}

impl ProfileSettings {
    /// How lookups turn profiles into decisions.
    pub fn derive_settings(&self) -> crate::profile::DeriveSettings {
        crate::profile::DeriveSettings {
            min_runs: f64::from(self.min_runs),
            quantile: self.quantile,
            half_life_s: self.half_life_days * 86_400.0,
            disagree_factor: self.disagree_factor,
            max_spread: self.max_spread,
            // As far above what it got as a labelled service's share is sized above its class.
            saturated_margin: self.saturated_margin,
        }
    }

    /// What teaches.
    pub fn learn_limits(&self) -> crate::profile::LearnLimits {
        crate::profile::LearnLimits {
            max_samples: self.max_samples as usize,
        }
    }
}

/// Which GPU control the node helper uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    /// NVML when it initialises, else the model with a warning.
    Auto,
    Nvml,
    /// The power model drives clocks, power and the energy counter: for machines without an
    /// NVIDIA driver (tests, demos). Every record it produces says so.
    Model,
}

/// What the node helper does with an MPS share Slurm puts on a GPU whose MPS server runs for
/// another user (MPS serves one user per GPU at a time; Slurm does not keep users apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OtherUserShare {
    /// The job runs at once outside MPS: its CUDA client finds no MPS daemon and makes its own
    /// context, which the GPU time-slices with the MPS server's (compute mode Default). Its
    /// share is then not enforced by MPS. Where the GPU is in an exclusive compute mode the
    /// helper makes the job wait instead.
    TimeSlice,
    /// The job's GPU work waits until the other user's jobs on the GPU have ended (what MPS's
    /// control daemon does with such a client by itself).
    Wait,
}

/// Whether the node helper may change GPU settings (locked SM clocks, NVML accounting mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GpuSettings {
    /// Lock the clock the sharing optimizer picks, reset it when the GPU empties, and turn NVML
    /// accounting mode on for the measured energy split.
    Manage,
    /// Change nothing on the GPU: the clock the optimizer would lock is only logged, the energy
    /// split uses NVML accounting only where someone else turned it on (else the model). For a
    /// card the site does not own (a shared test machine) or a site that sets clocks itself.
    ReadOnly,
}

/// `[node]`: where the node helper (Prolog/Epilog/TaskProlog) keeps its state and logs.
/// Each field's meaning, unit, range and role: [`crate::settings::SETTINGS`]; its default:
/// `Default` below.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct NodeSettings {
    pub backend: BackendChoice,
    pub state_dir: PathBuf,
    pub accounting_log: PathBuf,
    pub mps_control: PathBuf,
    /// Where `mps_control` was set (`FILE:LINE`, or `FILE` for the default), for the helper's
    /// errors about it at run time.
    #[serde(skip)]
    pub mps_control_origin: String,
    pub mps_pipe_dir: PathBuf,
    pub mps_log_dir: PathBuf,
    pub command_timeout_s: f64,
    pub gpu_type: Option<String>,
    pub node_gpu_types: BTreeMap<String, String>,
    pub other_user_share: OtherUserShare,
    pub gpu_settings: GpuSettings,
    pub mps_library_path: Vec<PathBuf>,
}

impl Default for NodeSettings {
    fn default() -> Self {
        NodeSettings {
            backend: BackendChoice::Auto,
            state_dir: PathBuf::from("/var/lib/heshare"),
            accounting_log: PathBuf::from("/var/log/heshare/accounting.jsonl"),
            mps_control: PathBuf::from("/usr/bin/nvidia-cuda-mps-control"),
            mps_control_origin: String::new(),
            mps_pipe_dir: PathBuf::from("/run/heshare/mps"),
            mps_log_dir: PathBuf::from("/var/log/heshare/mps"),
            command_timeout_s: 20.0,
            gpu_type: None,
            node_gpu_types: BTreeMap::new(),
            other_user_share: OtherUserShare::TimeSlice,
            gpu_settings: GpuSettings::Manage,
            mps_library_path: Vec::new(),
        }
    }
}

/// A validated configuration. GPU types and classes keep the file's (sorted) key order, which
/// makes every decision that iterates over them deterministic.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub policy: PolicyKnobs,
    pub gpu_types: Vec<GpuType>,
    pub classes: Vec<JobClass>,
    /// Index into `gpu_types` of `policy.reference_gpu`.
    pub reference_gpu: usize,
    pub node: NodeSettings,
    pub live: LiveSettings,
    pub power: PowerSettings,
    pub profiles: ProfileSettings,
    /// Per inference class, the class with a demand of P% of a reference GPU (index P - 1), for
    /// sizing a job by what it may really need (`Config::class_on`). Empty for training classes
    /// (they fill whatever GPU they get). Kept here so that every decision refers to the same
    /// class objects (the plan cache keys on them).
    pub demand_classes: Vec<Vec<JobClass>>,
    /// Settings the file sets that this heshare no longer reads (see `RETIRED`), to warn of.
    pub retired: Vec<ConfigError>,
}

impl Config {
    pub fn gpu_type(&self, name: &str) -> Option<usize> {
        self.gpu_types.iter().position(|g| g.name == name)
    }

    /// Resolves a catalog name or an alias (e.g. a trace's `V100M16`), case-insensitively.
    pub fn resolve_gpu_type(&self, name: &str) -> Option<usize> {
        self.gpu_types.iter().position(|g| {
            g.name.eq_ignore_ascii_case(name)
                || g.aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
        })
    }

    pub fn class(&self, name: &str) -> Option<&JobClass> {
        self.classes.iter().find(|c| c.name == name)
    }

    /// The class named `name` as shares and clocks are sized for it on `gpu`: for an inference
    /// class, its demand (or `demand_pct`% of a reference GPU, as its user said) times
    /// (1 + `demand_margin`), and on a type whose speed the catalog did not measure times
    /// exp(`speed_uncertainty`) as well: an upper end of what it may need there. Training
    /// classes are as they are.
    pub fn class_on(&self, name: &str, demand_pct: Option<u8>, gpu: &GpuType) -> Option<&JobClass> {
        let i = self.classes.iter().position(|c| c.name == name)?;
        let raw = &self.classes[i];
        if raw.kind != JobKind::Inference {
            return Some(raw);
        }
        let pct = demand_pct.map_or(raw.demand * 100.0, f64::from)
            * (1.0 + self.policy.demand_margin.max(0.0))
            * gpu.speed_uncertainty.max(0.0).exp();
        // Clamped to 1..=100 first, so the cast is exact.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let pct = pct.ceil().clamp(1.0, 100.0) as usize;
        Some(
            self.demand_classes
                .get(i)
                .and_then(|v| v.get(pct - 1))
                .unwrap_or(raw),
        )
    }

    /// The catalog's GPU type names, comma separated, for "known: ..." in error messages.
    pub fn gpu_type_names(&self) -> String {
        self.gpu_types
            .iter()
            .map(|g| g.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The job class names, comma separated, for "known: ..." in error messages.
    pub fn class_names(&self) -> String {
        self.classes
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Indices into `classes` of the classes of one kind, in file order.
    pub fn classes_of(&self, kind: JobKind) -> Vec<usize> {
        (0..self.classes.len())
            .filter(|&c| self.classes[c].kind == kind)
            .collect()
    }

    pub fn load(path: &Path) -> Result<Config, LoadError> {
        let src = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
            path: path.to_owned(),
            source,
        })?;
        Config::parse(&src, path)
    }

    /// Parses and validates `src`; `path` only labels the errors.
    pub fn parse(src: &str, path: &Path) -> Result<Config, LoadError> {
        // One toml_edit parse serves the retired settings, the ranges and every error's line:
        // stripping keeps every byte's offset, so its spans hold for the stripped text too.
        let doc = toml_edit::ImDocument::parse(src.to_owned()).ok();
        let (stripped, retired) = match &doc {
            Some(d) => strip_retired_in(src, d),
            None => (src.to_owned(), Vec::new()),
        };
        let src = stripped.as_str();
        let raw: RawConfig = serde_path_to_error::deserialize(toml::Deserializer::new(src))
            .map_err(|e| {
                let field = e.path().to_string();
                let inner = e.into_inner();
                let line = inner.span().map(|s| line_of_offset(src, s.start));
                LoadError::Invalid(vec![ConfigError {
                    file: path.to_owned(),
                    line,
                    field: if field == "." { String::new() } else { field },
                    message: inner.message().trim().to_owned(),
                }])
            })?;
        let mut errs = doc.as_ref().map_or_else(Vec::new, |d| {
            crate::settings::out_of_range(&|section, name| number_in_doc(d, section, name))
        });
        let mut cfg = validate(raw, &mut errs);
        if errs.is_empty() {
            cfg.node.mps_control_origin = match doc
                .as_ref()
                .and_then(|d| line_of_field(d, src, "node.mps_control"))
            {
                Some(line) => format!("{}:{line}", path.display()),
                None => format!("{} (default)", path.display()),
            };
            cfg.retired = retired
                .into_iter()
                .map(|(field, line, why)| ConfigError {
                    file: path.to_owned(),
                    line: Some(line),
                    field,
                    message: format!("no longer read ({why}); remove it"),
                })
                .collect();
            Ok(cfg)
        } else {
            Err(LoadError::Invalid(
                errs.into_iter()
                    .map(|(field, message)| ConfigError {
                        file: path.to_owned(),
                        line: doc.as_ref().and_then(|d| line_of_field(d, src, &field)),
                        field,
                        message,
                    })
                    .collect(),
            ))
        }
    }
}

/// Every section's defaults, as TOML values (a setting with no default is absent).
fn default_table() -> toml::Table {
    fn section<T: Serialize>(v: &T) -> toml::Value {
        toml::Value::try_from(v).unwrap_or_else(|_| toml::Value::Table(toml::Table::new()))
    }
    let mut t = toml::Table::new();
    t.insert("policy".into(), section(&PolicyKnobs::default()));
    t.insert("profiles".into(), section(&ProfileSettings::default()));
    t.insert("power".into(), section(&PowerSettings::default()));
    t.insert("live".into(), section(&LiveSettings::default()));
    t.insert("node".into(), section(&NodeSettings::default()));
    t
}

/// The reference page of every setting (`docs/configuration.md`, `heshare settings`): the
/// definitions of [`crate::settings::SETTINGS`] with the defaults of each section's `Default`.
pub fn settings_reference() -> String {
    let defaults = default_table();
    crate::settings::markdown(
        &|s| match defaults.get(s.section).and_then(|t| t.get(s.name)) {
            Some(toml::Value::String(v)) if v.is_empty() => "none: required".to_owned(),
            Some(v) => format!("`{v}`"),
            None => "unset".to_owned(),
        },
    )
}

/// A setting's value in `doc` where it is a number, with the way the file wrote it (a retired
/// setting is never looked up: none is in `settings::SETTINGS`).
fn number_in_doc(
    doc: &toml_edit::ImDocument<String>,
    section: &str,
    name: &str,
) -> Option<(f64, String)> {
    let v = doc.get(section)?.as_table_like()?.get(name)?.as_value()?;
    #[allow(clippy::cast_precision_loss)]
    match v {
        toml_edit::Value::Float(f) => Some((*f.value(), v.to_string().trim().to_owned())),
        toml_edit::Value::Integer(i) => Some((*i.value() as f64, v.to_string().trim().to_owned())),
        _ => None,
    }
}

fn line_of_offset(src: &str, offset: usize) -> usize {
    src.as_bytes()[..offset.min(src.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The line of the deepest key of `field` (dotted path) present in the document.
fn line_of_field(doc: &toml_edit::ImDocument<String>, src: &str, field: &str) -> Option<usize> {
    let mut table: &dyn toml_edit::TableLike = doc.as_table();
    let mut found = None;
    for part in field.split('.') {
        let Some((key, item)) = table.get_key_value(part) else {
            break;
        };
        found = key.span().or_else(|| item.span()).or(found);
        match item.as_table_like() {
            Some(t) => table = t,
            None => break,
        }
    }
    found.map(|s| line_of_offset(src, s.start))
}

type Problems = Vec<(String, String)>;

fn check(errs: &mut Problems, ok: bool, field: impl Into<String>, msg: impl Into<String>) {
    if !ok {
        errs.push((field.into(), msg.into()));
    }
}

fn finite_in(v: f64, lo: f64, hi: f64) -> bool {
    v.is_finite() && v >= lo && v <= hi
}

fn validate(raw: RawConfig, errs: &mut Problems) -> Config {
    let p = &raw.policy;
    check(
        errs,
        !raw.gpu.is_empty(),
        "gpu",
        "the catalog has no GPU type; add a [gpu.NAME] table",
    );
    check(
        errs,
        !raw.class.is_empty(),
        "class",
        "no job class; add a [class.NAME] table",
    );

    let mut gpu_types = Vec::new();
    for (name, g) in &raw.gpu {
        let f = |k: &str| format!("gpu.{name}.{k}");
        check(
            errs,
            valid_gres_type(name),
            format!("gpu.{name}"),
            "a GPU type name must be a Slurm gres type: letters, digits, '_', '-' or '.'",
        );
        check(
            errs,
            finite_in(g.idle_power_w, 0.0, 5000.0),
            f("idle_power_w"),
            format!("{} W is outside 0..=5000", g.idle_power_w),
        );
        check(
            errs,
            finite_in(g.max_power_w, 1.0, 5000.0) && g.max_power_w > g.idle_power_w,
            f("max_power_w"),
            format!(
                "{} W must be above idle_power_w ({} W) and at most 5000",
                g.max_power_w, g.idle_power_w
            ),
        );
        check(
            errs,
            finite_in(g.memory_gib, 0.1, 4096.0),
            f("memory_gib"),
            format!("{} is outside 0.1..=4096", g.memory_gib),
        );
        check(
            errs,
            finite_in(g.relative_throughput, 0.01, 1000.0),
            f("relative_throughput"),
            format!("{} is outside 0.01..=1000", g.relative_throughput),
        );
        check(
            errs,
            finite_in(g.dvfs_static_fraction, 0.0, 1.0),
            f("dvfs_static_fraction"),
            format!("{} is outside 0..=1", g.dvfs_static_fraction),
        );
        check(
            errs,
            finite_in(g.dvfs_exponent, 0.1, 5.0),
            f("dvfs_exponent"),
            format!("{} is outside 0.1..=5", g.dvfs_exponent),
        );
        check(
            errs,
            finite_in(g.host_power_w, 0.0, 10_000.0),
            f("host_power_w"),
            format!("{} is outside 0..=10000 W", g.host_power_w),
        );
        if let Some(c) = g.context_power_w {
            check(
                errs,
                finite_in(c, 0.0, g.max_power_w.max(0.0)),
                f("context_power_w"),
                format!("{c} is outside 0..=max_power_w"),
            );
        }
        check(
            errs,
            finite_in(g.speed_uncertainty, 0.0, 2.0),
            f("speed_uncertainty"),
            format!("{} is outside 0..=2", g.speed_uncertainty),
        );
        let clocks = match (&g.sm_clocks_mhz, &g.sm_clock_range_mhz) {
            (Some(list), None) => {
                let mut c = list.clone();
                c.sort_unstable();
                c.dedup();
                check(
                    errs,
                    !c.is_empty(),
                    f("sm_clocks_mhz"),
                    "the clock list is empty",
                );
                check(
                    errs,
                    c.iter().all(|&m| (100..=5000).contains(&m)),
                    f("sm_clocks_mhz"),
                    "every clock must be within 100..=5000 MHz",
                );
                c
            }
            (None, Some(r)) => {
                let ok = (100..=5000).contains(&r.min)
                    && r.max >= r.min
                    && r.max <= 5000
                    && finite_in(r.step, 0.5, 1000.0);
                check(
                    errs,
                    ok,
                    f("sm_clock_range_mhz"),
                    format!(
                        "min {} / max {} / step {} must satisfy 100 <= min <= max <= 5000 and 0.5 <= step <= 1000",
                        r.min, r.max, r.step
                    ),
                );
                if ok { clock_steps(r) } else { Vec::new() }
            }
            _ => {
                errs.push((format!("gpu.{name}"), "give exactly one of sm_clocks_mhz (a list) or sm_clock_range_mhz ({ min, max, step })".into()));
                Vec::new()
            }
        };
        if !clocks.is_empty() {
            let lo = clocks[0];
            let hi = clocks[clocks.len() - 1];
            check(
                errs,
                clocks.contains(&g.default_sm_clock_mhz),
                f("default_sm_clock_mhz"),
                format!(
                    "{} MHz is not a supported clock of {name} ({lo}..={hi} MHz)",
                    g.default_sm_clock_mhz
                ),
            );
        }
        gpu_types.push(GpuType {
            name: name.clone(),
            description: g.description.clone(),
            aliases: g.aliases.clone(),
            idle_power: Watts(g.idle_power_w),
            max_power: Watts(g.max_power_w),
            memory_gib: g.memory_gib,
            relative_throughput: g.relative_throughput,
            sm_clocks: clocks.into_iter().map(Mhz).collect(),
            default_sm_clock: Mhz(g.default_sm_clock_mhz),
            dvfs_static_fraction: g.dvfs_static_fraction,
            dvfs_exponent: g.dvfs_exponent,
            mps: g.mps,
            host_power: Watts(g.host_power_w),
            speed_uncertainty: g.speed_uncertainty,
            // Unless given: a tenth of the dynamic range, the middle of the measured 26-50 W on
            // HBM parts of 300-700 W (arXiv 2605.23918).
            context_power: Watts(
                g.context_power_w
                    .unwrap_or((g.max_power_w - g.idle_power_w).max(0.0) * 0.1),
            ),
        });
    }
    let mut seen = BTreeMap::new();
    for (i, g) in gpu_types.iter().enumerate() {
        for alias in std::iter::once(&g.name).chain(&g.aliases) {
            if let Some(other) = seen.insert(alias.to_ascii_lowercase(), i) {
                if other != i {
                    errs.push((
                        format!("gpu.{}.aliases", g.name),
                        format!("\"{alias}\" also names gpu.{}", gpu_types[other].name),
                    ));
                }
            }
        }
    }
    let reference_gpu = gpu_types.iter().position(|g| g.name == p.reference_gpu);
    check(
        errs,
        reference_gpu.is_some(),
        "policy.reference_gpu",
        format!(
            "{} (known: {})",
            if p.reference_gpu.is_empty() {
                "missing: name the [gpu.*] type the job classes are measured on".to_owned()
            } else {
                format!("\"{}\" is not a [gpu.*] type", p.reference_gpu)
            },
            gpu_types
                .iter()
                .map(|g| g.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );

    let mut classes = Vec::new();
    for (name, c) in &raw.class {
        let f = |k: &str| format!("class.{name}.{k}");
        check(
            errs,
            finite_in(c.reference_runtime_s, 1e-3, 1e9),
            f("reference_runtime_s"),
            format!("{} is outside 0.001..=1e9 s", c.reference_runtime_s),
        );
        check(
            errs,
            finite_in(c.speed_exponent, 0.0, 3.0),
            f("speed_exponent"),
            format!("{} is outside 0..=3", c.speed_exponent),
        );
        check(
            errs,
            finite_in(c.clock_bound_fraction, 0.0, 1.0),
            f("clock_bound_fraction"),
            format!("{} is outside 0..=1", c.clock_bound_fraction),
        );
        check(
            errs,
            finite_in(c.clock_knee, 0.0, 1.0),
            f("clock_knee"),
            format!(
                "{} is outside 0..=1 (a fraction of the maximum clock)",
                c.clock_knee
            ),
        );
        check(
            errs,
            finite_in(c.power_util, 0.0, 1.0),
            f("power_util"),
            format!("{} is outside 0..=1", c.power_util),
        );
        check(
            errs,
            finite_in(c.mem_intensity, 0.0, 1.0),
            f("mem_intensity"),
            format!("{} is outside 0..=1", c.mem_intensity),
        );
        check(
            errs,
            finite_in(c.memory_gib, 0.0, 4096.0),
            f("memory_gib"),
            format!("{} is outside 0..=4096", c.memory_gib),
        );
        if let Some(b) = c.slowdown_bound {
            check(
                errs,
                finite_in(b, 1.0, 100.0),
                f("slowdown_bound"),
                format!("{b} is outside 1..=100"),
            );
        }
        let demand = match c.kind {
            JobKind::Training => {
                check(
                    errs,
                    c.demand.is_none(),
                    f("demand"),
                    "a training class has no demand; it fills the GPU it gets (use sm_occupancy)",
                );
                let occ = c.sm_occupancy.unwrap_or(1.0);
                check(
                    errs,
                    finite_in(occ, 0.01, 1.0),
                    f("sm_occupancy"),
                    format!("{occ} is outside 0.01..=1"),
                );
                occ
            }
            JobKind::Inference => {
                check(
                    errs,
                    c.sm_occupancy.is_none(),
                    f("sm_occupancy"),
                    "an inference class is sized by demand, not sm_occupancy",
                );
                match c.demand {
                    Some(d) => {
                        check(
                            errs,
                            finite_in(d, 0.001, 64.0),
                            f("demand"),
                            format!("{d} is outside 0.001..=64 (fraction of the reference GPU)"),
                        );
                        d
                    }
                    None => {
                        errs.push((format!("class.{name}"), "an inference class needs demand (the fraction of the reference GPU it keeps busy)".into()));
                        1.0
                    }
                }
            }
        };
        classes.push(JobClass {
            name: name.clone(),
            kind: c.kind,
            description: c.description.clone(),
            reference_runtime_s: c.reference_runtime_s,
            speed_exponent: c.speed_exponent,
            clock_bound_fraction: c.clock_bound_fraction,
            clock_knee: c.clock_knee,
            power_util: c.power_util,
            mem_intensity: c.mem_intensity,
            memory_gib: c.memory_gib,
            demand,
            slowdown_bound: c.slowdown_bound,
            measured_speed: vec![],
            limit_kills: vec![],
            neighbours: None,
            runtime_log_sd: None,
        });
    }
    validate_node(&raw.node, &gpu_types, errs);
    let l = &raw.live;
    check(
        errs,
        l.snapshot_max_age_s.is_nan() || l.snapshot_max_age_s >= l.snapshot_period_s,
        "live.snapshot_max_age_s",
        format!(
            "{} is less than snapshot_period_s ({}): every snapshot would be too old",
            l.snapshot_max_age_s, l.snapshot_period_s
        ),
    );
    let pr = &raw.profiles;
    check(
        errs,
        pr.store.is_absolute(),
        "profiles.store",
        format!("\"{}\" must be an absolute path", pr.store.display()),
    );
    for (i, log) in pr.logs.iter().enumerate() {
        check(
            errs,
            Path::new(log).is_absolute()
                && !log.contains("..")
                && Path::new(log)
                    .parent()
                    .is_some_and(|p| !p.to_string_lossy().contains('*')),
            format!("profiles.logs[{i}]"),
            format!("\"{log}\" must be an absolute path, with `*` only in its file name"),
        );
    }
    let lt = &raw.policy.limit_type;
    check(
        errs,
        lt == "slowest" || gpu_types.iter().any(|g| &g.name == lt),
        "policy.limit_type",
        format!(
            "\"{lt}\" is neither slowest nor a GPU type of the catalog ({})",
            gpu_types
                .iter()
                .map(|g| g.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    let demand_classes = classes
        .iter()
        .map(|c| match c.kind {
            JobKind::Inference => (1..=100u8)
                .map(|p| JobClass {
                    demand: f64::from(p) / 100.0,
                    ..c.clone()
                })
                .collect(),
            JobKind::Training => Vec::new(),
        })
        .collect();
    Config {
        policy: raw.policy,
        gpu_types,
        classes,
        reference_gpu: reference_gpu.unwrap_or(0),
        node: raw.node,
        live: raw.live,
        power: raw.power,
        profiles: raw.profiles,
        demand_classes,
        retired: Vec::new(),
    }
}

fn validate_node(n: &NodeSettings, gpu_types: &[GpuType], errs: &mut Problems) {
    for (field, path) in [
        ("node.state_dir", &n.state_dir),
        ("node.accounting_log", &n.accounting_log),
        ("node.mps_control", &n.mps_control),
        ("node.mps_pipe_dir", &n.mps_pipe_dir),
        ("node.mps_log_dir", &n.mps_log_dir),
    ] {
        check(
            errs,
            path.is_absolute(),
            field,
            format!(
                "\"{}\" must be an absolute path (the helper runs from slurmd's directory)",
                path.display()
            ),
        );
    }
    for (k, dir) in n.mps_library_path.iter().enumerate() {
        check(
            errs,
            dir.is_absolute(),
            format!("node.mps_library_path[{k}]"),
            format!("\"{}\" must be an absolute path", dir.display()),
        );
    }
    let known = |t: &str| {
        gpu_types.iter().any(|g| {
            g.name.eq_ignore_ascii_case(t) || g.aliases.iter().any(|a| a.eq_ignore_ascii_case(t))
        })
    };
    if let Some(t) = &n.gpu_type {
        check(
            errs,
            known(t),
            "node.gpu_type",
            format!("\"{t}\" is not a GPU type of the catalog"),
        );
    }
    for (node, t) in &n.node_gpu_types {
        check(
            errs,
            known(t),
            format!("node.node_gpu_types.{node}"),
            format!("\"{t}\" is not a GPU type of the catalog"),
        );
    }
}

/// Slurm splits gres specs on ':' and ',' and node lists on brackets; keep type names to
/// characters that survive both.
fn valid_gres_type(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn clock_steps(r: &ClockRange) -> Vec<u32> {
    let mut out = Vec::new();
    let mut i = 0u32;
    loop {
        let v = f64::from(r.min) + f64::from(i) * r.step;
        // A millihertz of tolerance lets a step written with finite decimals (784 / 62 MHz)
        // still land on the maximum.
        if v > f64::from(r.max) + 1e-3 {
            break;
        }
        // The value is within 100..=5000 by the range check above, so the cast cannot truncate.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        out.push((v + 1e-3).floor() as u32);
        i += 1;
    }
    out.dedup();
    out
}

/// One `Gres=` problem found in a slurm.conf.
#[derive(Debug, Clone, PartialEq)]
pub struct GresFinding {
    pub line: usize,
    pub message: String,
}

/// Cross-checks every `Gres=gpu:TYPE:N` of a slurm.conf against the catalog.
///
/// Untyped `gpu:N` is reported too: without a type heshare cannot tell the GPUs apart and would
/// have to treat the node as the reference type.
pub fn check_slurm_gres(slurm_conf: &str, cfg: &Config) -> Vec<GresFinding> {
    let mut out = Vec::new();
    let known = || cfg.gpu_type_names();
    for (line_no, spec) in gres_specs(slurm_conf) {
        let mut parts = spec.split(':');
        let Some(kind) = parts.next() else { continue };
        if !kind.eq_ignore_ascii_case("gpu") {
            continue;
        }
        let rest: Vec<&str> = parts.collect();
        match rest.as_slice() {
            [count] if count_ok(count) => out.push(GresFinding { line: line_no, message: format!("Gres: \"{spec}\" has no GPU type; write gpu:TYPE:N with TYPE from the catalog ({})", known()) }),
            [ty, count] if count_ok(count) => {
                if cfg.gpu_type(ty).is_none() {
                    let hint = cfg.resolve_gpu_type(ty).map(|i| format!("; did you mean \"{}\"?", cfg.gpu_types[i].name)).unwrap_or_default();
                    out.push(GresFinding { line: line_no, message: format!("Gres: GPU type \"{ty}\" is not in the catalog (known: {}){hint}", known()) });
                }
            }
            _ => out.push(GresFinding { line: line_no, message: format!("Gres: cannot read \"{spec}\"; expected gpu:TYPE:COUNT") }),
        }
    }
    out
}

/// Every GRES spec (`gpu:a100:2`, `mps:200`) of every `Gres=` in a slurm.conf, with its
/// 1-based line; comments skipped.
fn gres_specs(slurm_conf: &str) -> impl Iterator<Item = (usize, &str)> {
    slurm_conf.lines().enumerate().flat_map(|(i, line)| {
        line.split('#')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .filter_map(|token| {
                token
                    .split_once('=')
                    .filter(|(k, _)| k.eq_ignore_ascii_case("gres"))
                    .map(|(_, v)| v)
            })
            .flat_map(split_gres_list)
            .map(move |spec| (i + 1, spec))
    })
}

/// Whether Slurm's hostlist expression `list` (`gpu[01-08,10],login1`) names `name`.
pub fn hostlist_contains(list: &str, name: &str) -> bool {
    split_top_level(list).any(|item| host_matches(item, name))
}

/// The comma-separated items of a hostlist, commas inside brackets kept.
pub(crate) fn split_top_level(list: &str) -> impl Iterator<Item = &str> {
    let mut depth = 0usize;
    let mut start = 0usize;
    let mut items = Vec::new();
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&list[start..]);
    items.into_iter().filter(|s| !s.is_empty())
}

/// One hostlist item (`prefix[ranges]rest`, brackets possibly repeated) against `name`.
fn host_matches(item: &str, name: &str) -> bool {
    let Some(open) = item.find('[') else {
        return item == name;
    };
    let Some(close) = item[open..].find(']').map(|c| open + c) else {
        return false;
    };
    let (prefix, ranges, rest) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
    let Some(tail) = name.strip_prefix(prefix) else {
        return false;
    };
    ranges.split(',').any(|r| {
        let (lo, hi) = r.split_once('-').unwrap_or((r, r));
        let (Ok(a), Ok(b)) = (lo.parse::<u64>(), hi.parse::<u64>()) else {
            return false;
        };
        // A bound written with a leading zero (`01`) fixes the width; otherwise numbers are
        // written without one.
        let width = (lo.len() > 1 && lo.starts_with('0')).then_some(lo.len());
        (1..=tail.len())
            .filter(|&k| tail[..k].bytes().all(|b| b.is_ascii_digit()))
            .any(|k| {
                let digits = &tail[..k];
                digits.parse::<u64>().is_ok_and(|n| {
                    n >= a && n <= b && width.map_or(digits == n.to_string(), |w| digits.len() == w)
                }) && host_matches(rest, &tail[k..])
            })
    })
}

/// The GPU type slurm.conf gives node `node` (`Gres=gpu:TYPE:N` on the `NodeName=` line naming
/// it), if one: the node helper's answer where NVML's device name matches no catalog type.
pub fn slurm_node_gpu_type(slurm_conf: &str, node: &str) -> Option<String> {
    slurm_conf.lines().find_map(|line| {
        let line = line.split('#').next().unwrap_or("");
        let mut tokens = line.split_whitespace();
        let first = tokens.next()?;
        let (k, names) = first.split_once('=')?;
        if !k.eq_ignore_ascii_case("nodename") || !hostlist_contains(names, node) {
            return None;
        }
        tokens
            .filter_map(|t| t.split_once('='))
            .filter(|(k, _)| k.eq_ignore_ascii_case("gres"))
            .flat_map(|(_, v)| split_gres_list(v))
            .find_map(
                |spec| match spec.split(':').collect::<Vec<_>>().as_slice() {
                    ["gpu", ty, _count] => Some((*ty).to_owned()),
                    _ => None,
                },
            )
    })
}

/// A slurm.conf's `SuspendTime` in seconds, if power saving is on (Slurm's default is off:
/// `-1`, `NONE` or `INFINITE`, or no line).
pub fn slurm_suspend_time(slurm_conf: &str) -> Option<f64> {
    let mut found = None;
    for line in slurm_conf.lines() {
        let line = line.split('#').next().unwrap_or("");
        for word in line.split_whitespace() {
            if let Some((k, v)) = word.split_once('=') {
                if k.eq_ignore_ascii_case("suspendtime") {
                    found = v.parse::<f64>().ok().filter(|x| *x >= 0.0);
                }
            }
        }
    }
    found
}

/// Where heshare.toml's `[power]` does not mirror the slurm.conf's power saving: heshare would
/// price decisions for a meter the site does not have.
pub fn power_warning(slurm_conf: &str, cfg: &Config) -> Option<String> {
    match (slurm_suspend_time(slurm_conf), cfg.power.suspend_time_s) {
        (Some(s), None) => Some(format!(
            "SuspendTime={s:.0}: Slurm powers idle nodes down, but heshare.toml has no [power] suspend_time_s, so heshare prices decisions as if every node were always on (it leaves out the idle and host power a job keeps on); set [power] suspend_time_s = {s:.0} and resume_s to the nodes' boot time"
        )),
        (None, Some(h)) => Some(format!(
            "no SuspendTime: every node is always on, but heshare.toml's [power] suspend_time_s = {h:.0} prices decisions as if idle nodes were powered down; remove it"
        )),
        (Some(s), Some(h)) if (s - h).abs() > 0.5 => Some(format!(
            "SuspendTime={s:.0} but heshare.toml's [power] suspend_time_s = {h:.0}: make them the same"
        )),
        _ => None,
    }
}

/// A slurm.conf's `PriorityType` (the last one given; Slurm's default is `priority/basic`).
pub fn slurm_priority_type(slurm_conf: &str) -> String {
    let mut found = "priority/basic".to_owned();
    for line in slurm_conf.lines() {
        let line = line.split('#').next().unwrap_or("");
        for word in line.split_whitespace() {
            if let Some((k, v)) = word.split_once('=') {
                if k.eq_ignore_ascii_case("prioritytype") {
                    found = v.trim().to_owned();
                }
            }
        }
    }
    found
}

/// Why heshare's site factor would do nothing under this slurm.conf, if it would: Slurm adds
/// a job's site factor to its priority in `priority/multifactor` only.
pub fn priority_warning(slurm_conf: &str, cfg: &Config) -> Option<String> {
    let ty = slurm_priority_type(slurm_conf);
    (cfg.policy.priority_range > 0 && !ty.eq_ignore_ascii_case("priority/multifactor")).then(|| {
        format!(
            "PriorityType={ty}: Slurm adds a job's site factor to its priority only with priority/multifactor, so heshare's priority adjustment (policy.priority_range = {}) changes nothing; set PriorityType=priority/multifactor, or priority_range = 0 to say it is off",
            cfg.policy.priority_range
        )
    })
}

/// The catalog GPU types a slurm.conf's `Gres=gpu:TYPE:N` lines name, each with the most GPUs
/// of it on one node (catalog index, count), in catalog order. Unknown types are left out
/// (`check_slurm_gres` reports them).
pub fn slurm_gpu_types(slurm_conf: &str, cfg: &Config) -> Vec<(usize, u32)> {
    let mut max = vec![0u32; cfg.gpu_types.len()];
    for (_, spec) in gres_specs(slurm_conf) {
        let parts: Vec<&str> = spec.split(':').collect();
        if let ["gpu", ty, count] = parts.as_slice() {
            if let (Some(t), Ok(n)) = (cfg.gpu_type(ty), count.parse::<u32>()) {
                max[t] = max[t].max(n);
            }
        }
    }
    max.into_iter()
        .enumerate()
        .filter(|&(_, n)| n > 0)
        .collect()
}

/// Per catalog type: whether every `NodeName=` line of a slurm.conf with GPUs of the type gives
/// the type's name in `Feature(s)=` and names no other GPU type, so heshare may offer the type to
/// a job through a node-feature OR constraint. A type no node has is `false`.
pub fn slurm_feature_types(slurm_conf: &str, cfg: &Config) -> Vec<bool> {
    let mut ok = vec![true; cfg.gpu_types.len()];
    let mut seen = vec![false; cfg.gpu_types.len()];
    for line in slurm_conf.lines() {
        let line = line.split('#').next().unwrap_or("");
        let mut tokens = line.split_whitespace();
        let Some(first) = tokens.next() else { continue };
        if !first.split_once('=').is_some_and(|(k, v)| {
            k.eq_ignore_ascii_case("nodename") && !v.eq_ignore_ascii_case("default")
        }) {
            continue;
        }
        let mut types = Vec::new();
        let mut features: Vec<&str> = Vec::new();
        for t in std::iter::once(first).chain(tokens) {
            let Some((k, v)) = t.split_once('=') else {
                continue;
            };
            if k.eq_ignore_ascii_case("gres") {
                for spec in split_gres_list(v) {
                    let parts: Vec<&str> = spec.split(':').collect();
                    if let ["gpu", ty, _] = parts.as_slice() {
                        if let Some(i) = cfg.gpu_type(ty) {
                            if !types.contains(&i) {
                                types.push(i);
                            }
                        }
                    }
                }
            } else if k.eq_ignore_ascii_case("feature") || k.eq_ignore_ascii_case("features") {
                features.extend(v.split(',').map(str::trim));
            }
        }
        for &t in &types {
            seen[t] = true;
            if types.len() > 1 || !features.contains(&cfg.gpu_types[t].name.as_str()) {
                ok[t] = false;
            }
        }
    }
    ok.iter().zip(&seen).map(|(&o, &s)| o && s).collect()
}

/// Whether a gres.conf lets MPS use every GPU of a node (`Flags=all_sharing` on an `mps`
/// line). Without it (`one_sharing`, the default) Slurm keeps all MPS jobs of a node on one GPU
/// and a share stays pending beside idle GPUs. `None` when the file configures no MPS.
pub fn gres_conf_all_sharing(gres_conf: &str) -> Option<bool> {
    let mut mps = false;
    let mut all = false;
    for line in gres_conf.lines() {
        let line = line.split('#').next().unwrap_or("");
        let lower = line.to_ascii_lowercase();
        if lower.split_whitespace().any(|t| t == "name=mps") {
            mps = true;
            all |= lower.contains("all_sharing");
        }
    }
    mps.then_some(all)
}

/// The same as `slurm_gpu_types` for a node list (the simulator's and the benchmark's clusters).
pub fn slurm_gpu_types_of(nodes: &[crate::cluster::Node], cfg: &Config) -> Vec<(usize, u32)> {
    let mut max = vec![0u32; cfg.gpu_types.len()];
    for n in nodes {
        if let Some(t) = n.gpu_type {
            max[t] = max[t].max(n.gpus);
        }
    }
    max.into_iter()
        .enumerate()
        .filter(|&(_, n)| n > 0)
        .collect()
}

/// Splits `gpu:a100:2(S:0-1),mps:200` on the commas that are outside parentheses.
pub(crate) fn split_gres_list(value: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, ch) in value.char_indices() {
        match ch {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&value[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&value[start..]);
    out.into_iter()
        .map(|s| s.split('(').next().unwrap_or(s))
        .filter(|s| !s.is_empty())
        .collect()
}

fn count_ok(count: &str) -> bool {
    let digits = count.trim_end_matches(['k', 'K', 'm', 'M', 'g', 'G']);
    !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const SMALL: &str = r#"
[policy]
energy_weight = 0.5
slowdown_bound = 1.5
mps_share_step_pct = 5
allow_cross_user_sharing = false
priority_range = 100
reference_gpu = "v100"
contention_kappa = 0.3

[gpu.v100]
aliases = ["V100M16"]
idle_power_w = 30
max_power_w = 300
memory_gib = 16
relative_throughput = 1.0
sm_clock_range_mhz = { min = 135, max = 1380, step = 7.5 }
default_sm_clock_mhz = 1380
dvfs_static_fraction = 0.3
dvfs_exponent = 2.0

[class.train]
kind = "training"
reference_runtime_s = 3600
speed_exponent = 1.0
clock_bound_fraction = 0.4
power_util = 0.9
mem_intensity = 0.8
memory_gib = 8
"#;

    fn parse(src: &str) -> Result<Config, Vec<ConfigError>> {
        Config::parse(src, Path::new("h.toml")).map_err(|e| match e {
            LoadError::Invalid(v) => v,
            LoadError::Read { .. } => unreachable!("parse does not read files"),
        })
    }

    #[test]
    fn power_settings_are_compared_with_slurms_power_saving() {
        let mut cfg = parse(SMALL).expect("valid");
        assert!(power_warning("SuspendTime=-1\n", &cfg).is_none());
        assert!(power_warning("ClusterName=x\n", &cfg).is_none());
        let w = power_warning("SuspendTime=600 # ten minutes\n", &cfg).expect("off here");
        assert!(w.contains("suspend_time_s = 600"), "{w}");
        cfg.power.suspend_time_s = Some(600.0);
        assert!(power_warning("SuspendTime=600\n", &cfg).is_none());
        assert!(power_warning("SuspendTime=300\n", &cfg).is_some());
        assert!(power_warning("SuspendTime=NONE\n", &cfg).is_some());
    }

    #[test]
    fn nice_range_is_read_as_priority_range_and_slurms_priority_type_is_checked() {
        let old = SMALL.replace("priority_range = 100", "nice_range = 40");
        assert_eq!(parse(&old).expect("valid").policy.priority_range, 40);
        let both = SMALL.replace("priority_range = 100", "priority_range = 1\nnice_range = 2");
        assert!(parse(&both).is_err(), "one of the two names, not both");
        let too_big = SMALL.replace("priority_range = 100", "priority_range = 2000000");
        let e = parse(&too_big).expect_err("too big");
        assert!(
            e.iter().any(|x| x.field == "policy.priority_range"),
            "{e:?}"
        );
        let cfg = parse(SMALL).expect("valid");
        assert_eq!(slurm_priority_type("SlurmUser=root\n"), "priority/basic");
        assert_eq!(
            slurm_priority_type("PriorityType=priority/multifactor # the site's\n"),
            "priority/multifactor"
        );
        assert!(priority_warning("PriorityType=priority/multifactor\n", &cfg).is_none());
        let w = priority_warning("ClusterName=x\n", &cfg).expect("basic by default");
        assert!(w.contains("PriorityType=priority/basic"), "{w}");
        let mut off = cfg.clone();
        off.policy.priority_range = 0;
        assert!(priority_warning("ClusterName=x\n", &off).is_none());
    }

    #[test]
    fn volta_clock_range_matches_the_measured_list() {
        let cfg = parse(SMALL).expect("valid");
        let c = &cfg.gpu_types[0].sm_clocks;
        assert_eq!(c.len(), 167);
        assert_eq!(&c[..4], &[Mhz(135), Mhz(142), Mhz(150), Mhz(157)]);
        assert_eq!(c.last(), Some(&Mhz(1380)));
    }

    #[test]
    fn node_settings_default_and_are_checked() {
        let cfg = parse(SMALL).expect("valid");
        assert_eq!(
            cfg.node,
            NodeSettings {
                mps_control_origin: "h.toml (default)".into(),
                ..NodeSettings::default()
            }
        );
        let set = format!("{SMALL}\n[node]\nmps_control = \"/opt/nvidia/mps-control\"\n");
        let line = set.lines().count();
        assert_eq!(
            parse(&set).expect("valid").node.mps_control_origin,
            format!("h.toml:{line}"),
            "errors about the program at run time name where it was set"
        );
        let bad = format!(
            "{SMALL}\n[node]\nbackend = \"model\"\nstate_dir = \"var/heshare\"\ngpu_type = \"k80\"\nmps_control = \"nvidia-cuda-mps-control\"\n"
        );
        let errs = parse(&bad).expect_err("must fail");
        let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert!(
            text.iter()
                .any(|m| m.contains(": node.state_dir: \"var/heshare\" must be an absolute path")),
            "{text:?}"
        );
        assert!(
            text.iter().any(|m| m.contains(
                ": node.mps_control: \"nvidia-cuda-mps-control\" must be an absolute path"
            )),
            "root must not look its programs up in PATH: {text:?}"
        );
        assert!(
            text.iter()
                .any(|m| m.contains("node.gpu_type: \"k80\" is not a GPU type of the catalog")),
            "{text:?}"
        );
        assert!(errs.iter().all(|e| e.line.is_some()), "{text:?}");
        let typo = format!("{SMALL}\n[node]\nbackend = \"gpu\"\n");
        let msg = parse(&typo).expect_err("must fail")[0].to_string();
        assert!(
            msg.contains("node.backend") && msg.contains("unknown variant"),
            "{msg}"
        );
        let cfg = parse(&format!("{SMALL}\n[node]\nother_user_share = \"wait\"\n")).expect("wait");
        assert_eq!(cfg.node.other_user_share, OtherUserShare::Wait);
        assert_eq!(
            parse(SMALL).expect("small").node.other_user_share,
            OtherUserShare::TimeSlice
        );
        let typo = format!("{SMALL}\n[node]\nother_user_share = \"timeslice\"\n");
        let msg = parse(&typo).expect_err("must fail")[0].to_string();
        assert!(
            msg.contains("node.other_user_share") && msg.contains("time-slice"),
            "{msg}"
        );
    }

    #[test]
    fn misspelt_field_names_file_line_and_field() {
        let bad = SMALL.replace("idle_power_w = 30", "idle_powr_w = 30");
        let errs = parse(&bad).expect_err("must fail");
        let msg = errs[0].to_string();
        assert!(
            msg.starts_with("h.toml:13: gpu.v100.idle_powr_w: "),
            "{msg}"
        );
        assert!(msg.contains("unknown field `idle_powr_w`"), "{msg}");
    }

    #[test]
    fn out_of_range_default_clock_names_its_line() {
        let bad = SMALL.replace("default_sm_clock_mhz = 1380", "default_sm_clock_mhz = 1999");
        let errs = parse(&bad).expect_err("must fail");
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].line, Some(18));
        assert_eq!(errs[0].field, "gpu.v100.default_sm_clock_mhz");
        assert!(
            errs[0]
                .message
                .contains("1999 MHz is not a supported clock"),
            "{}",
            errs[0]
        );
    }

    #[test]
    fn all_range_errors_are_reported_together() {
        let bad = SMALL
            .replace("energy_weight = 0.5", "time_value_kwh_per_gpu_hour = -1.5")
            .replace("power_util = 0.9", "power_util = -1");
        let errs = parse(&bad).expect_err("must fail");
        let fields: Vec<_> = errs.iter().map(|e| (e.field.as_str(), e.line)).collect();
        assert_eq!(
            fields,
            vec![
                ("policy.time_value_kwh_per_gpu_hour", Some(3)),
                ("class.train.power_util", Some(27))
            ]
        );
    }

    #[test]
    fn a_retired_limit_headroom_still_loads_and_says_what_holds_the_limit_now() {
        let old = SMALL.replace(
            "energy_weight = 0.5",
            "energy_weight = 0.5\nlimit_headroom = 2",
        );
        let cfg = parse(&old).expect("valid");
        let w = cfg
            .retired
            .iter()
            .find(|r| r.field == "policy.limit_headroom")
            .expect("named");
        assert_eq!(w.line, Some(4), "{w}");
        assert!(w.to_string().contains("profile's quantile"), "{w}");
    }

    /// A setting this heshare no longer reads still loads, named with its line and why, and the
    /// lines of every other problem stay the file's; a misspelt one is still an error.
    #[test]
    fn retired_settings_load_with_a_warning_and_keep_the_lines_of_the_rest() {
        let cfg = parse(SMALL).expect("valid");
        assert_eq!(cfg.retired.len(), 1, "{:?}", cfg.retired);
        assert_eq!(
            (cfg.retired[0].field.as_str(), cfg.retired[0].line),
            ("policy.energy_weight", Some(3))
        );
        assert!(
            cfg.retired[0]
                .to_string()
                .contains("no longer read (placement and the clock trade time"),
            "{}",
            cfg.retired[0]
        );
        let old = format!(
            "{SMALL}\n[profiles]\nwhole_share_idle = 0.5 # a quarter\nwhole_first_runs = [\n  true,\n]\nfirst_run_margin = 0.25\n"
        );
        let base = SMALL.lines().count();
        let cfg = parse(&old).expect("valid");
        let found: Vec<(&str, Option<usize>)> = cfg
            .retired
            .iter()
            .map(|r| (r.field.as_str(), r.line))
            .collect();
        assert_eq!(
            found,
            [
                ("policy.energy_weight", Some(3)),
                ("profiles.whole_share_idle", Some(base + 3)),
                ("profiles.whole_first_runs", Some(base + 4)),
                ("profiles.first_run_margin", Some(base + 7)),
            ]
        );
        // A problem after them is found on its own line.
        let bad = format!("{old}min_runs = -1\n");
        let errs = parse(&bad).expect_err("must fail");
        assert_eq!(
            (errs[0].field.as_str(), errs[0].line),
            ("profiles.min_runs", Some(base + 8)),
            "{}",
            errs[0]
        );
        let bad = format!("{old}quantile = 2\n");
        let errs = parse(&bad).expect_err("must fail");
        assert_eq!(
            (errs[0].field.as_str(), errs[0].line),
            ("profiles.quantile", Some(base + 8)),
            "{}",
            errs[0]
        );
        // Not retired, only misspelt: refused.
        let typo = format!("{SMALL}\n[profiles]\nwhole_share_idel = 0.5\n");
        assert!(parse(&typo).is_err());
    }

    /// The fields serde reads for one section, from its own unknown-field error.
    fn fields_of<T: serde::de::DeserializeOwned + std::fmt::Debug>() -> Vec<String> {
        let err = toml::from_str::<T>("__no_such_setting = 1").expect_err("unknown field");
        let msg = err.message().to_owned();
        // "expected `a`", "expected `a` or `b`", "expected one of `a`, `b`, `c`".
        let list = msg
            .split("expected ")
            .nth(1)
            .unwrap_or_else(|| panic!("{msg}"));
        list.trim_start_matches("one of ")
            .split(", ")
            .flat_map(|f| f.split(" or "))
            .map(|f| f.trim().trim_matches('`').to_owned())
            .filter(|f| f != "nice_range")
            .collect()
    }

    /// Every field of every section is a setting of the table, and every setting a field: a
    /// setting cannot be added, renamed or dropped without its definition.
    #[test]
    fn every_section_field_is_defined_once_in_the_settings_table() {
        let sections = [
            ("policy", fields_of::<PolicyKnobs>()),
            ("profiles", fields_of::<ProfileSettings>()),
            ("power", fields_of::<PowerSettings>()),
            ("live", fields_of::<LiveSettings>()),
            ("node", fields_of::<NodeSettings>()),
        ];
        let mut fields: Vec<String> = sections
            .iter()
            .flat_map(|(sec, fs)| fs.iter().map(move |f| format!("{sec}.{f}")))
            .collect();
        fields.sort();
        let mut defined: Vec<String> = crate::settings::SETTINGS
            .iter()
            .map(crate::settings::Setting::key)
            .collect();
        defined.sort();
        assert_eq!(fields, defined);
        // Every default is within its range.
        let defaults = default_table();
        assert!(crate::settings::out_of_range(&crate::settings::number_in(&defaults)).is_empty());
        // The shipped file sets what it sets to the defaults, so that a setting's value is
        // written once too.
        let shipped: toml::Table =
            toml::from_str(crate::config::BUNDLED_CONFIG).expect("shipped heshare.toml");
        for s in crate::settings::SETTINGS {
            if let Some(v) = shipped.get(s.section).and_then(|t| t.get(s.name)) {
                if s.key() == "policy.reference_gpu" {
                    continue;
                }
                let d = defaults.get(s.section).and_then(|t| t.get(s.name));
                let same = match (v, d) {
                    (toml::Value::Integer(a), Some(toml::Value::Float(b))) => {
                        (*a as f64 - b).abs() < 1e-12
                    }
                    (a, Some(b)) => a == b,
                    (_, None) => false,
                };
                assert!(same, "{}: shipped {v} against default {d:?}", s.key());
            }
        }
    }

    /// `docs/configuration.md` is what `heshare settings` prints.
    #[test]
    fn the_settings_reference_page_is_not_stale() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md");
        let page = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            page == settings_reference(),
            "{path} is stale: run `cargo run --release -- settings > docs/configuration.md`"
        );
    }

    #[test]
    fn hostlists_and_a_nodes_gres_type_are_read_as_slurm_writes_them() {
        for (list, name, yes) in [
            ("gpu[01-08]", "gpu03", true),
            ("gpu[01-08]", "gpu3", false),
            ("gpu[01-08]", "gpu09", false),
            ("gpu[01-03,10]", "gpu10", true),
            ("gpu[01-03,10],login1", "login1", true),
            ("n[1-12]", "n12", true),
            ("n[1-12]", "n13", false),
            ("rack[1-2]-gpu[1-4]", "rack2-gpu3", true),
            ("rack[1-2]-gpu[1-4]", "rack3-gpu3", false),
            ("ht4", "ht4", true),
            ("ht4", "ht40", false),
        ] {
            assert_eq!(hostlist_contains(list, name), yes, "{list} {name}");
        }
        let conf = "NodeName=DEFAULT CPUs=4\n\
                    NodeName=gpu[01-08] Gres=gpu:a100:4,mps:400 Features=a100 # big\n\
                    NodeName=gpu[09-40] CPUs=8 Gres=mps:200,gpu:t4:2\n\
                    NodeName=cpu[1-4] CPUs=64\n";
        assert_eq!(slurm_node_gpu_type(conf, "gpu05").as_deref(), Some("a100"));
        assert_eq!(slurm_node_gpu_type(conf, "gpu12").as_deref(), Some("t4"));
        assert_eq!(slurm_node_gpu_type(conf, "cpu2"), None);
        assert_eq!(slurm_node_gpu_type(conf, "other"), None);
    }

    #[test]
    fn a_time_value_out_of_range_is_refused_by_name() {
        let bad = SMALL.replace("energy_weight = 0.5", "time_value_kwh_per_gpu_hour = -1");
        let errs = parse(&bad).expect_err("must fail");
        assert_eq!(
            errs[0].field, "policy.time_value_kwh_per_gpu_hour",
            "{}",
            errs[0]
        );
        assert_eq!(errs[0].line, Some(3), "{}", errs[0]);
        let cfg = parse(SMALL).expect("valid");
        assert!((cfg.policy.time_value_kwh_per_gpu_hour - 3.0).abs() < 1e-12);
        // An older heshare.toml's weights still load; nothing reads them.
        let old = SMALL.replace(
            "energy_weight = 0.5",
            "energy_weight = 0.5\nspare_energy_weight = 0.5",
        );
        assert_eq!(parse(&old).expect("loads").retired.len(), 2);
    }

    #[test]
    fn wrong_type_is_located() {
        let bad = SMALL.replace("memory_gib = 16", "memory_gib = \"16\"");
        let errs = parse(&bad).expect_err("must fail");
        assert_eq!(errs[0].line, Some(15), "{}", errs[0]);
        assert_eq!(errs[0].field, "gpu.v100.memory_gib");
    }

    #[test]
    fn slurm_conf_gres_is_checked_against_the_catalog() {
        let cfg = parse(SMALL).expect("valid");
        let conf = "NodeName=n1 Gres=gpu:v100:2,mps:200 State=UNKNOWN\n# NodeName=x Gres=gpu:zz:1\nNodeName=n2 Gres=gpu:a40:4(S:0-1)\nNodeName=n3 Gres=gpu:4\nNodeName=n4 gres=gpu:V100M16:1\n";
        let f = check_slurm_gres(conf, &cfg);
        assert_eq!(f.len(), 3, "{f:?}");
        assert_eq!(f[0].line, 3);
        assert!(f[0].message.contains("\"a40\" is not in the catalog"));
        assert_eq!(f[1].line, 4);
        assert!(f[1].message.contains("no GPU type"));
        assert!(f[2].message.contains("did you mean \"v100\""));
        let conf = "NodeName=a Gres=gpu:v100:2,mps:200\nNodeName=b Gres=gpu:v100:8(S:0-1)\nNodeName=c Gres=gpu:zz:4\n";
        assert_eq!(slurm_gpu_types(conf, &cfg), vec![(0, 8)]);
    }
}
