//! The Redis servers of one backend, started with the test harness, and the server-side
//! faults the nemesis injects into them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::ValueEnum;
use lock_test_support::{
    PostgresServer, RedisCluster, RedisMasters, RedisSentinels, RedisServer, ServerOptions,
};

/// The sentinel master name.
pub const SENTINEL_MASTER: &str = "chaos";
/// Redlock masters.
pub const REDLOCK_MASTERS: usize = 5;
/// How long a failover may take before the harness gives up.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(30);

/// A lock backend under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// In-memory store shared by clients of one process: the baseline, without faults.
    Memory,
    /// One Redis node (append-only file, fsync always).
    Standalone,
    /// A master with a replica under three sentinels.
    Sentinel,
    /// A 3-master cluster with one replica each.
    Cluster,
    /// Redlock over 5 independent masters (append-only file, fsync always).
    Redlock,
    /// One PostgreSQL server (`LockClient::postgres`): the plain lock only.
    Postgres,
}

impl Backend {
    /// The name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Standalone => "standalone",
            Backend::Sentinel => "sentinel",
            Backend::Cluster => "cluster",
            Backend::Redlock => "redlock",
            Backend::Postgres => "postgres",
        }
    }

    /// Whether workers reach the servers through fault proxies (the client is given the
    /// servers' addresses; Sentinel and Cluster hand out the real ones themselves).
    pub fn proxied(self) -> bool {
        matches!(self, Backend::Standalone | Backend::Redlock)
    }
}

/// Persistence that survives `SIGKILL` of the server without losing an acknowledged write.
pub(crate) fn persistent() -> ServerOptions {
    persistent_with(ServerOptions::new())
}

/// [`persistent`] on top of `options`.
fn persistent_with(options: ServerOptions) -> ServerOptions {
    options
        .arg("--appendonly")
        .arg("yes")
        .arg("--appendfsync")
        .arg("always")
}

/// The running servers of one backend (one value per run, so the variants' sizes do not
/// matter).
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Servers {
    /// No servers.
    Memory,
    /// One node.
    Standalone(RedisServer),
    /// Master, replica, sentinels.
    Sentinel(RedisSentinels),
    /// Cluster nodes.
    Cluster(RedisCluster),
    /// Independent masters.
    Redlock(RedisMasters),
    /// One PostgreSQL server.
    Postgres(PgServer),
}

/// The PostgreSQL server of the postgres backend, and its `synchronous_commit`.
#[derive(Debug)]
pub struct PgServer {
    server: PostgresServer,
    synchronous_commit: bool,
}

/// The `application_name` of worker `id`'s sessions (how `terminate_backends` finds them).
pub fn pg_application_name(id: u32) -> String {
    format!("lock-chaos-worker-{id}")
}

impl PgServer {
    /// `synchronous_commit` as the fault targets say it.
    fn commit_mode(&self) -> &'static str {
        if self.synchronous_commit {
            "synchronous_commit=on"
        } else {
            "synchronous_commit=off"
        }
    }

    /// The harness's connection string.
    pub fn connection_string(&self) -> String {
        self.server.connection_string()
    }

    /// The connection string of worker `id`: its sessions carry its application name.
    pub fn worker_url(&self, id: u32) -> String {
        format!(
            "{} application_name={}",
            self.server.connection_string(),
            pg_application_name(id)
        )
    }

    /// `SIGSTOP` of every process of the server.
    pub fn pause(&self) -> String {
        let n = self.server.pause();
        format!(
            "server port {} pid {}: {n} processes stopped",
            self.server.port(),
            self.server.pid().unwrap_or(0)
        )
    }

    /// `SIGCONT` of every process of the server.
    pub fn resume(&self) {
        self.server.resume();
    }

    /// A fast shutdown and a start.
    pub fn restart_fast(&mut self) -> anyhow::Result<String> {
        let old = self.server.pid().unwrap_or(0);
        self.server.restart_fast().map_err(anyhow::Error::msg)?;
        Ok(format!(
            "server port {} pid {old} -> {}, {}",
            self.server.port(),
            self.server.pid().unwrap_or(0),
            self.commit_mode()
        ))
    }

    /// `SIGKILL` of every process of the server and a start (crash recovery).
    pub fn crash_restart(&mut self) -> anyhow::Result<String> {
        let old = self.server.pid().unwrap_or(0);
        self.server.crash_restart().map_err(anyhow::Error::msg)?;
        Ok(format!(
            "server port {} pid {old} -> {}, {}",
            self.server.port(),
            self.server.pid().unwrap_or(0),
            self.commit_mode()
        ))
    }

    /// The start target of a restart: the server and its commit mode.
    pub fn describe(&self) -> String {
        format!(
            "server port {} pid {}, {}",
            self.server.port(),
            self.server.pid().unwrap_or(0),
            self.commit_mode()
        )
    }
}

