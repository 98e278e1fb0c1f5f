//! The simulated cluster's GPUs grouped by type and occupants, kept in step with every join and
//! leave. GPUs of one group get the same prediction, so heshare's placement needs only the first
//! GPU of each group for a one-GPU job and only the idle GPUs for a multi-GPU job
//! (`policy::place_slots`): tens of GPUs instead of six thousand, the same decision. Groups
//! are also kept apart by who holds them, so a job is not shown GPUs that `place` would turn
//! down anyway (held exclusively, or shared by another user where users do not mix).

use crate::policy::{ClusterView, GpuSlot, PlacedJob};
use rustc_hash::FxHashMap;
use std::collections::BTreeSet;

type GroupKey = (usize, Vec<PlacedJob>);

/// Who holds a group's GPUs, as far as placement cares.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Holder {
    Idle,
    /// A job holds each GPU whole: no one can join.
    Exclusive,
    User(std::sync::Arc<str>),
    Users,
}

fn holder(jobs: &[PlacedJob]) -> Holder {
    match jobs.first() {
        None => Holder::Idle,
        Some(_) if jobs.iter().any(|j| j.exclusive) => Holder::Exclusive,
        Some(f) if jobs.iter().all(|j| j.user == f.user) => Holder::User(f.user.clone()),
        Some(_) => Holder::Users,
    }
}

#[derive(Debug, Clone, Default)]
pub struct GpuGroups {
    key_of: Vec<GroupKey>,
    members: FxHashMap<GroupKey, BTreeSet<usize>>,
    /// The lowest GPU index of every group, by who holds the group.
    firsts: FxHashMap<Holder, BTreeSet<usize>>,
    idle: BTreeSet<usize>,
}

fn key(slot: &GpuSlot) -> GroupKey {
    let mut jobs = slot.jobs.clone();
    jobs.sort();
    (slot.gpu_type, jobs)
}

impl GpuGroups {
    pub fn new(view: &ClusterView) -> Self {
        let mut g = GpuGroups::default();
        for (i, slot) in view.gpus.iter().enumerate() {
            let k = key(slot);
            g.key_of.push(k.clone());
            g.members.entry(k).or_default().insert(i);
            if slot.jobs.is_empty() {
                g.idle.insert(i);
            }
        }
        let firsts: Vec<(Holder, usize)> = g
            .members
            .iter()
            .filter_map(|(k, m)| Some((holder(&k.1), *m.first()?)))
            .collect();
        for (h, i) in firsts {
            g.firsts.entry(h).or_default().insert(i);
        }
        g
    }

    /// GPU `gpu` now looks like `slot`.
    pub fn update(&mut self, gpu: usize, slot: &GpuSlot) {
        if slot.jobs.is_empty() {
            self.idle.insert(gpu);
        } else {
            self.idle.remove(&gpu);
        }
        let new = key(slot);
        if self.key_of[gpu] == new {
            return;
        }
        let old = std::mem::replace(&mut self.key_of[gpu], new.clone());
        let (old_h, new_h) = (holder(&old.1), holder(&new.1));
        if let Some(set) = self.members.get_mut(&old) {
            if set.first() == Some(&gpu) {
                let firsts = self.firsts.entry(old_h).or_default();
                firsts.remove(&gpu);
                if let Some(&next) = set.iter().nth(1) {
                    firsts.insert(next);
                }
            }
            set.remove(&gpu);
            if set.is_empty() {
                self.members.remove(&old);
            }
        }
        let set = self.members.entry(new).or_default();
        let firsts = self.firsts.entry(new_h).or_default();
        match set.first().copied() {
            Some(f) if f < gpu => {}
            Some(f) => {
                firsts.remove(&f);
                firsts.insert(gpu);
            }
            None => {
                firsts.insert(gpu);
            }
        }
        set.insert(gpu);
    }

    /// The first GPU of every group, in index order.
    pub fn firsts(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self.firsts.values().flatten().copied().collect();
        v.sort_unstable();
        v
    }

