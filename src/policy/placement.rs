//! Placement: given one job request and a view of the cluster, filter the GPUs it cannot use,
//! score the rest by predicted energy and completion time, and decide.
//!
//! Built like the Kubernetes scheduling framework: filters say no with a reason, the two score
//! terms (energy, time) are normalised to 0..=100 over the feasible candidates and mixed with the
//! configured weight, and ties break deterministically (less energy, then less time, then type
//! name, node and GPU index). GPUs whose type and occupants are identical give identical
//! predictions, so each such group is evaluated once: an idle 6,000-GPU cluster costs one
//! evaluation per GPU type.

use super::priority::nice_adjustment;
use super::share::{ShareError, ShareJob, ShareParams, SharePlan, ShareSpec, optimize};
use crate::config::Config;
use crate::model::{
    JobClass, JobKind, ModelParams, Tenant, alone_runtime, full_speed_share, predict,
};
use crate::units::{Joules, Seconds, SharePct};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// How much of a GPU the user asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ShareRequest {
    /// Let heshare decide between a whole GPU and an MPS share.
    #[default]
    Auto,
    Exclusive,
    /// Exactly this MPS share.
    #[serde(untagged)]
    Pct(SharePct),
}

/// The user's trade-off, from `--energy-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EnergyPolicy {
    /// Weight 0: fastest completion.
    Performance,
    /// The cluster's configured weight.
    Balanced,
    /// Weight 1: least energy.
    Energy,
}

/// One job asking to be placed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRequest {
    pub class: String,
    #[serde(default = "one")]
    pub gpus: u32,
    #[serde(default)]
    pub share: ShareRequest,
    #[serde(default)]
    pub user: String,
    /// Allowed GPU types (catalog names or aliases); empty = any.
    #[serde(default)]
    pub gpu_types: Vec<String>,
    #[serde(default)]
    pub energy_policy: Option<EnergyPolicy>,
}

fn one() -> u32 {
    1
}

/// A job already running on a GPU of the view.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PlacedJob {
    /// Index into `Config::classes`.
    pub class: usize,
    pub share: SharePct,
    pub user: String,
    /// Holds the whole GPU: nobody may join.
    pub exclusive: bool,
}

/// One GPU of the cluster view.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GpuSlot {
    /// Empty for a type-level view (one slot per type, no real GPU behind it).
    pub node: String,
    pub index: u32,
    /// Index into `Config::gpu_types`.
    pub gpu_type: usize,
    pub jobs: Vec<PlacedJob>,
}

/// What placement sees of the cluster.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClusterView {
    pub gpus: Vec<GpuSlot>,
}

impl ClusterView {
    /// One idle GPU per catalog type, for deciding a type when individual GPUs are unknown (the
    /// Slurm plugin at submit time, `heshare plan` without a cluster).
    pub fn idle_types(cfg: &Config) -> ClusterView {
        ClusterView {
            gpus: (0..cfg.gpu_types.len())
                .map(|t| GpuSlot {
                    node: String::new(),
                    index: 0,
                    gpu_type: t,
                    jobs: vec![],
                })
                .collect(),
        }
    }
}

/// One scored way to run the job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    pub gpu_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The GPU indices on `node` (one per GPU the job gets).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_indices: Vec<u32>,
    pub gpus: u32,
    pub share_pct: u8,
    pub exclusive: bool,
    pub sm_clock_mhz: u32,
    pub default_sm_clock_mhz: u32,
    pub co_located_jobs: usize,
    pub predicted_runtime_s: f64,
    pub predicted_energy_j: f64,
    /// Runtime relative to alone on a whole GPU of this type at default clock.
    pub slowdown: f64,
    /// Extra energy the job's arrival costs the jobs already on the GPU, included in the score.
    pub co_located_energy_penalty_j: f64,
    /// Progress (in seconds) the jobs already on the GPU lose while this job runs; in the score.
    pub co_located_time_penalty_s: f64,
    pub score: f64,
}

