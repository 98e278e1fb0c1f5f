//! The simulator's placement mode against the FGD paper's published medians (default openb pod
//! list, 6212-GPU cluster): the replay must stay within one percentage point of them.

use serde_json::Value;
use std::process::Command;

/// `heshare simulate ARGS` on the bundled config, whatever config the environment names; the
/// caller adds path arguments and runs it.
fn simulate(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_heshare"));
    c.arg("simulate")
        .args(args)
        .env_remove("HESHARE_CONFIG")
        .env("HESHARE_SYSTEM_CONFIG", "/nonexistent/heshare.toml");
    c
}

#[test]
fn placement_mode_reproduces_fgd_and_bestfit_within_one_point() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("placement.json");
    let o = Command::new(env!("CARGO_BIN_EXE_heshare"))
        .args([
            "simulate",
            "--mode",
            "placement",
            "--policies",
            "bestfit,fgd,random",
            "--seeds",
            "3",
            "--load",
            "1.0",
            "--json",
        ])
        .arg(&json)
        .env_remove("HESHARE_CONFIG")
        .env("HESHARE_SYSTEM_CONFIG", "/nonexistent/heshare.toml")
        .output()
        .expect("heshare runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("json written"))
        .expect("valid JSON");
    assert_eq!(v["gpus"], 6212);
    let results = v["results"].as_array().expect("results");
    assert_eq!(results.len(), 3);
    for r in results {
        let got = r["alloc_rate"].as_f64().expect("alloc_rate");
        let paper = r["published_alloc_rate"].as_f64().expect("published");
        assert!(
            (got - paper).abs() <= 1.0,
            "{}: {got:.2}% vs published {paper:.2}%",
            r["policy"]
        );
        assert_eq!(r["per_seed"].as_array().expect("per seed").len(), 3);
    }
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("fgd") && stdout.contains("paper med"),
        "{stdout}"
    );
}

#[test]
fn bad_simulate_input_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nodes = dir.path().join("nodes.csv");
    std::fs::write(
        &nodes,
        "sn,cpu_milli,memory_mib,gpu,model\nn1,1000,1000,2,RTX9000\n",
    )
    .expect("write");
    let o = Command::new(env!("CARGO_BIN_EXE_heshare"))
        .args(["simulate", "--cluster"])
        .arg(&nodes)
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "{}:2: model: GPU model \"RTX9000\"",
            nodes.display()
        )),
        "{err}"
    );
}

