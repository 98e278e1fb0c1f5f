//! The plugin's picture of the live cluster: which GPU of which node holds which jobs, what each
//! GPU type's queue looks like, and which types a job may be offered through node features.
//!
//! Pure: the snapshot thread in slurmctld (`ffi`) reads Slurm's node and job tables and hands
//! the plain records below to [`Snapshot::build`]; the simulator builds the same records from
//! its own state. Both then decide with the same `request::decide` on the same [`Snapshot`].
//! The GRES strings Slurm prints are parsed here too, in both of the forms Slurm versions use.

use crate::config::Config;
use crate::model::JobKind;
use crate::policy::{ClusterView, GpuSlot, PlacedJob, SlotPower, TypeQueue};

/// One node: its name, its features, its size, and its GPUs (index on the node, catalog type).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeInfo {
    pub name: std::sync::Arc<str>,
    pub features: Vec<String>,
    pub gpus: Vec<(u32, usize)>,
    pub cpus: u32,
    pub memory_mib: u64,
    /// Its power state (Slurm's power saving): up, booting, or powered down (or powering down,
    /// which a job may only have once it is down and resumed).
    pub power: SlotPower,
}

/// A running job's hold on one GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Holding {
    /// Index into the node list given to [`Snapshot::build`].
    pub node: usize,
    pub gpu_index: u32,
    pub job: PlacedJob,
    /// Expected seconds until the job ends (time limit or predicted runtime, less elapsed).
    pub frees_in_s: f64,
    /// The job's whole expected hold (time limit or predicted runtime).
    pub hold_s: f64,
}

/// A pending job's GPU demand.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    /// Catalog types it may run on; empty: any.
    pub types: Vec<usize>,
    /// GPUs it asks for (a share as its fraction).
    pub gpus: f64,
}

/// What the plugin decides on.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// When it was taken, in the caller's clock (Unix seconds in slurmctld, simulated seconds in
    /// the simulator).
    pub taken_at_s: f64,
    pub view: ClusterView,
    /// The GPUs no job holds, in view order.
    idle: Vec<usize>,
    /// Per catalog type: whether a job may be offered it through a node-feature OR constraint
    /// (every node with GPUs of the type has the type's name as a feature and no other GPU type).
    pub feature_types: Vec<bool>,
    /// Per catalog type: the distinct sizes (GPUs of the type, CPUs, memory MiB) of its nodes.
    hosts: Vec<Vec<(u32, u32, u64)>>,
}

/// What a snapshot takes from the node table alone: the GPU slots (without jobs), each type's
/// size, feature and host facts. Nodes change far less often than jobs, so a caller that reads
/// the same nodes again (the simulator's snapshot thread) builds this once and fills it per
/// snapshot; [`Snapshot::build`] does both at once.
#[derive(Debug, Clone)]
pub struct Frame {
    /// Every GPU the nodes list, in node order, with no jobs and its node's power when framed.
    gpus: Vec<GpuSlot>,
    /// Per GPU slot, the node it is on (index into the node list).
    slot_node: Vec<usize>,
    /// Per node, its GPU index on the node and slot, for placing holdings.
    node_slots: Vec<Vec<(u32, usize)>>,
    /// Per type: GPUs and the most on one node (the rest of each queue is filled per snapshot).
    queues: Vec<TypeQueue>,
    feature_types: Vec<bool>,
    hosts: Vec<Vec<(u32, u32, u64)>>,
    present_types: Vec<usize>,
    present: Vec<bool>,
}

