//! The SM clock the node helper locks a GPU at for the jobs on it, and each job's slowdown bound
//! there: the functions the node helper runs in its Prolog and Epilog, and the simulator runs for
//! heshare, so that what the simulator grades is what a node does. Pure: no I/O.

use crate::config::Config;
use crate::model::{GpuType, JobClass};
use crate::policy::belief::LimitRisk;
use crate::policy::placement::limit_cap;
use crate::policy::share::{ShareError, ShareJob, SharePlan, ShareSpec};
use crate::units::{Mhz, SharePct};

/// The slowdown a job may have on `gpu`: `explicit` (the bound placement decided, which the
/// plugin passes to the node helper) or its class's or the site's, no more than keeps it within
/// a time limit written for `limit_type` (`model`, the class it is predicted with, running alone
/// there), and for a profiled job no more than `limit_s` over its learned runtime here.
pub fn tenant_bound(
    cfg: &Config,
    gpu: &GpuType,
    model: Option<&JobClass>,
    explicit: Option<f64>,
    limit_type: Option<usize>,
    learned_limit: Option<(&JobClass, f64)>,
) -> f64 {
    let reference = &cfg.gpu_types[cfg.reference_gpu];
    let bound = explicit.unwrap_or_else(|| {
        model
            .and_then(|c| c.slowdown_bound)
            .unwrap_or(cfg.policy.slowdown_bound)
    });
    let written_for = limit_type.and_then(|t| cfg.gpu_types.get(t));
    match (learned_limit, model, written_for) {
        (Some((c, limit)), _, _) => bound.min(super::belief::limit_slowdown(
            cfg,
            c,
            gpu,
            written_for,
            limit,
        )),
        (None, Some(c), Some(slowest)) => bound.min(limit_cap(c, gpu, slowest, reference)),
        _ => bound,
    }
}

/// What the node helper knows of one job on a GPU.
#[derive(Debug, Clone, Copy)]
pub struct Tenant<'a> {
    /// The class it is predicted with here (a catalog class as placement sized it, a profile as
    /// learned); `None`: nothing is known of it.
    pub class: Option<&'a JobClass>,
    pub share: SharePct,
    pub user: u32,
    pub bound: f64,
    /// A run of it was killed at its time limit here beside a neighbour: a lower clock is not
    /// to be trusted (`placement::keeps_default_clock`).
    pub keeps_default: bool,
    /// Its learned runtime's belief against its time limit (`belief::LimitRisk`), where both are
    /// known: the clock prices the kill it risks.
    pub risk: Option<LimitRisk>,
}

/// Why a GPU stays at its default clock.
#[derive(Debug, Clone, PartialEq)]
pub enum Stays {
    /// A run of tenant `i` was killed at its time limit here beside a neighbour.
    KilledSharing(usize),
    /// A tenant the helper knows nothing of shares the GPU.
    Unknown,
    /// The sharing optimizer found no clock keeping every bound.
    Optimizer(ShareError),
}