/// Labels that cannot be (fractions over one) are refused before anything runs, naming both.
#[test]
fn label_fractions_that_do_not_add_up_are_named() {
    for (args, want) in [
        (
            vec!["--labelled", "0.7", "--mislabelled", "0.5"],
            "--labelled 0.7 and --mislabelled 0.5 add up to more than 1",
        ),
        (vec!["--labelled", "1.5"], "--labelled 1.5 is outside 0..=1"),
        (
            vec!["--fast-limits", "2"],
            "--fast-limits 2 is outside 0..=1",
        ),
        (
            vec!["--runs-per-template", "0.5"],
            "--runs-per-template 0.5 is outside 1..=1000000",
        ),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_heshare"))
            .arg("simulate")
            .args(&args)
            .output()
            .expect("runs");
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// With every script labelled wrongly, heshare sets labels aside once the runs contradict them;
/// with every one labelled truly and nothing recurring, it decides by labels alone.
#[test]
fn wrong_labels_are_set_aside_by_the_runs_and_true_ones_decide_without_profiles() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |extra: &[&str]| -> Value {
        let json = dir.path().join("l.json");
        let o = Command::new(env!("CARGO_BIN_EXE_heshare"))
            .args([
                "simulate",
                "--jobs",
                "600",
                "--seeds",
                "1",
                "--scale",
                "0.02",
                "--policies",
                "slurm-mps,heshare",
                "--json",
            ])
            .arg(&json)
            .args(extra)
            .env_remove("HESHARE_CONFIG")
            .env("HESHARE_SYSTEM_CONFIG", "/nonexistent/heshare.toml")
            .output()
            .expect("heshare runs");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("JSON")
    };
    let wrong = run(&["--mislabelled", "1", "--runs-per-template", "20"]);
    let p = &wrong["profiles"];
    // The kill price is checked against the kills, run by run heshare placed.
    let k = &p["kill_price"];
    let placed = k["unpriced"].as_u64().expect("n") + k["priced"].as_u64().expect("n");
    assert!(placed > 0, "{k}");
    assert!(k["priced_expected"].as_f64().expect("x") >= 0.0, "{k}");
    assert!(p["overruled"].as_u64().expect("n") > 0, "{p}");
    assert_eq!(
        p["overruled"], p["overruled_wrong"],
        "only wrong labels: {p}"
    );
    let true_once = run(&["--labelled", "1", "--runs-per-template", "1"]);
    let p = &true_once["profiles"];
    assert_eq!(p["as_asked"], 0, "{p}");
    assert_eq!(p["overruled"], 0, "{p}");
    assert_eq!(
        p["by_level"][0], 0,
        "nothing recurs, so no script is known: {p}"
    );
}

#[test]
fn time_mode_compares_every_scheduler_in_the_world_and_accounts_for_every_job() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (json, svg) = (dir.path().join("time.json"), dir.path().join("time.svg"));
    let o = Command::new(env!("CARGO_BIN_EXE_heshare"))
        .args([
            "simulate", "--jobs", "400", "--seeds", "2", "--scale", "0.02", "--load", "0.7",
            "--json",
        ])
        .arg(&json)
        .arg("--plot")
        .arg(&svg)
        .env_remove("HESHARE_CONFIG")
        .env("HESHARE_SYSTEM_CONFIG", "/nonexistent/heshare.toml")
        .output()
        .expect("heshare runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("valid JSON");
    assert_eq!(v["mode"], "time");
    assert_eq!(v["seeds"].as_array().expect("seeds").len(), 2);
    let rows = v["rows"].as_array().expect("rows");
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["policy"].as_str().expect("policy"))
        .collect();
    assert_eq!(
        names,
        [
            "slurm-exclusive",
            "slurm-mps",
            "fgd",
            "fgd-pwr",
            "gavel",
            "zeus",
            "energy-greedy",
            "heshare",
            "heshare-labelled",
            "heshare-oracle"
        ]
    );
    let bound = v["energy_lower_bound_kwh"].as_f64().expect("bound");
    for r in rows {
        for f in [
            "facility_kwh",
            "facility_always_on_kwh",
            "gpu_kwh",
            "host_kwh",
            "energy_per_job_kj",
            "mean_jct_s",
            "mean_wait_s",
            "p99_jct_s",
            "makespan_s",
            "alloc_rate",
            "violations",
            "killed",
            "killed_by_sharing_or_clock",
            "reruns",
            "failed",
            "mean_jct_finished_s",
            "site_factor",
            "resumes",
            "unstarted",
            "unfinished",
        ] {
            assert!(!r[f].is_null(), "{f} missing in {r}");
        }
        assert_eq!(r["jobs"], 800, "{r}");
        // Every kill is followed by its user's rerun, or is the job's last (two reruns at most).
        let count = |f: &str| r[f].as_u64().expect("a count");
        assert_eq!(count("killed"), count("reruns") + count("failed"), "{r}");
        // Kills are counted against plain Slurm's on the same seed, never hidden.
        if r["policy"] != "slurm-mps" {
            assert!(r["killed_not_by_plain_slurm"].is_u64(), "{r}");
        }
        let facility = r["facility_kwh"].as_f64().expect("energy");
        // The meter counts more than the GPUs: hosts and supplies are in it.
        assert!(facility > r["gpu_kwh"].as_f64().expect("gpu"), "{r}");
        assert!(
            r["facility_always_on_kwh"].as_f64().expect("on") >= facility,
            "{r}"
        );
    }
    // Every run spends at least its seed's lower bound.
    assert!(bound > 0.0);
    for run in v["runs"].as_array().expect("runs") {
        let (f, b) = (
            run["facility_kwh"].as_f64().expect("energy"),
            run["energy_lower_bound_kwh"].as_f64().expect("bound"),
        );
        assert!(
            f >= b && b > 0.0,
            "{} seed {}: {f} < {b}",
            run["policy"],
            run["seed"]
        );
    }
    // Only heshare sets site factors, and Slurm's multifactor queue ordered by them.
    assert_eq!(v["queue"]["multifactor"], true);
    for r in rows {
        let f = &r["site_factor"];
        if r["policy"]
            .as_str()
            .is_some_and(|p| p.starts_with("heshare"))
        {
            assert!(f["jobs"].as_u64().expect("jobs") > 0, "{f}");
        } else {
            assert_eq!(f["nonzero"], 0, "{}: {f}", r["policy"]);
        }
    }
    // The headline is the shipped path's facility energy, with its spread over seeds; the oracle
    // stands apart.
    for key in ["shipped", "oracle"] {
        let ratios = v[key].as_array().expect("ratios");
        let energy = ratios
            .iter()
            .find(|r| r["metric"] == "facility energy per job")
            .expect("energy ratio");
        let (lo, mid, hi) = (
            energy["min"].as_f64().expect("min"),
            energy["median"].as_f64().expect("median"),
            energy["max"].as_f64().expect("max"),
        );
        assert!(lo <= mid && mid <= hi && lo > 0.0, "{energy}");
        assert_eq!(energy["per_seed"].as_array().expect("per seed").len(), 2);
    }
    assert!(!v["predictor_error"].as_array().expect("errors").is_empty());
    // Nobody labels by default: heshare learns from the runs it saw end, and says how much.
    assert_eq!(v["recurrence"]["labelled"], 0.0);
    let p = &v["profiles"];
    // Every job once, and each rerun of a killed one again.
    let heshare = rows
        .iter()
        .find(|r| r["policy"] == "heshare")
        .expect("heshare's row");
    let reruns = heshare["reruns"].as_u64().expect("reruns");
    assert_eq!(p["submitted"].as_u64(), Some(800 + reruns), "{p}");
    let with = p["with_profile"].as_u64().expect("count");
    assert!(
        with > 0 && with < 800,
        "the first runs have no profile: {p}"
    );
    assert!(p["taught"].as_u64().expect("taught") > 0, "{p}");
    assert_eq!(p["labelled"], 0, "{p}");
    let curve = v["learning_curve"].as_array().expect("curve");
    assert!(!curve.is_empty());
    assert!(
        curve.iter().all(|w| w["heshare_energy"].is_f64()),
        "{curve:?}"
    );
    for key in ["learned_vs_labelled", "labelled"] {
        assert!(!v[key].as_array().expect("ratios").is_empty(), "{key}");
    }
    let chart = std::fs::read_to_string(&svg).expect("svg");
    assert!(chart.starts_with("<svg") && chart.contains("heshare"));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("heshare as it ships vs the best baseline"),
        "{stdout}"
    );
    assert!(
        stdout.contains("heshare-oracle (the shipped path told every job's truth)"),
        "{stdout}"
    );
    assert!(stdout.contains("predictor error"), "{stdout}");
    assert!(
        stdout.contains("world GPU power (not the catalog's)"),
        "{stdout}"
    );
}