impl Servers {
    /// Starts the PostgreSQL server of the postgres backend (blocking; panics as the harness
    /// does) with `synchronous_commit` on or off. `fsync` stays off, as in the test support:
    /// the faults kill processes, not the machine, so what a process wrote survives in the
    /// page cache; `synchronous_commit` decides whether a commit is written before it is
    /// acknowledged.
    pub fn start_postgres(synchronous_commit: bool) -> Servers {
        let value = if synchronous_commit { "on" } else { "off" };
        Servers::Postgres(PgServer {
            server: PostgresServer::start_with(&[("synchronous_commit", value)]),
            synchronous_commit,
        })
    }

    /// The PostgreSQL server (postgres backend).
    pub fn postgres(&self) -> Option<&PgServer> {
        match self {
            Servers::Postgres(pg) => Some(pg),
            _ => None,
        }
    }

    /// The PostgreSQL server, to restart it (postgres backend).
    pub fn postgres_mut(&mut self) -> anyhow::Result<&mut PgServer> {
        match self {
            Servers::Postgres(pg) => Ok(pg),
            _ => anyhow::bail!("needs the postgres backend"),
        }
    }

    /// Starts the servers of `backend` (blocking; panics as the harness does), every server
    /// (sentinels too) started with a clone of `options` when given (network-lab addresses,
    /// the clock library).
    pub fn start_with(backend: Backend, options: Option<ServerOptions>) -> Servers {
        let Some(options) = options else {
            return Servers::start_plain(backend);
        };
        match backend {
            Backend::Memory => Servers::Memory,
            Backend::Postgres => Servers::start_postgres(true),
            Backend::Standalone => {
                Servers::Standalone(RedisServer::start_with(persistent_with(options)))
            }
            Backend::Sentinel => {
                Servers::Sentinel(RedisSentinels::start_with(SENTINEL_MASTER, options))
            }
            Backend::Cluster => Servers::Cluster(RedisCluster::start_with(3, 1, options)),
            Backend::Redlock => Servers::Redlock(RedisMasters::start_with(
                REDLOCK_MASTERS,
                persistent_with(options),
            )),
        }
    }

    fn start_plain(backend: Backend) -> Servers {
        match backend {
            Backend::Memory => Servers::Memory,
            Backend::Postgres => Servers::start_postgres(true),
            Backend::Standalone => Servers::Standalone(RedisServer::start_with(persistent())),
            Backend::Sentinel => Servers::Sentinel(RedisSentinels::start(SENTINEL_MASTER)),
            Backend::Cluster => Servers::Cluster(RedisCluster::start(3, 1)),
            Backend::Redlock => {
                Servers::Redlock(RedisMasters::start_with(REDLOCK_MASTERS, persistent()))
            }
        }
    }