impl Frame {
    /// Frames the nodes' GPUs. GPUs of a type the catalog lacks are left out.
    pub fn of(cfg: &Config, nodes: &[NodeInfo]) -> Frame {
        let types = cfg.gpu_types.len();
        let mut gpus = Vec::new();
        let mut slot_node = Vec::new();
        let mut node_slots = Vec::with_capacity(nodes.len());
        let mut queues = vec![TypeQueue::default(); types];
        let mut feature_types = vec![true; types];
        let mut present = vec![false; types];
        let mut hosts: Vec<Vec<(u32, u32, u64)>> = vec![Vec::new(); types];
        let mut per_type = vec![0u32; types];
        for (k, n) in nodes.iter().enumerate() {
            per_type.iter_mut().for_each(|c| *c = 0);
            let mut slots = Vec::with_capacity(n.gpus.len());
            for &(index, t) in &n.gpus {
                if t >= types {
                    continue;
                }
                slots.push((index, gpus.len()));
                slot_node.push(k);
                gpus.push(GpuSlot {
                    node: n.name.clone(),
                    index,
                    gpu_type: t,
                    jobs: vec![],
                    power: n.power,
                    node_gpus: u32::try_from(n.gpus.len()).unwrap_or(u32::MAX),
                });
                per_type[t] += 1;
            }
            node_slots.push(slots);
            let kinds = per_type.iter().filter(|&&c| c > 0).count();
            for (t, &c) in per_type.iter().enumerate().filter(|(_, c)| **c > 0) {
                present[t] = true;
                let size = (c, n.cpus, n.memory_mib);
                if !hosts[t].contains(&size) {
                    hosts[t].push(size);
                }
                let q = &mut queues[t];
                q.total_gpus += c;
                q.max_gpus_per_node = q.max_gpus_per_node.max(c);
                let name = &cfg.gpu_types[t].name;
                if kinds > 1 || !n.features.iter().any(|f| f == name) {
                    feature_types[t] = false;
                }
            }
        }
        for (t, ok) in feature_types.iter_mut().enumerate() {
            *ok &= present[t];
        }
        Frame {
            gpus,
            slot_node,
            node_slots,
            queues,
            feature_types,
            hosts,
            present_types: (0..types).filter(|&t| present[t]).collect(),
            present,
        }
    }

    /// The snapshot at `taken_at_s` of these nodes, in the power states `power` gives per node
    /// (index into the framed node list), holding `holdings` with `pending` waiting. Holdings on
    /// GPUs the nodes do not list are ignored (a node that left the table between the two
    /// reads).
    pub fn snapshot(
        &self,
        taken_at_s: f64,
        power: impl Fn(usize) -> SlotPower,
        holdings: &[Holding],
        pending: &[Pending],
    ) -> Snapshot {
        let mut snap = Snapshot {
            taken_at_s,
            view: ClusterView {
                gpus: self.gpus.clone(),
                queues: self.queues.clone(),
            },
            // The rest is `refill`'s to write.
            idle: Vec::new(),
            feature_types: Vec::new(),
            hosts: Vec::new(),
        };
        self.refill(&mut snap, taken_at_s, power, holdings, pending);
        snap
    }

