//! The score stage of placement, shaped like the Kubernetes scheduling framework's: each term
//! gives every feasible candidate a cost, each term's costs are normalised to 0..=100 (the best
//! candidate 100), and the weighted sum ranks them, ties broken deterministically. A new
//! consideration is one more small `Term`.

use super::placement::Candidate;

/// One score term: a name (for explanations), its weight in the sum, and the cost it reads
/// off a candidate (lower is better).
#[derive(Clone, Copy)]
pub struct Term {
    pub name: &'static str,
    pub weight: f64,
    pub cost: fn(&Candidate) -> f64,
}

/// The job's own energy plus what its arrival costs the jobs already on the GPU.
pub fn energy_cost(c: &Candidate) -> f64 {
    c.predicted_energy_j + c.co_located_energy_penalty_j
}

/// Time to completion from submission: the wait for a GPU of the type, the runtime there, and
/// the progress the jobs already on the GPU lose while it runs.
pub fn time_cost(c: &Candidate) -> f64 {
    c.wait_s + c.predicted_runtime_s + c.co_located_time_penalty_s
}

/// heshare's two terms: energy with weight `energy_weight`, completion time with the rest.
pub fn terms(energy_weight: f64) -> [Term; 2] {
    [
        Term {
            name: "energy",
            weight: energy_weight,
            cost: energy_cost,
        },
        Term {
            name: "time",
            weight: 1.0 - energy_weight,
            cost: time_cost,
        },
    ]
}

/// Costs to scores: the least cost over this one, times 100. Ratios rather than min-max ranges,
/// so a candidate 0.1% slower than the fastest does not lose the whole term.
pub fn normalise(costs: &[f64]) -> Vec<f64> {
    let best = costs.iter().copied().fold(f64::INFINITY, f64::min);
    costs
        .iter()
        .map(|&v| {
            if v > 0.0 && best.is_finite() {
                100.0 * best / v
            } else {
                100.0
            }
        })
        .collect()
}

/// Sets every candidate's score to the weighted sum of its normalised terms.
pub fn score(cands: &mut [Candidate], terms: &[Term]) {
    for c in cands.iter_mut() {
        c.score = 0.0;
    }
    for t in terms {
        let costs: Vec<f64> = cands.iter().map(|c| (t.cost)(c)).collect();
        for (c, s) in cands.iter_mut().zip(normalise(&costs)) {
            c.score += t.weight * s;
        }
    }
}

/// Best first: score, then less energy, less time, type name, node, GPUs, shares before whole.
pub fn rank(cands: &mut [Candidate]) {
    cands.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(energy_cost(a).total_cmp(&energy_cost(b)))
            .then(time_cost(a).total_cmp(&time_cost(b)))
            .then(a.gpu_type.cmp(&b.gpu_type))
            .then(a.node.cmp(&b.node))
            .then(a.gpu_indices.cmp(&b.gpu_indices))
            .then(a.exclusive.cmp(&b.exclusive))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_best_cost_scores_100_and_others_by_ratio() {
        assert_eq!(normalise(&[2.0, 4.0, 8.0]), vec![100.0, 50.0, 25.0]);
        assert_eq!(normalise(&[0.0, 0.0]), vec![100.0, 100.0]);
    }
}