    /// Ports of the data servers that workers reach through proxies, in order.
    pub fn proxied_ports(&self) -> Vec<u16> {
        match self {
            Servers::Standalone(server) => vec![server.port()],
            Servers::Redlock(masters) => masters.servers().iter().map(RedisServer::port).collect(),
            _ => Vec::new(),
        }
    }

    /// The URLs a client connects to directly (seeds, sentinels or masters).
    pub fn direct_urls(&self) -> Vec<String> {
        match self {
            Servers::Memory => Vec::new(),
            Servers::Postgres(pg) => vec![pg.connection_string()],
            Servers::Standalone(server) => vec![server.url()],
            Servers::Sentinel(set) => set.sentinel_urls(),
            Servers::Cluster(cluster) => cluster.urls(),
            Servers::Redlock(masters) => masters.urls(),
        }
    }

    /// Ports of every data server (not sentinels): the ones whose key events are watched.
    /// They stay the same across restarts and failovers (a failed-over master comes back
    /// as a replica on its port).
    pub fn data_ports(&self) -> Vec<u16> {
        self.data_servers().iter().map(|s| s.port()).collect()
    }

    /// Every data server (not sentinels).
    fn data_servers(&self) -> Vec<&RedisServer> {
        match self {
            Servers::Memory | Servers::Postgres(_) => Vec::new(),
            Servers::Standalone(server) => vec![server],
            Servers::Sentinel(set) => vec![set.master(), set.replica()],
            Servers::Cluster(cluster) => cluster.nodes().iter().collect(),
            Servers::Redlock(masters) => masters.servers().iter().collect(),
        }
    }

    /// Runs one command on every running data server; returns how many answered.
    fn on_every_data_server(&self, args: &[&str]) -> usize {
        let mut answered = 0;
        for server in self.data_servers() {
            let Ok(mut conn) = server
                .client()
                .get_connection_with_timeout(Duration::from_secs(1))
            else {
                continue;
            };
            let _ = conn.set_read_timeout(Some(Duration::from_secs(1)));
            let mut cmd = redis::cmd(args[0]);
            for arg in &args[1..] {
                cmd.arg(*arg);
            }
            if cmd.query::<redis::Value>(&mut conn).is_ok() {
                answered += 1;
            }
        }
        answered
    }

    /// `CLIENT KILL` of every normal and pub/sub connection, on every data server.
    pub fn client_kill(&self) -> String {
        let a = self.on_every_data_server(&["CLIENT", "KILL", "TYPE", "normal"]);
        let b = self.on_every_data_server(&["CLIENT", "KILL", "TYPE", "pubsub"]);
        format!("{} servers", a.max(b))
    }

    /// Cuts the TTL of every key with one by `jump` on every data server (what a forward
    /// jump of the server's clock does to expiry), or lengthens it (not `forward`: a jump
    /// back); returns how many servers did it.
    pub fn clock_jump(&self, jump: Duration, forward: bool) -> String {
        const CUT: &str = "local n = 0 \
            for _, k in ipairs(redis.call('keys', '*')) do \
              local ttl = redis.call('pttl', k) \
              if ttl > 0 then \
                local left = ttl - tonumber(ARGV[1]) \
                if left < 1 then left = 1 end \
                redis.call('pexpire', k, left) n = n + 1 \
              end \
            end \
            return n";
        let ms = jump.as_millis() as i64;
        let signed = if forward { ms } else { -ms };
        format!(
            "{} servers, TTLs {} by {ms} ms",
            self.on_every_data_server(&["EVAL", CUT, "0", &signed.to_string()]),
            if forward { "cut" } else { "lengthened" }
        )
    }

    /// `SCRIPT FLUSH` on every data server.
    pub fn script_flush(&self) -> String {
        format!(
            "{} servers",
            self.on_every_data_server(&["SCRIPT", "FLUSH"])
        )
    }

