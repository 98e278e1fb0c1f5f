//! A live local Slurm cluster for integration tests (scripts/local-slurm.sh), stopped on drop.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub struct Cluster {
    pub dir: PathBuf,
    script: PathBuf,
    port: String,
    env: Vec<(String, String)>,
}

/// The `SLURM_VERSION_NUMBER` of the headers this build used, e.g. `0x160508` for 22.05.8.
pub fn slurm_version() -> u32 {
    heshare::SLURM_VERSION_NUMBER
        .and_then(|v| u32::from_str_radix(v.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0)
}

/// A GRES entry as this Slurm spells it in TRES strings: `gres:gpu:1` up to 23.02, `gres/gpu:1`
/// from 23.11 (DESIGN fact 16).
pub fn gres(entry: &str) -> String {
    if slurm_version() >= 0x17_0b_00 {
        format!("gres/{entry}")
    } else {
        format!("gres:{entry}")
    }
}

/// The cdylib cargo built beside the test's binary (target/<profile>/libheshare.so).
pub fn plugin_path() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_heshare"));
    bin.parent().expect("target dir").join("libheshare.so")
}

/// The symbols slurmctld's plugin loader needs that `nm -D` finds missing from `lib`.
pub fn missing_plugin_symbols(lib: &Path) -> Vec<&'static str> {
    let o = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib)
        .output()
        .unwrap_or_else(|e| panic!("nm (binutils) runs: {e}"));
    assert!(
        o.status.success(),
        "nm -D {}: {}",
        lib.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    let defined: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    ["plugin_name", "plugin_type", "plugin_version", "job_submit"]
        .into_iter()
        .filter(|s| !defined.contains(s))
        .collect()
}

/// Fails a live test at once, with what to do, when the plugin it would load was built without
/// Slurm headers (slurmctld would only say "Plugin name/type/version symbol missing", fatal).
pub fn require_plugin(lib: &Path) {
    let missing = missing_plugin_symbols(lib);
    assert!(
        missing.is_empty(),
        "{} was built without Slurm headers (missing {}): install libslurm-dev and rebuild",
        lib.display(),
        missing.join(", ")
    );
}

