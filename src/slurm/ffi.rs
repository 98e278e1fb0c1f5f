//! The C ABI slurmctld loads as `job_submit/heshare` (DESIGN.md section 1, facts 1-3):
//! `plugin_name`, `plugin_type`, `plugin_version`, `init`, `fini`, `job_submit`, `job_modify`.
//!
//! Rules this file keeps: every string handed to Slurm comes from Slurm's own allocator
//! (`slurm_xstrdup`, `slurm_xrecalloc`, freed with `slurm_xfree`), looked up with `dlsym` at
//! `init` so the library has no link-time Slurm symbol; nothing unwinds into Slurm (every entry
//! point runs under `catch_unwind`, a panic becomes a log line and the job passes unchanged);
//! logging goes through the `log` facade, whose backend here is `slurm_info`/`slurm_error` with
//! a constant "%s" format. `job_submit` never calls Slurm's client API (it runs under
//! slurmctld's locks): the live view comes from the snapshot thread (`live`).

use super::contract::steps_ask_gres;
use super::live;
use super::request::{
    AskError, GpuAsk, Live, Site, Submission, Verdict, decide_with, merge_admin_comment,
    parse_gpu_request, parse_options,
};
use crate::config::{Config, check_slurm_gres, slurm_feature_types, slurm_gpu_types};
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

include!(concat!(env!("OUT_DIR"), "/slurm_version.rs"));

/// The plugin's name, a C char array as the plugin loader expects.
#[unsafe(no_mangle)]
pub static plugin_name: [u8; 8] = *b"heshare\0";
#[unsafe(no_mangle)]
pub static plugin_type: [u8; 19] = *b"job_submit/heshare\0";
#[unsafe(no_mangle)]
pub static plugin_version: u32 = SLURM_VERSION_NUMBER;

const SLURM_SUCCESS: c_int = 0;
const SLURM_ERROR: c_int = -1;

/// The job_desc_msg_t fields the shim copies out (see c_shim/heshare_shim.c).
#[repr(C)]
struct JobView {
    tres_per_node: *const c_char,
    tres_per_job: *const c_char,
    admin_comment: *const c_char,
    features: *const c_char,
    prefer: *const c_char,
    spank_job_env: *mut *mut c_char,
    spank_job_env_size: u32,
    nice: u32,
    user_id: u32,
    time_limit: u32,
    min_cpus: u32,
    pn_min_memory: u64,
    batch: c_int,
    name: *const c_char,
    script: *const c_char,
    account: *const c_char,
    argv: *mut *mut c_char,
    argc: u32,
    min_nodes: u32,
    max_nodes: u32,
}

unsafe extern "C" {
    fn hs_job_tres_per_node(desc: *mut c_void) -> *mut *mut c_char;
    fn hs_job_tres_per_job(desc: *mut c_void) -> *mut *mut c_char;
    fn hs_job_admin_comment(desc: *mut c_void) -> *mut *mut c_char;
    fn hs_job_features(desc: *mut c_void) -> *mut *mut c_char;
    fn hs_job_prefer(desc: *mut c_void) -> *mut *mut c_char;
    fn hs_job_spank_env(desc: *mut c_void) -> *mut *mut *mut c_char;
    fn hs_job_spank_env_size(desc: *mut c_void) -> *mut u32;
    // heshare leaves nice to the user; the tests check it does.
    #[cfg(test)]
    fn hs_job_nice(desc: *mut c_void) -> *mut u32;
    fn hs_job_site_factor(desc: *mut c_void) -> *mut u32;
    fn hs_nice_offset() -> u32;
    fn hs_no_val() -> u32;
    fn hs_infinite() -> u32;
    fn hs_no_val64() -> u64;
    fn hs_mem_per_cpu() -> u64;
    fn hs_eslurm_invalid_gres() -> c_int;
}
type LogFn = unsafe extern "C" fn(*const c_char, ...);
type XstrdupFn = unsafe extern "C" fn(*const c_char) -> *mut c_char;
type XfreeFn = unsafe extern "C" fn(*mut *mut c_void);
type XrecallocFn = unsafe extern "C" fn(
    *mut *mut c_void,
    usize,
    usize,
    bool,
    bool,
    *const c_char,
    c_int,
    *const c_char,
) -> *mut c_void;

/// Slurm's functions, found in the host process at init.
#[derive(Clone, Copy)]
struct Host {
    info: LogFn,
    error: LogFn,
    xstrdup: XstrdupFn,
    xfree: XfreeFn,
    xrecalloc: XrecallocFn,
}

