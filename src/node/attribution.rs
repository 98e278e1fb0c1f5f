//! Splitting a GPU's measured energy among the jobs that shared it. Pure: the node helper feeds
//! it counter readings, what the driver measured per process, and the model's weights; the tests
//! feed it numbers.
//!
//! Two bases, and every record says which it got:
//! - **measured** ([`measured_split`]): the GPU's static draw (its idle power over the interval)
//!   is split by the share each job holds; the rest, the energy the work itself cost, by the GPU
//!   busy time the driver measured for each job's processes. A job's declared class plays no
//!   part, so claiming a light class moves nothing onto a co-tenant.
//! - **model** ([`model_weights`] + [`split`]): where the driver measured nothing per process
//!   (no NVML, accounting off, or work it charged to the MPS server), each job's part is its
//!   predicted power at the GPU's clock over the GPU's predicted power.
//!
//! Either way the idle power of the part of the GPU no job holds goes to `idle`, and the parts
//! add up to the measured energy exactly.

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

/// A weight or amount that is negative or not finite counts as zero.
fn clean(w: f64) -> f64 {
    if w.is_finite() && w > 0.0 { w } else { 0.0 }
}

/// Splits `energy` in proportion to `weights` (one per job) and `idle_weight`. Negative or
/// non-finite weights count as zero; with no positive weight at all the energy is idle. The last
/// part takes the rounding remainder, so the parts always sum to `energy`.
pub fn split(energy: Joules, weights: &[f64], idle_weight: f64) -> (Vec<Joules>, Joules) {
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

/// What the driver measured on one GPU over one interval, per job: GPU busy time of the job's
/// processes (percent-seconds: utilisation times duration), and busy time no job could be found
/// for (a process outside every job's cgroup, such as the MPS server).
#[derive(Debug, Clone, PartialEq)]
pub struct MeasuredWork {
    pub busy: Vec<f64>,
    pub unmapped: f64,
}

/// One interval's split on the measured basis.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasuredSplit {
    pub parts: Vec<Joules>,
    pub idle: Joules,
    /// Per job, the part of `parts` that came from measurement (the rest is unmapped work
    /// spread by the model's weights).
    pub measured: Vec<Joules>,
}

