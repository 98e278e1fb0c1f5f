//! `heshare report`: the accounting logs' records summed per job, user, account, GPU type, node
//! or day, as tables, CSV or JSON, an SVG chart and a node_exporter textfile.

use super::{ConfigArg, load_config};
use crate::node::record::Record;
use crate::report::accounting::{self, GroupBy, Summary};
use crate::report::{BarPanel, bar_chart_svg};
use anyhow::{Context, Result, bail};
use std::io::{BufRead, Write};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Accounting logs (JSON lines) [default: the config's node.accounting_log].
    #[arg(value_name = "LOG")]
    logs: Vec<PathBuf>,
    /// What to group by; repeat or comma-separate for several tables.
    #[arg(long, value_enum, value_delimiter = ',', default_values = ["user", "gpu-type"])]
    by: Vec<GroupBy>,
    #[arg(long, value_enum, default_value_t = ReportFormat::Table)]
    format: ReportFormat,
    /// Write an SVG chart of energy per user and per GPU type.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Write a node_exporter textfile (written whole, then renamed into place).
    #[arg(long, value_name = "FILE")]
    prometheus: Option<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq)]
enum ReportFormat {
    Table,
    Csv,
    Json,
}

/// Reads every record of `logs`; a malformed line is an error naming file and line.
pub fn read_logs(logs: &[PathBuf]) -> Result<Vec<Record>> {
    let mut out = Vec::new();
    for path in logs {
        let f = std::fs::File::open(path)
            .with_context(|| format!("{}: cannot open", path.display()))?;
        for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
            let line =
                line.with_context(|| format!("{}:{}: cannot read", path.display(), i + 1))?;
            if line.trim().is_empty() {
                continue;
            }
            let r: Record = serde_json::from_str(&line).with_context(|| {
                format!("{}:{}: not an accounting record", path.display(), i + 1)
            })?;
            out.push(r);
        }
    }
    Ok(out)
}

pub fn run(out: &mut impl Write, args: &ReportArgs) -> Result<()> {
    let logs = if args.logs.is_empty() {
        let (cfg, _) = load_config(&args.config.config)?;
        vec![cfg.node.accounting_log]
    } else {
        args.logs.clone()
    };
    let records = read_logs(&logs)?;
    if records.is_empty() {
        bail!("no records in {}", list(&logs));
    }
    let summaries: Vec<Summary> = args
        .by
        .iter()
        .map(|&by| accounting::summarize(&records, by))
        .collect();
    match args.format {
        ReportFormat::Table => {
            for (i, s) in summaries.iter().enumerate() {
                if i > 0 {
                    writeln!(out)?;
                }
                write!(out, "{}", accounting::table(s))?;
            }
        }
        ReportFormat::Csv => {
            for (i, s) in summaries.iter().enumerate() {
                if i > 0 {
                    writeln!(out)?;
                }
                write!(out, "{}", accounting::csv(s))?;
            }
        }
        ReportFormat::Json => {
            serde_json::to_writer_pretty(&mut *out, &summaries)?;
            writeln!(out)?;
        }
    }
    if let Some(path) = &args.plot {
        let panel = |by: GroupBy, title: &'static str| {
            let s = accounting::summarize(&records, by);
            let mut values: Vec<(String, f64)> = s
                .rows
                .iter()
                .map(|r| (r.key.clone(), r.energy_kwh))
                .collect();
            if by == GroupBy::GpuType && s.idle_j > 0.0 {
                values.push(("(idle)".into(), s.idle_j / 3.6e6));
            }
            (title, values)
        };
        let (t1, v1) = panel(GroupBy::User, "Energy per user");
        let (t2, v2) = panel(GroupBy::GpuType, "Energy per GPU type");
        let panels = [
            BarPanel {
                title: t1,
                unit: "kWh",
                values: v1,
                highlight: None,
            },
            BarPanel {
                title: t2,
                unit: "kWh",
                values: v2,
                highlight: Some("(idle)"),
            },
        ];
        let model = records.iter().any(|r| r.backend.as_str() == "model");
        let title = if model {
            "heshare GPU energy accounting (MODEL backend: modelled energy)"
        } else {
            "heshare GPU energy accounting"
        };
        std::fs::write(path, bar_chart_svg(title, &panels))
            .with_context(|| format!("{}: cannot write", path.display()))?;
    }
    if let Some(path) = &args.prometheus {
        crate::node::state::write_atomic(path, accounting::prometheus(&records).as_bytes(), 0o644)
            .with_context(|| format!("{}: cannot write", path.display()))?;
    }
    Ok(())
}

fn list(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
