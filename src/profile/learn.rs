//! What the profiles remember: per key and GPU type, the recent runs the node helper measured.
//!
//! A [`Book`] is the whole store in memory. [`Book::learn`] takes one finished run (an
//! [`Observation`], made from an accounting record by `store`, or from the simulator's world)
//! and files it under each of the job's keys that its user and account own; failed, cancelled and
//! very short runs, and runs whose energy the counter could not give, teach nothing. Each key and
//! type keeps its newest `max_samples` runs with their end times, so lookups can weight recent
//! runs more and take quantiles. Pure: no I/O, no clock (callers pass the time).

use super::key::ProfileKey;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How a run ended, from the Epilog's `SLURM_JOB_EXIT_CODE2` (`exit:signal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Exit 0, no signal.
    Completed,
    /// A non-zero exit.
    Failed,
    /// Ended by a signal: cancelled, killed at its time limit, preempted.
    Killed,
    /// Nothing said (an older record, or a Slurm that did not pass it).
    #[default]
    Unknown,
}

impl Outcome {
    /// `0:0` -> completed, `1:0` -> failed, `0:9` -> killed.
    pub fn of_exit_code2(s: &str) -> Outcome {
        let Some((code, signal)) = s.trim().split_once(':') else {
            return Outcome::Unknown;
        };
        match (code.parse::<i64>(), signal.parse::<i64>()) {
            (Ok(_), Ok(sig)) if sig != 0 => Outcome::Killed,
            (Ok(0), Ok(0)) => Outcome::Completed,
            (Ok(_), Ok(0)) => Outcome::Failed,
            _ => Outcome::Unknown,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Failed => "failed",
            Outcome::Killed => "killed",
            Outcome::Unknown => "unknown",
        }
    }
}

/// The fraction of a GPU an MPS share of `share_pct` percent is (`None`: a whole GPU), within
/// 1%..=100% whatever a record says: one reading for every step that learns from a share.
pub fn share_fraction(share_pct: Option<u8>) -> f64 {
    share_pct.map_or(1.0, |p| f64::from(p.clamp(1, 100)) / 100.0)
}

/// Whether a run kept its GPU as busy as what it held lets it be (90% of its MPS share, or of
/// a whole GPU, or more): it may have needed more than it had, which throttled it, so what it
/// measured is a floor of its need, not its need.
pub fn filled_its_share(busy: f64, share_pct: Option<u8>) -> bool {
    busy >= 0.9 * share_fraction(share_pct)
}

/// One run on one GPU type, as a profile keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// The accounting record's id: a run is filed once per key.
    pub id: String,
    /// When it ended (Unix seconds, or the simulator's clock).
    pub end_s: f64,
    pub runtime_s: f64,
    /// The MPS share it held (percent), `None` for whole GPUs.
    pub share_pct: Option<u8>,
    pub gpus: u32,
    /// Time-weighted `f_default / f` of its SM clock over the run: 1 at the default clock.
    pub stretch: f64,
    /// Its power above idle per GPU (the idle power of its share taken off), over the type's
    /// `max - idle` at the clock it ran at: how much of the GPU's dynamic power it drew.
    pub dyn_frac: Option<f64>,
    /// The GPU busy fraction the driver measured for its processes, per GPU.
    pub busy: Option<f64>,
    /// The most GPU memory its processes held, GiB.
    pub memory_gib: Option<f64>,
    /// How busy the other jobs on its GPUs kept them while it ran (the driver's busy fraction of
    /// their processes, summed), where measured: what a crowded run says of its neighbours.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neighbour_busy: Option<f64>,
    /// Whether it had its GPUs to itself (no other job on them while it ran): only such runs
    /// say how fast it runs alone.
    pub alone: bool,
}

/// One finished run with everything `learn` checks before filing it.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    /// The job's keys, as `job_submit` computed them.
    pub keys: Vec<ProfileKey>,
    /// The uid and account Slurm ran it as (the Prolog's environment, not the job's).
    pub uid: u32,
    pub account: String,
    pub gpu_type: String,
    pub outcome: Outcome,
    /// False when the energy is not the whole run's (a counter reset, a Prolog that never ran).
    pub energy_valid: bool,
    /// The job's time limit, where the record has it: a run ended by a signal at its limit ran
    /// out of time.
    pub time_limit_s: Option<f64>,
    pub sample: Sample,
}

impl Observation {
    /// Killed by a signal once its runtime reached its time limit (Slurm signals a job at its
    /// limit and kills it `KillWait` later; 2% below covers the Prolog's start before the job's).
    pub fn hit_limit(&self) -> bool {
        self.outcome == Outcome::Killed
            && self
                .time_limit_s
                .is_some_and(|l| l > 0.0 && self.sample.runtime_s >= 0.98 * l)
    }
}

