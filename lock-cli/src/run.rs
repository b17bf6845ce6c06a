//! `lockctl run`: acquire, run the command, renew while it runs, release.

use std::ffi::OsString;
use std::time::Duration;

use distlock_core::{Lock, LockClient, LockError};
use tokio::process::Child;

use crate::child::{self, Signals};
use crate::cli::{ConnectionArgs, OnBusy, Primitive, RunArgs};
use crate::connect::{connect, server_of};
use crate::exit::{self, Failure};
use crate::output::count;

/// Runs `args.command` under lock `args.key`; returns lockctl's exit code.
pub(crate) async fn run(connection: &ConnectionArgs, args: RunArgs) -> Result<u8, Failure> {
    // Listen before anything else: from here on a SIGTERM is handled (the
    // lock released, the command stopped) instead of killing lockctl.
    let mut signals = Signals::new()
        .map_err(|err| Failure::new(exit::SOFTWARE, format!("cannot listen for signals: {err}")))?;
    let key = args.key.as_str();
    let primitive = args.primitive();
    if let Primitive::Permits { total, take } = primitive {
        if take > total {
            return Err(Failure::new(
                exit::USAGE,
                format!(
                    "cannot take {take} permits of semaphore `{key}` of {total}: \
                     --take must be at most --permits"
                ),
            ));
        }
    }
    let client = tokio::select! {
        client = connect(connection, key, Some(args.lease), true) => client?,
        signo = signals.recv() => return Err(interrupted(signo, key, &server_of(&connection.url))),
    };
    let server = client.server().to_owned();

    let lock = lock_of(&client, key, primitive).options(args.lock_options());
    let acquired = tokio::select! {
        acquired = lock.acquire() => acquired,
        signo = signals.recv() => return Err(interrupted(signo, key, &server)),
    };
    let guard = match acquired {
        Ok(guard) => guard,
        Err(LockError::Busy { .. } | LockError::TimedOut { .. })
            if args.on_busy == OnBusy::Skip =>
        {
            return Ok(exit::SUCCESS)
        }
        Err(err @ (LockError::Busy { .. } | LockError::TimedOut { .. })) => {
            let holder = held_by(&client, key, primitive).await;
            return Err(Failure::new(
                args.conflict_exit_code,
                format!("{err} (server {server}{holder})"),
            ));
        }
        Err(err) => {
            return Err(Failure::from_lock(
                &err,
                key,
                &server,
                args.conflict_exit_code,
            ))
        }
    };

    let command = display_command(&args.command);
    let env = [
        ("LOCK_KEY", key.to_owned()),
        ("LOCK_FENCING_TOKEN", guard.fencing_token().to_string()),
    ];
    let mut child = match child::spawn(&args.command, &env) {
        Ok(child) => child,
        Err(err) => {
            let _ = guard.release().await;
            let code = match err.kind() {
                std::io::ErrorKind::NotFound => exit::NOT_FOUND,
                _ => exit::CANNOT_EXECUTE,
            };
            return Err(Failure::new(
                code,
                format!("cannot run `{command}`: {err} (lock `{key}` at {server} released)"),
            ));
        }
    };

    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            signo = signals.recv() => child::signal_group(&child, signo),
            () = guard.lost() => {
                eprintln!(
                    "lockctl: lost the lease of lock `{key}` at {server} while `{command}` was running; \
                     terminating it (SIGTERM, then SIGKILL after {})",
                    humantime::format_duration(args.kill_after)
                );
                terminate(&mut child, args.kill_after).await;
                // Stops the renewals; the lock is not ours to delete any more.
                let _ = guard.release().await;
                return Ok(args.lost_exit_code);
            }
        }
    };
    let status = match status {
        Ok(status) => status,
        Err(err) => {
            let _ = guard.release().await;
            return Err(Failure::new(
                exit::SOFTWARE,
                format!(
                    "waiting for `{command}` failed: {err} (lock `{key}` at {server} released)"
                ),
            ));
        }
    };
    let code = child::exit_code(status);
    match guard.release().await {
        Ok(()) => Ok(code),
        Err(err @ (LockError::LeaseLost { .. } | LockError::NotHeld { .. })) => Err(Failure::new(
            args.lost_exit_code,
            format!(
                "{err} (server {server}); `{command}` exited with {code} but may not have run alone"
            ),
        )),
        Err(err) => {
            // The command ran under the lock; only the clean-up failed, and
            // the lease ends it anyway.
            eprintln!(
                "lockctl: {}; the lock expires within {}",
                exit::one_line(&err.to_string()),
                humantime::format_duration(args.lease)
            );
            Ok(code)
        }
    }
}

