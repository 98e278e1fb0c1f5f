//! What the job_submit plugin decides, as pure functions: given a job's GPU request and heshare
//! options (read in `ask`), place it on the plugin's view of
//! the cluster (the live snapshot when a fresh one exists, else one idle GPU per type), and say how
//! the job description should change. The FFI layer only copies strings in and out; the
//! simulator calls the same `decide` and follows the same `Rewrite`.
//!
//! A decision Slurm can follow: where nodes carry their GPU type as a feature, the job asks for
//! untyped GPUs (or an untyped MPS share) constrained to the chosen types by a node-feature OR,
//! with the best as `--prefer`; when more than one type scores close to the best, Slurm's own
//! scheduler starts it on whichever has room first, and an MPS share is sized for the most
//! demanding type offered. A pending job is re-decided on later snapshots and moved when its
//! offer changed (`reroute`): only its features change, which every Slurm applies cleanly (on
//! 22.05 a pending job's GPU type cannot be changed: the type in TRES stays required beside the
//! new one, and the job never runs). Where nodes lack the features the GRES names the one type.

pub use super::admin_comment::{Decided, merge_admin_comment, read_admin_comment};
use super::ask::parse_energy_policy;
pub use super::ask::{
    AskError, GpuAsk, Options, TresForm, parse_gpu_request, parse_options, parse_tres_per_node,
};
use super::contract;
pub use super::revisit::{PendingJob, Revisit, revisit};
use super::snapshot::Snapshot;
use crate::config::Config;
use crate::model::full_speed_share;
use crate::policy::{
    ClusterView, EnergyPolicy, GpuSlot, JobRequest, PlaceContext, Plan, ShareRequest, place_slots,
    sized_class,
};
use crate::profile::Learned;
use crate::units::SharePct;

/// What slurm.conf says of the cluster, read at the plugin's init.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Site {
    /// Catalog types named by `Gres=gpu:TYPE:N`, each with the most GPUs of it on one node.
    pub present: Vec<(usize, u32)>,
    /// Per catalog type: whether every node with it carries its name as a feature and no other
    /// GPU type, so a job may be offered it in a feature OR.
    pub feature_types: Vec<bool>,
}

/// The plugin's live view at the moment of a decision.
#[derive(Debug, Clone, Copy)]
pub struct Live<'a> {
    pub snapshot: Option<&'a Snapshot>,
    /// Now, in the snapshot's clock.
    pub now_s: f64,
    /// A snapshot older than this is not trusted: the decision falls back to the static view.
    pub max_age_s: f64,
}

impl Live<'_> {
    /// No live view: every decision is made on one idle GPU per type.
    pub const NONE: Live<'static> = Live {
        snapshot: None,
        now_s: 0.0,
        max_age_s: 0.0,
    };

    pub(crate) fn fresh(&self) -> Option<&Snapshot> {
        self.snapshot
            .filter(|s| self.now_s - s.taken_at_s <= self.max_age_s)
    }

    /// `snapshot=3s`, `snapshot=stale:125s`, `snapshot=none`: for the AdminComment.
    fn describe(&self) -> String {
        match self.snapshot {
            None => "snapshot=none".into(),
            Some(s) => {
                let age = (self.now_s - s.taken_at_s).max(0.0);
                if age <= self.max_age_s {
                    format!("snapshot={age:.0}s")
                } else {
                    format!("snapshot=stale:{age:.0}s")
                }
            }
        }
    }
}

/// One submission as job_submit sees it.
#[derive(Debug, Clone, Copy)]
pub struct Submission<'a> {
    pub ask: Option<&'a GpuAsk>,
    pub opts: &'a Options,
    pub user: &'a str,
    /// False for srun/salloc allocations: their job steps ask again for the GRES the user gave,
    /// so a `gpu` request must stay a `gpu` request (heshare picks the types, not a share).
    pub batch: bool,
    /// The job may span several nodes (`-N` above one, or a node range): left to Slurm.
    pub multi_node: bool,
    /// Its batch script launches steps that ask for GRES themselves
    /// ([`super::contract::steps_ask_gres`]): its request is never resized.
    pub steps_ask_gres: bool,
    pub time_limit_s: Option<f64>,
    /// The job's own `--constraint` and `--prefer`: heshare never overwrites them, so a job with
    /// either is offered one type.
    pub features: Option<&'a str>,
    pub prefer: Option<&'a str>,
    /// CPUs and memory per node it asks for, when it says: a type whose nodes are all too small
    /// is never offered.
    pub cpus: Option<u32>,
    pub memory_mib: Option<u64>,
    /// Re-pricing a pending job whose GRES is heshare's rewrite already: the share its user's
    /// GRES asked at submission (the priority's yardstick) and the need the user gave
    /// (`--gres=mps:P --gpu-share=auto`), read back from AdminComment.
    pub asked: Option<ShareRequest>,
    pub demand_pct: Option<u8>,
    /// The profile of the job's own earlier runs, when one of its keys has enough of them
    /// (`profile::lookup`, done by the caller, which holds the store).
    pub learned: Option<&'a Learned>,
}

