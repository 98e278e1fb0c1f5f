//! GPU control behind one trait: NVML on machines with an NVIDIA driver, and a *model* of a GPU
//! where there is none (tests, CI, demos). The model's clocks, power and energy counter come from
//! the power model and wall time and persist in a file, so the separate Prolog and Epilog
//! processes of one node see one GPU; everything it produces says `backend: model`.

use crate::model::GpuType;
use crate::units::{Mhz, Watts};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Which implementation produced a reading; written into every accounting record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    Nvml,
    Model,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Nvml => "nvml",
            BackendKind::Model => "model",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("NVML: {op} on GPU {gpu}: {message}")]
    Nvml {
        op: &'static str,
        gpu: u32,
        message: String,
    },
    #[error("NVML did not initialise: {0}")]
    NvmlInit(String),
    #[error("model GPU {gpu}: {message}")]
    Model { gpu: u32, message: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// One process the driver accounted GPU work to, as of the reading.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessWork {
    pub pid: u32,
    /// When the process started (µs since the epoch): with `pid`, names it across pid reuse.
    pub start_us: u64,
    /// GPU busy time so far, in percent-seconds (lifetime utilisation times lifetime).
    pub busy_pct_s: f64,
    pub running: bool,
    /// The Slurm job whose cgroup holds the process, read while it runs (`None` once it has
    /// exited or outside any job: the MPS server, an admin's tool).
    #[serde(default)]
    pub job: Option<String>,
    #[serde(default)]
    pub uid: Option<u32>,
}

/// The Slurm job id in a process's `/proc/PID/cgroup` text: slurmstepd puts every task in
/// `.../job_ID/step_S/...` (cgroup v1 and v2 alike), which the job's user cannot leave.
pub fn job_of_cgroup(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let path = line.splitn(3, ':').nth(2)?;
        path.split('/').find_map(|part| {
            let id = part.strip_prefix("job_")?;
            (!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())).then(|| id.to_owned())
        })
    })
}

/// The job and owner of a running process, from `/proc`.
fn proc_job_and_uid(pid: u32) -> (Option<String>, Option<u32>) {
    use std::os::unix::fs::MetadataExt;
    let dir = PathBuf::from(format!("/proc/{pid}"));
    let job = std::fs::read_to_string(dir.join("cgroup"))
        .ok()
        .and_then(|t| job_of_cgroup(&t));
    let uid = std::fs::metadata(&dir).ok().map(|m| m.uid());
    (job, uid)
}

