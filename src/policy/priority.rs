//! The bounded priority adjustment: a job whose placement saves energy against what it would
//! cost without heshare (a whole GPU of the fastest allowed type at the default clock) gets a
//! proportionally lower Slurm `nice`, one that costs more gets a higher one, within ±nice_range.
//!
//! This rewards jobs that accept a share or a slower type; it never freezes a priority (setting
//! Slurm's `priority` field would), it only nudges the multifactor priority.

use super::placement::{Candidate, exclusive_default};
use crate::config::Config;
use crate::model::JobClass;

pub fn nice_adjustment(
    cfg: &Config,
    class: &JobClass,
    allowed: &[bool],
    chosen: &Candidate,
    gpus: u32,
) -> i32 {
    let range = f64::from(cfg.policy.nice_range);
    let baseline = (0..cfg.gpu_types.len())
        .filter(|&t| allowed.get(t).copied().unwrap_or(false))
        .map(|t| exclusive_default(cfg, class, t))
        .min_by(|a, b| a.0.0.total_cmp(&b.0.0).then(a.1.0.total_cmp(&b.1.0)));
    let Some((_, energy)) = baseline else {
        return 0;
    };
    let base = energy.0 * f64::from(gpus);
    if base <= 0.0 || !chosen.predicted_energy_j.is_finite() {
        return 0;
    }
    let ratio = chosen.predicted_energy_j / base;
    let nice = (range * (ratio - 1.0)).round().clamp(-range, range);
    // Bounded by ±nice_range <= 10000 (validated), so the cast is exact.
    #[allow(clippy::cast_possible_truncation)]
    let nice = nice as i32;
    nice
}
