//! Property tests of the policy's promises (the optimizer's and placement's invariants), run on
//! the bundled catalog with generated job classes, co-located jobs and requests.

use heshare::cli::BUNDLED_CONFIG;
use heshare::config::Config;
use heshare::model::{JobClass, JobKind};
use heshare::policy::belief::LimitRisk;
use heshare::policy::share::clock_cost;
use heshare::policy::{
    ClusterView, EnergyPolicy, GpuSlot, JobRequest, PlacedJob, ShareJob, ShareParams, ShareRequest,
    ShareSpec, optimize, place,
};
use heshare::units::SharePct;
use proptest::prelude::*;
use std::path::Path;

fn cfg() -> Config {
    Config::parse(BUNDLED_CONFIG, Path::new("heshare.toml")).expect("bundled config is valid")
}

fn class_strategy() -> impl Strategy<Value = JobClass> {
    (
        prop_oneof![Just(JobKind::Training), Just(JobKind::Inference)],
        1.0f64..1e5,
        0.0f64..2.0,
        0.0f64..1.0,
        0.0f64..1.0,
        0.0f64..1.0,
        0.01f64..1.5,
        prop_oneof![Just(0.0f64), 0.0f64..1.0],
    )
        .prop_map(|(kind, runtime, a, c, u, m, d, k)| JobClass {
            name: "generated".into(),
            kind,
            description: String::new(),
            reference_runtime_s: runtime,
            speed_exponent: a,
            clock_bound_fraction: c,
            clock_knee: k,
            power_util: u,
            mem_intensity: m,
            memory_gib: 1.0,
            demand: if kind == JobKind::Training {
                d.min(1.0)
            } else {
                d
            },
            slowdown_bound: None,
            measured_speed: vec![],
            limit_kills: vec![],
            neighbours: None,
            runtime_log_sd: None,
        })
}

#[derive(Debug, Clone)]
struct GenJob {
    class: JobClass,
    share: Option<u8>,
    user: u32,
    bound: f64,
    /// A time limit as a multiple of the class's reference runtime, and its runs' log-spread.
    risk: Option<(f64, f64)>,
}

fn jobs_strategy() -> impl Strategy<Value = Vec<GenJob>> {
    prop::collection::vec(
        (
            class_strategy(),
            prop::option::of(1u8..=12),
            0u32..3,
            1.0f64..2.0,
            prop::option::of((0.5f64..4.0, 0.0f64..0.6)),
        )
            .prop_map(|(class, share, user, bound, risk)| GenJob {
                class,
                share: share.map(|s| s * 5),
                user,
                bound,
                risk,
            }),
        1..6,
    )
}