/// What the node helper needs of a GPU. Indices are the node's physical GPU indices (the
/// numbers in `SLURM_JOB_GPUS`).
pub trait GpuControl {
    fn kind(&self) -> BackendKind;
    /// Makes `gpu` known with its catalog type. NVML knows its devices already; the model needs
    /// the type for idle power and clocks.
    fn attach(&mut self, _gpu: u32, _gpu_type: &GpuType) -> Result<(), GpuError> {
        Ok(())
    }
    fn name(&self, gpu: u32) -> Result<String, GpuError>;
    fn supported_clocks(&self, gpu: u32) -> Result<Vec<Mhz>, GpuError>;
    /// Total energy since the counter started (driver load for NVML), in millijoules.
    fn energy_mj(&mut self, gpu: u32) -> Result<u64, GpuError>;
    fn power(&mut self, gpu: u32) -> Result<Watts, GpuError>;
    fn lock_clock(&mut self, gpu: u32, clock: Mhz) -> Result<(), GpuError>;
    fn reset_clock(&mut self, gpu: u32) -> Result<(), GpuError>;
    /// The locked SM clock where the backend can tell (the model can; NVML has no getter for
    /// locked clocks, so it answers `None`).
    fn locked_clock(&self, _gpu: u32) -> Option<Mhz> {
        None
    }
    /// Whether the GPU accepts a CUDA context beside the MPS server's (compute mode Default);
    /// an exclusive mode admits one context, the server's.
    fn multiple_contexts(&self, _gpu: u32) -> Result<bool, GpuError> {
        Ok(true)
    }
    /// Process ids NVML sees on the GPU (under MPS: the MPS server's).
    fn running_pids(&self, gpu: u32) -> Result<Vec<u32>, GpuError>;
    /// The work the driver accounted to each process on the GPU so far; `None` where it
    /// measures nothing per process (the energy split then falls back to the model).
    fn process_work(&mut self, _gpu: u32) -> Result<Option<Vec<ProcessWork>>, GpuError> {
        Ok(None)
    }
    /// The model draws what the helper predicts for the jobs now on the GPU; NVML measures.
    fn set_modelled_power(&mut self, _gpu: u32, _power: Watts) {}
    /// Persists what must outlive this process (the model's counters).
    fn commit(&mut self) -> Result<(), GpuError> {
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// NVML

/// GPU control through NVML (`libnvidia-ml.so.1`, loaded at run time).
pub struct NvmlGpus {
    nvml: nvml_wrapper::Nvml,
    /// Whether the per-process reading may turn NVML accounting mode on where it is off (a
    /// setting that stays until the driver reloads): not under `[node] gpu_settings =
    /// "read-only"`.
    enable_accounting: bool,
}

impl NvmlGpus {
    /// NVML, allowed to turn accounting mode on for the measured split.
    pub fn init() -> Result<Self, GpuError> {
        Self::init_with(true)
    }

    /// NVML; `enable_accounting` false changes no setting of any GPU.
    pub fn init_with(enable_accounting: bool) -> Result<Self, GpuError> {
        nvml_wrapper::Nvml::init()
            .map(|nvml| NvmlGpus {
                nvml,
                enable_accounting,
            })
            .map_err(|e| GpuError::NvmlInit(e.to_string()))
    }

    /// Whether NVML accounting mode is on (a reading; it changes nothing).
    pub fn accounting_enabled(&self, gpu: u32) -> Result<bool, GpuError> {
        let op = "accounting mode";
        self.device(op, gpu)?
            .is_accounting_enabled()
            .map_err(|e| nvml_err(op, gpu, e))
    }

    /// The GPU's compute mode as NVML names it (a reading).
    pub fn compute_mode(&self, gpu: u32) -> Result<String, GpuError> {
        let op = "compute mode";
        self.device(op, gpu)?
            .compute_mode()
            .map(|m| format!("{m:?}"))
            .map_err(|e| nvml_err(op, gpu, e))
    }

    /// MIG mode, current and pending (a reading; 1 = enabled).
    pub fn mig_mode(&self, gpu: u32) -> Result<(u32, u32), GpuError> {
        let op = "MIG mode";
        self.device(op, gpu)?
            .mig_mode()
            .map(|m| (m.current, m.pending))
            .map_err(|e| nvml_err(op, gpu, e))
    }

    /// Whether persistence mode is on (a reading).
    pub fn persistence_mode(&self, gpu: u32) -> Result<bool, GpuError> {
        let op = "persistence mode";
        self.device(op, gpu)?
            .is_in_persistent_mode()
            .map_err(|e| nvml_err(op, gpu, e))
    }

    pub fn driver_version(&self) -> Result<String, GpuError> {
        self.nvml
            .sys_driver_version()
            .map_err(|e| GpuError::NvmlInit(e.to_string()))
    }

    pub fn device_count(&self) -> Result<u32, GpuError> {
        self.nvml
            .device_count()
            .map_err(|e| GpuError::NvmlInit(e.to_string()))
    }

    /// The SM clock the GPU runs at now.
    pub fn sm_clock(&self, gpu: u32) -> Result<Mhz, GpuError> {
        let op = "SM clock";
        self.device(op, gpu)?
            .clock_info(nvml_wrapper::enum_wrappers::device::Clock::SM)
            .map(Mhz)
            .map_err(|e| nvml_err(op, gpu, e))
    }

    /// The power limit now and the range it may be set within, in watts.
    pub fn power_limits(&self, gpu: u32) -> Result<(Watts, Watts, Watts), GpuError> {
        let op = "power limits";
        let d = self.device(op, gpu)?;
        let now = d
            .power_management_limit()
            .map_err(|e| nvml_err(op, gpu, e))?;
        let c = d
            .power_management_limit_constraints()
            .map_err(|e| nvml_err(op, gpu, e))?;
        let w = |mw: u32| Watts(f64::from(mw) / 1000.0);
        Ok((w(now), w(c.min_limit), w(c.max_limit)))
    }

    fn device(&self, op: &'static str, gpu: u32) -> Result<nvml_wrapper::Device<'_>, GpuError> {
        self.nvml
            .device_by_index(gpu)
            .map_err(|e| nvml_err(op, gpu, e))
    }
}

fn nvml_err(op: &'static str, gpu: u32, e: nvml_wrapper::error::NvmlError) -> GpuError {
    GpuError::Nvml {
        op,
        gpu,
        message: e.to_string(),
    }
}

impl GpuControl for NvmlGpus {
    fn kind(&self) -> BackendKind {
        BackendKind::Nvml
    }

    fn name(&self, gpu: u32) -> Result<String, GpuError> {
        let op = "name";
        self.device(op, gpu)?
            .name()
            .map_err(|e| nvml_err(op, gpu, e))
    }

    fn supported_clocks(&self, gpu: u32) -> Result<Vec<Mhz>, GpuError> {
        let op = "supported graphics clocks";
        let d = self.device(op, gpu)?;
        let mem = d
            .supported_memory_clocks()
            .map_err(|e| nvml_err(op, gpu, e))?;
        let top = mem.iter().copied().max().unwrap_or(0);
        let mut clocks: Vec<Mhz> = d
            .supported_graphics_clocks(top)
            .map_err(|e| nvml_err(op, gpu, e))?
            .into_iter()
            .map(Mhz)
            .collect();
        clocks.sort_unstable();
        Ok(clocks)
    }

    fn energy_mj(&mut self, gpu: u32) -> Result<u64, GpuError> {
        let op = "total energy consumption";
        self.device(op, gpu)?
            .total_energy_consumption()
            .map_err(|e| nvml_err(op, gpu, e))
    }

    fn power(&mut self, gpu: u32) -> Result<Watts, GpuError> {
        let op = "power usage";
        let mw = self
            .device(op, gpu)?
            .power_usage()
            .map_err(|e| nvml_err(op, gpu, e))?;
        Ok(Watts(f64::from(mw) / 1000.0))
    }

    fn lock_clock(&mut self, gpu: u32, clock: Mhz) -> Result<(), GpuError> {
        let op = "set locked clocks";
        let mut d = self.device(op, gpu)?;
        d.set_gpu_locked_clocks(
            nvml_wrapper::enums::device::GpuLockedClocksSetting::Numeric {
                min_clock_mhz: clock.0,
                max_clock_mhz: clock.0,
            },
        )
        .map_err(|e| nvml_err(op, gpu, e))
    }

    fn multiple_contexts(&self, gpu: u32) -> Result<bool, GpuError> {
        let op = "compute mode";
        self.device(op, gpu)?
            .compute_mode()
            .map(|m| m == nvml_wrapper::enum_wrappers::device::ComputeMode::Default)
            .map_err(|e| nvml_err(op, gpu, e))
    }

    fn reset_clock(&mut self, gpu: u32) -> Result<(), GpuError> {
        let op = "reset locked clocks";
        let mut d = self.device(op, gpu)?;
        d.reset_gpu_locked_clocks()
            .map_err(|e| nvml_err(op, gpu, e))
    }

    /// NVML's accounting mode keeps per-process lifetime utilisation for running and exited
    /// processes. It is off by default: the first reading turns it on (root; it stays on until
    /// reboot) and measures nothing for that interval.
    fn process_work(&mut self, gpu: u32) -> Result<Option<Vec<ProcessWork>>, GpuError> {
        let op = "accounting";
        let mut d = self.device(op, gpu)?;
        match d.is_accounting_enabled() {
            Ok(true) => {}
            // Read-only: the split falls back to the model rather than change the card.
            Ok(false) if !self.enable_accounting => return Ok(None),
            Ok(false) => {
                return match d.set_accounting(true) {
                    Ok(()) => Ok(Some(Vec::new())),
                    Err(_) => Ok(None),
                };
            }
            Err(_) => return Ok(None),
        }
        let pids = match d.accounting_pids() {
            Ok(p) => p,
            Err(_) => return Ok(None),
        };
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|t| t.as_micros())
            .unwrap_or(0);
        let mut out = Vec::with_capacity(pids.len());
        for pid in pids {
            let Ok(st) = d.accounting_stats_for(pid) else {
                continue;
            };
            let Some(util) = st.gpu_utilization else {
                continue;
            };
            // `time` is only set once the process has exited; until then its life so far.
            #[allow(clippy::cast_precision_loss)]
            let life_s = if st.is_running {
                now_us.saturating_sub(u128::from(st.start_time)) as f64 / 1e6
            } else {
                st.time as f64 / 1e3
            };
            let (job, uid) = if st.is_running {
                proc_job_and_uid(pid)
            } else {
                (None, None)
            };
            out.push(ProcessWork {
                pid,
                start_us: st.start_time,
                busy_pct_s: f64::from(util) * life_s,
                running: st.is_running,
                job,
                uid,
            });
        }
        Ok(Some(out))
    }

    fn running_pids(&self, gpu: u32) -> Result<Vec<u32>, GpuError> {
        let op = "running compute processes";
        Ok(self
            .device(op, gpu)?
            .running_compute_processes()
            .map_err(|e| nvml_err(op, gpu, e))?
            .into_iter()
            .map(|p| p.pid)
            .collect())
    }
}

// ---------------------------------------------------------------------------------------------
// Model

/// One modelled GPU as persisted between helper runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelGpu {
    pub gpu_type: String,
    /// Counter value at `at_unix_s`, in millijoules (fractional: the model integrates exactly).
    pub counter_mj: f64,
    pub at_unix_s: f64,
    /// What the GPU draws from `at_unix_s` on.
    pub power_w: f64,
    pub locked_mhz: Option<u32>,
    pub clocks_mhz: Vec<u32>,
    /// A STAND-IN for NVML's per-process accounting: what a test says the driver measured.
    /// Absent: the model measures nothing per process, as NVML with accounting off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<Vec<ProcessWork>>,
    /// A recorded counter (`[unix_s, mJ]` pairs, in time order) that replaces the model's
    /// integral: the energy a test feeds in is not what the model would have produced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counter_trace: Option<Vec<(f64, f64)>>,
    /// A STAND-IN for a driver that refuses to reset locked clocks (a VM, a policy): what a
    /// test says the driver refuses.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub refuse_reset: bool,
}

/// The trace's counter at `t`, linear between points and flat beyond them.
fn trace_at(trace: &[(f64, f64)], t: f64) -> Option<f64> {
    let first = trace.first()?;
    if t <= first.0 {
        return Some(first.1);
    }
    for w in trace.windows(2) {
        let ((t0, c0), (t1, c1)) = (w[0], w[1]);
        if t <= t1 {
            let f = if t1 > t0 { (t - t0) / (t1 - t0) } else { 1.0 };
            return Some(c0 + (c1 - c0) * f);
        }
    }
    trace.last().map(|l| l.1)
}

/// A modelled GPU for every index the helper has attached; all readings are taken at the one
/// instant `now` the helper run works at, so intervals line up exactly.
pub struct ModelGpus {
    path: PathBuf,
    now: f64,
    gpus: BTreeMap<u32, ModelGpu>,
    idle_w: BTreeMap<u32, f64>,
    dirty: bool,
}

impl ModelGpus {
    /// Opens (or starts) the model GPUs persisted at `path`, reading them at time `now`.
    pub fn open(path: &Path, now_unix_s: f64) -> Result<Self, GpuError> {
        let gpus = match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| GpuError::Io {
                path: path.to_owned(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(source) => {
                return Err(GpuError::Io {
                    path: path.to_owned(),
                    source,
                });
            }
        };
        Ok(ModelGpus {
            path: path.to_owned(),
            now: now_unix_s,
            gpus,
            idle_w: BTreeMap::new(),
            dirty: false,
        })
    }

    pub fn gpus(&self) -> &BTreeMap<u32, ModelGpu> {
        &self.gpus
    }

    fn get(&self, gpu: u32) -> Result<&ModelGpu, GpuError> {
        self.gpus.get(&gpu).ok_or(GpuError::Model {
            gpu,
            message: "not attached: no job has told the model its type yet".into(),
        })
    }

    /// The counter at `now`: the recorded trace where there is one, else the model's integral
    /// (the GPU drew `power_w` since its last change).
    fn counter_now(g: &ModelGpu, now: f64) -> f64 {
        if let Some(c) = g.counter_trace.as_deref().and_then(|t| trace_at(t, now)) {
            return c;
        }
        g.counter_mj + g.power_w * (now - g.at_unix_s).max(0.0) * 1000.0
    }
}

impl GpuControl for ModelGpus {
    fn kind(&self) -> BackendKind {
        BackendKind::Model
    }

