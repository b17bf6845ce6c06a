//! [`RedisServer`]: one real `redis-server` process owned by a test.

use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use redis::{ErrorKind, RedisError, ServerErrorKind};
use tempfile::TempDir;

use crate::options::ServerOptions;
use crate::spawn::spawn_tied_to_process;
use crate::tls::{ensure_crypto_provider, TlsFiles};
use crate::{free_cluster_port, free_port, redis_server_path};

/// How long a freshly started server may take to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between two readiness probes.
const READY_POLL: Duration = Duration::from_millis(20);
/// How long [`RedisServer::restart`] keeps retrying while its port is unavailable.
const RESTART_PORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How many ports [`RedisServer::start_with`] tries before giving up.
const START_ATTEMPTS: usize = 8;
/// Connection timeout of the harness's own connections ([`RedisServer::conn`], probes).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Connection and reply timeout of one readiness probe; a probe that times out is retried.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// Number of log lines [`RedisServer::log_tail`] returns.
const LOG_TAIL_LINES: usize = 40;
/// Name of a sentinel's configuration file inside its directory.
const SENTINEL_CONFIG: &str = "sentinel.conf";
/// Name of a cluster node's configuration file inside its directory.
const CLUSTER_CONFIG: &str = "nodes.conf";
/// `--cluster-node-timeout` of [`ServerOptions::cluster_node`] servers, in milliseconds.
const CLUSTER_NODE_TIMEOUT_MS: &str = "1000";

/// A real `redis-server` process on a loopback port, owned by a test.
///
/// Started by [`RedisServer::start`] or [`RedisServer::start_with`], which return only once
/// the server answers `PING`. The server runs with
/// `--save "" --appendonly no --bind 127.0.0.1 --daemonize no`, its own temporary `--dir`, and
/// its stdout/stderr appended to a log file in that directory (see
/// [`RedisServer::log_tail`]).
///
/// Dropping it resumes the process (in case it was paused), kills it with `SIGKILL`, reaps it
/// and removes the temporary directory.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    pid: u32,
    options: ServerOptions,
    bind_addr: Option<std::net::Ipv4Addr>,
    tls: Option<TlsFiles>,
    child: Option<Child>,
    last_exit: Option<ExitStatus>,
    binary: PathBuf,
    log_path: PathBuf,
    // Declared last: removed after `Drop::drop` has killed the process.
    dir: TempDir,
}

/// A server paused by [`RedisServer::paused`]: resumed when this guard is dropped.
#[derive(Debug)]
#[must_use = "the server is resumed when this guard is dropped"]
pub struct PausedServer<'a> {
    server: &'a RedisServer,
    resumed: bool,
}

impl PausedServer<'_> {
    /// Resumes the server now (see [`RedisServer::resume`]).
    pub fn resume(mut self) {
        self.resumed = true;
        self.server.resume();
    }
}

impl Drop for PausedServer<'_> {
    fn drop(&mut self) {
        if !self.resumed {
            // Never panic in a drop that may run during a panic: a killed server stays killed.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.server.resume()));
        }
    }
}

/// Why one launch of the process did not end with a ready server.
struct LaunchFailure {
    /// The port was unavailable: another process holds it, so another try may succeed.
    port_unavailable: bool,
    reason: String,
}

impl RedisServer {
    /// Starts a plain (non-TLS) server with default options and waits until it answers.
    ///
    /// # Panics
    ///
    /// Panics if `redis-server` is not on `PATH` (the message names the install command), or
    /// if the server does not become ready within 10 s (the message includes its log tail).
    pub fn start() -> RedisServer {
        Self::start_with(ServerOptions::new())
    }

