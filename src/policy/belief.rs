//! What is known of a learned job's runtime on a GPU type, as a belief rather than a point: its
//! log runtime is normal about what its runs measured, with their own spread
//! (`JobClass::runtime_log_sd`; the profile keeps its runtime at `[profiles] quantile`), and on a
//! type they never measured, its runtime carried there by the speed exponent, whose error is the
//! catalog's spread of exponents times how far the type's speed is from a measured one. A job's
//! bound keeps its limit at that quantile of the belief, or covers the run its limit is written
//! for ([`limit_slowdown`]); the chance that a run still passes it ([`LimitRisk`]) is priced in
//! the option's cost (`cost::kill_j`) and the clock's (`share::clock_cost`). A share heshare
//! sizes itself is priced beside the neighbours the rest of the GPU can hold, the run slowed by
//! its sensitivity to them ([`Beside`]): what its runs measured, or where they measured none,
//! any of the catalog's measured pairs (`contention::prior`). No margin of its own keeps a job
//! off shared GPUs or lower clocks. Pure.

use crate::config::Config;
use crate::model::{GpuType, JobClass, JobKind, alone_runtime, relative_speed};
use crate::units::Seconds;

/// The standard normal quantile: the `z` with `P(Z <= z) = p` (Acklam's rational approximation,
/// relative error below 1.2e-9), `p` clamped into `(0, 1)`.
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let p = p.clamp(1e-12, 1.0 - 1e-12);
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.024_25 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.024_25 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// How far training jobs' speed exponents spread across the catalog's classes (their sample
/// standard deviation): what a job's exponent may be off by where no run of it measured a second
/// type to fit its own.
pub fn exponent_spread(cfg: &Config) -> f64 {
    // Placement asks this for every option: summed in two passes, nothing allocated.
    let training = || {
        cfg.classes
            .iter()
            .filter(|c| c.kind == JobKind::Training)
            .map(|c| c.speed_exponent)
    };
    let (n, sum) = training().fold((0.0f64, 0.0), |(n, s), a| (n + 1.0, s + a));
    if n < 2.0 {
        return 0.0;
    }
    let mean = sum / n;
    (training().map(|a| (a - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
}

/// The log-spread of a learned training job's runtime on `gpu` beyond its runs' own: zero where
/// its runs measured the type; elsewhere the exponent's spread times the log distance in speed
/// from the nearest type they measured (the reference type where they measured none). A
/// service's need on an unmeasured type carries the type's own `speed_uncertainty` instead
/// (`sized_class`).
pub fn type_log_sd(cfg: &Config, class: &JobClass, gpu: &GpuType) -> f64 {
    if class.kind != JobKind::Training || class.measured_on(&gpu.name) {
        return 0.0;
    }
    let k = gpu.relative_throughput.max(1e-9);
    let nearest = class
        .measured_speed
        .iter()
        .filter_map(|(t, _)| cfg.gpu_type(t))
        .map(|t| {
            (k / cfg.gpu_types[t].relative_throughput.max(1e-9))
                .ln()
                .abs()
        })
        .min_by(f64::total_cmp)
        .unwrap_or_else(|| {
            (k / cfg.gpu_types[cfg.reference_gpu]
                .relative_throughput
                .max(1e-9))
            .ln()
            .abs()
        });
    exponent_spread(cfg) * nearest
}

/// The runtime alone at the default clock a learned job's time limit is held against on `gpu`:
/// its runtime there at the profile's quantile, raised by that quantile of the type's own
/// uncertainty ([`type_log_sd`]) where its runs did not measure the type.
pub fn limit_runtime(cfg: &Config, class: &JobClass, gpu: &GpuType) -> Seconds {
    let reference = &cfg.gpu_types[cfg.reference_gpu];
    let alone = alone_runtime(class, gpu, reference).0;
    let sd = type_log_sd(cfg, class, gpu);
    if sd <= 0.0 {
        return Seconds(alone);
    }
    let z = normal_quantile(cfg.profiles.quantile).max(0.0);
    Seconds(alone * (z * sd).exp())
}

/// The most a learned job may slow down on `gpu`: enough to keep `limit_s` at the belief's
/// quantile ([`limit_runtime`]), and where the limit is written for a type (`written_for`,
/// `[policy] limit_type`) and its runs agree ([`written_for_holds`]), no less than running
/// alone there takes (the run its user wrote the limit for, `placement::limit_cap`); never below
/// running alone at the default clock. The bound placement plans its options with and the node
/// helper clocks its GPU by (`node_clock::tenant_bound`); the risk of a kill within it is priced
/// ([`LimitRisk`]).
pub fn limit_slowdown(
    cfg: &Config,
    class: &JobClass,
    gpu: &GpuType,
    written_for: Option<&GpuType>,
    limit_s: f64,
) -> f64 {
    let reference = &cfg.gpu_types[cfg.reference_gpu];
    let own = limit_s / limit_runtime(cfg, class, gpu).0.max(1e-9);
    let written = written_for
        .filter(|w| written_for_holds(cfg, class, w, limit_s))
        .map_or(0.0, |w| {
            super::placement::limit_cap(class, gpu, w, reference)
        });
    own.max(written).max(1.0)
}

/// The standard normal distribution function, `P(Z <= x)` (Abramowitz and Stegun 7.1.26 on
/// `erf`, absolute error below 1.5e-7).
pub fn normal_cdf(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs() / std::f64::consts::SQRT_2);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erf = 1.0 - poly * (-(x * x) / 2.0).exp();
    if x >= 0.0 {
        0.5 * (1.0 + erf)
    } else {
        0.5 * (1.0 - erf)
    }
}

/// What is believed of a learned job's run on one GPU type against its time limit. Its log
/// runtime is normal about the median its runs give, with their own spread
/// (`JobClass::runtime_log_sd`, none where they cannot tell) and, on a type they never measured,
/// the exponent's ([`type_log_sd`]). Where the site says what its limits are written for
/// (`[policy] limit_type`: the slowest type the job allows, or one named type), the limit is
/// itself evidence: its user wrote it to cover this run alone at the default clock there, and a
/// run for which that fails is killed under plain Slurm too. Where the runs agree
/// ([`written_for_holds`]) the belief is conditioned on it: a run no slower than alone on that
/// type is never at risk, and one slower is at risk as far as its runs' spread leaves room
/// between the two. Placement prices an option's kill with
/// it, and the sharing optimizer each clock's (`share::optimize`), so the node helper's clock and
/// the option placement chose carry the same risk.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LimitRisk {
    /// The job's time limit, what a killed run throws away.
    pub limit_s: f64,
    /// The median runtime over the runtime at the profile's quantile.
    median_per_quantile: f64,
    /// Without a convention: the log runtime's spread on this type. With one: on the type the
    /// limit is written for.
    sd: f64,
    /// With a convention: the job's runtime alone at the default clock on the type the limit is
    /// written for, at the profile's quantile, and how far its speed there over this type's may
    /// be off (log-spread). `None`: the limit is read against this type's runs alone.
    written_for: Option<(f64, f64)>,
    /// Worked out once from the fields above, for [`LimitRisk::probability`], which the clock
    /// search asks at every clock: `ln(limit_s)`, and with a convention the log median runtime
    /// on the type the limit is written for and `ln Phi(a)` of its standardised margin `a`.
    ln_limit: f64,
    ln_median: f64,
    ln_cdf_margin: f64,
    /// What is believed of how busy neighbours slow the job ([`Beside`]) where it shares a GPU;
    /// `None`: the sharing model's contention is taken as exact.
    beside: Option<Beside>,
}

/// What is believed of a job's sensitivity to busy neighbours, `k` in the contention
/// `1 + k * busy`, against the sharing model's typical one (`[policy] contention_kappa`, which
/// its runtime predictions already carry): the largest its own runs measured
/// (`JobClass::neighbours`), or where none did, the catalog's measured pairs
/// (`contention::prior`), which spread a hundredfold. A kill beside neighbours comes from the
/// tail of that spread, not from the typical pair.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Beside {
    measured: Option<f64>,
    typical: f64,
    kind: JobKind,
}

