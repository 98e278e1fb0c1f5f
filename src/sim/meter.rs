//! The facility meter: what a site's electricity meter counts for the simulated cluster, and the
//! facility model it counts with. One room for all of it, so the engine only says what changed
//! (a GPU's draw, a node's allocated cores, a node's power state) and never accounts energy.
//!
//! **Per node**, at the wall (direct-current power over the power supplies' efficiency):
//! * awake (up, booting, powering down): the host's idle power, the allocated cores' CPU power,
//!   and every GPU's draw: a busy GPU what the world says (a context held keeps it above bare
//!   idle), an idle GPU its idle power, charged whether or not another GPU of the node is busy;
//! * suspended (Slurm's power saving): the node's off draw (BMC and standby).
//!
//! **The host** (everything but the GPUs), sourced by default ([`HostSpec::Sourced`]):
//! * idle: the median "active idle" of 2-socket Intel Xeon servers in the SPECpower_ssj2008
//!   results published 2023-2025 (184.5 W, n = 96; spec.org results as collected in
//!   github.com/cloud-carbon-footprint/ccf-coefficients `data/SPECpower-2026-03-09.csv`), per
//!   socket 92.25 W, the node's sockets counted as PWR (CCGrid'25) counts them: its vCPUs over
//!   two per core over the cores per package of the node model's CPU;
//! * busy: each allocated core adds its CPU's (full - idle) / cores per package, PWR's CPU table
//!   (`data/pwr-ccgrid25-power-model`), linear in allocated cores;
//! * power supplies: 92% efficient, between the 20% (90%) and 50% (94%) load points of 80 PLUS
//!   Platinum for 230 V internal redundant supplies, where an idle or part-busy GPU node runs
//!   them;
//! * off: 10 W per suspended node, an assumption (BMC and standby power; nothing measured here).
//!
//! [`HostSpec::Flat`] charges a flat figure per awake node instead (and nothing else of the
//! host, no supply loss): the sensitivity the simulator's README reports at 0-300 W.
//!
//! **Power saving as Slurm does it** ([`PowerSaving`], `src/slurmctld/power_save.c` 22.05 and
//! 24.11): a node idle for `SuspendTime` is powered down, which takes `SuspendTimeout` (it is
//! awake and unusable meanwhile); a job Slurm puts on a powered-down node waits for it to boot
//! (`resume_s`, the site's boot time, bounded by `ResumeTimeout`). The engine moves nodes
//! through these states; the meter integrates them, and closes any horizon after the run with
//! the same rules.

use crate::units::Watts;

/// Slurm's power states of a node, as far as energy and scheduling are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PowerState {
    Up,
    /// Booting after a resume; its jobs wait (Slurm's POWERING_UP, `#`).
    Booting,
    /// Shutting down after `SuspendTime` idle (POWERING_DOWN, `%`): awake, not usable.
    PoweringDown,
    /// Powered down (POWERED_DOWN, `~`): draws its off power.
    Off,
}

/// SPECpower_ssj2008, 2-socket Xeon servers published 2023-2025: median active idle 184.5 W.
pub const SPEC_IDLE_PER_SOCKET_W: f64 = 184.5 / 2.0;
/// 80 PLUS Platinum, 230 V internal redundant, between its 20% and 50% load points.
pub const PSU_EFFICIENCY: f64 = 0.92;
/// A suspended node's draw: an assumption (see the module doc).
pub const OFF_W: f64 = 10.0;

/// PWR's CPU table (CCGrid'25, `const.go`): (catalog GPU type, idle W, full W, cores per
/// package) for the CPU of the node models it maps (notebook "Add CPU models to YAML nodes":
/// T4 nodes Xeon 8163, P100 Xeon E5-2682 v4, V100 Xeon 6326, A10 and A100 Xeon 8369B); other
/// types get PWR's default (the 2682 profile).
const PWR_CPU: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/pwr-ccgrid25-power-model/pwr_power_model_params.csv"
));

