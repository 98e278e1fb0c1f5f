//! What the job_submit plugin decides, as pure functions: read a job's GPU request (the TRES
//! strings Slurm hands the plugin) and its heshare SPANK options, call the policy, and say how the
//! job description should change. The FFI layer only copies strings in and out.

use crate::config::Config;
use crate::policy::{
    ClusterView, EnergyPolicy, JobRequest, PlaceContext, Plan, ShareRequest, place_with,
};
use crate::units::SharePct;

/// How the running Slurm spells GRES in TRES strings: `gres:gpu:1` up to 23.02, `gres/gpu:1`
/// from 23.11 (DESIGN fact 3). Written back in the form it came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TresForm {
    Colon,
    Slash,
}

/// A job's GPU request as Slurm passed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuAsk {
    pub gpus: u32,
    pub gpu_type: Option<String>,
    /// `--gres=mps:PCT`.
    pub mps_pct: Option<u32>,
    pub form: TresForm,
    /// The other TRES entries of the same field, kept as they were.
    pub others: Vec<String>,
    /// Asked per job (`--gpus=N`, tres_per_job) rather than per node (`--gres`, tres_per_node).
    pub per_job: bool,
}

/// heshare's SPANK options as they reach job_submit in spank_job_env.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Options {
    pub gpu_share: Option<String>,
    pub gpu_class: Option<String>,
    pub energy_policy: Option<String>,
}

/// Reads `tres_per_node` (`gres:gpu:a100:2`, `gres:mps:30`, `gres/gpu:1`, with other entries
/// separated by `,` or `;`). `Ok(None)`: no GPU asked for.
pub fn parse_tres_per_node(tres: Option<&str>) -> Result<Option<GpuAsk>, String> {
    let Some(tres) = tres.filter(|t| !t.trim().is_empty()) else {
        return Ok(None);
    };
    let mut ask: Option<GpuAsk> = None;
    let mut others = Vec::new();
    for entry in tres
        .split([',', ';'])
        .map(str::trim)
        .filter(|e| !e.is_empty())
    {
        let (form, rest) = if let Some(r) = entry.strip_prefix("gres:") {
            (TresForm::Colon, r)
        } else if let Some(r) = entry.strip_prefix("gres/") {
            (TresForm::Slash, r)
        } else {
            others.push(entry.to_owned());
            continue;
        };
        let parts: Vec<&str> = rest.split([':', '=']).collect();
        let count = |s: &str| {
            s.parse::<u32>()
                .map_err(|_| format!("cannot read the count in \"{entry}\""))
        };
        let (gpus, gpu_type, mps_pct) = match parts.as_slice() {
            ["gpu", n] => (count(n)?, None, None),
            ["gpu", t, n] => (count(n)?, Some((*t).to_owned()), None),
            ["mps", n] => (1, None, Some(count(n)?)),
            ["mps", t, n] => (1, Some((*t).to_owned()), Some(count(n)?)),
            _ => {
                others.push(entry.to_owned());
                continue;
            }
        };
        ask = Some(GpuAsk {
            gpus,
            gpu_type,
            mps_pct,
            form,
            others: vec![],
            per_job: false,
        });
    }
    Ok(ask.map(|a| GpuAsk { others, ..a }))
}

/// Reads the job's GPU request: `tres_per_node` (`--gres`) first, else `tres_per_job`
/// (`--gpus=N`, whole GPUs only).
pub fn parse_gpu_request(
    tres_per_node: Option<&str>,
    tres_per_job: Option<&str>,
) -> Result<Option<GpuAsk>, String> {
    if let Some(a) = parse_tres_per_node(tres_per_node)? {
        return Ok(Some(a));
    }
    Ok(parse_tres_per_node(tres_per_job)?
        .filter(|a| a.mps_pct.is_none())
        .map(|a| GpuAsk { per_job: true, ..a }))
}

const SPANK_PREFIX: &str = "_SLURM_SPANK_OPTION_heshare_";