fn lookup(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only reads the process's symbol
    // tables; a missing symbol is a null pointer, handled by the caller.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

impl Host {
    fn find() -> Option<Host> {
        let info = lookup(c"slurm_info")?;
        let error = lookup(c"slurm_error")?;
        let xstrdup = lookup(c"slurm_xstrdup")?;
        let xfree = lookup(c"slurm_xfree")?;
        let xrecalloc = lookup(c"slurm_xrecalloc")?;
        // SAFETY: these are the addresses of Slurm's exported functions with exactly these C
        // signatures (slurm/src/common/log.h, xmalloc.h, xstring.h of 22.05, DESIGN fact 1).
        unsafe {
            Some(Host {
                info: std::mem::transmute::<*mut c_void, LogFn>(info),
                error: std::mem::transmute::<*mut c_void, LogFn>(error),
                xstrdup: std::mem::transmute::<*mut c_void, XstrdupFn>(xstrdup),
                xfree: std::mem::transmute::<*mut c_void, XfreeFn>(xfree),
                xrecalloc: std::mem::transmute::<*mut c_void, XrecallocFn>(xrecalloc),
            })
        }
    }

    fn write(&self, error: bool, msg: &str) {
        let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
        let f = if error { self.error } else { self.info };
        // SAFETY: a constant "%s" format and one NUL-terminated string argument, as printf wants.
        unsafe { f(c"%s".as_ptr(), c.as_ptr()) }
    }

    /// A copy of `s` in Slurm's allocator, or null.
    fn strdup(&self, s: &str) -> *mut c_char {
        let c = CString::new(s.replace('\0', " ")).unwrap_or_default();
        // SAFETY: slurm_xstrdup copies a NUL-terminated string into xmalloc'd memory.
        unsafe { (self.xstrdup)(c.as_ptr()) }
    }

    /// Replaces the string at `field` with a Slurm-allocated copy of `s`, freeing the old one.
    ///
    /// # Safety
    /// `field` must point to a `char *` field of a live job description owned by Slurm.
    unsafe fn replace(&self, field: *mut *mut c_char, s: &str) {
        let new = self.strdup(s);
        // SAFETY: the caller guarantees `field` is valid; the old value was allocated by Slurm
        // (or is null, which slurm_xfree accepts) and is freed once, after the swap.
        unsafe {
            let mut old = std::ptr::replace(field, new).cast::<c_void>();
            (self.xfree)(&mut old);
        }
    }

    /// Removes every `HESHARE_*` entry from the job's spank_job_env, freeing each: those are
    /// heshare's to write (the Prolog sees them as `SPANK_HESHARE_*` and trusts them), and any
    /// client of Slurm's API can put entries there. The user's own options
    /// (`_SLURM_SPANK_OPTION_heshare_*`) stay. Returns how many were removed.
    ///
    /// # Safety
    /// `desc` must be a live job description owned by Slurm.
    unsafe fn scrub_env(&self, desc: *mut c_void) -> usize {
        // SAFETY: the shim returns the addresses of the array and its size in `desc`; the array
        // holds `size` pointers from Slurm's allocator (or null ones), each freed at most once.
        unsafe {
            let env = *hs_job_spank_env(desc);
            let size = hs_job_spank_env_size(desc);
            if env.is_null() {
                return 0;
            }
            let n = *size as usize;
            let mut kept = 0;
            for i in 0..n {
                let e = *env.add(i);
                let ours = !e.is_null() && CStr::from_ptr(e).to_bytes().starts_with(b"HESHARE_");
                if ours {
                    let mut p = e.cast::<c_void>();
                    (self.xfree)(&mut p);
                } else {
                    *env.add(kept) = e;
                    kept += 1;
                }
            }
            for i in kept..n {
                *env.add(i) = std::ptr::null_mut();
            }
            *size = u32::try_from(kept).unwrap_or(0);
            n - kept
        }
    }

    /// Appends `entries` to the job's spank_job_env, growing it with slurm_xrecalloc.
    ///
    /// # Safety
    /// `desc` must be a live job description owned by Slurm.
    unsafe fn push_env(&self, desc: *mut c_void, entries: &[String]) {
        if entries.is_empty() {
            return;
        }
        // SAFETY: the shim returns the addresses of the array and its size in `desc`; the array
        // came from Slurm's allocator (or is null), so xrecalloc may grow it in place.
        unsafe {
            let env = hs_job_spank_env(desc);
            let size = hs_job_spank_env_size(desc);
            let old = *size as usize;
            let new = old + entries.len();
            let mut arr = (*env).cast::<c_void>();
            (self.xrecalloc)(
                &mut arr,
                new + 1,
                std::mem::size_of::<*mut c_char>(),
                true,
                false,
                c"heshare".as_ptr(),
                line!() as c_int,
                c"push_env".as_ptr(),
            );
            *env = arr.cast::<*mut c_char>();
            for (k, e) in entries.iter().enumerate() {
                *(*env).add(old + k) = self.strdup(e);
            }
            *size = u32::try_from(new).unwrap_or(u32::MAX);
        }
    }
}

/// What init loaded: the policy configuration and what slurm.conf says of the cluster.
struct Loaded {
    cfg: Arc<Config>,
    site: Site,
    /// heshare.toml and its modification time when loaded: an edit is picked up at the next
    /// submission (slurmctld 22.05 does not re-run a job_submit plugin's init on
    /// `scontrol reconfigure` unless JobSubmitPlugins itself changed).
    path: std::path::PathBuf,
    modified: Option<std::time::SystemTime>,
    /// Sharing plans remembered between submissions; dropped with this config on reload.
    ctx: crate::policy::PlaceContext,
}

fn modified(path: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

static HOST: OnceLock<Option<Host>> = OnceLock::new();

fn host() -> Option<Host> {
    *HOST.get_or_init(Host::find)
}

/// The `log` facade's backend inside slurmctld.
fn slurm_sink(level: log::Level, msg: &str) {
    if let Some(h) = host() {
        let msg = if msg.starts_with("heshare") {
            msg.to_owned()
        } else {
            format!("heshare: {msg}")
        };
        h.write(level <= log::Level::Warn, &msg);
    }
}

unsafe extern "C" {
    fn hs_job_view_fill(desc: *const c_void, out: *mut JobView);
}

fn state() -> &'static Mutex<Option<Loaded>> {
    static STATE: OnceLock<Mutex<Option<Loaded>>> = OnceLock::new();
    STATE.get_or_init(|| Mutex::new(None))
}

/// What the snapshot thread reads on every cycle.
fn loaded_config() -> Option<(Arc<Config>, Site)> {
    let guard = state().lock().ok()?;
    guard.as_ref().map(|l| (Arc::clone(&l.cfg), l.site.clone()))
}

/// Runs `f`, turning a panic into an error log line and `on_panic`.
fn guarded(what: &str, on_panic: c_int, f: impl FnOnce() -> c_int) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(rc) => rc,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            log::error!("heshare: internal error in {what}: {msg}; job left unchanged");
            on_panic
        }
    }
}

