//! Workload traces: the Alibaba openb pod list, heshare's generic job CSV and Slurm accounting
//! dumps (`sacct --parsable2`), all read into one [`TraceJob`] form.
//!
//! Every loader reports the first malformed row as `file:line: field: what is wrong` and never
//! guesses: a trace that does not parse is not replayed.

use crate::config::Config;
use std::path::{Path, PathBuf};

/// The openb default pod list shipped in `data/alibaba-openb/`.
pub const OPENB_DEFAULT_PODS: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/alibaba-openb/openb_pod_list_default.csv"
));

/// One job (task, pod) of a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceJob {
    pub id: String,
    /// Seconds from the trace start.
    pub submit_s: f64,
    /// Run time, seconds (0 when the trace has none, e.g. openb's multigpu lists).
    pub duration_s: f64,
    pub num_gpus: u32,
    /// Thousandths of a GPU per GPU: 1000 = whole GPUs, below = an MPS-style share of one GPU.
    pub gpu_milli: u32,
    /// Allowed GPU types (indices into `Config::gpu_types`); empty = any.
    pub gpu_types: Vec<usize>,
    pub cpu_milli: u64,
    pub memory_mib: u64,
    pub user: String,
    /// A heshare job class name, when the trace says.
    pub class: Option<String>,
    /// What a site's accounting recorded of the run (sacct), for a replay as recorded.
    pub recorded: Option<Recorded>,
}

/// What `sacct` recorded of a job beyond its request: what replaying it as it ran needs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Recorded {
    /// Its time limit (`Timelimit`; none for `UNLIMITED` or where not exported).
    pub limit_s: Option<f64>,
    pub account: String,
    pub name: String,
    /// The GPU type it ran on, where its AllocTRES typed its GPUs.
    pub ran_on: Option<usize>,
    /// The first node it ran on (`NodeList`), which gives the type where AllocTRES did not.
    pub first_node: Option<String>,
    /// When it started, in seconds from the trace start (as `TraceJob::submit_s`).
    pub start_s: f64,
}

/// The columns `heshare simulate --trace-format sacct` reads: the first six are required, the
/// rest make the replay as recorded (limits, recurring jobs, request as asked, node).
pub const SACCT_FORMAT: &str =
    "JobID,Submit,Start,End,AllocTRES,User,Timelimit,Account,JobName,ReqTRES,NodeList";

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}:{line}: {field}: {message}", file.display())]
pub struct TraceError {
    pub file: PathBuf,
    pub line: usize,
    pub field: String,
    pub message: String,
}

/// The trace formats `--trace-format` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TraceFormat {
    /// Alibaba cluster-trace-gpu-v2023 pod list (11 or 5 columns).
    Openb,
    /// `job_id,submit_s,duration_s,num_gpus,gpu_fraction,gpu_types,user,class`.
    Csv,
    /// `sacct --allocations --parsable2 --format=` [`SACCT_FORMAT`] (JobID, Submit, Start, End,
    /// AllocTRES and User at least).
    Sacct,
}

/// Parses `text` in `format`; `file` only labels errors.
pub fn parse(
    text: &str,
    format: TraceFormat,
    file: &Path,
    cfg: &Config,
) -> Result<Vec<TraceJob>, TraceError> {
    match format {
        TraceFormat::Openb => parse_openb(text, file, cfg),
        TraceFormat::Csv => parse_csv(text, file, cfg),
        TraceFormat::Sacct => parse_sacct(text, file, cfg),
    }
}

struct Rows<'a> {
    file: &'a Path,
}

