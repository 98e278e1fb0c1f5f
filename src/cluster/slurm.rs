//! A site's cluster as its Slurm describes it: the `NodeName=` lines of a slurm.conf (with
//! `NodeName=DEFAULT` lines, hostlist ranges such as `gpu[01-40]`, `\` continuations), or the
//! output of `scontrol show node --oneliner`, with untyped `Gres=gpu:N` typed from the site's
//! gres.conf. GPU types are resolved against the catalog by name or alias; a type the catalog
//! does not know is an error naming the file, the line and the type.
//!
//! Pure: the caller reads the files.

use super::{Node, NodeListError};
use crate::config::{Config, split_gres_list, split_top_level};
use std::path::Path;

/// Hostlists are expanded name by name; one that names more nodes than this is a typo, not a
/// cluster (Slurm's own limit on a hostlist is of this order).
const MAX_NODES: usize = 1_000_000;

/// Whether `text` is a node description this module reads (a `NodeName=` line) rather than an
/// openb CSV.
pub fn looks_like_slurm(text: &str) -> bool {
    text.lines().any(|l| {
        l.trim_start()
            .get(..9)
            .is_some_and(|k| k.eq_ignore_ascii_case("nodename="))
    })
}

/// One statement of the file: its first line and its `key=value` words (keys lowercased).
struct Statement {
    line: usize,
    words: Vec<(String, String)>,
}

/// Whether `text` is a slurm.conf with node lines (Slurm's settings may be read from it), not
/// `scontrol show node` output.
pub fn is_slurm_conf(text: &str) -> bool {
    looks_like_slurm(text) && !text.contains(" CPUTot=")
}

/// The `NodeName=` statements of a slurm.conf or of `scontrol show node --oneliner` output.
fn statements(text: &str) -> Vec<Statement> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        // scontrol's `OS=Linux 6.1.0 #1 SMP ...` holds a '#' that is no comment.
        let scontrol = raw.contains(" CPUTot=");
        let body = if scontrol {
            raw
        } else {
            raw.split('#').next().unwrap_or("")
        };
        let (start, mut acc) = pending.take().unwrap_or((i + 1, String::new()));
        let trimmed = body.trim_end();
        if let Some(head) = trimmed.strip_suffix('\\') {
            acc.push_str(head);
            acc.push(' ');
            pending = Some((start, acc));
            continue;
        }
        acc.push_str(trimmed);
        let words: Vec<(String, String)> = acc
            .split_whitespace()
            .filter_map(|w| w.split_once('='))
            .map(|(k, v)| (k.to_ascii_lowercase(), v.trim_matches('"').to_owned()))
            .collect();
        if words.first().is_some_and(|(k, _)| k == "nodename") {
            out.push(Statement { line: start, words });
        }
    }
    out
}

/// The node names a Slurm hostlist (`gpu[01-04,07],login1`, `r[1-2]n[1-3]`) names, in order.
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for item in split_top_level(list) {
        expand_item(item, &mut out)?;
    }
    Ok(out)
}

fn expand_item(item: &str, out: &mut Vec<String>) -> Result<(), String> {
    let Some(open) = item.find('[') else {
        out.push(item.to_owned());
        return Ok(());
    };
    let close = item[open..]
        .find(']')
        .map(|c| open + c)
        .ok_or_else(|| format!("\"{item}\": '[' without ']'"))?;
    let (prefix, ranges, rest) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
    let mut tails = Vec::new();
    expand_item(rest, &mut tails)?;
    for r in ranges.split(',') {
        let (lo, hi) = r.split_once('-').unwrap_or((r, r));
        let bad = || format!("\"{item}\": \"{r}\" is not a number or a range of numbers");
        let a: u64 = lo.parse().map_err(|_| bad())?;
        let b: u64 = hi.parse().map_err(|_| bad())?;
        if b < a {
            return Err(format!("\"{item}\": the range \"{r}\" runs backwards"));
        }
        // A bound written with a leading zero (`01`) fixes the width, as Slurm reads it.
        let width = if lo.len() > 1 && lo.starts_with('0') {
            lo.len()
        } else {
            0
        };
        let count = usize::try_from(b - a + 1).unwrap_or(usize::MAX);
        if count.saturating_mul(tails.len()).saturating_add(out.len()) > MAX_NODES {
            return Err(format!("\"{item}\" names more than {MAX_NODES} nodes"));
        }
        for n in a..=b {
            for t in &tails {
                out.push(format!("{prefix}{n:0width$}{t}"));
            }
        }
    }
    Ok(())
}

