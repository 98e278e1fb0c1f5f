//! The order of the simulated queue: Slurm's job priority as `priority/multifactor` computes it
//! from the factors the simulator has (age and the site factor a job_submit plugin sets; every
//! job of a simulated workload has the same partition, QOS, association and size weights, so
//! those add the same to all and do not change the order), or submission order under
//! `priority/basic`.
//!
//! `priority = PriorityWeightAge * min(age / PriorityMaxAge, 1) + site_factor`; ties go to the
//! older job, as Slurm's job id order does.

use std::collections::VecDeque;

/// Which of Slurm's priority plugins orders the queue, and its weights.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct QueueOrder {
    /// `priority/multifactor` (else `priority/basic`: first come, first served, no site factor).
    pub multifactor: bool,
    /// `PriorityWeightAge`: the priority a job gains by waiting `max_age_s`.
    pub weight_age: f64,
    /// `PriorityMaxAge` in seconds (Slurm's default 7-0).
    pub max_age_s: f64,
}

impl Default for QueueOrder {
    /// Multifactor with age weighted 1000 over Slurm's default maximum age of 7 days (Slurm's
    /// default age weight is 0; a site that uses multifactor sets one, and 1000 is the value of
    /// Slurm's own multifactor examples).
    fn default() -> Self {
        QueueOrder {
            multifactor: true,
            weight_age: 1000.0,
            max_age_s: 7.0 * 86_400.0,
        }
    }
}

impl QueueOrder {
    /// First come, first served (`priority/basic`).
    pub fn basic() -> Self {
        QueueOrder {
            multifactor: false,
            ..QueueOrder::default()
        }
    }

    /// A job's priority at `now`, submitted at `submit_s` with `site_factor`.
    pub fn priority(&self, now: f64, submit_s: f64, site_factor: i32) -> f64 {
        if !self.multifactor {
            return 0.0;
        }
        let age = if self.max_age_s > 0.0 {
            ((now - submit_s).max(0.0) / self.max_age_s).min(1.0)
        } else {
            1.0
        };
        self.weight_age * age + f64::from(site_factor)
    }

    /// Sorts `waiting` (job indices) highest priority first at `now`, older first on ties.
    /// Stable, so a queue already in order stays as it is.
    pub fn sort(
        &self,
        now: f64,
        waiting: &mut VecDeque<usize>,
        submit_s: impl Fn(usize) -> f64,
        site_factor: impl Fn(usize) -> i32,
    ) {
        if !self.multifactor {
            // Submission order; jobs were queued as they arrived, so nothing moves.
            waiting
                .make_contiguous()
                .sort_by(|&a, &b| submit_s(a).total_cmp(&submit_s(b)).then(a.cmp(&b)));
            return;
        }
        let mut keyed: Vec<(f64, f64, usize)> = waiting
            .iter()
            .map(|&j| {
                (
                    self.priority(now, submit_s(j), site_factor(j)),
                    submit_s(j),
                    j,
                )
            })
            .collect();
        keyed.sort_by(|a, b| {
            b.0.total_cmp(&a.0)
                .then(a.1.total_cmp(&b.1))
                .then(a.2.cmp(&b.2))
        });
        waiting.clear();
        waiting.extend(keyed.into_iter().map(|(_, _, j)| j));
    }

    /// Reads `PriorityType`, `PriorityWeightAge` and `PriorityMaxAge` from slurm.conf text
    /// (keys case-insensitive); others keep `self`'s values. Errors name the line.
    pub fn from_slurm_conf(mut self, text: &str, file: &str) -> Result<QueueOrder, String> {
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            for word in line.split_whitespace() {
                let Some((k, v)) = word.split_once('=') else {
                    continue;
                };
                match k.to_ascii_lowercase().as_str() {
                    "prioritytype" => {
                        self.multifactor = v.eq_ignore_ascii_case("priority/multifactor");
                    }
                    "priorityweightage" => {
                        self.weight_age = v
                            .parse::<u32>()
                            .map(f64::from)
                            .map_err(|_| format!("{file}:{}: {k}={v}: not a weight", n + 1))?;
                    }
                    "prioritymaxage" => {
                        self.max_age_s = slurm_time_s(v).ok_or_else(|| {
                            format!(
                                "{file}:{}: {k}={v}: not a time (minutes, or days-hours[:minutes[:seconds]])",
                                n + 1
                            )
                        })?;
                    }
                    _ => {}
                }
            }
        }
        Ok(self)
    }
}

