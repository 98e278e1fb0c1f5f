//! Finds the Slurm headers the plugin must be built against (their `SLURM_VERSION_NUMBER` is the
//! `plugin_version` slurmctld checks) and tells the crate what it found.
//!
//! Against those headers it compiles the C shim (job_desc_msg_t's fields for job_submit) and
//! generates, with bindgen, the Rust layouts of the structs the snapshot thread reads from
//! Slurm's client API (node and job tables, job updates): no struct layout is written by hand.
//!
//! Without headers the library, the CLI and the simulator still build; the build says which
//! Debian package brings the headers, and the crate reports "built without Slurm headers".
//!
//! Headers that appear, disappear or change version later must re-run this script, and a file's
//! mtime cannot tell: dpkg gives installed files the package's own (old) mtime, older than the
//! last build, so `rerun-if-changed` on `slurm.h` alone saw nothing when `libslurm-dev` was
//! installed after a first build (issue 19). A directory's own mtime moves whenever an entry is
//! created, renamed or removed in it, and cargo counts it for a watched directory: so the script
//! watches `INCLUDE/slurm` where it exists, and `INCLUDE` itself (where `slurm/` would appear)
//! where it does not.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    println!("cargo:rustc-check-cfg=cfg(slurm_headers)");
    println!("cargo:rustc-check-cfg=cfg(slurm_job_modify_err_msg)");
    println!("cargo:rustc-check-cfg=cfg(slurm_desc_step_id)");
    // SLURM_INCLUDE_DIR names the Slurm to build against: only it is searched, so a wrong value
    // is an error an admin sees rather than a silent build against another Slurm.
    let dirs: Vec<PathBuf> = match std::env::var_os("SLURM_INCLUDE_DIR") {
        Some(d) => vec![PathBuf::from(d)],
        None => vec![PathBuf::from("/usr/include")],
    };
    for dir in &dirs {
        watch(dir);
    }
    for dir in &dirs {
        let header = dir.join("slurm").join("slurm.h");
        let version_header = dir.join("slurm").join("slurm_version.h");
        let Ok(text) =
            std::fs::read_to_string(&version_header).or_else(|_| std::fs::read_to_string(&header))
        else {
            continue;
        };
        match version_number(&text) {
            Some(v) => {
                println!("cargo:rustc-cfg=slurm_headers");
                println!("cargo:rustc-env=HESHARE_SLURM_VERSION_NUMBER={v}");
                println!(
                    "cargo:rustc-env=HESHARE_SLURM_INCLUDE_DIR={}",
                    dir.display()
                );
                let number = u32::from_str_radix(v.trim_start_matches("0x"), 16).unwrap_or(0);
                // job_modify() gained `char **err_msg` in Slurm 23.02.
                if number >= 0x17_02_00 {
                    println!("cargo:rustc-cfg=slurm_job_modify_err_msg");
                }
                // job_desc_msg_t's job_id became step_id.job_id in Slurm 26.05.
                if number >= 0x1a_05_00 {
                    println!("cargo:rustc-cfg=slurm_desc_step_id");
                }
                let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default());
                let _ = std::fs::write(
                    out.join("slurm_version.rs"),
                    format!(
                        "/// SLURM_VERSION_NUMBER of the headers this plugin was built against.\n\
                         pub const SLURM_VERSION_NUMBER: u32 = {number:#x};\n"
                    ),
                );
                // The shim is the only code that knows job_desc_msg_t's layout: compile it
                // against these very headers.
                println!("cargo:rerun-if-changed=c_shim/heshare_shim.c");
                println!("cargo:rerun-if-changed=c_shim/heshare_dbd.c");
                println!(
                    "cargo:rustc-env=HESHARE_LIBSLURM={}",
                    libslurm(dir).unwrap_or_else(|| "libslurm.so".into())
                );
                cc::Build::new()
                    .file("c_shim/heshare_shim.c")
                    .file("c_shim/heshare_dbd.c")
                    .include(dir)
                    .warnings(true)
                    .compile("heshare_shim");
                bindings(dir, &out);
                return;
            }
            None => println!(
                "cargo:warning={} has no SLURM_VERSION_NUMBER; is it a Slurm header?",
                version_header.display()
            ),
        }
    }
    println!(
        "cargo:warning=Slurm headers not found (looked for slurm/slurm.h in {}): the Slurm plugin \
         needs them; on Debian/Ubuntu install the package libslurm-dev, or set SLURM_INCLUDE_DIR",
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// The runtime name (soname) of the libslurm beside these headers, e.g. `libslurm.so.38` for
/// Debian 12's `/usr/lib/x86_64-linux-gnu/libslurm.so -> libslurm.so.38.0.0`: what the
/// accounting writer opens, which needs no development package where heshare runs.
fn libslurm(include: &std::path::Path) -> Option<String> {
    let prefix = include.parent()?;
    let mut dirs = vec![prefix.join("lib"), prefix.join("lib64")];
    if let Ok(entries) = std::fs::read_dir(prefix.join("lib")) {
        dirs.extend(entries.filter_map(Result::ok).map(|e| e.path()));
    }
    dirs.iter().find_map(|d| {
        let real = std::fs::canonicalize(d.join("libslurm.so")).ok()?;
        let name = real.file_name()?.to_str()?.to_owned();
        // libslurm.so.38.0.0 -> libslurm.so.38
        let mut parts = name.splitn(4, '.');
        let (a, b, c) = (parts.next()?, parts.next()?, parts.next()?);
        Some(format!("{a}.{b}.{c}"))
    })
}

/// Asks cargo to re-run this script when headers under `dir` appear, disappear or change (see
/// the module doc for why directories rather than files).
fn watch(dir: &std::path::Path) {
    let slurm = dir.join("slurm");
    if slurm.is_dir() {
        // Cargo takes the newest mtime of the directory and everything in it.
        println!("cargo:rerun-if-changed={}", slurm.display());
    } else {
        // Where `slurm/` would be created. A missing path makes cargo re-run the script on every
        // build, which is what a missing include directory should do.
        println!("cargo:rerun-if-changed={}", dir.display());
    }
}

/// Rust layouts of the Slurm client structs the snapshot thread reads, from these headers. Only
/// types and constants: the functions are looked up at run time (a cdylib must not reference a
/// Slurm symbol at link time, DESIGN.md section 1).
fn bindings(dir: &std::path::Path, out: &std::path::Path) {
    let generated = bindgen::Builder::default()
        .header_contents(
            "heshare_slurm.h",
            "#include <slurm/slurm.h>\n#include <slurm/slurm_errno.h>\n",
        )
        .clang_arg(format!("-I{}", dir.display()))
        .allowlist_type("node_info_msg_t|job_info_msg_t|job_desc_msg_t")
        .allowlist_type("job_states|job_state_reason|node_states")
        .allowlist_var("JOB_STATE_BASE|NODE_STATE_BASE")
        .allowlist_var("NO_VAL|INFINITE|NICE_OFFSET|SLURM_NO_CHANGE_IN_DATA|SLURM_SUCCESS")
        .layout_tests(false)
        .generate_comments(false)
        .derive_debug(false)
        .generate();
    match generated {
        Ok(b) => {
            if let Err(e) = b.write_to_file(out.join("slurm_bindings.rs")) {
                panic!("cannot write the Slurm bindings: {e}");
            }
        }
        Err(e) => panic!(
            "bindgen could not read {}/slurm/slurm.h ({e}); it needs libclang: on Debian/Ubuntu \
             install the package libclang-dev",
            dir.display()
        ),
    }
}

/// `#define SLURM_VERSION_NUMBER 0x160508` -> `0x160508`.
fn version_number(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next() == Some("#define") && it.next() == Some("SLURM_VERSION_NUMBER"))
            .then(|| it.next().map(str::to_owned))
            .flatten()
    })
}
