//! The local test cluster (`scripts/local-slurm.sh`) is a real Slurm: slurmctld and three slurmd
//! with fake GPUs of three catalog types. This test starts it, checks it against heshare's
//! catalog, runs a whole-GPU and an MPS job through sbatch, and stops it. Needs root and
//! Debian's slurm-wlm and munge (`.ci/run` installs them).

mod common;

use common::{Cluster, alive};
use std::process::Command;

#[test]
fn the_local_cluster_runs_gpu_and_mps_jobs_and_matches_the_catalog() {
    let c = Cluster::start("plain", &[]);
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

    let gpu_job = c.sbatch(&[
        "--gres=gpu:t4:1",
        "-o",
        "gpu-%j.out",
        "--wrap",
        "echo gpus=$CUDA_VISIBLE_DEVICES",
    ]);
    let mps_job = c.sbatch(&[
        "--gres=mps:30",
        "-o",
        "mps-%j.out",
        "--wrap",
        "echo mps=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
    ]);
    let shown = c.wait_done(&gpu_job);
    assert!(shown.contains("NodeList=ht4"), "{shown}");
    c.wait_done(&mps_job);
    assert_eq!(c.read(&format!("gpu-{gpu_job}.out")).trim(), "gpus=0");
    assert_eq!(c.read(&format!("mps-{mps_job}.out")).trim(), "mps=30");

    let pid = c.slurmctld_pid();
    drop(c);
    assert!(!alive(&pid), "slurmctld {pid} still runs after stop");
}
