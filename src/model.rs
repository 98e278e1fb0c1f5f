//! The performance and power model: how long a job runs and how much power a GPU draws, as pure
//! functions of GPU type, SM clock, MPS share and co-located jobs.
//!
//! Every constant comes from the configuration (calibrated in `slurm-conf/heshare.toml`, derived by
//! `scripts/calibrate.py` from the public measurements cited there). The shape of the model:
//!
//! * **Speed across GPU types** (Gavel's per-type throughputs): a class runs `(K_g / K_ref)^a`
//!   times as fast on type `g` as on the reference type, `K` the type's relative throughput and
//!   `a` the class's sensitivity to GPU speed.
//! * **DVFS** (fitted to Zeus's power-limit sweeps): the clock-bound fraction `c` of a job's GPU
//!   time stretches by `f_default / f`; busy power scales as `beta + (1 - beta) (f / f_max)^gamma`.
//!   Below its clock knee `k` (a fraction of the maximum clock, from the EDP optima of the
//!   inference services) a job is compute-bound: its time grows as `k f_max / f` at least.
//! * **MPS shares**: a training job's clock-bound part stretches by `occupancy / share` when its
//!   share is below the SMs it would use alone. An inference job is rate-bound: it keeps a load
//!   `rho = need / share`, runs at its own pace while `rho <= 1` and slows by `rho` beyond.
//! * **Contention** (fitted to Gavel's co-located pairs): each job slows by
//!   `1 + kappa * sum(mem_intensity_k * busy_k)` over the other jobs on the GPU. MPS runs one
//!   user's server at a time, and the node helper runs another user's share outside MPS, so the
//!   users' contexts share the GPU's time: by max-min fairness of what each keeps busy, less
//!   `time_slice_efficiency`'s loss while two or more have work. Light services of two users
//!   keep pace; two training jobs get about half each.
//! * **A context held** keeps a GPU above bare idle (Vadari, arXiv 2605.23918: 26-66 W): the
//!   power above idle is at least the type's `context_power`, once per GPU, however many jobs
//!   share it, which is part of why sharing light services pays.
//! * **Energy attribution**: idle power is split by share, busy power by each job's draw.

use crate::units::{Joules, Mhz, Seconds, SharePct, Watts};
use serde::{Deserialize, Serialize};

/// A GPU type of the catalog.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuType {
    /// The Slurm gres type name (`gpu:NAME:N`).
    pub name: String,
    pub description: String,
    /// Other names for it, e.g. the model strings of a trace.
    pub aliases: Vec<String>,
    pub idle_power: Watts,
    pub max_power: Watts,
    pub memory_gib: f64,
    /// Training throughput relative to the other types (the reference type's value is the unit).
    pub relative_throughput: f64,
    /// Supported SM clocks, ascending, deduplicated, never empty once validated.
    pub sm_clocks: Vec<Mhz>,
    /// The clock the GPU runs at when nobody locks it.
    pub default_sm_clock: Mhz,
    /// `beta`: the part of busy power that does not fall with the clock.
    pub dvfs_static_fraction: f64,
    /// `gamma`: how steeply the rest falls with the clock.
    pub dvfs_exponent: f64,
    /// Whether Slurm offers this type as gres/mps.
    pub mps: bool,
    /// Host power per GPU at the wall (a node's idle host power over its GPUs): what a job keeps
    /// on besides its GPUs, for as long as it holds them.
    pub host_power: Watts,
    /// Log-space spread of the catalog's inference speed on this type where nothing measured it
    /// (0 where measured): shares are sized that much larger here.
    pub speed_uncertainty: f64,
    /// Power over idle while a CUDA context is held (an MPS server, a service between
    /// requests): the least a GPU with a job draws above idle.
    pub context_power: Watts,
}

impl GpuType {
    pub fn max_clock(&self) -> Mhz {
        self.sm_clocks
            .last()
            .copied()
            .unwrap_or(self.default_sm_clock)
    }

    pub fn supports_clock(&self, f: Mhz) -> bool {
        self.sm_clocks.binary_search(&f).is_ok()
    }