/// The decision for one job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    pub gpu_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_indices: Vec<u32>,
    pub gpus: u32,
    pub share_pct: u8,
    pub exclusive: bool,
    pub sm_clock_mhz: u32,
    pub predicted_runtime_s: f64,
    pub predicted_energy_j: f64,
    pub score: f64,
    /// Slurm nice adjustment (negative = higher priority), within ±nice_range.
    pub nice: i32,
    pub class: String,
    pub energy_weight: f64,
    /// The slowdown bound the decision kept; the node helper keeps it when it re-optimises the
    /// GPU's clock as jobs come and go.
    pub slowdown_bound: f64,
    pub reason: String,
}

/// Candidates best first, and the decision taken from the first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub decision: Decision,
    pub candidates: Vec<Candidate>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlacementError {
    #[error("unknown job class \"{name}\" (known: {known})")]
    UnknownClass { name: String, known: String },
    #[error("unknown GPU type \"{name}\" in the request (known: {known})")]
    UnknownGpuType { name: String, known: String },
    #[error("the request asks for {0} GPUs; it must be 1..=64")]
    BadGpuCount(u32),
    #[error("a share of one GPU needs exactly one GPU, but {0} were asked for")]
    ShareWithManyGpus(u32),
    #[error("no GPU can run this job: {0}")]
    NoFeasible(String),
}

/// What a caller that places many jobs keeps between calls: `optimize` results by GPU type and
/// tenants (it is pure, so a remembered plan is the plan), and whether decisions need their
/// human-readable reason. The simulator keeps one for a whole run; `place` uses a fresh one.
#[derive(Debug, Default)]
pub struct PlaceContext {
    /// Skip the `reason` text (formatting floats costs more than the decision on a quiet view).
    pub quiet: bool,
    plans: rustc_hash::FxHashMap<PlanKey, Arc<Result<SharePlan, ShareError>>>,
    /// The config the plans belong to (its address: a cache must not outlive it).
    owner: usize,
}

/// A GPU type and its tenants, with users renumbered by first appearance (the model only asks
/// whether two users are the same) and classes by address within one config.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PlanKey {
    gpu_type: usize,
    tenants: Vec<(usize, ShareSpec, u32, u64)>,
}

/// Plans remembered beyond this many are dropped all at once (a long run sees few signatures).
const PLAN_CACHE_MAX: usize = 200_000;

impl PlaceContext {
    pub fn quiet() -> Self {
        PlaceContext {
            quiet: true,
            ..PlaceContext::default()
        }
    }

