//! Recurring jobs: the simulator's workload as users submit it, runs of the same scripts.
//!
//! Each job is a run of a *template* (a user's script): a new template draws its shape from the
//! trace, its class and its truth from the measured workloads once, and whether its user labels
//! it (`--labelled F` its true class, `--mislabelled F` a wrong one, else nothing). Each run of
//! a template varies around it: its work by `run_noise` (log-normal, mean one), a service's need
//! likewise by half of it.
//!
//! How often scripts recur is a stated parameter, `--runs-per-template R`: the jobs of a run are
//! runs of N/R templates, each job of one picked at random, so scripts recur R times on average
//! (Poisson) and a job's shape is still a draw from the trace (a template's shape is one). No
//! public trace we could bundle names the script behind each job, so R is swept in the issue
//! note rather than measured; R = 1 is a world where nothing ever recurs.

use super::rng::SplitMix;

/// How the workload recurs and what its users say.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Recurrence {
    /// Mean runs per template (1: every job is new).
    pub runs_per_template: f64,
    /// Log-space spread of a run's work around its template's.
    pub run_noise: f64,
    /// Fractions of templates whose users give their true class, and a wrong one.
    pub labelled: f64,
    pub mislabelled: f64,
    /// Fraction of templates whose users write their time limit for the fastest GPU type their
    /// request allows (where they tried it) instead of the slowest: on a slower type a run of
    /// such a script passes its limit, under any scheduler.
    pub fast_limits: f64,
}

impl Default for Recurrence {
    fn default() -> Self {
        Recurrence {
            runs_per_template: 10.0,
            run_noise: 0.15,
            labelled: 0.0,
            mislabelled: 0.0,
            fast_limits: 0.0,
        }
    }
}

impl Recurrence {
    /// The world before templates: every job new, as its trace row says, labelled truly.
    pub fn independent() -> Recurrence {
        Recurrence {
            runs_per_template: 1.0,
            run_noise: 0.0,
            labelled: 1.0,
            mislabelled: 0.0,
            fast_limits: 0.0,
        }
    }
}

/// What its user says of a template's class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Label {
    None,
    True,
    Wrong,
}

/// How many templates `jobs` jobs are runs of.
pub fn count(r: Recurrence, jobs: usize) -> usize {
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let n = (jobs as f64 / r.runs_per_template.max(1.0)).ceil() as usize;
    n.clamp(1, jobs.max(1))
}

/// The template the next job is a run of, of `count` (each equally likely, so every job's shape
/// is still a draw from the trace and the offered load is the one asked); `None` when nothing
/// recurs.
pub fn pick(rng: &mut SplitMix, r: Recurrence, count: usize) -> Option<usize> {
    (r.runs_per_template > 1.0).then(|| rng.below(count.max(1)))
}

/// What a new template's user says of it.
pub fn label(rng: &mut SplitMix, r: Recurrence) -> Label {
    let u = rng.unit();
    if u < r.labelled {
        Label::True
    } else if u < r.labelled + r.mislabelled {
        Label::Wrong
    } else {
        Label::None
    }
}

/// A log-normal factor with mean one and log-space spread `sigma`.
pub fn noise(rng: &mut SplitMix, sigma: f64) -> f64 {
    if sigma <= 0.0 {
        return 1.0;
    }
    // Box-Muller; `unit` is in [0, 1), so 1 - u is never 0.
    let (u1, u2) = (1.0 - rng.unit(), rng.unit());
    let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
    (sigma * z - sigma * sigma / 2.0).exp()
}

/// A template's script and job name, as its user would write them: distinct per template, with
/// the run number in the name (which the name stem strips) and in nothing else.
pub fn script_of(template: usize) -> String {
    format!(
        "#!/bin/bash\n#SBATCH --gres=gpu:1\npython run_{}.py\n",
        letters(template)
    )
}

pub fn name_of(template: usize, run: usize) -> String {
    format!("{}_run{run}", letters(template))
}

/// A number in letters (`0` -> `a`, `26` -> `ba`): names without digits, which a name stem
/// would drop.
fn letters(mut n: usize) -> String {
    let mut out = Vec::new();
    loop {
        out.push(b'a' + u8::try_from(n % 26).unwrap_or(0));
        n /= 26;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::key::{Identity, keys, name_stem};

    #[test]
    fn templates_recur_about_as_often_as_asked() {
        let mut rng = SplitMix::new(7);
        let r = Recurrence::default();
        let n = 20_000;
        let slots = count(r, n);
        let mut used: Vec<usize> = (0..n).filter_map(|_| pick(&mut rng, r, slots)).collect();
        assert_eq!(used.len(), n);
        used.sort_unstable();
        used.dedup();
        #[allow(clippy::cast_precision_loss)]
        let runs = n as f64 / used.len() as f64;
        assert!((runs - 10.0).abs() < 0.5, "{runs} runs per template");
        let never = Recurrence {
            runs_per_template: 1.0,
            ..r
        };
        assert!((0..100).all(|_| pick(&mut rng, never, count(never, 100)).is_none()));
    }

    #[test]
    fn noise_has_mean_one() {
        let mut rng = SplitMix::new(3);
        let mean: f64 = (0..50_000).map(|_| noise(&mut rng, 0.15)).sum::<f64>() / 50_000.0;
        assert!((mean - 1.0).abs() < 0.01, "{mean}");
    }

    #[test]
    fn each_template_has_its_own_keys_and_its_runs_share_them() {
        let k = |t: usize, run: usize| {
            let (script, name) = (script_of(t), name_of(t, run));
            keys(&Identity {
                uid: 3,
                account: "a0",
                name: Some(&name),
                script: Some(&script),
                command: None,
                request: "gpu:1",
            })
        };
        assert_eq!(k(27, 1), k(27, 9));
        assert_ne!(k(27, 1)[0], k(28, 1)[0]);
        assert_ne!(k(27, 1)[1], k(28, 1)[1]);
        assert_eq!(name_stem(&name_of(0, 12)).as_deref(), Some("a-run"));
    }
}
