//! From a profile to a job class: what a job's own runs say of it, in the model's terms, so that
//! it is placed and clocked as a labelled job is.
//!
//! A profile fills in what it measured and leaves the rest to a prior: the class its user gave,
//! or, where the user gave none (or gave one its runs contradict), the median of the catalog's
//! classes of the kind its request and runs suggest (a share is a service unless its runs drew a
//! training job's power; whole GPUs are training). Measured, per GPU type it ran on:
//!
//! * **training**: its runtime alone at the default clock (runs that had their GPUs to
//!   themselves, each undone of its clock by the class's clock-bound fraction), taken at the
//!   upper quantile `quantile` of its recent runs, so that a time limit and a slowdown bound
//!   hold when a run is slower than most; with two or more types, the speed exponent is fitted
//!   to them; the reference type's runtime is measured or carried from the others by the fit;
//! * **inference**: the fraction of the GPU it keeps busy at the default clock (the driver's
//!   busy time, or its dynamic power over the class's power per busy unit), at the upper
//!   quantile, which sizes its share; its stream's length;
//! * both: its dynamic power per unit of work, GPU memory, and, where its runs ran at different
//!   clocks, the part of its time that stretches with the clock.
//!
//! Each measured type's speed replaces the catalog's guess there (`JobClass::measured_speed`);
//! other types follow the fitted exponent. Runs count less as they age (`half_life_s`). A profile
//! is used from `min_runs` runs on. Pure.

use super::key::{Level, ProfileKey};
use super::learn::{Book, Profile, Sample, recency_weight, weighted_quantile};
use crate::config::Config;
use crate::model::{GpuType, JobClass, JobKind, KilledOn};

/// How profiles are turned into decisions (`[profiles]` in heshare.toml).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeriveSettings {
    /// Runs kept in the profile before it decides.
    pub min_runs: f64,
    /// The quantile of a job's runs its runtime and need are taken at.
    pub quantile: f64,
    pub half_life_s: f64,
    /// A label whose class predicts the job's measured power or runtime off by more than this
    /// factor is set aside for the profile.
    pub disagree_factor: f64,
    /// A profile whose runs on one type spread wider than this (90th over 10th percentile of
    /// runtime, or of need for a service) mixes different jobs (an account's request key, a
    /// script run on different data): it does not decide, and the next level is tried.
    pub max_spread: f64,
    /// A service's run that filled its share is taken to have needed this much more.
    pub saturated_margin: f64,
}

/// A profile that decides for a job.
#[derive(Debug, Clone, PartialEq)]
pub struct Learned {
    pub key: ProfileKey,
    pub level: Level,
    /// Runs it rests on (all types, every run ever filed).
    pub runs: u64,
    /// The job as its runs describe it; named after the key.
    pub class: std::sync::Arc<JobClass>,
    /// The types it ran on.
    pub measured: Vec<String>,
    /// The class the user gave, when the runs contradict it: why it was set aside.
    pub overruled: Option<String>,
}

impl Learned {
    /// `training` or `inference`: the family the learned class belongs to, which names the
    /// decision where the user gave no class.
    pub fn class_family(&self) -> &'static str {
        match self.class.kind {
            JobKind::Training => "training",
            JobKind::Inference => "inference",
        }
    }
}

/// What the job's request and label say before its runs are read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Asked<'a> {
    /// The `--gpu-class` the user gave, if any (a catalog class).
    pub label: Option<&'a JobClass>,
    /// Whether the request is an MPS share.
    pub share: bool,
}

/// Looks the job's keys up, most specific first, and returns the first profile with enough
/// runs, derived.
pub fn lookup(
    cfg: &Config,
    book: &Book,
    keys: &[ProfileKey],
    asked: Asked<'_>,
    now_s: f64,
    s: DeriveSettings,
) -> Option<Learned> {
    keys.iter()
        // An account's profile mixes its users' jobs: it may stand in for a label nobody gave
        // to whole GPUs, never set one aside, and never decide a share (its users' services
        // need different shares: one placed and clocked by the mix lands where its own share
        // falls short; in the simulator such jobs were most of the kills heshare caused).
        .filter(|k| (asked.label.is_none() && !asked.share) || k.level() != Level::Request)
        .find_map(|k| {
            let p = book.get(k)?;
            derive(cfg, k, p, asked, now_s, s)
        })
}

/// The median of the catalog's classes of `kind` for each parameter: what a job of that kind is
/// taken to be where nothing else is known.
pub fn family_prior(cfg: &Config, kind: JobKind) -> JobClass {
    let of: Vec<&JobClass> = cfg.classes.iter().filter(|c| c.kind == kind).collect();
    let med = |f: fn(&JobClass) -> f64, default: f64| {
        let mut v: Vec<f64> = of.iter().map(|c| f(c)).collect();
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            default
        } else {
            v[v.len() / 2]
        }
    };
    JobClass {
        name: match kind {
            JobKind::Training => "training".into(),
            JobKind::Inference => "inference".into(),
        },
        kind,
        description: "the catalog's median class of its kind".into(),
        reference_runtime_s: med(|c| c.reference_runtime_s, 3600.0),
        speed_exponent: med(|c| c.speed_exponent, 0.5),
        clock_bound_fraction: med(|c| c.clock_bound_fraction, 0.3),
        clock_knee: med(|c| c.clock_knee, 0.0),
        power_util: med(|c| c.power_util, 0.5),
        mem_intensity: med(|c| c.mem_intensity, 1.0),
        memory_gib: med(|c| c.memory_gib, 8.0),
        demand: med(
            |c| c.demand,
            if kind == JobKind::Training { 1.0 } else { 0.3 },
        ),
        slowdown_bound: None,
        measured_speed: vec![],
        limit_kills: vec![],
        neighbours: None,
        runtime_log_sd: None,
    }
}