    /// The proxied server at `index` (standalone: 0).
    fn proxied_mut(&mut self, index: usize) -> anyhow::Result<&mut RedisServer> {
        match self {
            Servers::Standalone(server) if index == 0 => Ok(server),
            Servers::Redlock(masters) if index < masters.count() => Ok(masters.server_mut(index)),
            _ => anyhow::bail!("no restartable server {index} in this backend"),
        }
    }

    /// Kills server `index` with `SIGKILL` and starts it again from its append-only file.
    pub fn restart_persistent(&mut self, index: usize) -> anyhow::Result<String> {
        let server = self.proxied_mut(index)?;
        server.kill();
        server.restart();
        Ok(format!("port {}", server.port()))
    }

    /// Kills server `index` and starts it again with its persisted data deleted.
    pub fn restart_empty(&mut self, index: usize) -> anyhow::Result<String> {
        let dir = self.stop(index)?;
        self.start_empty(index, &dir)
    }

    /// Kills server `index` (`SIGKILL`); returns its data directory.
    pub fn stop(&mut self, index: usize) -> anyhow::Result<PathBuf> {
        let server = self.proxied_mut(index)?;
        let dir: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("dir")
            .query(
                &mut server
                    .client()
                    .get_connection_with_timeout(Duration::from_secs(2))?,
            )
            .context("CONFIG GET dir")?;
        let dir = dir.get(1).cloned().context("CONFIG GET dir: no value")?;
        server.kill();
        Ok(PathBuf::from(dir))
    }

    /// Deletes the persisted data in `dir` and starts stopped server `index` again, empty.
    pub fn start_empty(&mut self, index: usize, dir: &Path) -> anyhow::Result<String> {
        let _ = std::fs::remove_dir_all(dir.join("appendonlydir"));
        let _ = std::fs::remove_file(dir.join("dump.rdb"));
        let server = self.proxied_mut(index)?;
        server.restart();
        Ok(format!("port {}", server.port()))
    }

    /// Pauses (`SIGSTOP`) the first `count` Redlock masters.
    pub fn pause_masters(&self, count: usize) -> anyhow::Result<String> {
        let Servers::Redlock(masters) = self else {
            anyhow::bail!("only Redlock has independent masters");
        };
        for server in &masters.servers()[..count] {
            server.pause();
        }
        Ok(format!("{count} of {} masters", masters.count()))
    }

    /// Resumes the first `count` Redlock masters.
    pub fn resume_masters(&self, count: usize) {
        if let Servers::Redlock(masters) = self {
            for server in &masters.servers()[..count] {
                server.resume();
            }
        }
    }

    /// Kills the master that serves `key` (Sentinel: the master) and waits for a replica to
    /// take over; then restarts the killed node, which rejoins as a replica.
    pub fn failover(&mut self, key: &str) -> anyhow::Result<String> {
        match self {
            Servers::Sentinel(set) => {
                let old = set.master().port();
                set.kill_master_and_wait_for_failover(FAILOVER_TIMEOUT);
                set.replica_mut().restart();
                Ok(format!("master {old} -> {}", set.master().port()))
            }
            Servers::Cluster(cluster) => {
                let index = cluster
                    .try_master_of_slot(cluster.slot_of(key))
                    .map_err(anyhow::Error::msg)?;
                let old = cluster.node(index).port();
                // Without a promotion the killed master stays down: the harness's repair
                // (`repair_masterless`) takes the shard over, then restarts it.
                let promoted = cluster
                    .try_kill_master_and_wait_for_failover(index, FAILOVER_TIMEOUT)
                    .map_err(anyhow::Error::msg)?;
                let new = cluster.node(promoted).port();
                restart_node(cluster, index)?;
                Ok(format!("master {old} -> {new}"))
            }
            _ => anyhow::bail!("failover needs Sentinel or Cluster"),
        }
    }
}