    /// [`Frame::snapshot`] written over `snap`, whose buffers it reuses: what a caller taking one
    /// snapshot after another keeps. Any snapshot will do; one of this frame reuses the most.
    pub fn refill(
        &self,
        snap: &mut Snapshot,
        taken_at_s: f64,
        power: impl Fn(usize) -> SlotPower,
        holdings: &[Holding],
        pending: &[Pending],
    ) {
        if snap.view.gpus.len() != self.gpus.len() || snap.view.queues.len() != self.queues.len() {
            // Not a snapshot of this frame: nothing of it can be reused.
            *snap = self.snapshot(taken_at_s, power, holdings, pending);
            return;
        }
        let types = self.queues.len();
        snap.taken_at_s = taken_at_s;
        snap.feature_types.clone_from(&self.feature_types);
        snap.hosts.clone_from(&self.hosts);
        let view = &mut snap.view;
        for ((slot, base), &n) in view.gpus.iter_mut().zip(&self.gpus).zip(&self.slot_node) {
            // The slot as framed (the same unless `snap` came from another frame of that size).
            if !std::sync::Arc::ptr_eq(&slot.node, &base.node) {
                slot.node = std::sync::Arc::clone(&base.node);
            }
            slot.index = base.index;
            slot.gpu_type = base.gpu_type;
            slot.node_gpus = base.node_gpus;
            slot.jobs.clear();
            slot.power = power(n);
        }
        for (q, base) in view.queues.iter_mut().zip(&self.queues) {
            let mut frees = std::mem::take(&mut q.frees_in_s);
            frees.clear();
            *q = TypeQueue {
                frees_in_s: frees,
                ..base.clone()
            };
        }
        let mut frees: Vec<f64> = vec![f64::NAN; view.gpus.len()];
        let mut holds: Vec<(f64, u32)> = vec![(0.0, 0); types];
        for h in holdings {
            let Some(&(_, g)) = self
                .node_slots
                .get(h.node)
                .and_then(|s| s.iter().find(|(i, _)| *i == h.gpu_index))
            else {
                continue;
            };
            view.gpus[g].jobs.push(h.job.clone());
            let left = h.frees_in_s.max(0.0);
            frees[g] = if frees[g].is_nan() {
                left
            } else {
                frees[g].max(left)
            };
            let sum = &mut holds[view.gpus[g].gpu_type];
            sum.0 += h.hold_s.max(0.0);
            sum.1 += 1;
        }
        for (g, slot) in view.gpus.iter().enumerate() {
            let q = &mut view.queues[slot.gpu_type];
            if slot.jobs.is_empty() {
                q.idle_gpus += 1;
            } else {
                q.frees_in_s.push(frees[g]);
            }
        }
        for (q, &(sum, n)) in view.queues.iter_mut().zip(&holds) {
            // Equal under `total_cmp` is the same bits, so an unstable sort gives the same order.
            q.frees_in_s.sort_unstable_by(f64::total_cmp);
            q.mean_hold_s = sum / f64::from(n.max(1));
        }
        for p in pending {
            // A job that names no type counts on every present type, else on those it names
            // that are present, a part on each.
            let on = |t: &usize| (p.types.is_empty() || *t < types) && self.present[*t];
            let types_of: &[usize] = if p.types.is_empty() {
                &self.present_types
            } else {
                &p.types
            };
            #[allow(clippy::cast_precision_loss)]
            let part = p.gpus / types_of.iter().filter(|t| on(t)).count().max(1) as f64;
            for &t in types_of.iter().filter(|t| on(t)) {
                view.queues[t].pending_gpus += part;
            }
        }
        snap.idle.clear();
        snap.idle
            .extend((0..view.gpus.len()).filter(|&g| view.gpus[g].jobs.is_empty()));
    }
}

impl Snapshot {
    /// Builds the view and its queues from the node table, the running jobs' holdings and the
    /// pending demand. Holdings on GPUs the nodes do not list are ignored (a node that left the
    /// table between the two reads).
    pub fn build(
        cfg: &Config,
        taken_at_s: f64,
        nodes: &[NodeInfo],
        holdings: &[Holding],
        pending: &[Pending],
    ) -> Snapshot {
        Frame::of(cfg, nodes).snapshot(taken_at_s, |n| nodes[n].power, holdings, pending)
    }

    /// The same snapshot as if taken `at` (later), nothing else having changed: every held GPU is
    /// that much closer to freeing (never below the minute a rebuild would floor it at).
    pub fn aged_to(&mut self, at: f64) {
        let dt = (at - self.taken_at_s).max(0.0);
        for q in &mut self.view.queues {
            for f in &mut q.frees_in_s {
                *f = (*f - dt).max(60.0);
            }
        }
        self.taken_at_s = at;
    }

    /// Whether some node with GPUs of type `t` is big enough for the job (GPUs, and CPUs and
    /// memory where the job says).
    pub fn can_host(
        &self,
        t: usize,
        gpus: u32,
        cpus: Option<u32>,
        memory_mib: Option<u64>,
    ) -> bool {
        self.hosts.get(t).is_some_and(|h| {
            h.iter().any(|&(g, c, m)| {
                g >= gpus && cpus.is_none_or(|x| c >= x) && memory_mib.is_none_or(|x| m >= x)
            })
        })
    }