/// A run's time factor at its clock, for a job whose clock-bound fraction is `c`.
fn clock_factor(c: f64, stretch: f64) -> f64 {
    (c * stretch + (1.0 - c)).max(1e-6)
}

fn is_whole(s: &Sample) -> bool {
    s.share_pct.is_none_or(|p| p >= 100)
}

/// A run's runtime alone at the default clock, where it had its GPUs to itself, whole, undone of
/// its clock for a job whose clock-bound fraction is `c`: what a training job's runtime is
/// learned from.
fn whole_alone_runtime(x: &Sample, c: f64) -> Option<f64> {
    (x.alone && is_whole(x)).then(|| x.runtime_s / clock_factor(c, x.stretch))
}

/// Per type: the type's index, its samples and their weights now.
struct TypeData<'a> {
    t: usize,
    samples: Vec<&'a Sample>,
    weights: Vec<f64>,
}

impl TypeData<'_> {
    fn quantile(&self, f: impl Fn(&Sample) -> Option<f64>, q: f64) -> Option<f64> {
        let (v, w): (Vec<f64>, Vec<f64>) = self
            .samples
            .iter()
            .zip(&self.weights)
            .filter_map(|(s, &w)| f(s).map(|x| (x, w)))
            .unzip();
        weighted_quantile(&v, &w, q)
    }
}

/// A job's measured dynamic power on a GPU over what `class` predicts for it there at the same
/// share: `> 1` draws more.
fn power_ratio(
    class: &JobClass,
    gpu: &GpuType,
    reference: &GpuType,
    d: &TypeData<'_>,
) -> Option<f64> {
    let measured = d.quantile(|s| s.dyn_frac, 0.5)?;
    let share = d
        .quantile(|s| Some(super::learn::share_fraction(s.share_pct)), 0.5)
        .unwrap_or(1.0);
    let predicted = match class.kind {
        JobKind::Training => class.power_util * (share / class.demand.max(1e-6)).min(1.0),
        JobKind::Inference => {
            class.power_util * crate::model::need(class, gpu, reference).min(share)
        }
    };
    Some(measured.max(1e-4) / predicted.max(1e-4))
}

/// The types on which a run was killed at its time limit within the last half-life, with the
/// largest share such a run held there (`None`: one had whole GPUs, and even they did not do)
/// and the longest limit one had.
fn limit_kills(cfg: &Config, profile: &Profile, now_s: f64, half_life_s: f64) -> Vec<KilledOn> {
    profile
        .types
        .iter()
        .filter(|(name, _)| cfg.gpu_type(name).is_some())
        .filter_map(|(name, runs)| {
            let recent: Vec<_> = runs
                .limit_kills
                .iter()
                .filter(|k| recency_weight(k.end_s, now_s, half_life_s) >= 0.5)
                .collect();
            (!recent.is_empty()).then(|| {
                let share = if recent.iter().any(|k| k.share_pct.is_none()) {
                    None
                } else {
                    recent.iter().filter_map(|k| k.share_pct).max()
                };
                // A record without a limit could not have been told from a cancel: every kill
                // filed has one; `None` stands for one that did not read.
                let limit_s = recent
                    .iter()
                    .map(|k| k.limit_s.filter(|l| l.is_finite() && *l > 0.0))
                    .try_fold(0.0f64, |m, l| l.map(|l| m.max(l)))
                    // Positive and clamped to u32's range just above.
                    .map(|l| {
                        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                        let secs = l.min(f64::from(u32::MAX)).round() as u32;
                        secs
                    });
                KilledOn {
                    gpu_type: name.clone(),
                    share_pct: share,
                    limit_s,
                }
            })
        })
        .collect()
}