    fn attach(&mut self, gpu: u32, gpu_type: &GpuType) -> Result<(), GpuError> {
        self.idle_w.insert(gpu, gpu_type.idle_power.0);
        if let Some(g) = self.gpus.get(&gpu) {
            if g.gpu_type != gpu_type.name {
                return Err(GpuError::Model {
                    gpu,
                    message: format!(
                        "modelled as {} but a job says {}; remove the model state to change it",
                        g.gpu_type, gpu_type.name
                    ),
                });
            }
            return Ok(());
        }
        self.gpus.insert(
            gpu,
            ModelGpu {
                gpu_type: gpu_type.name.clone(),
                counter_mj: 0.0,
                at_unix_s: self.now,
                power_w: gpu_type.idle_power.0,
                locked_mhz: None,
                clocks_mhz: gpu_type.sm_clocks.iter().map(|m| m.0).collect(),
                processes: None,
                counter_trace: None,
                refuse_reset: false,
            },
        );
        self.dirty = true;
        Ok(())
    }

    fn name(&self, gpu: u32) -> Result<String, GpuError> {
        Ok(format!("model of {}", self.get(gpu)?.gpu_type))
    }

    fn supported_clocks(&self, gpu: u32) -> Result<Vec<Mhz>, GpuError> {
        Ok(self.get(gpu)?.clocks_mhz.iter().map(|&m| Mhz(m)).collect())
    }

