//! The command line: commands, options, help texts and value parsers.
//!
//! The argument types sit below the commands: this file imports none of the
//! command modules (only the exit codes, for defaults), and they import it.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use distlock_core::{LockOptions, Wait, MIN_WATCHDOG_LEASE};

mod leader;
pub(crate) use self::leader::{
    LeaderArgs, LeaderCommand, LeaderRunArgs, LeaderStatusArgs, LeaderWatchArgs,
};

const EXIT_CODES: &str = "\
Exit codes:
  0        success: the command exited 0, or the lock was busy with --on-busy skip
  1-255    run: the command's own exit code; 128+N when a signal N ended it
  64       usage error (bad option or value, release without --force)
  65       a Redis key of the lock holds a value of another type
  66       a TLS file cannot be read
  69       Redis unreachable, credentials refused, or a Redis error
  70       internal error
  73       man --dir: a page cannot be written
  75       run: the lock is busy (--conflict-exit-code)
  80       run: the lease was lost while the command ran (--lost-exit-code)
  126/127  run: the command cannot be executed / was not found";

const TOP_EXAMPLES: &str = "\
Examples:
  lockctl --url redis://127.0.0.1:6379/ run --key backup --wait 10s -- /usr/local/bin/backup.sh
  REDIS_URL=rediss://ops:secret@redis.internal:6380/ lockctl status backup
  lockctl list --prefix report: --json
  lockctl top --prefix report:
  lockctl release --force backup";

const RUN_HELP: &str = "\
Acquires lock KEY, runs COMMAND with LOCK_KEY and LOCK_FENCING_TOKEN in its environment, \
renews the lease while it runs, releases the lock when it exits and exits with its code.

By default KEY is a plain (exclusive) lock. With --read or --write it is the read lock or the \
write lock of read-write lock KEY (many readers or one writer; once a writer waits, new readers \
wait behind it); with --fair, fair lock KEY (granted in arrival order); with --permits N, \
--take K (default 1) of the N permits of semaphore KEY (every user of KEY must pass the same \
N). Each of these is its own lock: `--key x` and `--key x --fair` do not exclude each other. \
They are not available with --redlock.

The command runs in a process group of its own. SIGTERM, SIGINT, SIGHUP and SIGQUIT sent to \
lockctl are forwarded to that group; lockctl waits for the command, releases the lock and \
exits with the command's code (128+N for a signal N). If lockctl itself is killed, the \
command gets SIGTERM (Linux) and the lock expires after at most one lease.

If the lease is lost while the command runs (the lock was deleted, taken over, or could \
not be renewed in time), lockctl says so on stderr, sends SIGTERM to the command's group, \
SIGKILL after --kill-after, and exits with --lost-exit-code (80).";

const RUN_EXAMPLES: &str = "\
Examples:
  # Run the nightly report on one host only; other hosts skip it (exit 0). --at-least
  # keeps the lock 10 minutes even when the report takes seconds, so a host whose cron
  # fires a little later skips the night instead of running it again.
  lockctl run --key report:nightly --on-busy skip --at-least 10m -- /usr/local/bin/report --date today

  # Wait up to 10 minutes for the lock; exit 75 if it stays busy.
  lockctl run --key db:migrate --wait 10m -- ./migrate.sh

  # Wait as long as it takes, with a 10 s lease (the lock frees 10 s after a crash).
  lockctl run --key deploy --wait forever --lease 10s -- make deploy

  # Pass the fencing token to the resource the lock protects.
  lockctl run --key export -- sh -c 'export-data --fence \"$LOCK_FENCING_TOKEN\"'

  # Many readers of the price table at once, or one writer.
  lockctl run --key prices --read --wait 1m -- ./report-prices.sh
  lockctl run --key prices --write --wait 10m -- ./import-prices.sh

  # At most 4 exports at once across every host; this one takes 2 of the 4.
  lockctl run --key exports --permits 4 --take 2 --wait forever -- ./export.sh

  # Deploys in the order they asked, one at a time.
  lockctl run --key deploy --fair --wait 30m -- make deploy";

const STATUS_EXAMPLES: &str = "\
Examples:
  lockctl status report:nightly
  lockctl status report:nightly --json | jq .ttl_ms
  lockctl status deploy --fair             # the holder and the queue, in order
  lockctl status prices --read-write       # readers, writer, waiting writers
  lockctl status exports --semaphore --json | jq .in_use

