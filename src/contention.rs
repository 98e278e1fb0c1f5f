//! How much a busy neighbour on the same GPU slows a job, as measured: Gavel's co-located pairs
//! of one-GPU jobs on a V100 (bundled in `data/gavel-osdi20/`, sources in `data/SOURCES.md`),
//! each read as a sensitivity `k` of the sharing model's contention `1 + k * busy`. The
//! simulator draws each job's sensitivity from them; heshare's belief about a job whose runs
//! never measured its own is their spread ([`prior`]). The pairs spread a hundredfold: a
//! neighbour's typical slowdown says little about the one that kills a run at its time limit.
//! Pure: the tables are compiled in.

use std::collections::BTreeMap;
use std::sync::OnceLock;

const GAVEL_ISOLATED: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/gavel-osdi20/gavel_physical_isolated_throughputs.csv"
));
const GAVEL_COLOCATED: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/gavel-osdi20/gavel_physical_colocated_throughputs.csv"
));

/// One row of Gavel's isolated throughput table.
pub(crate) struct GavelRow {
    pub gpu: &'static str,
    /// On one server (a multi-GPU job's GPUs not spread over servers).
    pub consolidated: bool,
    pub job_type: &'static str,
    /// GPUs the job runs on.
    pub scale: u32,
    pub steps_per_s: f64,
}

/// Gavel's isolated throughput table (`gpu_type, consolidated, job_type, scale_factor,
/// throughput_steps_per_s`; job types hold no commas), its unreadable rows left out.
pub(crate) fn gavel_rows() -> impl Iterator<Item = GavelRow> {
    GAVEL_ISOLATED.lines().skip(1).filter_map(|line| {
        let f: Vec<&'static str> = line.split(',').collect();
        if f.len() != 5 {
            return None;
        }
        Some(GavelRow {
            gpu: f[0],
            consolidated: f[1] == "1",
            job_type: f[2],
            scale: f[3].parse().ok()?,
            steps_per_s: f[4].parse().ok()?,
        })
    })
}

/// Gavel: (job type -> {gpu -> steps/s}) for one GPU, consolidated.
pub(crate) fn gavel_isolated() -> BTreeMap<String, BTreeMap<String, f64>> {
    let mut out: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for r in gavel_rows().filter(|r| r.consolidated && r.scale == 1) {
        out.entry(r.job_type.to_owned())
            .or_default()
            .insert(r.gpu.to_owned(), r.steps_per_s);
    }
    out
}

/// The sensitivity each co-located pair of one-GPU jobs on a V100 implies, as calibrate.py §2
/// reads a pair's summed normalised throughput: sorted.
pub fn pair_sensitivities() -> &'static [f64] {
    static PAIRS: OnceLock<Vec<f64>> = OnceLock::new();
    PAIRS.get_or_init(|| {
        let iso = gavel_isolated();
        let mut out = Vec::new();
        for line in GAVEL_COLOCATED.lines().skip(1) {
            let f: Vec<&str> = line.split(',').collect();
            if f.len() != 7 || f[0] != "v100" || f[2] != "1" || f[4] != "1" {
                continue;
            }
            let (Ok(ta), Ok(tb)) = (f[5].parse::<f64>(), f[6].parse::<f64>()) else {
                continue;
            };
            let (Some(ia), Some(ib)) = (
                iso.get(f[1]).and_then(|m| m.get("v100")),
                iso.get(f[3]).and_then(|m| m.get("v100")),
            ) else {
                continue;
            };
            if ta <= 0.0 || tb <= 0.0 {
                continue;
            }
            let sum = ta / ia + tb / ib;
            // Two half shares of a job with c = 0.25: sum = 2 / ((1 + c) (1 + k / 2)).
            out.push((2.0 * (2.0 / (sum * 1.25) - 1.0)).max(0.0));
        }
        out.sort_by(f64::total_cmp);
        out
    })
}

/// Where the prior's nodes split the pairs' distribution: fine in the upper tail, where a run's
/// kill is decided, coarse below the median, where no neighbour slows a run much.
const PRIOR_EDGES: [f64; 13] = [
    0.0, 0.25, 0.5, 0.7, 0.8, 0.9, 0.94, 0.96, 0.97, 0.98, 0.99, 0.995, 1.0,
];

/// What is believed of the sensitivity of a job whose runs never measured its own: the measured
/// pairs' distribution as `(probability, k)` nodes, each the pairs' quantile at the middle of its
/// slice of probability. Empty where the tables hold no pair.
pub fn prior() -> &'static [(f64, f64)] {
    static PRIOR: OnceLock<Vec<(f64, f64)>> = OnceLock::new();
    PRIOR.get_or_init(|| nodes(pair_sensitivities()))
}

/// `(probability, k)` nodes of the sorted `pairs`, split at [`PRIOR_EDGES`].
fn nodes(pairs: &[f64]) -> Vec<(f64, f64)> {
    if pairs.is_empty() {
        return Vec::new();
    }
    #[allow(clippy::cast_precision_loss)]
    let last = (pairs.len() - 1) as f64;
    let quantile = |q: f64| {
        let x = q * last;
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let i = x.floor() as usize;
        let j = (i + 1).min(pairs.len() - 1);
        pairs[i] + (pairs[j] - pairs[i]) * (x - x.floor())
    };
    PRIOR_EDGES
        .windows(2)
        .map(|w| (w[1] - w[0], quantile(f64::midpoint(w[0], w[1]))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pairs_spread_a_hundredfold_about_a_typical_contention() {
        let pairs = pair_sensitivities();
        assert_eq!(pairs.len(), 636, "Gavel's one-GPU V100 pairs");
        assert!(pairs.windows(2).all(|w| w[0] <= w[1]), "sorted");
        let median = pairs[pairs.len() / 2];
        assert!((0.5..1.5).contains(&median), "{median}");
        // Recommendation (batch 512) beside itself: each at 1.6% of its speed alone.
        assert!((pairs[pairs.len() - 1] - 98.37).abs() < 0.01, "{pairs:?}");
        assert!(pairs[0].abs() < 1e-12, "pairs that ran as fast as alone");
    }

    #[test]
    fn the_prior_keeps_the_pairs_mass_and_tail() {
        let p = prior();
        assert_eq!(p.len(), PRIOR_EDGES.len() - 1);
        let mass: f64 = p.iter().map(|(w, _)| w).sum();
        assert!((mass - 1.0).abs() < 1e-12);
        assert!(p.windows(2).all(|w| w[0].1 <= w[1].1), "nodes in order");
        // The top half-percent node sits among the worst pairs measured.
        assert!(p[p.len() - 1].1 > 60.0, "{p:?}");
        // Its mean is the pairs' mean, near enough for a price.
        let mean: f64 = p.iter().map(|(w, k)| w * k).sum();
        let pairs = pair_sensitivities();
        #[allow(clippy::cast_precision_loss)]
        let exact = pairs.iter().sum::<f64>() / pairs.len() as f64;
        assert!((mean / exact - 1.0).abs() < 0.25, "{mean} vs {exact}");
        assert!(nodes(&[]).is_empty());
        assert!(nodes(&[2.0]).iter().all(|&(_, k)| (k - 2.0).abs() < 1e-12));
    }
}