impl Beside {
    /// The belief for `class` under `cfg`'s sharing model.
    pub fn of(cfg: &Config, class: &JobClass) -> Beside {
        Beside {
            // A service's runs that kept pace bound its sensitivity rather than measure it; no
            // job is believed more sensitive than the worst pair measured.
            measured: class.neighbours.map(|n| {
                let worst = crate::contention::pair_sensitivities()
                    .last()
                    .copied()
                    .unwrap_or(f64::INFINITY);
                n.per_busy.clamp(0.0, worst)
            }),
            typical: cfg.policy.contention_kappa.max(0.0),
            kind: class.kind,
        }
    }

    /// The runtime over the prediction's at sensitivity `k` with `rest` of the GPU busy, where
    /// the prediction carried `now` (its contention factor) and, for a service, its nominal
    /// `load` on its share (busy over share, before contention): training slows by the
    /// contention; a service only once its load times the contention passes one.
    fn factor(self, k: f64, rest: f64, now: f64, load: f64) -> f64 {
        let c = 1.0 + k * rest;
        match self.kind {
            JobKind::Training => c / now,
            JobKind::Inference => (load * c).max(1.0) / (load * now).max(1.0),
        }
    }
}

/// Whether the limit is read as written for `written_for`: where the job's runs never ran on
/// that type (their runtime there is the speed exponent's guess, which the user's limit, written
/// for that run, outweighs), or where they did and find it more likely right than wrong (their
/// median runtime alone there at the default clock within it). Where runs there say the run
/// takes longer than its limit, the user's limit and the runs cannot both be right, and the
/// runs, measured, are believed: the limit is read against them alone.
pub fn written_for_holds(
    cfg: &Config,
    class: &JobClass,
    written_for: &GpuType,
    limit_s: f64,
) -> bool {
    // A run killed at such a limit with a GPU of its own on a type it runs no slower on is a
    // measurement too: the run the limit is written for does not fit it.
    if ran_out_of_time(cfg, class, written_for, limit_s) {
        return false;
    }
    if !class.measured_on(&written_for.name) {
        return true;
    }
    let reference = &cfg.gpu_types[cfg.reference_gpu];
    let runs = class.runtime_log_sd.unwrap_or(0.0).max(0.0);
    let z = normal_quantile(cfg.profiles.quantile).max(0.0);
    alone_runtime(class, written_for, reference).0 * (-z * runs).exp() <= limit_s
}