impl Servers {
    /// Cluster: moves the slot of `key` from its master to the next master, one key per
    /// 100 ms step (see `RedisCluster::try_move_slot`); returns `slot S: master P -> Q`.
    pub fn move_slot(&mut self, key: &str) -> anyhow::Result<String> {
        let Servers::Cluster(cluster) = self else {
            anyhow::bail!("slot migration needs Cluster");
        };
        let slot = cluster.slot_of(key);
        let from = cluster
            .try_master_of_slot(slot)
            .map_err(anyhow::Error::msg)?;
        let masters = cluster.masters();
        let to = masters
            .iter()
            .copied()
            .cycle()
            .skip_while(|&m| m != from)
            .nth(1)
            .filter(|&m| m != from)
            .context("another master to move the slot to")?;
        cluster
            .try_move_slot(slot, to, 1, Duration::from_millis(100))
            .map_err(anyhow::Error::msg)?;
        Ok(format!(
            "slot {slot}: master {} -> {}",
            cluster.node(from).port(),
            cluster.node(to).port()
        ))
    }
}

/// How long a forced or manual failover may take before the harness gives up waiting.
const MANUAL_FAILOVER_TIMEOUT: Duration = Duration::from_secs(20);

/// Polls `check` every 50 ms until it holds or `timeout` passed; returns whether it held.
fn poll(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let started = std::time::Instant::now();
    loop {
        if check() {
            return true;
        }
        if started.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs one command on `server` (1 s bounds).
fn command_on(server: &RedisServer, args: &[&str]) -> anyhow::Result<redis::Value> {
    let mut conn = server
        .client()
        .get_connection_with_timeout(Duration::from_secs(1))?;
    conn.set_read_timeout(Some(Duration::from_secs(1)))?;
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    Ok(cmd.query(&mut conn)?)
}

/// The network-lab and server-side faults of the randomized schedule (see `schedule.rs`).
impl Servers {
    /// The URLs workers inside the network lab connect to: the servers' (and sentinels')
    /// lab addresses.
    pub fn lab_urls(&self) -> Vec<String> {
        match self {
            Servers::Memory => Vec::new(),
            Servers::Postgres(pg) => vec![pg.connection_string()],
            Servers::Standalone(server) => vec![server.bind_url()],
            Servers::Sentinel(set) => set.sentinels().iter().map(RedisServer::bind_url).collect(),
            Servers::Cluster(cluster) => {
                cluster.nodes().iter().map(RedisServer::bind_url).collect()
            }
            Servers::Redlock(masters) => masters
                .servers()
                .iter()
                .map(RedisServer::bind_url)
                .collect(),
        }
    }

    /// The master that serves `key` now (Redlock: master `pick` modulo the count).
    pub fn lock_master(&self, key: &str, pick: u64) -> Option<&RedisServer> {
        match self {
            Servers::Memory | Servers::Postgres(_) => None,
            Servers::Standalone(server) => Some(server),
            Servers::Sentinel(set) => Some(set.master()),
            Servers::Cluster(cluster) => cluster
                .try_master_of_slot(cluster.slot_of(key))
                .ok()
                .map(|i| cluster.node(i)),
            Servers::Redlock(masters) => {
                Some(masters.server((pick % masters.count() as u64) as usize))
            }
        }
    }

    /// The replica of the master that serves `key` (Sentinel, Cluster).
    pub fn lock_replica(&self, key: &str) -> Option<&RedisServer> {
        match self {
            Servers::Sentinel(set) => Some(set.replica()),
            Servers::Cluster(cluster) => cluster
                .try_master_of_slot(cluster.slot_of(key))
                .and_then(|master| cluster.try_replicas_of(master))
                .ok()
                .and_then(|replicas| replicas.first().copied())
                .map(|i| cluster.node(i)),
            _ => None,
        }
    }

    /// Sentinel: whether the sentinels now name the tracked replica as master (then the
    /// roles are swapped). Cluster: always `false` (it asks the nodes each time).
    fn failed_over(&mut self) -> bool {
        match self {
            Servers::Sentinel(set) => set.sync_roles(),
            _ => false,
        }
    }

    /// The index of the cluster master serving `key`, if the cluster answers.
    fn cluster_master_index(&self, key: &str) -> Option<usize> {
        let Servers::Cluster(cluster) = self else {
            return None;
        };
        cluster.try_master_of_slot(cluster.slot_of(key)).ok()
    }

    /// `SIGSTOP` of the master serving `key` (Sentinel, Cluster) for at least `hold`, and
    /// until its replica took over (at most 20 s more), then `SIGCONT`: the old master comes
    /// back and is demoted. Returns what happened.
    pub fn pause_master_past_down_after(
        &mut self,
        key: &str,
        hold: Duration,
    ) -> anyhow::Result<String> {
        let before = self.cluster_master_index(key);
        let master = match self {
            Servers::Sentinel(set) => set.master(),
            Servers::Cluster(cluster) => cluster.node(before.context("no master serves the key")?),
            _ => anyhow::bail!("needs Sentinel or Cluster"),
        };
        let port = master.port();
        master.pause();
        std::thread::sleep(hold);
        let over = poll(MANUAL_FAILOVER_TIMEOUT, || match self {
            Servers::Sentinel(_) => self.sentinel_master_port().is_some_and(|p| p != port),
            Servers::Cluster(_) => self.cluster_master_index(key) != before,
            _ => true,
        });
        let master = match self {
            Servers::Sentinel(set) => {
                if set.master().port() == port {
                    set.master()
                } else {
                    set.replica()
                }
            }
            Servers::Cluster(cluster) => cluster.node(before.unwrap_or(0)),
            _ => unreachable!(),
        };
        master.resume();
        self.failed_over();
        Ok(format!(
            "master port {port} paused {} ms{}",
            hold.as_millis(),
            if over {
                ", failed over"
            } else {
                ", no failover within 20 s"
            }
        ))
    }

    /// A failover without a crash: `SENTINEL FAILOVER` (Sentinel: promotes the replica
    /// without waiting for it to catch up), or `CLUSTER FAILOVER` on the replica of `key`'s
    /// master (`force`: `CLUSTER FAILOVER FORCE`, without the master's handshake); waits until
    /// it took effect (at most 20 s).
    pub fn manual_failover(&mut self, key: &str, force: bool) -> anyhow::Result<String> {
        let over = match self {
            Servers::Sentinel(set) => {
                let old = set.master().port();
                // Refused while an earlier failover is still being completed (`INPROG`) or
                // before the sentinels see the replica as good again (`NOGOODSLAVE`): retry.
                let mut last = Ok(redis::Value::Nil);
                poll(MANUAL_FAILOVER_TIMEOUT, || {
                    last = command_on(set.sentinel(0), &["SENTINEL", "FAILOVER", SENTINEL_MASTER]);
                    last.is_ok()
                });
                last.context("SENTINEL FAILOVER")?;
                let over = poll(MANUAL_FAILOVER_TIMEOUT, || {
                    self.sentinel_master_port().is_some_and(|p| p != old)
                });
                self.failed_over();
                let new = self.sentinel_master_port().unwrap_or(0);
                format!("master {old} -> {new}")
                    + if over {
                        ""
                    } else {
                        " (no failover within 20 s)"
                    }
            }
            Servers::Cluster(_) => {
                let master = self.cluster_master_index(key).context("no master")?;
                let replica = self
                    .lock_replica(key)
                    .context("the master has no replica")?;
                let replica_port = replica.port();
                let args: &[&str] = if force {
                    &["CLUSTER", "FAILOVER", "FORCE"]
                } else {
                    &["CLUSTER", "FAILOVER"]
                };
                command_on(replica, args).context("CLUSTER FAILOVER")?;
                let over = poll(MANUAL_FAILOVER_TIMEOUT, || {
                    self.cluster_master_index(key).is_some_and(|m| m != master)
                });
                format!("node {master} -> replica port {replica_port}")
                    + if over {
                        ""
                    } else {
                        " (no failover within 20 s)"
                    }
            }
            _ => anyhow::bail!("needs Sentinel or Cluster"),
        };
        Ok(over)
    }

    /// Sentinel: the master port the sentinels report (`None`: none answered, or not
    /// Sentinel).
    pub fn sentinel_master_port(&self) -> Option<u16> {
        let Servers::Sentinel(set) = self else {
            return None;
        };
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| set.current_master_port())).ok()
    }

    /// Sentinel: swaps the tracked roles when the sentinels now name the replica (after a
    /// failover the harness did not drive); see `RedisSentinels::sync_roles`.
    pub fn sync_roles(&mut self) -> bool {
        self.failed_over()
    }

    /// Sentinel: `min-replicas-to-write n` and `min-replicas-max-lag lag` on both data
    /// servers (`CONFIG SET`: call it again after a restart); returns how many took it.
    pub fn set_min_replicas(&self, n: u32, lag: Duration) -> usize {
        let Servers::Sentinel(set) = self else {
            return 0;
        };
        let (n, lag) = (n.to_string(), lag.as_secs().max(1).to_string());
        [set.master(), set.replica()]
            .into_iter()
            .filter(|s| {
                command_on(
                    s,
                    &[
                        "CONFIG",
                        "SET",
                        "min-replicas-to-write",
                        &n,
                        "min-replicas-max-lag",
                        &lag,
                    ],
                )
                .is_ok()
            })
            .count()
    }

    /// The port and process id of every data server (not sentinels).
    pub fn data_pids(&self) -> Vec<(u16, u32)> {
        self.data_servers()
            .iter()
            .map(|s| (s.port(), s.pid()))
            .collect()
    }

    /// Kills (`SIGKILL`) server `index` (standalone, Redlock masters).
    pub fn kill_server(&mut self, index: usize) -> anyhow::Result<()> {
        self.proxied_mut(index)?.kill();
        Ok(())
    }

    /// Starts killed server `index` again from its own persistence.
    pub fn restart_server(&mut self, index: usize) -> anyhow::Result<()> {
        self.proxied_mut(index)?.restart();
        Ok(())
    }
}

