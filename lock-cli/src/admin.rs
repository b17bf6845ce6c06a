//! The operator's commands: `status`, `list` and `release --force`.

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

use lock_core::LockInfo;
use serde::Serialize;

use crate::cli::{ConnectionArgs, ListArgs, ReleaseArgs, StatusArgs};
use crate::connect::{connect, server_of};
use crate::exit::{self, Failure};

/// One lock as `status` and `list` print it (the JSON shape).
#[derive(Debug, Serialize)]
struct LockReport {
    name: String,
    key: String,
    server: String,
    held: bool,
    owner: Option<String>,
    client_id: Option<String>,
    /// Holds as the backend records them (1 or 0); nested holds are counted
    /// in the holder's process.
    holds: usize,
    ttl_ms: Option<u64>,
    fencing_token: Option<u64>,
    last_fencing_token: Option<u64>,
}

impl LockReport {
    fn new(info: LockInfo, server: &str) -> Self {
        let holder = info.holder.as_ref();
        LockReport {
            server: server.to_owned(),
            held: holder.is_some(),
            owner: holder.map(|h| h.owner.clone()),
            client_id: holder.map(|h| h.client_id().to_owned()),
            holds: holder.map_or(0, |h| h.holds),
            ttl_ms: holder.and_then(|h| h.ttl).map(|ttl| ttl.as_millis() as u64),
            fencing_token: holder.map(|h| h.fencing_token),
            last_fencing_token: info.last_fencing_token,
            name: info.name,
            key: info.key,
        }
    }
}

/// `lockctl status KEY`.
pub(crate) async fn status(connection: &ConnectionArgs, args: StatusArgs) -> Result<u8, Failure> {
    let client = connect(connection, &args.key, None).await?;
    let info = client
        .inspect(&args.key)
        .await
        .map_err(|err| Failure::from_lock(&err, &args.key, client.server(), exit::USAGE))?;
    let report = LockReport::new(info, client.server());
    if args.json {
        print_out(&format!("{}\n", to_json(&report)?))?;
        return Ok(exit::SUCCESS);
    }
    let mut out = String::new();
    let mut line = |label: &str, value: &str| {
        let _ = writeln!(out, "{label:<11} {value}");
    };
    line("lock", &report.name);
    line("key", &report.key);
    line("server", &report.server);
    line("state", if report.held { "held" } else { "free" });
    if report.held {
        line("owner", report.owner.as_deref().unwrap_or("-"));
        line("client", report.client_id.as_deref().unwrap_or("-"));
        line(
            "holds",
            &format!(
                "{} (as the backend records it; nested holds are counted in the holder's process)",
                report.holds
            ),
        );
        line("ttl", &ttl_text(report.ttl_ms));
        line("token", &number_text(report.fencing_token));
    }
    line("last token", &number_text(report.last_fencing_token));
    print_out(&out)?;
    Ok(exit::SUCCESS)
}

/// `lockctl list`.
pub(crate) async fn list(connection: &ConnectionArgs, args: ListArgs) -> Result<u8, Failure> {
    let pattern = format!("{}*", args.prefix);
    let client = connect(connection, &pattern, None).await?;
    let locks = client
        .list(&args.prefix)
        .await
        .map_err(|err| Failure::from_lock(&err, &pattern, client.server(), exit::USAGE))?;
    let reports: Vec<LockReport> = locks
        .into_iter()
        .map(|info| LockReport::new(info, client.server()))
        .collect();
    if args.json {
        print_out(&format!("{}\n", to_json(&reports)?))?;
        return Ok(exit::SUCCESS);
    }
    if reports.is_empty() {
        eprintln!(
            "lockctl: no locks `{pattern}` held at {} (key prefix `{}`)",
            client.server(),
            client.key_prefix()
        );
        return Ok(exit::SUCCESS);
    }
    let width = reports
        .iter()
        .map(|r| r.name.len())
        .max()
        .unwrap_or(0)
        .max(4);
    let mut out = format!("{:<width$}  {:>10}  {:>8}  OWNER\n", "NAME", "TTL", "TOKEN");
    for report in &reports {
        let _ = writeln!(
            out,
            "{:<width$}  {:>10}  {:>8}  {}",
            report.name,
            ttl_text(report.ttl_ms),
            number_text(report.fencing_token),
            report.owner.as_deref().unwrap_or("-"),
        );
    }
    print_out(&out)?;
    Ok(exit::SUCCESS)
}

/// `lockctl release --force KEY`.
pub(crate) async fn release(connection: &ConnectionArgs, args: ReleaseArgs) -> Result<u8, Failure> {
    if !args.force {
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "refusing to release lock `{}` at {} without --force: it deletes the lock whoever holds it",
                args.key,
                server_of(&connection.url)
            ),
        ));
    }
    let client = connect(connection, &args.key, None).await?;
    let failure = |err: lock_core::LockError| {
        Failure::from_lock(&err, &args.key, client.server(), exit::USAGE)
    };
    // Who held it, for the operator's record; the release itself does not
    // depend on it.
    let holder = client.inspect(&args.key).await.map_err(failure)?.holder;
    let released = client.force_release(&args.key).await.map_err(failure)?;
    let line = match (released, holder) {
        (true, Some(holder)) => format!(
            "released lock `{}` at {} (held by {}, fencing token {})\n",
            args.key,
            client.server(),
            holder.owner,
            holder.fencing_token
        ),
        (true, None) => format!("released lock `{}` at {}\n", args.key, client.server()),
        (false, _) => format!("lock `{}` at {} was not held\n", args.key, client.server()),
    };
    print_out(&line)?;
    Ok(exit::SUCCESS)
}

fn ttl_text(ttl_ms: Option<u64>) -> String {
    match ttl_ms {
        Some(ms) => humantime::format_duration(Duration::from_millis(ms)).to_string(),
        None => "no expiry".into(),
    }
}

fn number_text(number: Option<u64>) -> String {
    number.map_or_else(|| "none".into(), |n| n.to_string())
}

/// Writes `text` to stdout. A closed pipe (`lockctl list | head -1`) is not
/// an error; other write errors are.
fn print_out(text: &str) -> Result<(), Failure> {
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

fn to_json<T: Serialize>(value: &T) -> Result<String, Failure> {
    serde_json::to_string_pretty(value)
        .map_err(|err| Failure::new(exit::SOFTWARE, format!("cannot write JSON: {err}")))
}