impl Cluster {
    /// Starts a cluster named `tag` (its own directory and ports) with extra environment for the
    /// script (e.g. HESHARE_PLUGIN). Returns the script's output on failure.
    pub fn try_start(tag: &str, env: &[(&str, &str)]) -> Result<Cluster, Output> {
        let root = Command::new("id").arg("-u").output().expect("id runs");
        assert_eq!(
            String::from_utf8_lossy(&root.stdout).trim(),
            "0",
            "live Slurm tests need root (run bash .ci/run)"
        );
        if let Some((_, lib)) = env.iter().find(|(k, _)| *k == "HESHARE_PLUGIN") {
            require_plugin(Path::new(lib));
        }
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("heshare-slurm-test-{tag}-{pid}"));
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/local-slurm.sh");
        // Ports of our own so tests (and parallel runs) on one machine do not meet.
        let offset = match tag {
            "plain" => 0,
            "live" => 5,
            "plugin" => 10,
            "live-rpcq" => 15,
            "node" => 25,
            "node-users" => 30,
            "node-users-wait" => 35,
            "priority" => 40,
            "profiles" => 45,
            "accounting" => 50,
            _ => 20,
        };
        // Each cluster takes five ports (slurmctld, three slurmd, slurmdbd where it runs one),
        // all below Linux's ephemeral range (32768 and up), where a client connection of the
        // tests themselves could hold the port a slurmd is about to bind.
        let port = (20_000 + (pid % 200) * 60 + offset).to_string();
        let c = Cluster {
            dir,
            script,
            port,
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        };
        let o = c.script_cmd("start");
        if o.status.success() { Ok(c) } else { Err(o) }
    }

    pub fn start(tag: &str, env: &[(&str, &str)]) -> Cluster {
        Cluster::try_start(tag, env).unwrap_or_else(|o| {
            panic!(
                "local-slurm.sh start failed:\n{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        })
    }

    fn script_cmd(&self, what: &str) -> Output {
        let mut cmd = Command::new("bash");
        cmd.arg(&self.script)
            .arg(what)
            .arg(&self.dir)
            .env("HESHARE_SLURM_PORT", &self.port);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd.output().expect("bash runs")
    }

    pub fn conf(&self) -> PathBuf {
        self.dir.join("etc/slurm.conf")
    }

    /// Runs a Slurm client; returns (success, stdout, stderr).
    pub fn run(&self, bin: &str, args: &[&str]) -> (bool, String, String) {
        let o = Command::new(bin)
            .args(args)
            .env("SLURM_CONF", self.conf())
            .current_dir(&self.dir)
            .output()
            .unwrap_or_else(|e| panic!("{bin}: {e}"));
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    }

    pub fn slurm(&self, bin: &str, args: &[&str]) -> String {
        let (ok, out, err) = self.run(bin, args);
        assert!(ok, "{bin} {args:?}: {err}");
        out
    }

    pub fn sbatch(&self, args: &[&str]) -> String {
        let mut all = vec!["--parsable"];
        all.extend_from_slice(args);
        self.slurm("sbatch", &all).trim().to_owned()
    }

    pub fn wait_done(&self, job: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let show = self.slurm("scontrol", &["show", "job", job]);
            if show.contains("JobState=COMPLETED") {
                return show;
            }
            assert!(
                !show.contains("JobState=FAILED") && !show.contains("JobState=CANCELLED"),
                "job {job} did not complete:\n{show}"
            );
            assert!(
                Instant::now() < deadline,
                "job {job} still not done after 60 s:\n{show}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// slurmctld's pid: the pid file's first line (24.11 rewrites it on reconfigure without
    /// truncating it).
    pub fn slurmctld_pid(&self) -> String {
        self.read("run/slurmctld.pid")
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_owned()
    }

    /// Stops slurmctld with SIGTERM and starts it again on its saved state (the same
    /// configuration and environment).
    pub fn restart_ctld(&self) {
        let o = self.script_cmd("restart-ctld");
        assert!(
            o.status.success(),
            "restart-ctld: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }

    /// Waits until `scontrol show job` satisfies `done` (60 s at most) and returns it.
    pub fn wait_job(&self, job: &str, what: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let show = self.slurm("scontrol", &["show", "job", job]);
            if done(&show) {
                return show;
            }
            assert!(
                Instant::now() < deadline,
                "job {job}: still not {what} after 60 s:\n{show}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until slurmctld's log has a line containing `needle` after the first `skip` bytes.
    pub fn wait_log(&self, needle: &str, skip: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let log = self.read("log/slurmctld.log");
            if let Some(l) = log
                .get(skip.min(log.len())..)
                .unwrap_or("")
                .lines()
                .find(|l| l.contains(needle))
            {
                return l.to_owned();
            }
            assert!(
                Instant::now() < deadline,
                "no log line with {needle:?} after 60 s:\n{}",
                log.get(skip.min(log.len())..).unwrap_or("")
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn stop(&self) {
        let _ = self.script_cmd("stop");
    }

    /// The node helper's accounting records so far (its log under the cluster's directory).
    pub fn records(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.dir.join("log/accounting.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON record per line"))
            .collect()
    }

    /// `heshare node status --json` of one node, with the cluster's node helper configuration.
    pub fn node_status(&self, node: &str) -> serde_json::Value {
        let o = Command::new(env!("CARGO_BIN_EXE_heshare"))
            .args(["node", "status", "--node", node, "--json"])
            .env("HESHARE_CONFIG", self.dir.join("etc/heshare-node.toml"))
            .output()
            .expect("heshare runs");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).expect("status JSON")
    }

    /// Runs one of local-slurm.sh's commands on this cluster (e.g. `stop-dbd`), which must
    /// succeed.
    pub fn script(&self, what: &str) {
        let o = self.script_cmd(what);
        assert!(
            o.status.success(),
            "{what}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

pub fn alive(pid: &str) -> bool {
    Command::new("kill")
        .args(["-0", pid])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Builds `tests/fixtures/forge_spank_env.c` (a small client of Slurm's API that submits a job
/// with HESHARE_* entries of its own in spank_job_env) into the cluster's directory, runs it
/// with `gres` and `extra` entries, and returns the job id it submitted.
pub fn forge_submit(c: &Cluster, gres: &str, extra: &[&str]) -> String {
    let forge = c.dir.join("forge_spank_env");
    if !forge.exists() {
        let cc = Command::new("cc")
            .arg("-o")
            .arg(&forge)
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/forge_spank_env.c"
            ))
            .arg("-lslurm")
            .output()
            .expect("cc runs");
        assert!(
            cc.status.success(),
            "{}",
            String::from_utf8_lossy(&cc.stderr)
        );
    }
    let o = Command::new(&forge)
        .arg(gres)
        .arg(&c.dir)
        .args(extra)
        .env("SLURM_CONF", c.conf())
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}