    fn energy_mj(&mut self, gpu: u32) -> Result<u64, GpuError> {
        let now = self.now;
        let c = Self::counter_now(self.get(gpu)?, now).floor().max(0.0);
        // A counter below 2^63 mJ; the floor makes the cast exact.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Ok(c as u64)
    }

    fn power(&mut self, gpu: u32) -> Result<Watts, GpuError> {
        Ok(Watts(self.get(gpu)?.power_w))
    }

    fn lock_clock(&mut self, gpu: u32, clock: Mhz) -> Result<(), GpuError> {
        let g = self.gpus.get_mut(&gpu).ok_or(GpuError::Model {
            gpu,
            message: "not attached".into(),
        })?;
        if !g.clocks_mhz.contains(&clock.0) {
            return Err(GpuError::Model {
                gpu,
                message: format!("{clock} is not a supported clock of {}", g.gpu_type),
            });
        }
        g.locked_mhz = Some(clock.0);
        self.dirty = true;
        Ok(())
    }

    fn reset_clock(&mut self, gpu: u32) -> Result<(), GpuError> {
        if let Some(g) = self.gpus.get_mut(&gpu) {
            if g.refuse_reset {
                return Err(GpuError::Model {
                    gpu,
                    message:
                        "resetting locked clocks refused (the test's stand-in driver refuses it)"
                            .into(),
                });
            }
            g.locked_mhz = None;
            self.dirty = true;
        }
        Ok(())
    }