    /// The GPUs Slurm could hand a one-GPU job of `user` of each type if it started now, which
    /// are the ones placement should weigh: for a whole GPU the first idle GPU of the type in node
    /// order (select/cons_tres first fit), for a share of `share_pct(type)` a GPU with that much
    /// MPS room. gres/mps does not look at users, and MPS serves one user per GPU at a time: if
    /// any GPU of the type with room is held by another user's jobs, Slurm may put the share
    /// there, where the node helper runs it outside MPS, time-sliced with that user's server (or
    /// makes it wait, as the site chooses), so that GPU is the one reported: the model
    /// time-slices distinct users, and placement turns the share down on that type where that
    /// breaks its bound. A job asking for several GPUs sees every idle GPU (the node search
    /// needs them).
    pub fn slots_for(
        &self,
        gpus: u32,
        user: &str,
        share_pct: impl Fn(usize) -> Option<u8>,
    ) -> Vec<&GpuSlot> {
        if gpus > 1 {
            return self.idle.iter().map(|&i| &self.view.gpus[i]).collect();
        }
        let types = self.view.queues.len();
        // Slurm tries powered-up nodes first, then booting ones, then powered-down ones: per
        // type and power state, the first idle GPU, the first with room for the share, and the
        // first with room another user holds; the best power state wins.
        let power = |p: SlotPower| match p {
            SlotPower::Up => 0,
            SlotPower::Booting => 1,
            SlotPower::Down => 2,
        };
        let mut whole: Vec<[Option<usize>; 3]> = vec![[None; 3]; types];
        let mut share: Vec<[Option<usize>; 3]> = vec![[None; 3]; types];
        let mut foreign: Vec<[Option<usize>; 3]> = vec![[None; 3]; types];
        let want: Vec<Option<u32>> = (0..types).map(|t| share_pct(t).map(u32::from)).collect();
        for (i, s) in self.view.gpus.iter().enumerate() {
            let (t, p) = (s.gpu_type, power(s.power));
            if whole[t][p].is_none() && s.jobs.is_empty() {
                whole[t][p] = Some(i);
            }
            if let (None, Some(w)) = (foreign[t][p], want[t]) {
                let used: u32 = s.jobs.iter().map(|j| u32::from(j.share.get())).sum();
                if !s.jobs.iter().any(|j| j.exclusive) && used + w <= 100 {
                    share[t][p] = share[t][p].or(Some(i));
                    if s.jobs.iter().any(|j| *j.user != *user) {
                        foreign[t][p] = Some(i);
                    }
                }
            }
        }
        let first = |v: [Option<usize>; 3]| v.into_iter().flatten().next();
        let whole: Vec<Option<usize>> = whole.into_iter().map(first).collect();
        let shares: Vec<Option<usize>> = (0..types)
            .map(|t| (0..3).find_map(|p| foreign[t][p].or(share[t][p])))
            .collect();
        let mut picks: Vec<usize> = (0..types)
            .flat_map(|t| [whole[t], shares[t]])
            .flatten()
            .collect();
        picks.sort_unstable();
        picks.dedup();
        picks.into_iter().map(|i| &self.view.gpus[i]).collect()
    }
}

/// How long a running job is expected to hold its GPUs, from its start: for a job heshare placed
/// with a time limit, the limit scaled from the type it was written for (`limit_type`) to the type
/// it runs on (a job limited for a t4 that runs on an a100 should end well before its limit);
/// otherwise its limit, or without one its class's predicted runtime, or a day.
pub fn expected_hold(
    cfg: &Config,
    limit_s: Option<f64>,
    class: Option<usize>,
    limit_type: Option<usize>,
    on_type: Option<usize>,
) -> f64 {
    let reference = &cfg.gpu_types[cfg.reference_gpu];
    match (limit_s, class, limit_type, on_type) {
        (Some(l), Some(c), Some(s), Some(t)) => {
            let cap = crate::policy::limit_cap(
                &cfg.classes[c],
                &cfg.gpu_types[t],
                &cfg.gpu_types[s],
                reference,
            );
            l / cap.max(1.0)
        }
        (Some(l), ..) => l,
        (None, Some(c), ..) => crate::model::alone_runtime(&cfg.classes[c], reference, reference).0,
        (None, None, ..) => 86_400.0,
    }
}

