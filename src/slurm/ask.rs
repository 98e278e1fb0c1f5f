//! What a job asks for, as the job_submit plugin reads it: the GPU part of the TRES strings Slurm
//! hands the plugin (either spelling Slurm uses) and heshare's SPANK options. Pure parsing.

use crate::policy::EnergyPolicy;

/// How the running Slurm spells GRES in TRES strings: `gres:gpu:1` up to 23.02, `gres/gpu:1`
/// from 23.11 (DESIGN fact 3). Written back in the form it came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TresForm {
    Colon,
    Slash,
}

impl TresForm {
    pub(crate) fn prefix(self) -> &'static str {
        match self {
            TresForm::Colon => "gres:",
            TresForm::Slash => "gres/",
        }
    }
}

/// A job's GPU request as Slurm passed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuAsk {
    pub gpus: u32,
    pub gpu_type: Option<String>,
    /// `--gres=mps:PCT`.
    pub mps_pct: Option<u32>,
    pub form: TresForm,
    /// The other TRES entries of the same field, kept as they were.
    pub others: Vec<String>,
    /// Asked per job (`--gpus=N`, tres_per_job) rather than per node (`--gres`, tres_per_node).
    pub per_job: bool,
}

impl GpuAsk {
    /// The request as asked, for a job's profile key: `gpu:1`, `gpu:a100:2`, `mps:30`,
    /// `gpus:4` (per job).
    pub fn request_string(&self) -> String {
        let kind = match (self.mps_pct, self.per_job) {
            (Some(_), _) => "mps",
            (None, true) => "gpus",
            (None, false) => "gpu",
        };
        let n = self.mps_pct.unwrap_or(self.gpus);
        match &self.gpu_type {
            Some(t) => format!("{kind}:{t}:{n}"),
            None => format!("{kind}:{n}"),
        }
    }
}

/// Why a GPU request is not one heshare decides for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AskError {
    /// A malformed entry; Slurm will say what is wrong with it.
    Unreadable(String),
    /// Readable, but not one GPU request heshare can rewrite (several GPU entries, e.g. two
    /// types at once): left exactly as asked, with this reason.
    Inexpressible(String),
}

/// heshare's SPANK options as they reach job_submit in spank_job_env.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Options {
    pub gpu_share: Option<String>,
    pub gpu_class: Option<String>,
    pub energy_policy: Option<String>,
}

/// Reads `tres_per_node` (`gres:gpu:a100:2`, `gres:mps:30`, `gres/gpu:1`, with other entries
/// separated by `,` or `;`). `Ok(None)`: no GPU asked for.
pub fn parse_tres_per_node(tres: Option<&str>) -> Result<Option<GpuAsk>, AskError> {
    let Some(tres) = tres.filter(|t| !t.trim().is_empty()) else {
        return Ok(None);
    };
    let mut asks: Vec<GpuAsk> = Vec::new();
    let mut others = Vec::new();
    for entry in tres
        .split([',', ';'])
        .map(str::trim)
        .filter(|e| !e.is_empty())
    {
        let (form, rest) = if let Some(r) = entry.strip_prefix("gres:") {
            (TresForm::Colon, r)
        } else if let Some(r) = entry.strip_prefix("gres/") {
            (TresForm::Slash, r)
        } else {
            others.push(entry.to_owned());
            continue;
        };
        let parts: Vec<&str> = rest.split([':', '=']).collect();
        let count = |s: &str| {
            s.parse::<u32>()
                .map_err(|_| AskError::Unreadable(format!("cannot read the count in \"{entry}\"")))
        };
        let (gpus, gpu_type, mps_pct) = match parts.as_slice() {
            ["gpu", n] => (count(n)?, None, None),
            ["gpu", t, n] => (count(n)?, Some((*t).to_owned()), None),
            ["mps", n] => (1, None, Some(count(n)?)),
            ["mps", t, n] => (1, Some((*t).to_owned()), Some(count(n)?)),
            _ => {
                others.push(entry.to_owned());
                continue;
            }
        };
        asks.push(GpuAsk {
            gpus,
            gpu_type,
            mps_pct,
            form,
            others: vec![],
            per_job: false,
        });
    }
    match asks.len() {
        0 => Ok(None),
        1 => Ok(asks.pop().map(|a| GpuAsk { others, ..a })),
        _ => Err(AskError::Inexpressible(format!(
            "the request \"{tres}\" names {} GPU entries; heshare rewrites one GPU request only",
            asks.len()
        ))),
    }
}

