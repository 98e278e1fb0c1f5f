//! Slurm's accounting database, through Slurm's own clients: whether the cluster keeps one
//! (`scontrol show config`), a finished job's state and AdminComment (`sacct`), and writing the
//! AdminComment, which only the accounting API can change once slurmctld has forgotten the job:
//! `sacctmgr modify job` from Slurm 23.02, and before it libslurm's `slurmdb_job_modify` called
//! from `c_shim/heshare_dbd.c` in a child process (`heshare dbd-admin-comment`), since 22.05's
//! sacctmgr stores the text in lower case. The clients run as [`crate::command::run`] runs
//! programs: no shell, a fixed `PATH`, an environment of `SLURM_CONF` alone, a deadline. What to
//! write comes from `report::energy_note`; this module only carries it.

use crate::command::{self, CommandError};
use crate::report::energy_note::{self, JobEnergy};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// How long one client may take before it is killed and the job is tried again next update.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);
/// A written note is kept this long, so that a record that reaches the controller late (another
/// node's, a log copied late) is added to the job's sum and the note written again.
pub const LATE_RECORD_S: f64 = 86_400.0;
/// A note slurmdbd has not taken this long after its job ended (the job is unknown to it, or it
/// has been down for a week) is given up, so the store does not grow without end.
pub const GIVE_UP_S: f64 = 7.0 * 86_400.0;

#[derive(Debug, thiserror::Error)]
pub enum DbdError {
    #[error(transparent)]
    Client(#[from] CommandError),
    #[error("sacct -j {job}: unexpected output {output:?}")]
    Output { job: String, output: String },
    #[error(
        "job {job}: slurmdbd took AdminComment but returned {got:?} where {want:?} was written"
    )]
    NotStored {
        job: String,
        want: String,
        got: String,
    },
}

/// The Slurm clients, and how this Slurm's AdminComment is written.
#[derive(Debug, Clone)]
pub struct Dbd {
    slurm_conf: Option<PathBuf>,
    /// Slurm before 23.02 lowercases what `sacctmgr modify job` is given: written through
    /// libslurm instead.
    lowercases: bool,
    /// `ClusterName`, which the accounting API asks for.
    cluster: String,
}

/// What the accounting database says of one job.
#[derive(Debug, Clone, PartialEq)]
pub enum JobInDb {
    /// No such job (not yet sent by slurmctld, or never).
    Unknown,
    /// Pending, running, or another state its record may still change from.
    Active(String),
    Finished {
        admin_comment: String,
    },
}

/// Whether the cluster keeps accounting in slurmdbd.
#[derive(Debug, Clone, PartialEq)]
pub enum Accounting {
    Slurmdbd(Dbd),
    /// Another `AccountingStorageType` (named), so there is no database to write to.
    None(String),
}

impl PartialEq for Dbd {
    fn eq(&self, other: &Self) -> bool {
        self.slurm_conf == other.slurm_conf
            && self.lowercases == other.lowercases
            && self.cluster == other.cluster
    }
}

/// The job states after which slurmctld sends a job's record no more.
const FINISHED: [&str; 9] = [
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
];

fn env(slurm_conf: Option<&PathBuf>) -> Vec<(&'static str, &std::path::Path)> {
    slurm_conf
        .map(|c| ("SLURM_CONF", c.as_path()))
        .into_iter()
        .collect()
}

fn client(
    slurm_conf: Option<&PathBuf>,
    program: &str,
    args: &[&str],
) -> Result<String, CommandError> {
    command::run(
        std::path::Path::new(program),
        args,
        &env(slurm_conf),
        None,
        CLIENT_TIMEOUT,
        false,
    )
    .map(|o| o.stdout)
}

