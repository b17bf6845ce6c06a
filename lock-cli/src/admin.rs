//! The operator's commands: `status`, `list` and `release --force`, of a
//! plain lock or (`--fair`, `--read-write`, `--semaphore`) of another lock of
//! the family.

use std::fmt::Write as _;
use std::time::Duration;

use distlock_core::{
    FairLockInfo, LockClient, LockError, LockHolder, LockInfo, QueuedWaiter, ReadWriteLockInfo,
    SemaphoreInfo,
};
use serde::Serialize;

use crate::cli::{ConnectionArgs, Family, LayoutsArgs, ListArgs, ReleaseArgs, StatusArgs};
use crate::connect::{connect, layout_of, server_of};
use crate::exit::{self, Failure};
use crate::output::{count, millis, print_out, to_json};

/// One lock as `status` and `list` print it (the JSON shape).
#[derive(Debug, Serialize)]
struct LockReport {
    name: String,
    /// `fair` for a fair lock; absent for a plain lock.
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
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
        Self::of(
            info.name,
            info.key,
            server,
            info.holder.as_ref(),
            info.last_fencing_token,
        )
    }

    fn of(
        name: String,
        key: String,
        server: &str,
        holder: Option<&LockHolder>,
        last_fencing_token: Option<u64>,
    ) -> Self {
        LockReport {
            kind: None,
            server: server.to_owned(),
            held: holder.is_some(),
            owner: holder.map(|h| h.owner.clone()),
            client_id: holder.map(|h| h.client_id().to_owned()),
            holds: holder.map_or(0, |h| h.holds),
            ttl_ms: holder.and_then(|h| h.ttl).map(millis),
            fencing_token: holder.map(|h| h.fencing_token),
            last_fencing_token,
            name,
            key,
        }
    }

    /// The text lines of `status` from `state` on (the holder, if any).
    fn holder_lines(&self, line: &mut dyn FnMut(&str, &str)) {
        line("state", if self.held { "held" } else { "free" });
        if self.held {
            line("owner", self.owner.as_deref().unwrap_or("-"));
            line("client", self.client_id.as_deref().unwrap_or("-"));
            line(
                "holds",
                &format!(
                    "{} (as the backend records it; nested holds are counted in the holder's process)",
                    self.holds
                ),
            );
            line("ttl", &ttl_text(self.ttl_ms));
            line("token", &number_text(self.fencing_token));
        }
    }
}

/// A fair lock as `status --fair` prints it: the plain lock's fields, then
/// the queue (the JSON shape).
#[derive(Debug, Serialize)]
struct FairReport {
    #[serde(flatten)]
    lock: LockReport,
    /// The waiters, the next holder first.
    queue: Vec<WaiterReport>,
}

/// A queued waiter, or a waiting writer.
#[derive(Debug, Serialize)]
struct WaiterReport {
    owner: String,
    client_id: String,
    /// How long it keeps its place without another attempt.
    place_ttl_ms: u64,
}

impl WaiterReport {
    fn new(waiter: &QueuedWaiter) -> Self {
        WaiterReport {
            owner: waiter.owner.clone(),
            client_id: waiter.client_id().to_owned(),
            place_ttl_ms: millis(waiter.place_ttl),
        }
    }
}

impl FairReport {
    fn new(info: FairLockInfo, server: &str) -> Self {
        let lock = LockReport::of(
            info.name,
            info.key,
            server,
            info.holder.as_ref(),
            info.last_fencing_token,
        );
        FairReport {
            lock: LockReport {
                kind: Some("fair"),
                ..lock
            },
            queue: info.queue.iter().map(WaiterReport::new).collect(),
        }
    }
}

/// A read-write lock as `status --read-write` prints it (the JSON shape).
#[derive(Debug, Serialize)]
struct ReadWriteReport {
    name: String,
    kind: &'static str,
    /// The stem of its keys (`<key>:read`, `<key>:write`, `<key>:wait`).
    key: String,
    server: String,
    /// `free`, `read` (by the readers) or `write` (by the writer).
    state: &'static str,
    /// The readers, the one whose lease ends first first.
    readers: Vec<ReaderReport>,
    writer: Option<WriterReport>,
    /// The writers waiting, which keep new readers out.
    waiting_writers: Vec<WaiterReport>,
    last_fencing_token: Option<u64>,
}

