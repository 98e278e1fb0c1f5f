//! What the node helper does with the file system as root, done so that nothing a job's user
//! controls can steer it: programs it runs are root-owned and not writable by others (nor are
//! their directories), directories it creates or uses are checked level by level for symlinks
//! and foreign owners, and files it writes are created exclusively, never through a symlink,
//! with private modes. The helper also runs under umask 077.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// Why a path is not safe for root to use.
#[derive(Debug, thiserror::Error)]
pub enum SecureError {
    #[error("{}: {why}", path.display())]
    Unsafe { path: PathBuf, why: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn unsafe_path(path: &Path, why: impl Into<String>) -> SecureError {
    SecureError::Unsafe {
        path: path.to_owned(),
        why: why.into(),
    }
}

/// The uid files must belong to: root, or the helper's own uid when it runs unprivileged (the
/// tests' own directories then).
fn trusted_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether someone other than root (or the helper's uid) may rename or replace entries of a
/// directory: world-writable without the sticky bit that stops that (`/tmp` has it), or
/// group-writable by a group that users can be in. System groups (gid below 1000) are daemons'
/// (Ubuntu's `/var/log` is `root:syslog 0775`) and are trusted like root.
fn dir_open_to_others(meta: &std::fs::Metadata) -> bool {
    let mode = meta.mode();
    let sticky = mode & 0o1000 != 0;
    (mode & 0o002 != 0 && !sticky) || (mode & 0o020 != 0 && meta.gid() >= 1000 && !sticky)
}

/// Checks that `program` is safe for root to run: an absolute path to a regular file owned by
/// root (or the helper's own uid) and writable by nobody else, in directories with the same
/// properties all the way up.
pub fn check_program(program: &Path) -> Result<(), SecureError> {
    if !program.is_absolute() {
        return Err(unsafe_path(
            program,
            "not an absolute path (root must not look programs up in PATH)",
        ));
    }
    let real = std::fs::canonicalize(program).map_err(|source| SecureError::Io {
        path: program.to_owned(),
        source,
    })?;
    let meta = std::fs::metadata(&real).map_err(|source| SecureError::Io {
        path: real.clone(),
        source,
    })?;
    if !meta.is_file() {
        return Err(unsafe_path(&real, "not a regular file"));
    }
    let owner = trusted_uid();
    if meta.uid() != 0 && meta.uid() != owner {
        return Err(unsafe_path(
            &real,
            format!("owned by uid {}, not root", meta.uid()),
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(unsafe_path(
            &real,
            format!(
                "writable by group or others (mode {:o})",
                meta.mode() & 0o7777
            ),
        ));
    }
    trusted_dirs(real.parent(), "a directory of the program")
}

/// Checks `dir` and every directory above it: owned by root (or the helper's uid) and not open
/// to others (see [`dir_open_to_others`]). `what` names the role for the error.
fn trusted_dirs(mut dir: Option<&Path>, what: &str) -> Result<(), SecureError> {
    let owner = trusted_uid();
    while let Some(d) = dir {
        let m = std::fs::metadata(d).map_err(|source| SecureError::Io {
            path: d.to_owned(),
            source,
        })?;
        if (m.uid() != 0 && m.uid() != owner) || dir_open_to_others(&m) {
            return Err(unsafe_path(
                d,
                format!(
                    "{what} that someone else can change (owner {}, mode {:o})",
                    m.uid(),
                    m.mode() & 0o7777
                ),
            ));
        }
        dir = d.parent();
    }
    Ok(())
}

/// Checks that root may load libraries from `dir` (a program it runs gets it as
/// `LD_LIBRARY_PATH`): an absolute path to a directory that, like every directory above it,
/// belongs to root and is not open to others.
pub fn check_library_dir(dir: &Path) -> Result<(), SecureError> {
    if !dir.is_absolute() {
        return Err(unsafe_path(dir, "not an absolute path"));
    }
    let real = std::fs::canonicalize(dir).map_err(|source| SecureError::Io {
        path: dir.to_owned(),
        source,
    })?;
    if !real.is_dir() {
        return Err(unsafe_path(&real, "not a directory"));
    }
    trusted_dirs(Some(&real), "a library directory")
}

/// Makes `dir` exist, checking every level from `/` down: each component must be a real
/// directory (not a symlink), owned by root (or the helper's uid), and not open to others (see
/// [`dir_open_to_others`]). Missing levels are created with `mode`; existing ones keep theirs
/// (an admin's `/var/log` is not the helper's to change).
pub fn ensure_dir(dir: &Path, mode: u32) -> Result<(), SecureError> {
    walk_dir(dir, mode, false)
}

/// [`ensure_dir`] for a directory that is the helper's alone (a node's state, an MPS daemon's
/// directories): an existing one is also set to `mode`, so an older install's looser
/// permissions do not survive.
pub fn ensure_own_dir(dir: &Path, mode: u32) -> Result<(), SecureError> {
    walk_dir(dir, mode, true)
}

fn walk_dir(dir: &Path, mode: u32, tighten: bool) -> Result<(), SecureError> {
    if !dir.is_absolute() {
        return Err(unsafe_path(dir, "not an absolute path"));
    }
    if dir.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(unsafe_path(dir, "contains \"..\""));
    }
    let owner = trusted_uid();
    let parts: Vec<OsString> = dir
        .components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p.to_owned()),
            _ => None,
        })
        .collect();
    let mut at = PathBuf::from("/");
    let last = parts.len();
    for (k, part) in parts.iter().enumerate() {
        at.push(part);
        let mut created = false;
        let meta = match std::fs::symlink_metadata(&at) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut b = std::fs::DirBuilder::new();
                b.mode(mode);
                match b.create(&at) {
                    Ok(()) => created = true,
                    // Another helper made it between the two calls: check it like any other.
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(source) => return Err(SecureError::Io { path: at, source }),
                }
                std::fs::symlink_metadata(&at).map_err(|source| SecureError::Io {
                    path: at.clone(),
                    source,
                })?
            }
            Err(source) => return Err(SecureError::Io { path: at, source }),
        };
        if meta.file_type().is_symlink() {
            return Err(unsafe_path(&at, "a symbolic link"));
        }
        if !meta.is_dir() {
            return Err(unsafe_path(&at, "not a directory"));
        }
        if meta.uid() != 0 && meta.uid() != owner {
            return Err(unsafe_path(
                &at,
                format!("owned by uid {}, not root", meta.uid()),
            ));
        }
        // The umask may have taken bits off a level just made; the helper's own last level is
        // set to exactly its mode.
        let set = (created || (tighten && k + 1 == last)) && meta.mode() & 0o7777 != mode;
        if set {
            std::fs::set_permissions(&at, std::fs::Permissions::from_mode(mode)).map_err(
                |source| SecureError::Io {
                    path: at.clone(),
                    source,
                },
            )?;
        } else if dir_open_to_others(&meta) {
            return Err(unsafe_path(
                &at,
                format!(
                    "others can write to it (mode {:o}, group {})",
                    meta.mode() & 0o7777,
                    meta.gid()
                ),
            ));
        }
    }
    Ok(())
}

