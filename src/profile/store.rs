//! The profile store on disk, and its update from the node helper's accounting logs.
//!
//! **Why a versioned JSON file and not a database.** One writer (`heshare profiles update`, run
//! by a timer) and one kind of reader (the plugin's snapshot thread, which loads it whole into
//! memory when its modification time changes). A file replaced by rename is read whole or not at
//! all by every reader, and an update killed half-way leaves the previous file as it was; there
//! is no server, no lock shared with slurmctld, no C library loaded into it, and an admin can
//! read it with `jq`. SQLite would add a C dependency inside slurmctld to answer lookups the
//! in-memory map answers faster. The file names its format and version, so a newer heshare
//! refuses an older or foreign file by name instead of misreading it.
//!
//! **How records reach the controller.** Every node's helper appends to its accounting log
//! (`[node] accounting_log`). The update reads the logs named in `[profiles] logs`, with `*` in
//! the file name for one log per node: a directory the nodes share with the controller (what
//! most sites have, e.g. NFS: set each node's `accounting_log` to `/shared/heshare/acct/NODE.
//! jsonl`), or logs copied there by the site's own means (rsync from a timer, a log shipper).
//! For each log it keeps a cursor (device, inode, offset), so each run reads only what was
//! appended; a rotated or truncated log is read again from its start, and a record filed twice
//! under one key is kept once (record ids).

use super::key::ProfileKey;
use super::learn::{Book, LearnLimits, Observation, Outcome, Sample};
use crate::config::Config;
use crate::node::record::{Basis, Record, RecordKind};
use crate::report::energy_note::JobEnergy;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

pub const FORMAT: &str = "heshare-profiles";
pub const VERSION: u32 = 1;

/// Where the update got to in one log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Cursor {
    pub dev: u64,
    pub ino: u64,
    pub offset: u64,
}

/// The store as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoreFile {
    pub format: String,
    pub version: u32,
    /// When the last update ran (Unix seconds).
    pub updated_s: f64,
    /// Per log path.
    #[serde(default)]
    pub cursors: BTreeMap<String, Cursor>,
    pub book: Book,
    /// Per job id: its energy, summed from the records read, until its note is in slurmdbd's
    /// AdminComment (and a while after, for records that come late; `slurm::dbd`). Kept in a
    /// file of its own beside the store ([`energy_path`]): slurmctld loads the store whole, and
    /// a day of jobs' notes is nothing it needs.
    #[serde(skip)]
    pub energy: BTreeMap<String, JobEnergy>,
    /// The cluster's `AccountingStorageType` at the last update that could ask, so that a
    /// cluster without slurmdbd is told so once, not on every update (in the same file).
    #[serde(skip)]
    pub accounting_storage: Option<String>,
}

pub const ENERGY_FORMAT: &str = "heshare-energy-notes";

/// The energy notes' file as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct EnergyFile {
    format: String,
    version: u32,
    #[serde(default)]
    accounting_storage: Option<String>,
    #[serde(default)]
    jobs: BTreeMap<String, JobEnergy>,
}

/// Where the update keeps the jobs' energy notes: `STORE.energy` beside the store.
pub fn energy_path(store: &Path) -> PathBuf {
    let mut name = store.file_name().unwrap_or_default().to_owned();
    name.push(".energy");
    store.with_file_name(name)
}

/// Reads the notes into `store` (none yet: empty).
fn load_energy(path: &Path, store: &mut StoreFile) -> Result<(), StoreError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(path)(e)),
    };
    let f: EnergyFile = serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    if f.format != ENERGY_FORMAT || f.version != VERSION {
        return Err(StoreError::Corrupt {
            path: path.to_owned(),
            message: format!(
                "format {} version {}; this heshare reads {ENERGY_FORMAT} version {VERSION}",
                f.format, f.version
            ),
        });
    }
    store.energy = f.jobs;
    store.accounting_storage = f.accounting_storage;
    Ok(())
}

impl StoreFile {
    pub fn new() -> StoreFile {
        StoreFile {
            format: FORMAT.into(),
            version: VERSION,
            updated_s: 0.0,
            cursors: BTreeMap::new(),
            book: Book::default(),
            energy: BTreeMap::new(),
            accounting_storage: None,
        }
    }
}

