//! The simulator's ground truth: how fast a job really runs and what it really draws on a GPU
//! type, at a clock, with a share, beside other jobs. It is a different object from heshare's
//! predictor (`model` with the catalog's class constants), and every scheduler, heshare
//! included, decides with the predictor while the engine advances jobs with this world.
//!
//! Where measurements exist the world takes them, per job, from the measured workload it draws
//! for the job's class (files bundled in `data/`, sources in `data/SOURCES.md`):
//! * training speed on P100 relative to V100: Gavel's isolated throughputs of a variant (batch
//!   size) of the class's job family, else the Zeus workload's epoch time at the top power limit;
//! * training speed on A10 and T4: the Zeus workload's epoch time on A40 and Quadro RTX 6000,
//!   scaled by the datasheet roofline ratio of A10 to A40 (0.848) and T4 to RTX 6000 (0.487);
//! * training DVFS response (clock-bound fraction `c`, power utilisation `u`): the Zeus
//!   workload's own power-limit sweep on V100, P100, A40 (limits up to 150 W, the A10's cap) or
//!   RTX 6000, fitted by the world itself, per workload (the catalog holds class medians);
//! * training speed on K80 relative to V100 (a site's catalog may add the type): Gavel's isolated
//!   throughputs of the same variant; its DVFS response and power are the catalog's, perturbed;
//! * training speed on A100 and H100 (no trace here): published per-GPU ratios, A100 2.0x V100
//!   for ResNet-50 and BERT-Large training (Seritan and Ulmer, Sandia report SAND2021-0870) and
//!   H100 1.9x A100 on average over MLPerf Training v2.1 (NVIDIA, reported by EE Times,
//!   2022-11-09), each with a per-job spread of 15% (MLPerf v3.0 H100/A100 ratios of 1.4x to 2.0x
//!   across workloads, Dell submissions);
//! * inference speed on A100 and H100 relative to V100, the clock below which a service slows
//!   (its "knee": the EDP-optimal clock times its measured slowdown there) and its power: the
//!   ai-inference-energy EDP optima of the four services;
//! * an inference job's demand: the trace's own `gpu_milli` (the catalog rounds it to one of
//!   four class demands);
//! * contention: each job's sensitivity drawn from the spread of Gavel's co-located V100 pairs.
//!
//! Elsewhere (types or classes without data) it uses the parametric form with a seeded per-job
//! error whose size is the RMS residual of the catalog's speed prediction on the measured pairs.
//! MPS serialises users on a GPU; that rule is the engine's, applied to every scheduler alike.
//!
//! **Power is the world's own, not the catalog's** (`data/gpu-power/`, see [`PowerSource`]):
//! * idle: `nvidia-smi` readings of idle V100-PCIe cards for the V100 types, the measured bare
//!   idle of A100 80GB and H100 (Vadari, arXiv 2605.23918) for A100 and H100;
//! * busy maximum: the top of the Zeus power-limit sweep the type's DVFS response is fitted on
//!   (V100 250 W, P100 250 W, the A40 sweep at the A10's 150 W cap), the largest per-GPU power of
//!   the ML.ENERGY leaderboard's H100 runs;
//! * a GPU holding a CUDA context (any job with work on it) draws at least its idle power plus
//!   its context power: measured for A100 and H100; elsewhere the measured context power per
//!   TDP of HBM parts (A100, H100: 8%) or of the GDDR6 part (L40S: 19%) times the type's maximum;
//! * where only the catalog has a number (P100, A10 and T4 idle; T4 and A100 maximum; types the
//!   world knows nothing of), the catalog's value times a seeded log-normal error (15% idle, 5%
//!   maximum), fixed per type name: a figure the predictor does not share.

use crate::config::Config;
use crate::model::{JobKind, max_min_fair};
use crate::units::SharePct;
use std::collections::BTreeMap;

const ZEUS_V100: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/zeus-nsdi23/summary_power_v100.csv"
));
const ZEUS_P100: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/zeus-nsdi23/summary_power_p100.csv"
));
const ZEUS_A40: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/zeus-nsdi23/summary_power_a40.csv"
));
const ZEUS_RTX6000: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/zeus-nsdi23/summary_power_rtx6000.csv"
));
const EDP: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/ai-inference-energy-dvfs/edp_optimization_results.json"
));
const GPU_POWER: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/gpu-power/gpu_power.csv"
));

/// A measured figure of `data/gpu-power/gpu_power.csv` (card, quantity), in watts.
fn measured_w(gpu: &str, quantity: &str) -> Option<f64> {
    GPU_POWER.lines().skip(1).find_map(|l| {
        let mut f = l.splitn(4, ',');
        (f.next()? == gpu && f.next()? == quantity)
            .then(|| f.next()?.parse().ok())
            .flatten()
    })
}

/// Context power over bare idle per watt of TDP, measured (Vadari, arXiv 2605.23918): HBM parts
/// the mean of A100 80GB (26.3 W of 300 W) and H100 (49.9 W of 700 W), GDDR6 the L40S (66.4 W of
/// 350 W). TDPs are the datasheets'.
const HBM_CONTEXT_PER_TDP: f64 = (26.3 / 300.0 + 49.9 / 700.0) / 2.0;
const GDDR_CONTEXT_PER_TDP: f64 = 66.4 / 350.0;
/// Seeded error on catalog figures the world has no measurement of.
const IDLE_ERROR_SIGMA: f64 = 0.15;
const MAX_ERROR_SIGMA: f64 = 0.05;

/// Where one of the world's power figures for a type came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PowerSource {
    /// A measurement (data/gpu-power, a Zeus sweep, ML.ENERGY).
    Measured,
    /// Derived from measurements of other parts (context power per TDP).
    Scaled,
    /// The catalog's figure with a seeded error: nothing measured it.
    PerturbedCatalog,
}

/// The world's power figures of one type, with their sources.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TypePower {
    pub gpu_type: String,
    pub idle_w: f64,
    pub idle_source: PowerSource,
    pub max_w: f64,
    pub max_source: PowerSource,
    pub context_w: f64,
    pub context_source: PowerSource,
}

/// A fixed log-normal factor for `name` and `what` (no run seed: the world's hardware is the
/// same in every run).
fn catalog_error(name: &str, what: u64, sigma: f64) -> f64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let mut rng = crate::sim::rng::SplitMix::new(h ^ what.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    (sigma * normal(&mut rng)).exp()
}

/// Datasheet roofline midpoints (sqrt of the FP16 tensor TFLOPS ratio times the memory
/// bandwidth ratio): A10 (125 TFLOPS, 600 GB/s) to A40 (149.7, 696), T4 (65, 320) to Quadro
/// RTX 6000 (130.5, 672).
const A10_PER_A40: f64 = 0.848;
const T4_PER_RTX6000: f64 = 0.487;
/// Published per-GPU training ratios (see the module doc).
const A100_PER_V100: f64 = 2.0;
const H100_PER_A100: f64 = 1.9;
const PUBLISHED_SPREAD: f64 = 0.15;