/// Splits `energy` of an interval of `dt_s` seconds on a GPU that draws `idle_w` doing nothing.
/// `shares` are the fractions of the GPU each job holds (a job waiting for another user's MPS
/// server holds its share and gets its static part, but has no busy time). Busy time no job
/// could be found for is spread by `model_weights`; with no busy time at all the work's energy
/// is spread by share. Parts plus idle equal `energy`; none is negative.
pub fn measured_split(
    energy: Joules,
    dt_s: f64,
    idle_w: f64,
    shares: &[f64],
    work: &MeasuredWork,
    model_weights: &[f64],
) -> MeasuredSplit {
    let n = shares.len();
    let e = clean(energy.0);
    let held: Vec<f64> = shares.iter().map(|&s| clean(s).min(1.0)).collect();
    let held_sum: f64 = held.iter().sum();
    // Shares over 1 (never from Slurm) are scaled down so static parts never exceed the static.
    let scale = if held_sum > 1.0 { 1.0 / held_sum } else { 1.0 };
    let stat = (clean(idle_w) * clean(dt_s)).min(e);
    let dynamic = e - stat;
    let busy: Vec<f64> = (0..n)
        .map(|i| clean(work.busy.get(i).copied().unwrap_or(0.0)))
        .collect();
    let unmapped = clean(work.unmapped);
    let total_busy: f64 = busy.iter().sum::<f64>() + unmapped;
    let model: Vec<f64> = (0..n)
        .map(|i| clean(model_weights.get(i).copied().unwrap_or(0.0)))
        .collect();
    let model_sum: f64 = model.iter().sum();
    let mut parts = Vec::with_capacity(n);
    let mut measured = Vec::with_capacity(n);
    for i in 0..n {
        let static_i = stat * held[i] * scale;
        let (by_measure, by_model) = if total_busy > 0.0 {
            let spread = if model_sum > 0.0 {
                model[i] / model_sum
            } else if held_sum > 0.0 {
                held[i] / held_sum
            } else {
                0.0
            };
            (
                dynamic * busy[i] / total_busy,
                dynamic * unmapped / total_busy * spread,
            )
        } else if held_sum > 0.0 {
            (dynamic * held[i] / held_sum, 0.0)
        } else {
            (0.0, 0.0)
        };
        parts.push(Joules(static_i + by_measure + by_model));
        measured.push(Joules(static_i + by_measure));
    }
    let given: f64 = parts.iter().map(|p| p.0).sum();
    MeasuredSplit {
        idle: Joules((e - given).max(0.0) + (energy.0 - e).max(0.0)),
        parts,
        measured,
    }
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
    use crate::config::BUNDLED_CONFIG;
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
        let params = ModelParams::of(&cfg);
        let (w, idle) = model_weights(gpu, reference, &tenants, gpu.default_sm_clock, params);
        assert!((idle - gpu.idle_power.0 * 0.5).abs() < 1e-9);
        let total = predict(gpu, reference, &tenants, gpu.default_sm_clock, params).power;
        assert!(
            (w[0] + idle - total.0).abs() < 1e-6,
            "{w:?} + {idle} != {total:?}"
        );
    }

    #[test]
    fn a_job_that_claims_a_light_class_pays_for_the_work_it_did() {
        // 600 s at 250 W on a GPU idling at 50 W: 30 kJ static, 120 kJ of work. The liar did
        // three quarters of the work; the model (fed its claimed class) thought it did little.
        let work = MeasuredWork {
            busy: vec![3000.0, 9000.0],
            unmapped: 0.0,
        };
        let s = measured_split(
            Joules(150_000.0),
            600.0,
            50.0,
            &[0.5, 0.5],
            &work,
            &[200.0, 10.0],
        );
        assert!((s.parts[0].0 - (15_000.0 + 30_000.0)).abs() < 1e-6, "{s:?}");
        assert!((s.parts[1].0 - (15_000.0 + 90_000.0)).abs() < 1e-6, "{s:?}");
        assert_eq!(s.parts, s.measured);
        assert!(s.idle.0.abs() < 1e-6);
        // Unmapped work (the MPS server's) goes by the model, and is not counted as measured.
        let w2 = MeasuredWork {
            busy: vec![0.0, 0.0],
            unmapped: 100.0,
        };
        let s2 = measured_split(
            Joules(150_000.0),
            600.0,
            50.0,
            &[0.5, 0.25],
            &w2,
            &[3.0, 1.0],
        );
        assert!(
            (s2.parts[0].0 - (15_000.0 + 90_000.0)).abs() < 1e-6,
            "{s2:?}"
        );
        assert!((s2.measured[0].0 - 15_000.0).abs() < 1e-6, "{s2:?}");
        assert!(
            (s2.idle.0 - 7_500.0).abs() < 1e-6,
            "a quarter unheld: {s2:?}"
        );
    }

    proptest! {
        /// The measured split conserves energy, gives no negative part, and never charges a job
        /// less than its static part plus its measured fraction of the work.
        #[test]
        fn measured_parts_sum_to_energy_and_follow_measurement(
            energy in 0.0f64..1e8,
            dt in 0.0f64..1e5,
            idle_w in 0.0f64..200.0,
            jobs in proptest::collection::vec((0.0f64..1.0, 0.0f64..1e6, 0.0f64..500.0), 0..8),
            unmapped in 0.0f64..1e6,
        ) {
            let shares: Vec<f64> = jobs.iter().map(|j| j.0).collect();
            let work = MeasuredWork { busy: jobs.iter().map(|j| j.1).collect(), unmapped };
            let model: Vec<f64> = jobs.iter().map(|j| j.2).collect();
            let s = measured_split(Joules(energy), dt, idle_w, &shares, &work, &model);
            let sum: f64 = s.parts.iter().map(|p| p.0).sum::<f64>() + s.idle.0;
            prop_assert!((sum - energy).abs() <= 1e-9 * energy.max(1.0));
            prop_assert!(s.parts.iter().all(|p| p.0 >= 0.0) && s.idle.0 >= 0.0);
            let total_busy: f64 = work.busy.iter().sum::<f64>() + unmapped;
            let stat = (idle_w * dt).min(energy);
            let held: f64 = shares.iter().sum();
            let scale = if held > 1.0 { 1.0 / held } else { 1.0 };
            for (i, p) in s.parts.iter().enumerate() {
                prop_assert!(s.measured[i].0 <= p.0 + 1e-9 * energy.max(1.0));
                if total_busy > 0.0 {
                    let floor = stat * shares[i] * scale + (energy - stat) * work.busy[i] / total_busy;
                    prop_assert!(p.0 >= floor - 1e-9 * energy.max(1.0), "{} < {}", p.0, floor);
                }
            }
        }

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
