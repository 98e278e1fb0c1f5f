//! What a profile's shared runs say of how much busy neighbours slow the job.
//!
//! A run that shared its GPU only with idle neighbours ran as fast as alone and says nothing
//! of a busy one: Gavel's co-located V100 pairs slow one another from not at all to 63-fold,
//! and a job's own sensitivity is what decides. So only runs whose neighbours the driver
//! measured busy (at least `min_busy` of the GPU, summed) count. Each is set against its
//! runtime without neighbours: for training, what the learned class predicts on its type at its
//! share and clock (only on types its runs measured); for a service, which runs at its stream's
//! pace until it saturates, the median runtime of its quiet runs. The slowdown per unit of
//! neighbour busy is taken at its largest, and holds up to the busiest neighbours a run had.
//! Pure.

use super::learn::Sample;
use crate::config::Config;
use crate::model::{JobClass, JobKind, NeighbourSlowdown, Tenant, predict};
use crate::units::{Mhz, SharePct};

/// The neighbour slowdown `class`'s runs measured; `samples` are its kept runs with their type
/// index. `None` where no run had neighbours at least `min_busy` busy, or none can be set
/// against a runtime without them.
pub fn learn(
    cfg: &Config,
    class: &JobClass,
    samples: &[(usize, &Sample)],
    min_busy: f64,
) -> Option<NeighbourSlowdown> {
    let reference = &cfg.gpu_types[cfg.reference_gpu];
    let params = crate::model::ModelParams::of(cfg);
    // A service's runtime without neighbours: its quiet runs' median (its stream's length).
    let quiet = {
        let mut v: Vec<f64> = samples
            .iter()
            .filter(|(_, x)| x.alone || x.neighbour_busy.is_some_and(|b| b < min_busy))
            .map(|(_, x)| x.runtime_s)
            .filter(|r| r.is_finite() && *r > 0.0)
            .collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    let mut out: Option<NeighbourSlowdown> = None;
    for &(t, x) in samples {
        let Some(busy) = x.neighbour_busy.filter(|b| b.is_finite() && *b >= min_busy) else {
            continue;
        };
        if x.alone || !x.runtime_s.is_finite() || x.runtime_s <= 0.0 {
            continue;
        }
        let gpu = &cfg.gpu_types[t];
        let without = match class.kind {
            JobKind::Training => {
                if !class.measured_speed.iter().any(|(n, _)| *n == gpu.name) {
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
                let tenant = Tenant {
                    class,
                    share,
                    user: 0,
                };
                predict(gpu, reference, &[tenant], Mhz(mhz), params).jobs[0]
                    .runtime
                    .0
            }
            JobKind::Inference => match quiet {
                Some(q) => q,
                None => continue,
            },
        };
        if !without.is_finite() || without <= 0.0 {
            continue;
        }
        let per_busy = ((x.runtime_s / without - 1.0) / busy).max(0.0);
        out = Some(match out {
            None => NeighbourSlowdown {
                per_busy,
                up_to_busy: busy,
            },
            Some(n) => NeighbourSlowdown {
                per_busy: n.per_busy.max(per_busy),
                up_to_busy: n.up_to_busy.max(busy),
            },
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Config {
        Config::parse(
            crate::cli::BUNDLED_CONFIG,
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

    /// A service's runs beside busy neighbours, against its quiet runs: the slowdown per unit
    /// of neighbour busy is the worst run's, and it holds up to the busiest neighbours seen.
    #[test]
    fn a_service_is_measured_against_its_quiet_runs() {
        let cfg = cfg();
        let class = service(&cfg);
        let t = cfg.reference_gpu;
        let runs = [
            run(300.0, Some(40), Some(0.0), false),
            run(310.0, Some(40), None, true),
            run(290.0, Some(40), Some(0.01), false),
            // 2x slower beside neighbours 0.5 busy: 2 per unit.
            run(600.0, Some(40), Some(0.5), false),
            // Not slowed beside busier ones.
            run(300.0, Some(40), Some(0.6), false),
        ];
        let samples: Vec<(usize, &Sample)> = runs.iter().map(|r| (t, r)).collect();
        let n = learn(&cfg, &class, &samples, 0.05).expect("runs with busy neighbours");
        assert!((n.per_busy - 2.0).abs() < 1e-9, "{n:?}");
        assert!((n.up_to_busy - 0.6).abs() < 1e-9, "{n:?}");
    }

    /// Runs beside idle neighbours, or with nothing measured of them, say nothing.
    #[test]
    fn idle_or_unmeasured_neighbours_say_nothing() {
        let cfg = cfg();
        let class = service(&cfg);
        let t = cfg.reference_gpu;
        let runs = [
            run(300.0, Some(40), Some(0.0), false),
            run(300.0, Some(40), Some(0.02), false),
            run(300.0, Some(40), None, false),
        ];
        let samples: Vec<(usize, &Sample)> = runs.iter().map(|r| (t, r)).collect();
        assert_eq!(learn(&cfg, &class, &samples, 0.05), None);
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
            let tenant = Tenant {
                class: c,
                share: SharePct::new(50).expect("50%"),
                user: 0,
            };
            predict(
                reference,
                reference,
                &[tenant],
                reference.default_sm_clock,
                params,
            )
            .jobs[0]
                .runtime
                .0
        };
        let r = 1.5 * at_half(&class);
        let runs = [run(r, Some(50), Some(0.25), false)];
        let samples: Vec<(usize, &Sample)> = runs.iter().map(|x| (t, x)).collect();
        assert_eq!(
            learn(&cfg, &class, &samples, 0.05),
            None,
            "type not measured"
        );
        class.measured_speed = vec![(reference.name.clone(), 1.0)];
        let r = 1.5 * at_half(&class);
        let runs = [run(r, Some(50), Some(0.25), false)];
        let samples: Vec<(usize, &Sample)> = runs.iter().map(|x| (t, x)).collect();
        let n = learn(&cfg, &class, &samples, 0.05).expect("measured type");
        assert!((n.per_busy - 2.0).abs() < 1e-6, "{n:?}");
        assert!((n.up_to_busy - 0.25).abs() < 1e-9);
    }
}
