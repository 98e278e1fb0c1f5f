//! One logging backend per process for the `log` facade: inside slurmctld every record goes to
//! Slurm's own log functions (so it lands in SlurmctldLogFile with Slurm's timestamps and
//! levels), in the CLI it goes to stderr. Library code only calls `log::info!`/`log::error!`.

use std::io::Write;
use std::sync::OnceLock;

/// Where a record goes: a function taking the level and the formatted line.
pub type Sink = fn(log::Level, &str);

struct Forward {
    sink: Sink,
}

impl log::Log for Forward {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            (self.sink)(r.level(), &r.args().to_string());
        }
    }

    fn flush(&self) {}
}

static LOGGER: OnceLock<Forward> = OnceLock::new();

/// Installs `sink` as the process's logger at `level`. The first call wins: a plugin loaded
/// twice, or a CLI that already set one, keeps the first sink.
pub fn install(sink: Sink, level: log::LevelFilter) {
    let logger = LOGGER.get_or_init(|| Forward { sink });
    if log::set_logger(logger).is_ok() {
        log::set_max_level(level);
    }
}

fn stderr_sink(level: log::Level, msg: &str) {
    let mut e = std::io::stderr().lock();
    // A closed stderr (a daemon's) must not turn a log line into a failure.
    let _ = match level {
        log::Level::Error => writeln!(e, "heshare: error: {msg}"),
        log::Level::Warn => writeln!(e, "heshare: warning: {msg}"),
        _ => writeln!(e, "heshare: {msg}"),
    };
}

/// The CLI's logger: warnings and errors on stderr (`HESHARE_LOG=info|debug` for more).
pub fn install_stderr() {
    let level = match std::env::var("HESHARE_LOG").as_deref() {
        Ok("debug") => log::LevelFilter::Debug,
        Ok("info") => log::LevelFilter::Info,
        Ok("error") => log::LevelFilter::Error,
        _ => log::LevelFilter::Warn,
    };
    install(stderr_sink, level);
}
