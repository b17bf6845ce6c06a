//! [`PostgresServer`]: one real PostgreSQL server, initialised into a temporary directory
//! and listening on a free loopback port, owned by a test.

use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::free_port;
use crate::spawn::spawn_tied_to_process;

/// How long a freshly started server may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between two readiness probes.
const READY_POLL: Duration = Duration::from_millis(50);
/// How long a fast shutdown may take on drop before the server is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// How many ports [`PostgresServer::start`] tries before giving up.
const START_ATTEMPTS: usize = 5;
/// The superuser (and the database) of a test server.
const USER: &str = "postgres";

/// A real PostgreSQL server (`initdb` + `postgres`) on a loopback port, owned by a test.
///
/// [`PostgresServer::start`] finds the binaries (`DISTLOCK_TEST_PG_BIN`, else the newest
/// `/usr/lib/postgresql/<version>/bin`, else `initdb` on `PATH`), runs `initdb` into a
/// temporary directory (trust authentication, superuser `postgres`, no fsync), starts
/// `postgres` on a free loopback port with its socket in that directory, and returns once the
/// server accepts connections. PostgreSQL refuses to run as root, so when the test runs as
/// root, `initdb` and `postgres` run as the unprivileged user `nobody` (or the user named by
/// `DISTLOCK_TEST_PG_USER`), which is given the temporary directory.
///
/// A test can [`stop`](PostgresServer::stop) it and [`start_again`](PostgresServer::start_again)
/// (or [`restart`](PostgresServer::restart)) it on the same port and data directory, and
/// [`pause`](PostgresServer::pause) (`SIGSTOP` of the postmaster and every backend) and
/// [`resume`](PostgresServer::resume) it.
///
/// Dropping it asks the server for a fast shutdown (`SIGINT`), kills it with `SIGKILL` if it
/// has not exited within 5 s, and removes the directory. The server is also spawned with a
/// parent-death signal, so it dies with the test process.
///
/// ```no_run
/// use lock_test_support::PostgresServer;
///
/// let server = PostgresServer::start();
/// let config = server.connection_string(); // "host=127.0.0.1 port=PORT user=postgres dbname=postgres"
/// # let _ = config;
/// ```
#[derive(Debug)]
pub struct PostgresServer {
    port: u16,
    child: Option<Child>,
    log_path: PathBuf,
    bin: PathBuf,
    account: Option<(u32, u32)>,
    // Declared last: removed after `Drop::drop` has stopped the process.
    dir: TempDir,
}

impl PostgresServer {
    /// Initialises and starts a server, and waits until it accepts connections.
    ///
    /// # Panics
    ///
    /// Panics when the PostgreSQL binaries cannot be found (the message names the install
    /// command), when `initdb` fails, or when the server does not accept connections within
    /// 30 s (the message includes its log).
    pub fn start() -> PostgresServer {
        Self::start_with(false)
    }