/// Whether `gpu` cannot run the job within `limit_s`, whatever it is given there: a recent run of
/// it with a GPU of its own was killed at a limit no shorter, on `gpu` or on a type it runs at
/// least as fast on (by its own speeds: measured where its runs measured them, else the
/// exponent's). A slower GPU does not finish what a faster one could not.
pub fn ran_out_of_time(cfg: &Config, class: &JobClass, gpu: &GpuType, limit_s: f64) -> bool {
    if class.limit_kills.is_empty() {
        return false;
    }
    let reference = &cfg.gpu_types[cfg.reference_gpu];
    let here = relative_speed(class, gpu, reference);
    class
        .limit_kills
        .iter()
        .filter(|k| k.share_pct.is_none() && k.applies(limit_s))
        .any(|k| {
            k.gpu_type == gpu.name
                || cfg
                    .gpu_type(&k.gpu_type)
                    .is_some_and(|t| relative_speed(class, &cfg.gpu_types[t], reference) >= here)
        })
}

/// The log of the standard normal distribution function, accurate in the lower tail where
/// [`normal_cdf`]'s absolute error would swamp it (the asymptotic series below -3).
fn ln_normal_cdf(x: f64) -> f64 {
    if x > -3.0 {
        return normal_cdf(x).max(1e-300).ln();
    }
    let x2 = x * x;
    -x2 / 2.0 - (-x).ln() - 0.5 * (2.0 * std::f64::consts::PI).ln()
        + (1.0 - 1.0 / x2 + 3.0 / (x2 * x2)).ln()
}

impl LimitRisk {
    /// The belief for `class` on `gpu` under `limit_s`, written for `written_for` (the type
    /// `[policy] limit_type` names for the job, `None` where not known).
    pub fn of(
        cfg: &Config,
        class: &JobClass,
        gpu: &GpuType,
        written_for: Option<&GpuType>,
        limit_s: f64,
    ) -> LimitRisk {
        let runs = class.runtime_log_sd.unwrap_or(0.0);
        match written_for.filter(|w| written_for_holds(cfg, class, w, limit_s)) {
            None => LimitRisk::from_spread(
                limit_s,
                runs,
                type_log_sd(cfg, class, gpu),
                cfg.profiles.quantile,
            ),
            Some(w) => {
                let reference = &cfg.gpu_types[cfg.reference_gpu];
                let ratio_sd = if class.kind != JobKind::Training
                    || (class.measured_on(&gpu.name) && class.measured_on(&w.name))
                {
                    0.0
                } else {
                    exponent_spread(cfg)
                        * (gpu.relative_throughput.max(1e-9) / w.relative_throughput.max(1e-9))
                            .ln()
                            .abs()
                };
                LimitRisk {
                    written_for: Some((alone_runtime(class, w, reference).0, ratio_sd)),
                    ..LimitRisk::from_spread(
                        limit_s,
                        runs,
                        type_log_sd(cfg, class, w),
                        cfg.profiles.quantile,
                    )
                }
                .logs()
            }
        }
        .beside(Beside::of(cfg, class))
    }

    /// The same belief, pricing a share beside neighbours as sensitive as `beside` says.
    pub fn beside(self, beside: Beside) -> LimitRisk {
        LimitRisk {
            beside: Some(beside),
            ..self
        }
    }

