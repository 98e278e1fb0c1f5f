//! Profiles on the local cluster: the node helper (model backend) records what it measured of
//! each job with the keys the plugin gave it, `heshare profiles update` files the records, and
//! the plugin decides the next run of the same script by its profile. Needs root, slurm-wlm,
//! munge (bash .ci/run).

mod common;

use common::{Cluster, forge_submit, gres, plugin_path};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// `AdminComment=...` of `scontrol show job` (the rest of its line).
fn admin_comment(show: &str) -> &str {
    show.lines()
        .find_map(|l| l.trim().strip_prefix("AdminComment="))
        .unwrap_or("")
}

fn profiles(cfg: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_heshare"))
        .arg("profiles")
        .args(args)
        .arg("--config")
        .arg(cfg)
        .output()
        .expect("heshare runs")
}

/// The value of `name` in a job's Prolog environment (the local cluster's Prolog saves it).
fn prolog_var(c: &Cluster, job: &str, name: &str) -> Option<String> {
    c.read(&format!("log/prolog-{job}.env"))
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")).map(str::to_owned))
}

#[test]
fn an_unlabelled_script_is_placed_by_its_learned_profile_and_a_false_label_is_set_aside() {
    let plugin = plugin_path();
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = tmp.path().join("profiles.json");
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("slurm-conf/heshare.toml"),
    )
    .expect("shipped config");
    // Short test jobs teach (a site keeps the minute default); snapshots (and store reloads)
    // every second.
    let profile_table = format!("[profiles]\nstore = \"{}\"\n", store.display());
    let plugin_cfg = tmp.path().join("heshare.toml");
    std::fs::write(
        &plugin_cfg,
        format!(
            "{shipped}\n[live]\nsnapshot_period_s = 1\nsnapshot_max_age_s = 30\n{profile_table}"
        ),
    )
    .expect("write");
    let c = Cluster::start(
        "profiles",
        &[
            ("HESHARE_PLUGIN", plugin.to_str().expect("utf-8")),
            ("HESHARE_NODE_HELPER", env!("CARGO_BIN_EXE_heshare")),
            ("HESHARE_CONFIG", plugin_cfg.to_str().expect("utf-8")),
        ],
    );
    // The controller's timer reads the node's accounting log.
    let update_cfg = tmp.path().join("update.toml");
    std::fs::write(
        &update_cfg,
        format!(
            "{shipped}\n{profile_table}logs = [\"{}\"]\n",
            c.dir.join("log/accounting.jsonl").display()
        ),
    )
    .expect("write");
    c.wait_log("no profile store at", 0);

    // What the t4s draw is a recorded counter, 60 W each whatever the jobs say (the model
    // GPUs exist once a job has held them).
    c.wait_done(&c.sbatch(&["--gres=gpu:t4:4", "-o", "/dev/null", "--wrap", "true"]));
    let model = c.dir.join("node-state/ht4/model-gpus.json");
    let mut m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&model).expect("model GPUs")).expect("json");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    for g in 0..4 {
        let c0 = m[g.to_string()]["counter_mj"].as_f64().expect("counter") + 1.0;
        m[g.to_string()]["counter_trace"] =
            serde_json::json!([[now, c0], [now + 7200.0, c0 + 60.0 * 7200.0 * 1000.0]]);
    }
    std::fs::write(&model, serde_json::to_vec(&m).expect("json")).expect("write model");

    // The same unlabelled batch script, three times; and a script that claims to be a light
    // service on a t4, three times.
    let script_a = c.dir.join("train.sh");
    std::fs::write(&script_a, "#!/bin/sh\n#SBATCH -J train_run1\nsleep 3\n").expect("write");
    let script_b = c.dir.join("serve.sh");
    std::fs::write(&script_b, "#!/bin/sh\nsleep 3 # serve\nsleep 0\n").expect("write");
    let a = |c: &Cluster| {
        c.sbatch(&[
            "--gres=gpu:1",
            "-t",
            "10",
            "-o",
            "/dev/null",
            script_a.to_str().expect("utf-8"),
        ])
    };
    let b = |c: &Cluster| {
        c.sbatch(&[
            "--gres=gpu:t4:1",
            "--gpu-class=vit-infer",
            "-t",
            "10",
            "-o",
            "/dev/null",
            script_b.to_str().expect("utf-8"),
        ])
    };
    let mut key_a = String::new();
    for _ in 0..3 {
        let j = a(&c);
        let s = c.wait_done(&j);
        assert!(
            admin_comment(&s).contains("no profile of this job's runs yet"),
            "{s}"
        );
        let keys = prolog_var(&c, &j, "SPANK_HESHARE_PROFILE_KEYS").expect("its keys");
        key_a = keys.split(',').next().expect("a key").to_owned();
        assert!(key_a.starts_with("script:0:"), "{keys}");
        assert!(keys.contains("name:0:train-run"), "{keys}");
    }
    for _ in 0..3 {
        c.wait_done(&b(&c));
    }
    // A client of Slurm's API names another user's script key in its SPANK environment.
    let forged_key = "script:1000:feedfacefeedface";
    let forged_job = forge_submit(
        &c,
        &gres("gpu:1"),
        &[&format!("HESHARE_PROFILE_KEYS={forged_key}")],
    );
    c.wait_done(&forged_job);
    let keys = prolog_var(&c, &forged_job, "SPANK_HESHARE_PROFILE_KEYS").expect("own keys");
    assert!(!keys.contains(forged_key), "{keys}");

    // Every record carries the job's keys and how it ended.
    let log = c.read("log/accounting.jsonl");
    let jobs: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).expect("record"))
        .filter(|r: &serde_json::Value| r["kind"] == "job")
        .collect();
    assert!(jobs.len() >= 8, "{log}");
    for r in jobs.iter().skip(1) {
        assert!(
            !r["profile_keys"].as_array().expect("keys").is_empty(),
            "{r}"
        );
        assert_eq!(r["exit"], "0:0", "{r}");
    }
    // The six jobs with `-t 10` carry their limit, so that a kill at it would teach.
    let limited = jobs.iter().filter(|r| r["time_limit_s"] == 600.0).count();
    assert!(limited >= 6, "{limited} records with the limit:\n{log}");

    // The timer's update files them, atomically; killed between write and rename, it leaves
    // the store it found.
    let o = profiles(&update_cfg, &["update"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let said = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(said.contains("runs taught"), "{said}");
    let before = std::fs::read(&store).expect("store");
    let killed = Command::new(env!("CARGO_BIN_EXE_heshare"))
        .args(["profiles", "update", "--config"])
        .arg(&update_cfg)
        .env("HESHARE_TEST_KILL_AT", "profiles:written")
        .output()
        .expect("runs");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(killed.status.signal(), Some(9), "{killed:?}");
    assert_eq!(std::fs::read(&store).expect("store"), before);
    let o = profiles(&update_cfg, &["show", &key_a]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let shown = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(shown.contains(&format!("{key_a}: 3 runs")), "{shown}");
    assert!(shown.contains("decides as: training job"), "{shown}");
    // The forged key learned nothing.
    assert_eq!(
        profiles(&update_cfg, &["show", forged_key]).status.code(),
        Some(1)
    );

    // The plugin reloads the store and places the fourth run by its profile.
    let loaded = c.wait_log(" profiles (updated ", 0);
    assert!(loaded.contains(&store.display().to_string()), "{loaded}");
    let j = a(&c);
    let s = c.wait_done(&j);
    let comment = admin_comment(&s);
    assert!(
        comment.contains(&format!("profile={key_a} level=script runs=3")),
        "{s}"
    );
    assert!(comment.contains("class=training"), "{s}");
    let learned = prolog_var(&c, &j, "SPANK_HESHARE_PROFILE").expect("the learned class");
    assert!(learned.starts_with("v1;k=training;"), "{learned}");
    // The light service claim is set aside: its runs drew 60 W of a t4's 70.
    let s = c.wait_done(&b(&c));
    let comment = admin_comment(&s);
    assert!(comment.contains("label=vit-infer overruled"), "{s}");
    assert!(
        comment.contains("reason=label vit-infer set aside: its runs drew"),
        "{s}"
    );

    // A corrupt store is logged and the plugin decides as without profiles.
    let mark = c.read("log/slurmctld.log").len();
    std::fs::write(&store, "{\"format\":\"heshare-profiles\",\"ver").expect("corrupt");
    c.wait_log("not a heshare profile store", mark);
    // Logged as the thread drops the store; published a moment later.
    std::thread::sleep(Duration::from_millis(500));
    let s = c.wait_done(&a(&c));
    assert!(
        admin_comment(&s).contains("no profile of this job's runs yet"),
        "{s}"
    );
}
