//! Placement: given one job request and a view of the cluster, decide the GPU type (or the
//! ranked set of acceptable types), whole GPUs or an MPS share, and the clock.
//!
//! Built like the Kubernetes scheduling framework, in stages a reader can follow:
//! 1. **filter** each GPU of the view, saying why one cannot take the job;
//! 2. **evaluate** the GPUs that can, grouped (GPUs of one type with the same occupants give the
//!    same prediction, so an idle 6,000-GPU cluster costs one evaluation per type), and, when
//!    the view carries queues, a type that is full now at the wait it implies (`queue`);
//! 3. **rank** every candidate by its one cost (`cost`: facility energy plus completion time
//!    and the delay it imposes at the job's exchange rate), with a deterministic tie-break;
//! 4. **decide**: the best candidate, the other types close enough to offer Slurm too, and the
//!    priority adjustment (`priority`).

use super::cost::{self, Exchange, energy_j as energy_cost, time_s as time_cost};
use super::priority;
use super::queue::TypeQueue;
use super::score;
use super::share::{ShareError, ShareJob, ShareParams, SharePlan, ShareSpec, optimize};
use crate::config::Config;
use crate::model::{GpuType, JobClass, JobKind, KilledOn, alone_runtime, full_speed_share};
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

impl ShareRequest {
    /// `auto`, `exclusive` or a percentage 1..=100 (`30` or `30%`), as `--gpu-share` and
    /// `heshare plan --share` take it.
    pub fn parse(s: &str) -> Result<ShareRequest, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(ShareRequest::Auto),
            "exclusive" => Ok(ShareRequest::Exclusive),
            other => other
                .trim_end_matches('%')
                .parse::<u8>()
                .ok()
                .and_then(SharePct::new)
                .map(ShareRequest::Pct)
                .ok_or_else(|| format!("\"{s}\" is not auto, exclusive or a percentage 1..=100")),
        }
    }
}

/// The user's trade-off, from `--energy-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EnergyPolicy {
    /// Fastest completion first; energy only between equal times.
    Performance,
    /// The site's exchange rate of time for energy (`time_value_kwh_per_gpu_hour`).
    Balanced,
    /// Least energy first; time only between equal energies.
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
    /// The job's time limit, taken as its runtime alone on the reference GPU: scales the class's
    /// nominal runtime so that waiting for a type can be weighed against running elsewhere.
    #[serde(default)]
    pub time_limit_s: Option<f64>,
    /// The share its user's GRES asked for, without heshare's options: the priority
    /// adjustment's yardstick. `None` is "auto" for one GPU, whole GPUs otherwise.
    #[serde(default)]
    pub reference_share: Option<ShareRequest>,
    /// What the user said the job needs, as a percentage of a reference GPU (`--gres=mps:P` with
    /// `--gpu-share=auto`): an inference job is sized for it instead of its class's demand.
    #[serde(default)]
    pub demand_pct: Option<u8>,
    /// The job as a profile of its own runs describes it (`profile::derive`): placed with this
    /// class instead of the catalog's `class`, which then only names it.
    #[serde(skip)]
    pub learned: Option<Arc<JobClass>>,
}

fn one() -> u32 {
    1
}

impl JobRequest {
    /// A request for one GPU of `class` with every option at its default.
    pub fn new(class: &str) -> JobRequest {
        JobRequest {
            class: class.to_owned(),
            gpus: 1,
            share: ShareRequest::Auto,
            user: String::new(),
            gpu_types: vec![],
            energy_policy: None,
            time_limit_s: None,
            reference_share: None,
            demand_pct: None,
            learned: None,
        }
    }

    /// The same job with no heshare option: what the priority adjustment compares with.
    fn reference(&self) -> JobRequest {
        let share = self.reference_share.unwrap_or(if self.gpus == 1 {
            ShareRequest::Auto
        } else {
            ShareRequest::Exclusive
        });
        JobRequest {
            share,
            energy_policy: None,
            ..self.clone()
        }
    }
}

/// A job already running on a GPU of the view.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PlacedJob {
    /// Index into `Config::classes`.
    pub class: usize,
    pub share: SharePct,
    /// Shared: a snapshot names the same few users and nodes on every GPU.
    pub user: std::sync::Arc<str>,
    /// Holds the whole GPU: nobody may join.
    pub exclusive: bool,
}

/// Whether a GPU's node is up, and what starting a job there would cost if not (Slurm's power
/// saving: a job Slurm starts on a powered-down node waits for it to boot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum SlotPower {
    #[default]
    Up,
    /// Booting already (for another job): the job waits for the boot, wakes nothing.
    Booting,
    /// Powered down: the job wakes the node, waits for its boot and keeps it on.
    Down,
}

/// One GPU of the cluster view.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GpuSlot {
    /// Empty for a type-level view (one slot per type, no real GPU behind it).
    pub node: std::sync::Arc<str>,
    pub index: u32,
    /// Index into `Config::gpu_types`.
    pub gpu_type: usize,
    pub jobs: Vec<PlacedJob>,
    /// Its node's power state.
    pub power: SlotPower,
    /// GPUs on its node (what waking the node keeps on); 1 for a type-level slot.
    pub node_gpus: u32,
}

/// What placement sees of the cluster.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClusterView {
    pub gpus: Vec<GpuSlot>,
    /// Per catalog GPU type (index), what waiting for it costs; empty when unknown (a view
    /// without queues never weighs a wait, every type is taken as free).
    pub queues: Vec<TypeQueue>,
}

impl ClusterView {
    /// One idle GPU per catalog type, for deciding a type when individual GPUs are unknown (the
    /// Slurm plugin at submit time, `heshare plan` without a cluster).
    pub fn idle_types(cfg: &Config) -> ClusterView {
        ClusterView {
            gpus: (0..cfg.gpu_types.len())
                .map(|t| GpuSlot {
                    node: "".into(),
                    index: 0,
                    gpu_type: t,
                    jobs: vec![],
                    power: SlotPower::Up,
                    node_gpus: 1,
                })
                .collect(),
            queues: vec![],
        }
    }
}

/// One scored way to run the job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    pub gpu_type: String,
    /// Index of `gpu_type` in the catalog, so that ranking never looks a name up.
    #[serde(skip)]
    pub type_idx: usize,
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
    /// Expected wait for a GPU of this type (0 when one can take the job now), a node's boot
    /// included.
    pub wait_s: f64,
    /// Starting here wakes a powered-down node (its boot is in `wait_s`, the energy of keeping it
    /// on in `predicted_energy_j`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub wakes_node: bool,
    /// No GPU of the type can take the job now: it waits for one to free (`wait_s`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub queued: bool,
    /// Seconds of waiting work the option pushes back (`policy::cost::imposed_delay_s`).
    pub imposed_delay_s: f64,
    /// The chance its run here passes its time limit (`policy::belief::LimitRisk::probability`), for
    /// a job whose limit is known against its own runs' runtime; 0 otherwise.
    pub kill_probability: f64,
    /// Its time limit, what a kill throws away (0 where no chance of a kill is known).
    pub limit_s: f64,
    /// The option's cost (`policy::cost`): facility energy plus completion time and the delay
    /// it imposes on waiting work at the job's exchange rate, in joules.
    pub cost_j: f64,
    /// The cost as a score: the best option's cost over this one's, times 100.
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
    /// heshare's part of the job's priority, for Slurm's site factor (positive = sooner), within
    /// ±priority_range.
    pub site_factor: i32,
    pub class: String,
    /// Joules a second of the job's time was worth in its cost (`policy::cost`); `None` where
    /// its `--energy-policy` ranked by time or by energy first.
    pub time_value_w: Option<f64>,
    /// The chosen option's cost at the site's own rate (`policy::cost`), in joules: what the
    /// site factor compares.
    pub site_cost_j: f64,
    /// The slowdown bound the decision kept; the node helper keeps it when it re-optimises the
    /// GPU's clock as jobs come and go.
    pub slowdown_bound: f64,
    /// Every GPU type offered to Slurm, best first (`gpu_type` is the first): Slurm starts the
    /// job on whichever has room first. One type when no other scores close to the best.
    pub offered: Vec<String>,
    /// The share to ask Slurm for when the job may land on any offered type: the largest any of
    /// them needs (`share_pct` is the best candidate's, on its GPU).
    pub offered_share_pct: u8,
    /// Expected wait for the best type (0 when it has room now).
    pub wait_s: f64,
    /// The type the job's time limit is taken to be written for (the slowest its request
    /// allows): on every other type and clock its predicted runtime stays within the limit.
    /// `None` without a limit.
    pub limit_type: Option<String>,
    /// The chosen option's cost in its terms (`policy::cost`), at the job's own rate.
    pub terms: CostTerms,
    pub reason: String,
}

/// One option's cost in its terms: `cost_j = energy_j + lambda_w * (time_s + delay_s) + kill_j`
/// (`policy::cost`), what AdminComment names for the chosen option.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CostTerms {
    pub cost_j: f64,
    pub energy_j: f64,
    /// Joules per second of time; the pure time-first and energy-first orders use a rate far
    /// from any real one (`cost::Exchange::joules_per_s`).
    pub lambda_w: f64,
    pub time_s: f64,
    pub delay_s: f64,
    pub kill_probability: f64,
    pub kill_j: f64,
}