/// How much a job's runtime alone (whole GPUs, undone of its clock by the clock-bound fraction
/// `c`) spreads from run to run: the standard deviation of its log about each type's own mean,
/// pooled over the types with two runs or more, each run weighed by its recency (the unbiased
/// estimate for such weights). `None` where no type has two.
fn runtime_log_sd(data: &[TypeData<'_>], c: f64) -> Option<f64> {
    let (mut ss, mut dof) = (0.0, 0.0);
    for d in data {
        let (x, w): (Vec<f64>, Vec<f64>) = d
            .samples
            .iter()
            .zip(&d.weights)
            .filter(|(_, w)| **w > 0.0)
            .filter_map(|(s, &w)| {
                whole_alone_runtime(s, c)
                    .filter(|r| *r > 0.0)
                    .map(|r| (r.ln(), w))
            })
            .unzip();
        if x.len() < 2 {
            continue;
        }
        let v1: f64 = w.iter().sum();
        let v2: f64 = w.iter().map(|w| w * w).sum();
        let mean = x.iter().zip(&w).map(|(x, w)| x * w).sum::<f64>() / v1;
        ss += x
            .iter()
            .zip(&w)
            .map(|(x, w)| w * (x - mean).powi(2))
            .sum::<f64>();
        dof += v1 - v2 / v1;
    }
    (dof > 1e-12).then(|| (ss / dof).sqrt())
}

/// Derives the class one profile gives, `None` with too few runs.
pub fn derive(
    cfg: &Config,
    key: &ProfileKey,
    profile: &Profile,
    asked: Asked<'_>,
    now_s: f64,
    s: DeriveSettings,
) -> Option<Learned> {
    let reference = &cfg.gpu_types[cfg.reference_gpu];
    // Weights are relative to the newest run, which weighs one: a profile whose runs are all
    // old (many half-lives) still averages them, rather than its weights vanishing against the
    // guards on their sums.
    let newest_s = profile
        .types
        .values()
        .flat_map(|r| r.samples.iter().map(|x| x.end_s))
        .fold(f64::NEG_INFINITY, f64::max)
        .min(now_s);
    let mut data: Vec<TypeData<'_>> = Vec::new();
    for (name, runs) in &profile.types {
        let Some(t) = cfg.gpu_type(name) else {
            continue; // A type the catalog no longer has.
        };
        if runs.samples.is_empty() {
            continue; // Only kills at its limit here: nothing measured.
        }
        let samples: Vec<&Sample> = runs.samples.iter().collect();
        let weights = samples
            .iter()
            .map(|x| recency_weight(x.end_s, newest_s, s.half_life_s))
            .collect();
        data.push(TypeData {
            t,
            samples,
            weights,
        });
    }
    // Every kept run counts once towards `min_runs`; age only weighs runs against each other.
    let kept: usize = data.iter().map(|d| d.samples.len()).sum();
    #[allow(clippy::cast_precision_loss)]
    if data.is_empty() || (kept as f64) < s.min_runs {
        return None;
    }
    // Runs that disagree this much are not one job.
    let spread = |d: &TypeData<'_>, f: &dyn Fn(&Sample) -> Option<f64>| {
        let lo = d.quantile(f, 0.1)?;
        let hi = d.quantile(f, 0.9)?;
        (lo > 0.0).then(|| hi / lo)
    };
    let mixed = data.iter().any(|d| {
        d.samples.len() >= 2
            && [
                spread(d, &|x| (x.alone && is_whole(x)).then_some(x.runtime_s)),
                spread(d, &|x| x.busy.or(x.dyn_frac)),
            ]
            .into_iter()
            .flatten()
            .any(|r| r > s.max_spread)
    });
    if mixed {
        return None;
    }
    // Heavy: on some type its runs drew most of a GPU's dynamic power, or kept it busy.
    let heavy = data.iter().any(|d| {
        d.quantile(|x| x.dyn_frac, 0.5).is_some_and(|f| f >= 0.4)
            || d.quantile(|x| x.busy, 0.5).is_some_and(|b| b >= 0.6)
    });
    let mut overruled = None;
    let prior = match asked.label {
        Some(label) => {
            // The label stands unless the runs contradict it on a type they measured.
            let off = data.iter().find_map(|d| {
                let gpu = &cfg.gpu_types[d.t];
                let r = power_ratio(label, gpu, reference, d)?;
                let f = s.disagree_factor.max(1.0);
                (r > f || r < 1.0 / f).then(|| {
                    format!(
                        "its runs drew {r:.1}x the power class {} predicts on {}",
                        label.name, gpu.name
                    )
                })
            });
            match off {
                None => label.clone(),
                Some(why) => {
                    overruled = Some(why);
                    // A share is a service (a heavy one keeps its share busy too); on whole
                    // GPUs a job that draws most of them trains.
                    let kind = if asked.share {
                        JobKind::Inference
                    } else if heavy {
                        JobKind::Training
                    } else {
                        label.kind
                    };
                    family_prior(cfg, kind)
                }
            }
        }
        // Nothing said: a share is a service, whole GPUs train (what users ask each for).
        None => family_prior(
            cfg,
            if asked.share {
                JobKind::Inference
            } else {
                JobKind::Training
            },
        ),
    };
    let q = s.quantile.clamp(0.5, 1.0);
    let mut class = JobClass {
        name: key.as_str().to_owned(),
        description: format!("learned from {} runs", profile.runs()),
        measured_speed: vec![],
        limit_kills: vec![],
        neighbours: None,
        ..prior.clone()
    };
    // Clock sensitivity, where one type's whole-GPU runs ran at clocks far enough apart: the
    // runtime is a + b * stretch, and the clock-bound part is b / (a + b). Where they did not,
    // a job nobody labelled is taken to be as clock-bound as the catalog's more clock-bound
    // classes of its kind (the upper quartile), so the clock chosen for it keeps its bound
    // whatever it turns out to be.
    match data.iter().find_map(|d| fit_clock_bound(d)) {
        Some(c) => class.clock_bound_fraction = c,
        None if asked.label.is_none() || overruled.is_some() => {
            let upper = |f: fn(&JobClass) -> f64| {
                let mut v: Vec<f64> = cfg
                    .classes
                    .iter()
                    .filter(|c| c.kind == prior.kind)
                    .map(f)
                    .collect();
                v.sort_by(f64::total_cmp);
                v.get(v.len() * 3 / 4).copied()
            };
            if let Some(c) = upper(|c| c.clock_bound_fraction) {
                class.clock_bound_fraction = c.max(class.clock_bound_fraction);
            }
            if let Some(k) = upper(|c| c.clock_knee) {
                class.clock_knee = k.max(class.clock_knee);
            }
        }
        None => {}
    }
    let c = class.clock_bound_fraction;
    let ratio = |t: usize| cfg.gpu_types[t].relative_throughput / reference.relative_throughput;
    match class.kind {
        JobKind::Training => {
            // Runtime alone at the default clock, per type: its own GPUs, whole.
            let alone: Vec<(usize, f64, f64)> = data
                .iter()
                .filter_map(|d| {
                    let r = d.quantile(|x| whole_alone_runtime(x, c), q)?;
                    let n: f64 = d
                        .samples
                        .iter()
                        .zip(&d.weights)
                        .filter(|(x, _)| x.alone && is_whole(x))
                        .map(|(_, w)| w)
                        .sum();
                    Some((d.t, r, n))
                })
                .collect();
            class.runtime_log_sd = runtime_log_sd(&data, c);
            if alone.len() >= 2 {
                // ln T_g = ln T_ref - a ln(K_g / K_ref), weighted least squares.
                let pts: Vec<(f64, f64, f64)> = alone
                    .iter()
                    .map(|&(t, r, w)| (ratio(t).ln(), r.ln(), w))
                    .collect();
                if let Some(slope) = weighted_slope(&pts) {
                    class.speed_exponent = (-slope).clamp(0.0, 2.5);
                }
            } else if asked.label.is_none() || overruled.is_some() {
                // One type measured, nothing said: the other types as the catalog's more
                // type-sensitive training classes see them (the upper quartile). A faster type
                // then looks worth trying, which measures it; a slower one looks slower, which
                // keeps the time limit safe.
                let mut v: Vec<f64> = cfg
                    .classes
                    .iter()
                    .filter(|c| c.kind == JobKind::Training)
                    .map(|c| c.speed_exponent)
                    .collect();
                v.sort_by(f64::total_cmp);
                if let Some(&a) = v.get(v.len() * 3 / 4) {
                    class.speed_exponent = a.max(class.speed_exponent);
                }
            }
            if !alone.is_empty() {
                let a = class.speed_exponent;
                let (sum, wsum) = alone.iter().fold((0.0, 0.0), |(s0, w0), &(t, r, w)| {
                    (s0 + w * (r.ln() + a * ratio(t).ln()), w0 + w)
                });
                class.reference_runtime_s = match alone.iter().find(|x| x.0 == cfg.reference_gpu) {
                    Some(&(_, r, _)) => r,
                    None => (sum / wsum.max(1e-12)).exp(),
                };
                class.measured_speed = alone
                    .iter()
                    .map(|&(t, r, _)| {
                        (
                            cfg.gpu_types[t].name.clone(),
                            class.reference_runtime_s / r.max(1e-9),
                        )
                    })
                    .collect();
            }
            let whole = |x: &Sample| (x.alone && is_whole(x)).then_some(());
            if let Some(u) = median_over(&data, |x| whole(x).and(x.dyn_frac)) {
                class.power_util = u.clamp(0.02, 1.0);
            }
            if let Some(b) = median_over(&data, |x| whole(x).and(x.busy)) {
                class.demand = b.clamp(0.05, 1.0);
            }
        }
        JobKind::Inference => {
            // Its need on each type: the busy fraction it kept at the default clock, measured
            // by the driver or read from its power.
            let pu = class.power_util.max(1e-3);
            // A run that filled its share may have needed more than it got (its stream fell
            // behind): what it measured is a floor, taken one margin higher.
            let need = |x: &Sample| {
                let busy = x.busy.or_else(|| x.dyn_frac.map(|f| f / pu))?;
                let floor = if super::learn::filled_its_share(busy, x.share_pct) {
                    1.0 + s.saturated_margin
                } else {
                    1.0
                };
                Some(busy * floor / clock_factor(c, x.stretch))
            };
            let needs: Vec<(usize, f64)> = data
                .iter()
                .filter_map(|d| Some((d.t, d.quantile(need, q)?.clamp(0.005, 8.0))))
                .collect();
            if !needs.is_empty() {
                let a = class.speed_exponent;
                class.demand = match needs.iter().find(|x| x.0 == cfg.reference_gpu) {
                    Some(&(_, n)) => n,
                    None => {
                        let logs: f64 = needs
                            .iter()
                            .map(|&(t, n)| n.ln() + a * ratio(t).ln())
                            .sum::<f64>();
                        #[allow(clippy::cast_precision_loss)]
                        let mean = logs / needs.len() as f64;
                        mean.exp()
                    }
                };
                class.measured_speed = needs
                    .iter()
                    .map(|&(t, n)| (cfg.gpu_types[t].name.clone(), class.demand / n))
                    .collect();
            }
            if let Some(u) = median_over(&data, |x| Some(x.dyn_frac? / x.busy?)) {
                class.power_util = u.clamp(0.02, 1.0);
            }
            if let Some(r) = quantile_over(&data, |x| Some(x.runtime_s), q) {
                class.reference_runtime_s = r.max(1.0);
            }
        }
    }
    if let Some(m) = quantile_over(&data, |x| x.memory_gib, 1.0) {
        class.memory_gib = m;
    }
    class.limit_kills = limit_kills(cfg, profile, now_s, s.half_life_s);
    let runs: Vec<(usize, &Sample)> = data
        .iter()
        .flat_map(|d| d.samples.iter().map(move |x| (d.t, *x)))
        .collect();
    class.neighbours = super::neighbours::learn(cfg, &class, &runs);
    Some(Learned {
        key: key.clone(),
        level: key.level(),
        runs: profile.runs(),
        class: std::sync::Arc::new(class),
        measured: data
            .iter()
            .map(|d| cfg.gpu_types[d.t].name.clone())
            .collect(),
        overruled,
    })
}

