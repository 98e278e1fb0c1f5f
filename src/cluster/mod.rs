//! Cluster inventories: a site's nodes as its Slurm describes them (a slurm.conf's `NodeName=`
//! lines or `scontrol show node --oneliner`, [`slurm`]) or the node list in the Alibaba openb
//! CSV form (`sn,cpu_milli,memory_mib,gpu,model`), with GPU models resolved against the catalog.
//!
//! Used by the benchmark and the simulator to build a [`ClusterView`] the size of a real cluster.

pub mod slurm;

use crate::config::Config;
use crate::policy::{ClusterView, GpuSlot};
use std::path::{Path, PathBuf};

/// The openb GPU node list shipped in `data/alibaba-openb/` (1213 nodes, 6212 GPUs).
pub const OPENB_GPU_NODES: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/alibaba-openb/openb_node_list_gpu_node.csv"
));

/// One node with its GPUs.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub name: String,
    pub cpu_milli: u64,
    pub memory_mib: u64,
    pub gpus: u32,
    /// Index into `Config::gpu_types`; `None` for a node without GPUs.
    pub gpu_type: Option<usize>,
    /// Whether its GPUs take MPS shares (`gres/mps` on its slurm.conf line); an openb node list
    /// does not say, and every one of its GPU nodes may share.
    pub mps: bool,
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{}:{line}: {field}: {message}", file.display())]
pub struct NodeListError {
    pub file: PathBuf,
    pub line: usize,
    pub field: &'static str,
    pub message: String,
}

const HEADER: [&str; 5] = ["sn", "cpu_milli", "memory_mib", "gpu", "model"];

/// Reads a cluster in whichever form `text` is: a slurm.conf or `scontrol show node
/// --oneliner` output (with `gres_conf` typing untyped GPUs), else an openb node list. `file`
/// only labels errors.
pub fn parse_cluster(
    text: &str,
    file: &Path,
    gres_conf: Option<(&str, &Path)>,
    cfg: &Config,
) -> Result<Vec<Node>, NodeListError> {
    if slurm::looks_like_slurm(text) {
        slurm::parse_slurm_nodes(text, file, gres_conf, cfg)
    } else {
        parse_node_list(text, file, cfg)
    }
}

/// Parses a node list; `file` only labels errors.
pub fn parse_node_list(text: &str, file: &Path, cfg: &Config) -> Result<Vec<Node>, NodeListError> {
    let err = |line: usize, field: &'static str, message: String| NodeListError {
        file: file.to_owned(),
        line,
        field,
        message,
    };
    let mut lines = text.lines().enumerate();
    let Some((_, header)) = lines.next() else {
        return Err(err(
            1,
            "header",
            "the file is empty; expected sn,cpu_milli,memory_mib,gpu,model".into(),
        ));
    };
    let cols: Vec<&str> = header.trim().split(',').map(str::trim).collect();
    if cols != HEADER {
        return Err(err(
            1,
            "header",
            format!(
                "expected \"{}\", found \"{}\"",
                HEADER.join(","),
                header.trim()
            ),
        ));
    }
    let known = || cfg.gpu_type_names();
    let mut nodes = Vec::new();
    for (i, raw) in lines {
        let line = i + 1;
        let raw = raw.trim();
        if raw.is_empty() {
            continue;
        }
        let f: Vec<&str> = raw.split(',').map(str::trim).collect();
        if f.len() != HEADER.len() {
            return Err(err(
                line,
                "row",
                format!("{} fields, expected {}", f.len(), HEADER.len()),
            ));
        }
        let num = |idx: usize, field: &'static str| {
            f[idx]
                .parse::<u64>()
                .map_err(|_| err(line, field, format!("\"{}\" is not a whole number", f[idx])))
        };
        let cpu_milli = num(1, "cpu_milli")?;
        let memory_mib = num(2, "memory_mib")?;
        let gpus = u32::try_from(num(3, "gpu")?)
            .ok()
            .filter(|&g| g <= 64)
            .ok_or_else(|| {
                err(
                    line,
                    "gpu",
                    format!("{} GPUs on one node is more than 64", f[3]),
                )
            })?;
        let gpu_type = match (gpus, f[4]) {
            (0, _) => None,
            (_, "") => return Err(err(line, "model", format!("node has {gpus} GPUs but no model"))),
            (_, m) => Some(cfg.resolve_gpu_type(m).ok_or_else(|| err(line, "model", format!("GPU model \"{m}\" is neither a catalog type nor an alias (known types: {})", known())))?),
        };
        nodes.push(Node {
            name: f[0].to_owned(),
            cpu_milli,
            memory_mib,
            gpus,
            gpu_type,
            mps: true,
        });
    }
    Ok(nodes)
}

/// Every GPU of `nodes` as an idle slot, in file order.
pub fn idle_view(nodes: &[Node]) -> ClusterView {
    let gpus = nodes
        .iter()
        .filter_map(|n| n.gpu_type.map(|t| (n, t)))
        .flat_map(|(n, t)| {
            (0..n.gpus).map(move |index| GpuSlot {
                node: n.name.as_str().into(),
                index,
                gpu_type: t,
                jobs: vec![],
                power: crate::policy::SlotPower::Up,
                node_gpus: n.gpus,
            })
        })
        .collect();
    ClusterView {
        gpus,
        queues: vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BUNDLED_CONFIG;

    fn cfg() -> Config {
        Config::parse(BUNDLED_CONFIG, Path::new("heshare.toml")).expect("bundled config is valid")
    }

    #[test]
    fn the_openb_cluster_has_6212_gpus_of_known_types() {
        let cfg = cfg();
        let nodes = parse_node_list(OPENB_GPU_NODES, Path::new("openb.csv"), &cfg).expect("parses");
        assert_eq!(nodes.len(), 1213);
        let view = idle_view(&nodes);
        assert_eq!(view.gpus.len(), 6212);
        let a10 = cfg.gpu_type("a10").expect("a10");
        // G2 (PWR: A10) 4392 + A10 2.
        assert_eq!(view.gpus.iter().filter(|g| g.gpu_type == a10).count(), 4394);
    }

    #[test]
    fn bad_rows_name_line_and_field() {
        let cfg = cfg();
        let p = Path::new("n.csv");
        let e = parse_node_list(
            "sn,cpu_milli,memory_mib,gpu,model\nn1,96000,1024,2,A40\n",
            p,
            &cfg,
        )
        .expect_err("unknown model");
        assert_eq!((e.line, e.field), (2, "model"));
        assert!(
            e.to_string()
                .starts_with("n.csv:2: model: GPU model \"A40\""),
            "{e}"
        );
        let e = parse_node_list(
            "sn,cpu_milli,memory_mib,gpu,model\nn1,x,1024,2,T4\n",
            p,
            &cfg,
        )
        .expect_err("bad number");
        assert_eq!((e.line, e.field), (2, "cpu_milli"));
        let e = parse_node_list("name,gpu\n", p, &cfg).expect_err("bad header");
        assert_eq!(e.field, "header");
        let e = parse_node_list("sn,cpu_milli,memory_mib,gpu,model\n\nn1,1,1,4\n", p, &cfg)
            .expect_err("short row");
        assert_eq!((e.line, e.field), (3, "row"));
    }
}