    fn locked_clock(&self, gpu: u32) -> Option<Mhz> {
        self.gpus.get(&gpu).and_then(|g| g.locked_mhz.map(Mhz))
    }

    fn running_pids(&self, _gpu: u32) -> Result<Vec<u32>, GpuError> {
        Ok(Vec::new())
    }

    fn process_work(&mut self, gpu: u32) -> Result<Option<Vec<ProcessWork>>, GpuError> {
        Ok(self.gpus.get(&gpu).and_then(|g| g.processes.clone()))
    }

    fn set_modelled_power(&mut self, gpu: u32, power: Watts) {
        let now = self.now;
        let idle = self.idle_w.get(&gpu).copied();
        if let Some(g) = self.gpus.get_mut(&gpu) {
            g.counter_mj = Self::counter_now(g, now);
            g.at_unix_s = now.max(g.at_unix_s);
            g.power_w = if power.0.is_finite() && power.0 >= 0.0 {
                power.0
            } else {
                idle.unwrap_or(0.0)
            };
            self.dirty = true;
        }
    }

    fn commit(&mut self) -> Result<(), GpuError> {
        if !self.dirty {
            return Ok(());
        }
        let bytes = serde_json::to_vec_pretty(&self.gpus).map_err(|e| GpuError::Io {
            path: self.path.clone(),
            source: std::io::Error::other(e),
        })?;
        super::state::write_atomic(&self.path, &bytes, 0o600).map_err(|source| GpuError::Io {
            path: self.path.clone(),
            source,
        })?;
        self.dirty = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_of_a_process_comes_from_its_slurm_cgroup() {
        let v1 = "12:devices:/slurm/uid_1000/job_4242/step_0/task_0\n3:cpu:/slurm/uid_1000/job_4242/step_0\n";
        assert_eq!(job_of_cgroup(v1).as_deref(), Some("4242"));
        let v2 = "0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n";
        assert_eq!(job_of_cgroup(v2).as_deref(), Some("77"));
        assert_eq!(
            job_of_cgroup("0::/user.slice/user-1000.slice/session-3.scope\n"),
            None
        );
        assert_eq!(job_of_cgroup("0::/x/job_/job_1a\n"), None);
    }

    #[test]
    fn a_recorded_counter_is_read_between_its_points() {
        let t = [(10.0, 1000.0), (20.0, 3000.0)];
        assert_eq!(trace_at(&t, 5.0), Some(1000.0));
        assert_eq!(trace_at(&t, 15.0), Some(2000.0));
        assert_eq!(trace_at(&t, 25.0), Some(3000.0));
        assert_eq!(trace_at(&[], 1.0), None);
    }
}
