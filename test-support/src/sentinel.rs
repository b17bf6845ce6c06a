//! [`RedisSentinels`]: one master, one replica and three sentinels.

use std::time::{Duration, Instant};

use crate::poll::{info_field, log_sections, probe_conn, role, wait_until};
use crate::{RedisServer, ServerOptions};

/// Number of sentinels in a [`RedisSentinels`] set.
const SENTINELS: usize = 3;
/// Sentinels that must agree that the master is down.
const QUORUM: usize = 2;
/// How long the set may take to be stable after start.
const STABLE_TIMEOUT: Duration = Duration::from_secs(30);

/// A sentinel-monitored pair: one master, one replica (`--replicaof` the master) and three
/// sentinels monitoring the master under a name, with quorum 2,
/// `down-after-milliseconds 1000`, `failover-timeout 5000` and `parallel-syncs 1`.
///
/// [`RedisSentinels::start`] returns a stable set: the replica is in sync with the master
/// (`master_link_status:up`) and every sentinel sees the master (not down), the replica and
/// the two other sentinels. After
/// [`RedisSentinels::kill_master_and_wait_for_failover`], [`RedisSentinels::master`] is the
/// promoted former replica and [`RedisSentinels::replica`] the killed former master. Dropping
/// the set kills every process.
///
/// With `down-after-milliseconds 1000`, a master starved of CPU for more than a second may
/// be failed over spontaneously; and a sentinel whose own timer stalls for more than two
/// seconds enters TILT mode and takes no action for 30 s. Both need a very loaded machine.
///
/// Sentinels rewrite their configuration file (in their own temporary directory) and keep it
/// across [`RedisServer::restart`]. The data servers keep their command line across restarts,
/// so a restarted former replica starts as a replica of the old master's port again (the
/// sentinels then reconfigure it).
///
/// ```no_run
/// use std::time::Duration;
/// use lock_test_support::RedisSentinels;
///
/// let mut set = RedisSentinels::start("locks");
/// let urls = set.sentinel_urls();
/// set.kill_master_and_wait_for_failover(Duration::from_secs(20));
/// assert_eq!(set.current_master_port(), set.master().port());
/// # let _ = urls;
/// ```
#[derive(Debug)]
pub struct RedisSentinels {
    name: String,
    master: RedisServer,
    replica: RedisServer,
    sentinels: Vec<RedisServer>,
}

impl RedisSentinels {
    /// Starts the master, then the replica, waits until the replica is in sync, then starts
    /// three sentinels monitoring the master as `master_name` and waits (up to 30 s) until
    /// each sees the master up, at least one replica and the two other sentinels.
    ///
    /// # Panics
    ///
    /// Panics if `master_name` is empty or contains whitespace, as [`RedisServer::start_with`]
    /// does, or if the set is not stable within 30 s (with the last unmet condition and the
    /// log tails of all processes).
    pub fn start(master_name: &str) -> RedisSentinels {
        Self::start_with(master_name, ServerOptions::new())
    }

    /// Like [`RedisSentinels::start`], with every process (master, replica, sentinels)
    /// configured by a clone of `options`. With [`ServerOptions::bind_addr`] or
    /// [`ServerOptions::bind_pool`], the replica follows the master at the master's address,
    /// the sentinels monitor it there and announce their own, so the master address the
    /// sentinels hand out is reachable from outside this network namespace.
    ///
    /// # Panics
    ///
    /// As [`RedisSentinels::start`]; also if `options` ask for TLS, a cluster node or a
    /// sentinel.
    pub fn start_with(master_name: &str, options: ServerOptions) -> RedisSentinels {
        assert!(
            !master_name.is_empty() && !master_name.contains(char::is_whitespace),
            "lock-test-support: invalid sentinel master name {master_name:?} \
             (must be non-empty, without whitespace)"
        );
        let data_options = options.clone().arg("--repl-diskless-sync-delay").arg("0");
        let master = RedisServer::start_with(data_options.clone());
        let master_host = master
            .bind_addr()
            .map_or_else(|| "127.0.0.1".to_owned(), |a| a.to_string());
        let replica = RedisServer::start_with(
            data_options
                .arg("--replicaof")
                .arg(master_host.clone())
                .arg(master.port().to_string()),
        );
        let mut set = RedisSentinels {
            name: master_name.to_owned(),
            master,
            replica,
            sentinels: Vec::new(),
        };
        // Sentinels discover replicas from the master's INFO, refreshed only every 10 s once
        // they run; start them after the replica is attached so they see it right away.
        if let Err(reason) = wait_until(STABLE_TIMEOUT, || set.check_replica_in_sync()) {
            set.fail(&format!(
                "the replica did not sync within {STABLE_TIMEOUT:?}: {reason}"
            ));
        }
        let config = format!(
            "sentinel monitor {name} {master_host} {port} {QUORUM}\n\
             sentinel down-after-milliseconds {name} 1000\n\
             sentinel failover-timeout {name} 5000\n\
             sentinel parallel-syncs {name} 1\n",
            name = master_name,
            port = set.master.port()
        );
        for _ in 0..SENTINELS {
            let sentinel = RedisServer::start_with(options.clone().sentinel(config.clone()));
            set.sentinels.push(sentinel);
        }
        if let Err(reason) = wait_until(STABLE_TIMEOUT, || set.check_sentinels_stable()) {
            set.fail(&format!(
                "the sentinels did not settle within {STABLE_TIMEOUT:?}: {reason}"
            ));
        }
        set
    }

