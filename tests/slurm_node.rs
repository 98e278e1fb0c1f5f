//! The node helper as a real slurmd runs it: Prolog, Epilog and TaskProlog of the local cluster
//! (scripts/local-slurm.sh with HESHARE_NODE_HELPER), with the plugin placing the jobs and the
//! model GPU backend standing in for the fake GPUs' missing driver. Needs root, slurm-wlm, munge.

mod common;

use common::{Cluster, plugin_path};
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn two_mps_jobs_share_a_gpu_and_one_runs_exclusive_and_every_joule_is_accounted() {
    let plugin = plugin_path();
    assert!(
        plugin.exists(),
        "{} was not built: run `cargo build --release` first (bash .ci/run does)",
        plugin.display()
    );
    // A site weighing energy at 0.5 (the shipped 0.1 keeps whole GPUs at their default clock),
    // so that a lowered clock is set and reset through the real Prolog and Epilog.
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
            "time_value_kwh_per_gpu_hour = 0.3",
            1,
        ),
    )
    .expect("write config");
    let c = Cluster::start(
        "node",
        &[
            ("HESHARE_PLUGIN", plugin.to_str().expect("utf-8")),
            ("HESHARE_NODE_HELPER", env!("CARGO_BIN_EXE_heshare")),
            ("HESHARE_CONFIG", cfg.to_str().expect("utf-8")),
        ],
    );
    let script = "env | grep -E '^CUDA_MPS' | sort; sleep 4";
    let a = c.sbatch(&[
        "--gres=gpu:t4:1",
        "--gpu-share=40",
        "--gpu-class=vit-infer",
        "-o",
        "a-%j.out",
        "--wrap",
        script,
    ]);
    let b = c.sbatch(&[
        "--gres=gpu:t4:1",
        "--gpu-share=40",
        "--gpu-class=whisper-infer",
        "-o",
        "b-%j.out",
        "--wrap",
        script,
    ]);
    let x = c.sbatch(&[
        "--gres=gpu:a100:1",
        "--gpu-share=exclusive",
        "--gpu-class=bert-train",
        "-o",
        "x-%j.out",
        "--wrap",
        script,
    ]);

    // While they run: a and b on one t4, at a clock the optimizer chose for the pair.
    let deadline = Instant::now() + Duration::from_secs(30);
    let shared = loop {
        let st = c.node_status("ht4");
        let both = st["gpus"].as_array().and_then(|gs| {
            gs.iter()
                .find(|g| {
                    let mut on: Vec<&str> = g["jobs"]
                        .as_array()
                        .map(|js| js.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default();
                    on.sort_unstable();
                    let mut want = [a.as_str(), b.as_str()];
                    want.sort_unstable();
                    on == want
                })
                .cloned()
        });
        if let Some(g) = both {
            break g;
        }
        assert!(
            Instant::now() < deadline,
            "a and b never shared a GPU: {st:#}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(shared["gpu_type"], "t4");
    let st = c.node_status("ha100");
    assert_eq!(
        st["gpus"][0]["jobs"],
        serde_json::json!([x.as_str()]),
        "{st:#}"
    );
    assert!(
        st["gpus"][0]["backend_locked_mhz"].as_u64().is_some(),
        "bert-train runs at a lowered clock: {st:#}"
    );

    for j in [&a, &b, &x] {
        c.wait_done(j);
    }
    // The tasks got the MPS daemon's directories from TaskProlog.
    let out_a = c.read(&format!("a-{a}.out"));
    assert!(
        out_a.contains("CUDA_MPS_PIPE_DIRECTORY=") && out_a.contains("/mps/ht4/gpu"),
        "{out_a}"
    );
    assert!(
        out_a.contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40"),
        "{out_a}"
    );
    assert!(!c.read(&format!("x-{x}.out")).contains("CUDA_MPS_PIPE"));

    // Three records (the Epilog may still be finishing when the job shows COMPLETED).
    let deadline = Instant::now() + Duration::from_secs(20);
    let recs = loop {
        let r = c.records();
        if r.iter().filter(|r| r["kind"] == "job").count() >= 3 {
            break r;
        }
        assert!(Instant::now() < deadline, "records: {r:#?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let jobs: Vec<&Value> = recs.iter().filter(|r| r["kind"] == "job").collect();
    assert_eq!(jobs.len(), 3, "{recs:#?}");
    for (id, node, share) in [
        (&a, "ht4", Some(40)),
        (&b, "ht4", Some(40)),
        (&x, "ha100", None),
    ] {
        let r = jobs
            .iter()
            .find(|r| r["job_id"] == id.as_str())
            .unwrap_or_else(|| panic!("no record of {id}: {recs:#?}"));
        assert_eq!(r["node"], node);
        assert_eq!(r["backend"], "model");
        assert_eq!(r["share_pct"].as_u64(), share);
        assert_eq!(r["user"], "root");
        assert!(r["energy_j"].as_f64().expect("energy") > 0.0, "{r:#}");
        assert!(r["complete"].as_bool().expect("flag"), "{r:#}");
    }
    // Per node and GPU: jobs + idle records = the modelled counter; clocks back to default.
    for node in ["ht4", "ha100"] {
        let st = c.node_status(node);
        assert_eq!(st["pending_records"], 0);
        for g in st["gpus"].as_array().expect("gpus") {
            assert_eq!(g["jobs"], serde_json::json!([]), "{g:#}");
            assert!(
                g["locked_mhz"].is_null() && g["backend_locked_mhz"].is_null(),
                "{g:#}"
            );
            let counter = g["counter_last_j"].as_f64().expect("c")
                - g["counter_first_j"].as_f64().expect("c");
            let recorded: f64 = recs
                .iter()
                .filter(|r| r["node"] == node && r["gpus"][0] == g["gpu"])
                .map(|r| r["energy_j"].as_f64().expect("e"))
                .sum();
            assert!(
                (recorded - counter).abs() <= 0.01 * counter,
                "{node} GPU {}: records {recorded} J vs counter {counter} J",
                g["gpu"]
            );
        }
    }

    // The report over the cluster's log.
    let svg = c.dir.join("energy.svg");
    let log = c.dir.join("log/accounting.jsonl");
    let o = Command::new(env!("CARGO_BIN_EXE_heshare"))
        .arg("report")
        .arg(&log)
        .arg("--plot")
        .arg(&svg)
        .output()
        .expect("runs");
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        table.contains("root") && table.contains("t4") && table.contains("a100"),
        "{table}"
    );
    assert!(
        std::fs::read_to_string(&svg)
            .expect("svg")
            .contains("Energy per GPU type")
    );
    // slurmd did not drain a node over a failed Prolog or Epilog.
    let sinfo = c.slurm("sinfo", &["-h", "-N", "-o", "%N %t"]);
    assert!(!sinfo.contains("drain"), "{sinfo}");
}

/// Two users' MPS shares that Slurm puts on one t4 (root's and nobody's, each printing the
/// CUDA_MPS_* variables its task sees): the cluster, both jobs' records, and the job ids.
fn two_users_on_one_gpu(
    tag: &str,
    extra: &[(&str, &str)],
) -> (Cluster, Vec<Value>, String, String) {
    use std::os::unix::process::CommandExt;
    let plugin = plugin_path();
    assert!(plugin.exists(), "{} was not built", plugin.display());
    let stand_in = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/stand-in-mps-control"
    );
    let mut env = vec![
        ("HESHARE_PLUGIN", plugin.to_str().expect("utf-8")),
        ("HESHARE_NODE_HELPER", env!("CARGO_BIN_EXE_heshare")),
        ("HESHARE_MPS_CONTROL", stand_in),
    ];
    env.extend_from_slice(extra);
    let c = Cluster::start(tag, &env);
    // Somewhere the other user may write its output.
    let out = c.dir.join("out");
    std::fs::create_dir_all(&out).expect("mkdir");
    std::fs::set_permissions(&out, std::os::unix::fs::PermissionsExt::from_mode(0o1777))
        .expect("chmod");
    let submit = |who: &str, uid: Option<u32>, secs: u32| {
        let mut cmd = Command::new("sbatch");
        cmd.args(["-o", &format!("{}/{who}-%j.out", out.display())])
            .args([
                "--parsable",
                "--gres=gpu:t4:1",
                "--gpu-share=40",
                "--gpu-class=vit-infer",
                "--wrap",
                &format!("env | grep ^CUDA_MPS_ | sort; sleep {secs}"),
            ])
            .env("SLURM_CONF", c.conf())
            .current_dir(&out);
        if let Some(u) = uid {
            cmd.uid(u).gid(u);
        }
        let o = cmd.output().expect("sbatch runs");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).trim().to_owned()
    };
    // root's job holds the GPU's MPS server (its script runs, so its Prolog is done) before
    // nobody's is submitted, and nobody's outlives it: which job holds and which ends first is
    // then not a race between two Prologs and two Epilogs.
    let root_job = submit("root", None, 4);
    let root_out = out.join(format!("root-{root_job}.out"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::metadata(&root_out).map_or(true, |m| m.len() == 0) {
        assert!(Instant::now() < deadline, "root's job {root_job} never ran");
        std::thread::sleep(Duration::from_millis(100));
    }
    let nobody_job = submit("nobody", Some(65534), 6);
    for j in [&root_job, &nobody_job] {
        c.wait_done(j);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let recs = loop {
        let r: Vec<Value> = c
            .records()
            .into_iter()
            .filter(|r| r["job_id"] == root_job.as_str() || r["job_id"] == nobody_job.as_str())
            .collect();
        if r.len() >= 2 {
            break r;
        }
        assert!(Instant::now() < deadline, "records: {r:#?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        recs[0]["gpus"], recs[1]["gpus"],
        "Slurm did not put the two users on one GPU, so this test shows nothing: {recs:#?}"
    );
    (c, recs, root_job, nobody_job)
}

/// The output file of the job a record is for.
fn output_of(c: &Cluster, rec: &Value, root_job: &str) -> String {
    let id = rec["job_id"].as_str().expect("id");
    let who = if id == root_job { "root" } else { "nobody" };
    c.read(&format!("out/{who}-{id}.out"))
}

/// The `start_server` commands the stand-in daemon of a record's GPU received, in order, and
/// everything it received (for messages).
fn servers_started(c: &Cluster, rec: &Value) -> (Vec<String>, String) {
    let gpu = rec["gpus"][0].as_u64().expect("gpu");
    let all = std::fs::read_to_string(c.dir.join(format!("run/mps/ht4/gpu{gpu}/commands")))
        .expect("commands");
    let started = all
        .lines()
        .filter(|l| l.starts_with("start_server"))
        .map(str::to_owned)
        .collect();
    (started, all)
}

/// MPS serves one user per GPU, and Slurm does not keep users apart: when a share lands on a
/// GPU whose MPS server another user's job holds, the node helper by default runs it at once
/// outside MPS (its clients pointed at a directory with no daemon, its thread percentage
/// unset), time-sliced with that server, rather than failing its Prolog (which would drain the
/// node) or letting it wait for the other user's jobs: the job is told so in its output, the
/// node's helper.log says whose server it runs beside, no second server is started, and its
/// record says it ran outside MPS.
#[test]
fn a_second_users_mps_job_on_a_held_gpu_runs_outside_mps_at_once_and_is_told() {
    let (c, recs, root_job, _) = two_users_on_one_gpu("node-users", &[]);
    let (outside, held): (Vec<&Value>, Vec<&Value>) = recs
        .iter()
        .partition(|r| r["outside_mps"].as_bool().expect("outside_mps"));
    assert_eq!((outside.len(), held.len()), (1, 1), "{recs:#?}");
    let (o, h) = (outside[0], held[0]);
    for r in [o, h] {
        assert_eq!(r["mps_wait_s"].as_f64().expect("wait"), 0.0, "{r:#}");
    }
    // They ran side by side: the second started before the first ended.
    let (o_start, h_start) = (
        o["start"].as_f64().expect("t"),
        h["start"].as_f64().expect("t"),
    );
    assert!(
        o_start >= h_start && o_start < h["end"].as_f64().expect("t"),
        "{o:#}\n{h:#}"
    );
    let told = output_of(&c, o, &root_job);
    assert!(
        told.contains("heshare: GPU ")
            && told.contains("runs outside MPS, time-sliced with theirs")
            && told.contains("CUDA_MPS_PIPE_DIRECTORY=")
            && told.contains("/no-mps")
            && !told.contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
        "the job outside MPS was not told, or its environment is not that of a job outside MPS: {told:?}"
    );
    let holder = output_of(&c, h, &root_job);
    assert!(
        holder.contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=")
            && !holder.contains("/no-mps")
            && !holder.contains("heshare: GPU"),
        "{holder:?}"
    );
    let log = std::fs::read_to_string(c.dir.join("node-state/ht4/helper.log")).expect("log");
    assert!(
        log.contains(&format!(
            "job {} (uid {}) landed on the MPS server of uid {}",
            o["job_id"].as_str().expect("id"),
            o["uid"],
            h["uid"]
        )) && log.contains("it runs outside MPS"),
        "{log}"
    );
    let (started, commands) = servers_started(&c, o);
    assert_eq!(
        started,
        [format!("start_server -uid {}", h["uid"])],
        "{commands}"
    );
    let sinfo = c.slurm("sinfo", &["-h", "-N", "-o", "%N %t"]);
    assert!(!sinfo.contains("drain"), "{sinfo}");
}

/// With `[node] other_user_share = "wait"` the second user's share waits instead (MPS's own
/// rule): it is told, the node's helper.log says who waits for whom, the waiting user's server
/// starts when the holder's last job ends, and the record carries the wait.
#[test]
fn a_second_users_mps_job_on_a_held_gpu_waits_when_the_site_says_so() {
    let (c, recs, root_job, _) =
        two_users_on_one_gpu("node-users-wait", &[("HESHARE_OTHER_USER_SHARE", "wait")]);
    // Whichever Prolog took the node first holds the GPU; the other job waited for it.
    let (waited, held): (Vec<&Value>, Vec<&Value>) = recs
        .iter()
        .partition(|r| r["mps_wait_s"].as_f64().expect("wait") > 0.0);
    assert_eq!((waited.len(), held.len()), (1, 1), "{recs:#?}");
    let (w, h) = (waited[0], held[0]);
    assert!(recs.iter().all(|r| r["outside_mps"] == false), "{recs:#?}");
    let h_dur = h["end"].as_f64().expect("t") - h["start"].as_f64().expect("t");
    assert!(
        w["mps_wait_s"].as_f64().expect("wait") <= h_dur + 0.5,
        "{w:#}\n{h:#}"
    );
    let told = output_of(&c, w, &root_job);
    assert!(
        told.contains("heshare: GPU ")
            && told.contains("is in MPS use by another user's jobs")
            && told.contains("waits until theirs ends"),
        "the waiting job was not told: {told:?}"
    );
    let log = std::fs::read_to_string(c.dir.join("node-state/ht4/helper.log")).expect("log");
    assert!(
        log.contains(&format!(
            "job {} (uid {})",
            w["job_id"].as_str().expect("id"),
            w["uid"]
        )) && log.contains("landed on the MPS server of uid"),
        "{log}"
    );
    // The holder's server first, the waiting user's only after the holder's job ended.
    let (started, commands) = servers_started(&c, w);
    assert_eq!(
        started,
        [
            format!("start_server -uid {}", h["uid"]),
            format!("start_server -uid {}", w["uid"])
        ],
        "{commands}"
    );
    let sinfo = c.slurm("sinfo", &["-h", "-N", "-o", "%N %t"]);
    assert!(!sinfo.contains("drain"), "{sinfo}");
}
