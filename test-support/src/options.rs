//! [`ServerOptions`]: how a [`RedisServer`](crate::RedisServer) is configured.

/// Options for [`RedisServer::start_with`](crate::RedisServer::start_with).
///
/// Built with chained calls; the defaults give a plain (non-TLS) server whose `default` user
/// has no password:
///
/// ```
/// use lock_test_support::ServerOptions;
///
/// let options = ServerOptions::new()
///     .tls()
///     .acl_user("app", "secret")
///     .arg("--maxmemory")
///     .arg("64mb");
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    pub(crate) tls: bool,
    pub(crate) acl_users: Vec<(String, String)>,
    pub(crate) extra_args: Vec<String>,
    pub(crate) cluster: bool,
    pub(crate) sentinel: Option<String>,
    pub(crate) binary: Option<std::path::PathBuf>,
    pub(crate) bind: Option<BindAddrs>,
    pub(crate) env: Vec<(String, String)>,
}

/// Where [`ServerOptions::bind_addr`] / [`ServerOptions::bind_pool`] take a server's extra
/// address from: one fixed address, or the next one of a pool shared by every clone of the
/// options (so each server of a topology gets its own).
#[derive(Debug, Clone)]
pub(crate) enum BindAddrs {
    One(std::net::Ipv4Addr),
    Pool(std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<std::net::Ipv4Addr>>>),
}

impl BindAddrs {
    /// The address for the next server started with these options.
    pub(crate) fn take(&self) -> std::net::Ipv4Addr {
        match self {
            BindAddrs::One(addr) => *addr,
            BindAddrs::Pool(pool) => pool
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop_front()
                .unwrap_or_else(|| {
                    panic!("lock-test-support: ServerOptions::bind_pool ran out of addresses")
                }),
        }
    }
}

impl ServerOptions {
    /// Options for a plain server: no TLS, no extra ACL users, no extra arguments.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves TLS only.
    ///
    /// The plain port is disabled (`--port 0`) and the server listens with `--tls-port` on its
    /// port. A fresh CA and a server certificate signed by it (SANs `127.0.0.1` and
    /// `localhost`) are generated for each server and kept across restarts; clients do not
    /// need certificates (`--tls-auth-clients no`). The CA is available from
    /// [`RedisServer::ca_cert_pem`](crate::RedisServer::ca_cert_pem), and
    /// [`RedisServer::client`](crate::RedisServer::client) already trusts it.
    pub fn tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// Adds an ACL user with full access: `--user <user> on ><password> ~* &* +@all`.
    ///
    /// The `default` user stays enabled and passwordless, so the harness helpers
    /// ([`RedisServer::conn`](crate::RedisServer::conn), the readiness probe) keep working.
    /// Connect as this user with
    /// [`RedisServer::url_with_auth`](crate::RedisServer::url_with_auth).
    pub fn acl_user(mut self, user: &str, password: &str) -> Self {
        self.acl_users.push((user.to_owned(), password.to_owned()));
        self
    }

    /// Runs the server as a Redis Cluster node, tuned for fast, deterministic failover in
    /// tests.
    ///
    /// Adds `--cluster-enabled yes`, `--cluster-config-file <its dir>/nodes.conf`,
    /// `--cluster-node-timeout 1000`, `--cluster-replica-validity-factor 0` (a replica may
    /// always take over, however stale) and `--cluster-allow-reads-when-down no`. The port is
    /// picked with [`free_cluster_port`](crate::free_cluster_port), so the cluster bus port
    /// (port + 10000) is free as well. `nodes.conf` is kept across
    /// [`RedisServer::restart`](crate::RedisServer::restart), so a restarted node rejoins its
    /// cluster (with an empty data set).
    ///
    /// The node is not part of any cluster yet; [`RedisCluster`](crate::RedisCluster) forms
    /// one out of such nodes. Later [`ServerOptions::arg`] calls can override these settings,
    /// e.g. `.arg("--cluster-node-timeout").arg("2000")`.
    pub fn cluster_node(mut self) -> Self {
        self.cluster = true;
        self
    }

    /// Runs the server as a Redis Sentinel (`redis-server <dir>/sentinel.conf --sentinel`).
    ///
    /// `config` is the body of the sentinel configuration file, e.g.
    /// `"sentinel monitor mymaster 127.0.0.1 12345 2\n"`; the harness writes
    /// `port <port>` and `bind 127.0.0.1` in front of it into `sentinel.conf` in the server's
    /// own temporary directory before the first launch. Sentinels rewrite that file (their id,
    /// the known replicas and sentinels, the current master), and
    /// [`RedisServer::restart`](crate::RedisServer::restart) keeps the rewritten file, so a
    /// restarted sentinel keeps its identity and state.
    ///
    /// Sentinels answer `PING`, which is how the harness waits for them to be ready. Cannot be
    /// combined with [`ServerOptions::tls`] or [`ServerOptions::cluster_node`] (the
    /// constructors panic).
    pub fn sentinel(mut self, config: impl Into<String>) -> Self {
        self.sentinel = Some(config.into());
        self
    }

    /// Runs this `redis-server` executable instead of the one on `PATH` (another
    /// version of Redis, say). A cluster started with these options uses the
    /// `redis-cli` found next to it, if there is one.
    pub fn binary(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// Also listens on `addr` (besides `127.0.0.1`), for clients outside this network
    /// namespace, connects from it and announces it: adds `--bind <addr> 127.0.0.1`,
    /// `--bind-source-addr <addr>` (Redis 7.0 or later; replication, cluster bus and sentinel
    /// connections would otherwise leave from the address they go to, when it is local),
    /// `--protected-mode no`,
    /// `--replica-announce-ip <addr>`, and for cluster nodes `--cluster-announce-ip <addr>`
    /// (sentinels: `sentinel announce-ip <addr>`), so that the addresses Sentinel and Cluster
    /// hand out to clients are this one. [`RedisServer::bind_addr`](crate::RedisServer::bind_addr)
    /// and [`RedisServer::bind_url`](crate::RedisServer::bind_url) return it; the harness's
    /// own helpers keep using loopback. Kept across restarts.
    pub fn bind_addr(mut self, addr: std::net::Ipv4Addr) -> Self {
        self.bind = Some(BindAddrs::One(addr));
        self
    }

    /// Like [`ServerOptions::bind_addr`], but each server started with (a clone of) these
    /// options takes the next address of `addrs`, so that every server of a
    /// [`RedisMasters`](crate::RedisMasters) or [`RedisCluster`](crate::RedisCluster) has an
    /// address of its own (to cut one of them off). Starting more servers than there are
    /// addresses panics.
    pub fn bind_pool(mut self, addrs: impl IntoIterator<Item = std::net::Ipv4Addr>) -> Self {
        self.bind = Some(BindAddrs::Pool(std::sync::Arc::new(std::sync::Mutex::new(
            addrs.into_iter().collect(),
        ))));
        self
    }

    /// Sets an environment variable of the `redis-server` process (kept across restarts),
    /// e.g. `LD_PRELOAD` for a library that moves the server's clock.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Appends one raw argument to the `redis-server` command line, after the harness's own.
    ///
    /// Each call adds exactly one argv element; call it once per element, e.g.
    /// `.arg("--maxmemory").arg("64mb")`. A later option overrides an earlier one, so this can
    /// also override the harness defaults (at your own risk, e.g. for `--bind` or `--port`).
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.extra_args.push(arg.into());
        self
    }
}