The backend records one holder per lock, not a hold count: nested (reentrant) holds are \
counted inside the holder's process. `holds` is what the backend sees: 1 for a held lock, \
0 for a free one. `last token` is the last fencing token issued for the lock; it survives \
releases and expiry. Holders and waiters whose lease or place ran out (by the server's \
clock) are not shown.";

const LIST_EXAMPLES: &str = "\
Examples:
  lockctl list
  lockctl list --prefix report:
  lockctl --key-prefix billing:lock: list --json

The locks are found with SCAN (never KEYS), so listing does not block Redis; a lock taken \
or released during the walk may or may not be listed.";

const LAYOUTS_EXAMPLES: &str = "\
Examples:
  lockctl layouts
  lockctl --sentinel redis://10.0.0.5:26379/ --master locks layouts --json

  lockctl layouts --forget redisson

Every client records its layout in the store when it connects (the hash distlock:layouts, \
kept a day after the last client recorded itself), and is refused when another layout is \
recorded, unless it declares a migration (allow_mixed_layouts; lockctl \
--allow-mixed-layouts); lockctl itself records nothing except in `run`. Redisson's own Java \
clients do not record themselves: a store they share with Rust clients in Redisson's layout \
lists `redisson` only. Once a migration is over, --forget removes the old layout, so that \
clients of the other are no longer refused. Exit status 65 when more than one layout is \
listed.";

const RELEASE_EXAMPLES: &str = "\
Examples:
  lockctl release --force report:nightly
  lockctl release --force deploy --fair
  lockctl release --force prices --read-write
  lockctl release --force exports --semaphore

This deletes the lock whoever holds it and wakes a waiter. A holder under lockctl run finds \
out at its next renewal (a third of its lease), terminates its command and exits 80. With \
--fair the lock goes to the head of its queue, as on a release; with --read-write every reader, \
the writer and the waiting writers' places are deleted; with --semaphore every holder's \
permits.";

const TOP_HELP: &str = "\
A live view for operators, refreshed every --interval: every lock in use of every kind (found \
with SCAN, read with pipelines and the read-only inspection scripts, never a blocking command), \
one row each, and a detail pane for the selected one.

KIND is lock (a plain lock), hot (a plain lock a hot lock's keeper keeps between its uses), \
fair, rw (a read-write lock) sem (a semaphore) or leader (the lock `leader:ROLE` of a role's leader election: \
its term is TOKEN; the detail pane and the JSON add the role, since when and the metadata). HOLDER is the owner of a lock, of a fair lock \
and a read-write lock's writer; a hot lock's keeper (its client id, then `(kept)`); `N readers` \
of a read-write lock without a writer; `N permits` in use of a semaphore (its total is not \
stored: each acquirer passes its own). TOKEN is the holder's fencing token (a hot lock's stays \
the same across its uses). TTL is the lease left as a bar and in seconds (of readers and \
permit holders, the longest). HOLD is measured by the view from when it first saw the current \
fencing token (a hot lock: how long it has been kept), so a lock held before the view started \
shows the time since the view started (marked with >=); a single snapshot shows no hold time.

WAITERS: of a plain or hot lock and a semaphore, the clients subscribed to its wake-up channel \
(PUBSUB NUMSUB; SHARDNUMSUB on a cluster): a client process waiting with many tasks counts \
once, and a hot lock's keeper counts itself; of a fair lock, the length of its queue; of a \
read-write lock, the clients subscribed (waiting readers and writers), at least its waiting \
writers. The detail pane shows the \
fair queue in order with each waiter's time left, the writer, the readers and the waiting \
writers, the permit holders with their permits, a hot lock's keeper. A hot lock's uses are \
counted inside the keeper's process only and are not shown.

Keys: q (or Esc, Ctrl-C) quits; Up, Down, PageUp, PageDown, Home, End select a lock; n, o, k, \
t, h, w sort by name, holder, token, ttl, hold, waiters (again: reverse); s cycles the sort \
column; f cycles the kind shown (all, lock, hot, fair, rw, sem, leader); / edits the name-prefix filter \
(Enter applies, Esc cancels). A Redis outage shows an error line and the view keeps retrying.