impl Default for StoreFile {
    fn default() -> Self {
        StoreFile::new()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not a heshare profile store: {message}", path.display())]
    Corrupt { path: PathBuf, message: String },
    #[error("{}: format {format} version {version}; this heshare reads {FORMAT} version {VERSION}", path.display())]
    Version {
        path: PathBuf,
        format: String,
        version: u32,
    },
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Reads the store. `Ok(None)` when there is none yet.
pub fn load(path: &Path) -> Result<Option<StoreFile>, StoreError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path)(e)),
    };
    parse(&bytes, path).map(Some)
}

/// Parses a store's bytes; `path` only names errors.
pub fn parse(bytes: &[u8], path: &Path) -> Result<StoreFile, StoreError> {
    #[derive(Deserialize)]
    struct Head {
        format: String,
        version: u32,
    }
    let corrupt = |e: serde_json::Error| StoreError::Corrupt {
        path: path.to_owned(),
        message: format!("line {} column {}: {e}", e.line(), e.column()),
    };
    let head: Head = serde_json::from_slice(bytes).map_err(corrupt)?;
    if head.format != FORMAT || head.version != VERSION {
        return Err(StoreError::Version {
            path: path.to_owned(),
            format: head.format,
            version: head.version,
        });
    }
    serde_json::from_slice(bytes).map_err(corrupt)
}

/// Replaces the store at `path` whole: a temporary file beside it (created exclusively, under a
/// name no one can guess), written and synced, then renamed over it. `before_rename` runs
/// between the two (a test kills the process there). Mode 0644: profiles name uids, job-name
/// stems and script fingerprints, which Slurm shows every user of its own accord.
pub fn save(path: &Path, store: &StoreFile, before_rename: &dyn Fn()) -> Result<(), StoreError> {
    let bytes = serde_json::to_vec(store).map_err(|e| io(path)(std::io::Error::other(e)))?;
    replace(path, &bytes, 0o644, before_rename)
}

/// `bytes` as the whole of `path`, by a synced temporary renamed over it.
fn replace(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    before_rename: &dyn Fn(),
) -> Result<(), StoreError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (mut f, tmp) = crate::node::secure::create_temp(dir, &name, mode).map_err(io(path))?;
    let written = f.write_all(bytes).and_then(|()| f.sync_all());
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(path)(e));
    }
    before_rename();
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(path)(e));
    }
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))
}

/// Holds the store's lock (`STORE.lock` beside it, `flock`) while the returned file lives: an
/// update and an admin's `forget` never interleave their read and replace.
pub fn lock(path: &Path) -> Result<std::fs::File, StoreError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(".lock");
    let lock_path = path.with_file_name(name);
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&lock_path)
        .map_err(io(&lock_path))?;
    use std::os::unix::io::AsRawFd;
    // SAFETY: flock on a descriptor this function owns; it blocks until the lock is ours.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(io(&lock_path)(std::io::Error::last_os_error()));
    }
    Ok(f)
}

/// Removes temporaries a killed update left beside the store (`.NAME.tmp-*`).
pub fn clean_temporaries(path: &Path) -> usize {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return 0;
    };
    let prefix = format!(".{}.tmp-", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .filter(|e| std::fs::remove_file(e.path()).is_ok())
        .count()
}

/// What one update did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct UpdateReport {
    pub logs: usize,
    pub records: usize,
    /// Job records that taught at least one key.
    pub taught: usize,
    /// Why the other job records taught nothing, counted.
    pub skipped: BTreeMap<String, usize>,
    /// Keys refused because the record's user or account does not own them.
    pub foreign: usize,
    /// Lines that were not records (`file:line: message`, the first few).
    pub unreadable: Vec<String>,
    pub unreadable_count: usize,
    pub profiles: usize,
}