/// The GPU types a gres.conf gives nodes: `(hostlist or None for every node, type)` per
/// `Name=gpu` line with a `Type=`.
fn gres_conf_types(gres_conf: &str) -> Vec<(Option<String>, String)> {
    let mut out = Vec::new();
    for raw in gres_conf.lines() {
        let line = raw.split('#').next().unwrap_or("");
        let mut nodes = None;
        let (mut gpu, mut ty) = (false, None);
        for w in line.split_whitespace() {
            let Some((k, v)) = w.split_once('=') else {
                continue;
            };
            match k.to_ascii_lowercase().as_str() {
                "nodename" => nodes = Some(v.to_owned()),
                "name" => gpu = v.eq_ignore_ascii_case("gpu"),
                "type" => ty = Some(v.to_owned()),
                _ => {}
            }
        }
        if let (true, Some(t)) = (gpu, ty) {
            out.push((nodes, t));
        }
    }
    out
}

/// A node's properties as its statement (over the `NodeName=DEFAULT` ones before it) gives them.
#[derive(Clone, Default)]
struct Props {
    cpus: Option<u64>,
    sockets: Option<u64>,
    cores: Option<u64>,
    threads: Option<u64>,
    memory_mib: Option<u64>,
    /// `(type or None for untyped, count)` per `gpu` GRES.
    gpus: Option<Vec<(Option<String>, u32)>>,
    /// Whether its `Gres=` has `mps`.
    mps: bool,
}