/// SIGTERM to the command's group, then SIGKILL if it is still running
/// after `grace`; returns once the command has exited.
async fn terminate(child: &mut Child, grace: Duration) {
    child::signal_group(child, libc::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        child::signal_group(child, libc::SIGKILL);
        let _ = child.wait().await;
    }
}

fn interrupted(signo: i32, key: &str, server: &str) -> Failure {
    Failure::new(
        exit::signal_code(signo),
        format!(
            "interrupted by {} while waiting for lock `{key}` at {server}",
            child::signal_name(signo)
        ),
    )
}

/// The lock `primitive` of name `key`.
fn lock_of(client: &LockClient, key: &str, primitive: Primitive) -> Lock {
    match primitive {
        Primitive::Lock => client.lock(key),
        Primitive::Read => client.read_write_lock(key).read(),
        Primitive::Write => client.read_write_lock(key).write(),
        Primitive::Fair => client.fair_lock(key),
        Primitive::Permits { total, take } => client.semaphore(key, total).permits(take),
    }
}

/// Who keeps lock `primitive` of `key` busy, when that can be found out,
/// for messages: `", held by <owner>"`, `", 2 readers"`, ...
async fn held_by(client: &LockClient, key: &str, primitive: Primitive) -> String {
    let held = |owner: &str| format!(", held by {owner}");
    let detail = match primitive {
        Primitive::Lock => client
            .admin()
            .inspect(key)
            .await
            .map(|info| info.holder.map(|h| held(&h.owner))),
        Primitive::Fair => client.admin().inspect_fair(key).await.map(|info| {
            let queued = match info.queue.len() {
                0 => String::new(),
                n => format!(", {n} queued"),
            };
            Some(format!(
                "{}{queued}",
                info.holder.map(|h| held(&h.owner)).unwrap_or_default()
            ))
        }),
        Primitive::Read | Primitive::Write => read_write_detail(client, key).await,
        Primitive::Permits { total, .. } => {
            client.admin().inspect_semaphore(key).await.map(|info| {
                Some(format!(
                    ", {} of {total} permits in use by {}",
                    info.in_use,
                    count(info.holders.len(), "holder")
                ))
            })
        }
    };
    detail.ok().flatten().unwrap_or_default()
}

/// What keeps read-write lock `key` busy, for messages.
async fn read_write_detail(client: &LockClient, key: &str) -> Result<Option<String>, LockError> {
    let info = client.admin().inspect_read_write(key).await?;
    let mut parts = Vec::new();
    if let Some(writer) = &info.writer {
        parts.push(format!("written by {}", writer.owner));
    }
    if !info.readers.is_empty() {
        parts.push(format!("read by {}", count(info.readers.len(), "reader")));
    }
    if !info.waiting_writers.is_empty() {
        parts.push(format!(
            "{} waiting (writers go first)",
            count(info.waiting_writers.len(), "writer")
        ));
    }
    Ok((!parts.is_empty()).then(|| format!(", {}", parts.join(", "))))
}

/// The command line, for messages, cut to a readable length.
pub(crate) fn display_command(command: &[OsString]) -> String {
    const SHOWN: usize = 80;
    let text = exit::one_line(
        &command
            .iter()
            .map(|arg| arg.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" "),
    );
    match text.char_indices().nth(SHOWN) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_commands_are_cut() {
        let command: Vec<OsString> = vec!["sh".into(), "-c".into(), "x".repeat(200).into()];
        let shown = display_command(&command);
        assert!(shown.starts_with("sh -c xxx") && shown.ends_with("..."));
        assert_eq!(shown.chars().count(), 83);
    }
}