fn quantile_over(data: &[TypeData<'_>], f: impl Fn(&Sample) -> Option<f64>, q: f64) -> Option<f64> {
    let (v, w): (Vec<f64>, Vec<f64>) = data
        .iter()
        .flat_map(|d| d.samples.iter().zip(&d.weights))
        .filter_map(|(x, &w)| f(x).map(|v| (v, w)))
        .unzip();
    weighted_quantile(&v, &w, q)
}

fn median_over(data: &[TypeData<'_>], f: impl Fn(&Sample) -> Option<f64>) -> Option<f64> {
    quantile_over(data, f, 0.5)
}

/// The weighted least-squares slope of `(x, y, weight)` points; `None` when x does not vary.
fn weighted_slope(pts: &[(f64, f64, f64)]) -> Option<f64> {
    let w: f64 = pts.iter().map(|p| p.2).sum();
    if w <= 0.0 {
        return None;
    }
    let mx = pts.iter().map(|p| p.0 * p.2).sum::<f64>() / w;
    let my = pts.iter().map(|p| p.1 * p.2).sum::<f64>() / w;
    let sxx: f64 = pts.iter().map(|p| p.2 * (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| p.2 * (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 1e-9).then(|| sxy / sxx)
}

/// The clock-bound fraction from one type's whole, alone runs at different clocks: runtime =
/// a + b * stretch, c = b / (a + b). `None` unless three or more runs span 0.15 of stretch.
fn fit_clock_bound(d: &TypeData<'_>) -> Option<f64> {
    let pts: Vec<(f64, f64, f64)> = d
        .samples
        .iter()
        .zip(&d.weights)
        .filter(|(x, _)| x.alone && is_whole(x) && x.stretch.is_finite())
        .map(|(x, &w)| (x.stretch, x.runtime_s, w))
        .collect();
    let (lo, hi) = pts
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), p| {
            (l.min(p.0), h.max(p.0))
        });
    if pts.len() < 3 || hi - lo < 0.15 {
        return None;
    }
    let b = weighted_slope(&pts)?;
    let w: f64 = pts.iter().map(|p| p.2).sum();
    let mean_t = pts.iter().map(|p| p.1 * p.2).sum::<f64>() / w;
    let mean_s = pts.iter().map(|p| p.0 * p.2).sum::<f64>() / w;
    let a = mean_t - b * mean_s;
    (a + b > 0.0).then(|| (b / (a + b)).clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BUNDLED_CONFIG;
    use crate::model::alone_runtime;
    use crate::profile::learn::{LearnLimits, Observation, Outcome};
    use std::path::Path;

    fn cfg() -> Config {
        Config::parse(BUNDLED_CONFIG, Path::new("heshare.toml")).expect("bundled config")
    }

    const SETTINGS: DeriveSettings = DeriveSettings {
        min_runs: 2.0,
        quantile: 0.9,
        half_life_s: 30.0 * 86_400.0,
        disagree_factor: 2.0,
        max_spread: 3.0,
        saturated_margin: 0.25,
    };

    fn key() -> ProfileKey {
        ProfileKey::parse("script:1000:0123456789abcdef").expect("key")
    }

    /// Files one run of uid 1000's script on `gpu`, ended as `outcome`, with its time limit.
    fn observe(b: &mut Book, gpu: &str, outcome: Outcome, limit: Option<f64>, sample: Sample) {
        b.learn(
            &Observation {
                keys: vec![key()],
                uid: 1000,
                account: "physics".into(),
                gpu_type: gpu.into(),
                outcome,
                energy_valid: true,
                time_limit_s: limit,
                sample,
            },
            LearnLimits { max_samples: 32 },
        );
    }

    /// Files the `i`th run, `sample`, of uid 1000's script on `gpu`.
    fn file(b: &mut Book, gpu: &str, i: usize, sample: Sample) {
        let sample = Sample {
            id: format!("n:{i}:0"),
            #[allow(clippy::cast_precision_loss)]
            end_s: 1000.0 + i as f64,
            ..sample
        };
        observe(b, gpu, Outcome::Completed, None, sample);
    }

    /// Files whole-GPU runs of `runtime` seconds at dynamic power `dyn_frac` on `gpu`.
    fn book(runs: &[(&str, f64, f64, f64)]) -> Book {
        let mut b = Book::default();
        for (i, &(gpu, runtime, dyn_frac, stretch)) in runs.iter().enumerate() {
            let sample = Sample {
                id: String::new(),
                end_s: 0.0,
                runtime_s: runtime,
                share_pct: None,
                gpus: 1,
                stretch,
                dyn_frac: Some(dyn_frac),
                busy: None,
                memory_gib: Some(9.0),
                neighbour_busy: None,
                alone: true,
            };
            file(&mut b, gpu, i, sample);
        }
        b
    }

    fn learned(cfg: &Config, b: &Book, label: Option<&str>) -> Option<Learned> {
        learned_at(cfg, b, label, 2000.0)
    }

    /// The profile as it decides at `now_s`.
    fn learned_at(cfg: &Config, b: &Book, label: Option<&str>, now_s: f64) -> Option<Learned> {
        lookup(
            cfg,
            b,
            &[key()],
            Asked {
                label: label.and_then(|l| cfg.class(l)),
                share: false,
            },
            now_s,
            SETTINGS,
        )
    }

    /// A learned class's runtime alone on type `t`.
    fn runtime_on(cfg: &Config, l: &Learned, t: &str) -> f64 {
        let reference = &cfg.gpu_types[cfg.reference_gpu];
        alone_runtime(
            &l.class,
            &cfg.gpu_types[cfg.gpu_type(t).expect("type")],
            reference,
        )
        .0
    }

    #[test]
    fn measured_runtimes_replace_the_catalogs_where_measured_and_fit_the_rest() {
        let cfg = cfg();
        // A job twice as fast on an a100 as on a v100, and 5x faster than on a t4.
        let b = book(&[
            ("v100m16", 4000.0, 0.7, 1.0),
            ("v100m16", 4200.0, 0.7, 1.0),
            ("a100", 2000.0, 0.6, 1.0),
            ("a100", 2100.0, 0.6, 1.0),
        ]);
        let l = learned(&cfg, &b, None).expect("enough runs");
        assert_eq!(l.class.kind, JobKind::Training);
        assert_eq!(l.runs, 4);
        let on = |t: &str| runtime_on(&cfg, &l, t);
        // Taken at the upper quantile of its runs.
        assert!((on("a100") - 2100.0).abs() < 1.0, "{}", on("a100"));
        assert!((on("v100m16") - 4200.0).abs() < 1.0, "{}", on("v100m16"));
        // An unmeasured type follows the fitted exponent: slower than a v100 on a t4.
        assert!(on("t4") > on("v100m16"), "{}", on("t4"));
        assert!((l.class.power_util - 0.6).abs() < 0.11);
        assert_eq!(l.class.memory_gib, 9.0);
        assert!(l.overruled.is_none());
    }

    /// Runs weigh against each other by age: a profile whose runs are all decades old (here 60
    /// years, 730 half-lives) still gives their runtimes, not a runtime its vanishing weights
    /// made up (it gave the other types one second).
    #[test]
    fn old_runs_weigh_against_each_other_not_against_now() {
        let cfg = cfg();
        let b = book(&[("a100", 2000.0, 0.6, 1.0), ("a100", 2100.0, 0.6, 1.0)]);
        let l = learned_at(&cfg, &b, None, 60.0 * 365.0 * 86_400.0).expect("enough runs");
        let on = |t: &str| runtime_on(&cfg, &l, t);
        assert!((on("a100") - 2100.0).abs() < 1.0, "{}", on("a100"));
        assert!(
            on("v100m16") > on("a100"),
            "{} {}",
            on("v100m16"),
            on("a100")
        );
    }

    /// How much its runtime spreads is measured about each type's own mean (a faster type is
    /// no spread), from types with two runs or more; one run per type tells nothing.
    #[test]
    fn the_runtime_spread_is_pooled_within_types() {
        let cfg = cfg();
        // ln 4200 - ln 4000 = ln 2100 - ln 2000 = 0.0488: each type's two runs are 0.0244 off
        // their mean; unbiased with equal weights, sqrt(2 * 2 * 0.0244^2 / 2) = 0.0345.
        let b = book(&[
            ("v100m16", 4000.0, 0.7, 1.0),
            ("v100m16", 4200.0, 0.7, 1.0),
            ("a100", 2000.0, 0.6, 1.0),
            ("a100", 2100.0, 0.6, 1.0),
        ]);
        let sd = learned(&cfg, &b, None)
            .expect("enough runs")
            .class
            .runtime_log_sd
            .expect("measured");
        let expect = (2.0 * (0.5 * (4200.0f64 / 4000.0).ln()).powi(2)).sqrt();
        assert!((sd - expect).abs() < 2e-3, "{sd} {expect}");
        let one_each = book(&[("v100m16", 4000.0, 0.7, 1.0), ("a100", 2000.0, 0.6, 1.0)]);
        let l = learned(&cfg, &one_each, None).expect("enough runs");
        assert_eq!(l.class.runtime_log_sd, None);
    }

    /// An account's profile mixes its users' jobs: it may place an unlabelled whole-GPU job,
    /// never a share (whose own need it cannot tell), and never overrule a label.
    #[test]
    fn an_accounts_profile_never_decides_a_share() {
        let cfg = cfg();
        let mut b = Book::default();
        let k = ProfileKey::parse("request:physics:mps%3A30").expect("key");
        assert_eq!(k.level(), Level::Request);
        for i in 0..4 {
            b.learn(
                &Observation {
                    keys: vec![k.clone()],
                    uid: 1000,
                    account: "physics".into(),
                    gpu_type: "t4".into(),
                    outcome: Outcome::Completed,
                    energy_valid: true,
                    time_limit_s: None,
                    sample: Sample {
                        id: format!("n:{i}:0"),
                        end_s: 1000.0 + f64::from(i),
                        runtime_s: 1800.0,
                        share_pct: Some(30),
                        gpus: 1,
                        stretch: 1.0,
                        dyn_frac: Some(0.1),
                        busy: Some(0.25),
                        memory_gib: None,
                        neighbour_busy: None,
                        alone: false,
                    },
                },
                LearnLimits { max_samples: 32 },
            );
        }
        let ask = |label: Option<&str>, share: bool| {
            lookup(
                &cfg,
                &b,
                std::slice::from_ref(&k),
                Asked {
                    label: label.and_then(|l| cfg.class(l)),
                    share,
                },
                2000.0,
                SETTINGS,
            )
        };
        assert!(ask(None, true).is_none());
        assert!(ask(Some("vit-infer"), false).is_none());
        assert_eq!(ask(None, false).map(|l| l.level), Some(Level::Request));
    }

    /// Kills at the time limit within the last half-life name their types in the learned class,
    /// with the largest share killed there (`None` where one had whole GPUs) and the longest
    /// limit; older kills and kills on types the catalog dropped are forgotten.
    #[test]
    fn recent_kills_at_the_limit_name_their_types() {
        let cfg = cfg();
        let mut b = book(&[("v100m16", 4000.0, 0.7, 1.0), ("v100m16", 4200.0, 0.7, 1.0)]);
        let kill = |b: &mut Book, gpu: &str, id: &str, end_s: f64, share: Option<u8>| {
            let sample = Sample {
                id: id.into(),
                end_s,
                runtime_s: 3600.0,
                share_pct: share,
                gpus: 1,
                stretch: 1.0,
                dyn_frac: None,
                busy: None,
                memory_gib: None,
                neighbour_busy: None,
                alone: share.is_none(),
            };
            observe(b, gpu, Outcome::Killed, Some(3600.0), sample);
        };
        assert!(
            learned(&cfg, &b, None)
                .expect("profile")
                .class
                .limit_kills
                .is_empty()
        );
        kill(&mut b, "a10", "k:1", 1500.0, Some(35));
        kill(&mut b, "t4", "k:2", 1600.0, None);
        kill(&mut b, "gone", "k:3", 1700.0, Some(20));
        // Two half-lives ago: forgotten.
        kill(
            &mut b,
            "a100",
            "k:4",
            2000.0 - 2.0 * SETTINGS.half_life_s,
            Some(50),
        );
        let l = learned(&cfg, &b, None).expect("profile");
        assert_eq!(
            l.class.limit_kills,
            vec![
                KilledOn {
                    gpu_type: "a10".to_owned(),
                    share_pct: Some(35),
                    limit_s: Some(3600),
                },
                KilledOn {
                    gpu_type: "t4".to_owned(),
                    share_pct: None,
                    limit_s: Some(3600),
                }
            ]
        );
        // Types with kills only measured nothing.
        assert_eq!(l.measured, vec!["v100m16".to_owned()]);
    }

    #[test]
    fn one_run_is_not_a_profile() {
        let cfg = cfg();
        assert!(learned(&cfg, &book(&[("a100", 2000.0, 0.6, 1.0)]), None).is_none());
    }

    #[test]
    fn a_heavy_job_claiming_a_light_service_is_decided_by_its_runs() {
        let cfg = cfg();
        let b = book(&[("t4", 3000.0, 0.9, 1.0), ("t4", 3100.0, 0.92, 1.0)]);
        let l = learned(&cfg, &b, Some("vit-infer")).expect("profile");
        assert_eq!(l.class.kind, JobKind::Training);
        let why = l.overruled.expect("the label is set aside");
        assert!(why.contains("vit-infer") && why.contains("t4"), "{why}");
        // A label the runs agree with stands.
        let bert = cfg.class("bert-train").expect("bert");
        let b = book(&[
            ("a100", 3000.0, bert.power_util, 1.0),
            ("a100", 3100.0, bert.power_util, 1.0),
        ]);
        let l = learned(&cfg, &b, Some("bert-train")).expect("profile");
        assert!(l.overruled.is_none());
        assert_eq!(l.class.speed_exponent, bert.speed_exponent);
    }

    #[test]
    fn runs_at_different_clocks_give_the_clock_bound_fraction() {
        let cfg = cfg();
        // runtime = 1000 * (0.6 * stretch + 0.4): c = 0.6.
        let runs: Vec<(&str, f64, f64, f64)> = [1.0, 1.2, 1.5, 1.3]
            .iter()
            .map(|&s| ("a100", 1000.0 * (0.6 * s + 0.4), 0.7, s))
            .collect();
        let l = learned(&cfg, &book(&runs), None).expect("profile");
        assert!(
            (l.class.clock_bound_fraction - 0.6).abs() < 1e-6,
            "{}",
            l.class.clock_bound_fraction
        );
    }

    /// A service's profile: runs of 1800 s on `gpu` at `share`%, the driver measuring `busy`.
    fn service(gpu: &str, share: u8, busy: &[f64]) -> Learned {
        let cfg = cfg();
        let mut b = Book::default();
        for (i, &x) in busy.iter().enumerate() {
            let sample = Sample {
                id: String::new(),
                end_s: 0.0,
                runtime_s: 1800.0,
                share_pct: Some(share),
                gpus: 1,
                stretch: 1.0,
                dyn_frac: Some(0.1),
                busy: Some(x),
                memory_gib: None,
                neighbour_busy: None,
                alone: false,
            };
            file(&mut b, gpu, i, sample);
        }
        let asked = Asked {
            label: None,
            share: true,
        };
        lookup(&cfg, &b, &[key()], asked, 2000.0, SETTINGS).expect("profile")
    }

    fn need_on(l: &Learned, gpu: &str) -> f64 {
        let cfg = cfg();
        let g = &cfg.gpu_types[cfg.gpu_type(gpu).expect("type")];
        crate::model::need(&l.class, g, &cfg.gpu_types[cfg.reference_gpu])
    }

    #[test]
    fn a_service_is_sized_by_the_busy_fraction_it_measured() {
        let l = service("t4", 50, &[0.30, 0.32, 0.34, 0.36]);
        assert_eq!(l.class.kind, JobKind::Inference);
        let need = need_on(&l, "t4");
        assert!(
            (need - 0.36).abs() < 1e-9,
            "the upper quantile of its need on a t4: {need}"
        );
    }

    /// A service that kept its whole 75% share busy is still a service (a training job would be
    /// sized by its occupancy and starve it), and its need is taken above what it got.
    #[test]
    fn a_service_that_filled_its_share_is_sized_above_it() {
        let l = service("a10", 75, &[0.75, 0.75, 0.75]);
        assert_eq!(l.class.kind, JobKind::Inference);
        let need = need_on(&l, "a10");
        assert!((need - 0.75 * 1.25).abs() < 1e-9, "{need}");
    }

    /// A profile says how much busy neighbours slowed the job from its shared runs beside them,
    /// nothing from runs beside idle ones, and as good as nothing from one beside barely busy
    /// ones.
    #[test]
    fn a_profile_carries_what_busy_neighbours_did_to_its_runs() {
        let cfg = cfg();
        let run = |runtime_s: f64, neighbour_busy: Option<f64>| Sample {
            id: String::new(),
            end_s: 0.0,
            runtime_s,
            share_pct: Some(40),
            gpus: 1,
            stretch: 1.0,
            dyn_frac: Some(0.1),
            busy: Some(0.2),
            memory_gib: None,
            neighbour_busy,
            alone: false,
        };
        let asked = Asked {
            label: None,
            share: true,
        };
        let mut b = Book::default();
        for (i, nb) in [Some(0.0), None].into_iter().enumerate() {
            file(&mut b, "t4", i, run(1800.0, nb));
        }
        let l = lookup(&cfg, &b, &[key()], asked, 2000.0, SETTINGS).expect("profile");
        assert_eq!(l.class.neighbours, None, "idle neighbours say nothing");
        // Kept pace at load 0.5 beside neighbours 0.01 busy: k <= (2 - 1) / 0.01, past the
        // worst pair measured.
        file(&mut b, "t4", 2, run(1800.0, Some(0.01)));
        let l = lookup(&cfg, &b, &[key()], asked, 2000.0, SETTINGS).expect("profile");
        let n = l.class.neighbours.expect("a loose bound");
        assert!(n.per_busy >= 98.4, "{n:?}");
        // Beside neighbours 40% busy it took 1.5x its quiet runs' time at load 0.5 (0.2 of its
        // 0.4): contention 3, k = (3 - 1) / 0.4.
        file(&mut b, "t4", 3, run(2700.0, Some(0.4)));
        let l = lookup(&cfg, &b, &[key()], asked, 2000.0, SETTINGS).expect("profile");
        let n = l.class.neighbours.expect("measured");
        assert!((n.per_busy - 5.0).abs() < 1e-9, "{n:?}");
        assert!((n.up_to_busy - 0.4).abs() < 1e-9, "{n:?}");
    }
}
