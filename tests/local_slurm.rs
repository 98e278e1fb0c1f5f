//! The local test cluster (`scripts/local-slurm.sh`) is a real Slurm: slurmctld and three slurmd
//! with fake GPUs of three catalog types. This test starts it, checks it against heshare's
//! catalog, runs a whole-GPU and an MPS job through sbatch, and stops it. Needs root and
//! Debian's slurm-wlm and munge (`.ci/run` installs them).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

struct Cluster {
    dir: PathBuf,
    script: PathBuf,
    port: String,
}

impl Cluster {
    fn start() -> Cluster {
        let root = Command::new("id").arg("-u").output().expect("id runs");
        assert_eq!(
            String::from_utf8_lossy(&root.stdout).trim(),
            "0",
            "the live Slurm test needs root (run bash .ci/run)"
        );
        let dir = std::env::temp_dir().join(format!("heshare-slurm-test-{}", std::process::id()));
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/local-slurm.sh");
        // A port of our own so parallel test runs on one machine do not meet.
        let port = (20_000 + std::process::id() % 20_000).to_string();
        let c = Cluster { dir, script, port };
        let o = c.script_cmd("start");
        assert!(
            o.status.success(),
            "local-slurm.sh start failed:\n{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        c
    }

    fn script_cmd(&self, what: &str) -> Output {
        Command::new("bash")
            .arg(&self.script)
            .arg(what)
            .arg(&self.dir)
            .env("HESHARE_SLURM_PORT", &self.port)
            .output()
            .expect("bash runs")
    }

    fn conf(&self) -> PathBuf {
        self.dir.join("etc/slurm.conf")
    }

    fn slurm(&self, bin: &str, args: &[&str]) -> String {
        let o = Command::new(bin)
            .args(args)
            .env("SLURM_CONF", self.conf())
            .current_dir(&self.dir)
            .output()
            .unwrap_or_else(|e| panic!("{bin}: {e}"));
        assert!(
            o.status.success(),
            "{bin} {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn wait_done(&self, job: &str) -> String {
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
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.script_cmd("stop");
    }
}

#[test]
fn the_local_cluster_runs_gpu_and_mps_jobs_and_matches_the_catalog() {
    let c = Cluster::start();
    let nodes = c.slurm("sinfo", &["-h", "-N", "-o", "%N %t %G"]);
    for want in [
        "ha100 idle gpu:a100:2,mps:a100:200",
        "hv100 idle gpu:v100m16:2",
        "ht4 idle gpu:t4:4,mps:t4:400",
    ] {
        assert!(
            nodes.lines().any(|l| l.trim() == want),
            "no node line {want:?} in:\n{nodes}"
        );
    }

    let check = Command::new(env!("CARGO_BIN_EXE_heshare"))
        .arg("check-config")
        .arg("--slurm-conf")
        .arg(c.conf())
        .env_remove("HESHARE_CONFIG")
        .output()
        .expect("heshare runs");
    assert!(
        check.status.success(),
        "the test cluster's GPU types must be catalog types: {}",
        String::from_utf8_lossy(&check.stderr)
    );

    let gpu_job = c.slurm(
        "sbatch",
        &[
            "--parsable",
            "--gres=gpu:t4:1",
            "-o",
            "gpu-%j.out",
            "--wrap",
            "echo gpus=$CUDA_VISIBLE_DEVICES",
        ],
    );
    let mps_job = c.slurm(
        "sbatch",
        &[
            "--parsable",
            "--gres=mps:30",
            "-o",
            "mps-%j.out",
            "--wrap",
            "echo mps=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
        ],
    );
    let (gpu_job, mps_job) = (gpu_job.trim(), mps_job.trim());
    let shown = c.wait_done(gpu_job);
    assert!(shown.contains("NodeList=ht4"), "{shown}");
    c.wait_done(mps_job);
    let out = |name: String| std::fs::read_to_string(c.dir.join(name)).expect("job output");
    assert_eq!(out(format!("gpu-{gpu_job}.out")).trim(), "gpus=0");
    assert_eq!(out(format!("mps-{mps_job}.out")).trim(), "mps=30");

    let pid_file = c.dir.join("run/slurmctld.pid");
    let pid = std::fs::read_to_string(&pid_file)
        .expect("pid file")
        .trim()
        .to_owned();
    drop(c);
    let alive = Command::new("kill")
        .args(["-0", &pid])
        .output()
        .expect("kill runs");
    assert!(
        !alive.status.success(),
        "slurmctld {pid} still runs after stop"
    );
}