/// Reads heshare's options from spank_job_env entries (`_SLURM_SPANK_OPTION_heshare_gpu_share=auto`).
pub fn parse_options<'a>(env: impl IntoIterator<Item = &'a str>) -> Options {
    let mut o = Options::default();
    for e in env {
        let Some(rest) = e.strip_prefix(SPANK_PREFIX) else {
            continue;
        };
        let Some((k, v)) = rest.split_once('=') else {
            continue;
        };
        let v = Some(v.to_owned());
        match k {
            "gpu_share" => o.gpu_share = v,
            "gpu_class" => o.gpu_class = v,
            "energy_policy" => o.energy_policy = v,
            _ => {}
        }
    }
    o
}

/// How the job description changes.
#[derive(Debug, Clone, PartialEq)]
pub struct Rewrite {
    /// The new GPU request, for tres_per_node (or tres_per_job when `per_job`).
    pub tres_per_node: String,
    pub per_job: bool,
    /// Slurm nice adjustment (the plugin adds NICE_OFFSET).
    pub nice: i32,
    pub admin_comment: String,
    /// `HESHARE_*=value` entries for spank_job_env (the Prolog sees them as SPANK_HESHARE_*).
    pub spank_env: Vec<String>,
}

/// The plugin's answer for one job.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Not a GPU job, or nothing to decide: leave the job as it is.
    PassThrough,
    /// Leave the request alone but record why (e.g. no job class given).
    Annotate(String),
    Rewrite(Rewrite),
    /// Reject with this message (bad heshare option, or nothing can run the job).
    Reject(String),
}

/// Decides for one job. `present` lists the GPU types the cluster has (catalog index, the most
/// GPUs of that type on one node); the decision never names another type, nor one without a
/// node big enough for the job, so the rewrite cannot make Slurm reject a job its user's own
/// request would have run.
/// `batch` is false for srun/salloc allocations: their job steps ask again for the GRES the user
/// gave, so a `gpu` request must stay a `gpu` request (heshare picks the type, not a share).
pub fn decide(
    cfg: &Config,
    present: &[(usize, u32)],
    ask: Option<&GpuAsk>,
    opts: &Options,
    user: &str,
    batch: bool,
) -> Verdict {
    decide_with(
        cfg,
        present,
        ask,
        opts,
        user,
        batch,
        &mut PlaceContext::default(),
    )
}

