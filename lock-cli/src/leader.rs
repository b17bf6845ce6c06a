//! `lockctl leader`: run a command only while this process leads a role
//! (`run`), and show (`status`) or follow (`watch`) who leads it; and what
//! `lockctl top` shows of a role's lock.
//!
//! Built on `distlock_core`'s `Election`: a role is the plain lock
//! `leader:<role>`, its term that lock's fencing token. `run` drives the
//! campaign itself (rather than `Election::run`) because a term's end here
//! is a process to stop, with a grace period, before the role is resigned.

use std::io::Write as _;
use std::process::ExitStatus;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock_core::{Leader, LockClient, LockError, Wait, ROLE_LOCK_PREFIX};
use serde::Serialize;
use tokio::process::Child;
use tokio::time::Instant;

use crate::child::{self, Signals};
use crate::cli::{
    ConnectionArgs, LayoutArg, LeaderArgs, LeaderCommand, LeaderRunArgs, LeaderStatusArgs,
    LeaderWatchArgs,
};
use crate::connect::{connect, server_of};
use crate::exit::{self, Failure};
use crate::output::{millis, print_out, to_json};
use crate::run::display_command;

/// `leader status`: nobody leads the role (LSB's "program is not running").
pub(crate) const NO_LEADER: u8 = 3;

/// `lockctl leader ...`.
pub(crate) async fn leader(connection: &ConnectionArgs, args: LeaderArgs) -> Result<u8, Failure> {
    match args.command {
        LeaderCommand::Run(args) => run(connection, args).await,
        LeaderCommand::Status(args) => status(connection, args).await,
        LeaderCommand::Watch(args) => watch(connection, args).await,
    }
}

/// The name of `role`'s lock: `leader:<role>`.
fn lock_name(role: &str) -> String {
    format!("{ROLE_LOCK_PREFIX}{role}")
}

/// Refuses what the options already show cannot elect a leader, before
/// anything connects (exit 64): an empty role, Redlock, Redisson's layout.
fn check_supported(connection: &ConnectionArgs, role: &str) -> Result<(), Failure> {
    let refuse = |why: &str| Err(Failure::new(exit::USAGE, why.to_owned()));
    if role.is_empty() {
        return refuse("a role name must not be empty (see --help)");
    }
    if !connection.redlock.is_empty() {
        return refuse(&format!(
            "leader election (role `{role}`) is not available on Redlock: a term must be \
             ordered by one store; use --url, --sentinel or --cluster"
        ));
    }
    if connection.layout == LayoutArg::Redisson {
        return refuse(&format!(
            "leader election (role `{role}`) is not available with --layout redisson: \
             Redisson's lock keeps no fencing token to be the term; use the native layout"
        ));
    }
    Ok(())
}

/// A role's leader as `status` prints it, and each line of `watch --json`.
#[derive(Debug, Serialize)]
struct LeaderReport {
    role: String,
    /// The role's lock (`leader:<role>`), as `lockctl status` names it.
    name: String,
    server: String,
    /// Whether someone leads the role.
    led: bool,
    /// The leader's term: its lock's fencing token.
    term: Option<u64>,
    owner: Option<String>,
    client_id: Option<String>,
    /// Since when, by the store's clock, RFC 3339 (UTC, milliseconds).
    since: Option<String>,
    /// The same, in milliseconds since the Unix epoch.
    since_ms: Option<u64>,
    /// What the leader published (`run --metadata`); "" when nothing.
    metadata: Option<String>,
    lease_left_ms: Option<u64>,
}

impl LeaderReport {
    fn new(role: &str, server: &str, leader: Option<&Leader>) -> Self {
        let since = leader.and_then(|l| l.since);
        LeaderReport {
            role: role.to_owned(),
            name: lock_name(role),
            server: server.to_owned(),
            led: leader.is_some(),
            term: leader.map(|l| l.term),
            owner: leader.map(|l| l.owner.clone()),
            client_id: leader.map(|l| l.client_id.clone()),
            since: since.map(rfc3339),
            since_ms: since.and_then(unix_millis),
            metadata: leader.and_then(|l| l.metadata.clone()),
            lease_left_ms: leader.map(|l| millis(l.lease_left)),
        }
    }

