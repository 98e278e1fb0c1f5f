//! heshare as it ships: the job_submit plugin's own decision (`slurm::request::decide_with`) on
//! the snapshot its thread would hold, followed by Slurm's own node and GPU choice
//! (`sim::cons_tres`), and the node helper's clock.
//!
//! * The snapshot is taken every `[live] snapshot_period_s` of simulated time from the cluster as
//!   it was at that instant (`slurm::snapshot::Snapshot::build` on the same records the thread
//!   reads from Slurm: nodes with their type as a feature, running jobs with their time left by
//!   their limit, pending demand), so a decision sees a view up to one period old.
//! * A job is decided once, when it is submitted; Slurm then starts it on whatever its rewritten
//!   request allows (an offered type, preferring the best), when it fits.
//! * On every new snapshot the pending jobs heshare placed are re-decided (`revisit`, at most
//!   `reroute_max_jobs` in queue order, copies of one job decided once as the snapshot thread
//!   decides them): their offer changed where the plugin would move them, their site factor
//!   where their price changed. The engine's queue orders waiting jobs by Slurm's multifactor
//!   priority, which adds that factor.
//! * Users submit what a plain Slurm user submits, `--gres=gpu:N` for whole-GPU jobs and
//!   `--gres=mps:P` for a job the trace gives a fraction of a GPU (P its trace share, what a
//!   slurm-mps user asks). The trace's allowed GPU models are a typed GRES (one model) or the
//!   user's own `--constraint` (several). A user who labels a job adds `--gpu-class=CLASS` (and,
//!   for a share, `--gpu-share=auto`: heshare sizes the share for P% of a reference GPU on the
//!   type it picks); most label nothing.
//! * `heshare` (as it ships): the label its user gave, if any (true or wrong), and the profile
//!   of the job's earlier runs (`sim::learning`: the records the world gives of ended jobs, filed
//!   by a periodic update, looked up by the job's keys). `heshare-labelled`: every job carries
//!   its true class and no profile is used (what heshare did before profiles, in a world where
//!   every user labels truly). `heshare-oracle`: every job carries its true class and the
//!   profile heshare would learn from a perfect run of it alone on every type the cluster has
//!   (`sim::oracle`), its user asking what the learning path's user asks (an explicit share
//!   stays explicit): the same path and the same requests, told the truth of the world.
//! * The node helper clocks a job by what the plugin told it: its label's class, its learned
//!   class, or nothing (then the GPU stays at its default clock, as the helper keeps it).

use super::ideal::{HintClass, Hints, node_helper_clock};
use super::{Placement, Scheduler};
use crate::policy::{PlaceContext, PlacedJob, ShareParams, SlotPower};
use crate::sim::cons_tres::{GresRequest, select};
use crate::sim::engine::State;
use crate::sim::meter::PowerState;
use crate::slurm::request::{
    GpuAsk, Live, Options, PendingJob, Site, Submission, TresForm, Verdict, decide_with,
};
use crate::slurm::revisit::Redecisions;
use crate::slurm::snapshot::{Frame, Holding, NodeInfo, Pending, Snapshot};
use crate::units::Mhz;
use rustc_hash::{FxHashMap, FxHashSet};

/// What Slurm holds for one job after the plugin ran.
#[derive(Debug, Clone)]
struct Held {
    gres: GresRequest,
    /// Set when heshare placed the job: what the snapshot thread reads back to re-decide it
    /// (moved only where its types are features).
    pending: Option<PendingJob>,
    /// heshare's site factor on it.
    site_factor: i32,
}

/// Where heshare's knowledge of a job comes from.
#[derive(Clone, Copy)]
pub enum Knowledge<'w> {
    /// The users' labels, where they give one, and profiles learned from earlier runs.
    Learned,
    /// Every job's true class, no profiles.
    Labelled,
    /// Every job's true class and its true profile on every type, as this world drew it
    /// (`sim::oracle`).
    Oracle(&'w crate::sim::world::World),
}

/// How often the simulated site's timer runs `heshare profiles update`.
pub const PROFILE_UPDATE_S: f64 = 900.0;