    /// `share::optimize` for `jobs` on a GPU of type `gpu_type` of `cfg`, remembered.
    pub fn optimize(
        &mut self,
        cfg: &Config,
        gpu_type: usize,
        jobs: &[ShareJob<'_>],
        params: ShareParams,
    ) -> Arc<Result<SharePlan, ShareError>> {
        let owner = std::ptr::from_ref(cfg) as usize;
        if self.owner != owner || self.plans.len() >= PLAN_CACHE_MAX {
            self.plans.clear();
            self.owner = owner;
        }
        let mut seen: Vec<u32> = Vec::with_capacity(jobs.len());
        let tenants = jobs
            .iter()
            .map(|j| {
                let user = match seen.iter().position(|&u| u == j.user) {
                    Some(i) => i,
                    None => {
                        seen.push(j.user);
                        seen.len() - 1
                    }
                };
                (
                    std::ptr::from_ref(j.class) as usize,
                    j.share,
                    u32::try_from(user).unwrap_or(u32::MAX),
                    j.bound.to_bits(),
                )
            })
            .collect();
        let key = PlanKey { gpu_type, tenants };
        if let Some(p) = self.plans.get(&key) {
            return Arc::clone(p);
        }
        let gpu = &cfg.gpu_types[gpu_type];
        let reference = &cfg.gpu_types[cfg.reference_gpu];
        let plan = Arc::new(optimize(gpu, reference, jobs, params));
        self.plans.insert(key, Arc::clone(&plan));
        plan
    }
}

/// Places `req` on `view` under `cfg`. Pure: same inputs, same plan.
pub fn place(cfg: &Config, view: &ClusterView, req: &JobRequest) -> Result<Plan, PlacementError> {
    place_with(cfg, view, req, &mut PlaceContext::default())
}

/// `place` with a context kept between calls; the decision is the same as `place`'s (only the
/// reason is left empty when the context is quiet).
pub fn place_with(
    cfg: &Config,
    view: &ClusterView,
    req: &JobRequest,
    ctx: &mut PlaceContext,
) -> Result<Plan, PlacementError> {
    let slots: Vec<&GpuSlot> = view.gpus.iter().collect();
    place_slots(cfg, &slots, req, ctx)
}

/// `place_with` on a list of GPUs. A caller that keeps its GPUs grouped by type and occupants
/// may pass the first GPU (in view order) of each group for a one-GPU job, and only the idle
/// GPUs for a multi-GPU job: the decision is the one the whole view gives, since every GPU of a
/// group gets the same prediction and the first of a group is the one chosen.
pub fn place_slots(
    cfg: &Config,
    view: &[&GpuSlot],
    req: &JobRequest,
    ctx: &mut PlaceContext,
) -> Result<Plan, PlacementError> {
    let class_idx = cfg
        .classes
        .iter()
        .position(|c| c.name == req.class)
        .ok_or_else(|| PlacementError::UnknownClass {
            name: req.class.clone(),
            known: cfg.class_names(),
        })?;
    let class = &cfg.classes[class_idx];
    if !(1..=64).contains(&req.gpus) {
        return Err(PlacementError::BadGpuCount(req.gpus));
    }
    if req.gpus > 1 && matches!(req.share, ShareRequest::Pct(_)) {
        return Err(PlacementError::ShareWithManyGpus(req.gpus));
    }
    let allowed = allowed_types(cfg, &req.gpu_types)?;
    let weight = match req.energy_policy {
        Some(EnergyPolicy::Performance) => 0.0,
        Some(EnergyPolicy::Energy) => 1.0,
        Some(EnergyPolicy::Balanced) | None => cfg.policy.energy_weight,
    };
    let bound = class.slowdown_bound.unwrap_or(cfg.policy.slowdown_bound);
    // Asking for performance means no slowdown at all: no clock below what the job needs to run
    // as fast as alone at the default clock, and no co-location that slows it.
    let bound = if req.energy_policy == Some(EnergyPolicy::Performance) {
        1.0
    } else {
        bound
    };
    let params = ShareParams {
        model: ModelParams {
            contention_kappa: cfg.policy.contention_kappa,
        },
        share_step_pct: cfg.policy.mps_share_step_pct,
    };
    let reference = &cfg.gpu_types[cfg.reference_gpu];
    let mut users = UserIds::default();
    let new_user = users.id(&req.user);

    let mut rejections: BTreeMap<String, String> = BTreeMap::new();
    let mut raw: Vec<Candidate> = Vec::new();
    let type_level = view.iter().all(|g| g.node.is_empty());

    // Filter each GPU first (cheap, and on a busy cluster most GPUs fail here), then group the
    // rest: GPUs of one type with the same occupants give the same prediction.
    let mut groups: BTreeMap<(usize, Vec<&PlacedJob>), Vec<usize>> = BTreeMap::new();
    // Idle GPUs, the bulk of a quiet cluster, go to one list per type without a map lookup.
    let mut idle: Vec<Vec<usize>> = vec![Vec::new(); cfg.gpu_types.len()];
    let mut rejected = vec![false; cfg.gpu_types.len()];
    for (i, slot) in view.iter().enumerate() {
        match slot_filter(cfg, class, req, &allowed, slot) {
            Ok(()) if slot.jobs.is_empty() => idle[slot.gpu_type].push(i),
            Ok(()) => groups
                .entry((slot.gpu_type, sorted_jobs(&slot.jobs)))
                .or_default()
                .push(i),
            Err(Some(why)) => {
                // Only the first reason per type is kept: format it only then.
                if !rejected[slot.gpu_type] {
                    rejected[slot.gpu_type] = true;
                    rejections
                        .entry(cfg.gpu_types[slot.gpu_type].name.clone())
                        .or_insert_with(|| why.describe(cfg, class));
                }
            }
            Err(None) => {}
        }
    }

    for (t, slots) in idle.into_iter().enumerate().filter(|(_, s)| !s.is_empty()) {
        groups.insert((t, Vec::new()), slots);
    }

    for ((type_idx, jobs), slots) in &groups {
        let gpu = &cfg.gpu_types[*type_idx];
        // Only the first reason per type is kept: build the text only then.
        let reject = |rej: &mut BTreeMap<String, String>, why: &dyn Fn() -> String| {
            if !rej.contains_key(&gpu.name) {
                rej.insert(gpu.name.clone(), why());
            }
        };
        let occupied = !jobs.is_empty();
        if req.gpus > 1 {
            let Some((node, indices)) = whole_gpus_on_one_node(view, slots, req.gpus, type_level)
            else {
                reject(&mut rejections, &|| {
                    format!("no node has {} idle GPUs of this type", req.gpus)
                });
                continue;
            };
            let tenants = [ShareJob {
                class,
                share: ShareSpec::Fixed(SharePct::FULL),
                user: new_user,
                bound,
            }];
            match ctx.optimize(cfg, *type_idx, &tenants, params).as_ref() {
                Ok(plan) => raw.push(candidate(
                    gpu.name.clone(),
                    node,
                    indices,
                    req.gpus,
                    true,
                    plan,
                    0,
                    0.0,
                    0.0,
                )),
                Err(e) => reject(&mut rejections, &|| e.to_string()),
            }
            continue;
        }
        let slot = view[slots[0]];
        let (node, indices) = if type_level {
            (None, vec![])
        } else {
            (Some(slot.node.clone()), vec![slot.index])
        };

        let mut options: Vec<(ShareSpec, bool)> = Vec::new();
        match req.share {
            ShareRequest::Exclusive => {
                if !occupied {
                    options.push((ShareSpec::Fixed(SharePct::FULL), true));
                }
            }
            ShareRequest::Pct(p) => {
                if gpu.mps {
                    options.push((ShareSpec::Fixed(p), false));
                }
            }
            ShareRequest::Auto => {
                if !occupied {
                    options.push((ShareSpec::Fixed(SharePct::FULL), true));
                }
                let full = full_speed_share(class, gpu, reference, params.share_step_pct);
                if gpu.mps && (occupied || full < SharePct::FULL) {
                    options.push((ShareSpec::Auto, false));
                }
            }
        }

        let existing: Vec<ShareJob<'_>> = jobs
            .iter()
            .map(|j| ShareJob {
                class: &cfg.classes[j.class],
                share: ShareSpec::Fixed(j.share),
                user: users.id(&j.user),
                bound: cfg.classes[j.class]
                    .slowdown_bound
                    .unwrap_or(cfg.policy.slowdown_bound),
            })
            .collect();
        // What the jobs already there do without the newcomer, at the clock they would get.
        let before = occupied.then(|| ctx.optimize(cfg, *type_idx, &existing, params));

        for (spec, exclusive) in options {
            let mut all = existing.clone();
            all.push(ShareJob {
                class,
                share: spec,
                user: new_user,
                bound,
            });
            let planned = ctx.optimize(cfg, *type_idx, &all, params);
            let plan = match planned.as_ref() {
                Ok(p) => p,
                Err(e) => {
                    reject(&mut rejections, &|| describe_share_error(e, all.len() - 1));
                    continue;
                }
            };
            let new = plan.prediction.jobs.len() - 1;
            let horizon = plan.prediction.jobs[new].runtime.0;
            // Progress the others lose while the newcomer runs, priced at their power.
            let (mut penalty_e, mut penalty_t) = (0.0, 0.0);
            if let Some(Ok(b)) = before.as_deref() {
                // `zip` stops at the shorter list: the newcomer (last) has no "without".
                for (with, without) in plan.prediction.jobs.iter().zip(&b.prediction.jobs) {
                    let lost = (1.0 - without.runtime.0 / with.runtime.0).max(0.0);
                    penalty_e += with.power.0 * horizon * lost;
                    penalty_t += horizon * lost;
                }
            }
            let mut c = candidate(
                gpu.name.clone(),
                node.clone(),
                indices.clone(),
                1,
                exclusive,
                plan,
                jobs.len(),
                penalty_e,
                penalty_t,
            );
            if exclusive {
                c.share_pct = 100;
            }
            raw.push(c);
        }
    }

    if raw.is_empty() {
        let why = if rejections.is_empty() {
            "the cluster view has no GPU".to_owned()
        } else {
            rejections
                .iter()
                .map(|(t, w)| format!("{t}: {w}"))
                .collect::<Vec<_>>()
                .join("; ")
        };
        return Err(PlacementError::NoFeasible(why));
    }

    let mut scored = score(raw, weight);
    rank(&mut scored);
    let nice = nice_adjustment(cfg, class, &allowed, &scored[0], req.gpus);
    let decision = decide(&scored, class, weight, bound, nice, ctx.quiet);
    Ok(Plan {
        decision,
        candidates: scored,
    })
}

/// Why a GPU cannot take the job; turned into text only for the first GPU of a type.
#[derive(Debug, Clone, Copy)]
enum Reject {
    NotAllowed,
    Memory { used_gib: f64, total_gib: f64 },
    HeldExclusively,
    Crowded(usize),
    OtherUser,
    WantsWhole,
    NoMps,
}

impl Reject {
    fn describe(self, _cfg: &Config, class: &JobClass) -> String {
        match self {
            Reject::NotAllowed => "not among the requested GPU types".into(),
            Reject::Memory {
                used_gib,
                total_gib,
            } => format!(
                "needs {:.0} GiB but {:.0} of {:.0} GiB are free",
                class.memory_gib,
                total_gib - used_gib,
                total_gib
            ),
            Reject::HeldExclusively => "held exclusively".into(),
            Reject::Crowded(n) => format!("already shared by {n} jobs"),
            Reject::OtherUser => {
                "shared by another user's jobs (allow_cross_user_sharing = false)".into()
            }
            Reject::WantsWhole => "busy, and the job asks for a whole GPU".into(),
            Reject::NoMps => "no MPS on this type".into(),
        }
    }
}

/// Why `slot` cannot take the job, decided per GPU before grouping (every GPU of a group gets
/// the same answer): `Err(Some(reason))` to report, `Err(None)` to skip without a reason.
fn slot_filter(
    cfg: &Config,
    class: &JobClass,
    req: &JobRequest,
    allowed: &[bool],
    slot: &GpuSlot,
) -> Result<(), Option<Reject>> {
    let gpu = &cfg.gpu_types[slot.gpu_type];
    let jobs = &slot.jobs;
    let occupied = !jobs.is_empty();
    if !allowed[slot.gpu_type] {
        return Err(Some(Reject::NotAllowed));
    }
    let used_mem: f64 = jobs.iter().map(|j| cfg.classes[j.class].memory_gib).sum();
    if used_mem + class.memory_gib > gpu.memory_gib {
        return Err(Some(Reject::Memory {
            used_gib: used_mem,
            total_gib: gpu.memory_gib,
        }));
    }
    if req.gpus > 1 {
        // Several whole GPUs: only idle ones count; the node search says why none fit.
        return if occupied { Err(None) } else { Ok(()) };
    }
    if jobs.iter().any(|j| j.exclusive) {
        return Err(Some(Reject::HeldExclusively));
    }
    if occupied && jobs.len() >= usize::from(cfg.policy.max_jobs_per_gpu) {
        return Err(Some(Reject::Crowded(jobs.len())));
    }
    if occupied && !cfg.policy.allow_cross_user_sharing && jobs.iter().any(|j| j.user != req.user) {
        return Err(Some(Reject::OtherUser));
    }
    let no_option = match req.share {
        ShareRequest::Exclusive => occupied,
        ShareRequest::Pct(_) => !gpu.mps,
        ShareRequest::Auto => occupied && !gpu.mps,
    };
    if no_option {
        return Err(Some(if gpu.mps {
            Reject::WantsWhole
        } else {
            Reject::NoMps
        }));
    }
    Ok(())
}

/// What a candidate costs: the job's own energy and time plus what it takes from the jobs
/// already on the GPU.
struct Costs {
    energy: f64,
    time: f64,
}

#[allow(clippy::too_many_arguments)]
fn candidate(
    gpu_type: String,
    node: Option<String>,
    gpu_indices: Vec<u32>,
    gpus: u32,
    exclusive: bool,
    plan: &super::share::SharePlan,
    co_located: usize,
    penalty_e: f64,
    penalty_t: f64,
) -> Candidate {
    let me = plan.prediction.jobs.len() - 1;
    let job = &plan.prediction.jobs[me];
    let n = f64::from(gpus);
    let energy = job.energy().0 * n;
    Candidate {
        gpu_type,
        node,
        gpu_indices,
        gpus,
        share_pct: plan.shares[me].get(),
        exclusive,
        sm_clock_mhz: plan.clock.0,
        default_sm_clock_mhz: plan.at_default_clock.clock.0,
        co_located_jobs: co_located,
        predicted_runtime_s: job.runtime.0,
        predicted_energy_j: energy,
        slowdown: job.slowdown,
        co_located_energy_penalty_j: penalty_e,
        co_located_time_penalty_s: penalty_t,
        score: 0.0,
    }
}

fn costs(c: &Candidate) -> Costs {
    Costs {
        energy: c.predicted_energy_j + c.co_located_energy_penalty_j,
        time: c.predicted_runtime_s + c.co_located_time_penalty_s,
    }
}

/// Scores energy and time as the best candidate's cost over this one's (best = 100) and mixes
/// them with the weight. Ratios rather than min-max ranges: a candidate 0.1% slower than the
/// fastest must not lose the whole time score.
fn score(mut cands: Vec<Candidate>, weight: f64) -> Vec<Candidate> {
    let cs: Vec<Costs> = cands.iter().map(costs).collect();
    let (emin, _) = min_max(cs.iter().map(|c| c.energy));
    let (tmin, _) = min_max(cs.iter().map(|c| c.time));
    let ratio = |best: f64, v: f64| {
        if v > 0.0 && best.is_finite() {
            100.0 * best / v
        } else {
            100.0
        }
    };
    for (c, k) in cands.iter_mut().zip(&cs) {
        c.score = weight * ratio(emin, k.energy) + (1.0 - weight) * ratio(tmin, k.time);
    }
    cands
}

fn min_max(it: impl Iterator<Item = f64>) -> (f64, f64) {
    it.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    })
}