    /// Starts a server configured by `options` and waits until it answers `PING`.
    ///
    /// A free port is picked with [`free_port`] (with [`free_cluster_port`] for
    /// [`ServerOptions::cluster_node`]); if the server cannot bind it (another process took it
    /// in the meantime), another port is tried, up to 8 times.
    ///
    /// # Panics
    ///
    /// Panics if `redis-server` is not on `PATH` (the message names the install command), if
    /// the process exits during startup, or if it does not answer within 10 s; the message
    /// includes the tail of the server log. Also panics if `options` combine
    /// [`ServerOptions::sentinel`] with [`ServerOptions::tls`] or
    /// [`ServerOptions::cluster_node`].
    pub fn start_with(options: ServerOptions) -> RedisServer {
        let binary = options.binary.clone().unwrap_or_else(redis_server_path);
        assert!(
            options.sentinel.is_none() || !(options.tls || options.cluster),
            "lock-test-support: ServerOptions::sentinel cannot be combined with tls() or \
             cluster_node()"
        );
        let dir = tempfile::Builder::new()
            .prefix("lock-test-redis-")
            .tempdir()
            .unwrap_or_else(|e| {
                panic!("cannot create a temporary directory for redis-server: {e}")
            });
        let tls = options.tls.then(|| TlsFiles::generate(dir.path()));
        let bind_addr = options.bind.as_ref().map(|b| b.take());
        let mut server = RedisServer {
            port: 0,
            pid: 0,
            bind_addr,
            options,
            tls,
            child: None,
            last_exit: None,
            binary,
            log_path: dir.path().join("redis.log"),
            dir,
        };

        for attempt in 1..=START_ATTEMPTS {
            server.port = if server.options.cluster {
                free_cluster_port()
            } else {
                free_port()
            };
            server.write_sentinel_config();
            match server.launch() {
                Ok(()) => return server,
                Err(failure) if failure.port_unavailable && attempt < START_ATTEMPTS => continue,
                Err(failure) => server.fail("start", &failure.reason),
            }
        }
        unreachable!("the last attempt either returns or panics")
    }

    /// The loopback port the server listens on (its TLS port for TLS servers).
    ///
    /// Stays the same across [`RedisServer::restart`].
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process id of the most recently started `redis-server` process.
    ///
    /// Changes on [`RedisServer::restart`]; after [`RedisServer::kill`] it is the id of the
    /// killed (and reaped) process.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The URL of the server: `redis://127.0.0.1:PORT/`, or `rediss://127.0.0.1:PORT/` for a
    /// TLS server.
    ///
    /// A client for a TLS server must trust [`RedisServer::ca_cert_pem`]; see
    /// [`RedisServer::client`].
    pub fn url(&self) -> String {
        format!("{}://127.0.0.1:{}/", self.scheme(), self.port)
    }

    /// The extra address the server listens on and announces
    /// ([`ServerOptions::bind_addr`], [`ServerOptions::bind_pool`]), if any.
    pub fn bind_addr(&self) -> Option<std::net::Ipv4Addr> {
        self.bind_addr
    }

    /// The URL of the server on its extra address ([`RedisServer::bind_addr`]), or
    /// [`RedisServer::url`] when it has none.
    pub fn bind_url(&self) -> String {
        match self.bind_addr {
            Some(addr) => format!("{}://{addr}:{}/", self.scheme(), self.port),
            None => self.url(),
        }
    }

    /// The URL for logging in as an ACL user: `redis[s]://USER:PASSWORD@127.0.0.1:PORT/`.
    ///
    /// `user` and `password` are percent-encoded, so any characters may be used.
    pub fn url_with_auth(&self, user: &str, password: &str) -> String {
        format!(
            "{}://{}:{}@127.0.0.1:{}/",
            self.scheme(),
            percent_encode(user),
            percent_encode(password),
            self.port
        )
    }

    /// The PEM-encoded CA certificate that signed a TLS server's certificate, or `None` for a
    /// plain server.
    ///
    /// Pass it as `root_cert` in [`redis::TlsCertificates`] to
    /// [`redis::Client::build_with_tls`]. The same CA is kept across restarts.
    pub fn ca_cert_pem(&self) -> Option<Vec<u8>> {
        self.tls.as_ref().map(|tls| tls.ca_pem.clone())
    }

    /// A client for [`RedisServer::url`], for assertions.
    ///
    /// For a TLS server the client trusts the generated CA, and rustls's `ring` crypto provider
    /// is installed as the process default first (if no provider is installed yet).
    pub fn client(&self) -> redis::Client {
        self.client_for_url(&self.url())
    }

    /// A client that logs in as `user` with `password` (see [`ServerOptions::acl_user`]).
    ///
    /// Like [`RedisServer::client`], a client for a TLS server trusts the generated CA.
    pub fn client_with_auth(&self, user: &str, password: &str) -> redis::Client {
        self.client_for_url(&self.url_with_auth(user, password))
    }

