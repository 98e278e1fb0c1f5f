//! A cluster and a workload of older GPU generations, as Gavel (Narayanan et al., OSDI'20)
//! simulates them: its 36 K80 + 36 P100 + 36 V100 cluster and jobs drawn the way its generator
//! draws them (`scheduler/utils.py`, `generate_job` with multi-GPU jobs): a scale factor (GPUs)
//! of 1 with probability 0.7, 2 with 0.1, 4 with 0.15 and 8 with 0.05; a job type uniform over
//! the 26 types of its throughput table that were measured at that scale factor; a duration on a
//! V100 of `60 * 10^U(1.5, 3)` seconds with probability 0.8, else `60 * 10^U(3, 4)`.
//!
//! What Gavel does not say, and is assumed here: its servers hold 8 GPUs (36 per type: four of
//! 8 and one of 4), with 8 cores and 64 GiB per GPU; each job asks 4 cores and 32 GiB per GPU.
//! Each job type is a run of the catalog class of its family (ResNet-18 is `resnet18-train`, and
//! so on), so the world times it with Gavel's own K80/P100/V100 throughputs of that family.
//! The K80 is not in the bundled catalog: a site with K80s describes them in its heshare.toml,
//! as `K80_CATALOG` does.

use super::rng::SplitMix;
use super::trace::TraceJob;
use crate::config::Config;
use std::collections::BTreeSet;

/// The catalog entry a site with Tesla K80s adds (one entry per GK210 GPU, as NVML lists them).
pub const K80_CATALOG: &str = r#"
[gpu.k80]
description = "NVIDIA Tesla K80 (one GK210 GPU of the board)"
aliases = ["K80"]
# Datasheet: 300 W per board of two GPUs. Idle: assumption (no K80 reading here).
idle_power_w = 25
max_power_w = 150
host_power_w = 25
speed_uncertainty = 0.3
memory_gib = 12
# Gavel's isolated throughputs, K80 over V100, geometric mean of its 25 one-GPU job types.
relative_throughput = 0.216
# Datasheet: 562-875 MHz application clocks, 13 MHz apart; autoboost runs it at the top.
sm_clock_range_mhz = { min = 562, max = 875, step = 13.041667 }
default_sm_clock_mhz = 875
# No K80 sweep is public here: the P100 fit stands in.
dvfs_static_fraction = 0.55
dvfs_exponent = 3.3
"#;

/// The Gavel cluster in the openb node-list form (`sn,cpu_milli,memory_mib,gpu,model`).
pub fn cluster_csv() -> String {
    let mut out = String::from("sn,cpu_milli,memory_mib,gpu,model\n");
    for model in ["K80", "P100", "V100M16"] {
        for (k, gpus) in [8u32, 8, 8, 8, 4].into_iter().enumerate() {
            out.push_str(&format!(
                "gavel-{}-{k},{},{},{gpus},{model}\n",
                model.to_ascii_lowercase(),
                gpus * 8_000,
                u64::from(gpus) * 64 * 1024
            ));
        }
    }
    out
}

/// The catalog class a Gavel job type's family runs as.
fn class_of(job_type: &str) -> Option<&'static str> {
    Some(match super::world::family(job_type) {
        "ResNet-18" => "resnet18-train",
        "ResNet-50" => "resnet50-train",
        "Transformer" => "transformer-train",
        "LM" => "lm-train",
        "Recommendation" => "recommendation-train",
        "A3C" => "a3c-train",
        "CycleGAN" => "cyclegan-train",
        _ => return None,
    })
}

/// Gavel's job types measured on V100 at each scale factor, from its isolated table.
fn types_by_scale() -> Vec<(u32, Vec<String>)> {
    let mut by: Vec<(u32, BTreeSet<String>)> = [1, 2, 4, 8]
        .into_iter()
        .map(|s| (s, BTreeSet::new()))
        .collect();
    for r in crate::contention::gavel_rows()
        .filter(|r| r.gpu == "v100" && r.consolidated && r.steps_per_s > 0.0)
    {
        if let Some((_, set)) = by.iter_mut().find(|(s, _)| *s == r.scale) {
            set.insert(r.job_type.to_owned());
        }
    }
    by.into_iter()
        .map(|(s, set)| (s, set.into_iter().collect()))
        .collect()
}

