//! The node helper driven as slurmd drives it: `heshare prolog|epilog|task-prolog` processes with
//! a job's environment, on the model GPU backend in a temporary state directory. The live-Slurm
//! version is in tests/slurm_node.rs.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Node {
    dir: tempfile::TempDir,
    config: PathBuf,
}

#[derive(Clone)]
struct Job {
    id: String,
    gpu: u32,
    /// MPS share, or None for a whole GPU.
    share: Option<u8>,
    class: &'static str,
    user: &'static str,
    uid: u32,
}

fn job(id: &str, gpu: u32, share: Option<u8>, class: &'static str) -> Job {
    Job {
        id: id.to_owned(),
        gpu,
        share,
        class,
        user: "alice",
        uid: 1000,
    }
}

impl Node {
    fn new(mps_control: Option<&Path>) -> Node {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("slurm-conf/heshare.toml"),
        )
        .expect("shipped config");
        let d = dir.path().display();
        let mps = mps_control.map_or_else(
            || format!("{d}/no-such-mps-control"),
            |p| p.display().to_string(),
        );
        let config = dir.path().join("heshare.toml");
        std::fs::write(
            &config,
            format!(
                "{base}\n[node]\nbackend = \"model\"\nstate_dir = \"{d}/state\"\naccounting_log = \"{d}/log/accounting.jsonl\"\nmps_control = \"{mps}\"\nmps_pipe_dir = \"{d}/mps\"\nmps_log_dir = \"{d}/mpslog\"\ncommand_timeout_s = 3\n"
            ),
        )
        .expect("write config");
        Node { dir, config }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_heshare"));
        c.args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HESHARE_CONFIG", &self.config);
        c
    }

    fn hook_cmd(&self, hook: &str, j: &Job) -> Command {
        let mut c = self.cmd(&[hook]);
        c.env("SLURM_JOB_ID", &j.id)
            .env("SLURM_JOB_USER", j.user)
            .env("SLURM_JOB_UID", j.uid.to_string())
            .env("SLURM_JOB_ACCOUNT", "physics")
            .env("SLURMD_NODENAME", "n1")
            .env("SLURM_JOB_GPUS", j.gpu.to_string())
            .env("SPANK_HESHARE_CLASS", j.class)
            .env("SPANK_HESHARE_GPU_TYPE", "a100");
        if let Some(p) = j.share {
            c.env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", p.to_string());
        }
        c
    }

    fn hook(&self, hook: &str, j: &Job) -> Output {
        self.hook_cmd(hook, j).output().expect("heshare runs")
    }

    fn ok(&self, hook: &str, j: &Job) {
        let o = self.hook(hook, j);
        assert!(
            o.status.success(),
            "{hook} {}: {}",
            j.id,
            String::from_utf8_lossy(&o.stderr)
        );
    }

    fn status(&self) -> Value {
        let o = self
            .cmd(&["node", "status", "--node", "n1", "--json"])
            .output()
            .expect("runs");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).expect("status JSON")
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("log/accounting.jsonl")
    }

    fn records(&self) -> Vec<Value> {
        std::fs::read_to_string(self.log())
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a whole JSON record per line"))
            .collect()
    }

    /// After every job has left: no job on any GPU, no clock locked (in the state or on the
    /// model GPU), nothing pending, each listed job recorded exactly once, and the records of
    /// each GPU (jobs and idle) adding up to its counter within 1%.
    fn assert_settled(&self, jobs: &[&Job]) {
        let st = self.status();
        assert_eq!(st["pending_records"], 0, "{st:#}");
        let recs = self.records();
        for j in jobs {
            let n = recs
                .iter()
                .filter(|r| r["kind"] == "job" && r["job_id"] == j.id.as_str())
                .count();
            assert_eq!(n, 1, "job {} has {n} records:\n{recs:#?}", j.id);
        }
        for g in st["gpus"].as_array().expect("gpus") {
            assert_eq!(g["jobs"].as_array().map(Vec::len), Some(0), "{g:#}");
            assert!(g["locked_mhz"].is_null(), "state clock still locked: {g:#}");
            assert!(
                g["backend_locked_mhz"].is_null(),
                "GPU clock still locked: {g:#}"
            );
            let gpu = g["gpu"].as_u64().expect("index");
            let counter = g["counter_last_j"].as_f64().expect("read")
                - g["counter_first_j"].as_f64().expect("read");
            let recorded: f64 = recs
                .iter()
                .filter(|r| r["gpus"][0].as_u64() == Some(gpu))
                .map(|r| r["energy_j"].as_f64().expect("energy"))
                .sum();
            assert!(counter > 0.0, "{g:#}");
            assert!(
                (recorded - counter).abs() <= 0.01 * counter,
                "GPU {gpu}: records {recorded} J vs counter {counter} J"
            );
        }
    }
}