    /// The text of `leader status`.
    fn text(&self) -> String {
        let mut out = String::new();
        let mut line = |label: &str, value: &str| {
            out.push_str(&format!("{label:<11} {value}\n"));
        };
        line("role", &self.role);
        line("lock", &self.name);
        line("server", &self.server);
        match self.term {
            None => line("leader", "none"),
            Some(term) => {
                line("leader", &format!("term {term}"));
                line("owner", self.owner.as_deref().unwrap_or("-"));
                line("client", self.client_id.as_deref().unwrap_or("-"));
                line(
                    "since",
                    self.since.as_deref().unwrap_or("- (not proclaimed yet)"),
                );
                line("metadata", &metadata_text(self.metadata.as_deref()));
                let left = self.lease_left_ms.map(Duration::from_millis);
                line("lease left", &left.map_or_else(|| "-".into(), seconds));
            }
        }
        out
    }

    /// One line of `leader watch`: what changed to, after the local time.
    fn watch_line(&self) -> String {
        let now = rfc3339(SystemTime::now());
        match self.term {
            None => format!("{now} {}: no leader", self.role),
            Some(term) => format!(
                "{now} {}: term {term} led by {} since {}, metadata {}",
                self.role,
                self.client_id.as_deref().unwrap_or("-"),
                self.since.as_deref().unwrap_or("-"),
                metadata_text(self.metadata.as_deref()),
            ),
        }
    }
}

fn metadata_text(metadata: Option<&str>) -> String {
    match metadata {
        None | Some("") => "-".into(),
        Some(text) => format!("{text:?}"),
    }
}