impl CostTerms {
    /// The terms of option `c` at `exchange`.
    pub fn of(c: &Candidate, exchange: Exchange) -> CostTerms {
        CostTerms {
            cost_j: cost::cost_j(c, exchange),
            energy_j: cost::energy_j(c),
            lambda_w: exchange.joules_per_s(),
            time_s: cost::time_s(c),
            delay_s: c.imposed_delay_s,
            kill_probability: c.kill_probability,
            kill_j: cost::kill_j(c, exchange),
        }
    }
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
    /// Skip the `reason` text, and `slurm::request`'s AdminComment and SPANK environment of a
    /// rewrite (formatting floats costs more than the decision on a quiet view): for the
    /// simulator, which reads none of them back. The decision is the same.
    pub quiet: bool,
    /// Skip the priority adjustment (a second placement for jobs with options): for callers
    /// that do not use the site factor, the simulator's heshare-whole-view.
    pub no_priority: bool,
    plans: rustc_hash::FxHashMap<PlanKey, Arc<Result<SharePlan, ShareError>>>,
    /// The config the plans belong to (its address: a cache must not outlive it).
    owner: usize,
}

/// A GPU type and its tenants, with users renumbered by first appearance (the model only asks
/// whether two users are the same) and classes by their content: a class learned for one
/// decision (a job's profile) lives no longer than the decision, so its address could be another
/// class's next time.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PlanKey {
    gpu_type: usize,
    tenants: Vec<TenantKey>,
}

/// One job as the plan depends on it: its class's fingerprint, share, user (numbered in order
/// of appearance), bound's bits and its limit's belief (`belief::LimitRisk::key`).
type TenantKey = (u64, ShareSpec, u32, u64, Option<[u64; 7]>);

/// Plans remembered beyond this many are dropped all at once (a long run sees few signatures).
const PLAN_CACHE_MAX: usize = 200_000;

impl PlaceContext {
    pub fn quiet() -> Self {
        PlaceContext {
            quiet: true,
            ..PlaceContext::default()
        }
    }

    /// Quiet, and without the priority adjustment.
    pub fn simulation() -> Self {
        PlaceContext {
            quiet: true,
            no_priority: true,
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
                    j.class.fingerprint(),
                    j.share,
                    u32::try_from(user).unwrap_or(u32::MAX),
                    j.bound.to_bits(),
                    j.risk.map(|r| r.key()),
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
    place_slots(cfg, &slots, &view.queues, req, ctx)
}

/// `place_with` on a list of GPUs and the view's queues. A caller that keeps its GPUs grouped by
/// type and occupants (`groups::GpuGroups`) may pass the first GPU (in view order) of each group
/// for a one-GPU job, and only the idle GPUs for a multi-GPU job: the decision is the one the
/// whole view gives, since every GPU of a group gets the same prediction and the first of a group
/// is the one chosen.
pub fn place_slots(
    cfg: &Config,
    view: &[&GpuSlot],
    queues: &[TypeQueue],
    req: &JobRequest,
    ctx: &mut PlaceContext,
) -> Result<Plan, PlacementError> {
    let job = Job::new(cfg, req)?;
    let mut plan = plan_for(cfg, &job, view, queues, ctx)?;
    // The priority adjustment compares with the same job without heshare options, on the same
    // view; a job that set none is its own yardstick (adjustment 0, no second placement).
    let reference = req.reference();
    let reference_cost = if reference == *req || ctx.no_priority {
        plan.decision.site_cost_j
    } else {
        let quiet = std::mem::replace(&mut ctx.quiet, true);
        let r = Job::new(cfg, &reference).and_then(|j| plan_for(cfg, &j, view, queues, ctx));
        ctx.quiet = quiet;
        r.map_or(plan.decision.site_cost_j, |p| p.decision.site_cost_j)
    };
    let factor = priority::site_factor(cfg, plan.decision.site_cost_j, reference_cost);
    // A request with the user's need (`--gres=mps:P --gpu-share=auto`, or such a job re-priced
    // with the share heshare sized for it) is a share heshare sized; so is a share its profile
    // sized (the user chose nothing: heshare's margin for what its runs measured is no cost of
    // theirs).
    plan.decision.site_factor = if req.demand_pct.is_some() || req.learned.is_some() {
        priority::for_sized_share(factor)
    } else {
        factor
    };
    Ok(plan)
}

/// A validated request with what every stage needs of it.
#[derive(Clone)]
struct Job<'a> {
    req: &'a JobRequest,
    class: &'a JobClass,
    allowed: Vec<bool>,
    /// How the job's options trade time against energy (`policy::cost`).
    exchange: Exchange,
    bound: f64,
    params: ShareParams,
    /// The job's time limit, when given.
    limit_s: Option<f64>,
}

/// How the job's time limit sizes it on a view: its runtime relative to the class's nominal one,
/// and the type the limit is written for.
#[derive(Debug, Clone, Copy)]
struct Sizing {
    scale: f64,
    /// The slowest allowed type present: the limit covers the job's runtime alone there at the
    /// default clock, so the job keeps within it wherever it runs no slower than that.
    slowest: Option<usize>,
    /// A learned class predicts runtimes in seconds (its runs measured them): the limit caps
    /// them as they are.
    absolute: Option<f64>,
}

/// The class `req` is sized with on `gpu` (see `Config::class_on`): a catalog class with its
/// margins; a learned class as its runs measured it (an upper quantile). A learned service on a
/// type its runs never measured is sized there for the catalog's translation of its need, with
/// the type's `speed_uncertainty`, and for no less than the share its user asked for: a
/// service's speed across types varies from job to job beyond the catalog's exponent, and its
/// need is its share, so too small a share makes it fall behind its requests until its time
/// limit kills it (in the simulator, such services were half the kills heshare caused at load
/// 0.7). Its user's ask is the only other estimate of its need there. Once a run there is
/// measured, the profile sizes it, below the ask if that is what it needs. `class` is what
/// `req` names or carries.
pub fn sized_class<'a>(
    cfg: &'a Config,
    req: &JobRequest,
    class: &'a JobClass,
    gpu: &GpuType,
) -> std::borrow::Cow<'a, JobClass> {
    use std::borrow::Cow;
    if req.learned.is_none() {
        return Cow::Borrowed(
            cfg.class_on(&req.class, req.demand_pct, gpu)
                .unwrap_or(class),
        );
    }
    if class.kind != JobKind::Inference || class.measured_on(&gpu.name) {
        return Cow::Borrowed(class);
    }
    // Its need where it ran is an upper quantile of its runs already: no demand margin on top
    // (in the simulator it cost whole GPUs to services at high load for no fewer violations).
    let reference = &cfg.gpu_types[cfg.reference_gpu];
    let m = gpu.speed_uncertainty.max(0.0).exp();
    let modelled = crate::model::need(class, gpu, reference);
    let asked = match req.reference_share {
        Some(ShareRequest::Pct(p)) => p.fraction(),
        _ => 0.0,
    };
    let sized = (modelled * m).max(asked);
    if sized > modelled * (1.0 + 1e-9) {
        Cow::Owned(JobClass {
            // The need here is demand over its speed here: scaled so that it is `sized`.
            demand: class.demand * sized / modelled.max(1e-12),
            ..class.clone()
        })
    } else {
        Cow::Borrowed(class)
    }
}

/// How much slower than alone (default clock) a job of `class` may run on `gpu` and still finish
/// within a time limit written for `slowest`: its runtime alone there over its runtime alone on
/// `gpu`. Pure: the plugin, the node helper and the simulator cap a job's bound with it.
pub fn limit_cap(class: &JobClass, gpu: &GpuType, slowest: &GpuType, reference: &GpuType) -> f64 {
    alone_runtime(class, slowest, reference).0 / alone_runtime(class, gpu, reference).0.max(1e-9)
}

/// Whether the node helper keeps `gpu` at its default clock for a profiled job (`class`, learned)
/// with time limit `limit_s`: a run of it was killed at its limit there beside a neighbour, so
/// what slows it there is beyond the model. Elsewhere its clock keeps its limit at the belief's
/// quantile (`belief::limit_runtime`, which widens on types its runs never measured). Pure: the
/// node helper, the simulator and placement's candidates use it alike.
pub fn keeps_default_clock(cfg: &Config, class: &JobClass, gpu: &GpuType, limit_s: f64) -> bool {
    killed_sharing_on(cfg, class, gpu, limit_s)
}

/// A recent run of the job, with a limit no shorter than `limit_s`, was killed at its time limit
/// on `gpu` holding a share no smaller than the one its profile now gives it there: not for want
/// of a share (a share below its need, as its user asked, is sized anew from its runs), so a
/// neighbour slowed it beyond the model.
fn killed_sharing_on(cfg: &Config, class: &JobClass, gpu: &GpuType, limit_s: f64) -> bool {
    class
        .kills_on(&gpu.name, limit_s)
        .any(|k| neighbour_kill(cfg, class, k))
}

