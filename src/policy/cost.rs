//! The one cost heshare ranks a job's options by: joules and seconds on one scale,
//!
//! ```text
//! cost = facility energy the option causes                              [J]
//!      + lambda * (the job's completion time + the delay it imposes)    [J/s * s]
//!      + P(kill at the time limit) * (energy until the limit + lambda * limit)
//! ```
//!
//! * facility energy: what the meter counts for the job (its GPU's draw, with power saving the
//!   idle power and host share it keeps on, a powered-down node it wakes) plus what its arrival
//!   costs the jobs already on the GPU;
//! * completion time: the wait the option implies (queue, a node's boot), the run, and the
//!   progress the GPU's other jobs lose while it runs;
//! * imposed delay: where demand already waits for the option's type beyond its idle GPUs, the
//!   GPU time the option holds (its GPUs, or its share of one, for its run) is time that waiting
//!   work does not get, whether the option starts now or after a wait of its own;
//! * `lambda`: what a second of a job's completion time is worth, in joules per second, per GPU
//!   the job asks for (`[policy] time_value_kwh_per_gpu_hour`);
//! * expected kill: for a job whose limit is known against its own runs, the chance its run
//!   passes the limit on this option (`policy::belief`) times what the killed run throws away
//!   (its energy until the limit, and the limit's time at `lambda`).
//!
//! Pure arithmetic on the numbers placement predicted; no I/O.

use super::placement::Candidate;
use super::queue::TypeQueue;

/// Joules in a kilowatt-hour over seconds in an hour: a value in kWh per hour is this many
/// joules per second (watts).
const W_PER_KWH_PER_HOUR: f64 = 3.6e6 / 3600.0;

/// How a job trades its time against the facility's energy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Exchange {
    /// Joules a second of the job's completion time (and of the work it delays) is worth.
    Rate(f64),
    /// `--energy-policy=performance`: time first, energy only between equal times.
    TimeOnly,
    /// `--energy-policy=energy`: energy first, time only between equal energies.
    EnergyOnly,
}

impl Exchange {
    /// The site's rate for a job asking for `gpus` GPUs (a share asks for one: its user waits
    /// for it as for a whole one), from `kwh_per_gpu_hour`.
    pub fn site(kwh_per_gpu_hour: f64, gpus: u32) -> Exchange {
        Exchange::Rate(kwh_per_gpu_hour.max(0.0) * W_PER_KWH_PER_HOUR * f64::from(gpus.max(1)))
    }

    /// The rate a site sets, `None` for the two pure orders.
    pub fn rate(self) -> Option<f64> {
        match self {
            Exchange::Rate(r) => Some(r),
            Exchange::TimeOnly | Exchange::EnergyOnly => None,
        }
    }

    /// Joules per second, for the cost's single number. The two pure orders use a rate so far
    /// from any real one that the other term only breaks ties (energies below 1e12 J, times
    /// below 1e6 s: a year of a 30 kW node is 1e12 J).
    pub fn joules_per_s(self) -> f64 {
        match self {
            Exchange::Rate(r) => r,
            Exchange::TimeOnly => 1e12,
            Exchange::EnergyOnly => 1e-6,
        }
    }
}

/// The facility energy an option causes: the job's own, and what the GPU's other jobs lose.
pub fn energy_j(c: &Candidate) -> f64 {
    c.predicted_energy_j + c.co_located_energy_penalty_j
}

/// The job's completion time from now on this option: its wait, its run, and the progress the
/// GPU's other jobs lose while it runs.
pub fn time_s(c: &Candidate) -> f64 {
    c.wait_s + c.predicted_runtime_s + c.co_located_time_penalty_s
}

/// Seconds of waiting work the option pushes back: the GPU time it holds (its GPUs, or its
/// share of one, for its run) beyond what the type's idle GPUs have to spare over the demand
/// already waiting for them. Every option holds GPU time, so one that waits for a busy type
/// pushes back the work behind it as one that starts now does; on a type with GPUs to spare,
/// nobody waits for what it holds.
pub fn imposed_delay_s(c: &Candidate, queue: Option<&TypeQueue>) -> f64 {
    let Some(q) = queue else { return 0.0 };
    let held = if c.exclusive {
        f64::from(c.gpus)
    } else {
        f64::from(c.share_pct) / 100.0
    };
    let spare = if c.queued {
        0.0
    } else {
        q.spare_gpus().max(0.0)
    };
    (held - spare).clamp(0.0, held) * c.predicted_runtime_s
}