/// A job record as the profiles learn it: its keys, and its run measured against the catalog's
/// numbers for the type it ran on (the idle power its share holds taken off, the clock's power
/// factor undone). `None` for idle records and records of jobs without keys.
pub fn observation(cfg: &Config, r: &Record) -> Option<Observation> {
    if r.kind != RecordKind::Job || r.profile_keys.is_empty() {
        return None;
    }
    let keys: Vec<ProfileKey> = r
        .profile_keys
        .iter()
        .filter_map(|k| ProfileKey::parse(k))
        .collect();
    let gpu = cfg.gpu_type(&r.gpu_type).map(|t| &cfg.gpu_types[t]);
    let runtime = r.duration_s();
    // The clock over the run, time-weighted: `f_default / f` and the power factor.
    let (mut stretch, mut factor, mut covered) = (0.0, 0.0, 0.0);
    if let Some(g) = gpu {
        let mut points: Vec<(f64, u32)> = r.clocks.iter().map(|c| (c.t, c.mhz)).collect();
        points.retain(|p| p.0 < r.end);
        for (i, &(t, mhz)) in points.iter().enumerate() {
            let from = t.max(r.start);
            let to = points.get(i + 1).map_or(r.end, |n| n.0).min(r.end);
            let dt = (to - from).max(0.0);
            let f = crate::units::Mhz(mhz.max(1));
            stretch += dt * f64::from(g.default_sm_clock.0) / f64::from(f.0);
            factor += dt * g.dvfs_power_factor(f);
            covered += dt;
        }
        let rest = (runtime - covered).max(0.0);
        stretch += rest;
        factor += rest * g.dvfs_power_factor(g.default_sm_clock);
    }
    let (stretch, factor) = if runtime > 0.0 {
        (stretch / runtime, factor / runtime)
    } else {
        (1.0, 1.0)
    };
    let ngpus = r.gpus.len().max(1);
    #[allow(clippy::cast_precision_loss)]
    let per_gpu_w = r.avg_w / ngpus as f64;
    let share = super::learn::share_fraction(r.share_pct);
    let dyn_frac = gpu.and_then(|g| {
        let span = (g.max_power.0 - g.idle_power.0) * factor;
        (span > 0.0 && r.energy_j.is_finite())
            .then(|| ((per_gpu_w - g.idle_power.0 * share) / span).clamp(0.0, 1.5))
    });
    Some(Observation {
        keys,
        uid: r.uid,
        account: r.account.clone(),
        gpu_type: r.gpu_type.clone(),
        outcome: r
            .exit
            .as_deref()
            .map_or(Outcome::Unknown, Outcome::of_exit_code2),
        energy_valid: r.complete && !r.counter_reset,
        time_limit_s: r.time_limit_s,
        sample: Sample {
            id: r.record_id.clone(),
            end_s: r.end,
            runtime_s: runtime,
            share_pct: r.share_pct,
            gpus: u32::try_from(ngpus).unwrap_or(1),
            stretch,
            dyn_frac: if r.outside_mps || r.mps_wait_s > 0.0 {
                None // Its power was not its share's alone.
            } else {
                dyn_frac
            },
            busy: r.busy_frac,
            memory_gib: r.max_memory_mib.map(|m| m / 1024.0),
            neighbour_busy: r.neighbour_busy,
            alone: r.basis == Basis::Whole && r.mps_wait_s <= 0.0,
        },
    })
}