/// (idle W, full W, cores per package) of the CPU PWR gives nodes of a catalog GPU type.
pub fn pwr_cpu(gpu_type: &str) -> (f64, f64, f64) {
    let model = match gpu_type.to_ascii_lowercase().as_str() {
        "t4" => "Intel-Xeon-8163",
        "p100" => "Intel-Xeon-ES-2682-V4",
        "v100m16" | "v100m32" => "Intel-Xeon-6326",
        "a10" | "a100" => "Intel-Xeon-8369B",
        _ => "(unspecified)",
    };
    PWR_CPU
        .lines()
        .filter(|l| l.starts_with("cpu,"))
        .find_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f.get(1) == Some(&model)).then(|| {
                Some((
                    f.get(2)?.parse().ok()?,
                    f.get(3)?.parse().ok()?,
                    f.get(4)?.parse().ok()?,
                ))
            })?
        })
        .unwrap_or((15.0, 120.0, 16.0))
}

/// PWR's GPU row for a catalog GPU type (idle W, full W), where its table has the model (T4,
/// A10, P100, V100M16, V100M32, A100).
pub fn pwr_gpu(gpu_type: &str) -> Option<(f64, f64)> {
    PWR_CPU
        .lines()
        .filter(|l| l.starts_with("gpu,"))
        .find_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            f.get(1)
                .is_some_and(|m| m.eq_ignore_ascii_case(gpu_type))
                .then(|| Some((f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?)))?
        })
}

/// How the host of each node is charged.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum HostSpec {
    /// SPECpower idle per socket, PWR's CPU busy power, 92% supplies, 10 W off.
    Sourced,
    /// This many watts per awake node, nothing else (no CPU term, no supply loss, nothing off).
    Flat(Watts),
}

/// One node's host.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeHost {
    /// Direct-current power of everything but the GPUs when no core is allocated.
    pub idle_w: f64,
    /// Added per allocated vCPU (half a physical core).
    pub vcpu_w: f64,
    /// At the wall while suspended.
    pub off_w: f64,
}

impl NodeHost {
    /// The host of a node with `vcpus` vCPUs of GPU type `gpu_type`, charged as `spec` says.
    pub fn new(spec: HostSpec, gpu_type: &str, vcpus: f64) -> NodeHost {
        match spec {
            HostSpec::Flat(w) => NodeHost {
                idle_w: w.0,
                vcpu_w: 0.0,
                off_w: 0.0,
            },
            HostSpec::Sourced => {
                let (idle, full, cores) = pwr_cpu(gpu_type);
                let physical = (vcpus / 2.0).ceil();
                let sockets = (physical / cores.max(1.0)).ceil().max(1.0);
                NodeHost {
                    idle_w: SPEC_IDLE_PER_SOCKET_W * sockets,
                    vcpu_w: (full - idle).max(0.0) / cores.max(1.0) / 2.0,
                    off_w: OFF_W,
                }
            }
        }
    }
}

/// Slurm's power saving, as slurm.conf sets it (and how long the nodes really take to boot).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct PowerSaving {
    /// `SuspendTime`: idle this long, a node is powered down. `None`: power saving off (Slurm's
    /// default, `SuspendTime=-1`).
    pub suspend_time_s: Option<f64>,
    /// `SuspendTimeout` (default 30 s): how long powering down takes.
    pub suspend_timeout_s: f64,
    /// How long a powered-down node takes to boot and rejoin (the site's hardware: bare-metal GPU
    /// servers POST for minutes). Must stay within `ResumeTimeout`.
    pub resume_s: f64,
    /// `ResumeTimeout` (default 60 s): Slurm marks a node DOWN that takes longer.
    pub resume_timeout_s: f64,
}

impl Default for PowerSaving {
    fn default() -> Self {
        PowerSaving {
            suspend_time_s: None,
            suspend_timeout_s: 30.0,
            resume_s: 300.0,
            resume_timeout_s: 600.0,
        }
    }
}