/// `decide` with sharing plans remembered in `ctx` between calls (the plugin keeps one per
/// loaded config).
pub fn decide_with(
    cfg: &Config,
    present: &[(usize, u32)],
    ask: Option<&GpuAsk>,
    opts: &Options,
    user: &str,
    batch: bool,
    ctx: &mut PlaceContext,
) -> Verdict {
    let Some(ask) = ask else {
        return if opts.gpu_share.is_some() || opts.gpu_class.is_some() {
            Verdict::Reject("heshare: --gpu-share/--gpu-class need a GPU request (--gres=gpu:N or --gres=mps:PCT)".into())
        } else {
            Verdict::PassThrough
        };
    };
    if ask.per_job
        && opts
            .gpu_share
            .as_deref()
            .is_some_and(|s| !s.eq_ignore_ascii_case("exclusive"))
    {
        return Verdict::Reject(
            "heshare: --gpu-share needs a per-node request: use --gres=gpu:1 instead of --gpus"
                .into(),
        );
    }
    let share = match opts
        .gpu_share
        .as_deref()
        .filter(|_| batch || ask.mps_pct.is_some())
    {
        Some(s) => match crate::cli::parse_share(s) {
            Ok(r) => r,
            Err(e) => return Verdict::Reject(format!("heshare: --gpu-share: {e}")),
        },
        None => match ask.mps_pct {
            Some(p) => match u8::try_from(p).ok().and_then(SharePct::new) {
                Some(s) => ShareRequest::Pct(s),
                None => return Verdict::PassThrough,
            },
            None => ShareRequest::Exclusive,
        },
    };
    let energy_policy = match opts.energy_policy.as_deref() {
        None => None,
        Some("performance") => Some(EnergyPolicy::Performance),
        Some("balanced") => Some(EnergyPolicy::Balanced),
        Some("energy") => Some(EnergyPolicy::Energy),
        Some(other) => {
            return Verdict::Reject(format!(
                "heshare: --energy-policy: \"{other}\" is not performance, balanced or energy"
            ));
        }
    };
    let Some(class) = opts.gpu_class.clone() else {
        return Verdict::Annotate("heshare: no --gpu-class, request left as asked".into());
    };
    if cfg.class(&class).is_none() {
        let known = cfg.class_names();
        return Verdict::Reject(format!(
            "heshare: --gpu-class: unknown class \"{class}\" (known: {known})"
        ));
    }
    // Types with a node that holds the whole request.
    let fits: Vec<usize> = present
        .iter()
        .filter(|&&(_, n)| n >= ask.gpus)
        .map(|&(t, _)| t)
        .collect();
    let mut allowed: Vec<String> = fits
        .iter()
        .map(|&t| cfg.gpu_types[t].name.clone())
        .collect();
    if let Some(t) = &ask.gpu_type {
        match cfg.resolve_gpu_type(t) {
            Some(i) if fits.contains(&i) => allowed = vec![cfg.gpu_types[i].name.clone()],
            Some(i) if present.iter().any(|&(p, _)| p == i) => {
                return Verdict::Annotate(format!(
                    "heshare: no node has {} {t} GPUs, request left as asked",
                    ask.gpus
                ));
            }
            // A type heshare does not know: leave the user's request to Slurm.
            _ => {
                return Verdict::Annotate(format!(
                    "heshare: GPU type \"{t}\" is not in the catalog, request left as asked"
                ));
            }
        }
    }
    if allowed.is_empty() {
        return Verdict::Annotate(format!(
            "heshare: no node has {} GPUs of one type, request left as asked",
            ask.gpus
        ));
    }
    let view = ClusterView {
        gpus: ClusterView::idle_types(cfg)
            .gpus
            .into_iter()
            .filter(|g| fits.contains(&g.gpu_type))
            .collect(),
    };
    let req = JobRequest {
        class: class.clone(),
        gpus: ask.gpus,
        share,
        user: user.to_owned(),
        gpu_types: allowed,
        energy_policy,
    };
    match place_with(cfg, &view, &req, ctx) {
        Ok(plan) => Verdict::Rewrite(rewrite(ask, &plan, &class)),
        Err(e) => Verdict::Reject(format!("heshare: {e}")),
    }
}

