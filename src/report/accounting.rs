//! Energy accounting reports: the node helper's JSON-line records summed per job, user, account,
//! GPU type, node or day. Pure: the CLI reads the files and writes what this returns.

use crate::node::record::{Record, RecordKind};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// What a report groups by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GroupBy {
    Job,
    User,
    Account,
    GpuType,
    Node,
    Day,
}

impl GroupBy {
    pub fn label(self) -> &'static str {
        match self {
            GroupBy::Job => "job",
            GroupBy::User => "user",
            GroupBy::Account => "account",
            GroupBy::GpuType => "gpu_type",
            GroupBy::Node => "node",
            GroupBy::Day => "day",
        }
    }

    fn key(self, r: &Record) -> String {
        let or_none = |s: &str| {
            if s.is_empty() {
                "(none)".to_owned()
            } else {
                s.to_owned()
            }
        };
        match self {
            GroupBy::Job => format!("{}@{}", r.job_id, r.node),
            GroupBy::User => or_none(&r.user),
            GroupBy::Account => or_none(&r.account),
            GroupBy::GpuType => or_none(&r.gpu_type),
            GroupBy::Node => r.node.clone(),
            // A record belongs to the day (UTC) it ended.
            GroupBy::Day => utc_date(r.end),
        }
    }
}

/// One line of a report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub key: String,
    pub jobs: u64,
    pub energy_j: f64,
    pub energy_kwh: f64,
    /// GPU time held, with an MPS share counting as that fraction of a GPU.
    pub gpu_hours: f64,
    pub joules_per_gpu_hour: f64,
    pub avg_w: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub by: GroupBy,
    pub rows: Vec<Row>,
    /// Energy of GPUs while no job held them (and of the unheld part of shared GPUs).
    pub idle_j: f64,
    pub total_j: f64,
    /// Backends the records came from: "model" means modelled, not measured, energy.
    pub backends: Vec<String>,
    pub incomplete_jobs: u64,
    pub counter_resets: u64,
    /// Job records on shared GPUs whose energy the model split (wholly or in part), and the
    /// jobs that waited for another user's MPS server.
    pub modelled_splits: u64,
    pub mps_waits: u64,
    /// Jobs whose MPS share ran outside MPS beside another user's server (share not enforced).
    pub outside_mps: u64,
}

#[derive(Default)]
struct Acc {
    jobs: u64,
    energy_j: f64,
    gpu_s: f64,
    wall_s: f64,
}

/// GPU-seconds a job record held.
fn gpu_seconds(r: &Record) -> f64 {
    let share = r.share_pct.map_or(1.0, |p| f64::from(p) / 100.0);
    #[allow(clippy::cast_precision_loss)]
    let n = r.gpus.len().max(1) as f64;
    r.duration_s() * n * share
}

pub fn summarize(records: &[Record], by: GroupBy) -> Summary {
    let mut groups: BTreeMap<String, Acc> = BTreeMap::new();
    let mut idle_j = 0.0;
    let mut backends = Vec::new();
    let (mut incomplete, mut resets, mut modelled, mut waits, mut outside) = (0, 0, 0, 0, 0);
    for r in records {
        let b = r.backend.as_str().to_owned();
        if !backends.contains(&b) {
            backends.push(b);
        }
        match r.kind {
            RecordKind::Idle => idle_j += r.energy_j,
            RecordKind::Job => {
                let a = groups.entry(by.key(r)).or_default();
                a.jobs += 1;
                a.energy_j += r.energy_j;
                a.gpu_s += gpu_seconds(r);
                a.wall_s += r.duration_s();
                incomplete += u64::from(!r.complete);
                resets += u64::from(r.counter_reset);
                modelled += u64::from(
                    matches!(
                        r.basis,
                        crate::node::record::Basis::Model | crate::node::record::Basis::Mixed
                    ) && r.share_pct.is_some(),
                );
                waits += u64::from(r.mps_wait_s > 0.0);
                outside += u64::from(r.outside_mps);
            }
        }
    }
    let row = |key: String, a: &Acc| {
        let gpu_hours = a.gpu_s / 3600.0;
        Row {
            key,
            jobs: a.jobs,
            energy_j: a.energy_j,
            energy_kwh: a.energy_j / 3.6e6,
            gpu_hours,
            joules_per_gpu_hour: if gpu_hours > 0.0 {
                a.energy_j / gpu_hours
            } else {
                0.0
            },
            avg_w: if a.wall_s > 0.0 {
                a.energy_j / a.wall_s
            } else {
                0.0
            },
        }
    };
    let mut rows: Vec<Row> = groups.iter().map(|(k, a)| row(k.clone(), a)).collect();
    // Biggest consumers first, except for days, which read best in order.
    if by != GroupBy::Day {
        rows.sort_by(|a, b| b.energy_j.total_cmp(&a.energy_j).then(a.key.cmp(&b.key)));
    }
    let jobs_j: f64 = rows.iter().map(|r| r.energy_j).sum();
    backends.sort();
    Summary {
        by,
        rows,
        idle_j,
        total_j: jobs_j + idle_j,
        backends,
        incomplete_jobs: incomplete,
        modelled_splits: modelled,
        mps_waits: waits,
        outside_mps: outside,
        counter_resets: resets,
    }
}