When stdout is not a terminal, lockctl top prints one snapshot as a table (or JSON with \
--json: each lock's name, key, owner, fencing_token, ttl_ms and waiters as before, plus kind \
and the details of its kind) and exits 0.";

const TOP_VIEW_EXAMPLES: &str = "\
Examples:
  lockctl top
  lockctl top --prefix report: --sort ttl --interval 2s
  lockctl top --kind fair                  # fair locks and their queues only
  lockctl top --json | jq '.[] | select(.waiters > 0)'
  lockctl top --json | jq '.[] | select(.kind == \"rw\") | .readers'
  lockctl top > snapshot.txt               # one snapshot, no terminal";

const COMPLETIONS_EXAMPLES: &str = "\
Examples:
  lockctl completions bash > /etc/bash_completion.d/lockctl
  lockctl completions zsh > /usr/local/share/zsh/site-functions/_lockctl
  lockctl completions fish > ~/.config/fish/completions/lockctl.fish";

const MAN_EXAMPLES: &str = "\
Examples:
  lockctl man | man -l -
  lockctl man --dir /usr/local/share/man/man1     # lockctl.1, lockctl-run.1, ...";

/// Run a command under a distributed lock on Redis (a distributed flock), and
/// inspect or force-release locks.
#[derive(Debug, Parser)]
#[command(
    name = "lockctl",
    version,
    arg_required_else_help = true,
    after_help = format!("{TOP_EXAMPLES}\n\n{EXIT_CODES}")
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) connection: ConnectionArgs,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Where the locks live. Shared by every command.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Connection")]
pub(crate) struct ConnectionArgs {
    /// Redis URL: redis://host:port/db, rediss:// for TLS, redis://user:password@host/ for ACL;
    /// or a PostgreSQL database: postgres://user:password@host:port/dbname (tables in schema
    /// public, prefix distlock_).
    #[arg(
        long,
        global = true,
        env = "REDIS_URL",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379/",
        value_name = "URL"
    )]
    pub(crate) url: String,

    /// Prefix of the Redis keys: lock NAME is stored as PREFIX{NAME} [default: lock:, or
    /// nothing with --layout redisson]
    #[arg(
        long,
        global = true,
        env = "LOCK_KEY_PREFIX",
        hide_env_values = true,
        value_name = "PREFIX"
    )]
    pub(crate) key_prefix: Option<String>,

    /// How locks are laid out in Redis: native, or redisson for Redisson's RLock,
    /// RFencedLock, RReadWriteLock and RPermitExpirableSemaphore of the same name (no fair
    /// lock, list or top)
    #[arg(long, global = true, env = "LOCK_LAYOUT", value_enum, default_value_t = LayoutArg::Native)]
    pub(crate) layout: LayoutArg,

    /// Take locks (run) even when the store records clients of another layout: a declared
    /// migration window (a lock name taken in two layouts is two locks). Without it, run is
    /// refused there, as a library client is
    #[arg(long, global = true, env = "LOCK_ALLOW_MIXED_LAYOUTS")]
    pub(crate) allow_mixed_layouts: bool,

    /// A cluster's wake-ups: sharded pub/sub (auto, on) or classic (off), as Redisson's
    /// shardedSubscriptionMode
    #[arg(
        long,
        global = true,
        env = "LOCK_SHARDED_PUBSUB",
        value_enum,
        default_value_t = ShardedArg::Auto
    )]
    pub(crate) sharded_pubsub: ShardedArg,

    /// PEM file of the CA that signed a rediss:// server's certificate (default: system roots).
    #[arg(long, global = true, value_name = "PEM_FILE")]
    pub(crate) tls_ca_cert: Option<PathBuf>,

    /// PEM file of a client certificate for mutual TLS (with --tls-key).
    #[arg(long, global = true, value_name = "PEM_FILE", requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,

    /// PEM file of the key of --tls-cert.
    #[arg(long, global = true, value_name = "PEM_FILE", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,

    /// How long connecting may take.
    #[arg(long, global = true, value_name = "DURATION", default_value = "5s", value_parser = parse_positive)]
    pub(crate) connect_timeout: Duration,

    /// Redis Cluster: seed node URLs (repeat the flag or separate with commas); replaces --url.
    #[arg(
        long,
        global = true,
        env = "LOCK_CLUSTER",
        hide_env_values = true,
        value_name = "URL",
        value_delimiter = ',',
        conflicts_with_all = ["sentinel", "redlock"]
    )]
    pub(crate) cluster: Vec<String>,

    /// Sentinel: sentinel URLs (repeat or comma-separate), with --master; replaces --url.
    #[arg(
        long,
        global = true,
        env = "LOCK_SENTINEL",
        hide_env_values = true,
        value_name = "URL",
        value_delimiter = ',',
        requires = "master",
        conflicts_with = "redlock"
    )]
    pub(crate) sentinel: Vec<String>,

    /// Sentinel: the name the sentinels monitor the master under.
    #[arg(long, global = true, env = "LOCK_SENTINEL_MASTER", value_name = "NAME")]
    pub(crate) master: Option<String>,

    /// Redlock: URLs of the independent masters (repeat or comma-separate); replaces --url.
    #[arg(
        long,
        global = true,
        env = "LOCK_REDLOCK",
        hide_env_values = true,
        value_name = "URL",
        value_delimiter = ','
    )]
    pub(crate) redlock: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a command while holding a lock (a distributed flock).
    #[command(long_about = RUN_HELP, after_help = format!("{RUN_EXAMPLES}\n\n{EXIT_CODES}"))]
    Run(RunArgs),
    /// Show who holds a lock, its remaining lease and its fencing tokens (a fair lock's
    /// queue, a read-write lock's readers and writers, a semaphore's permits in use).
    #[command(after_help = STATUS_EXAMPLES)]
    Status(StatusArgs),
    /// List the locks held (found with SCAN, never KEYS).
    #[command(after_help = LIST_EXAMPLES)]
    List(ListArgs),
    /// Delete a lock whoever holds it, waking a waiter (operator override; needs --force).
    #[command(after_help = RELEASE_EXAMPLES)]
    Release(ReleaseArgs),
    /// The lock layouts the store's clients use (native, Redisson's); exits 65 when it is
    /// more than one: a name taken in both layouts is two locks that do not exclude each
    /// other.
    #[command(after_help = LAYOUTS_EXAMPLES)]
    Layouts(LayoutsArgs),
    /// A live view of the locks in use, of every kind (locks, hot locks, fair locks,
    /// read-write locks, semaphores): holder, token, lease left, hold time, waiters, and the
    /// selected lock's queue, readers or permit holders (one snapshot when stdout is not a
    /// terminal).
    #[command(visible_alias = "watch", long_about = TOP_HELP, after_help = TOP_VIEW_EXAMPLES)]
    Top(TopArgs),
    /// Print the shell completion script of SHELL (bash, zsh, fish, elvish, powershell), made
    /// from this command line. Touches no Redis.
    #[command(after_help = COMPLETIONS_EXAMPLES)]
    Completions(CompletionsArgs),
    /// Print the man page lockctl(1), or write it and a page per command into --dir. Touches
    /// no Redis.
    #[command(after_help = MAN_EXAMPLES)]
    Man(ManArgs),
    /// Leader election: run a command only while leading a role, show or watch who leads.
    #[command(long_about = leader::LEADER_HELP)]
    Leader(LeaderArgs),
}

