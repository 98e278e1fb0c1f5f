//! A user's request is a contract, on a real local Slurm with heshare loaded (plugin, SPANK
//! options, node helper): a share nothing is known of keeps `gres:mps:P` and gres/mps's thread
//! limit; a batch job's own `srun --gres=mps:Q` steps run inside its allocation, and one asking
//! more than the job holds is refused for that reason; a job on several nodes is left as asked
//! whatever options it carries. With the site's opt-in (`[policy] resize_asked_shares`), a first
//! run still keeps its share, and a job whose script launches steps that ask for GRES keeps its
//! share and AdminComment says why. Needs root, slurm-wlm and munge.

mod common;

use common::{Cluster, gres, plugin_path};
use std::path::Path;

fn field<'a>(show: &'a str, key: &str) -> &'a str {
    show.split_whitespace()
        .find_map(|w| w.strip_prefix(key))
        .unwrap_or("")
}

fn admin_comment(show: &str) -> &str {
    show.lines()
        .find_map(|l| l.trim().strip_prefix("AdminComment="))
        .unwrap_or("")
}

/// Submits `args` with its output in the cluster's directory, waits for it to complete and
/// returns `scontrol show job` and what it printed.
fn run(c: &Cluster, args: &[&str]) -> (String, String) {
    let out = c.dir.join("out-%j");
    let mut all = vec!["-o", out.to_str().expect("utf-8")];
    all.extend_from_slice(args);
    let id = c.sbatch(&all);
    let show = c.wait_done(&id);
    (show, c.read(&format!("out-{id}")))
}

#[test]
fn a_request_keeps_its_gres_and_its_steps_run_unless_the_site_opts_in() {
    let plugin = plugin_path();
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg_path = tmp.path().join("heshare.toml");
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("slurm-conf/heshare.toml"),
    )
    .expect("shipped config");
    assert!(
        shipped.contains("\nresize_asked_shares = false\n"),
        "the bundled default"
    );
    let live = "\n[live]\nsnapshot_period_s = 1\nsnapshot_max_age_s = 30\n";
    std::fs::write(&cfg_path, format!("{shipped}{live}")).expect("write");
    let helper = env!("CARGO_BIN_EXE_heshare");
    let c = Cluster::start(
        "contract",
        &[
            ("HESHARE_PLUGIN", plugin.to_str().expect("utf-8")),
            ("HESHARE_CONFIG", cfg_path.to_str().expect("utf-8")),
            ("HESHARE_NODE_HELPER", helper),
        ],
    );
    c.wait_log("heshare: snapshot thread: ", 0);

    // The bundled settings: an unknown share on an idle cluster runs as asked.
    let (s, out) = run(&c, &["--gres=mps:30", "--wrap", "env"]);
    assert_eq!(field(&s, "TresPerNode="), gres("mps:30"), "{s}");
    assert!(admin_comment(&s).contains("request left as asked"), "{s}");
    assert!(
        out.contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30"),
        "{out}"
    );

    // Its own MPS steps run inside its allocation; one asking more than it holds is refused
    // because it is more, not because the job holds no MPS at all.
    let steps = c.dir.join("steps.sh");
    std::fs::write(
        &steps,
        "#!/bin/sh\n\
         srun --gres=mps:25 -n1 sh -c 'echo step=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE'\n\
         srun --gres=mps:50 -n1 sh -c 'echo step=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE'\n\
         srun --gres=mps:51 -n1 true 2>&1 || echo refused\n",
    )
    .expect("script");
    let steps = steps.to_str().expect("utf-8");
    let (s, out) = run(&c, &["--gres=mps:50", steps]);
    assert_eq!(field(&s, "TresPerNode="), gres("mps:50"), "{s}");
    assert!(out.contains("step=25\nstep=50\n"), "{out}");
    // (22.05 says "is more than the job's gres_per_node=mps:50"; 24.11 only that the GRES
    // specification is invalid. A job holding no MPS is told its GRES is "not found in the job".)
    assert!(
        out.contains("refused") && !out.contains("not found in the job"),
        "{out}"
    );

    // A job on two nodes is Slurm's alone, even with heshare's options.
    let (s, _) = run(
        &c,
        &[
            "-N2",
            "--gres=mps:30",
            "--gpu-class=sd-infer",
            "--wrap",
            "srun true",
        ],
    );
    assert_eq!(field(&s, "TresPerNode="), gres("mps:30"), "{s}");
    assert_eq!(field(&s, "NumNodes="), "2", "{s}");
    assert!(
        admin_comment(&s).starts_with("heshare: a job on several nodes is left as asked"),
        "{s}"
    );

    // The site opts in; the plugin rereads its configuration at the next submission.
    std::fs::write(
        &cfg_path,
        format!(
            "{}{live}",
            shipped.replacen(
                "\nresize_asked_shares = false\n",
                "\nresize_asked_shares = true\n",
                1
            )
        ),
    )
    .expect("write");
    // A job nothing is known of still runs as asked: with no label and no profile there is
    // nothing to price a whole GPU or a wider share against, idle GPUs or not.
    let (s, out) = run(&c, &["--gres=mps:30", "--wrap", "env"]);
    assert_eq!(field(&s, "TresPerNode="), gres("mps:30"), "{s}");
    assert!(
        admin_comment(&s).contains("no profile of this job's runs yet, request left as asked"),
        "{s}"
    );
    assert!(
        out.contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30"),
        "{out}"
    );
    // Steps that ask for GRES keep their job's share under the opt-in too.
    let (s, out) = run(&c, &["--gres=mps:50", steps]);
    assert_eq!(field(&s, "TresPerNode="), gres("mps:50"), "{s}");
    assert!(
        admin_comment(&s).contains("its batch script launches steps that ask for GRES"),
        "{s}"
    );
    assert!(out.contains("step=25\nstep=50\n"), "{out}");

    let log = c.read("log/slurmctld.log");
    assert!(
        log.contains("changed, reloaded"),
        "the opt-in was not reloaded"
    );
    assert!(!log.contains("heshare: panic"), "a panic was logged");
}
