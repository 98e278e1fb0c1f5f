//! What a user's GPU request promises, and what heshare may change of it.
//!
//! A request is a contract. The job gets the GRES its user asked for: the same kind (`gpu` or
//! `mps`), the same count, the same share, the same type where one was named. heshare decides
//! only what the request leaves open: a type for an untyped GRES (through node features, so
//! the GRES itself stays untyped), the GPU clock, the size of a share its user left to heshare
//! (`--gpu-share`), and the job's priority. Two reasons make that the default:
//!
//! * Slurm accounts what the job holds: billing, fair share and QOS limits count `gres/gpu`
//!   and `gres/mps` apart, so a share turned into a whole GPU is charged as one.
//! * The job's own steps ask for the GRES again. Inside a job given `gpu:1` for its
//!   `--gres=mps:50`, every `srun --gres=mps:25` step fails ("Step requested GRES (mps:(null))
//!   not found in the job"), and a share given no MPS count runs with no thread limit.
//!
//! A site may opt in to more (`[policy] resize_asked_shares`): a batch `--gres=mps:P` job on one
//! node may then get another share or a whole GPU. Even then, and even where the user gave
//! `--gpu-share`, heshare never resizes a job whose steps ask for GRES (an srun or salloc
//! allocation, a batch script that launches such steps), and never touches a job on several
//! nodes.

use super::request::{GpuAsk, Rewrite, Submission};
use crate::config::Config;