fn pause() {
    std::thread::sleep(std::time::Duration::from_millis(150));
}

#[test]
fn shared_and_exclusive_jobs_are_accounted_and_clocks_return_to_default() {
    let n = Node::new(None);
    let a = job("101", 0, Some(40), "vit-infer");
    let b = job("102", 0, Some(40), "whisper-infer");
    let c = job("103", 1, None, "bert-train");
    n.ok("prolog", &a);
    pause();
    n.ok("prolog", &b);
    n.ok("prolog", &c);
    let st = n.status();
    assert_eq!(st["backend"], "model");
    let g0 = &st["gpus"][0];
    assert_eq!(g0["jobs"], serde_json::json!(["101", "102"]));
    // A whole a100 for bert-train: the optimizer lowers the clock within its 1.25x bound.
    assert!(
        st["gpus"][1]["backend_locked_mhz"]
            .as_u64()
            .expect("locked")
            < 1410
    );
    pause();
    n.ok("epilog", &a);
    pause();
    n.ok("epilog", &b);
    n.ok("epilog", &c);
    n.assert_settled(&[&a, &b, &c]);

    let recs = n.records();
    let rec = |id: &str| {
        recs.iter()
            .find(|r| r["job_id"] == id)
            .unwrap_or_else(|| panic!("record of {id}"))
    };
    let ra = rec("101");
    assert_eq!(ra["backend"], "model");
    assert_eq!(ra["user"], "alice");
    assert_eq!(ra["account"], "physics");
    assert_eq!(ra["share_pct"], 40);
    assert_eq!(ra["gpu_type"], "a100");
    assert_eq!(ra["node"], "n1");
    assert!(ra["energy_j"].as_f64().expect("energy") > 0.0);
    // Job 101 saw the clock change when 102 joined.
    assert!(
        ra["clocks"].as_array().expect("clocks").len() >= 2,
        "{ra:#}"
    );
    assert!(rec("103")["share_pct"].is_null());
    assert!(recs.iter().any(|r| r["kind"] == "idle"));

    // The report: per-user and per-type tables that add up, an SVG, a Prometheus textfile.
    let svg = n.dir.path().join("energy.svg");
    let prom = n.dir.path().join("heshare.prom");
    let o = n
        .cmd(&["report", "--by", "user,gpu-type,job"])
        .arg(n.log())
        .arg("--plot")
        .arg(&svg)
        .arg("--prometheus")
        .arg(&prom)
        .output()
        .expect("runs");
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        table.contains("user ") && table.contains("gpu_type "),
        "{table}"
    );
    assert!(
        table.contains("alice") && table.contains("103@n1"),
        "{table}"
    );
    assert!(table.contains("MODEL backend"), "{table}");
    let total: f64 = recs
        .iter()
        .map(|r| r["energy_j"].as_f64().expect("e"))
        .sum();
    let o = n
        .cmd(&["report", "--by", "gpu-type", "--format", "json"])
        .arg(n.log())
        .output()
        .expect("runs");
    let j: Value = serde_json::from_slice(&o.stdout).expect("json");
    let reported = j[0]["total_j"].as_f64().expect("total");
    assert!(
        (reported - total).abs() < 1e-6 * total,
        "{reported} vs {total}"
    );
    let svg = std::fs::read_to_string(svg).expect("svg written");
    assert!(svg.starts_with("<svg") && svg.contains("alice") && svg.contains("a100"));
    let prom = std::fs::read_to_string(prom).expect("textfile written");
    assert!(
        prom.contains("heshare_gpu_energy_joules_total{user=\"alice\",gpu_type=\"a100\"}"),
        "{prom}"
    );
}

