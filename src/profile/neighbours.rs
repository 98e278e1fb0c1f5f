//! What a profile's shared runs say of how much busy neighbours slow the job: `k` in the
//! sharing model's contention `1 + k * busy`, where `busy` is the summed busy share of the MPS
//! server's other clients.
//!
//! A run beside idle neighbours ran as fast as alone and says nothing of a busy one: Gavel's
//! co-located V100 pairs slow one another from not at all to 63-fold, and the job's own
//! sensitivity decides. So only runs whose neighbours the driver measured busy count, each
//! against the job without them, and each says as much as its neighbours' busy lets it:
//!
//! * **training** slows by the contention: `runtime / without - 1 = k * busy`, with `without`
//!   what the learned class predicts on the run's type at its share and clock (only on types its
//!   runs measured alone). `k` is the least-squares fit over its runs: a run's slowdown carries
//!   its runtime's run-to-run noise whatever the neighbours, so a run beside barely busy ones
//!   weighs by `busy` squared, as little as the `k` it implies alone is worth.
//! * **a service** keeps its stream's pace until its load on its share times the contention
//!   passes one, so a run that kept pace only bounds `k`: `load * (1 + k * busy) <= slowdown`
//!   gives `k <= (slowdown / load - 1) / busy`, with `load` its measured busy over its share and
//!   `slowdown` its runtime over its fastest quiet run's. Where the driver's busy time grows
//!   with the contention (the kernels take longer), the busy time itself measures it against
//!   a quiet run's on the same type: `k >= (load / quiet load - 1) / busy`. Each run's `k` is
//!   the larger of the two, and the tightest run's is kept (a run beside barely busy
//!   neighbours bounds loosely, so it is not the tightest).
//!
//! Pure.

use super::learn::{Sample, share_fraction};
use crate::config::Config;
use crate::model::{JobClass, JobKind, NeighbourSlowdown, runtime_alone_on};
use crate::units::{Mhz, SharePct};