/// A run killed at its time limit on a type: its runtime is only a lower bound, so it is no
/// sample, but it says the job did not finish in time there, as it ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LimitKill {
    /// The accounting record's id.
    pub id: String,
    pub end_s: f64,
    /// The MPS share it held (percent), `None` for whole GPUs.
    pub share_pct: Option<u8>,
    /// Its time limit, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_s: Option<f64>,
}

/// The runs of one key on one GPU type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct TypeRuns {
    /// Newest last, at most `max_samples`.
    pub samples: Vec<Sample>,
    /// Every run ever filed here (the samples are the newest of them).
    pub runs: u64,
    /// Runs killed at their time limit here, newest last, at most `max_samples`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limit_kills: Vec<LimitKill>,
}

/// Everything learned under one key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Profile {
    /// Per GPU type name.
    pub types: BTreeMap<String, TypeRuns>,
    /// The newest run's end.
    pub last_s: f64,
}

impl Profile {
    pub fn runs(&self) -> u64 {
        self.types.values().map(|t| t.runs).sum()
    }
}

/// What `learn` does with a run's keys.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Filed {
    /// Keys the run was filed under.
    pub taught: usize,
    /// Keys refused because they name another user or account (a forged key).
    pub foreign: Vec<ProfileKey>,
    /// Why the run teaches nothing at all, when it does not.
    pub skipped: Option<&'static str>,
}

/// The limits of what teaches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LearnLimits {
    pub max_samples: usize,
}

/// The profile store in memory: key -> profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Book {
    pub profiles: BTreeMap<String, Profile>,
}

impl Book {
    /// Files one finished run under each of its keys its user and account own.
    pub fn learn(&mut self, obs: &Observation, limits: LearnLimits) -> Filed {
        let mut filed = Filed::default();
        let s = &obs.sample;
        let hit_limit = obs.hit_limit();
        filed.skipped = match obs.outcome {
            Outcome::Failed => Some("failed"),
            Outcome::Killed if !hit_limit => Some("ended by a signal before its time limit"),
            Outcome::Killed => None,
            Outcome::Completed | Outcome::Unknown => None,
        }
        // A kill at the limit teaches by its runtime alone, not by its energy.
        .or_else(|| (!obs.energy_valid && !hit_limit).then_some("energy incomplete"))
        .or_else(|| (!s.runtime_s.is_finite() || s.runtime_s <= 0.0).then_some("no runtime"))
        .or_else(|| obs.gpu_type.is_empty().then_some("no GPU type"));
        if filed.skipped.is_some() {
            return filed;
        }
        for key in &obs.keys {
            if !key.belongs_to(obs.uid, &obs.account) {
                filed.foreign.push(key.clone());
                continue;
            }
            let p = self.profiles.entry(key.as_str().to_owned()).or_default();
            let t = p.types.entry(obs.gpu_type.clone()).or_default();
            let new = if hit_limit {
                let kill = LimitKill {
                    id: s.id.clone(),
                    end_s: s.end_s,
                    share_pct: s.share_pct,
                    limit_s: obs.time_limit_s,
                };
                file_newest(&mut t.limit_kills, kill, limits.max_samples, |k| {
                    (&k.id, k.end_s)
                })
            } else {
                let new = file_newest(&mut t.samples, s.clone(), limits.max_samples, |x| {
                    (&x.id, x.end_s)
                });
                t.runs += u64::from(new);
                new
            };
            if new {
                p.last_s = p.last_s.max(s.end_s);
                filed.taught += 1;
            }
        }
        filed
    }

    pub fn get(&self, key: &ProfileKey) -> Option<&Profile> {
        self.profiles.get(key.as_str())
    }

    /// Drops a key; whether it was there.
    pub fn forget(&mut self, key: &str) -> bool {
        self.profiles.remove(key).is_some()
    }
}

/// Files `item` in `list` in end order, once per record id, keeping the newest `max` (the oldest
/// go first); whether it was new. `id_end` reads an entry's record id and end time.
fn file_newest<T>(
    list: &mut Vec<T>,
    item: T,
    max: usize,
    id_end: impl Fn(&T) -> (&String, f64),
) -> bool {
    let (id, end) = id_end(&item);
    if list.iter().any(|x| id_end(x).0 == id) {
        return false;
    }
    let at = list.partition_point(|x| id_end(x).1 <= end);
    list.insert(at, item);
    if list.len() > max.max(1) {
        let extra = list.len() - max.max(1);
        list.drain(..extra);
    }
    true
}