    /// The first GPU of every group a one-GPU job of `user` could join: idle ones, those its
    /// own jobs share, and, where users may mix, those others share. In index order.
    pub fn firsts_for(&self, user: &str, cross_user: bool) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .firsts
            .iter()
            .filter(|(h, _)| match h {
                Holder::Idle => true,
                Holder::Exclusive => false,
                Holder::User(u) => cross_user || **u == *user,
                Holder::Users => cross_user,
            })
            .flat_map(|(_, s)| s.iter().copied())
            .collect();
        v.sort_unstable();
        v
    }

    /// The GPUs without jobs, in index order.
    pub fn idle(&self) -> impl Iterator<Item = usize> + '_ {
        self.idle.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BUNDLED_CONFIG;
    use crate::config::Config;
    use crate::policy::{JobRequest, PlaceContext, ShareRequest, place, place_slots};
    use crate::sim::rng::SplitMix;
    use crate::units::SharePct;
    use std::path::Path;

    fn slot(node: usize, index: u32, gpu_type: usize) -> GpuSlot {
        GpuSlot {
            power: crate::policy::SlotPower::Up,
            node_gpus: 4,
            node: format!("n{node}").into(),
            index,
            gpu_type,
            jobs: vec![],
        }
    }

    fn brute_firsts(view: &ClusterView) -> Vec<usize> {
        let mut seen: Vec<GroupKey> = Vec::new();
        let mut out = Vec::new();
        for (i, s) in view.gpus.iter().enumerate() {
            let k = key(s);
            if !seen.contains(&k) {
                seen.push(k);
                out.push(i);
            }
        }
        out
    }

    /// Random joins and leaves: the kept groups always equal grouping from scratch, and placing
    /// on the groups' first GPUs decides what placing on every GPU decides.
    #[test]
    fn kept_groups_match_regrouping_and_give_the_same_decisions() {
        let cfg = Config::parse(BUNDLED_CONFIG, Path::new("h.toml")).expect("valid");
        let mut rng = SplitMix::new(7);
        let mut view = ClusterView::default();
        for n in 0..12 {
            let t = n % 3;
            for i in 0..4 {
                view.gpus.push(slot(n, i, t));
            }
        }
        let mut groups = GpuGroups::new(&view);
        let mut ctx = PlaceContext::quiet();
        for step in 0..400 {
            let g = rng.below(view.gpus.len());
            if view.gpus[g].jobs.is_empty() || rng.unit() < 0.5 {
                if view.gpus[g].jobs.len() < 3 {
                    let class = rng.below(cfg.classes.len());
                    view.gpus[g].jobs.push(PlacedJob {
                        class,
                        share: SharePct::new(u8::try_from(10 + 10 * rng.below(3)).expect("pct"))
                            .expect("pct"),
                        user: format!("u{}", rng.below(2)).into(),
                        exclusive: rng.unit() < 0.1,
                    });
                }
            } else {
                let k = rng.below(view.gpus[g].jobs.len());
                view.gpus[g].jobs.remove(k);
            }
            groups.update(g, &view.gpus[g]);
            assert_eq!(groups.firsts(), brute_firsts(&view), "step {step}");
            let idle: Vec<usize> = (0..view.gpus.len())
                .filter(|&i| view.gpus[i].jobs.is_empty())
                .collect();
            assert_eq!(groups.idle().collect::<Vec<_>>(), idle);
            if step % 20 == 0 {
                for (class, gpus) in [("vit-infer", 1), ("bert-train", 1), ("resnet50-train", 2)] {
                    let req = JobRequest {
                        gpus,
                        share: if gpus == 1 {
                            ShareRequest::Auto
                        } else {
                            ShareRequest::Exclusive
                        },
                        user: "u1".into(),
                        ..JobRequest::new(class)
                    };
                    let slots: Vec<&GpuSlot> = if gpus == 1 {
                        groups
                            .firsts_for("u1", cfg.policy.allow_cross_user_sharing)
                            .into_iter()
                            .map(|i| &view.gpus[i])
                            .collect()
                    } else {
                        groups.idle().map(|i| &view.gpus[i]).collect()
                    };
                    let full = place(&cfg, &view, &req).map(|p| p.decision);
                    let kept = place_slots(&cfg, &slots, &[], &req, &mut ctx).map(|p| p.decision);
                    match (full, kept) {
                        (Ok(a), Ok(b)) => {
                            assert_eq!(
                                (a.node, a.gpu_indices, a.share_pct, a.sm_clock_mhz),
                                (b.node, b.gpu_indices, b.share_pct, b.sm_clock_mhz),
                                "step {step}, {class}"
                            );
                        }
                        (Err(_), Err(_)) => {}
                        (a, b) => panic!("step {step}, {class}: {a:?} vs {b:?}"),
                    }
                }
            }
        }
    }
}