/// How long a shard found without a master is given to get one by itself (a replica's
/// election takes about a node timeout of 1 s after the master is flagged failed) before
/// the harness repairs it.
const SELF_REPAIR_GRACE: Duration = Duration::from_secs(5);
/// How long a repair may take to give the shard a master and the cluster `cluster_state:ok`.
const REPAIR_TIMEOUT: Duration = Duration::from_secs(20);

/// A shard of the cluster that had no live master, and what the harness did about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardRepair {
    /// The inclusive slot ranges of the shard.
    pub slots: Vec<(u16, u16)>,
    /// What was done, in order (`;`-separated).
    pub action: String,
    /// Whether a live master serves the shard again and the cluster is `cluster_state:ok`.
    pub ok: bool,
}

/// Restarts the cluster node at `index` (it keeps its `nodes.conf` and rejoins, empty):
/// an error instead of the test support's panic when it does not start.
fn restart_node(cluster: &mut RedisCluster, index: usize) -> anyhow::Result<()> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cluster.node_mut(index).restart()
    }))
    .map_err(|_| anyhow::anyhow!("cluster node {index} did not start again"))
}

/// The cluster shards left without a master.
impl Servers {
    /// Cluster: every shard's slots and the ports of its nodes (empty for other backends).
    pub fn shards(&self) -> anyhow::Result<Vec<lock_test_support::ShardLayout>> {
        let Servers::Cluster(cluster) = self else {
            return Ok(Vec::new());
        };
        cluster.shards().map_err(anyhow::Error::msg)
    }

