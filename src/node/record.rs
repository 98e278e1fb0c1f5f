//! The accounting record: one JSON line per finished job, and one per closed idle interval of a
//! GPU, appended to the accounting log. `heshare report` reads these lines back.

use super::gpu::BackendKind;
use super::state::ClockChange;
use serde::{Deserialize, Serialize};
use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordKind {
    Job,
    /// A GPU's energy while no job held it.
    Idle,
}

/// How a job's energy was split from its GPU's counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Basis {
    /// By the GPU busy time the driver measured for the job's processes.
    Measured,
    /// By the power model and the job's declared class (no per-process measurement).
    #[default]
    Model,
    /// Some of each (measurement came or went during the job, or part of the work could not
    /// be tied to a job).
    Mixed,
    /// The job had its GPUs to itself: the counter is its own, nothing was split.
    Whole,
}

impl Basis {
    pub fn as_str(self) -> &'static str {
        match self {
            Basis::Measured => "measured",
            Basis::Model => "model",
            Basis::Mixed => "mixed",
            Basis::Whole => "whole",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Unique per record: NODE:JOB:END_MS for jobs, NODE:idle:GPU:START_MS for idle intervals.
    /// The log is checked for it before a retried append, so no record appears twice.
    pub record_id: String,
    pub kind: RecordKind,
    pub node: String,
    #[serde(default)]
    pub job_id: String,
    #[serde(default)]
    pub user: String,
    #[serde(default)]
    pub uid: u32,
    #[serde(default)]
    pub account: String,
    #[serde(default)]
    pub class: Option<String>,
    pub gpus: Vec<u32>,
    pub gpu_type: String,
    /// MPS share in percent, `None` for whole GPUs.
    #[serde(default)]
    pub share_pct: Option<u8>,
    /// SM clock over time (first GPU of the job); empty = default clock throughout.
    #[serde(default)]
    pub clocks: Vec<ClockChange>,
    pub start: f64,
    pub end: f64,
    pub energy_j: f64,
    pub avg_w: f64,
    pub backend: BackendKind,
    /// The GPU's energy counter restarted (driver reload) during the job: its energy is low.
    #[serde(default)]
    pub counter_reset: bool,
    /// False when the helper had no record of the job's start (its Prolog did not run or its
    /// state was lost): the energy is then only what could be seen.
    #[serde(default = "yes")]
    pub complete: bool,
    /// How `energy_j` was split from the GPU's counter (records before this field: model).
    #[serde(default)]
    pub basis: Basis,
    /// Seconds the job's GPU work waited for another user's MPS server to finish.
    #[serde(default)]
    pub mps_wait_s: f64,
    /// The MPS share ran outside MPS, time-sliced beside another user's MPS server: its share
    /// was held in Slurm but not enforced on the GPU.
    #[serde(default)]
    pub outside_mps: bool,
    /// What the helper noted about the job's GPUs around its end (a refused clock reset, a
    /// clock it only reported under `gpu_settings = "read-only"`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// False where `[node] gpu_settings = "read-only"` kept the helper from setting clocks: the
    /// GPU ran at whatever clock it had.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub clock_control: bool,
    /// The job's profile keys, as `job_submit` wrote them (`SPANK_HESHARE_PROFILE_KEYS`): what
    /// `heshare profiles update` files the run under.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub profile_keys: Vec<String>,
    /// How the job ended, as the Epilog was told (`SLURM_JOB_EXIT_CODE2`, `exit:signal`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<String>,
    /// The GPU busy fraction the driver measured for the job's processes (per GPU), where it
    /// measured it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_frac: Option<f64>,
    /// The GPU busy fraction the driver measured for the other jobs' processes on its GPUs while
    /// it ran (per GPU, summed over those jobs), where it measured it: how busy its neighbours
    /// were. A run beside idle neighbours says nothing of how much a busy one slows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neighbour_busy: Option<f64>,
    /// The most GPU memory the job's processes held, where the driver said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_mib: Option<f64>,
    /// The job's time limit (`SPANK_HESHARE_TIME_LIMIT_S`), where the plugin passed it: a run
    /// killed by a signal at its limit ran out of time, which its profile remembers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_s: Option<f64>,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

impl Record {
    pub fn duration_s(&self) -> f64 {
        (self.end - self.start).max(0.0)
    }
}

/// How far back from the end of the log a retried append looks for its record ids.
const TAIL_BYTES: u64 = 1 << 20;

/// Appends `records` to `log` as JSON lines in one write, skipping any whose id is already in
/// the log's tail (a retry after a kill between append and state update), then fsyncs. The log
/// names users and accounts: it is created 0600 (its directory 0700 when the helper makes it),
/// every level of its directory is checked, and a symlink in its place is refused.
pub fn append(log: &Path, records: &[Record]) -> std::io::Result<usize> {
    if records.is_empty() {
        return Ok(0);
    }
    if let Some(dir) = log.parent() {
        super::secure::ensure_dir(dir, 0o700).map_err(std::io::Error::other)?;
    }
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(log)?;
    let len = f.metadata()?.len();
    let mut tail = String::new();
    if len > 0 {
        f.seek(SeekFrom::Start(len.saturating_sub(TAIL_BYTES)))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        tail = String::from_utf8_lossy(&buf).into_owned();
    }
    let mut out = String::new();
    let mut n = 0;
    for r in records {
        let marker = format!("\"record_id\":{}", json_string(&r.record_id));
        if tail.contains(&marker) {
            continue;
        }
        out.push_str(&serde_json::to_string(r).map_err(std::io::Error::other)?);
        out.push('\n');
        n += 1;
    }
    if !out.is_empty() {
        // A torn last line (a crash mid-write on another node sharing the log) must not swallow
        // this record: start on a fresh line.
        if !tail.is_empty() && !tail.ends_with('\n') {
            out.insert(0, '\n');
        }
        f.write_all(out.as_bytes())?;
        f.sync_data()?;
    }
    Ok(n)
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

/// A job record for tests elsewhere in the crate: override the fields a test is about.
#[cfg(test)]
pub(crate) fn sample(id: &str) -> Record {
    tests::rec(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn rec(id: &str) -> Record {
        Record {
            record_id: id.into(),
            kind: RecordKind::Job,
            node: "n1".into(),
            job_id: "7".into(),
            user: "alice".into(),
            uid: 1000,
            account: "physics".into(),
            class: Some("bert-train".into()),
            gpus: vec![0],
            gpu_type: "a100".into(),
            share_pct: Some(40),
            clocks: vec![],
            start: 10.0,
            end: 20.0,
            energy_j: 1000.0,
            avg_w: 100.0,
            backend: BackendKind::Model,
            counter_reset: false,
            complete: true,
            basis: Basis::Measured,
            mps_wait_s: 0.0,
            outside_mps: false,
            notes: vec![],
            clock_control: true,
            profile_keys: vec![],
            exit: None,
            busy_frac: None,
            neighbour_busy: None,
            max_memory_mib: None,
            time_limit_s: None,
        }
    }

    #[test]
    fn a_retried_append_writes_each_record_once() {
        let dir = tempfile::tempdir().expect("tmp");
        let log = dir.path().join("sub/acct.jsonl");
        assert_eq!(append(&log, &[rec("a"), rec("b")]).expect("append"), 2);
        assert_eq!(append(&log, &[rec("b"), rec("c")]).expect("append"), 1);
        let text = std::fs::read_to_string(&log).expect("read");
        let ids: Vec<Record> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("json line"))
            .collect();
        let ids: Vec<&str> = ids.iter().map(|r| r.record_id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
    }

    #[test]
    fn a_torn_last_line_does_not_swallow_the_next_record() {
        let dir = tempfile::tempdir().expect("tmp");
        let log = dir.path().join("acct.jsonl");
        std::fs::write(&log, "{\"record_id\":\"x\",\"ki").expect("write");
        append(&log, &[rec("a")]).expect("append");
        let text = std::fs::read_to_string(&log).expect("read");
        let last = text.lines().last().expect("line");
        let r: Record = serde_json::from_str(last).expect("whole record on its own line");
        assert_eq!(r.record_id, "a");
    }
}
