//! Spawning child processes that die with the test process.
//!
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, not the process.
//! Test harnesses run each test on its own short-lived thread, so children are forked from one
//! dedicated thread that lives as long as the process: the kernel then sends them `SIGKILL`
//! exactly when the test process goes away (normal exit, panic=abort, `SIGKILL`, Ctrl-C).

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::OnceLock;

type Request = (Command, mpsc::Sender<io::Result<Child>>);

/// Spawns `command` from the long-lived spawner thread with a parent-death signal of `SIGKILL`.
pub(crate) fn spawn_tied_to_process(mut command: Command) -> io::Result<Child> {
    static SPAWNER: OnceLock<mpsc::Sender<Request>> = OnceLock::new();

    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the forked child before exec and only calls the
    // async-signal-safe functions prctl(2) and getppid(2).
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl; then nobody would kill us.
            if libc::getppid() != parent {
                return Err(io::Error::other("parent exited before exec"));
            }
            Ok(())
        });
    }

    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("lock-test-support-spawner".to_owned())
            .spawn(move || {
                for (mut command, reply) in rx {
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("cannot start the lock-test-support spawner thread");
        tx
    });

    let (reply_tx, reply_rx) = mpsc::channel();
    spawner
        .send((command, reply_tx))
        .map_err(|_| io::Error::other("the spawner thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| io::Error::other("the spawner thread dropped the request"))?
}