fn rank(cands: &mut [Candidate]) {
    cands.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(costs(a).energy.total_cmp(&costs(b).energy))
            .then(costs(a).time.total_cmp(&costs(b).time))
            .then(a.gpu_type.cmp(&b.gpu_type))
            .then(a.node.cmp(&b.node))
            .then(a.gpu_indices.cmp(&b.gpu_indices))
            .then(a.exclusive.cmp(&b.exclusive))
    });
}

fn decide(
    cands: &[Candidate],
    class: &JobClass,
    weight: f64,
    bound: f64,
    nice: i32,
    quiet: bool,
) -> Decision {
    let best = &cands[0];
    let reason = if quiet {
        String::new()
    } else {
        explain(cands, class, weight)
    };
    Decision {
        gpu_type: best.gpu_type.clone(),
        node: best.node.clone(),
        gpu_indices: best.gpu_indices.clone(),
        gpus: best.gpus,
        share_pct: best.share_pct,
        exclusive: best.exclusive,
        sm_clock_mhz: best.sm_clock_mhz,
        predicted_runtime_s: best.predicted_runtime_s,
        predicted_energy_j: best.predicted_energy_j,
        score: best.score,
        nice,
        class: class.name.clone(),
        energy_weight: weight,
        slowdown_bound: bound,
        reason,
    }
}

