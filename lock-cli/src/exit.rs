//! Exit codes of `lockctl`, and [`Failure`]: an error as the user sees it.

use std::fmt;

use distlock_core::LockError;

/// Success: the command exited 0, or the lock was busy under `--on-busy skip`.
pub(crate) const SUCCESS: u8 = 0;
/// A usage error: bad option or value (`EX_USAGE`).
pub(crate) const USAGE: u8 = 64;
/// A key of the lock holds a value of another type (`EX_DATAERR`).
pub(crate) const DATA: u8 = 65;
/// A file named on the command line cannot be read (`EX_NOINPUT`).
pub(crate) const NO_INPUT: u8 = 66;
/// An output file cannot be created (`EX_CANTCREAT`): `man --dir`.
pub(crate) const CANT_CREATE: u8 = 73;
/// The backend is unreachable, refused the credentials or failed (`EX_UNAVAILABLE`).
pub(crate) const UNAVAILABLE: u8 = 69;
/// An internal error of lockctl (`EX_SOFTWARE`).
pub(crate) const SOFTWARE: u8 = 70;
/// The lock is busy (`EX_TEMPFAIL`); `--conflict-exit-code` changes it.
pub(crate) const BUSY: u8 = 75;
/// The lease was lost while the command ran; `--lost-exit-code` changes it.
pub(crate) const LEASE_LOST: u8 = 80;
/// The command was found but could not be executed (as shells and `timeout` do).
pub(crate) const CANNOT_EXECUTE: u8 = 126;
/// The command was not found (as shells and `timeout` do).
pub(crate) const NOT_FOUND: u8 = 127;

/// The exit code of a process that was ended by signal `signo`, as shells report it.
pub(crate) fn signal_code(signo: i32) -> u8 {
    (128 + signo).clamp(0, 255) as u8
}

/// An error that ends lockctl: a one-line message and an exit code.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: u8,
    message: String,
}

impl Failure {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }

    /// A failure of the lock backend about lock `key` (or a pattern) at `server`.
    ///
    /// Every message names the key and the server; `conflict` is the exit
    /// code of a busy lock.
    pub(crate) fn from_lock(err: &LockError, key: &str, server: &str, conflict: u8) -> Self {
        let code = match err {
            LockError::Busy { .. } | LockError::TimedOut { .. } => conflict,
            LockError::LeaseLost { .. } | LockError::NotHeld { .. } => LEASE_LOST,
            LockError::InvalidKey { .. }
            | LockError::InvalidConfig { .. }
            | LockError::Unsupported { .. } => USAGE,
            LockError::WrongType { .. } | LockError::LayoutConflict { .. } => DATA,
            LockError::ShuttingDown { .. } | LockError::UnsupportedServer { .. } => UNAVAILABLE,
            _ if err.is_backend() => UNAVAILABLE,
            _ => SOFTWARE,
        };
        let message = match err {
            // These already name the lock and the server.
            LockError::Backend { .. } => err.to_string(),
            // These name the server only.
            LockError::Connect { .. }
            | LockError::Authentication { .. }
            | LockError::UnsupportedServer { .. }
            | LockError::LayoutConflict { .. } => {
                format!("lock `{key}`: {err}")
            }
            LockError::InvalidConfig { key: star, reason } if star == "*" => {
                format!("lock `{key}` at {server}: {reason}")
            }
            _ => format!("{err} (server {server})"),
        };
        Failure::new(code, message)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&one_line(&self.message))
    }
}

/// `text` on one line: line breaks and runs of blanks become one space.
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_line() {
        assert_eq!(one_line("a\n  b\r\n\tc "), "a b c");
    }

    #[test]
    fn signal_codes_follow_shells() {
        assert_eq!(signal_code(libc::SIGTERM), 143);
        assert_eq!(signal_code(libc::SIGKILL), 137);
    }

    #[test]
    fn busy_names_key_and_server() {
        let err = LockError::Busy { key: "job".into() };
        let failure = Failure::from_lock(&err, "job", "127.0.0.1:7000", 9);
        assert_eq!(failure.code, 9);
        let text = failure.to_string();
        assert!(
            text.contains("`job`") && text.contains("127.0.0.1:7000"),
            "{text}"
        );
    }
}