/// The facility's options: a flat host power, power saving off or read from a slurm.conf, and
/// a boot time Slurm's ResumeTimeout would not allow.
#[test]
fn facility_options_change_what_the_meter_counts_and_bad_ones_are_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |extra: &[&str]| {
        let json = dir.path().join("f.json");
        let o = Command::new(env!("CARGO_BIN_EXE_heshare"))
            .args([
                "simulate",
                "--jobs",
                "200",
                "--seeds",
                "1",
                "--scale",
                "0.02",
                "--policies",
                "slurm-exclusive",
                "--json",
            ])
            .arg(&json)
            .args(extra)
            .output()
            .expect("runs");
        let v: Option<Value> = o.status.success().then(|| {
            serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("json")
        });
        (o, v)
    };
    let row = |v: &Value, f: &str| v["rows"][0][f].as_f64().expect("field");
    let (_, zero) = run(&["--host-power", "0", "--suspend-time", "off"]);
    let zero = zero.expect("ran");
    // No host, nothing suspended: the meter reads what the GPUs drew.
    assert!((row(&zero, "facility_kwh") - row(&zero, "gpu_kwh")).abs() < 1e-9);
    assert!((row(&zero, "facility_kwh") - row(&zero, "facility_always_on_kwh")).abs() < 1e-9);
    let (_, flat) = run(&["--host-power", "200", "--suspend-time", "off"]);
    assert!(row(&flat.expect("ran"), "facility_kwh") > row(&zero, "facility_kwh"));
    let conf = dir.path().join("slurm.conf");
    std::fs::write(
        &conf,
        "SuspendTime=300\nSuspendTimeout=20\nResumeTimeout=900\n",
    )
    .expect("write");
    let (_, from_conf) = run(&["--slurm-conf", conf.to_str().expect("utf-8")]);
    let from_conf = from_conf.expect("ran");
    assert_eq!(from_conf["saving"]["suspend_time_s"], 300.0);
    assert_eq!(from_conf["saving"]["resume_timeout_s"], 900.0);
    // No PriorityType there: Slurm's default, first come first served.
    assert_eq!(from_conf["queue"]["multifactor"], false);
    std::fs::write(
        &conf,
        "PriorityType=priority/multifactor\nPriorityWeightAge=5000\nPriorityMaxAge=2-0\n",
    )
    .expect("write");
    let (_, prio) = run(&["--slurm-conf", conf.to_str().expect("utf-8")]);
    let prio = prio.expect("ran");
    assert_eq!(prio["queue"]["multifactor"], true);
    assert_eq!(prio["queue"]["weight_age"], 5000.0);
    assert_eq!(prio["queue"]["max_age_s"], 172_800.0);
    let (o, _) = run(&["--priority", "fair"]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--priority fair: use multifactor or basic"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let (o, _) = run(&["--resume-time", "900", "--resume-timeout", "60"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("ResumeTimeout is 60 s"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let (o, _) = run(&["--host-power", "lots"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("--host-power lots"));
}

