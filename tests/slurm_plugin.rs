//! job_submit/heshare inside a real slurmctld (Slurm 22.05 from Debian), loaded from the cdylib
//! this build produced, with its SPANK options in sbatch. Needs root, slurm-wlm and munge.

mod common;

use common::{Cluster, alive, forge_submit, gres, plugin_path};

fn shipped() -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("slurm-conf/heshare.toml"),
    )
    .expect("shipped config")
}

fn field<'a>(show: &'a str, key: &str) -> &'a str {
    show.split_whitespace()
        .find_map(|w| w.strip_prefix(key))
        .unwrap_or("")
}

#[test]
fn the_plugin_places_shares_and_whole_gpus_and_rejects_bad_input() {
    let plugin = plugin_path();
    assert!(
        plugin.exists(),
        "{} was not built: run `cargo build --release` first (bash .ci/run does)",
        plugin.display()
    );
    // The plugin's configuration: a copy of the shipped one the test may edit, offering one type
    // only (several types offered at once are tested live in tests/slurm_live.rs).
    let cfg_dir = tempfile::tempdir().expect("tempdir");
    let cfg_path = cfg_dir.path().join("heshare.toml");
    // A site that values a job's time at 0.3 kWh per GPU-hour, less than the shipped 3, so that
    // a lowered clock travels from the decision to the Prolog.
    let shipped = || {
        shipped()
            .replacen("offer_margin = 35", "offer_margin = 0", 1)
            .replacen(
                "time_value_kwh_per_gpu_hour = 3.0",
                "time_value_kwh_per_gpu_hour = 0.3",
                1,
            )
    };
    std::fs::write(&cfg_path, shipped()).expect("write");
    let c = Cluster::start(
        "plugin",
        &[
            ("HESHARE_PLUGIN", plugin.to_str().expect("utf-8")),
            ("HESHARE_CONFIG", cfg_path.to_str().expect("utf-8")),
            (
                "HESHARE_JOB_SUBMIT_LUA",
                concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/job_submit.lua"),
            ),
        ],
    );
    let ctld = c.slurmctld_pid();
    assert!(
        c.read("log/slurmctld.log").contains(
            "heshare: loaded 12 job classes; GPU types in this cluster: a100 (feature), t4 (feature), v100m16 (feature)"
        )
    );

    // A small inference job asking heshare to size its share: an MPS share on the type chosen.
    let infer = c.sbatch(&["--gres=gpu:1", "--gpu-share=auto", "--gpu-class=vit-infer", "-o", "infer-%j.out", "--wrap", "echo mps=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE; env | grep '^SLURM_SPANK__SLURM_SPANK_OPTION_heshare' | sort"]);
    // A large training job: a whole GPU of the type chosen.
    let train = c.sbatch(&[
        "--gres=gpu:1",
        "--gpu-class=bert-train",
        "-o",
        "train-%j.out",
        "--wrap",
        "echo gpus=$CUDA_VISIBLE_DEVICES",
    ]);
    // What an earlier job_submit plugin wrote in AdminComment stays; heshare's part follows.
    let noted = c.sbatch(&[
        "--gres=gpu:1",
        "--gpu-class=bert-train",
        "--comment=site-note",
        "--wrap",
        "true",
    ]);
    // A CPU job passes untouched.
    let cpu = c.sbatch(&["-o", "cpu-%j.out", "--wrap", "echo cpu"]);

    // Nodes carry their GPU type as a feature: an untyped share, constrained to the type chosen.
    let s = c.wait_done(&infer);
    assert_eq!(
        (field(&s, "TresPerNode="), field(&s, "Features=")),
        (gres("mps:50").as_str(), "t4"),
        "{s}"
    );
    assert!(
        s.contains("AdminComment=heshare: type=t4 share=50 clock=1590 class=vit-infer policy=balanced asked=whole site=+0 snapshot="),
        "{s}"
    );
    assert!(s.contains(" reason=50% MPS share of a t4"), "{s}");
    // Alone on its GPU a share draws what the whole GPU would: no priority change (site=+0
    // above), and the nice is the user's.
    assert_eq!(field(&s, "Nice="), "0", "{s}");
    assert_eq!(field(&s, "NodeList="), "ht4");
    let out = c.read(&format!("infer-{infer}.out"));
    assert!(out.starts_with("mps=50\n"), "{out}");
    assert!(
        out.contains("_heshare_gpu_class=vit-infer") && out.contains("_heshare_gpu_share=auto"),
        "{out}"
    );

    // The decision reaches the node side: the Prolog sees the plugin's entries as SPANK_HESHARE_*.
    let prolog = c.read(&format!("log/prolog-{infer}.env"));
    for want in [
        "SPANK_HESHARE_CLASS=vit-infer",
        "SPANK_HESHARE_GPU_TYPE=t4",
        "SPANK_HESHARE_GPU_TYPES=t4",
        "SPANK_HESHARE_SHARE=50",
        "SPANK_HESHARE_SM_CLOCK_MHZ=1590",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50",
    ] {
        assert!(
            prolog.lines().any(|l| l == want),
            "the Prolog did not see {want}:\n{prolog}"
        );
    }

    let s = c.wait_done(&train);
    assert_eq!(
        (field(&s, "TresPerNode="), field(&s, "Features=")),
        (gres("gpu:1").as_str(), "a100"),
        "{s}"
    );
    assert!(
        s.contains("AdminComment=heshare: type=a100 share=exclusive clock=1095 class=bert-train"),
        "{s}"
    );
    // A class alone is no queue jump.
    assert_eq!(field(&s, "Nice="), "0", "{s}");
    assert_eq!(field(&s, "NodeList="), "ha100");

    // --gpus (per job) gets whole GPUs of the chosen type.
    let per_job = c.sbatch(&["--gpus=1", "--gpu-class=bert-train", "--wrap", "true"]);
    let s = c.wait_done(&per_job);
    assert_eq!(
        (field(&s, "TresPerJob="), field(&s, "Features=")),
        (gres("gpu:1").as_str(), "a100"),
        "{s}"
    );
    // srun: the job step asks again for the GPU the user gave, so heshare picks the type only.
    let (ok, out, err) = c.run(
        "srun",
        &[
            "--gres=gpu:1",
            "--gpu-class=vit-infer",
            "--gpu-share=auto",
            "printenv",
            "CUDA_VISIBLE_DEVICES",
        ],
    );
    assert!(ok && out.trim() == "0", "srun failed: {out}{err}");

    // Time limits (issue 16). By default a job's limit is taken as its runtime on the slowest
    // type its request allows (what plain Slurm could give it); the Prolog hears which, and the
    // node helper keeps the job within it there.
    let limited = c.sbatch(&[
        "--gres=gpu:1",
        "--gpu-class=bert-train",
        "-t",
        "20",
        "--wrap",
        "true",
    ]);
    c.wait_done(&limited);
    let prolog = c.read(&format!("log/prolog-{limited}.env"));
    assert!(
        prolog.lines().any(|l| l == "SPANK_HESHARE_LIMIT_TYPE=t4"),
        "{prolog}"
    );
    // A site whose users write their limits for its V100s: a 20-minute bert job is never sent
    // to a t4, where it would need longer than that; asked for a t4, it is left as asked, and
    // AdminComment says why.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    std::fs::write(
        &cfg_path,
        shipped()
            .replacen("offer_margin = 0", "offer_margin = 100", 1)
            .replacen("limit_type = \"slowest\"", "limit_type = \"v100m16\"", 1),
    )
    .expect("write");
    let any = c.sbatch(&[
        "--gres=gpu:1",
        "--gpu-class=bert-train",
        "-t",
        "20",
        "--wrap",
        "true",
    ]);
    let s = c.wait_done(&any);
    let offered = s
        .split("AdminComment=heshare: type=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no offer: {s}"));
    assert!(s.contains(" limit=v100m16 "), "the edit took effect: {s}");
    assert!(
        !offered.split('|').any(|t| t == "t4") && !field(&s, "Features=").contains("t4"),
        "a 20-minute job offered a t4: {s}"
    );
    let t4 = c.sbatch(&[
        "--gres=gpu:t4:1",
        "--gpu-class=bert-train",
        "-t",
        "20",
        "--wrap",
        "true",
    ]);
    let s = c.wait_done(&t4);
    assert!(
        s.contains("t4: would need") && s.contains("time limit") && s.contains("left as asked"),
        "{s}"
    );
    std::thread::sleep(std::time::Duration::from_millis(1100));
    std::fs::write(&cfg_path, shipped()).expect("write");

    let s = c.wait_done(&noted);
    assert!(
        s.contains("AdminComment=site: reviewed by the lua plugin | heshare: type=a100 "),
        "{s}"
    );
    let s = c.wait_done(&cpu);
    assert!(
        !s.contains("AdminComment=") && field(&s, "TresPerNode=").is_empty(),
        "{s}"
    );

    // A client of Slurm's API puts HESHARE_* entries of its own in spank_job_env: they never
    // reach the Prolog (which trusts SPANK_HESHARE_*); the job's other entries do.
    let forged = forge_submit(&c, &gres("gpu:1"), &[]);
    c.wait_done(&forged);
    let prolog = c.read(&format!("log/prolog-{forged}.env"));
    // Only heshare's own entry for a job without a class: its profile keys.
    assert!(
        prolog
            .lines()
            .filter(|l| l.starts_with("SPANK_HESHARE_"))
            .all(|l| l.starts_with("SPANK_HESHARE_PROFILE_KEYS=script:0:")),
        "a forged entry reached the Prolog:\n{prolog}"
    );
    assert!(prolog.contains("SPANK_FORGED_OTHER=1"), "{prolog}");
    assert!(
        c.read("log/slurmctld.log")
            .contains("removed 2 HESHARE_* entries the submission carried"),
        "the removal is logged"
    );

    // Bad option values stop sbatch itself, naming the option and what it allows.
    let (ok, _, err) = c.run(
        "sbatch",
        &["--gres=gpu:1", "--gpu-share=0", "--wrap", "true"],
    );
    assert!(
        !ok && err
            .contains("heshare: --gpu-share: \"0\" is not auto, exclusive or a percentage 1..=100"),
        "{err}"
    );
    let (ok, _, err) = c.run(
        "sbatch",
        &[
            "--gres=gpu:1",
            "--gpu-class=bert-train",
            "--energy-policy=green",
            "--wrap",
            "true",
        ],
    );
    assert!(
        !ok && err.contains("--energy-policy: \"green\" is not performance, balanced or energy"),
        "{err}"
    );
    // Requests the plugin must refuse come back with its reason.
    let (ok, _, err) = c.run(
        "sbatch",
        &[
            "--gres=gpu:1",
            "--gpu-class=no-such-class",
            "--wrap",
            "true",
        ],
    );
    assert!(
        !ok && err.contains("heshare: --gpu-class: unknown class \"no-such-class\""),
        "{err}"
    );
    let (ok, _, err) = c.run("sbatch", &["--gpu-class=vit-infer", "--wrap", "true"]);
    assert!(!ok && err.contains("need a GPU request"), "{err}");
    // A GPU type the catalog does not know is left to Slurm, which rejects it on its own terms.
    let (ok, _, err) = c.run(
        "sbatch",
        &[
            "--gres=gpu:rtx9000:1",
            "--gpu-class=vit-infer",
            "--wrap",
            "true",
        ],
    );
    assert!(!ok && !err.contains("heshare"), "{err}");
    // Regression: two GPU entries were rewritten to one GPU of one type, the other dropped. Now
    // the request stays as asked (no node here has both types, so Slurm refuses it itself) and
    // slurmctld's log says why heshare left it.
    let (ok, _, err) = c.run(
        "sbatch",
        &[
            "--gres=gpu:a100:1,gpu:t4:1",
            "--gpu-class=vit-infer",
            "--wrap",
            "true",
        ],
    );
    assert!(!ok && !err.contains("heshare"), "{err}");
    assert!(
        c.read("log/slurmctld.log").contains(
            "names 2 GPU entries; heshare rewrites one GPU request only, request left as asked"
        ),
        "no note of the left request in slurmctld's log"
    );

    // Asking for performance costs the site more than the default (here the default clock, not
    // the one the site's rate sets): the job moves back, in Slurm's site factor (AdminComment
    // records heshare's; tests/slurm_priority.rs reads it in sprio), and the user's nice is left
    // alone.
    let fast = c.sbatch(&[
        "--gres=gpu:1",
        "--gpu-class=bert-train",
        "--energy-policy=performance",
        "--wrap",
        "true",
    ]);
    let s = c.wait_done(&fast);
    let site = |s: &str| -> i32 {
        field(s, "site=")
            .parse()
            .unwrap_or_else(|_| panic!("no site= in AdminComment: {s}"))
    };
    let site_full = site(&s);
    assert!(site_full < 0, "{s}");
    assert_eq!(field(&s, "Nice="), "0", "{s}");

    // An edit to heshare.toml takes effect at the next submission (here: a range ten times as
    // large), and a broken edit is logged while the previous configuration stays in force.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    std::fs::write(
        &cfg_path,
        shipped().replacen("priority_range = 100", "priority_range = 1000", 1),
    )
    .expect("write");
    let perf = [
        "--gres=gpu:1",
        "--gpu-class=bert-train",
        "--energy-policy=performance",
        "--wrap",
        "true",
    ];
    let again = c.sbatch(&perf);
    let s = c.wait_done(&again);
    let site_large = site(&s);
    assert!(
        (-1000..=-1).contains(&site_large) && site_large < site_full,
        "site factor {site_large} after the edit, {site_full} before: {s}"
    );
    std::thread::sleep(std::time::Duration::from_millis(1100));
    std::fs::write(
        &cfg_path,
        shipped().replacen("priority_range = 100", "priority_range = -3", 1),
    )
    .expect("write");
    let kept = c.sbatch(&perf);
    let s = c.wait_done(&kept);
    assert_eq!(
        site(&s),
        site_large,
        "the last good configuration stays: {s}"
    );
    assert!(
        c.read("log/slurmctld.log").contains("heshare.toml:"),
        "the broken edit is logged with its line"
    );

    assert!(alive(&ctld), "slurmctld died during the test");
    assert!(
        !c.read("log/slurmctld.log").contains("heshare: panic"),
        "a panic was logged"
    );
}

