//! [`PgBouncer`]: a real PgBouncer in transaction pooling mode in front of a
//! [`PostgresServer`], on a free loopback port, owned by a test.

use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::postgres::{account, as_account, chown, temp_base};
use crate::spawn::spawn_tied_to_process;
use crate::{free_port, PostgresServer};

/// How long a freshly started PgBouncer may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long PgBouncer may take to exit on `SIGINT` before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// How many ports [`PgBouncer::start`] tries before giving up.
const START_ATTEMPTS: usize = 5;
/// The user (and database) PgBouncer lets in and passes on: the server's superuser, also
/// PgBouncer's admin.
const USER: &str = "postgres";
/// The environment variable that makes a missing `pgbouncer` a failure, not a skip.
pub const REQUIRE_PGBOUNCER: &str = "DISTLOCK_REQUIRE_PGBOUNCER";

/// A real PgBouncer in transaction pooling mode (`pool_mode = transaction`), in front of one
/// [`PostgresServer`], on a free loopback port.
///
/// [`PgBouncer::start`] writes an ini file and a user list into a temporary directory
/// (`auth_type = trust`, the user `postgres`, which is also the admin of the `pgbouncer`
/// console, the database `postgres` of the server), starts `pgbouncer` on it (as the same
/// unprivileged user as [`PostgresServer`] when the test runs as root: PgBouncer refuses to
/// run as root), and returns once it accepts connections.
///
/// Dropping it stops PgBouncer (`SIGINT`, then `SIGKILL` after 5 s) and removes the
/// directory; it is also spawned with a parent-death signal, so it dies with the test process.
///
/// ```no_run
/// use lock_test_support::{PgBouncer, PostgresServer};
///
/// let server = PostgresServer::start();
/// if let Some(bouncer) = PgBouncer::start_or_skip(&server) {
///     let pooled = bouncer.url(); // postgres://postgres@127.0.0.1:PORT/postgres
///     let admin = bouncer.admin_connection_string(); // ... dbname=pgbouncer
///     # let _ = (pooled, admin);
/// }
/// ```
#[derive(Debug)]
pub struct PgBouncer {
    port: u16,
    child: Option<Child>,
    log_path: PathBuf,
    // Declared last: removed after `Drop::drop` has stopped the process.
    dir: TempDir,
}

impl PgBouncer {
    /// Starts PgBouncer in front of `server` and waits until it accepts connections.
    ///
    /// # Panics
    ///
    /// Panics when the `pgbouncer` binary cannot be found (see [`pgbouncer_path`]; the
    /// message names the install command), or when it does not accept connections within
    /// 20 s (the message includes its log).
    pub fn start(server: &PostgresServer) -> PgBouncer {
        let binary = pgbouncer_path().unwrap_or_else(|| {
            panic!(
                "pgbouncer not found (DISTLOCK_TEST_PGBOUNCER, PATH, /usr/sbin): install it with \
                 `apt-get update && apt-get install -y pgbouncer`"
            )
        });
        let account = account();
        let dir = tempfile::Builder::new()
            .prefix("lock-test-pgbouncer-")
            .tempdir_in(temp_base(account.is_some()))
            .unwrap_or_else(|e| panic!("cannot create a temporary directory for pgbouncer: {e}"));
        if let Some((uid, gid)) = account {
            chown(dir.path(), uid, gid);
        }
        let log_path = dir.path().join("pgbouncer.log");
        let users = dir.path().join("users.txt");
        std::fs::write(&users, format!("\"{USER}\" \"\"\n"))
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", users.display()));

        let mut bouncer = PgBouncer {
            port: 0,
            child: None,
            log_path,
            dir,
        };
        for attempt in 1..=START_ATTEMPTS {
            bouncer.port = free_port();
            let ini = bouncer.dir.path().join("pgbouncer.ini");
            std::fs::write(&ini, bouncer.ini(server.port(), &users))
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", ini.display()));
            let mut command = Command::new(&binary);
            command
                .arg(&ini)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            as_account(&mut command, account, bouncer.dir.path());
            match bouncer.launch(command) {
                Ok(()) => return bouncer,
                Err(reason) if attempt < START_ATTEMPTS && reason.contains("bind") => continue,
                Err(reason) => panic!(
                    "pgbouncer did not start on port {}: {reason}\n--- log ---\n{}",
                    bouncer.port,
                    bouncer.log()
                ),
            }
        }
        unreachable!("the last attempt either returns or panics")
    }