    /// Busy power as a fraction of its value at the maximum clock.
    pub fn dvfs_power_factor(&self, f: Mhz) -> f64 {
        let r = f64::from(f.0) / f64::from(self.max_clock().0.max(1));
        self.dvfs_static_fraction + (1.0 - self.dvfs_static_fraction) * r.powf(self.dvfs_exponent)
    }
}

/// Training fills whatever GPU it gets; inference serves a stream at its own pace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobKind {
    Training,
    Inference,
}

/// A job class: the profile every job of that class is predicted with.
#[derive(Debug, Clone, PartialEq)]
pub struct JobClass {
    pub name: String,
    pub kind: JobKind,
    pub description: String,
    /// Runtime alone on a whole reference GPU at its default clock.
    pub reference_runtime_s: f64,
    /// `a`: speed on type g relative to the reference is `(K_g / K_ref)^a`.
    pub speed_exponent: f64,
    /// `c`: the part of GPU time that stretches when the SM clock falls.
    pub clock_bound_fraction: f64,
    /// `k`: below this fraction of the maximum SM clock the job is compute-bound (0: never).
    pub clock_knee: f64,
    /// Dynamic power drawn alone at full clock, as a fraction of (max - idle).
    pub power_util: f64,
    /// How much it slows co-located jobs per unit of its busy share (0..=1).
    pub mem_intensity: f64,
    pub memory_gib: f64,
    /// Training: the fraction of a GPU's SMs it keeps busy alone. Inference: the fraction of the
    /// reference GPU's capacity (at its default clock) its request stream needs.
    pub demand: f64,
    /// Overrides the policy's slowdown bound for this class.
    pub slowdown_bound: Option<f64>,
    /// Speeds measured for this job on some types (a profile learned from its own runs), as
    /// `(type name, speed relative to the reference type)`: they replace `(K_g / K_ref)^a` on
    /// those types. Empty for the catalog's classes.
    pub measured_speed: Vec<(String, f64)>,
    /// Types on which a recent run of this job (a profile's) was killed at its time limit. Empty
    /// for the catalog's classes.
    pub limit_kills: Vec<KilledOn>,
    /// What its own runs measured of how much busy neighbours slow it (a profile's); `None`
    /// where no run of it shared a GPU with busy neighbours, and for the catalog's classes.
    pub neighbours: Option<NeighbourSlowdown>,
    /// How much its runtime alone spreads from run to run, as the standard deviation of its log
    /// (a profile's, from runs that measured one type at least twice); `None` for the catalog's
    /// classes and where its runs cannot tell.
    pub runtime_log_sd: Option<f64>,
}

/// How much busy neighbours slow a job, as its profile measured it: runs that shared a GPU
/// with the MPS server's other clients, and the driver's busy time of theirs while they ran.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NeighbourSlowdown {
    /// `k` in the sharing model's contention `1 + k * busy` (busy: the neighbours' summed busy
    /// share): the largest any run of a training job measured; for a service, the tightest
    /// bound its runs set (a service keeps pace until its load times the contention passes
    /// one, so a run that kept pace bounds `k` and one that fell behind measures it).
    pub per_busy: f64,
    /// The busiest neighbours a run of it had (their summed busy share of the GPU, over the run).
    pub up_to_busy: f64,
}

/// Runs of a job killed at their time limit on one GPU type, as its profile sums them up: where
/// a share no smaller than its need there ran out of time, a neighbour slowed it more than the
/// model says and it gets only whole GPUs (on any type, whatever its limit), at the default
/// clock on this one; where even a whole GPU ran out of time, not the type, for a job whose
/// limit is no longer than theirs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KilledOn {
    pub gpu_type: String,
    /// The largest MPS share such a run held, `None` where one had whole GPUs.
    pub share_pct: Option<u8>,
    /// The longest limit such a run had, seconds (`None`: a record without one).
    pub limit_s: Option<u32>,
}

impl KilledOn {
    /// Whether these kills say anything of a job with time limit `limit_s`: a longer limit than
    /// the one that ran out of time may be enough, a shorter or equal one is not.
    pub fn applies(&self, limit_s: f64) -> bool {
        self.limit_s.is_none_or(|k| limit_s <= f64::from(k) + 1.0)
    }
}

