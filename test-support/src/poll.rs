//! Helpers shared by the topologies: short-timeout queries, polling, log sections.

use std::time::{Duration, Instant};

use redis::{Connection, RedisResult, Value};

use crate::RedisServer;

/// Connection and reply timeout of one topology probe; a server that does not answer in time
/// (e.g. a paused one) is treated as not answering.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_millis(1000);
/// Pause between two polls of a topology condition.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Log lines per server in a topology's panic message.
pub(crate) const TOPOLOGY_LOG_LINES: usize = 15;

/// A fresh connection to `server` whose setup, reads and writes time out after
/// [`PROBE_TIMEOUT`].
pub(crate) fn probe_conn(server: &RedisServer) -> RedisResult<Connection> {
    let conn = server.client().get_connection_with_timeout(PROBE_TIMEOUT)?;
    conn.set_read_timeout(Some(PROBE_TIMEOUT))?;
    conn.set_write_timeout(Some(PROBE_TIMEOUT))?;
    Ok(conn)
}

/// Calls `check` every [`POLL_INTERVAL`] until it returns `Ok` or `timeout` has passed; on
/// timeout returns the reason given by the last failed check.
pub(crate) fn wait_until<T>(
    timeout: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    let deadline = Instant::now() + timeout;
    loop {
        match check() {
            Ok(value) => return Ok(value),
            Err(reason) if Instant::now() >= deadline => return Err(reason),
            Err(_) => std::thread::sleep(POLL_INTERVAL),
        }
    }
}

/// The value of `field` in an `INFO`-style reply (`field:value` lines).
pub(crate) fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

/// The first element of the server's `ROLE` reply: `master`, `slave` or `sentinel`.
pub(crate) fn role(server: &RedisServer) -> Result<String, String> {
    let mut conn = probe_conn(server).map_err(|e| format!("port {}: {e}", server.port()))?;
    let reply: Value = redis::cmd("ROLE")
        .query(&mut conn)
        .map_err(|e| format!("ROLE on port {}: {e}", server.port()))?;
    match reply {
        Value::Array(items) => match items.first() {
            Some(Value::BulkString(bytes)) => Ok(String::from_utf8_lossy(bytes).into_owned()),
            Some(Value::SimpleString(s)) => Ok(s.clone()),
            other => Err(format!(
                "unexpected ROLE reply on port {}: {other:?}",
                server.port()
            )),
        },
        other => Err(format!(
            "unexpected ROLE reply on port {}: {other:?}",
            server.port()
        )),
    }
}

/// The log tails of `servers`, each framed and labelled, for a panic message.
pub(crate) fn log_sections<'a>(
    servers: impl IntoIterator<Item = (String, &'a RedisServer)>,
) -> String {
    let mut out = String::new();
    for (label, server) in servers {
        out.push_str(&format!(
            "=== {label} (port {}, pid {}) ===\n{}\n",
            server.port(),
            server.pid(),
            server.log_section_lines(TOPOLOGY_LOG_LINES)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_info_fields() {
        let info = "# Cluster\r\ncluster_state:ok\r\ncluster_slots_assigned:16384\r\n";
        assert_eq!(info_field(info, "cluster_state"), Some("ok"));
        assert_eq!(info_field(info, "cluster_slots_assigned"), Some("16384"));
        assert_eq!(info_field(info, "cluster_slots"), None);
    }
}