/// Gavel's `_generate_scale_factor` with multi-GPU jobs.
fn scale_factor(rng: &mut SplitMix) -> u32 {
    let r = rng.unit();
    if r >= 0.95 {
        8
    } else if r >= 0.8 {
        4
    } else if r >= 0.7 {
        2
    } else {
        1
    }
}

/// Gavel's `_generate_duration`: seconds on a V100.
fn duration_s(rng: &mut SplitMix) -> f64 {
    let (lo, hi) = if rng.unit() >= 0.8 {
        (3.0, 4.0)
    } else {
        (1.5, 3.0)
    };
    60.0 * 10f64.powf(lo + (hi - lo) * rng.unit())
}

/// `n` jobs drawn as Gavel's generator draws them (seeded), as trace rows naming their class.
/// Rows of a class the catalog lacks are not drawn.
pub fn jobs(cfg: &Config, n: usize, seed: u64) -> Vec<TraceJob> {
    let table = types_by_scale();
    let mut rng = SplitMix::new(seed ^ 0x6A7E_1000);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let scale = scale_factor(&mut rng);
        let Some((_, types)) = table.iter().find(|(s, t)| *s == scale && !t.is_empty()) else {
            continue;
        };
        let job_type = &types[rng.below(types.len())];
        let duration = duration_s(&mut rng);
        let Some(class) = class_of(job_type).filter(|c| cfg.class(c).is_some()) else {
            continue;
        };
        out.push(TraceJob {
            id: format!("gavel-{} {job_type}", out.len()),
            submit_s: 0.0,
            duration_s: duration,
            num_gpus: scale,
            gpu_milli: 1000,
            gpu_types: vec![],
            cpu_milli: u64::from(scale) * 4_000,
            memory_mib: u64::from(scale) * 32 * 1024,
            user: String::new(),
            class: Some(class.to_owned()),
            recorded: None,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BUNDLED_CONFIG;
    use std::path::Path;

    fn cfg() -> Config {
        let text = format!("{BUNDLED_CONFIG}\n{K80_CATALOG}");
        Config::parse(&text, Path::new("h.toml")).expect("valid with the K80 entry")
    }

    #[test]
    fn the_cluster_is_gavels_36_of_each_type() {
        let cfg = cfg();
        let nodes = crate::cluster::parse_node_list(&cluster_csv(), Path::new("gavel.csv"), &cfg)
            .expect("parses");
        for name in ["k80", "p100", "v100m16"] {
            let t = cfg.gpu_type(name).expect("in the catalog");
            let gpus: u32 = nodes
                .iter()
                .filter(|n| n.gpu_type == Some(t))
                .map(|n| n.gpus)
                .sum();
            assert_eq!(gpus, 36, "{name}");
        }
    }

    #[test]
    fn jobs_follow_gavels_generator() {
        let cfg = cfg();
        let jobs = jobs(&cfg, 20_000, 1);
        assert_eq!(jobs.len(), 20_000);
        #[allow(clippy::cast_precision_loss)]
        let share = |f: &dyn Fn(&TraceJob) -> bool| {
            jobs.iter().filter(|j| f(j)).count() as f64 / jobs.len() as f64
        };
        // Scale factors as Gavel draws them (every scale factor has job types in its table).
        for (gpus, p) in [(1, 0.7), (2, 0.1), (4, 0.15), (8, 0.05)] {
            let got = share(&|j| j.num_gpus == gpus);
            assert!((got - p).abs() < 0.015, "{gpus} GPUs: {got}");
        }
        // Durations: a fifth from 10^3 to 10^4 minutes.
        let long = share(&|j| j.duration_s >= 60.0 * 1e3);
        assert!((long - 0.2).abs() < 0.015, "{long}");
        assert!(
            jobs.iter()
                .all(|j| j.duration_s >= 60.0 * 10f64.powf(1.5) && j.duration_s <= 60.0 * 1e4)
        );
        // Every family runs as its catalog class.
        let classes: BTreeSet<&str> = jobs.iter().filter_map(|j| j.class.as_deref()).collect();
        assert_eq!(classes.len(), 7, "{classes:?}");
    }
}
