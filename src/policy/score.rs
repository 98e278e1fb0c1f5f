//! The rank stage of placement: options ordered by their one cost (`policy::cost`), ties
//! broken deterministically, and the cost shown as a score out of 100 (the best option 100,
//! another the best cost over its own), the form Slurm admins read in `heshare plan`.

use super::cost::{energy_j, time_s};
use super::placement::Candidate;

/// Sets every candidate's score from its cost: the least cost over this one, times 100.
pub fn score(cands: &mut [Candidate]) {
    let best = cands.iter().map(|c| c.cost_j).fold(f64::INFINITY, f64::min);
    for c in cands.iter_mut() {
        c.score = if c.cost_j > 0.0 && best.is_finite() {
            100.0 * best / c.cost_j
        } else {
            100.0
        };
    }
}

/// Best first: cost, then less energy, less time, type name, node, GPUs, shares before whole.
pub fn rank(cands: &mut [Candidate]) {
    cands.sort_by(|a, b| {
        a.cost_j
            .total_cmp(&b.cost_j)
            .then(energy_j(a).total_cmp(&energy_j(b)))
            .then(time_s(a).total_cmp(&time_s(b)))
            .then(a.gpu_type.cmp(&b.gpu_type))
            .then(a.node.cmp(&b.node))
            .then(a.gpu_indices.cmp(&b.gpu_indices))
            .then(a.exclusive.cmp(&b.exclusive))
    });
}