impl Rows<'_> {
    fn err(&self, line: usize, field: &str, message: impl Into<String>) -> TraceError {
        TraceError {
            file: self.file.to_owned(),
            line,
            field: field.to_owned(),
            message: message.into(),
        }
    }

    fn num<T: std::str::FromStr>(
        &self,
        line: usize,
        field: &str,
        v: &str,
    ) -> Result<T, TraceError> {
        v.trim()
            .parse::<T>()
            .map_err(|_| self.err(line, field, format!("\"{v}\" is not a valid number")))
    }

    fn seconds(&self, line: usize, field: &str, v: &str) -> Result<f64, TraceError> {
        let s: f64 = self.num(line, field, v)?;
        if s.is_finite() && s >= 0.0 {
            Ok(s)
        } else {
            Err(self.err(line, field, format!("{v} is not a time in seconds >= 0")))
        }
    }

    fn gpu_types(
        &self,
        line: usize,
        field: &str,
        v: &str,
        cfg: &Config,
    ) -> Result<Vec<usize>, TraceError> {
        let mut out = Vec::new();
        for name in v.split('|').map(str::trim).filter(|n| !n.is_empty()) {
            let idx = cfg.resolve_gpu_type(name).ok_or_else(|| {
                let known = cfg.gpu_type_names();
                self.err(line, field, format!("GPU model \"{name}\" is neither a catalog type nor an alias (known: {known})"))
            })?;
            if !out.contains(&idx) {
                out.push(idx);
            }
        }
        Ok(out)
    }
}

fn header_index(cols: &[&str], want: &[&str]) -> Option<Vec<usize>> {
    want.iter()
        .map(|w| cols.iter().position(|c| c.eq_ignore_ascii_case(w)))
        .collect()
}

fn check_gpu_request(
    r: &Rows<'_>,
    line: usize,
    num_gpus: u32,
    milli: u32,
) -> Result<(), TraceError> {
    if num_gpus > 64 {
        return Err(r.err(line, "num_gpu", format!("{num_gpus} GPUs is more than 64")));
    }
    if milli > 1000 {
        return Err(r.err(
            line,
            "gpu_milli",
            format!("{milli} is over 1000 (a whole GPU)"),
        ));
    }
    if num_gpus > 1 && milli < 1000 {
        return Err(r.err(line, "gpu_milli", format!("a share ({milli}/1000) of more than one GPU ({num_gpus}) is not a request Slurm or MPS can serve")));
    }
    if num_gpus > 0 && milli == 0 {
        return Err(r.err(line, "gpu_milli", "0 with GPUs requested"));
    }
    Ok(())
}

fn parse_openb(text: &str, file: &Path, cfg: &Config) -> Result<Vec<TraceJob>, TraceError> {
    let r = Rows { file };
    let mut lines = text.lines().enumerate();
    let (_, header) = lines
        .next()
        .ok_or_else(|| r.err(1, "header", "the file is empty"))?;
    let cols: Vec<&str> = header.trim().split(',').map(str::trim).collect();
    let base = header_index(&cols, &["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"])
        .ok_or_else(|| r.err(1, "header", format!("expected the openb columns name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...], found \"{}\"", header.trim())))?;
    let spec = cols.iter().position(|c| *c == "gpu_spec");
    let times = header_index(&cols, &["creation_time", "deletion_time", "scheduled_time"]);
    let mut jobs = Vec::new();
    for (i, raw) in lines {
        let line = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = raw.split(',').collect();
        if f.len() != cols.len() {
            return Err(r.err(
                line,
                "row",
                format!("{} fields, the header has {}", f.len(), cols.len()),
            ));
        }
        let num_gpus: u32 = r.num(line, "num_gpu", f[base[3]])?;
        let gpu_milli: u32 = if num_gpus == 0 {
            0
        } else {
            r.num(line, "gpu_milli", f[base[4]])?
        };
        check_gpu_request(&r, line, num_gpus, gpu_milli)?;
        let gpu_types = match spec {
            Some(s) => r.gpu_types(line, "gpu_spec", f[s], cfg)?,
            None => vec![],
        };
        let (submit_s, duration_s) = match &times {
            Some(t) => {
                let created = r.seconds(line, "creation_time", f[t[0]])?;
                let deleted = r.seconds(line, "deletion_time", f[t[1]])?;
                // Pending pods have no scheduled_time: they ran from creation (README of the trace).
                let start = if f[t[2]].trim().is_empty() {
                    created
                } else {
                    r.seconds(line, "scheduled_time", f[t[2]])?
                };
                if deleted < start {
                    return Err(r.err(
                        line,
                        "deletion_time",
                        format!("{deleted} is before the start {start}"),
                    ));
                }
                (created, deleted - start)
            }
            None => (0.0, 0.0),
        };
        jobs.push(TraceJob {
            id: f[base[0]].trim().to_owned(),
            submit_s,
            duration_s,
            num_gpus,
            gpu_milli,
            gpu_types,
            cpu_milli: r.num(line, "cpu_milli", f[base[1]])?,
            memory_mib: r.num(line, "memory_mib", f[base[2]])?,
            user: String::new(),
            class: None,
            recorded: None,
        });
    }
    Ok(jobs)
}

