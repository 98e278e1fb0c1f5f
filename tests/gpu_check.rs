//! `scripts/gpu-check.sh` on a machine without an NVIDIA driver (CI): in its default read-only
//! mode every GPU step is SKIPPED with its reason, the run exits 0, its facts and summary are
//! archived where the caller said, and the whole output stays short enough to paste into a note.
//! On a GPU machine the same command is the first real run.

use std::process::Command;

fn script() -> Command {
    let mut c = Command::new("bash");
    c.arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/gpu-check.sh"));
    c
}

#[test]
fn without_a_gpu_every_gpu_step_is_skipped_with_its_reason_and_everything_is_archived() {
    let nvidia_smi = Command::new("sh")
        .args(["-c", "command -v nvidia-smi"])
        .output()
        .expect("sh runs");
    assert!(
        !nvidia_smi.status.success(),
        "this test is for machines without an NVIDIA driver"
    );
    let out = tempfile::tempdir().expect("tempdir");
    let archive = out.path().join("archive");
    let o = script()
        .arg(env!("CARGO_BIN_EXE_heshare"))
        .env("HESHARE_GPU_CHECK_OUT", &archive)
        .env_remove("HESHARE_GPU_CHECK")
        .output()
        .expect("bash runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "exit {:?}:\n{text}", o.status.code());
    assert!(
        text.contains("read-only: no GPU setting is changed"),
        "{text}"
    );
    assert!(text.len() < 10_000, "{} characters", text.len());
    let summary = text
        .split("== summary")
        .nth(1)
        .unwrap_or_else(|| panic!("no summary:\n{text}"));
    assert!(summary.contains("step 0: PASS"), "{summary}");
    for step in 1..=7 {
        let line = summary
            .lines()
            .find(|l| l.starts_with(&format!("step {step}: ")))
            .unwrap_or_else(|| panic!("step {step} missing from the summary:\n{summary}"));
        let why = line.split("SKIPPED").nth(1).map(str::trim).unwrap_or("");
        assert!(
            line.contains("SKIPPED") && !why.is_empty(),
            "step {step} must be skipped with a reason: {line}"
        );
    }
    assert!(!summary.contains("FAIL"), "{summary}");
    for f in ["facts.txt", "summary.txt", "heshare.toml"] {
        assert!(archive.join(f).exists(), "{f} not archived");
    }
    let facts = std::fs::read_to_string(archive.join("facts.txt")).expect("facts");
    for fact in [
        "glibc:",
        "LD_LIBRARY_PATH:",
        "libnvidia-ml.so.1:",
        "cgroup fs:",
        "nobody:",
    ] {
        assert!(facts.contains(fact), "{fact} missing:\n{facts}");
    }
    let config = std::fs::read_to_string(archive.join("heshare.toml")).expect("config");
    assert!(
        config.contains("gpu_settings = \"read-only\""),
        "the helper would have managed GPU settings:\n{config}"
    );
    // Nothing is left behind in /tmp.
    let left: Vec<_> = std::fs::read_dir("/tmp")
        .expect("tmp")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("heshare-gpu-check.")
        })
        .collect();
    assert!(left.is_empty(), "work directories left: {left:?}");
}

#[test]
fn a_missing_binary_or_an_unknown_mode_is_named_and_nothing_is_built() {
    let o = script()
        .arg("/nonexistent/heshare")
        .output()
        .expect("bash runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no heshare binary at /nonexistent/heshare")
            && err.contains("never runs cargo"),
        "{err}"
    );
    let o = script()
        .arg(env!("CARGO_BIN_EXE_heshare"))
        .env("HESHARE_GPU_CHECK", "reckless")
        .output()
        .expect("bash runs");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("HESHARE_GPU_CHECK=reckless"));
}
