//! Finds the Slurm headers the plugin must be built against (their `SLURM_VERSION_NUMBER` is the
//! `plugin_version` slurmctld checks) and tells the crate what it found.
//!
//! Without headers the library, the CLI and the simulator still build; the build says which
//! Debian package brings the headers, and the crate reports "built without Slurm headers".

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    println!("cargo:rustc-check-cfg=cfg(slurm_headers)");
    let dirs: Vec<PathBuf> = std::env::var_os("SLURM_INCLUDE_DIR")
        .map(PathBuf::from)
        .into_iter()
        .chain([PathBuf::from("/usr/include")])
        .collect();
    for dir in &dirs {
        let header = dir.join("slurm").join("slurm.h");
        let version_header = dir.join("slurm").join("slurm_version.h");
        println!("cargo:rerun-if-changed={}", header.display());
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
                cc::Build::new()
                    .file("c_shim/heshare_shim.c")
                    .include(dir)
                    .warnings(true)
                    .compile("heshare_shim");
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

/// `#define SLURM_VERSION_NUMBER 0x160508` -> `0x160508`.
fn version_number(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next() == Some("#define") && it.next() == Some("SLURM_VERSION_NUMBER"))
            .then(|| it.next().map(str::to_owned))
            .flatten()
    })
}
