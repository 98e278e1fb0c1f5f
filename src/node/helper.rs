//! The Prolog, Epilog and TaskProlog flows. Each run holds the node's lock from start to end,
//! takes its one reading of the time after the lock (so concurrent helpers' intervals never
//! overlap), and moves the node from one consistent state to the next:
//!
//! - prolog: close each of the job's GPUs' intervals (energy so far to whoever was there), add
//!   the job, save; start MPS for a shared GPU; re-optimise and apply the clock; save.
//! - epilog: close the intervals, take the job off, put its record in the outbox, save; apply
//!   the clock for those left (reset when none), stop MPS after the last sharing job; save;
//!   append the outbox to the accounting log; save.
//!
//! Every run first appends any record a killed run left in the outbox and resets the clock of
//! any GPU the state says is idle, so a crash at any step is repaired by the next run.

use super::attribution::{MeasuredWork, counter_delta, measured_split, model_weights, split};
use super::gpu::{BackendKind, GpuControl, GpuError, ModelGpus, NvmlGpus, ProcessWork};
use super::mps::{Mps, MpsError};
use super::record::{self, Basis, Record, RecordKind};
use super::state::{
    ClockChange, GpuState, JobOnGpu, Locked, NodeState, ProcSeen, Sample, StateDir, StateError,
};
use crate::config::{BackendChoice, Config, GpuSettings, OtherUserShare};
use crate::model::{GpuType, JobClass, JobKind, ModelParams, Tenant, predict};
use crate::policy::{ShareError, ShareParams, optimize};
use crate::units::{Mhz, SharePct, Watts};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum HelperError {
    #[error("{var}: {message}")]
    Env { var: &'static str, message: String },
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error("MPS: {0}")]
    Mps(#[from] MpsError),
    #[error("accounting log {}: {source}", path.display())]
    Log {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("GPU {gpu}: {message}")]
    GpuType { gpu: u32, message: String },
}

/// What Slurm tells the helper about a job, from the Prolog/Epilog environment.
#[derive(Debug, Clone, PartialEq)]
pub struct JobEnv {
    pub job_id: String,
    pub user: String,
    pub uid: u32,
    pub account: String,
    pub node: String,
    pub gpus: Vec<u32>,
    /// `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`: set by gres/mps for a shared GPU.
    pub mps_pct: Option<u8>,
    pub class: Option<String>,
    pub gpu_type: Option<String>,
    pub bound: Option<f64>,
    /// `SPANK_HESHARE_LIMIT_TYPE`: the type the job's time limit is written for.
    pub limit_type: Option<String>,
    /// `SPANK_HESHARE_DEMAND_PCT`: what its user said it needs of a reference GPU.
    pub demand_pct: Option<u8>,
    /// `SPANK_HESHARE_PROFILE_KEYS`: the keys `job_submit` computed for the job.
    pub profile_keys: Vec<String>,
    /// `SPANK_HESHARE_PROFILE`: the learned class it was placed with, when it reads.
    pub profile: Option<String>,
    /// `SLURM_JOB_EXIT_CODE2` (Epilog only): how the job ended.
    pub exit: Option<String>,
    /// `SPANK_HESHARE_TIME_LIMIT_S`: a profiled job's time limit, which caps its learned runtime.
    pub time_limit_s: Option<f64>,
}

impl JobEnv {
    /// Reads the job from `get` (the environment). `Ok(None)` for a job without GPUs, which the
    /// helper leaves alone.
    pub fn from_vars(get: &dyn Fn(&str) -> Option<String>) -> Result<Option<JobEnv>, HelperError> {
        let gpus_var = if get("SLURM_JOB_GPUS").is_some() {
            "SLURM_JOB_GPUS"
        } else {
            "CUDA_VISIBLE_DEVICES"
        };
        let gpus = match get(gpus_var) {
            None => return Ok(None),
            Some(s) if s.trim().is_empty() || s == "NoDevFiles" => return Ok(None),
            Some(s) => parse_gpu_list(&s).map_err(|message| HelperError::Env {
                var: gpus_var,
                message,
            })?,
        };
        let need = |var: &'static str| {
            get(var).filter(|v| !v.is_empty()).ok_or(HelperError::Env {
                var,
                message: "not set (the helper must run as Slurm's Prolog/Epilog)".into(),
            })
        };
        let job_id = need("SLURM_JOB_ID")?;
        check_job_id(&job_id)?;
        let uid_s = need("SLURM_JOB_UID")?;
        let uid = uid_s.parse::<u32>().map_err(|_| HelperError::Env {
            var: "SLURM_JOB_UID",
            message: format!("{uid_s:?} is not a numeric uid"),
        })?;
        let node = need("SLURMD_NODENAME")?;
        check_node(&node)?;
        let mps_pct = match get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") {
            None => None,
            Some(s) => Some(
                s.parse::<u8>()
                    .ok()
                    .filter(|p| (1..=100).contains(p))
                    .ok_or(HelperError::Env {
                        var: "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                        message: format!("{s:?} is not a percentage 1..=100"),
                    })?,
            ),
        };
        let bound = match get("SPANK_HESHARE_BOUND") {
            None => None,
            Some(s) => Some(
                s.parse::<f64>()
                    .ok()
                    .filter(|b| b.is_finite() && *b >= 1.0)
                    .ok_or(HelperError::Env {
                        var: "SPANK_HESHARE_BOUND",
                        message: format!("{s:?} is not a slowdown bound >= 1"),
                    })?,
            ),
        };
        Ok(Some(JobEnv {
            job_id,
            user: get("SLURM_JOB_USER").unwrap_or_else(|| uid.to_string()),
            uid,
            account: get("SLURM_JOB_ACCOUNT").unwrap_or_default(),
            node,
            gpus,
            mps_pct,
            class: get("SPANK_HESHARE_CLASS").filter(|s| !s.is_empty()),
            gpu_type: get("SPANK_HESHARE_GPU_TYPE").filter(|s| !s.is_empty()),
            bound,
            limit_type: get("SPANK_HESHARE_LIMIT_TYPE").filter(|s| !s.is_empty()),
            // Only a hint for the clock: a value that is not a percentage is ignored.
            demand_pct: get("SPANK_HESHARE_DEMAND_PCT")
                .and_then(|s| s.parse::<u8>().ok())
                .filter(|p| (1..=100).contains(p)),
            // Only job_submit writes these (it removes any a submission brings); a key that
            // does not read is dropped, and the store checks each against the job's uid.
            profile_keys: get("SPANK_HESHARE_PROFILE_KEYS")
                .map(|s| {
                    s.split(',')
                        .filter_map(crate::profile::ProfileKey::parse)
                        .map(|k| k.as_str().to_owned())
                        .take(8)
                        .collect()
                })
                .unwrap_or_default(),
            profile: get("SPANK_HESHARE_PROFILE")
                .filter(|p| crate::profile::wire::decode(p, "profile").is_some()),
            exit: get("SLURM_JOB_EXIT_CODE2").filter(|s| s.len() <= 32 && s.contains(':')),
            time_limit_s: get("SPANK_HESHARE_TIME_LIMIT_S")
                .and_then(|s| s.parse::<f64>().ok())
                .filter(|t| t.is_finite() && *t > 0.0),
        }))
    }
}

/// Job ids name files (a job's published GPUs): digits, letters, `_` and `.` only.
fn check_job_id(job_id: &str) -> Result<(), HelperError> {
    let ok = !job_id.is_empty()
        && !job_id.starts_with('.')
        && job_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    if ok {
        Ok(())
    } else {
        Err(HelperError::Env {
            var: "SLURM_JOB_ID",
            message: format!("{job_id:?} is not a job id"),
        })
    }
}

/// Node names name directories.
fn check_node(node: &str) -> Result<(), HelperError> {
    if node.is_empty() || node.contains('/') || node.starts_with('.') || node.contains('\0') {
        return Err(HelperError::Env {
            var: "SLURMD_NODENAME",
            message: format!("{node:?} is not a node name"),
        });
    }
    Ok(())
}