fn seconds(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

fn unix_millis(at: SystemTime) -> Option<u64> {
    at.duration_since(UNIX_EPOCH).ok().map(millis)
}

/// `lockctl leader status ROLE`: exit 0 with a leader, [`NO_LEADER`] without.
async fn status(connection: &ConnectionArgs, args: LeaderStatusArgs) -> Result<u8, Failure> {
    let role = args.role.as_str();
    check_supported(connection, role)?;
    let name = lock_name(role);
    let client = connect(connection, &name, None, false).await?;
    let leader = client
        .election(role)
        .leader()
        .await
        .map_err(|err| Failure::from_lock(&err, &name, client.server(), exit::USAGE))?;
    let report = LeaderReport::new(role, client.server(), leader.as_ref());
    if args.json {
        print_out(&format!("{}\n", to_json(&report)?))?;
    } else {
        print_out(&report.text())?;
    }
    Ok(if leader.is_some() {
        exit::SUCCESS
    } else {
        NO_LEADER
    })
}

/// `lockctl leader watch ROLE`: the leader now, then each change, until a
/// signal (exit 0) or a closed stdout.
async fn watch(connection: &ConnectionArgs, args: LeaderWatchArgs) -> Result<u8, Failure> {
    let mut signals = Signals::new()
        .map_err(|err| Failure::new(exit::SOFTWARE, format!("cannot listen for signals: {err}")))?;
    let role = args.role.as_str();
    check_supported(connection, role)?;
    let name = lock_name(role);
    let client = tokio::select! {
        client = connect(connection, &name, None, false) => client?,
        _ = signals.recv() => return Ok(exit::SUCCESS),
    };
    let server = client.server().to_owned();
    let mut observer = client.election(role).observe();
    loop {
        let changed = tokio::select! {
            changed = observer.changed() => changed,
            _ = signals.recv() => return Ok(exit::SUCCESS),
        };
        let leader =
            changed.map_err(|err| Failure::from_lock(&err, &name, &server, exit::USAGE))?;
        // A term is shown once its leader proclaimed (a round trip after
        // it won): the proclamation, or the term's end, follows.
        if leader.as_ref().is_some_and(|l| l.since.is_none()) {
            continue;
        }
        let report = LeaderReport::new(role, &server, leader.as_ref());
        let line = if args.json {
            serde_json::to_string(&report)
                .map_err(|err| Failure::new(exit::SOFTWARE, format!("cannot write JSON: {err}")))?
        } else {
            report.watch_line()
        };
        if !print_line(&line)? {
            return Ok(exit::SUCCESS);
        }
    }
}

/// Writes `line` to stdout at once; false once stdout is closed (`| head`).
fn print_line(line: &str) -> Result<bool, Failure> {
    let mut stdout = std::io::stdout().lock();
    match writeln!(stdout, "{line}").and_then(|()| stdout.flush()) {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(err) => Err(Failure::new(
            exit::SOFTWARE,
            format!("cannot write to stdout: {err}"),
        )),
    }
}

/// How a term of `leader run` ended.
enum Ended {
    /// The command exited by itself.
    Exited(std::io::Result<ExitStatus>),
    /// lockctl got this signal: the command is to be stopped, then lockctl exits.
    Signal(i32),
    /// Leadership was lost while the command ran.
    Lost,
}

/// `lockctl leader run ROLE -- COMMAND`: campaign, run COMMAND while
/// leading, stop it when the term ends, campaign again.
async fn run(connection: &ConnectionArgs, args: LeaderRunArgs) -> Result<u8, Failure> {
    // Listen first: from here on a SIGTERM stops the command and resigns
    // instead of killing lockctl.
    let mut signals = Signals::new()
        .map_err(|err| Failure::new(exit::SOFTWARE, format!("cannot listen for signals: {err}")))?;
    let role = args.role.as_str();
    check_supported(connection, role)?;
    let name = lock_name(role);
    let client = tokio::select! {
        client = connect(connection, &name, Some(args.lease), true) => client?,
        signo = signals.recv() => {
            return Err(interrupted(signo, role, &server_of(&connection.url)));
        }
    };
    let server = client.server().to_owned();
    let election = client
        .election(role)
        .metadata(args.metadata.clone())
        .backoff(args.backoff);
    let command = display_command(&args.command);
    let mut failing: Option<String> = None;
    loop {
        let campaign = tokio::select! {
            won = election.campaign(Wait::Forever) => won,
            signo = signals.recv() => return Err(interrupted(signo, role, &server)),
        };
        let leadership = match campaign {
            Ok(leadership) => leadership,
            Err(err) if retryable(&err) => {
                // Said once per kind of failure, not at every retry.
                let text = exit::one_line(&err.to_string());
                if failing.as_deref() != Some(text.as_str()) {
                    eprintln!(
                        "lockctl: campaigning for role `{role}` at {server} failed: {text}; \
                         retrying every {}",
                        humantime::format_duration(args.backoff)
                    );
                    failing = Some(text);
                }
                pause(args.backoff, &mut signals, role, &server).await?;
                continue;
            }
            Err(err) => return Err(Failure::from_lock(&err, &name, &server, exit::USAGE)),
        };
        failing = None;
        let term = leadership.term();
        let env = [
            ("LEADER_ROLE", role.to_owned()),
            ("LEADER_TERM", term.to_string()),
            ("LOCK_KEY", name.clone()),
            ("LOCK_FENCING_TOKEN", term.to_string()),
        ];
        // SIGKILL when lockctl dies: nothing is left to give the command a
        // grace period, and it must not act past the term (one lease).
        let mut child = match child::spawn_with_death_signal(&args.command, &env, libc::SIGKILL) {
            Ok(child) => child,
            Err(err) => {
                let _ = leadership.resign().await;
                let code = match err.kind() {
                    std::io::ErrorKind::NotFound => exit::NOT_FOUND,
                    _ => exit::CANNOT_EXECUTE,
                };
                return Err(Failure::new(
                    code,
                    format!("cannot run `{command}`: {err} (role `{role}` at {server} resigned)"),
                ));
            }
        };
        eprintln!(
            "lockctl: leading role `{role}` at {server} in term {term}; started `{command}`{}",
            child
                .id()
                .map(|pid| format!(" (pid {pid})"))
                .unwrap_or_default()
        );

        let ended = tokio::select! {
            status = child.wait() => Ended::Exited(status),
            signo = signals.recv() => Ended::Signal(signo),
            () = leadership.lost() => Ended::Lost,
        };
        match ended {
            Ended::Exited(status) => {
                let resigned = leadership.resign().await;
                let status = status.map_err(|err| {
                    Failure::new(
                        exit::SOFTWARE,
                        format!("waiting for `{command}` failed: {err} (role `{role}` at {server} resigned)"),
                    )
                })?;
                let code = child::exit_code(status);
                if let Err(err @ (LockError::LeaseLost { .. } | LockError::NotHeld { .. })) =
                    resigned
                {
                    // The command ran to its end, but the term was over before it.
                    let message = format!(
                        "{err} (server {server}); `{command}` exited with {code} in term \
                         {term} but may have outlived it"
                    );
                    if args.once {
                        return Err(Failure::new(exit::LEASE_LOST, message));
                    }
                    eprintln!("lockctl: {}", exit::one_line(&message));
                } else if args.once {
                    return Ok(code);
                } else {
                    eprintln!(
                        "lockctl: `{command}` exited with {code} in term {term} of role `{role}`; \
                         resigned, campaigning again in {}",
                        humantime::format_duration(args.backoff)
                    );
                }
            }
            Ended::Signal(signo) => {
                let (status, _) = stop(&mut child, signo, args.grace, &mut signals).await;
                // Resign only once the command is gone: the next leader's
                // command never runs beside it.
                let _ = leadership.resign().await;
                let status = status.map_err(|err| {
                    Failure::new(
                        exit::SOFTWARE,
                        format!("waiting for `{command}` failed: {err} (role `{role}` at {server} resigned)"),
                    )
                })?;
                return Ok(child::exit_code(status));
            }
            Ended::Lost => {
                eprintln!(
                    "lockctl: lost the leadership of role `{role}` at {server} (term {term}) while \
                     `{command}` was running; terminating it (SIGTERM, then SIGKILL after {})",
                    humantime::format_duration(args.grace)
                );
                let (_, signalled) =
                    stop(&mut child, libc::SIGTERM, args.grace, &mut signals).await;
                // Ends the term's record; the lock is not ours any more.
                let _ = leadership.resign().await;
                if args.once {
                    return Ok(exit::LEASE_LOST);
                }
                // Told to stop while stopping the command: no new campaign.
                if let Some(signo) = signalled {
                    return Err(interrupted(signo, role, &server));
                }
            }
        }
        pause(args.backoff, &mut signals, role, &server).await?;
    }
}

/// Whether a failed campaign is worth another try: the store could not be
/// reached or failed; not a refusal (a bad role, a key of another type).
fn retryable(err: &LockError) -> bool {
    err.is_backend() && !matches!(err, LockError::WrongType { .. })
}

/// Sends `signo` to the command's group, and SIGKILL once `grace` has
/// passed; signals lockctl gets meanwhile are forwarded too. Returns once
/// the command has exited, with the first signal lockctl got meanwhile.
async fn stop(
    child: &mut Child,
    signo: i32,
    grace: Duration,
    signals: &mut Signals,
) -> (std::io::Result<ExitStatus>, Option<i32>) {
    child::signal_group(child, signo);
    let kill = sleep_for(grace);
    tokio::pin!(kill);
    let mut received = None;
    loop {
        tokio::select! {
            status = child.wait() => return (status, received),
            signo = signals.recv() => {
                child::signal_group(child, signo);
                received = received.or(Some(signo));
            }
            () = &mut kill => {
                child::signal_group(child, libc::SIGKILL);
                return (child.wait().await, received);
            }
        }
    }
}

/// Sleeps `d`; forever when `d` is too long for the clock.
async fn sleep_for(d: Duration) {
    match Instant::now().checked_add(d) {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The back-off between terms; a signal ends lockctl (128+N).
async fn pause(
    backoff: Duration,
    signals: &mut Signals,
    role: &str,
    server: &str,
) -> Result<(), Failure> {
    tokio::select! {
        () = sleep_for(backoff) => Ok(()),
        signo = signals.recv() => Err(interrupted(signo, role, server)),
    }
}

fn interrupted(signo: i32, role: &str, server: &str) -> Failure {
    Failure::new(
        exit::signal_code(signo),
        format!(
            "interrupted by {} while campaigning for role `{role}` at {server}",
            child::signal_name(signo)
        ),
    )
}

/// What `lockctl top` shows of a role's lock (the JSON fields of a
/// `leader` row, and its detail pane): the role, and the record its leader
/// proclaimed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct TopLeader {
    role: String,
    /// The term the record names (the lock's fencing token).
    term: Option<u64>,
    since: Option<String>,
    metadata: Option<String>,
    /// Why the record could not be read, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

impl TopLeader {
    /// The role of lock `name`, when it is a role's lock (`leader:<role>`)
    /// and `client` can elect leaders; its record read from the store.
    pub(crate) async fn read(client: &LockClient, name: &str) -> Option<Self> {
        let role = name.strip_prefix(ROLE_LOCK_PREFIX)?;
        let (leader, error) = match client.election(role).leader().await {
            Ok(leader) => (leader, None),
            // Not a role on this backend: a plain lock of that name.
            Err(LockError::Unsupported { .. } | LockError::InvalidKey { .. }) => return None,
            Err(err) => (None, Some(exit::one_line(&err.to_string()))),
        };
        let since = leader.as_ref().and_then(|l| l.since);
        Some(TopLeader {
            role: role.to_owned(),
            term: leader.as_ref().map(|l| l.term),
            since: since.map(rfc3339),
            metadata: leader.and_then(|l| l.metadata),
            error,
        })
    }

    /// The detail pane's lines about the role (after the holder's line).
    pub(crate) fn lines(&self) -> Vec<String> {
        let term = self.term.map_or_else(|| "-".into(), |t| t.to_string());
        let mut lines = vec![
            format!(
                "role     {}  term {term}  since {}",
                self.role,
                self.since.as_deref().unwrap_or("-")
            ),
            format!("metadata {}", metadata_text(self.metadata.as_deref())),
        ];
        if let Some(error) = &self.error {
            lines.push(format!("record   cannot be read: {error}"));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_without_a_leader_has_no_term() {
        let report = LeaderReport::new("sched", "127.0.0.1:1", None);
        assert!(!report.led && report.term.is_none());
        assert_eq!(report.name, "leader:sched");
        assert!(
            report.text().contains("leader      none"),
            "{}",
            report.text()
        );
        assert!(report.watch_line().ends_with("sched: no leader"));
    }

    #[test]
    fn top_shows_the_role_its_term_and_metadata() {
        let leader = TopLeader {
            role: "sched".into(),
            term: Some(17),
            since: Some("2026-11-29T04:30:12.123Z".into()),
            metadata: Some("http://10.0.0.7:8080".into()),
            error: None,
        };
        assert_eq!(
            leader.lines(),
            [
                "role     sched  term 17  since 2026-11-29T04:30:12.123Z",
                "metadata \"http://10.0.0.7:8080\"",
            ]
        );
        let json = serde_json::to_value(&leader).unwrap();
        assert_eq!(json["term"], 17);
        assert!(json.get("error").is_none());
    }
}