#[derive(Debug, Serialize)]
struct ReaderReport {
    owner: String,
    client_id: String,
    ttl_ms: u64,
}

#[derive(Debug, Serialize)]
struct WriterReport {
    owner: String,
    client_id: String,
    ttl_ms: Option<u64>,
    fencing_token: u64,
}

impl ReadWriteReport {
    fn new(info: ReadWriteLockInfo, server: &str) -> Self {
        let state = if info.writer.is_some() {
            "write"
        } else if !info.readers.is_empty() {
            "read"
        } else {
            "free"
        };
        ReadWriteReport {
            kind: "read_write",
            server: server.to_owned(),
            state,
            readers: info
                .readers
                .iter()
                .map(|reader| ReaderReport {
                    owner: reader.owner.clone(),
                    client_id: reader.client_id().to_owned(),
                    ttl_ms: millis(reader.ttl),
                })
                .collect(),
            writer: info.writer.as_ref().map(|writer| WriterReport {
                owner: writer.owner.clone(),
                client_id: writer.client_id().to_owned(),
                ttl_ms: writer.ttl.map(millis),
                fencing_token: writer.fencing_token,
            }),
            waiting_writers: info.waiting_writers.iter().map(WaiterReport::new).collect(),
            last_fencing_token: info.last_fencing_token,
            name: info.name,
            key: info.key,
        }
    }
}

/// A semaphore as `status --semaphore` prints it (the JSON shape).
#[derive(Debug, Serialize)]
struct SemaphoreReport {
    name: String,
    kind: &'static str,
    key: String,
    server: String,
    /// The permits in use (the total is not stored: every user passes it).
    in_use: u32,
    /// The holders, the one whose lease ends first first.
    holders: Vec<PermitReport>,
    last_fencing_token: Option<u64>,
}

#[derive(Debug, Serialize)]
struct PermitReport {
    owner: String,
    client_id: String,
    permits: u32,
    ttl_ms: u64,
}

impl SemaphoreReport {
    fn new(info: SemaphoreInfo, server: &str) -> Self {
        SemaphoreReport {
            kind: "semaphore",
            server: server.to_owned(),
            in_use: info.in_use,
            holders: info
                .holders
                .iter()
                .map(|holder| PermitReport {
                    owner: holder.owner.clone(),
                    client_id: holder.client_id().to_owned(),
                    permits: holder.permits,
                    ttl_ms: millis(holder.ttl),
                })
                .collect(),
            last_fencing_token: info.last_fencing_token,
            name: info.name,
            key: info.key,
        }
    }
}

/// `lockctl status KEY [--fair | --read-write | --semaphore]`.
pub(crate) async fn status(connection: &ConnectionArgs, args: StatusArgs) -> Result<u8, Failure> {
    let client = connect(connection, &args.key, None, false).await?;
    let failure =
        |err: LockError| Failure::from_lock(&err, &args.key, client.server(), exit::USAGE);
    let server = client.server();
    let key = args.key.as_str();
    let (json, text) = match args.family.family() {
        Family::Lock => {
            let report =
                LockReport::new(client.admin().inspect(key).await.map_err(failure)?, server);
            (to_json(&report)?, lock_text(&report))
        }
        Family::Fair => {
            let report = FairReport::new(
                client.admin().inspect_fair(key).await.map_err(failure)?,
                server,
            );
            (to_json(&report)?, fair_text(&report))
        }
        Family::ReadWrite => {
            let info = client
                .admin()
                .inspect_read_write(key)
                .await
                .map_err(failure)?;
            let report = ReadWriteReport::new(info, server);
            (to_json(&report)?, read_write_text(&report))
        }
        Family::Semaphore => {
            let info = client
                .admin()
                .inspect_semaphore(key)
                .await
                .map_err(failure)?;
            let report = SemaphoreReport::new(info, server);
            (to_json(&report)?, semaphore_text(&report))
        }
    };
    if args.json {
        print_out(&format!("{json}\n"))?;
    } else {
        print_out(&text)?;
    }
    Ok(exit::SUCCESS)
}

/// Text lines `label  value`, the labels in a column.
fn lines(fill: impl FnOnce(&mut dyn FnMut(&str, &str))) -> String {
    let mut out = String::new();
    fill(&mut |label: &str, value: &str| {
        let _ = writeln!(out, "{label:<11} {value}");
    });
    out
}

