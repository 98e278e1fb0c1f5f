//! The `heshare` binary driven as a user would: plan on the shipped config, check-config on good
//! and broken files, and the errors and exit codes of bad input.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_heshare");

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

fn heshare(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("HESHARE_CONFIG")
        .env("HESHARE_SYSTEM_CONFIG", "/nonexistent/heshare.toml")
        .output()
        .expect("the heshare binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn plan_json(args: &[&str]) -> Value {
    let cfg = repo("slurm-conf/heshare.toml");
    let mut all = vec![
        "plan",
        "--config",
        cfg.to_str().expect("utf-8 path"),
        "--format",
        "json",
    ];
    all.extend_from_slice(args);
    let o = heshare(&all);
    assert!(o.status.success(), "plan failed: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("plan --format json prints JSON")
}

fn shipped_config_with(from: &str, to: &str) -> (tempfile::TempDir, PathBuf) {
    let text = std::fs::read_to_string(repo("slurm-conf/heshare.toml")).expect("shipped config");
    assert!(
        text.contains(from),
        "the shipped config no longer contains {from:?}"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("heshare.toml");
    std::fs::write(&path, text.replacen(from, to, 1)).expect("write");
    (dir, path)
}

fn line_of(path: &Path, needle: &str) -> usize {
    let text = std::fs::read_to_string(path).expect("read");
    text.lines()
        .position(|l| l.contains(needle))
        .expect("needle present")
        + 1
}

#[test]
fn training_and_small_inference_get_different_explained_decisions() {
    let train = plan_json(&["--class", "bert-train", "--gpus", "1", "--share", "auto"]);
    let infer = plan_json(&["--class", "vit-infer", "--gpus", "1", "--share", "auto"]);
    let (t, i) = (&train["decision"], &infer["decision"]);
    assert_eq!(t["exclusive"], Value::Bool(true), "{t}");
    assert_eq!(t["share_pct"], 100);
    assert_eq!(i["exclusive"], Value::Bool(false), "{i}");
    assert!(i["share_pct"].as_u64().expect("share") <= 50, "{i}");
    assert_ne!(
        t["gpu_type"], i["gpu_type"],
        "compute-bound training and small inference differ in type"
    );
    for d in [t, i] {
        assert!(d["reason"].as_str().expect("reason").len() > 40, "{d}");
    }
    for plan in [&train, &infer] {
        let cands = plan["candidates"].as_array().expect("candidates");
        assert!(cands.len() >= 7, "every catalog type is a candidate");
        for c in cands {
            for field in [
                "gpu_type",
                "share_pct",
                "sm_clock_mhz",
                "predicted_runtime_s",
                "predicted_energy_j",
                "score",
            ] {
                assert!(!c[field].is_null(), "candidate lacks {field}: {c}");
            }
        }
        let scores: Vec<f64> = cands
            .iter()
            .map(|c| c["score"].as_f64().expect("score"))
            .collect();
        assert!(
            scores.windows(2).all(|w| w[0] >= w[1]),
            "candidates are ranked: {scores:?}"
        );
    }
}

#[test]
fn energy_policy_moves_the_decision() {
    let fast = plan_json(&[
        "--class",
        "resnet50-train",
        "--energy-policy",
        "performance",
    ]);
    let green = plan_json(&["--class", "resnet50-train", "--energy-policy", "energy"]);
    let rt = |v: &Value| {
        v["decision"]["predicted_runtime_s"]
            .as_f64()
            .expect("runtime")
    };
    let en = |v: &Value| {
        v["decision"]["predicted_energy_j"]
            .as_f64()
            .expect("energy")
    };
    assert!(rt(&fast) <= rt(&green));
    assert!(en(&green) <= en(&fast));
    assert_eq!(
        fast["decision"]["sm_clock_mhz"], 1785,
        "performance keeps the default clock: {}",
        fast["decision"]
    );
}

#[test]
fn table_output_names_the_decision_and_the_config() {
    let o = heshare(&["plan", "--class", "llm-infer"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("config: slurm-conf/heshare.toml (bundled)"),
        "{out}"
    );
    assert!(
        out.contains("decision: ") && out.contains("reason: "),
        "{out}"
    );
}

#[test]
fn the_shipped_config_and_example_slurm_conf_check_clean() {
    let cfg = repo("slurm-conf/heshare.toml");
    let sc = repo("slurm-conf/slurm.conf.example");
    let o = heshare(&[
        "check-config",
        "--config",
        cfg.to_str().expect("utf-8"),
        "--slurm-conf",
        sc.to_str().expect("utf-8"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("7 GPU types"), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("every GPU node carries its GPU type as a feature"),
        "{}",
        stdout(&o)
    );
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
}

#[test]
fn check_config_warns_of_nodes_without_type_features_and_of_one_sharing_mps() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sc = dir.path().join("slurm.conf");
    std::fs::write(
        &sc,
        "GresTypes=gpu,mps\nSuspendTime=600\nNodeName=a[1-2] Gres=gpu:a100:4,mps:400 Features=a100\nNodeName=t1 Gres=gpu:t4:2 Features=ib\n",
    )
    .expect("write");
    std::fs::write(
        dir.path().join("gres.conf"),
        "NodeName=a[1-2] Name=gpu Type=a100 File=/dev/nvidia[0-3]\nNodeName=a[1-2] Name=mps Count=400 File=/dev/nvidia[0-3]\n",
    )
    .expect("write");
    let o = heshare(&["check-config", "--slurm-conf", sc.to_str().expect("utf-8")]);
    assert!(o.status.success(), "warnings only: {}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("warning: nodes with t4 GPUs do not all carry the type as a feature"),
        "{err}"
    );
    assert!(
        err.contains("gres.conf: warning: gres/mps without Flags=all_sharing"),
        "{err}"
    );
    // Power saving in Slurm but not in heshare.toml, and Slurm's default priority plugin.
    assert!(
        err.contains("SuspendTime=600: Slurm powers idle nodes down, but heshare.toml has no [power] suspend_time_s"),
        "{err}"
    );
    assert!(
        err.contains("PriorityType=priority/basic: Slurm adds a job's site factor"),
        "{err}"
    );
}

#[test]
fn a_misspelt_field_fails_with_file_and_line() {
    let (_dir, path) = shipped_config_with(
        "idle_power_w = 50\nmax_power_w = 400\nhost_power_w = 25",
        "idle_power_w = 50\nmax_powr_w = 400\nhost_power_w = 25",
    );
    let o = heshare(&["check-config", "--config", path.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(1));
    let line = line_of(&path, "max_powr_w");
    let err = stderr(&o);
    assert!(
        err.contains(&format!(
            "{}:{line}: gpu.a100.max_powr_w: unknown field `max_powr_w`",
            path.display()
        )),
        "{err}"
    );
}

/// A setting an earlier release read loads with a warning naming file, line and why, so an
/// upgrade never stops slurmctld's plugin from loading a site's file.
#[test]
fn a_retired_setting_loads_with_a_warning_naming_its_line() {
    let (_dir, path) = shipped_config_with(
        "\nresize_asked_shares = false\n",
        "\nresize_asked_shares = false\nwhole_share_idle_typo_free = 0\n",
    );
    // Not a retired name, only an unknown one: refused.
    let o = heshare(&["check-config", "--config", path.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let (_dir, path) = shipped_config_with(
        "\nresize_asked_shares = false\n",
        "\nresize_asked_shares = false\nspare_energy_weight = 0.4\n\n[profiles]\nwhole_share_idle = 0.25\n",
    );
    let o = heshare(&["check-config", "--config", path.to_str().expect("utf-8")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    for (needle, field) in [
        ("spare_energy_weight = 0.4", "policy.spare_energy_weight"),
        ("whole_share_idle = 0.25", "profiles.whole_share_idle"),
    ] {
        let line = line_of(&path, needle);
        assert!(
            err.contains(&format!(
                "warning: {}:{line}: {field}: no longer read (",
                path.display()
            )) && err.contains("); remove it"),
            "{err}"
        );
    }
}

#[test]
fn an_out_of_range_clock_fails_with_file_line_and_field() {
    let (_dir, path) =
        shipped_config_with("default_sm_clock_mhz = 1410", "default_sm_clock_mhz = 1420");
    let o = heshare(&["check-config", "--config", path.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(1));
    let line = line_of(&path, "default_sm_clock_mhz = 1420");
    let err = stderr(&o);
    assert!(err.contains(&format!("{}:{line}: gpu.a100.default_sm_clock_mhz: 1420 MHz is not a supported clock of a100 (210..=1410 MHz)", path.display())), "{err}");
}

#[test]
fn slurm_conf_with_unknown_gpu_type_is_rejected_with_its_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sc = dir.path().join("slurm.conf");
    std::fs::write(&sc, "GresTypes=gpu\nNodeName=g1 Gres=gpu:a100:4\nNodeName=g2 Gres=gpu:rtx4090:2 State=UNKNOWN\n").expect("write");
    let o = heshare(&["check-config", "--slurm-conf", sc.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(&format!(
            "{}:3: Gres: GPU type \"rtx4090\" is not in the catalog",
            sc.display()
        )),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bad_requests_say_what_is_wrong() {
    let o = heshare(&["plan", "--class", "no-such-class"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("unknown job class \"no-such-class\" (known: a3c-train, bert-train"),
        "{}",
        stderr(&o)
    );

    let o = heshare(&["plan", "--class", "bert-train", "--share", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("\"0\" is not auto, exclusive or a percentage 1..=100"),
        "{}",
        stderr(&o)
    );

    let o = heshare(&["plan", "--class", "llm-infer", "--gpu-types", "t4,a40"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("unknown GPU type \"a40\""),
        "{}",
        stderr(&o)
    );

    let o = heshare(&[
        "plan",
        "--class",
        "bert-train",
        "--gpus",
        "2",
        "--share",
        "30",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("a share of one GPU needs exactly one GPU"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_job_given_as_json_is_read_and_checked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = dir.path().join("job.json");
    std::fs::write(
        &good,
        r#"{"class": "whisper-infer", "share": 40, "user": "alice", "gpu_types": ["T4", "a10"]}"#,
    )
    .expect("write");
    let o = heshare(&[
        "plan",
        "--job",
        good.to_str().expect("utf-8"),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["decision"]["share_pct"], 40);
    assert!(["t4", "a10"].contains(&v["decision"]["gpu_type"].as_str().expect("type")));

    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        "{\n  \"class\": \"whisper-infer\",\n  \"gpu_count\": 2\n}",
    )
    .expect("write");
    let o = heshare(&["plan", "--job", bad.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(&format!("{}:3:", bad.display()))
            && stderr(&o).contains("unknown field `gpu_count`"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn heshare_config_environment_variable_is_honoured() {
    let (_dir, path) = shipped_config_with(
        "time_value_kwh_per_gpu_hour = 3.0",
        "time_value_kwh_per_gpu_hour = -7",
    );
    let o = Command::new(BIN)
        .args(["plan", "--class", "bert-train"])
        .env("HESHARE_CONFIG", &path)
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("policy.time_value_kwh_per_gpu_hour: -7 is outside 0..=1000"),
        "{}",
        stderr(&o)
    );
}

/// The profile store for admins: an update from a log, list, show, forget, and what a missing
/// store, an unknown key and a key that cannot be one say.
#[test]
fn profiles_are_updated_listed_shown_and_forgotten() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let cfg = d.join("heshare.toml");
    let shipped = std::fs::read_to_string(repo("slurm-conf/heshare.toml")).expect("config");
    std::fs::write(
        &cfg,
        format!(
            "{shipped}\n[profiles]\nstore = \"{0}/p.json\"\nlogs = [\"{0}/acct/*.jsonl\"]\n",
            d.display()
        ),
    )
    .expect("write");
    let c = cfg.to_str().expect("utf-8");
    let o = heshare(&["profiles", "list", "--config", c]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no profile store yet"),
        "{}",
        stderr(&o)
    );
    std::fs::create_dir_all(d.join("acct")).expect("mkdir");
    let rec = |id: u32, runtime: f64| {
        format!(
            "{{\"record_id\":\"n1:{id}:1\",\"kind\":\"job\",\"node\":\"n1\",\"job_id\":\"{id}\",\"uid\":1000,\"account\":\"phys\",\"gpus\":[0],\"gpu_type\":\"a100\",\"start\":100,\"end\":{},\"energy_j\":{},\"avg_w\":300,\"backend\":\"model\",\"basis\":\"whole\",\"profile_keys\":[\"script:1000:00000000000000aa\"],\"exit\":\"0:0\"}}\n",
            100.0 + runtime,
            300.0 * runtime
        )
    };
    // A fourth run, an hour ago, on a whole t4: killed by Slurm at its 600 s time limit.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    let killed = format!(
        "{{\"record_id\":\"n1:4:1\",\"kind\":\"job\",\"node\":\"n1\",\"job_id\":\"4\",\"uid\":1000,\"account\":\"phys\",\"gpus\":[0],\"gpu_type\":\"t4\",\"start\":{},\"end\":{},\"energy_j\":42000,\"avg_w\":70,\"backend\":\"model\",\"basis\":\"whole\",\"profile_keys\":[\"script:1000:00000000000000aa\"],\"exit\":\"0:9\",\"time_limit_s\":600}}\n",
        now - 4200.0,
        now - 3600.0
    );
    // And one that completed on a whole t4, in 2600 s, with a longer limit.
    let on_t4 = "{\"record_id\":\"n1:6:1\",\"kind\":\"job\",\"node\":\"n1\",\"job_id\":\"6\",\"uid\":1000,\"account\":\"phys\",\"gpus\":[0],\"gpu_type\":\"t4\",\"start\":100,\"end\":2700,\"energy_j\":182000,\"avg_w\":70,\"backend\":\"model\",\"basis\":\"whole\",\"profile_keys\":[\"script:1000:00000000000000aa\"],\"exit\":\"0:0\"}\n";
    std::fs::write(
        d.join("acct/n1.jsonl"),
        format!(
            "{}{}{}{on_t4}{killed}",
            rec(1, 600.0),
            rec(2, 620.0),
            rec(3, 610.0)
        ),
    )
    .expect("log");
    let o = heshare(&["profiles", "update", "--config", c]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("5 records, 5 runs taught, 1 profiles"),
        "{}",
        stdout(&o)
    );
    let o = heshare(&["profiles", "list", "--config", c, "--json"]);
    let rows: Value = serde_json::from_str(&stdout(&o)).expect("json");
    assert_eq!(rows[0]["key"], "script:1000:00000000000000aa");
    assert_eq!(rows[0]["runs"], 4);
    // Planned as its profile says. Limits are written for the slowest type (t4), where its run
    // took 2600 s: a 640 s limit cannot be right there, so it is read against its runs, and its
    // three a100 runs (600 to 620 s) leave an a100 a chance of a kill; an hour covers the t4
    // run, and the a100, faster, is safe.
    let explain = |limit: &str| {
        let o = heshare(&[
            "plan",
            "--profile",
            "script:1000:00000000000000aa",
            "--time-limit",
            limit,
            "--explain",
            "--config",
            c,
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    let p_kill_on_a100 = |table: &str| -> f64 {
        let row = table
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some("a100"))
            .unwrap_or_else(|| panic!("no a100 row: {table}"));
        let cell = row
            .split_whitespace()
            .find(|w| w.ends_with('%'))
            .unwrap_or_else(|| panic!("no P(kill): {row}"));
        cell.trim_end_matches('%').parse().expect("percent")
    };
    let tight = explain("640");
    assert!(tight.contains("P(kill)"), "{tight}");
    assert!(p_kill_on_a100(&tight) > 0.0, "{tight}");
    assert!(
        p_kill_on_a100(&explain("3600")) < 0.05,
        "{}",
        explain("3600")
    );
    let o = heshare(&["plan", "--profile", "nope", "--config", c]);
    assert!(
        !o.status.success() && stderr(&o).contains("\"nope\" is not a profile key"),
        "{}",
        stderr(&o)
    );
    let o = heshare(&[
        "profiles",
        "show",
        "script:1000:00000000000000aa",
        "--config",
        c,
    ]);
    assert!(
        stdout(&o).contains("decides as: training job"),
        "{}",
        stdout(&o)
    );
    // Three a100 runs of 600, 620 and 610 s: a spread of about 1.6% in log.
    let spread = stdout(&o)
        .lines()
        .find_map(|l| l.trim().strip_prefix("runtime from run to run: log-sd "))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|x| x.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no spread: {}", stdout(&o)));
    assert!((0.01..0.03).contains(&spread), "{spread}");
    // The kill is no run (its runtime is only a lower bound), but the t4 is ruled out.
    assert!(
        stdout(&o).contains("(1 killed at the limit)")
            && stdout(&o).contains("on t4 with whole GPUs (limits up to 600 s): not offered t4"),
        "{}",
        stdout(&o)
    );
    assert!(
        stdout(&o).contains("beside busy neighbours: never measured"),
        "{}",
        stdout(&o)
    );
    // A run on half an a100, itself 48% busy, beside neighbours the driver measured 50% busy.
    let shared = "{\"record_id\":\"n1:5:1\",\"kind\":\"job\",\"node\":\"n1\",\"job_id\":\"5\",\"uid\":1000,\"account\":\"phys\",\"gpus\":[0],\"gpu_type\":\"a100\",\"share_pct\":50,\"start\":100,\"end\":1900,\"energy_j\":360000,\"avg_w\":200,\"backend\":\"model\",\"basis\":\"measured\",\"busy_frac\":0.48,\"neighbour_busy\":0.5,\"profile_keys\":[\"script:1000:00000000000000aa\"],\"exit\":\"0:0\"}\n";
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .open(d.join("acct/n1.jsonl"))
        .expect("log");
    std::io::Write::write_all(&mut log, shared.as_bytes()).expect("append");
    let o = heshare(&["profiles", "update", "--config", c]);
    assert!(stdout(&o).contains("1 records"), "{}", stdout(&o));
    let o = heshare(&[
        "profiles",
        "show",
        "script:1000:00000000000000aa",
        "--config",
        c,
    ]);
    assert!(
        stdout(&o).contains("beside busy neighbours: contention 1 + ")
            && stdout(&o).contains("its runs measured up to 50% busy"),
        "{}",
        stdout(&o)
    );
    // It kept its 50% share 48% busy: throttled by the share, and the profile says so.
    assert!(
        stdout(&o).contains("1 kept runs filled what they held"),
        "{}",
        stdout(&o)
    );
    let o = heshare(&["profiles", "show", "not a key", "--config", c]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("\"not a key\" is not a profile key"),
        "{}",
        stderr(&o)
    );
    let o = heshare(&[
        "profiles",
        "forget",
        "script:1000:00000000000000aa",
        "--config",
        c,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = heshare(&[
        "profiles",
        "show",
        "script:1000:00000000000000aa",
        "--config",
        c,
    ]);
    assert_eq!(o.status.code(), Some(1));
    // A second update reads nothing new: the cursor remembers where the log was.
    let o = heshare(&["profiles", "update", "--config", c]);
    assert!(stdout(&o).contains("0 records"), "{}", stdout(&o));
}