impl JobClass {
    /// Its kills at the time limit on GPU type `gpu` that say something of a job with limit
    /// `limit_s` (see [`KilledOn::applies`]).
    pub fn kills_on<'a>(
        &'a self,
        gpu: &'a str,
        limit_s: f64,
    ) -> impl Iterator<Item = &'a KilledOn> + 'a {
        self.limit_kills
            .iter()
            .filter(move |k| k.gpu_type == gpu && k.applies(limit_s))
    }

    /// Whether its runs measured its speed on GPU type `gpu` (a learned class; a catalog class
    /// measured none).
    pub fn measured_on(&self, gpu: &str) -> bool {
        self.measured_speed.iter().any(|(t, _)| *t == gpu)
    }

    /// A hash of everything that shapes a prediction (and the name, which errors carry): equal
    /// for two classes that predict alike. Stable within a process only.
    pub fn fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = rustc_hash::FxHasher::default();
        self.name.hash(&mut h);
        self.kind.hash(&mut h);
        for v in [
            self.reference_runtime_s,
            self.speed_exponent,
            self.clock_bound_fraction,
            self.clock_knee,
            self.power_util,
            self.mem_intensity,
            self.memory_gib,
            self.demand,
            self.slowdown_bound.unwrap_or(f64::NAN),
        ] {
            v.to_bits().hash(&mut h);
        }
        for (t, s) in &self.measured_speed {
            t.hash(&mut h);
            s.to_bits().hash(&mut h);
        }
        self.limit_kills.hash(&mut h);
        if let Some(n) = self.neighbours {
            n.per_busy.to_bits().hash(&mut h);
            n.up_to_busy.to_bits().hash(&mut h);
        }
        h.finish()
    }
}

/// Model constants that are not per GPU type or per class.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelParams {
    pub contention_kappa: f64,
    /// Of the GPU time several users' CUDA contexts share by time-slicing (MPS serves one user
    /// per GPU; the node helper runs another user's share outside MPS), the part that does work.
    pub time_slice_efficiency: f64,
}

impl ModelParams {
    /// The model constants of a configuration.
    pub fn of(cfg: &crate::config::Config) -> ModelParams {
        ModelParams {
            contention_kappa: cfg.policy.contention_kappa,
            time_slice_efficiency: cfg.policy.time_slice_efficiency,
        }
    }
}

/// Max-min fair division of `capacity` among demands `needs` (water filling): no one gets more
/// than it needs, and what one does not use goes to the others.
pub fn max_min_fair(needs: &[f64], capacity: f64) -> Vec<f64> {
    let mut got = vec![0.0; needs.len()];
    let mut open: Vec<usize> = (0..needs.len()).filter(|&i| needs[i] > 0.0).collect();
    let mut left = capacity;
    while !open.is_empty() {
        #[allow(clippy::cast_precision_loss)]
        let level = left / open.len() as f64;
        let (full, rest): (Vec<usize>, Vec<usize>) =
            open.iter().partition(|&&i| needs[i] - got[i] <= level);
        if full.is_empty() {
            for &i in &rest {
                got[i] += level;
            }
            break;
        }
        for &i in &full {
            left -= needs[i] - got[i];
            got[i] = needs[i];
        }
        open = rest;
    }
    got
}

/// One job on a GPU, as the model sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tenant<'a> {
    pub class: &'a JobClass,
    pub share: SharePct,
    /// Distinct users are time-sliced by MPS; only equality matters.
    pub user: u32,
}

/// Predicted behaviour of one job at one operating point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobPrediction {
    pub runtime: Seconds,
    /// `runtime` divided by the job's runtime alone on a whole GPU of this type at default clock.
    pub slowdown: f64,
    /// The share of the GPU's SMs this job keeps busy on average (0..=1).
    pub busy: f64,
    /// Power attributed to this job.
    pub power: Watts,
}

impl JobPrediction {
    pub fn energy(&self) -> Joules {
        self.power * self.runtime
    }
}

/// Predicted behaviour of one GPU and all its jobs at one SM clock.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuPrediction {
    pub clock: Mhz,
    pub power: Watts,
    pub jobs: Vec<JobPrediction>,
}

