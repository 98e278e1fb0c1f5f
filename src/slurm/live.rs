//! The snapshot thread inside slurmctld: every `[live] snapshot_period_s` it reads the node and
//! job tables through Slurm's client API, turns them into a [`Snapshot`] (the pure builder in
//! `snapshot`), publishes it for `job_submit`, and re-decides the pending jobs heshare placed.
//!
//! Why a thread: `job_submit` runs holding slurmctld's locks, and a client call from inside it
//! waits for a lock its own caller holds (DESIGN fact 11). Every client call therefore goes
//! through [`call`], which counts calls made on a thread that is inside `job_submit` (the count
//! must stay 0, and the thread's status line in slurmctld's log says so).
//!
//! What the thread keeps in memory is a cache: a restarted or re-executed slurmctld starts a new
//! thread that rebuilds it from Slurm. It acts only on the primary controller, and not in
//! `slurmctld -t`.

use super::bindings as b;
use super::request::{
    Live, PendingJob, Site, merge_admin_comment, parse_tres_per_node, read_admin_comment,
};
use super::revisit::Redecisions;
use super::snapshot::{
    Holding, JobGres, NodeInfo, Pending, Snapshot, constraint_types, job_gres, node_gpus,
    stand_in_class,
};
use crate::config::Config;
use crate::policy::{PlaceContext, PlacedJob, SlotPower};
use crate::profile::Book;
use crate::units::SharePct;
use std::cell::Cell;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

type LoadNodeFn = unsafe extern "C" fn(b::time_t, *mut *mut b::node_info_msg_t, u16) -> c_int;
type LoadJobsFn = unsafe extern "C" fn(b::time_t, *mut *mut b::job_info_msg_t, u16) -> c_int;
type FreeNodesFn = unsafe extern "C" fn(*mut b::node_info_msg_t);
type FreeJobsFn = unsafe extern "C" fn(*mut b::job_info_msg_t);
type UpdateJobFn = unsafe extern "C" fn(*mut b::job_desc_msg_t) -> c_int;
type InitDescFn = unsafe extern "C" fn(*mut b::job_desc_msg_t);
type ErrnoFn = unsafe extern "C" fn() -> c_int;
type StrerrorFn = unsafe extern "C" fn(c_int) -> *mut c_char;

unsafe extern "C" {
    fn hs_node_state_unusable() -> u64;
    fn hs_node_state_powered_down() -> u64;
    fn hs_node_state_powering_up() -> u64;
    fn hs_node_state_powering_down() -> u64;
    fn hs_show_all() -> u16;
    fn hs_show_detail() -> u16;
}

/// slurm.h's MEM_PER_CPU flag on a memory request (a plain constant, not a layout).
const MEM_PER_CPU: u64 = 0x8000_0000_0000_0000;

/// Slurm's client API, found in the host process (libslurmfull) with dlsym.
#[derive(Clone, Copy)]
struct Client {
    load_node: LoadNodeFn,
    load_jobs: LoadJobsFn,
    free_nodes: FreeNodesFn,
    free_jobs: FreeJobsFn,
    update_job: UpdateJobFn,
    init_desc: InitDescFn,
    /// `slurm_get_errno`, gone in Slurm 24.11 (which sets plain `errno` instead).
    errno: Option<ErrnoFn>,
    strerror: StrerrorFn,
}

