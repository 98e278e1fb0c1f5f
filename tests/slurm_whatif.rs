//! The what-if an admin runs before enabling heshare, on a real Slurm: jobs run on the local
//! cluster with slurmdbd (plain Slurm, no heshare loaded), exported with the sacct command the
//! README gives, and replayed as recorded on the cluster's own slurm.conf. Its own test binary,
//! so that its cluster never runs beside another test's. Needs root, slurm-wlm, slurmdbd,
//! mariadb-server, munge (bash .ci/run).

mod common;

use common::Cluster;
use std::process::Command;
use std::time::{Duration, Instant};

/// What an admin does before enabling heshare: jobs run on plain Slurm, exported with the sacct
/// command the README gives, and replayed as recorded on the cluster's own slurm.conf: every
/// job that ran is one job of the replay, on the cluster's three nodes and eight GPUs.
#[test]
fn a_clusters_own_sacct_export_replays_on_its_own_slurm_conf() {
    let c = Cluster::start("whatif", &[("HESHARE_SLURMDBD", "1")]);
    let jobs: Vec<String> = [
        ["--gres=gpu:a100:1", "-J", "train"],
        ["--gres=gpu:a100:1", "-J", "train"],
        ["--gres=gpu:1", "-J", "untyped"],
        ["--gres=mps:50", "-J", "serve"],
        ["--gres=gpu:v100m16:2", "-J", "pair"],
    ]
    .iter()
    .map(|a| {
        let mut args = a.to_vec();
        args.extend(["-o", "/dev/null", "--wrap", "sleep 2"]);
        c.sbatch(&args)
    })
    .collect();
    for j in &jobs {
        c.wait_done(j);
    }
    let format =
        "--format=JobID,Submit,Start,End,AllocTRES,User,Timelimit,Account,JobName,ReqTRES,NodeList";
    let deadline = Instant::now() + Duration::from_secs(60);
    let export = loop {
        let out = c.slurm(
            "sacct",
            &["--allocations", "--parsable2", "--allusers", format],
        );
        let ended = jobs
            .iter()
            .filter(|j| {
                out.lines()
                    .any(|l| l.starts_with(&format!("{j}|")) && !l.contains("|Unknown|"))
            })
            .count();
        if ended == jobs.len() {
            break out;
        }
        assert!(
            Instant::now() < deadline,
            "sacct never listed every job ended:\n{out}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let trace = tmp.path().join("sacct.txt");
    std::fs::write(&trace, &export).expect("write");
    let o = Command::new(env!("CARGO_BIN_EXE_heshare"))
        .args([
            "simulate",
            "--seeds",
            "1",
            "--policies",
            "slurm-exclusive,heshare",
        ])
        .arg("--cluster")
        .arg(c.conf())
        .arg("--trace")
        .arg(&trace)
        .args(["--trace-format", "sacct"])
        .env_remove("HESHARE_CONFIG")
        .env("HESHARE_SYSTEM_CONFIG", "/nonexistent/heshare.toml")
        .output()
        .expect("heshare runs");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{}\n{out}\n{export}",
        String::from_utf8_lossy(&o.stderr)
    );
    eprintln!("{export}\n{out}");
    assert!(
        out.contains("time mode: 5 jobs as recorded x 1 seeds"),
        "{out}"
    );
    assert!(out.contains("(3 nodes, 8 GPUs)"), "{out}");
    assert!(!out.contains("left out"), "{out}");
    assert!(!out.contains("name neither the GPU type"), "{out}");
    c.stop();
}
