//! heshare's part of a job's AdminComment: written beside what others wrote there, and read back
//! by the snapshot thread (the chosen option, the offer, the site factor, the profile) so that a
//! pending job can be re-priced and moved. Pure.

use super::ask::parse_energy_policy;
use crate::config::Config;
use crate::policy::{EnergyPolicy, ShareRequest};
use crate::units::SharePct;

/// AdminComment with heshare's part replaced or appended: what an admin or an earlier
/// job_submit plugin wrote stays. Parts are separated by " | ".
pub fn merge_admin_comment(existing: Option<&str>, ours: &str) -> String {
    let mut parts: Vec<&str> = existing
        .unwrap_or("")
        .split(" | ")
        .map(str::trim)
        .filter(|p| !p.is_empty() && !p.starts_with("heshare:"))
        .collect();
    parts.push(ours);
    parts.join(" | ")
}

/// heshare's part of an AdminComment, read back.
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    pub class: String,
    pub policy: Option<EnergyPolicy>,
    /// Offered types, best first.
    pub types: Vec<usize>,
    /// The type the job's time limit was taken to be written for.
    pub limit_type: Option<usize>,
    /// The share its user's GRES asked (`asked=P` or `asked=whole`), the need the user gave
    /// (`demand=P`) and the site factor heshare set (`site=+N`).
    pub asked: Option<ShareRequest>,
    pub demand_pct: Option<u8>,
    pub site_factor: Option<i32>,
    /// The profile key it was placed with (`profile=KEY`).
    pub profile: Option<crate::profile::ProfileKey>,
}

/// Reads heshare's part of an AdminComment back (see [`Decided`]). `None` if heshare did not
/// place the job.
pub fn read_admin_comment(cfg: &Config, comment: &str) -> Option<Decided> {
    let ours = comment
        .split(" | ")
        .map(str::trim)
        .find(|p| p.starts_with("heshare: type="))?;
    let mut class = None;
    let mut policy = None;
    let mut types = Vec::new();
    let mut prefer = None;
    let mut limit_type = None;
    let mut asked = None;
    let mut demand_pct = None;
    let mut site_factor = None;
    let mut profile = None;
    for w in ours.split_whitespace() {
        if let Some(v) = w.strip_prefix("profile=") {
            profile = crate::profile::ProfileKey::parse(v);
        } else if let Some(v) = w.strip_prefix("asked=") {
            asked = if v == "whole" {
                Some(ShareRequest::Exclusive)
            } else {
                v.parse::<u8>()
                    .ok()
                    .and_then(SharePct::new)
                    .map(ShareRequest::Pct)
            };
        } else if let Some(v) = w.strip_prefix("demand=") {
            demand_pct = v.parse::<u8>().ok().filter(|p| (1..=100).contains(p));
        } else if let Some(v) = w.strip_prefix("site=") {
            site_factor = v.parse::<i32>().ok();
        } else if let Some(v) = w.strip_prefix("class=") {
            class = Some(v.to_owned());
        } else if let Some(v) = w.strip_prefix("limit=") {
            limit_type = cfg.gpu_type(v);
        } else if let Some(v) = w.strip_prefix("policy=") {
            policy = parse_energy_policy(Some(v)).ok().flatten();
        } else if let Some(v) = w.strip_prefix("type=") {
            types = v.split('|').filter_map(|t| cfg.gpu_type(t)).collect();
        } else if let Some(v) = w.strip_prefix("prefer=") {
            prefer = cfg.gpu_type(v);
        } else if w.starts_with("reason=") {
            break;
        }
    }
    if let Some(p) = prefer {
        types.retain(|&t| t != p);
        types.insert(0, p);
    }
    Some(Decided {
        class: class?,
        policy,
        types,
        limit_type,
        asked,
        demand_pct,
        site_factor,
        profile,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn cfg() -> Config {
        Config::parse(crate::config::BUNDLED_CONFIG, Path::new("h.toml")).expect("valid")
    }

    #[test]
    fn admin_comments_keep_what_others_wrote_and_read_back() {
        assert_eq!(merge_admin_comment(None, "heshare: a"), "heshare: a");
        assert_eq!(
            merge_admin_comment(Some("site: billed to X"), "heshare: a"),
            "site: billed to X | heshare: a"
        );
        assert_eq!(
            merge_admin_comment(Some("site: X | heshare: old"), "heshare: new"),
            "site: X | heshare: new"
        );
        let cfg = cfg();
        let c = "site: X | heshare: type=a100|t4 prefer=t4 share=35 clock=300 class=vit-infer policy=energy snapshot=2s reason=35% MPS share of a t4";
        let Decided {
            class,
            policy,
            types,
            ..
        } = read_admin_comment(&cfg, c).expect("heshare's");
        assert_eq!(class, "vit-infer");
        assert_eq!(policy, Some(EnergyPolicy::Energy));
        let (a100, t4) = (
            cfg.gpu_type("a100").expect("a100"),
            cfg.gpu_type("t4").expect("t4"),
        );
        assert_eq!(types, vec![t4, a100]);
        assert!(read_admin_comment(&cfg, "site: X").is_none());
    }
}