impl GpuPrediction {
    /// Energy per unit of normalised progress: GPU power divided by the summed rates at which the
    /// jobs progress relative to running alone at the default clock. For one job this is its
    /// energy divided by its alone-runtime, so minimising it minimises the job's energy.
    pub fn energy_per_progress(&self) -> f64 {
        let progress: f64 = self.jobs.iter().map(|j| 1.0 / j.slowdown).sum();
        if progress > 0.0 {
            self.power.0 / progress
        } else {
            f64::INFINITY
        }
    }
}

/// Speed of `class` on `gpu` relative to the reference GPU type.
pub fn relative_speed(class: &JobClass, gpu: &GpuType, reference: &GpuType) -> f64 {
    if let Some(&(_, s)) = class.measured_speed.iter().find(|(t, _)| *t == gpu.name) {
        return s;
    }
    (gpu.relative_throughput / reference.relative_throughput).powf(class.speed_exponent)
}

/// How much the clock-bound part of the job stretches at clock `f` (1 at the default clock).
fn clock_stretch(gpu: &GpuType, f: Mhz) -> f64 {
    f64::from(gpu.default_sm_clock.0) / f64::from(f.0.max(1))
}

/// Time factor of the job's GPU work at clock `f` of `gpu`, with `stretch` on its clock-bound
/// part (the clock's and, for a share, the share's).
fn time_factor(class: &JobClass, gpu: &GpuType, f: Mhz, stretch: f64) -> f64 {
    let bound = class.clock_bound_fraction * stretch + (1.0 - class.clock_bound_fraction);
    let knee = class.clock_knee * f64::from(gpu.max_clock().0) / f64::from(f.0.max(1));
    bound.max(knee)
}

/// The fraction of a whole GPU of this type (at its default clock) the job uses alone.
pub fn need(class: &JobClass, gpu: &GpuType, reference: &GpuType) -> f64 {
    match class.kind {
        JobKind::Training => class.demand,
        JobKind::Inference => class.demand / relative_speed(class, gpu, reference),
    }
}

/// Runtime alone on a whole GPU of type `gpu` at its default clock: the yardstick of slowdown.
pub fn alone_runtime(class: &JobClass, gpu: &GpuType, reference: &GpuType) -> Seconds {
    match class.kind {
        JobKind::Training => {
            Seconds(class.reference_runtime_s / relative_speed(class, gpu, reference))
        }
        JobKind::Inference => {
            Seconds(class.reference_runtime_s * need(class, gpu, reference).max(1.0))
        }
    }
}

/// The smallest share (a multiple of `step`) with which the job runs as fast as it can on this
/// type at its default clock: what "auto" asks Slurm for when nothing else constrains it.
pub fn full_speed_share(
    class: &JobClass,
    gpu: &GpuType,
    reference: &GpuType,
    step: u8,
) -> SharePct {
    round_up_share(need(class, gpu, reference), step)
}

/// Rounds a GPU fraction up to a multiple of `step` percent, within `step..=100`.
pub fn round_up_share(fraction: f64, step: u8) -> SharePct {
    let step = u32::from(step.clamp(1, 100));
    let pct = (fraction.clamp(0.0, 1.0) * 100.0 - 1e-9).ceil().max(0.0);
    // `pct` is within 0..=100 by the clamp, so the cast is exact.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let pct = pct as u32;
    let rounded = pct.div_ceil(step).max(1) * step;
    let clamped = u8::try_from(rounded.min(100)).unwrap_or(100);
    SharePct::new(clamped).unwrap_or(SharePct::FULL)
}

/// The runtime `predict` gives one job of `class` alone on `share` of a GPU of type `gpu` at SM
/// clock `f`: what a run without neighbours is set against.
pub fn runtime_alone_on(
    class: &JobClass,
    gpu: &GpuType,
    reference: &GpuType,
    share: SharePct,
    f: Mhz,
    params: ModelParams,
) -> Seconds {
    let tenant = Tenant {
        class,
        share,
        user: 0,
    };
    predict(gpu, reference, &[tenant], f, params).jobs[0].runtime
}