fn rewrite(ask: &GpuAsk, plan: &Plan, class: &str) -> Rewrite {
    let d = &plan.decision;
    let sep = match ask.form {
        TresForm::Colon => "gres:",
        TresForm::Slash => "gres/",
    };
    let gres = if d.exclusive {
        format!("{sep}gpu:{}:{}", d.gpu_type, d.gpus)
    } else {
        format!("{sep}mps:{}:{}", d.gpu_type, d.share_pct)
    };
    let tres_per_node = std::iter::once(gres)
        .chain(ask.others.iter().cloned())
        .collect::<Vec<_>>()
        .join(",");
    let share = if d.exclusive {
        "exclusive".to_owned()
    } else {
        d.share_pct.to_string()
    };
    // admin_comment is one line in scontrol's output: the reason's first clause, plain text.
    let first = d.reason.split("; ").next().unwrap_or(&d.reason);
    let reason: String = first
        .chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect();
    Rewrite {
        tres_per_node,
        per_job: ask.per_job,
        nice: d.nice,
        admin_comment: format!(
            "heshare: type={} share={share} clock={} reason={reason}",
            d.gpu_type, d.sm_clock_mhz
        ),
        spank_env: vec![
            format!("HESHARE_CLASS={class}"),
            format!("HESHARE_GPU_TYPE={}", d.gpu_type),
            format!("HESHARE_SHARE={share}"),
            format!("HESHARE_SM_CLOCK_MHZ={}", d.sm_clock_mhz),
            format!("HESHARE_BOUND={}", d.slowdown_bound),
            format!("HESHARE_PRED_RUNTIME_S={:.0}", d.predicted_runtime_s),
            format!("HESHARE_PRED_ENERGY_J={:.0}", d.predicted_energy_j),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::BUNDLED_CONFIG;
    use std::path::Path;

    fn cfg() -> Config {
        Config::parse(BUNDLED_CONFIG, Path::new("h.toml")).expect("valid")
    }

    fn present(cfg: &Config, names: &[&str]) -> Vec<(usize, u32)> {
        names
            .iter()
            .map(|n| (cfg.gpu_type(n).expect("catalog type"), 2))
            .collect()
    }

    #[test]
    fn tres_strings_of_both_forms_are_read() {
        let a = parse_tres_per_node(Some("gres:gpu:a100:2"))
            .expect("ok")
            .expect("gpu");
        assert_eq!(
            (a.gpus, a.gpu_type.as_deref(), a.form),
            (2, Some("a100"), TresForm::Colon)
        );
        let m = parse_tres_per_node(Some("gres/mps:30"))
            .expect("ok")
            .expect("mps");
        assert_eq!((m.mps_pct, m.form), (Some(30), TresForm::Slash));
        let o = parse_tres_per_node(Some("gres:gpu:1,gres:shard:2"))
            .expect("ok")
            .expect("gpu");
        assert_eq!(o.others, vec!["gres:shard:2".to_owned()]);
        assert_eq!(parse_tres_per_node(Some("")), Ok(None));
        assert_eq!(parse_tres_per_node(None), Ok(None));
        assert_eq!(parse_tres_per_node(Some("gres:shard:2")), Ok(None));
        assert!(parse_tres_per_node(Some("gres:gpu:lots")).is_err());
    }

    #[test]
    fn gpus_per_job_become_whole_gpus_of_the_chosen_type() {
        let cfg = cfg();
        let here = present(&cfg, &["a100", "t4"]);
        let ask = parse_gpu_request(None, Some("gres:gpu:2"))
            .expect("ok")
            .expect("gpus");
        assert!(ask.per_job);
        let opts = Options {
            gpu_class: Some("bert-train".into()),
            ..Options::default()
        };
        let Verdict::Rewrite(r) = decide(&cfg, &here, Some(&ask), &opts, "u", true) else {
            panic!("expected a rewrite")
        };
        assert_eq!(
            (r.tres_per_node.as_str(), r.per_job),
            ("gres:gpu:a100:2", true)
        );
        let share = Options {
            gpu_share: Some("auto".into()),
            ..opts
        };
        assert!(
            matches!(decide(&cfg, &here, Some(&ask), &share, "u", true), Verdict::Reject(m) if m.contains("--gres=gpu:1"))
        );
        // --gres wins over --gpus, as in Slurm's own reading.
        let both = parse_gpu_request(Some("gres:gpu:t4:1"), Some("gres:gpu:2"))
            .expect("ok")
            .expect("gres");
        assert!(!both.per_job);
    }

    #[test]
    fn options_come_from_spank_env() {
        let o = parse_options([
            "PATH=/bin",
            "_SLURM_SPANK_OPTION_heshare_gpu_share=auto",
            "_SLURM_SPANK_OPTION_heshare_gpu_class=vit-infer",
            "_SLURM_SPANK_OPTION_other_x=1",
        ]);
        assert_eq!(
            o,
            Options {
                gpu_share: Some("auto".into()),
                gpu_class: Some("vit-infer".into()),
                energy_policy: None
            }
        );
    }

    #[test]
    fn small_inference_becomes_an_mps_share_on_a_present_type() {
        let cfg = cfg();
        let here = present(&cfg, &["a100", "v100m16", "t4"]);
        let ask = parse_tres_per_node(Some("gres:gpu:1")).expect("ok");
        let opts = Options {
            gpu_share: Some("auto".into()),
            gpu_class: Some("vit-infer".into()),
            energy_policy: None,
        };
        let Verdict::Rewrite(r) = decide(&cfg, &here, ask.as_ref(), &opts, "alice", true) else {
            panic!("expected a rewrite")
        };
        assert!(
            r.tres_per_node.starts_with("gres:mps:t4:"),
            "{}",
            r.tres_per_node
        );
        assert!(
            r.admin_comment.starts_with("heshare: type=t4 share="),
            "{}",
            r.admin_comment
        );
        assert!(
            r.admin_comment.ends_with("(1.00x alone)"),
            "only the reason's first clause: {}",
            r.admin_comment
        );
        assert!(r.spank_env.contains(&"HESHARE_CLASS=vit-infer".to_owned()));
        assert!(r.nice <= 0);
    }

    #[test]
    fn interactive_jobs_keep_gpu_requests_their_steps_can_match() {
        let cfg = cfg();
        let here = present(&cfg, &["a100", "v100m16", "t4"]);
        let ask = parse_tres_per_node(Some("gres:gpu:1")).expect("ok");
        let opts = Options {
            gpu_share: Some("auto".into()),
            gpu_class: Some("vit-infer".into()),
            energy_policy: None,
        };
        let Verdict::Rewrite(r) = decide(&cfg, &here, ask.as_ref(), &opts, "u", false) else {
            panic!("expected a rewrite")
        };
        assert!(
            r.tres_per_node.starts_with("gres:gpu:"),
            "srun's step asks for gpu, so the job keeps gpu: {}",
            r.tres_per_node
        );
    }

    #[test]
    fn training_gets_whole_gpus_and_never_a_type_the_cluster_lacks() {
        let cfg = cfg();
        let here = present(&cfg, &["a100", "v100m16", "t4"]);
        let ask = parse_tres_per_node(Some("gres:gpu:2")).expect("ok");
        let opts = Options {
            gpu_class: Some("bert-train".into()),
            ..Options::default()
        };
        let Verdict::Rewrite(r) = decide(&cfg, &here, ask.as_ref(), &opts, "bob", true) else {
            panic!("expected a rewrite")
        };
        // h100 is the catalog's best, but this cluster has none.
        assert_eq!(r.tres_per_node, "gres:gpu:a100:2");
        // Nor a type without a node big enough: four GPUs fit only where a node has four.
        let mut bigger = here.clone();
        bigger.push((cfg.gpu_type("p100").expect("p100"), 4));
        let four = parse_tres_per_node(Some("gres:gpu:4")).expect("ok");
        let Verdict::Rewrite(r) = decide(&cfg, &bigger, four.as_ref(), &opts, "bob", true) else {
            panic!("expected a rewrite")
        };
        assert_eq!(r.tres_per_node, "gres:gpu:p100:4");
        let eight = parse_tres_per_node(Some("gres:gpu:8")).expect("ok");
        assert!(matches!(
            decide(&cfg, &bigger, eight.as_ref(), &opts, "bob", true),
            Verdict::Annotate(_)
        ));
    }

    #[test]
    fn bad_options_are_rejected_and_plain_jobs_pass() {
        let cfg = cfg();
        let here = present(&cfg, &["t4"]);
        let ask = parse_tres_per_node(Some("gres:gpu:1")).expect("ok");
        let bad = |o: Options| match decide(&cfg, &here, ask.as_ref(), &o, "u", true) {
            Verdict::Reject(m) => m,
            v => panic!("expected a rejection, got {v:?}"),
        };
        assert!(
            bad(Options {
                gpu_class: Some("nope".into()),
                ..Options::default()
            })
            .contains("unknown class \"nope\"")
        );
        assert!(
            bad(Options {
                gpu_share: Some("0".into()),
                gpu_class: Some("vit-infer".into()),
                ..Options::default()
            })
            .contains("--gpu-share")
        );
        assert!(
            bad(Options {
                energy_policy: Some("green".into()),
                gpu_class: Some("vit-infer".into()),
                ..Options::default()
            })
            .contains("--energy-policy")
        );
        assert_eq!(
            decide(&cfg, &here, None, &Options::default(), "u", true),
            Verdict::PassThrough
        );
        assert!(matches!(
            decide(&cfg, &here, ask.as_ref(), &Options::default(), "u", true),
            Verdict::Annotate(_)
        ));
        assert!(matches!(
            decide(
                &cfg,
                &here,
                None,
                &Options {
                    gpu_class: Some("vit-infer".into()),
                    ..Options::default()
                },
                "u",
                true
            ),
            Verdict::Reject(_)
        ));
    }
}