#[test]
fn a_kill_at_any_step_is_repaired_by_the_next_run() {
    assert_eq!(
        heshare::node::STEPS.len(),
        8,
        "a step was added: cover it here"
    );
    for &step in heshare::node::STEPS {
        let n = Node::new(None);
        let a = job("1", 0, Some(40), "vit-infer");
        let b = job("2", 0, Some(40), "whisper-infer");
        let c = job("3", 1, None, "bert-train");
        n.ok("prolog", &a);
        n.ok("prolog", &c);
        pause();
        // The Prolog of b, then the Epilog of a, are killed at `step` (whichever reaches it).
        let killed = |o: &Output| o.status.code().is_none();
        let o = n
            .hook_cmd("prolog", &b)
            .env("HESHARE_TEST_KILL_AT", step)
            .output()
            .expect("runs");
        if killed(&o) {
            // Slurm runs the Prolog again when it requeues the job.
            n.ok("prolog", &b);
        } else {
            assert!(
                o.status.success(),
                "{step}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        pause();
        let o = n
            .hook_cmd("epilog", &a)
            .env("HESHARE_TEST_KILL_AT", step)
            .output()
            .expect("runs");
        if killed(&o) {
            // Slurm drains the node; the admin ends the job with `heshare node repair`.
            let r = n
                .cmd(&["node", "repair", "--node", "n1", "--end-job", "1"])
                .output()
                .expect("runs");
            assert!(
                r.status.success(),
                "{step}: {}",
                String::from_utf8_lossy(&r.stderr)
            );
        } else {
            assert!(
                o.status.success(),
                "{step}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        n.ok("epilog", &b);
        n.ok("epilog", &c);
        n.assert_settled(&[&a, &b, &c]);
    }
}

#[test]
fn thirty_two_concurrent_prologs_and_epilogs_keep_the_state_consistent() {
    let n = Node::new(None);
    // Four GPUs, eight 10% MPS jobs on each.
    let jobs: Vec<Job> = (0..32)
        .map(|i| {
            let mut j = job(&format!("{}", 500 + i), i % 4, Some(10), "vit-infer");
            j.user = "bob";
            j
        })
        .collect();
    let run_all = |hook: &str| {
        let children: Vec<_> = jobs
            .iter()
            .map(|j| n.hook_cmd(hook, j).spawn().expect("spawn"))
            .collect();
        for (j, c) in jobs.iter().zip(children) {
            let o = c.wait_with_output().expect("wait");
            assert!(o.status.success(), "{hook} {}: {:?}", j.id, o.status);
        }
    };
    run_all("prolog");
    let st = n.status();
    let on: usize = st["gpus"]
        .as_array()
        .expect("gpus")
        .iter()
        .map(|g| g["jobs"].as_array().expect("jobs").len())
        .sum();
    assert_eq!(on, 32, "every Prolog joined: {st:#}");
    pause();
    run_all("epilog");
    let refs: Vec<&Job> = jobs.iter().collect();
    n.assert_settled(&refs);
}

#[test]
fn the_mps_daemon_starts_with_the_first_sharing_job_and_quits_after_the_last() {
    let stand_in =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/stand-in-mps-control");
    let n = Node::new(Some(&stand_in));
    let pipe = n.dir.path().join("mps/n1/gpu2");
    let commands = || std::fs::read_to_string(pipe.join("commands")).unwrap_or_default();
    let a = job("11", 2, Some(50), "vit-infer");
    let mut b = job("12", 2, Some(30), "vit-infer");
    b.uid = 1001;
    let c = job("13", 3, None, "bert-train");
    n.ok("prolog", &a);
    assert!(pipe.join("control").exists(), "daemon up");
    assert!(commands().contains("daemon CUDA_VISIBLE_DEVICES=2 CUDA_DEVICE_ORDER=PCI_BUS_ID"));
    assert!(
        commands().contains("start_server -uid 1000"),
        "{}",
        commands()
    );
    n.ok("prolog", &b);
    assert!(
        commands().contains("start_server -uid 1001"),
        "{}",
        commands()
    );
    assert_eq!(
        commands().matches("daemon ").count(),
        1,
        "one daemon per GPU"
    );
    n.ok("prolog", &c);
    assert!(
        !n.dir.path().join("mps/n1/gpu3").exists(),
        "no MPS for a whole GPU"
    );

    // The tasks learn where the daemon is; slurmd gives TaskProlog no GPU list.
    let o = n
        .cmd(&["task-prolog"])
        .env("SLURM_JOB_ID", "12")
        .env("SLURMD_NODENAME", "n1")
        .env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "30")
        .output()
        .expect("runs");
    let exports = String::from_utf8_lossy(&o.stdout);
    assert!(
        exports.contains(&format!(
            "export CUDA_MPS_PIPE_DIRECTORY={}\n",
            pipe.display()
        )) && exports.contains("export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30\n"),
        "{exports}"
    );
    let o = n
        .cmd(&["task-prolog"])
        .env("SLURM_JOB_ID", "13")
        .env("SLURMD_NODENAME", "n1")
        .output()
        .expect("runs");
    assert!(
        o.status.success() && o.stdout.is_empty(),
        "nothing for a whole GPU"
    );

    n.ok("epilog", &a);
    assert!(pipe.join("control").exists(), "12 still shares GPU 2");
    n.ok("epilog", &b);
    assert!(
        !pipe.join("control").exists(),
        "the last sharing job took the daemon"
    );
    assert!(commands().ends_with("quit\n"), "{}", commands());
    n.ok("epilog", &c);
    n.assert_settled(&[&a, &b, &c]);
}

#[test]
fn mps_that_will_not_start_or_quit_fails_the_hook_and_loses_nothing() {
    let stand_in =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/stand-in-mps-control");
    let n = Node::new(Some(&stand_in));
    let a = job("21", 0, Some(50), "vit-infer");
    let o = n
        .hook_cmd("prolog", &a)
        .env("STAND_IN_MPS_FAIL_START", "1")
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success(),
        "a Prolog without its MPS daemon must fail"
    );
    assert!(
        err.contains("prolog of job 21") && err.contains("MPS"),
        "{err}"
    );
    let st = n.status();
    assert_eq!(
        st["gpus"][0]["jobs"],
        serde_json::json!([]),
        "job taken off again"
    );
    assert!(st["gpus"][0]["backend_locked_mhz"].is_null());

    // A daemon that ignores quit: the Epilog records the job, then fails so Slurm drains.
    n.ok("prolog", &a);
    let o = n
        .hook_cmd("epilog", &a)
        .env("STAND_IN_MPS_STUCK", "1")
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("did not quit"), "{err}");
    assert_eq!(
        n.records().iter().filter(|r| r["job_id"] == "21").count(),
        1
    );
    let helper_log =
        std::fs::read_to_string(n.dir.path().join("state/n1/helper.log")).expect("log");
    assert!(helper_log.contains("FAILED"), "{helper_log}");
    // The next run (here an admin's repair) stops it.
    let r = n
        .cmd(&["node", "repair", "--node", "n1"])
        .output()
        .expect("runs");
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(!n.dir.path().join("mps/n1/gpu0/control").exists());
    n.assert_settled(&[&a]);
}

#[test]
fn a_bad_job_environment_is_named_and_a_job_without_gpus_is_left_alone() {
    let n = Node::new(None);
    let a = job("31", 0, None, "bert-train");
    let o = n
        .hook_cmd("prolog", &a)
        .env("SLURM_JOB_UID", "alice")
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("SLURM_JOB_UID: \"alice\" is not a numeric uid"),
        "{err}"
    );
    let o = n
        .hook_cmd("prolog", &a)
        .env("SLURM_JOB_GPUS", "0,x")
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("SLURM_JOB_GPUS: \"x\" in \"0,x\" is not a GPU index"),
        "{err}"
    );
    let o = n
        .hook_cmd("prolog", &a)
        .env_remove("SLURM_JOB_GPUS")
        .output()
        .expect("runs");
    assert!(o.status.success());
    assert!(
        !n.dir.path().join("state").exists(),
        "a CPU job leaves no trace"
    );
}

