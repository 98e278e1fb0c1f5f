//! Running a program as root code must: without a shell, with an environment made here from
//! nothing but a fixed `PATH` and what the caller names, and with a deadline. The node helper runs
//! the MPS control this way, and the profiles update runs Slurm's accounting clients.

pub use crate::node::secure::COMMAND_PATH;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("{program}: cannot run: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{program} {args}: no answer within {secs:.1} s (killed)")]
    Timeout {
        program: String,
        args: String,
        secs: f64,
    },
    #[error("{program} {args}: exit status {status}: {output}")]
    Failed {
        program: String,
        args: String,
        status: String,
        output: String,
    },
}

/// What a finished command printed.
#[derive(Debug)]
pub struct Output {
    pub stdout: String,
    pub stderr: String,
}

/// Runs `program args` with `env` and a fixed `PATH` as its whole environment, `stdin` written to
/// it, killed at `timeout`.
/// `detach` is for programs that fork a daemon: their output is not waited for, since the
/// daemon keeps the pipes open.
pub fn run(
    program: &Path,
    args: &[&str],
    env: &[(&str, &Path)],
    stdin: Option<&str>,
    timeout: Duration,
    detach: bool,
) -> Result<Output, CommandError> {
    let name = program.display().to_string();
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(if detach {
            Stdio::null()
        } else {
            Stdio::piped()
        })
        .stderr(if detach {
            Stdio::null()
        } else {
            Stdio::piped()
        });
    cmd.env_clear().env("PATH", COMMAND_PATH);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().map_err(|source| CommandError::Spawn {
        program: name.clone(),
        source,
    })?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // A program that exits without reading gives EPIPE: its exit status tells the rest.
        let _ = pipe.write_all(input.as_bytes());
    }
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if start.elapsed() >= timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(CommandError::Timeout {
                    program: name,
                    args: args.join(" "),
                    secs: timeout.as_secs_f64(),
                });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(source) => {
                return Err(CommandError::Spawn {
                    program: name,
                    source,
                });
            }
        }
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut stdout);
    }
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    if !status.success() {
        let output = format!("{} {}", stdout.trim(), stderr.trim());
        return Err(CommandError::Failed {
            program: name,
            args: args.join(" "),
            status: status.to_string(),
            output: output.trim().to_owned(),
        });
    }
    Ok(Output { stdout, stderr })
}
