//! What the commands print: writing to stdout, JSON, and the small text
//! pieces more than one command uses. A leaf: it knows no command.

use std::io::Write as _;
use std::time::Duration;

use serde::Serialize;

use crate::exit::{self, Failure};

/// Writes `text` to stdout. A closed pipe (`lockctl list | head -1`) is not
/// an error; other write errors are.
pub(crate) fn print_out(text: &str) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(err) => Err(Failure::new(
            exit::SOFTWARE,
            format!("cannot write to stdout: {err}"),
        )),
    }
}

/// `value` as pretty-printed JSON.
pub(crate) fn to_json<T: Serialize>(value: &T) -> Result<String, Failure> {
    serde_json::to_string_pretty(value)
        .map_err(|err| Failure::new(exit::SOFTWARE, format!("cannot write JSON: {err}")))
}

/// `"1 reader"`, `"2 readers"`.
pub(crate) fn count(n: usize, what: &str) -> String {
    match n {
        1 => format!("1 {what}"),
        n => format!("{n} {what}s"),
    }
}

/// Whole milliseconds, as the JSON fields `*_ms` give them.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_millis() {
        assert_eq!(count(1, "reader"), "1 reader");
        assert_eq!(count(0, "holder"), "0 holders");
        assert_eq!(millis(Duration::from_micros(2_500)), 2);
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }
}