/// The clock to lock `gpu` at for `tenants` (all of the GPU's jobs), or why it stays at its
/// default. `optimize` is the sharing optimizer (`share::optimize`, or placement's cached copy
/// of it).
pub fn node_clock(
    tenants: &[Tenant<'_>],
    optimize: impl FnOnce(&[ShareJob<'_>]) -> Result<Mhz, ShareError>,
) -> Result<Mhz, Stays> {
    if let Some(i) = tenants.iter().position(|t| t.keeps_default) {
        return Err(Stays::KilledSharing(i));
    }
    let jobs: Option<Vec<ShareJob<'_>>> = tenants
        .iter()
        .map(|t| {
            t.class.map(|class| ShareJob {
                class,
                share: ShareSpec::Fixed(t.share),
                user: t.user,
                bound: t.bound,
                risk: t.risk,
            })
        })
        .collect();
    let jobs = jobs.ok_or(Stays::Unknown)?;
    optimize(&jobs).map_err(Stays::Optimizer)
}

/// `optimize`'s answer as `node_clock` takes it.
pub fn clock_of(plan: &Result<SharePlan, ShareError>) -> Result<Mhz, ShareError> {
    plan.as_ref().map(|p| p.clock).map_err(Clone::clone)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BUNDLED_CONFIG;
    use crate::model::alone_runtime;
    use crate::policy::share::{ShareParams, optimize};
    use std::path::Path;

    fn cfg() -> Config {
        Config::parse(BUNDLED_CONFIG, Path::new("h.toml")).expect("valid")
    }

    #[test]
    fn a_tenant_too_close_to_its_limit_or_unknown_keeps_the_default_clock() {
        let cfg = cfg();
        let t = cfg.gpu_type("a100").expect("a100");
        let gpu = &cfg.gpu_types[t];
        let reference = &cfg.gpu_types[cfg.reference_gpu];
        let class = cfg.class("resnet50-train").expect("class");
        let params = ShareParams::of(&cfg);
        let run = |tenants: &[Tenant<'_>]| {
            node_clock(tenants, |jobs| {
                clock_of(&optimize(gpu, reference, jobs, params))
            })
        };
        let known = Tenant {
            class: Some(class),
            share: SharePct::FULL,
            user: 1,
            bound: 1.25,
            keeps_default: false,
            risk: None,
        };
        let clock = run(&[known]).expect("a clock");
        assert!(clock <= gpu.default_sm_clock, "{clock:?}");
        assert_eq!(
            run(&[
                known,
                Tenant {
                    keeps_default: true,
                    ..known
                }
            ]),
            Err(Stays::KilledSharing(1))
        );
        assert_eq!(
            run(&[
                known,
                Tenant {
                    class: None,
                    ..known
                }
            ]),
            Err(Stays::Unknown)
        );
    }

    #[test]
    fn the_bound_is_the_tighter_of_the_class_and_the_time_limit() {
        let cfg = cfg();
        let a100 = &cfg.gpu_types[cfg.gpu_type("a100").expect("a100")];
        let reference = &cfg.gpu_types[cfg.reference_gpu];
        let class = cfg.class("resnet50-train").expect("class");
        assert!((tenant_bound(&cfg, a100, Some(class), None, None, None) - 1.25).abs() < 1e-12);
        assert!((tenant_bound(&cfg, a100, Some(class), Some(2.0), None, None) - 2.0).abs() < 1e-12);
        // A limit 1.1x its runtime alone here, as its runs measured it, holds it to 1.1x.
        let alone = alone_runtime(class, a100, reference).0;
        let measured = JobClass {
            measured_speed: vec![(
                "a100".into(),
                crate::model::relative_speed(class, a100, reference),
            )],
            ..class.clone()
        };
        let with_limit = |learned: &JobClass, limit: f64| {
            tenant_bound(&cfg, a100, Some(class), None, None, Some((learned, limit)))
        };
        let b = with_limit(&measured, 1.1 * alone);
        assert!((b - 1.1).abs() < 1e-9, "{b}");
        // Where its runs never measured the type, the same limit holds it closer.
        let b = with_limit(class, 1.1 * alone);
        assert!(b < 1.1 - 1e-6, "{b}");
        // Never below running alone.
        let b = with_limit(class, 0.5 * alone);
        assert!((b - 1.0).abs() < 1e-12, "{b}");
    }

    /// A learned job whose limit is written for a slower type may slow down here as far as
    /// running alone there takes, unless its runs ran there and say the limit does not cover
    /// that run.
    #[test]
    fn a_learned_limit_written_for_a_slower_type_allows_its_slowdown() {
        let cfg = cfg();
        let a100 = &cfg.gpu_types[cfg.gpu_type("a100").expect("a100")];
        let t4 = cfg.gpu_type("t4").expect("t4");
        let reference = &cfg.gpu_types[cfg.reference_gpu];
        let class = cfg.class("resnet50-train").expect("class");
        let on_t4 = alone_runtime(class, &cfg.gpu_types[t4], reference).0;
        let ratio = on_t4 / alone_runtime(class, a100, reference).0;
        assert!(ratio > 1.5, "{ratio}");
        let bound = |limit: f64, written: Option<usize>| {
            tenant_bound(
                &cfg,
                a100,
                Some(class),
                Some(10.0),
                written,
                Some((class, limit)),
            )
        };
        let b = bound(on_t4, Some(t4));
        assert!(b >= ratio - 1e-9, "{b} vs {ratio}");
        // Without the convention, its runs alone (and the spread of an unmeasured type) say less.
        assert!(bound(on_t4, None) < b, "{}", bound(on_t4, None));
        // Runs that never ran on t4 only guess its runtime there: the limit written for it
        // stands, however short the guess makes it look.
        assert!(bound(0.5 * on_t4, Some(t4)) >= ratio - 1e-9);
        // Runs that ran on t4 and say the limit is too short there are believed.
        let ran_there = JobClass {
            measured_speed: vec![(
                "t4".into(),
                crate::model::relative_speed(class, &cfg.gpu_types[t4], reference),
            )],
            ..class.clone()
        };
        let measured = tenant_bound(
            &cfg,
            a100,
            Some(&ran_there),
            Some(10.0),
            Some(t4),
            Some((&ran_there, 0.5 * on_t4)),
        );
        assert!(measured < 0.5 * ratio + 1e-9, "{measured}");
    }
}