/// The `q` quantile of `values` weighted by `weights` (the smallest value whose cumulative
/// weight reaches `q` of the total). `None` for no positive weight.
pub fn weighted_quantile(values: &[f64], weights: &[f64], q: f64) -> Option<f64> {
    let mut v: Vec<(f64, f64)> = values
        .iter()
        .zip(weights)
        .filter(|(x, w)| x.is_finite() && **w > 0.0)
        .map(|(&x, &w)| (x, w))
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total: f64 = v.iter().map(|p| p.1).sum();
    let want = q.clamp(0.0, 1.0) * total;
    let mut acc = 0.0;
    for (x, w) in &v {
        acc += w;
        if acc >= want - 1e-12 {
            return Some(*x);
        }
    }
    v.last().map(|p| p.0)
}

/// How much a run that ended at `end_s` counts at `now_s`: halves every `half_life_s`.
pub fn recency_weight(end_s: f64, now_s: f64, half_life_s: f64) -> f64 {
    if half_life_s <= 0.0 || !half_life_s.is_finite() {
        return 1.0;
    }
    let age = (now_s - end_s).max(0.0);
    0.5f64.powf(age / half_life_s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::key::{Identity, keys};
    use proptest::prelude::*;

    const LIMITS: LearnLimits = LearnLimits { max_samples: 4 };

    /// A share's fraction is read the same way everywhere, and a record's out-of-range percent
    /// never becomes a zero share (a division by it) or more than a whole GPU.
    #[test]
    fn a_share_is_a_fraction_of_one_gpu_within_one_percent_and_whole() {
        assert!(filled_its_share(0.28, Some(30)) && !filled_its_share(0.2, Some(30)));
        assert!(filled_its_share(0.95, None) && !filled_its_share(0.5, None));
        assert!((share_fraction(None) - 1.0).abs() < 1e-12);
        assert!((share_fraction(Some(40)) - 0.4).abs() < 1e-12);
        assert!((share_fraction(Some(0)) - 0.01).abs() < 1e-12);
        assert!((share_fraction(Some(250)) - 1.0).abs() < 1e-12);
    }

    fn obs(id: &str, uid: u32, end: f64) -> Observation {
        Observation {
            keys: keys(&Identity {
                uid: 1000,
                account: "physics",
                name: Some("bert_run1"),
                script: Some("python bert.py\n"),
                command: None,
                request: "gpu:1",
            }),
            uid,
            account: "physics".into(),
            gpu_type: "a100".into(),
            outcome: Outcome::Completed,
            energy_valid: true,
            time_limit_s: None,
            sample: Sample {
                id: id.into(),
                end_s: end,
                runtime_s: 3600.0,
                share_pct: None,
                gpus: 1,
                stretch: 1.0,
                dyn_frac: Some(0.8),
                busy: None,
                memory_gib: None,
                neighbour_busy: None,
                alone: true,
            },
        }
    }

    #[test]
    fn a_run_teaches_every_level_once_and_failures_teach_nothing() {
        let mut b = Book::default();
        let f = b.learn(&obs("n:1:1", 1000, 10.0), LIMITS);
        assert_eq!((f.taught, f.skipped), (3, None));
        // The same record again (a retried update) is filed once.
        assert_eq!(b.learn(&obs("n:1:1", 1000, 10.0), LIMITS).taught, 0);
        for (outcome, why) in [
            (Outcome::Failed, "failed"),
            (Outcome::Killed, "ended by a signal before its time limit"),
        ] {
            let mut o = obs("n:2:1", 1000, 20.0);
            o.outcome = outcome;
            assert_eq!(b.learn(&o, LIMITS).skipped, Some(why));
        }
        let mut short = obs("n:3:1", 1000, 30.0);
        short.sample.runtime_s = 0.0;
        assert_eq!(b.learn(&short, LIMITS).skipped, Some("no runtime"));
        let mut reset = obs("n:4:1", 1000, 40.0);
        reset.energy_valid = false;
        assert_eq!(b.learn(&reset, LIMITS).skipped, Some("energy incomplete"));
        for p in b.profiles.values() {
            assert_eq!(p.runs(), 1);
        }
    }

    /// A run killed at its time limit is no runtime sample (its runtime is only a lower bound)
    /// but is remembered as a kill on its type, with its share and its limit; one
    /// killed by a signal well before its limit (scancel) teaches nothing.
    #[test]
    fn a_run_killed_at_its_limit_is_filed_as_a_kill_not_a_sample() {
        let mut b = Book::default();
        let mut killed = obs("n:1:1", 1000, 10.0);
        killed.outcome = Outcome::Killed;
        killed.time_limit_s = Some(3600.0);
        killed.sample.share_pct = Some(30);
        killed.sample.alone = false;
        // Its counter may not have been read out at the kill: the kill still teaches.
        killed.energy_valid = false;
        assert!(killed.hit_limit());
        let f = b.learn(&killed, LIMITS);
        assert_eq!((f.taught, f.skipped), (3, None));
        // Filed once, whatever the retries.
        assert_eq!(b.learn(&killed, LIMITS).taught, 0);
        for p in b.profiles.values() {
            assert_eq!(p.runs(), 0, "a kill is not a run that measured anything");
            let t = &p.types["a100"];
            assert!(t.samples.is_empty());
            assert_eq!(
                t.limit_kills,
                vec![LimitKill {
                    id: "n:1:1".into(),
                    end_s: 10.0,
                    share_pct: Some(30),
                    limit_s: Some(3600.0),
                }]
            );
        }
        let mut cancelled = obs("n:2:1", 1000, 20.0);
        cancelled.outcome = Outcome::Killed;
        cancelled.time_limit_s = Some(7200.0);
        assert!(!cancelled.hit_limit());
        assert_eq!(
            b.learn(&cancelled, LIMITS).skipped,
            Some("ended by a signal before its time limit")
        );
        // No limit in the record: nothing says it ran out of time.
        let mut unknown = obs("n:3:1", 1000, 30.0);
        unknown.outcome = Outcome::Killed;
        assert!(!unknown.hit_limit());
        // Only the newest `max_samples` kills are kept.
        for i in 0..10 {
            let mut k = killed.clone();
            k.sample.id = format!("n:k{i}:1");
            k.sample.end_s = 100.0 + f64::from(i);
            b.learn(&k, LIMITS);
        }
        for p in b.profiles.values() {
            let kills = &p.types["a100"].limit_kills;
            assert_eq!(kills.len(), LIMITS.max_samples);
            assert_eq!(kills.last().map(|k| k.id.as_str()), Some("n:k9:1"));
        }
    }

    #[test]
    fn a_key_naming_another_user_is_refused_and_the_account_key_is_shared() {
        let mut b = Book::default();
        // uid 1001's job carries uid 1000's keys (a forged SPANK entry that got through): only the
        // account's request key, which bob's account owns too, learns from it.
        let f = b.learn(&obs("n:1:1", 1001, 10.0), LIMITS);
        assert_eq!(f.taught, 1);
        assert_eq!(f.foreign.len(), 2);
        assert!(b.profiles.keys().all(|k| k.starts_with("request:")));
    }

    #[test]
    fn only_the_newest_runs_are_kept_in_end_order() {
        let mut b = Book::default();
        for (i, end) in [50.0, 10.0, 40.0, 20.0, 30.0, 60.0].into_iter().enumerate() {
            b.learn(&obs(&format!("n:{i}:1"), 1000, end), LIMITS);
        }
        let p = b.profiles.values().next().expect("a profile");
        let t = &p.types["a100"];
        assert_eq!(t.runs, 6);
        let ends: Vec<f64> = t.samples.iter().map(|s| s.end_s).collect();
        assert_eq!(ends, [30.0, 40.0, 50.0, 60.0]);
        assert_eq!(p.last_s, 60.0);
    }

    #[test]
    fn exit_codes_read_as_slurm_writes_them() {
        assert_eq!(Outcome::of_exit_code2("0:0"), Outcome::Completed);
        assert_eq!(Outcome::of_exit_code2("2:0"), Outcome::Failed);
        assert_eq!(Outcome::of_exit_code2("0:15"), Outcome::Killed);
        assert_eq!(Outcome::of_exit_code2("junk"), Outcome::Unknown);
    }

    proptest! {
        #[test]
        fn a_weighted_quantile_is_one_of_the_values_and_grows_with_q(
            v in proptest::collection::vec(0.0f64..1e6, 1..40),
            q1 in 0.0f64..1.0,
            q2 in 0.0f64..1.0,
        ) {
            let w: Vec<f64> = (0..v.len()).map(|i| 1.0 + (i % 3) as f64).collect();
            let (lo, hi) = if q1 <= q2 { (q1, q2) } else { (q2, q1) };
            let a = weighted_quantile(&v, &w, lo).expect("values");
            let b = weighted_quantile(&v, &w, hi).expect("values");
            prop_assert!(v.contains(&a) && v.contains(&b));
            prop_assert!(a <= b);
        }

        #[test]
        fn recency_weights_fall_with_age(age1 in 0.0f64..1e8, age2 in 0.0f64..1e8) {
            let (young, old) = if age1 <= age2 { (age1, age2) } else { (age2, age1) };
            let now = 2e8;
            let h = 30.0 * 86_400.0;
            prop_assert!(recency_weight(now - young, now, h) >= recency_weight(now - old, now, h));
            prop_assert!(recency_weight(now - young, now, h) <= 1.0);
        }
    }
}
