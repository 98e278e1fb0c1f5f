//! Re-deciding a pending job heshare placed on a newer snapshot: the same decision as at
//! submission, and what Slurm should change (the offer of a movable job, the site factor). Pure.

use super::ask::{GpuAsk, Options, TresForm};
use super::request::{Live, Rewrite, Site, Submission, Verdict, decide_with};
use crate::config::Config;
use crate::policy::{EnergyPolicy, PlaceContext, ShareRequest};
use crate::profile::Learned;
use rustc_hash::FxHashMap;
use std::hash::{Hash, Hasher};

/// What the snapshot thread knows of a pending job heshare placed (from Slurm's job table and the
/// job's AdminComment), enough to place it again.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingJob {
    pub class: String,
    pub user: String,
    pub gpus: u32,
    pub mps_pct: Option<u8>,
    pub energy_policy: Option<EnergyPolicy>,
    pub time_limit_s: Option<f64>,
    pub cpus: Option<u32>,
    pub memory_mib: Option<u64>,
    /// The types its features offer now, best first; for a job whose GRES names its type (which
    /// heshare never moves), that type alone.
    pub offered: Vec<usize>,
    pub form: TresForm,
    /// Whether its GRES is untyped and its types are features, so that a new offer can move it.
    pub movable: bool,
    /// The share its user's GRES asked at submission and the need the user gave, from
    /// AdminComment (`None` for a job decided before heshare recorded them: never re-priced).
    pub asked: Option<ShareRequest>,
    pub demand_pct: Option<u8>,
    /// heshare's site factor on the job now; `None` when the job's site factor is not the one
    /// heshare set (an operator changed it), which heshare then leaves alone.
    pub site_factor: Option<i32>,
    /// The profile it was placed with, as the current store gives it (looked up again by the
    /// caller from the key in AdminComment); `None`: decided by its class alone.
    pub learned: Option<Learned>,
}

/// What re-deciding a pending job on a newer view asks Slurm to change.
#[derive(Debug, Clone, PartialEq)]
pub struct Revisit {
    /// The decision on the newer view (its features, preference and AdminComment).
    pub rewrite: Rewrite,
    /// The types it should be offered differ from those it is offered now (a set or a best
    /// type that changed): its features and preference change. Only for a movable job.
    pub moved: bool,
    /// heshare's site factor for it changed: the energy its offer costs against its request as
    /// asked is not what it was when the factor was set.
    pub repriced: bool,
}

/// Re-decides a pending job on a newer view. `Some` when Slurm should change something: the
/// offer (a movable job only: the share size and the kind of request stay as Slurm holds them,
/// and a job whose GRES names its type is never moved) or the site factor.
pub fn revisit(
    cfg: &Config,
    site: &Site,
    live: Live<'_>,
    job: &PendingJob,
    ctx: &mut PlaceContext,
) -> Option<Revisit> {
    settle(job, redecide(cfg, site, live, job, ctx))
}

/// Re-decides the pending jobs of one view: jobs whose decision reads the same inputs (the same
/// request, user, limit, class and profile; the offer a movable job holds and its site factor are
/// read only after the decision) are decided once. A queue holds many copies of one script, so
/// this spares most of the work; each job's answer is exactly `revisit`'s.
#[derive(Default)]
pub struct Redecisions<'j> {
    decided: FxHashMap<Inputs<'j>, Option<Rewrite>>,
}

impl<'j> Redecisions<'j> {
    /// `revisit` for `job` on `live`, which must be the view every earlier call of this value
    /// was given (a new view needs a new `Redecisions`).
    pub fn revisit(
        &mut self,
        cfg: &Config,
        site: &Site,
        live: Live<'_>,
        job: &'j PendingJob,
        ctx: &mut PlaceContext,
    ) -> Option<Revisit> {
        let decided = self
            .decided
            .entry(Inputs(job))
            .or_insert_with(|| redecide(cfg, site, live, job, ctx))
            .clone();
        settle(job, decided)
    }

    /// Decisions made so far (one per distinct set of inputs).
    pub fn decided(&self) -> usize {
        self.decided.len()
    }
}

/// A pending job as its decision reads it: all of it but the offer it holds when it is movable
/// (a typed job's type is its request) and its site factor.
struct Inputs<'j>(&'j PendingJob);