impl PowerSaving {
    /// Reads `SuspendTime`, `SuspendTimeout` and `ResumeTimeout` from slurm.conf text (keys are
    /// case-insensitive; a per-partition `SuspendTime` is not modelled). Other fields keep
    /// `self`'s values. Errors name the line.
    pub fn from_slurm_conf(mut self, text: &str, file: &str) -> Result<PowerSaving, String> {
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            for word in line.split_whitespace() {
                let Some((k, v)) = word.split_once('=') else {
                    continue;
                };
                let secs = || -> Result<f64, String> {
                    let x: f64 = v.parse().map_err(|_| {
                        format!("{file}:{}: {k}={v}: not a number of seconds", n + 1)
                    })?;
                    Ok(x)
                };
                match k.to_ascii_lowercase().as_str() {
                    "suspendtime" => {
                        let x = if v.eq_ignore_ascii_case("never")
                            || v.eq_ignore_ascii_case("infinite")
                        {
                            -1.0
                        } else {
                            secs()?
                        };
                        self.suspend_time_s = (x >= 0.0).then_some(x);
                    }
                    "suspendtimeout" => self.suspend_timeout_s = secs()?.max(0.0),
                    "resumetimeout" => self.resume_timeout_s = secs()?.max(0.0),
                    _ => {}
                }
            }
        }
        Ok(self)
    }
}

/// The facility: every node's host, the supplies, and the power saving rules.
#[derive(Debug, Clone, PartialEq)]
pub struct Facility {
    pub hosts: Vec<NodeHost>,
    pub psu_efficiency: f64,
    pub saving: PowerSaving,
}

impl Facility {
    /// The facility of `nodes` ((GPU type name, vCPUs) each) under `spec` and `saving`.
    pub fn new(nodes: &[(&str, f64)], spec: HostSpec, saving: PowerSaving) -> Facility {
        Facility {
            hosts: nodes
                .iter()
                .map(|&(t, v)| NodeHost::new(spec, t, v))
                .collect(),
            psu_efficiency: match spec {
                HostSpec::Sourced => PSU_EFFICIENCY,
                HostSpec::Flat(_) => 1.0,
            },
            saving,
        }
    }
}

/// Energy totals of one run, closed at a horizon.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct EnergyTotals {
    /// What the facility's meter reads: every node at the wall, awake or suspended.
    pub facility_j: f64,
    /// The same with power saving never suspending a node (same schedule, idle nodes on).
    pub always_on_j: f64,
    /// What the GPUs drew (busy and idle, on awake nodes), before supply losses.
    pub gpu_j: f64,
    /// The part of `gpu_j` drawn by GPUs with a running job.
    pub busy_gpu_j: f64,
    /// Host power of awake nodes (idle and allocated cores), before supply losses.
    pub host_j: f64,
    /// Suspended nodes' draw.
    pub off_j: f64,
}

impl EnergyTotals {
    fn add(&mut self, o: &EnergyTotals) {
        self.facility_j += o.facility_j;
        self.always_on_j += o.always_on_j;
        self.gpu_j += o.gpu_j;
        self.busy_gpu_j += o.busy_gpu_j;
        self.host_j += o.host_j;
        self.off_j += o.off_j;
    }
}

#[derive(Debug, Clone, PartialEq)]
struct NodeMeter {
    state: PowerState,
    last_s: f64,
    /// vCPUs allocated to running jobs.
    vcpus: f64,
    /// Since when no job has been allocated here (`None` while one is).
    idle_since: Option<f64>,
    /// When a powering-down node is off.
    off_at: Option<f64>,
    totals: EnergyTotals,
}

/// Integrates the facility's power over a run (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct EnergyMeter {
    facility: Facility,
    node_of_gpu: Vec<usize>,
    gpus_of_node: Vec<Vec<usize>>,
    gpu_idle_w: Vec<f64>,
    /// Each GPU's draw now, while its node is up (its idle power when no job runs).
    gpu_w: Vec<f64>,
    gpu_running: Vec<bool>,
    /// Per GPU, the running jobs' attributed power.
    job_w: Vec<Vec<(usize, f64)>>,
    job_j: Vec<f64>,
    nodes: Vec<NodeMeter>,
    resumes: usize,
}

