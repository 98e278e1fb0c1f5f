//! Small unit types so that watts, joules, seconds, megahertz and MPS shares cannot be mixed up.
//!
//! They are plain `Copy` wrappers: the model does its arithmetic on the inner `f64`/`u32` and
//! wraps the result, so a function signature says which unit it takes and returns.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Power in watts.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize, Default)]
#[serde(transparent)]
pub struct Watts(pub f64);

/// Energy in joules.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize, Default)]
#[serde(transparent)]
pub struct Joules(pub f64);

/// A duration in seconds (fractional: model outputs are not whole seconds).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize, Default)]
#[serde(transparent)]
pub struct Seconds(pub f64);

/// An SM (graphics) clock in MHz, as NVML reports and accepts it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
#[serde(transparent)]
pub struct Mhz(pub u32);

/// An MPS active-thread percentage: the share of one GPU's SMs a job may use, 1..=100.
/// 100 on a GPU with no other job is an exclusive GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u8", into = "u8")]
pub struct SharePct(u8);

impl SharePct {
    pub const FULL: SharePct = SharePct(100);

    /// `None` outside 1..=100, the range CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and gres/mps accept.
    pub fn new(pct: u8) -> Option<SharePct> {
        (1..=100).contains(&pct).then_some(SharePct(pct))
    }

    pub fn get(self) -> u8 {
        self.0
    }

    /// The share as a fraction of the GPU, 0.01..=1.0.
    pub fn fraction(self) -> f64 {
        f64::from(self.0) / 100.0
    }
}

impl TryFrom<u8> for SharePct {
    type Error = String;
    fn try_from(v: u8) -> Result<Self, Self::Error> {
        SharePct::new(v).ok_or_else(|| format!("share {v}% is outside 1..=100"))
    }
}

impl From<SharePct> for u8 {
    fn from(s: SharePct) -> u8 {
        s.0
    }
}

impl Joules {
    pub fn kwh(self) -> f64 {
        self.0 / 3.6e6
    }
}

impl std::ops::Mul<Seconds> for Watts {
    type Output = Joules;
    fn mul(self, t: Seconds) -> Joules {
        Joules(self.0 * t.0)
    }
}

impl std::ops::Add for Joules {
    type Output = Joules;
    fn add(self, o: Joules) -> Joules {
        Joules(self.0 + o.0)
    }
}

impl std::ops::Add for Watts {
    type Output = Watts;
    fn add(self, o: Watts) -> Watts {
        Watts(self.0 + o.0)
    }
}

impl fmt::Display for Watts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1} W", self.0)
    }
}

impl fmt::Display for Joules {
    /// Scales to kJ / MJ so a table stays readable across an inference job and a week of training.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let j = self.0;
        if j.abs() >= 1e6 {
            write!(f, "{:.2} MJ", j / 1e6)
        } else if j.abs() >= 1e3 {
            write!(f, "{:.1} kJ", j / 1e3)
        } else {
            write!(f, "{j:.0} J")
        }
    }
}

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        if s >= 3600.0 {
            write!(f, "{:.2} h", s / 3600.0)
        } else if s >= 60.0 {
            write!(f, "{:.1} min", s / 60.0)
        } else {
            write!(f, "{s:.1} s")
        }
    }
}

impl fmt::Display for Mhz {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} MHz", self.0)
    }
}

impl fmt::Display for SharePct {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}%", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_rejects_zero_and_over_hundred() {
        assert!(SharePct::new(0).is_none());
        assert!(SharePct::new(101).is_none());
        assert_eq!(SharePct::new(40).map(SharePct::fraction), Some(0.4));
        assert!(serde_json::from_str::<SharePct>("0").is_err());
    }

    #[test]
    fn energy_is_power_times_time() {
        assert_eq!(Watts(250.0) * Seconds(4.0), Joules(1000.0));
        assert_eq!(format!("{}", Joules(1500.0)), "1.5 kJ");
        assert!((Joules(3.6e6).kwh() - 1.0).abs() < 1e-12);
    }
}