impl<'a> Submission<'a> {
    /// A batch job of `user` with no constraint, time limit or preference.
    pub fn new(ask: Option<&'a GpuAsk>, opts: &'a Options, user: &'a str) -> Submission<'a> {
        Submission {
            ask,
            opts,
            user,
            batch: true,
            multi_node: false,
            steps_ask_gres: false,
            time_limit_s: None,
            features: None,
            prefer: None,
            cpus: None,
            memory_mib: None,
            asked: None,
            demand_pct: None,
            learned: None,
        }
    }
}

/// How the job description changes.
#[derive(Debug, Clone, PartialEq)]
pub struct Rewrite {
    /// The new GPU request, for tres_per_node (or tres_per_job when `per_job`).
    pub tres: String,
    pub per_job: bool,
    /// New `features` (required constraint) and `prefer` (soft) values; `None` leaves the field.
    pub features: Option<String>,
    pub prefer: Option<String>,
    /// heshare's part of the job's priority, for Slurm's site factor (the plugin adds
    /// NICE_OFFSET; positive = sooner).
    pub site_factor: i32,
    /// heshare's part of AdminComment (`merge_admin_comment` keeps what others wrote).
    pub admin_comment: String,
    /// `HESHARE_*=value` entries for spank_job_env (the Prolog sees them as SPANK_HESHARE_*).
    pub spank_env: Vec<String>,
    /// The same request in structured form (the simulator follows it; a test checks it matches
    /// the strings): the catalog types Slurm may use, best first, GPUs per node, MPS share.
    pub offered: Vec<usize>,
    pub gpus: u32,
    pub mps_pct: Option<u8>,
    /// The catalog type the job's time limit is taken to be written for, if it has one.
    pub limit_type: Option<usize>,
    /// What the user said the job needs of a reference GPU, when heshare sized its share.
    pub demand_pct: Option<u8>,
    /// A job placed by its profile: its time limit in seconds, which caps its learned runtime
    /// (the node helper's clock too).
    pub learned_limit_s: Option<f64>,
    /// The chosen option's chance of a kill at the time limit, as its cost priced it (the
    /// simulator checks the price against the kills that happen).
    pub kill_probability: f64,
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

/// Decides for one job with a fresh placement context.
pub fn decide(cfg: &Config, site: &Site, live: Live<'_>, sub: &Submission<'_>) -> Verdict {
    decide_with(cfg, site, live, sub, &mut PlaceContext::default())
}

/// Decides for one job. The decision only names GPU types `site` has, with a node big enough
/// for the job, so the rewrite cannot make Slurm reject a job its user's own request would have
/// run, and it keeps the request's contract ([`contract`]): a rewrite that would take away
/// something the user asked for leaves the job as asked, saying what it would have done.
/// `ctx` keeps sharing plans between calls (the plugin keeps one per loaded config).
pub fn decide_with(
    cfg: &Config,
    site: &Site,
    live: Live<'_>,
    sub: &Submission<'_>,
    ctx: &mut PlaceContext,
) -> Verdict {
    match (decide_within(cfg, site, live, sub, ctx), sub.ask) {
        (Verdict::Rewrite(r), Some(ask)) => match contract::breach(cfg, sub, ask, &r) {
            None => Verdict::Rewrite(r),
            Some(why) => Verdict::Annotate(format!(
                "heshare: request left as asked: {why} (heshare would have asked {})",
                r.tres
            )),
        },
        (v, _) => v,
    }
}

/// The decision before the contract's last check.
fn decide_within(
    cfg: &Config,
    site: &Site,
    live: Live<'_>,
    sub: &Submission<'_>,
    ctx: &mut PlaceContext,
) -> Verdict {
    let opts = sub.opts;
    let Some(ask) = sub.ask else {
        return if opts.gpu_share.is_some() || opts.gpu_class.is_some() {
            Verdict::Reject("heshare: --gpu-share/--gpu-class need a GPU request (--gres=gpu:N or --gres=mps:PCT)".into())
        } else {
            Verdict::PassThrough
        };
    };
    if let Some(why) = contract::untouchable(sub) {
        return if opts.gpu_share.is_some() || opts.gpu_class.is_some() {
            Verdict::Annotate(format!("heshare: {why}"))
        } else {
            Verdict::PassThrough
        };
    }
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
    // The share the GRES itself asks for: what the job gets without heshare's options, and the
    // priority adjustment's yardstick.
    let asked = match (sub.asked, ask.mps_pct) {
        (Some(a), _) => a,
        (None, Some(p)) => match u8::try_from(p).ok().and_then(SharePct::new) {
            Some(s) => ShareRequest::Pct(s),
            None => return Verdict::PassThrough,
        },
        (None, None) => ShareRequest::Exclusive,
    };
    let share = match opts
        .gpu_share
        .as_deref()
        .filter(|_| sub.batch || ask.mps_pct.is_some())
    {
        Some(s) => match ShareRequest::parse(s) {
            Ok(r) => r,
            Err(e) => return Verdict::Reject(format!("heshare: --gpu-share: {e}")),
        },
        // A share whose need its own runs measured is sized for that need (the upper quantile
        // of its runs), as `--gpu-share=auto` sizes a labelled one.
        // (Not an account's profile: it mixes its users' jobs, whose needs differ.)
        None if sub
            .learned
            .is_some_and(|l| l.level != crate::profile::Level::Request)
            && sub.batch
            && matches!(asked, ShareRequest::Pct(_))
            && contract::may_resize(cfg, sub, ask).is_ok() =>
        {
            ShareRequest::Auto
        }
        None => asked,
    };
    let energy_policy = match parse_energy_policy(opts.energy_policy.as_deref()) {
        Ok(p) => p,
        Err(e) => return Verdict::Reject(e),
    };
    if let Some(class) = &opts.gpu_class {
        if cfg.class(class).is_none() {
            let known = cfg.class_names();
            return Verdict::Reject(format!(
                "heshare: --gpu-class: unknown class \"{class}\" (known: {known})"
            ));
        }
    }
    // The name the decision goes by: the user's class, else the learned profile's family.
    let class = match (&opts.gpu_class, sub.learned) {
        (Some(c), _) => c.clone(),
        (None, Some(l)) => l.class_family().to_owned(),
        (None, None) => {
            // Nothing is known of it to price another share or a whole GPU against its own
            // request. Where the site opted in to resizing shares, say why this one was not.
            let kept = match contract::may_resize(cfg, sub, ask) {
                Err(no) if cfg.policy.resize_asked_shares && ask.mps_pct.is_some() => {
                    format!(" ({no})")
                }
                _ => String::new(),
            };
            return Verdict::Annotate(format!(
                "heshare: no --gpu-class and no profile of this job's runs yet, request left as asked{kept}"
            ));
        }
    };
    let fresh = live.fresh();
    let fits: Vec<usize> = site
        .present
        .iter()
        .filter(|&&(t, n)| {
            n >= ask.gpus && fresh.is_none_or(|s| s.can_host(t, ask.gpus, sub.cpus, sub.memory_mib))
        })
        .map(|&(t, _)| t)
        .collect();
    // A constraint that only ORs GPU types (`--constraint="a100|t4"`) narrows the types heshare
    // may choose from, and heshare's own OR of a subset of them stays within it.
    let user_types = sub.features.and_then(|f| type_disjunction(cfg, f));
    let allowed = match allowed_types(cfg, site, ask, &fits) {
        Ok(a) => match &user_types {
            Some(u) => {
                let both: Vec<usize> = a.into_iter().filter(|t| u.contains(t)).collect();
                if both.is_empty() {
                    return Verdict::Annotate(format!(
                        "heshare: no node big enough for the job has a GPU type of the constraint \"{}\", request left as asked",
                        sub.features.unwrap_or("")
                    ));
                }
                both
            }
            None => a,
        },
        Err(note) => return Verdict::Annotate(note),
    };
    let req = JobRequest {
        class: class.clone(),
        gpus: ask.gpus,
        share,
        user: sub.user.to_owned(),
        gpu_types: allowed
            .iter()
            .map(|&t| cfg.gpu_types[t].name.clone())
            .collect(),
        energy_policy,
        time_limit_s: sub.time_limit_s,
        reference_share: Some(asked),
        // `--gres=mps:P --gpu-share=auto`: the user's P is what the job needs of a reference
        // GPU; heshare sizes the share for it on whichever type it picks.
        // A learned need replaces the user's.
        demand_pct: if sub.learned.is_some() {
            None
        } else {
            sub.demand_pct.or(match (ask.mps_pct, share) {
                (Some(p), ShareRequest::Auto) => {
                    u8::try_from(p).ok().filter(|p| (1..=100).contains(p))
                }
                _ => None,
            })
        },
        learned: sub.learned.map(|l| std::sync::Arc::clone(&l.class)),
    };
    // A job heshare's model cannot place within its bound still runs as its user asked: a
    // prediction is no reason to refuse work.
    let plan = match place_on(cfg, live, &req, &fits, ctx) {
        Ok(p) => p,
        Err(e) => return Verdict::Annotate(format!("heshare: {e}; request left as asked")),
    };
    let feature_types = fresh.map_or(&site.feature_types, |s| &s.feature_types);
    let own_constraint = (user_types.is_none()
        && sub.features.is_some_and(|f| !f.trim().is_empty()))
        || sub.prefer.is_some_and(|f| !f.trim().is_empty());
    // The user's own type and constraint are never rewritten into a feature expression.
    let typed = own_constraint || ask.gpu_type.is_some();
    let offered = offer(cfg, &plan, feature_types, typed);
    let by_feature = !typed && offered.iter().all(|&t| feature_types.get(t) == Some(&true));
    // A quiet context (the simulator's) reads no text back: AdminComment and the SPANK
    // environment are left empty, the decision is the same.
    let text = !ctx.quiet;
    let mut r = rewrite(
        cfg,
        ask,
        &plan,
        (&class, req.demand_pct, asked),
        &offered,
        by_feature,
        (live, text),
        energy_policy,
    );
    if let Some(l) = sub.learned {
        learned_rewrite(&mut r, l, opts.gpu_class.as_deref(), sub.time_limit_s, text);
    }
    Verdict::Rewrite(r)
}

/// A decision made with a profile says so: AdminComment names the key, its level and the runs it
/// rests on (and a label it set aside, and why); the node helper gets the learned class instead
/// of a catalog class to clock the job with.
fn learned_rewrite(
    r: &mut Rewrite,
    l: &Learned,
    label: Option<&str>,
    limit_s: Option<f64>,
    text: bool,
) {
    r.learned_limit_s = limit_s;
    if !text {
        return;
    }
    let mut note = format!(" profile={} level={} runs={}", l.key, l.level, l.runs);
    if let (Some(label), Some(why)) = (label, &l.overruled) {
        note.push_str(&format!(" label={label} overruled"));
        r.admin_comment = r.admin_comment.replacen(
            " reason=",
            &format!(" reason=label {label} set aside: {why}; "),
            1,
        );
    }
    // Inserted before the reason, which runs to the end of heshare's part.
    r.admin_comment = r
        .admin_comment
        .replacen(" reason=", &format!("{note} reason="), 1);
    let keep_class = label.is_some() && l.overruled.is_none();
    r.spank_env
        .retain(|e| keep_class || !e.starts_with("HESHARE_CLASS="));
    r.spank_env.push(format!("HESHARE_PROFILE_KEY={}", l.key));
    if let Some(t) = limit_s {
        // The helper keeps the learned runtime within the limit at the clock it picks.
        r.spank_env.push(format!("HESHARE_TIME_LIMIT_S={t:.0}"));
    }
    r.spank_env.push(format!(
        "HESHARE_PROFILE={}",
        crate::profile::wire::encode(&l.class)
    ));
}

/// The types the job may be placed on: those with a node big enough, narrowed to the user's own
/// type if they named one. `Err`: a note for a request left as asked.
/// The catalog types of a constraint that is nothing but an OR of GPU type names (`a100|t4`,
/// `a100`); `None` for anything else (other features, AND, brackets, counts).
fn type_disjunction(cfg: &Config, features: &str) -> Option<Vec<usize>> {
    let f = features.trim();
    if f.is_empty() {
        return None;
    }
    f.split('|')
        .map(|name| cfg.gpu_type(name.trim()))
        .collect::<Option<Vec<usize>>>()
}

fn allowed_types(
    cfg: &Config,
    site: &Site,
    ask: &GpuAsk,
    fits: &[usize],
) -> Result<Vec<usize>, String> {
    if let Some(t) = &ask.gpu_type {
        return match cfg.resolve_gpu_type(t) {
            Some(i) if fits.contains(&i) => Ok(vec![i]),
            Some(i) if site.present.iter().any(|&(p, _)| p == i) => Err(format!(
                "heshare: no node has {} {t} GPUs, request left as asked",
                ask.gpus
            )),
            // A type heshare does not know: leave the user's request to Slurm.
            _ => Err(format!(
                "heshare: GPU type \"{t}\" is not in the catalog, request left as asked"
            )),
        };
    }
    if fits.is_empty() {
        return Err(format!(
            "heshare: no node has {} GPUs of one type, request left as asked",
            ask.gpus
        ));
    }
    Ok(fits.to_vec())
}

/// Places `req` on the fresh snapshot (the GPUs Slurm would hand it, with the queues) or, without
/// one, on one idle GPU per type that fits.
fn place_on(
    cfg: &Config,
    live: Live<'_>,
    req: &JobRequest,
    fits: &[usize],
    ctx: &mut PlaceContext,
) -> Result<Plan, crate::policy::PlacementError> {
    match live.fresh() {
        Some(snap) => {
            let reference = &cfg.gpu_types[cfg.reference_gpu];
            let step = cfg.policy.mps_share_step_pct;
            let share = |t: usize| -> Option<u8> {
                let gpu = &cfg.gpu_types[t];
                if !gpu.mps || req.gpus != 1 {
                    return None;
                }
                match req.share {
                    ShareRequest::Exclusive => None,
                    ShareRequest::Pct(p) => Some(p.get()),
                    ShareRequest::Auto => {
                        // Sized as placement will size it on this type.
                        let class = match req.learned.as_deref() {
                            Some(c) => c,
                            None => cfg.class(&req.class)?,
                        };
                        let sized = sized_class(cfg, req, class, gpu);
                        Some(full_speed_share(&sized, gpu, reference, step).get())
                    }
                }
            };
            let slots: Vec<&GpuSlot> = snap
                .slots_for(req.gpus, &req.user, share)
                .into_iter()
                .filter(|g| fits.contains(&g.gpu_type))
                .collect();
            place_slots(cfg, &slots, &snap.view.queues, req, ctx)
        }
        None => {
            let view = ClusterView::idle_types(cfg);
            let slots: Vec<&GpuSlot> = view
                .gpus
                .iter()
                .filter(|g| fits.contains(&g.gpu_type))
                .collect();
            place_slots(cfg, &slots, &[], req, ctx)
        }
    }
}

/// The types to offer Slurm, best first: the decision's offer narrowed to types nodes carry as
/// features (an OR of features is the only way to say "any of these"), or the best type alone.
fn offer(cfg: &Config, plan: &Plan, feature_types: &[bool], single: bool) -> Vec<usize> {
    let d = &plan.decision;
    let types: Vec<usize> = d.offered.iter().filter_map(|n| cfg.gpu_type(n)).collect();
    let Some(&best) = types.first() else {
        return vec![];
    };
    let usable = |t: usize| feature_types.get(t).copied().unwrap_or(false);
    if single || !usable(best) {
        return vec![best];
    }
    types.into_iter().filter(|&t| usable(t)).collect()
}

/// The job description change. `by_feature`: untyped GRES constrained to the offered types by
/// node features (else the GRES names the one type offered).
#[allow(clippy::too_many_arguments)]
fn rewrite(
    cfg: &Config,
    ask: &GpuAsk,
    plan: &Plan,
    (class, demand_pct, asked): (&str, Option<u8>, ShareRequest),
    offered: &[usize],
    by_feature: bool,
    (live, text): (Live<'_>, bool),
    policy: Option<EnergyPolicy>,
) -> Rewrite {
    let d = &plan.decision;
    let sep = ask.form.prefix();
    let names: Vec<&str> = offered
        .iter()
        .map(|&t| cfg.gpu_types[t].name.as_str())
        .collect();
    let many = names.len() > 1;
    let typed = if by_feature {
        String::new()
    } else {
        format!("{}:", d.gpu_type)
    };
    // Offered one type, the share is the one planned for it; several, the largest any needs.
    let share_pct = if many {
        d.offered_share_pct
    } else {
        d.share_pct
    };
    let gres = if d.exclusive {
        format!("{sep}gpu:{typed}{}", d.gpus)
    } else {
        format!("{sep}mps:{typed}{share_pct}")
    };
    let tres = std::iter::once(gres)
        .chain(ask.others.iter().cloned())
        .collect::<Vec<_>>()
        .join(",");
    let types = names.join("|");
    let mut r = Rewrite {
        tres,
        per_job: ask.per_job,
        features: by_feature.then(|| types.clone()),
        prefer: (by_feature && many).then(|| d.gpu_type.clone()),
        site_factor: d.site_factor,
        admin_comment: String::new(),
        spank_env: vec![],
        offered: offered.to_vec(),
        gpus: d.gpus,
        mps_pct: (!d.exclusive).then_some(share_pct),
        limit_type: d.limit_type.as_deref().and_then(|t| cfg.gpu_type(t)),
        demand_pct,
        learned_limit_s: None,
        kill_probability: d.terms.kill_probability,
    };
    if !text {
        return r;
    }
    let share = if d.exclusive {
        "exclusive".to_owned()
    } else {
        share_pct.to_string()
    };
    // admin_comment is one line in scontrol's output: the reason's first clause, plain text.
    let first = d.reason.split("; ").next().unwrap_or(&d.reason);
    let reason: String = first
        .chars()
        .filter(|c| !c.is_control() && *c != '|')
        .take(240)
        .collect();
    let policy = match policy {
        Some(EnergyPolicy::Performance) => "performance",
        Some(EnergyPolicy::Energy) => "energy",
        Some(EnergyPolicy::Balanced) | None => "balanced",
    };
    let prefer_note = if many {
        format!(" prefer={}", d.gpu_type)
    } else {
        String::new()
    };
    let mut spank_env = vec![
        format!("HESHARE_CLASS={class}"),
        format!("HESHARE_GPU_TYPES={}", names.join(",")),
        format!("HESHARE_SHARE={share}"),
        format!("HESHARE_BOUND={}", d.slowdown_bound),
        format!("HESHARE_PRED_RUNTIME_S={:.0}", d.predicted_runtime_s),
        format!("HESHARE_PRED_ENERGY_J={:.0}", d.predicted_energy_j),
    ];
    if let Some(t) = &d.limit_type {
        // The node helper keeps the job within its time limit on whatever type it lands on.
        spank_env.push(format!("HESHARE_LIMIT_TYPE={t}"));
    }
    if let Some(p) = demand_pct {
        // The node helper sizes the clock for what the user said the job needs.
        spank_env.push(format!("HESHARE_DEMAND_PCT={p}"));
    }
    if !many {
        // With several types the node knows which one the job landed on; the clock is the node
        // helper's to choose for whatever shares the GPU.
        spank_env.push(format!("HESHARE_GPU_TYPE={}", d.gpu_type));
        spank_env.push(format!("HESHARE_SM_CLOCK_MHZ={}", d.sm_clock_mhz));
    }
    r.admin_comment = format!(
        "heshare: type={types}{prefer_note} share={share} clock={} class={class} policy={policy}{} asked={}{} site={:+} {} {} reason={reason}",
        d.sm_clock_mhz,
        d.limit_type
            .as_deref()
            .map_or(String::new(), |t| format!(" limit={t}")),
        match asked {
            ShareRequest::Pct(p) => p.get().to_string(),
            ShareRequest::Exclusive | ShareRequest::Auto => "whole".to_owned(),
        },
        demand_pct.map_or(String::new(), |p| format!(" demand={p}")),
        d.site_factor,
        live.describe(),
        cost_terms(&d.terms),
    );
    r.spank_env = spank_env;
    r
}

/// The chosen option's cost in its terms, as AdminComment names them (`policy::cost`):
/// `cost_j = energy_j + lambda_w * (time_s + delay_s) + kill_j`.
fn cost_terms(t: &crate::policy::CostTerms) -> String {
    format!(
        "cost_j={:.4e} energy_j={:.4e} lambda_w={:.4e} time_s={:.0} delay_s={:.0} p_kill={:.4} kill_j={:.4e}",
        t.cost_j, t.energy_j, t.lambda_w, t.time_s, t.delay_s, t.kill_probability, t.kill_j
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::BUNDLED_CONFIG;
    use crate::model::{JobClass, KilledOn};
    use crate::policy::PlacedJob;
    use crate::profile::{Level, ProfileKey};
    use crate::slurm::snapshot::{Holding, NodeInfo};
    use std::path::Path;

    pub(crate) fn cfg() -> Config {
        Config::parse(BUNDLED_CONFIG, Path::new("h.toml")).expect("valid")
    }

    /// The bundled configuration with the site's opt-in to resizing explicit shares.
    pub(crate) fn resizing() -> Config {
        let mut c = cfg();
        c.policy.resize_asked_shares = true;
        c
    }

    /// A site with `names` on nodes of two GPUs, none carrying its type as a feature.
    pub(crate) fn site(cfg: &Config, names: &[&str]) -> Site {
        Site {
            present: names
                .iter()
                .map(|n| (cfg.gpu_type(n).expect("catalog type"), 2))
                .collect(),
            feature_types: vec![false; cfg.gpu_types.len()],
        }
    }

    pub(crate) fn with_features(mut s: Site) -> Site {
        for &(t, _) in &s.present {
            s.feature_types[t] = true;
        }
        s
    }

    pub(crate) fn opts(class: &str, share: Option<&str>) -> Options {
        Options {
            gpu_share: share.map(str::to_owned),
            gpu_class: Some(class.to_owned()),
            energy_policy: None,
        }
    }

    pub(crate) fn rewrite_of(v: Verdict) -> Rewrite {
        match v {
            Verdict::Rewrite(r) => r,
            other => panic!("expected a rewrite, got {other:?}"),
        }
    }

    /// AdminComment names the chosen option's cost in its terms, and they add up to it.
    #[test]
    fn admin_comment_names_the_cost_in_its_terms() {
        let cfg = cfg();
        let site = local_site(&cfg);
        let ask = parse_tres_per_node(Some("gres:gpu:1")).expect("ok");
        let o = opts("bert-train", None);
        let sub = Submission {
            time_limit_s: Some(4.0 * 3600.0),
            ..Submission::new(ask.as_ref(), &o, "1000")
        };
        let r = rewrite_of(decide(&cfg, &site, Live::NONE, &sub));
        let term = |name: &str| -> f64 {
            r.admin_comment
                .split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{name}=")))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} in {}", r.admin_comment))
        };
        let sum = term("energy_j")
            + term("lambda_w") * (term("time_s") + term("delay_s"))
            + term("kill_j");
        assert!(term("cost_j") > 0.0);
        assert!(
            (sum - term("cost_j")).abs() <= 1e-3 * term("cost_j"),
            "{sum} vs {}",
            r.admin_comment
        );
        assert!((0.0..=1.0).contains(&term("p_kill")));
        // The terms come before the reason, which AdminComment's reader stops at.
        let at = |w: &str| r.admin_comment.find(w).expect(w);
        assert!(at("cost_j=") < at("reason="));
    }

    /// Regression: `--gres=gpu:a100:1,gpu:t4:1` was rewritten to one t4, dropping the a100.
    #[test]
    fn two_gpu_entries_are_left_as_asked_with_a_reason() {
        let cfg = cfg();
        let e = parse_tres_per_node(Some("gres:gpu:a100:1,gres:gpu:t4:1"))
            .expect_err("two GPU entries");
        let AskError::Inexpressible(why) = e else {
            panic!("{e:?}")
        };
        assert!(why.contains("2 GPU entries"), "{why}");
        assert!(matches!(
            parse_tres_per_node(Some("gres:gpu:1;gres:mps:30")),
            Err(AskError::Inexpressible(_))
        ));
        let _ = cfg;
    }

    #[test]
    fn gpus_per_job_become_whole_gpus_of_the_chosen_type() {
        let cfg = cfg();
        let here = site(&cfg, &["a100", "t4"]);
        let ask = parse_gpu_request(None, Some("gres:gpu:2"))
            .expect("ok")
            .expect("gpus");
        assert!(ask.per_job);
        let o = opts("bert-train", None);
        let r = rewrite_of(decide(
            &cfg,
            &here,
            Live::NONE,
            &Submission::new(Some(&ask), &o, "u"),
        ));
        assert_eq!((r.tres.as_str(), r.per_job), ("gres:gpu:a100:2", true));
        let share = opts("bert-train", Some("auto"));
        assert!(matches!(
            decide(&cfg, &here, Live::NONE, &Submission::new(Some(&ask), &share, "u")),
            Verdict::Reject(m) if m.contains("--gres=gpu:1")
        ));
        // --gres wins over --gpus, as in Slurm's own reading.
        let both = parse_gpu_request(Some("gres:gpu:t4:1"), Some("gres:gpu:2"))
            .expect("ok")
            .expect("gres");
        assert!(!both.per_job);
    }

    #[test]
    fn small_inference_becomes_an_mps_share_on_a_present_type() {
        let cfg = cfg();
        let here = site(&cfg, &["a100", "v100m16", "t4"]);
        let ask = parse_tres_per_node(Some("gres:gpu:1")).expect("ok");
        let o = opts("vit-infer", Some("auto"));
        let r = rewrite_of(decide(
            &cfg,
            &here,
            Live::NONE,
            &Submission::new(ask.as_ref(), &o, "alice"),
        ));
        assert!(r.tres.starts_with("gres:mps:t4:"), "{}", r.tres);
        assert!(
            r.admin_comment.starts_with("heshare: type=t4 share="),
            "{}",
            r.admin_comment
        );
        assert!(
            r.admin_comment.contains(
                " class=vit-infer policy=balanced asked=whole site=+0 snapshot=none cost_j="
            ),
            "{}",
            r.admin_comment
        );
        assert!(
            r.admin_comment.ends_with("(1.00x alone)"),
            "only the reason's first clause: {}",
            r.admin_comment
        );
        assert!(r.spank_env.contains(&"HESHARE_CLASS=vit-infer".to_owned()));
        assert!(r.spank_env.contains(&"HESHARE_GPU_TYPE=t4".to_owned()));
        // Alone on its GPU a share costs what a whole GPU does: no adjustment.
        assert_eq!(r.site_factor, 0);
        // The same job without --gpu-share keeps whole GPUs and its priority.
        let plain = opts("vit-infer", None);
        let r = rewrite_of(decide(
            &cfg,
            &here,
            Live::NONE,
            &Submission::new(ask.as_ref(), &plain, "alice"),
        ));
        assert!(r.tres.starts_with("gres:gpu:"), "{}", r.tres);
        assert_eq!(r.site_factor, 0, "a class alone is no queue jump");
    }

    #[test]
    fn interactive_jobs_keep_gpu_requests_their_steps_can_match() {
        let cfg = cfg();
        let here = site(&cfg, &["a100", "v100m16", "t4"]);
        let ask = parse_tres_per_node(Some("gres:gpu:1")).expect("ok");
        let o = opts("vit-infer", Some("auto"));
        let sub = Submission {
            batch: false,
            ..Submission::new(ask.as_ref(), &o, "u")
        };
        let r = rewrite_of(decide(&cfg, &here, Live::NONE, &sub));
        assert!(
            r.tres.starts_with("gres:gpu:"),
            "srun's step asks for gpu, so the job keeps gpu: {}",
            r.tres
        );
        assert_eq!(r.site_factor, 0);
    }

    #[test]
    fn training_gets_whole_gpus_and_never_a_type_the_cluster_lacks() {
        let cfg = cfg();
        let here = site(&cfg, &["a100", "v100m16", "t4"]);
        let ask = parse_tres_per_node(Some("gres:gpu:2")).expect("ok");
        let o = opts("bert-train", None);
        let r = rewrite_of(decide(
            &cfg,
            &here,
            Live::NONE,
            &Submission::new(ask.as_ref(), &o, "bob"),
        ));
        // h100 is the catalog's best, but this cluster has none.
        assert_eq!(r.tres, "gres:gpu:a100:2");
        // Nor a type without a node big enough: four GPUs fit only where a node has four.
        let mut bigger = here.clone();
        bigger
            .present
            .push((cfg.gpu_type("p100").expect("p100"), 4));
        let four = parse_tres_per_node(Some("gres:gpu:4")).expect("ok");
        let r = rewrite_of(decide(
            &cfg,
            &bigger,
            Live::NONE,
            &Submission::new(four.as_ref(), &o, "bob"),
        ));
        assert_eq!(r.tres, "gres:gpu:p100:4");
        let eight = parse_tres_per_node(Some("gres:gpu:8")).expect("ok");
        assert!(matches!(
            decide(
                &cfg,
                &bigger,
                Live::NONE,
                &Submission::new(eight.as_ref(), &o, "bob")
            ),
            Verdict::Annotate(_)
        ));
    }

    #[test]
    fn bad_options_are_rejected_and_plain_jobs_pass() {
        let cfg = cfg();
        let here = site(&cfg, &["t4"]);
        let ask = parse_tres_per_node(Some("gres:gpu:1")).expect("ok");
        let bad = |o: Options| match decide(
            &cfg,
            &here,
            Live::NONE,
            &Submission::new(ask.as_ref(), &o, "u"),
        ) {
            Verdict::Reject(m) => m,
            v => panic!("expected a rejection, got {v:?}"),
        };
        assert!(bad(opts("nope", None)).contains("unknown class \"nope\""));
        assert!(bad(opts("vit-infer", Some("0"))).contains("--gpu-share"));
        assert!(
            bad(Options {
                energy_policy: Some("green".into()),
                ..opts("vit-infer", None)
            })
            .contains("--energy-policy")
        );
        let none = Options::default();
        assert_eq!(
            decide(&cfg, &here, Live::NONE, &Submission::new(None, &none, "u")),
            Verdict::PassThrough
        );
        assert!(matches!(
            decide(
                &cfg,
                &here,
                Live::NONE,
                &Submission::new(ask.as_ref(), &none, "u")
            ),
            Verdict::Annotate(_)
        ));
        let class_only = opts("vit-infer", None);
        assert!(matches!(
            decide(
                &cfg,
                &here,
                Live::NONE,
                &Submission::new(None, &class_only, "u")
            ),
            Verdict::Reject(_)
        ));
    }

    /// The local test cluster's shape: ha100 (2 x a100), hv100 (2 x v100m16), ht4 (4 x t4), each
    /// node carrying its GPU type as a feature.
    pub(crate) fn local_nodes(cfg: &Config) -> Vec<NodeInfo> {
        [
            ("ha100", "a100", 2),
            ("hv100", "v100m16", 2),
            ("ht4", "t4", 4),
        ]
        .into_iter()
        .map(|(n, t, k)| NodeInfo {
            name: n.into(),
            features: vec![t.into()],
            gpus: (0..k)
                .map(|i| (i, cfg.gpu_type(t).expect("type")))
                .collect(),
            cpus: 4,
            memory_mib: 4000,
            power: crate::policy::SlotPower::Up,
        })
        .collect()
    }

    /// Regression: a job too big for every node of a type (here, more CPUs than an a100 node
    /// has) was offered that type and stayed pending forever.
    #[test]
    fn a_type_whose_nodes_are_too_small_is_never_offered() {
        let cfg = cfg();
        let site = local_site(&cfg);
        let snap = Snapshot::build(&cfg, 0.0, &local_nodes(&cfg), &[], &[]);
        let live = Live {
            snapshot: Some(&snap),
            now_s: 0.0,
            max_age_s: 60.0,
        };
        let ask = parse_tres_per_node(Some("gres:gpu:1")).expect("ok");
        let o = opts("bert-train", None);
        let fits = rewrite_of(decide(
            &cfg,
            &site,
            live,
            &Submission {
                cpus: Some(4),
                ..Submission::new(ask.as_ref(), &o, "1000")
            },
        ));
        assert!(!fits.offered.is_empty());
        let too_big = Submission {
            cpus: Some(8),
            ..Submission::new(ask.as_ref(), &o, "1000")
        };
        assert!(matches!(
            decide(&cfg, &site, live, &too_big),
            Verdict::Annotate(n) if n.contains("no node has")
        ));
    }

    /// A whole GPU of the local cluster held by `user`'s job (nodes: ha100, hv100, ht4).
    pub(crate) fn hold(node: &str, index: u32, user: &str, frees_in_s: f64) -> Holding {
        Holding {
            node: ["ha100", "hv100", "ht4"]
                .iter()
                .position(|n| *n == node)
                .expect("a local node"),
            gpu_index: index,
            job: PlacedJob {
                class: 0,
                share: SharePct::FULL,
                user: user.into(),
                exclusive: true,
            },
            frees_in_s,
            hold_s: frees_in_s,
        }
    }

    /// The local cluster with both a100s held by another user's jobs for two days.
    pub(crate) fn a100s_held_two_days(cfg: &Config, nodes: &[NodeInfo]) -> Snapshot {
        Snapshot::build(
            cfg,
            0.0,
            nodes,
            &[
                hold("ha100", 0, "2000", 172_800.0),
                hold("ha100", 1, "2000", 172_800.0),
            ],
            &[],
        )
    }

    pub(crate) fn local_site(cfg: &Config) -> Site {
        with_features(site(cfg, &["a100", "v100m16"]))
            .tap(|s| s.present.push((cfg.gpu_type("t4").expect("t4"), 4)))
    }

    /// The eight GPUs of the local cluster, all but `idle` of them held for an hour.
    pub(crate) fn all_held_but(cfg: &Config, nodes: &[NodeInfo], idle: usize) -> Snapshot {
        held_but_with_queue(cfg, nodes, idle, 0.0)
    }

    /// As `all_held_but`, with jobs pending for `queued` GPUs of any type.
    pub(crate) fn held_but_with_queue(
        cfg: &Config,
        nodes: &[NodeInfo],
        idle: usize,
        queued: f64,
    ) -> Snapshot {
        let held: Vec<Holding> = [("ha100", 0), ("ha100", 1), ("hv100", 0), ("hv100", 1)]
            .into_iter()
            .chain((0..4).map(|i| ("ht4", i)))
            .take(8 - idle)
            .map(|(n, i)| hold(n, i, "2000", 3600.0))
            .collect();
        let pending: Vec<crate::slurm::snapshot::Pending> = (queued > 0.0)
            .then(|| crate::slurm::snapshot::Pending {
                types: vec![],
                gpus: queued,
            })
            .into_iter()
            .collect();
        Snapshot::build(cfg, 100.0, nodes, &held, &pending)
    }

    /// A vit-infer service's script profile, eight runs measured on every type at the catalog's
    /// speed, with these kills at its limit.
    pub(crate) fn learned_service(cfg: &Config, kills: Vec<KilledOn>) -> Learned {
        Learned {
            key: ProfileKey::parse("script:1000:0123456789abcdef").expect("a key"),
            level: Level::Script,
            runs: 8,
            class: std::sync::Arc::new(JobClass {
                measured_speed: cfg
                    .gpu_types
                    .iter()
                    .map(|g| (g.name.clone(), 1.0))
                    .collect(),
                limit_kills: kills,
                neighbours: None,
                ..cfg.class("vit-infer").expect("vit-infer").clone()
            }),
            measured: cfg.gpu_types.iter().map(|g| g.name.clone()).collect(),
            overruled: None,
        }
    }

    trait Tap: Sized {
        fn tap(mut self, f: impl FnOnce(&mut Self)) -> Self {
            f(&mut self);
            self
        }
    }
    impl Tap for Site {}

    /// A share nothing is known of (no label, no profile) runs as its user asked, under the
    /// site's opt-in to resizing shares too: with no belief about the job there is nothing to
    /// price another share or a whole GPU against, idle GPUs or not.
    #[test]
    fn an_unknown_share_runs_as_asked_whatever_the_gpus_and_the_opt_in() {
        let site = local_site(&cfg());
        let nodes = local_nodes(&cfg());
        let ask = parse_tres_per_node(Some("gres:mps:40")).expect("ok");
        let none = Options::default();
        let sub = Submission::new(ask.as_ref(), &none, "1000");
        let idle = Snapshot::build(&cfg(), 100.0, &nodes, &[], &[]);
        let busy = all_held_but(&cfg(), &nodes, 0);
        for cfg in [cfg(), resizing()] {
            for snapshot in [Some(&idle), Some(&busy), None] {
                let live = Live {
                    snapshot,
                    now_s: 100.0,
                    max_age_s: 60.0,
                };
                for s in [
                    sub,
                    Submission {
                        steps_ask_gres: true,
                        ..sub
                    },
                ] {
                    let v = decide(&cfg, &site, live, &s);
                    assert!(
                        matches!(&v, Verdict::Annotate(m) if m.contains("no profile of this job's runs yet, request left as asked")),
                        "{v:?}"
                    );
                }
            }
        }
    }

    /// A service whose profile asks for a whole GPU (its runs were killed at this limit while
    /// sharing, on every type) gets one under the site's opt-in, GPUs spare or not: no share of
    /// any type is an option, and the whole GPU's cost already counts the wait it imposes. Without
    /// the opt-in its share stands, and AdminComment says what heshare would have asked.
    #[test]
    fn a_profile_asking_for_a_whole_gpu_gets_it_under_the_opt_in() {
        let cfg = resizing();
        let site = local_site(&cfg);
        let nodes = local_nodes(&cfg);
        let learned = learned_service(
            &cfg,
            cfg.gpu_types
                .iter()
                .map(|g| KilledOn {
                    gpu_type: g.name.clone(),
                    share_pct: Some(100),
                    limit_s: Some(36_000),
                })
                .collect(),
        );
        let ask = parse_tres_per_node(Some("gres:mps:50")).expect("ok");
        let none = Options::default();
        let sub = Submission {
            time_limit_s: Some(36_000.0),
            learned: Some(&learned),
            ..Submission::new(ask.as_ref(), &none, "1000")
        };
        // All but `idle` of the eight GPUs held for an hour.
        let busy = |idle: usize| all_held_but(&cfg, &nodes, idle);
        let at = |snap: &Snapshot, cfg: &Config| {
            decide(
                cfg,
                &site,
                Live {
                    snapshot: Some(snap),
                    now_s: 100.0,
                    max_age_s: 60.0,
                },
                &sub,
            )
        };
        let whole = |v: Verdict| {
            let r = rewrite_of(v);
            assert_eq!((r.gpus, r.mps_pct), (1, None), "{r:?}");
            assert!(
                r.admin_comment.starts_with("heshare: type="),
                "{}",
                r.admin_comment
            );
            assert!(
                r.admin_comment.contains("profile=script:1000:"),
                "{}",
                r.admin_comment
            );
        };
        // Without the site's opt-in the share is the user's, idle GPUs or not, and the
        // AdminComment says what heshare would have asked.
        for idle in [8, 0] {
            let v = at(&busy(idle), &self::cfg());
            assert!(
                matches!(&v, Verdict::Annotate(m) if m.starts_with("heshare: request left as asked: it would turn the 50% share into a whole GPU") && m.contains("resize_asked_shares")),
                "{v:?}"
            );
        }
        for idle in [8, 3, 0] {
            whole(at(&busy(idle), &cfg));
        }
        whole(at(&held_but_with_queue(&cfg, &nodes, 0, 1.5), &cfg));
        // Without a snapshot nothing is known to be scarce: the whole GPU.
        whole(decide(&cfg, &site, Live::NONE, &sub));
        // A user's own --gpu-share=exclusive is theirs as well.
        let exclusive = Options {
            gpu_share: Some("exclusive".into()),
            ..Options::default()
        };
        let mine = Submission {
            opts: &exclusive,
            ..sub
        };
        let v = decide(
            &cfg,
            &site,
            Live {
                snapshot: Some(&busy(0)),
                now_s: 100.0,
                max_age_s: 60.0,
            },
            &mine,
        );
        whole(v);
    }

    /// A service whose runs say it finishes within its limit on no type with a share runs as its
    /// user asked, under the opt-in too, and AdminComment says why heshare placed it nowhere:
    /// heshare does not hand out a whole GPU on a guess that it might finish there.
    #[test]
    fn a_share_that_finishes_nowhere_in_time_is_left_as_asked_with_the_reason() {
        let cfg = resizing();
        let site = local_site(&cfg);
        let reference = &cfg.gpu_types[cfg.reference_gpu];
        let service = learned_service(&cfg, vec![]);
        // Half its runtime alone on the fastest type: no share, no type finishes it.
        let fastest = site
            .present
            .iter()
            .map(|&(t, _)| {
                crate::model::alone_runtime(&service.class, &cfg.gpu_types[t], reference).0
            })
            .fold(f64::INFINITY, f64::min);
        let ask = parse_tres_per_node(Some("gres:mps:40")).expect("ok");
        let none = Options::default();
        let sub = Submission {
            time_limit_s: Some(0.5 * fastest),
            learned: Some(&service),
            ..Submission::new(ask.as_ref(), &none, "1000")
        };
        let v = decide(&cfg, &site, Live::NONE, &sub);
        assert!(
            matches!(&v, Verdict::Annotate(m) if m.starts_with("heshare: ") && m.contains("limit") && m.ends_with("request left as asked")),
            "{v:?}"
        );
    }

    #[test]
    fn with_the_best_type_held_a_job_goes_elsewhere_at_once_or_says_why_it_waits() {
        let cfg = cfg();
        let site = local_site(&cfg);
        let nodes = local_nodes(&cfg);
        let ask = parse_tres_per_node(Some("gres:gpu:1")).expect("ok");
        let o = opts("bert-train", None);
        let sub = Submission {
            time_limit_s: Some(7200.0),
            ..Submission::new(ask.as_ref(), &o, "1000")
        };
        // Idle cluster: an a100 (the best here) is offered first.
        let idle = Snapshot::build(&cfg, 100.0, &nodes, &[], &[]);
        let live = Live {
            snapshot: Some(&idle),
            now_s: 103.0,
            max_age_s: 60.0,
        };
        let r = rewrite_of(decide(&cfg, &site, live, &sub));
        assert_eq!(r.offered.first(), cfg.gpu_type("a100").as_ref());
        assert!(
            r.admin_comment.contains(" snapshot=3s "),
            "{}",
            r.admin_comment
        );
        // Both a100s held for two more days: not worth waiting for.
        let held = Snapshot::build(
            &cfg,
            100.0,
            &nodes,
            &[
                hold("ha100", 0, "2000", 172_800.0),
                hold("ha100", 1, "2000", 172_800.0),
            ],
            &[],
        );
        let live = Live {
            snapshot: Some(&held),
            ..live
        };
        let r = rewrite_of(decide(&cfg, &site, live, &sub));
        // Another type is preferred, so Slurm starts the job there at once (the a100s may stay
        // offered as a fallback, within the margin).
        assert_ne!(r.offered.first(), cfg.gpu_type("a100").as_ref(), "{r:?}");
        // Both a100s free in a minute: waiting beats a slower type now, and the comment says so.
        let soon = Snapshot::build(
            &cfg,
            100.0,
            &nodes,
            &[
                hold("ha100", 0, "2000", 60.0),
                hold("ha100", 1, "2000", 60.0),
            ],
            &[],
        );
        let live = Live {
            snapshot: Some(&soon),
            ..live
        };
        let r = rewrite_of(decide(&cfg, &site, live, &sub));
        assert_eq!(r.offered.first(), cfg.gpu_type("a100").as_ref());
        assert!(
            r.admin_comment.contains("wait, which beats"),
            "{}",
            r.admin_comment
        );
        // A stale snapshot is not trusted.
        let old = Live {
            now_s: 1000.0,
            ..live
        };
        let r = rewrite_of(decide(&cfg, &site, old, &sub));
        assert!(
            r.admin_comment.contains(" snapshot=stale:900s "),
            "{}",
            r.admin_comment
        );
    }

    #[test]
    fn a_share_beside_the_users_own_job_saves_energy_and_moves_the_job_forward() {
        // A site with power saving (a GPU's idle power is the decision's to save) and a balanced
        // weight (at the default, the little contention beside the user's job outweighs it).
        let mut cfg = cfg();
        cfg.power.suspend_time_s = Some(600.0);
        cfg.policy.time_value_kwh_per_gpu_hour = 0.3;
        let site = local_site(&cfg);
        let nodes = local_nodes(&cfg);
        let vit = cfg
            .classes
            .iter()
            .position(|c| c.name == "vit-infer")
            .expect("vit");
        let mine = Holding {
            job: PlacedJob {
                class: vit,
                share: SharePct::new(35).expect("35"),
                user: "1000".into(),
                exclusive: false,
            },
            ..hold("ht4", 0, "1000", 3600.0)
        };
        let snap = Snapshot::build(&cfg, 0.0, &nodes, &[mine], &[]);
        let live = Live {
            snapshot: Some(&snap),
            now_s: 0.0,
            max_age_s: 60.0,
        };
        // On a t4, where the user's own share runs.
        let ask = parse_tres_per_node(Some("gres:gpu:t4:1")).expect("ok");
        let auto = opts("vit-infer", Some("auto"));
        let r = rewrite_of(decide(
            &cfg,
            &site,
            live,
            &Submission::new(ask.as_ref(), &auto, "1000"),
        ));
        assert!(r.mps_pct.is_some(), "{r:?}");
        assert!(
            r.site_factor > 0,
            "sharing a GPU saves its idle power: {} {r:?}",
            r.site_factor
        );
        // Another user's job there: the share runs outside MPS, time-sliced with that user's
        // server; two light services fit in the GPU's time, so the saving holds. Where the site
        // lets such a share wait instead (allow_cross_user_sharing = false), heshare does not
        // count on it.
        let theirs = Holding {
            job: PlacedJob {
                user: "2000".into(),
                ..mine_job(vit)
            },
            ..hold("ht4", 0, "2000", 3600.0)
        };
        let snap = Snapshot::build(&cfg, 0.0, &nodes, &[theirs], &[]);
        let live = Live {
            snapshot: Some(&snap),
            ..live
        };
        let r = rewrite_of(decide(
            &cfg,
            &site,
            live,
            &Submission::new(ask.as_ref(), &auto, "1000"),
        ));
        assert!(r.site_factor > 0, "{}", r.site_factor);
        let mut waits = cfg.clone();
        waits.policy.allow_cross_user_sharing = false;
        let r = rewrite_of(decide(
            &waits,
            &site,
            live,
            &Submission::new(ask.as_ref(), &auto, "1000"),
        ));
        assert!(r.site_factor <= 0, "{}", r.site_factor);
    }

    pub(crate) fn mine_job(class: usize) -> PlacedJob {
        PlacedJob {
            class,
            share: SharePct::new(35).expect("35"),
            user: "1000".into(),
            exclusive: false,
        }
    }

    #[test]
    fn several_close_types_are_offered_through_features_and_prefer() {
        // A wide margin, so that several types are offered on an idle cluster.
        let mut cfg = cfg();
        cfg.policy.offer_margin = 40.0;
        let site = local_site(&cfg);
        let nodes = local_nodes(&cfg);
        let snap = Snapshot::build(&cfg, 0.0, &nodes, &[], &[]);
        let live = Live {
            snapshot: Some(&snap),
            now_s: 0.0,
            max_age_s: 60.0,
        };
        let ask = parse_tres_per_node(Some("gres:gpu:1")).expect("ok");
        // Every class: whenever more than one type is offered, the strings say the same as the
        // structured form, and a share keeps its bound on each type (it is the largest needed).
        let mut multi = 0;
        for c in &cfg.classes {
            for share in [None, Some("auto")] {
                let o = opts(&c.name, share);
                let r = rewrite_of(decide(
                    &cfg,
                    &site,
                    live,
                    &Submission::new(ask.as_ref(), &o, "1000"),
                ));
                let back = parse_tres_per_node(Some(&r.tres))
                    .expect("ok")
                    .expect("gpu");
                assert_eq!(
                    back.mps_pct.and_then(|p| u8::try_from(p).ok()),
                    r.mps_pct,
                    "{}",
                    r.tres
                );
                // Nodes carry their types as features: the GRES is untyped, the features say which.
                assert_eq!(back.gpu_type, None, "{}", r.tres);
                let f = r.features.as_deref().expect("features");
                assert_eq!(crate::slurm::snapshot::constraint_types(&cfg, f), r.offered);
                if r.offered.len() > 1 {
                    multi += 1;
                    assert_eq!(
                        r.prefer.as_deref(),
                        Some(cfg.gpu_types[r.offered[0]].name.as_str())
                    );
                    assert!(r.admin_comment.contains(" prefer="), "{}", r.admin_comment);
                } else {
                    assert_eq!(r.prefer, None);
                }
            }
        }
        assert!(multi > 0, "no class was offered several types");
        // The user's own constraint is never overwritten: one type, typed.
        let o = opts("bert-train", None);
        let sub = Submission {
            features: Some("ib"),
            ..Submission::new(ask.as_ref(), &o, "1000")
        };
        let r = rewrite_of(decide(&cfg, &site, live, &sub));
        assert_eq!(r.offered.len(), 1);
        assert_eq!(r.features, None);
        // A constraint that only names GPU types narrows the choice, and heshare's offer stays
        // inside it.
        let sub_types = Submission {
            features: Some("t4|v100m16"),
            ..Submission::new(ask.as_ref(), &o, "1000")
        };
        let r2 = rewrite_of(decide(&cfg, &site, live, &sub_types));
        let allowed = [
            cfg.gpu_type("t4").expect("t4"),
            cfg.gpu_type("v100m16").expect("v100"),
        ];
        assert!(r2.offered.iter().all(|t| allowed.contains(t)), "{r2:?}");
        assert!(r2.features.is_some());
        let back = parse_tres_per_node(Some(&r.tres))
            .expect("ok")
            .expect("gpu");
        assert_eq!(
            back.gpu_type.as_deref(),
            Some(cfg.gpu_types[r.offered[0]].name.as_str())
        );
    }
}