fn lock_text(report: &LockReport) -> String {
    lines(|line| {
        line("lock", &report.name);
        line("key", &report.key);
        line("server", &report.server);
        report.holder_lines(line);
        line("last token", &number_text(report.last_fencing_token));
    })
}

fn fair_text(report: &FairReport) -> String {
    let lock = &report.lock;
    lines(|line| {
        line("lock", &lock.name);
        line("kind", "fair lock");
        line("key", &lock.key);
        line("server", &lock.server);
        lock.holder_lines(line);
        line("queue", &format!("{} waiting", report.queue.len()));
        for (i, waiter) in report.queue.iter().enumerate() {
            line("", &format!("{}. {}", i + 1, waiter_text(waiter)));
        }
        line("last token", &number_text(lock.last_fencing_token));
    })
}

fn read_write_text(report: &ReadWriteReport) -> String {
    lines(|line| {
        line("lock", &report.name);
        line("kind", "read-write lock");
        line("key", &report.key);
        line("server", &report.server);
        let state = match report.state {
            "write" => "write-held".to_owned(),
            "read" => format!("read-held by {}", count(report.readers.len(), "reader")),
            other => other.to_owned(),
        };
        line("state", &state);
        match &report.writer {
            Some(writer) => line(
                "writer",
                &format!(
                    "{}  ttl {}  token {}",
                    writer.owner,
                    ttl_text(writer.ttl_ms),
                    writer.fencing_token
                ),
            ),
            None => line("writer", "none"),
        }
        line("readers", &report.readers.len().to_string());
        for reader in &report.readers {
            line(
                "",
                &format!("{}  ttl {}", reader.owner, ttl_text(Some(reader.ttl_ms))),
            );
        }
        line(
            "waiting",
            &format!(
                "{} (new readers wait while a writer waits)",
                count(report.waiting_writers.len(), "writer")
            ),
        );
        for waiter in &report.waiting_writers {
            line("", &waiter_text(waiter));
        }
        line("last token", &number_text(report.last_fencing_token));
    })
}

fn semaphore_text(report: &SemaphoreReport) -> String {
    lines(|line| {
        line("lock", &report.name);
        line("kind", "semaphore");
        line("key", &report.key);
        line("server", &report.server);
        line(
            "in use",
            &format!(
                "{} by {}",
                count(report.in_use as usize, "permit"),
                count(report.holders.len(), "holder")
            ),
        );
        for holder in &report.holders {
            line(
                "",
                &format!(
                    "{}  {}  ttl {}",
                    holder.owner,
                    count(holder.permits as usize, "permit"),
                    ttl_text(Some(holder.ttl_ms))
                ),
            );
        }
        line("last token", &number_text(report.last_fencing_token));
    })
}

fn waiter_text(waiter: &WaiterReport) -> String {
    format!(
        "{}  place kept for {}",
        waiter.owner,
        ttl_text(Some(waiter.place_ttl_ms))
    )
}

/// `lockctl list`.
pub(crate) async fn list(connection: &ConnectionArgs, args: ListArgs) -> Result<u8, Failure> {
    let pattern = format!("{}*", args.prefix);
    let client = connect(connection, &pattern, None, false).await?;
    let locks = client
        .admin()
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
    // Tokens are the server's clock in microseconds (16 digits).
    let token_width = reports
        .iter()
        .map(|r| number_text(r.fencing_token).len())
        .max()
        .unwrap_or(0)
        .max(5);
    let mut out = format!(
        "{:<width$}  {:>10}  {:>token_width$}  OWNER\n",
        "NAME", "TTL", "TOKEN"
    );
    for report in &reports {
        let _ = writeln!(
            out,
            "{:<width$}  {:>10}  {:>token_width$}  {}",
            report.name,
            ttl_text(report.ttl_ms),
            number_text(report.fencing_token),
            report.owner.as_deref().unwrap_or("-"),
        );
    }
    print_out(&out)?;
    Ok(exit::SUCCESS)
}

