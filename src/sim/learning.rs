//! heshare learning online in the simulator, through the code the cluster runs: every job that
//! ends gives the accounting record the node helper would write (`node::record::Record`, from
//! what the world measured: runtime, GPU energy, clocks, busy time, how it ended), turned into an
//! observation by `profile::store::observation` and filed by `profile::Book::learn` when the
//! next `heshare profiles update` runs (every `update_period_s`, as a timer would); submissions
//! look their keys up with `profile::lookup`, as the plugin does.

use super::engine::{SimJob, State};
use crate::node::gpu::BackendKind;
use crate::node::record::{Basis, Record, RecordKind};
use crate::node::state::ClockChange;
use crate::profile::store::observation;
use crate::profile::{
    Asked, Book, Identity, Learned, Level, Observation, ProfileKey, keys, lookup,
};
use rustc_hash::FxHashMap;
use serde::Serialize;

/// How heshare's decisions used profiles over one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ProfileStats {
    /// GPU jobs heshare decided at submission.
    pub submitted: usize,
    /// Of those, decided with a profile, per level (script, name, request).
    pub with_profile: usize,
    pub by_level: [usize; 3],
    /// With a label the user gave (true or not), and without a profile.
    pub labelled: usize,
    /// Neither label nor profile: left as asked.
    pub as_asked: usize,
    /// A label set aside because the job's runs contradict it.
    pub overruled: usize,
    /// Of the labels set aside, those that were wrong.
    pub overruled_wrong: usize,
    /// Runs filed, and keys refused as another user's.
    pub taught: usize,
    pub foreign: usize,
    pub profiles: usize,
    /// The kill price against the kills: the runs heshare placed by a label or a profile.
    pub kill_price: KillPrice,
}

/// How the kill probabilities the cost priced compare with the kills that happened, over the
/// runs heshare placed by a label or a profile, each with the probability of the decision Slurm
/// follows (of the option it chose; Slurm may start it on another type it was offered, at
/// another).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct KillPrice {
    /// Runs priced as (next to) never killed, below [`KillPrice::PRICED`], and how many were.
    pub unpriced: usize,
    pub unpriced_killed: usize,
    /// Runs priced at a chance of at least [`KillPrice::PRICED`], the kills those chances add up
    /// to, and how many were killed.
    pub priced: usize,
    pub priced_expected: f64,
    pub priced_killed: usize,
}

impl KillPrice {
    /// Below this a kill is reported as unpriced: one in ten thousand runs.
    pub const PRICED: f64 = 1e-4;

    pub fn add(&mut self, p: f64, killed: bool) {
        if p < Self::PRICED {
            self.unpriced += 1;
            self.unpriced_killed += usize::from(killed);
        } else {
            self.priced += 1;
            self.priced_expected += p;
            self.priced_killed += usize::from(killed);
        }
    }
}

impl std::ops::AddAssign for KillPrice {
    fn add_assign(&mut self, b: KillPrice) {
        self.unpriced += b.unpriced;
        self.unpriced_killed += b.unpriced_killed;
        self.priced += b.priced;
        self.priced_expected += b.priced_expected;
        self.priced_killed += b.priced_killed;
    }
}

impl std::ops::AddAssign for ProfileStats {
    fn add_assign(&mut self, b: ProfileStats) {
        self.submitted += b.submitted;
        self.with_profile += b.with_profile;
        for (a, b) in self.by_level.iter_mut().zip(b.by_level) {
            *a += b;
        }
        self.labelled += b.labelled;
        self.as_asked += b.as_asked;
        self.overruled += b.overruled;
        self.overruled_wrong += b.overruled_wrong;
        self.taught += b.taught;
        self.foreign += b.foreign;
        self.profiles += b.profiles;
        self.kill_price += b.kill_price;
    }
}

/// The store a timer keeps updated, as the simulator runs it.
pub struct OnlineProfiles {
    book: Book,
    /// Records of ended jobs the next update files.
    pending: Vec<Observation>,
    period_s: f64,
    next_update_s: f64,
    /// Keys per template (the same script, name and request every run).
    keys: FxHashMap<usize, Vec<ProfileKey>>,
    pub stats: ProfileStats,
}

/// The account a simulated user's jobs run under.
pub fn account_of(user: u32) -> String {
    format!("acct{}", user % 8)
}

impl OnlineProfiles {
    pub fn new(period_s: f64) -> OnlineProfiles {
        OnlineProfiles {
            book: Book::default(),
            pending: Vec::new(),
            period_s: period_s.max(1.0),
            next_update_s: period_s.max(1.0),
            keys: FxHashMap::default(),
            stats: ProfileStats::default(),
        }
    }