const CSV_COLUMNS: [&str; 8] = [
    "job_id",
    "submit_s",
    "duration_s",
    "num_gpus",
    "gpu_fraction",
    "gpu_types",
    "user",
    "class",
];

fn parse_csv(text: &str, file: &Path, cfg: &Config) -> Result<Vec<TraceJob>, TraceError> {
    let r = Rows { file };
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with('#'));
    let (hline, header) = lines
        .next()
        .ok_or_else(|| r.err(1, "header", "the file is empty"))?;
    let cols: Vec<&str> = header.trim().split(',').map(str::trim).collect();
    if cols != CSV_COLUMNS {
        return Err(r.err(
            hline + 1,
            "header",
            format!(
                "expected \"{}\", found \"{}\"",
                CSV_COLUMNS.join(","),
                header.trim()
            ),
        ));
    }
    let mut jobs = Vec::new();
    for (i, raw) in lines {
        let line = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = raw.split(',').map(str::trim).collect();
        if f.len() != CSV_COLUMNS.len() {
            return Err(r.err(
                line,
                "row",
                format!("{} fields, expected {}", f.len(), CSV_COLUMNS.len()),
            ));
        }
        let num_gpus: u32 = r.num(line, "num_gpus", f[3])?;
        let fraction: f64 = if f[4].is_empty() {
            1.0
        } else {
            r.num(line, "gpu_fraction", f[4])?
        };
        if !(fraction > 0.0 && fraction <= 1.0) {
            return Err(r.err(line, "gpu_fraction", format!("{} is outside (0, 1]", f[4])));
        }
        // Within 1..=1000 by the check above.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let gpu_milli = if num_gpus == 0 {
            0
        } else {
            (fraction * 1000.0).round() as u32
        };
        check_gpu_request(&r, line, num_gpus, gpu_milli).map_err(|mut e| {
            e.field = if e.field == "num_gpu" {
                "num_gpus".into()
            } else {
                "gpu_fraction".into()
            };
            e
        })?;
        let class = (!f[7].is_empty()).then(|| f[7].to_owned());
        if let Some(c) = &class {
            if cfg.class(c).is_none() {
                let known = cfg.class_names();
                return Err(r.err(
                    line,
                    "class",
                    format!("\"{c}\" is not a job class of the config (known: {known})"),
                ));
            }
        }
        jobs.push(TraceJob {
            id: f[0].to_owned(),
            submit_s: r.seconds(line, "submit_s", f[1])?,
            duration_s: r.seconds(line, "duration_s", f[2])?,
            num_gpus,
            gpu_milli,
            gpu_types: r.gpu_types(line, "gpu_types", f[5], cfg)?,
            cpu_milli: 0,
            memory_mib: 0,
            user: f[6].to_owned(),
            class,
            recorded: None,
        });
    }
    Ok(jobs)
}

/// Seconds since the Unix epoch of a Slurm timestamp `YYYY-MM-DDTHH:MM:SS` (taken as UTC; only
/// differences matter to the simulator).
fn slurm_time(v: &str) -> Option<f64> {
    let (date, time) = v.trim().split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let mut t = time.split(':').map(|p| p.parse::<i64>());
    let (hh, mm, ss) = (t.next()?.ok()?, t.next()?.ok()?, t.next()?.ok()?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    #[allow(clippy::cast_precision_loss)]
    let secs = (days * 86_400 + hh * 3600 + mm * 60 + ss) as f64;
    Some(secs)
}

/// A Slurm duration (`Timelimit`: `[D-]HH:MM:SS`, `MM:SS` or minutes) in seconds.
fn slurm_duration(v: &str) -> Option<f64> {
    let (days, rest) = match v.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().ok()?, r),
        None => (0, v),
    };
    let parts: Vec<u64> = rest
        .split(':')
        .map(|p| p.parse::<u64>().ok())
        .collect::<Option<_>>()?;
    let secs = match parts.as_slice() {
        [m] if !v.contains('-') => m * 60,
        [h] => h * 3600,
        [m, s] if !v.contains('-') => m * 60 + s,
        [h, m] => h * 3600 + m * 60,
        [h, m, s] => h * 3600 + m * 60 + s,
        _ => return None,
    };
    #[allow(clippy::cast_precision_loss)]
    Some((days * 86_400 + secs) as f64)
}

