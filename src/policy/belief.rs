//! What is known of a learned job's runtime on a GPU type, as a belief rather than a point: its
//! log runtime is normal about what its runs measured, with their own spread
//! (`JobClass::runtime_log_sd`; the profile keeps its runtime at `[profiles] quantile`), and on a
//! type they never measured, its runtime carried there by the speed exponent, whose error is the
//! catalog's spread of exponents times how far the type's speed is from a measured one. The
//! clock holds the job's limit at that quantile of the belief ([`limit_runtime`]); the chance
//! that a run still passes it ([`kill_probability`]) is priced in the option's cost
//! (`cost::kill_j`). No margin of its own keeps a job off shared GPUs or lower clocks. Pure.

use crate::config::Config;
use crate::model::{GpuType, JobClass, JobKind, alone_runtime};
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
    if class.kind != JobKind::Training || class.measured_speed.iter().any(|(t, _)| *t == gpu.name) {
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

/// The most a learned job may slow down on `gpu` and keep `limit_s` at the belief's quantile
/// ([`limit_runtime`]), never below running alone at the default clock: the bound placement
/// plans its options with and the node helper clocks its GPU by (`node_clock::tenant_bound`).
pub fn limit_slowdown(cfg: &Config, class: &JobClass, gpu: &GpuType, limit_s: f64) -> f64 {
    (limit_s / limit_runtime(cfg, class, gpu).0.max(1e-9)).max(1.0)
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

/// What is believed of a learned job's runtime on one GPU type against its time limit: its log
/// runtime is normal about the median its runs give, with their own spread
/// (`JobClass::runtime_log_sd`, none where they cannot tell) and, on a type they never measured,
/// the exponent's ([`type_log_sd`]). Placement prices an option's kill with it, and the sharing
/// optimizer each clock's (`share::optimize`), so the node helper's clock and the option
/// placement chose carry the same risk.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LimitRisk {
    /// The job's time limit, what a killed run throws away.
    pub limit_s: f64,
    /// The median runtime over the runtime at the profile's quantile.
    median_per_quantile: f64,
    /// The log runtime's standard deviation.
    sd: f64,
}

impl LimitRisk {
    /// The belief for `class` on `gpu` under `limit_s`.
    pub fn of(cfg: &Config, class: &JobClass, gpu: &GpuType, limit_s: f64) -> LimitRisk {
        LimitRisk::from_spread(
            limit_s,
            class.runtime_log_sd.unwrap_or(0.0),
            type_log_sd(cfg, class, gpu),
            cfg.profiles.quantile,
        )
    }

    /// The belief for runtimes kept at `quantile` of runs whose log runtimes spread by
    /// `runs_sd`, on a type whose speed adds `type_sd`, under `limit_s`.
    pub fn from_spread(limit_s: f64, runs_sd: f64, type_sd: f64, quantile: f64) -> LimitRisk {
        let runs = runs_sd.max(0.0);
        let z = normal_quantile(quantile).max(0.0);
        LimitRisk {
            limit_s: limit_s.max(1e-9),
            median_per_quantile: (-z * runs).exp(),
            sd: runs.hypot(type_sd.max(0.0)),
        }
    }

    /// The belief's bits, for a cache keyed by what a decision depends on.
    pub fn key(&self) -> [u64; 3] {
        [
            self.limit_s.to_bits(),
            self.median_per_quantile.to_bits(),
            self.sd.to_bits(),
        ]
    }

    /// The chance that a run predicted to take `runtime_s` (its runtime at the profile's
    /// quantile times the option's slowdown) passes the limit. With no spread at all the
    /// prediction is taken as exact.
    pub fn probability(&self, runtime_s: f64) -> f64 {
        let median = runtime_s.max(1e-9) * self.median_per_quantile;
        let margin = (self.limit_s / median).ln();
        if self.sd <= 1e-12 {
            return if margin < 0.0 { 1.0 } else { 0.0 };
        }
        1.0 - normal_cdf(margin / self.sd)
    }
}

/// The chance that a learned job's run on `gpu`, predicted to take `runtime_s` there, passes
/// `limit_s` ([`LimitRisk`]).
pub fn kill_probability(
    cfg: &Config,
    class: &JobClass,
    gpu: &GpuType,
    runtime_s: f64,
    limit_s: f64,
) -> f64 {
    LimitRisk::of(cfg, class, gpu, limit_s).probability(runtime_s)
}

#[cfg(test)]
mod tests {
    use super::*;

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