impl Inputs<'_> {
    fn typed(&self) -> Option<usize> {
        (!self.0.movable)
            .then(|| self.0.offered.first().copied())
            .flatten()
    }
}

impl PartialEq for Inputs<'_> {
    fn eq(&self, other: &Self) -> bool {
        // Spelled out field by field, so that a field added to a pending job or a profile is a
        // compile error here until someone says whether the decision reads it.
        let PendingJob {
            class,
            user,
            gpus,
            mps_pct,
            energy_policy,
            time_limit_s,
            cpus,
            memory_mib,
            offered: _,
            form,
            movable,
            asked,
            demand_pct,
            site_factor: _,
            learned,
        } = self.0;
        let b = other.0;
        *class == b.class
            && *user == b.user
            && *gpus == b.gpus
            && *mps_pct == b.mps_pct
            && *energy_policy == b.energy_policy
            && time_limit_s.map(f64::to_bits) == b.time_limit_s.map(f64::to_bits)
            && *cpus == b.cpus
            && *memory_mib == b.memory_mib
            && *movable == b.movable
            && self.typed() == other.typed()
            && *form == b.form
            && *asked == b.asked
            && *demand_pct == b.demand_pct
            && match (learned, &b.learned) {
                (None, None) => true,
                (Some(x), Some(y)) => same_profile(x, y),
                _ => false,
            }
    }
}

/// Whether two profiles are the same as a decision reads them.
fn same_profile(x: &Learned, y: &Learned) -> bool {
    let Learned {
        key,
        level,
        runs,
        class,
        measured,
        overruled,
    } = x;
    *key == y.key
        && *level == y.level
        && *runs == y.runs
        && *measured == y.measured
        && *overruled == y.overruled
        && (std::sync::Arc::ptr_eq(class, &y.class) || *class == y.class)
}

// Equal classes compare equal only where none of their numbers is NaN; a class that is not equal
// to itself is only decided again, never given another job's decision.
impl Eq for Inputs<'_> {}

impl Hash for Inputs<'_> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        let j = self.0;
        j.class.hash(h);
        j.user.hash(h);
        j.gpus.hash(h);
        j.mps_pct.hash(h);
        j.energy_policy.hash(h);
        j.time_limit_s.map(f64::to_bits).hash(h);
        j.movable.hash(h);
        self.typed().hash(h);
        j.asked.hash(h);
        j.demand_pct.hash(h);
        if let Some(l) = &j.learned {
            l.key.hash(h);
            l.runs.hash(h);
        }
    }
}

/// The decision on the newer view, before what the job holds is compared with it.
fn redecide(
    cfg: &Config,
    site: &Site,
    live: Live<'_>,
    job: &PendingJob,
    ctx: &mut PlaceContext,
) -> Option<Rewrite> {
    live.fresh()?;
    let typed = (!job.movable)
        .then(|| job.offered.first().copied())
        .flatten();
    if !job.movable && typed.is_none() {
        return None;
    }
    let ask = GpuAsk {
        gpus: job.gpus,
        gpu_type: typed.map(|t| cfg.gpu_types[t].name.clone()),
        mps_pct: job.mps_pct.map(u32::from),
        form: job.form,
        others: vec![],
        per_job: false,
    };
    let opts = Options {
        gpu_share: Some(match job.mps_pct {
            Some(p) => p.to_string(),
            None => "exclusive".into(),
        }),
        // A decision named after a learned family (`training`, `inference`) has no class.
        gpu_class: cfg.class(&job.class).map(|_| job.class.clone()),
        energy_policy: job.energy_policy.map(|p| {
            match p {
                EnergyPolicy::Performance => "performance",
                EnergyPolicy::Balanced => "balanced",
                EnergyPolicy::Energy => "energy",
            }
            .to_owned()
        }),
    };
    let sub = Submission {
        time_limit_s: job.time_limit_s,
        cpus: job.cpus,
        memory_mib: job.memory_mib,
        // Priced against the request as its user asked it, not as heshare rewrote it.
        asked: job.asked,
        demand_pct: job.demand_pct,
        learned: job.learned.as_ref(),
        ..Submission::new(Some(&ask), &opts, &job.user)
    };
    match decide_with(cfg, site, live, &sub, ctx) {
        Verdict::Rewrite(r) => Some(r),
        _ => None,
    }
}