/// The one-line reason: what was chosen, what it costs, and how it compares with the best other
/// type (or the other way of using the same type).
fn explain(cands: &[Candidate], class: &JobClass, weight: f64) -> String {
    let best = &cands[0];
    let how = if best.exclusive {
        format!("{} whole {}", best.gpus, best.gpu_type)
    } else {
        format!("{}% MPS share of a {}", best.share_pct, best.gpu_type)
    };
    let clock = if best.sm_clock_mhz == best.default_sm_clock_mhz {
        format!("default clock {} MHz", best.sm_clock_mhz)
    } else {
        format!(
            "{} MHz (default {})",
            best.sm_clock_mhz, best.default_sm_clock_mhz
        )
    };
    let mut reason = format!(
        "{how} at {clock}: {} and {} ({:.2}x alone)",
        Joules(best.predicted_energy_j),
        Seconds(best.predicted_runtime_s),
        best.slowdown
    );
    // Compare with the best other GPU type; with one type only, with the other way of using it.
    let alt = cands
        .iter()
        .find(|c| c.gpu_type != best.gpu_type)
        .or_else(|| cands.iter().find(|c| c.exclusive != best.exclusive));
    if let Some(alt) = alt {
        let what = if alt.exclusive {
            format!("a whole {}", alt.gpu_type)
        } else {
            format!("{}% of a {}", alt.share_pct, alt.gpu_type)
        };
        reason.push_str(&format!(
            "; vs {what}: {} energy, {} time",
            relative(best.predicted_energy_j, alt.predicted_energy_j),
            relative(best.predicted_runtime_s, alt.predicted_runtime_s)
        ));
    }
    reason.push_str(&format!(
        "; weight {weight:.2}, {} candidates, {} class",
        cands.len(),
        match class.kind {
            JobKind::Training => "training",
            JobKind::Inference => "inference",
        }
    ));
    reason
}