/// The GPU rows of a sacct dump that cannot be replayed because they never ran or have not
/// ended (no Start or End): `(line, JobID, why)`, for the replay's summary.
pub fn sacct_unreplayable(text: &str) -> Vec<(usize, String, &'static str)> {
    let mut lines = text.lines().enumerate();
    let Some((_, header)) = lines.next() else {
        return vec![];
    };
    let cols: Vec<&str> = header.trim().split('|').collect();
    let Some(idx) = header_index(&cols, &["JobID", "Start", "End", "AllocTRES"]) else {
        return vec![];
    };
    lines
        .filter_map(|(i, raw)| {
            let f: Vec<&str> = raw.split('|').collect();
            if f.len() < cols.len() {
                return None;
            }
            let (gpus, mps, _) = alloc_tres_gpus(f[idx[3]]);
            if gpus == 0 && mps == 0 {
                return None;
            }
            let why = match (f[idx[1]].trim(), f[idx[2]].trim()) {
                ("Unknown" | "None" | "", _) => "never started",
                (_, "Unknown" | "None" | "") => "has not ended",
                _ => return None,
            };
            Some((i + 1, f[idx[0]].trim().to_owned(), why))
        })
        .collect()
}

/// GPUs and MPS share of an AllocTRES string such as `cpu=4,mem=16G,node=1,gres/gpu:a100=2` or
/// `...,gres/mps=30`; the GPU type when the TRES names one.
fn alloc_tres_gpus(tres: &str) -> (u32, u32, Option<&str>) {
    let (mut gpus, mut mps, mut ty) = (0u32, 0u32, None);
    for item in tres.split(',') {
        let Some((k, v)) = item.split_once('=') else {
            continue;
        };
        let n: u32 = v.trim().parse().unwrap_or(0);
        if k == "gres/gpu" {
            gpus = gpus.max(n);
        } else if let Some(t) = k.strip_prefix("gres/gpu:") {
            gpus = gpus.max(n);
            ty = Some(t);
        } else if k == "gres/mps" {
            mps = n;
        } else if let Some(t) = k.strip_prefix("gres/mps:") {
            mps = n;
            ty = Some(t);
        }
    }
    (gpus, mps, ty)
}