pub struct Shipped<'w> {
    knowledge: Knowledge<'w>,
    /// The profile store and its updates (used with `Knowledge::Learned`).
    pub profiles: crate::sim::learning::OnlineProfiles,
    /// Per job, the keys `job_submit` gave it (its record carries them).
    keys: FxHashMap<usize, Vec<crate::profile::ProfileKey>>,
    site: Site,
    period_s: f64,
    snapshot: Option<Snapshot>,
    /// Index of the period the snapshot was taken in, and the cluster's version then.
    taken: Option<i64>,
    version: u64,
    held: FxHashMap<usize, Held>,
    /// The plugin's plans, kept between submissions (as in slurmctld). Quiet: the decision is
    /// the same, only the AdminComment's reason text (which nothing here reads) is skipped.
    plugin_ctx: PlaceContext,
    /// The node helper's optimizer runs.
    helper_ctx: PlaceContext,
    /// Per job, what the plugin's SPANK environment tells the node helper.
    hints: FxHashMap<usize, Hints>,
    params: ShareParams,
    /// Jobs moved by re-routing and re-priced, for the report.
    pub moved: usize,
    pub repriced: usize,
    /// Site factors changed since the engine last sorted its queue.
    reordered: bool,
    /// What the snapshot thread reads of the nodes (they never change here but for their power
    /// state), framed once.
    frame: Frame,
    /// The last snapshot's holdings and pending demand, kept for their buffers.
    holdings: Vec<Holding>,
    pending: Vec<Pending>,
    /// Per running job, the class and expected hold the snapshot thread reads of it.
    reading: FxHashMap<usize, (usize, f64)>,
    /// The users' names, built once.
    users: Vec<std::sync::Arc<str>>,
    /// Jobs the plugin left as their users asked (no label, no profile, or no placement), or
    /// gave only a wider share than asked (a first run's margin).
    as_asked: FxHashSet<usize>,
    /// The kill probability the cost priced for each job heshare placed by a label or a
    /// profile, from the decision Slurm follows (at submission, or a re-decision that moved
    /// it): checked against the kills that happen.
    priced_kill: FxHashMap<usize, f64>,
}