/// `22.05.8` from `slurm-wlm 22.05.8` or `slurm 24.11.1`.
fn version(text: &str) -> Option<(u32, u32)> {
    let v = text.split_whitespace().nth(1)?;
    let mut it = v.split('.');
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

impl Accounting {
    /// Asks slurmctld (`scontrol show config`) which accounting storage the cluster has.
    /// `slurm_conf` is the `SLURM_CONF` the clients get (none: Slurm's default).
    pub fn detect(slurm_conf: Option<PathBuf>) -> Result<Accounting, DbdError> {
        let config = client(slurm_conf.as_ref(), "scontrol", &["show", "config"])?;
        let field = |name: &str| {
            config
                .lines()
                .filter_map(|l| l.split_once('='))
                .find(|(k, _)| k.trim() == name)
                .map(|(_, v)| v.trim().to_owned())
                .unwrap_or_default()
        };
        let storage = field("AccountingStorageType");
        if storage != "accounting_storage/slurmdbd" {
            return Ok(Accounting::None(storage));
        }
        let v = client(slurm_conf.as_ref(), "sacctmgr", &["-V"])?;
        let lowercases = version(&v).is_none_or(|v| v < (23, 2));
        Ok(Accounting::Slurmdbd(Dbd {
            slurm_conf,
            lowercases,
            cluster: field("ClusterName"),
        }))
    }
}

impl Dbd {
    /// The job's state and AdminComment as slurmdbd has them.
    pub fn job(&self, job: &str) -> Result<JobInDb, DbdError> {
        let out = client(
            self.slurm_conf.as_ref(),
            "sacct",
            &[
                "-X",
                "-n",
                "-P",
                "-j",
                job,
                "-o",
                "JobID,State,AdminComment",
            ],
        )?;
        let out = out.trim_end_matches('\n');
        if out.trim().is_empty() {
            return Ok(JobInDb::Unknown);
        }
        // AdminComment last: it may hold '|' or a line break of its own.
        let mut parts = out.splitn(3, '|');
        let (Some(_id), Some(state), Some(comment)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(DbdError::Output {
                job: job.to_owned(),
                output: out.to_owned(),
            });
        };
        let base = state.split_whitespace().next().unwrap_or("");
        Ok(if FINISHED.contains(&base) {
            JobInDb::Finished {
                admin_comment: comment.to_owned(),
            }
        } else {
            JobInDb::Active(state.to_owned())
        })
    }

    /// Why `text` cannot be stored as it is, if it cannot: sacctmgr turns quotes into
    /// backquotes, and slurmdbd puts the text between quotes in its SQL without escaping it, so
    /// a quote would end it and a backslash would be read as an escape.
    pub fn unstorable(text: &str) -> Option<&'static str> {
        if text.contains(['\'', '"']) {
            Some("it holds a quote, which Slurm's accounting does not store as written")
        } else if text.contains('\\') {
            Some("it holds a backslash, which slurmdbd's database reads as an escape")
        } else {
            None
        }
    }

    /// Writes `text` as the job's AdminComment and reads it back.
    pub fn set_admin_comment(&self, job: &str, text: &str) -> Result<(), DbdError> {
        if self.lowercases {
            let exe = std::env::current_exe().map_err(|source| CommandError::Spawn {
                program: "heshare".into(),
                source,
            })?;
            command::run(
                &exe,
                &[
                    "dbd-admin-comment",
                    "--cluster",
                    &self.cluster,
                    "--job",
                    job,
                ],
                &env(self.slurm_conf.as_ref()),
                Some(text),
                CLIENT_TIMEOUT,
                false,
            )?;
        } else {
            let set = format!("AdminComment={text}");
            let jobid = format!("jobid={job}");
            client(
                self.slurm_conf.as_ref(),
                "sacctmgr",
                &["-i", "modify", "job", "where", &jobid, "set", &set],
            )?;
        }
        match self.job(job)? {
            JobInDb::Finished { admin_comment } if admin_comment == text => Ok(()),
            other => Err(DbdError::NotStored {
                job: job.to_owned(),
                want: text.to_owned(),
                got: match other {
                    JobInDb::Finished { admin_comment } => admin_comment,
                    JobInDb::Active(s) => format!("(job {s})"),
                    JobInDb::Unknown => "(no such job)".into(),
                },
            }),
        }
    }
}

