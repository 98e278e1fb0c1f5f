//! The node's own record of which jobs share each GPU, kept under `state_dir/NODE/`.
//!
//! Every helper run takes an exclusive `flock` on `lock` for its whole run, reads `state.json`,
//! and replaces it with write-to-temporary, fsync, rename, fsync-directory: a helper killed at
//! any point leaves either the old or the new state, never half of one, and the lock dies with
//! its process. Records that must reach the accounting log wait in the state's `outbox` until
//! the log has them, so a kill between the two writes loses nothing.
//!
//! The state names users, uids and accounts: the directory is root's alone (0700, every level
//! checked, see `secure`), and every file in it is 0600 and opened without following symlinks.

use super::record::Record;
use super::secure::{self, SecureError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
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
    /// Of `energy_j`, what was split by the driver's per-process measurement.
    #[serde(default)]
    pub measured_j: f64,
    /// Another user's MPS server holds the GPU: this job's GPU work waits for it (MPS serves
    /// one user per GPU at a time).
    #[serde(default)]
    pub waits_for_uid: Option<u32>,
    /// How long it waited before its user's server could start.
    #[serde(default)]
    pub mps_wait_s: f64,
    /// Another user's MPS server held the GPU when the job came: it runs outside MPS, in a
    /// context of its own that the GPU time-slices with that server (`[node] other_user_share =
    /// "time-slice"`). It stays so until it ends, and never counts as the GPU's MPS user.
    #[serde(default)]
    pub outside_mps_beside_uid: Option<u32>,
    /// What its user said it needs of a reference GPU (`SPANK_HESHARE_DEMAND_PCT`).
    #[serde(default)]
    pub demand_pct: Option<u8>,
    /// The job's profile keys (`SPANK_HESHARE_PROFILE_KEYS`), carried into its record.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub profile_keys: Vec<String>,
    /// The class its profile placed it with (`SPANK_HESHARE_PROFILE`, as `profile::wire`
    /// writes it): the clock is chosen for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// GPU busy time the driver measured for its processes (percent-seconds) and the seconds of
    /// the intervals it measured: the record's busy fraction.
    #[serde(default)]
    pub busy_pct_s: f64,
    #[serde(default)]
    pub busy_window_s: f64,
    /// GPU busy time the driver measured for the other jobs' processes on its GPU over the same
    /// intervals (percent-seconds): the record's neighbour busy fraction.
    #[serde(default)]
    pub neighbour_busy_pct_s: f64,
    /// A run of it was killed at its time limit here beside a neighbour
    /// (`policy::keeps_default_clock`): the GPU stays at its default clock while it runs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub default_clock: bool,
    /// Its time limit in seconds (Slurm's, from the Prolog's environment): with its profile, the
    /// clock prices the chance its run passes it (`belief::LimitRisk`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_s: Option<f64>,
    /// The GPU type its time limit is written for (`SPANK_HESHARE_LIMIT_TYPE`), which the
    /// belief about its run is conditioned on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_type: Option<String>,
}

/// A process the driver accounted work to, as last seen: whose job it is (decided while it ran,
/// from its cgroup) and its busy time then, so the next interval gets only what came after.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcSeen {
    pub job_id: Option<String>,
    pub busy_pct_s: f64,
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
    /// Processes seen on the GPU, by `PID@START_US`.
    #[serde(default)]
    pub procs: BTreeMap<String, ProcSeen>,
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
            procs: BTreeMap::new(),
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
    #[error("state directory: {0}")]
    Tree(#[from] SecureError),
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
        secure::ensure_own_dir(&self.dir, 0o700)?;
        let path = self.dir.join("lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
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

    pub fn save(&self, _lock: &Locked, state: &NodeState) -> Result<(), StateError> {
        let path = self.state_file();
        let bytes =
            serde_json::to_vec_pretty(state).map_err(|e| io(&path)(std::io::Error::other(e)))?;
        write_atomic(&path, &bytes, 0o600).map_err(io(&path))
    }
}

/// Replaces `path` with `bytes` (file mode `mode`) so that readers and crashes see the old or the
/// new file whole. The temporary file is created exclusively beside its target under a name no
/// one can guess, so no one can plant a file or a symlink where it will be written.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (mut f, tmp) = secure::create_temp(dir, &name, mode)?;
    let written = f
        .write_all(bytes)
        .and_then(|()| f.sync_all())
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replacement_never_writes_through_a_planted_temporary_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").expect("write");
        // The name a predictable scheme would use next (`.NAME.tmp-PID`), planted as a symlink.
        let planted = dir
            .path()
            .join(format!(".state.json.tmp-{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).expect("symlink");
        let target = dir.path().join("state.json");
        write_atomic(&target, b"{}", 0o600).expect("write");
        assert_eq!(std::fs::read_to_string(&victim).expect("read"), "keep");
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "{}");
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            std::fs::metadata(&target).expect("exists").mode() & 0o777,
            0o600
        );
    }
}