/// A kill at the time limit of a run that held a share no smaller than its need on the type it
/// ran on: a neighbour slowed it. (A kill of a type the catalog no longer has counts too.)
fn neighbour_kill(cfg: &Config, class: &JobClass, k: &KilledOn) -> bool {
    let Some(s) = k.share_pct else {
        return false;
    };
    let reference = &cfg.gpu_types[cfg.reference_gpu];
    cfg.gpu_type(&k.gpu_type).is_none_or(|t| {
        full_speed_share(
            class,
            &cfg.gpu_types[t],
            reference,
            cfg.policy.mps_share_step_pct,
        )
        .get()
            <= s
    })
}

/// A recent run of the job was killed at its time limit beside a neighbour (see
/// [`neighbour_kill`]), on any type and whatever its limit: it shares no GPU. How much a
/// neighbour slows a job is the job's own (Gavel's co-located pairs range from no slowdown to
/// near standstill), not the type's, and such a kill only says it ran out of time, not by how
/// much, so neither another type nor a longer limit is known to be enough.
fn killed_sharing(cfg: &Config, class: &JobClass) -> bool {
    class
        .limit_kills
        .iter()
        .any(|k| neighbour_kill(cfg, class, k))
}

impl<'a> Job<'a> {
    fn new(cfg: &'a Config, req: &'a JobRequest) -> Result<Job<'a>, PlacementError> {
        // Sized for the upper end of what a job of the class may need (`demand_margin`).
        let class = match req.learned.as_deref() {
            Some(c) => c,
            None => cfg
                .class(&req.class)
                .ok_or_else(|| PlacementError::UnknownClass {
                    name: req.class.clone(),
                    known: cfg.class_names(),
                })?,
        };
        if !(1..=64).contains(&req.gpus) {
            return Err(PlacementError::BadGpuCount(req.gpus));
        }
        if req.gpus > 1 && matches!(req.share, ShareRequest::Pct(_)) {
            return Err(PlacementError::ShareWithManyGpus(req.gpus));
        }
        let allowed = allowed_types(cfg, &req.gpu_types)?;
        let exchange = match req.energy_policy {
            Some(EnergyPolicy::Performance) => Exchange::TimeOnly,
            Some(EnergyPolicy::Energy) => Exchange::EnergyOnly,
            Some(EnergyPolicy::Balanced) | None => {
                Exchange::site(cfg.policy.time_value_kwh_per_gpu_hour, req.gpus)
            }
        };
        // Asking for performance means no slowdown at all: no clock below what the job needs to
        // run as fast as alone at the default clock, and no co-location that slows it.
        let bound = if req.energy_policy == Some(EnergyPolicy::Performance) {
            1.0
        } else {
            class.slowdown_bound.unwrap_or(cfg.policy.slowdown_bound)
        };
        let limit_s = req.time_limit_s.filter(|t| t.is_finite() && *t > 0.0);
        Ok(Job {
            req,
            class,
            allowed,
            exchange,
            bound,
            // The node helper sets the GPU's clock at the site's exchange rate, whatever a job's
            // own policy: predict the clock it will set.
            params: ShareParams::of(cfg),
            limit_s,
        })
    }
}

/// The first reason each GPU type was turned down for, by type name.
struct Rejections(BTreeMap<String, String>, bool);

impl Rejections {
    /// Reasons kept as text, or (`quiet`) only the types turned down.
    fn new(quiet: bool) -> Rejections {
        Rejections(BTreeMap::new(), quiet)
    }

    /// Keeps only the first reason per type: the text is built only then, and never when
    /// quiet.
    fn add(&mut self, gpu_type: &str, why: impl FnOnce() -> String) {
        if !self.0.contains_key(gpu_type) {
            let why = if self.1 { String::new() } else { why() };
            self.0.insert(gpu_type.to_owned(), why);
        }
    }

    fn into_error(self) -> PlacementError {
        PlacementError::NoFeasible(if self.0.is_empty() {
            "the cluster view has no GPU".to_owned()
        } else {
            self.0
                .iter()
                .map(|(t, w)| format!("{t}: {w}"))
                .collect::<Vec<_>>()
                .join("; ")
        })
    }
}

/// GPUs that passed the filter, grouped by type, node power state and occupants (sorted), each
/// group's GPUs in view order.
type Groups<'v> = BTreeMap<(usize, SlotPower, Vec<&'v PlacedJob>), Vec<usize>>;

/// Stage 1: every GPU through `slot_filter`; the ones that pass, grouped.
fn filter_stage<'v>(
    cfg: &Config,
    job: &Job<'_>,
    view: &[&'v GpuSlot],
    rejections: &mut Rejections,
) -> Groups<'v> {
    let mut groups: Groups<'v> = BTreeMap::new();
    // Idle GPUs, the bulk of a quiet cluster, go to one list per type without a map lookup.
    let mut idle: Vec<Vec<usize>> = vec![Vec::new(); cfg.gpu_types.len()];
    for (i, slot) in view.iter().enumerate() {
        match slot_filter(cfg, job.class, job.req, &job.allowed, slot) {
            Ok(()) if slot.jobs.is_empty() && slot.power == SlotPower::Up => {
                idle[slot.gpu_type].push(i);
            }
            Ok(()) => groups
                .entry((slot.gpu_type, slot.power, sorted_jobs(&slot.jobs)))
                .or_default()
                .push(i),
            Err(Some(why)) => rejections.add(&cfg.gpu_types[slot.gpu_type].name, || {
                why.describe(cfg, job.class)
            }),
            Err(None) => {}
        }
    }
    for (t, slots) in idle.into_iter().enumerate().filter(|(_, s)| !s.is_empty()) {
        groups.insert((t, SlotPower::Up, Vec::new()), slots);
    }
    groups
}

/// Stages 1-4 for one validated request, without the priority adjustment.
fn plan_for(
    cfg: &Config,
    job: &Job<'_>,
    view: &[&GpuSlot],
    queues: &[TypeQueue],
    ctx: &mut PlaceContext,
) -> Result<Plan, PlacementError> {
    let mut rejections = Rejections::new(ctx.quiet);
    let groups = filter_stage(cfg, job, view, &mut rejections);
    let type_level = view.iter().all(|g| g.node.is_empty());
    let sizing = sizing(cfg, job, view, queues);

    // Stage 2: evaluate each group, then each full type at the wait it implies.
    let mut raw: Vec<Candidate> = Vec::new();
    let mut usable = vec![false; cfg.gpu_types.len()];
    let mut on_types = OnTypes::new(cfg.gpu_types.len());
    for ((type_idx, power, jobs), slots) in &groups {
        let place = if job.req.gpus > 1 {
            match whole_gpus_on_one_node(view, slots, job.req.gpus, type_level) {
                Some(p) => p,
                None => {
                    rejections.add(&cfg.gpu_types[*type_idx].name, || {
                        format!("no node has {} idle GPUs of this type", job.req.gpus)
                    });
                    continue;
                }
            }
        } else {
            let slot = view[slots[0]];
            if type_level {
                (None, vec![])
            } else {
                (Some(slot.node.to_string()), vec![slot.index])
            }
        };
        let before = raw.len();
        let node_gpus = view[slots[0]].node_gpus;
        evaluate(
            cfg,
            job,
            sizing,
            *type_idx,
            &mut on_types,
            jobs,
            place,
            (None, *power, node_gpus),
            ctx,
            &mut rejections,
            &mut raw,
        );
        usable[*type_idx] |= raw.len() > before;
    }
    for (t, q) in queues.iter().enumerate().take(cfg.gpu_types.len()) {
        if usable[t] || q.total_gpus == 0 || !job.allowed[t] {
            continue;
        }
        let gpu = &cfg.gpu_types[t];
        if job.class.memory_gib > gpu.memory_gib {
            continue;
        }
        match q.wait_s(job.req.gpus) {
            Some(wait) => evaluate(
                cfg,
                job,
                sizing,
                t,
                &mut on_types,
                &[],
                (None, vec![]),
                (Some(wait), SlotPower::Up, 1),
                ctx,
                &mut rejections,
                &mut raw,
            ),
            None => rejections.add(&gpu.name, || {
                format!(
                    "full, and no GPU of this type is expected to free for {} GPUs",
                    job.req.gpus
                )
            }),
        }
    }
    if raw.is_empty() {
        return Err(rejections.into_error());
    }

    // Stage 3: one cost for every option, ranked.
    for c in &mut raw {
        let q = queues.get(c.type_idx);
        c.imposed_delay_s = cost::imposed_delay_s(c, q);
        c.cost_j = cost::cost_j(c, job.exchange);
    }
    score::score(&mut raw);
    score::rank(&mut raw);

    // Stage 4: decide.
    let mut decision = decide(cfg, &raw, job, ctx.quiet);
    decision.limit_type = sizing.slowest.map(|t| cfg.gpu_types[t].name.clone());
    Ok(Plan {
        decision,
        candidates: raw,
    })
}

/// What the job is on one GPU type, the same for every group of its GPUs: its class sized for
/// the type, its bound (with the slowdown its time limit allows there), its risk of a kill, and
/// whether it must have a GPU of its own or keep the default clock.
struct OnType<'a> {
    class: std::borrow::Cow<'a, JobClass>,
    bound: f64,
    risk: Option<super::belief::LimitRisk>,
    killed_here: bool,
    default_clock: bool,
}