/// "38% less" / "12% more" / "same", comparing `v` with `other`.
fn relative(v: f64, other: f64) -> String {
    let pct = 100.0 * (v / other - 1.0);
    if pct.abs() < 0.5 {
        "same".to_owned()
    } else if pct < 0.0 {
        format!("{:.0}% less", -pct)
    } else {
        format!("{pct:.0}% more")
    }
}

fn describe_share_error(e: &ShareError, new_job: usize) -> String {
    match e {
        ShareError::BoundViolated { job, .. } if *job == new_job => format!("the job itself: {e}"),
        ShareError::BoundViolated { .. } => format!("a job already there: {e}"),
        _ => e.to_string(),
    }
}

fn allowed_types(cfg: &Config, names: &[String]) -> Result<Vec<bool>, PlacementError> {
    if names.is_empty() {
        return Ok(vec![true; cfg.gpu_types.len()]);
    }
    let mut allowed = vec![false; cfg.gpu_types.len()];
    for n in names {
        let i = cfg
            .resolve_gpu_type(n)
            .ok_or_else(|| PlacementError::UnknownGpuType {
                name: n.clone(),
                known: cfg.gpu_type_names(),
            })?;
        allowed[i] = true;
    }
    Ok(allowed)
}

fn sorted_jobs(jobs: &[PlacedJob]) -> Vec<&PlacedJob> {
    let mut j: Vec<&PlacedJob> = jobs.iter().collect();
    j.sort();
    j
}