/// The files a log pattern names now: the path itself, or with `*` in the file name every
/// matching regular file of the directory, sorted.
pub fn expand(pattern: &str) -> Vec<PathBuf> {
    let path = Path::new(pattern);
    let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return vec![];
    };
    if !name.contains('*') {
        return vec![path.to_owned()];
    }
    let dir = path.parent().unwrap_or(Path::new("/"));
    let parts: Vec<&str> = name.split('*').collect();
    let matches = |n: &str| {
        let (first, last) = (parts[0], parts[parts.len() - 1]);
        if !n.starts_with(first) || !n.ends_with(last) || n.len() < first.len() + last.len() {
            return false;
        }
        let mut rest = &n[first.len()..n.len() - last.len()];
        for p in &parts[1..parts.len() - 1] {
            match rest.find(p) {
                Some(i) => rest = &rest[i + p.len()..],
                None => return false,
            }
        }
        true
    };
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .filter(|e| matches(&e.file_name().to_string_lossy()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Reads what was appended to `log` since `cursor` and files each job record in `book`.
/// Returns the new cursor: past the last complete line (a line still being written is read next
/// time).
fn read_log(
    cfg: &Config,
    log: &Path,
    cursor: Option<Cursor>,
    book: &mut Book,
    limits: LearnLimits,
    report: &mut UpdateReport,
    mut energy: Option<&mut BTreeMap<String, JobEnergy>>,
) -> Result<Cursor, StoreError> {
    use std::os::unix::fs::MetadataExt;
    let mut f = std::fs::File::open(log).map_err(io(log))?;
    let meta = f.metadata().map_err(io(log))?;
    let (dev, ino) = (meta.dev(), meta.ino());
    // The same file, not shorter than where we were: go on from there; else from its start.
    let start = cursor
        .filter(|c| c.dev == dev && c.ino == ino && c.offset <= meta.len())
        .map_or(0, |c| c.offset);
    f.seek(SeekFrom::Start(start)).map_err(io(log))?;
    let mut reader = std::io::BufReader::new(f.take(meta.len() - start));
    let mut offset = start;
    let mut line_no = 0usize;
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line).map_err(io(log))?;
        if n == 0 || line.last() != Some(&b'\n') {
            break; // The end, or a line its writer has not finished.
        }
        offset += n as u64;
        line_no += 1;
        let text = String::from_utf8_lossy(&line);
        if text.trim().is_empty() {
            continue;
        }
        let record: Record = match serde_json::from_str(text.trim()) {
            Ok(r) => r,
            Err(e) => {
                report.unreadable_count += 1;
                if report.unreadable.len() < 5 {
                    report.unreadable.push(format!(
                        "{}: line {line_no} after byte {start}: {e}",
                        log.display()
                    ));
                }
                continue;
            }
        };
        report.records += 1;
        if let Some(notes) = energy.as_deref_mut()
            && record.kind == RecordKind::Job
            && !record.job_id.is_empty()
        {
            notes.entry(record.job_id.clone()).or_default().add(&record);
        }
        let Some(obs) = observation(cfg, &record) else {
            continue;
        };
        let filed = book.learn(&obs, limits);
        report.foreign += filed.foreign.len();
        if filed.taught > 0 {
            report.taught += 1;
        } else {
            let why = filed.skipped.unwrap_or(if filed.foreign.is_empty() {
                "already filed"
            } else {
                "keys of another user or account"
            });
            *report.skipped.entry(why.to_owned()).or_default() += 1;
        }
    }
    Ok(Cursor { dev, ino, offset })
}

/// One update: reads the store (a fresh one if none), files what the logs gained since, and
/// replaces the store atomically. A log that cannot be read is an error naming it; the store is
/// then left as it was.
pub fn update(
    cfg: &Config,
    store_path: &Path,
    now_s: f64,
    before_rename: &dyn Fn(),
) -> Result<UpdateReport, StoreError> {
    update_with(cfg, store_path, now_s, before_rename, None)
}