    /// The name the sentinels monitor the master under.
    pub fn master_name(&self) -> &str {
        &self.name
    }

    /// The URLs of the three sentinels: `redis://127.0.0.1:PORT/`.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// The current master: the server started as master, or after a failover through
    /// [`RedisSentinels::kill_master_and_wait_for_failover`], the promoted former replica.
    pub fn master(&self) -> &RedisServer {
        &self.master
    }

    /// The current master, mutably (to kill, pause or restart it without waiting for a
    /// failover; the roles tracked here are then not updated).
    pub fn master_mut(&mut self) -> &mut RedisServer {
        &mut self.master
    }

    /// The current replica (after a failover, the killed former master).
    pub fn replica(&self) -> &RedisServer {
        &self.replica
    }

    /// The current replica, mutably.
    pub fn replica_mut(&mut self) -> &mut RedisServer {
        &mut self.replica
    }

    /// The sentinel at `index` (0, 1 or 2).
    ///
    /// # Panics
    ///
    /// Panics if `index` is out of range.
    pub fn sentinel(&self, index: usize) -> &RedisServer {
        self.sentinels
            .get(index)
            .unwrap_or_else(|| panic!("RedisSentinels: no sentinel {index} (there are 3)"))
    }

    /// The sentinel at `index`, mutably.
    ///
    /// # Panics
    ///
    /// Panics if `index` is out of range.
    pub fn sentinel_mut(&mut self, index: usize) -> &mut RedisServer {
        self.sentinels
            .get_mut(index)
            .unwrap_or_else(|| panic!("RedisSentinels: no sentinel {index} (there are 3)"))
    }

    /// All three sentinels.
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// The master port the sentinels currently report: the answer of the first running
    /// sentinel that answers `SENTINEL get-master-addr-by-name <name>`.
    ///
    /// # Panics
    ///
    /// Panics if no sentinel answers with an address.
    pub fn current_master_port(&self) -> u16 {
        let mut last_error = String::from("no sentinel is running");
        for (i, sentinel) in self.sentinels.iter().enumerate() {
            if !sentinel.is_started() {
                continue;
            }
            match self.reported_master_port(i) {
                Ok(port) => return port,
                Err(e) => last_error = e,
            }
        }
        self.fail(&format!(
            "no sentinel reported the master address (last error: {last_error})"
        ))
    }

    /// Kills (`SIGKILL`) the current master and waits until the sentinels have promoted the
    /// replica: every running sentinel that answers (at least one) reports the replica's port
    /// for the master name, and the replica answers `ROLE` with `master`. Then the roles
    /// tracked here are swapped: [`RedisSentinels::master`] is the promoted server and
    /// [`RedisSentinels::replica`] the killed one.
    ///
    /// Sentinels need about 1 s to see the master down, then agree, elect a leader and
    /// promote; a few seconds in all. A failed leader election is retried only after twice
    /// the failover timeout (10 s), so allow 20 s or more on a loaded machine.
    ///
    /// # Panics
    ///
    /// Panics on timeout, with the last unmet condition and the log tails of all processes.
    pub fn kill_master_and_wait_for_failover(&mut self, timeout: Duration) {
        self.master.kill();
        let started = Instant::now();
        if let Err(reason) = wait_until(timeout, || self.check_failed_over()) {
            self.fail(&format!(
                "the replica (port {}) was not promoted within {timeout:?} (waited {:?}): \
                 {reason}",
                self.replica.port(),
                started.elapsed()
            ));
        }
        std::mem::swap(&mut self.master, &mut self.replica);
    }

