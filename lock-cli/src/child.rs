//! The command run under the lock: spawning it in a process group of its
//! own, signalling that group, and the signals lockctl forwards to it.
#![allow(unsafe_code)] // libc calls: kill(2), prctl(2) and getppid(2).

use std::ffi::OsString;
use std::io;
use std::process::ExitStatus;

use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, Signal, SignalKind};

/// The signals lockctl forwards to the command.
pub(crate) const FORWARDED: [i32; 4] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT];

/// Listens for the [`FORWARDED`] signals; from its creation on, they no
/// longer end lockctl.
pub(crate) struct Signals {
    streams: Vec<(i32, Signal)>,
}

impl Signals {
    pub(crate) fn new() -> io::Result<Self> {
        let streams = FORWARDED
            .iter()
            .map(|&signo| Ok((signo, signal(SignalKind::from_raw(signo))?)))
            .collect::<io::Result<_>>()?;
        Ok(Signals { streams })
    }

    /// The next signal received.
    ///
    /// # Cancel safety
    /// Cancel safe: a signal that arrives while no one waits is kept.
    pub(crate) async fn recv(&mut self) -> i32 {
        std::future::poll_fn(|cx| {
            for (signo, stream) in &mut self.streams {
                if stream.poll_recv(cx).is_ready() {
                    return std::task::Poll::Ready(*signo);
                }
            }
            std::task::Poll::Pending
        })
        .await
    }
}

/// Spawns `command` with `env` added, in a new process group whose id is its
/// pid. On Linux the command gets SIGTERM when lockctl dies, so it does not
/// outlive the renewals of its lock.
pub(crate) fn spawn(command: &[OsString], env: &[(&str, String)]) -> io::Result<Child> {
    spawn_with_death_signal(command, env, libc::SIGTERM)
}

/// [`spawn`], with `death_signal` as the signal the command gets (on Linux)
/// when lockctl dies.
pub(crate) fn spawn_with_death_signal(
    command: &[OsString],
    env: &[(&str, String)],
    death_signal: i32,
) -> io::Result<Child> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no command given"))?;
    let mut cmd = Command::new(program);
    cmd.args(args).process_group(0);
    for (name, value) in env {
        cmd.env(name, value);
    }
    #[cfg(target_os = "linux")]
    {
        let parent = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
        // SAFETY: the closure runs in the forked child before exec and only
        // calls the async-signal-safe prctl(2) and getppid(2).
        unsafe {
            cmd.pre_exec(move || {
                // The signal is tied to the thread that forks: lockctl runs
                // on one thread (a current-thread runtime) that lives until
                // it exits.
                if libc::prctl(libc::PR_SET_PDEATHSIG, death_signal) == -1 {
                    return Err(io::Error::last_os_error());
                }
                // lockctl died before prctl took effect.
                if libc::getppid() != parent {
                    return Err(io::Error::other(
                        "lockctl exited while starting the command",
                    ));
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = death_signal;
    cmd.spawn()
}

/// Sends `signo` to the process group of `child` (the command and whatever it
/// started). Does nothing once the child has been reaped, so a recycled pid
/// is never signalled.
pub(crate) fn signal_group(child: &Child, signo: i32) {
    let Some(pid) = child.id() else { return };
    let Ok(pgid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) has no memory-safety preconditions. The group exists
    // at least as long as its leader is not reaped, which `child.id()`
    // being `Some` shows. ESRCH (the group just exited) needs no handling.
    unsafe { libc::kill(-pgid, signo) };
}

/// The exit code to report for a command that ended with `status`: its own
/// code, or 128+N for signal N, as shells do.
pub(crate) fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => (code & 0xff) as u8,
        (None, Some(signo)) => crate::exit::signal_code(signo),
        (None, None) => crate::exit::SOFTWARE,
    }
}

/// A signal's name for messages (`SIGTERM`), or its number.
pub(crate) fn signal_name(signo: i32) -> String {
    match signo {
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGINT => "SIGINT".into(),
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGQUIT => "SIGQUIT".into(),
        libc::SIGKILL => "SIGKILL".into(),
        other => format!("signal {other}"),
    }
}