/// What a kill at the time limit is expected to cost on this option: its chance times what the
/// killed run throws away, the energy it drew until its limit and its limit's time (the rerun
/// then costs what the option does).
pub fn kill_j(c: &Candidate, exchange: Exchange) -> f64 {
    if c.kill_probability <= 0.0 || c.limit_s <= 0.0 {
        return 0.0;
    }
    let power_w = c.predicted_energy_j / c.predicted_runtime_s.max(1e-9);
    c.kill_probability * (power_w + exchange.joules_per_s()) * c.limit_s
}

/// The option's cost in joules (see the module's documentation), with the delay it imposes as
/// `c.imposed_delay_s` holds it (placement sets it from [`imposed_delay_s`] once per option).
pub fn cost_j(c: &Candidate, exchange: Exchange) -> f64 {
    energy_j(c) + exchange.joules_per_s() * (time_s(c) + c.imposed_delay_s) + kill_j(c, exchange)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(energy: f64, runtime: f64, wait: f64, gpus: u32) -> Candidate {
        Candidate {
            gpu_type: "a100".into(),
            type_idx: 0,
            node: None,
            gpu_indices: vec![],
            gpus,
            share_pct: 100,
            exclusive: true,
            sm_clock_mhz: 1410,
            default_sm_clock_mhz: 1410,
            co_located_jobs: 0,
            predicted_runtime_s: runtime,
            predicted_energy_j: energy,
            slowdown: 1.0,
            co_located_energy_penalty_j: 0.0,
            co_located_time_penalty_s: 0.0,
            wait_s: wait,
            wakes_node: false,
            queued: false,
            imposed_delay_s: 0.0,
            kill_probability: 0.0,
            limit_s: 0.0,
            score: 0.0,
            cost_j: 0.0,
        }
    }

    #[test]
    fn a_kwh_per_gpu_hour_is_a_kilowatt_per_gpu() {
        assert!((Exchange::site(1.0, 1).joules_per_s() - 1000.0).abs() < 1e-9);
        assert!((Exchange::site(3.0, 4).joules_per_s() - 12_000.0).abs() < 1e-9);
        assert!((Exchange::site(3.0, 0).joules_per_s() - 3000.0).abs() < 1e-9);
    }

    #[test]
    fn time_and_energy_trade_at_the_rate() {
        let rate = Exchange::Rate(100.0);
        // 10 s more for 2 kJ less: worth it at 100 J/s, not at 300 J/s.
        let fast = cand(10_000.0, 100.0, 0.0, 1);
        let frugal = cand(8_000.0, 110.0, 0.0, 1);
        assert!(cost_j(&frugal, rate) < cost_j(&fast, rate));
        let dear = Exchange::Rate(300.0);
        assert!(cost_j(&fast, dear) < cost_j(&frugal, dear));
        assert!(cost_j(&fast, Exchange::TimeOnly) < cost_j(&frugal, Exchange::TimeOnly));
        assert!(cost_j(&frugal, Exchange::EnergyOnly) < cost_j(&fast, Exchange::EnergyOnly));
    }

    #[test]
    fn only_gpus_taken_from_waiting_demand_impose_a_delay() {
        let mut q = TypeQueue {
            total_gpus: 8,
            idle_gpus: 2,
            max_gpus_per_node: 8,
            frees_in_s: vec![],
            pending_gpus: 0.0,
            mean_hold_s: 0.0,
        };
        let c = cand(1.0, 100.0, 0.0, 2);
        assert_eq!(
            imposed_delay_s(&c, Some(&q)),
            0.0,
            "spare GPUs wait for no one"
        );
        q.pending_gpus = 1.0;
        assert!(
            (imposed_delay_s(&c, Some(&q)) - 100.0).abs() < 1e-9,
            "one of two was wanted"
        );
        q.pending_gpus = 5.0;
        assert!((imposed_delay_s(&c, Some(&q)) - 200.0).abs() < 1e-9);
        assert_eq!(imposed_delay_s(&c, None), 0.0, "no queue known");
        // Waiting for a GPU of a busy type, it holds one when it comes all the same.
        let mut queued = cand(1.0, 100.0, 50.0, 2);
        queued.queued = true;
        assert!((imposed_delay_s(&queued, Some(&q)) - 200.0).abs() < 1e-9);
        // A quarter of a GPU holds a quarter of its time.
        let mut share = cand(1.0, 100.0, 0.0, 1);
        (share.exclusive, share.share_pct, share.co_located_jobs) = (false, 25, 1);
        assert!((imposed_delay_s(&share, Some(&q)) - 25.0).abs() < 1e-9);
        q.pending_gpus = 0.0;
        assert_eq!(
            imposed_delay_s(&share, Some(&q)),
            0.0,
            "two idle GPUs to spare"
        );
    }
}