    /// A synchronous connection for assertions, as the passwordless `default` user.
    ///
    /// Connection setup times out after 5 s; the returned connection has no read timeout.
    ///
    /// # Panics
    ///
    /// Panics if no connection can be made; the message includes the URL, the process state
    /// and the tail of the server log.
    pub fn conn(&self) -> redis::Connection {
        self.client()
            .get_connection_with_timeout(CONNECT_TIMEOUT)
            .unwrap_or_else(|e| {
                let state = match &self.child {
                    Some(_) => "started",
                    None => "killed or exited",
                };
                panic!(
                    "cannot connect to redis-server at {} (pid {}, {state}): {e}\n{}",
                    self.url(),
                    self.pid,
                    self.log_section()
                )
            })
    }

    /// Kills the server with `SIGKILL` and reaps it. Does nothing if it is not running.
    ///
    /// Works on a paused server too. Open connections fail afterwards, and new ones are
    /// refused until [`RedisServer::restart`].
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Kill fails only if the child was already reaped, which `self.child` rules out.
            let _ = child.kill();
            self.last_exit = child.wait().ok();
        }
    }

    /// Kills the server if it is running and starts it again on the same port with the same
    /// options (and, for TLS, the same certificates), then waits until it answers.
    ///
    /// The data set is empty afterwards (nothing is persisted). If the port is briefly
    /// unavailable, starting is retried for up to 10 s.
    ///
    /// # Panics
    ///
    /// Panics if the server cannot be started again; the message includes the log tail.
    pub fn restart(&mut self) {
        self.kill();
        let started = Instant::now();
        loop {
            match self.launch() {
                Ok(()) => return,
                Err(failure)
                    if failure.port_unavailable && started.elapsed() < RESTART_PORT_TIMEOUT =>
                {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(failure) => self.fail("restart", &failure.reason),
            }
        }
    }

    /// Freezes the server with `SIGSTOP`: it keeps its port and connections but answers nothing
    /// (commands time out) until [`RedisServer::resume`].
    ///
    /// Returns once the process is stopped (checked through `/proc`, for up to 2 s).
    ///
    /// # Panics
    ///
    /// Panics if the server was killed (or has exited and been reaped).
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP, "pause");
        self.wait_for_stopped_state(true);
    }

    /// Lets a paused server run again with `SIGCONT`. Harmless on a server that is not paused.
    ///
    /// Returns once the process is no longer stopped (checked through `/proc`, for up to 2 s).
    ///
    /// # Panics
    ///
    /// Panics if the server was killed (or has exited and been reaped).
    pub fn resume(&self) {
        self.signal(libc::SIGCONT, "resume");
        self.wait_for_stopped_state(false);
    }

    /// Pauses the server like [`RedisServer::pause`] and returns a guard that resumes it when
    /// dropped (also when the test panics while the server is paused), unless
    /// [`PausedServer::resume`] was called first.
    ///
    /// # Panics
    ///
    /// Panics if the server was killed (or has exited and been reaped).
    pub fn paused(&self) -> PausedServer<'_> {
        self.pause();
        PausedServer {
            server: self,
            resumed: false,
        }
    }

    /// How many times `command` (lower case, as `INFO commandstats` names it: `publish`,
    /// `evalsha`, `hdel`) was called since the server started or since the last
    /// [`RedisServer::reset_command_stats`]; 0 when it never was.
    ///
    /// # Panics
    ///
    /// Panics if the server cannot be reached.
    pub fn command_calls(&self, command: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.conn())
            .unwrap_or_else(|e| panic!("INFO commandstats on {}: {e}", self.url()));
        let wanted = format!("cmdstat_{}:calls=", command.to_ascii_lowercase());
        info.lines()
            .find_map(|line| {
                let rest = line.trim().strip_prefix(&wanted)?;
                rest.split(',').next()?.parse().ok()
            })
            .unwrap_or(0)
    }

    /// Resets the counters of `INFO commandstats` (`CONFIG RESETSTAT`).
    ///
    /// # Panics
    ///
    /// Panics if the server cannot be reached.
    pub fn reset_command_stats(&self) {
        let () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut self.conn())
            .unwrap_or_else(|e| panic!("CONFIG RESETSTAT on {}: {e}", self.url()));
    }

    /// The number of keys in the current database (`DBSIZE`), not counting
    /// the registry of lock layouts (`distlock:layouts`) that every lock
    /// client writes when it connects: the keys that locks left.
    ///
    /// # Panics
    ///
    /// Panics if the server cannot be reached.
    pub fn dbsize(&self) -> u64 {
        let mut conn = self.conn();
        let all: u64 = redis::cmd("DBSIZE")
            .query(&mut conn)
            .unwrap_or_else(|e| panic!("DBSIZE on {}: {e}", self.url()));
        let registry: u64 = redis::cmd("EXISTS")
            .arg("distlock:layouts")
            .query(&mut conn)
            .unwrap_or_else(|e| panic!("EXISTS on {}: {e}", self.url()));
        all.saturating_sub(registry)
    }

    /// Whether the process is alive. A paused server counts as running.
    ///
    /// If the process has exited on its own it is reaped here, and this returns `false`.
    pub fn is_running(&mut self) -> bool {
        let Some(child) = self.child.as_mut() else {
            return false;
        };
        match child.try_wait() {
            Ok(None) => true,
            Ok(Some(status)) => {
                self.last_exit = Some(status);
                self.child = None;
                false
            }
            Err(_) => false,
        }
    }

    /// Whether the process was started and not killed or found exited since (without
    /// reaping it, unlike [`RedisServer::is_running`]).
    pub(crate) fn is_started(&self) -> bool {
        self.child.is_some()
    }

    /// Whether the server runs as a sentinel ([`ServerOptions::sentinel`]).
    pub fn is_sentinel(&self) -> bool {
        self.options.sentinel.is_some()
    }

    /// Whether the server runs as a cluster node ([`ServerOptions::cluster_node`]).
    pub fn is_cluster_node(&self) -> bool {
        self.options.cluster
    }

    /// The last 40 lines of the server log (its stdout and stderr, across restarts).
    pub fn log_tail(&self) -> String {
        self.log_tail_lines(LOG_TAIL_LINES)
    }

    /// The last `count` lines of the server log.
    pub(crate) fn log_tail_lines(&self, count: usize) -> String {
        let log = std::fs::read(&self.log_path).unwrap_or_default();
        let log = String::from_utf8_lossy(&log);
        let lines: Vec<&str> = log.lines().collect();
        let start = lines.len().saturating_sub(count);
        let mut tail = lines[start..].join("\n");
        if !tail.is_empty() {
            tail.push('\n');
        }
        tail
    }

    // ----- internals -----

    fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        }
    }

    fn client_for_url(&self, url: &str) -> redis::Client {
        let client = match &self.tls {
            Some(tls) => {
                ensure_crypto_provider();
                redis::Client::build_with_tls(
                    url,
                    redis::TlsCertificates {
                        client_tls: None,
                        root_cert: Some(tls.ca_pem.clone()),
                    },
                )
            }
            None => redis::Client::open(url),
        };
        client.unwrap_or_else(|e| panic!("cannot build a redis client for {url}: {e}"))
    }

    /// Spawns the process on `self.port` and waits until it answers. On failure the process
    /// is killed and reaped again.
    fn launch(&mut self) -> Result<(), LaunchFailure> {
        debug_assert!(self.child.is_none(), "launch with a running child");
        let log_start = self.append_log_marker();
        let log = self.open_log();
        let stderr = log
            .try_clone()
            .unwrap_or_else(|e| panic!("cannot duplicate the log file handle: {e}"));

        let mut command = self.command();
        command
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(stderr));
        let child = spawn_tied_to_process(command).unwrap_or_else(|e| {
            panic!(
                "cannot spawn {} (port {}): {e}",
                self.binary.display(),
                self.port
            )
        });
        self.pid = child.id();
        self.child = Some(child);
        self.last_exit = None;

        let result = self.wait_until_ready();
        if let Err(mut failure) = result {
            self.kill();
            let output = self.log_since(log_start);
            if output.contains("Address already in use")
                || output.contains("Failed listening on port")
            {
                failure.port_unavailable = true;
            }
            if let Some(status) = self.last_exit {
                let _ = write!(failure.reason, " ({status})");
            }
            return Err(failure);
        }
        Ok(())
    }

    /// Writes a sentinel's configuration file for the current port (sentinels only).
    fn write_sentinel_config(&self) {
        let Some(body) = &self.options.sentinel else {
            return;
        };
        let path = self.dir.path().join(SENTINEL_CONFIG);
        let contents = match self.bind_addr {
            Some(addr) => format!(
                "port {}\nbind {addr} 127.0.0.1\nprotected-mode no\nsentinel announce-ip {addr}\n{body}\n",
                self.port
            ),
            None => format!("port {}\nbind 127.0.0.1\n{body}\n", self.port),
        };
        std::fs::write(&path, contents)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.binary);
        if self.options.sentinel.is_some() {
            // The configuration file must be the first argument.
            command
                .arg(self.dir.path().join(SENTINEL_CONFIG))
                .arg("--sentinel");
        }
        command
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .arg("--dir")
            .arg(self.dir.path());
        let port = self.port.to_string();
        match &self.tls {
            Some(tls) => {
                command
                    .args(["--port", "0", "--tls-port", &port])
                    .arg("--tls-cert-file")
                    .arg(&tls.cert_path)
                    .arg("--tls-key-file")
                    .arg(&tls.key_path)
                    .arg("--tls-ca-cert-file")
                    .arg(&tls.ca_path)
                    .args(["--tls-auth-clients", "no"]);
            }
            None => {
                command.args(["--port", &port]);
            }
        }
        if self.options.cluster {
            command
                .args(["--cluster-enabled", "yes"])
                .arg("--cluster-config-file")
                .arg(self.dir.path().join(CLUSTER_CONFIG))
                .args(["--cluster-node-timeout", CLUSTER_NODE_TIMEOUT_MS])
                .args(["--cluster-replica-validity-factor", "0"])
                .args(["--cluster-allow-reads-when-down", "no"]);
        }
        if let Some(addr) = self.bind_addr {
            // After the harness's own `--bind 127.0.0.1`, which it overrides (a sentinel's
            // command line overrides its configuration file too).
            let addr = addr.to_string();
            command
                .args(["--bind", &addr, "127.0.0.1"])
                .args(["--bind-source-addr", &addr])
                .args(["--protected-mode", "no"]);
            if self.options.sentinel.is_none() {
                command.args(["--replica-announce-ip", &addr]);
            }
            if self.options.cluster {
                command.args(["--cluster-announce-ip", &addr]);
            }
        }
        for (user, password) in &self.options.acl_users {
            command
                .args(["--user", user, "on"])
                .arg(format!(">{password}"))
                .args(["~*", "&*", "+@all"]);
        }
        command.args(&self.options.extra_args);
        for (key, value) in &self.options.env {
            command.env(key, value);
        }
        command
    }

    /// Polls with a fresh connection and `PING` until the server answers, the process exits or
    /// the deadline passes.
    fn wait_until_ready(&mut self) -> Result<(), LaunchFailure> {
        let client = self.client();
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if !self.is_running() {
                return Err(LaunchFailure {
                    port_unavailable: false,
                    reason: format!("redis-server exited during startup on port {}", self.port),
                });
            }
            let last_error = match probe(&client) {
                Ok(Some(pid)) if pid != self.pid => {
                    return Err(LaunchFailure {
                        port_unavailable: true,
                        reason: format!(
                            "port {} is served by another redis-server (pid {pid}, ours is {})",
                            self.port, self.pid
                        ),
                    });
                }
                Ok(_) => return Ok(()),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(LaunchFailure {
                    port_unavailable: false,
                    reason: format!(
                        "redis-server on port {} did not answer PING within {READY_TIMEOUT:?} \
                         (last error: {last_error})",
                        self.port
                    ),
                });
            }
            std::thread::sleep(READY_POLL);
        }
    }

    fn signal(&self, signal: libc::c_int, action: &str) {
        assert!(
            self.child.is_some(),
            "cannot {action} redis-server on port {}: it is not running (killed or exited)",
            self.port
        );
        // SAFETY: plain syscall. The pid belongs to our unreaped child, so it cannot have been
        // recycled for another process.
        let rc = unsafe { libc::kill(self.pid as libc::pid_t, signal) };
        if rc != 0 {
            panic!(
                "cannot {action} redis-server (pid {}): {}",
                self.pid,
                std::io::Error::last_os_error()
            );
        }
    }

    /// Waits (up to 2 s) until the process state in `/proc` is or is not "stopped".
    fn wait_for_stopped_state(&self, stopped: bool) {
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            match process_state(self.pid) {
                Some(state) if matches!(state, 'T' | 't') != stopped => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                // Reached the wanted state, or /proc is unavailable (then trust the signal).
                _ => return,
            }
        }
    }

    /// Writes a line announcing the next launch and returns the log length before it.
    fn append_log_marker(&self) -> u64 {
        let start = std::fs::metadata(&self.log_path).map_or(0, |m| m.len());
        let mut log = self.open_log();
        let _ = writeln!(
            log,
            "=== lock-test-support: starting {} on port {}{}{}{} ===",
            self.binary.display(),
            self.port,
            if self.tls.is_some() { " (TLS)" } else { "" },
            if self.options.cluster {
                " (cluster node)"
            } else {
                ""
            },
            if self.options.sentinel.is_some() {
                " (sentinel)"
            } else {
                ""
            }
        );
        start
    }

    fn open_log(&self) -> File {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", self.log_path.display()))
    }

    fn log_since(&self, offset: u64) -> String {
        let log = std::fs::read(&self.log_path).unwrap_or_default();
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(log.len());
        String::from_utf8_lossy(&log[start..]).into_owned()
    }

    fn log_section(&self) -> String {
        self.log_section_lines(LOG_TAIL_LINES)
    }

    /// The last `count` log lines, framed with the log's path, for panic messages.
    pub(crate) fn log_section_lines(&self, count: usize) -> String {
        format!(
            "--- last lines of {} ---\n{}--- end of log ---",
            self.log_path.display(),
            self.log_tail_lines(count)
        )
    }

    fn fail(&self, action: &str, reason: &str) -> ! {
        panic!(
            "lock-test-support: cannot {action} redis-server: {reason}\ncommand: {:?}\n{}",
            self.command(),
            self.log_section()
        )
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            // SAFETY: plain syscall on our unreaped child; resumes it in case it was paused.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGCONT);
            }
        }
        self.kill();
    }
}