/// Options of `lockctl run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The lock name, e.g. report:nightly.
    #[arg(short, long, value_name = "KEY")]
    pub(crate) key: String,

    /// How long to wait for a busy lock: 0s tries once, `forever` waits as long as it takes.
    #[arg(short, long, value_name = "DURATION", default_value = "0s", value_parser = parse_wait)]
    pub(crate) wait: Wait,

    /// The lease, renewed every third of it while the command runs. If lockctl dies,
    /// the lock frees after at most this.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_lease)]
    pub(crate) lease: Duration,

    /// What to do when the lock stays busy: fail (exit --conflict-exit-code) or skip (exit 0).
    #[arg(long, value_enum, default_value_t = OnBusy::Fail)]
    pub(crate) on_busy: OnBusy,

    /// Keep the lock at least this long after it was taken, even when the command exits
    /// sooner (ShedLock's lockAtLeastFor): the release cuts the lease to what is left, so a
    /// host whose cron fires a little later in the same window finds it busy. Longer than
    /// the hosts' clock skew and timer jitter, shorter than the schedule's period.
    #[arg(long, value_name = "DURATION", value_parser = parse_at_least)]
    pub(crate) at_least: Option<Duration>,

    /// Exit code when the lock stays busy (with --on-busy fail).
    #[arg(long, value_name = "CODE", default_value_t = crate::exit::BUSY)]
    pub(crate) conflict_exit_code: u8,

    /// Exit code when the lease is lost while the command runs.
    #[arg(long, value_name = "CODE", default_value_t = crate::exit::LEASE_LOST)]
    pub(crate) lost_exit_code: u8,

    /// After a lost lease, how long the command gets between SIGTERM and SIGKILL.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub(crate) kill_after: Duration,

    #[command(flatten)]
    pub(crate) primitive: PrimitiveArgs,

    /// With --permits: how many of the N permits to take, all or none (at most N).
    #[arg(long, value_name = "K", requires = "permits", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) take: Option<u32>,

    /// The command to run and its arguments (after `--`). An option lockctl does not know
    /// before the command is a usage error (exit 64), never the command.
    // No `allow_hyphen_values`: with it an unknown `--option` became the
    // command, after the lock was taken. `trailing_var_arg` still passes
    // the command's own options (`ls -la`) once the command has started.
    #[arg(
        value_name = "COMMAND",
        required = true,
        num_args = 1..,
        trailing_var_arg = true
    )]
    pub(crate) command: Vec<OsString>,
}