fn lookup(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only reads symbol tables.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

impl Client {
    fn find() -> Option<Client> {
        let f = |n: &CStr| lookup(n);
        let (ln, lj, fnm, fj, uj, id, er, se) = (
            f(c"slurm_load_node")?,
            f(c"slurm_load_jobs")?,
            f(c"slurm_free_node_info_msg")?,
            f(c"slurm_free_job_info_msg")?,
            f(c"slurm_update_job")?,
            f(c"slurm_init_job_desc_msg")?,
            f(c"slurm_get_errno"),
            f(c"slurm_strerror")?,
        );
        // SAFETY: these are Slurm's exported client functions with exactly these C signatures
        // (slurm.h of the headers the bindings come from).
        unsafe {
            Some(Client {
                load_node: std::mem::transmute::<*mut c_void, LoadNodeFn>(ln),
                load_jobs: std::mem::transmute::<*mut c_void, LoadJobsFn>(lj),
                free_nodes: std::mem::transmute::<*mut c_void, FreeNodesFn>(fnm),
                free_jobs: std::mem::transmute::<*mut c_void, FreeJobsFn>(fj),
                update_job: std::mem::transmute::<*mut c_void, UpdateJobFn>(uj),
                init_desc: std::mem::transmute::<*mut c_void, InitDescFn>(id),
                errno: er.map(|e| std::mem::transmute::<*mut c_void, ErrnoFn>(e)),
                strerror: std::mem::transmute::<*mut c_void, StrerrorFn>(se),
            })
        }
    }

    fn last_error(&self) -> String {
        // SAFETY: slurm_get_errno and slurm_strerror take/return plain values; the string is
        // static or thread-local in Slurm, copied at once. Without slurm_get_errno the client API
        // leaves its code in this thread's errno.
        unsafe {
            let e = match self.errno {
                Some(f) => f(),
                None => std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
            };
            let s = (self.strerror)(e);
            if s.is_null() {
                format!("error {e}")
            } else {
                CStr::from_ptr(s).to_string_lossy().into_owned()
            }
        }
    }
}

thread_local! {
    static IN_SUBMIT: Cell<bool> = const { Cell::new(false) };
}

/// Counters the status line reports.
struct Stats {
    snapshots: AtomicU64,
    failures: AtomicU64,
    client_calls: AtomicU64,
    client_calls_in_submit: AtomicU64,
    moved: AtomicU64,
    repriced: AtomicU64,
    last_build_us: AtomicU64,
}

static STATS: Stats = Stats {
    snapshots: AtomicU64::new(0),
    failures: AtomicU64::new(0),
    client_calls: AtomicU64::new(0),
    client_calls_in_submit: AtomicU64::new(0),
    moved: AtomicU64::new(0),
    repriced: AtomicU64::new(0),
    last_build_us: AtomicU64::new(0),
};

/// Runs `f` marked as inside `job_submit` (or `job_modify`): a client call from it is counted.
pub fn in_submit<T>(f: impl FnOnce() -> T) -> T {
    IN_SUBMIT.with(|c| c.set(true));
    let r = f();
    IN_SUBMIT.with(|c| c.set(false));
    r
}

/// Every client call goes through here.
fn call<T>(f: impl FnOnce() -> T) -> T {
    if IN_SUBMIT.with(Cell::get) {
        STATS.client_calls_in_submit.fetch_add(1, Ordering::Relaxed);
    }
    STATS.client_calls.fetch_add(1, Ordering::Relaxed);
    f()
}

/// The newest snapshot, for `job_submit`.
static CURRENT: RwLock<Option<Arc<Snapshot>>> = RwLock::new(None);

pub fn current() -> Option<Arc<Snapshot>> {
    CURRENT.read().ok().and_then(|g| g.clone())
}

static PROFILES: RwLock<Option<Arc<Book>>> = RwLock::new(None);

/// The profile store as last loaded (`[profiles] store`), `None` when there is none, it does not
/// read, or profiles are off: decisions are then made as without profiles.
pub fn profiles() -> Option<Arc<Book>> {
    PROFILES.read().ok().and_then(|g| g.clone())
}

/// Which store file the thread loaded, and its modification time and size then.
#[derive(Debug, Clone, PartialEq, Default)]
struct StoreSeen {
    path: Option<std::path::PathBuf>,
    stamp: Option<(SystemTime, u64)>,
    loaded: bool,
}

/// Reloads the profile store when it changed (another file, time or size), publishing it for
/// `job_submit`. A missing or unreadable store is logged once per change and leaves no
/// profiles: every job is then decided as without them.
fn reload_profiles(cfg: &Config, seen: &mut StoreSeen) {
    let path = &cfg.profiles.store;
    if !cfg.profiles.enabled {
        if seen.loaded || seen.path.is_some() {
            log::info!("heshare: profiles are off ([profiles] enabled = false)");
        }
        *seen = StoreSeen::default();
        if let Ok(mut p) = PROFILES.write() {
            *p = None;
        }
        return;
    }
    let stamp = std::fs::metadata(path)
        .ok()
        .map(|m| (m.modified().unwrap_or(UNIX_EPOCH), m.len()));
    if seen.path.as_deref() == Some(path.as_path()) && seen.stamp == stamp {
        return;
    }
    seen.path = Some(path.clone());
    seen.stamp = stamp;
    let book = match crate::profile::store::load(path) {
        Ok(Some(f)) => {
            log::info!(
                "heshare: profile store {}: {} profiles (updated {:.0} s ago)",
                path.display(),
                f.book.profiles.len(),
                (now_s() - f.updated_s).max(0.0)
            );
            Some(Arc::new(f.book))
        }
        Ok(None) => {
            log::info!(
                "heshare: no profile store at {} yet (`heshare profiles update` makes it); jobs are decided without profiles",
                path.display()
            );
            None
        }
        Err(e) => {
            log::error!("heshare: {e}; jobs are decided without profiles until it reads");
            None
        }
    };
    seen.loaded = book.is_some();
    if let Ok(mut p) = PROFILES.write() {
        *p = book;
    }
}

/// Seconds since the Unix epoch: the snapshot's clock.
pub fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// What the thread asks the plugin for on every cycle: the loaded configuration and site (they
/// change when heshare.toml is edited).
pub type Source = fn() -> Option<(Arc<Config>, Site)>;

struct Control {
    /// Bumped by `stop` and `start`: a thread whose generation is not current exits.
    generation: Mutex<u64>,
    wake: Condvar,
}

static CONTROL: Control = Control {
    generation: Mutex::new(0),
    wake: Condvar::new(),
};
static RUNNING: AtomicBool = AtomicBool::new(false);

/// Starts the snapshot thread (once per load of the plugin).
pub fn start(source: Source) {
    let generation = match CONTROL.generation.lock() {
        Ok(mut g) => {
            *g += 1;
            *g
        }
        Err(_) => return,
    };
    let spawned = std::thread::Builder::new()
        .name("heshare-snap".into())
        .spawn(move || {
            RUNNING.store(true, Ordering::SeqCst);
            // Nothing may unwind out of a thread inside slurmctld.
            let r = std::panic::catch_unwind(|| run(generation, source));
            if r.is_err() {
                log::error!(
                    "snapshot thread stopped after an internal error; decisions use the static view"
                );
            }
            RUNNING.store(false, Ordering::SeqCst);
        });
    if let Err(e) = spawned {
        log::error!("cannot start the snapshot thread ({e}); decisions use the static view");
    }
}

/// Asks the thread to stop and waits a little for it (fini). The library is pinned in memory at
/// init, so a thread still inside a client call when this returns cannot run unmapped code.
pub fn stop() {
    if let Ok(mut g) = CONTROL.generation.lock() {
        *g += 1;
    }
    CONTROL.wake.notify_all();
    let until = Instant::now() + Duration::from_secs(2);
    while RUNNING.load(Ordering::SeqCst) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    if let Ok(mut c) = CURRENT.write() {
        *c = None;
    }
}

/// Sleeps `d` or until stopped; false when this thread's generation is over.
fn pause(generation: u64, d: Duration) -> bool {
    let Ok(g) = CONTROL.generation.lock() else {
        return false;
    };
    let Ok((g, _)) = CONTROL.wake.wait_timeout_while(g, d, |g| *g == generation) else {
        return false;
    };
    *g == generation
}

/// slurmctld's own globals: a backup controller and `slurmctld -t` do nothing here.
fn acting_primary() -> bool {
    let read = |name: &CStr| {
        // SAFETY: both are plain globals of slurmctld (`int`/`bool` slurmctld_primary, `bool`
        // test_config); reading their first byte is enough to tell 0 from non-zero on every
        // little-endian host Slurm runs on, and for either type.
        lookup(name).map(|p| unsafe { *p.cast::<u8>() })
    };
    read(c"slurmctld_primary").is_none_or(|v| v != 0) && read(c"test_config").is_none_or(|v| v == 0)
}

fn run(generation: u64, source: Source) {
    let Some(client) = Client::find() else {
        log::error!("Slurm's client API is not in this process; decisions use the static view");
        return;
    };
    log::info!("heshare: snapshot thread started");
    // Not quiet: a moved job's AdminComment gets the new decision's reason.
    let mut ctx = PlaceContext::default();
    let mut first_failure: Option<Instant> = None;
    let mut logged_failure = false;
    let mut last_status: Option<Instant> = None;
    let mut store_seen = StoreSeen::default();
    // The first read waits a moment: init runs before slurmctld listens.
    let mut wait = Duration::from_secs(1);
    loop {
        if !pause(generation, wait) {
            log::info!("heshare: snapshot thread stopped");
            return;
        }
        let Some((cfg, site)) = source() else {
            wait = Duration::from_secs(5);
            continue;
        };
        wait = Duration::from_secs_f64(cfg.live.snapshot_period_s);
        reload_profiles(&cfg, &mut store_seen);
        if !acting_primary() {
            continue;
        }
        let started = Instant::now();
        match take(&client, &cfg) {
            Ok((snap, pending)) => {
                let snap = Arc::new(snap);
                if let Ok(mut c) = CURRENT.write() {
                    *c = Some(Arc::clone(&snap));
                }
                STATS.snapshots.fetch_add(1, Ordering::Relaxed);
                let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
                STATS.last_build_us.store(us, Ordering::Relaxed);
                if first_failure.take().is_some() && logged_failure {
                    log::info!("heshare: snapshots work again");
                }
                logged_failure = false;
                if cfg.live.reroute_pending {
                    let live = Live {
                        snapshot: Some(&snap),
                        now_s: now_s(),
                        max_age_s: cfg.live.snapshot_max_age_s,
                    };
                    // Copies of one script in the queue are decided once.
                    let mut redecisions = Redecisions::default();
                    for (job_id, job, comment) in &pending {
                        if let Some(r) = redecisions.revisit(&cfg, &site, live, job, &mut ctx) {
                            apply(&client, &cfg, *job_id, job, &r, comment);
                        }
                    }
                }
                if last_status
                    .is_none_or(|t| t.elapsed().as_secs_f64() >= cfg.live.status_log_period_s)
                {
                    log_status();
                    last_status = Some(Instant::now());
                }
            }
            Err(e) => {
                STATS.failures.fetch_add(1, Ordering::Relaxed);
                // Try again soon: the first reads fail until slurmctld listens.
                wait = wait.min(Duration::from_secs(2));
                let since = *first_failure.get_or_insert_with(Instant::now);
                // Reads fail while slurmctld recovers state or before it listens: say so only
                // when it lasts.
                if !logged_failure && since.elapsed() > Duration::from_secs(60) {
                    log::error!(
                        "heshare: cannot read the cluster for a minute ({e}); decisions fall back to the static view once the last snapshot is {} s old",
                        cfg.live.snapshot_max_age_s
                    );
                    logged_failure = true;
                }
            }
        }
    }
}

/// One line about the thread, in slurmctld's log.
pub fn log_status() {
    let age = current().map(|s| (now_s() - s.taken_at_s).max(0.0));
    log::info!(
        "heshare: snapshot thread: {} snapshots (last built in {} us, {}), {} failed reads, {} client calls, {} inside job_submit, {} pending jobs moved, {} re-priced",
        STATS.snapshots.load(Ordering::Relaxed),
        STATS.last_build_us.load(Ordering::Relaxed),
        age.map_or("none yet".to_owned(), |a| format!("{a:.0} s old")),
        STATS.failures.load(Ordering::Relaxed),
        STATS.client_calls.load(Ordering::Relaxed),
        STATS.client_calls_in_submit.load(Ordering::Relaxed),
        STATS.moved.load(Ordering::Relaxed),
        STATS.repriced.load(Ordering::Relaxed),
    );
}

fn c_str(p: *const c_char) -> Option<String> {
    // SAFETY: Slurm's strings are NUL-terminated or null; null is checked first.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// A pending job heshare placed: its id, what it asks, its AdminComment.
type PendingHeshare = (u32, PendingJob, String);

/// Reads both tables and builds the snapshot; also returns the pending jobs heshare placed, in
/// Slurm's priority order, at most `reroute_max_jobs`.
fn take(client: &Client, cfg: &Config) -> Result<(Snapshot, Vec<PendingHeshare>), String> {
    let mut nodes_msg: *mut b::node_info_msg_t = std::ptr::null_mut();
    // SAFETY: slurm_load_node fills the pointer with a message we free below with Slurm's own
    // function; update_time 0 asks for the whole table.
    let rc = call(|| unsafe { (client.load_node)(0, &mut nodes_msg, hs_show_all()) });
    if rc != 0 || nodes_msg.is_null() {
        return Err(format!("slurm_load_node: {}", client.last_error()));
    }
    let now = now_s();
    // SAFETY: a message slurm_load_node returned: record_count entries in node_array.
    let nodes = unsafe { read_nodes(cfg, &*nodes_msg) };
    // SAFETY: freed once, with Slurm's function for it.
    unsafe { (client.free_nodes)(nodes_msg) };
    let mut jobs_msg: *mut b::job_info_msg_t = std::ptr::null_mut();
    // SAFETY: as for the nodes; SHOW_DETAIL fills gres_detail_str.
    let rc =
        call(|| unsafe { (client.load_jobs)(0, &mut jobs_msg, hs_show_detail() | hs_show_all()) });
    if rc != 0 || jobs_msg.is_null() {
        return Err(format!("slurm_load_jobs: {}", client.last_error()));
    }
    let names: Vec<String> = nodes.iter().map(|n| n.0.name.to_string()).collect();
    // SAFETY: a message slurm_load_jobs returned.
    let (holdings, pending, heshare_pending) =
        unsafe { read_jobs(cfg, &*jobs_msg, &names, &nodes, now) };
    // SAFETY: freed once, with Slurm's function for it.
    unsafe { (client.free_jobs)(jobs_msg) };
    // Down, drained and unresponsive nodes take no work: they leave the view, and so do the
    // holdings on them (indices into the full table become indices into the usable one).
    let mut remap = Vec::with_capacity(nodes.len());
    let mut usable: Vec<NodeInfo> = Vec::new();
    for (n, _, ok) in nodes {
        remap.push(ok.then_some(usable.len()));
        if ok {
            usable.push(n);
        }
    }
    let holdings: Vec<Holding> = holdings
        .into_iter()
        .filter_map(|h| {
            let node = remap.get(h.node).copied().flatten()?;
            Some(Holding { node, ..h })
        })
        .collect();
    let snap = Snapshot::build(cfg, now, &usable, &holdings, &pending);
    Ok((snap, heshare_pending))
}

/// Every node (in the table's order, which `node_inx` indexes), with its MPS count per GPU and
/// whether it takes new work (not down, drained or unresponsive).
///
/// # Safety
/// `msg` must be a node message from slurm_load_node.
unsafe fn read_nodes(cfg: &Config, msg: &b::node_info_msg_t) -> Vec<(NodeInfo, Option<u64>, bool)> {
    let mut out = Vec::new();
    if msg.node_array.is_null() {
        return out;
    }
    // SAFETY: constants from the headers.
    let (unusable, down, up, going) = unsafe {
        (
            hs_node_state_unusable(),
            hs_node_state_powered_down(),
            hs_node_state_powering_up(),
            hs_node_state_powering_down(),
        )
    };
    for i in 0..msg.record_count as usize {
        // SAFETY: node_array holds record_count entries.
        let n = unsafe { &*msg.node_array.add(i) };
        let name = c_str(n.name).unwrap_or_default();
        let features: Vec<String> = c_str(n.features)
            .unwrap_or_default()
            .split(',')
            .map(|f| f.trim().to_owned())
            .filter(|f| !f.is_empty())
            .collect();
        let (gpus, mps_per_gpu) = node_gpus(cfg, &c_str(n.gres).unwrap_or_default());
        let base = n.node_state & b::NODE_STATE_BASE;
        let ok = base != b::node_states_NODE_STATE_DOWN
            && base != b::node_states_NODE_STATE_FUTURE
            && u64::from(n.node_state) & unusable == 0;
        out.push((
            NodeInfo {
                name: name.into(),
                features,
                gpus,
                cpus: u32::from(n.cpus),
                memory_mib: n.real_memory,
                power: {
                    let f = u64::from(n.node_state);
                    if f & up != 0 {
                        SlotPower::Booting
                    } else if f & (down | going) != 0 {
                        SlotPower::Down
                    } else {
                        SlotPower::Up
                    }
                },
            },
            mps_per_gpu,
            ok,
        ));
    }
    out
}

/// Node names of a job, from its `node_inx` pairs (start, end, ..., -1) into the node table.
///
/// # Safety
/// `inx` must be null or a -1 terminated array of index pairs as Slurm fills it.
unsafe fn job_nodes(inx: *const i32, names: &[String]) -> Vec<usize> {
    let mut out = Vec::new();
    if inx.is_null() {
        return out;
    }
    let mut k = 0;
    loop {
        // SAFETY: the array is -1 terminated in pairs; at most 2 * node count + 1 entries.
        let (a, e) = unsafe { (*inx.add(k), *inx.add(k + 1)) };
        if a < 0 || e < 0 || k > 2 * names.len() + 2 {
            break;
        }
        let (Ok(a), Ok(e)) = (usize::try_from(a), usize::try_from(e)) else {
            break;
        };
        out.extend((a..=e).filter(|&i| i < names.len()));
        k += 2;
    }
    out
}

/// Running jobs' holdings, pending demand, and the pending jobs heshare placed.
///
/// # Safety
/// `msg` must be a job message from slurm_load_jobs.
unsafe fn read_jobs(
    cfg: &Config,
    msg: &b::job_info_msg_t,
    names: &[String],
    nodes: &[(NodeInfo, Option<u64>, bool)],
    now: f64,
) -> (Vec<Holding>, Vec<Pending>, Vec<PendingHeshare>) {
    let mut holdings = Vec::new();
    let mut pending = Vec::new();
    let mut ours: Vec<(u32, u32, PendingHeshare)> = Vec::new();
    if msg.job_array.is_null() {
        return (holdings, pending, vec![]);
    }
    for i in 0..msg.record_count as usize {
        // SAFETY: job_array holds record_count entries.
        let j = unsafe { &*msg.job_array.add(i) };
        let state = j.job_state & b::JOB_STATE_BASE;
        let comment = c_str(j.admin_comment).unwrap_or_default();
        let decided = read_admin_comment(cfg, &comment);
        let limit_s = (j.time_limit != b::NO_VAL && j.time_limit != b::INFINITE)
            .then(|| f64::from(j.time_limit) * 60.0);
        let tres = c_str(j.tres_per_node);
        let ask = parse_tres_per_node(tres.as_deref()).ok().flatten();
        if state == b::job_states_JOB_RUNNING {
            let class = decided
                .as_ref()
                .and_then(|d| cfg.classes.iter().position(|k| k.name == d.class));
            #[allow(clippy::cast_precision_loss)]
            let elapsed = (now - j.start_time as f64).max(0.0);
            // SAFETY: node_inx is Slurm's -1 terminated index list.
            let on = unsafe { job_nodes(j.node_inx, names) };
            // The type it runs on: the first GPU type of its first node.
            let on_type = on
                .first()
                .and_then(|&n| nodes[n].0.gpus.first().map(|&(_, t)| t));
            let hold = super::snapshot::expected_hold(
                cfg,
                limit_s,
                class,
                decided.as_ref().and_then(|d| d.limit_type),
                on_type,
            );
            let frees = (hold - elapsed).max(60.0);
            for (k, &node) in on.iter().enumerate() {
                if k >= j.gres_detail_cnt as usize || j.gres_detail_str.is_null() {
                    break;
                }
                // SAFETY: gres_detail_str holds gres_detail_cnt strings, one per node in order.
                let detail = c_str(unsafe { *j.gres_detail_str.add(k) }).unwrap_or_default();
                let (_, mps_per_gpu, _) = &nodes[node];
                for g in job_gres(&detail) {
                    let (indices, share) = match g {
                        JobGres::Whole(ix) => (ix, None),
                        JobGres::Mps { index, count } => {
                            let per = mps_per_gpu.unwrap_or(100).max(1);
                            let pct = (count * 100).div_ceil(per).clamp(1, 100);
                            (vec![index], Some(u8::try_from(pct).unwrap_or(100)))
                        }
                    };
                    for index in indices {
                        let placed = PlacedJob {
                            class: class.unwrap_or_else(|| stand_in_class(cfg, share)),
                            share: share.and_then(SharePct::new).unwrap_or(SharePct::FULL),
                            user: j.user_id.to_string().into(),
                            exclusive: share.is_none(),
                        };
                        holdings.push(Holding {
                            node,
                            gpu_index: index,
                            job: placed,
                            frees_in_s: frees,
                            hold_s: hold,
                        });
                    }
                }
            }
        } else if state == b::job_states_JOB_PENDING {
            let Some(ask) = ask else { continue };
            let features = c_str(j.features).unwrap_or_default();
            let by_feature = constraint_types(cfg, &features);
            let mut types = by_feature.clone();
            if types.is_empty() {
                types.extend(
                    ask.gpu_type
                        .as_deref()
                        .and_then(|t| cfg.resolve_gpu_type(t)),
                );
            }
            let per_node = match ask.mps_pct {
                Some(p) => f64::from(p.min(100)) / 100.0,
                None => f64::from(ask.gpus),
            };
            pending.push(Pending {
                types: types.clone(),
                gpus: per_node * f64::from(j.num_nodes.max(1)),
            });
            let waiting = u32::from(j.state_reason);
            let waits_for_room = waiting == b::job_state_reason_WAIT_RESOURCES
                || waiting == b::job_state_reason_WAIT_PRIORITY;
            // Only jobs whose types are features can move (their GRES is untyped); any pending
            // job heshare placed is re-priced.
            let feature_form = ask.gpu_type.is_none() && !by_feature.is_empty();
            let typed = ask
                .gpu_type
                .as_deref()
                .and_then(|t| cfg.resolve_gpu_type(t));
            if let (Some(d), true) = (decided, j.priority != 0) {
                if !(feature_form || typed.is_some()) {
                    continue;
                }
                let now = i64::from(j.site_factor) - i64::from(b::NICE_OFFSET);
                let job = PendingJob {
                    class: d.class.clone(),
                    user: j.user_id.to_string(),
                    gpus: ask.gpus,
                    mps_pct: ask.mps_pct.and_then(|p| u8::try_from(p).ok()),
                    energy_policy: d.policy,
                    time_limit_s: limit_s,
                    cpus: (j.num_cpus > 0 && j.num_nodes <= 1).then_some(j.num_cpus),
                    memory_mib: (j.pn_min_memory > 0 && j.pn_min_memory & MEM_PER_CPU == 0)
                        .then_some(j.pn_min_memory),
                    offered: if feature_form {
                        d.types
                    } else {
                        typed.into_iter().collect()
                    },
                    form: ask.form,
                    movable: feature_form && waits_for_room,
                    asked: d.asked,
                    demand_pct: d.demand_pct,
                    // The factor on the job is heshare's only while it is the one heshare set.
                    site_factor: d.site_factor.filter(|&f| i64::from(f) == now),
                    // Its profile as the store has it now.
                    learned: d.profile.as_ref().and_then(|k| {
                        let book = profiles()?;
                        crate::profile::lookup(
                            cfg,
                            &book,
                            std::slice::from_ref(k),
                            crate::profile::Asked {
                                label: cfg.class(&d.class),
                                share: ask.mps_pct.is_some(),
                            },
                            now_s(),
                            cfg.profiles.derive_settings(),
                        )
                    }),
                };
                ours.push((j.priority, j.job_id, (j.job_id, job, comment)));
            }
        }
    }
    // Highest priority first, then oldest id: Slurm's own order.
    ours.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let max = usize::try_from(cfg.live.reroute_max_jobs).unwrap_or(usize::MAX);
    let ours = ours.into_iter().take(max).map(|(_, _, p)| p).collect();
    (holdings, pending, ours)
}

/// Applies what re-deciding a pending job found, in one update: its features, preference and
/// AdminComment when its offer moved (the GRES stays: on 22.05 changing a pending job's GPU type
/// leaves the old type required beside the new one, and the job never runs), its site factor
/// when its price changed. Slurm uses a new site factor from its next priority calculation
/// (`PriorityCalcPeriod`).
fn apply(
    client: &Client,
    cfg: &Config,
    job_id: u32,
    job: &PendingJob,
    r: &super::request::Revisit,
    comment: &str,
) {
    let names = |v: &[usize]| {
        v.iter()
            .map(|&t| cfg.gpu_types[t].name.as_str())
            .collect::<Vec<_>>()
            .join("|")
    };
    let w = &r.rewrite;
    let comment = merge_admin_comment(Some(comment), &w.admin_comment);
    let features = CString::new(w.features.clone().unwrap_or_default()).unwrap_or_default();
    let prefer = CString::new(w.prefer.clone().unwrap_or_default()).unwrap_or_default();
    let comment = CString::new(comment).unwrap_or_default();
    let site =
        u32::try_from(i64::from(b::NICE_OFFSET) + i64::from(w.site_factor)).unwrap_or(b::NO_VAL);
    // SAFETY: a zeroed job description initialised by Slurm's own function, then pointed at
    // strings that outlive the call; slurm_update_job only reads it. An empty prefer clears it.
    let rc = call(|| unsafe {
        let mut d: b::job_desc_msg_t = std::mem::zeroed();
        (client.init_desc)(&mut d);
        #[cfg(not(slurm_desc_step_id))]
        {
            d.job_id = job_id;
        }
        #[cfg(slurm_desc_step_id)]
        {
            d.step_id.job_id = job_id;
        }
        if r.moved {
            d.features = features.as_ptr().cast_mut();
            d.prefer = prefer.as_ptr().cast_mut();
        }
        if r.repriced {
            d.site_factor = site;
        }
        d.admin_comment = comment.as_ptr().cast_mut();
        (client.update_job)(&mut d)
    });
    let what = match (r.moved, r.repriced) {
        (true, true) => format!(
            "pending on {}, offered {} now, site factor {:+} now",
            names(&job.offered),
            names(&w.offered),
            w.site_factor
        ),
        (true, false) => format!(
            "pending on {}, offered {} now",
            names(&job.offered),
            names(&w.offered)
        ),
        _ => format!(
            "site factor {:+} now (was {:+})",
            w.site_factor,
            job.site_factor.unwrap_or(0)
        ),
    };
    if rc == 0 {
        if r.moved {
            STATS.moved.fetch_add(1, Ordering::Relaxed);
        }
        if r.repriced {
            STATS.repriced.fetch_add(1, Ordering::Relaxed);
        }
        log::info!("heshare: job {job_id}: {what}");
    } else {
        log::error!(
            "heshare: job {job_id}: updating it ({what}) failed: {}",
            client.last_error()
        );
    }
}