fn params(cfg: &Config) -> ShareParams {
    ShareParams::of(cfg)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn optimizer_keeps_its_promises(gpu_idx in 0usize..7, jobs in jobs_strategy()) {
        let cfg = cfg();
        let gpu = &cfg.gpu_types[gpu_idx % cfg.gpu_types.len()];
        let reference = &cfg.gpu_types[cfg.reference_gpu];
        let share_jobs: Vec<ShareJob<'_>> = jobs.iter().map(|j| ShareJob {
            class: &j.class,
            share: match j.share.and_then(SharePct::new) { Some(s) => ShareSpec::Fixed(s), None => ShareSpec::Auto },
            user: j.user,
            bound: j.bound,
            risk: j.risk.map(|(limit, sd)| LimitRisk::from_spread(limit * j.class.reference_runtime_s, sd, 0.0, 0.9)),
        }).collect();
        let first = optimize(gpu, reference, &share_jobs, params(&cfg));
        // Same input, same output.
        prop_assert_eq!(&first, &optimize(gpu, reference, &share_jobs, params(&cfg)));
        if let Ok(plan) = first {
            let total: u32 = plan.shares.iter().map(|s| u32::from(s.get())).sum();
            prop_assert!(total <= 100, "shares add up to {}", total);
            prop_assert!(gpu.supports_clock(plan.clock), "{} is not a step of {}", plan.clock, gpu.name);
            for ((p, j), s) in plan.prediction.jobs.iter().zip(&share_jobs).zip(&plan.shares) {
                prop_assert!(p.slowdown <= j.bound + 1e-6, "slowdown {} > bound {}", p.slowdown, j.bound);
                if let ShareSpec::Fixed(f) = j.share { prop_assert_eq!(f, *s); }
            }
            let default_ok = plan.at_default_clock.jobs.iter().zip(&share_jobs).all(|(p, j)| p.slowdown <= j.bound + 1e-9);
            if default_ok {
                let w = params(&cfg).time_value_w;
                let (st, idle) = heshare::policy::share::static_of(gpu, params(&cfg));
                prop_assert!(clock_cost(&plan.prediction, &share_jobs, w, st, idle) <= clock_cost(&plan.at_default_clock, &share_jobs, w, st, idle) * (1.0 + 1e-12),
                    "optimized {} > default {}", clock_cost(&plan.prediction, &share_jobs, w, st, idle), clock_cost(&plan.at_default_clock, &share_jobs, w, st, idle));
            }
            let attributed: f64 = plan.prediction.jobs.iter().map(|j| j.power.0).sum();
            prop_assert!((attributed - plan.prediction.power.0).abs() <= 1e-9 * plan.prediction.power.0.max(1.0));
        }
    }

    #[test]
    fn energy_first_picks_least_energy_and_time_first_the_fastest(class_idx in 0usize..64, share in prop_oneof![Just(ShareRequest::Auto), Just(ShareRequest::Exclusive)], rate in 0.0f64..20.0) {
        let mut cfg = cfg();
        cfg.policy.time_value_kwh_per_gpu_hour = rate;
        let class = cfg.classes[class_idx % cfg.classes.len()].name.clone();
        for (weight, key) in [(EnergyPolicy::Energy, 0usize), (EnergyPolicy::Performance, 1usize)] {
            let req = JobRequest { class: class.clone(), gpus: 1, share, user: "u".into(), gpu_types: vec![], energy_policy: Some(weight), time_limit_s: None, reference_share: None, demand_pct: None, learned: None };
            let plan = place(&cfg, &ClusterView::idle_types(&cfg), &req).expect("an idle catalog fits every bundled class");
            let value = |c: &heshare::policy::Candidate| if key == 0 { c.predicted_energy_j } else { c.predicted_runtime_s };
            let best = plan.candidates.iter().map(value).fold(f64::INFINITY, f64::min);
            let chosen = if key == 0 { plan.decision.predicted_energy_j } else { plan.decision.predicted_runtime_s };
            prop_assert!(chosen <= best * (1.0 + 1e-12), "{:?}: chose {} but {} exists", weight, chosen, best);
        }
    }

    #[test]
    fn placement_is_deterministic_and_never_overfills_a_gpu(
        occupants in prop::collection::vec((0usize..12, 1u8..=8, 0u8..3, any::<bool>()), 0..40),
        class_idx in 0usize..12,
        policy in prop_oneof![Just(None), Just(Some(EnergyPolicy::Energy)), Just(Some(EnergyPolicy::Performance))],
        cross_user in any::<bool>(),
    ) {
        let mut cfg = cfg();
        cfg.policy.allow_cross_user_sharing = cross_user;
        // Eight nodes, one per catalog type and one more, four GPUs each.
        let mut view = ClusterView::default();
        for n in 0..8usize {
            for i in 0..4u32 {
                view.gpus.push(GpuSlot { node: format!("n{n}").into(), index: i, gpu_type: n % cfg.gpu_types.len(), jobs: vec![], power: heshare::policy::SlotPower::Up, node_gpus: 4 });
            }
        }
        for (k, (class, share, user, exclusive)) in occupants.iter().enumerate() {
            let slot = &mut view.gpus[(k * 7) % 32];
            let used: u32 = slot.jobs.iter().map(|j| u32::from(j.share.get())).sum();
            let share = if *exclusive { 100 } else { u32::from(*share) * 5 };
            if slot.jobs.iter().any(|j| j.exclusive) || used + share > 100 || (*exclusive && !slot.jobs.is_empty()) {
                continue;
            }
            slot.jobs.push(PlacedJob { class: class % cfg.classes.len(), share: SharePct::new(u8::try_from(share).expect("<=100")).expect("valid"), user: format!("u{user}").into(), exclusive: *exclusive });
        }
        let req = JobRequest { class: cfg.classes[class_idx % cfg.classes.len()].name.clone(), gpus: 1, share: ShareRequest::Auto, user: "u0".into(), gpu_types: vec![], energy_policy: policy, time_limit_s: None, reference_share: None, demand_pct: None, learned: None };
        let a = place(&cfg, &view, &req);
        prop_assert_eq!(&a, &place(&cfg, &view, &req));
        if let Ok(plan) = a {
            let d = &plan.decision;
            let node = d.node.as_deref().expect("a full view names the node");
            let slot = view.gpus.iter().find(|g| *g.node == *node && g.index == d.gpu_indices[0]).expect("the GPU exists");
            let used: u32 = slot.jobs.iter().map(|j| u32::from(j.share.get())).sum();
            prop_assert!(used + u32::from(d.share_pct) <= 100);
            prop_assert!(slot.jobs.iter().all(|j| !j.exclusive && (cross_user || &*j.user == "u0")), "joined a GPU it may not share");
            prop_assert!(!d.exclusive || slot.jobs.is_empty());
            prop_assert!(cfg.gpu_types[slot.gpu_type].supports_clock(heshare::units::Mhz(d.sm_clock_mhz)));
            prop_assert!(d.site_factor.unsigned_abs() <= cfg.policy.priority_range);
        }
    }
}
