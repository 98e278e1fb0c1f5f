//! The sharing optimizer: for the jobs on one GPU, choose their MPS shares (where not fixed by
//! Slurm already) and the SM clock that minimise the cluster's energy-time cost while every job
//! stays within its slowdown bound against running alone at the default clock. The cost is
//! `E^w * T^(1-w)` with `w` the cluster's energy weight: energy per unit of progress `E`, the
//! jobs' mean slowdown `T`. At `w = 1` it is the least energy within the bound (the HeShare
//! paper's rule), at 0.5 the energy-delay product, at 0 the fastest clock.
//!
//! The energy is what the decision costs at the facility's meter: where Slurm's power saving
//! would power idle nodes down, the GPU's idle power and the host power it keeps on (the
//! catalog's `host_power_w`) count; where every node is always on, only the power above idle.
//!
//! Shares are chosen first, at the default clock: a job asking for "auto" gets the share with
//! which it runs at full speed, shrunk towards the least share that keeps its bound when the GPU
//! is crowded. The clock is then searched over every supported step, so the default clock with
//! the same shares is always a candidate and the result is never worse than it.

use crate::model::{
    GpuPrediction, GpuType, JobClass, ModelParams, Predictor, Tenant, full_speed_share, predict,
};
use crate::units::{Mhz, SharePct};

use super::belief::LimitRisk;

/// What a job's share on the GPU is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShareSpec {
    /// Already allocated (by Slurm, or asked for exactly by the user).
    Fixed(SharePct),
    /// To be chosen by the optimizer.
    Auto,
}

/// One job handed to the optimizer.
#[derive(Debug, Clone, Copy)]
pub struct ShareJob<'a> {
    pub class: &'a JobClass,
    pub share: ShareSpec,
    pub user: u32,
    /// The slowdown this job tolerates (>= 1).
    pub bound: f64,
    /// For a job whose limit is known against its own runs, the belief its run passes the limit
    /// at each clock: a kill is priced in the clock's cost ([`clock_cost`]).
    pub risk: Option<LimitRisk>,
}

/// The optimizer's answer for one GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct SharePlan {
    pub shares: Vec<SharePct>,
    pub clock: Mhz,
    pub prediction: GpuPrediction,
    /// The same shares at the GPU's default clock (what plain Slurm would run).
    pub at_default_clock: GpuPrediction,
}

/// Why no operating point keeps every job within its bound.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ShareError {
    #[error("no jobs to place")]
    Empty,
    #[error("shares add up to {0}% (> 100%)")]
    OverCommitted(u32),
    #[error(
        "job {job} ({class}) would run {slowdown:.2}x slower than alone even at the fastest clock (bound {bound:.2}x)"
    )]
    BoundViolated {
        job: usize,
        class: String,
        slowdown: f64,
        bound: f64,
    },
}

/// Tunables of the optimizer that come from the policy configuration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShareParams {
    pub model: ModelParams,
    pub share_step_pct: u8,
    /// What a second of each job's time on the GPU is worth, in joules (the site's
    /// `time_value_kwh_per_gpu_hour`, `policy::cost`): how the clock trades time for energy.
    pub time_value_w: f64,
    /// Whether the GPU's idle power and the host it keeps on are part of what a decision costs:
    /// where Slurm's power saving powers idle nodes down (`[power] suspend_time_s`), holding a
    /// GPU longer keeps them on; where every node is always on, they are spent anyway and only
    /// the power above idle is the decision's.
    pub static_power: bool,
}

impl ShareParams {
    /// The site's parameters from its configuration.
    pub fn of(cfg: &crate::config::Config) -> ShareParams {
        ShareParams {
            model: ModelParams::of(cfg),
            share_step_pct: cfg.policy.mps_share_step_pct,
            time_value_w: super::cost::Exchange::site(cfg.policy.time_value_kwh_per_gpu_hour, 1)
                .joules_per_s(),
            static_power: cfg.power.suspend_time_s.is_some(),
        }
    }
}