#[test]
fn a_counter_reset_between_prolog_and_epilog_is_flagged_on_the_record() {
    let n = Node::new(None);
    let a = job("41", 0, None, "bert-train");
    let model = n.dir.path().join("state/n1/model-gpus.json");
    let set_counter = |mj: f64| {
        let mut m: Value =
            serde_json::from_str(&std::fs::read_to_string(&model).expect("model")).expect("json");
        m["0"]["counter_mj"] = serde_json::json!(mj);
        std::fs::write(&model, serde_json::to_string(&m).expect("json")).expect("write");
    };
    // A GPU that has counted for a while (an earlier job made the model GPU).
    let z = job("40", 0, None, "bert-train");
    n.ok("prolog", &z);
    n.ok("epilog", &z);
    set_counter(5e9);
    n.ok("prolog", &a);
    pause();
    // A driver reload: the counter starts again from zero.
    set_counter(0.0);
    pause();
    n.ok("epilog", &a);
    let recs = n.records();
    let r = recs.iter().find(|r| r["job_id"] == "41").expect("record");
    assert_eq!(r["counter_reset"], true, "{r:#}");
    // Only the energy since the reset is known: ~150 ms at a whole a100's modelled draw.
    let e = r["energy_j"].as_f64().expect("energy");
    assert!(e > 0.0 && e < 400.0 * 0.5, "{e}");
    let o = n.cmd(&["report"]).arg(n.log()).output().expect("runs");
    assert!(String::from_utf8_lossy(&o.stdout).contains("counter reset"));
}
