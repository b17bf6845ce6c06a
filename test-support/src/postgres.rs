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
    /// `name=value` settings given after the defaults (`-c`), which they override.
    settings: Vec<String>,
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
        PostgresServer::start_with(&[])
    }

    /// The server shared by the tests of one test binary that run at the same time: the
    /// running one, or a new one ([`PostgresServer::start`]) when none runs (it stops when
    /// the last test holding it ends). Tests keep apart by schema.
    ///
    /// # Panics
    ///
    /// As [`PostgresServer::start`].
    pub fn shared() -> std::sync::Arc<PostgresServer> {
        use std::sync::{Arc, Mutex, Weak};
        static SERVER: Mutex<Weak<PostgresServer>> = Mutex::new(Weak::new());
        let mut shared = SERVER.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(server) = shared.upgrade() {
            return server;
        }
        let server = Arc::new(PostgresServer::start());
        *shared = Arc::downgrade(&server);
        server
    }

    /// [`PostgresServer::start`] with server settings (`name`, `value`) given after the
    /// defaults, which they override: `start_with(&[("synchronous_commit", "on")])`.
    /// They stay in force across [`PostgresServer::restart_fast`] and
    /// [`PostgresServer::crash_restart`].
    ///
    /// # Panics
    ///
    /// As [`PostgresServer::start`].
    pub fn start_with(settings: &[(&str, &str)]) -> PostgresServer {
        PostgresServer::start_inner(settings, false)
    }

    /// As [`start`](Self::start), with TLS on (`ssl = on`): a CA and a server certificate
    /// for `127.0.0.1` and `localhost` are generated into the data directory; clients may
    /// connect with or without TLS. [`ca_cert_pem`](Self::ca_cert_pem) gives the CA.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_tls() -> PostgresServer {
        PostgresServer::start_inner(&[], true)
    }

    /// The CA certificate (PEM) of a server started with [`start_tls`](Self::start_tls).
    pub fn ca_cert_pem(&self) -> Option<Vec<u8>> {
        std::fs::read(self.dir.path().join("data").join("ca.crt")).ok()
    }

    fn start_inner(settings: &[(&str, &str)], tls: bool) -> PostgresServer {
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
            settings: settings
                .iter()
                .map(|(name, value)| format!("{name}={value}"))
                .collect(),
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

    /// The process id of the postmaster, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The postmaster and every process it started (backends, background workers), the
    /// postmaster first; empty when it does not run.
    pub fn processes(&self) -> Vec<u32> {
        let Some(postmaster) = self.pid() else {
            return Vec::new();
        };
        let mut pids = vec![postmaster];
        pids.extend(children_of(postmaster));
        pids
    }

    /// `SIGSTOP` of the postmaster, then of every process it started (it forks no new one
    /// while stopped): the whole server stops answering, its connections stay open.
    /// Returns how many processes were stopped.
    pub fn pause(&self) -> usize {
        let Some(postmaster) = self.pid() else {
            return 0;
        };
        signal(postmaster, libc::SIGSTOP);
        let children = children_of(postmaster);
        for &pid in &children {
            signal(pid, libc::SIGSTOP);
        }
        1 + children.len()
    }

    /// `SIGCONT` of every process of the server (the children first), after
    /// [`PostgresServer::pause`].
    pub fn resume(&self) {
        let Some(postmaster) = self.pid() else {
            return;
        };
        for pid in children_of(postmaster) {
            signal(pid, libc::SIGCONT);
        }
        signal(postmaster, libc::SIGCONT);
    }

    /// A fast shutdown (`SIGINT`: sessions are ended, a checkpoint is written), then a start
    /// on the same data directory and port. Errors (with the log's end) when it does not
    /// stop within 5 s or does not start again within 30 s.
    pub fn restart_fast(&mut self) -> Result<(), String> {
        if !self.stop_within(STOP_TIMEOUT) {
            return Err("the fast shutdown did not finish within 5 s (killed)".to_owned());
        }
        self.relaunch()
    }

    /// A crash: `SIGKILL` of the postmaster and of every process it started, at once (no
    /// checkpoint, WAL buffers in shared memory not written: with `synchronous_commit = off`
    /// the last commits are lost), then a start on the same data directory and port, which
    /// runs crash recovery. Errors when it does not start again within 30 s.
    pub fn crash_restart(&mut self) -> Result<(), String> {
        let Some(mut child) = self.child.take() else {
            return self.relaunch();
        };
        let postmaster = child.id();
        signal(postmaster, libc::SIGKILL);
        let children = children_of(postmaster);
        for &pid in &children {
            signal(pid, libc::SIGKILL);
        }
        let _ = child.wait();
        // The orphaned children are reparented and reaped elsewhere: wait until they are
        // gone, or the new postmaster finds the old shared memory still attached.
        let deadline = Instant::now() + STOP_TIMEOUT;
        while children.iter().any(|&pid| alive(pid)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.relaunch()
    }

    /// Starts the server again on its port (retried while the port or the old shared memory
    /// is still busy).
    fn relaunch(&mut self) -> Result<(), String> {
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            match self.launch() {
                Ok(()) => return Ok(()),
                Err(reason) => {
                    last = reason;
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
        Err(format!("postgres did not start again: {last}"))
    }

    /// Starts `postgres` on `self.port` and waits until it accepts connections.
    fn launch(&mut self) -> Result<(), String> {
        let (bin, account) = (self.bin.clone(), self.account);
        let data = self.dir.path().join("data");
        let started_at = self.log().len();
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| format!("cannot open the log file: {e}"))?;
        let log_err = log
            .try_clone()
            .map_err(|e| format!("cannot clone the log file: {e}"))?;
        let mut command = Command::new(bin.join("postgres"));
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
            ]);
        for setting in &self.settings {
            command.arg("-c").arg(setting);
        }
        command.stdin(Stdio::null()).stdout(log).stderr(log_err);
        as_account(&mut command, account, self.dir.path());
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
            if self.accepts_connections(started_at) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.stop();
                return Err(format!("not ready within {READY_TIMEOUT:?}"));
            }
            std::thread::sleep(READY_POLL);
        }
    }

    /// Whether the server accepts a connection and has finished starting up: its TCP port
    /// answers and the log, from byte `from` on, says it is ready.
    fn accepts_connections(&self, from: usize) -> bool {
        let address = SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port);
        TcpStream::connect_timeout(&address.into(), Duration::from_millis(200)).is_ok()
            && self
                .log()
                .get(from..)
                .is_some_and(|log| log.contains("ready to accept connections"))
    }

    /// Fast shutdown, then `SIGKILL` after [`STOP_TIMEOUT`]; reaps the process.
    fn stop(&mut self) {
        self.stop_within(STOP_TIMEOUT);
    }

    /// Fast shutdown, then `SIGKILL` (of the postmaster and its processes) after `timeout`;
    /// reaps the postmaster. Returns whether it stopped by itself.
    fn stop_within(&mut self, timeout: Duration) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        if let Ok(pid) = libc::pid_t::try_from(child.id()) {
            // SAFETY: kill(2) on our own child's pid, which it still is (not reaped yet).
            unsafe {
                libc::kill(pid, libc::SIGINT);
            }
        }
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let children = children_of(child.id());
        let _ = child.kill();
        for pid in children {
            signal(pid, libc::SIGKILL);
        }
        let _ = child.wait();
        false
    }
}

/// Sends `sig` to `pid`.
fn signal(pid: u32, sig: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) has no memory-safety preconditions; the pids are the server's.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// Whether process `pid` exists (and is not a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    })
}

/// The processes whose parent is `parent` (from `/proc`).
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                // `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
                stat.rsplit_once(") ")
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                    == Some(parent)
            })
        })
        .collect()
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.stop();
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