    /// The belief for runtimes kept at `quantile` of runs whose log runtimes spread by
    /// `runs_sd`, on a type whose speed adds `type_sd`, under `limit_s` read against this type.
    pub fn from_spread(limit_s: f64, runs_sd: f64, type_sd: f64, quantile: f64) -> LimitRisk {
        let runs = runs_sd.max(0.0);
        let z = normal_quantile(quantile).max(0.0);
        LimitRisk {
            limit_s: limit_s.max(1e-9),
            median_per_quantile: (-z * runs).exp(),
            sd: runs.hypot(type_sd.max(0.0)),
            written_for: None,
            ln_limit: 0.0,
            ln_median: 0.0,
            ln_cdf_margin: 0.0,
            beside: None,
        }
        .logs()
    }

    /// Fills the worked-out logs from the belief's fields.
    fn logs(self) -> LimitRisk {
        let ln_limit = self.limit_s.ln();
        let (ln_median, ln_cdf_margin) = match self.written_for {
            Some((written_s, _)) => {
                let ln_median = (written_s * self.median_per_quantile).ln();
                // Without spread `probability` never reads it.
                let a = (ln_limit - ln_median) / self.sd;
                (
                    ln_median,
                    if self.sd <= 1e-12 {
                        0.0
                    } else {
                        ln_normal_cdf(a)
                    },
                )
            }
            None => (0.0, 0.0),
        };
        LimitRisk {
            ln_limit,
            ln_median,
            ln_cdf_margin,
            ..self
        }
    }

    /// The same belief with the limit written for a type on which the job runs alone, at the
    /// profile's quantile, in `written_for_s`, its speed there over this type's off by
    /// `ratio_sd` (log).
    pub fn written_for(self, written_for_s: f64, ratio_sd: f64) -> LimitRisk {
        LimitRisk {
            written_for: Some((written_for_s.max(1e-9), ratio_sd.max(0.0))),
            ..self
        }
        .logs()
    }

    /// The belief's bits, for a cache keyed by what a decision depends on.
    pub fn key(&self) -> [u64; 7] {
        let (w, r) = self.written_for.unwrap_or((-1.0, -1.0));
        let (k, typical) = self
            .beside
            .map_or((-2.0, -1.0), |b| (b.measured.unwrap_or(-1.0), b.typical));
        [
            self.limit_s.to_bits(),
            self.median_per_quantile.to_bits(),
            self.sd.to_bits(),
            w.to_bits(),
            r.to_bits(),
            k.to_bits(),
            typical.to_bits(),
        ]
    }

    /// The chance that a run predicted to take `runtime_s` here passes the limit beside
    /// neighbours keeping `busy` of the GPU busy, the job as sensitive to them as believed
    /// ([`Beside`]): the prediction carried them at the typical contention, weighed as the
    /// sharing model weighs them (`pressure`), and for a service its nominal `load` (its busy
    /// over its share). Without neighbours, [`LimitRisk::probability`].
    pub fn probability_shared(&self, runtime_s: f64, busy: f64, pressure: f64, load: f64) -> f64 {
        let rest = if busy.is_finite() {
            busy.clamp(0.0, 1.0)
        } else {
            1.0
        };
        let Some(b) = self.beside.filter(|_| rest > 1e-9) else {
            return self.probability(runtime_s);
        };
        let now = 1.0 + b.typical * pressure.max(0.0);
        let load = if load.is_finite() { load.max(0.0) } else { 1.0 };
        let at = |k: f64| self.probability(runtime_s * b.factor(k, rest, now, load));
        match b.measured {
            Some(k) => at(k),
            None => {
                let prior = crate::contention::prior();
                if prior.is_empty() {
                    return at(b.typical);
                }
                prior.iter().map(|&(w, k)| w * at(k)).sum()
            }
        }
    }