/// Reads the nodes of a slurm.conf or of `scontrol show node --oneliner` output; `gres_conf`
/// (its text and path) types untyped `Gres=gpu:N`. `file` labels errors.
pub fn parse_slurm_nodes(
    text: &str,
    file: &Path,
    gres_conf: Option<(&str, &Path)>,
    cfg: &Config,
) -> Result<Vec<Node>, NodeListError> {
    let err = |line: usize, field: &'static str, message: String| NodeListError {
        file: file.to_owned(),
        line,
        field,
        message,
    };
    let typed_by = gres_conf
        .map(|(t, _)| gres_conf_types(t))
        .unwrap_or_default();
    let mut defaults = Props::default();
    let mut nodes = Vec::new();
    let stmts = statements(text);
    if stmts.is_empty() {
        return Err(err(
            1,
            "NodeName",
            "no NodeName= line: give the slurm.conf that defines the nodes (not one that only \
             Includes them) or `scontrol show node --oneliner` output"
                .into(),
        ));
    }
    for st in stmts {
        let line = st.line;
        let names = &st.words[0].1;
        let mut p = defaults.clone();
        for (k, v) in &st.words[1..] {
            let num = |field: &'static str| {
                v.parse::<u64>()
                    .map_err(|_| err(line, field, format!("\"{v}\" is not a whole number")))
            };
            match k.as_str() {
                "cpus" | "cputot" => p.cpus = Some(num("CPUs")?),
                "sockets" => p.sockets = Some(num("Sockets")?),
                "corespersocket" => p.cores = Some(num("CoresPerSocket")?),
                "threadspercore" => p.threads = Some(num("ThreadsPerCore")?),
                "realmemory" => p.memory_mib = Some(num("RealMemory")?),
                "gres" => {
                    let mut gpus = Vec::new();
                    p.mps = false;
                    // scontrol writes a node without GRES as `Gres=(null)`.
                    let specs = if v.eq_ignore_ascii_case("(null)") {
                        Vec::new()
                    } else {
                        split_gres_list(v)
                    };
                    for spec in specs {
                        let parts: Vec<&str> = spec.split(':').collect();
                        if parts[0].eq_ignore_ascii_case("mps") {
                            p.mps = true;
                        }
                        if !parts[0].eq_ignore_ascii_case("gpu") {
                            continue; // mps, shard and other GRES hold no GPU of their own.
                        }
                        let count = |c: &str| {
                            c.parse::<u32>().ok().filter(|&n| n <= 64).ok_or_else(|| {
                                err(
                                    line,
                                    "Gres",
                                    format!(
                                        "\"{spec}\": \"{c}\" is not a GPU count (0 to 64 per node)"
                                    ),
                                )
                            })
                        };
                        match parts.as_slice() {
                            [_, n] => gpus.push((None, count(n)?)),
                            [_, ty, n] => gpus.push((Some((*ty).to_owned()), count(n)?)),
                            _ => {
                                return Err(err(
                                    line,
                                    "Gres",
                                    format!("cannot read \"{spec}\"; expected gpu:TYPE:COUNT"),
                                ));
                            }
                        }
                    }
                    p.gpus = Some(gpus);
                }
                _ => {}
            }
        }
        if names.eq_ignore_ascii_case("default") {
            defaults = p;
            continue;
        }
        let cpus = p.cpus.unwrap_or_else(|| {
            // Slurm's own default: the product of what the line gives, else one CPU.
            p.sockets.unwrap_or(1) * p.cores.unwrap_or(1) * p.threads.unwrap_or(1)
        });
        let memory_mib = p.memory_mib.unwrap_or(1);
        let hosts = expand_hostlist(names).map_err(|m| err(line, "NodeName", m))?;
        for host in hosts {
            let gpus = p.gpus.as_deref().unwrap_or(&[]);
            let total: u32 = gpus.iter().map(|g| g.1).sum();
            let mut types: Vec<String> = Vec::new();
            for (ty, _) in gpus.iter().filter(|g| g.1 > 0) {
                let ty = match ty {
                    Some(t) => t.clone(),
                    None => typed_by
                        .iter()
                        .find(|(on, _)| {
                            on.as_deref()
                                .is_none_or(|l| crate::config::hostlist_contains(l, &host))
                        })
                        .map(|(_, t)| t.clone())
                        .ok_or_else(|| {
                            err(
                                line,
                                "Gres",
                                format!(
                                    "node {host}: its GPUs have no type (gpu:{total}); write \
                                     Gres=gpu:TYPE:{total} or give the gres.conf whose Name=gpu \
                                     line has Type= for it{}",
                                    gres_conf.map_or(String::new(), |(_, f)| format!(
                                        " ({} has none)",
                                        f.display()
                                    ))
                                ),
                            )
                        })?,
                };
                if !types.iter().any(|t| t.eq_ignore_ascii_case(&ty)) {
                    types.push(ty);
                }
            }
            let gpu_type = match types.as_slice() {
                [] => None,
                [t] => Some(cfg.resolve_gpu_type(t).ok_or_else(|| {
                    err(
                        line,
                        "Gres",
                        format!(
                            "node {host}: GPU type \"{t}\" is neither a catalog type nor an alias \
                             (known: {}); add it to heshare.toml as [gpu.{t}] with its power and \
                             speed, or as an alias of the type it is",
                            cfg.gpu_type_names()
                        ),
                    )
                })?),
                many => {
                    return Err(err(
                        line,
                        "Gres",
                        format!(
                            "node {host} has GPUs of several types ({}); the simulator holds one \
                             GPU type per node: describe each type's GPUs as a node of its own",
                            many.join(", ")
                        ),
                    ));
                }
            };
            nodes.push(Node {
                name: host,
                cpu_milli: cpus.saturating_mul(1000),
                memory_mib,
                gpus: if gpu_type.is_some() { total } else { 0 },
                gpu_type,
                mps: p.mps && gpu_type.is_some(),
            });
        }
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BUNDLED_CONFIG;

    fn cfg() -> Config {
        Config::parse(BUNDLED_CONFIG, Path::new("heshare.toml")).expect("bundled config is valid")
    }

    fn parse(text: &str) -> Result<Vec<Node>, NodeListError> {
        parse_slurm_nodes(text, Path::new("slurm.conf"), None, &cfg())
    }

    #[test]
    fn hostlists_expand_as_slurm_reads_them() {
        assert_eq!(
            expand_hostlist("gpu[01-03,10],login1").expect("valid"),
            ["gpu01", "gpu02", "gpu03", "gpu10", "login1"]
        );
        assert_eq!(
            expand_hostlist("r[1-2]n[8-9]").expect("valid"),
            ["r1n8", "r1n9", "r2n8", "r2n9"]
        );
        assert_eq!(
            expand_hostlist("n[9-11]").expect("valid"),
            ["n9", "n10", "n11"]
        );
        assert!(expand_hostlist("n[3-1]").is_err());
        assert!(expand_hostlist("n[1-x]").is_err());
        assert!(expand_hostlist("n[1-2").is_err());
        assert!(expand_hostlist("n[0-9999999]").is_err(), "too many");
    }

    #[test]
    fn node_lines_with_defaults_ranges_and_continuations() {
        let cfg = cfg();
        let text = "\
# a site
ClusterName=site
NodeName=DEFAULT CPUs=64 RealMemory=512000
NodeName=a[01-02] Gres=gpu:a100:4,mps:400 Features=a100 \\
    State=UNKNOWN
NodeName=t01 CPUs=32 RealMemory=256000 Gres=gpu:T4:2 # an alias of t4
NodeName=login1
PartitionName=gpu Nodes=ALL Default=YES
";
        let nodes = parse(text).expect("parses");
        let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["a01", "a02", "t01", "login1"]);
        let a100 = cfg.gpu_type("a100").expect("a100");
        let t4 = cfg.gpu_type("t4").expect("t4");
        assert_eq!(
            (
                nodes[0].gpus,
                nodes[0].gpu_type,
                nodes[0].cpu_milli,
                nodes[0].memory_mib
            ),
            (4, Some(a100), 64_000, 512_000)
        );
        assert_eq!(
            (
                nodes[2].gpus,
                nodes[2].gpu_type,
                nodes[2].cpu_milli,
                nodes[2].memory_mib
            ),
            (2, Some(t4), 32_000, 256_000)
        );
        assert!(nodes[0].mps && !nodes[2].mps, "mps where its Gres= says");
        // No GRES of its own: the DEFAULT line gave none either.
        assert_eq!((nodes[3].gpus, nodes[3].gpu_type), (0, None));
        assert_eq!(nodes[3].cpu_milli, 64_000, "the DEFAULT line's CPUs");
        let alone =
            parse("NodeName=login2 Sockets=2 CoresPerSocket=8 ThreadsPerCore=2\n").expect("parses");
        assert_eq!(alone[0].cpu_milli, 32_000, "2 x 8 x 2 CPUs");
        assert_eq!(
            parse("NodeName=x Gres=(null)\n").expect("parses")[0].gpus,
            0
        );
    }

    #[test]
    fn scontrol_oneliner_output_reads_the_same() {
        let cfg = cfg();
        let text = "NodeName=v01 Arch=x86_64 CoresPerSocket=20 CPUAlloc=0 CPUEfctv=80 CPUTot=80 \
                    CPULoad=0.01 AvailableFeatures=v100 ActiveFeatures=v100 \
                    Gres=gpu:v100m32:8(S:0-1) NodeAddr=v01 NodeHostName=v01 Version=24.11.5 \
                    OS=Linux 6.1.0-28-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1 \
                    RealMemory=384000 AllocMem=0 FreeMem=380000 Sockets=2 Boards=1 State=IDLE\n";
        let nodes = parse(text).expect("parses");
        assert_eq!(nodes.len(), 1);
        let v100 = cfg.resolve_gpu_type("v100m32").expect("v100m32");
        assert_eq!(
            (
                nodes[0].gpus,
                nodes[0].gpu_type,
                nodes[0].cpu_milli,
                nodes[0].memory_mib
            ),
            (8, Some(v100), 80_000, 384_000)
        );
    }

    #[test]
    fn untyped_gpus_take_their_type_from_gres_conf() {
        let cfg = cfg();
        let text = "NodeName=g[1-2] CPUs=16 RealMemory=64000 Gres=gpu:2\nNodeName=h1 Gres=gpu:1\n";
        let gres = "AutoDetect=off\nNodeName=g[1-2] Name=gpu Type=a10 File=/dev/nvidia[0-1]\n";
        let nodes = parse_slurm_nodes(
            text,
            Path::new("slurm.conf"),
            Some((gres, Path::new("gres.conf"))),
            &cfg,
        );
        let e = nodes.expect_err("h1 has no type anywhere");
        assert_eq!((e.line, e.field), (2, "Gres"), "{e}");
        assert!(
            e.to_string().contains("node h1") && e.to_string().contains("gres.conf has none"),
            "{e}"
        );
        let nodes = parse_slurm_nodes(
            &text[..text.find("NodeName=h1").expect("h1")],
            Path::new("slurm.conf"),
            Some((gres, Path::new("gres.conf"))),
            &cfg,
        )
        .expect("typed by gres.conf");
        assert!(
            nodes
                .iter()
                .all(|n| n.gpu_type == cfg.gpu_type("a10") && n.gpus == 2)
        );
        // Without a gres.conf the error says what to write.
        let e = parse("NodeName=h1 Gres=gpu:1\n").expect_err("untyped");
        assert!(e.to_string().contains("Gres=gpu:TYPE:1"), "{e}");
    }

    #[test]
    fn an_unknown_type_names_file_line_and_type() {
        let e = parse("ClusterName=x\n\nNodeName=m[1-4] Gres=gpu:mi300x:8\n").expect_err("unknown");
        assert_eq!((e.line, e.field), (3, "Gres"));
        let s = e.to_string();
        assert!(
            s.starts_with("slurm.conf:3: Gres: node m1: GPU type \"mi300x\""),
            "{s}"
        );
        assert!(s.contains("[gpu.mi300x]"), "{s}");
    }

    #[test]
    fn bad_values_and_mixed_nodes_are_errors_with_their_line() {
        let e = parse("NodeName=a1 CPUs=lots\n").expect_err("not a number");
        assert_eq!((e.line, e.field), (1, "CPUs"), "{e}");
        let e = parse("NodeName=a1 Gres=gpu:a100:2,gpu:t4:2\n").expect_err("two types");
        assert!(e.to_string().contains("several types (a100, t4)"), "{e}");
        let e = parse("NodeName=a[2-1] Gres=gpu:a100:2\n").expect_err("backwards");
        assert_eq!(e.field, "NodeName");
        let e = parse("ClusterName=x\nInclude nodes.conf\n").expect_err("no nodes");
        assert!(e.to_string().contains("Include"), "{e}");
        assert!(looks_like_slurm("x=1\n NodeName=a1\n"));
        assert!(!looks_like_slurm("sn,cpu_milli,memory_mib,gpu,model\n"));
    }
}