/// The clock's cost for `p` with `jobs` on the GPU, placement's one cost (`policy::cost`) per
/// unit of the jobs' work: each second at this clock the facility pays the GPU's power and
/// `static_w` (the idle power and host part the GPU keeps on, where power saving would turn them
/// off; a slower clock keeps them on longer, which is why the best clock moves up as host power
/// grows: race to idle), and each of the GPU's jobs spends a second of its completion time,
/// worth `time_value_w`; the jobs do `sum(1 / slowdown)` seconds of their work alone in it. A
/// job whose limit is known against its runs adds its expected kill (`cost::kill_j`): the
/// chance its run passes the limit at this clock times its power and time until the limit,
/// spread over the jobs' work (their runtimes alone at the default clock).
pub fn clock_cost(
    p: &GpuPrediction,
    jobs: &[ShareJob<'_>],
    time_value_w: f64,
    static_w: f64,
    idle_w: f64,
) -> f64 {
    let progress: f64 = p.jobs.iter().map(|j| 1.0 / j.slowdown).sum();
    if progress <= 0.0 {
        return f64::INFINITY;
    }
    #[allow(clippy::cast_precision_loss)]
    let n = p.jobs.len() as f64;
    let time_value_w = time_value_w.max(0.0);
    let static_w = static_w.max(0.0);
    let rate = ((p.power.0 - idle_w).max(0.0) + static_w + time_value_w * n) / progress;
    let mut kill_j = 0.0;
    for (pj, j) in p.jobs.iter().zip(jobs) {
        if let Some(risk) = j.risk {
            // Metered as the rate is: with its part of the static power, or above idle.
            let power = if static_w > 0.0 {
                pj.power.0 + static_w / n
            } else {
                (pj.power.0 - idle_w / n).max(0.0)
            };
            kill_j += risk.probability(pj.runtime.0) * (power + time_value_w) * risk.limit_s;
        }
    }
    if kill_j <= 0.0 {
        return rate;
    }
    let work: f64 = p
        .jobs
        .iter()
        .map(|j| j.runtime.0 / j.slowdown.max(1e-9))
        .sum();
    rate + kill_j / work.max(1e-9)
}

/// The busy of job `i`'s neighbours in `p` as the sharing model's contention weighs it: each
/// one's nominal busy times its class's `mem_intensity`.
pub fn neighbours_pressure(p: &GpuPrediction, jobs: &[ShareJob<'_>], i: usize) -> f64 {
    p.jobs
        .iter()
        .zip(jobs)
        .enumerate()
        .filter(|&(k, _)| k != i)
        .map(|(_, (pj, j))| j.class.mem_intensity * pj.busy)
        .sum()
}

/// The static power (GPU idle and the host part) that counts in `gpu`'s clock cost under
/// `params`: `(static_w, idle_w)` for [`clock_cost`].
pub fn static_of(gpu: &GpuType, params: ShareParams) -> (f64, f64) {
    if params.static_power {
        (gpu.idle_power.0 + gpu.host_power.0, gpu.idle_power.0)
    } else {
        (0.0, gpu.idle_power.0)
    }
}

const BOUND_SLACK: f64 = 1e-9;

/// Chooses shares and the SM clock for `jobs` on one GPU of type `gpu`.
pub fn optimize(
    gpu: &GpuType,
    reference: &GpuType,
    jobs: &[ShareJob<'_>],
    params: ShareParams,
) -> Result<SharePlan, ShareError> {
    if jobs.is_empty() {
        return Err(ShareError::Empty);
    }
    let shares = choose_shares(gpu, reference, jobs, params)?;
    let tenants: Vec<Tenant<'_>> = jobs
        .iter()
        .zip(&shares)
        .map(|(j, &share)| Tenant {
            class: j.class,
            share,
            user: j.user,
        })
        .collect();
    let within = |p: &GpuPrediction| {
        p.jobs
            .iter()
            .zip(jobs)
            .all(|(pj, j)| pj.slowdown <= j.bound + BOUND_SLACK)
    };

    let mut predictor = Predictor::new(gpu, reference, &tenants);
    let at_default = predictor.at(gpu.default_sm_clock, params.model);
    let (static_w, idle_w) = static_of(gpu, params);
    let mut best: Option<(f64, GpuPrediction)> = None;
    // Each clock's prediction is written into `cur`, which trades places with the best so far.
    let mut cur = at_default.clone();
    // Higher clocks first so that, on equal energy, the faster clock wins.
    for &f in gpu.sm_clocks.iter().rev() {
        predictor.at_into(f, params.model, &mut cur);
        if !within(&cur) {
            // Slowdowns only grow as the clock falls: every lower clock fails too.
            break;
        }
        let j = clock_cost(&cur, jobs, params.time_value_w, static_w, idle_w);
        match &mut best {
            Some((bj, bp)) if j < *bj => {
                *bj = j;
                std::mem::swap(bp, &mut cur);
            }
            Some(_) => {}
            None => best = Some((j, cur.clone())),
        }
    }
    match best {
        Some((_, prediction)) => Ok(SharePlan {
            shares,
            clock: prediction.clock,
            prediction,
            at_default_clock: at_default,
        }),
        None => {
            let fastest = predictor.at(gpu.max_clock(), params.model);
            let (job, (pj, j)) = fastest
                .jobs
                .iter()
                .zip(jobs)
                .enumerate()
                .max_by(|(_, (a, ja)), (_, (b, jb))| {
                    (a.slowdown / ja.bound).total_cmp(&(b.slowdown / jb.bound))
                })
                .ok_or(ShareError::Empty)?;
            Err(ShareError::BoundViolated {
                job,
                class: j.class.name.clone(),
                slowdown: pj.slowdown,
                bound: j.bound,
            })
        }
    }
}

/// Fixed shares stay; auto shares start at full speed and shrink in steps (largest first, then
/// the later job on ties) until everything fits in 100%, never below the least share that keeps
/// the job's bound alone on this GPU at the default clock.
fn choose_shares(
    gpu: &GpuType,
    reference: &GpuType,
    jobs: &[ShareJob<'_>],
    params: ShareParams,
) -> Result<Vec<SharePct>, ShareError> {
    let step = params.share_step_pct.max(1);
    let mut shares = Vec::with_capacity(jobs.len());
    let mut floors = Vec::with_capacity(jobs.len());
    for j in jobs {
        match j.share {
            ShareSpec::Fixed(s) => {
                shares.push(u32::from(s.get()));
                floors.push(u32::from(s.get()));
            }
            ShareSpec::Auto => {
                let full = u32::from(full_speed_share(j.class, gpu, reference, step).get());
                shares.push(full);
                floors.push(least_share_within_bound(gpu, reference, j, params, full));
            }
        }
    }
    let mut total: u32 = shares.iter().sum();
    while total > 100 {
        let candidate = (0..jobs.len())
            .filter(|&i| shares[i] >= floors[i] + u32::from(step))
            .max_by_key(|&i| (shares[i], i));
        let Some(i) = candidate else {
            return Err(ShareError::OverCommitted(floors.iter().sum()));
        };
        shares[i] -= u32::from(step);
        total -= u32::from(step);
    }
    Ok(shares
        .into_iter()
        .map(|s| SharePct::new(u8::try_from(s).unwrap_or(100)).unwrap_or(SharePct::FULL))
        .collect())
}

fn least_share_within_bound(
    gpu: &GpuType,
    reference: &GpuType,
    job: &ShareJob<'_>,
    params: ShareParams,
    full: u32,
) -> u32 {
    let step = u32::from(params.share_step_pct.max(1));
    let mut s = step;
    while s < full {
        let share = SharePct::new(u8::try_from(s).unwrap_or(100)).unwrap_or(SharePct::FULL);
        let t = [Tenant {
            class: job.class,
            share,
            user: job.user,
        }];
        let p = predict(gpu, reference, &t, gpu.default_sm_clock, params.model);
        if p.jobs[0].slowdown <= job.bound + BOUND_SLACK {
            return s;
        }
        s += step;
    }
    full
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::GpuType;
    use crate::model::tests::{gpu, inference, training};

    const PARAMS: ShareParams = ShareParams {
        model: ModelParams {
            contention_kappa: 0.33,
            time_slice_efficiency: 0.8,
        },
        share_step_pct: 5,
        time_value_w: 0.0,
        static_power: true,
    };

    fn job(class: &JobClass, share: ShareSpec) -> ShareJob<'_> {
        ShareJob {
            class,
            share,
            user: 1,
            bound: 1.5,
            risk: None,
        }
    }

    #[test]
    fn a_lone_training_job_is_clocked_down_within_its_bound() {
        let g = gpu("v100", 1.0, 30.0, 300.0);
        let c = training("t");
        let plan = optimize(&g, &g, &[job(&c, ShareSpec::Auto)], PARAMS).expect("feasible");
        assert_eq!(plan.shares, vec![SharePct::FULL]);
        assert!(
            plan.clock < g.default_sm_clock,
            "c = 0.4 pays to clock down"
        );
        assert!(plan.prediction.jobs[0].slowdown <= 1.5);
        assert!(plan.prediction.jobs[0].energy() <= plan.at_default_clock.jobs[0].energy());
    }

    #[test]
    fn small_inference_jobs_get_small_shares_and_a_low_clock() {
        let g = gpu("a100", 2.0, 50.0, 400.0);
        let c = inference("i", 0.3);
        let jobs = [job(&c, ShareSpec::Auto), job(&c, ShareSpec::Auto)];
        let plan = optimize(&g, &g, &jobs, PARAMS).expect("feasible");
        assert_eq!(plan.shares, vec![SharePct::new(30).expect("30"); 2]);
        assert!(
            plan.clock.0 < 1000,
            "rate-bound jobs leave headroom to clock down: {}",
            plan.clock
        );
        assert!(plan.prediction.jobs.iter().all(|j| j.slowdown <= 1.5));
    }

    #[test]
    fn crowded_auto_shares_shrink_towards_their_floor() {
        let g = gpu("v100", 1.0, 30.0, 300.0);
        let t = training("t");
        let jobs = [
            job(&t, ShareSpec::Fixed(SharePct::new(60).expect("60"))),
            job(&t, ShareSpec::Auto),
        ];
        match optimize(&g, &g, &jobs, PARAMS) {
            Ok(plan) => assert_eq!(
                plan.shares[0].get() as u32 + plan.shares[1].get() as u32,
                100
            ),
            Err(e) => assert!(
                matches!(
                    e,
                    ShareError::OverCommitted(_) | ShareError::BoundViolated { .. }
                ),
                "{e}"
            ),
        }
        let over = [
            job(&t, ShareSpec::Fixed(SharePct::new(60).expect("60"))),
            job(&t, ShareSpec::Fixed(SharePct::new(50).expect("50"))),
        ];
        assert_eq!(
            optimize(&g, &g, &over, PARAMS),
            Err(ShareError::OverCommitted(110))
        );
    }

    /// With the host's power counted, a slower clock keeps the host on longer: the least-energy
    /// clock moves up (race to idle), and with enough host power it is the default.
    #[test]
    fn host_power_moves_the_clock_towards_race_to_idle() {
        let c = training("t");
        let clock = |host: f64| {
            let g = GpuType {
                host_power: crate::units::Watts(host),
                ..gpu("v100", 1.0, 30.0, 300.0)
            };
            optimize(&g, &g, &[job(&c, ShareSpec::Auto)], PARAMS)
                .expect("feasible")
                .clock
        };
        let (none, some, lots) = (clock(0.0), clock(100.0), clock(2000.0));
        assert!(none < some, "{none} vs {some}");
        assert!(some <= lots, "{some} vs {lots}");
        let g = gpu("v100", 1.0, 30.0, 300.0);
        assert!(
            lots >= Mhz(g.default_sm_clock.0 - 100),
            "a host of 2 kW per GPU leaves no reason to slow down: {lots}"
        );
    }

    #[test]
    fn an_impossible_bound_is_reported_with_the_job() {
        let g = gpu("v100", 1.0, 30.0, 300.0);
        let t = training("t");
        let strict = ShareJob {
            bound: 1.0,
            ..job(&t, ShareSpec::Fixed(SharePct::new(50).expect("50")))
        };
        let err = optimize(&g, &g, &[strict], PARAMS).expect_err("half a GPU cannot keep pace");
        assert!(
            matches!(err, ShareError::BoundViolated { job: 0, .. }),
            "{err}"
        );
    }

    /// A job whose runs spread and whose limit sits at its bound is clocked no lower than one
    /// whose runtime is certain: each step down raises the chance its run passes the limit, and
    /// that kill is priced with the energy.
    #[test]
    fn the_risk_of_a_kill_keeps_the_clock_up() {
        let g = gpu("v100", 1.0, 30.0, 300.0);
        let c = training("t");
        let certain = optimize(&g, &g, &[job(&c, ShareSpec::Auto)], PARAMS).expect("feasible");
        let alone = certain.at_default_clock.jobs[0].runtime.0;
        let risky = ShareJob {
            risk: Some(LimitRisk::from_spread(1.5 * alone, 0.3, 0.0, 0.9)),
            ..job(&c, ShareSpec::Auto)
        };
        let priced = optimize(&g, &g, &[risky], PARAMS).expect("feasible");
        assert!(
            priced.clock > certain.clock,
            "{} vs {}",
            priced.clock,
            certain.clock
        );
        let p = |plan: &SharePlan| {
            risky
                .risk
                .expect("risk")
                .probability(plan.prediction.jobs[0].runtime.0)
        };
        assert!(
            p(&priced) < p(&certain),
            "{} vs {}",
            p(&priced),
            p(&certain)
        );
        // No spread, no risk inside the limit: the clock is the one without a limit.
        let exact = ShareJob {
            risk: Some(LimitRisk::from_spread(1.5 * alone, 0.0, 0.0, 0.9)),
            ..job(&c, ShareSpec::Auto)
        };
        let plan = optimize(&g, &g, &[exact], PARAMS).expect("feasible");
        assert_eq!(plan.clock, certain.clock);
    }
}