/// What Slurm should change for `job`, given the decision on the newer view.
fn settle(job: &PendingJob, decided: Option<Rewrite>) -> Option<Revisit> {
    let mut r = decided?;
    // Slurm changes a pending job's features, not its GRES: a decision that holds only with
    // another share (a whole GPU where its time limit leaves no room to share, say) cannot be
    // carried out, and following its types would start the job with the old share where the
    // new decision said it must not run shared. It keeps the decision it has.
    if r.mps_pct != job.mps_pct || r.gpus != job.gpus {
        return None;
    }
    let moved = job.movable && r.features.is_some() && {
        let mut a = r.offered.clone();
        let mut b = job.offered.clone();
        a.sort_unstable();
        b.sort_unstable();
        a != b || r.offered.first() != job.offered.first()
    };
    // Without the request as asked there is no yardstick: such a job keeps its factor.
    let repriced = job.asked.is_some() && job.site_factor.is_some_and(|f| f != r.site_factor);
    if !repriced {
        if let Some(f) = job.site_factor {
            r.site_factor = f;
        }
    }
    if !moved {
        r.features = None;
        r.prefer = None;
    }
    (moved || repriced).then_some(Revisit {
        rewrite: r,
        moved,
        repriced,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::KilledOn;
    use crate::slurm::request::tests::*;
    use crate::slurm::request::*;
    use crate::slurm::snapshot::Snapshot;
    use crate::units::SharePct;

    /// A whole-GPU bert-train job with a two-hour limit, movable, pending for type `t`: what the
    /// snapshot thread reads back of a job heshare offered `t` alone.
    fn bert_waiting_for(t: usize) -> PendingJob {
        PendingJob {
            class: "bert-train".into(),
            user: "1000".into(),
            gpus: 1,
            mps_pct: None,
            energy_policy: None,
            time_limit_s: Some(7200.0),
            cpus: None,
            memory_mib: None,
            offered: vec![t],
            form: TresForm::Colon,
            movable: true,
            asked: Some(ShareRequest::Exclusive),
            demand_pct: None,
            site_factor: Some(0),
            learned: None,
        }
    }

    #[test]
    fn a_pending_job_is_moved_when_its_offer_goes_stale() {
        let cfg = cfg();
        let site = local_site(&cfg);
        let nodes = local_nodes(&cfg);
        let a100 = cfg.gpu_type("a100").expect("a100");
        // Pending for the a100s, which are held for two days.
        let held = a100s_held_two_days(&cfg, &nodes);
        let live = Live {
            snapshot: Some(&held),
            now_s: 0.0,
            max_age_s: 60.0,
        };
        let job = bert_waiting_for(a100);
        let mut ctx = PlaceContext::default();
        let r = revisit(&cfg, &site, live, &job, &mut ctx).expect("moved");
        assert!(r.moved && !r.repriced, "{r:?}");
        assert_ne!(r.rewrite.offered.first(), Some(&a100), "{r:?}");
        assert!(r.rewrite.features.is_some());
        // Re-deciding the new offer changes nothing: no churn.
        let moved = PendingJob {
            offered: r.rewrite.offered.clone(),
            ..job.clone()
        };
        assert_eq!(revisit(&cfg, &site, live, &moved, &mut ctx), None);
        // Without a fresh snapshot nothing moves.
        assert_eq!(revisit(&cfg, &site, Live::NONE, &job, &mut ctx), None);
    }

    /// Slurm moves a pending job by its features only: where the new view's decision needs
    /// another share (a whole GPU, its runs killed beside neighbours on the types it would move
    /// to), the job is left as it is, not started there with the share it holds.
    #[test]
    fn a_pending_share_is_not_moved_where_its_share_no_longer_holds() {
        let cfg = cfg();
        let site = local_site(&cfg);
        let nodes = local_nodes(&cfg);
        let a100 = cfg.gpu_type("a100").expect("a100");
        // The a100s it waits for are held for two days.
        let held = a100s_held_two_days(&cfg, &nodes);
        let live = Live {
            snapshot: Some(&held),
            now_s: 0.0,
            max_age_s: 60.0,
        };
        let learned = |kills: Vec<KilledOn>| learned_service(&cfg, kills);
        let job = |kills: Vec<KilledOn>| PendingJob {
            class: "inference".into(),
            user: "1000".into(),
            gpus: 1,
            mps_pct: Some(50),
            energy_policy: None,
            time_limit_s: Some(36_000.0),
            cpus: None,
            memory_mib: None,
            offered: vec![a100],
            form: TresForm::Colon,
            movable: true,
            asked: Some(ShareRequest::Pct(SharePct::new(50).expect("50"))),
            demand_pct: None,
            site_factor: Some(0),
            learned: Some(learned(kills)),
        };
        let mut ctx = PlaceContext::default();
        // Nothing against sharing elsewhere: moved, with the share it holds.
        let r = revisit(&cfg, &site, live, &job(vec![]), &mut ctx).expect("moved");
        assert!(r.moved, "{r:?}");
        assert_eq!(r.rewrite.mps_pct, Some(50), "{r:?}");
        assert_ne!(r.rewrite.offered.first(), Some(&a100), "{r:?}");
        // Its runs were killed at this limit beside neighbours on every other type with a full
        // share: there the decision is a whole GPU, which its GRES cannot become. Not moved.
        let kills = cfg
            .gpu_types
            .iter()
            .filter(|g| g.name != "a100")
            .map(|g| KilledOn {
                gpu_type: g.name.clone(),
                share_pct: Some(100),
                limit_s: Some(36_000),
            })
            .collect();
        assert_eq!(revisit(&cfg, &site, live, &job(kills), &mut ctx), None);
    }

    /// A pending job's site factor follows what its offer costs on the current view against
    /// its request as asked; one an operator set is left alone, and a typed job is re-priced
    /// but never moved.
    #[test]
    fn a_pending_job_is_re_priced_and_an_operators_factor_is_kept() {
        // A site valuing an hour of a job's time at 0.01 kWh (at the shipped 3 speed decides
        // nearly alone, and the option below costs nothing more).
        let mut cfg = cfg();
        cfg.policy.time_value_kwh_per_gpu_hour = 0.01;
        let site = local_site(&cfg);
        let nodes = local_nodes(&cfg);
        let idle = Snapshot::build(&cfg, 0.0, &nodes, &[], &[]);
        let live = Live {
            snapshot: Some(&idle),
            now_s: 0.0,
            max_age_s: 60.0,
        };
        // Half a GPU asked, to run as fast as it can: an a100, where without the option a v100
        // would do for less energy.
        let ask = parse_tres_per_node(Some("gres:mps:50")).expect("ok");
        let fast = Options {
            energy_policy: Some("performance".into()),
            ..opts("llm-infer", None)
        };
        let submitted = rewrite_of(decide(
            &cfg,
            &site,
            live,
            &Submission::new(ask.as_ref(), &fast, "1000"),
        ));
        assert_eq!(submitted.offered, vec![cfg.gpu_type("a100").expect("a100")]);
        assert!(submitted.site_factor < 0, "{submitted:?}");
        // What the snapshot thread reads back of it.
        let d = read_admin_comment(&cfg, &submitted.admin_comment).expect("heshare's");
        let job = PendingJob {
            class: d.class,
            user: "1000".into(),
            gpus: submitted.gpus,
            mps_pct: submitted.mps_pct,
            energy_policy: d.policy,
            time_limit_s: None,
            cpus: None,
            memory_mib: None,
            offered: d.types,
            form: TresForm::Colon,
            movable: submitted.features.is_some(),
            asked: d.asked,
            demand_pct: d.demand_pct,
            site_factor: d.site_factor,
            learned: None,
        };
        let mut ctx = PlaceContext::default();
        // The same view: nothing to re-price.
        assert_eq!(revisit(&cfg, &site, live, &job, &mut ctx), None);
        // The cluster changes: both v100s are taken for hours. The half GPU asked would now
        // wait or take an a100 too: the option costs no more than the request as asked.
        let busy = [
            hold("hv100", 0, "2000", 7200.0),
            hold("hv100", 1, "2000", 7200.0),
        ];
        let snap = Snapshot::build(&cfg, 0.0, &nodes, &busy, &[]);
        let live = Live {
            snapshot: Some(&snap),
            ..live
        };
        let r = revisit(&cfg, &site, live, &job, &mut ctx).expect("re-priced");
        assert!(r.repriced, "{r:?}");
        assert!(
            r.rewrite.site_factor > submitted.site_factor,
            "{} then {}",
            submitted.site_factor,
            r.rewrite.site_factor
        );
        if !r.moved {
            assert!(r.rewrite.features.is_none() && r.rewrite.prefer.is_none());
        }
        assert!(
            r.rewrite
                .admin_comment
                .contains(&format!(" site={:+} ", r.rewrite.site_factor)),
            "{}",
            r.rewrite.admin_comment
        );
        // Priced already: nothing to do.
        let priced = PendingJob {
            site_factor: Some(r.rewrite.site_factor),
            ..job.clone()
        };
        assert_eq!(revisit(&cfg, &site, live, &priced, &mut ctx), None);
        // An operator's factor, or a job heshare recorded no request for, is not heshare's to
        // change.
        for other in [
            PendingJob {
                site_factor: None,
                ..job.clone()
            },
            PendingJob {
                asked: None,
                ..job.clone()
            },
        ] {
            assert_eq!(revisit(&cfg, &site, live, &other, &mut ctx), None);
        }
    }

    /// Deciding a queue once per distinct job gives every job exactly what deciding it alone
    /// gives: jobs that differ only in the offer they hold or their site factor share a decision,
    /// and a job that differs in anything the decision reads gets its own.
    #[test]
    fn a_queue_is_re_decided_once_per_distinct_job() {
        let cfg = cfg();
        let site = local_site(&cfg);
        let nodes = local_nodes(&cfg);
        let a100 = cfg.gpu_type("a100").expect("a100");
        let v100 = cfg.gpu_type("v100m16").expect("v100m16");
        let held = a100s_held_two_days(&cfg, &nodes);
        let live = Live {
            snapshot: Some(&held),
            now_s: 0.0,
            max_age_s: 60.0,
        };
        let base = bert_waiting_for(a100);
        let queue = [
            base.clone(),
            // Read only after the decision: shares the first one's.
            PendingJob {
                offered: vec![v100, a100],
                ..base.clone()
            },
            PendingJob {
                site_factor: Some(-40),
                ..base.clone()
            },
            // Each of these reads differently.
            PendingJob {
                user: "2000".into(),
                ..base.clone()
            },
            PendingJob {
                time_limit_s: Some(600.0),
                ..base.clone()
            },
            PendingJob {
                mps_pct: Some(50),
                asked: Some(ShareRequest::Pct(SharePct::new(50).expect("50"))),
                ..base.clone()
            },
            PendingJob {
                class: "vit-infer".into(),
                ..base.clone()
            },
            PendingJob {
                learned: Some(learned_service(&cfg, vec![])),
                ..base.clone()
            },
            // A typed job's type is its request.
            PendingJob {
                movable: false,
                ..base.clone()
            },
            PendingJob {
                movable: false,
                offered: vec![v100],
                ..base.clone()
            },
        ];
        let mut ctx = PlaceContext::default();
        let mut once = Redecisions::default();
        let mut some = 0;
        for job in &queue {
            let alone = revisit(&cfg, &site, live, job, &mut PlaceContext::default());
            some += usize::from(alone.is_some());
            assert_eq!(
                once.revisit(&cfg, &site, live, job, &mut ctx),
                alone,
                "{job:?}"
            );
        }
        assert!(some >= 3, "only {some} of the queue would change");
        assert_eq!(once.decided(), queue.len() - 2);
    }

    #[test]
    fn admin_comment_carries_what_re_pricing_needs() {
        let cfg = cfg();
        let site = local_site(&cfg);
        let ask = parse_tres_per_node(Some("gres:mps:40")).expect("ok");
        let auto = opts("vit-infer", Some("auto"));
        let r = rewrite_of(decide(
            &cfg,
            &site,
            Live::NONE,
            &Submission::new(ask.as_ref(), &auto, "1000"),
        ));
        let d = read_admin_comment(&cfg, &r.admin_comment).expect("heshare's");
        assert_eq!(
            (d.asked, d.demand_pct, d.site_factor),
            (
                Some(ShareRequest::Pct(SharePct::new(40).expect("40"))),
                Some(40),
                Some(r.site_factor)
            ),
            "{}",
            r.admin_comment
        );
        let whole = parse_tres_per_node(Some("gres:gpu:1")).expect("ok");
        let r = rewrite_of(decide(
            &cfg,
            &site,
            Live::NONE,
            &Submission::new(whole.as_ref(), &auto, "1000"),
        ));
        let d = read_admin_comment(&cfg, &r.admin_comment).expect("heshare's");
        assert_eq!(
            (d.asked, d.demand_pct),
            (Some(ShareRequest::Exclusive), None)
        );
    }
}