    /// The chance that a run predicted to take `runtime_s` here (its runtime at the profile's
    /// quantile times the option's slowdown) passes the limit. With no spread at all the
    /// prediction is taken as exact.
    pub fn probability(&self, runtime_s: f64) -> f64 {
        let ln_limit = self.ln_limit;
        let Some((written_s, ratio_sd)) = self.written_for else {
            let median = runtime_s.max(1e-9) * self.median_per_quantile;
            let margin = ln_limit - median.ln();
            if self.sd <= 1e-12 {
                return if margin < 0.0 { 1.0 } else { 0.0 };
            }
            return 1.0 - normal_cdf(margin / self.sd);
        };
        // The run takes T alone on the type the limit is written for, T <= limit, and this
        // option's runtime is T times `ratio` (the option's over alone there, as predicted,
        // times the speed ratio's error): killed where T > limit / ratio. The error is
        // averaged over three Gauss-Hermite points.
        let ln_ratio = (runtime_s.max(1e-9) / written_s).ln();
        let ln_median = self.ln_median;
        const NODES: [(f64, f64); 3] = [
            (-1.732_050_807_568_877_2, 1.0 / 6.0),
            (0.0, 2.0 / 3.0),
            (1.732_050_807_568_877_2, 1.0 / 6.0),
        ];
        let mut p = 0.0;
        for (z, w) in NODES {
            let d = ln_ratio + ratio_sd * z;
            if d <= 0.0 {
                continue;
            }
            let killed = if self.sd <= 1e-12 {
                // Exact runs: T is its median, or the limit where the limit says less.
                f64::from(u8::from(ln_median.min(ln_limit) + d > ln_limit))
            } else {
                let a = (ln_limit - ln_median) / self.sd;
                1.0 - (ln_normal_cdf(a - d / self.sd) - self.ln_cdf_margin).exp()
            };
            p += w * killed.clamp(0.0, 1.0);
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::KilledOn;

    /// The chance that a learned job's run on `gpu`, predicted to take `runtime_s` there, passes
    /// `limit_s` ([`LimitRisk`]).
    fn kill_probability(
        cfg: &Config,
        class: &JobClass,
        gpu: &GpuType,
        runtime_s: f64,
        limit_s: f64,
    ) -> f64 {
        LimitRisk::of(cfg, class, gpu, None, limit_s).probability(runtime_s)
    }

    #[test]
    fn the_normal_quantile_matches_known_values() {
        for (p, z) in [
            (0.5, 0.0),
            (0.9, 1.281_551_565_5),
            (0.975, 1.959_963_985),
            (0.1, -1.281_551_565_5),
            (0.001, -3.090_232_306),
        ] {
            assert!(
                (normal_quantile(p) - z).abs() < 1e-7,
                "{p}: {}",
                normal_quantile(p)
            );
        }
    }

    #[test]
    fn the_normal_distribution_function_matches_known_values_and_inverts_the_quantile() {
        for (x, p) in [
            (0.0, 0.5),
            (1.0, 0.841_344_746),
            (-1.959_963_985, 0.025),
            (3.0, 0.998_650_102),
        ] {
            assert!((normal_cdf(x) - p).abs() < 2e-7, "{x}: {}", normal_cdf(x));
        }
        for p in [0.01, 0.1, 0.5, 0.9, 0.99] {
            assert!((normal_cdf(normal_quantile(p)) - p).abs() < 2e-7);
        }
    }

    /// At the profile's quantile the limit is met with that quantile's chance; runs that spread
    /// more make a kill likelier at the same margin; a job measured exactly is never at risk
    /// inside its limit.
    #[test]
    fn a_kill_is_as_likely_as_the_runs_spread_says() {
        let cfg = cfg();
        let reference = &cfg.gpu_types[cfg.reference_gpu];
        let base = cfg.class("bert-train").expect("bert-train").clone();
        let with = |sd: Option<f64>| JobClass {
            measured_speed: vec![(reference.name.clone(), 1.0)],
            runtime_log_sd: sd,
            ..base.clone()
        };
        let q = cfg.profiles.quantile;
        let p = kill_probability(&cfg, &with(Some(0.2)), reference, 1000.0, 1000.0);
        assert!((p - (1.0 - q)).abs() < 1e-6, "{p}");
        let wide = kill_probability(&cfg, &with(Some(0.4)), reference, 1000.0, 1100.0);
        let narrow = kill_probability(&cfg, &with(Some(0.1)), reference, 1000.0, 1100.0);
        assert!(wide > narrow, "{wide} {narrow}");
        assert!(kill_probability(&cfg, &with(Some(0.2)), reference, 1000.0, 3000.0) < 1e-4);
        assert!(kill_probability(&cfg, &with(Some(0.0)), reference, 1000.0, 1001.0).abs() < 1e-12);
        assert!(
            (kill_probability(&cfg, &with(None), reference, 1000.0, 999.0) - 1.0).abs() < 1e-12
        );
        // An unmeasured type adds the exponent's spread.
        let other = cfg
            .gpu_types
            .iter()
            .find(|g| {
                (g.relative_throughput / reference.relative_throughput)
                    .ln()
                    .abs()
                    > 0.3
            })
            .expect("a type of another speed");
        assert!(kill_probability(&cfg, &with(Some(0.0)), other, 1000.0, 1100.0) > 0.0);
    }

    /// Beside busy neighbours a training run slows by its contention, priced over the measured
    /// pairs where its runs measured none (the tail past what the limit allows is the chance of
    /// a kill), at its own sensitivity where they did (no higher than the worst pair); a
    /// service keeps pace until its load times the contention passes one; without neighbours
    /// nothing changes.
    #[test]
    fn neighbours_are_priced_at_the_pairs_spread_or_the_jobs_own() {
        let cfg = cfg();
        let reference = &cfg.gpu_types[cfg.reference_gpu];
        let exact = JobClass {
            runtime_log_sd: Some(0.0),
            ..measured_on_reference(&cfg)
        };
        let risk = |c: &JobClass| LimitRisk::of(&cfg, c, reference, None, 3000.0);
        let alone = risk(&exact).probability(1000.0);
        assert!(alone.abs() < 1e-12);
        assert!(
            (risk(&exact).probability_shared(1000.0, 0.0, 0.0, 1.0) - alone).abs() < 1e-12,
            "no neighbours"
        );
        // Half the GPU busy: killed where 1 + k / 2 > 3, k > 4: the pairs past it.
        let pairs = crate::contention::pair_sensitivities();
        #[allow(clippy::cast_precision_loss)]
        let past = pairs.iter().filter(|&&k| k > 4.0).count() as f64 / pairs.len() as f64;
        let p = risk(&exact).probability_shared(1000.0, 0.5, 0.0, 1.0);
        assert!((p - past).abs() < 0.03, "{p} against the pairs' {past}");
        // Busier neighbours, a likelier kill.
        assert!(risk(&exact).probability_shared(1000.0, 1.0, 0.0, 1.0) > p);
        // Its own runs measured k = 2 (contention 2 at half busy): safe; k = 6: killed.
        let with = |per_busy: f64| JobClass {
            neighbours: Some(crate::model::NeighbourSlowdown {
                per_busy,
                up_to_busy: 0.5,
            }),
            ..exact.clone()
        };
        assert!(risk(&with(2.0)).probability_shared(1000.0, 0.5, 0.0, 1.0) < 1e-12);
        assert!((risk(&with(6.0)).probability_shared(1000.0, 0.5, 0.0, 1.0) - 1.0).abs() < 1e-12);
        // The prediction already carried its neighbours at the typical contention.
        let kappa = cfg.policy.contention_kappa;
        let carried = 1000.0 * (1.0 + kappa * 0.5);
        assert!(
            risk(&with(5.0)).probability_shared(carried, 0.5, 0.5, 1.0) > 0.5,
            "1 + 5 / 2 = 3.5 > 3"
        );
        assert!(risk(&with(3.0)).probability_shared(carried, 0.5, 0.5, 1.0) < 1e-12);
        // No job is believed more sensitive than the worst pair measured.
        let worst = *pairs.last().expect("pairs");
        let roomy = LimitRisk::of(&cfg, &with(1e6), reference, None, 1000.0 * (2.0 + worst));
        assert!(roomy.probability_shared(1000.0, 1.0, 0.0, 1.0) < 1e-12);
        // A service at load 0.25 keeps pace up to contention 4 (k = 6 at half busy); past it,
        // at k = 10 (contention 6), it falls 1.5x behind, past a limit of 1.4x its runtime.
        let service = |per_busy: f64| JobClass {
            kind: JobKind::Inference,
            ..with(per_busy)
        };
        let tight = |c: &JobClass| LimitRisk::of(&cfg, c, reference, None, 1400.0);
        assert!(tight(&service(6.0)).probability_shared(1000.0, 0.5, 0.0, 0.25) < 1e-12);
        assert!(
            (tight(&service(10.0)).probability_shared(1000.0, 0.5, 0.0, 0.25) - 1.0).abs() < 1e-12
        );
    }

    #[test]
    fn the_log_distribution_function_holds_in_the_far_tail() {
        for x in [-2.9, -1.0, 0.0, 2.0] {
            assert!((ln_normal_cdf(x) - normal_cdf(x).ln()).abs() < 1e-5, "{x}");
        }
        // Phi(-6) = 9.8659e-10, Phi(-10) = 7.6199e-24.
        assert!((ln_normal_cdf(-6.0) - 9.8659e-10f64.ln()).abs() < 1e-3);
        assert!((ln_normal_cdf(-10.0) - 7.6199e-24f64.ln()).abs() < 1e-3);
    }

    /// A limit written for a type is evidence of the run: no slower than alone there, the run is
    /// never at risk, even where its runs' quantile says it takes longer than the limit; slower,
    /// the risk grows with the slowdown, is near certain where the runs say the run already
    /// fills the limit there, and is small where they leave room.
    #[test]
    fn a_limit_written_for_a_type_conditions_the_belief() {
        let limit = 3600.0;
        let tight = LimitRisk::from_spread(limit, 0.05, 0.0, 0.9).written_for(4000.0, 0.0);
        assert!(tight.probability(4000.0).abs() < 1e-12);
        assert!(tight.probability(2000.0).abs() < 1e-12);
        assert!(
            tight.probability(4400.0) > 0.5,
            "{}",
            tight.probability(4400.0)
        );
        let roomy = LimitRisk::from_spread(limit, 0.1, 0.0, 0.9).written_for(1000.0, 0.0);
        assert!(
            roomy.probability(1100.0) < 1e-6,
            "{}",
            roomy.probability(1100.0)
        );
        let (a, b, c) = (
            roomy.probability(2500.0),
            roomy.probability(3000.0),
            roomy.probability(3600.0),
        );
        assert!(a <= b && b <= c && c > 0.1, "{a} {b} {c}");
        // Exact runs: killed exactly where the run passes the limit.
        let exact = LimitRisk::from_spread(limit, 0.0, 0.0, 0.9).written_for(1000.0, 0.0);
        assert!(exact.probability(3500.0).abs() < 1e-12);
        assert!((exact.probability(3700.0) - 1.0).abs() < 1e-12);
        // An uncertain speed ratio puts some risk just below the written-for runtime.
        let unsure = LimitRisk::from_spread(limit, 0.0, 0.0, 0.9).written_for(3500.0, 0.3);
        let p = unsure.probability(3400.0);
        assert!(p > 0.0 && p < 0.5, "{p}");
    }

    /// Without a convention the limit is read against the runs alone (the quantile's chance);
    /// with the job allowed on a slower type the limit is written for, a run on a faster type
    /// alone is safe.
    #[test]
    fn the_site_convention_reads_the_limit_on_the_type_it_names() {
        let cfg = cfg();
        let reference = &cfg.gpu_types[cfg.reference_gpu];
        let slower = slowest_type(&cfg);
        let class = JobClass {
            measured_speed: vec![(reference.name.clone(), 1.0), (slower.name.clone(), 0.5)],
            runtime_log_sd: Some(0.3),
            ..cfg.class("bert-train").expect("bert-train").clone()
        };
        let here = alone_runtime(&class, reference, reference).0;
        let there = alone_runtime(&class, slower, reference).0;
        assert!(there > here * 1.2, "{there} vs {here}");
        // The limit covers the run alone on the slower type, just.
        let limit = there;
        let plain = LimitRisk::of(&cfg, &class, reference, None, limit);
        let read = LimitRisk::of(&cfg, &class, reference, Some(slower), limit);
        assert!(read.probability(here).abs() < 1e-12);
        assert!(read.probability(there * 0.99).abs() < 1e-12);
        assert!(plain.probability(there * 0.99) > 0.05);
        assert!(
            limit_slowdown(&cfg, &class, reference, Some(slower), limit) >= there / here - 1e-9
        );
    }

    /// A limit written for a type the runs never measured stands against the exponent's guess
    /// of the runtime there; one the runs measured there and found too short does not.
    #[test]
    fn a_limit_outweighs_a_guess_but_not_a_measurement() {
        let cfg = cfg();
        let reference = &cfg.gpu_types[cfg.reference_gpu];
        let slower = slowest_type(&cfg);
        let guessed = measured_on_reference(&cfg);
        let there = alone_runtime(&guessed, slower, reference).0;
        let short = there * 0.7;
        assert!(written_for_holds(&cfg, &guessed, slower, short));
        // The user's run there fits, so alone on the faster type is never at risk.
        let here = alone_runtime(&guessed, reference, reference).0;
        let read = LimitRisk::of(&cfg, &guessed, reference, Some(slower), short);
        assert!(read.probability(here * 0.99).abs() < 1e-12);
        let measured = JobClass {
            measured_speed: vec![
                (reference.name.clone(), 1.0),
                (slower.name.clone(), here / there),
            ],
            ..guessed
        };
        assert!(!written_for_holds(&cfg, &measured, slower, short));
        assert!(written_for_holds(&cfg, &measured, slower, there * 1.5));
    }

    /// A kill at the limit with a whole GPU is a measurement: it rules out its type and every
    /// type the job runs no faster on, and it overrules the user's word for the type the limit
    /// is written for when that type is one of them. A longer limit, a faster type or a kill with
    /// a share (its neighbours or its share may have slowed it) says nothing of the sort.
    #[test]
    fn a_kill_with_a_gpu_of_its_own_rules_out_its_type_and_every_slower_one() {
        let cfg = cfg();
        let reference = &cfg.gpu_types[cfg.reference_gpu];
        let slower = slowest_type(&cfg);
        let faster = cfg
            .gpu_types
            .iter()
            .max_by(|a, b| a.relative_throughput.total_cmp(&b.relative_throughput))
            .expect("types");
        assert!(faster.relative_throughput > reference.relative_throughput);
        let base = measured_on_reference(&cfg);
        let limit = alone_runtime(&base, slower, reference).0 * 1.2;
        assert!(!ran_out_of_time(&cfg, &base, slower, limit));
        assert!(written_for_holds(&cfg, &base, slower, limit));
        let kill = |share_pct| KilledOn {
            gpu_type: reference.name.clone(),
            share_pct,
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            limit_s: Some(limit as u32),
        };
        let killed = JobClass {
            limit_kills: vec![kill(None)],
            ..base.clone()
        };
        assert!(ran_out_of_time(&cfg, &killed, reference, limit));
        assert!(ran_out_of_time(&cfg, &killed, slower, limit));
        assert!(!ran_out_of_time(&cfg, &killed, faster, limit));
        assert!(!ran_out_of_time(&cfg, &killed, slower, limit * 2.0));
        assert!(!written_for_holds(&cfg, &killed, slower, limit));
        assert!(written_for_holds(&cfg, &killed, slower, limit * 2.0));
        // Its own speeds order the types, not the catalog's: measured as fast on the slowest
        // type as on the reference, the kill on the reference rules it out too, and measured
        // faster there, it does not.
        let speeds = |s: f64| JobClass {
            measured_speed: vec![(reference.name.clone(), 1.0), (slower.name.clone(), s)],
            ..killed.clone()
        };
        assert!(ran_out_of_time(&cfg, &speeds(1.0), slower, limit));
        assert!(!ran_out_of_time(&cfg, &speeds(1.5), slower, limit));
        let shared = JobClass {
            limit_kills: vec![kill(Some(50))],
            ..base
        };
        assert!(!ran_out_of_time(&cfg, &shared, slower, limit));
        assert!(written_for_holds(&cfg, &shared, slower, limit));
    }

    /// A learned training job whose runs measured the reference type only.
    fn measured_on_reference(cfg: &Config) -> JobClass {
        let reference = &cfg.gpu_types[cfg.reference_gpu];
        JobClass {
            measured_speed: vec![(reference.name.clone(), 1.0)],
            runtime_log_sd: Some(0.1),
            ..cfg.class("bert-train").expect("bert-train").clone()
        }
    }

    /// The catalog's slowest type (slower than the reference type).
    fn slowest_type(cfg: &Config) -> &GpuType {
        let reference = &cfg.gpu_types[cfg.reference_gpu];
        cfg.gpu_types
            .iter()
            .filter(|g| g.relative_throughput < reference.relative_throughput)
            .min_by(|a, b| a.relative_throughput.total_cmp(&b.relative_throughput))
            .expect("a slower type")
    }

    fn cfg() -> Config {
        Config::parse(
            crate::config::BUNDLED_CONFIG,
            std::path::Path::new("h.toml"),
        )
        .expect("valid")
    }

    #[test]
    fn a_measured_type_carries_no_more_than_the_runs_and_an_unmeasured_one_more_the_farther_it_is()
    {
        let cfg = cfg();
        let reference = &cfg.gpu_types[cfg.reference_gpu];
        let base = cfg
            .classes
            .iter()
            .find(|c| c.kind == JobKind::Training)
            .expect("a training class")
            .clone();
        let learned = JobClass {
            measured_speed: vec![(reference.name.clone(), 1.0)],
            ..base.clone()
        };
        assert!(
            exponent_spread(&cfg) > 0.0,
            "the catalog's exponents differ"
        );
        assert!(
            (limit_runtime(&cfg, &learned, reference).0
                - alone_runtime(&learned, reference, reference).0)
                .abs()
                < 1e-9
        );
        // Other types, by distance in speed from the measured one.
        let mut by_distance: Vec<(f64, f64)> = cfg
            .gpu_types
            .iter()
            .filter(|g| g.name != reference.name)
            .map(|g| {
                let d = (g.relative_throughput / reference.relative_throughput)
                    .ln()
                    .abs();
                let r =
                    limit_runtime(&cfg, &learned, g).0 / alone_runtime(&learned, g, reference).0;
                (d, r)
            })
            .collect();
        by_distance.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in by_distance.windows(2) {
            assert!(w[1].1 >= w[0].1 - 1e-12, "{by_distance:?}");
        }
        assert!(
            by_distance.iter().all(|&(d, r)| d == 0.0 || r > 1.0),
            "{by_distance:?}"
        );
        // A service's margin is its need's (`sized_class`), not this one.
        let service = JobClass {
            kind: JobKind::Inference,
            measured_speed: vec![],
            ..base
        };
        for g in &cfg.gpu_types {
            assert!(type_log_sd(&cfg, &service, g).abs() < 1e-12);
        }
    }
}