/// Slurm's time format (`time_str2secs`): `M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`.
fn slurm_time_s(v: &str) -> Option<f64> {
    let num = |s: &str| s.parse::<u32>().ok().map(f64::from);
    let (days, rest) = match v.split_once('-') {
        Some((d, r)) => (num(d)?, Some(r)),
        None => (0.0, None),
    };
    let parts: Vec<&str> = rest.unwrap_or(v).split(':').collect();
    let p: Vec<f64> = parts.iter().map(|s| num(s)).collect::<Option<_>>()?;
    let secs = match (rest.is_some(), p.as_slice()) {
        (false, [m]) => m * 60.0,
        (false, [m, s]) => m * 60.0 + s,
        (false, [h, m, s]) | (true, [h, m, s]) => h * 3600.0 + m * 60.0 + s,
        (true, [h]) => h * 3600.0,
        (true, [h, m]) => h * 3600.0 + m * 60.0,
        _ => return None,
    };
    Some(days * 86_400.0 + secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn age_and_site_factor_order_the_queue_and_ties_go_to_the_older_job() {
        let q = QueueOrder::default();
        let submit = [0.0, 600.0, 1200.0, 1200.0];
        let site = [0, 0, 5, 0];
        let mut w: VecDeque<usize> = (0..4).collect();
        // At 1800 s: ages 1800, 1200, 600, 600 s; 1000 per 7 days is 0.00165 per second, so job
        // 2's +5 outweighs 20 minutes of age.
        q.sort(1800.0, &mut w, |j| submit[j], |j| site[j]);
        assert_eq!(w, [2, 0, 1, 3]);
        // A week later every job has the full age factor: the site factor alone decides, and
        // among equals the older job goes first.
        q.sort(1800.0 + 8.0 * 86_400.0, &mut w, |j| submit[j], |j| site[j]);
        assert_eq!(w, [2, 0, 1, 3]);
        let mut w: VecDeque<usize> = [3, 1, 0].into_iter().collect();
        q.sort(10.0 * 86_400.0, &mut w, |j| submit[j], |_| 0);
        assert_eq!(w, [0, 1, 3]);
    }

    #[test]
    fn basic_is_first_come_first_served_whatever_the_site_factor() {
        let q = QueueOrder::basic();
        let mut w: VecDeque<usize> = [2, 0, 1].into_iter().collect();
        q.sort(100.0, &mut w, |j| [0.0, 1.0, 2.0][j], |j| [0, 0, 1000][j]);
        assert_eq!(w, [0, 1, 2]);
        assert!(q.priority(100.0, 0.0, 1000).abs() < f64::EPSILON);
    }

    #[test]
    fn slurm_conf_weights_and_times_are_read_and_bad_ones_named() {
        let q = QueueOrder::basic()
            .from_slurm_conf(
                "PriorityType=priority/multifactor\npriorityweightage=5000 PriorityMaxAge=1-12\n",
                "s",
            )
            .expect("valid");
        assert!(q.multifactor);
        assert!((q.weight_age - 5000.0).abs() < 1e-9);
        assert!((q.max_age_s - 36.0 * 3600.0).abs() < 1e-9);
        assert_eq!(slurm_time_s("90"), Some(5400.0));
        assert_eq!(slurm_time_s("1:30"), Some(90.0));
        assert_eq!(slurm_time_s("2:00:00"), Some(7200.0));
        assert_eq!(slurm_time_s("7-0"), Some(7.0 * 86_400.0));
        assert_eq!(slurm_time_s("0-1:2:3"), Some(3723.0));
        assert_eq!(slurm_time_s("soon"), None);
        let err = QueueOrder::default()
            .from_slurm_conf("\nPriorityMaxAge=soon\n", "slurm.conf")
            .expect_err("bad time");
        assert!(err.contains("slurm.conf:2: PriorityMaxAge=soon"), "{err}");
        let basic = QueueOrder::default()
            .from_slurm_conf("PriorityType=priority/basic\n", "s")
            .expect("valid");
        assert!(!basic.multifactor);
    }
}