/// Sends panic messages to slurmctld's log instead of stderr (which slurmctld may have closed);
/// `catch_unwind` then turns the panic into an unchanged job.
fn install_panic_hook() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        std::panic::set_hook(Box::new(|info| {
            log::error!("heshare: panic: {info}");
        }));
    });
}

/// Keeps this library mapped for the life of the process: the snapshot thread may still be
/// inside a client call when slurmctld unloads the plugin.
fn pin_library() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        // SAFETY: dladdr on the address of one of our own functions fills `info` with the path of
        // this shared object; dlopen with RTLD_NOLOAD|RTLD_NODELETE only takes a reference to the
        // already loaded object and marks it never to be unloaded.
        unsafe {
            let mut info: libc::Dl_info = std::mem::zeroed();
            if libc::dladdr(init as *const c_void, &mut info) != 0 && !info.dli_fname.is_null() {
                libc::dlopen(
                    info.dli_fname,
                    libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
                );
            }
        }
    });
}

fn load() -> Result<Loaded, String> {
    let path = std::env::var_os("HESHARE_CONFIG")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/etc/slurm/heshare.toml".into());
    let stamp = modified(&path);
    let cfg = Config::load(&path).map_err(|e| e.to_string())?;
    for r in &cfg.retired {
        log::warn!("heshare: {r}");
    }
    let slurm_conf = std::env::var_os("SLURM_CONF")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/etc/slurm/slurm.conf".into());
    let mut site = match std::fs::read_to_string(&slurm_conf) {
        Ok(text) => {
            let warnings = [
                crate::config::priority_warning(&text, &cfg),
                crate::config::power_warning(&text, &cfg),
            ];
            for w in warnings.into_iter().flatten() {
                log::warn!("heshare: {}: {w}", slurm_conf.display());
            }
            site_of(&text, &cfg, &slurm_conf)?
        }
        Err(_) => Site::default(),
    };
    // No typed GPUs to go by: every catalog type, with no per-node limit known.
    if site.present.is_empty() {
        site.present = (0..cfg.gpu_types.len()).map(|t| (t, u32::MAX)).collect();
    }
    if site.feature_types.len() != cfg.gpu_types.len() {
        site.feature_types = vec![false; cfg.gpu_types.len()];
    }
    Ok(Loaded {
        cfg: Arc::new(cfg),
        site,
        path,
        modified: stamp,
        ctx: crate::policy::PlaceContext::default(),
    })
}

/// Reloads heshare.toml when it changed since it was loaded; a broken edit is logged with
/// file:line:field and the previous configuration stays in force.
fn refresh(slot: &mut Option<Loaded>) {
    let Some(current) = slot.as_ref() else { return };
    let now = modified(&current.path);
    if now == current.modified {
        return;
    }
    match load() {
        Ok(l) => {
            log::info!("heshare: {} changed, reloaded", l.path.display());
            *slot = Some(l);
        }
        Err(e) => {
            for line in e.lines() {
                log::error!("heshare: {line} (keeping the previous configuration)");
            }
            if let Some(c) = slot.as_mut() {
                c.modified = now;
            }
        }
    }
}

/// The catalog types named by `Gres=gpu:TYPE:N` in slurm.conf and which of them nodes carry as
/// features; an unknown type is an error so the admin hears of it at init, not through odd
/// decisions.
fn site_of(text: &str, cfg: &Config, file: &Path) -> Result<Site, String> {
    if let Some(f) = check_slurm_gres(text, cfg)
        .into_iter()
        .find(|f| !f.message.contains("has no GPU type"))
    {
        return Err(format!("{}:{}: {}", file.display(), f.line, f.message));
    }
    Ok(Site {
        present: slurm_gpu_types(text, cfg),
        feature_types: slurm_feature_types(text, cfg),
    })
}

/// Whether this process is slurmctld: slurmctld's own exported globals tell (the spank_* API
/// lives in libslurmfull, which every Slurm process loads, so it cannot).
fn in_slurmctld() -> bool {
    lookup(c"job_list").is_some() && lookup(c"last_job_update").is_some()
}