impl EnergyMeter {
    /// A meter for nodes whose GPUs are `gpus_of_node` (global GPU indices), each GPU idling at
    /// `gpu_idle_w`, for `jobs` jobs; every node up and idle at time 0.
    pub fn new(
        facility: Facility,
        gpus_of_node: Vec<Vec<usize>>,
        gpu_idle_w: Vec<f64>,
        jobs: usize,
    ) -> EnergyMeter {
        let mut node_of_gpu = vec![0; gpu_idle_w.len()];
        for (n, gs) in gpus_of_node.iter().enumerate() {
            for &g in gs {
                node_of_gpu[g] = n;
            }
        }
        let nodes = (0..gpus_of_node.len())
            .map(|_| NodeMeter {
                state: PowerState::Up,
                last_s: 0.0,
                vcpus: 0.0,
                idle_since: Some(0.0),
                off_at: None,
                totals: EnergyTotals::default(),
            })
            .collect();
        EnergyMeter {
            facility,
            node_of_gpu,
            gpu_w: gpu_idle_w.clone(),
            gpu_running: vec![false; gpu_idle_w.len()],
            job_w: vec![Vec::new(); gpu_idle_w.len()],
            gpu_idle_w,
            gpus_of_node,
            job_j: vec![0.0; jobs],
            nodes,
            resumes: 0,
        }
    }

    /// One more job to account for (a rerun submitted during the run), with the next index.
    pub fn add_job(&mut self) {
        self.job_j.push(0.0);
    }

    pub fn facility(&self) -> &Facility {
        &self.facility
    }

    /// Direct-current power of node `n` in `state`: (host, GPUs, busy GPUs).
    fn dc(&self, n: usize, state: PowerState, vcpus: f64) -> (f64, f64, f64) {
        let host = &self.facility.hosts[n];
        let gs = &self.gpus_of_node[n];
        match state {
            PowerState::Up => (
                host.idle_w + host.vcpu_w * vcpus,
                gs.iter().map(|&g| self.gpu_w[g]).sum(),
                gs.iter()
                    .filter(|&&g| self.gpu_running[g])
                    .map(|&g| self.gpu_w[g])
                    .sum(),
            ),
            PowerState::Booting | PowerState::PoweringDown => (
                host.idle_w,
                gs.iter().map(|&g| self.gpu_idle_w[g]).sum(),
                0.0,
            ),
            PowerState::Off => (0.0, 0.0, 0.0),
        }
    }

    /// Brings node `n`'s energy up to `t` at its present power.
    fn flush(&mut self, n: usize, t: f64) {
        let dt = (t - self.nodes[n].last_s).max(0.0);
        if dt <= 0.0 {
            self.nodes[n].last_s = self.nodes[n].last_s.max(t);
            return;
        }
        let m = &self.nodes[n];
        let e = self.interval(n, m.state, m.vcpus, dt);
        if m.state == PowerState::Up {
            for &g in &self.gpus_of_node[n] {
                for &(j, w) in &self.job_w[g] {
                    self.job_j[j] += w * dt;
                }
            }
        }
        let m = &mut self.nodes[n];
        m.totals.add(&e);
        m.last_s = t;
    }

    /// The energy of `dt` seconds of node `n` in `state`.
    fn interval(&self, n: usize, state: PowerState, vcpus: f64, dt: f64) -> EnergyTotals {
        let psu = self.facility.psu_efficiency.max(1e-9);
        let (host, gpu, busy) = self.dc(n, state, vcpus);
        let off = if state == PowerState::Off {
            self.facility.hosts[n].off_w
        } else {
            0.0
        };
        let (ih, ig, _) = self.dc(n, PowerState::Booting, 0.0);
        let always_on = if state == PowerState::Up {
            host + gpu
        } else {
            ih + ig
        };
        EnergyTotals {
            facility_j: ((host + gpu) / psu + off) * dt,
            always_on_j: always_on / psu * dt,
            gpu_j: gpu * dt,
            busy_gpu_j: busy * dt,
            host_j: host * dt,
            off_j: off * dt,
        }
    }

    /// GPU `g` draws `watts` from `t` on, `jobs` (job, attributed watts) running on it (empty:
    /// idle, drawing its idle power whatever `watts` says).
    pub fn gpu(&mut self, t: f64, g: usize, watts: f64, jobs: &[(usize, f64)]) {
        let n = self.node_of_gpu[g];
        self.flush(n, t);
        self.gpu_running[g] = !jobs.is_empty();
        self.gpu_w[g] = if jobs.is_empty() {
            self.gpu_idle_w[g]
        } else {
            watts
        };
        self.job_w[g] = jobs.to_vec();
    }