    /// The keys `job_submit` computes for `job` (its template's script and name, its user's
    /// account and its request as asked).
    pub fn keys_of(&mut self, job: &SimJob, request: &str) -> Vec<ProfileKey> {
        self.keys
            .entry(job.template)
            .or_insert_with(|| {
                let script = super::templates::script_of(job.template);
                let name = super::templates::name_of(job.template, job.run);
                keys(&Identity {
                    uid: job.user,
                    account: &account_of(job.user),
                    name: Some(&name),
                    script: Some(&script),
                    command: None,
                    request,
                })
            })
            .clone()
    }

    /// Files what ended before `now` if an update is due.
    fn update(&mut self, cfg: &crate::config::Config, now: f64) {
        if now < self.next_update_s {
            return;
        }
        let limits = cfg.profiles.learn_limits();
        for o in self.pending.drain(..) {
            let f = self.book.learn(&o, limits);
            self.stats.taught += usize::from(f.taught > 0);
            self.stats.foreign += f.foreign.len();
        }
        // The timer's next run after now.
        let periods = ((now - self.next_update_s) / self.period_s).floor() + 1.0;
        self.next_update_s += periods * self.period_s;
        self.stats.profiles = self.book.profiles.len();
    }

    /// The profile the plugin would find for `keys` at `now`.
    pub fn lookup(
        &mut self,
        cfg: &crate::config::Config,
        keys: &[ProfileKey],
        asked: Asked<'_>,
        now: f64,
    ) -> Option<Learned> {
        self.update(cfg, now);
        if !cfg.profiles.enabled {
            return None;
        }
        lookup(
            cfg,
            &self.book,
            keys,
            asked,
            now,
            cfg.profiles.derive_settings(),
        )
    }

    /// Counts one decision.
    pub fn count(&mut self, learned: Option<&Learned>, label: Option<usize>, true_class: usize) {
        self.stats.submitted += 1;
        match learned {
            Some(l) => {
                self.stats.with_profile += 1;
                self.stats.by_level[match l.level {
                    Level::Script => 0,
                    Level::Name => 1,
                    Level::Request => 2,
                }] += 1;
                if l.overruled.is_some() {
                    self.stats.overruled += 1;
                    self.stats.overruled_wrong += usize::from(label != Some(true_class));
                }
            }
            None if label.is_some() => self.stats.labelled += 1,
            None => self.stats.as_asked += 1,
        }
    }

    /// Job `j` ended now: the node helper's record of it goes to the next update.
    pub fn ended(&mut self, st: &State<'_>, j: usize, keys: Vec<ProfileKey>) {
        let job = &st.jobs[j];
        let (Some(start), Some(end)) = (job.start_s, job.finish_s.or(job.killed_s)) else {
            return;
        };
        let g = &st.gpus[job.gpus[0]];
        let dur = (end - start).max(1e-9);
        let record = Record {
            record_id: format!("sim:{j}:{}", (end * 1000.0).round()),
            kind: RecordKind::Job,
            node: format!("n{}", g.node),
            job_id: j.to_string(),
            user: format!("u{}", job.user),
            uid: job.user,
            account: account_of(job.user),
            class: job.label.map(|c| st.cfg.classes[c].name.clone()),
            gpus: (0..job.num_gpus).collect(),
            gpu_type: st.cfg.gpu_types[g.gpu_type].name.clone(),
            share_pct: (!job.exclusive).then(|| job.share.get()),
            clocks: job
                .clocks
                .iter()
                .map(|&(t, mhz)| ClockChange { t, mhz })
                .collect(),
            start,
            end,
            energy_j: job.energy_j,
            avg_w: job.energy_j / dur,
            backend: BackendKind::Model,
            counter_reset: false,
            complete: true,
            basis: if job.crowded {
                Basis::Measured
            } else {
                Basis::Whole
            },
            mps_wait_s: 0.0,
            outside_mps: job.native,
            notes: vec![],
            clock_control: true,
            profile_keys: keys.iter().map(|k| k.as_str().to_owned()).collect(),
            // A job killed at its time limit ends by Slurm's signal.
            exit: Some(if job.killed_s.is_some() { "0:9" } else { "0:0" }.into()),
            busy_frac: Some((job.busy_s / (f64::from(job.num_gpus.max(1)) * dur)).clamp(0.0, 1.0)),
            neighbour_busy: (!job.sliced).then(|| (job.neighbour_busy_s / dur).clamp(0.0, 1.0)),
            max_memory_mib: None,
            time_limit_s: Some(job.limit_s),
        };
        if let Some(o) = observation(st.cfg, &record) {
            self.pending.push(o);
        }
    }
}
