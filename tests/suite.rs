//! The scenario suite end to end: `heshare simulate --suite --quick` on tiny worlds (a few hundred
//! jobs each) gives every world every policy's row, heshare's three rows against a named best
//! baseline, an oracle that decided with the true profiles the world drew, and the summary.

use serde_json::Value;
use std::ffi::OsStr;
use std::process::{Command, Output};

/// `heshare ARGS` on the bundled configuration only.
fn heshare<S: AsRef<OsStr>>(args: impl IntoIterator<Item = S>) -> Output {
    Command::new(env!("CARGO_BIN_EXE_heshare"))
        .args(args)
        .env_remove("HESHARE_CONFIG")
        .env("HESHARE_SYSTEM_CONFIG", "/nonexistent/heshare.toml")
        .output()
        .expect("heshare runs")
}

const POLICIES: [&str; 10] = [
    "slurm-exclusive",
    "slurm-mps",
    "fgd",
    "fgd-pwr",
    "gavel",
    "zeus",
    "energy-greedy",
    "heshare",
    "heshare-labelled",
    "heshare-oracle",
];

#[test]
fn the_quick_suite_runs_every_world_through_every_policy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("suite.json");
    let json_arg = json.to_str().expect("a UTF-8 temporary path");
    let o = heshare([
        "simulate", "--suite", "--quick", "--jobs", "300", "--json", json_arg,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("json written"))
        .expect("valid JSON");
    assert_eq!(v["quick"], true);
    assert_eq!(v["seeds"], 1);
    let worlds = v["worlds"].as_array().expect("worlds");
    let names: Vec<&str> = worlds
        .iter()
        .map(|w| w["world"]["name"].as_str().expect("name"))
        .collect();
    for want in [
        "openb",
        "openb-busy",
        "gavel",
        "openb-multigpu50",
        "openb-gpuspec33",
        "always-on",
        "big-servers",
        "few-repeats",
        "many-repeats",
        "some-labels",
        "openb-large",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    for w in worlds {
        let name = &w["world"]["name"];
        assert!(
            !w["world"]["about"].as_str().unwrap_or("").is_empty(),
            "{name}: says where it comes from"
        );
        assert_eq!(w["jobs_per_seed"], 300, "{name}");
        assert_eq!(w["missing_jobs"], 0, "{name}");
        let rows: Vec<&str> = w["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| r["policy"].as_str().expect("policy"))
            .collect();
        assert_eq!(rows, POLICIES, "{name}");
        for r in w["rows"].as_array().expect("rows") {
            assert_eq!(r["jobs"], 300, "{name}: {}", r["policy"]);
            assert_eq!(r["unstarted"], 0, "{name}: {}", r["policy"]);
            assert_eq!(r["unfinished"], 0, "{name}: {}", r["policy"]);
        }
        let best = w["best_baseline"]["policy"].as_str().expect("best");
        assert!(
            !best.starts_with("heshare") && POLICIES.contains(&best),
            "{name}: {best}"
        );
        let heshare: Vec<&str> = w["heshare"]
            .as_array()
            .expect("heshare rows")
            .iter()
            .map(|r| r["policy"].as_str().expect("policy"))
            .collect();
        assert_eq!(
            heshare,
            ["heshare", "heshare-labelled", "heshare-oracle"],
            "{name}"
        );
        for r in w["heshare"].as_array().expect("rows") {
            for f in ["energy_ratio", "mean_jct_ratio", "p99_jct_ratio"] {
                let x = r[f].as_f64().unwrap_or(f64::NAN);
                assert!(x.is_finite() && x > 0.0, "{name}: {}: {f} {x}", r["policy"]);
            }
        }
        // The oracle decided every job it saw, most of them with the truth's profile (a job too
        // short on every type to teach anything has none).
        let p = &w["oracle_profiles"];
        let submitted = p["submitted"].as_u64().expect("submitted");
        let with = p["with_profile"].as_u64().expect("with profile");
        assert!(submitted >= 300, "{name}: {p}");
        assert!(2 * with > submitted, "{name}: {p}");
    }
    let summary = v["summary"].as_array().expect("summary");
    let policies: Vec<&str> = summary
        .iter()
        .map(|s| s["policy"].as_str().expect("policy"))
        .collect();
    assert_eq!(policies, ["heshare", "heshare-labelled", "heshare-oracle"]);
    for s in summary {
        let g = s["energy_geomean"].as_f64().expect("geomean");
        assert!(g.is_finite() && g > 0.0, "{s}");
        assert!(names.contains(&s["worst_energy"][0].as_str().expect("worst")));
    }
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("over 13 worlds"), "{stdout}");
    assert!(stdout.contains("suite wall time"), "{stdout}");
}

#[test]
fn the_suite_names_an_unknown_world() {
    let o = heshare(["simulate", "--suite", "--quick", "--worlds", "openb,mars"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("unknown world \"mars\"") && err.contains("gavel"),
        "{err}"
    );
}

#[test]
fn the_suite_refuses_options_of_one_world() {
    let o = heshare(["simulate", "--suite", "--load", "0.5"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--load describes one world"), "{err}");
}