/// The catalog class a job without a heshare decision is predicted with: for an MPS share, the
/// inference class whose demand is nearest its fraction; for whole GPUs the first training class
/// (it holds the GPU alone, so its class only matters for memory).
pub fn stand_in_class(cfg: &Config, share_pct: Option<u8>) -> usize {
    let pick = |kind: JobKind, target: f64| {
        cfg.classes
            .iter()
            .enumerate()
            .filter(|(_, c)| c.kind == kind)
            .min_by(|(_, a), (_, b)| {
                (a.demand - target)
                    .abs()
                    .total_cmp(&(b.demand - target).abs())
            })
            .map(|(i, _)| i)
    };
    match share_pct {
        Some(p) if p < 100 => pick(JobKind::Inference, f64::from(p) / 100.0),
        _ => pick(JobKind::Training, 1.0),
    }
    .unwrap_or(0)
}

/// One entry of a GRES string: `gpu:a100:1(IDX:0)`, `mps:30(IDX:1)`,
/// `mps:a100:30(30/100,0/100)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GresEntry {
    pub name: String,
    pub gpu_type: Option<String>,
    pub count: u64,
    /// GPU indices the entry covers (`IDX:0-1,3`), empty when `N/A` or not given.
    pub indices: Vec<u32>,
    /// 23.11+ per-GPU use of a shared GRES, `(30/100,0/100)`: (used, total) per GPU in index order.
    pub per_gpu: Vec<(u64, u64)>,
}

