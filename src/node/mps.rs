//! NVIDIA MPS control daemons, one per GPU: started by the Prolog of the first sharing job,
//! told to start the job user's server, stopped by the Epilog of the last. Commands run without
//! a shell, with a deadline (Slurm has no Prolog timeout by default, and a hung Prolog holds the
//! node), with arguments built only from validated numbers and configured paths, and with an
//! environment made here from nothing: the control daemon (and every server it forks, as the
//! job's user) inherits it, so nothing of the Prolog's own environment may reach it.
//!
//! MPS serves one user per GPU at a time: a client of another user waits until the running
//! server's clients are gone (NVIDIA's documented behaviour). The helper therefore starts a
//! server only for the uid that holds the GPU; see `helper` for who waits and how they are told.

use super::secure::{self, SecureError};
use crate::command::{CommandError, Output, run};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum MpsError {
    #[error(transparent)]
    Command(#[from] CommandError),
    #[error("{}: {source}", path.display())]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{origin}: node.mps_control: {source}")]
    Program {
        origin: String,
        #[source]
        source: SecureError,
    },
    #[error("MPS directory: {0}")]
    Tree(#[source] SecureError),
    #[error("the MPS control daemon of GPU {gpu} did not {what} within {secs:.1} s")]
    NotSettled {
        gpu: u32,
        what: &'static str,
        secs: f64,
    },
}

/// The MPS control of one node: where each GPU's daemon keeps its pipes and logs.
#[derive(Debug, Clone)]
pub struct Mps {
    pub program: PathBuf,
    /// Where the program was configured, for errors about it.
    pub origin: String,
    pub pipe_base: PathBuf,
    pub log_base: PathBuf,
    pub timeout: Duration,
    /// `[node] mps_library_path`: the control daemon's `LD_LIBRARY_PATH` (empty: none).
    pub library_path: Vec<PathBuf>,
}

impl Mps {
    pub fn new(
        program: &Path,
        origin: &str,
        pipe_dir: &Path,
        log_dir: &Path,
        node: &str,
        timeout: Duration,
    ) -> Self {
        Mps {
            program: program.to_owned(),
            origin: origin.to_owned(),
            pipe_base: pipe_dir.join(node),
            log_base: log_dir.join(node),
            timeout,
            library_path: Vec::new(),
        }
    }

    /// The same, giving the control program these library directories (checked at each use).
    pub fn with_library_path(mut self, dirs: &[PathBuf]) -> Self {
        self.library_path = dirs.to_vec();
        self
    }

    /// The `LD_LIBRARY_PATH` value for the control program, every directory checked first (the
    /// daemon runs as root and forks the users' servers).
    fn library_env(&self) -> Result<Option<PathBuf>, MpsError> {
        if self.library_path.is_empty() {
            return Ok(None);
        }
        for d in &self.library_path {
            secure::check_library_dir(d).map_err(|source| MpsError::Program {
                origin: format!("{} (node.mps_library_path)", self.origin),
                source,
            })?;
        }
        let joined = std::env::join_paths(&self.library_path).map_err(|e| MpsError::Program {
            origin: format!("{} (node.mps_library_path)", self.origin),
            source: secure::SecureError::Unsafe {
                path: self.library_path[0].clone(),
                why: e.to_string(),
            },
        })?;
        Ok(Some(PathBuf::from(joined)))
    }

    pub fn pipe_dir(&self, gpu: u32) -> PathBuf {
        self.pipe_base.join(format!("gpu{gpu}"))
    }

    pub fn log_dir(&self, gpu: u32) -> PathBuf {
        self.log_base.join(format!("gpu{gpu}"))
    }

    /// A directory where no control daemon ever listens (root's, empty): a job that must run
    /// outside MPS is pointed here, so its CUDA clients find no daemon and go on without MPS.
    pub fn no_mps_dir(&self) -> PathBuf {
        self.pipe_base.join("no-mps")
    }

    /// Where the Prolog publishes an MPS job's GPUs for its TaskProlog, which runs as the job's
    /// user and cannot read the root-only state: beside the pipes its clients open anyway.
    pub fn jobs_dir(&self) -> PathBuf {
        self.pipe_base.join("jobs")
    }

    /// Refuses a control program that anyone but root could have changed, checked before every
    /// run since a package upgrade or an admin may replace it between jobs.
    fn checked_program(&self) -> Result<&Path, MpsError> {
        secure::check_program(&self.program).map_err(|source| MpsError::Program {
            origin: self.origin.clone(),
            source,
        })?;
        Ok(&self.program)
    }

    fn control(&self, gpu: u32, command: &str) -> Result<Output, MpsError> {
        let program = self.checked_program()?;
        let pipe = self.pipe_dir(gpu);
        let log = self.log_dir(gpu);
        let libs = self.library_env()?;
        let mut env: Vec<(&str, &Path)> = vec![
            ("CUDA_MPS_PIPE_DIRECTORY", &pipe),
            ("CUDA_MPS_LOG_DIRECTORY", &log),
        ];
        if let Some(l) = &libs {
            env.push(("LD_LIBRARY_PATH", l));
        }
        run(
            program,
            &[],
            &env,
            Some(&format!("{command}\n")),
            self.timeout,
            false,
        )
        .map_err(MpsError::from)
    }

    /// Whether a control daemon answers on this GPU's pipe directory. A daemon that quit leaves
    /// its `control` behind, and a client may wait for one that is gone until its deadline: the
    /// pipe is asked first.
    pub fn running(&self, gpu: u32) -> bool {
        listening(&self.pipe_dir(gpu).join("control"))
            && self.control(gpu, "get_server_list").is_ok()
    }

    /// Starts the GPU's control daemon if none answers, then a server for `uid`.
    pub fn start(&self, gpu: u32, uid: u32) -> Result<(), MpsError> {
        self.start_daemon(gpu)?;
        self.control(gpu, &format!("start_server -uid {uid}"))?;
        Ok(())
    }

    /// Starts the GPU's control daemon if none answers. Its pipe directory must be readable by
    /// the jobs' users (clients connect there); its log directory is root's alone.
    pub fn start_daemon(&self, gpu: u32) -> Result<(), MpsError> {
        let program = self.checked_program()?;
        if !self.running(gpu) {
            for (dir, mode) in [(self.pipe_dir(gpu), 0o755), (self.log_dir(gpu), 0o700)] {
                secure::ensure_own_dir(&dir, mode).map_err(MpsError::Tree)?;
            }
            let visible = PathBuf::from(gpu.to_string());
            let pipe = self.pipe_dir(gpu);
            let log = self.log_dir(gpu);
            let libs = self.library_env()?;
            let mut env: Vec<(&str, &Path)> = vec![
                // Slurm's and NVML's GPU indices follow PCI bus order; CUDA's default order
                // (fastest first) may not.
                ("CUDA_DEVICE_ORDER", Path::new("PCI_BUS_ID")),
                ("CUDA_VISIBLE_DEVICES", &visible),
                ("CUDA_MPS_PIPE_DIRECTORY", &pipe),
                ("CUDA_MPS_LOG_DIRECTORY", &log),
            ];
            if let Some(l) = &libs {
                env.push(("LD_LIBRARY_PATH", l));
            }
            run(program, &["-d"], &env, None, self.timeout, true)?;
            self.wait_until(gpu, true, "start")?;
        }
        Ok(())
    }

    /// Tells the GPU's daemon to quit and waits until it has.
    pub fn stop(&self, gpu: u32) -> Result<(), MpsError> {
        if !self.running(gpu) {
            return Ok(());
        }
        self.control(gpu, "quit")?;
        self.wait_until(gpu, false, "quit")
    }

    fn wait_until(&self, gpu: u32, up: bool, what: &'static str) -> Result<(), MpsError> {
        let start = Instant::now();
        loop {
            // Up: the daemon answers (`running` asks the pipe first); down: nothing listens.
            let settled = if up {
                self.running(gpu)
            } else {
                !listening(&self.pipe_dir(gpu).join("control"))
            };
            if settled {
                return Ok(());
            }
            if start.elapsed() >= self.timeout {
                return Err(MpsError::NotSettled {
                    gpu,
                    what,
                    secs: self.timeout.as_secs_f64(),
                });
            }
            // Each look at a live daemon may be a connection it logs: every 50 ms.
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Whether something listens on a control daemon's pipe. A daemon that quit leaves the path
/// behind (an H200 with driver 580 and MPS 13.0 keeps `control`, a Unix socket, after the
/// daemon has exited), so existence says nothing: a socket must not refuse a connection, a FIFO
/// (older MPS) must have a reader (opening it to write without blocking fails with ENXIO when
/// nobody reads it). Nothing is sent.
fn listening(control: &Path) -> bool {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    match std::fs::symlink_metadata(control) {
        Err(_) => false,
        // Refused: a socket file nobody is bound to. Another error (the daemon's socket may
        // not be a stream socket: EPROTOTYPE) means a socket is bound there.
        Ok(m) if m.file_type().is_socket() => {
            match std::os::unix::net::UnixStream::connect(control) {
                Ok(_) => true,
                Err(e) => !matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound
                ),
            }
        }
        Ok(m) if m.file_type().is_fifo() => std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(control)
            .is_ok(),
        Ok(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_nobody_reads_is_no_daemon() {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("control");
        assert!(!listening(&fifo), "no pipe at all");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: a valid NUL-terminated path; mkfifo only creates the node.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
        assert!(
            !listening(&fifo),
            "a FIFO left behind by a daemon that quit"
        );
        // A reader (what a live daemon is) holds it open.
        let reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .expect("reader");
        assert!(listening(&fifo), "a daemon reading its pipe");
        drop(reader);
        // A process another test spawns at this moment holds a copy of the reader between its
        // fork and its exec (close-on-exec closes it only then): give that a moment to pass.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while listening(&fifo) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!listening(&fifo), "the reader is gone");
    }

    /// The real daemon's socket (MPS 13.0 on an H200): SOCK_SEQPACKET, which a stream
    /// connection is refused with EPROTOTYPE while it lives and ECONNREFUSED once it quit.
    #[test]
    fn a_seqpacket_daemon_is_seen_alive_and_then_gone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sock = dir.path().join("control");
        let bytes = sock.as_os_str().as_encoded_bytes();
        // SAFETY: plain socket calls on a zeroed sockaddr_un whose path fits (asserted) and is
        // NUL-terminated by the zeroing; the descriptor is closed below.
        unsafe {
            let fd = libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0);
            assert!(fd >= 0, "socket");
            let mut addr: libc::sockaddr_un = std::mem::zeroed();
            addr.sun_family = libc::sa_family_t::try_from(libc::AF_UNIX).expect("AF_UNIX");
            assert!(bytes.len() < addr.sun_path.len(), "path fits");
            for (d, b) in addr.sun_path.iter_mut().zip(bytes) {
                *d = *b as libc::c_char;
            }
            let len =
                libc::socklen_t::try_from(std::mem::size_of::<libc::sockaddr_un>()).expect("small");
            assert_eq!(libc::bind(fd, (&raw const addr).cast(), len), 0, "bind");
            assert_eq!(libc::listen(fd, 4), 0, "listen");
            assert!(listening(&sock), "a live SOCK_SEQPACKET daemon");
            libc::close(fd);
        }
        assert!(sock.exists(), "left behind, as the real daemon leaves it");
        assert!(!listening(&sock));
    }

    #[test]
    fn a_socket_nobody_accepts_on_is_no_daemon() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sock = dir.path().join("control");
        let daemon = std::os::unix::net::UnixListener::bind(&sock).expect("bind");
        assert!(listening(&sock), "a daemon accepting on its socket");
        // What a daemon that quit leaves: the socket file, nobody behind it.
        drop(daemon);
        assert!(sock.exists());
        assert!(!listening(&sock));
    }

    #[test]
    fn a_hung_command_is_killed_at_its_deadline() {
        let t = Instant::now();
        let err = run(
            Path::new("/bin/sleep"),
            &["5"],
            &[],
            None,
            Duration::from_millis(200),
            false,
        )
        .expect_err("must time out");
        assert!(matches!(err, CommandError::Timeout { .. }), "{err}");
        assert!(t.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn a_failing_command_reports_status_and_output() {
        let err = run(
            Path::new("/bin/sh"),
            &["-c", "echo nope >&2; exit 3"],
            &[],
            None,
            Duration::from_secs(5),
            false,
        )
        .expect_err("must fail");
        let msg = err.to_string();
        assert!(
            msg.contains("exit status: 3") && msg.contains("nope"),
            "{msg}"
        );
    }

    #[test]
    fn commands_get_a_scrubbed_environment() {
        // SAFETY: tests of this module do not read the environment concurrently.
        unsafe { std::env::set_var("HESHARE_TEST_INHERITED", "leaked") };
        let out = run(
            Path::new("/usr/bin/env"),
            &[],
            &[("CUDA_MPS_PIPE_DIRECTORY", Path::new("/run/x"))],
            None,
            Duration::from_secs(5),
            false,
        )
        .expect("env runs");
        let mut vars: Vec<&str> = out.stdout.lines().collect();
        vars.sort_unstable();
        assert_eq!(
            vars,
            [
                "CUDA_MPS_PIPE_DIRECTORY=/run/x",
                "PATH=/usr/sbin:/usr/bin:/sbin:/bin"
            ]
        );
    }

    #[test]
    fn a_control_program_others_could_change_is_refused_before_it_runs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let prog = dir.path().join("mps-control");
        let ran = dir.path().join("ran");
        std::fs::write(&prog, format!("#!/bin/sh\ntouch {}\n", ran.display())).expect("write");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o757)).expect("chmod");
        let mps = Mps::new(
            &prog,
            "/etc/heshare.toml:12",
            &dir.path().join("pipe"),
            &dir.path().join("log"),
            "n1",
            Duration::from_secs(5),
        );
        let e = mps.start(0, 1000).expect_err("world-writable program");
        assert!(
            e.to_string()
                .starts_with("/etc/heshare.toml:12: node.mps_control: "),
            "{e}"
        );
        assert!(!ran.exists(), "the program ran");
        let bare = Mps {
            program: PathBuf::from("nvidia-cuda-mps-control"),
            ..mps
        };
        assert!(bare.start(0, 1000).is_err(), "a PATH lookup as root");
    }

    #[test]
    fn a_missing_program_says_so() {
        let err = run(
            Path::new("/nonexistent/nvidia-cuda-mps-control"),
            &[],
            &[],
            None,
            Duration::from_secs(1),
            false,
        )
        .expect_err("must fail");
        assert!(err.to_string().contains("cannot run"), "{err}");
    }
}
