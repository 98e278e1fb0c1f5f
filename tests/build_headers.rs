//! Regression for issue 19: a build made before `libslurm-dev` was installed kept its
//! header-less plugin after the install, because dpkg gives the installed headers the package's
//! old mtime and cargo saw nothing newer than its last build; slurmctld then refused the plugin
//! ("Plugin name/type/version symbol missing", fatal). Here the crate is built into a target
//! directory of its own against an include directory the test controls, the way a site meets
//! it: no headers, then headers with old mtimes, then a new version of them (replaced by rename,
//! as dpkg does), then none again; after each build the plugin's exported `plugin_version` is
//! read back by loading the library.
//!
//! Needs the installed Slurm headers (`bash .ci/run` installs libslurm-dev) and the registry
//! cargo already fetched for this build (the nested build runs `--offline`).

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

/// `SLURM_VERSION_NUMBER` in a Slurm header's text.
fn version_in(text: &str) -> Option<u32> {
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        if it.next() == Some("#define") && it.next() == Some("SLURM_VERSION_NUMBER") {
            u32::from_str_radix(it.next()?.trim_start_matches("0x"), 16).ok()
        } else {
            None
        }
    })
}

/// Builds the library against `include` into `target`; returns cargo's stderr.
fn build(include: &Path, target: &Path) -> String {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let o = Command::new(cargo)
        .args(["build", "--lib", "--locked", "--offline", "--manifest-path"])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .arg("--target-dir")
        .arg(target)
        .env("SLURM_INCLUDE_DIR", include)
        .output()
        .expect("cargo runs");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "cargo build failed:\n{err}");
    err
}

/// The built library's exported `plugin_version`, or `None` when it has no such symbol. Each
/// call loads a copy under a new name, so the dynamic loader cannot hand back an earlier build.
fn plugin_version(target: &Path, copy: &Path) -> Option<u32> {
    std::fs::copy(target.join("debug/libheshare.so"), copy).expect("copy the library");
    let path = CString::new(copy.to_str().expect("utf-8")).expect("no NUL");
    // SAFETY: dlopen with a valid NUL-terminated path; the library has no link-time reference to
    // a Slurm symbol (DESIGN rule 3), so loading it runs nothing of Slurm's.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!handle.is_null(), "dlopen {}", copy.display());
    let sym = CString::new("plugin_version").expect("no NUL");
    // SAFETY: a valid handle and symbol name.
    let p = unsafe { libc::dlsym(handle, sym.as_ptr()) };
    // SAFETY: `plugin_version` is a `u32` static in the library (src/slurm/ffi.rs), which stays
    // mapped while the handle is open.
    let v = (!p.is_null()).then(|| unsafe { *(p as *const u32) });
    // Left loaded on purpose: the library pins itself, and the copy's name is never reused.
    v
}

/// `scripts/install.sh --check-plugin LIB`: (success, what it printed).
fn install_check(lib: &Path) -> (bool, String) {
    let o = Command::new("bash")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/install.sh"))
        .arg("--check-plugin")
        .arg(lib)
        .output()
        .expect("bash runs");
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

/// Gives every file under `dir` an mtime in 2001, older than any build: what dpkg leaves.
fn age(dir: &Path) {
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(978_307_200);
    for e in std::fs::read_dir(dir).expect("read_dir") {
        let p = e.expect("entry").path();
        std::fs::File::options()
            .write(true)
            .open(&p)
            .and_then(|f| f.set_modified(old))
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    }
}

#[test]
fn the_plugin_follows_the_slurm_headers_as_they_appear_change_and_go() {
    let real = PathBuf::from("/usr/include/slurm");
    let version_h = real.join("slurm_version.h");
    let text = std::fs::read_to_string(&version_h)
        .or_else(|_| std::fs::read_to_string(real.join("slurm.h")))
        .expect("the Slurm headers are installed (libslurm-dev; bash .ci/run installs it)");
    let installed = version_in(&text).expect("SLURM_VERSION_NUMBER in the installed headers");

    let tmp = tempfile::tempdir().expect("tempdir");
    let include = tmp.path().join("include");
    let target = tmp.path().join("target");
    std::fs::create_dir(&include).expect("mkdir");
    let copy = |n: u32| tmp.path().join(format!("lib-{n}.so"));

    // 1. No headers: the library builds, without the plugin.
    let err = build(&include, &target);
    assert!(err.contains("Slurm headers not found"), "{err}");
    assert_eq!(
        plugin_version(&target, &copy(1)),
        None,
        "built without headers"
    );
    let (ok, said) = install_check(&copy(1));
    assert!(
        !ok && said.contains("built without Slurm headers") && said.contains("libslurm-dev"),
        "install.sh must refuse a header-less plugin: {said}"
    );

    // 2. The headers arrive with old mtimes (as from dpkg): the next build must see them.
    let slurm = include.join("slurm");
    std::fs::create_dir(&slurm).expect("mkdir");
    for e in std::fs::read_dir(&real).expect("read the installed headers") {
        let p = e.expect("entry").path();
        if p.is_file() {
            std::fs::copy(&p, slurm.join(p.file_name().expect("name"))).expect("copy header");
        }
    }
    age(&slurm);
    build(&include, &target);
    assert_eq!(
        plugin_version(&target, &copy(2)),
        Some(installed),
        "the headers that appeared after the first build are used"
    );
    let (ok, said) = install_check(&copy(2));
    assert!(ok, "install.sh accepts the rebuilt plugin: {said}");

    // 3. A new micro version, replaced by rename as dpkg unpacks it, again with an old mtime.
    let header = if slurm.join("slurm_version.h").exists() {
        slurm.join("slurm_version.h")
    } else {
        slurm.join("slurm.h")
    };
    let old_text = std::fs::read_to_string(&header).expect("header");
    let next = installed + 1;
    let new_text = old_text.replace(&format!("{installed:#x}"), &format!("{next:#x}"));
    assert_ne!(
        new_text, old_text,
        "the version number is written {installed:#x}"
    );
    let staged = slurm.join(".dpkg-new");
    std::fs::write(&staged, new_text).expect("write");
    std::fs::rename(&staged, &header).expect("rename");
    age(&slurm);
    build(&include, &target);
    assert_eq!(
        plugin_version(&target, &copy(3)),
        Some(next),
        "a changed header version rebuilds the plugin"
    );

    // 4. The headers go: the plugin goes with them.
    std::fs::remove_dir_all(&slurm).expect("rm");
    let err = build(&include, &target);
    assert!(err.contains("Slurm headers not found"), "{err}");
    assert_eq!(
        plugin_version(&target, &copy(4)),
        None,
        "headers removed, plugin gone"
    );
}