/// [`update`], and with `notes`, each job record's energy summed per job too (in the notes'
/// file, [`energy_path`]), then `notes` called on the store (to write them to slurmdbd) before
/// both are saved: a note written but not saved as written is found already there on the next
/// update.
pub fn update_with(
    cfg: &Config,
    store_path: &Path,
    now_s: f64,
    before_rename: &dyn Fn(),
    mut notes: Option<&mut dyn FnMut(&mut StoreFile)>,
) -> Result<UpdateReport, StoreError> {
    let _lock = lock(store_path)?;
    clean_temporaries(store_path);
    let mut store = load(store_path)?.unwrap_or_default();
    let notes_path = energy_path(store_path);
    if notes.is_some() {
        clean_temporaries(&notes_path);
        load_energy(&notes_path, &mut store)?;
    }
    let mut report = UpdateReport::default();
    let limits = cfg.profiles.learn_limits();
    let mut cursors = BTreeMap::new();
    for pattern in &cfg.profiles.logs {
        for log in expand(pattern) {
            let key = log.to_string_lossy().into_owned();
            if !log.exists() {
                continue; // A node that has run no job yet.
            }
            let c = read_log(
                cfg,
                &log,
                store.cursors.get(&key).copied(),
                &mut store.book,
                limits,
                &mut report,
                notes.is_some().then_some(&mut store.energy),
            )?;
            report.logs += 1;
            cursors.insert(key, c);
        }
    }
    store.cursors = cursors;
    store.updated_s = now_s;
    if let Some(publish) = notes.as_mut() {
        publish(&mut store);
        // Before the store: killed between the two, the logs are read again from the old
        // cursors, and a record already summed counts once (its id).
        let f = EnergyFile {
            format: ENERGY_FORMAT.into(),
            version: VERSION,
            accounting_storage: store.accounting_storage.clone(),
            jobs: std::mem::take(&mut store.energy),
        };
        let bytes =
            serde_json::to_vec(&f).map_err(|e| io(&notes_path)(std::io::Error::other(e)))?;
        replace(&notes_path, &bytes, 0o600, &|| {})?;
    }
    report.profiles = store.book.profiles.len();
    save(store_path, &store, before_rename)?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BUNDLED_CONFIG;
    use crate::node::gpu::BackendKind;
    use crate::node::state::ClockChange;

    fn cfg(dir: &Path) -> Config {
        let mut c = Config::parse(BUNDLED_CONFIG, Path::new("h.toml")).expect("config");
        c.profiles.logs = vec![format!("{}/acct/*.jsonl", dir.display())];
        c
    }

    fn record(id: &str, uid: u32, exit: &str) -> Record {
        Record {
            record_id: id.into(),
            kind: RecordKind::Job,
            node: "n1".into(),
            job_id: "7".into(),
            user: "alice".into(),
            uid,
            account: "physics".into(),
            class: None,
            gpus: vec![0],
            gpu_type: "a100".into(),
            share_pct: None,
            clocks: vec![ClockChange {
                t: 100.0,
                mhz: 1410,
            }],
            start: 100.0,
            end: 1100.0,
            energy_j: 300_000.0,
            avg_w: 300.0,
            backend: BackendKind::Model,
            counter_reset: false,
            complete: true,
            basis: Basis::Whole,
            mps_wait_s: 0.0,
            outside_mps: false,
            notes: vec![],
            clock_control: true,
            profile_keys: vec![
                "script:1000:0123456789abcdef".into(),
                "request:physics:gpu%3A1".into(),
            ],
            exit: Some(exit.into()),
            busy_frac: None,
            neighbour_busy: None,
            max_memory_mib: None,
            time_limit_s: None,
        }
    }

    fn append(path: &Path, records: &[Record]) {
        std::fs::create_dir_all(path.parent().expect("dir")).expect("mkdir");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("open");
        for r in records {
            writeln!(f, "{}", serde_json::to_string(r).expect("json")).expect("write");
        }
    }

    #[test]
    fn energy_notes_live_beside_the_store_and_a_record_read_again_counts_once() {
        let dir = tempfile::tempdir().expect("tmp");
        let cfg = cfg(dir.path());
        let store = dir.path().join("profiles.json");
        let log = dir.path().join("acct/n1.jsonl");
        append(&log, &[record("a", 1000, "0:0")]);
        let mut seen = Vec::new();
        let mut notes = |s: &mut StoreFile| {
            seen.push(s.energy.get("7").map(|e| e.energy_j));
        };
        update_with(&cfg, &store, 1.0, &|| {}, Some(&mut notes)).expect("update");
        // The log rotated (read again from its start): the record is in the sum once.
        std::fs::remove_file(&log).expect("rm");
        append(&log, &[record("a", 1000, "0:0"), record("b", 1000, "0:0")]);
        update_with(&cfg, &store, 2.0, &|| {}, Some(&mut notes)).expect("update");
        assert_eq!(seen, [Some(300_000.0), Some(600_000.0)]);
        let text = std::fs::read_to_string(&store).expect("store");
        assert!(
            !text.contains("energy_j"),
            "the store slurmctld loads holds no notes"
        );
        let notes_text = std::fs::read_to_string(energy_path(&store)).expect("notes");
        assert!(notes_text.contains(ENERGY_FORMAT), "{notes_text}");
        // Without notes asked for, the update leaves their file alone.
        update(&cfg, &store, 3.0, &|| {}).expect("update");
        assert_eq!(
            std::fs::read_to_string(energy_path(&store)).expect("notes"),
            notes_text
        );
    }

    #[test]
    fn a_record_is_measured_against_the_catalog() {
        let dir = tempfile::tempdir().expect("tmp");
        let cfg = cfg(dir.path());
        let o = observation(&cfg, &record("a", 1000, "0:0")).expect("a job with keys");
        let a100 = &cfg.gpu_types[cfg.gpu_type("a100").expect("a100")];
        let want = (300.0 - a100.idle_power.0)
            / ((a100.max_power.0 - a100.idle_power.0)
                * a100.dvfs_power_factor(a100.default_sm_clock));
        assert!((o.sample.dyn_frac.expect("power") - want).abs() < 1e-9);
        assert!((o.sample.stretch - 1.0).abs() < 1e-9);
        assert!(o.sample.alone);
        assert_eq!(o.outcome, Outcome::Completed);
        let mut idle = record("b", 1000, "0:0");
        idle.kind = RecordKind::Idle;
        assert!(observation(&cfg, &idle).is_none());
    }

    #[test]
    fn updates_read_only_what_was_appended_and_skip_what_does_not_teach() {
        let dir = tempfile::tempdir().expect("tmp");
        let cfg = cfg(dir.path());
        let store = dir.path().join("profiles.json");
        let log = dir.path().join("acct/n1.jsonl");
        append(&log, &[record("a", 1000, "0:0"), record("b", 1000, "1:0")]);
        let r = update(&cfg, &store, 5000.0, &|| {}).expect("update");
        assert_eq!((r.records, r.taught), (2, 1));
        assert_eq!(r.skipped.get("failed"), Some(&1));
        // A torn line is not read until its writer finishes it.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .and_then(|mut f| f.write_all(b"{\"record_id\":\"c\""))
            .expect("torn");
        let r = update(&cfg, &store, 5001.0, &|| {}).expect("update");
        assert_eq!(r.records, 0, "nothing new was complete");
        // Another user's job naming uid 1000's script key teaches only the account's key.
        let mut forged = record("d", 1001, "0:0");
        forged.record_id = "d".into();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .and_then(|mut f| {
                writeln!(f, ",\"kind\":\"job\"}}")?;
                writeln!(f, "{}", serde_json::to_string(&forged).expect("json"))
            })
            .expect("append");
        let r = update(&cfg, &store, 5002.0, &|| {}).expect("update");
        assert_eq!((r.records, r.taught, r.foreign), (1, 1, 1));
        assert_eq!(r.unreadable_count, 1, "{:?}", r.unreadable);
        let s = load(&store).expect("readable").expect("exists");
        let script = &s.book.profiles["script:1000:0123456789abcdef"];
        assert_eq!(
            script.runs(),
            1,
            "uid 1001 taught uid 1000's script nothing"
        );
        assert_eq!(s.book.profiles["request:physics:gpu%3A1"].runs(), 2);
    }

    #[test]
    fn a_killed_update_leaves_the_previous_store_and_the_next_one_cleans_up() {
        let dir = tempfile::tempdir().expect("tmp");
        let cfg = cfg(dir.path());
        let store = dir.path().join("profiles.json");
        append(
            &dir.path().join("acct/n1.jsonl"),
            &[record("a", 1000, "0:0")],
        );
        update(&cfg, &store, 1.0, &|| {}).expect("first");
        let before = std::fs::read(&store).expect("store");
        append(
            &dir.path().join("acct/n2.jsonl"),
            &[record("b", 1000, "0:0")],
        );
        // Stands in for a kill between write and rename: the rename never happens.
        let r = std::panic::catch_unwind(|| update(&cfg, &store, 2.0, &|| panic!("killed")));
        assert!(r.is_err());
        assert_eq!(std::fs::read(&store).expect("store"), before);
        let r = update(&cfg, &store, 3.0, &|| {}).expect("again");
        assert_eq!(r.taught, 1);
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .expect("dir")
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn a_foreign_or_corrupt_file_is_named_not_misread() {
        let p = Path::new("s.json");
        assert!(matches!(
            parse(b"{\"format\":\"x\",\"version\":1}", p),
            Err(StoreError::Version { .. })
        ));
        let e = parse(b"{\"format\":\"heshare-profiles\",\"vers", p).expect_err("corrupt");
        assert!(
            e.to_string()
                .starts_with("s.json: not a heshare profile store: line 1"),
            "{e}"
        );
    }
}
