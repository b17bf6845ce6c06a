//! The command line of `lockctl leader`: `run`, `status` and `watch` of a
//! role's leader election, their options and help texts.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Subcommand};

use super::{parse_duration, parse_lease};

pub(crate) const LEADER_HELP: &str = "\
Leader election over the same store as the locks (etcdctl's `elect` and `elect --listen`): \
one leader per ROLE at a time, each with a term that is higher than every earlier term of \
the role (the fencing token of the role's lock, the plain lock `leader:ROLE`).";

const LEADER_RUN_HELP: &str = "\
Campaigns for ROLE and, once elected, runs COMMAND with the term in its environment: \
LEADER_ROLE, LEADER_TERM, and as `lockctl run` does, LOCK_KEY (leader:ROLE) and \
LOCK_FENCING_TOKEN (the term). The role's lease is renewed every third of --lease while \
COMMAND runs; --metadata is published for `leader status` and `leader watch` to show.

When leadership is lost (the role's lock was deleted or taken over, or could not be renewed \
in time), lockctl sends SIGTERM to COMMAND's process group, SIGKILL after --grace, and \
campaigns again after --backoff. When COMMAND exits by itself, lockctl resigns (a follower \
takes over at once) and campaigns again after --backoff; with --once it exits with \
COMMAND's code instead (80 when leadership was lost).

SIGTERM, SIGINT, SIGHUP and SIGQUIT sent to lockctl are forwarded to COMMAND's group \
(SIGKILL after --grace); once it has exited lockctl resigns, so a follower takes over within \
about a round trip, and exits with COMMAND's code (128+N for a signal N; 128+N as well when \
the signal came while lockctl was not leading). If lockctl itself is killed, COMMAND gets \
SIGKILL (Linux): it cannot outlive the term, which ends within one lease.";

const LEADER_RUN_EXAMPLES: &str = "\
Examples:
  # One scheduler across the fleet; the others stand by and take over.
  lockctl leader run scheduler --metadata \"$(hostname):8080\" -- ./scheduler

  # Fence every write with the term (see distlock-fence).
  lockctl leader run outbox -- sh -c 'relay --fence \"$LEADER_TERM\"'

  # Fail over within 5 s of a crash; give the command 3 s to stop.
  lockctl leader run cache-warmer --lease 5s --grace 3s -- ./warm-caches

  # One term only: exit with the command's code when it is done.
  lockctl leader run migrate --once -- ./migrate.sh";

const LEADER_STATUS_EXAMPLES: &str = "\
Examples:
  lockctl leader status scheduler
  lockctl leader status scheduler --json | jq -r .metadata
  lockctl leader status scheduler >/dev/null || echo \"nobody leads\"

Exit status 0 when the role has a leader, 3 when nobody leads it (as LSB's `status`).";

const LEADER_WATCH_EXAMPLES: &str = "\
Examples:
  lockctl leader watch scheduler
  lockctl leader watch scheduler --json | jq -c '{term, metadata}'

Prints the leader (or `no leader`) at once, then one line per change, pushed by the store \
(a new term, once its leader has published its metadata; new metadata; the end of a term), \
in term order, until interrupted (exit 0).";

/// Options of `lockctl leader`.
#[derive(Debug, Args)]
pub(crate) struct LeaderArgs {
    #[command(subcommand)]
    pub(crate) command: LeaderCommand,
}

/// The commands of `lockctl leader`.
#[derive(Debug, Subcommand)]
pub(crate) enum LeaderCommand {
    /// Campaign for a role and run a command while leading it; campaign again when it ends.
    #[command(
        long_about = LEADER_RUN_HELP,
        after_help = format!("{LEADER_RUN_EXAMPLES}\n\n{}", super::EXIT_CODES)
    )]
    Run(LeaderRunArgs),
    /// Show who leads a role: term, client, since when, metadata, lease left (exit 3: nobody).
    #[command(after_help = LEADER_STATUS_EXAMPLES)]
    Status(LeaderStatusArgs),
    /// Print each change of a role's leader as it happens, until interrupted.
    #[command(after_help = LEADER_WATCH_EXAMPLES)]
    Watch(LeaderWatchArgs),
}

/// Options of `lockctl leader run`.
#[derive(Debug, Args)]
pub(crate) struct LeaderRunArgs {
    /// The role, e.g. scheduler (its lock is leader:ROLE).
    #[arg(value_name = "ROLE")]
    pub(crate) role: String,

    /// What the leader publishes (its address, say), shown by `leader status` and `watch`.
    #[arg(long, value_name = "TEXT", default_value = "")]
    pub(crate) metadata: String,

    /// The role's lease, renewed every third of it while leading. If lockctl dies, a
    /// follower takes over after at most this.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_lease)]
    pub(crate) lease: Duration,

    /// The pause before campaigning again after a term ended (lost, or the command exited).
    #[arg(long, value_name = "DURATION", default_value = "500ms", value_parser = parse_duration)]
    pub(crate) backoff: Duration,

    /// How long the command gets between SIGTERM (or the signal forwarded) and SIGKILL.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub(crate) grace: Duration,

    /// One term only: exit when the command exits (with its code) or leadership is lost (80).
    #[arg(long)]
    pub(crate) once: bool,

    /// The command to run while leading, and its arguments (after `--`). An option lockctl
    /// does not know before the command is a usage error (exit 64), never the command.
    // No `allow_hyphen_values` (as `run`): with it an unknown `--option` became the command.
    #[arg(
        value_name = "COMMAND",
        required = true,
        num_args = 1..,
        trailing_var_arg = true
    )]
    pub(crate) command: Vec<OsString>,
}

/// Options of `lockctl leader status`.
#[derive(Debug, Args)]
pub(crate) struct LeaderStatusArgs {
    /// The role.
    #[arg(value_name = "ROLE")]
    pub(crate) role: String,

    /// Print one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `lockctl leader watch`.
#[derive(Debug, Args)]
pub(crate) struct LeaderWatchArgs {
    /// The role.
    #[arg(value_name = "ROLE")]
    pub(crate) role: String,

    /// Print one JSON object per line (the fields of `leader status --json`).
    #[arg(long)]
    pub(crate) json: bool,
}