/// `0,2-3` → [0, 2, 3].
pub fn parse_gpu_list(s: &str) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        let bad = || format!("{part:?} in {s:?} is not a GPU index or range");
        match part.split_once('-') {
            Some((a, b)) => {
                let a: u32 = a.parse().map_err(|_| bad())?;
                let b: u32 = b.parse().map_err(|_| bad())?;
                if b < a || b - a > 1024 {
                    return Err(bad());
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().map_err(|_| bad())?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// What the Prolog published for an MPS job's TaskProlog.
#[derive(Debug, Clone, PartialEq)]
struct Published {
    gpus: Vec<u32>,
    /// The job's GPU work waits for another user's MPS server.
    waits: bool,
    /// The job runs outside MPS, time-sliced beside another user's MPS server.
    outside_mps: bool,
}

impl Published {
    fn text(&self) -> String {
        let list: Vec<String> = self.gpus.iter().map(u32::to_string).collect();
        format!(
            "gpus={}\nwaits={}\noutside_mps={}\n",
            list.join(","),
            u8::from(self.waits),
            u8::from(self.outside_mps)
        )
    }

    fn parse(text: &str) -> Option<Published> {
        let mut gpus = None;
        let mut waits = false;
        let mut outside_mps = false;
        for line in text.lines() {
            match line.split_once('=') {
                Some(("gpus", v)) => gpus = parse_gpu_list(v).ok(),
                Some(("waits", v)) => waits = v == "1",
                Some(("outside_mps", v)) => outside_mps = v == "1",
                _ => {}
            }
        }
        Some(Published {
            gpus: gpus?,
            waits,
            outside_mps,
        })
    }
}

/// The lines TaskProlog prints for a task (nothing for a job without an MPS share): `export`s
/// of the job's GPU's MPS directories and, when its GPU work must wait for another user's MPS
/// server, a `print` that tells the job so. The GPU is the one the Prolog published (node
/// indices, as Slurm allocated them), else Slurm's own `SLURM_STEP_GPUS`/`SLURM_JOB_GPUS`;
/// never `CUDA_VISIBLE_DEVICES`, which counts from 0 inside a job whose devices are constrained.
pub fn task_exports(
    cfg: &Config,
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<String, HelperError> {
    let Some(pct) = get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") else {
        return Ok(String::new());
    };
    let pct: u8 = pct
        .parse()
        .ok()
        .filter(|p| (1..=100).contains(p))
        .ok_or(HelperError::Env {
            var: "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
            message: format!("{pct:?} is not a percentage 1..=100"),
        })?;
    let not_set = |var: &'static str| HelperError::Env {
        var,
        message: "not set (the helper must run as Slurm's TaskProlog)".into(),
    };
    let node = get("SLURMD_NODENAME").ok_or(not_set("SLURMD_NODENAME"))?;
    check_node(&node)?;
    let job_id = get("SLURM_JOB_ID").ok_or(not_set("SLURM_JOB_ID"))?;
    check_job_id(&job_id)?;
    let mps = mps_of(cfg, &node);
    let published = std::fs::read_to_string(mps.jobs_dir().join(&job_id))
        .ok()
        .and_then(|t| Published::parse(&t));
    let (gpu, waits, outside) = match published {
        Some(p) => (p.gpus.first().copied(), p.waits, p.outside_mps),
        None => {
            let from_env = ["SLURM_STEP_GPUS", "SLURM_JOB_GPUS"]
                .into_iter()
                .find_map(|var| get(var).map(|v| (var, v)));
            match from_env {
                Some((var, list)) => (
                    parse_gpu_list(&list)
                        .map_err(|message| HelperError::Env { var, message })?
                        .first()
                        .copied(),
                    false,
                    false,
                ),
                None => (None, false, false),
            }
        }
    };
    let Some(gpu) = gpu else {
        return Ok(String::new());
    };
    if outside {
        // No MPS control daemon listens in this directory (root's, kept empty), so the job's
        // CUDA clients find none and run in contexts of their own, which the GPU time-slices
        // with the other user's server. Without it they would try MPS's default directory.
        return Ok(format!(
            "export CUDA_MPS_PIPE_DIRECTORY={}\nunset CUDA_MPS_ACTIVE_THREAD_PERCENTAGE\nprint heshare: GPU {gpu} is in MPS use by another user's jobs; MPS serves one user per GPU, so this job runs outside MPS, time-sliced with theirs: its {pct}% share is held but not enforced\n",
            mps.no_mps_dir().display(),
        ));
    }
    let mut out = format!(
        "export CUDA_MPS_PIPE_DIRECTORY={}\nexport CUDA_MPS_LOG_DIRECTORY={}\nexport CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={pct}\n",
        mps.pipe_dir(gpu).display(),
        mps.log_dir(gpu).display(),
    );
    if waits {
        out.push_str(&format!(
            "print heshare: GPU {gpu} is in MPS use by another user's jobs; MPS serves one user per GPU, so this job's GPU work waits until theirs ends\n"
        ));
    }
    Ok(out)
}

fn mps_of(cfg: &Config, node: &str) -> Mps {
    Mps::new(
        &cfg.node.mps_control,
        &cfg.node.mps_control_origin,
        &cfg.node.mps_pipe_dir,
        &cfg.node.mps_log_dir,
        node,
        Duration::from_secs_f64(cfg.node.command_timeout_s),
    )
    .with_library_path(&cfg.node.mps_library_path)
}

/// Opens the configured GPU backend at time `now`; the warning says when `auto` fell back.
pub fn open_backend(
    cfg: &Config,
    dir: &StateDir,
    now: f64,
) -> Result<(Box<dyn GpuControl>, Option<String>), HelperError> {
    let model =
        || ModelGpus::open(&dir.model_file(), now).map(|m| Box::new(m) as Box<dyn GpuControl>);
    let manage = cfg.node.gpu_settings == GpuSettings::Manage;
    match cfg.node.backend {
        BackendChoice::Model => Ok((model()?, None)),
        BackendChoice::Nvml => Ok((Box::new(NvmlGpus::init_with(manage)?), None)),
        BackendChoice::Auto => match NvmlGpus::init_with(manage) {
            Ok(n) => Ok((Box::new(n), None)),
            Err(e) => Ok((
                model()?,
                Some(format!(
                    "{e}; using the MODEL backend: clocks, power and energy are modelled, not measured"
                )),
            )),
        },
    }
}

/// A test hook: `HESHARE_TEST_KILL_AT=STEP` kills the helper with SIGKILL at that step, so the
/// tests can prove that the next run repairs whatever a kill leaves.
pub const STEPS: &[&str] = &[
    "prolog:locked",
    "prolog:joined",
    "prolog:mps",
    "prolog:clocked",
    "epilog:locked",
    "epilog:recorded",
    "epilog:clocked",
    "epilog:logged",
];

/// One node's helper.
pub struct NodeHelper<'a> {
    cfg: &'a Config,
    node: String,
    dir: StateDir,
    mps: Mps,
    kill_at: Option<String>,
    /// slurm.conf as slurmd reads it, for the `Gres=gpu:TYPE:N` of this node (read only where
    /// nothing before it names a GPU's type).
    slurm_conf: Option<std::path::PathBuf>,
    /// Notes for the log (slurmd keeps the helper's stderr in its log at debug level).
    pub warnings: Vec<String>,
}

/// What one locked run works on.
struct Run {
    lock: Locked,
    st: NodeState,
    gpu: Box<dyn GpuControl>,
    now: f64,
}

/// One GPU as `heshare node status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct GpuStatus {
    pub gpu: u32,
    pub gpu_type: String,
    pub jobs: Vec<String>,
    pub locked_mhz: Option<u32>,
    pub backend_locked_mhz: Option<u32>,
    pub mps_daemon: bool,
    pub counter_first_j: Option<f64>,
    pub counter_last_j: Option<f64>,
    pub attributed_jobs_j: f64,
    pub attributed_idle_j: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct NodeStatus {
    pub node: String,
    pub backend: BackendKind,
    pub gpus: Vec<GpuStatus>,
    pub pending_records: usize,
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn round_ms(t: f64) -> i64 {
    // Unix times in ms fit an i64 for the next 292 million years.
    #[allow(clippy::cast_possible_truncation)]
    let ms = (t * 1000.0).round() as i64;
    ms
}

impl<'a> NodeHelper<'a> {
    pub fn new(cfg: &'a Config, node: &str) -> Self {
        NodeHelper {
            cfg,
            node: node.to_owned(),
            dir: StateDir::new(&cfg.node.state_dir, node),
            mps: mps_of(cfg, node),
            kill_at: std::env::var("HESHARE_TEST_KILL_AT").ok(),
            slurm_conf: None,
            warnings: Vec::new(),
        }
    }

    /// Where slurm.conf is (`path`), for this node's `Gres=gpu:TYPE:N` type: the answer for GPUs
    /// whose NVML name matches no catalog type (or no NVML at all) and no `[node]` setting names.
    #[must_use]
    pub fn with_slurm_conf(mut self, path: std::path::PathBuf) -> Self {
        self.slurm_conf = Some(path);
        self
    }

    fn step(&self, name: &str) {
        if self.kill_at.as_deref() == Some(name) {
            // SAFETY: raise() sends a signal to this process; SIGKILL cannot be caught.
            unsafe {
                libc::raise(libc::SIGKILL);
            }
        }
    }

    fn begin(&mut self) -> Result<Run, HelperError> {
        let lock = self.dir.lock()?;
        let (st, warn) = self.dir.load(&lock)?;
        self.warnings.extend(warn);
        let now = unix_now();
        let (gpu, warn) = open_backend(self.cfg, &self.dir, now)?;
        self.warnings.extend(warn);
        Ok(Run { lock, st, gpu, now })
    }

    fn save(&self, run: &mut Run) -> Result<(), HelperError> {
        run.gpu.commit()?;
        self.dir.save(&run.lock, &run.st)?;
        Ok(())
    }

    /// Appends what waits in the outbox, then empties it.
    fn flush(&self, run: &mut Run) -> Result<(), HelperError> {
        if run.st.outbox.is_empty() {
            return Ok(());
        }
        let log = &self.cfg.node.accounting_log;
        record::append(log, &run.st.outbox).map_err(|source| HelperError::Log {
            path: log.clone(),
            source,
        })?;
        run.st.outbox.clear();
        self.save(run)
    }

    /// What a killed run may have left: records not yet in the log, clocks of GPUs without
    /// jobs, MPS daemons without sharing jobs.
    fn repair(&mut self, run: &mut Run) -> Result<(), HelperError> {
        self.flush(run)?;
        let mut changed = false;
        let idle: Vec<u32> = run
            .st
            .gpus
            .iter()
            .filter(|(_, g)| g.jobs.is_empty())
            .map(|(&i, _)| i)
            .collect();
        let manage = self.cfg.node.gpu_settings == GpuSettings::Manage;
        for i in idle {
            let gs = run.st.gpus.get_mut(&i).expect("listed above");
            if manage && (gs.locked_mhz.is_some() || run.gpu.locked_clock(i).is_some()) {
                reattach(self.cfg, run.gpu.as_mut(), i, &gs.gpu_type)?;
                match run.gpu.reset_clock(i) {
                    Ok(()) => {
                        gs.locked_mhz = None;
                        changed = true;
                        self.warnings
                            .push(format!("GPU {i}: no job, clock was still locked: reset"));
                    }
                    // Nothing of a job's depends on it: note it and try again next run.
                    Err(e) => self.warnings.push(format!(
                        "GPU {i}: no job, clock still locked at {}; reset refused: {e} (tried again at every hook)",
                        gs.locked_mhz.map_or("an unknown clock".into(), |m| format!("{m} MHz"))
                    )),
                }
            }
            if gs.mps_daemon {
                self.mps.stop(i)?;
                gs.mps_daemon = false;
                changed = true;
            }
        }
        if changed {
            self.save(run)?;
        }
        // Published GPUs of jobs a killed Epilog did not remove.
        if let Ok(entries) = std::fs::read_dir(self.mps.jobs_dir()) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let live = run
                    .st
                    .gpus
                    .values()
                    .any(|g| g.jobs.iter().any(|j| j.job_id == name));
                if !live && !name.starts_with('.') {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        Ok(())
    }

    fn gpu_type_for(&self, run: &Run, gpu: u32, job: &JobEnv) -> Result<usize, HelperError> {
        // What the node knows of its own hardware comes first: a job offered several types does
        // not say which one it landed on. Each source is asked only when those before it said
        // nothing the catalog knows (NVML is a driver call, slurm.conf a file read).
        let sources: [&dyn Fn() -> Option<String>; 6] = [
            &|| run.st.gpus.get(&gpu).map(|g| g.gpu_type.clone()),
            &|| {
                run.gpu
                    .name(gpu)
                    .ok()
                    .and_then(|n| self.match_device_name(&n))
            },
            &|| self.cfg.node.node_gpu_types.get(&self.node).cloned(),
            &|| self.cfg.node.gpu_type.clone(),
            &|| {
                let text = std::fs::read_to_string(self.slurm_conf.as_ref()?).ok()?;
                crate::config::slurm_node_gpu_type(&text, &self.node)
            },
            &|| job.gpu_type.clone(),
        ];
        for source in sources {
            if let Some(t) = source().and_then(|name| self.cfg.resolve_gpu_type(&name)) {
                return Ok(t);
            }
        }
        Err(HelperError::GpuType {
            gpu,
            message: format!(
                "unknown GPU type: the device name matches no catalog type ({}), [node] node_gpu_types and gpu_type say nothing of this node, slurm.conf gives it no Gres=gpu:TYPE:N, and the job names no single type",
                self.cfg.gpu_type_names()
            ),
        })
    }

    /// The catalog type an NVML device name stands for, if any.
    pub fn catalog_type_of(&self, device: &str) -> Option<String> {
        self.match_device_name(device)
    }

    /// Matches an NVML device name ("NVIDIA A100-SXM4-40GB") to a catalog type by the longest
    /// catalog name or alias it contains.
    fn match_device_name(&self, device: &str) -> Option<String> {
        let lower = device.to_ascii_lowercase();
        self.cfg
            .gpu_types
            .iter()
            .flat_map(|g| {
                std::iter::once(g.name.as_str())
                    .chain(g.aliases.iter().map(String::as_str))
                    .map(move |n| (n.to_ascii_lowercase(), g.name.clone()))
            })
            // Two-letter aliases (openb's G2, G3) would match inside unrelated names.
            .filter(|(n, _)| n.len() >= 3 && lower.contains(n.as_str()))
            .max_by_key(|(n, _)| n.len())
            .map(|(_, g)| g)
    }

    /// Reads the counter and gives the energy since the last reading to whoever held the GPU:
    /// by what the driver measured per process where it did, else by the model.
    fn close_interval(&mut self, run: &mut Run, gpu: u32) -> Result<(), HelperError> {
        let counter = run.gpu.energy_mj(gpu)?;
        let work = match run.gpu.process_work(gpu) {
            Ok(w) => w,
            Err(e) => {
                self.warnings.push(format!(
                    "GPU {gpu}: {e}; this interval is split by the model"
                ));
                None
            }
        };
        let now = run.now;
        let cfg = self.cfg;
        let params = self.model_params();
        let gs = run.st.gpus.get_mut(&gpu).expect("caller inserted the GPU");
        let sample = Sample {
            t: now,
            counter_mj: counter,
        };
        match gs.last {
            None => {
                gs.first = Some(sample);
                gs.idle_since = Some(now);
                // Work done before the helper's first reading belongs to no interval of its.
                if let Some(w) = &work {
                    map_work(&mut gs.procs, &[], w);
                }
            }
            Some(last) => {
                let (energy, reset) = counter_delta(last.counter_mj, counter);
                let gpu_type = &cfg.gpu_types[cfg
                    .resolve_gpu_type(&gs.gpu_type)
                    .unwrap_or(cfg.reference_gpu)];
                let clock = Mhz(gs.locked_mhz.unwrap_or(gs.default_clock_mhz));
                let (weights, idle_w) =
                    interval_model_weights(cfg, gpu_type, &gs.jobs, clock, params);
                let (parts, idle, measured) = match &work {
                    Some(w) => {
                        let mw = map_work(&mut gs.procs, &gs.jobs, w);
                        // Neighbours are the MPS server's other clients, which run at the
                        // same time as the job; a context time-sliced with the server's does
                        // not (its effect is the job's MPS wait or time slice).
                        let in_mps = |j: &JobOnGpu| {
                            j.outside_mps_beside_uid.is_none() && j.waits_for_uid.is_none()
                        };
                        let clients: f64 = gs
                            .jobs
                            .iter()
                            .zip(&mw.busy)
                            .filter(|(j, _)| in_mps(j))
                            .map(|(_, b)| b.max(0.0))
                            .sum();
                        for (j, b) in gs.jobs.iter_mut().zip(&mw.busy) {
                            j.busy_pct_s += b.max(0.0);
                            j.busy_window_s += (now - last.t).max(0.0);
                            if in_mps(j) {
                                j.neighbour_busy_pct_s += (clients - b.max(0.0)).max(0.0);
                            }
                        }
                        let shares: Vec<f64> =
                            gs.jobs.iter().map(|j| share_of(j).fraction()).collect();
                        let s = measured_split(
                            energy,
                            now - last.t,
                            gpu_type.idle_power.0,
                            &shares,
                            &mw,
                            &weights,
                        );
                        (s.parts, s.idle, s.measured)
                    }
                    None => {
                        let (p, i) = split(energy, &weights, idle_w);
                        let zero = vec![crate::units::Joules(0.0); p.len()];
                        (p, i, zero)
                    }
                };
                for ((j, p), m) in gs.jobs.iter_mut().zip(parts).zip(measured) {
                    j.energy_j += p.0;
                    j.measured_j += m.0;
                    j.counter_reset |= reset;
                    gs.attributed_jobs_j += p.0;
                }
                gs.idle_j += idle.0;
                gs.attributed_idle_j += idle.0;
                if gs.idle_since.is_none() {
                    gs.idle_since = Some(last.t);
                }
            }
        }
        gs.last = Some(sample);
        Ok(())
    }

    /// Moves the idle energy gathered so far on `gpu` into an idle record in the outbox.
    fn emit_idle(&self, run: &mut Run, gpu: u32) {
        let now = run.now;
        let backend = run.gpu.kind();
        let gs = run.st.gpus.get_mut(&gpu).expect("caller inserted the GPU");
        let since = gs.idle_since.unwrap_or(now);
        if gs.idle_j > 0.0 {
            let dur = (now - since).max(1e-9);
            run.st.outbox.push(Record {
                record_id: format!("{}:idle:{gpu}:{}", self.node, round_ms(since)),
                kind: RecordKind::Idle,
                node: self.node.clone(),
                job_id: String::new(),
                user: String::new(),
                uid: 0,
                account: String::new(),
                class: None,
                gpus: vec![gpu],
                gpu_type: gs.gpu_type.clone(),
                share_pct: None,
                clocks: Vec::new(),
                start: since,
                end: now,
                energy_j: gs.idle_j,
                avg_w: gs.idle_j / dur,
                backend,
                counter_reset: false,
                complete: true,
                basis: Basis::Whole,
                mps_wait_s: 0.0,
                outside_mps: false,
                notes: vec![],
                clock_control: self.cfg.node.gpu_settings == GpuSettings::Manage,
                profile_keys: vec![],
                exit: None,
                busy_frac: None,
                neighbour_busy: None,
                max_memory_mib: None,
                time_limit_s: None,
            });
        }
        gs.idle_j = 0.0;
        gs.idle_since = Some(now);
    }

    fn model_params(&self) -> ModelParams {
        ModelParams::of(self.cfg)
    }

    /// Chooses the GPU's clock for the jobs on it (the #2 sharing optimizer), applies it, and
    /// tells a model GPU what it now draws. Without jobs: reset to the default.
    fn apply_clock(&mut self, run: &mut Run, gpu: u32) -> Result<(), HelperError> {
        let now = run.now;
        let gs = run.st.gpus.get(&gpu).expect("caller inserted the GPU");
        let t = self
            .cfg
            .resolve_gpu_type(&gs.gpu_type)
            .unwrap_or(self.cfg.reference_gpu);
        let gpu_type = &self.cfg.gpu_types[t];
        let reference = &self.cfg.gpu_types[self.cfg.reference_gpu];
        // Jobs waiting for another user's MPS server run nothing: the clock is for the others.
        let active: Vec<JobOnGpu> = running(&gs.jobs)
            .into_iter()
            .map(|i| gs.jobs[i].clone())
            .collect();
        let manage = self.cfg.node.gpu_settings == GpuSettings::Manage;
        if active.is_empty() {
            run.gpu.set_modelled_power(gpu, gpu_type.idle_power);
            let gs = run.st.gpus.get_mut(&gpu).expect("present");
            if !manage || (gs.locked_mhz.is_none() && run.gpu.locked_clock(gpu).is_none()) {
                // Nothing heshare locked: nothing to undo (read-only never locks).
                gs.locked_mhz = None;
                return Ok(());
            }
            match run.gpu.reset_clock(gpu) {
                Ok(()) => gs.locked_mhz = None,
                // A refused reset must cost neither the job's record nor the MPS daemon's stop:
                // a warning, and the lock stays on record so every later hook tries again.
                Err(e) => self.warnings.push(format!(
                    "GPU {gpu}: no job left, but resetting its locked clock ({}) was refused: {e}; \
                     tried again at every hook",
                    gs.locked_mhz
                        .map_or("unknown".into(), |m| format!("{m} MHz"))
                )),
            }
            return Ok(());
        }
        let (clock, note) = self.choose_clock(gpu_type, reference, &active);
        if let Some(n) = note {
            self.warnings.push(format!("GPU {gpu}: {n}"));
        }
        let gs = run.st.gpus.get_mut(&gpu).expect("present");
        let applied = if !manage {
            // What the full mode would set, for the admin (and gpu-check) to read.
            self.warnings.push(format!(
                "GPU {gpu}: [node] gpu_settings = \"read-only\": would {} (nothing changed)",
                if clock == gpu_type.default_sm_clock {
                    format!("keep the default clock {clock}")
                } else {
                    format!("lock {clock}")
                }
            ));
            None
        } else {
            let r = if clock == gpu_type.default_sm_clock {
                run.gpu.reset_clock(gpu).map(|()| None)
            } else {
                run.gpu.lock_clock(gpu, clock).map(|()| Some(clock.0))
            };
            match r {
                Ok(a) => a,
                Err(e) => {
                    // A GPU that refuses clock changes (a VM, no root) still gets its accounting.
                    self.warnings
                        .push(format!("GPU {gpu}: {e}; clock left as it was"));
                    gs.locked_mhz
                }
            }
        };
        gs.locked_mhz = applied;
        let at = Mhz(applied.unwrap_or(gs.default_clock_mhz));
        for j in &mut gs.jobs {
            if j.clocks.last().is_none_or(|c| c.mhz != at.0) {
                j.clocks.push(ClockChange { t: now, mhz: at.0 });
            }
        }
        let fallback = fallback_classes(&active);
        let tenants: Vec<Tenant<'_>> = active
            .iter()
            .zip(&fallback)
            .map(|(j, f)| tenant(self.cfg, j, f))
            .collect();
        let power: Watts = predict(gpu_type, reference, &tenants, at, self.model_params()).power;
        run.gpu.set_modelled_power(gpu, power);
        Ok(())
    }

    fn choose_clock(
        &self,
        gpu: &GpuType,
        reference: &GpuType,
        jobs: &[JobOnGpu],
    ) -> (Mhz, Option<String>) {
        use crate::policy::node_clock::{Stays, Tenant, clock_of, node_clock};
        // Sized for the upper end of what each class may need, as placement sized the shares; a
        // profiled job as its runs measured it (their upper quantile).
        let learned: Vec<Option<JobClass>> = jobs.iter().map(learned_class).collect();
        let tenants: Vec<Tenant<'_>> = jobs
            .iter()
            .zip(&learned)
            .map(|(j, l)| Tenant {
                class: match l {
                    Some(c) => Some(c),
                    None => j
                        .class
                        .as_deref()
                        .and_then(|c| self.cfg.class_on(c, j.demand_pct, gpu)),
                },
                share: share_of(j),
                user: j.uid,
                bound: j.bound,
                keeps_default: j.default_clock,
                risk: l.as_ref().zip(j.time_limit_s).map(|(c, limit)| {
                    let written_for = j
                        .limit_type
                        .as_deref()
                        .and_then(|t| self.cfg.gpu_type(t))
                        .map(|t| &self.cfg.gpu_types[t]);
                    crate::policy::belief::LimitRisk::of(self.cfg, c, gpu, written_for, limit)
                }),
            })
            .collect();
        let params = ShareParams::of(self.cfg);
        match node_clock(&tenants, |sj| {
            clock_of(&optimize(gpu, reference, sj, params))
        }) {
            Ok(clock) => (clock, None),
            Err(Stays::KilledSharing(i)) => (
                gpu.default_sm_clock,
                Some(format!(
                    "a run of job {} was killed at its time limit here beside a neighbour: default clock",
                    jobs.get(i).map_or("?", |j| j.job_id.as_str())
                )),
            ),
            Err(Stays::Unknown) => (
                gpu.default_sm_clock,
                Some("a job without a known --gpu-class shares it: default clock".into()),
            ),
            Err(Stays::Optimizer(ShareError::BoundViolated {
                job,
                class,
                slowdown,
                bound,
            })) => (
                gpu.default_sm_clock,
                Some(format!(
                    "job {} ({class}) runs {slowdown:.2}x slower than alone even at the fastest clock (bound {bound:.2}x): default clock",
                    jobs.get(job).map_or("?", |j| j.job_id.as_str())
                )),
            ),
            Err(Stays::Optimizer(e)) => (gpu.default_sm_clock, Some(format!("{e}: default clock"))),
        }
    }

    /// Prolog: the job joins its GPUs.
    pub fn prolog(&mut self, job: &JobEnv) -> Result<(), HelperError> {
        let mut run = self.begin()?;
        self.step("prolog:locked");
        self.repair(&mut run)?;
        let mut joined = Vec::new();
        for &g in &job.gpus {
            let t = self.gpu_type_for(&run, g, job)?;
            let gpu_type = &self.cfg.gpu_types[t];
            run.gpu.attach(g, gpu_type)?;
            let gs = run
                .st
                .gpus
                .entry(g)
                .or_insert_with(|| GpuState::new(&gpu_type.name, gpu_type.default_sm_clock.0));
            joined.push(g);
            if gs.jobs.iter().any(|j| j.job_id == job.job_id) {
                // A Prolog run again for the job (requeue, or after a killed run) joins once but
                // still makes sure of MPS and the clock below.
                continue;
            }
            self.close_interval(&mut run, g)?;
            self.emit_idle(&mut run, g);
            let class = job.class.clone().filter(|c| self.cfg.class(c).is_some());
            let learned = job
                .profile
                .as_deref()
                .and_then(|p| crate::profile::wire::decode(p, "profile"));
            let model_class = learned
                .as_ref()
                .or_else(|| class.as_deref().and_then(|c| self.cfg.class(c)));
            let bound = crate::policy::node_clock::tenant_bound(
                self.cfg,
                gpu_type,
                model_class,
                job.bound,
                job.limit_type.as_deref().and_then(|t| self.cfg.gpu_type(t)),
                learned.as_ref().zip(job.time_limit_s),
            );
            let default_clock = match (&learned, job.time_limit_s) {
                (Some(c), Some(limit)) => {
                    crate::policy::keeps_default_clock(self.cfg, c, gpu_type, limit)
                }
                _ => false,
            };
            run.st
                .gpus
                .get_mut(&g)
                .expect("inserted")
                .jobs
                .push(JobOnGpu {
                    job_id: job.job_id.clone(),
                    user: job.user.clone(),
                    uid: job.uid,
                    account: job.account.clone(),
                    class,
                    share_pct: job.mps_pct,
                    bound,
                    gpus: job.gpus.clone(),
                    start: run.now,
                    energy_j: 0.0,
                    clocks: Vec::new(),
                    counter_reset: false,
                    measured_j: 0.0,
                    waits_for_uid: None,
                    mps_wait_s: 0.0,
                    outside_mps_beside_uid: None,
                    default_clock,
                    time_limit_s: job.time_limit_s,
                    limit_type: job.limit_type.clone(),
                    demand_pct: job.demand_pct,
                    profile_keys: job.profile_keys.clone(),
                    profile: job.profile.clone(),
                    busy_pct_s: 0.0,
                    busy_window_s: 0.0,
                    neighbour_busy_pct_s: 0.0,
                });
        }
        self.save(&mut run)?;
        self.step("prolog:joined");
        if job.mps_pct.is_some() {
            self.join_mps(&mut run, job, &joined)?;
        }
        self.step("prolog:mps");
        for &g in &joined {
            self.apply_clock(&mut run, g)?;
        }
        self.save(&mut run)?;
        self.step("prolog:clocked");
        self.flush(&mut run)
    }

    /// An MPS job's GPUs: its user's server where the GPU's MPS is free or already theirs.
    /// Where another user's server holds it (MPS serves one user per GPU, and Slurm does not
    /// keep users apart), by `[node] other_user_share`: the job runs at once outside MPS,
    /// time-sliced with that server (the default, where the GPU's compute mode admits a second
    /// context), or it waits for that user's jobs to end. Either way it is told so. Then the
    /// job's GPUs are published for its TaskProlog.
    ///
    /// Why not fail: failing the Prolog would make Slurm drain the node and hold the job, so
    /// any user could take nodes out of service by asking for a share. Why time-slice first:
    /// a wait lasts as long as the other user's jobs (hours, for training), while the GPU has
    /// room; outside MPS the job only loses the share's enforcement, which `outside_mps` on its
    /// record says. Waiting is made visible the same way: a line in the job's output
    /// (TaskProlog), one in the node's helper.log, `mps_wait_s` on the record, and no energy
    /// charged for work it could not do.
    fn join_mps(&mut self, run: &mut Run, job: &JobEnv, joined: &[u32]) -> Result<(), HelperError> {
        let managed = self.manages_mps(run);
        let mut waits_any = false;
        let mut outside_any = false;
        for &g in joined {
            let gs = run.st.gpus.get(&g).expect("joined");
            let holder = mps_holder(&gs.jobs, Some(&job.job_id));
            let other = holder.filter(|&u| u != job.uid);
            let outside = other.is_some() && self.may_time_slice(run, g);
            let waits = other.filter(|_| !outside);
            let gs = run.st.gpus.get_mut(&g).expect("joined");
            if let Some(me) = gs.jobs.iter_mut().find(|j| j.job_id == job.job_id) {
                me.waits_for_uid = waits;
                me.outside_mps_beside_uid = other.filter(|_| outside);
            }
            if let Some(u) = other {
                let theirs: Vec<&str> = gs
                    .jobs
                    .iter()
                    .filter(|j| j.uid == u && is_mps_client(j))
                    .map(|j| j.job_id.as_str())
                    .collect();
                let what = if outside {
                    "it runs outside MPS, time-sliced with that server"
                } else {
                    "its GPU work waits until they end"
                };
                self.warnings.push(format!(
                    "GPU {g}: job {} (uid {}) landed on the MPS server of uid {u} (jobs {}): {what} (MPS serves one user per GPU)",
                    job.job_id,
                    job.uid,
                    theirs.join(",")
                ));
                if outside {
                    outside_any = true;
                    continue;
                }
                waits_any = true;
            }
            if managed {
                let started = match waits {
                    None => self.mps.start(g, job.uid),
                    Some(_) => self.mps.start_daemon(g),
                };
                if let Err(e) = started {
                    // Leave the node as it was: Slurm requeues the job and drains the node.
                    for &h in joined {
                        let gs = run.st.gpus.get_mut(&h).expect("joined");
                        gs.jobs.retain(|j| j.job_id != job.job_id);
                        self.apply_clock(run, h)?;
                    }
                    self.save(run)?;
                    return Err(e.into());
                }
                run.st.gpus.get_mut(&g).expect("joined").mps_daemon = true;
            }
        }
        if outside_any {
            // Where it cannot be made the job's clients still find no daemon (the base is
            // root's), so this is a note only.
            let dir = self.mps.no_mps_dir();
            if let Err(e) = super::secure::ensure_own_dir(&dir, 0o755) {
                self.warnings
                    .push(format!("{}: cannot create: {e}", dir.display()));
            }
        }
        self.publish(
            &job.job_id,
            &Published {
                gpus: joined.to_vec(),
                waits: waits_any,
                outside_mps: outside_any,
            },
        );
        self.save(run)
    }

    /// Whether a share may run outside MPS beside another user's server on `g`: the site wants
    /// it and the GPU's compute mode admits a second context (an unreadable mode counts as no).
    fn may_time_slice(&mut self, run: &Run, g: u32) -> bool {
        if self.cfg.node.other_user_share != OtherUserShare::TimeSlice {
            return false;
        }
        match run.gpu.multiple_contexts(g) {
            Ok(true) => true,
            Ok(false) => {
                self.warnings.push(format!(
                    "GPU {g}: compute mode admits one context (the MPS server's): a share of another user waits instead of running outside MPS"
                ));
                false
            }
            Err(e) => {
                self.warnings.push(format!(
                    "GPU {g}: compute mode unreadable ({e}): a share of another user waits"
                ));
                false
            }
        }
    }

    /// Writes the job's published GPUs (0644 in a 0755 directory: the TaskProlog runs as the
    /// job's user). Without it the TaskProlog falls back to Slurm's GPU variables, so a failure
    /// is a note, not a failed Prolog.
    fn publish(&mut self, job_id: &str, p: &Published) {
        let dir = self.mps.jobs_dir();
        let written = super::secure::ensure_own_dir(&dir, 0o755)
            .map_err(std::io::Error::other)
            .and_then(|()| {
                super::state::write_atomic(&dir.join(job_id), p.text().as_bytes(), 0o644)
            });
        if let Err(e) = written {
            self.warnings.push(format!(
                "job {job_id}: {}: cannot publish its GPUs for TaskProlog: {e}",
                dir.display()
            ));
        }
    }

    /// When the last running job of a GPU's MPS user has left, the longest-waiting user's jobs
    /// run: their server is started, and any other waiting user now waits for them.
    fn promote_waiting(&mut self, run: &mut Run, g: u32) -> Result<(), MpsError> {
        let now = run.now;
        let gs = run.st.gpus.get_mut(&g).expect("present");
        if mps_holder(&gs.jobs, None).is_some() {
            return Ok(());
        }
        let Some(next) = gs
            .jobs
            .iter()
            .find(|j| j.waits_for_uid.is_some())
            .map(|j| j.uid)
        else {
            return Ok(());
        };
        let mut promoted = Vec::new();
        for j in &mut gs.jobs {
            if j.waits_for_uid.is_none() {
                continue;
            }
            if j.uid == next {
                j.waits_for_uid = None;
                j.mps_wait_s += (now - j.start).max(0.0);
                promoted.push((j.job_id.clone(), j.gpus.clone()));
            } else {
                j.waits_for_uid = Some(next);
            }
        }
        let daemon = gs.mps_daemon;
        let ids: Vec<&str> = promoted.iter().map(|(id, _)| id.as_str()).collect();
        self.warnings.push(format!(
            "GPU {g}: the previous MPS user's jobs have ended; uid {next}'s waiting jobs {} now run",
            ids.join(",")
        ));
        for (id, gpus) in &promoted {
            let waits = gpus.iter().any(|x| {
                run.st.gpus.get(x).is_some_and(|o| {
                    o.jobs
                        .iter()
                        .any(|j| &j.job_id == id && j.waits_for_uid.is_some())
                })
            });
            self.publish(
                id,
                &Published {
                    gpus: gpus.clone(),
                    waits,
                    outside_mps: false,
                },
            );
        }
        if daemon {
            self.mps.start(g, next)?;
        }
        Ok(())
    }

    fn manages_mps(&mut self, run: &Run) -> bool {
        if self.cfg.node.mps_control.exists() || run.gpu.kind() == BackendKind::Nvml {
            return true;
        }
        self.warnings.push(format!(
            "{} not found: MPS daemons not managed (model backend, no NVIDIA driver)",
            self.cfg.node.mps_control.display()
        ));
        false
    }

    /// Epilog: the job leaves its GPUs and its record goes to the accounting log.
    pub fn epilog(&mut self, job: &JobEnv) -> Result<(), HelperError> {
        let mut run = self.begin()?;
        self.step("epilog:locked");
        self.repair(&mut run)?;
        let mut parts: Vec<JobOnGpu> = Vec::new();
        let mut left = Vec::new();
        for &g in &job.gpus {
            let present = run
                .st
                .gpus
                .get(&g)
                .is_some_and(|gs| gs.jobs.iter().any(|j| j.job_id == job.job_id));
            if !present {
                continue;
            }
            self.close_interval(&mut run, g)?;
            let gs = run.st.gpus.get_mut(&g).expect("present");
            let pos = gs
                .jobs
                .iter()
                .position(|j| j.job_id == job.job_id)
                .expect("present");
            parts.push(gs.jobs.remove(pos));
            self.emit_idle(&mut run, g);
            left.push(g);
        }
        let record = self.job_record(&run, job, &parts);
        run.st.outbox.push(record);
        self.save(&mut run)?;
        self.step("epilog:recorded");
        // What happens to the GPUs after the job left is noted on its record too (a refused
        // clock reset, say): the record is still in the outbox until `flush`.
        let noted = self.warnings.len();
        let mut mps_err = None;
        for &g in &left {
            if let Err(e) = self.promote_waiting(&mut run, g) {
                mps_err = Some(e);
            }
            self.apply_clock(&mut run, g)?;
            let gs = &run.st.gpus[&g];
            let sharing = gs.jobs.iter().any(|j| j.share_pct.is_some());
            if gs.mps_daemon && !sharing {
                match self.mps.stop(g) {
                    Ok(()) => run.st.gpus.get_mut(&g).expect("present").mps_daemon = false,
                    Err(e) => mps_err = Some(e),
                }
            }
        }
        let notes: Vec<String> = self.warnings[noted..].to_vec();
        if !notes.is_empty() {
            if let Some(r) = run
                .st
                .outbox
                .iter_mut()
                .rev()
                .find(|r| r.kind == RecordKind::Job && r.job_id == job.job_id)
            {
                r.notes.extend(notes);
            }
        }
        self.save(&mut run)?;
        if job.mps_pct.is_some() {
            let _ = std::fs::remove_file(self.mps.jobs_dir().join(&job.job_id));
        }
        self.step("epilog:clocked");
        self.flush(&mut run)?;
        self.step("epilog:logged");
        // The record is safe; now fail the way Slurm's prolog.example does, so the node drains.
        match mps_err {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    fn job_record(&self, run: &Run, job: &JobEnv, parts: &[JobOnGpu]) -> Record {
        let energy: f64 = parts.iter().map(|p| p.energy_j).sum();
        let start = parts.iter().map(|p| p.start).fold(f64::INFINITY, f64::min);
        let start = if start.is_finite() { start } else { run.now };
        let first = parts.first();
        let gpu_type = first
            .and_then(|p| p.gpus.first())
            .and_then(|g| run.st.gpus.get(g))
            .map(|g| g.gpu_type.clone())
            .or_else(|| job.gpu_type.clone())
            .unwrap_or_default();
        let dur = run.now - start;
        Record {
            record_id: format!("{}:{}:{}", self.node, job.job_id, round_ms(run.now)),
            kind: RecordKind::Job,
            node: self.node.clone(),
            job_id: job.job_id.clone(),
            user: job.user.clone(),
            uid: job.uid,
            account: first.map_or_else(|| job.account.clone(), |p| p.account.clone()),
            class: first
                .and_then(|p| p.class.clone())
                .or_else(|| job.class.clone()),
            gpus: job.gpus.clone(),
            gpu_type,
            share_pct: job.mps_pct,
            clocks: first.map(|p| p.clocks.clone()).unwrap_or_default(),
            start,
            end: run.now,
            energy_j: energy,
            avg_w: if dur > 0.0 { energy / dur } else { 0.0 },
            backend: run.gpu.kind(),
            counter_reset: parts.iter().any(|p| p.counter_reset),
            complete: parts.len() == job.gpus.len(),
            basis: basis_of(parts),
            mps_wait_s: parts
                .iter()
                .map(|p| {
                    p.mps_wait_s
                        + if p.waits_for_uid.is_some() {
                            (run.now - p.start).max(0.0)
                        } else {
                            0.0
                        }
                })
                .fold(0.0, f64::max),
            outside_mps: parts.iter().any(|p| p.outside_mps_beside_uid.is_some()),
            notes: vec![],
            clock_control: self.cfg.node.gpu_settings == GpuSettings::Manage,
            profile_keys: first
                .map_or_else(|| job.profile_keys.clone(), |p| p.profile_keys.clone()),
            exit: job.exit.clone(),
            busy_frac: measured_fraction(parts, dur, |p| p.busy_pct_s),
            // None for a job that ran outside MPS or waited for another user's server (no
            // co-clients beside it).
            neighbour_busy: if parts.iter().any(|p| {
                p.outside_mps_beside_uid.is_some()
                    || p.waits_for_uid.is_some()
                    || p.mps_wait_s > 0.0
            }) {
                None
            } else {
                measured_fraction(parts, dur, |p| p.neighbour_busy_pct_s)
            },
            max_memory_mib: None,
            time_limit_s: job.time_limit_s,
        }
    }

    /// Repairs the node (outbox, clocks, MPS) and, for each id in `end_jobs`, ends that job as
    /// its Epilog would have (for an Epilog that was killed before it recorded the job).
    pub fn repair_node(&mut self, end_jobs: &[String]) -> Result<Vec<String>, HelperError> {
        let mut ended = Vec::new();
        {
            let mut run = self.begin()?;
            self.repair(&mut run)?;
        }
        for id in end_jobs {
            let found = {
                let lock = self.dir.lock()?;
                let (st, _) = self.dir.load(&lock)?;
                st.gpus
                    .iter()
                    .find_map(|(_, g)| g.jobs.iter().find(|j| &j.job_id == id).cloned())
            };
            let Some(j) = found else {
                self.warnings
                    .push(format!("job {id}: not on any GPU of {}", self.node));
                continue;
            };
            let env = JobEnv {
                job_id: j.job_id.clone(),
                user: j.user.clone(),
                uid: j.uid,
                account: j.account.clone(),
                node: self.node.clone(),
                gpus: j.gpus.clone(),
                mps_pct: j.share_pct,
                class: j.class.clone(),
                gpu_type: None,
                bound: Some(j.bound),
                limit_type: None,
                demand_pct: j.demand_pct,
                profile_keys: j.profile_keys.clone(),
                profile: j.profile.clone(),
                // Ended by an admin's repair: how the job ended is not known.
                exit: None,
                time_limit_s: None,
            };
            self.epilog(&env)?;
            ended.push(id.clone());
        }
        Ok(ended)
    }

    /// Closes the current interval of every GPU that has jobs, without changing anything else:
    /// run every few seconds (`heshare node sample`, e.g. from the shipped systemd timer) so
    /// that the driver's per-process work is read while the jobs' processes still run, which is
    /// when they can be tied to their jobs. Without it, a process that starts after its job's
    /// Prolog and ends before its Epilog is never seen running, and its work is split by the
    /// model. Returns the GPUs it read.
    pub fn sample(&mut self) -> Result<Vec<u32>, HelperError> {
        let mut run = self.begin()?;
        self.repair(&mut run)?;
        let busy: Vec<u32> = run
            .st
            .gpus
            .iter()
            .filter(|(_, g)| !g.jobs.is_empty())
            .map(|(&i, _)| i)
            .collect();
        for &g in &busy {
            reattach(self.cfg, run.gpu.as_mut(), g, &run.st.gpus[&g].gpu_type)?;
            self.close_interval(&mut run, g)?;
        }
        if !busy.is_empty() {
            self.save(&mut run)?;
        }
        Ok(busy)
    }

    pub fn status(&mut self) -> Result<NodeStatus, HelperError> {
        let mut run = self.begin()?;
        let mut gpus = Vec::new();
        let ids: Vec<u32> = run.st.gpus.keys().copied().collect();
        for i in ids {
            reattach(self.cfg, run.gpu.as_mut(), i, &run.st.gpus[&i].gpu_type)?;
            let gs = &run.st.gpus[&i];
            gpus.push(GpuStatus {
                gpu: i,
                gpu_type: gs.gpu_type.clone(),
                jobs: gs.jobs.iter().map(|j| j.job_id.clone()).collect(),
                locked_mhz: gs.locked_mhz,
                backend_locked_mhz: run.gpu.locked_clock(i).map(|m| m.0),
                mps_daemon: gs.mps_daemon,
                counter_first_j: gs.first.map(|s| mj(s.counter_mj)),
                counter_last_j: gs.last.map(|s| mj(s.counter_mj)),
                attributed_jobs_j: gs.attributed_jobs_j,
                attributed_idle_j: gs.attributed_idle_j,
            });
        }
        Ok(NodeStatus {
            node: self.node.clone(),
            backend: run.gpu.kind(),
            gpus,
            pending_records: run.st.outbox.len(),
        })
    }
}

/// Makes a GPU the state already knows known to the backend again, by its recorded type (the
/// model backend needs the type; a type since removed from the catalog is left unattached).
fn reattach(
    cfg: &Config,
    gpu: &mut dyn GpuControl,
    index: u32,
    gpu_type: &str,
) -> Result<(), GpuError> {
    match cfg.resolve_gpu_type(gpu_type) {
        Some(t) => gpu.attach(index, &cfg.gpu_types[t]),
        None => Ok(()),
    }
}

fn mj(v: u64) -> f64 {
    counter_delta(0, v).0.0
}

fn share_of(j: &JobOnGpu) -> SharePct {
    j.share_pct
        .and_then(SharePct::new)
        .unwrap_or(SharePct::FULL)
}

/// The class a job's profile placed it with, when it has one that reads.
fn learned_class(j: &JobOnGpu) -> Option<JobClass> {
    j.profile
        .as_deref()
        .and_then(|p| crate::profile::wire::decode(p, &format!("profile of job {}", j.job_id)))
}

/// A profiled job is modelled with its learned class. A job without a known class is modelled
/// as keeping its whole share busy at full power and fully clock-bound: the cautious guess for
/// both its energy and its slowdown.
fn fallback_classes(jobs: &[JobOnGpu]) -> Vec<JobClass> {
    jobs.iter()
        .map(|j| {
            learned_class(j).unwrap_or_else(|| JobClass {
                name: "unclassified".into(),
                kind: JobKind::Training,
                description: String::new(),
                reference_runtime_s: 3600.0,
                speed_exponent: 0.0,
                clock_bound_fraction: 1.0,
                clock_knee: 0.0,
                power_util: 1.0,
                mem_intensity: 1.0,
                memory_gib: 0.0,
                demand: share_of(j).fraction(),
                slowdown_bound: None,
                measured_speed: vec![],
                limit_kills: vec![],
                neighbours: None,
                runtime_log_sd: None,
            })
        })
        .collect()
}

fn tenant<'c>(cfg: &'c Config, j: &JobOnGpu, fallback: &'c JobClass) -> Tenant<'c> {
    Tenant {
        class: j
            .class
            .as_deref()
            .filter(|_| j.profile.is_none())
            .and_then(|c| cfg.class(c))
            .unwrap_or(fallback),
        share: share_of(j),
        user: j.uid,
    }
}

/// The uid of the GPU's MPS user: that of a share (other than job `except`) that is neither
/// waiting for nor running beside another user's server.
fn mps_holder(jobs: &[JobOnGpu], except: Option<&str>) -> Option<u32> {
    jobs.iter()
        .find(|j| Some(j.job_id.as_str()) != except && is_mps_client(j))
        .map(|j| j.uid)
}

/// A share the GPU's MPS server serves now: neither waiting for another user's server nor
/// running outside MPS beside one.
fn is_mps_client(j: &JobOnGpu) -> bool {
    j.share_pct.is_some() && j.waits_for_uid.is_none() && j.outside_mps_beside_uid.is_none()
}

/// The jobs whose GPU work can run: all but those waiting for another user's MPS server.
fn running(jobs: &[JobOnGpu]) -> Vec<usize> {
    (0..jobs.len())
        .filter(|&i| jobs[i].waits_for_uid.is_none())
        .collect()
}

/// The model's weights for one interval (see `attribution::model_weights`). A job waiting for
/// another user's MPS server runs nothing: it is charged only the idle power of the share it
/// holds, and the clock and contention are those of the jobs that run.
fn interval_model_weights(
    cfg: &Config,
    gpu: &GpuType,
    jobs: &[JobOnGpu],
    clock: Mhz,
    params: ModelParams,
) -> (Vec<f64>, f64) {
    let active = running(jobs);
    let fallback = fallback_classes(jobs);
    let tenants: Vec<Tenant<'_>> = active
        .iter()
        .map(|&i| tenant(cfg, &jobs[i], &fallback[i]))
        .collect();
    let reference = &cfg.gpu_types[cfg.reference_gpu];
    let (w_active, mut idle_w) = if tenants.is_empty() {
        (Vec::new(), gpu.idle_power.0)
    } else {
        model_weights(gpu, reference, &tenants, clock, params)
    };
    let mut w = vec![0.0; jobs.len()];
    for (k, &i) in active.iter().enumerate() {
        w[i] = w_active[k];
    }
    for (i, j) in jobs.iter().enumerate() {
        if j.waits_for_uid.is_some() {
            let part = gpu.idle_power.0 * share_of(j).fraction();
            w[i] = part.min(idle_w);
            idle_w = (idle_w - part).max(0.0);
        }
    }
    (w, idle_w)
}

/// A busy fraction per GPU of a job's `parts` over a run of `dur` seconds: the percent-seconds
/// `pct_s` gives each part, over the intervals in which the driver measured its processes.
/// Measured over most of the run, or not at all.
fn measured_fraction(
    parts: &[JobOnGpu],
    dur: f64,
    pct_s: impl Fn(&JobOnGpu) -> f64,
) -> Option<f64> {
    let (busy, window): (f64, f64) = parts
        .iter()
        .fold((0.0, 0.0), |(b, w), p| (b + pct_s(p), w + p.busy_window_s));
    #[allow(clippy::cast_precision_loss)]
    let per_gpu = dur * parts.len().max(1) as f64;
    (window > 0.5 * per_gpu && window > 0.0).then(|| (busy / 100.0 / window).clamp(0.0, 1.0))
}

/// Turns the driver's cumulative per-process work into this interval's work per job, and
/// remembers each process (and whose it is) for the next interval. A process is tied to a job
/// by its Slurm cgroup while it runs, else by its owner when exactly one job on the GPU is that
/// user's; once tied, it stays tied after it exits. A process never tied (it started and ended
/// between two readings, or it is the MPS server) counts as unmapped.
fn map_work(
    procs: &mut BTreeMap<String, ProcSeen>,
    jobs: &[JobOnGpu],
    work: &[ProcessWork],
) -> MeasuredWork {
    let mut busy = vec![0.0; jobs.len()];
    let mut unmapped = 0.0;
    let mut seen = BTreeMap::new();
    for p in work {
        let key = format!("{}@{}", p.pid, p.start_us);
        let prev = procs.get(&key);
        let delta = match prev {
            Some(s) if p.busy_pct_s >= s.busy_pct_s => p.busy_pct_s - s.busy_pct_s,
            _ => p.busy_pct_s,
        };
        let job_id = prev
            .and_then(|s| s.job_id.clone())
            .or_else(|| owner_job(p, jobs));
        match job_id
            .as_deref()
            .and_then(|id| jobs.iter().position(|j| j.job_id == id))
        {
            Some(i) => busy[i] += delta,
            None => unmapped += delta,
        }
        seen.insert(
            key,
            ProcSeen {
                job_id,
                busy_pct_s: p.busy_pct_s,
            },
        );
    }
    *procs = seen;
    MeasuredWork { busy, unmapped }
}

fn owner_job(p: &ProcessWork, jobs: &[JobOnGpu]) -> Option<String> {
    if let Some(j) = &p.job {
        return Some(j.clone());
    }
    let uid = p.uid?;
    let mut mine = jobs.iter().filter(|j| j.uid == uid);
    let one = mine.next()?;
    mine.next().is_none().then(|| one.job_id.clone())
}

/// The record's basis from what its parts got.
fn basis_of(parts: &[JobOnGpu]) -> Basis {
    if !parts.is_empty() && parts.iter().all(|p| p.share_pct.is_none()) {
        return Basis::Whole;
    }
    let energy: f64 = parts.iter().map(|p| p.energy_j).sum();
    let measured: f64 = parts.iter().map(|p| p.measured_j).sum();
    if energy <= 0.0 || measured <= 1e-3 * energy {
        Basis::Model
    } else if measured >= 0.999 * energy {
        Basis::Measured
    } else {
        Basis::Mixed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::path::Path;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k: &str| m.get(k).cloned()
    }

    const JOB: &[(&str, &str)] = &[
        ("SLURM_JOB_ID", "42"),
        ("SLURM_JOB_UID", "1000"),
        ("SLURM_JOB_USER", "alice"),
        ("SLURMD_NODENAME", "gpu01"),
        ("SLURM_JOB_GPUS", "1,3"),
    ];

    #[test]
    fn gpu_lists_take_ranges_and_reject_junk() {
        assert_eq!(parse_gpu_list("0,2-4,3"), Ok(vec![0, 2, 3, 4]));
        assert!(parse_gpu_list("4-2").is_err());
        assert!(parse_gpu_list("0-99999").is_err());
        assert!(parse_gpu_list("0,,1").is_err());
        assert!(parse_gpu_list("-1").is_err());
    }

    #[test]
    fn the_job_environment_is_read_and_checked() {
        let j = JobEnv::from_vars(&vars(JOB))
            .expect("valid")
            .expect("has GPUs");
        assert_eq!(j.gpus, vec![1, 3]);
        assert_eq!((j.uid, j.mps_pct, j.class), (1000, None, None));
        let mut with = JOB.to_vec();
        with.push(("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "101"));
        let e = JobEnv::from_vars(&vars(&with)).expect_err("over 100");
        assert!(
            e.to_string()
                .starts_with("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: \"101\""),
            "{e}"
        );
        let mut bad = JOB.to_vec();
        bad[0] = ("SLURM_JOB_ID", "../../etc");
        assert!(
            JobEnv::from_vars(&vars(&bad)).is_err(),
            "job ids name files"
        );
        let mut node = JOB.to_vec();
        node[3] = ("SLURMD_NODENAME", "../x");
        assert!(
            JobEnv::from_vars(&vars(&node)).is_err(),
            "node names name directories"
        );
        let cpu: Vec<_> = JOB
            .iter()
            .copied()
            .filter(|(k, _)| *k != "SLURM_JOB_GPUS")
            .collect();
        assert_eq!(JobEnv::from_vars(&vars(&cpu)).expect("valid"), None);
        let mut nodev = cpu.clone();
        nodev.push(("CUDA_VISIBLE_DEVICES", "NoDevFiles"));
        assert_eq!(JobEnv::from_vars(&vars(&nodev)).expect("valid"), None);
    }

    #[test]
    fn device_names_match_the_longest_catalog_name() {
        let cfg = Config::parse(crate::config::BUNDLED_CONFIG, Path::new("h.toml")).expect("valid");
        let h = NodeHelper::new(&cfg, "n");
        assert_eq!(
            h.match_device_name("NVIDIA A100-SXM4-40GB").as_deref(),
            Some("a100")
        );
        // V100 16 and 32 GB are separate types that a name alone does not tell apart well
        // enough: such nodes set [node] gpu_type.
        assert_eq!(h.match_device_name("Tesla V100-SXM2-32GB"), None);
        assert_eq!(
            h.match_device_name("NVIDIA GH200 480GB"),
            None,
            "no 2-letter alias match"
        );
        assert_eq!(
            h.match_device_name("NVIDIA H100 NVL").as_deref(),
            Some("h100")
        );
        assert_eq!(h.match_device_name("Radeon"), None);
    }
}