/// Which lock of name KEY `run` takes (at most one of these; none: the
/// plain lock).
#[derive(Debug, Args)]
#[group(id = "primitive", multiple = false)]
pub(crate) struct PrimitiveArgs {
    /// Take the read lock of read-write lock KEY, shared with other readers.
    #[arg(long)]
    pub(crate) read: bool,

    /// Take the write lock of read-write lock KEY: no readers, no other writer.
    #[arg(long)]
    pub(crate) write: bool,

    /// Take fair lock KEY: granted in the order the waiters asked.
    #[arg(long)]
    pub(crate) fair: bool,

    /// Take permits (--take, default 1) of semaphore KEY, which has N in all.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) permits: Option<u32>,
}

/// The lock `run` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Primitive {
    /// The plain lock.
    Lock,
    /// The read lock of a read-write lock.
    Read,
    /// The write lock of a read-write lock.
    Write,
    /// The fair lock.
    Fair,
    /// `take` of the `total` permits of a semaphore.
    Permits { total: u32, take: u32 },
}

impl RunArgs {
    /// The options of the acquisition. `--lease` is not among them: it is
    /// the watchdog's lease, renewed while the command runs, a setting of
    /// the client rather than a fixed lease of this lock.
    pub(crate) fn lock_options(&self) -> LockOptions {
        let options = LockOptions::new().wait(self.wait);
        match self.at_least {
            Some(at_least) => options.hold_at_least(at_least),
            None => options,
        }
    }

    /// The lock to take, from the options (which clap made exclusive).
    pub(crate) fn primitive(&self) -> Primitive {
        let which = &self.primitive;
        match which.permits {
            Some(total) => Primitive::Permits {
                total,
                take: self.take.unwrap_or(1),
            },
            None if which.read => Primitive::Read,
            None if which.write => Primitive::Write,
            None if which.fair => Primitive::Fair,
            None => Primitive::Lock,
        }
    }
}

/// Which lock of name KEY `status` and `release` look at (at most one of
/// these; none: the plain lock).
#[derive(Debug, Args)]
#[group(id = "family", multiple = false)]
pub(crate) struct FamilyArgs {
    /// Fair lock KEY (`run --fair`): its holder and its queue.
    #[arg(long)]
    pub(crate) fair: bool,

    /// Read-write lock KEY (`run --read`, `run --write`): readers, writer, waiting writers.
    #[arg(long)]
    pub(crate) read_write: bool,

    /// Semaphore KEY (`run --permits`): its holders and the permits in use.
    #[arg(long)]
    pub(crate) semaphore: bool,
}

/// The lock `status` and `release` look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    /// The plain lock.
    Lock,
    /// The fair lock.
    Fair,
    /// The read-write lock.
    ReadWrite,
    /// The semaphore.
    Semaphore,
}

impl FamilyArgs {
    /// The lock to look at, from the options (which clap made exclusive).
    pub(crate) fn family(&self) -> Family {
        if self.fair {
            Family::Fair
        } else if self.read_write {
            Family::ReadWrite
        } else if self.semaphore {
            Family::Semaphore
        } else {
            Family::Lock
        }
    }
}

/// Options of `lockctl status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The lock name.
    #[arg(value_name = "KEY")]
    pub(crate) key: String,

    #[command(flatten)]
    pub(crate) family: FamilyArgs,

    /// Print one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `lockctl list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// List only locks whose name starts with this.
    #[arg(long, value_name = "PREFIX", default_value = "")]
    pub(crate) prefix: String,

    /// Print a JSON array instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `lockctl layouts`.