/// [`OnType`] per GPU type, each worked out at the type's first group of a plan.
struct OnTypes<'a>(Vec<Option<Option<OnType<'a>>>>);

impl<'a> OnTypes<'a> {
    fn new(types: usize) -> OnTypes<'a> {
        OnTypes((0..types).map(|_| None).collect())
    }

    /// [`on_type`] for `type_idx`, worked out once.
    fn get(
        &mut self,
        cfg: &'a Config,
        job: &Job<'a>,
        sizing: Sizing,
        type_idx: usize,
        rejections: &mut Rejections,
    ) -> Option<&OnType<'a>> {
        self.0[type_idx]
            .get_or_insert_with(|| on_type(cfg, job, sizing, type_idx, rejections))
            .as_ref()
    }
}

/// [`OnType`] for `type_idx`, or `None` where the type is turned down for the job itself (its
/// reason added to `rejections`).
fn on_type<'a>(
    cfg: &'a Config,
    job: &Job<'a>,
    sizing: Sizing,
    type_idx: usize,
    rejections: &mut Rejections,
) -> Option<OnType<'a>> {
    let gpu = &cfg.gpu_types[type_idx];
    let reference = &cfg.gpu_types[cfg.reference_gpu];
    // Sized for this type: larger where the catalog's speed here is not measured.
    let sized = sized_class(cfg, job.req, job.class, gpu);
    let class: &JobClass = &sized;
    // Within its time limit: no slower here than alone on the type the limit is written for
    // (a learned class: than its limit over its measured runtime here).
    // (For a profiled job: its runtime here as its runs say, or carry it by the exponent where
    // they never measured the type.)
    // (A learned job whose limit the site's convention does not place: against its runs.)
    let written_for = sizing.slowest.map(|t| &cfg.gpu_types[t]).filter(|w| {
        sizing
            .absolute
            .is_none_or(|limit| super::belief::written_for_holds(cfg, class, w, limit))
    });
    let cap = match (sizing.absolute, written_for) {
        (_, Some(w)) => Some(limit_cap(class, gpu, w, reference)),
        (Some(limit), None) => Some(limit / alone_runtime(class, gpu, reference).0.max(1e-9)),
        (None, None) => None,
    };
    if let (Some(c), Some(limit)) = (cap, job.limit_s) {
        if c < 1.0 - 1e-9 {
            rejections.add(&gpu.name, || {
                format!(
                    "would need {} of its {} time limit even alone at full clock",
                    Seconds(limit / c),
                    Seconds(limit)
                )
            });
            return None;
        }
    }
    // Its runs ran out of time even with whole GPUs, with a limit no shorter than its own, here
    // or where it runs faster: not this type. (A job without a limit is never killed at one.)
    let limit = job.limit_s.unwrap_or(f64::INFINITY);
    if super::belief::ran_out_of_time(cfg, job.class, gpu, limit) {
        rejections.add(&gpu.name, || {
            "a recent run here, or on a type it runs no slower on, was killed at its time limit \
             with a GPU of its own"
                .into()
        });
        return None;
    }
    // A run of it killed at its limit beside a neighbour: a GPU of its own. A neighbour's
    // contention varies several-fold from pair to pair (Gavel's measured pairs), beyond what the
    // sharing model predicts for the job. (Its limit otherwise caps its slowdown, `cap`.)
    let killed_here = killed_sharing(cfg, job.class);
    let default_clock = sizing
        .absolute
        .is_some_and(|l| keeps_default_clock(cfg, job.class, gpu, l));
    // The slowdown its limit allows here: for a profiled job, as its runs and the type its limit
    // is written for say (`belief::limit_slowdown`), as the node helper clocks it
    // (`node_clock::tenant_bound`); what risk of a kill remains is priced (`cost::kill_j`).
    let cap = match sizing.absolute {
        Some(limit) => Some(super::belief::limit_slowdown(
            cfg,
            class,
            gpu,
            written_for,
            limit,
        )),
        None => cap,
    };
    let bound = cap.map_or(job.bound, |c| job.bound.min(c));
    // A learned job's risk of a kill, priced by the clock as by the option (`cost::kill_j`).
    let risk = sizing
        .absolute
        .map(|limit| super::belief::LimitRisk::of(cfg, class, gpu, written_for, limit));
    Some(OnType {
        class: sized,
        bound,
        risk,
        killed_here,
        default_clock,
    })
}

/// Stage 2 for one group of identical GPUs (or a full type, `jobs` empty and `queued_s` its
/// expected wait): every way the job may use such a GPU, planned by the sharing optimizer.
#[allow(clippy::too_many_arguments)]
fn evaluate<'a>(
    cfg: &'a Config,
    job: &Job<'a>,
    sizing: Sizing,
    type_idx: usize,
    on_types: &mut OnTypes<'a>,
    jobs: &[&PlacedJob],
    (node, indices): (Option<String>, Vec<u32>),
    (queued_s, power, node_gpus): (Option<f64>, SlotPower, u32),
    ctx: &mut PlaceContext,
    rejections: &mut Rejections,
    out: &mut Vec<Candidate>,
) {
    let gpu = &cfg.gpu_types[type_idx];
    let reference = &cfg.gpu_types[cfg.reference_gpu];
    let Some(on) = on_types.get(cfg, job, sizing, type_idx, rejections) else {
        return;
    };
    let class: &JobClass = &on.class;
    let (bound, risk, killed_here, default_clock) =
        (on.bound, on.risk, on.killed_here, on.default_clock);
    // Slurm's power saving: waking a node costs its boot (a wait) and keeps it on, idle GPUs
    // and host, for the boot and at least SuspendTime after.
    let (boot_s, wake_j) = match power {
        SlotPower::Up => (0.0, 0.0),
        SlotPower::Booting => (cfg.power.resume_s, 0.0),
        SlotPower::Down => (
            cfg.power.resume_s,
            (gpu.idle_power.0 + gpu.host_power.0)
                * f64::from(node_gpus.max(1))
                * (cfg.power.resume_s + cfg.power.suspend_time_s.unwrap_or(0.0)),
        ),
    };
    let wait_s = queued_s.unwrap_or(0.0) + boot_s;
    let occupied = !jobs.is_empty();
    let mut users = UserIds::default();
    let new_user = users.id(&job.req.user);
    let gpus = job.req.gpus;
    let mut options: Vec<(ShareSpec, bool)> = Vec::new();
    if killed_here {
        if !occupied {
            options.push((ShareSpec::Fixed(SharePct::FULL), true));
        } else {
            rejections.add(&gpu.name, || {
                "a recent run of it sharing a GPU was killed at its time limit".into()
            });
        }
    } else if gpus > 1 {
        options.push((ShareSpec::Fixed(SharePct::FULL), true));
    } else {
        match job.req.share {
            ShareRequest::Exclusive if !occupied => {
                options.push((ShareSpec::Fixed(SharePct::FULL), true));
            }
            ShareRequest::Exclusive => {}
            ShareRequest::Pct(p) => {
                if gpu.mps {
                    options.push((ShareSpec::Fixed(p), false));
                }
            }
            ShareRequest::Auto => {
                if !occupied {
                    options.push((ShareSpec::Fixed(SharePct::FULL), true));
                }
                // All of an idle GPU is that whole GPU, already an option: not the same GPU
                // again as an MPS share (accounted as gres/mps, run under MPS for nothing).
                let whole_anyway = !occupied
                    && full_speed_share(class, gpu, reference, job.params.share_step_pct)
                        == SharePct::FULL;
                if gpu.mps && !whole_anyway {
                    options.push((ShareSpec::Auto, false));
                }
            }
        }
    }
    let existing: Vec<ShareJob<'_>> = jobs
        .iter()
        // Jobs already there are predicted with their class as it stands (their share is
        // theirs; sizing them for the upper end of their need would turn down every neighbour
        // of a job whose share was sized before); the newcomer is sized for its own upper end.
        .map(|j| ShareJob {
            class: &cfg.classes[j.class],
            share: ShareSpec::Fixed(j.share),
            user: users.id(&j.user),
            bound: cfg.classes[j.class]
                .slowdown_bound
                .unwrap_or(cfg.policy.slowdown_bound),
            risk: None,
        })
        .collect();
    let host_w = gpu.host_power.0;
    // What the jobs already there do without the newcomer, at the clock they would get.
    let before = occupied.then(|| ctx.optimize(cfg, type_idx, &existing, job.params));
    for (spec, exclusive) in options {
        let mut all = existing.clone();
        all.push(ShareJob {
            class,
            share: spec,
            user: new_user,
            bound,
            risk,
        });
        let planned = ctx.optimize(cfg, type_idx, &all, job.params);
        let plan = match planned.as_ref() {
            Ok(p) => p,
            Err(e) => {
                rejections.add(&gpu.name, || describe_share_error(e, all.len() - 1));
                continue;
            }
        };
        let me = plan.prediction.jobs.len() - 1;
        let mine = &plan.prediction.jobs[me];
        let horizon = mine.runtime.0;
        // What a job's power costs at the meter: with power saving, all of it and the host it
        // keeps on (the GPU's part of the node, split among the GPU's jobs by share, as its
        // idle power is); always on, the power above idle.
        let total_share: f64 = plan.shares.iter().map(|x| x.fraction()).sum();
        let metered = |power: f64, part: f64| {
            let of_gpu = part / total_share.max(1e-9);
            if job.params.static_power {
                power + host_w * of_gpu
            } else {
                (power - gpu.idle_power.0 * of_gpu).max(0.0)
            }
        };
        let my_part = if exclusive {
            1.0
        } else {
            plan.shares[me].fraction()
        };
        // Progress the others lose while the newcomer runs, priced at their power and host part.
        let (mut penalty_e, mut penalty_t) = (0.0, 0.0);
        if let Some(Ok(b)) = before.as_deref() {
            // `zip` stops at the shorter list: the newcomer (last) has no "without".
            for ((with, without), share) in plan
                .prediction
                .jobs
                .iter()
                .zip(&b.prediction.jobs)
                .zip(&plan.shares)
            {
                let lost = (1.0 - without.runtime.0 / with.runtime.0).max(0.0);
                penalty_e += metered(with.power.0, share.fraction()) * horizon * lost;
                penalty_t += horizon * lost;
            }
        }
        let s = sizing.scale;
        let kill = risk.map(|r| {
            let p = if spec != ShareSpec::Auto {
                r.probability(mine.runtime.0 * s)
            } else {
                // A share heshare sizes itself is priced beside the neighbours the rest of the
                // GPU can hold: heshare and Slurm fill it, and the share is fixed for the run.
                // (A whole GPU has none; a share its user asked for is theirs, with whatever
                // neighbours it gets under plain Slurm too.) The neighbours there now keep no
                // more of it busy than their shares, which the rest already holds.
                let share = plan.shares[me].fraction();
                r.probability_shared(
                    mine.runtime.0 * s,
                    1.0 - share,
                    super::share::neighbours_pressure(&plan.prediction, &all, me),
                    mine.busy / share.max(1e-9),
                )
            };
            (p, r.limit_s)
        });
        out.push(Candidate {
            gpu_type: gpu.name.clone(),
            type_idx,
            node: node.clone(),
            gpu_indices: indices.clone(),
            gpus,
            share_pct: if exclusive {
                100
            } else {
                plan.shares[me].get()
            },
            exclusive,
            // Scored as the optimizer would clock it; where the node helper keeps the default
            // clock (`keeps_default_clock`) the decision says so. (Scoring such jobs at the
            // default clock sent more of them to share: docs/history.md.)
            sm_clock_mhz: if default_clock {
                plan.at_default_clock.clock.0
            } else {
                plan.clock.0
            },
            default_sm_clock_mhz: plan.at_default_clock.clock.0,
            co_located_jobs: jobs.len(),
            predicted_runtime_s: mine.runtime.0 * s,
            predicted_energy_j: metered(mine.power.0, my_part)
                * mine.runtime.0
                * f64::from(gpus)
                * s
                + wake_j,
            slowdown: mine.slowdown,
            co_located_energy_penalty_j: penalty_e * s,
            co_located_time_penalty_s: penalty_t * s,
            wait_s,
            wakes_node: power == SlotPower::Down,
            queued: queued_s.is_some(),
            imposed_delay_s: 0.0,
            kill_probability: kill.map_or(0.0, |(p, _)| p),
            limit_s: kill.map_or(0.0, |(_, l)| l),
            cost_j: 0.0,
            score: 0.0,
        });
    }
}