    /// After a failover this harness did not drive (a paused master, `SENTINEL FAILOVER`, a
    /// partition): when the sentinels now name the replica as master, swaps the roles tracked
    /// here, so that [`RedisSentinels::master`] is the server the sentinels hand out. Returns
    /// whether it swapped. A sentinel that does not answer is skipped; none answering leaves
    /// the roles as they are.
    pub fn sync_roles(&mut self) -> bool {
        let want = self.replica.port();
        let reported = (0..self.sentinels.len())
            .filter(|&i| self.sentinels[i].is_started())
            .find_map(|i| self.reported_master_port(i).ok());
        if reported == Some(want) {
            std::mem::swap(&mut self.master, &mut self.replica);
            true
        } else {
            false
        }
    }

    // ----- internals -----

    fn check_replica_in_sync(&self) -> Result<(), String> {
        let info = info_replication(&self.replica)?;
        match info_field(&info, "master_link_status") {
            Some("up") => {}
            other => {
                return Err(format!(
                    "replica reports master_link_status:{}",
                    other.unwrap_or("<missing>")
                ))
            }
        }
        let info = info_replication(&self.master)?;
        let attached = info_field(&info, "slave0")
            .is_some_and(|s| s.contains(&format!("port={}", self.replica.port())));
        if !attached || !info.contains("state=online") {
            return Err("the master does not list the replica as online yet".to_owned());
        }
        Ok(())
    }

    fn check_sentinels_stable(&self) -> Result<(), String> {
        for (i, sentinel) in self.sentinels.iter().enumerate() {
            let mut conn = probe_conn(sentinel).map_err(|e| format!("sentinel {i}: {e}"))?;
            let fields: Vec<String> = redis::cmd("SENTINEL")
                .arg("master")
                .arg(&self.name)
                .query(&mut conn)
                .map_err(|e| format!("SENTINEL master on sentinel {i}: {e}"))?;
            let field = |name: &str| {
                fields
                    .chunks(2)
                    .find(|pair| pair.len() == 2 && pair[0] == name)
                    .map(|pair| pair[1].as_str())
            };
            let number = |name: &str| field(name).and_then(|v| v.parse::<usize>().ok());
            if field("flags") != Some("master") {
                return Err(format!(
                    "sentinel {i} reports master flags {:?}",
                    field("flags")
                ));
            }
            if number("num-slaves").unwrap_or(0) < 1 {
                return Err(format!("sentinel {i} does not see the replica yet"));
            }
            let others = number("num-other-sentinels").unwrap_or(0);
            if others != SENTINELS - 1 {
                return Err(format!(
                    "sentinel {i} sees {others} other sentinels, expected {}",
                    SENTINELS - 1
                ));
            }
        }
        Ok(())
    }

    fn check_failed_over(&self) -> Result<(), String> {
        let want = self.replica.port();
        let mut answered = 0;
        let mut last_error = String::from("no sentinel is running");
        for (i, sentinel) in self.sentinels.iter().enumerate() {
            if !sentinel.is_started() {
                continue;
            }
            match self.reported_master_port(i) {
                Ok(port) if port == want => answered += 1,
                Ok(port) => {
                    return Err(format!(
                        "sentinel {i} still reports master port {port}, waiting for {want}"
                    ))
                }
                Err(e) => last_error = e,
            }
        }
        if answered == 0 {
            return Err(format!("no sentinel answered (last error: {last_error})"));
        }
        let role = role(&self.replica)?;
        if role != "master" {
            return Err(format!(
                "the replica (port {want}) answers ROLE with {role}, not master"
            ));
        }
        Ok(())
    }

    fn reported_master_port(&self, index: usize) -> Result<u16, String> {
        let mut conn =
            probe_conn(&self.sentinels[index]).map_err(|e| format!("sentinel {index}: {e}"))?;
        let addr: Option<(String, String)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.name)
            .query(&mut conn)
            .map_err(|e| format!("SENTINEL get-master-addr-by-name on sentinel {index}: {e}"))?;
        let (_, port) =
            addr.ok_or_else(|| format!("sentinel {index} does not know master {}", self.name))?;
        port.parse()
            .map_err(|e| format!("sentinel {index} reported a bad port {port:?}: {e}"))
    }

    fn fail(&self, reason: &str) -> ! {
        let servers = [
            ("master".to_owned(), &self.master),
            ("replica".to_owned(), &self.replica),
        ]
        .into_iter()
        .chain(
            self.sentinels
                .iter()
                .enumerate()
                .map(|(i, s)| (format!("sentinel {i}"), s)),
        );
        panic!(
            "lock-test-support: RedisSentinels ({}): {reason}\n{}",
            self.name,
            log_sections(servers)
        )
    }
}

fn info_replication(server: &RedisServer) -> Result<String, String> {
    let mut conn = probe_conn(server).map_err(|e| format!("port {}: {e}", server.port()))?;
    redis::cmd("INFO")
        .arg("replication")
        .query(&mut conn)
        .map_err(|e| format!("INFO replication on port {}: {e}", server.port()))
}
