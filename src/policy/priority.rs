//! The priority adjustment: what a job's own heshare options cost the cluster in energy.
//!
//! The yardstick is the same job placed by heshare as its user's GRES asked (whole GPUs, or the
//! MPS share given) with the cluster's energy weight, on the same view. A job that sets no
//! option gets 0: naming a class is not a way to jump the queue. Options that spend more energy
//! than the yardstick (`--energy-policy=performance`, `--gpu-share=exclusive` where the GRES
//! asked a share) move the job back by up to `nice_range`; options that spend less
//! (`--gpu-share=auto` letting heshare size a share, `--energy-policy=energy`) move it forward by
//! what they save. Over a workload where most jobs keep the defaults the average adjustment is
//! close to zero.
//!
//! It only nudges Slurm's multifactor priority through `nice`; it never sets `priority`, which
//! would freeze the job's priority.

use crate::config::Config;

/// `nice_range * (chosen / reference - 1)`, rounded, within ±nice_range.
pub fn nice_adjustment(cfg: &Config, chosen_energy_j: f64, reference_energy_j: f64) -> i32 {
    if !(reference_energy_j > 0.0 && chosen_energy_j.is_finite()) {
        return 0;
    }
    let range = f64::from(cfg.policy.nice_range);
    let nice = (range * (chosen_energy_j / reference_energy_j - 1.0))
        .round()
        .clamp(-range, range);
    // Bounded by ±nice_range <= 10000 (validated), so the cast is exact.
    #[allow(clippy::cast_possible_truncation)]
    let nice = nice as i32;
    nice
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::BUNDLED_CONFIG;
    use crate::policy::{ClusterView, EnergyPolicy, JobRequest, ShareRequest, place};
    use std::path::Path;

    fn cfg() -> Config {
        Config::parse(BUNDLED_CONFIG, Path::new("h.toml")).expect("valid")
    }

    #[test]
    fn defaults_cost_nothing_and_waste_moves_a_job_back() {
        // The yardstick works at any weight; at a balanced one performance costs visibly more.
        let mut cfg = cfg();
        cfg.policy.energy_weight = 0.5;
        let view = ClusterView::idle_types(&cfg);
        for c in &cfg.classes {
            let plan = place(&cfg, &view, &JobRequest::new(&c.name)).expect("placed");
            assert_eq!(
                plan.decision.nice, 0,
                "{}: a class alone is no queue jump",
                c.name
            );
        }
        // Alone on a GPU a share draws what the whole GPU would (its idle power included): no
        // adjustment either way until there is someone to share with.
        let whole = JobRequest {
            share: ShareRequest::Exclusive,
            ..JobRequest::new("vit-infer")
        };
        let d = place(&cfg, &view, &whole).expect("placed").decision;
        assert_eq!(d.nice, 0);
        let fast = JobRequest {
            energy_policy: Some(EnergyPolicy::Performance),
            ..JobRequest::new("bert-train")
        };
        let d = place(&cfg, &view, &fast).expect("placed").decision;
        assert!(d.nice > 0, "performance spends more energy: {}", d.nice);
        let green = JobRequest {
            energy_policy: Some(EnergyPolicy::Energy),
            ..JobRequest::new("bert-train")
        };
        let d = place(&cfg, &view, &green).expect("placed").decision;
        assert!(d.nice <= 0, "energy policy saves: {}", d.nice);
    }

    #[test]
    fn the_adjustment_is_bounded() {
        let cfg = cfg();
        assert_eq!(nice_adjustment(&cfg, 1e9, 1.0), 100);
        assert_eq!(nice_adjustment(&cfg, 0.0, 1.0), -100);
        assert_eq!(nice_adjustment(&cfg, 1.0, 0.0), 0);
        assert_eq!(nice_adjustment(&cfg, f64::NAN, 1.0), 0);
    }
}