/// Stage 4: the best candidate, and the other types whose best candidate of the same kind
/// (whole GPUs or a share) scores within `offer_margin` of it. A share offered on several types
/// is the largest any of them needs: the job keeps its bound wherever Slurm starts it.
fn decide(cfg: &Config, cands: &[Candidate], job: &Job<'_>, quiet: bool) -> Decision {
    let best = &cands[0];
    let mut offered: Vec<&Candidate> = vec![best];
    for c in cands {
        if c.exclusive == best.exclusive
            && c.score >= best.score - cfg.policy.offer_margin
            && !offered.iter().any(|o| o.type_idx == c.type_idx)
        {
            offered.push(c);
        }
    }
    let offered_share_pct = offered.iter().map(|c| c.share_pct).max().unwrap_or(100);
    let reason = if quiet {
        String::new()
    } else {
        explain(cands, &offered, job)
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
        site_factor: 0,
        class: job.class.name.clone(),
        time_value_w: job.exchange.rate(),
        // What the choice costs the site, at its own rate, whatever the job's --energy-policy:
        // the yardstick of the site factor.
        site_cost_j: cost::cost_j(
            best,
            Exchange::site(cfg.policy.time_value_kwh_per_gpu_hour, job.req.gpus),
        ),
        slowdown_bound: job.bound,
        offered: offered.iter().map(|c| c.gpu_type.clone()).collect(),
        offered_share_pct,
        wait_s: best.wait_s,
        limit_type: None,
        terms: CostTerms::of(best, job.exchange),
        reason,
    }
}