    /// [`start`](Self::start) when the `pgbouncer` binary is installed; `None`, after printing
    /// why the caller skips, when it is not and `DISTLOCK_REQUIRE_PGBOUNCER` is unset.
    ///
    /// # Panics
    ///
    /// Panics as [`start`](Self::start) does, and when `pgbouncer` is missing while
    /// `DISTLOCK_REQUIRE_PGBOUNCER` is set (as CI sets it after installing the package).
    pub fn start_or_skip(server: &PostgresServer) -> Option<PgBouncer> {
        if pgbouncer_path().is_none() && std::env::var_os(REQUIRE_PGBOUNCER).is_none() {
            eprintln!(
                "skipped: pgbouncer is not installed (`apt-get install -y pgbouncer`; set \
                 {REQUIRE_PGBOUNCER}=1 to make this a failure)"
            );
            return None;
        }
        Some(PgBouncer::start(server))
    }

    /// The loopback port PgBouncer listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of the server's `postgres` database through PgBouncer:
    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/{USER}", self.port)
    }

    /// A libpq-style connection string of PgBouncer's admin console (database `pgbouncer`,
    /// simple queries only: `SHOW POOLS`, `SHOW SERVERS`, `SHOW STATS`).
    pub fn admin_connection_string(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user={USER} dbname=pgbouncer",
            self.port
        )
    }

    /// PgBouncer's log so far.
    pub fn log(&self) -> String {
        let mut text = String::new();
        if let Ok(mut file) = File::open(&self.log_path) {
            let _ = file.seek(SeekFrom::Start(0));
            let _ = file.read_to_string(&mut text);
        }
        text
    }

    /// The ini file: transaction pooling of the server's `postgres` database on `self.port`.
    fn ini(&self, server_port: u16, users: &std::path::Path) -> String {
        let dir = self.dir.path().display();
        format!(
            "[databases]\n\
             {USER} = host=127.0.0.1 port={server_port} dbname={USER}\n\
             \n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             auth_type = trust\n\
             auth_file = {users}\n\
             admin_users = {USER}\n\
             stats_users = {USER}\n\
             pool_mode = transaction\n\
             max_client_conn = 1000\n\
             default_pool_size = 20\n\
             ignore_startup_parameters = extra_float_digits\n\
             logfile = {dir}/pgbouncer.log\n\
             pidfile = {dir}/pgbouncer.pid\n",
            port = self.port,
            users = users.display(),
        )
    }

    /// Starts `command` and waits until PgBouncer accepts connections on `self.port`.
    fn launch(&mut self, command: Command) -> Result<(), String> {
        let child =
            spawn_tied_to_process(command).map_err(|e| format!("cannot spawn pgbouncer: {e}"))?;
        self.child = Some(child);
        let deadline = Instant::now() + READY_TIMEOUT;
        let address = SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port);
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!("pgbouncer exited ({status}): {}", self.log()));
                }
            }
            if TcpStream::connect_timeout(&address.into(), Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.stop();
                return Err(format!("not ready within {READY_TIMEOUT:?}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `SIGINT` (immediate shutdown), then `SIGKILL` after [`STOP_TIMEOUT`]; reaps it.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(pid) = libc::pid_t::try_from(child.id()) {
            // SAFETY: kill(2) on our own child's pid, which it still is (not reaped yet).
            unsafe {
                libc::kill(pid, libc::SIGINT);
            }
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The `pgbouncer` binary: `DISTLOCK_TEST_PGBOUNCER` (when it names no executable file,
/// there is none), else the one on `PATH`, else `/usr/sbin/pgbouncer` (where Debian puts
/// it, often not on a user's `PATH`).
pub fn pgbouncer_path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("DISTLOCK_TEST_PGBOUNCER") {
        let path = PathBuf::from(path);
        return crate::is_executable(&path).then_some(path);
    }
    crate::find_on_path("pgbouncer").or_else(|| {
        let sbin = PathBuf::from("/usr/sbin/pgbouncer");
        crate::is_executable(&sbin).then_some(sbin)
    })
}