/// Predicts every job's runtime and the GPU's power with `tenants` sharing one GPU of type `gpu`
/// at SM clock `f`, assuming the set of jobs stays as it is.
pub fn predict(
    gpu: &GpuType,
    reference: &GpuType,
    tenants: &[Tenant<'_>],
    f: Mhz,
    params: ModelParams,
) -> GpuPrediction {
    Predictor::new(gpu, reference, tenants).at(f, params)
}

/// [`predict`] for one set of tenants on one GPU at many clocks: what does not depend on the
/// clock (each job's speed on the type, its need and its runtime alone, whether one user holds
/// the GPU) is worked out once, and the working buffers are kept between clocks.
pub struct Predictor<'t, 'c> {
    gpu: &'t GpuType,
    tenants: &'t [Tenant<'c>],
    /// Per tenant, what does not depend on the clock.
    fixed: Vec<Fixed>,
    /// One user (or none): every tenant gets all of its context's time.
    one_user: bool,
    busy: Vec<f64>,
    draws: Vec<f64>,
}

/// One tenant on the predictor's GPU type, whatever the clock.
#[derive(Clone, Copy)]
struct Fixed {
    /// [`need`] on this type.
    need: f64,
    /// [`alone_runtime`] on this type, seconds.
    alone_s: f64,
    /// [`relative_speed`] on this type; unused (NaN) for inference.
    speed: f64,
}