impl<'w> Shipped<'w> {
    pub fn new(st: &State<'_>, knowledge: Knowledge<'w>) -> Shipped<'w> {
        let types = st.cfg.gpu_types.len();
        let mut present = vec![0u32; types];
        for n in &st.nodes {
            if let Some(t) = n.res.gpu_type {
                present[t] = present[t].max(u32::try_from(n.gpus.len()).unwrap_or(u32::MAX));
            }
        }
        Shipped {
            knowledge,
            profiles: crate::sim::learning::OnlineProfiles::new(PROFILE_UPDATE_S),
            keys: FxHashMap::default(),
            site: Site {
                present: present
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| **n > 0)
                    .map(|(t, &n)| (t, n))
                    .collect(),
                // Every simulated node has one GPU type and carries it as a feature.
                feature_types: present.iter().map(|&n| n > 0).collect(),
            },
            period_s: st.cfg.live.snapshot_period_s,
            snapshot: None,
            taken: None,
            version: 0,
            held: FxHashMap::default(),
            plugin_ctx: PlaceContext::quiet(),
            helper_ctx: PlaceContext::quiet(),
            hints: FxHashMap::default(),
            params: ShareParams::of(st.cfg),
            moved: 0,
            repriced: 0,
            reordered: false,
            frame: Frame::of(
                st.cfg,
                &st.nodes
                    .iter()
                    .map(|n| {
                        let t = n.res.gpu_type.unwrap_or(0);
                        NodeInfo {
                            name: n.name.as_str().into(),
                            features: vec![st.cfg.gpu_types[t].name.clone()],
                            gpus: n.gpus.iter().map(|&g| (st.gpus[g].index, t)).collect(),
                            cpus: u32::try_from(n.cpu_milli / 1000).unwrap_or(u32::MAX),
                            memory_mib: n.memory_mib,
                            power: SlotPower::Up,
                        }
                    })
                    .collect::<Vec<_>>(),
            ),
            holdings: Vec::new(),
            pending: Vec::new(),
            reading: FxHashMap::default(),
            users: Vec::new(),
            as_asked: FxHashSet::default(),
            priced_kill: FxHashMap::default(),
        }
    }

    fn user(&mut self, u: u32) -> std::sync::Arc<str> {
        let u = u as usize;
        while self.users.len() <= u {
            self.users.push(format!("u{}", self.users.len()).into());
        }
        self.users[u].clone()
    }

    /// Takes the plugin's view at `at`: the cluster as it stands (nothing changed since `at`),
    /// written over the last snapshot's buffers.
    fn take_snapshot(&mut self, st: &State<'_>, at: f64, waiting: &[usize]) {
        let mut holdings = std::mem::take(&mut self.holdings);
        holdings.clear();
        for g in &st.gpus {
            for &j in &g.jobs {
                let job = &st.jobs[j];
                let start = job.start_s.unwrap_or(at);
                let user = self.user(job.user);
                // As the snapshot thread reads it: the class its AdminComment names, else the
                // stand-in for its request; the limit, scaled for a job heshare limited for a
                // slower type than it runs on. Neither changes while the job runs.
                let (class, hold) = match self.reading.get(&j) {
                    Some(&r) => r,
                    None => {
                        let hint = self.hints.get(&j);
                        let class = match hint.map(|h| &h.class) {
                            Some(HintClass::Catalog(c)) => *c,
                            _ => crate::slurm::snapshot::stand_in_class(
                                st.cfg,
                                (!job.exclusive).then(|| job.share.get()),
                            ),
                        };
                        let hold = crate::slurm::snapshot::expected_hold(
                            st.cfg,
                            Some(job.limit_s),
                            Some(class),
                            hint.and_then(|h| h.limit_type),
                            Some(g.gpu_type),
                        );
                        self.reading.insert(j, (class, hold));
                        (class, hold)
                    }
                };
                holdings.push(Holding {
                    node: g.node,
                    gpu_index: g.index,
                    job: PlacedJob {
                        class,
                        share: job.share,
                        user,
                        exclusive: job.exclusive,
                    },
                    frees_in_s: (start + hold - at).max(60.0),
                    hold_s: hold,
                });
            }
        }
        let mut pending = std::mem::take(&mut self.pending);
        pending.clear();
        pending.extend(waiting.iter().map(|&j| {
            let job = &st.jobs[j];
            match self.held.get(&j) {
                Some(h) => Pending {
                    types: h.gres.types.clone(),
                    gpus: h
                        .gres
                        .mps_pct
                        .map_or(f64::from(h.gres.gpus), |p| f64::from(p) / 100.0),
                },
                None => Pending {
                    types: job.gpu_types.clone(),
                    gpus: f64::from(job.num_gpus) * f64::from(job.gpu_milli) / 1000.0,
                },
            }
        }));
        // Node power states as Slurm's node table shows them (a powering-down node can only be
        // had powered down and resumed).
        let power = |n: usize| match st.nodes[n].power {
            PowerState::Up => SlotPower::Up,
            PowerState::Booting => SlotPower::Booting,
            PowerState::PoweringDown | PowerState::Off => SlotPower::Down,
        };
        match self.snapshot.as_mut() {
            Some(snap) => self.frame.refill(snap, at, power, &holdings, &pending),
            None => self.snapshot = Some(self.frame.snapshot(at, power, &holdings, &pending)),
        }
        self.holdings = holdings;
        self.pending = pending;
    }

    /// The plugin's decision for job `j`, submitted now.
    fn submit(&mut self, st: &State<'_>, j: usize) -> Held {
        let job = &st.jobs[j];
        let share = job.num_gpus == 1 && job.gpu_milli < 1000;
        let typed =
            (job.gpu_types.len() == 1).then(|| st.cfg.gpu_types[job.gpu_types[0]].name.clone());
        let constraint = (job.gpu_types.len() > 1).then(|| {
            job.gpu_types
                .iter()
                .map(|&t| st.cfg.gpu_types[t].name.as_str())
                .collect::<Vec<_>>()
                .join("|")
        });
        // The same GRES a slurm-mps user asks (a share as its trace share), plus heshare's options.
        let ask = GpuAsk {
            gpus: job.num_gpus,
            gpu_type: typed,
            mps_pct: share.then(|| u32::from(super::trace_share(job).get())),
            form: TresForm::Colon,
            others: vec![],
            per_job: false,
        };
        // The class its user gives: every job its truth, or what the workload says its user
        // labels it (a user who labels also lets heshare size a share).
        let label = match self.knowledge {
            Knowledge::Labelled | Knowledge::Oracle(_) => Some(job.class),
            Knowledge::Learned => job.label,
        };
        // Only a user who labels lets heshare size a share. The oracle's users ask what the
        // learning path's users ask (its truth is what heshare knows, not what they request),
        // so learned against oracle is what learning costs, not what a resizable request buys.
        let sizes_share = match self.knowledge {
            Knowledge::Labelled => true,
            Knowledge::Learned | Knowledge::Oracle(_) => job.label.is_some(),
        };
        let opts = Options {
            gpu_share: (share && sizes_share).then(|| "auto".to_owned()),
            gpu_class: label.map(|c| st.cfg.classes[c].name.clone()),
            energy_policy: None,
        };
        let user = format!("u{}", job.user);
        // Slurm counts whole CPUs.
        let cpus = u32::try_from((job.pod.cpu_milli.max(0) + 999) / 1000).ok();
        let memory_mib = u64::try_from(job.pod.memory_mib).ok();
        let learned = match self.knowledge {
            Knowledge::Labelled => None,
            Knowledge::Oracle(world) => {
                let keys = self.profiles.keys_of(job, &ask.request_string());
                let types: Vec<usize> = self.site.present.iter().map(|&(t, _)| t).collect();
                let l = crate::sim::oracle::true_profile(
                    st.cfg, world, job, &types, &keys, share, st.now,
                );
                self.profiles.count(l.as_ref(), label, job.class);
                l
            }
            Knowledge::Learned => {
                let keys = self.profiles.keys_of(job, &ask.request_string());
                let l = self.profiles.lookup(
                    st.cfg,
                    &keys,
                    crate::profile::Asked {
                        label: label.map(|c| &st.cfg.classes[c]),
                        share,
                    },
                    st.now,
                );
                self.profiles.count(l.as_ref(), label, job.class);
                self.keys.insert(j, keys);
                l
            }
        };
        let sub = Submission {
            time_limit_s: Some(job.limit_s),
            features: constraint.as_deref(),
            cpus,
            memory_mib,
            learned: learned.as_ref(),
            ..Submission::new(Some(&ask), &opts, &user)
        };
        let live = Live {
            snapshot: self.snapshot.as_ref(),
            now_s: st.now,
            max_age_s: st.cfg.live.snapshot_max_age_s,
        };
        match decide_with(st.cfg, &self.site, live, &sub, &mut self.plugin_ctx) {
            Verdict::Rewrite(r) => {
                // What the SPANK environment tells the node helper of the job (nothing of a
                // request left the user's own).
                let class = match (&learned, label) {
                    (Some(l), _) => HintClass::Learned(std::sync::Arc::clone(&l.class)),
                    (None, Some(c)) => HintClass::Catalog(c),
                    (None, None) => HintClass::Unknown,
                };
                self.hints.insert(
                    j,
                    Hints {
                        limit_type: r.limit_type,
                        demand_pct: r.demand_pct,
                        class,
                        limit_s: r.learned_limit_s,
                    },
                );
                let prefer = r.prefer.as_deref().and_then(|p| st.cfg.gpu_type(p));
                let gres = GresRequest {
                    gpus: r.gpus,
                    mps_pct: r.mps_pct,
                    types: r.offered.clone(),
                    prefer,
                };
                // What the snapshot thread reads back of it (AdminComment and the job table).
                let placed = label.is_some() || learned.is_some();
                if placed {
                    self.priced_kill.insert(j, r.kill_probability);
                }
                let pending = placed.then(|| PendingJob {
                    class: match (label, &learned) {
                        (Some(c), _) => st.cfg.classes[c].name.clone(),
                        (None, Some(l)) => l.class_family().to_owned(),
                        (None, None) => String::new(),
                    },
                    user,
                    gpus: r.gpus,
                    mps_pct: r.mps_pct,
                    energy_policy: None,
                    time_limit_s: Some(job.limit_s),
                    cpus,
                    memory_mib,
                    offered: r.offered.clone(),
                    form: TresForm::Colon,
                    movable: r.features.is_some(),
                    asked: Some(if share {
                        crate::policy::ShareRequest::Pct(super::trace_share(job))
                    } else {
                        crate::policy::ShareRequest::Exclusive
                    }),
                    demand_pct: r.demand_pct,
                    site_factor: Some(r.site_factor),
                    learned: learned.clone(),
                });
                Held {
                    gres,
                    pending,
                    site_factor: r.site_factor,
                }
            }
            // Left as asked (or refused, which a user would answer by submitting without the
            // class): the GRES its user asked, `--gres=mps:P` for a share, as slurm-mps runs it.
            _ => {
                self.as_asked.insert(j);
                Held {
                    gres: GresRequest::as_asked(job),
                    pending: None,
                    site_factor: 0,
                }
            }
        }
    }
}