    /// Node `n` has `vcpus` allocated to running jobs from `t` on.
    pub fn vcpus(&mut self, t: f64, n: usize, vcpus: f64) {
        self.flush(n, t);
        self.nodes[n].vcpus = vcpus.max(0.0);
    }

    /// Node `n` has a job allocated (`true`) or none (`false`) from `t` on: the start of an idle
    /// stretch, for closing the run.
    pub fn allocated(&mut self, t: f64, n: usize, any: bool) {
        self.nodes[n].idle_since = if any {
            None
        } else {
            self.nodes[n].idle_since.or(Some(t))
        };
    }

    /// Node `n` enters `state` at `t`.
    pub fn state(&mut self, t: f64, n: usize, state: PowerState) {
        self.flush(n, t);
        let m = &mut self.nodes[n];
        if state == PowerState::Booting && m.state == PowerState::Off {
            self.resumes += 1;
        }
        m.off_at = (state == PowerState::PoweringDown)
            .then_some(t + self.facility.saving.suspend_timeout_s);
        m.state = state;
    }

    pub fn state_of(&self, n: usize) -> PowerState {
        self.nodes[n].state
    }

    /// Nodes resumed from power saving so far.
    pub fn resumes(&self) -> usize {
        self.resumes
    }

    /// Per job, the GPU energy attributed to it while it ran.
    pub fn job_energy_j(&self) -> &[f64] {
        &self.job_j
    }