/// Splits a GRES list on the commas outside parentheses and reads each entry. Entries that do not
/// parse are skipped (the caller logs the whole string once if it finds nothing it needs).
pub fn parse_gres_list(s: &str) -> Vec<GresEntry> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    let mut pieces = Vec::new();
    for (i, ch) in s.char_indices() {
        match ch {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                pieces.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    pieces.push(&s[start..]);
    for p in pieces.into_iter().map(str::trim).filter(|p| !p.is_empty()) {
        if let Some(e) = parse_gres_entry(p) {
            out.push(e);
        }
    }
    out
}

fn parse_gres_entry(p: &str) -> Option<GresEntry> {
    let p = p
        .strip_prefix("gres:")
        .or_else(|| p.strip_prefix("gres/"))
        .unwrap_or(p);
    let (head, paren) = match p.split_once('(') {
        Some((h, rest)) => (h, Some(rest.trim_end_matches(')'))),
        None => (p, None),
    };
    let parts: Vec<&str> = head.split(':').collect();
    let (name, gpu_type, count) = match parts.as_slice() {
        [n, c] => (*n, None, *c),
        [n, t, c] => (*n, Some((*t).to_owned()), *c),
        _ => return None,
    };
    let count = parse_count(count)?;
    let mut indices = Vec::new();
    let mut per_gpu = Vec::new();
    if let Some(inner) = paren {
        if let Some(idx) = inner.strip_prefix("IDX:") {
            if idx != "N/A" {
                indices = parse_index_list(idx)?;
            }
        } else if inner.contains('/') {
            for pair in inner.split(',') {
                let (u, t) = pair.split_once('/')?;
                per_gpu.push((u.trim().parse().ok()?, t.trim().parse().ok()?));
            }
        }
        // Anything else in parentheses (S:0-1 socket bindings) carries nothing heshare needs.
    }
    Some(GresEntry {
        name: name.to_owned(),
        gpu_type,
        count,
        indices,
        per_gpu,
    })
}

/// `2`, `4K` (GRES counts may carry a suffix).
fn parse_count(c: &str) -> Option<u64> {
    let (digits, mult) = match c.chars().last()? {
        'k' | 'K' => (&c[..c.len() - 1], 1024),
        'm' | 'M' => (&c[..c.len() - 1], 1024 * 1024),
        'g' | 'G' => (&c[..c.len() - 1], 1024 * 1024 * 1024),
        _ => (c, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(mult)
}

/// `0-1,3` -> [0, 1, 3]. At most 4096 indices: no node has more GPUs.
pub fn parse_index_list(s: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 4096 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
        if out.len() > 4096 {
            return None;
        }
    }
    Some(out)
}

/// A node's GPUs from its configured GRES (`gpu:a100:2,gpu:t4:1,mps:300`): indices in order of
/// the typed entries, each resolved against the catalog (unknown types are left out), and the
/// node's MPS count per GPU (for turning a job's MPS count into a percentage).
pub fn node_gpus(cfg: &Config, gres: &str) -> (Vec<(u32, usize)>, Option<u64>) {
    let entries = parse_gres_list(gres);
    let mut gpus = Vec::new();
    let mut next = 0u32;
    for e in entries.iter().filter(|e| e.name == "gpu") {
        let n = u32::try_from(e.count).unwrap_or(0).min(4096);
        let t = e.gpu_type.as_deref().and_then(|t| cfg.resolve_gpu_type(t));
        for k in 0..n {
            if let Some(t) = t {
                gpus.push((next + k, t));
            }
        }
        next += n;
    }
    let mps: u64 = entries
        .iter()
        .filter(|e| e.name == "mps")
        .map(|e| e.count)
        .sum();
    let per_gpu = (mps > 0 && next > 0).then(|| mps / u64::from(next));
    (gpus, per_gpu)
}

/// What one of a job's `gres_detail_str` entries holds on its node: whole GPUs (indices), or an
/// MPS count on one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobGres {
    Whole(Vec<u32>),
    Mps { index: u32, count: u64 },
}

/// Reads a job's per-node GRES detail (`gpu:a100:1(IDX:0)`, `mps:30(IDX:1)`); entries other
/// than gpu/mps are skipped.
pub fn job_gres(detail: &str) -> Vec<JobGres> {
    parse_gres_list(detail)
        .into_iter()
        .filter_map(|e| match e.name.as_str() {
            "gpu" if !e.indices.is_empty() => Some(JobGres::Whole(e.indices)),
            "mps" if e.indices.len() == 1 => Some(JobGres::Mps {
                index: e.indices[0],
                count: e.count,
            }),
            _ => None,
        })
        .collect()
}

/// The GPU types of a heshare constraint (`a100|t4`, possibly inside the user's own AND) that
/// are catalog types, in the order written.
pub fn constraint_types(cfg: &Config, features: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for f in features.split(['|', '&', '(', ')', '[', ']', ',']) {
        if let Some(t) = cfg.gpu_type(f.trim()) {
            if !out.contains(&t) {
                out.push(t);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BUNDLED_CONFIG;
    use crate::units::SharePct;
    use std::path::Path;

    fn cfg() -> Config {
        Config::parse(BUNDLED_CONFIG, Path::new("h.toml")).expect("valid")
    }

    #[test]
    fn gres_used_of_22_05_is_read() {
        // Verbatim from node_info_t.gres_used on Slurm 22.05.8.
        let e = parse_gres_list(
            "gpu:a100:1(IDX:0),gpu:t4:0(IDX:N/A),mps:a100:0(IDX:N/A),mps:t4:1(IDX:1)",
        );
        assert_eq!(e.len(), 4);
        assert_eq!(
            e[0],
            GresEntry {
                name: "gpu".into(),
                gpu_type: Some("a100".into()),
                count: 1,
                indices: vec![0],
                per_gpu: vec![]
            }
        );
        assert!(e[1].indices.is_empty());
        assert_eq!(
            (e[3].name.as_str(), e[3].indices.as_slice()),
            ("mps", &[1][..])
        );
    }

    #[test]
    fn gres_used_of_23_11_is_read() {
        // The 23.11+ form: per-GPU use of a shared GRES, with commas inside the parentheses.
        let e = parse_gres_list("gpu:a100:0(IDX:N/A),mps:a100:30(30/100,0/100)");
        assert_eq!(e.len(), 2);
        assert_eq!(e[1].count, 30);
        assert_eq!(e[1].per_gpu, vec![(30, 100), (0, 100)]);
    }

    #[test]
    fn job_details_give_whole_gpus_and_untyped_mps() {
        assert_eq!(job_gres("gpu:a100:1(IDX:0)"), vec![JobGres::Whole(vec![0])]);
        assert_eq!(
            job_gres("gpu:t4:3(IDX:0-1,3)"),
            vec![JobGres::Whole(vec![0, 1, 3])]
        );
        assert_eq!(
            job_gres("mps:30(IDX:1)"),
            vec![JobGres::Mps {
                index: 1,
                count: 30
            }]
        );
        assert!(job_gres("gpu:a100:1(IDX:0-99999)").is_empty());
        assert!(job_gres("garbage((").is_empty());
    }

    #[test]
    fn node_gres_gives_typed_indices_and_mps_per_gpu() {
        let cfg = cfg();
        let (gpus, mps) = node_gpus(&cfg, "gpu:a100:2(S:0-1),mps:200");
        let a100 = cfg.gpu_type("a100").expect("a100");
        assert_eq!(gpus, vec![(0, a100), (1, a100)]);
        assert_eq!(mps, Some(100));
        let t4 = cfg.gpu_type("t4").expect("t4");
        let (gpus, _) = node_gpus(&cfg, "gpu:a100:1,gpu:t4:1");
        assert_eq!(gpus, vec![(0, a100), (1, t4)]);
    }

    fn job(class: usize, share: u8, user: &str) -> PlacedJob {
        PlacedJob {
            class,
            share: SharePct::new(share).expect("share"),
            user: user.into(),
            exclusive: share == 100,
        }
    }

    /// Two nodes of two GPUs (an a100 node with its type as a feature, a t4 node without), and
    /// three holdings: both a100s by user 1000, a 40% share of the first t4 by user 1001.
    fn two_nodes(cfg: &Config) -> (Vec<NodeInfo>, Vec<Holding>) {
        let a100 = cfg.gpu_type("a100").expect("a100");
        let t4 = cfg.gpu_type("t4").expect("t4");
        let nodes = vec![
            NodeInfo {
                name: "ha100".into(),
                features: vec!["a100".into()],
                gpus: vec![(0, a100), (1, a100)],
                cpus: 4,
                memory_mib: 4000,
                power: SlotPower::Up,
            },
            NodeInfo {
                name: "ht4".into(),
                features: vec![],
                gpus: vec![(0, t4), (1, t4)],
                cpus: 4,
                memory_mib: 4000,
                power: SlotPower::Up,
            },
        ];
        let holdings = vec![
            Holding {
                node: 0,
                gpu_index: 0,
                job: job(0, 100, "1000"),
                frees_in_s: 300.0,
                hold_s: 600.0,
            },
            Holding {
                node: 0,
                gpu_index: 1,
                job: job(0, 100, "1000"),
                frees_in_s: 100.0,
                hold_s: 200.0,
            },
            Holding {
                node: 1,
                gpu_index: 0,
                job: job(1, 40, "1001"),
                frees_in_s: 50.0,
                hold_s: 60.0,
            },
        ];
        (nodes, holdings)
    }

    #[test]
    fn a_refilled_snapshot_is_the_snapshot_built_afresh() {
        let cfg = cfg();
        let (mut nodes, holdings) = two_nodes(&cfg);
        let t4 = cfg.gpu_type("t4").expect("t4");
        let frame = Frame::of(&cfg, &nodes);
        let mut snap = frame.snapshot(0.0, |n| nodes[n].power, &holdings, &[]);
        // Later: the a100 jobs gone, a second share on the t4, the t4 node booting, demand.
        nodes[1].power = SlotPower::Booting;
        let later = vec![
            holdings[2].clone(),
            Holding {
                node: 1,
                gpu_index: 0,
                job: job(1, 30, "1001"),
                frees_in_s: 500.0,
                hold_s: 900.0,
            },
        ];
        let pending = vec![
            Pending {
                types: vec![],
                gpus: 2.0,
            },
            Pending {
                types: vec![t4],
                gpus: 0.5,
            },
        ];
        frame.refill(&mut snap, 60.0, |n| nodes[n].power, &later, &pending);
        let fresh = Snapshot::build(&cfg, 60.0, &nodes, &later, &pending);
        assert_eq!(snap.view, fresh.view);
        assert_eq!(snap.idle, fresh.idle);
        assert_eq!(snap.taken_at_s, fresh.taken_at_s);
        assert_eq!(snap.feature_types, fresh.feature_types);
        assert_eq!(snap.hosts, fresh.hosts);
        assert_eq!(snap.view.queues[t4].frees_in_s, vec![500.0]);
        // A snapshot of another frame, of the same size (the nodes the other way round) or not
        // (the t4 node alone), is written over as if built afresh.
        let others = [
            vec![nodes[1].clone(), nodes[0].clone()],
            vec![nodes[1].clone()],
        ];
        for other in others {
            let moved: Vec<Holding> = later
                .iter()
                .map(|h| Holding {
                    node: 0,
                    ..h.clone()
                })
                .collect();
            let mut reused = snap.clone();
            Frame::of(&cfg, &other).refill(&mut reused, 90.0, |n| other[n].power, &moved, &pending);
            let fresh = Snapshot::build(&cfg, 90.0, &other, &moved, &pending);
            assert_eq!(reused.view, fresh.view);
            assert_eq!(reused.idle, fresh.idle);
            assert_eq!(reused.feature_types, fresh.feature_types);
            assert_eq!(reused.hosts, fresh.hosts);
        }
    }

    #[test]
    fn a_snapshot_has_queues_feature_types_and_slurms_picks() {
        let cfg = cfg();
        let a100 = cfg.gpu_type("a100").expect("a100");
        let t4 = cfg.gpu_type("t4").expect("t4");
        let (nodes, holdings) = two_nodes(&cfg);
        let pending = vec![Pending {
            types: vec![a100],
            gpus: 1.0,
        }];
        let s = Snapshot::build(&cfg, 0.0, &nodes, &holdings, &pending);
        let q = &s.view.queues[a100];
        assert_eq!((q.total_gpus, q.idle_gpus), (2, 0));
        assert_eq!(q.frees_in_s, vec![100.0, 300.0]);
        assert_eq!(q.pending_gpus, 1.0);
        assert_eq!(q.mean_hold_s, 400.0);
        assert_eq!(
            q.wait_s(1),
            Some(300.0),
            "the pending job takes the first a100"
        );
        assert!(s.feature_types[a100]);
        assert!(
            !s.feature_types[t4],
            "ht4 does not carry its type as a feature"
        );
        // A 30% share of a t4 may land where gres/mps puts it: on user 1001's t4, where another
        // user's job shares time with 1001's MPS server; that is the share's slot. The idle t4
        // is the whole GPU's.
        let picks = s.slots_for(1, "1000", |t| (t == t4).then_some(30));
        let names: Vec<(&str, u32)> = picks.iter().map(|g| (&*g.node, g.index)).collect();
        assert_eq!(names, vec![("ht4", 0), ("ht4", 1)]);
        // User 1001 itself may share its own t4.
        let picks = s.slots_for(1, "1001", |t| (t == t4).then_some(30));
        assert_eq!(picks.len(), 2);
        // 70% no longer fits beside the 40% job: the idle t4 is Slurm's pick for both requests.
        let picks = s.slots_for(1, "1000", |t| (t == t4).then_some(70));
        assert_eq!(picks.len(), 1);
        assert_eq!(picks[0].index, 1);
    }

    #[test]
    fn constraints_name_their_catalog_types() {
        let cfg = cfg();
        let a100 = cfg.gpu_type("a100").expect("a100");
        let t4 = cfg.gpu_type("t4").expect("t4");
        assert_eq!(constraint_types(&cfg, "a100|t4"), vec![a100, t4]);
        assert_eq!(constraint_types(&cfg, "ib&(t4|a100)"), vec![t4, a100]);
        assert!(constraint_types(&cfg, "ib").is_empty());
    }
}
