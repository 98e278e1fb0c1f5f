//! Who a job is, from what `job_submit` sees of it: the profile keys a job is learned and looked
//! up under, from the most specific to the least.
//!
//! Users do not label their jobs, but they run the same scripts again and again. A key names a
//! recurring job at one of three back-off levels:
//!
//! * `script`: the user and a fingerprint of the batch script (its commands, without comments,
//!   `#SBATCH` lines, blank lines and indentation) or, for `srun`/`salloc`, of the command line;
//! * `name`: the user and the job name with run numbers and dates stripped (`train_bert_run12_
//!   2026-12-03` and `train_bert_run13_2026-12-04` are one stem, `train-bert-run`);
//! * `request`: the account (the user's own, where the job names none) and the GPU request as
//!   asked (`gpu:1`, `mps:30`, `gpu:a100:2`).
//!
//! A class the user gave is a prior beneath them all (`derive`). Every key names the uid or the
//! account it belongs to, so the store can refuse a record of another user's job that names it.
//! Users are keyed by uid, as Slurm gives it to `job_submit` and to the Prolog: a name lookup
//! inside slurmctld could block on the site's directory service. Pure: the plugin, the node
//! helper and the simulator compute the same keys.

use std::fmt;

/// A back-off level of a profile key, most specific first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Script,
    Name,
    Request,
}

impl Level {
    pub const ALL: [Level; 3] = [Level::Script, Level::Name, Level::Request];

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Script => "script",
            Level::Name => "name",
            Level::Request => "request",
        }
    }

    pub fn parse(s: &str) -> Option<Level> {
        Level::ALL.into_iter().find(|l| l.as_str() == s)
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a job's keys are made from, as Slurm gives it to `job_submit` (the user and account as
/// Slurm resolved them, never what the job's environment says).
#[derive(Debug, Clone, Copy, Default)]
pub struct Identity<'a> {
    pub uid: u32,
    /// `--account`, empty when the job names none (Slurm fills in the default after
    /// `job_submit`).
    pub account: &'a str,
    /// `--job-name` (Slurm defaults it to the script's file name).
    pub name: Option<&'a str>,
    /// The batch script's text.
    pub script: Option<&'a str>,
    /// The command line of an `srun`/`salloc` job, when there is no script.
    pub command: Option<&'a str>,
    /// The GPU request as asked, e.g. `gpu:1`, `gpu:a100:2`, `mps:30`.
    pub request: &'a str,
}

/// One key of a job: `script:1000:9f3a1c2b4d5e6f70`, `name:1000:train-bert`,
/// `request:physics:gpu%3A1` (`request:uid1000:...` without an account).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProfileKey(String);

impl ProfileKey {
    fn new(level: Level, owner: &str, rest: &str) -> ProfileKey {
        ProfileKey(format!("{}:{}:{rest}", level.as_str(), escape(owner)))
    }

