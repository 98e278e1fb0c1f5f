//! What heshare would know of a job if it had watched it run everywhere: the profile it would
//! learn from a perfect run of the job on every GPU type the cluster has, as the world measures
//! it. `heshare-oracle` decides with it through the shipped path (plugin, Slurm's placement, node
//! helper), so the distance from `heshare` to `heshare-oracle` is what learning costs, and the
//! distance from `heshare-oracle` to the lower bound what the decision rule itself costs.
//!
//! The profile is made the way a site's is: for each type, the accounting record the node helper
//! would write of the job alone on a whole GPU at the default clock (its true runtime, energy and
//! busy fraction in the world), turned into an observation by `profile::store::observation`,
//! filed by `profile::Book::learn` and read back by `profile::lookup`. Nothing here is the
//! predictor's: every number is the world's.

use super::engine::SimJob;
use super::learning::account_of;
use super::world::World;
use crate::config::Config;
use crate::node::gpu::BackendKind;
use crate::node::record::{Basis, Record, RecordKind};
use crate::profile::store::observation;
use crate::profile::{Asked, Book, Learned, ProfileKey, lookup};

/// The perfect record of `job` alone on one whole GPU of `gpu_type` (per GPU for a multi-GPU
/// job), ended at `end_s`.
fn perfect_record(
    cfg: &Config,
    world: &World,
    job: &SimJob,
    gpu_type: usize,
    run: usize,
    end_s: f64,
    keys: &[ProfileKey],
) -> Record {
    let rate = world.alone_rate(job.class, &job.truth, gpu_type).max(1e-12);
    let runtime = (job.work_s / rate).max(1.0);
    let clock = f64::from(cfg.gpu_types[gpu_type].default_sm_clock.0);
    let point = world.alone_point(gpu_type, clock, job.class, &job.truth);
    let gpus = job.num_gpus.max(1);
    let watts = world.alone_power_w(job.class, &job.truth, gpu_type) * f64::from(gpus);
    Record {
        record_id: format!(
            "oracle:{}:{}:{run}",
            job.template, cfg.gpu_types[gpu_type].name
        ),
        kind: RecordKind::Job,
        node: "oracle".into(),
        job_id: format!("oracle-{}", job.template),
        user: format!("u{}", job.user),
        uid: job.user,
        account: account_of(job.user),
        class: Some(cfg.classes[job.class].name.clone()),
        gpus: (0..gpus).collect(),
        gpu_type: cfg.gpu_types[gpu_type].name.clone(),
        share_pct: None,
        clocks: vec![],
        start: end_s - runtime,
        end: end_s,
        energy_j: watts * runtime,
        avg_w: watts,
        backend: BackendKind::Model,
        counter_reset: false,
        complete: true,
        basis: Basis::Whole,
        mps_wait_s: 0.0,
        outside_mps: false,
        notes: vec![],
        clock_control: true,
        profile_keys: keys.iter().map(|k| k.as_str().to_owned()).collect(),
        exit: Some("0:0".into()),
        busy_frac: Some(point.busy.clamp(0.0, 1.0)),
        neighbour_busy: None,
        max_memory_mib: None,
        time_limit_s: None,
    }
}

/// The profile heshare would derive for `job` (its keys `keys`, its true class as its label) had
/// it run alone on every type of `types` often enough to decide, looked up at `now_s`.
pub fn true_profile(
    cfg: &Config,
    world: &World,
    job: &SimJob,
    types: &[usize],
    keys: &[ProfileKey],
    share: bool,
    now_s: f64,
) -> Option<Learned> {
    let mut book = Book::default();
    let limits = cfg.profiles.learn_limits();
    let runs = cfg.profiles.min_runs.max(1) as usize;
    for &t in types {
        for run in 0..runs {
            let r = perfect_record(cfg, world, job, t, run, now_s, keys);
            if let Some(o) = observation(cfg, &r) {
                book.learn(&o, limits);
            }
        }
    }
    lookup(
        cfg,
        &book,
        keys,
        Asked {
            label: Some(&cfg.classes[job.class]),
            share,
        },
        now_s,
        cfg.profiles.derive_settings(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::engine::{WorkloadParams, build_state, generate_jobs};
    use crate::sim::learning::OnlineProfiles;
    use crate::sim::templates::Recurrence;
    use std::path::Path;

    #[test]
    fn the_oracle_sees_the_truth_the_world_drew() {
        let cfg = Config::parse(crate::config::BUNDLED_CONFIG, Path::new("h.toml")).expect("valid");
        let world = World::new(&cfg);
        let nodes = crate::cluster::parse_node_list(
            crate::cluster::OPENB_GPU_NODES,
            Path::new("openb.csv"),
            &cfg,
        )
        .expect("parses");
        let nodes = crate::sim::experiment::scale_nodes(&nodes, 0.05);
        let trace = crate::sim::trace::parse(
            crate::sim::trace::OPENB_DEFAULT_PODS,
            crate::sim::trace::TraceFormat::Openb,
            Path::new("openb.csv"),
            &cfg,
        )
        .expect("parses");
        let mut present: Vec<usize> = nodes.iter().filter_map(|n| n.gpu_type).collect();
        present.sort_unstable();
        present.dedup();
        let gpus = nodes.iter().map(|n| n.gpus as usize).sum();
        let jobs = generate_jobs(
            &cfg,
            &world,
            &trace,
            gpus,
            &present,
            WorkloadParams {
                load: 0.7,
                jobs: 200,
                max_duration_s: 172_800.0,
                users: 20,
                seed: 42,
                recurrence: Recurrence::default(),
            },
        );
        let st = build_state(&cfg, &nodes, jobs);
        let mut profiles = OnlineProfiles::new(900.0);
        let mut checked = 0;
        for job in st.jobs.iter().filter(|j| j.gpu_milli == 1000).take(20) {
            let keys = profiles.keys_of(job, "gpu:1");
            let l = true_profile(&cfg, &world, job, &present, &keys, false, 1e6)
                .expect("a perfect run on every type decides");
            // Every type measured, and on each the runtime the world gives the job alone there.
            assert_eq!(l.measured.len(), present.len());
            for &t in &present {
                let truth = job.work_s / world.alone_rate(job.class, &job.truth, t);
                let reference = &cfg.gpu_types[cfg.reference_gpu];
                let said = l.class.reference_runtime_s
                    / crate::model::relative_speed(&l.class, &cfg.gpu_types[t], reference);
                assert!(
                    (said / truth - 1.0).abs() < 0.02,
                    "{} on {}: profile says {said:.0} s, the world {truth:.0} s",
                    cfg.classes[job.class].name,
                    cfg.gpu_types[t].name
                );
            }
            checked += 1;
        }
        assert!(checked >= 10, "only {checked} whole-GPU jobs checked");
    }
}