/// A new file in `dir`, created exclusively (never an existing file, never through a symlink)
/// with exactly `mode` and a name no one can guess: `.NAME.tmp-RANDOM`.
pub fn create_temp(dir: &Path, name: &str, mode: u32) -> std::io::Result<(File, PathBuf)> {
    let mut seed = [0u8; 8];
    if let Ok(mut r) = File::open("/dev/urandom") {
        let _ = std::io::Read::read_exact(&mut r, &mut seed);
    }
    let mut n = u64::from_le_bytes(seed) ^ u64::from(std::process::id());
    for _ in 0..16 {
        let path = dir.join(format!(".{name}.tmp-{n:016x}"));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
        {
            Ok(f) => {
                // Exactly `mode`: the helper's umask (077) would take a public file's bits off.
                f.set_permissions(std::fs::Permissions::from_mode(mode))?;
                return Ok((f, path));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                n = n.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1);
            }
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AlreadyExists,
        format!("{}: no free temporary name", dir.display()),
    ))
}

/// Opens (creating if missing, mode 0600) a file to append to, never through a symlink.
pub fn open_append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// The helper's umask: nothing it creates is readable by others unless it says so.
pub fn private_umask() {
    // SAFETY: umask only sets the process's file mode creation mask.
    unsafe {
        libc::umask(0o077);
    }
}