    /// As [`start`](Self::start), with TLS on (`ssl = on`): a CA and a server certificate
    /// for `127.0.0.1` and `localhost` are generated into the data directory; clients may
    /// connect with or without TLS. [`ca_cert_pem`](Self::ca_cert_pem) gives the CA.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_tls() -> PostgresServer {
        Self::start_with(true)
    }

    /// The CA certificate (PEM) of a server started with [`start_tls`](Self::start_tls).
    pub fn ca_cert_pem(&self) -> Option<Vec<u8>> {
        let path = self.dir.path().join("data").join("ca.crt");
        std::fs::read(path).ok()
    }

    fn start_with(tls: bool) -> PostgresServer {
        let bin = postgres_bin_dir();
        let account = account();
        let dir = tempfile::Builder::new()
            .prefix("lock-test-pg-")
            .tempdir_in(temp_base(account.is_some()))
            .unwrap_or_else(|e| panic!("cannot create a temporary directory for postgres: {e}"));
        if let Some((uid, gid)) = account {
            chown(dir.path(), uid, gid);
        }
        let data = dir.path().join("data");
        let log_path = dir.path().join("postgres.log");

        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                USER,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
            ])
            .stdin(Stdio::null());
        as_account(&mut initdb, account, dir.path());
        let output = initdb
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.join("initdb").display()));
        assert!(
            output.status.success(),
            "initdb failed ({}):\n{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        if tls {
            enable_tls(&data, account);
        }

        let mut server = PostgresServer {
            port: 0,
            child: None,
            log_path,
            bin,
            account,
            dir,
        };
        for attempt in 1..=START_ATTEMPTS {
            server.port = free_port();
            match server.launch() {
                Ok(()) => return server,
                Err(reason) if attempt < START_ATTEMPTS && reason.contains("could not bind") => {
                    continue
                }
                Err(reason) => panic!(
                    "postgres did not start on port {}: {reason}\n--- log ---\n{}",
                    server.port,
                    server.log()
                ),
            }
        }
        unreachable!("the last attempt either returns or panics")
    }

    /// The loopback port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A libpq-style connection string: `host=127.0.0.1 port=PORT user=postgres dbname=postgres`.
    pub fn connection_string(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user={USER} dbname={USER}",
            self.port
        )
    }

    /// The server's URL: `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/{USER}", self.port)
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        let mut text = String::new();
        if let Ok(mut file) = File::open(&self.log_path) {
            let _ = file.seek(SeekFrom::Start(0));
            let _ = file.read_to_string(&mut text);
        }
        text
    }

    /// The pid of the postmaster, or `None` while the server is stopped.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Stops the server with a fast shutdown (`SIGINT`: sessions are ended, the data is
    /// written out), killing it with `SIGKILL` if it has not exited within 5 s. The data
    /// directory is kept: [`start_again`](Self::start_again) starts the same server again.
    /// Harmless on a stopped server.
    pub fn stop(&mut self) {
        self.shut_down();
    }

    /// Starts a stopped server again on the same port and data directory, and waits until it
    /// accepts connections (the log of the earlier run is kept, so readiness is judged by the
    /// part written after this call). Harmless on a running server.
    ///
    /// # Panics
    ///
    /// Panics when the server does not accept connections within 30 s (the message includes
    /// its log), e.g. when another process took its port meanwhile.
    pub fn start_again(&mut self) {
        if self.child.is_some() {
            return;
        }
        if let Err(reason) = self.launch() {
            panic!(
                "postgres did not start again on port {}: {reason}\n--- log ---\n{}",
                self.port,
                self.log()
            );
        }
    }

    /// [`stop`](Self::stop), then [`start_again`](Self::start_again): the same server, the
    /// same port, the data that was committed before the shutdown.
    pub fn restart(&mut self) {
        self.stop();
        self.start_again();
    }

    /// Pauses the whole server with `SIGSTOP`: the postmaster and every process it forked
    /// (each session's backend, the background workers), so that no statement is answered
    /// and no connection accepted until [`resume`](Self::resume). Connections stay open.
    ///
    /// # Panics
    ///
    /// Panics when the server is stopped.
    pub fn pause(&self) {
        for pid in self.processes() {
            // SAFETY: kill(2) on the postmaster (our child, not reaped) or one of its children.
            unsafe {
                libc::kill(pid, libc::SIGSTOP);
            }
        }
    }

    /// Lets a server paused by [`pause`](Self::pause) run again (`SIGCONT` to the postmaster
    /// and the processes it forked). Harmless on a server that is not paused.
    ///
    /// # Panics
    ///
    /// Panics when the server is stopped.
    pub fn resume(&self) {
        for pid in self.processes() {
            // SAFETY: as in `pause`.
            unsafe {
                libc::kill(pid, libc::SIGCONT);
            }
        }
    }

    /// The postmaster's pid first, then those of its children (read from `/proc`).
    fn processes(&self) -> Vec<libc::pid_t> {
        let postmaster = self
            .child
            .as_ref()
            .and_then(|child| libc::pid_t::try_from(child.id()).ok())
            .unwrap_or_else(|| panic!("the postgres server on port {} is stopped", self.port));
        let mut pids = vec![postmaster];
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|name| name.parse::<libc::pid_t>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|ppid| ppid.parse::<libc::pid_t>().ok());
            if ppid == Some(postmaster) {
                pids.push(pid);
            }
        }
        pids
    }

    /// Starts `postgres` on `self.port` and waits until it accepts connections.
    fn launch(&mut self) -> Result<(), String> {
        let data = self.dir.path().join("data");
        let ready_before = self.log().matches("ready to accept connections").count();
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| format!("cannot open the log file: {e}"))?;
        let log_err = log
            .try_clone()
            .map_err(|e| format!("cannot clone the log file: {e}"))?;
        let mut command = Command::new(self.bin.join("postgres"));
        command
            .arg("-D")
            .arg(&data)
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(self.dir.path())
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args([
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
            ])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        as_account(&mut command, self.account, self.dir.path());
        let child =
            spawn_tied_to_process(command).map_err(|e| format!("cannot spawn postgres: {e}"))?;
        self.child = Some(child);

        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!("postgres exited ({status}): {}", self.log()));
                }
            }
            if self.accepts_connections(ready_before) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.shut_down();
                return Err(format!("not ready within {READY_TIMEOUT:?}"));
            }
            std::thread::sleep(READY_POLL);
        }
    }

    /// Whether the server accepts a connection and has finished starting up: its TCP port
    /// answers and the log says it is ready (for the `ready_before + 1`st time: the log is kept
    /// across restarts).
    fn accepts_connections(&self, ready_before: usize) -> bool {
        let address = SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port);
        TcpStream::connect_timeout(&address.into(), Duration::from_millis(200)).is_ok()
            && self.log().matches("ready to accept connections").count() > ready_before
    }

    /// Fast shutdown, then `SIGKILL` after [`STOP_TIMEOUT`]; reaps the process. A paused
    /// server is resumed first, so that it can shut down.
    fn shut_down(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(pid) = libc::pid_t::try_from(child.id()) {
            // SAFETY: kill(2) on our own child's pid, which it still is (not reaped yet).
            unsafe {
                libc::kill(pid, libc::SIGCONT);
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

impl Drop for PostgresServer {
    fn drop(&mut self) {
        if self.child.is_some() {
            // Its backends too, should a test have paused it and panicked.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.resume()));
        }
        self.shut_down();
    }
}

/// The directory of the PostgreSQL server binaries: `DISTLOCK_TEST_PG_BIN`, else the newest
/// `/usr/lib/postgresql/<version>/bin` that has `initdb`, else the directory of `initdb` on
/// `PATH`.
pub fn postgres_bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("DISTLOCK_TEST_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut versions: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let version = name
                .split('.')
                .map(|part| part.parse::<u32>().ok())
                .collect::<Option<Vec<u32>>>()?;
            let bin = entry.path().join("bin");
            crate::is_executable(&bin.join("initdb")).then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return bin;
    }
    crate::find_on_path("initdb")
        .and_then(|initdb| initdb.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| {
            panic!(
                "PostgreSQL server binaries not found (no /usr/lib/postgresql/*/bin/initdb, no \
                 initdb on PATH, DISTLOCK_TEST_PG_BIN unset): install them with \
                 `apt-get update && apt-get install -y postgresql` (the tests need a real PostgreSQL)"
            )
        })
}

/// The unprivileged account to run PostgreSQL as when this process is root: `(uid, gid)` of
/// `DISTLOCK_TEST_PG_USER` or `nobody`; `None` when not root.
pub(crate) fn account() -> Option<(u32, u32)> {
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let name = std::env::var("DISTLOCK_TEST_PG_USER").unwrap_or_else(|_| "nobody".to_owned());
    let c_name = std::ffi::CString::new(name.clone())
        .unwrap_or_else(|_| panic!("DISTLOCK_TEST_PG_USER {name:?} contains a NUL"));
    // SAFETY: getpwnam(3) with a valid C string; the result is read at once, before any other
    // call that could overwrite its static buffer (tests call this from one thread at a time
    // per server, and only read two integers).
    let entry = unsafe { libc::getpwnam(c_name.as_ptr()) };
    if entry.is_null() {
        assert!(
            name == "nobody",
            "user {name:?} (DISTLOCK_TEST_PG_USER) does not exist"
        );
        return Some((65534, 65534));
    }
    // SAFETY: `entry` is non-null and points to getpwnam's passwd record.
    let (uid, gid) = unsafe { ((*entry).pw_uid, (*entry).pw_gid) };
    assert!(
        uid != 0,
        "PostgreSQL cannot run as root: {name:?} has uid 0"
    );
    Some((uid, gid))
}

/// Where to make the server's directory: the usual temporary directory, unless another
/// user must reach it and cannot (a directory on the way is not world-searchable, as a
/// `TMPDIR` under `/root`), or its path is too long for the server's Unix socket (about 100
/// bytes); then `/tmp`.
pub(crate) fn temp_base(for_another_user: bool) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;

    let base = std::env::temp_dir();
    let searchable = |dir: &Path| {
        std::fs::metadata(dir)
            .map(|m| m.permissions().mode() & 0o001 != 0)
            .unwrap_or(false)
    };
    let reachable = !for_another_user || base.ancestors().all(searchable);
    if reachable && base.as_os_str().len() <= 60 {
        base
    } else {
        PathBuf::from("/tmp")
    }
}

/// Generates the TLS material into `data` (owned by the server's account, the
/// key readable by it alone, as PostgreSQL demands) and turns `ssl` on.
fn enable_tls(data: &Path, account: Option<(u32, u32)>) {
    use std::io::Write as _;
    use std::os::unix::fs::PermissionsExt as _;

    let files = crate::tls::TlsFiles::generate(data);
    for path in [&files.ca_path, &files.cert_path, &files.key_path] {
        if let Some((uid, gid)) = account {
            chown(path, uid, gid);
        }
    }
    std::fs::set_permissions(&files.key_path, std::fs::Permissions::from_mode(0o600))
        .unwrap_or_else(|e| panic!("cannot restrict {}: {e}", files.key_path.display()));
    let mut conf = std::fs::OpenOptions::new()
        .append(true)
        .open(data.join("postgresql.conf"))
        .unwrap_or_else(|e| panic!("cannot open postgresql.conf: {e}"));
    writeln!(
        conf,
        "ssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\nssl_ca_file = '{}'",
        files.cert_path.display(),
        files.key_path.display(),
        files.ca_path.display()
    )
    .unwrap_or_else(|e| panic!("cannot write postgresql.conf: {e}"));
}

/// Gives `path` to `uid:gid`.
pub(crate) fn chown(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .unwrap_or_else(|e| panic!("cannot give {} to uid {uid}: {e}", path.display()));
}

/// Runs `command` as `account` (when root), with a home directory it can write.
pub(crate) fn as_account(command: &mut Command, account: Option<(u32, u32)>, home: &Path) {
    command
        .env("HOME", home)
        .env("LC_ALL", "C")
        .env_remove("PGDATA");
    if let Some((uid, gid)) = account {
        // std drops the supplementary groups when root sets a uid.
        command.uid(uid).gid(gid);
    }
}