impl Scheduler for Shipped<'_> {
    fn name(&self) -> &'static str {
        match self.knowledge {
            Knowledge::Learned => "heshare",
            Knowledge::Labelled => "heshare-labelled",
            Knowledge::Oracle(_) => "heshare-oracle",
        }
    }

    fn tick(&mut self, st: &State<'_>, waiting: &[usize]) -> bool {
        // Periods are numbered from the run's start; the cast is exact for any simulated time
        // below 2^53 seconds.
        #[allow(clippy::cast_possible_truncation)]
        let k = (st.now / self.period_s).floor() as i64;
        if self.taken.is_some_and(|t| t >= k) {
            return false;
        }
        // Nothing changed since the last event, so the cluster now is the cluster at the tick.
        #[allow(clippy::cast_precision_loss)]
        let at = k as f64 * self.period_s;
        self.taken = Some(k);
        // A cluster that has not changed since the last snapshot gives the same one, older
        // (rebuilding it would only cost time); its pending jobs were re-decided on it already.
        if let (Some(s), true) = (self.snapshot.as_mut(), st.version == self.version) {
            s.aged_to(at);
            return false;
        }
        // A snapshot nobody reads before the next period (no job waits to be re-decided on it,
        // none is submitted until then) need not be built: the next one is built from the
        // cluster as it will be then, as it would have been.
        let revisits =
            st.cfg.live.reroute_pending && !waiting.is_empty() && st.cfg.live.reroute_max_jobs > 0;
        if !revisits && st.next_submit_s >= at + self.period_s {
            return false;
        }
        self.take_snapshot(st, at, waiting);
        self.version = st.version;
        if !st.cfg.live.reroute_pending {
            return false;
        }
        let live = Live {
            snapshot: self.snapshot.as_ref(),
            now_s: at,
            max_age_s: st.cfg.live.snapshot_max_age_s,
        };
        let max = usize::try_from(st.cfg.live.reroute_max_jobs).unwrap_or(usize::MAX);
        // Decided first, applied after: the decisions borrow the jobs they read.
        let mut redecisions = Redecisions::default();
        let mut revisits = Vec::new();
        for &j in waiting.iter().take(max) {
            // Borrowed, not cloned: a learned job's profile is a class with its runs.
            let Some(pending) = self.held.get(&j).and_then(|h| h.pending.as_ref()) else {
                continue;
            };
            if let Some(v) =
                redecisions.revisit(st.cfg, &self.site, live, pending, &mut self.plugin_ctx)
            {
                revisits.push((j, v));
            }
        }
        drop(redecisions);
        let mut changed = false;
        for (j, v) in revisits {
            let Some(h) = self.held.get_mut(&j) else {
                continue;
            };
            if v.moved {
                self.priced_kill.insert(j, v.rewrite.kill_probability);
                h.gres.types = v.rewrite.offered.clone();
                h.gres.prefer = v.rewrite.prefer.as_deref().and_then(|p| st.cfg.gpu_type(p));
                if let Some(m) = h.pending.as_mut() {
                    m.offered = v.rewrite.offered.clone();
                }
                self.moved += 1;
                changed = true;
            }
            if v.repriced {
                h.site_factor = v.rewrite.site_factor;
                if let Some(m) = h.pending.as_mut() {
                    m.site_factor = Some(v.rewrite.site_factor);
                }
                self.repriced += 1;
                self.reordered = true;
            }
        }
        changed
    }

    fn site_factor(&self, j: usize) -> i32 {
        self.held.get(&j).map_or(0, |h| h.site_factor)
    }

    fn take_reordered(&mut self) -> bool {
        std::mem::take(&mut self.reordered)
    }

    fn place(&mut self, st: &State<'_>, j: usize) -> Option<Placement> {
        if !self.held.contains_key(&j) {
            let h = self.submit(st, j);
            self.held.insert(j, h);
        }
        let held = self.held.get(&j)?;
        select(st, &st.jobs[j], &held.gres)
    }

    fn started(&mut self, _st: &State<'_>, j: usize) {
        self.held.remove(&j);
    }

    fn clock(&mut self, st: &State<'_>, gpu: usize) -> Mhz {
        node_helper_clock(st, gpu, &mut self.helper_ctx, self.params, &self.hints)
    }

    fn finished(&mut self, st: &State<'_>, j: usize) {
        if let Some(p) = self.priced_kill.remove(&j) {
            self.profiles
                .stats
                .kill_price
                .add(p, st.jobs[j].killed_s.is_some());
        }
        self.hints.remove(&j);
        self.reading.remove(&j);
        if let Some(keys) = self.keys.remove(&j) {
            self.profiles.ended(st, j, keys);
        }
    }

    fn profile_stats(&self) -> Option<crate::sim::learning::ProfileStats> {
        (!matches!(self.knowledge, Knowledge::Labelled)).then(|| self.profiles.stats.clone())
    }

    fn left_as_asked(&self, j: usize) -> bool {
        self.as_asked.contains(&j)
    }
}