    /// Reads a key back (from a record, the store, an admin's command line). `None` when it is
    /// not one `keys` could have made.
    pub fn parse(s: &str) -> Option<ProfileKey> {
        let (level, rest) = s.split_once(':')?;
        Level::parse(level)?;
        let (owner, tail) = rest.split_once(':')?;
        let ok = !owner.is_empty()
            && !tail.is_empty()
            && s.len() <= 512
            && s.bytes()
                .all(|b| b.is_ascii_graphic() && b != b',' && b != b'=');
        ok.then(|| ProfileKey(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn level(&self) -> Level {
        self.0
            .split_once(':')
            .and_then(|(l, _)| Level::parse(l))
            .unwrap_or(Level::Request)
    }

    /// The uid (script and name levels) or account (request level) the key belongs to, as it
    /// was escaped into the key.
    pub fn owner(&self) -> &str {
        self.0.split(':').nth(1).unwrap_or("")
    }

    /// Whether a job of `uid` in `account` (as Slurm ran it) may teach this key: its owner must
    /// be theirs.
    pub fn belongs_to(&self, uid: u32, account: &str) -> bool {
        match self.level() {
            Level::Script | Level::Name => self.owner() == uid.to_string(),
            Level::Request => {
                self.owner() == format!("uid{uid}")
                    || (!account.is_empty() && self.owner() == escape(account))
            }
        }
    }
}

impl fmt::Display for ProfileKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The job's keys, most specific first; levels it has nothing for are left out.
pub fn keys(id: &Identity<'_>) -> Vec<ProfileKey> {
    let mut out = Vec::with_capacity(3);
    let uid = id.uid.to_string();
    let body = id
        .script
        .and_then(script_fingerprint)
        .or_else(|| id.command.and_then(command_fingerprint));
    if let Some(fp) = body {
        out.push(ProfileKey::new(Level::Script, &uid, &fp));
    }
    if let Some(stem) = id.name.and_then(name_stem) {
        out.push(ProfileKey::new(Level::Name, &uid, &stem));
    }
    if !id.request.is_empty() {
        let owner = if id.account.is_empty() {
            format!("uid{uid}")
        } else {
            id.account.to_owned()
        };
        out.push(ProfileKey::new(Level::Request, &owner, &escape(id.request)));
    }
    out
}

/// Keys travel in SPANK environment values, records and AdminComment (`key=value` words): only
/// printable ASCII without spaces, `,`, `=` or `:` in a component; anything else is `%XX`.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'+' | b'@') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// FNV-1a, 64 bits: stable across builds and machines (the std hasher is seeded per process),
/// which a key written today and looked up next month needs. Not a security boundary: a key
/// also names its owner, so a collision can only mix two of one user's scripts.
fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The fingerprint of a batch script's commands: comments (and so `#SBATCH` lines, which carry
/// names, times and output paths that change from run to run), blank lines and whitespace runs
/// do not count. `None` for a script with no command.
pub fn script_fingerprint(script: &str) -> Option<String> {
    let mut body = Vec::new();
    for line in script.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        for (i, word) in line.split_whitespace().enumerate() {
            if i > 0 {
                body.push(b' ');
            }
            body.extend_from_slice(word.as_bytes());
        }
        body.push(b'\n');
    }
    (!body.is_empty()).then(|| format!("{:016x}", fnv1a(body)))
}

fn command_fingerprint(command: &str) -> Option<String> {
    let words: Vec<&str> = command.split_whitespace().collect();
    (!words.is_empty()).then(|| format!("{:016x}", fnv1a(words.join(" ").bytes())))
}

/// Word parts that number runs rather than name the work: `run12`, `seed3`, `v2`.
const RUN_WORDS: &[&str] = &[
    "run", "seed", "trial", "rep", "iter", "it", "v", "ver", "epoch", "ep", "job", "part", "try",
    "attempt", "step", "fold", "shard", "r", "s", "n", "id", "idx",
];

/// Names that say nothing of the work: Slurm's name for `--wrap` jobs, shells, interpreters.
const GENERIC_NAMES: &[&str] = &["wrap", "sh", "bash", "interactive", "python", "srun", "job"];

/// A job name without its run numbers and dates: lower case, split at anything not a letter or
/// digit, all-digit parts (counters, dates, times) dropped, and trailing digits cut from a run
/// word (`run12` -> `run`). `None` when nothing that names the work is left.
pub fn name_stem(name: &str) -> Option<String> {
    let lower = name.to_ascii_lowercase();
    // A script's extension is not part of its name.
    let lower = lower
        .strip_suffix(".sh")
        .or_else(|| lower.strip_suffix(".sbatch"))
        .or_else(|| lower.strip_suffix(".slurm"))
        .unwrap_or(&lower);
    let mut parts: Vec<&str> = Vec::new();
    for part in lower.split(|c: char| !c.is_ascii_alphanumeric()) {
        if part.is_empty() || part.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let word = part.trim_end_matches(|c: char| c.is_ascii_digit());
        if word.len() < part.len() && RUN_WORDS.contains(&word) {
            parts.push(word);
        } else {
            parts.push(part);
        }
    }
    let stem = parts.join("-");
    (!stem.is_empty() && !GENERIC_NAMES.contains(&stem.as_str()) && stem.len() <= 128)
        .then_some(stem)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id<'a>(script: Option<&'a str>, name: Option<&'a str>) -> Identity<'a> {
        Identity {
            uid: 1000,
            account: "physics",
            name,
            script,
            command: None,
            request: "gpu:1",
        }
    }

    #[test]
    fn run_numbers_and_dates_leave_one_stem() {
        let a = name_stem("train_bert_run12_2026-12-03");
        assert_eq!(a.as_deref(), Some("train-bert-run"));
        assert_eq!(name_stem("Train-BERT-run13-2026-12-04_1730"), a);
        assert_eq!(
            name_stem("resnet50_seed3").as_deref(),
            Some("resnet50-seed")
        );
        assert_eq!(
            name_stem("job.sh"),
            None,
            "Slurm's default name for job.sh says nothing"
        );
        assert_eq!(name_stem("wrap"), None);
        assert_eq!(name_stem("2026-12-03"), None);
        assert_ne!(name_stem("resnet50"), name_stem("resnet18"));
    }

    #[test]
    fn a_script_is_its_commands_not_its_directives_or_layout() {
        let a = "#!/bin/bash\n#SBATCH --job-name=run1\n#SBATCH -t 1:00:00\n\npython train.py --lr 0.1\n";
        let b = "#!/bin/sh\n#SBATCH --job-name=run2\n  python   train.py --lr 0.1  \n# a note\n";
        let c = "#!/bin/bash\npython train.py --lr 0.2\n";
        assert_eq!(script_fingerprint(a), script_fingerprint(b));
        assert_ne!(script_fingerprint(a), script_fingerprint(c));
        assert_eq!(script_fingerprint("#!/bin/sh\n# nothing\n"), None);
    }

    #[test]
    fn keys_back_off_from_script_to_name_to_request_and_name_their_owner() {
        let k = keys(&id(Some("python t.py\n"), Some("bert_run3")));
        let levels: Vec<Level> = k.iter().map(ProfileKey::level).collect();
        assert_eq!(levels, [Level::Script, Level::Name, Level::Request]);
        assert!(k[0].as_str().starts_with("script:1000:"));
        assert_eq!(k[1].as_str(), "name:1000:bert-run");
        assert_eq!(k[2].as_str(), "request:physics:gpu%3A1");
        assert!(k[0].belongs_to(1000, "physics"));
        assert!(!k[0].belongs_to(1001, "physics"));
        assert!(k[2].belongs_to(1001, "physics"));
        assert!(!k[2].belongs_to(1000, "chemistry"));
        // Without a script or a telling name, only the request level is left; without an
        // account, it is the user's own.
        let k = keys(&Identity {
            account: "",
            ..id(None, Some("wrap"))
        });
        assert_eq!(k.len(), 1);
        assert_eq!(k[0].as_str(), "request:uid1000:gpu%3A1");
        assert!(k[0].belongs_to(1000, "physics"));
        assert!(!k[0].belongs_to(1001, "physics"));
    }

    #[test]
    fn odd_account_names_cannot_forge_another_owner_or_break_the_format() {
        let odd = Identity {
            account: "phys:x uid1001",
            ..id(Some("true\n"), Some("n"))
        };
        for k in keys(&odd) {
            assert_eq!(ProfileKey::parse(k.as_str()), Some(k.clone()), "{k}");
            assert!(!k.belongs_to(1001, "other"), "{k}");
        }
        assert_eq!(ProfileKey::parse("script:alice"), None);
        assert_eq!(ProfileKey::parse("bogus:alice:x"), None);
        assert_eq!(ProfileKey::parse("name:alice:a b"), None);
    }
}