/// One readiness probe: a fresh connection, `PING`, and the process id from `INFO server`
/// (to notice another server answering on our port). A server-side error reply other than
/// `LOADING` (e.g. `NOAUTH` when extra arguments demand a password) also counts as ready.
fn probe(client: &redis::Client) -> Result<Option<u32>, RedisError> {
    let result: Result<Option<u32>, RedisError> = (|| {
        let mut conn = client.get_connection_with_timeout(PROBE_TIMEOUT)?;
        conn.set_read_timeout(Some(PROBE_TIMEOUT))?;
        conn.set_write_timeout(Some(PROBE_TIMEOUT))?;
        let _: String = redis::cmd("PING").query(&mut conn)?;
        let info: Result<String, _> = redis::cmd("INFO").arg("server").query(&mut conn);
        Ok(info.ok().as_deref().and_then(info_process_id))
    })();
    match result {
        Err(e)
            if matches!(e.kind(), ErrorKind::Server(_) | ErrorKind::Extension)
                && e.kind() != ErrorKind::Server(ServerErrorKind::BusyLoading) =>
        {
            Ok(None)
        }
        other => other,
    }
}

fn info_process_id(info: &str) -> Option<u32> {
    info.lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
}

/// The state letter from `/proc/PID/stat` (`R`, `S`, `T`, `Z`, ...), if readable.
fn process_state(pid: u32) -> Option<char> {
    let stat =
        std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat")).ok()?;
    // "PID (COMM) STATE ..." where COMM may itself contain spaces and parentheses.
    let after_comm = &stat[stat.rfind(')')? + 1..];
    after_comm.trim_start().chars().next()
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for byte in s.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_encodes_reserved_characters() {
        assert_eq!(percent_encode("a-b_c.d~9"), "a-b_c.d~9");
        assert_eq!(percent_encode("p@ss:w/rd%"), "p%40ss%3Aw%2Frd%25");
    }

    #[test]
    fn parses_process_id_from_info() {
        let info = "# Server\r\nredis_version:7.0.15\r\nprocess_id:4242\r\ntcp_port:1234\r\n";
        assert_eq!(info_process_id(info), Some(4242));
        assert_eq!(info_process_id("# Server\r\n"), None);
    }

    #[test]
    fn reads_own_process_state() {
        assert!(matches!(process_state(std::process::id()), Some('R' | 'S')));
    }
}
