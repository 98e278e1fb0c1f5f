//! The node helper as a real slurmd runs it: Prolog, Epilog and TaskProlog of the local cluster
//! (scripts/local-slurm.sh with HESHARE_NODE_HELPER), with the plugin placing the jobs and the
//! model GPU backend standing in for the fake GPUs' missing driver. Needs root, slurm-wlm, munge.

mod common;

use common::{Cluster, plugin_path};
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

fn helper(c: &Cluster, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_heshare"))
        .args(args)
        .env("HESHARE_CONFIG", c.dir.join("etc/heshare-node.toml"))
        .output()
        .expect("heshare runs")
}

fn status(c: &Cluster, node: &str) -> Value {
    let o = helper(c, &["node", "status", "--node", node, "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("status JSON")
}

fn records(c: &Cluster) -> Vec<Value> {
    std::fs::read_to_string(c.dir.join("log/accounting.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON record per line"))
        .collect()
}

#[test]
fn two_mps_jobs_share_a_gpu_and_one_runs_exclusive_and_every_joule_is_accounted() {
    let plugin = plugin_path();
    assert!(
        plugin.exists(),
        "{} was not built: run `cargo build --release` first (bash .ci/run does)",
        plugin.display()
    );
    let c = Cluster::start(
        "node",
        &[
            ("HESHARE_PLUGIN", plugin.to_str().expect("utf-8")),
            ("HESHARE_NODE_HELPER", env!("CARGO_BIN_EXE_heshare")),
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
        let st = status(&c, "ht4");
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
    let st = status(&c, "ha100");
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
        let r = records(&c);
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
        let st = status(&c, node);
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