/// `YYYY-MM-DD` (UTC) of a Unix time, by the days-from-civil inverse (Howard Hinnant's).
pub fn utc_date(unix_s: f64) -> String {
    #[allow(clippy::cast_possible_truncation)]
    let days = (unix_s / 86_400.0).floor() as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

pub fn table(s: &Summary) -> String {
    let mut out = String::new();
    let w = s
        .rows
        .iter()
        .map(|r| r.key.len())
        .max()
        .unwrap_or(0)
        .max(12);
    let _ = writeln!(
        out,
        "{:<w$}  {:>6}  {:>14}  {:>10}  {:>10}  {:>12}  {:>9}",
        s.by.label(),
        "jobs",
        "energy J",
        "kWh",
        "GPU-hours",
        "J/GPU-hour",
        "avg W"
    );
    for r in &s.rows {
        let _ = writeln!(
            out,
            "{:<w$}  {:>6}  {:>14.0}  {:>10.4}  {:>10.3}  {:>12.0}  {:>9.1}",
            r.key, r.jobs, r.energy_j, r.energy_kwh, r.gpu_hours, r.joules_per_gpu_hour, r.avg_w
        );
    }
    let _ = writeln!(
        out,
        "{:<w$}  {:>6}  {:>14.0}  {:>10.4}",
        "(idle GPUs)",
        "",
        s.idle_j,
        s.idle_j / 3.6e6
    );
    let jobs: u64 = s.rows.iter().map(|r| r.jobs).sum();
    let _ = writeln!(
        out,
        "{:<w$}  {:>6}  {:>14.0}  {:>10.4}",
        "total",
        jobs,
        s.total_j,
        s.total_j / 3.6e6
    );
    let mut notes = Vec::new();
    if s.backends.iter().any(|b| b == "model") {
        notes.push("records from the MODEL backend: modelled, not measured, energy".to_owned());
    }
    // Counts of jobs whose energy a reader must take with a caveat, each with the caveat.
    let caveats = [
        (
            s.incomplete_jobs,
            "without a Prolog record: their energy is partial",
        ),
        (
            s.modelled_splits,
            "on shared GPUs were split by the power model and their declared class, not (only) by measured per-process work (records say \"basis\")",
        ),
        (
            s.mps_waits,
            "waited for another user's MPS server (records say \"mps_wait_s\")",
        ),
        (
            s.outside_mps,
            "ran outside MPS, time-sliced beside another user's MPS server: their shares were held, not enforced (records say \"outside_mps\")",
        ),
        (
            s.counter_resets,
            "saw an energy counter reset (driver reload): their energy is low",
        ),
    ];
    for (n, what) in caveats {
        if n > 0 {
            notes.push(format!("{n} job(s) {what}"));
        }
    }
    for n in notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

pub fn csv(s: &Summary) -> String {
    let mut out = format!(
        "{},jobs,energy_j,energy_kwh,gpu_hours,joules_per_gpu_hour,avg_w\n",
        s.by.label()
    );
    for r in &s.rows {
        let _ = writeln!(
            out,
            "{},{},{:.3},{:.6},{:.6},{:.3},{:.3}",
            csv_field(&r.key),
            r.jobs,
            r.energy_j,
            r.energy_kwh,
            r.gpu_hours,
            r.joules_per_gpu_hour,
            r.avg_w
        );
    }
    let _ = writeln!(
        out,
        "(idle),0,{:.3},{:.6},0,0,0",
        s.idle_j,
        s.idle_j / 3.6e6
    );
    out
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

/// A metric's name, help text and value of one group.
type Metric = (&'static str, &'static str, fn(&Acc) -> String);

/// A node_exporter textfile: energy, GPU-hours and jobs per user and GPU type, idle energy per
/// node and GPU type.
pub fn prometheus(records: &[Record]) -> String {
    let mut by_user: BTreeMap<(String, String), Acc> = BTreeMap::new();
    let mut idle: BTreeMap<(String, String), f64> = BTreeMap::new();
    for r in records {
        match r.kind {
            RecordKind::Job => {
                let a = by_user
                    .entry((r.user.clone(), r.gpu_type.clone()))
                    .or_default();
                a.jobs += 1;
                a.energy_j += r.energy_j;
                a.gpu_s += gpu_seconds(r);
            }
            RecordKind::Idle => {
                *idle
                    .entry((r.node.clone(), r.gpu_type.clone()))
                    .or_default() += r.energy_j;
            }
        }
    }
    let mut out = String::new();
    let per_user: [Metric; 3] = [
        (
            "heshare_gpu_energy_joules_total",
            "GPU energy of finished jobs, as accounted by heshare's Epilog.",
            |a| format!("{:.3}", a.energy_j),
        ),
        (
            "heshare_gpu_hours_total",
            "GPU-hours held by finished jobs (an MPS share counts as its fraction).",
            |a| format!("{:.6}", a.gpu_s / 3600.0),
        ),
        ("heshare_jobs_total", "Finished GPU jobs.", |a| {
            a.jobs.to_string()
        }),
    ];
    for (name, help, value) in per_user {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for ((u, t), a) in &by_user {
            let _ = writeln!(
                out,
                "{name}{{user=\"{}\",gpu_type=\"{}\"}} {}",
                label(u),
                label(t),
                value(a)
            );
        }
    }
    let name = "heshare_gpu_idle_energy_joules_total";
    let _ = writeln!(
        out,
        "# HELP {name} GPU energy while no job held the GPU (or the unheld part of a shared GPU).\n# TYPE {name} counter"
    );
    for ((n, t), e) in &idle {
        let _ = writeln!(
            out,
            "{name}{{node=\"{}\",gpu_type=\"{}\"}} {e:.3}",
            label(n),
            label(t)
        );
    }
    out
}

/// Escapes a Prometheus label value.
fn label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::gpu::BackendKind;

    fn job(id: &str, user: &str, gpu_type: &str, share: Option<u8>, dur: f64, e: f64) -> Record {
        Record {
            record_id: format!("n:{id}"),
            kind: RecordKind::Job,
            node: "n".into(),
            job_id: id.into(),
            user: user.into(),
            uid: 1,
            account: "acct".into(),
            class: None,
            gpus: vec![0],
            gpu_type: gpu_type.into(),
            share_pct: share,
            clocks: vec![],
            start: 1_700_000_000.0,
            end: 1_700_000_000.0 + dur,
            energy_j: e,
            avg_w: e / dur,
            backend: BackendKind::Model,
            counter_reset: false,
            complete: true,
            basis: crate::node::record::Basis::Model,
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
    fn groups_add_up_and_shares_count_as_fractions_of_a_gpu() {
        let mut idle = job("", "", "a100", None, 100.0, 500.0);
        idle.kind = RecordKind::Idle;
        let recs = vec![
            job("1", "alice", "a100", Some(50), 3600.0, 1000.0),
            job("2", "alice", "t4", None, 1800.0, 300.0),
            job("3", "bob", "a100", None, 3600.0, 2000.0),
            idle,
        ];
        let s = summarize(&recs, GroupBy::User);
        assert_eq!(s.rows[0].key, "bob");
        assert_eq!(s.rows[1].key, "alice");
        assert_eq!(s.rows[1].jobs, 2);
        assert!(
            (s.rows[1].gpu_hours - 1.0).abs() < 1e-9,
            "0.5 + 0.5 GPU-hours"
        );
        assert!((s.rows[1].joules_per_gpu_hour - 1300.0).abs() < 1e-9);
        assert!((s.total_j - 3800.0).abs() < 1e-9);
        assert!((s.idle_j - 500.0).abs() < 1e-9);
        let t = summarize(&recs, GroupBy::GpuType);
        assert_eq!(t.rows.iter().map(|r| r.energy_j).sum::<f64>(), 3300.0);
        assert!(table(&t).contains("MODEL backend"));
        assert!(!table(&t).contains("outside MPS"));
        let mut outside = recs.clone();
        outside[0].outside_mps = true;
        let o = summarize(&outside, GroupBy::User);
        assert_eq!(o.outside_mps, 1);
        assert!(
            table(&o).contains("1 job(s) ran outside MPS"),
            "{}",
            table(&o)
        );
    }

    #[test]
    fn days_are_utc_calendar_dates() {
        assert_eq!(utc_date(0.0), "1970-01-01");
        assert_eq!(utc_date(951_782_400.0), "2000-02-29");
        assert_eq!(utc_date(1_796_169_600.0 - 1.0), "2026-12-01");
        assert_eq!(utc_date(1_796_169_600.0), "2026-12-02");
    }

    #[test]
    fn prometheus_labels_are_escaped() {
        let recs = vec![job("1", "we\"ird", "a100", None, 10.0, 5.0)];
        let p = prometheus(&recs);
        assert!(p.contains("user=\"we\\\"ird\""), "{p}");
        assert!(p.contains("# TYPE heshare_gpu_energy_joules_total counter"));
    }
}