/// The neighbour slowdown `class`'s runs measured; `samples` are its kept runs with their type
/// index. `None` where no run had busy neighbours, or none can be set against the job without
/// them.
pub fn learn(
    cfg: &Config,
    class: &JobClass,
    samples: &[(usize, &Sample)],
) -> Option<NeighbourSlowdown> {
    let reference = &cfg.gpu_types[cfg.reference_gpu];
    let params = crate::model::ModelParams::of(cfg);
    let quiet: Vec<(usize, &Sample)> = samples
        .iter()
        .copied()
        .filter(|(_, x)| x.alone || x.neighbour_busy.is_some_and(|b| b <= 0.0))
        .filter(|(_, x)| x.runtime_s.is_finite() && x.runtime_s > 0.0)
        .collect();
    // A service's stream without neighbours: its fastest quiet run (a slower yardstick would
    // bound `k` too low), and per type the most of the GPU a quiet run kept busy (its need
    // there, the yardstick of a busy time grown by contention).
    let fastest = quiet.iter().map(|(_, x)| x.runtime_s).reduce(f64::min);
    let quiet_need = |t: usize| {
        quiet
            .iter()
            .filter(|(q, _)| *q == t)
            .filter_map(|(_, x)| x.busy)
            .filter(|b| b.is_finite() && *b > 0.0)
            .reduce(f64::max)
    };
    // Training: the sums of the least-squares fit through the origin. A service: its tightest
    // bound.
    let (mut sxy, mut sxx) = (0.0, 0.0);
    let mut tightest = f64::INFINITY;
    let mut up_to_busy: Option<f64> = None;
    for &(t, x) in samples {
        let Some(busy) = x.neighbour_busy.filter(|b| b.is_finite() && *b > 0.0) else {
            continue;
        };
        if x.alone || !x.runtime_s.is_finite() || x.runtime_s <= 0.0 {
            continue;
        }
        let gpu = &cfg.gpu_types[t];
        let k = match class.kind {
            JobKind::Training => {
                if !class.measured_on(&gpu.name) {
                    continue; // The prior's speed here is a guess, not a yardstick.
                }
                let share = x
                    .share_pct
                    .and_then(SharePct::new)
                    .unwrap_or(SharePct::FULL);
                // The clock it ran at on average (`stretch` is `f_default / f`).
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let mhz = (f64::from(gpu.default_sm_clock.0) / x.stretch.max(1e-3))
                    .round()
                    .clamp(1.0, f64::from(u32::MAX)) as u32;
                let without = runtime_alone_on(class, gpu, reference, share, Mhz(mhz), params).0;
                if !without.is_finite() || without <= 0.0 {
                    continue;
                }
                sxy += busy * (x.runtime_s / without - 1.0);
                sxx += busy * busy;
                None
            }
            JobKind::Inference => {
                let (Some(fastest), Some(load)) =
                    (fastest, x.busy.map(|b| b / share_fraction(x.share_pct)))
                else {
                    continue;
                };
                if !load.is_finite() || load <= 0.0 {
                    continue;
                }
                let slowdown = (x.runtime_s / fastest).max(1.0);
                let bound = (slowdown / load.min(1.0) - 1.0) / busy;
                // Its load without neighbours at this run's share, where a quiet run on the type
                // measured its need.
                let grown = quiet_need(t).map_or(0.0, |need| {
                    (load / (need / share_fraction(x.share_pct)).min(1.0) - 1.0) / busy
                });
                Some(bound.max(grown).max(0.0))
            }
        };
        if let Some(k) = k {
            tightest = tightest.min(k);
        }
        up_to_busy = Some(up_to_busy.map_or(busy, |u: f64| u.max(busy)));
    }
    let per_busy = match class.kind {
        JobKind::Training => (sxy / sxx).max(0.0),
        JobKind::Inference => tightest,
    };
    up_to_busy.map(|up_to_busy| NeighbourSlowdown {
        per_busy,
        up_to_busy,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Config {
        Config::parse(
            crate::config::BUNDLED_CONFIG,
            std::path::Path::new("heshare.toml"),
        )
        .expect("bundled config")
    }

    fn run(runtime_s: f64, share: Option<u8>, neighbour_busy: Option<f64>, alone: bool) -> Sample {
        Sample {
            id: format!("r{runtime_s}"),
            end_s: 0.0,
            runtime_s,
            share_pct: share,
            gpus: 1,
            stretch: 1.0,
            dyn_frac: None,
            busy: None,
            memory_gib: None,
            neighbour_busy,
            alone,
        }
    }

    /// A service's run on a 40% share that kept `busy` of the GPU busy.
    fn served(runtime_s: f64, busy: f64, neighbour_busy: Option<f64>) -> Sample {
        Sample {
            busy: Some(busy),
            ..run(runtime_s, Some(40), neighbour_busy, false)
        }
    }

    fn service(cfg: &Config) -> JobClass {
        let mut c = cfg
            .classes
            .iter()
            .find(|c| c.kind == JobKind::Inference)
            .expect("a service class")
            .clone();
        c.measured_speed = vec![];
        c
    }

    /// A service that kept pace beside busy neighbours bounds its sensitivity by how far its
    /// load was from saturation; one that fell behind measures it; the tightest run counts.
    #[test]
    fn a_service_is_bounded_by_the_runs_that_kept_pace_and_measured_by_those_that_did_not() {
        let cfg = cfg();
        let class = service(&cfg);
        let t = cfg.reference_gpu;
        let quiet = [
            served(300.0, 0.04, Some(0.0)),
            served(310.0, 0.04, Some(0.01)),
        ];
        let mut samples: Vec<(usize, &Sample)> = quiet.iter().map(|r| (t, r)).collect();
        // Kept pace at load 0.1 (0.04 of its 0.4) beside neighbours 0.5 busy: the contention
        // stayed within 10, k <= (10 - 1) / 0.5 = 18.
        let paced = served(300.0, 0.04, Some(0.5));
        samples.push((t, &paced));
        let n = learn(&cfg, &class, &samples).expect("a run beside busy neighbours");
        assert!((n.per_busy - 18.0).abs() < 1e-9, "{n:?}");
        assert!((n.up_to_busy - 0.5).abs() < 1e-9);
        // Took twice its fastest quiet run at load 0.1 beside 0.25: contention 20, k = 76; the
        // bound of 18 is tighter.
        let behind = served(600.0, 0.04, Some(0.25));
        samples.push((t, &behind));
        let n = learn(&cfg, &class, &samples).expect("measured");
        assert!((n.per_busy - 18.0).abs() < 1e-9, "{n:?}");
        assert!((n.up_to_busy - 0.5).abs() < 1e-9);
        // Alone, the run that fell behind says k = 76.
        let alone: Vec<(usize, &Sample)> = quiet.iter().chain([&behind]).map(|r| (t, r)).collect();
        let n = learn(&cfg, &class, &alone).expect("measured");
        assert!((n.per_busy - 76.0).abs() < 1e-9, "{n:?}");
        // Busy time that grew beside busy neighbours measures the contention where pace did
        // not: 0.08 against a quiet 0.04 beside 0.5 is k >= 2; its pace bounds k <= 8 at load
        // 0.2, and the larger stands.
        let grown = served(300.0, 0.08, Some(0.5));
        let g: Vec<(usize, &Sample)> = quiet.iter().chain([&grown]).map(|r| (t, r)).collect();
        let n = learn(&cfg, &class, &g).expect("measured");
        assert!((n.per_busy - 8.0).abs() < 1e-9, "{n:?}");
    }

    /// Runs beside idle neighbours, with nothing measured of them, or of a service whose busy
    /// time the driver did not measure, say nothing; one beside barely busy neighbours bounds
    /// `k` only loosely, above the worst pair measured, so it decides what nothing would.
    #[test]
    fn idle_or_unmeasured_neighbours_say_nothing() {
        let cfg = cfg();
        let class = service(&cfg);
        let t = cfg.reference_gpu;
        let runs = [
            served(300.0, 0.04, Some(0.0)),
            served(300.0, 0.04, None),
            run(300.0, Some(40), Some(0.5), false),
        ];
        let samples: Vec<(usize, &Sample)> = runs.iter().map(|r| (t, r)).collect();
        assert_eq!(learn(&cfg, &class, &samples), None);
        // Kept pace at load 0.1 beside neighbours 0.02 busy: k <= (10 - 1) / 0.02 = 450.
        let barely = served(300.0, 0.04, Some(0.02));
        let samples: Vec<(usize, &Sample)> = runs.iter().chain([&barely]).map(|r| (t, r)).collect();
        let n = learn(&cfg, &class, &samples).expect("a loose bound");
        assert!((n.per_busy - 450.0).abs() < 1e-9, "{n:?}");
        assert!(
            n.per_busy
                > *crate::contention::pair_sensitivities()
                    .last()
                    .expect("pairs")
        );
    }

    /// A training job is set against its class's prediction at the run's share, only on a type
    /// its runs measured: on another, the prior's speed is no yardstick.
    #[test]
    fn a_training_run_is_set_against_its_class_at_its_share_where_measured() {
        let cfg = cfg();
        let t = cfg.reference_gpu;
        let mut class = cfg
            .classes
            .iter()
            .find(|c| c.kind == JobKind::Training)
            .expect("a training class")
            .clone();
        let reference = &cfg.gpu_types[t];
        let params = crate::model::ModelParams::of(&cfg);
        let at_half = |c: &JobClass| {
            runtime_alone_on(
                c,
                reference,
                reference,
                SharePct::new(50).expect("50%"),
                reference.default_sm_clock,
                params,
            )
            .0
        };
        let r = 1.5 * at_half(&class);
        let runs = [run(r, Some(50), Some(0.25), false)];
        let samples: Vec<(usize, &Sample)> = runs.iter().map(|x| (t, x)).collect();
        assert_eq!(learn(&cfg, &class, &samples), None, "type not measured");
        class.measured_speed = vec![(reference.name.clone(), 1.0)];
        let r = 1.5 * at_half(&class);
        let runs = [run(r, Some(50), Some(0.25), false)];
        let samples: Vec<(usize, &Sample)> = runs.iter().map(|x| (t, x)).collect();
        let n = learn(&cfg, &class, &samples).expect("measured type");
        assert!((n.per_busy - 2.0).abs() < 1e-6, "{n:?}");
        assert!((n.up_to_busy - 0.25).abs() < 1e-9);
        // A run 10% slow beside neighbours 0.02 busy implies k = 5 alone, as much the runtime's
        // noise as contention; beside the run at 0.25 (k = 2) it weighs 0.02^2 against
        // 0.25^2: k = (0.02 * 0.1 + 0.25 * 0.5) / (0.02^2 + 0.25^2).
        let noisy = run(1.1 * at_half(&class), Some(50), Some(0.02), false);
        let samples: Vec<(usize, &Sample)> = runs.iter().chain([&noisy]).map(|x| (t, x)).collect();
        let n = learn(&cfg, &class, &samples).expect("measured type");
        let fit = (0.02 * 0.1 + 0.25 * 0.5) / (0.02f64.powi(2) + 0.25f64.powi(2));
        assert!((n.per_busy - fit).abs() < 1e-6 && n.per_busy < 2.1, "{n:?}");
        assert!((n.up_to_busy - 0.25).abs() < 1e-9);
    }
}