    /// Totals until `horizon`, the run having ended at `end` (every job gone): from `end` on
    /// each node idles, and with power saving is suspended `SuspendTime` after its last job left,
    /// as the engine would have done.
    pub fn close(&self, end: f64, horizon: f64) -> EnergyTotals {
        let mut total = EnergyTotals::default();
        let saving = self.facility.saving;
        for (n, m) in self.nodes.iter().enumerate() {
            total.add(&m.totals);
            // Piecewise from the node's last reading: up and idle until its suspend, powering
            // down for the timeout, then off (each segment ends at the time given).
            let segments: Vec<(PowerState, f64)> = match (m.state, saving.suspend_time_s) {
                (PowerState::Up, Some(s)) => {
                    let down = m.idle_since.unwrap_or(end) + s;
                    vec![
                        (PowerState::Up, down),
                        (PowerState::PoweringDown, down + saving.suspend_timeout_s),
                        (PowerState::Off, f64::INFINITY),
                    ]
                }
                (PowerState::PoweringDown, _) => vec![
                    (PowerState::PoweringDown, m.off_at.unwrap_or(m.last_s)),
                    (PowerState::Off, f64::INFINITY),
                ],
                (s, _) => vec![(s, f64::INFINITY)],
            };
            let mut t = m.last_s;
            for (state, until) in segments {
                let stop = until.min(horizon);
                if stop > t {
                    // Idle from here on: an up node draws what a booting one does (host idle,
                    // every GPU at its idle power), and counts as on.
                    let as_if = if state == PowerState::Up {
                        PowerState::Booting
                    } else {
                        state
                    };
                    total.add(&self.interval(n, as_if, 0.0, stop - t));
                    t = stop;
                }
            }
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facility(spec: HostSpec, saving: PowerSaving) -> Facility {
        Facility::new(&[("a10", 96.0), ("t4", 104.0)], spec, saving)
    }

    #[test]
    fn hosts_follow_pwr_sockets_and_spec_idle() {
        // 96 vCPUs = 48 cores of a 32-core 8369B: two sockets; 104 = 52 cores of a 24-core
        // 8163: three (PWR's rounding).
        let f = facility(HostSpec::Sourced, PowerSaving::default());
        assert!((f.hosts[0].idle_w - 184.5).abs() < 1e-9);
        assert!((f.hosts[1].idle_w - 276.75).abs() < 1e-9);
        assert!((f.hosts[0].vcpu_w - 250.0 / 32.0 / 2.0).abs() < 1e-9);
        let flat = facility(HostSpec::Flat(Watts(200.0)), PowerSaving::default());
        assert_eq!(flat.hosts[1].idle_w, 200.0);
        assert_eq!(flat.psu_efficiency, 1.0);
    }

    /// A hand-computed scenario: node 0 has two GPUs (idle 30 W each), node 1 one (idle 10 W).
    /// From 0 to 100 s GPU 0 runs a job at 150 W with 8 vCPUs allocated; GPU 1 idles beside it
    /// (and is charged); node 1 idles throughout. Power saving suspends node 1 at 60 s (idle
    /// since 0), powering down for 30 s, then off.
    #[test]
    fn the_meter_charges_idle_gpus_on_awake_nodes_hosts_and_suspended_nodes() {
        let saving = PowerSaving {
            suspend_time_s: Some(60.0),
            suspend_timeout_s: 30.0,
            ..PowerSaving::default()
        };
        let f = facility(HostSpec::Sourced, saving);
        let (h0, h1, v) = (f.hosts[0], f.hosts[1], f.hosts[0].vcpu_w);
        let mut m = EnergyMeter::new(f, vec![vec![0, 1], vec![2]], vec![30.0, 30.0, 10.0], 1);
        m.allocated(0.0, 0, true);
        m.gpu(0.0, 0, 150.0, &[(0, 150.0)]);
        m.vcpus(0.0, 0, 8.0);
        m.state(60.0, 1, PowerState::PoweringDown);
        m.state(90.0, 1, PowerState::Off);
        m.gpu(100.0, 0, 0.0, &[]);
        m.vcpus(100.0, 0, 0.0);
        m.allocated(100.0, 0, false);
        let e = m.close(100.0, 100.0);
        let node0 = (h0.idle_w + 8.0 * v + 150.0 + 30.0) * 100.0;
        let node1_awake = (h1.idle_w + 10.0) * 90.0;
        let off = h1.off_w * 10.0;
        assert!(
            (e.gpu_j - (180.0 * 100.0 + 10.0 * 90.0)).abs() < 1e-6,
            "{e:?}"
        );
        assert!((e.busy_gpu_j - 150.0 * 100.0).abs() < 1e-6, "{e:?}");
        assert!(
            (e.facility_j - ((node0 + node1_awake) / PSU_EFFICIENCY + off)).abs() < 1e-6,
            "{e:?}"
        );
        assert!(
            (e.always_on_j - (node0 + (h1.idle_w + 10.0) * 100.0) / PSU_EFFICIENCY).abs() < 1e-6,
            "{e:?}"
        );
        assert!((m.job_energy_j()[0] - 150.0 * 100.0).abs() < 1e-9);
        // Closed later, node 0 idles until 160 s, powers down until 190 s, then is off; node 1
        // stays off.
        let later = m.close(100.0, 300.0);
        let extra0 = (h0.idle_w + 60.0) * 90.0 / PSU_EFFICIENCY + h0.off_w * 110.0;
        let extra1 = h1.off_w * 200.0;
        assert!(
            (later.facility_j - e.facility_j - extra0 - extra1).abs() < 1e-6,
            "{later:?}"
        );
        assert!(later.always_on_j > later.facility_j);
    }

    #[test]
    fn power_saving_is_read_from_slurm_conf() {
        let conf = "SuspendTime=600 # idle ten minutes\nsuspendtimeout=45 ResumeTimeout=900\n";
        let s = PowerSaving::default()
            .from_slurm_conf(conf, "slurm.conf")
            .expect("valid");
        assert_eq!(s.suspend_time_s, Some(600.0));
        assert_eq!(s.suspend_timeout_s, 45.0);
        assert_eq!(s.resume_timeout_s, 900.0);
        let off = PowerSaving::default()
            .from_slurm_conf("SuspendTime=-1\n", "s")
            .expect("valid");
        assert_eq!(off.suspend_time_s, None);
        let err = PowerSaving::default()
            .from_slurm_conf("\nSuspendTime=soon\n", "slurm.conf")
            .expect_err("bad");
        assert!(err.contains("slurm.conf:2: SuspendTime=soon"), "{err}");
    }
}
