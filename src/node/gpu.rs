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
    /// Process ids NVML sees on the GPU (under MPS: the MPS server's).
    fn running_pids(&self, gpu: u32) -> Result<Vec<u32>, GpuError>;
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
}

impl NvmlGpus {
    pub fn init() -> Result<Self, GpuError> {
        nvml_wrapper::Nvml::init()
            .map(|nvml| NvmlGpus { nvml })
            .map_err(|e| GpuError::NvmlInit(e.to_string()))
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

    fn reset_clock(&mut self, gpu: u32) -> Result<(), GpuError> {
        let op = "reset locked clocks";
        let mut d = self.device(op, gpu)?;
        d.reset_gpu_locked_clocks()
            .map_err(|e| nvml_err(op, gpu, e))
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

    /// The counter at `now`; the model GPU drew `power_w` since its last change.
    fn counter_now(g: &ModelGpu, now: f64) -> f64 {
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
        super::state::write_atomic(&self.path, &bytes).map_err(|source| GpuError::Io {
            path: self.path.clone(),
            source,
        })?;
        self.dirty = false;
        Ok(())
    }
}