/// How the job's time limit sizes it (see [`Sizing`]): the limit is taken as its runtime alone
/// at the default clock on the slowest type its request allows among those in the view (what
/// plain Slurm could give it), so the class's nominal runtime scales to it there.
fn sizing(cfg: &Config, job: &Job<'_>, view: &[&GpuSlot], queues: &[TypeQueue]) -> Sizing {
    let Some(limit) = job.limit_s else {
        return Sizing {
            scale: 1.0,
            slowest: None,
            absolute: None,
        };
    };
    let reference = &cfg.gpu_types[cfg.reference_gpu];
    let mut present = vec![false; cfg.gpu_types.len()];
    for s in view {
        present[s.gpu_type] = true;
    }
    for (t, q) in queues.iter().enumerate().take(present.len()) {
        present[t] |= q.total_gpus > 0;
    }
    // The site's convention: limits written for one type, or for the slowest the job allows.
    let slowest = cfg.gpu_type(&cfg.policy.limit_type).or_else(|| {
        (0..cfg.gpu_types.len())
            .filter(|&t| present[t] && job.allowed[t])
            .max_by(|&a, &b| {
                alone_runtime(job.class, &cfg.gpu_types[a], reference)
                    .0
                    .total_cmp(&alone_runtime(job.class, &cfg.gpu_types[b], reference).0)
                    .then(b.cmp(&a))
            })
    });
    // A learned class predicts in seconds; the type the limit is written for conditions its
    // belief (`belief::LimitRisk`).
    if job.req.learned.is_some() {
        return Sizing {
            scale: 1.0,
            slowest,
            absolute: Some(limit),
        };
    }
    match slowest {
        Some(t) => Sizing {
            scale: limit
                / alone_runtime(job.class, &cfg.gpu_types[t], reference)
                    .0
                    .max(1e-9),
            slowest: Some(t),
            absolute: None,
        },
        None => Sizing {
            scale: limit / job.class.reference_runtime_s.max(1e-9),
            slowest: None,
            absolute: None,
        },
    }
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
    if occupied && !cfg.policy.allow_cross_user_sharing && jobs.iter().any(|j| *j.user != *req.user)
    {
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

/// The one-line reason: what was chosen, what it costs (and, when the best type is full, why
/// waiting for it beats running elsewhere now), the other types offered, and how the choice
/// compares with the best other type. The first clause (up to "; ") stands alone in AdminComment.
fn explain(cands: &[Candidate], offered: &[&Candidate], job: &Job<'_>) -> String {
    let best = &cands[0];
    let what = |c: &Candidate| {
        if c.exclusive {
            format!("a whole {}", c.gpu_type)
        } else {
            format!("{}% of a {}", c.share_pct, c.gpu_type)
        }
    };
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
    if best.wakes_node {
        reason.push_str(", waking a powered-down node");
    }
    if best.wait_s > 0.0 {
        reason.push_str(&format!(" after an expected {} wait", Seconds(best.wait_s)));
        if let Some(now) = cands.iter().find(|c| c.wait_s == 0.0) {
            reason.push_str(&format!(
                ", which beats {} now ({} energy, done {})",
                what(now),
                relative(energy_cost(best), energy_cost(now)),
                match relative(time_cost(best), time_cost(now)).as_str() {
                    "same" => "at the same time".to_owned(),
                    r => r.replace("less", "sooner").replace("more", "later"),
                }
            ));
        }
    }
    if offered.len() > 1 {
        let others: Vec<&str> = offered[1..].iter().map(|c| c.gpu_type.as_str()).collect();
        reason.push_str(&format!("; also offered: {}", others.join(", ")));
    }
    // Compare with the best other GPU type; with one type only, with the other way of using it.
    let alt = cands
        .iter()
        .find(|c| c.gpu_type != best.gpu_type)
        .or_else(|| cands.iter().find(|c| c.exclusive != best.exclusive));
    if let Some(alt) = alt {
        reason.push_str(&format!(
            "; vs {}: {} energy, {} time",
            what(alt),
            relative(best.predicted_energy_j, alt.predicted_energy_j),
            relative(time_cost(best), time_cost(alt))
        ));
    }
    let rate = match job.exchange {
        Exchange::Rate(r) => format!(
            "cost {} at {r:.0} J per second of time",
            Joules(best.cost_j)
        ),
        Exchange::TimeOnly => "time first".to_owned(),
        Exchange::EnergyOnly => "energy first".to_owned(),
    };
    reason.push_str(&format!(
        "; {rate}, {} candidates, {} class",
        cands.len(),
        match job.class.kind {
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
    let mut at: rustc_hash::FxHashMap<&str, usize> = rustc_hash::FxHashMap::default();
    for &i in slots {
        let s = view[i];
        match at.get(&*s.node) {
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

/// Stable small ids for user names, so the model can tell users apart without strings: each
/// name's place in order of first appearance (a GPU holds a few users).
#[derive(Default)]
struct UserIds<'a>(Vec<&'a str>);

impl<'a> UserIds<'a> {
    fn id(&mut self, name: &'a str) -> u32 {
        let i = match self.0.iter().position(|&u| u == name) {
            Some(i) => i,
            None => {
                self.0.push(name);
                self.0.len() - 1
            }
        };
        u32::try_from(i).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BUNDLED_CONFIG;
    use crate::model::NeighbourSlowdown;
    use std::path::Path;

    fn cfg() -> Config {
        Config::parse(BUNDLED_CONFIG, Path::new("h.toml")).expect("valid")
    }

    /// Two awake v100m16s: one with another user's vit-infer at 20%, one idle on its own node.
    fn busy_and_idle_v100s(cfg: &Config) -> ClusterView {
        let neighbour = PlacedJob {
            class: cfg
                .classes
                .iter()
                .position(|c| c.name == "vit-infer")
                .expect("vit-infer"),
            share: SharePct::new(20).expect("share"),
            user: "other".into(),
            exclusive: false,
        };
        let mut v = view(
            cfg,
            &[("v100m16", SlotPower::Up), ("v100m16", SlotPower::Up)],
        );
        v.gpus[0].jobs.push(neighbour);
        v.gpus[1].node = "n-idle".into();
        v
    }

    /// One idle GPU of each named type, each on an 8-GPU node of its own in `power`.
    fn view(cfg: &Config, types: &[(&str, SlotPower)]) -> ClusterView {
        ClusterView {
            gpus: types
                .iter()
                .map(|&(t, power)| GpuSlot {
                    node: format!("n-{t}").into(),
                    index: 0,
                    gpu_type: cfg.gpu_type(t).expect("type"),
                    jobs: vec![],
                    power,
                    node_gpus: 8,
                })
                .collect(),
            queues: vec![],
        }
    }

    fn candidate<'p>(plan: &'p Plan, t: &str) -> Option<&'p Candidate> {
        plan.candidates.iter().find(|c| c.gpu_type == t)
    }

    /// One cost per option, not ratios to the best: whether a job goes to one type or another
    /// cannot depend on a third type being in the view (with the old ratio score, adding a
    /// candidate moved the best energy or time every other candidate was scored against).
    #[test]
    fn a_third_type_never_reorders_two_others() {
        let cfg = cfg();
        let two = view(&cfg, &[("t4", SlotPower::Up), ("a100", SlotPower::Up)]);
        let three = view(
            &cfg,
            &[
                ("t4", SlotPower::Up),
                ("a100", SlotPower::Up),
                ("v100m16", SlotPower::Up),
            ],
        );
        let mut compared = 0;
        for class in &cfg.classes {
            for share in [ShareRequest::Exclusive, ShareRequest::Auto] {
                let req = JobRequest {
                    share,
                    ..JobRequest::new(&class.name)
                };
                let (Ok(a), Ok(b)) = (place(&cfg, &two, &req), place(&cfg, &three, &req)) else {
                    continue;
                };
                let d = &b.decision;
                if d.gpu_type != "v100m16" {
                    compared += 1;
                    assert_eq!(
                        (&a.decision.gpu_type, a.decision.share_pct),
                        (&d.gpu_type, d.share_pct),
                        "{}: {d:?}",
                        class.name
                    );
                }
            }
        }
        assert!(
            compared >= cfg.classes.len(),
            "only {compared} decisions compared"
        );
    }

    /// Waiting work a job's idle GPUs would have gone to is pushed back by its run: the cost
    /// counts that delay, so the same job on the same type costs more once demand waits for it.
    #[test]
    fn taking_gpus_waiting_work_needs_costs_its_delay() {
        let cfg = cfg();
        let req = JobRequest {
            share: ShareRequest::Exclusive,
            gpu_types: vec!["a100".into()],
            ..JobRequest::new("bert-train")
        };
        let with_pending = |pending: f64| {
            let mut v = view(&cfg, &[("a100", SlotPower::Up)]);
            v.queues = vec![
                TypeQueue {
                    total_gpus: 10,
                    idle_gpus: 1,
                    max_gpus_per_node: 8,
                    frees_in_s: vec![3600.0; 9],
                    pending_gpus: pending,
                    mean_hold_s: 3600.0,
                };
                cfg.gpu_types.len()
            ];
            place(&cfg, &v, &req).expect("placed")
        };
        let free = with_pending(0.0);
        let wanted = with_pending(3.0);
        let (a, b) = (&free.candidates[0], &wanted.candidates[0]);
        assert_eq!((a.exclusive, &a.gpu_type), (b.exclusive, &b.gpu_type));
        let rate = cost::Exchange::site(cfg.policy.time_value_kwh_per_gpu_hour, 1).joules_per_s();
        let delay = b.cost_j - a.cost_j;
        assert!(
            (delay - rate * b.predicted_runtime_s).abs() < 1e-6 * b.cost_j,
            "{a:?} {b:?}"
        );
    }

    /// Issue 16: the time limit is taken as the job's runtime on the slowest type its request
    /// allows; on no type may heshare's plan make it run longer than that.
    #[test]
    fn no_candidate_runs_past_the_time_limit() {
        // A balanced weight, at which the node helper would clock a lone bert job down.
        let mut cfg = cfg();
        cfg.policy.time_value_kwh_per_gpu_hour = 0.3;
        let v = view(
            &cfg,
            &[
                ("t4", SlotPower::Up),
                ("v100m16", SlotPower::Up),
                ("a100", SlotPower::Up),
            ],
        );
        let req = JobRequest {
            time_limit_s: Some(4.0 * 3600.0),
            share: ShareRequest::Exclusive,
            ..JobRequest::new("bert-train")
        };
        let plan = place(&cfg, &v, &req).expect("placed");
        assert_eq!(plan.decision.limit_type.as_deref(), Some("t4"));
        for c in &plan.candidates {
            assert!(
                c.predicted_runtime_s <= 4.0 * 3600.0 * (1.0 + 1e-9),
                "{} runs {} s",
                c.gpu_type,
                c.predicted_runtime_s
            );
        }
        // On the slowest type itself the limit leaves no room to clock down: where it is the
        // only one, the job keeps its default clock, which without a limit it would not.
        let a100 = view(&cfg, &[("a100", SlotPower::Up)]);
        let limited = place(&cfg, &a100, &req).expect("placed");
        assert_eq!(limited.decision.limit_type.as_deref(), Some("a100"));
        let c = &limited.candidates[0];
        assert_eq!(c.sm_clock_mhz, c.default_sm_clock_mhz);
        let free = place(
            &cfg,
            &a100,
            &JobRequest {
                time_limit_s: None,
                ..req.clone()
            },
        )
        .expect("placed");
        assert!(free.decision.limit_type.is_none());
        assert!(free.candidates[0].sm_clock_mhz < free.candidates[0].default_sm_clock_mhz);
    }

    /// A learned service is sized on a type its runs never measured for no less than the share
    /// its user asked for (and the catalog's translation of its need, with the type's
    /// `speed_uncertainty`). Where its runs measured the type, the profile alone sizes it, below
    /// the ask if that is what it needs.
    #[test]
    fn a_service_gets_no_less_than_it_asked_on_a_type_its_runs_never_measured() {
        let cfg = cfg();
        let gpu = |n: &str| &cfg.gpu_types[cfg.gpu_type(n).expect(n)];
        let reference = &cfg.gpu_types[cfg.reference_gpu];
        let step = cfg.policy.mps_share_step_pct;
        // Its runs on an A10 kept a fifth of it busy.
        let catalog = cfg.class("vit-infer").expect("vit-infer").clone();
        let learned = JobClass {
            demand: 0.2,
            measured_speed: vec![("a10".into(), 1.0)],
            limit_kills: vec![],
            neighbours: None,
            ..catalog
        };
        let asked = |p: u8| JobRequest {
            share: ShareRequest::Auto,
            reference_share: Some(ShareRequest::Pct(SharePct::new(p).expect("pct"))),
            learned: Some(Arc::new(learned.clone())),
            ..JobRequest::new("vit-infer")
        };
        let share = |req: &JobRequest, t: &str| {
            let sized = sized_class(&cfg, req, &learned, gpu(t));
            full_speed_share(&sized, gpu(t), reference, step).get()
        };
        // Measured: as its runs said, below the ask.
        assert_eq!(share(&asked(32), "a10"), 20);
        // The catalog translates its need to about 15% of an A100; the ask stands instead.
        let modelled = crate::model::need(&learned, gpu("a100"), reference);
        assert!((0.14..0.16).contains(&modelled), "{modelled}");
        assert_eq!(share(&asked(32), "a100"), 35);
        // Asking for less than the translation: the translation.
        assert_eq!(share(&asked(5), "a100"), 20);
        // A type whose speed the catalog did not measure adds its uncertainty:
        // 0.2 / 0.430^0.4 * e^0.2 = 0.34.
        assert_eq!(share(&asked(5), "t4"), 35);
        assert_eq!(share(&asked(50), "t4"), 50);
        // Whole GPUs asked: the translation.
        let whole = JobRequest {
            reference_share: None,
            ..asked(5)
        };
        assert_eq!(share(&whole, "a100"), 20);
        // A training class is sized as it is.
        let train = JobClass {
            kind: JobKind::Training,
            ..learned.clone()
        };
        assert!(matches!(
            sized_class(&cfg, &asked(32), &train, gpu("a100")),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    /// A profiled job's time limit caps its slowdown at the profile's quantile, and nothing
    /// more: with a limit half again its runtime it may share beside a neighbour, and no option
    /// it is offered runs past its limit.
    #[test]
    fn a_profiled_limit_caps_the_slowdown_and_sets_no_margin_of_its_own() {
        let cfg = cfg();
        let v100 = cfg.gpu_type("v100m16").expect("v100m16");
        let catalog = cfg.class("vit-infer").expect("vit-infer").clone();
        let learned = JobClass {
            measured_speed: vec![("v100m16".into(), 1.0)],
            limit_kills: vec![],
            neighbours: Some(NeighbourSlowdown {
                per_busy: 0.2,
                up_to_busy: 1.0,
            }),
            ..catalog.clone()
        };
        let runtime = alone_runtime(&learned, &cfg.gpu_types[v100], &cfg.gpu_types[v100]).0;
        let v = busy_and_idle_v100s(&cfg);
        let req = |limit: f64| JobRequest {
            time_limit_s: Some(limit),
            share: ShareRequest::Auto,
            learned: Some(Arc::new(learned.clone())),
            ..JobRequest::new("vit-infer")
        };
        let plan = place(&cfg, &v, &req(1.5 * runtime)).expect("placed");
        assert!(
            plan.candidates
                .iter()
                .any(|c| !c.exclusive && c.co_located_jobs == 1),
            "{:?}",
            plan.candidates
        );
        for c in &plan.candidates {
            assert!(
                c.predicted_runtime_s <= 1.5 * runtime * (1.0 + 1e-9),
                "{}% on {} runs {} s past its limit {} s",
                c.share_pct,
                c.gpu_type,
                c.predicted_runtime_s,
                1.5 * runtime
            );
        }
    }

    /// A limit written for the slowest type the job allows (`limit_type = "slowest"`) is its
    /// user's word that the run finishes alone there: that type is an option without a priced
    /// kill even where no run of the job measured it (at the default clock: the limit leaves it
    /// no slowdown), however short the speed exponent's guess of its runtime there makes the
    /// limit look. Where its runs ran there and say the run takes longer than the limit, the
    /// runs are believed: the type is no option, and the measured faster one is safe.
    #[test]
    fn a_limit_is_read_as_written_for_the_slowest_type_unless_the_runs_contradict_it() {
        let cfg = cfg();
        let (a100, v100) = (
            cfg.gpu_type("a100").expect("a100"),
            cfg.gpu_type("v100m16").expect("v100m16"),
        );
        let reference = &cfg.gpu_types[cfg.reference_gpu];
        let catalog = cfg.class("bert-train").expect("bert-train").clone();
        let only_a100 = JobClass {
            measured_speed: vec![(
                "a100".into(),
                crate::model::relative_speed(&catalog, &cfg.gpu_types[a100], reference),
            )],
            limit_kills: vec![],
            neighbours: None,
            runtime_log_sd: None,
            ..catalog.clone()
        };
        let on_v100 = alone_runtime(&only_a100, &cfg.gpu_types[v100], reference).0;
        let v = view(&cfg, &[("a100", SlotPower::Up), ("v100m16", SlotPower::Up)]);
        let req = |class: &JobClass, limit: f64| JobRequest {
            time_limit_s: Some(limit),
            learned: Some(Arc::new(class.clone())),
            ..JobRequest::new("bert-train")
        };
        let plan = place(&cfg, &v, &req(&only_a100, 1.02 * on_v100)).expect("placed");
        assert_eq!(plan.decision.limit_type.as_deref(), Some("v100m16"));
        let written = candidate(&plan, "v100m16").expect("an option");
        assert!(written.kill_probability < 1e-9, "{written:?}");
        assert_eq!(written.sm_clock_mhz, written.default_sm_clock_mhz);
        let measured = candidate(&plan, "a100").expect("a100");
        assert!(measured.kill_probability < 1e-9, "{measured:?}");
        // The exponent guesses 2% more than the limit on v100 alone: a guess, and the user's
        // limit stands.
        let plan = place(&cfg, &v, &req(&only_a100, 0.98 * on_v100)).expect("placed");
        let written = candidate(&plan, "v100m16").expect("an option");
        assert!(written.kill_probability < 1e-9, "{written:?}");
        // Runs that ran on v100 say 2% more than the limit there: believed.
        let both = JobClass {
            measured_speed: vec![
                only_a100.measured_speed[0].clone(),
                (
                    "v100m16".into(),
                    crate::model::relative_speed(&catalog, &cfg.gpu_types[v100], reference),
                ),
            ],
            ..only_a100.clone()
        };
        assert!(
            (alone_runtime(&both, &cfg.gpu_types[v100], reference).0 - on_v100).abs() < 1e-6,
            "the same runtime, now measured"
        );
        let plan = place(&cfg, &v, &req(&both, 0.98 * on_v100)).expect("placed");
        assert!(
            candidate(&plan, "v100m16").is_none(),
            "{:?}",
            plan.candidates
        );
        let safe = candidate(&plan, "a100").expect("a100");
        assert!(safe.kill_probability < 1e-9, "{safe:?}");
    }

    /// The kill of a share heshare sizes is priced beside neighbours as busy as the rest of the
    /// GPU allows, at the sensitivity its runs measured, or where they measured none, over the
    /// catalog's measured pairs (`contention::prior`): their tail, not the typical pair, is what
    /// kills a run.
    #[test]
    fn a_share_is_priced_for_the_busiest_neighbours_the_gpu_could_hold() {
        let cfg = cfg();
        let v100 = cfg.gpu_type("v100m16").expect("v100m16");
        let catalog = cfg.class("vit-infer").expect("vit-infer").clone();
        let class = |neighbours| JobClass {
            measured_speed: vec![("v100m16".into(), 1.0)],
            limit_kills: vec![],
            neighbours,
            ..catalog.clone()
        };
        let runtime = alone_runtime(&class(None), &cfg.gpu_types[v100], &cfg.gpu_types[v100]).0;
        let v = busy_and_idle_v100s(&cfg);
        let req = |limit: Option<f64>, neighbours| JobRequest {
            time_limit_s: limit,
            share: ShareRequest::Auto,
            learned: Some(Arc::new(class(neighbours))),
            ..JobRequest::new("vit-infer")
        };
        // The least chance of a kill among its shares, `None` where it has none.
        let share_kill = |r: &JobRequest| {
            place(&cfg, &v, r)
                .expect("placed")
                .candidates
                .iter()
                .filter(|c| !c.exclusive)
                .map(|c| c.kill_probability)
                .min_by(f64::total_cmp)
        };
        let limit = Some(6.0 * runtime);
        // Never beside busy neighbours: the pairs past what its limit allows are its risk, and
        // the idle GPU whole costs less.
        let unmeasured = share_kill(&req(limit, None)).expect("a share");
        assert!((0.005..0.5).contains(&unmeasured), "{unmeasured}");
        let plan = place(&cfg, &v, &req(limit, None)).expect("placed");
        assert!(plan.decision.exclusive, "{:?}", plan.candidates);
        // Measured beside neighbours as busy as the rest of any GPU, slowed 2x per unit: safe.
        let measured = Some(NeighbourSlowdown {
            per_busy: 1.0,
            up_to_busy: 1.0,
        });
        let safe = share_kill(&req(limit, measured)).expect("a share");
        assert!(safe < 1e-6, "{safe}");
        // Slowed 30x per unit: past a limit of six times its runtime.
        let sensitive = Some(NeighbourSlowdown {
            per_busy: 30.0,
            up_to_busy: 1.0,
        });
        let doomed = share_kill(&req(limit, sensitive)).expect("a share");
        assert!(doomed > 0.5, "{doomed}");
        // A limit that covers even the worst pair: no risk left; no limit: none priced.
        let roomy = share_kill(&req(Some(200.0 * runtime), None)).expect("a share");
        assert!(roomy < 1e-6, "{roomy}");
        assert_eq!(share_kill(&req(None, None)), Some(0.0));
    }

    /// A job whose runs were killed at their time limit while sharing gets only an idle GPU
    /// whole, at the default clock on the type it was killed on (the node helper keeps it there),
    /// however much room its limit seems to leave and whichever type the kill was on; killed
    /// with a GPU of its own, not that type at all.
    #[test]
    fn a_type_where_its_runs_ran_out_of_time_is_offered_whole_or_not_at_all() {
        let cfg = cfg();
        let v100 = cfg.gpu_type("v100m16").expect("v100m16");
        let catalog = cfg.class("vit-infer").expect("vit-infer").clone();
        // Measured beside busy neighbours, which slowed it little: only its kills keep it off.
        let learned = |kills: Vec<KilledOn>| JobClass {
            measured_speed: vec![("v100m16".into(), 1.0)],
            limit_kills: kills,
            neighbours: Some(crate::model::NeighbourSlowdown {
                per_busy: 0.2,
                up_to_busy: 1.0,
            }),
            ..catalog.clone()
        };
        let runtime = alone_runtime(&learned(vec![]), &cfg.gpu_types[v100], &cfg.gpu_types[v100]).0;
        // Killed with the same limit as the job's (below: five times its runtime).
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let same_limit = (5.0 * runtime).ceil() as u32;
        let kill = |t: &str, share: Option<u8>| KilledOn {
            gpu_type: t.into(),
            share_pct: share,
            limit_s: Some(same_limit),
        };
        let v = busy_and_idle_v100s(&cfg);
        let req = |class: JobClass| JobRequest {
            time_limit_s: Some(5.0 * runtime),
            share: ShareRequest::Auto,
            learned: Some(Arc::new(class)),
            ..JobRequest::new("vit-infer")
        };
        // Without kills, five times its runtime lets it share.
        let free = place(&cfg, &v, &req(learned(vec![]))).expect("placed");
        assert!(free.candidates.iter().any(|c| !c.exclusive));
        // Killed while sharing with a share no smaller than its need: the idle GPU whole, at the
        // default clock.
        let full = full_speed_share(
            &learned(vec![]),
            &cfg.gpu_types[v100],
            &cfg.gpu_types[v100],
            cfg.policy.mps_share_step_pct,
        )
        .get();
        let shared_kill =
            place(&cfg, &v, &req(learned(vec![kill("v100m16", Some(full))]))).expect("placed");
        assert!(!shared_kill.candidates.is_empty());
        for c in &shared_kill.candidates {
            assert!(c.exclusive && c.co_located_jobs == 0, "{c:?}");
            assert_eq!(c.sm_clock_mhz, cfg.gpu_types[v100].default_sm_clock.0);
        }
        // Killed with a share below its need (as its user asked): sized anew, it may share.
        let starved = place(
            &cfg,
            &v,
            &req(learned(vec![kill("v100m16", Some(full - 10))])),
        )
        .expect("placed");
        assert!(starved.candidates.iter().any(|c| !c.exclusive));
        // Killed with half the limit this job has: a neighbour's slowdown has no bound the kill
        // tells, so the longer limit still shares nothing; after a whole-GPU kill the longer
        // limit may be enough and the type stays offered.
        let shorter = |share: Option<u8>| KilledOn {
            limit_s: Some(same_limit / 2),
            ..kill("v100m16", share)
        };
        let longer = place(&cfg, &v, &req(learned(vec![shorter(Some(full))]))).expect("placed");
        assert!(!longer.candidates.is_empty());
        assert!(
            longer.candidates.iter().all(|c| c.exclusive),
            "{:?}",
            longer.candidates
        );
        assert!(place(&cfg, &v, &req(learned(vec![shorter(None)]))).is_ok());
        // Killed beside a neighbour on another type: no share here either, but the clock here
        // is the optimizer's (the kill said nothing of this type's clock).
        let elsewhere =
            place(&cfg, &v, &req(learned(vec![kill("a100", Some(100))]))).expect("placed");
        assert!(!elsewhere.candidates.is_empty());
        for c in &elsewhere.candidates {
            assert!(c.exclusive && c.co_located_jobs == 0, "{c:?}");
        }
        // Killed on another type with a share below its need there: sized anew, it may share.
        let small = place(&cfg, &v, &req(learned(vec![kill("a100", Some(1))]))).expect("placed");
        assert!(small.candidates.iter().any(|c| !c.exclusive));
        // Killed with the GPU to itself: no v100m16, and the error says why.
        let err =
            place(&cfg, &v, &req(learned(vec![kill("v100m16", None)]))).expect_err("no type left");
        assert!(
            err.to_string()
                .contains("killed at its time limit with a GPU of its own"),
            "{err}"
        );
    }

    /// With limits written for one type (`policy.limit_type`), a slower type is never offered to
    /// a job with a limit, and the reason says why.
    #[test]
    fn a_site_that_writes_limits_for_one_type_never_sends_a_job_to_a_slower_one() {
        let mut cfg = cfg();
        cfg.policy.limit_type = "v100m16".into();
        let v = view(&cfg, &[("t4", SlotPower::Up), ("v100m16", SlotPower::Up)]);
        let limited = JobRequest {
            time_limit_s: Some(3600.0),
            share: ShareRequest::Exclusive,
            ..JobRequest::new("bert-train")
        };
        let plan = place(&cfg, &v, &limited).expect("placed");
        assert!(candidate(&plan, "t4").is_none(), "{:?}", plan.candidates);
        assert_eq!(plan.decision.gpu_type, "v100m16");
        let only_t4 = view(&cfg, &[("t4", SlotPower::Up)]);
        let err = place(&cfg, &only_t4, &limited).expect_err("nothing can run it in time");
        assert!(
            err.to_string().contains("t4: would need") && err.to_string().contains("time limit"),
            "{err}"
        );
    }

    /// Slurm's power saving: a GPU on a powered-down node costs its boot as a wait and its
    /// node's idle draw over the boot and SuspendTime as energy; an awake GPU of the same type is
    /// preferred.
    #[test]
    fn waking_a_node_costs_its_boot_and_its_idle_tail() {
        let mut cfg = cfg();
        cfg.power.resume_s = 300.0;
        cfg.power.suspend_time_s = Some(600.0);
        let req = JobRequest {
            share: ShareRequest::Exclusive,
            ..JobRequest::new("resnet50-train")
        };
        let up = place(&cfg, &view(&cfg, &[("a100", SlotPower::Up)]), &req).expect("up");
        let down = place(&cfg, &view(&cfg, &[("a100", SlotPower::Down)]), &req).expect("down");
        let (u, d) = (&up.candidates[0], &down.candidates[0]);
        assert!(d.wakes_node && !u.wakes_node);
        assert!((d.wait_s - u.wait_s - 300.0).abs() < 1e-9);
        let a100 = &cfg.gpu_types[cfg.gpu_type("a100").expect("a100")];
        let tail = (a100.idle_power.0 + a100.host_power.0) * 8.0 * 900.0;
        assert!(
            (d.predicted_energy_j - u.predicted_energy_j - tail).abs() < 1e-6 * tail,
            "{} vs {}",
            d.predicted_energy_j,
            u.predicted_energy_j
        );
        assert!(down.decision.reason.contains("waking a powered-down node"));
        // Both in one view: the awake one wins.
        let mut both = view(&cfg, &[("a100", SlotPower::Down)]);
        both.gpus.push(GpuSlot {
            node: "n-awake".into(),
            ..view(&cfg, &[("a100", SlotPower::Up)]).gpus[0].clone()
        });
        let plan = place(&cfg, &both, &req).expect("placed");
        assert_eq!(plan.decision.node.as_deref(), Some("n-awake"));
    }

    /// The energy heshare weighs is what the facility pays: with power saving the host a job
    /// keeps on is in it (for a whole GPU all of its part of the node); always on, the host and
    /// the GPU's idle power are spent anyway and only the power above idle counts.
    #[test]
    fn predicted_energy_counts_the_host_the_job_keeps_on() {
        let mut base = cfg();
        let always_on = base.clone();
        base.power.suspend_time_s = Some(600.0);
        let mut hosted = base.clone();
        let a100 = hosted.gpu_type("a100").expect("a100");
        hosted.gpu_types[a100].host_power = crate::units::Watts(1000.0);
        let v = |c: &Config| view(c, &[("a100", SlotPower::Up)]);
        let req = JobRequest {
            share: ShareRequest::Exclusive,
            ..JobRequest::new("bert-train")
        };
        let cold = place(&base, &v(&base), &req).expect("placed").decision;
        let hot = place(&hosted, &v(&hosted), &req).expect("placed").decision;
        let base_host = base.gpu_types[a100].host_power.0;
        assert!(
            hot.predicted_energy_j
                > cold.predicted_energy_j + (1000.0 - base_host) * 0.9 * hot.predicted_runtime_s,
            "{} vs {}",
            hot.predicted_energy_j,
            cold.predicted_energy_j
        );
        // A kilowatt of host per GPU makes the slower clock cost more than it saves.
        assert!(hot.sm_clock_mhz >= cold.sm_clock_mhz);
        let on = place(&always_on, &v(&always_on), &req)
            .expect("placed")
            .decision;
        let a = &always_on.gpu_types[a100];
        assert!(
            on.predicted_energy_j
                < cold.predicted_energy_j - a.idle_power.0 * 0.9 * on.predicted_runtime_s,
            "always on, idle and host are not the job's: {} vs {}",
            on.predicted_energy_j,
            cold.predicted_energy_j
        );
    }
}