/// Sets job `job`'s AdminComment through libslurm's accounting API (`c_shim/heshare_dbd.c`):
/// `Ok(false)` when slurmdbd has no such job. Runs in `heshare dbd-admin-comment`, a child of
/// the update: libslurm may end the process on a configuration it cannot read.
#[cfg(slurm_headers)]
pub fn set_through_libslurm(cluster: &str, job: u32, text: &str) -> Result<bool, String> {
    use std::ffi::{CString, c_char, c_int};
    unsafe extern "C" {
        fn hs_dbd_set_admin_comment(
            libslurm: *const c_char,
            cluster: *const c_char,
            job_id: u32,
            text: *const c_char,
            err: *mut c_char,
            errlen: usize,
        ) -> c_int;
    }
    let nul =
        |what: &str, s: &str| CString::new(s).map_err(|_| format!("the {what} holds a NUL byte"));
    let lib = nul("library name", env!("HESHARE_LIBSLURM"))?;
    let cluster = nul("cluster name", cluster)?;
    let text = nul("AdminComment", text)?;
    let mut err = vec![0u8; 512];
    // SAFETY: NUL-terminated strings that outlive the call, and a buffer of the length given,
    // which the shim writes a NUL-terminated message into.
    let rc = unsafe {
        hs_dbd_set_admin_comment(
            lib.as_ptr(),
            cluster.as_ptr(),
            job,
            text.as_ptr(),
            err.as_mut_ptr().cast(),
            err.len(),
        )
    };
    match rc {
        0 => Ok(true),
        1 => Ok(false),
        _ => {
            let end = err.iter().position(|&b| b == 0).unwrap_or(err.len());
            Err(String::from_utf8_lossy(&err[..end]).into_owned())
        }
    }
}

/// Without Slurm's headers at build time there is no accounting API to call.
#[cfg(not(slurm_headers))]
pub fn set_through_libslurm(_cluster: &str, _job: u32, _text: &str) -> Result<bool, String> {
    Err("this heshare was built without Slurm's headers (libslurm-dev)".into())
}

/// What one round of writing notes did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Published {
    pub written: usize,
    /// Notes already in slurmdbd as they are.
    pub unchanged: usize,
    /// Jobs slurmdbd does not know yet, or whose record may still change: tried next update.
    pub waiting: usize,
    /// Jobs whose AdminComment Slurm's accounting would not store as written (a quote or a
    /// backslash in it), with why: not written, named.
    pub refused: Vec<(String, &'static str)>,
    /// Notes given up after [`GIVE_UP_S`].
    pub given_up: Vec<String>,
    /// The first error that stopped the round (slurmdbd down): the rest wait for the next.
    pub stopped: Option<String>,
}

/// Writes each job's note that slurmdbd does not hold yet, keeps what must be retried, and
/// forgets notes written more than [`LATE_RECORD_S`] ago.
pub fn publish(dbd: &Dbd, notes: &mut BTreeMap<String, JobEnergy>, now_s: f64) -> Published {
    let mut p = Published::default();
    for (job, e) in notes.iter_mut() {
        if e.written_s.is_some() || p.stopped.is_some() {
            continue;
        }
        let found = match dbd.job(job) {
            Ok(f) => f,
            Err(err) => {
                p.stopped = Some(err.to_string());
                continue;
            }
        };
        let admin_comment = match found {
            JobInDb::Finished { admin_comment } => admin_comment,
            JobInDb::Unknown | JobInDb::Active(_) => {
                p.waiting += 1;
                continue;
            }
        };
        let Some(text) = energy_note::merge(&admin_comment, &e.note()) else {
            p.unchanged += 1;
            e.written_s = Some(now_s);
            continue;
        };
        if let Some(why) = Dbd::unstorable(&text) {
            p.refused.push((job.clone(), why));
            e.written_s = Some(now_s);
            continue;
        }
        match dbd.set_admin_comment(job, &text) {
            Ok(()) => {
                p.written += 1;
                e.written_s = Some(now_s);
            }
            Err(err) => p.stopped = Some(err.to_string()),
        }
    }
    notes.retain(|job, e| match e.written_s {
        Some(w) => now_s - w < LATE_RECORD_S,
        None if now_s - e.end_s >= GIVE_UP_S => {
            p.given_up.push(job.clone());
            false
        }
        None => true,
    });
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clients_version_is_read_from_either_package_name() {
        assert_eq!(version("slurm-wlm 22.05.8"), Some((22, 5)));
        assert_eq!(version("slurm 24.11.1\n"), Some((24, 11)));
        assert_eq!(version("garbage"), None);
    }

    #[test]
    fn text_slurmdbd_would_not_store_as_written_is_named() {
        assert_eq!(
            Dbd::unstorable("heshare: type=a100 1.1 kJ at 1410 MHz"),
            None
        );
        assert!(Dbd::unstorable("ops: 'checked'").is_some());
        assert!(Dbd::unstorable("say \"hi\"").is_some());
        assert!(Dbd::unstorable("path C:\\x").is_some());
    }
}