/// `lockctl layouts`: the layouts recorded in the store's registry, one a
/// line (`native`, `redisson`); exit status [`exit::DATA`] with a warning
/// when there is more than one.
pub(crate) async fn layouts(connection: &ConnectionArgs, args: LayoutsArgs) -> Result<u8, Failure> {
    let client = connect(connection, "*", None, false).await?;
    if let Some(forget) = args.forget {
        let layout = layout_of(forget);
        let forgotten = client
            .admin()
            .forget_layout(layout)
            .await
            .map_err(|err| Failure::from_lock(&err, "*", client.server(), exit::USAGE))?;
        eprintln!(
            "lockctl: {} layout {} at {}",
            if forgotten { "forgot" } else { "no record of" },
            layout.registry_name(),
            client.server()
        );
    }
    let layouts = client
        .admin()
        .layouts()
        .await
        .map_err(|err| Failure::from_lock(&err, "*", client.server(), exit::USAGE))?;
    let names: Vec<&str> = layouts.iter().map(|l| l.registry_name()).collect();
    if args.json {
        print_out(&format!("{}\n", to_json(&names)?))?;
    } else if names.is_empty() {
        eprintln!(
            "lockctl: no layout recorded at {} (no client connected in the last day, or \
             only Redisson's own clients)",
            client.server()
        );
    } else {
        print_out(&names.iter().map(|n| format!("{n}\n")).collect::<String>())?;
    }
    if names.len() > 1 {
        eprintln!(
            "lockctl: warning: clients of {} layouts use {}: a lock name taken in two layouts \
             is two locks that do not exclude each other (and two token sequences); keep one \
             layout per store, or give each layout its own key prefix and names",
            names.len(),
            client.server()
        );
        return Ok(exit::DATA);
    }
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
    let client = connect(connection, &args.key, None, false).await?;
    let failure = |err: distlock_core::LockError| {
        Failure::from_lock(&err, &args.key, client.server(), exit::USAGE)
    };
    let family = args.family.family();
    if family != Family::Lock {
        let line = release_family(&client, &args.key, family)
            .await
            .map_err(failure)?;
        print_out(&line)?;
        return Ok(exit::SUCCESS);
    }
    // Who held it, for the operator's record; the release itself does not
    // depend on it.
    let holder = client
        .admin()
        .inspect(&args.key)
        .await
        .map_err(failure)?
        .holder;
    let released = client
        .admin()
        .force_release(&args.key)
        .await
        .map_err(failure)?;
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

/// `release --force` of a fair lock, read-write lock or semaphore: what it
/// deleted, as one line for the operator's record (who held it is read
/// first; the release itself does not depend on it).
async fn release_family(
    client: &LockClient,
    key: &str,
    family: Family,
) -> Result<String, LockError> {
    let server = client.server();
    let (what, released, held) = match family {
        Family::Lock | Family::Fair => {
            let info = client.admin().inspect_fair(key).await?;
            let released = client.admin().force_release_fair(key).await?;
            let mut held = info
                .holder
                .map(|h| format!("held by {}, fencing token {}", h.owner, h.fencing_token))
                .unwrap_or_default();
            if released && !info.queue.is_empty() {
                held.push_str("; handed to the head of its queue");
            }
            ("fair lock", released, held)
        }
        Family::ReadWrite => {
            let info = client.admin().inspect_read_write(key).await?;
            let released = client.admin().force_release_read_write(key).await?;
            let mut parts = Vec::new();
            if let Some(writer) = &info.writer {
                parts.push(format!(
                    "written by {}, fencing token {}",
                    writer.owner, writer.fencing_token
                ));
            }
            if !info.readers.is_empty() {
                parts.push(format!("read by {}", count(info.readers.len(), "reader")));
            }
            if !info.waiting_writers.is_empty() {
                parts.push(count(info.waiting_writers.len(), "waiting writer"));
            }
            ("read-write lock", released, parts.join(", "))
        }
        Family::Semaphore => {
            let info = client.admin().inspect_semaphore(key).await?;
            let released = client.admin().force_release_semaphore(key).await?;
            let held = match info.holders.len() {
                0 => String::new(),
                n => format!(
                    "{} held by {}",
                    count(info.in_use as usize, "permit"),
                    count(n, "holder")
                ),
            };
            ("semaphore", released, held)
        }
    };
    Ok(match (released, held.is_empty()) {
        (true, false) => format!("released {what} `{key}` at {server} ({held})\n"),
        (true, true) => format!("released {what} `{key}` at {server}\n"),
        (false, _) => format!("{what} `{key}` at {server} was not held\n"),
    })
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