#[derive(Debug, Args)]
pub(crate) struct LayoutsArgs {
    /// Print a JSON array instead of lines.
    #[arg(long)]
    pub(crate) json: bool,

    /// Remove LAYOUT from the store's registry (once no client of it is left, after a
    /// migration), then list what remains.
    #[arg(long, value_enum, value_name = "LAYOUT")]
    pub(crate) forget: Option<LayoutArg>,
}

/// Options of `lockctl top`.
#[derive(Debug, Args)]
pub(crate) struct TopArgs {
    /// Show only locks whose name starts with this (`/` in the view changes it).
    #[arg(long, value_name = "PREFIX", default_value = "")]
    pub(crate) prefix: String,

    /// How often the view refreshes.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_positive)]
    pub(crate) interval: Duration,

    /// The lease every lease-left bar is drawn against (default: each lock's own lease, the
    /// longest TTL the view has seen of its current holder).
    #[arg(long, value_name = "DURATION", value_parser = parse_positive)]
    pub(crate) lease: Option<Duration>,

    /// The column to sort by (keys in the view: n, o, k, t, h, w; s cycles).
    #[arg(long, value_enum, default_value_t = SortBy::Name)]
    pub(crate) sort: SortBy,

    /// Show only locks of this kind (the key f in the view cycles through them).
    #[arg(long, value_enum, value_name = "KIND")]
    pub(crate) kind: Option<LockKind>,

    /// Print one snapshot as JSON and exit (also without a terminal).
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `lockctl completions`.
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum, value_name = "SHELL")]
    pub(crate) shell: clap_complete::Shell,
}

/// Options of `lockctl man`.
#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// Write lockctl.1 and one page per command (lockctl-run.1, ...) into this directory
    /// instead of printing lockctl.1.
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,
}

/// Options of `lockctl release`.
#[derive(Debug, Args)]
pub(crate) struct ReleaseArgs {
    /// The lock name.
    #[arg(value_name = "KEY")]
    pub(crate) key: String,

    /// Confirm: delete the lock whoever holds it.
    #[arg(long)]
    pub(crate) force: bool,

    #[command(flatten)]
    pub(crate) family: FamilyArgs,
}

/// What `run` does when the lock stays busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OnBusy {
    /// Exit with --conflict-exit-code, with a message on stderr.
    Fail,
    /// Exit 0 without running the command, silently.
    Skip,
}

/// The kind of a lock in `lockctl top`: its KIND column, `--kind`, and the
/// `kind` field of its JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LockKind {
    /// A plain lock.
    Lock,
    /// A plain lock kept by a hot lock's keeper between its uses.
    Hot,
    /// A fair lock.
    Fair,
    /// A read-write lock.
    Rw,
    /// A semaphore.
    Sem,
    /// A role's lock of leader election (`leader:<role>`), shown with its term and metadata.
    Leader,
}

impl LockKind {
    /// The kind's name, as `--kind` takes it and the KIND column shows it.
    pub(crate) fn label(self) -> String {
        self.to_possible_value()
            .map(|value| value.get_name().to_owned())
            .unwrap_or_default()
    }

    /// The filter after `filter` (the view's `f`): every kind, then each
    /// kind in turn, then every kind again.
    pub(crate) fn next_filter(filter: Option<Self>) -> Option<Self> {
        let all = Self::value_variants();
        match filter {
            None => all.first().copied(),
            Some(kind) => {
                let at = all.iter().position(|k| *k == kind).unwrap_or(0);
                all.get(at + 1).copied()
            }
        }
    }
}

/// A column of `lockctl top` to sort by: `--sort`, and the view's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum SortBy {
    /// The lock name.
    Name,
    /// The holder (HOLDER).
    Owner,
    /// The fencing token.
    Token,
    /// The lease left.
    Ttl,
    /// How long the holder has held it.
    Hold,
    /// The clients waiting.
    Waiters,
}

impl SortBy {
    /// The column's name, as `--sort` takes it.
    pub(crate) fn label(self) -> String {
        self.to_possible_value()
            .map(|value| value.get_name().to_owned())
            .unwrap_or_default()
    }

    /// The key that sorts by this column in the view (see `TOP_HELP`).
    pub(crate) fn of_key(key: char) -> Option<Self> {
        Some(match key {
            'n' => SortBy::Name,
            'o' => SortBy::Owner,
            'k' => SortBy::Token,
            't' => SortBy::Ttl,
            'h' => SortBy::Hold,
            'w' => SortBy::Waiters,
            _ => return None,
        })
    }

