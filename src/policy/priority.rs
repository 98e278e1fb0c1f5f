//! The priority adjustment: what a job's own heshare options cost the site, as a Slurm site
//! factor, priced by placement's one cost (`policy::cost`) at the site's own rate.
//!
//! The yardstick is the same job placed by heshare as its user's GRES asked (whole GPUs, or the
//! MPS share given) at the site's rate, on the same view. A job that sets no option gets 0:
//! naming a class is not a way to jump the queue. Options whose choice costs the site more than
//! the yardstick (`--energy-policy=performance` or `energy`, which rank by one term alone,
//! `--gpu-share=exclusive` where the GRES asked a share) move the job back by up to
//! `priority_range`; options that give heshare more to choose from (`--gpu-share=auto` letting
//! it size a share of a whole-GPU request) move it forward by what they save. Over a workload
//! where most jobs keep the defaults the average adjustment is close to zero.
//!
//! The plugin writes it into Slurm's site factor (`job_desc->site_factor`), which
//! `priority/multifactor` adds to the job's priority and which only operators may change: a
//! user's `scontrol update job nice=` leaves it, and the user's own nice stays theirs. The
//! snapshot thread re-prices pending jobs as the cluster changes.

use crate::config::Config;

/// `priority_range * (1 - chosen / reference)`, rounded, within ±priority_range, of the two
/// choices' costs at the site's rate: positive moves the job forward (its choice costs the site
/// less than the yardstick), negative moves it back.
pub fn site_factor(cfg: &Config, chosen_cost_j: f64, reference_cost_j: f64) -> i32 {
    if !(reference_cost_j > 0.0 && chosen_cost_j.is_finite() && chosen_cost_j >= 0.0) {
        return 0;
    }
    let range = f64::from(cfg.policy.priority_range);
    let factor = (range * (1.0 - chosen_cost_j / reference_cost_j))
        .round()
        .clamp(-range, range);
    // Bounded by ±priority_range <= 1_000_000 (validated), so the cast is exact.
    #[allow(clippy::cast_possible_truncation)]
    let factor = factor as i32;
    factor
}

/// A job whose user said what it needs (`--gres=mps:P --gpu-share=auto`) and let heshare size
/// the share: a share larger than P is heshare's margin for that need, not a cost of the user's
/// choice, so the factor of such a job is never negative.
pub fn for_sized_share(factor: i32) -> i32 {
    factor.max(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BUNDLED_CONFIG;
    use crate::policy::{ClusterView, EnergyPolicy, JobRequest, ShareRequest, place};
    use crate::units::SharePct;
    use std::path::Path;

    fn cfg() -> Config {
        Config::parse(BUNDLED_CONFIG, Path::new("h.toml")).expect("valid")
    }

    #[test]
    fn defaults_cost_nothing_and_waste_moves_a_job_back() {
        // The yardstick works at any weight; at a balanced one performance costs visibly more.
        let mut cfg = cfg();
        cfg.policy.time_value_kwh_per_gpu_hour = 0.3;
        let view = ClusterView::idle_types(&cfg);
        for c in &cfg.classes {
            let plan = place(&cfg, &view, &JobRequest::new(&c.name)).expect("placed");
            assert_eq!(
                plan.decision.site_factor, 0,
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
        assert_eq!(d.site_factor, 0);
        let fast = JobRequest {
            energy_policy: Some(EnergyPolicy::Performance),
            ..JobRequest::new("bert-train")
        };
        let d = place(&cfg, &view, &fast).expect("placed").decision;
        assert!(
            d.site_factor < 0,
            "performance spends more energy: {}",
            d.site_factor
        );
        let green = JobRequest {
            energy_policy: Some(EnergyPolicy::Energy),
            ..JobRequest::new("bert-train")
        };
        let d = place(&cfg, &view, &green).expect("placed").decision;
        assert!(d.site_factor >= 0, "energy policy saves: {}", d.site_factor);
    }

    #[test]
    fn a_share_heshare_sized_for_the_users_need_costs_the_user_nothing() {
        let cfg = cfg();
        let view = ClusterView::idle_types(&cfg);
        // The user says the service needs 10% of a V100; heshare's margins size it larger.
        let sized = JobRequest {
            share: ShareRequest::Auto,
            reference_share: Some(ShareRequest::Pct(SharePct::new(10).expect("10"))),
            demand_pct: Some(10),
            ..JobRequest::new("vit-infer")
        };
        let d = place(&cfg, &view, &sized).expect("placed").decision;
        assert!(d.share_pct >= 10, "{d:?}");
        assert!(d.site_factor >= 0, "{}", d.site_factor);
    }

    #[test]
    fn the_adjustment_is_bounded_and_signed_as_slurm_adds_it() {
        let cfg = cfg();
        let r = i32::try_from(cfg.policy.priority_range).expect("small");
        assert_eq!(site_factor(&cfg, 1e9, 1.0), -r, "waste: moved back");
        assert_eq!(site_factor(&cfg, 0.0, 1.0), r, "saving: moved forward");
        assert_eq!(site_factor(&cfg, 0.5, 1.0), r / 2);
        assert_eq!(site_factor(&cfg, 1.0, 0.0), 0);
        assert_eq!(site_factor(&cfg, f64::NAN, 1.0), 0);
        assert_eq!(for_sized_share(-5), 0);
        assert_eq!(for_sized_share(7), 7);
    }
}