    /// Cluster: the slot ranges of every shard the cluster sees without a live master (a
    /// master flagged `fail` whose replica was not promoted), after giving such a shard
    /// [`SELF_REPAIR_GRACE`] to get one by itself; empty for other backends. An error when
    /// no node answers.
    pub fn masterless(&self) -> anyhow::Result<Vec<Vec<(u16, u16)>>> {
        let Servers::Cluster(cluster) = self else {
            return Ok(Vec::new());
        };
        let mut shards = cluster.masterless_shards().map_err(anyhow::Error::msg)?;
        if !shards.is_empty() {
            poll(SELF_REPAIR_GRACE, || {
                cluster
                    .masterless_shards()
                    .map(|now| {
                        shards = now;
                        shards.is_empty()
                    })
                    .unwrap_or(false)
            });
        }
        Ok(shards.into_iter().map(|s| s.slots).collect())
    }

    /// Cluster: gives every shard without a live master one again, and waits until the
    /// cluster is `cluster_state:ok` (at most [`REPAIR_TIMEOUT`] per shard): `CLUSTER
    /// FAILOVER TAKEOVER` on a replica of the failed master that runs (the replica takes the
    /// slots without a vote), then the failed master restarted if it was dead (it rejoins as
    /// the new master's replica, so the shard has a replica again; without a replica that
    /// took over, it comes back as the shard's master, empty). Returns one entry per shard
    /// found; never panics.
    pub fn repair_masterless(&mut self) -> Vec<ShardRepair> {
        let Servers::Cluster(cluster) = self else {
            return Vec::new();
        };
        let shards = match cluster.masterless_shards() {
            Ok(shards) => shards,
            Err(e) => {
                return vec![ShardRepair {
                    slots: Vec::new(),
                    action: format!("no node answered: {e}"),
                    ok: false,
                }]
            }
        };
        let mut repairs = Vec::new();
        for shard in shards {
            let Some(&(first, _)) = shard.slots.first() else {
                continue;
            };
            let mut actions = Vec::new();
            let served = |cluster: &RedisCluster| cluster.try_master_of_slot(first).is_ok();
            for &replica in &shard.replicas {
                if !cluster.is_node_started(replica) {
                    continue;
                }
                let port = cluster.node(replica).port();
                match cluster.failover_takeover(replica) {
                    Ok(()) => {
                        let took = poll(REPAIR_TIMEOUT, || {
                            cluster.try_master_of_slot(first) == Ok(replica)
                        });
                        actions.push(format!(
                            "CLUSTER FAILOVER TAKEOVER on node {replica} (port {port}){}",
                            if took { "" } else { ": it did not take over" }
                        ));
                        if took {
                            break;
                        }
                    }
                    Err(e) => actions.push(e),
                }
            }
            if let Some(failed) = shard.failed_master {
                if !cluster.is_node_started(failed) {
                    let port = cluster.node(failed).port();
                    match restart_node(cluster, failed) {
                        Ok(()) => actions.push(format!(
                            "failed master node {failed} (port {port}) restarted (empty)"
                        )),
                        Err(e) => actions.push(format!("{e:#}")),
                    }
                }
            }
            let mastered = poll(REPAIR_TIMEOUT, || served(cluster));
            let settled = mastered && cluster.try_wait_ok(REPAIR_TIMEOUT).is_ok();
            if actions.is_empty() {
                actions.push("nothing to do: no running replica, the failed master runs".into());
            }
            let master = cluster
                .try_master_of_slot(first)
                .map(|m| format!("master node {m} (port {})", cluster.node(m).port()))
                .unwrap_or_else(|_| "still no master".to_owned());
            actions.push(format!(
                "{master}, cluster {}",
                if settled { "ok" } else { "not ok" }
            ));
            repairs.push(ShardRepair {
                slots: shard.slots,
                action: actions.join("; "),
                ok: settled,
            });
        }
        repairs
    }
}