/// Called by slurmctld when it loads the plugin. Anywhere else (a misconfigured plugstack.conf
/// naming this file instead of spank_heshare.so) it loads nothing and succeeds.
#[unsafe(no_mangle)]
pub extern "C" fn init() -> c_int {
    guarded("init", SLURM_ERROR, || {
        if !in_slurmctld() {
            return SLURM_SUCCESS;
        }
        if host().is_none() {
            return SLURM_ERROR;
        }
        crate::logging::install(slurm_sink, log::LevelFilter::Info);
        install_panic_hook();
        match load() {
            Ok(l) => {
                let names: Vec<String> = l
                    .site
                    .present
                    .iter()
                    .map(|&(t, _)| {
                        let n = &l.cfg.gpu_types[t].name;
                        if l.site.feature_types[t] {
                            format!("{n} (feature)")
                        } else {
                            n.clone()
                        }
                    })
                    .collect();
                log::info!(
                    "heshare: loaded {} job classes; GPU types in this cluster: {}",
                    l.cfg.classes.len(),
                    names.join(", ")
                );
                if let Ok(mut s) = state().lock() {
                    *s = Some(l);
                }
                pin_library();
                live::start(loaded_config);
                SLURM_SUCCESS
            }
            Err(e) => {
                for line in e.lines() {
                    log::error!("heshare: {line}");
                }
                SLURM_ERROR
            }
        }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn fini() -> c_int {
    guarded("fini", SLURM_SUCCESS, || {
        live::stop();
        if let Ok(mut s) = state().lock() {
            *s = None;
        }
        SLURM_SUCCESS
    })
}

fn c_str(p: *const c_char) -> Option<String> {
    // SAFETY: Slurm's strings are NUL-terminated or null; null is checked first.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Called by slurmctld for every submitted job.
///
/// # Safety
/// `desc` must be a valid `job_desc_msg_t *` and `err_msg` a valid `char **`, as slurmctld
/// passes them.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn job_submit(
    desc: *mut c_void,
    submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    guarded("job_submit", SLURM_SUCCESS, || {
        live::in_submit(|| submit(desc, submit_uid, err_msg))
    })
}

fn submit(desc: *mut c_void, submit_uid: u32, err_msg: *mut *mut c_char) -> c_int {
    let Some(h) = host() else {
        return SLURM_SUCCESS;
    };
    if desc.is_null() {
        return SLURM_SUCCESS;
    }
    // Before anything reads the job: entries only heshare may write.
    // SAFETY: desc is slurmctld's live job description.
    let forged = unsafe { h.scrub_env(desc) };
    if forged > 0 {
        log::error!(
            "heshare: uid {submit_uid}: removed {forged} HESHARE_* entries the submission carried in its SPANK environment (only heshare writes them)"
        );
    }
    let mut v = JobView {
        tres_per_node: std::ptr::null(),
        tres_per_job: std::ptr::null(),
        admin_comment: std::ptr::null(),
        features: std::ptr::null(),
        prefer: std::ptr::null(),
        spank_job_env: std::ptr::null_mut(),
        spank_job_env_size: 0,
        nice: 0,
        user_id: 0,
        time_limit: 0,
        min_cpus: 0,
        pn_min_memory: 0,
        batch: 0,
        name: std::ptr::null(),
        script: std::ptr::null(),
        account: std::ptr::null(),
        argv: std::ptr::null_mut(),
        argc: 0,
        min_nodes: 0,
        max_nodes: 0,
    };
    // SAFETY: desc is slurmctld's job description; the shim only reads its fields.
    unsafe { hs_job_view_fill(desc, &mut v) };
    let env: Vec<String> = if v.spank_job_env.is_null() {
        vec![]
    } else {
        // SAFETY: spank_job_env holds spank_job_env_size string pointers (null-checked each).
        (0..v.spank_job_env_size as usize)
            .filter_map(|i| c_str(unsafe { *v.spank_job_env.add(i) }))
            .collect()
    };
    let opts = parse_options(env.iter().map(String::as_str));
    let tres = c_str(v.tres_per_node);
    let per_job = c_str(v.tres_per_job);
    let existing_comment = c_str(v.admin_comment);
    let ask = match parse_gpu_request(tres.as_deref(), per_job.as_deref()) {
        Ok(a) => a,
        Err(AskError::Unreadable(e)) => {
            log::info!("heshare: uid {submit_uid}: {e}; job left to Slurm");
            return SLURM_SUCCESS;
        }
        Err(AskError::Inexpressible(e)) => {
            if opts.gpu_class.is_some() || opts.gpu_share.is_some() {
                let note = format!("heshare: {e}, request left as asked");
                log::info!("heshare: uid {submit_uid}: {note}");
                // SAFETY: desc is live; admin_comment is a Slurm-owned char * field.
                unsafe {
                    h.replace(
                        hs_job_admin_comment(desc),
                        &merge_admin_comment(existing_comment.as_deref(), &note),
                    );
                }
            }
            return SLURM_SUCCESS;
        }
    };
    let mut guard = match state().lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    refresh(&mut guard);
    let Some(loaded) = guard.as_mut() else {
        return SLURM_SUCCESS;
    };
    let user = if v.user_id != 0 && v.user_id != unsafe_no_val() {
        v.user_id
    } else {
        submit_uid
    };
    let user_s = user.to_string();
    let snapshot = live::current();
    let live_view = Live {
        snapshot: snapshot.as_deref(),
        now_s: live::now_s(),
        max_age_s: loaded.cfg.live.snapshot_max_age_s,
    };
    // SAFETY: constants from the headers.
    let (no_val, infinite, no_val64, per_cpu) =
        unsafe { (hs_no_val(), hs_infinite(), hs_no_val64(), hs_mem_per_cpu()) };
    let features = c_str(v.features);
    let prefer = c_str(v.prefer);
    // Who the job is, for its profile: its own keys go to the node with every GPU job, so its
    // runs teach them, and the newest store may already know one of them.
    let (name, script, account) = (c_str(v.name), c_str(v.script), c_str(v.account));
    let command = (script.is_none() && !v.argv.is_null()).then(|| {
        // SAFETY: argv holds argc string pointers (null-checked each), as Slurm filled it.
        (0..v.argc as usize)
            .filter_map(|i| c_str(unsafe { *v.argv.add(i) }))
            .collect::<Vec<_>>()
            .join(" ")
    });
    let request = ask.as_ref().map(GpuAsk::request_string).unwrap_or_default();
    let keys = if ask.is_some() {
        crate::profile::keys(&crate::profile::Identity {
            uid: user,
            account: account.as_deref().unwrap_or(""),
            name: name.as_deref(),
            script: script.as_deref(),
            command: command.as_deref(),
            request: &request,
        })
    } else {
        Vec::new()
    };
    let book = live::profiles().filter(|_| loaded.cfg.profiles.enabled);
    let learned = book.as_deref().and_then(|b| {
        crate::profile::lookup(
            &loaded.cfg,
            b,
            &keys,
            crate::profile::Asked {
                label: opts.gpu_class.as_deref().and_then(|c| loaded.cfg.class(c)),
                share: ask.as_ref().is_some_and(|a| a.mps_pct.is_some()),
            },
            live::now_s(),
            loaded.cfg.profiles.derive_settings(),
        )
    });
    let keys_env: Vec<String> = (!keys.is_empty())
        .then(|| {
            format!(
                "HESHARE_PROFILE_KEYS={}",
                keys.iter()
                    .map(crate::profile::ProfileKey::as_str)
                    .collect::<Vec<_>>()
                    .join(",")
            )
        })
        .into_iter()
        .collect();
    let time_limit_s = (v.time_limit != no_val && v.time_limit != infinite && v.time_limit > 0)
        .then(|| f64::from(v.time_limit) * 60.0);
    // The node helper writes the limit into the job's record, so that a run killed at its limit
    // teaches its profile (a profiled job's decision passes it already).
    let limit_env = |already: &[String]| -> Vec<String> {
        match time_limit_s {
            Some(t)
                if !keys_env.is_empty()
                    && !already
                        .iter()
                        .any(|e| e.starts_with("HESHARE_TIME_LIMIT_S=")) =>
            {
                vec![format!("HESHARE_TIME_LIMIT_S={t:.0}")]
            }
            _ => Vec::new(),
        }
    };
    let sub = Submission {
        ask: ask.as_ref(),
        opts: &opts,
        user: &user_s,
        batch: v.batch != 0,
        // -N 2, or a range such as -N 1-3 that lets Slurm spread the job.
        multi_node: [v.min_nodes, v.max_nodes]
            .iter()
            .any(|&n| n != no_val && n > 1),
        steps_ask_gres: script.as_deref().is_some_and(steps_ask_gres),
        time_limit_s,
        features: features.as_deref(),
        prefer: prefer.as_deref(),
        cpus: (v.min_cpus != no_val && v.min_cpus > 1).then_some(v.min_cpus),
        memory_mib: (v.pn_min_memory != no_val64
            && v.pn_min_memory > 0
            && v.pn_min_memory & per_cpu == 0)
            .then_some(v.pn_min_memory),
        asked: None,
        demand_pct: None,
        learned: learned.as_ref(),
    };
    let cfg = Arc::clone(&loaded.cfg);
    match decide_with(&cfg, &loaded.site, live_view, &sub, &mut loaded.ctx) {
        Verdict::PassThrough => SLURM_SUCCESS,
        Verdict::Annotate(note) => {
            // SAFETY: desc is live; admin_comment is a Slurm-owned char * field.
            unsafe {
                h.replace(
                    hs_job_admin_comment(desc),
                    &merge_admin_comment(existing_comment.as_deref(), &note),
                );
                h.push_env(desc, &keys_env);
                h.push_env(desc, &limit_env(&[]));
            }
            SLURM_SUCCESS
        }
        Verdict::Rewrite(r) => {
            // SAFETY: desc is live; each field address comes from the shim and each string
            // from Slurm's allocator; site_factor is a plain u32 field.
            unsafe {
                let field = if r.per_job {
                    hs_job_tres_per_job(desc)
                } else {
                    hs_job_tres_per_node(desc)
                };
                h.replace(field, &r.tres);
                if let Some(f) = &r.features {
                    h.replace(hs_job_features(desc), f);
                }
                if let Some(p) = &r.prefer {
                    h.replace(hs_job_prefer(desc), p);
                }
                h.replace(
                    hs_job_admin_comment(desc),
                    &merge_admin_comment(existing_comment.as_deref(), &r.admin_comment),
                );
                h.push_env(desc, &r.spank_env);
                h.push_env(desc, &keys_env);
                h.push_env(desc, &limit_env(&r.spank_env));
                // heshare's priority goes into the site factor, which only the plugin sets at
                // submission and only operators change later: the user's nice stays theirs.
                let offset = i64::from(hs_nice_offset());
                *hs_job_site_factor(desc) =
                    u32::try_from(offset + i64::from(r.site_factor)).unwrap_or(hs_nice_offset());
            }
            let constraint = r
                .features
                .as_ref()
                .map(|f| {
                    format!(
                        " constraint={f} prefer={}",
                        r.prefer.as_deref().unwrap_or("")
                    )
                })
                .unwrap_or_default();
            log::info!(
                "heshare: uid {user}: {} -> {}{constraint} site factor {:+}; {}",
                tres.unwrap_or_default(),
                r.tres,
                r.site_factor,
                r.admin_comment
            );
            SLURM_SUCCESS
        }
        Verdict::Reject(msg) => {
            log::info!("heshare: uid {user}: rejected: {msg}");
            if !err_msg.is_null() {
                // SAFETY: err_msg is slurmctld's char ** for the reply; it takes ownership
                // of an xmalloc'd string.
                unsafe { *err_msg = h.strdup(&msg) };
            }
            // SAFETY: a constant from the headers.
            unsafe { hs_eslurm_invalid_gres() }
        }
    }
}

fn unsafe_no_val() -> u32 {
    // SAFETY: a constant from the headers.
    unsafe { hs_no_val() }
}

/// Job updates are left to Slurm, including heshare's own moves of pending jobs (which arrive
/// here too: doing nothing is what keeps them from looping). The signature follows the headers:
/// three arguments up to 22.05, `char **err_msg` added from 23.02.
#[cfg(not(slurm_job_modify_err_msg))]
#[unsafe(no_mangle)]
pub extern "C" fn job_modify(_desc: *mut c_void, _job_ptr: *mut c_void, _submit_uid: u32) -> c_int {
    live::in_submit(|| SLURM_SUCCESS)
}

/// As above, with the 23.02+ signature.
#[cfg(slurm_job_modify_err_msg)]
#[unsafe(no_mangle)]
pub extern "C" fn job_modify(
    _desc: *mut c_void,
    _job_ptr: *mut c_void,
    _submit_uid: u32,
    _err_msg: *mut *mut c_char,
) -> c_int {
    live::in_submit(|| SLURM_SUCCESS)
}

#[cfg(test)]
mod tests {
    //! The exported `job_submit` driven with 10,000 random and malformed job descriptions (odd
    //! GRES strings, huge counts, nulls, bad UTF-8, junk SPANK entries), with stand-ins for
    //! Slurm's allocator and log: it must never panic, crash or leave the description broken.

    use super::*;
    use crate::config::BUNDLED_CONFIG;
    use crate::sim::rng::SplitMix;
    use std::sync::atomic::{AtomicUsize, Ordering};

    unsafe extern "C" {
        fn hs_test_job_desc_new() -> *mut c_void;
        fn hs_test_job_desc_free(desc: *mut c_void);
    }

    static LOGGED: AtomicUsize = AtomicUsize::new(0);

    // Slurm's log functions are variadic; heshare always calls them with ("%s", msg), which a
    // two-argument C function receives unchanged on the C ABI.
    unsafe extern "C" fn fake_log(_fmt: *const c_char, _msg: *const c_char) {
        LOGGED.fetch_add(1, Ordering::Relaxed);
    }
    unsafe extern "C" fn fake_strdup(s: *const c_char) -> *mut c_char {
        // SAFETY: s is a NUL-terminated string from heshare.
        unsafe { libc::strdup(s) }
    }
    unsafe extern "C" fn fake_free(p: *mut *mut c_void) {
        // SAFETY: p points to a pointer from malloc/strdup or null.
        unsafe {
            libc::free(*p);
            *p = std::ptr::null_mut();
        }
    }
    unsafe extern "C" fn fake_recalloc(
        p: *mut *mut c_void,
        cnt: usize,
        size: usize,
        clear: bool,
        _try: bool,
        _f: *const c_char,
        _l: c_int,
        _fun: *const c_char,
    ) -> *mut c_void {
        // SAFETY: a calloc'd replacement with the old bytes copied in, as xrecalloc promises.
        unsafe {
            let new = libc::calloc(cnt, size);
            if !(*p).is_null() {
                let old = libc::malloc_usable_size(*p).min(cnt * size);
                std::ptr::copy_nonoverlapping((*p).cast::<u8>(), new.cast::<u8>(), old);
                libc::free(*p);
            }
            let _ = clear;
            *p = new;
            new
        }
    }

    fn install() {
        let log: LogFn = {
            // SAFETY: see fake_log: called only as f("%s", msg).
            unsafe {
                std::mem::transmute::<unsafe extern "C" fn(*const c_char, *const c_char), LogFn>(
                    fake_log,
                )
            }
        };
        let _ = HOST.set(Some(Host {
            info: log,
            error: log,
            xstrdup: fake_strdup,
            xfree: fake_free,
            xrecalloc: fake_recalloc,
        }));
        crate::logging::install(slurm_sink, log::LevelFilter::Info);
        let cfg = Config::parse(BUNDLED_CONFIG, Path::new("h.toml")).expect("valid");
        let site = Site {
            present: (0..cfg.gpu_types.len()).map(|t| (t, 8)).collect(),
            feature_types: vec![true; cfg.gpu_types.len()],
        };
        if let Ok(mut s) = state().lock() {
            *s = Some(Loaded {
                cfg: Arc::new(cfg),
                site,
                path: std::path::PathBuf::new(),
                modified: None,
                ctx: crate::policy::PlaceContext::default(),
            });
        }
    }

    /// A random byte string without NUL, often shaped like a GRES spec, sometimes not UTF-8.
    fn junk(rng: &mut SplitMix) -> Vec<u8> {
        const PIECES: [&str; 18] = [
            "gres:",
            "gres/",
            "gpu",
            "mps",
            "shard",
            ":",
            ",",
            ";",
            "=",
            "a100",
            "t4",
            "h100",
            "v100m16",
            "1",
            "35",
            "99999999999",
            "-1",
            "0",
        ];
        let mut out = Vec::new();
        for _ in 0..rng.below(8) {
            if rng.below(6) == 0 {
                out.push(u8::try_from(1 + rng.below(255)).unwrap_or(1));
            } else {
                out.extend_from_slice(PIECES[rng.below(PIECES.len())].as_bytes());
            }
        }
        out
    }

    fn c_alloc(bytes: &[u8]) -> *mut c_char {
        let c = CString::new(bytes.to_vec()).unwrap_or_default();
        // SAFETY: strdup of a NUL-terminated string.
        unsafe { libc::strdup(c.as_ptr()) }
    }

    /// A client of Slurm's API may put any entry in spank_job_env: the Prolog sees what job_submit
    /// leaves there as SPANK_*, so heshare's own names are removed before heshare writes its
    /// entries, whatever else the job asks; the user's options stay.
    #[test]
    fn forged_heshare_entries_never_reach_the_prolog() {
        install();
        for gres in ["gres:gpu:1", "gres:mps:30", ""] {
            // SAFETY: a fresh zeroed job description from the shim, filled with malloc'd strings
            // as Slurm would, freed below with the same allocator.
            unsafe {
                let d = hs_test_job_desc_new();
                *hs_job_tres_per_node(d) = if gres.is_empty() {
                    std::ptr::null_mut()
                } else {
                    c_alloc(gres.as_bytes())
                };
                let entries = [
                    "HESHARE_CLASS=vit-infer",
                    "_SLURM_SPANK_OPTION_heshare_gpu_class=bert-train",
                    "HESHARE_BOUND=100",
                    "OTHER=1",
                    "HESHARE_PROFILE_KEY=alice:script",
                    "HESHARE_TIME_LIMIT_S=1",
                ];
                let env = libc::calloc(entries.len() + 1, std::mem::size_of::<*mut c_char>())
                    .cast::<*mut c_char>();
                for (k, e) in entries.iter().enumerate() {
                    *env.add(k) = c_alloc(e.as_bytes());
                }
                *hs_job_spank_env(d) = env;
                *hs_job_spank_env_size(d) = u32::try_from(entries.len()).unwrap_or(0);
                let mut err: *mut c_char = std::ptr::null_mut();
                let rc = job_submit(d, 1000, &mut err);
                // Without a GPU request the class option is refused; scrubbed all the same.
                let want = if gres.is_empty() {
                    hs_eslurm_invalid_gres()
                } else {
                    SLURM_SUCCESS
                };
                assert_eq!(rc, want, "{gres}");
                let n = *hs_job_spank_env_size(d) as usize;
                let after: Vec<String> = (0..n)
                    .filter_map(|i| c_str(*(*hs_job_spank_env(d)).add(i)))
                    .collect();
                assert!(
                    after.contains(&"_SLURM_SPANK_OPTION_heshare_gpu_class=bert-train".to_owned())
                        && after.contains(&"OTHER=1".to_owned()),
                    "{after:?}"
                );
                assert!(
                    !after.iter().any(|e| e == "HESHARE_CLASS=vit-infer"
                        || e.starts_with("HESHARE_BOUND=100")
                        || e.starts_with("HESHARE_PROFILE_KEY=")
                        || e == "HESHARE_TIME_LIMIT_S=1"),
                    "{gres}: {after:?}"
                );
                if !gres.is_empty() {
                    // The job's own keys, from what Slurm says of it (uid 1000, no account).
                    assert!(
                        after.contains(&"HESHARE_PROFILE_KEYS=request:uid1000:gpu%3A1".to_owned())
                            || after.contains(
                                &"HESHARE_PROFILE_KEYS=request:uid1000:mps%3A30".to_owned()
                            ),
                        "{after:?}"
                    );
                }
                if gres == "gres:gpu:1" {
                    // heshare's own entries, from its decision (the user's bert-train option).
                    assert!(
                        after.contains(&"HESHARE_CLASS=bert-train".to_owned()),
                        "{after:?}"
                    );
                }
                for k in 0..n {
                    libc::free((*(*hs_job_spank_env(d)).add(k)).cast());
                }
                libc::free((*hs_job_spank_env(d)).cast());
                libc::free((*hs_job_tres_per_node(d)).cast());
                libc::free((*hs_job_admin_comment(d)).cast());
                libc::free((*hs_job_features(d)).cast());
                libc::free((*hs_job_prefer(d)).cast());
                if !err.is_null() {
                    libc::free(err.cast());
                }
                hs_test_job_desc_free(d);
            }
        }
    }

    #[test]
    fn ten_thousand_malformed_requests_never_break_job_submit() {
        install();
        let mut rng = SplitMix::new(20_261_202);
        let mut rewritten = 0;
        let mut rejected = 0;
        for _ in 0..10_000 {
            // SAFETY: a fresh zeroed job description from the shim, filled with malloc'd
            // strings as Slurm would, freed below with the same allocator.
            unsafe {
                let d = hs_test_job_desc_new();
                assert!(!d.is_null());
                let tres = hs_job_tres_per_node(d);
                *tres = match rng.below(4) {
                    0 => std::ptr::null_mut(),
                    1 => c_alloc(format!("gres:gpu:{}", rng.below(3)).as_bytes()),
                    _ => c_alloc(&junk(&mut rng)),
                };
                // Half the jobs carry a valid class first, so valid requests are well covered too.
                let valid_class = rng.below(2) == 0;
                let n = rng.below(5) + usize::from(valid_class);
                let env = hs_job_spank_env(d);
                if n > 0 {
                    *env = libc::calloc(n + 1, std::mem::size_of::<*mut c_char>())
                        .cast::<*mut c_char>();
                    if valid_class {
                        *(*env) = c_alloc(b"_SLURM_SPANK_OPTION_heshare_gpu_class=vit-infer");
                    }
                    for k in usize::from(valid_class)..n {
                        let key = ["gpu_share", "gpu_class", "energy_policy", "nope"][rng.below(4)];
                        let value: Vec<u8> = match rng.below(3) {
                            0 => [
                                "auto",
                                "exclusive",
                                "35",
                                "vit-infer",
                                "bert-train",
                                "energy",
                            ][rng.below(6)]
                            .as_bytes()
                            .to_vec(),
                            _ => junk(&mut rng),
                        };
                        let mut entry = format!("_SLURM_SPANK_OPTION_heshare_{key}=").into_bytes();
                        entry.extend(value);
                        *(*env).add(k) = if rng.below(10) == 0 {
                            std::ptr::null_mut()
                        } else {
                            c_alloc(&entry)
                        };
                    }
                    *hs_job_spank_env_size(d) = u32::try_from(n).unwrap_or(0);
                }
                if rng.below(3) == 0 {
                    *hs_job_nice(d) = hs_nice_offset()
                        .wrapping_add(u32::try_from(rng.below(200)).unwrap_or(0))
                        .wrapping_sub(100);
                }
                let nice_in = *hs_job_nice(d);
                let mut err: *mut c_char = std::ptr::null_mut();
                let rc = job_submit(d, 1000, &mut err);
                assert!(
                    rc == SLURM_SUCCESS || rc == hs_eslurm_invalid_gres(),
                    "rc {rc}"
                );
                if rc == SLURM_SUCCESS {
                    assert!(err.is_null());
                } else {
                    assert!(
                        !err.is_null() && c_str(err).is_some_and(|m| m.starts_with("heshare: "))
                    );
                    rejected += 1;
                    libc::free(err.cast());
                }
                if c_str(*hs_job_admin_comment(d)).is_some_and(|c| c.starts_with("heshare: type="))
                {
                    // A rewrite leaves a request Slurm (and heshare) can read back.
                    let now = c_str(*tres);
                    let ask = super::super::request::parse_tres_per_node(now.as_deref());
                    assert!(matches!(ask, Ok(Some(_))), "{now:?}");
                    // The site factor is heshare's, within its range; the user's nice is
                    // left as it came.
                    let site = *hs_job_site_factor(d);
                    assert!(
                        site != hs_no_val()
                            && (i64::from(site) - i64::from(hs_nice_offset())).abs() <= 100,
                        "site factor {site}"
                    );
                    assert_eq!(*hs_job_nice(d), nice_in, "the user's nice changed");
                    rewritten += 1;
                }
                let size = *hs_job_spank_env_size(d) as usize;
                assert!(size == 0 || !(*env).is_null());
                for k in 0..size {
                    libc::free((*(*env).add(k)).cast());
                }
                libc::free((*env).cast());
                libc::free((*tres).cast());
                libc::free((*hs_job_admin_comment(d)).cast());
                hs_test_job_desc_free(d);
            }
        }
        assert!(
            rewritten > 100,
            "only {rewritten} requests were rewritten: the generator misses the valid space"
        );
        assert!(rejected > 100, "only {rejected} requests were rejected");
        assert!(LOGGED.load(Ordering::Relaxed) > 0);
    }
}
