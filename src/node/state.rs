//! The node's own record of which jobs share each GPU, kept under `state_dir/NODE/`.
//!
//! Every helper run takes an exclusive `flock` on `lock` for its whole run, reads `state.json`,
//! and replaces it with write-to-temporary, fsync, rename, fsync-directory: a helper killed at
//! any point leaves either the old or the new state, never half of one, and the lock dies with
//! its process. Records that must reach the accounting log wait in the state's `outbox` until
//! the log has them, so a kill between the two writes loses nothing.

use super::record::Record;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// One clock setting of a GPU from time `t` on (`None`: the default, unlocked clock).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClockChange {
    pub t: f64,
    pub mhz: u32,
}

/// A job's presence on one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobOnGpu {
    pub job_id: String,
    pub user: String,
    pub uid: u32,
    pub account: String,
    pub class: Option<String>,
    /// MPS share in percent; `None` for a whole GPU.
    pub share_pct: Option<u8>,
    pub bound: f64,
    pub gpus: Vec<u32>,
    pub start: f64,
    pub energy_j: f64,
    pub clocks: Vec<ClockChange>,
    pub counter_reset: bool,
}

/// The last counter reading of a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub t: f64,
    pub counter_mj: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuState {
    pub gpu_type: String,
    pub default_clock_mhz: u32,
    /// The clock the helper locked, `None` when reset to the default.
    pub locked_mhz: Option<u32>,
    pub mps_daemon: bool,
    pub last: Option<Sample>,
    /// The first reading, and what has been attributed since: lets `heshare node status` and
    /// the tests check that attribution adds up to the counter.
    pub first: Option<Sample>,
    pub attributed_jobs_j: f64,
    pub attributed_idle_j: f64,
    /// The open idle interval: since when, and its energy so far.
    pub idle_since: Option<f64>,
    pub idle_j: f64,
    pub jobs: Vec<JobOnGpu>,
}

impl GpuState {
    pub fn new(gpu_type: &str, default_clock_mhz: u32) -> Self {
        GpuState {
            gpu_type: gpu_type.to_owned(),
            default_clock_mhz,
            locked_mhz: None,
            mps_daemon: false,
            last: None,
            first: None,
            attributed_jobs_j: 0.0,
            attributed_idle_j: 0.0,
            idle_since: None,
            idle_j: 0.0,
            jobs: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeState {
    pub gpus: BTreeMap<u32, GpuState>,
    /// Records written here first and to the accounting log second.
    pub outbox: Vec<Record>,
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The state directory of one node; holding a [`Locked`] is holding the node.
pub struct StateDir {
    dir: PathBuf,
}

/// The node's lock, held until dropped (or the process dies).
pub struct Locked {
    _file: File,
}

impl StateDir {
    pub fn new(base: &Path, node: &str) -> Self {
        StateDir {
            dir: base.join(node),
        }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    pub fn state_file(&self) -> PathBuf {
        self.dir.join("state.json")
    }

    pub fn model_file(&self) -> PathBuf {
        self.dir.join("model-gpus.json")
    }

    /// Waits for and takes the node's exclusive lock.
    pub fn lock(&self) -> Result<Locked, StateError> {
        std::fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        let path = self.dir.join("lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io(&path))?;
        loop {
            // SAFETY: flock on a descriptor this function owns; no memory is passed.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
            if rc == 0 {
                break;
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(io(&path)(e));
            }
        }
        Ok(Locked { _file: file })
    }

    /// Reads the state. A state that does not parse (written by something else: the helper only
    /// ever renames complete files into place) is moved aside and reported, and the node starts
    /// afresh; its GPUs' clocks are then reset by the repair every run does.
    pub fn load(&self, _lock: &Locked) -> Result<(NodeState, Option<String>), StateError> {
        let path = self.state_file();
        match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice(&bytes) {
                Ok(s) => Ok((s, None)),
                Err(e) => {
                    let aside = self
                        .dir
                        .join(format!("state.json.bad-{}", std::process::id()));
                    std::fs::rename(&path, &aside).map_err(io(&path))?;
                    Ok((
                        NodeState::default(),
                        Some(format!(
                            "{}: unreadable state ({e}); kept as {} and started afresh",
                            path.display(),
                            aside.display()
                        )),
                    ))
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((NodeState::default(), None)),
            Err(e) => Err(io(&path)(e)),
        }
    }

    /// Reads the state without the lock (for TaskProlog, which runs as the job's user): the
    /// file is only ever replaced whole, so it is always a complete state, if not the newest.
    pub fn peek(&self) -> Result<NodeState, StateError> {
        let path = self.state_file();
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| io(&path)(std::io::Error::new(std::io::ErrorKind::InvalidData, e))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(NodeState::default()),
            Err(e) => Err(io(&path)(e)),
        }
    }

    pub fn save(&self, _lock: &Locked, state: &NodeState) -> Result<(), StateError> {
        let path = self.state_file();
        let bytes =
            serde_json::to_vec_pretty(state).map_err(|e| io(&path)(std::io::Error::other(e)))?;
        write_atomic(&path, &bytes).map_err(io(&path))
    }
}

/// Replaces `path` with `bytes` so that readers and crashes see the old or the new file whole.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    File::open(dir)?.sync_all()
}
