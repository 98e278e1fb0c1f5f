//! heshare's priority as Slurm's site factor, in a real slurmctld with priority/multifactor
//! (Slurm 22.05 from Debian; .ci/run repeats it on 24.11): what sprio shows for a job whose
//! options cost energy, a user who cannot erase it (their nice is theirs, the site factor is
//! not), and the factor following the cluster as the snapshot thread re-prices the pending job.
//! Needs root, slurm-wlm and munge.

mod common;

use common::{Cluster, alive, plugin_path};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

const NOBODY: u32 = 65534;

/// Runs a Slurm client as `nobody`: (success, stdout, stderr).
fn as_nobody(c: &Cluster, bin: &str, args: &[&str]) -> (bool, String, String) {
    let o = Command::new(bin)
        .args(args)
        .env("SLURM_CONF", c.conf())
        .current_dir("/tmp")
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .unwrap_or_else(|e| panic!("{bin}: {e}"));
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// sprio's SITE and NICE columns for a pending job.
fn sprio(c: &Cluster, job: &str) -> (i64, i64) {
    let out = c.slurm("sprio", &["-h", "-j", job, "-o", "%S %N"]);
    let v: Vec<i64> = out
        .split_whitespace()
        .map(|w| w.parse().unwrap_or_else(|_| panic!("sprio: {out}")))
        .collect();
    match v.as_slice() {
        [site, nice] => (*site, *nice),
        _ => panic!("sprio -j {job}: {out}"),
    }
}

/// The `site=` heshare recorded in the job's AdminComment.
fn recorded(c: &Cluster, job: &str) -> i64 {
    let show = c.slurm("scontrol", &["show", "job", job]);
    show.split_whitespace()
        .find_map(|w| w.strip_prefix("site="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no site= in AdminComment: {show}"))
}

#[test]
fn the_site_factor_shows_in_sprio_survives_the_users_nice_and_follows_the_cluster() {
    let plugin = plugin_path();
    assert!(
        plugin.exists(),
        "{} was not built: run `cargo build --release` first (bash .ci/run does)",
        plugin.display()
    );
    // A site valuing a job's time at 0.01 kWh per GPU-hour: a share asked with
    // --energy-policy=performance then goes to a faster type than the same share would without
    // the option.
    let cfg_dir = tempfile::tempdir().expect("tempdir");
    let cfg = cfg_dir.path().join("heshare.toml");
    let shipped = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/slurm-conf/heshare.toml"
    ))
    .expect("shipped config");
    std::fs::write(
        &cfg,
        shipped.replacen(
            "time_value_kwh_per_gpu_hour = 3.0",
            "time_value_kwh_per_gpu_hour = 0.01",
            1,
        ),
    )
    .expect("write config");
    let c = Cluster::start(
        "priority",
        &[
            ("HESHARE_PLUGIN", plugin.to_str().expect("utf-8")),
            ("HESHARE_CONFIG", cfg.to_str().expect("utf-8")),
        ],
    );
    let ctld = c.slurmctld_pid();
    let log = c.read("log/slurmctld.log");
    assert!(
        !log.contains("changes nothing; set PriorityType=priority/multifactor"),
        "the local cluster runs multifactor: {log}"
    );

    // All of the a100 node's CPUs taken: a job heshare sends to an a100 stays pending
    // (Reason=Resources), which is when sprio shows it.
    let blocker = c.sbatch(&[
        "-w",
        "ha100",
        "-c",
        "4",
        "-o",
        "/dev/null",
        "--wrap",
        "sleep 300",
    ]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !c
        .slurm("squeue", &["-h", "-j", &blocker, "-o", "%T"])
        .contains("RUNNING")
    {
        assert!(Instant::now() < deadline, "the blocker never ran");
        std::thread::sleep(Duration::from_millis(200));
    }

    // nobody asks for half a GPU, to run as fast as it can, and sets its own nice.
    let (ok, out, err) = as_nobody(
        &c,
        "sbatch",
        &[
            "--parsable",
            "-o",
            "/dev/null",
            "--gres=mps:50",
            "--gpu-class=llm-infer",
            "--energy-policy=performance",
            "--nice=50",
            "--wrap",
            "true",
        ],
    );
    assert!(ok, "{err}");
    let job = out.trim().to_owned();
    let show = c.slurm("scontrol", &["show", "job", &job]);
    assert!(
        show.contains("AdminComment=heshare: type=a100 ") && show.contains("JobState=PENDING"),
        "{show}"
    );
    // The half GPU asked would run on a v100 without the option; on an a100 it costs more: the
    // job moves back by what the option costs, in the site factor, beside the user's own nice.
    let at_submit = recorded(&c, &job);
    eprintln!("site factor at submission: {at_submit}");
    assert!(at_submit < 0, "{show}");
    assert_eq!(sprio(&c, &job), (at_submit, 50), "{show}");

    // The user resets their nice: theirs to change, and heshare's factor stays.
    let (ok, _, err) = as_nobody(
        &c,
        "scontrol",
        &["update", &format!("jobid={job}"), "nice=0"],
    );
    assert!(ok, "{err}");
    assert_eq!(sprio(&c, &job), (at_submit, 0));
    // The site factor is not the user's to change.
    let (ok, _, err) = as_nobody(
        &c,
        "scontrol",
        &["update", &format!("jobid={job}"), "sitefactor=0"],
    );
    assert!(!ok && err.contains("denied"), "{err}");
    assert_eq!(sprio(&c, &job).0, at_submit);

    // The cluster changes: both v100s are taken. The half GPU asked would now have to wait or
    // take an a100 too, so the option costs nothing more: the snapshot thread re-prices the
    // pending job, and Slurm's next priority calculation (PriorityCalcPeriod=1) shows it.
    let v100s = c.sbatch(&[
        "--gres=gpu:v100m16:2",
        "-o",
        "/dev/null",
        "--wrap",
        "sleep 300",
    ]);
    let deadline = Instant::now() + Duration::from_secs(150);
    let now = loop {
        let (site, _) = sprio(&c, &job);
        if site != at_submit {
            break site;
        }
        assert!(
            Instant::now() < deadline,
            "the factor of job {job} never changed after the v100s were taken:\n{}",
            c.read("log/slurmctld.log")
        );
        std::thread::sleep(Duration::from_secs(2));
    };
    assert!(now > at_submit, "{now} after {at_submit}");
    assert_eq!(recorded(&c, &job), now);
    assert!(
        c.read("log/slurmctld.log").contains(&format!(
            "heshare: job {job}: site factor {now:+} now (was {at_submit:+})"
        )),
        "the re-pricing is logged"
    );
    c.slurm("scancel", &[&job, &blocker, &v100s]);
    assert!(alive(&ctld), "slurmctld died during the test");
    assert!(
        !c.read("log/slurmctld.log").contains("heshare: panic"),
        "a panic was logged"
    );
}

/// A slurm.conf without priority/multifactor: check-config says the site factor does nothing.
#[test]
fn check_config_warns_when_slurm_ignores_the_site_factor() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("slurm.conf");
    std::fs::write(
        &conf,
        "NodeName=a1 Gres=gpu:a100:4 Features=a100\nPriorityType=priority/basic\n",
    )
    .expect("write");
    let o = Command::new(env!("CARGO_BIN_EXE_heshare"))
        .args(["check-config", "--slurm-conf"])
        .arg(&conf)
        .env(
            "HESHARE_CONFIG",
            concat!(env!("CARGO_MANIFEST_DIR"), "/slurm-conf/heshare.toml"),
        )
        .output()
        .expect("runs");
    assert!(o.status.success(), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("PriorityType=priority/basic") && err.contains("changes nothing"),
        "{err}"
    );
    std::fs::write(
        &conf,
        "NodeName=a1 Gres=gpu:a100:4 Features=a100\nPriorityType=priority/multifactor\n",
    )
    .expect("write");
    let o = Command::new(env!("CARGO_BIN_EXE_heshare"))
        .args(["check-config", "--slurm-conf"])
        .arg(&conf)
        .env(
            "HESHARE_CONFIG",
            concat!(env!("CARGO_MANIFEST_DIR"), "/slurm-conf/heshare.toml"),
        )
        .output()
        .expect("runs");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("priority/multifactor adds heshare's site factor"),
        "{out}"
    );
    assert!(!String::from_utf8_lossy(&o.stderr).contains("changes nothing"));
}