#[test]
fn a_broken_config_stops_slurmctld_at_init_naming_file_line_and_field() {
    let plugin = plugin_path();
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("heshare.toml");
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("slurm-conf/heshare.toml"),
    )
    .expect("shipped config");
    std::fs::write(
        &bad,
        text.replacen(
            "default_sm_clock_mhz = 1410",
            "default_sm_clock_mhz = 1420",
            1,
        ),
    )
    .expect("write");
    let r = Cluster::try_start(
        "broken",
        &[
            ("HESHARE_PLUGIN", plugin.to_str().expect("utf-8")),
            ("HESHARE_CONFIG", bad.to_str().expect("utf-8")),
        ],
    );
    let out = match r {
        Ok(c) => panic!(
            "slurmctld started with a broken heshare.toml:\n{}",
            c.read("log/slurmctld.log")
        ),
        Err(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
    };
    let line = std::fs::read_to_string(&bad)
        .expect("read")
        .lines()
        .position(|l| l.starts_with("default_sm_clock_mhz = 1420"))
        .expect("the broken line")
        + 1;
    assert!(
        out.contains(&format!(
            "heshare: {}:{line}: gpu.a100.default_sm_clock_mhz: 1420 MHz is not a supported clock",
            bad.display()
        )),
        "{out}"
    );
}
