//! Each job's GPU energy in `sacct`: the local cluster with slurmdbd and its own MariaDB, two
//! MPS jobs sharing one t4 (model backend), and `heshare profiles update` writing what the node
//! helper measured into each job's AdminComment in slurmdbd, after heshare's decision text.
//! Needs root, slurm-wlm, slurmdbd, mariadb-server, munge (bash .ci/run).

mod common;

use common::{Cluster, plugin_path};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn update(c: &Cluster, cfg: &Path) -> String {
    let o: Output = Command::new(env!("CARGO_BIN_EXE_heshare"))
        .args(["profiles", "update", "--config"])
        .arg(cfg)
        .env("SLURM_CONF", c.conf())
        .output()
        .expect("heshare runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `sacct -j N -o AdminComment` for the job's allocation.
fn sacct_comment(c: &Cluster, job: &str) -> String {
    c.slurm(
        "sacct",
        &[
            "-X",
            "-n",
            "-P",
            "-j",
            job,
            "-o",
            "JobID,State,AdminComment",
        ],
    )
    .trim_end()
    .splitn(3, '|')
    .nth(2)
    .unwrap_or("")
    .to_owned()
}

/// heshare's `energy_j=` in an AdminComment.
fn energy_of(comment: &str) -> Option<f64> {
    heshare::report::energy_note::parse(comment)?
        .into_iter()
        .find(|(k, _)| k == "energy_j")
        .and_then(|(_, v)| v.parse().ok())
}

#[test]
fn two_jobs_sharing_a_gpu_find_their_energy_in_sacct_once_and_a_missing_slurmdbd_costs_nothing() {
    let plugin = plugin_path();
    let tmp = tempfile::tempdir().expect("tempdir");
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("slurm-conf/heshare.toml"),
    )
    .expect("shipped config");
    let c = Cluster::start(
        "accounting",
        &[
            ("HESHARE_PLUGIN", plugin.to_str().expect("utf-8")),
            ("HESHARE_NODE_HELPER", env!("CARGO_BIN_EXE_heshare")),
            ("HESHARE_SLURMDBD", "1"),
        ],
    );
    // The controller's timer reads the node's accounting log.
    let update_cfg = tmp.path().join("update.toml");
    std::fs::write(
        &update_cfg,
        format!(
            "{shipped}\n[profiles]\nstore = \"{}\"\nlogs = [\"{}\"]\n",
            tmp.path().join("profiles.json").display(),
            c.dir.join("log/accounting.jsonl").display()
        ),
    )
    .expect("write");

    let job = |name: &str| {
        c.sbatch(&[
            "--gres=gpu:t4:1",
            "--gpu-share=40",
            "--gpu-class=vit-infer",
            "-J",
            name,
            "-o",
            "/dev/null",
            "--wrap",
            "sleep 4",
        ])
    };
    let (a, b) = (job("a"), job("b"));
    for j in [&a, &b] {
        c.wait_done(j);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let recs = loop {
        let r = c.records();
        if r.iter().filter(|r| r["kind"] == "job").count() >= 2 {
            break r;
        }
        assert!(Instant::now() < deadline, "records: {r:#?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let rec = |j: &str| {
        recs.iter()
            .find(|r| r["kind"] == "job" && r["job_id"] == j)
            .unwrap_or_else(|| panic!("no record of {j}: {recs:#?}"))
    };
    let (ra, rb) = (rec(&a), rec(&b));
    assert_eq!(ra["gpus"], rb["gpus"], "a and b shared one GPU: {recs:#?}");

    // slurmdbd down: the update costs no note and keeps both for the next one.
    c.script("stop-dbd");
    let said = update(&c, &update_cfg);
    assert!(said.contains("energy notes"), "{said}");
    let store: Value = serde_json::from_slice(
        &std::fs::read(tmp.path().join("profiles.json.energy")).expect("notes"),
    )
    .expect("json");
    for j in [&a, &b] {
        let kept = &store["jobs"][j.as_str()];
        assert!(
            kept["energy_j"].as_f64().is_some_and(|e| e > 0.0) && kept["written_s"].is_null(),
            "{j} waits: {said}\n{store:#}"
        );
    }
    c.script("start-dbd");
    // slurmctld sends the jobs' records it kept once slurmdbd is back.
    let deadline = Instant::now() + Duration::from_secs(60);
    while c
        .run("sacct", &["-X", "-n", "-P", "-j", &b, "-o", "State"])
        .1
        .trim()
        != "COMPLETED"
    {
        assert!(Instant::now() < deadline, "job {b} never reached slurmdbd");
        std::thread::sleep(Duration::from_millis(500));
    }
    // A record of a job slurmdbd never heard of waits too.
    let mut stray = ra.clone();
    stray["job_id"] = "987654".into();
    stray["record_id"] = "ht4:987654:1".into();
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .open(c.dir.join("log/accounting.jsonl"))
        .expect("log");
    std::io::Write::write_all(&mut log, format!("{stray}\n").as_bytes()).expect("append");

    let decided: Vec<String> = [&a, &b].iter().map(|j| sacct_comment(&c, j)).collect();
    for d in &decided {
        assert!(d.starts_with("heshare: "), "heshare's decision first: {d}");
    }
    let said = update(&c, &update_cfg);
    assert!(said.contains("2 written"), "{said}");
    assert!(said.contains("1 waiting"), "{said}");
    let mut noted = 0.0;
    for (j, d) in [&a, &b].iter().zip(&decided) {
        let now = sacct_comment(&c, j);
        assert!(now.starts_with(d.as_str()), "the decision text kept: {now}");
        let e = energy_of(&now).unwrap_or_else(|| panic!("no energy in {now}"));
        let recorded = rec(j)["energy_j"].as_f64().expect("energy");
        assert!((e - recorded).abs() <= 0.1, "{now} vs record {recorded}");
        noted += e;
    }
    // As a script reads it: `sacct --json`'s administrator comment.
    let json: Value =
        serde_json::from_str(&c.slurm("sacct", &["-j", &a, "--json"])).expect("sacct --json");
    let admin = json["jobs"][0]["comment"]["administrator"]
        .as_str()
        .unwrap_or_else(|| panic!("no comment.administrator: {json:#}"));
    assert_eq!(energy_of(admin), energy_of(&sacct_comment(&c, &a)));
    eprintln!(
        "{}",
        c.slurm(
            "sacct",
            &[
                "-X",
                "-P",
                "-j",
                &format!("{a},{b}"),
                "-o",
                "JobID,AdminComment"
            ]
        )
    );
    // The two notes add up to what their GPU's counter gained while they held it: the counter
    // over its whole life less what it drew idle.
    let st = c.node_status("ht4");
    let g = st["gpus"]
        .as_array()
        .expect("gpus")
        .iter()
        .find(|g| g["gpu"] == ra["gpus"][0])
        .expect("their GPU");
    let idle: f64 = recs
        .iter()
        .filter(|r| r["kind"] == "idle" && r["node"] == "ht4" && r["gpus"][0] == g["gpu"])
        .map(|r| r["energy_j"].as_f64().expect("e"))
        .sum();
    let held =
        g["counter_last_j"].as_f64().expect("c") - g["counter_first_j"].as_f64().expect("c") - idle;
    assert!(
        (noted - held).abs() <= 0.01 * held,
        "notes {noted} J vs counter {held} J while held"
    );

    // Again: nothing changes.
    let said = update(&c, &update_cfg);
    assert!(said.contains("0 written"), "{said}");
    let after: Vec<String> = [&a, &b].iter().map(|j| sacct_comment(&c, j)).collect();
    let again = update(&c, &update_cfg);
    assert!(again.contains("0 written"), "{again}");
    assert_eq!(
        after,
        [&a, &b]
            .iter()
            .map(|j| sacct_comment(&c, j))
            .collect::<Vec<_>>()
    );
}