    /// The next column, after the last the first (the view's `s`).
    pub(crate) fn next(self) -> Self {
        let all = Self::value_variants();
        let at = all.iter().position(|s| *s == self).unwrap_or(0);
        all.get(at + 1).or(all.first()).copied().unwrap_or(self)
    }
}

/// A humantime duration: `10s`, `500ms`, `1m 30s`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|err| format!("`{text}` is not a duration ({err}); write e.g. 10s, 500ms or 2m"))
}

fn parse_positive(text: &str) -> Result<Duration, String> {
    match parse_duration(text)? {
        d if d.is_zero() => Err("must be greater than zero".into()),
        d => Ok(d),
    }
}

/// `forever`, or a duration (`0s` tries once).
fn parse_wait(text: &str) -> Result<Wait, String> {
    if text.trim().eq_ignore_ascii_case("forever") {
        return Ok(Wait::Forever);
    }
    parse_duration(text).map(Wait::from)
}

fn parse_lease(text: &str) -> Result<Duration, String> {
    let lease = parse_duration(text)?;
    if !(MIN_WATCHDOG_LEASE..=distlock_core::MAX_LEASE).contains(&lease) {
        return Err(format!(
            "a lease must be between {} and {}",
            humantime::format_duration(MIN_WATCHDOG_LEASE),
            humantime::format_duration(distlock_core::MAX_LEASE)
        ));
    }
    Ok(lease)
}

/// `--at-least`: a duration of at most the longest lease (`0s` is no minimum).
fn parse_at_least(text: &str) -> Result<Duration, String> {
    let at_least = parse_duration(text)?;
    if at_least > distlock_core::MAX_LEASE {
        return Err(format!(
            "a minimum hold must be at most {}",
            humantime::format_duration(distlock_core::MAX_LEASE)
        ));
    }
    Ok(at_least)
}

/// `--layout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LayoutArg {
    /// This library's layout.
    Native,
    /// Redisson's `RLock` / `RFencedLock` layout.
    Redisson,
}