/// The only environment a command the helper runs as root gets, besides what it passes itself.
pub const COMMAND_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_others_can_change_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("prog");
        std::fs::write(&p, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert!(check_program(&p).is_ok(), "{:?}", check_program(&p));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o775)).expect("chmod");
        let e = check_program(&p).expect_err("group-writable");
        assert!(e.to_string().contains("writable by group or others"), "{e}");
        assert!(check_program(Path::new("nvidia-cuda-mps-control")).is_err());
    }

    #[test]
    fn a_symlink_anywhere_in_a_directory_tree_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().join("real");
        std::fs::create_dir(&real).expect("mkdir");
        std::os::unix::fs::symlink(&real, dir.path().join("link")).expect("symlink");
        let e = ensure_dir(&dir.path().join("link/node/gpu0"), 0o755).expect_err("symlink");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        ensure_dir(&dir.path().join("fine/node/gpu0"), 0o700).expect("plain tree");
        let m = std::fs::metadata(dir.path().join("fine/node/gpu0")).expect("exists");
        assert_eq!(m.mode() & 0o7777, 0o700);
        // A level anyone may write to lets them swap what lies below it.
        let open = dir.path().join("open");
        std::fs::create_dir(&open).expect("mkdir");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let e = ensure_dir(&open.join("node"), 0o700).expect_err("world-writable level");
        assert!(e.to_string().contains("others can write"), "{e}");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
        ensure_dir(&open.join("node"), 0o700).expect("sticky like /tmp");
    }

    #[test]
    fn a_level_another_user_owns_is_refused() {
        // Giving a directory away needs root, which the helper (and CI) runs as.
        if trusted_uid() != 0 {
            eprintln!("skipped: needs root to give a directory to another user");
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let theirs = dir.path().join("theirs");
        std::fs::create_dir(&theirs).expect("mkdir");
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).expect("chown");
        let e = ensure_dir(&theirs.join("node/gpu0"), 0o755).expect_err("foreign owner");
        assert!(
            e.to_string().contains("owned by uid 65534, not root"),
            "{e}"
        );
        assert!(!theirs.join("node").exists(), "created below it");
        let prog = theirs.join("prog");
        std::fs::write(&prog, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::os::unix::fs::chown(&theirs, Some(0), Some(0)).expect("chown");
        std::os::unix::fs::chown(&prog, Some(65534), Some(65534)).expect("chown");
        let e = check_program(&prog).expect_err("a program another user owns");
        assert!(e.to_string().contains("owned by uid 65534"), "{e}");
    }

    #[test]
    fn only_the_helpers_own_directories_are_tightened() {
        let dir = tempfile::tempdir().expect("tempdir");
        let shared = dir.path().join("log");
        std::fs::create_dir(&shared).expect("mkdir");
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        ensure_dir(&shared, 0o700).expect("existing");
        let mode = |p: &Path| std::fs::metadata(p).expect("exists").mode() & 0o7777;
        assert_eq!(mode(&shared), 0o755, "an admin's directory keeps its mode");
        ensure_own_dir(&shared, 0o700).expect("own");
        assert_eq!(mode(&shared), 0o700);
    }

    #[test]
    fn private_files_are_new_and_never_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_, a) = create_temp(dir.path(), "state.json", 0o600).expect("create");
        let (_, b) = create_temp(dir.path(), "state.json", 0o600).expect("create");
        assert_ne!(a, b);
        assert_eq!(std::fs::metadata(&a).expect("exists").mode() & 0o777, 0o600);
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").expect("write");
        let log = dir.path().join("log");
        std::os::unix::fs::symlink(&victim, &log).expect("symlink");
        assert!(open_append(&log).is_err(), "appended through a symlink");
        assert_eq!(std::fs::read_to_string(&victim).expect("read"), "keep");
    }
}