/// Reads the job's GPU request: `tres_per_node` (`--gres`) first, else `tres_per_job`
/// (`--gpus=N`, whole GPUs only).
pub fn parse_gpu_request(
    tres_per_node: Option<&str>,
    tres_per_job: Option<&str>,
) -> Result<Option<GpuAsk>, AskError> {
    if let Some(a) = parse_tres_per_node(tres_per_node)? {
        return Ok(Some(a));
    }
    Ok(parse_tres_per_node(tres_per_job)?
        .filter(|a| a.mps_pct.is_none())
        .map(|a| GpuAsk { per_job: true, ..a }))
}

const SPANK_PREFIX: &str = "_SLURM_SPANK_OPTION_heshare_";

/// Reads heshare's options from spank_job_env entries (`_SLURM_SPANK_OPTION_heshare_gpu_share=auto`).
pub fn parse_options<'a>(env: impl IntoIterator<Item = &'a str>) -> Options {
    let mut o = Options::default();
    for e in env {
        let Some(rest) = e.strip_prefix(SPANK_PREFIX) else {
            continue;
        };
        let Some((k, v)) = rest.split_once('=') else {
            continue;
        };
        let v = Some(v.to_owned());
        match k {
            "gpu_share" => o.gpu_share = v,
            "gpu_class" => o.gpu_class = v,
            "energy_policy" => o.energy_policy = v,
            _ => {}
        }
    }
    o
}

/// `--energy-policy`: performance, balanced or energy (`None` when not given).
pub(crate) fn parse_energy_policy(p: Option<&str>) -> Result<Option<EnergyPolicy>, String> {
    match p {
        None => Ok(None),
        Some("performance") => Ok(Some(EnergyPolicy::Performance)),
        Some("balanced") => Ok(Some(EnergyPolicy::Balanced)),
        Some("energy") => Ok(Some(EnergyPolicy::Energy)),
        Some(other) => Err(format!(
            "heshare: --energy-policy: \"{other}\" is not performance, balanced or energy"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tres_strings_of_both_forms_are_read() {
        let a = parse_tres_per_node(Some("gres:gpu:a100:2"))
            .expect("ok")
            .expect("gpu");
        assert_eq!(
            (a.gpus, a.gpu_type.as_deref(), a.form),
            (2, Some("a100"), TresForm::Colon)
        );
        let m = parse_tres_per_node(Some("gres/mps:30"))
            .expect("ok")
            .expect("mps");
        assert_eq!((m.mps_pct, m.form), (Some(30), TresForm::Slash));
        let o = parse_tres_per_node(Some("gres:gpu:1,gres:shard:2"))
            .expect("ok")
            .expect("gpu");
        assert_eq!(o.others, vec!["gres:shard:2".to_owned()]);
        assert_eq!(parse_tres_per_node(Some("")), Ok(None));
        assert_eq!(parse_tres_per_node(None), Ok(None));
        assert_eq!(parse_tres_per_node(Some("gres:shard:2")), Ok(None));
        assert!(matches!(
            parse_tres_per_node(Some("gres:gpu:lots")),
            Err(AskError::Unreadable(_))
        ));
    }

    #[test]
    fn options_come_from_spank_env() {
        let o = parse_options([
            "PATH=/bin",
            "_SLURM_SPANK_OPTION_heshare_gpu_share=auto",
            "_SLURM_SPANK_OPTION_heshare_gpu_class=vit-infer",
            "_SLURM_SPANK_OPTION_other_x=1",
        ]);
        assert_eq!(
            o,
            Options {
                gpu_share: Some("auto".into()),
                gpu_class: Some("vit-infer".into()),
                energy_policy: None,
            }
        );
    }
}