/// `--sharded-pubsub`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ShardedArg {
    /// Sharded on a cluster (Redis 7), as Redisson's AUTO.
    Auto,
    /// Sharded (clusters only).
    On,
    /// Classic pub/sub.
    Off,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations() {
        assert_eq!(parse_wait("forever"), Ok(Wait::Forever));
        assert_eq!(parse_wait("10s"), Ok(Wait::For(Duration::from_secs(10))));
        assert_eq!(parse_wait("0s"), Ok(Wait::Once));
        assert!(parse_wait("10x").unwrap_err().contains("10x"));
        assert_eq!(parse_lease("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_lease("1ms").is_err());
        assert!(parse_lease("366days").is_err());
        assert!(parse_positive("0s").is_err());
    }

    #[test]
    fn sort_columns_cycle_and_are_named_as_sort_takes_them() {
        let all = SortBy::value_variants();
        let mut by = SortBy::Name;
        for _ in all {
            let parsed = SortBy::from_str(&by.label(), false);
            assert_eq!(parsed, Ok(by));
            by = by.next();
        }
        assert_eq!(by, SortBy::Name, "s comes back to the first column");
        assert_eq!(SortBy::Waiters.label(), "waiters");
    }

    #[test]
    fn an_unknown_option_before_the_command_is_a_usage_error() {
        use clap::error::ErrorKind;
        let parse = |args: &[&str]| {
            let mut argv = vec!["lockctl", "run", "--key", "k"];
            argv.extend_from_slice(args);
            match Cli::try_parse_from(argv).map(|cli| cli.command) {
                Ok(Command::Run(run)) => Ok(run.command),
                Ok(other) => panic!("{other:?}"),
                Err(err) => Err(err.kind()),
            }
        };
        // Before the fix this parsed, with `--no-such-option 1s -- true` as the command.
        assert_eq!(
            parse(&["--no-such-option", "1s", "--", "true"]),
            Err(ErrorKind::UnknownArgument)
        );
        assert_eq!(
            parse(&["-Z", "--", "true"]),
            Err(ErrorKind::UnknownArgument)
        );
        // The command's own options pass once the command has started, with or without `--`.
        let argv = |v: &[&str]| Ok(v.iter().map(OsString::from).collect::<Vec<_>>());
        assert_eq!(parse(&["ls", "-la", "--x"]), argv(&["ls", "-la", "--x"]));
        assert_eq!(parse(&["--", "ls", "-la"]), argv(&["ls", "-la"]));
        assert_eq!(parse(&["--", "--weird-name"]), argv(&["--weird-name"]));
    }

    #[test]
    fn at_least_is_the_locks_minimum_hold() {
        let cli = Cli::try_parse_from([
            "lockctl",
            "run",
            "-k",
            "k",
            "--at-least",
            "900ms",
            "--",
            "true",
        ]);
        match cli.map(|cli| cli.command) {
            Ok(Command::Run(run)) => assert_eq!(
                run.lock_options(),
                LockOptions::new().hold_at_least(Duration::from_millis(900))
            ),
            other => panic!("{other:?}"),
        }
        assert!(parse_at_least("400days").is_err());
        assert!(parse_at_least("soon").unwrap_err().contains("soon"));
    }

    #[test]
    fn the_wait_is_the_locks_option() {
        let cli = Cli::try_parse_from(["lockctl", "run", "-k", "k", "-w", "forever", "--", "true"]);
        match cli.map(|cli| cli.command) {
            Ok(Command::Run(run)) => {
                assert_eq!(run.lock_options(), LockOptions::new().wait_forever())
            }
            other => panic!("{other:?}"),
        }
        let cli = Cli::try_parse_from(["lockctl", "run", "-k", "k", "--", "true"]);
        match cli.map(|cli| cli.command) {
            Ok(Command::Run(run)) => assert_eq!(run.lock_options(), LockOptions::new()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn one_primitive_at_a_time() {
        let run = |args: &[&str]| {
            let mut argv = vec!["lockctl", "run", "--key", "k"];
            argv.extend_from_slice(args);
            argv.extend_from_slice(&["--", "true"]);
            match Cli::try_parse_from(argv).map(|cli| cli.command) {
                Ok(Command::Run(run)) => Ok(run.primitive()),
                Ok(other) => panic!("{other:?}"),
                Err(err) => Err(err.kind()),
            }
        };
        assert_eq!(run(&[]), Ok(Primitive::Lock));
        assert_eq!(run(&["--read"]), Ok(Primitive::Read));
        assert_eq!(run(&["--write"]), Ok(Primitive::Write));
        assert_eq!(run(&["--fair"]), Ok(Primitive::Fair));
        assert_eq!(
            run(&["--permits", "3"]),
            Ok(Primitive::Permits { total: 3, take: 1 })
        );
        assert_eq!(
            run(&["--permits", "3", "--take", "2"]),
            Ok(Primitive::Permits { total: 3, take: 2 })
        );
        use clap::error::ErrorKind;
        assert_eq!(
            run(&["--read", "--write"]),
            Err(ErrorKind::ArgumentConflict)
        );
        assert_eq!(
            run(&["--fair", "--permits", "2"]),
            Err(ErrorKind::ArgumentConflict)
        );
        assert_eq!(
            run(&["--take", "2"]),
            Err(ErrorKind::MissingRequiredArgument)
        );
        assert_eq!(run(&["--permits", "0"]), Err(ErrorKind::ValueValidation));
        assert_eq!(
            run(&["--permits", "2", "--take", "0"]),
            Err(ErrorKind::ValueValidation)
        );

        let status = |args: &[&str]| {
            let mut argv = vec!["lockctl", "status", "k"];
            argv.extend_from_slice(args);
            match Cli::try_parse_from(argv).map(|cli| cli.command) {
                Ok(Command::Status(status)) => Ok(status.family.family()),
                Ok(other) => panic!("{other:?}"),
                Err(err) => Err(err.kind()),
            }
        };
        assert_eq!(status(&[]), Ok(Family::Lock));
        assert_eq!(status(&["--fair"]), Ok(Family::Fair));
        assert_eq!(status(&["--read-write"]), Ok(Family::ReadWrite));
        assert_eq!(status(&["--semaphore"]), Ok(Family::Semaphore));
        assert_eq!(
            status(&["--fair", "--semaphore"]),
            Err(ErrorKind::ArgumentConflict)
        );
    }

    #[test]
    fn the_connect_timeout_default_is_lock_cores() {
        let cli = Cli::try_parse_from(["lockctl", "status", "k"]).unwrap();
        assert_eq!(
            cli.connection.connect_timeout,
            distlock_core::DEFAULT_CONNECT_TIMEOUT
        );
    }
}