impl<'t, 'c> Predictor<'t, 'c> {
    pub fn new(gpu: &'t GpuType, reference: &GpuType, tenants: &'t [Tenant<'c>]) -> Self {
        let fixed = tenants
            .iter()
            .map(|t| {
                let speed = match t.class.kind {
                    JobKind::Training => relative_speed(t.class, gpu, reference),
                    JobKind::Inference => f64::NAN,
                };
                Fixed {
                    need: need(t.class, gpu, reference),
                    alone_s: alone_runtime(t.class, gpu, reference).0,
                    speed,
                }
            })
            .collect();
        Predictor {
            gpu,
            tenants,
            fixed,
            one_user: distinct_users(tenants) <= 1,
            busy: Vec::with_capacity(tenants.len()),
            draws: Vec::with_capacity(tenants.len()),
        }
    }

    /// The prediction at SM clock `f`.
    pub fn at(&mut self, f: Mhz, params: ModelParams) -> GpuPrediction {
        let mut out = GpuPrediction {
            clock: f,
            power: Watts(0.0),
            jobs: Vec::with_capacity(self.tenants.len()),
        };
        self.at_into(f, params, &mut out);
        out
    }

    /// The prediction at SM clock `f`, written into `out` (its buffer reused).
    pub fn at_into(&mut self, f: Mhz, params: ModelParams, out: &mut GpuPrediction) {
        let (gpu, tenants) = (self.gpu, self.tenants);
        let stretch = clock_stretch(gpu, f);
        // Nominal busy share of each job (before contention), which is what it imposes on the
        // others.
        self.busy.clear();
        self.busy.extend(
            tenants
                .iter()
                .zip(&self.fixed)
                .map(|(t, &Fixed { need, .. })| {
                    let s = t.share.fraction();
                    match t.class.kind {
                        JobKind::Training => s.min(t.class.demand),
                        JobKind::Inference => {
                            let load = need * time_factor(t.class, gpu, f, stretch) / s;
                            s * load.min(1.0)
                        }
                    }
                }),
        );
        let nominal_busy = &self.busy;
        let total_pressure: f64 = tenants
            .iter()
            .zip(nominal_busy)
            .map(|(t, b)| t.class.mem_intensity * b)
            .sum();
        let slice = (!self.one_user).then(|| time_slices(tenants, nominal_busy, params));
        let draws = &mut self.draws;
        draws.clear();
        let jobs = &mut out.jobs;
        jobs.clear();
        for (k, ((t, &busy), fx)) in tenants
            .iter()
            .zip(nominal_busy)
            .zip(&self.fixed)
            .enumerate()
        {
            let own_pressure = t.class.mem_intensity * busy;
            let contention =
                1.0 + params.contention_kappa * (total_pressure - own_pressure).max(0.0);
            // Several users: each user's context gets only part of the GPU's time.
            let serial = 1.0 / slice.as_ref().map_or(1.0, |s| s[k]).max(1e-9);
            let s = t.share.fraction();
            let (runtime, draw) = match t.class.kind {
                JobKind::Training => {
                    let occupancy = t.class.demand;
                    let share_stretch = (occupancy / s).max(1.0);
                    let tf = time_factor(t.class, gpu, f, stretch * share_stretch);
                    let runtime = t.class.reference_runtime_s / fx.speed * tf * contention * serial;
                    (runtime, t.class.power_util * (s / occupancy).min(1.0))
                }
                JobKind::Inference => {
                    let load =
                        fx.need * time_factor(t.class, gpu, f, stretch) / s * contention * serial;
                    let runtime = t.class.reference_runtime_s * load.max(1.0);
                    (runtime, t.class.power_util * s * load.min(1.0))
                }
            };
            draws.push(draw);
            jobs.push(JobPrediction {
                runtime: Seconds(runtime),
                slowdown: runtime / fx.alone_s,
                busy,
                power: Watts(0.0),
            });
        }

        let total_draw: f64 = draws.iter().sum();
        let draws = &*draws;
        let dynamic_range = gpu.max_power.0 - gpu.idle_power.0;
        let work = dynamic_range * total_draw.min(1.0) * gpu.dvfs_power_factor(f);
        // A GPU with a context held (any job on it) sits above bare idle even when it computes
        // little; work that draws more includes it. One context, however many jobs share it.
        let dynamic = if tenants.is_empty() {
            work
        } else {
            work.max(gpu.context_power.0)
        };
        let total_share: f64 = tenants.iter().map(|t| t.share.fraction()).sum();
        for ((job, t), draw) in jobs.iter_mut().zip(tenants).zip(draws) {
            let idle_part = if total_share > 0.0 {
                gpu.idle_power.0 * t.share.fraction() / total_share
            } else {
                0.0
            };
            let dyn_part = if total_draw > 0.0 {
                dynamic * draw / total_draw
            } else {
                #[allow(clippy::cast_precision_loss)]
                let each = dynamic / tenants.len().max(1) as f64;
                each
            };
            job.power = Watts(idle_part + dyn_part);
        }
        out.clock = f;
        out.power = Watts(gpu.idle_power.0 + dynamic);
    }
}

/// Per tenant, the part of its context's GPU time it gets: 1 with one user; with several, the
/// contexts (one per user: MPS serves one user, the others run outside it) share the GPU by
/// max-min fairness of what each keeps busy alone, less the switching loss while two or more
/// have work.
fn time_slices(tenants: &[Tenant<'_>], busy: &[f64], params: ModelParams) -> Vec<f64> {
    if distinct_users(tenants) <= 1 {
        return vec![1.0; tenants.len()];
    }
    let mut users: Vec<u32> = tenants.iter().map(|t| t.user).collect();
    users.sort_unstable();
    users.dedup();
    // A user's context is busy while any of its training jobs runs, else as its services are.
    let needs: Vec<f64> = users
        .iter()
        .map(|&u| {
            let mine = tenants.iter().zip(busy).filter(|(t, _)| t.user == u);
            let training = mine.clone().any(|(t, _)| t.class.kind == JobKind::Training);
            if training {
                1.0
            } else {
                mine.map(|(_, b)| b).sum::<f64>().min(1.0)
            }
        })
        .collect();
    let active = needs.iter().filter(|&&n| n > 0.0).count();
    let capacity = if active > 1 {
        params.time_slice_efficiency.clamp(0.01, 1.0)
    } else {
        1.0
    };
    let got = max_min_fair(&needs, capacity);
    tenants
        .iter()
        .map(|t| {
            let i = users.iter().position(|&u| u == t.user).unwrap_or(0);
            if needs[i] > 0.0 {
                got[i] / needs[i]
            } else {
                1.0
            }
        })
        .collect()
}

fn distinct_users(tenants: &[Tenant<'_>]) -> usize {
    let mut users: Vec<u32> = tenants.iter().map(|t| t.user).collect();
    users.sort_unstable();
    users.dedup();
    users.len().max(1)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn gpu(name: &str, k: f64, idle: f64, max: f64) -> GpuType {
        GpuType {
            name: name.into(),
            description: String::new(),
            aliases: vec![],
            idle_power: Watts(idle),
            max_power: Watts(max),
            memory_gib: 32.0,
            relative_throughput: k,
            sm_clocks: (0..=80).map(|i| Mhz(210 + 15 * i)).collect(),
            default_sm_clock: Mhz(1410),
            dvfs_static_fraction: 0.3,
            dvfs_exponent: 2.0,
            mps: true,
            host_power: Watts(0.0),
            speed_uncertainty: 0.0,
            context_power: Watts(0.0),
        }
    }

    pub(crate) fn training(name: &str) -> JobClass {
        JobClass {
            name: name.into(),
            kind: JobKind::Training,
            description: String::new(),
            reference_runtime_s: 3600.0,
            speed_exponent: 1.0,
            clock_bound_fraction: 0.4,
            clock_knee: 0.0,
            power_util: 0.85,
            mem_intensity: 0.8,
            memory_gib: 10.0,
            demand: 1.0,
            slowdown_bound: None,
            measured_speed: vec![],
            limit_kills: vec![],
            neighbours: None,
            runtime_log_sd: None,
        }
    }

    pub(crate) fn inference(name: &str, demand: f64) -> JobClass {
        JobClass {
            kind: JobKind::Inference,
            reference_runtime_s: 1800.0,
            speed_exponent: 0.3,
            power_util: 0.7,
            mem_intensity: 0.3,
            memory_gib: 4.0,
            demand,
            ..training(name)
        }
    }

    const P: ModelParams = ModelParams {
        contention_kappa: 0.33,
        time_slice_efficiency: 0.8,
    };

    fn tenant(class: &JobClass, share: u8, user: u32) -> Tenant<'_> {
        Tenant {
            class,
            share: SharePct::new(share).expect("valid share"),
            user,
        }
    }

    fn alone(c: &JobClass, share: u8) -> [Tenant<'_>; 1] {
        [tenant(c, share, 1)]
    }

    #[test]
    fn alone_at_default_clock_is_the_yardstick() {
        let g = gpu("a100", 2.0, 50.0, 400.0);
        let r = gpu("v100", 1.0, 30.0, 300.0);
        let c = training("t");
        let p = predict(&g, &r, &alone(&c, 100), g.default_sm_clock, P);
        assert!((p.jobs[0].slowdown - 1.0).abs() < 1e-12);
        assert!(
            (p.jobs[0].runtime.0 - 1800.0).abs() < 1e-9,
            "twice as fast as the reference"
        );
        // Busy power at default (= max) clock: idle + 0.85 of the dynamic range.
        assert!((p.power.0 - (50.0 + 0.85 * 350.0)).abs() < 1e-9);
        assert!(
            (p.jobs[0].power.0 - p.power.0).abs() < 1e-9,
            "one job carries all the power"
        );
    }

    #[test]
    fn a_predictor_kept_across_clocks_gives_each_clock_as_a_fresh_one() {
        let g = gpu("a100", 2.0, 50.0, 400.0);
        let r = gpu("v100", 1.0, 30.0, 300.0);
        let (t, i) = (training("t"), inference("i", 0.3));
        // Two users: the time slices are worked out per clock as well.
        let tenants = [tenant(&t, 50, 1), tenant(&i, 30, 2), tenant(&i, 20, 1)];
        let mut kept = Predictor::new(&g, &r, &tenants);
        let mut out = kept.at(g.default_sm_clock, P);
        // Down, then up again out of order: nothing of one clock may stay for the next.
        let clocks = g
            .sm_clocks
            .iter()
            .rev()
            .chain(g.sm_clocks.iter().step_by(7));
        for &f in clocks {
            kept.at_into(f, P, &mut out);
            assert_eq!(out, Predictor::new(&g, &r, &tenants).at(f, P), "at {f:?}");
        }
    }

    #[test]
    fn lower_clock_is_slower_but_can_save_energy() {
        let g = gpu("a100", 2.0, 50.0, 400.0);
        let c = training("t");
        let hi = predict(&g, &g, &alone(&c, 100), Mhz(1410), P);
        let lo = predict(&g, &g, &alone(&c, 100), Mhz(1005), P);
        assert!(lo.jobs[0].runtime > hi.jobs[0].runtime);
        assert!(lo.power < hi.power);
        assert!(
            lo.jobs[0].energy() < hi.jobs[0].energy(),
            "c = 0.4 leaves room for DVFS savings"
        );
    }

    #[test]
    fn inference_keeps_pace_until_its_share_saturates() {
        let g = gpu("v100", 1.0, 30.0, 300.0);
        let c = inference("i", 0.2);
        let ok = predict(&g, &g, &alone(&c, 30), g.default_sm_clock, P);
        assert!((ok.jobs[0].slowdown - 1.0).abs() < 1e-12);
        assert!((ok.jobs[0].busy - 0.2).abs() < 1e-12);
        let tight = predict(&g, &g, &alone(&c, 10), g.default_sm_clock, P);
        assert!((tight.jobs[0].slowdown - 2.0).abs() < 1e-9);
        assert_eq!(full_speed_share(&c, &g, &g, 5).get(), 20);
    }

    #[test]
    fn co_located_jobs_slow_each_other_and_split_the_power() {
        let g = gpu("v100", 1.0, 30.0, 300.0);
        let c = training("t");
        let two = [tenant(&c, 50, 1), tenant(&c, 50, 1)];
        let p = predict(&g, &g, &two, g.default_sm_clock, P);
        // Clock-bound part doubles (0.4 * 2 + 0.6 = 1.4), contention 1 + 0.33 * 0.8 * 0.5.
        let expect = 1.4 * (1.0 + 0.33 * 0.4);
        assert!((p.jobs[0].slowdown - expect).abs() < 1e-9);
        let sum: f64 = p.jobs.iter().map(|j| j.power.0).sum();
        assert!(
            (sum - p.power.0).abs() < 1e-9,
            "attribution adds up to the GPU's power"
        );
        // Two users: two contexts time-sliced, each training job gets half of the 80% the
        // switching leaves.
        let other_user = [two[0], Tenant { user: 2, ..two[1] }];
        let q = predict(&g, &g, &other_user, g.default_sm_clock, P);
        assert!(
            (q.jobs[0].slowdown / p.jobs[0].slowdown - 1.0 / 0.4).abs() < 1e-9,
            "{} vs {}",
            q.jobs[0].slowdown,
            p.jobs[0].slowdown
        );
        // Two users' light services fit in the time there is: both keep pace.
        let i = inference("i", 0.2);
        let light = [tenant(&i, 30, 1), tenant(&i, 30, 2)];
        let l = predict(&g, &g, &light, g.default_sm_clock, P);
        assert!(l.jobs.iter().all(|j| j.slowdown < 1.0 + 1e-9), "{l:?}");
    }

    #[test]
    fn max_min_fair_gives_no_one_more_than_it_needs_nor_more_than_there_is() {
        assert_eq!(max_min_fair(&[0.2, 0.3], 1.0), vec![0.2, 0.3]);
        assert_eq!(max_min_fair(&[1.0, 1.0], 0.8), vec![0.4, 0.4]);
        let got = max_min_fair(&[1.0, 0.1, 0.0, 0.6], 0.85);
        assert!((got[1] - 0.1).abs() < 1e-12 && got[2] == 0.0, "{got:?}");
        assert!(
            (got[0] - 0.375).abs() < 1e-12 && (got[3] - 0.375).abs() < 1e-12,
            "{got:?}"
        );
        assert!((got.iter().sum::<f64>() - 0.85).abs() < 1e-12);
    }

    #[test]
    fn share_rounding() {
        assert_eq!(round_up_share(0.2, 5).get(), 20);
        assert_eq!(round_up_share(0.201, 5).get(), 25);
        assert_eq!(round_up_share(0.0, 10).get(), 10);
        assert_eq!(round_up_share(3.0, 10).get(), 100);
        assert_eq!(round_up_share(0.97, 7).get(), 98);
    }
}