/// The measured hardware a catalog type is taken from.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Analog {
    V100,
    P100,
    /// A40's sweep up to 150 W, speeds scaled to an A10.
    A10,
    /// RTX 6000's sweep, speeds scaled to a T4.
    T4,
    /// Published ratio to V100 for training; V100's DVFS response; EDP for inference.
    A100,
    H100,
    /// Gavel's isolated K80 throughputs for training speed; nothing else measured (GDDR5).
    K80,
    /// Nothing measured: the catalog's parametric form with the residual's error.
    None,
}

fn analog_of(name: &str) -> Analog {
    match name.to_ascii_lowercase().as_str() {
        "v100" | "v100m16" | "v100m32" => Analog::V100,
        "p100" => Analog::P100,
        "a10" => Analog::A10,
        "t4" => Analog::T4,
        "a100" => Analog::A100,
        "h100" => Analog::H100,
        "k80" => Analog::K80,
        _ => Analog::None,
    }
}

/// A power-limit sweep: (limit W, time per epoch s, average power W), by ascending limit.
type Sweep = Vec<(f64, f64, f64)>;

/// `dataset/network/batch/optimizer` -> sweep, for one GPU's Zeus file.
fn zeus_sweeps(csv: &str, cap_w: f64) -> BTreeMap<String, Sweep> {
    let mut out: BTreeMap<String, Sweep> = BTreeMap::new();
    for line in csv.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 7 {
            continue;
        }
        let (Ok(p), Ok(t), Ok(w)) = (f[4].parse(), f[5].parse(), f[6].parse()) else {
            continue;
        };
        if p > cap_w {
            continue;
        }
        out.entry(format!("{}/{}/{}/{}", f[0], f[1], f[2], f[3]))
            .or_default()
            .push((p, t, w));
    }
    for s in out.values_mut() {
        s.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out.retain(|_, s| s.len() >= 3);
    out
}

/// The clock-bound fractions `fit_sweep` tries: 0.05 to 1 in steps of 0.05.
const CLOCK_BOUND_STEPS: u32 = 20;

/// For one sweep, per clock-bound fraction tried and per point, the relative clock `r` that
/// point ran at raised to `gamma`: what the power curve needs of `gamma`, worked out once per
/// `gamma` rather than once per (beta, gamma).
fn sweep_powers(s: &Sweep, gamma: f64) -> Vec<Vec<f64>> {
    let t1 = s[s.len() - 1].1;
    (1..=CLOCK_BOUND_STEPS)
        .map(|ci| {
            let c = f64::from(ci) * 0.05;
            s.iter()
                .map(|&(_, t, _)| {
                    let x = t / t1 - (1.0 - c);
                    let r = if x > 0.0 { (c / x).min(1.0) } else { 1.0 };
                    r.powf(gamma)
                })
                .collect()
        })
        .collect()
}

/// The best clock-bound fraction and power utilisation for one sweep at a given power curve
/// (beta, and gamma through `powers`, its [`sweep_powers`]), by squared relative power error:
/// the top limit is the full clock, a lower limit's slowdown `t / t1 = c / r + 1 - c` gives the
/// relative clock `r` it ran at.
fn fit_sweep(s: &Sweep, powers: &[Vec<f64>], beta: f64, idle: f64, max: f64) -> (f64, f64, f64) {
    let mut best = (f64::INFINITY, 0.25, 0.5);
    let mut hs: Vec<f64> = Vec::with_capacity(s.len());
    for (ci, rp) in (1..=CLOCK_BOUND_STEPS).zip(powers) {
        let c = f64::from(ci) * 0.05;
        hs.clear();
        hs.extend(rp.iter().map(|p| beta + (1.0 - beta) * p));
        let range = max - idle;
        let num: f64 = s
            .iter()
            .zip(&hs)
            .map(|(&(_, _, w), h)| (w - idle) * h)
            .sum();
        let den: f64 = hs.iter().map(|h| (range * h).powi(2)).sum::<f64>() / range;
        let u = if den > 0.0 {
            (num / den).clamp(0.02, 1.0)
        } else {
            1.0
        };
        let e: f64 = s
            .iter()
            .zip(&hs)
            .map(|(&(_, _, w), h)| ((idle + range * u * h) - w).powi(2) / (w * w))
            .sum();
        if e < best.0 {
            best = (e, c, u);
        }
    }
    best
}

/// One GPU's measured DVFS response: the power curve (beta, gamma) that fits all its sweeps
/// best, and each workload's (c, u) at that curve.
struct ZeusGpu {
    beta: f64,
    gamma: f64,
    /// The sweep's top power limit: the full-clock draw its fits are relative to.
    max_limit_w: f64,
    fits: BTreeMap<String, (f64, f64)>,
    /// Epoch time at the top limit, per workload.
    top_time: BTreeMap<String, f64>,
}

fn zeus_gpu(csv: &str, idle: f64, cap_w: f64) -> ZeusGpu {
    let sweeps = zeus_sweeps(csv, cap_w);
    let max = sweeps
        .values()
        .flat_map(|s| s.iter().map(|p| p.0))
        .fold(0.0, f64::max);
    let gammas: Vec<f64> = (0..=48).map(|gi| 0.2 + f64::from(gi) * 0.1).collect();
    let powers: Vec<Vec<Vec<Vec<f64>>>> = gammas
        .iter()
        .map(|&g| sweeps.values().map(|s| sweep_powers(s, g)).collect())
        .collect();
    let mut best = (f64::INFINITY, 0.3, 2.0);
    for bi in 0..=12 {
        let beta = f64::from(bi) * 0.05;
        for (gi, &gamma) in gammas.iter().enumerate() {
            let e: f64 = sweeps
                .values()
                .zip(&powers[gi])
                .map(|(s, p)| fit_sweep(s, p, beta, idle, max).0)
                .sum();
            if e < best.0 {
                best = (e, beta, gamma);
            }
        }
    }
    let (_, beta, gamma) = best;
    let fits = sweeps
        .iter()
        .map(|(k, s)| {
            let (_, c, u) = fit_sweep(s, &sweep_powers(s, gamma), beta, idle, max);
            (k.clone(), (c, u))
        })
        .collect();
    let top_time = sweeps
        .iter()
        .map(|(k, s)| (k.clone(), s[s.len() - 1].1))
        .collect();
    ZeusGpu {
        beta,
        gamma,
        max_limit_w: max,
        fits,
        top_time,
    }
}

/// One measured workload a job of a class is drawn as. `None` entries are not measured for
/// that catalog type and take the parametric value.
#[derive(Debug, Clone)]
struct Variant {
    label: String,
    speed: Vec<Option<f64>>,
    c: Vec<Option<f64>>,
    u: Vec<Option<f64>>,
    knee: Vec<Option<f64>>,
}

/// Per catalog type: what the world takes from the catalog (hardware facts: idle and maximum
/// power, clocks) and what it fits itself (the power curve).
#[derive(Debug, Clone)]
struct TypeTruth {
    analog: Analog,
    idle_w: f64,
    max_w: f64,
    /// Idle with a CUDA context held, over bare idle.
    context_w: f64,
    power: TypePower,
    max_clock_mhz: f64,
    default_clock_mhz: f64,
    beta: f64,
    gamma: f64,
}

/// The truth about one job, drawn once when the workload is generated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobTruth {
    /// Index into the class's variants.
    pub variant: u16,
    /// Seed of the job's parametric errors (one per GPU type, derived on demand).
    pub noise: u64,
    /// Inference: the fraction of a reference GPU (at its default clock) the service needs.
    pub demand: f64,
    /// Multiplier on the contention the job suffers from co-located jobs.
    pub contention: f64,
}