/// Why a job is left entirely to Slurm, whatever heshare knows of it: a job that may span
/// several nodes gets its GRES on each, and its steps are laid out over them by Slurm.
pub fn untouchable(sub: &Submission<'_>) -> Option<&'static str> {
    sub.multi_node
        .then_some("a job on several nodes is left as asked")
}

/// Whether heshare may give this job's explicit `--gres=mps:P` another size of share or a
/// whole GPU: only where the site opted in, for a batch job on one GPU of one node whose script
/// launches no step that asks for GRES. `Err` says why not, for AdminComment.
pub fn may_resize(cfg: &Config, sub: &Submission<'_>, ask: &GpuAsk) -> Result<(), &'static str> {
    if !cfg.policy.resize_asked_shares {
        return Err("the site keeps explicit shares as asked ([policy] resize_asked_shares)");
    }
    if ask.mps_pct.is_none() || ask.per_job || ask.gpus != 1 {
        return Err("only a --gres=mps:P share of one GPU is resized");
    }
    if !sub.batch {
        return Err("an srun or salloc allocation's steps ask for its GRES again");
    }
    if sub.steps_ask_gres {
        return Err("its batch script launches steps that ask for GRES");
    }
    Ok(())
}

/// Whether the user left the share to heshare: `--gpu-share` given (`auto`, a percentage or
/// `exclusive`).
fn user_left_share(sub: &Submission<'_>) -> bool {
    sub.opts.gpu_share.is_some()
}

/// The last check of every rewrite against the request it replaces: `Some(what)` where the
/// rewrite would take away something the user asked for, so that the job is left as asked
/// instead. It guards every path of the decision, those to come included.
pub fn breach(cfg: &Config, sub: &Submission<'_>, ask: &GpuAsk, r: &Rewrite) -> Option<String> {
    if let Some(why) = untouchable(sub) {
        return Some(why.to_owned());
    }
    if r.gpus != ask.gpus {
        return Some(format!(
            "it would change the GPU count from {} to {}",
            ask.gpus, r.gpus
        ));
    }
    if r.per_job != ask.per_job {
        return Some("it would move the request between --gres and --gpus".into());
    }
    if let Some(t) = &ask.gpu_type {
        let named = cfg.resolve_gpu_type(t);
        if named.is_none() || r.offered.iter().any(|&o| Some(o) != named) {
            return Some(format!("it would offer another type than the {t} asked"));
        }
    }
    let resized = match (ask.mps_pct, r.mps_pct) {
        (None, None) => None,
        (Some(p), Some(q)) if p == u32::from(q) => None,
        (Some(p), Some(q)) => Some(format!("it would change the share from {p}% to {q}%")),
        (Some(p), None) => Some(format!("it would turn the {p}% share into a whole GPU")),
        (None, Some(q)) => Some(format!("it would turn a whole GPU into a {q}% share")),
    };
    let why = resized?;
    // Steps that ask for the GRES again need what the user asked, whoever opted in.
    if !sub.batch {
        return Some(format!(
            "{why}, and an srun or salloc allocation's steps ask for its GRES again"
        ));
    }
    if sub.steps_ask_gres {
        return Some(format!(
            "{why}, and its batch script launches steps that ask for GRES"
        ));
    }
    if user_left_share(sub) {
        return None;
    }
    // A site's opt-in gives shares more or less of a GPU, never a whole GPU a share.
    if ask.mps_pct.is_some() {
        if let Err(no) = may_resize(cfg, sub, ask) {
            return Some(format!("{why}, and {no}"));
        }
        return None;
    }
    Some(why)
}

/// Whether a batch script launches job steps that ask for GRES themselves (`srun --gres=...`,
/// `--gpus...`, `-G`, `--tres-per-task`): such steps need the kind and count of GRES the job
/// asked for. Comments and `#SBATCH` lines are not steps.
pub fn steps_ask_gres(script: &str) -> bool {
    script.lines().any(|line| {
        let code = line.split('#').next().unwrap_or("");
        let mut words = code.split(|c: char| c.is_whitespace() || c == ';' || c == '&' || c == '|');
        let mut launched = false;
        words.any(|w| {
            if w == "srun" || w.ends_with("/srun") {
                launched = true;
                return false;
            }
            launched
                && (w.starts_with("--gres")
                    || w.starts_with("--gpus")
                    || w.starts_with("--tres-per-task")
                    || w.starts_with("--mem-per-gpu")
                    || w.starts_with("-G"))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BUNDLED_CONFIG;
    use crate::slurm::request::{Live, Site};
    use crate::slurm::request::{Options, TresForm, Verdict, decide};
    use std::path::Path;

    fn cfg(resize: bool) -> Config {
        let mut c = Config::parse(BUNDLED_CONFIG, Path::new("h.toml")).expect("valid");
        c.policy.resize_asked_shares = resize;
        c
    }

    fn ask(gres: &str) -> GpuAsk {
        crate::slurm::request::parse_tres_per_node(Some(gres))
            .expect("readable")
            .expect("a GPU request")
    }

    fn rewrite(gpus: u32, mps_pct: Option<u8>, offered: Vec<usize>) -> Rewrite {
        Rewrite {
            tres: String::new(),
            per_job: false,
            features: None,
            prefer: None,
            site_factor: 0,
            admin_comment: String::new(),
            spank_env: vec![],
            offered,
            gpus,
            mps_pct,
            limit_type: None,
            demand_pct: None,
            learned_limit_s: None,
            kill_probability: 0.0,
        }
    }

    #[test]
    fn a_share_is_neither_resized_nor_made_whole_unless_the_site_or_user_says_so() {
        let a = ask("gres:mps:30");
        let none = Options::default();
        let sub = Submission::new(Some(&a), &none, "u");
        let c = cfg(false);
        let t4 = c.gpu_type("t4").expect("t4");
        assert_eq!(breach(&c, &sub, &a, &rewrite(1, Some(30), vec![t4])), None);
        let whole = breach(&c, &sub, &a, &rewrite(1, None, vec![t4])).expect("breach");
        assert!(whole.contains("30% share into a whole GPU"), "{whole}");
        assert!(whole.contains("resize_asked_shares"), "{whole}");
        let wider = breach(&c, &sub, &a, &rewrite(1, Some(38), vec![t4])).expect("breach");
        assert!(wider.contains("from 30% to 38%"), "{wider}");
        // The site's opt-in allows both; the user's --gpu-share does, whatever the site says.
        let open = cfg(true);
        assert_eq!(breach(&open, &sub, &a, &rewrite(1, None, vec![t4])), None);
        assert_eq!(
            breach(&open, &sub, &a, &rewrite(1, Some(20), vec![t4])),
            None
        );
        let auto = Options {
            gpu_share: Some("auto".into()),
            ..Options::default()
        };
        let sub_auto = Submission::new(Some(&a), &auto, "u");
        assert_eq!(
            breach(&c, &sub_auto, &a, &rewrite(1, Some(20), vec![t4])),
            None
        );
        // ...but not where the job's steps ask for the GRES again.
        let stepping = Submission {
            steps_ask_gres: true,
            ..sub_auto
        };
        assert!(breach(&c, &stepping, &a, &rewrite(1, Some(20), vec![t4])).is_some());
    }

    #[test]
    fn the_opt_in_never_reaches_steps_that_ask_for_gres_allocations_or_several_nodes() {
        let c = cfg(true);
        let a = ask("gres:mps:50");
        let none = Options::default();
        let t4 = c.gpu_type("t4").expect("t4");
        let whole = rewrite(1, None, vec![t4]);
        let steps = Submission {
            steps_ask_gres: true,
            ..Submission::new(Some(&a), &none, "u")
        };
        let why = breach(&c, &steps, &a, &whole).expect("breach");
        assert!(why.contains("launches steps that ask for GRES"), "{why}");
        let alloc = Submission {
            batch: false,
            ..Submission::new(Some(&a), &none, "u")
        };
        assert!(
            breach(&c, &alloc, &a, &whole)
                .expect("breach")
                .contains("srun or salloc")
        );
        let wide = Submission {
            multi_node: true,
            ..Submission::new(Some(&a), &none, "u")
        };
        // Not even the request as asked, with a type chosen, goes through for several nodes.
        assert!(breach(&c, &wide, &a, &rewrite(1, Some(50), vec![t4])).is_some());
    }

    #[test]
    fn whole_gpus_never_become_shares_or_other_counts_or_types_without_the_user() {
        let c = cfg(true);
        let none = Options::default();
        let g = ask("gres:gpu:2");
        let sub = Submission::new(Some(&g), &none, "u");
        let a100 = c.gpu_type("a100").expect("a100");
        let t4 = c.gpu_type("t4").expect("t4");
        assert_eq!(
            breach(&c, &sub, &g, &rewrite(2, None, vec![a100, t4])),
            None
        );
        assert!(breach(&c, &sub, &g, &rewrite(1, None, vec![a100])).is_some());
        let one = ask("gres:gpu:1");
        let sub1 = Submission::new(Some(&one), &none, "u");
        let share = breach(&c, &sub1, &one, &rewrite(1, Some(40), vec![a100])).expect("breach");
        assert!(share.contains("whole GPU into a 40% share"), "{share}");
        let typed = ask("gres:gpu:a100:1");
        let sub_t = Submission::new(Some(&typed), &none, "u");
        assert_eq!(
            breach(&c, &sub_t, &typed, &rewrite(1, None, vec![a100])),
            None
        );
        assert!(breach(&c, &sub_t, &typed, &rewrite(1, None, vec![t4])).is_some());
        assert_eq!(typed.form, TresForm::Colon);
    }

    #[test]
    fn steps_asking_for_gres_are_found_in_the_script_and_comments_are_not_steps() {
        assert!(steps_ask_gres(
            "#!/bin/bash\nsrun --gres=mps:25 ./a &\nwait\n"
        ));
        assert!(steps_ask_gres("/usr/bin/srun -n1 --gpus=1 true"));
        assert!(steps_ask_gres("x=1; srun -G 1 hostname"));
        assert!(steps_ask_gres("srun --tres-per-task=gres/gpu:1 app"));
        assert!(!steps_ask_gres(
            "#!/bin/sh\n#SBATCH --gres=mps:30\nsrun ./app\n"
        ));
        assert!(!steps_ask_gres("srun ./app # --gres=mps:10 later"));
        assert!(!steps_ask_gres("python train.py --gpus 2"));
    }

    #[test]
    fn decisions_keep_a_first_runs_share_by_default_and_on_opt_in() {
        // No class, no profile, no snapshot: nothing to price another share against.
        let a = ask("gres:mps:30");
        let none = Options::default();
        let site = Site {
            present: vec![(cfg(false).gpu_type("t4").expect("t4"), 4)],
            feature_types: vec![false; cfg(false).gpu_types.len()],
        };
        let sub = Submission::new(Some(&a), &none, "u");
        for resize in [false, true] {
            let v = decide(&cfg(resize), &site, Live::NONE, &sub);
            assert!(
                matches!(&v, Verdict::Annotate(m) if m.contains("left as asked")),
                "{v:?}"
            );
        }
        let wide = Submission {
            multi_node: true,
            ..Submission::new(Some(&a), &none, "u")
        };
        assert_eq!(
            decide(&cfg(true), &site, Live::NONE, &wide),
            Verdict::PassThrough
        );
    }
}
