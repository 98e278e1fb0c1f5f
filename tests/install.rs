//! `scripts/install.sh` as an admin runs it: into a prefix, then the installed job_submit and
//! SPANK plugins loaded by a real slurmctld and sbatch, deciding a job. Needs root, slurm-wlm,
//! munge and the release build (the script rebuilds with `--locked`, a no-op after it).

mod common;

use common::{Cluster, gres};
use std::process::Command;

#[test]
fn the_installed_plugins_load_in_slurm_and_decide() {
    let prefix = tempfile::tempdir().expect("tempdir");
    let etc = tempfile::tempdir().expect("tempdir");
    let o = Command::new("bash")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/install.sh"))
        .arg(prefix.path())
        .env("HESHARE_SYSCONFDIR", etc.path())
        .output()
        .expect("bash runs");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "install.sh failed:\n{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let p = prefix.path();
    for f in [
        "bin/heshare",
        "lib/job_submit_heshare.so",
        "lib/spank_heshare.so",
        "libexec/heshare-prolog",
        "libexec/heshare-epilog",
        "libexec/heshare-task-prolog",
        "share/heshare/systemd/heshare-sample.timer",
        "share/heshare/systemd/heshare-profiles.timer",
    ] {
        assert!(p.join(f).exists(), "{f} was not installed");
    }
    let unit = std::fs::read_to_string(p.join("share/heshare/systemd/heshare-sample.service"))
        .expect("sample service installed");
    assert!(
        unit.contains(&format!(
            "ExecStart={}/bin/heshare node sample",
            p.display()
        )),
        "{unit}"
    );
    let unit = std::fs::read_to_string(p.join("share/heshare/systemd/heshare-profiles.service"))
        .expect("profiles service installed");
    assert!(
        unit.contains(&format!(
            "ExecStart={}/bin/heshare profiles update",
            p.display()
        )),
        "{unit}"
    );
    assert!(etc.path().join("heshare.toml").exists());
    assert!(
        out.contains("PluginDir=") && out.contains(&format!("{}/lib", p.display())),
        "{out}"
    );
    let v = Command::new(p.join("bin/heshare"))
        .arg("--version")
        .output()
        .expect("runs");
    assert!(v.status.success());
    let plugin = p.join("lib/job_submit_heshare.so");
    let spank = p.join("lib/spank_heshare.so");
    let config = etc.path().join("heshare.toml");
    let c = Cluster::start(
        "install",
        &[
            ("HESHARE_PLUGIN", plugin.to_str().expect("utf-8")),
            ("HESHARE_SPANK_PLUGIN", spank.to_str().expect("utf-8")),
            ("HESHARE_CONFIG", config.to_str().expect("utf-8")),
        ],
    );
    let job = c.sbatch(&[
        "--gres=gpu:1",
        "--gpu-class=vit-infer",
        "--gpu-share=auto",
        "--wrap",
        "true",
    ]);
    let s = c.wait_done(&job);
    assert!(s.contains("AdminComment=heshare: type=t4"), "{s}");
    assert!(
        s.contains(&format!("TresPerNode={}", gres("mps:50"))),
        "{s}"
    );
    // The installed SPANK plugin checks option values in sbatch itself.
    let (ok, _, err) = c.run(
        "sbatch",
        &["--gres=gpu:1", "--gpu-share=0", "--wrap", "true"],
    );
    assert!(!ok && err.contains("--gpu-share"), "{err}");
}