#[test]
fn unknown_policies_list_the_known_ones() {
    let o = Command::new(env!("CARGO_BIN_EXE_heshare"))
        .args(["simulate", "--policies", "slurm,heshare", "--jobs", "10"])
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("unknown time-mode policy \"slurm\" (known: slurm-exclusive, slurm-mps"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A site's own slurm.conf is its cluster, whole, and its Slurm settings: the example site's 18
/// nodes and 96 GPUs, power saving and priority as it configures them; a type the catalog does
/// not know is named with its file and line, and an untyped GRES is typed from gres.conf.
#[test]
fn a_sites_slurm_conf_is_the_cluster_replayed() {
    let conf =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/site-example/slurm.conf");
    let o = simulate(&["--jobs", "300", "--seeds", "1"])
        .args(["--policies", "slurm-exclusive,heshare", "--cluster"])
        .arg(&conf)
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(&format!(
            "on {} scaled 1.00 (18 nodes, 96 GPUs)",
            conf.display()
        )),
        "{out}"
    );
    assert!(out.contains("idle nodes powered down after 600 s"), "{out}");
    assert!(
        out.contains("queue order: priority/multifactor, PriorityWeightAge=1000"),
        "{out}"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("slurm.conf");
    std::fs::write(
        &bad,
        "ClusterName=x\nNodeName=m[1-2] CPUs=8 Gres=gpu:mi300x:8\nNodeName=g1 Gres=gpu:2\n",
    )
    .expect("write");
    let o = simulate(&["--cluster"]).arg(&bad).output().expect("runs");
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "{}:2: Gres: node m1: GPU type \"mi300x\"",
            bad.display()
        )),
        "{err}"
    );
    std::fs::write(&bad, "NodeName=g[1-2] CPUs=8 RealMemory=64000 Gres=gpu:2\n").expect("write");
    let gres = dir.path().join("gres.conf");
    std::fs::write(
        &gres,
        "NodeName=g[1-2] Name=gpu Type=t4 File=/dev/nvidia[0-1]\n",
    )
    .expect("write");
    let o = simulate(&[
        "--jobs",
        "50",
        "--seeds",
        "1",
        "--policies",
        "slurm-exclusive",
    ])
    .args(["--suspend-time", "off", "--cluster"])
    .arg(&bad)
    .arg("--gres-conf")
    .arg(&gres)
    .output()
    .expect("runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("(2 nodes, 4 GPUs)"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

/// The example site's sacct export replays as recorded on its own slurm.conf: every row that
/// ran is one job, and what cannot be replayed is named, not queued; --jobs cuts the record and
/// --load scales its arrivals, each saying so.
#[test]
fn a_sites_sacct_replays_as_recorded_and_names_what_it_leaves_out() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/site-example");
    let run = |extra: &[&str]| {
        let o = simulate(&["--seeds", "1", "--policies", "slurm-mps,heshare"])
            .arg("--cluster")
            .arg(dir.join("slurm.conf"))
            .arg("--trace")
            .arg(dir.join("sacct.txt"))
            .args(["--trace-format", "sacct"])
            .args(extra)
            .output()
            .expect("runs");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let csv = tmp.path().join("jobs.csv");
    let out = run(&["--jobs-csv", csv.to_str().expect("utf-8 path")]);
    let rows = std::fs::read_to_string(&csv).expect("jobs csv written");
    let mut lines = rows.lines();
    assert_eq!(
        lines.next(),
        Some("policy,seed,job,submit_s,start_s,jct_s,gpu_kwh")
    );
    let body: Vec<&str> = lines.collect();
    assert_eq!(body.len(), 2 * 300, "every job under both policies");
    // The first job of the week, by its JobID, started and ended under plain Slurm.
    let first = body
        .iter()
        .find(|l| l.starts_with("slurm-mps,42,40001,0,"))
        .unwrap_or_else(|| panic!("{rows}"));
    assert!(first.split(',').all(|f| !f.is_empty()), "{first}");
    // A cut and scaled replay names its jobs by their JobIDs too: the first 50 of the week.
    let cut = tmp.path().join("cut.csv");
    run(&[
        "--jobs",
        "50",
        "--load",
        "0.5",
        "--jobs-csv",
        cut.to_str().expect("utf-8 path"),
    ]);
    let cut = std::fs::read_to_string(&cut).expect("jobs csv written");
    assert_eq!(cut.lines().count(), 1 + 2 * 50, "{cut}");
    assert!(cut.contains("\nslurm-mps,42,40001,"), "{cut}");
    assert!(
        out.contains("time mode: 300 jobs as recorded x 1 seeds"),
        "{out}"
    );
    assert!(out.contains("(18 nodes, 96 GPUs), offered load"), "{out}");
    assert!(
        out.contains("left out, no node can hold them: 1 jobs: 40303 (it asks 8 GPUs on one node"),
        "{out}"
    );
    assert!(
        out.contains("40301 (line 302, never started); 40302 (line 303, has not ended)"),
        "{out}"
    );
    assert!(out.contains("workload: as recorded"), "{out}");
    // The example site powers idle nodes down: the answer without it too.
    assert!(
        out.contains("without power saving (SuspendTime off, every node always on): plain Slurm"),
        "{out}"
    );
    assert!(
        out.contains("verdict: on these jobs heshare would have used")
            && out.contains("than plain Slurm as configured (slurm-mps)"),
        "{out}"
    );
    assert!(
        !out.contains("jobs never started"),
        "every replayed job ran: {out}"
    );
    assert!(!out.contains("bundled openb slice"), "{out}");
    // --jobs cuts the record and --load scales its arrivals, each saying so.
    let cut = run(&["--jobs", "200"]);
    assert!(cut.contains("time mode: 200 jobs as recorded"), "{cut}");
    assert!(
        cut.contains("cut (--jobs 200): the first 200 of the 300 jobs"),
        "{cut}"
    );
    let scaled = run(&["--load", "0.5"]);
    assert!(
        scaled.contains("time mode: 300 jobs as recorded"),
        "{scaled}"
    );
    assert!(
        scaled.contains("arrivals scaled (--load 0.5): submissions"),
        "{scaled}"
    );
}
