//! Splitting a GPU's measured energy among the jobs that shared it. Pure: the node helper feeds
//! it counter readings and the model's weights, the tests feed it numbers.
//!
//! Under MPS, NVML charges all client work to the MPS server process, so a per-job split can only
//! come from a model: each job's share of an interval is its predicted power at the GPU's clock
//! over the GPU's predicted power. The idle power of the part of the GPU no job holds goes to
//! `idle`. Whatever the model says, the parts add up to the measured energy exactly.

use crate::model::{GpuType, ModelParams, Tenant, predict};
use crate::units::{Joules, Mhz};

/// Energy between two readings of a counter in millijoules. A reading below the previous one
/// means the counter restarted from zero (driver reload): the energy since the restart is all
/// that is known, and the flag says so.
pub fn counter_delta(prev_mj: u64, now_mj: u64) -> (Joules, bool) {
    if now_mj >= prev_mj {
        (Joules(mj_to_j(now_mj - prev_mj)), false)
    } else {
        (Joules(mj_to_j(now_mj)), true)
    }
}

fn mj_to_j(mj: u64) -> f64 {
    // Counters stay far below 2^53 mJ (2.8 GWh), so the conversion is exact.
    #[allow(clippy::cast_precision_loss)]
    let v = mj as f64;
    v / 1000.0
}

/// Splits `energy` in proportion to `weights` (one per job) and `idle_weight`. Negative or
/// non-finite weights count as zero; with no positive weight at all the energy is idle. The last
/// part takes the rounding remainder, so the parts always sum to `energy`.
pub fn split(energy: Joules, weights: &[f64], idle_weight: f64) -> (Vec<Joules>, Joules) {
    let clean = |w: f64| if w.is_finite() && w > 0.0 { w } else { 0.0 };
    let idle_w = clean(idle_weight);
    let total: f64 = weights.iter().map(|&w| clean(w)).sum::<f64>() + idle_w;
    if total <= 0.0 {
        return (vec![Joules(0.0); weights.len()], energy);
    }
    let parts: Vec<Joules> = weights
        .iter()
        .map(|&w| Joules(energy.0 * clean(w) / total))
        .collect();
    let given: f64 = parts.iter().map(|p| p.0).sum();
    (parts, Joules(energy.0 - given))
}

/// The model's weights for `tenants` on one GPU at `clock`: each job's predicted power, and for
/// idle the idle power of the unallocated part of the GPU.
pub fn model_weights(
    gpu: &GpuType,
    reference: &GpuType,
    tenants: &[Tenant<'_>],
    clock: Mhz,
    params: ModelParams,
) -> (Vec<f64>, f64) {
    if tenants.is_empty() {
        return (Vec::new(), 1.0);
    }
    let p = predict(gpu, reference, tenants, clock, params);
    let held: f64 = tenants.iter().map(|t| t.share.fraction()).sum();
    // `predict` spreads the idle power over the jobs by share; take back the unheld part.
    let unheld = (1.0 - held).max(0.0);
    let idle = gpu.idle_power.0 * unheld;
    let scale = if held > 0.0 { held.min(1.0) } else { 1.0 };
    let weights = p
        .jobs
        .iter()
        .zip(tenants)
        .map(|(j, t)| {
            let idle_part = gpu.idle_power.0 * t.share.fraction() / held.max(1e-12);
            (j.power.0 - idle_part) + idle_part * scale
        })
        .collect();
    (weights, idle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::BUNDLED_CONFIG;
    use crate::config::Config;
    use crate::units::SharePct;
    use proptest::prelude::*;
    use std::path::Path;

    #[test]
    fn counter_reset_is_flagged_and_counts_from_zero() {
        assert_eq!(counter_delta(5_000, 7_500), (Joules(2.5), false));
        assert_eq!(counter_delta(9_000_000, 1_000), (Joules(1.0), true));
        assert_eq!(counter_delta(7, 7), (Joules(0.0), false));
    }

    #[test]
    fn no_weight_means_idle() {
        let (parts, idle) = split(Joules(10.0), &[0.0, f64::NAN], 0.0);
        assert_eq!(parts, vec![Joules(0.0), Joules(0.0)]);
        assert_eq!(idle, Joules(10.0));
    }

    #[test]
    fn half_held_gpu_leaves_half_its_idle_power_to_idle() {
        let cfg = Config::parse(BUNDLED_CONFIG, Path::new("h.toml")).expect("valid");
        let gpu = &cfg.gpu_types[cfg.gpu_type("a100").expect("a100")];
        let reference = &cfg.gpu_types[cfg.reference_gpu];
        let class = cfg.class("vit-infer").expect("class");
        let tenants = [Tenant {
            class,
            share: SharePct::new(50).expect("pct"),
            user: 1,
        }];
        let params = ModelParams {
            contention_kappa: cfg.policy.contention_kappa,
        };
        let (w, idle) = model_weights(gpu, reference, &tenants, gpu.default_sm_clock, params);
        assert!((idle - gpu.idle_power.0 * 0.5).abs() < 1e-9);
        let total = predict(gpu, reference, &tenants, gpu.default_sm_clock, params).power;
        assert!(
            (w[0] + idle - total.0).abs() < 1e-6,
            "{w:?} + {idle} != {total:?}"
        );
    }

    proptest! {
        /// Conservation: the parts sum to the measured energy, none is negative.
        #[test]
        fn parts_sum_to_energy(
            energy in 0.0f64..1e9,
            weights in proptest::collection::vec(-1.0f64..500.0, 0..10),
            idle in -1.0f64..100.0,
        ) {
            let (parts, rest) = split(Joules(energy), &weights, idle);
            prop_assert_eq!(parts.len(), weights.len());
            let sum: f64 = parts.iter().map(|p| p.0).sum::<f64>() + rest.0;
            prop_assert!((sum - energy).abs() <= 1e-9 * energy.max(1.0));
            prop_assert!(parts.iter().all(|p| p.0 >= 0.0));
            prop_assert!(rest.0 >= -1e-9 * energy.max(1.0));
        }
    }
}