fn parse_sacct(text: &str, file: &Path, cfg: &Config) -> Result<Vec<TraceJob>, TraceError> {
    let r = Rows { file };
    let mut lines = text.lines().enumerate();
    let (_, header) = lines
        .next()
        .ok_or_else(|| r.err(1, "header", "the file is empty"))?;
    let cols: Vec<&str> = header.trim().split('|').collect();
    let idx = header_index(&cols, &["JobID", "Submit", "Start", "End", "AllocTRES", "User"]).ok_or_else(|| {
        r.err(1, "header", format!("expected sacct --parsable2 output with the fields JobID,Submit,Start,End,AllocTRES,User (e.g. sacct --allocations --parsable2 --format={SACCT_FORMAT})"))
    })?;
    let opt = |name: &str| cols.iter().position(|c| c.eq_ignore_ascii_case(name));
    let (limit_col, account_col, name_col, req_col, nodes_col) = (
        opt("Timelimit"),
        opt("Account"),
        opt("JobName"),
        opt("ReqTRES"),
        opt("NodeList"),
    );
    let mut jobs = Vec::new();
    let mut origin: Option<f64> = None;
    let (mut rows, mut gpu_rows) = (0usize, 0usize);
    for (i, raw) in lines {
        let line = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = raw.split('|').collect();
        if f.len() < cols.len() {
            return Err(r.err(
                line,
                "row",
                format!("{} fields, the header has {}", f.len(), cols.len()),
            ));
        }
        rows += 1;
        let (gpus, mps, ty) = alloc_tres_gpus(f[idx[4]]);
        if gpus == 0 && mps == 0 {
            continue; // CPU-only jobs use no GPU energy.
        }
        gpu_rows += 1;
        // The request as asked where ReqTRES is exported (typed or not), else as allocated.
        let (gpus, mps, asked_ty) = match req_col.map(|c| alloc_tres_gpus(f[c])) {
            Some((g, m, t)) if g > 0 || m > 0 => (g, m, t),
            _ => (gpus, mps, ty),
        };
        let (start, end) = (f[idx[2]].trim(), f[idx[3]].trim());
        if matches!(start, "Unknown" | "None" | "") || matches!(end, "Unknown" | "None" | "") {
            continue; // Never ran, or still running: no duration to replay.
        }
        let t = |field: &str, v: &str| {
            slurm_time(v).ok_or_else(|| {
                r.err(
                    line,
                    field,
                    format!("\"{v}\" is not a Slurm time YYYY-MM-DDTHH:MM:SS"),
                )
            })
        };
        let submit = t("Submit", f[idx[1]])?;
        let (s, e) = (t("Start", start)?, t("End", end)?);
        if e < s {
            return Err(r.err(line, "End", format!("{end} is before Start {start}")));
        }
        let base = *origin.get_or_insert(submit);
        let (num_gpus, gpu_milli) = if gpus > 0 {
            (gpus, 1000)
        } else {
            (1, (mps * 10).clamp(1, 1000))
        };
        jobs.push(TraceJob {
            id: f[idx[0]].trim().to_owned(),
            submit_s: (submit - base).max(0.0),
            duration_s: e - s,
            num_gpus,
            gpu_milli,
            gpu_types: match asked_ty {
                Some(t) => r.gpu_types(
                    line,
                    if req_col.is_some() {
                        "ReqTRES"
                    } else {
                        "AllocTRES"
                    },
                    t,
                    cfg,
                )?,
                None => vec![],
            },
            cpu_milli: 0,
            memory_mib: 0,
            user: f[idx[5]].trim().to_owned(),
            class: None,
            recorded: Some(Recorded {
                limit_s: match limit_col.map(|c| f[c].trim()) {
                    None | Some("" | "UNLIMITED" | "Partition_Limit" | "INVALID") => None,
                    Some(v) => Some(slurm_duration(v).ok_or_else(|| {
                        r.err(
                            line,
                            "Timelimit",
                            format!("\"{v}\" is not a Slurm duration [D-]HH:MM:SS"),
                        )
                    })?),
                },
                account: account_col.map_or("", |c| f[c].trim()).to_owned(),
                name: name_col.map_or("", |c| f[c].trim()).to_owned(),
                ran_on: match ty {
                    Some(t) => r.gpu_types(line, "AllocTRES", t, cfg)?.first().copied(),
                    None => None,
                },
                first_node: nodes_col
                    .map(|c| f[c].trim())
                    .filter(|v| !v.is_empty() && *v != "None assigned")
                    .and_then(|v| crate::cluster::slurm::expand_hostlist(v).ok())
                    .and_then(|v| v.into_iter().next()),
                start_s: s - base,
            }),
        });
    }
    if rows > 0 && gpu_rows == 0 {
        // Slurm accounts a GRES only where slurm.conf lists it: without that, nothing in the
        // export says which jobs had GPUs.
        return Err(r.err(
            2,
            "AllocTRES",
            format!("none of the {rows} rows has a GPU in AllocTRES (gres/gpu or gres/mps): Slurm accounts GRES only where slurm.conf lists them, e.g. AccountingStorageTRES=gres/gpu,gres/mps,gres/gpu:a100 (each type by name); jobs that ended before it was set carry none"),
        ));
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BUNDLED_CONFIG;

    fn cfg() -> Config {
        Config::parse(BUNDLED_CONFIG, Path::new("heshare.toml")).expect("bundled config is valid")
    }

    fn p() -> &'static Path {
        Path::new("t.csv")
    }

    #[test]
    fn the_bundled_openb_pod_list_matches_its_published_profile() {
        let jobs = parse(OPENB_DEFAULT_PODS, TraceFormat::Openb, p(), &cfg()).expect("parses");
        assert_eq!(jobs.len(), 8152);
        let count = |n: u32| jobs.iter().filter(|j| j.num_gpus == n).count();
        assert_eq!(
            (count(0), count(1), count(2), count(4), count(8)),
            (1088, 6989, 16, 15, 44)
        );
        assert_eq!(
            jobs.iter()
                .filter(|j| j.num_gpus == 1 && j.gpu_milli < 1000)
                .count(),
            3078
        );
    }

    #[test]
    fn openb_errors_name_line_and_field() {
        let cfg = cfg();
        let h = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n";
        let e = parse(
            &format!("{h}p0,1000,10,1,1000,A40,LS,Running,0,10,0\n"),
            TraceFormat::Openb,
            p(),
            &cfg,
        )
        .expect_err("model");
        assert_eq!((e.line, e.field.as_str()), (2, "gpu_spec"));
        let e = parse(
            &format!("{h}p0,1000,10,2,500,,LS,Running,0,10,0\n"),
            TraceFormat::Openb,
            p(),
            &cfg,
        )
        .expect_err("share of 2");
        assert_eq!(e.field, "gpu_milli");
        let e = parse(
            &format!("{h}p0,1000,10,1,1000,,LS,Running,50,10,50\n"),
            TraceFormat::Openb,
            p(),
            &cfg,
        )
        .expect_err("time");
        assert!(
            e.to_string()
                .starts_with("t.csv:2: deletion_time: 10 is before the start 50"),
            "{e}"
        );
        let e = parse(
            &format!("{h}p0,1000,10,x,1000,,LS,Running,0,10,0\n"),
            TraceFormat::Openb,
            p(),
            &cfg,
        )
        .expect_err("num");
        assert_eq!(e.field, "num_gpu");
        let ok = parse(
            &format!("{h}p0,1000,10,1,1000,V100M16|V100M32,LS,Pending,5,20,\n"),
            TraceFormat::Openb,
            p(),
            &cfg,
        )
        .expect("ok");
        assert_eq!(
            (ok[0].submit_s, ok[0].duration_s, ok[0].gpu_types.len()),
            (5.0, 15.0, 2)
        );
        let five = parse(
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,10,8,1000\n",
            TraceFormat::Openb,
            p(),
            &cfg,
        )
        .expect("multigpu form");
        assert_eq!(five[0].num_gpus, 8);
    }

    #[test]
    fn generic_csv_reads_and_rejects() {
        let cfg = cfg();
        let h = "job_id,submit_s,duration_s,num_gpus,gpu_fraction,gpu_types,user,class\n";
        let jobs = parse(
            &format!("# comment\n{h}j1,0,3600,1,0.3,t4|a10,alice,vit-infer\nj2,10,60,2,,,bob,\n"),
            TraceFormat::Csv,
            p(),
            &cfg,
        )
        .expect("ok");
        assert_eq!(jobs.len(), 2);
        assert_eq!(
            (
                jobs[0].gpu_milli,
                jobs[0].gpu_types.len(),
                jobs[0].class.as_deref()
            ),
            (300, 2, Some("vit-infer"))
        );
        assert_eq!((jobs[1].num_gpus, jobs[1].gpu_milli), (2, 1000));
        let e = parse(
            &format!("{h}j1,0,3600,1,1.5,,a,\n"),
            TraceFormat::Csv,
            p(),
            &cfg,
        )
        .expect_err("fraction");
        assert_eq!((e.line, e.field.as_str()), (2, "gpu_fraction"));
        let e = parse(
            &format!("{h}j1,0,3600,1,0.5,,a,nope\n"),
            TraceFormat::Csv,
            p(),
            &cfg,
        )
        .expect_err("class");
        assert_eq!(e.field, "class");
        let e = parse(
            &format!("{h}j1,-4,3600,1,0.5,,a,\n"),
            TraceFormat::Csv,
            p(),
            &cfg,
        )
        .expect_err("time");
        assert_eq!(e.field, "submit_s");
        let e = parse("job,submit\n", TraceFormat::Csv, p(), &cfg).expect_err("header");
        assert_eq!(e.field, "header");
    }

    #[test]
    fn sacct_dumps_are_replayable() {
        let cfg = cfg();
        let text = "JobID|Submit|Start|End|AllocTRES|User|State\n\
            101|2024-03-01T10:00:00|2024-03-01T10:05:00|2024-03-01T11:05:00|billing=8,cpu=8,gres/gpu:a100=2,gres/gpu=2,mem=64G,node=1|alice|COMPLETED\n\
            102|2024-03-01T10:30:00|2024-03-01T10:31:00|2024-03-01T10:41:00|cpu=2,gres/mps=30,mem=8G,node=1|bob|COMPLETED\n\
            103|2024-03-01T10:40:00|2024-03-01T10:41:00|2024-03-01T10:42:00|cpu=2,mem=8G,node=1|carol|COMPLETED\n\
            104|2024-03-01T10:50:00|Unknown|Unknown|gres/gpu=1|dave|PENDING\n";
        let jobs = parse(text, TraceFormat::Sacct, p(), &cfg).expect("ok");
        assert_eq!(jobs.len(), 2, "CPU-only and never-started jobs are skipped");
        assert_eq!(
            (
                jobs[0].num_gpus,
                jobs[0].gpu_milli,
                jobs[0].duration_s,
                jobs[0].submit_s
            ),
            (2, 1000, 3600.0, 0.0)
        );
        assert_eq!(jobs[0].gpu_types, vec![cfg.gpu_type("a100").expect("a100")]);
        assert_eq!(
            (
                jobs[1].num_gpus,
                jobs[1].gpu_milli,
                jobs[1].submit_s,
                jobs[1].user.as_str()
            ),
            (1, 300, 1800.0, "bob")
        );
        let bad = "JobID|Submit|Start|End|AllocTRES|User\n1|2024-03-01 10:00|2024-03-01T10:00:00|2024-03-01T10:01:00|gres/gpu=1|a\n";
        let e = parse(bad, TraceFormat::Sacct, p(), &cfg).expect_err("time");
        assert_eq!((e.line, e.field.as_str()), (2, "Submit"));
        let e = parse("JobID|User\n", TraceFormat::Sacct, p(), &cfg).expect_err("header");
        assert_eq!(e.field, "header");
    }

    #[test]
    fn slurm_durations_read_as_sacct_writes_time_limits() {
        assert_eq!(slurm_duration("02:00:00"), Some(7200.0));
        assert_eq!(slurm_duration("1-00:00:00"), Some(86_400.0));
        assert_eq!(slurm_duration("3-12"), Some(3.5 * 86_400.0));
        assert_eq!(slurm_duration("30:00"), Some(1800.0));
        assert_eq!(slurm_duration("90"), Some(5400.0), "minutes");
        assert_eq!(slurm_duration("1:2:3:4"), None);
        assert_eq!(slurm_duration("soon"), None);
        assert_eq!(alloc_tres_gpus("cpu=4,gres/mps:t4=25"), (0, 25, Some("t4")));
        // A cluster that does not account GRES: nothing says which jobs had GPUs.
        let plain = "JobID|Submit|Start|End|AllocTRES|User\n1|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-01-01T01:00:00|billing=1,cpu=1,node=1|a\n";
        let e = parse(plain, TraceFormat::Sacct, Path::new("s.txt"), &cfg()).expect_err("no GRES");
        assert!(
            e.to_string().contains("AccountingStorageTRES=gres/gpu"),
            "{e}"
        );
        let cfg = cfg();
        let bad = "JobID|Submit|Start|End|AllocTRES|User|Timelimit\n1|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-01-01T01:00:00|gres/gpu=1|a|later\n";
        let e = parse(bad, TraceFormat::Sacct, Path::new("s.txt"), &cfg).expect_err("bad limit");
        assert_eq!((e.line, e.field.as_str()), (2, "Timelimit"), "{e}");
    }

    #[test]
    fn slurm_times_are_seconds_since_the_epoch() {
        assert_eq!(slurm_time("1970-01-01T00:00:00"), Some(0.0));
        assert_eq!(slurm_time("2000-03-01T00:00:01"), Some(951_868_801.0));
        assert_eq!(slurm_time("2024-13-01T00:00:00"), None);
    }
}