/// The first node (in view order) with `n` idle GPUs among `slots`, and their indices.
fn whole_gpus_on_one_node(
    view: &[&GpuSlot],
    slots: &[usize],
    n: u32,
    type_level: bool,
) -> Option<(Option<String>, Vec<u32>)> {
    if type_level {
        return Some((None, vec![]));
    }
    // Nodes in order of first appearance; the map keeps this linear on a 6,000-GPU view.
    let mut by_node: Vec<(&str, Vec<u32>)> = Vec::new();
    let mut at: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for &i in slots {
        let s = view[i];
        match at.get(s.node.as_str()) {
            Some(&k) => by_node[k].1.push(s.index),
            None => {
                at.insert(&s.node, by_node.len());
                by_node.push((&s.node, vec![s.index]));
            }
        }
    }
    by_node.into_iter().find_map(|(node, mut idx)| {
        let n = usize::try_from(n).ok()?;
        (idx.len() >= n).then(|| {
            idx.truncate(n);
            (Some(node.to_owned()), idx)
        })
    })
}

/// Stable small ids for user names, so the model can tell users apart without strings.
#[derive(Default)]
struct UserIds(BTreeMap<String, u32>);

impl UserIds {
    fn id(&mut self, name: &str) -> u32 {
        let next = u32::try_from(self.0.len()).unwrap_or(u32::MAX);
        *self.0.entry(name.to_owned()).or_insert(next)
    }
}

/// Predicted runtime of `class` alone on a whole GPU of each allowed type at default clock.
pub(crate) fn exclusive_default(
    cfg: &Config,
    class: &JobClass,
    type_idx: usize,
) -> (Seconds, Joules) {
    let gpu = &cfg.gpu_types[type_idx];
    let reference = &cfg.gpu_types[cfg.reference_gpu];
    let t = [Tenant {
        class,
        share: SharePct::FULL,
        user: 0,
    }];
    let p = predict(
        gpu,
        reference,
        &t,
        gpu.default_sm_clock,
        ModelParams {
            contention_kappa: cfg.policy.contention_kappa,
        },
    );
    debug_assert!(
        (p.jobs[0].runtime.0 - alone_runtime(class, gpu, reference).0).abs()
            < 1e-6 * p.jobs[0].runtime.0
    );
    (p.jobs[0].runtime, p.jobs[0].energy())
}