/// One job on a GPU as the world sees it.
#[derive(Debug, Clone, Copy)]
pub struct Occupant<'a> {
    pub class: usize,
    pub truth: &'a JobTruth,
    pub share: SharePct,
    pub runs: Runs,
}

/// How a job on a shared GPU gets at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runs {
    /// A client of the GPU's MPS server (or the GPU's only job).
    Mps,
    /// Outside MPS, beside another user's MPS server: its own context, time-sliced.
    Native,
    /// Blocked by MPS: another user's server holds the GPU.
    Waits,
}

/// Of the GPU time two or more CUDA contexts share by time-slicing, the part that does work:
/// each switch saves and restores a context and the caches start cold. Nothing here measures
/// it; 0.85 is a pessimistic guess (the simulator's README gives the result at 0.7 as well).
pub const TIME_SLICE_EFFICIENCY: f64 = 0.85;

/// The MPS clients' picture of a GPU, before time-slicing with native contexts.
struct Group {
    rate: Vec<f64>,
    /// Each client's busy share of the GPU.
    each_busy: Vec<f64>,
    draw: Vec<f64>,
    /// An inference client's load on its share (>1: it falls behind); 1 for training.
    load: Vec<f64>,
    busy: f64,
    /// The share of GPU time the server's context keeps busy.
    time: f64,
}

/// A clock as the MPS model uses it ([`World::clock_terms`]).
#[derive(Clone, Copy)]
struct ClockTerms {
    r: f64,
    stretch: f64,
}

/// One job alone on a whole GPU, as [`World::alone_point`] gives it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AlonePoint {
    pub rate: f64,
    pub work_w: f64,
    pub busy: f64,
    pub static_w: f64,
}

/// What the world says of one GPU at one clock.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuTruth {
    pub power_w: f64,
    /// Per occupant: work done per second (reference-seconds for training, seconds of the
    /// service's stream for inference) and the power attributed to it.
    pub rate: Vec<f64>,
    pub job_power_w: Vec<f64>,
    /// SM-busy share of the GPU.
    pub busy: f64,
    /// Per occupant, its part of that busy share (what the driver's per-process accounting
    /// would measure of its processes).
    pub job_busy: Vec<f64>,
}

/// The simulator's ground truth. Built once per run from the bundled measurements.
pub struct World {
    types: Vec<TypeTruth>,
    /// Per catalog class: the measured workloads its jobs are drawn as.
    variants: Vec<Vec<Variant>>,
    kinds: Vec<JobKind>,
    /// The catalog's parametric values per class, for the types nothing measures.
    fallback: Vec<Fallback>,
    kappa: f64,
    /// Gavel pairs' contention relative to the median, sorted: a job draws one.
    kappa_spread: Vec<f64>,
    /// Log-space standard deviation of the catalog's speed prediction against measured speeds.
    pub speed_sigma: f64,
}

#[derive(Debug, Clone)]
struct Fallback {
    speed: Vec<f64>,
    c: f64,
    u: f64,
    knee: f64,
}

/// The Zeus network a training class is drawn from, and its Gavel family (P100 speed).
fn training_sources(class: &str) -> Option<(&'static str, Option<&'static str>)> {
    Some(match class {
        "bert-train" => ("bert_base_uncased", None),
        "transformer-train" => ("bert_base_uncased", Some("Transformer")),
        "resnet50-train" => ("resnet50", Some("ResNet-50")),
        "cyclegan-train" => ("resnet50", Some("CycleGAN")),
        "resnet18-train" => ("shufflenetv2", Some("ResNet-18")),
        "a3c-train" => ("shufflenetv2", Some("A3C")),
        "lm-train" => ("deepspeech2", Some("LM")),
        "recommendation-train" => ("ncf", Some("Recommendation")),
        _ => return None,
    })
}

fn inference_source(class: &str) -> Option<&'static str> {
    Some(match class {
        "sd-infer" => "stablediffusion",
        "llm-infer" => "llama",
        "vit-infer" => "vit",
        "whisper-infer" => "whisper",
        _ => return None,
    })
}

#[derive(serde::Deserialize)]
struct EdpRecord {
    gpu: String,
    workload: String,
    max_frequency_mhz: f64,
    optimal_frequency_edp_mhz: f64,
    optimal_energy_edp_joules: f64,
    optimal_timing_edp_seconds: f64,
    performance_vs_max_edp_percent: f64,
}

/// A Gavel job type's family: `ResNet-50` of `ResNet-50 (batch size 64)`.
pub(crate) fn family(job_type: &str) -> &str {
    job_type.split(" (").next().unwrap_or(job_type)
}

fn median(v: &[f64]) -> Option<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    Some(s[s.len() / 2])
}

