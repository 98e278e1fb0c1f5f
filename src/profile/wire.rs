//! A learned class as one SPANK environment value (`HESHARE_PROFILE`), so that the node helper
//! clocks a profiled job with the numbers the plugin placed it with, without reading the store.
//!
//! `v1;k=training;t=3600;a=0.5;c=0.3;kn=0;u=0.6;mi=1;m=8;d=1;s=a100:2.1/t4:0.42;lk=a10:35:3600`
//! (`lk`: types where its runs were killed at their time limit, with the largest share held
//! there, `w` for whole GPUs, and the longest limit in seconds). Only
//! `job_submit` writes it (it removes any such entry a submission brings), and the helper checks
//! every number's range before use: a value that does not read is ignored, never trusted.

use crate::model::{JobClass, JobKind, KilledOn};

/// Encodes `class` for `HESHARE_PROFILE`.
pub fn encode(class: &JobClass) -> String {
    let speeds: Vec<String> = class
        .measured_speed
        .iter()
        .map(|(t, s)| format!("{t}:{s:.4}"))
        .collect();
    let kills: Vec<String> = class
        .limit_kills
        .iter()
        .map(|k| {
            let share = k.share_pct.map_or("w".to_owned(), |s| s.to_string());
            match k.limit_s {
                Some(l) => format!("{}:{share}:{l}", k.gpu_type),
                None => format!("{}:{share}", k.gpu_type),
            }
        })
        .collect();
    format!(
        "v1;k={};t={:.1};a={:.4};c={:.4};kn={:.4};u={:.4};mi={:.4};m={:.2};d={:.4};s={};lk={}",
        match class.kind {
            JobKind::Training => "training",
            JobKind::Inference => "inference",
        },
        class.reference_runtime_s,
        class.speed_exponent,
        class.clock_bound_fraction,
        class.clock_knee,
        class.power_util,
        class.mem_intensity,
        class.memory_gib,
        class.demand,
        speeds.join("/"),
        kills.join("/"),
    )
}

/// Reads `HESHARE_PROFILE` back into a class named `name`. `None` for anything `encode` could
/// not have written or a number out of its range.
pub fn decode(s: &str, name: &str) -> Option<JobClass> {
    let mut parts = s.split(';');
    if parts.next()? != "v1" {
        return None;
    }
    let mut c = JobClass {
        name: name.to_owned(),
        kind: JobKind::Training,
        description: "learned (from the plugin's decision)".into(),
        reference_runtime_s: f64::NAN,
        speed_exponent: f64::NAN,
        clock_bound_fraction: f64::NAN,
        clock_knee: f64::NAN,
        power_util: f64::NAN,
        mem_intensity: f64::NAN,
        memory_gib: f64::NAN,
        demand: f64::NAN,
        slowdown_bound: None,
        measured_speed: vec![],
        limit_kills: vec![],
        neighbours: None,
        runtime_log_sd: None,
    };
    let num = |v: &str, lo: f64, hi: f64| {
        v.parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && (lo..=hi).contains(x))
    };
    for p in parts {
        let (k, v) = p.split_once('=')?;
        match k {
            "k" => {
                c.kind = match v {
                    "training" => JobKind::Training,
                    "inference" => JobKind::Inference,
                    _ => return None,
                }
            }
            "t" => c.reference_runtime_s = num(v, 1e-3, 1e9)?,
            "a" => c.speed_exponent = num(v, 0.0, 10.0)?,
            "c" => c.clock_bound_fraction = num(v, 0.0, 1.0)?,
            "kn" => c.clock_knee = num(v, 0.0, 1.0)?,
            "u" => c.power_util = num(v, 0.0, 1.0)?,
            "mi" => c.mem_intensity = num(v, 0.0, 1.0)?,
            "m" => c.memory_gib = num(v, 0.0, 1e4)?,
            "d" => c.demand = num(v, 1e-4, 64.0)?,
            "s" => {
                for e in v.split('/').filter(|e| !e.is_empty()) {
                    let (t, x) = e.split_once(':')?;
                    if t.is_empty() || t.len() > 64 {
                        return None;
                    }
                    c.measured_speed.push((t.to_owned(), num(x, 1e-6, 1e6)?));
                }
            }
            "lk" => {
                for e in v.split('/').filter(|e| !e.is_empty()) {
                    let mut f = e.split(':');
                    let (t, m, l) = (f.next()?, f.next()?, f.next());
                    if t.is_empty() || t.len() > 64 || f.next().is_some() {
                        return None;
                    }
                    let share = match m {
                        "w" => None,
                        _ => Some(m.parse::<u8>().ok().filter(|p| (1..=100).contains(p))?),
                    };
                    let limit_s = match l {
                        Some(l) => Some(l.parse::<u32>().ok().filter(|l| *l > 0)?),
                        None => None,
                    };
                    c.limit_kills.push(KilledOn {
                        gpu_type: t.to_owned(),
                        share_pct: share,
                        limit_s,
                    });
                }
            }
            _ => {}
        }
    }
    let complete = [
        c.reference_runtime_s,
        c.speed_exponent,
        c.clock_bound_fraction,
        c.clock_knee,
        c.power_util,
        c.mem_intensity,
        c.memory_gib,
        c.demand,
    ]
    .iter()
    .all(|x| x.is_finite());
    complete.then_some(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BUNDLED_CONFIG;
    use crate::config::Config;
    use std::path::Path;

    #[test]
    fn a_class_survives_the_trip_to_the_node_and_junk_does_not_read() {
        let cfg = Config::parse(BUNDLED_CONFIG, Path::new("h.toml")).expect("config");
        for class in &cfg.classes {
            let mut c = class.clone();
            c.measured_speed = vec![("a100".into(), 2.5), ("t4".into(), 0.41)];
            c.limit_kills = vec![
                KilledOn {
                    gpu_type: "a10".into(),
                    share_pct: Some(35),
                    limit_s: Some(3600),
                },
                KilledOn {
                    gpu_type: "t4".into(),
                    share_pct: None,
                    limit_s: None,
                },
            ];
            let back = decode(&encode(&c), &c.name).expect("reads");
            assert_eq!(back.kind, c.kind);
            assert_eq!(back.measured_speed, c.measured_speed);
            assert_eq!(back.limit_kills, c.limit_kills);
            assert!((back.reference_runtime_s - c.reference_runtime_s).abs() < 0.1);
            assert!((back.demand - c.demand).abs() < 1e-4);
        }
        for bad in [
            "",
            "v2;k=training",
            "v1;k=training;t=10",
            "v1;k=robot;t=1;a=1;c=0;kn=0;u=1;mi=1;m=1;d=1;s=",
            "v1;k=training;t=1;a=1;c=7;kn=0;u=1;mi=1;m=1;d=1;s=",
            "v1;k=training;t=1;a=1;c=0;kn=0;u=1;mi=1;m=1;d=1;s=a100:nan",
        ] {
            assert!(decode(bad, "x").is_none(), "{bad}");
        }
    }
}