/// A standard normal from two uniforms (Box-Muller), for log-normal errors.
fn normal(rng: &mut crate::sim::rng::SplitMix) -> f64 {
    let u1 = rng.unit().max(1e-12);
    let u2 = rng.unit();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

impl World {
    /// Builds the world for `cfg`'s GPU types and classes.
    pub fn new(cfg: &Config) -> World {
        let v100_idle = measured_w("V100-PCIE-32GB", "idle").unwrap_or(23.0);
        // The one P100 idle figure is PWR's, which the catalog holds too: perturbed.
        let p100_idle = cfg
            .gpu_type("p100")
            .map_or(25.0, |t| cfg.gpu_types[t].idle_power.0)
            * catalog_error("p100", 1, IDLE_ERROR_SIGMA);
        let v100 = zeus_gpu(ZEUS_V100, v100_idle, f64::INFINITY);
        let p100 = zeus_gpu(ZEUS_P100, p100_idle, f64::INFINITY);
        let a10 = zeus_gpu(ZEUS_A40, 36.0, 150.0);
        let a40 = zeus_gpu(ZEUS_A40, 36.0, f64::INFINITY);
        let rtx = zeus_gpu(ZEUS_RTX6000, 31.0, f64::INFINITY);
        let types: Vec<TypeTruth> = cfg
            .gpu_types
            .iter()
            .map(|g| {
                let analog = analog_of(&g.name);
                let (beta, gamma) = match analog {
                    Analog::V100 | Analog::A100 | Analog::H100 => (v100.beta, v100.gamma),
                    Analog::P100 => (p100.beta, p100.gamma),
                    Analog::A10 => (a10.beta, a10.gamma),
                    Analog::T4 => (rtx.beta, rtx.gamma),
                    Analog::K80 | Analog::None => (g.dvfs_static_fraction, g.dvfs_exponent),
                };
                let power = type_power(g, analog, [v100_idle, p100_idle], [&v100, &p100, &a10]);
                TypeTruth {
                    analog,
                    idle_w: power.idle_w,
                    max_w: power.max_w,
                    context_w: power.context_w,
                    power,
                    max_clock_mhz: f64::from(g.max_clock().0),
                    default_clock_mhz: f64::from(g.default_sm_clock.0),
                    beta,
                    gamma,
                }
            })
            .collect();
        let reference = &cfg.gpu_types[cfg.reference_gpu];
        let fallback: Vec<Fallback> = cfg
            .classes
            .iter()
            .map(|c| Fallback {
                speed: cfg
                    .gpu_types
                    .iter()
                    .map(|g| crate::model::relative_speed(c, g, reference))
                    .collect(),
                c: c.clock_bound_fraction,
                u: c.power_util,
                knee: c.clock_knee,
            })
            .collect();
        let iso = crate::contention::gavel_isolated();
        let edp: Vec<EdpRecord> = serde_json::from_str(EDP).unwrap_or_default();
        let mut variants = Vec::new();
        let mut residuals = Vec::new();
        for (ci, class) in cfg.classes.iter().enumerate() {
            let vs = match class.kind {
                JobKind::Training => {
                    training_variants(&class.name, &types, &[&v100, &p100, &a10, &a40, &rtx], &iso)
                }
                JobKind::Inference => inference_variants(&class.name, &types, &edp),
            };
            for v in &vs {
                for (t, s) in v.speed.iter().enumerate() {
                    if let (Some(s), fb) = (s, fallback[ci].speed[t]) {
                        if *s > 0.0 && fb > 0.0 && types[t].analog != Analog::V100 {
                            residuals.push((fb / s).ln());
                        }
                    }
                }
            }
            variants.push(vs);
        }
        #[allow(clippy::cast_precision_loss)]
        let speed_sigma = if residuals.is_empty() {
            0.2
        } else {
            (residuals.iter().map(|r| r * r).sum::<f64>() / residuals.len() as f64).sqrt()
        };
        let pairs = crate::contention::pair_sensitivities();
        let kappa = median(pairs).unwrap_or(cfg.policy.contention_kappa);
        let kappa_spread = pairs
            .iter()
            .map(|k| if kappa > 0.0 { k / kappa } else { 1.0 })
            .collect();
        World {
            types,
            variants,
            kinds: cfg.classes.iter().map(|c| c.kind).collect(),
            fallback,
            kappa,
            kappa_spread,
            speed_sigma,
        }
    }

    /// Draws the truth of a job of `class` (an inference job needing `demand` of a reference
    /// GPU, as its trace asked).
    pub fn draw(&self, class: usize, demand: f64, rng: &mut crate::sim::rng::SplitMix) -> JobTruth {
        let n = self.variants.get(class).map_or(0, Vec::len);
        let variant = u16::try_from(rng.below(n.max(1))).unwrap_or(0);
        let contention = if self.kappa_spread.is_empty() {
            1.0
        } else {
            self.kappa_spread[rng.below(self.kappa_spread.len())]
        };
        JobTruth {
            variant,
            noise: rng.next_u64(),
            demand,
            contention,
        }
    }

    fn variant(&self, class: usize, truth: &JobTruth) -> Option<&Variant> {
        self.variants
            .get(class)
            .and_then(|v| v.get(usize::from(truth.variant)))
    }

    /// The job's log-normal error for one type and one quantity, from its seed.
    fn error(&self, truth: &JobTruth, t: usize, what: u64, sigma: f64) -> f64 {
        let mut rng = crate::sim::rng::SplitMix::new(
            truth.noise ^ (t as u64).wrapping_mul(0x9E37_79B9) ^ what.wrapping_mul(0x85EB_CA6B),
        );
        (sigma * normal(&mut rng)).exp()
    }

    /// Speed on type `t` relative to the reference type (alone, default clock).
    pub fn speed(&self, class: usize, truth: &JobTruth, t: usize) -> f64 {
        let measured = self
            .variant(class, truth)
            .and_then(|v| v.speed.get(t).copied().flatten());
        match (measured, self.types[t].analog) {
            (Some(s), _) => s,
            (None, Analog::A100) if self.kinds[class] == JobKind::Training => {
                A100_PER_V100 * self.error(truth, t, 1, PUBLISHED_SPREAD)
            }
            (None, Analog::H100) if self.kinds[class] == JobKind::Training => {
                A100_PER_V100 * H100_PER_A100 * self.error(truth, t, 1, PUBLISHED_SPREAD)
            }
            _ => self.fallback[class].speed[t] * self.error(truth, t, 1, self.speed_sigma),
        }
    }

    fn c(&self, class: usize, truth: &JobTruth, t: usize) -> f64 {
        self.variant(class, truth)
            .and_then(|v| v.c.get(t).copied().flatten())
            .unwrap_or(self.fallback[class].c)
    }

    fn u(&self, class: usize, truth: &JobTruth, t: usize) -> f64 {
        self.variant(class, truth)
            .and_then(|v| v.u.get(t).copied().flatten())
            .unwrap_or(self.fallback[class].u)
    }

    fn knee(&self, class: usize, truth: &JobTruth, t: usize) -> f64 {
        self.variant(class, truth)
            .and_then(|v| v.knee.get(t).copied().flatten())
            .unwrap_or(self.fallback[class].knee)
    }

    /// A label of the measured workload the job was drawn as.
    /// Whether class `class` is a training job or a service, as the world runs it.
    pub fn kind(&self, class: usize) -> JobKind {
        self.kinds[class]
    }

    pub fn label(&self, class: usize, truth: &JobTruth) -> &str {
        self.variant(class, truth)
            .map_or("parametric", |v| &v.label)
    }

    /// What the GPU of type `t` does at `clock_mhz` with these occupants.
    ///
    /// The clients of the MPS server run together (shares, contention); a job running outside
    /// MPS has a CUDA context of its own, which the GPU time-slices with the server's: each
    /// context gets GPU time by max-min fairness of what it would use alone, less
    /// [`TIME_SLICE_EFFICIENCY`] while two or more contexts have work.
    pub fn gpu(&self, t: usize, clock_mhz: f64, occ: &[Occupant<'_>]) -> GpuTruth {
        let ty = &self.types[t];
        let mut group = self.mps_group(t, clock_mhz, occ);
        let natives: Vec<usize> = (0..occ.len())
            .filter(|&k| occ[k].runs == Runs::Native)
            .collect();
        if !natives.is_empty() {
            // Each native context alone on the whole GPU: its rate, GPU time and draw.
            let mut alone = Vec::with_capacity(natives.len());
            for &k in &natives {
                let o = Occupant {
                    share: SharePct::FULL,
                    runs: Runs::Mps,
                    ..occ[k]
                };
                let a = self.mps_group(t, clock_mhz, &[o]);
                alone.push((a.rate[0], a.load[0], a.draw[0], a.busy));
            }
            let mut needs = vec![group.time];
            needs.extend(alone.iter().map(|a| a.3));
            let active = needs.iter().filter(|&&n| n > 0.0).count();
            let capacity = if active > 1 {
                TIME_SLICE_EFFICIENCY
            } else {
                1.0
            };
            let got = max_min_fair(&needs, capacity);
            // Of the GPU time context `c` would use, the part it gets.
            let part = |c: usize| {
                if needs[c] > 0.0 {
                    got[c] / needs[c]
                } else {
                    1.0
                }
            };
            // A job whose context gets `f` of its time: training slows in proportion, a service
            // keeps pace until its load on that time exceeds one.
            let sliced = |class: usize, rate: f64, load: f64, f: f64| match self.kinds[class] {
                JobKind::Training => rate * f,
                JobKind::Inference => 1.0 / (load / f.max(1e-12)).max(1.0),
            };
            // The server's clients run only while their context has the GPU.
            let f0 = part(0);
            for (k, o) in occ.iter().enumerate() {
                if o.runs == Runs::Mps {
                    group.rate[k] = sliced(o.class, group.rate[k], group.load[k], f0);
                    group.draw[k] *= f0;
                    group.each_busy[k] *= f0;
                }
            }
            for (i, &k) in natives.iter().enumerate() {
                let (rate, load, draw, busy) = alone[i];
                let f = part(i + 1);
                group.rate[k] = sliced(occ[k].class, rate, load, f);
                group.draw[k] = draw * f;
                group.each_busy[k] = busy * f;
            }
            group.busy = got.iter().sum::<f64>().min(1.0);
        }
        let total_draw: f64 = group.draw.iter().sum();
        let dvfs = self.dvfs(t, self.clock_terms(t, clock_mhz));
        let work = (ty.max_w - ty.idle_w) * total_draw.min(1.0) * dvfs;
        // A context held (an MPS server with clients, a job outside MPS) keeps the GPU in a
        // higher performance state than bare idle, whether or not it computes; work at least
        // that busy includes it.
        let active: Vec<bool> = occ.iter().map(|o| o.runs != Runs::Waits).collect();
        let n_active = active.iter().filter(|&&a| a).count();
        let dynamic = if n_active > 0 {
            work.max(ty.context_w)
        } else {
            work
        };
        let total_share: f64 = occ.iter().map(|o| o.share.fraction()).sum();
        let job_power_w = occ
            .iter()
            .zip(&group.draw)
            .zip(&active)
            .map(|((o, d), &a)| {
                let idle = if total_share > 0.0 {
                    ty.idle_w * o.share.fraction() / total_share
                } else {
                    0.0
                };
                idle + if total_draw > 0.0 {
                    dynamic * d / total_draw
                } else if a {
                    #[allow(clippy::cast_precision_loss)]
                    let part = dynamic / n_active as f64;
                    part
                } else {
                    0.0
                }
            })
            .collect();
        GpuTruth {
            power_w: ty.idle_w + dynamic,
            rate: group.rate,
            job_power_w,
            busy: group.busy,
            job_busy: group.each_busy,
        }
    }

    /// The MPS server's clients among `occ` (every occupant that `Runs::Mps`) running together
    /// as if the GPU were theirs alone; the others get nothing here.
    fn mps_group(&self, t: usize, clock_mhz: f64, occ: &[Occupant<'_>]) -> Group {
        let clock = self.clock_terms(t, clock_mhz);
        // Nominal busy share each job imposes on the others, and its load.
        let mut busy = Vec::with_capacity(occ.len());
        let mut load = Vec::with_capacity(occ.len());
        let mut training = false;
        for o in occ {
            let (b, l) = self.nominal(o, t, clock);
            training |= o.runs == Runs::Mps && self.kinds[o.class] == JobKind::Training;
            busy.push(b);
            load.push(l);
        }
        let total_busy: f64 = busy.iter().sum();
        let mut rate = Vec::with_capacity(occ.len());
        let mut draw = Vec::with_capacity(occ.len());
        let mut eff_load = Vec::with_capacity(occ.len());
        for (k, o) in occ.iter().enumerate() {
            let (r, d, l) = self.served(o, t, clock, busy[k], load[k], total_busy);
            rate.push(r);
            draw.push(d);
            eff_load.push(l);
        }
        // More than the whole GPU asked: each gets its part of what there is.
        let scale = if total_busy > 1.0 {
            1.0 / total_busy
        } else {
            1.0
        };
        let busy_each: Vec<f64> = busy.iter().map(|b| b * scale).collect();
        let busy = total_busy.min(1.0);
        Group {
            rate,
            each_busy: busy_each,
            draw,
            load: eff_load,
            busy,
            // A training client keeps the server's context busy all the time; services only
            // while they have requests.
            time: if training { 1.0 } else { busy },
        }
    }

    /// `clock_mhz` on type `t` as the MPS model uses it: the relative clock and the stretch of
    /// clock-bound work against the default clock.
    fn clock_terms(&self, t: usize, clock_mhz: f64) -> ClockTerms {
        let ty = &self.types[t];
        ClockTerms {
            r: (clock_mhz / ty.max_clock_mhz).clamp(0.01, 1.0),
            stretch: ty.default_clock_mhz / clock_mhz.max(1.0),
        }
    }

    /// Type `t`'s busy power at `clock` as a fraction of its power at the maximum clock (the power
    /// curve the world fits to Zeus's sweeps).
    fn dvfs(&self, t: usize, clock: ClockTerms) -> f64 {
        let ty = &self.types[t];
        ty.beta + (1.0 - ty.beta) * clock.r.powf(ty.gamma)
    }

    /// An MPS client's nominal busy share of the GPU (what it imposes on the others) and its
    /// load on its share; nothing for an occupant outside the server.
    fn nominal(&self, o: &Occupant<'_>, t: usize, clock: ClockTerms) -> (f64, f64) {
        if o.runs != Runs::Mps {
            return (0.0, 0.0);
        }
        let s = o.share.fraction();
        match self.kinds[o.class] {
            JobKind::Training => (s.min(1.0), 1.0),
            JobKind::Inference => {
                let tf = (self.knee(o.class, o.truth, t) / clock.r).max(1.0);
                let l = o.truth.demand / self.speed(o.class, o.truth, t) * tf / s;
                (s * l.min(1.0), l)
            }
        }
    }

    /// An MPS client's rate, draw and effective load beside clients keeping `total_busy` of the
    /// GPU busy (its own `busy` included); nothing for an occupant outside the server.
    fn served(
        &self,
        o: &Occupant<'_>,
        t: usize,
        clock: ClockTerms,
        busy: f64,
        load: f64,
        total_busy: f64,
    ) -> (f64, f64, f64) {
        if o.runs != Runs::Mps {
            return (0.0, 0.0, 0.0);
        }
        let s = o.share.fraction();
        let contention = 1.0 + self.kappa * o.truth.contention * (total_busy - busy).max(0.0);
        let u = self.u(o.class, o.truth, t);
        match self.kinds[o.class] {
            JobKind::Training => {
                let c = self.c(o.class, o.truth, t);
                let share_stretch = (1.0 / s).max(1.0);
                let tf = c * clock.stretch * share_stretch + (1.0 - c);
                (
                    self.speed(o.class, o.truth, t) / (tf * contention),
                    u * s.min(1.0),
                    1.0,
                )
            }
            JobKind::Inference => {
                let l = load * contention;
                (1.0 / l.max(1.0), u * s * l.min(1.0), l)
            }
        }
    }

    /// The job's work per second alone on a whole GPU of type `t` at its default clock: the
    /// yardstick of its realised slowdown.
    pub fn alone_rate(&self, class: usize, truth: &JobTruth, t: usize) -> f64 {
        self.alone_rate_with(class, truth, t, SharePct::FULL)
    }

    /// The job's work per second alone on a GPU of type `t` at its default clock, holding
    /// `share` of it: what it would have done without neighbours or a lowered clock.
    pub fn alone_rate_with(
        &self,
        class: usize,
        truth: &JobTruth,
        t: usize,
        share: SharePct,
    ) -> f64 {
        self.alone(class, truth, t, share).rate[0]
    }

    /// The GPU of type `t` at its default clock with the job its only occupant, holding
    /// `share` of it.
    fn alone(&self, class: usize, truth: &JobTruth, t: usize, share: SharePct) -> GpuTruth {
        self.gpu(
            t,
            self.types[t].default_clock_mhz,
            &[Occupant {
                class,
                truth,
                share,
                runs: Runs::Mps,
            }],
        )
    }

    /// The job alone on a whole GPU of type `t` at `clock_mhz`: its rate, the power its work
    /// draws over idle (no context floor), the GPU time it keeps busy, and the static power of
    /// the GPU it keeps on (idle and a context held).
    pub fn alone_point(
        &self,
        t: usize,
        clock_mhz: f64,
        class: usize,
        truth: &JobTruth,
    ) -> AlonePoint {
        let ty = &self.types[t];
        // `mps_group` of this one client, without its buffers: its busy share is the whole
        // GPU's.
        let o = Occupant {
            class,
            truth,
            share: SharePct::FULL,
            runs: Runs::Mps,
        };
        let clock = self.clock_terms(t, clock_mhz);
        let (busy, load) = self.nominal(&o, t, clock);
        let (rate, draw, _) = self.served(&o, t, clock, busy, load, busy);
        let time = if self.kinds[class] == JobKind::Training {
            1.0
        } else {
            busy.min(1.0)
        };
        AlonePoint {
            rate,
            work_w: (ty.max_w - ty.idle_w) * draw.min(1.0) * self.dvfs(t, clock),
            busy: time.clamp(0.0, 1.0),
            static_w: ty.idle_w + ty.context_w,
        }
    }

    /// Power of the job alone on a whole GPU of type `t` at its default clock.
    pub fn alone_power_w(&self, class: usize, truth: &JobTruth, t: usize) -> f64 {
        self.alone(class, truth, t, SharePct::FULL).power_w
    }

    /// The bare idle power of type `t` in the world.
    pub fn idle_w(&self, t: usize) -> f64 {
        self.types[t].idle_w
    }

    /// The world's power figures of every type, with their sources (printed by the simulator).
    pub fn power_table(&self) -> Vec<TypePower> {
        self.types.iter().map(|t| t.power.clone()).collect()
    }
}

/// The world's idle, maximum and context power of catalog type `g` (see the module doc).
fn type_power(
    g: &crate::model::GpuType,
    analog: Analog,
    [v100_idle, p100_idle]: [f64; 2],
    [v100, p100, a10]: [&ZeusGpu; 3],
) -> TypePower {
    use PowerSource::{Measured, PerturbedCatalog, Scaled};
    let idle_cat = || {
        (
            g.idle_power.0 * catalog_error(&g.name, 1, IDLE_ERROR_SIGMA),
            PerturbedCatalog,
        )
    };
    let max_cat = || {
        (
            g.max_power.0 * catalog_error(&g.name, 2, MAX_ERROR_SIGMA),
            PerturbedCatalog,
        )
    };
    let ((idle_w, idle_source), (max_w, max_source)) = match analog {
        Analog::V100 => ((v100_idle, Measured), (v100.max_limit_w, Measured)),
        Analog::P100 => ((p100_idle, PerturbedCatalog), (p100.max_limit_w, Measured)),
        Analog::A10 => (idle_cat(), (a10.max_limit_w, Measured)),
        Analog::T4 => (idle_cat(), max_cat()),
        Analog::A100 => (
            measured_w("A100-80GB", "idle").map_or_else(idle_cat, |w| (w, Measured)),
            max_cat(),
        ),
        Analog::H100 => (
            measured_w("H100", "idle").map_or_else(idle_cat, |w| (w, Measured)),
            measured_w("H100-SXM", "busy_max").map_or_else(max_cat, |w| (w, Measured)),
        ),
        Analog::K80 | Analog::None => (idle_cat(), max_cat()),
    };
    let (context_w, context_source) = match analog {
        Analog::A100 => measured_w("A100-80GB", "context")
            .map_or((HBM_CONTEXT_PER_TDP * max_w, Scaled), |w| (w, Measured)),
        Analog::H100 => measured_w("H100", "context")
            .map_or((HBM_CONTEXT_PER_TDP * max_w, Scaled), |w| (w, Measured)),
        // GDDR6 parts.
        Analog::A10 | Analog::T4 | Analog::K80 => (GDDR_CONTEXT_PER_TDP * max_w, Scaled),
        _ => (HBM_CONTEXT_PER_TDP * max_w, Scaled),
    };
    TypePower {
        gpu_type: g.name.clone(),
        idle_w,
        idle_source,
        max_w,
        max_source,
        context_w,
        context_source,
    }
}

/// Training variants: every Zeus workload of the class's network measured on V100, each paired
/// with a Gavel variant of its family (by position, cycling) for the P100 speed.
fn training_variants(
    class: &str,
    types: &[TypeTruth],
    zeus: &[&ZeusGpu; 5],
    iso: &BTreeMap<String, BTreeMap<String, f64>>,
) -> Vec<Variant> {
    let Some((network, fam)) = training_sources(class) else {
        return vec![];
    };
    let [v100, p100, a10, a40, rtx] = *zeus;
    // Per Gavel variant of the family: its P100 and K80 speeds relative to V100.
    let gavel: Vec<(&String, f64, Option<f64>)> = fam
        .map(|f| {
            iso.iter()
                .filter(|(jt, m)| {
                    family(jt) == f && m.contains_key("p100") && m.contains_key("v100")
                })
                .map(|(jt, m)| {
                    let k80 = m.get("k80").map(|k| k / m["v100"]).filter(|r| *r > 0.0);
                    (jt, m["p100"] / m["v100"], k80)
                })
                .collect()
        })
        .unwrap_or_default();
    let mut out = Vec::new();
    for (k, (key, &t_v100)) in v100
        .top_time
        .iter()
        .filter(|(k, _)| k.split('/').nth(1) == Some(network))
        .enumerate()
    {
        let ratio = |g: &ZeusGpu| g.top_time.get(key).map(|t| t_v100 / t);
        let g = (!gavel.is_empty()).then(|| gavel[k % gavel.len()]);
        let mut v = Variant {
            label: match g {
                Some((jt, _, _)) => format!("zeus {key} + gavel {jt}"),
                None => format!("zeus {key}"),
            },
            speed: vec![None; types.len()],
            c: vec![None; types.len()],
            u: vec![None; types.len()],
            knee: vec![None; types.len()],
        };
        for (t, ty) in types.iter().enumerate() {
            let (speed, fit) = match ty.analog {
                Analog::V100 => (Some(1.0), v100.fits.get(key)),
                Analog::P100 => (
                    g.map(|(_, r, _)| r).or_else(|| ratio(p100)),
                    p100.fits.get(key),
                ),
                Analog::A10 => (ratio(a40).map(|r| r * A10_PER_A40), a10.fits.get(key)),
                Analog::T4 => (ratio(rtx).map(|r| r * T4_PER_RTX6000), rtx.fits.get(key)),
                Analog::A100 | Analog::H100 => (None, v100.fits.get(key)),
                Analog::K80 => (g.and_then(|(_, _, k)| k), None),
                Analog::None => (None, None),
            };
            v.speed[t] = speed;
            v.c[t] = fit.map(|f| f.0);
            v.u[t] = fit.map(|f| f.1);
        }
        out.push(v);
    }
    out
}

/// The one inference variant of a class: EDP-measured speeds (V100 = 1), knees and power on
/// V100/A100/H100, the medians of those elsewhere (speed stays parametric elsewhere).
fn inference_variants(class: &str, types: &[TypeTruth], edp: &[EdpRecord]) -> Vec<Variant> {
    let Some(workload) = inference_source(class) else {
        return vec![];
    };
    let rec = |gpu: &str| edp.iter().find(|r| r.gpu == gpu && r.workload == workload);
    let t_max = |r: &EdpRecord| {
        r.optimal_timing_edp_seconds / (1.0 - r.performance_vs_max_edp_percent / 100.0)
    };
    let Some(v100) = rec("V100") else {
        return vec![];
    };
    let base = t_max(v100);
    // (idle, cap) of the benchmark's GPUs: PWR's V100 idle, the catalog's A100 idle on a 250 W
    // A100-PCIE, an H100 NVL at 400 W (ai-inference-energy README).
    let caps = |gpu: &str| match gpu {
        "V100" => (30.0, 250.0),
        "A100" => (50.0, 250.0),
        _ => (50.0, 400.0),
    };
    let mut knees = Vec::new();
    let mut utils = Vec::new();
    let mut per_gpu: BTreeMap<&str, (f64, f64, f64)> = BTreeMap::new();
    for gpu in ["V100", "A100", "H100"] {
        let Some(r) = rec(gpu) else { continue };
        let ratio = r.optimal_frequency_edp_mhz / r.max_frequency_mhz;
        let slower = -r.performance_vs_max_edp_percent / 100.0;
        // Below the knee the service is compute-bound and slows with the clock; the optimum
        // tells where it is when it was measurably slower there, else only that it is lower.
        let knee = if slower > 0.01 {
            ratio * (1.0 + slower)
        } else {
            ratio * 0.8
        };
        let (idle, cap) = caps(gpu);
        let p = r.optimal_energy_edp_joules / r.optimal_timing_edp_seconds;
        let u = ((p - idle) / ((cap - idle) * (0.3 + 0.7 * ratio * ratio))).clamp(0.02, 1.0);
        knees.push(knee);
        utils.push(u);
        per_gpu.insert(gpu, (base / t_max(r), knee.clamp(0.05, 1.0), u));
    }
    let knee_med = median(&knees).unwrap_or(0.5);
    let u_med = median(&utils).unwrap_or(0.3);
    let mut v = Variant {
        label: format!("edp {workload}"),
        speed: vec![None; types.len()],
        c: vec![None; types.len()],
        u: vec![None; types.len()],
        knee: vec![None; types.len()],
    };
    for (t, ty) in types.iter().enumerate() {
        let gpu = match ty.analog {
            Analog::V100 => Some("V100"),
            Analog::A100 => Some("A100"),
            Analog::H100 => Some("H100"),
            _ => None,
        };
        match gpu.and_then(|g| per_gpu.get(g)) {
            Some(&(speed, knee, u)) => {
                v.speed[t] = Some(speed);
                v.knee[t] = Some(knee);
                v.u[t] = Some(u);
            }
            None => {
                v.knee[t] = Some(knee_med);
                v.u[t] = Some(u_med);
            }
        }
    }
    vec![v]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BUNDLED_CONFIG;
    use crate::model::{ModelParams, Tenant, predict};
    use crate::sim::rng::SplitMix;
    use std::path::Path;

    fn cfg() -> Config {
        Config::parse(BUNDLED_CONFIG, Path::new("h.toml")).expect("valid")
    }

    #[test]
    fn every_bundled_class_draws_measured_workloads() {
        let cfg = cfg();
        let w = World::new(&cfg);
        for (i, c) in cfg.classes.iter().enumerate() {
            assert!(
                !w.variants[i].is_empty(),
                "{} has no measured workload",
                c.name
            );
        }
        assert!(
            w.speed_sigma > 0.05 && w.speed_sigma < 1.0,
            "{}",
            w.speed_sigma
        );
        assert!(w.kappa > 0.0 && w.kappa_spread.len() > 100);
        // The A10's power curve is fitted at its own 150 W cap, not the A40's 300 W.
        let a10 = cfg.gpu_type("a10").expect("a10");
        assert!(w.types[a10].gamma < 1.0, "{}", w.types[a10].gamma);
    }

    /// The world is not the predictor: over a workload every class's realised speed differs
    /// from the catalog's prediction on some type, and a service clocked to 19% of a T4 does
    /// slow down in the world (the catalog once said it did not).
    #[test]
    fn the_world_is_not_the_predictor() {
        let cfg = cfg();
        let w = World::new(&cfg);
        let reference = &cfg.gpu_types[cfg.reference_gpu];
        let mut rng = SplitMix::new(1);
        for (ci, class) in cfg.classes.iter().enumerate() {
            let mut worst: f64 = 0.0;
            for _ in 0..20 {
                let truth = w.draw(ci, class.demand, &mut rng);
                for (t, g) in cfg.gpu_types.iter().enumerate() {
                    let predicted = crate::model::relative_speed(class, g, reference);
                    let real = w.speed(ci, &truth, t);
                    worst = worst.max((predicted / real).ln().abs());
                }
            }
            assert!(
                worst > 0.05,
                "{}: world and catalog agree everywhere",
                class.name
            );
        }
        let t4 = cfg.gpu_type("t4").expect("t4");
        let vit = cfg
            .classes
            .iter()
            .position(|c| c.name == "vit-infer")
            .expect("vit");
        let truth = JobTruth {
            variant: 0,
            noise: 7,
            demand: 0.23,
            contention: 1.0,
        };
        let occ = [Occupant {
            class: vit,
            truth: &truth,
            share: SharePct::new(35).expect("35"),
            runs: Runs::Mps,
        }];
        let fast = w.gpu(t4, 1590.0, &occ).rate[0];
        let slow = w.gpu(t4, 300.0, &occ).rate[0];
        assert!(slow < 0.7 * fast, "{slow} vs {fast}");
        let old = crate::model::JobClass {
            clock_bound_fraction: 0.0,
            clock_knee: 0.0,
            ..cfg.classes[vit].clone()
        };
        let p = predict(
            &cfg.gpu_types[t4],
            reference,
            &[Tenant {
                class: &old,
                share: SharePct::new(35).expect("35"),
                user: 0,
            }],
            crate::units::Mhz(300),
            ModelParams {
                contention_kappa: 0.3,
                time_slice_efficiency: 0.8,
            },
        );
        assert!(p.jobs[0].slowdown < 1.01, "the old catalog's claim");
    }

    /// `alone_point` is the MPS model of one client, worked out without the group's buffers.
    #[test]
    fn a_job_alone_is_the_mps_group_of_that_job_alone() {
        let cfg = cfg();
        let w = World::new(&cfg);
        let mut rng = SplitMix::new(3);
        for (ci, class) in cfg.classes.iter().enumerate() {
            let truth = w.draw(ci, class.demand, &mut rng);
            for (t, g) in cfg.gpu_types.iter().enumerate() {
                for &f in g.sm_clocks.iter().step_by(5) {
                    let f = f64::from(f.0);
                    let a = w.alone_point(t, f, ci, &truth);
                    let group = w.mps_group(
                        t,
                        f,
                        &[Occupant {
                            class: ci,
                            truth: &truth,
                            share: SharePct::FULL,
                            runs: Runs::Mps,
                        }],
                    );
                    assert_eq!(a.rate, group.rate[0], "{} on {}", class.name, g.name);
                    assert_eq!(a.busy, group.time.clamp(0.0, 1.0));
                    let ty = &w.types[t];
                    let dvfs = w.dvfs(t, w.clock_terms(t, f));
                    assert_eq!(
                        a.work_w,
                        (ty.max_w - ty.idle_w) * group.draw[0].min(1.0) * dvfs
                    );
                }
            }
        }
    }

    /// Issue 16: every energy figure was once computed with the catalog's own power table. The
    /// world's idle power must differ from the catalog's for every type (measured elsewhere, or
    /// the catalog's perturbed); its maximum may equal the catalog's only where it is a
    /// measurement (the top of a Zeus sweep is the board's power cap, which the datasheet the
    /// catalog cites also gives: P100 250 W, the A10's 150 W), and the measured ones must be the
    /// measurements.
    #[test]
    fn the_world_does_not_share_the_catalogs_power_table() {
        let cfg = cfg();
        let w = World::new(&cfg);
        for (p, g) in w.power_table().iter().zip(&cfg.gpu_types) {
            assert!(
                (p.idle_w - g.idle_power.0).abs() > 1e-6,
                "{}: the world's idle {} W is the catalog's",
                g.name,
                p.idle_w
            );
            assert!(
                (p.max_w - g.max_power.0).abs() > 1e-6 || p.max_source == PowerSource::Measured,
                "{}: the world's maximum {} W is the catalog's, unmeasured",
                g.name,
                p.max_w
            );
            assert!(
                p.context_w > 0.0 && p.context_w < p.max_w - p.idle_w,
                "{p:?}"
            );
        }
        let v100 = cfg.gpu_type("v100m16").expect("v100");
        assert_eq!(w.power_table()[v100].idle_w, 23.0);
        assert_eq!(w.power_table()[v100].idle_source, PowerSource::Measured);
        let h100 = cfg.gpu_type("h100").expect("h100");
        assert_eq!(w.power_table()[h100].context_w, 49.9);
    }

    /// A GPU holding a context draws its context power over idle even when its service has
    /// almost nothing to do; a blocked job holds no context.
    #[test]
    fn a_context_keeps_the_gpu_above_bare_idle() {
        let cfg = cfg();
        let w = World::new(&cfg);
        let a100 = cfg.gpu_type("a100").expect("a100");
        let vit = cfg
            .classes
            .iter()
            .position(|c| c.name == "vit-infer")
            .expect("vit");
        let truth = JobTruth {
            variant: 0,
            noise: 1,
            demand: 0.001,
            contention: 1.0,
        };
        let occ = |runs| {
            [Occupant {
                class: vit,
                truth: &truth,
                share: SharePct::new(30).expect("30"),
                runs,
            }]
        };
        let light = w.gpu(a100, 1410.0, &occ(Runs::Mps));
        assert!(
            (light.power_w - (w.idle_w(a100) + 26.3)).abs() < 1e-9,
            "{}",
            light.power_w
        );
        assert!((light.job_power_w[0] - light.power_w).abs() < 1e-9);
        let blocked = w.gpu(a100, 1410.0, &occ(Runs::Waits));
        assert!((blocked.power_w - w.idle_w(a100)).abs() < 1e-9);
    }

    #[test]
    fn a_blocked_job_makes_no_progress_and_draws_nothing() {
        let cfg = cfg();
        let w = World::new(&cfg);
        let t4 = cfg.gpu_type("t4").expect("t4");
        let llm = cfg
            .classes
            .iter()
            .position(|c| c.name == "llm-infer")
            .expect("llm");
        let mut rng = SplitMix::new(3);
        let a = w.draw(llm, 0.3, &mut rng);
        let b = w.draw(llm, 0.3, &mut rng);
        let half = SharePct::new(50).expect("50");
        let g = w.gpu(
            t4,
            1590.0,
            &[
                Occupant {
                    class: llm,
                    truth: &a,
                    share: half,
                    runs: Runs::Mps,
                },
                Occupant {
                    class: llm,
                    truth: &b,
                    share: half,
                    runs: Runs::Waits,
                },
            ],
        );
        assert!(g.rate[0] > 0.0);
        assert_eq!(g.rate[1], 0.0);
        let sum: f64 = g.job_power_w.iter().sum();
        assert!((sum - g.power_w).abs() < 1e-9);
    }

    #[test]
    fn a_job_outside_mps_is_time_sliced_with_the_server() {
        let cfg = cfg();
        let w = World::new(&cfg);
        let t4 = cfg.gpu_type("t4").expect("t4");
        let class = |n: &str| cfg.classes.iter().position(|c| c.name == n).expect("class");
        let (bert, llm) = (class("resnet18-train"), class("llm-infer"));
        let mut rng = SplitMix::new(5);
        let train = w.draw(bert, 1.0, &mut rng);
        let other = w.draw(bert, 1.0, &mut rng);
        let light = w.draw(llm, 0.05, &mut rng);
        let full = SharePct::FULL;
        let half = SharePct::new(50).expect("50");
        let occ = |c, truth, share, runs| Occupant {
            class: c,
            truth,
            share,
            runs,
        };
        let alone = w
            .gpu(t4, 1590.0, &[occ(bert, &train, full, Runs::Mps)])
            .rate[0];
        let other_alone = w
            .gpu(t4, 1590.0, &[occ(bert, &other, full, Runs::Mps)])
            .rate[0];
        // Two training jobs, one outside MPS: each gets about half the GPU's time, less the
        // switching, and neither is blocked.
        let g = w.gpu(
            t4,
            1590.0,
            &[
                occ(bert, &train, half, Runs::Mps),
                occ(bert, &other, half, Runs::Native),
            ],
        );
        let f = TIME_SLICE_EFFICIENCY / 2.0;
        assert!(g.rate[1] > 0.0 && g.rate[0] > 0.0);
        assert!((g.rate[1] / other_alone - f).abs() < 1e-9, "{g:?}");
        assert!(g.rate[0] <= alone * f + 1e-12, "{g:?}");
        let sum: f64 = g.job_power_w.iter().sum();
        assert!((sum - g.power_w).abs() < 1e-9);
        // A light service outside MPS keeps pace; the training job loses what it takes.
        let g = w.gpu(
            t4,
            1590.0,
            &[
                occ(bert, &train, half, Runs::Mps),
                occ(llm, &light, half, Runs::Native),
            ],
        );
        assert!((g.rate[1] - 1.0).abs() < 1e-12, "{g:?}");
        assert!(
            g.rate[0] < alone * TIME_SLICE_EFFICIENCY && g.rate[0] > 0.5 * alone,
            "{g:?}"
        );
        // Waiting instead, the service does nothing.
        let g = w.gpu(
            t4,
            1590.0,
            &[
                occ(bert, &train, half, Runs::Mps),
                occ(llm, &light, half, Runs::Waits),
            ],
        );
        assert_eq!(g.rate[1], 0.0);
    }
}
