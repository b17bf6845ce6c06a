//! [`RedisCluster`]: a Redis Cluster of real `redis-server` processes.

use std::fs::File;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::poll::{info_field, log_sections, probe_conn, role, wait_until, POLL_INTERVAL};
use crate::spawn::spawn_tied_to_process;
use crate::{key_slot, redis_cli_path, RedisServer, ServerOptions, CLUSTER_SLOTS};

/// How long `redis-cli --cluster create` may run.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a freshly created cluster may take to be ok on every node, replicas in sync.
const FORM_TIMEOUT: Duration = Duration::from_secs(30);

/// A Redis Cluster: `masters` masters with `replicas_per_master` replicas each, every node a
/// [`RedisServer`] started with [`ServerOptions::cluster_node`] (node timeout 1000 ms, replica
/// validity factor 0, no reads while down) on its own free port whose bus port
/// (port + 10000) was free too.
///
/// [`RedisCluster::start`] returns a stable cluster: every node reports `cluster_state:ok`,
/// all 16384 slots are assigned, every node knows every other, and every replica's link to
/// its master is up. Nodes are addressed by their index (`0..node_count()`), which never
/// changes; whether a node is a master or a replica is read from the cluster itself
/// (`CLUSTER NODES`), so it follows failovers. Dropping the cluster kills every node.
///
/// The short node timeout makes failovers fast, but a node starved of CPU for more than a
/// second (a heavily loaded machine) may be flagged as failing and replaced by its replica.
/// Tests that must not see spontaneous failovers can raise it through
/// [`RedisCluster::start_with`], e.g.
/// `ServerOptions::new().arg("--cluster-node-timeout").arg("3000")`.
///
/// ```no_run
/// use std::time::Duration;
/// use lock_test_support::RedisCluster;
///
/// let mut cluster = RedisCluster::start(3, 1);
/// let slot = cluster.slot_of("lock:{a}");
/// let owner = cluster.master_of_slot(slot);
/// let promoted = cluster.kill_master_and_wait_for_failover(owner, Duration::from_secs(15));
/// assert_eq!(cluster.master_of_slot(slot), promoted);
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    /// Holds the output of `redis-cli --cluster create`.
    dir: TempDir,
}

/// A shard left without a live master (see [`RedisCluster::masterless_shards`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasterlessShard {
    /// The inclusive slot ranges its failed master still holds.
    pub slots: Vec<(u16, u16)>,
    /// The index of that master (`None`: not one of this cluster's nodes).
    pub failed_master: Option<usize>,
    /// Its replicas that the cluster does not flag `fail`, ascending.
    pub replicas: Vec<usize>,
}

/// One shard of the cluster as [`RedisCluster::shards`] reports it: its slots and the
/// ports of its master and replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardLayout {
    /// The inclusive slot ranges its master serves.
    pub slots: Vec<(u16, u16)>,
    /// The ports of its master (first) and of its replicas.
    pub ports: Vec<u16>,
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NodeEntry {
    id: String,
    port: u16,
    flags: Vec<String>,
    /// The id of the master, for a replica.
    master_id: Option<String>,
    /// Inclusive slot ranges served by this node.
    slots: Vec<(u16, u16)>,
}

impl NodeEntry {
    fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    /// A master not flagged `fail` (a `fail?` suspicion does not count).
    fn is_live_master(&self) -> bool {
        self.has_flag("master") && !self.has_flag("fail")
    }

    /// A replica not flagged `fail`.
    fn is_live_replica(&self) -> bool {
        self.has_flag("slave") && !self.has_flag("fail")
    }

    fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| (a..=b).contains(&slot))
    }
}

impl RedisCluster {
    /// Starts `masters` masters and `masters * replicas_per_master` replicas and forms a
    /// cluster of them with `redis-cli --cluster create ... --cluster-replicas R --cluster-yes`.
    ///
    /// Returns once every node reports `cluster_state:ok` with all 16384 slots assigned and
    /// knows all other nodes, and every replica's link to its master is up.
    ///
    /// # Panics
    ///
    /// Panics if `masters < 3` (Redis Cluster needs three), if `redis-server` or `redis-cli`
    /// is missing (the message names the install command), if a node does not start, if
    /// `redis-cli` fails or takes more than 30 s, or if the cluster is not stable within 30 s;
    /// the message includes `redis-cli`'s output and the log tails of all nodes.
    pub fn start(masters: usize, replicas_per_master: usize) -> RedisCluster {
        Self::start_with(masters, replicas_per_master, ServerOptions::new())
    }

    /// Like [`RedisCluster::start`], every node configured by a clone of `options` to which
    /// [`ServerOptions::cluster_node`] and `--repl-diskless-sync-delay 0` (fast initial sync)
    /// are added; arguments from `options` come later and win.
    ///
    /// # Panics
    ///
    /// As [`RedisCluster::start`]; also if `options` ask for a sentinel.
    pub fn start_with(
        masters: usize,
        replicas_per_master: usize,
        options: ServerOptions,
    ) -> RedisCluster {
        assert!(
            masters >= 3,
            "lock-test-support: a Redis Cluster needs at least 3 masters, got {masters}"
        );
        let cli = options
            .binary
            .as_ref()
            .and_then(|server| Some(server.parent()?.join("redis-cli")))
            .filter(|cli| cli.is_file())
            .unwrap_or_else(redis_cli_path);
        let dir = tempfile::Builder::new()
            .prefix("lock-test-cluster-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory for the cluster: {e}"));
        let mut options = options.cluster_node();
        options.extra_args.splice(
            0..0,
            ["--repl-diskless-sync-delay".to_owned(), "0".to_owned()],
        );
        let total = masters * (1 + replicas_per_master);
        let nodes = (0..total)
            .map(|_| RedisServer::start_with(options.clone()))
            .collect();
        let cluster = RedisCluster { nodes, dir };
        cluster.create(&cli, replicas_per_master);
        if let Err(reason) = wait_until(FORM_TIMEOUT, || cluster.check_formed(masters)) {
            cluster.fail(&format!(
                "the cluster did not become stable within {FORM_TIMEOUT:?}: {reason}"
            ));
        }
        cluster
    }

    /// The number of nodes (masters and replicas, running or not).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The URLs of all nodes, in index order: `redis://127.0.0.1:PORT/`.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The URLs of the current masters, in index order (see [`RedisCluster::masters`]).
    pub fn master_urls(&self) -> Vec<String> {
        self.masters()
            .into_iter()
            .map(|i| self.nodes[i].url())
            .collect()
    }

    /// The indices of the nodes the cluster currently considers masters (flag `master`, not
    /// flagged `fail`), ascending, as seen by the first running node that answers
    /// (preferring one that reports `cluster_state:ok`).
    ///
    /// Right after a master is killed, and until the cluster has flagged it as failed, it is
    /// still listed; [`RedisCluster::kill_master_and_wait_for_failover`] waits for that.
    ///
    /// # Panics
    ///
    /// Panics if no running node answers `CLUSTER NODES`.
    pub fn masters(&self) -> Vec<usize> {
        self.indices(self.view().iter().filter(|e| e.is_live_master()))
    }

    /// The indices of the nodes the cluster currently considers replicas (flag `slave`, not
    /// flagged `fail`), ascending, as seen by the first running node that answers
    /// (preferring one that reports `cluster_state:ok`).
    ///
    /// # Panics
    ///
    /// Panics if no running node answers `CLUSTER NODES`.
    pub fn replicas(&self) -> Vec<usize> {
        self.indices(self.view().iter().filter(|e| e.is_live_replica()))
    }

    /// The indices of the (not failed) replicas of the node at `master`, ascending.
    ///
    /// # Panics
    ///
    /// Panics if no running node answers `CLUSTER NODES`.
    pub fn replicas_of(&self, master: usize) -> Vec<usize> {
        let view = self.view();
        let port = self.node(master).port();
        let Some(id) = view.iter().find(|e| e.port == port).map(|e| e.id.clone()) else {
            return Vec::new();
        };
        self.indices(
            view.iter()
                .filter(|e| e.is_live_replica() && e.master_id.as_deref() == Some(&id)),
        )
    }

    /// The node at `index`.
    ///
    /// # Panics
    ///
    /// Panics if `index` is out of range.
    pub fn node(&self, index: usize) -> &RedisServer {
        self.nodes.get(index).unwrap_or_else(|| {
            panic!(
                "RedisCluster: no node {index} (there are {})",
                self.nodes.len()
            )
        })
    }

    /// The node at `index`, mutably (to kill, pause or restart it). A restarted node keeps its
    /// `nodes.conf` and rejoins the cluster, with an empty data set.
    ///
    /// # Panics
    ///
    /// Panics if `index` is out of range.
    pub fn node_mut(&mut self, index: usize) -> &mut RedisServer {
        let count = self.nodes.len();
        self.nodes
            .get_mut(index)
            .unwrap_or_else(|| panic!("RedisCluster: no node {index} (there are {count})"))
    }

    /// All nodes, in index order.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The slot of `key` (see [`key_slot`]); the same as `CLUSTER KEYSLOT key`.
    pub fn slot_of(&self, key: &str) -> u16 {
        key_slot(key.as_bytes())
    }

    /// The index of the master that currently serves `slot`, as seen by the first running node
    /// that answers `CLUSTER NODES`, preferring one that reports `cluster_state:ok` (masters
    /// flagged `fail` are ignored).
    ///
    /// # Panics
    ///
    /// Panics if `slot >= 16384`, if no running node answers, or if no live master serves the
    /// slot (the cluster is down). [`RedisCluster::try_master_of_slot`] returns these as errors.
    pub fn master_of_slot(&self, slot: u16) -> usize {
        self.try_master_of_slot(slot)
            .unwrap_or_else(|reason| self.fail(&reason))
    }

    /// Like [`RedisCluster::master_of_slot`], but an error instead of a panic when `slot` is
    /// out of range, no running node answers, or no live master serves the slot (a shard left
    /// without a master: see [`RedisCluster::masterless_shards`]).
    pub fn try_master_of_slot(&self, slot: u16) -> Result<usize, String> {
        if slot >= CLUSTER_SLOTS {
            return Err(format!("slot {slot} out of range"));
        }
        let view = self.node_view_any()?;
        view.iter()
            .find(|e| e.is_live_master() && e.serves(slot))
            .and_then(|e| self.index_of_port(e.port))
            .ok_or_else(|| {
                format!("no live master serves slot {slot}; CLUSTER NODES view: {view:?}")
            })
    }

    /// Like [`RedisCluster::replicas_of`], but an error instead of a panic when no running
    /// node answers.
    pub fn try_replicas_of(&self, master: usize) -> Result<Vec<usize>, String> {
        let view = self.node_view_any()?;
        let port = self
            .nodes
            .get(master)
            .ok_or_else(|| format!("no node {master} (there are {})", self.nodes.len()))?
            .port();
        let Some(id) = view.iter().find(|e| e.port == port).map(|e| e.id.clone()) else {
            return Ok(Vec::new());
        };
        Ok(self.indices(
            view.iter()
                .filter(|e| e.is_live_replica() && e.master_id.as_deref() == Some(&id)),
        ))
    }

    /// The shards the cluster sees without a live master: each master flagged `fail` that
    /// still holds slots no live master serves (its replicas were not promoted, or not yet),
    /// as seen by the first running node that answers `CLUSTER NODES` (preferring one that
    /// reports `cluster_state:ok`). Empty when every assigned slot has a live master.
    ///
    /// Right after a master dies, and until the cluster flags it `fail` (the node timeout),
    /// it is still taken as live; a replica's election follows within about a node timeout.
    /// Returns an error when no running node answers.
    pub fn masterless_shards(&self) -> Result<Vec<MasterlessShard>, String> {
        let view = self.node_view_any()?;
        let mut shards = Vec::new();
        for failed in view
            .iter()
            .filter(|e| e.has_flag("master") && e.has_flag("fail") && !e.slots.is_empty())
        {
            let orphaned = failed
                .slots
                .iter()
                .any(|&(first, _)| !view.iter().any(|e| e.is_live_master() && e.serves(first)));
            if !orphaned {
                continue;
            }
            shards.push(MasterlessShard {
                slots: failed.slots.clone(),
                failed_master: self.index_of_port(failed.port),
                replicas: self.indices(view.iter().filter(|e| {
                    e.is_live_replica() && e.master_id.as_deref() == Some(failed.id.as_str())
                })),
            });
        }
        Ok(shards)
    }

    /// The shards as the first running node that answers `CLUSTER NODES` sees them: each
    /// live master that serves slots, with the ports of its replicas. Failovers move a
    /// shard's master among its nodes, not its slots, so a layout read at the start holds
    /// for a whole run without resharding.
    pub fn shards(&self) -> Result<Vec<ShardLayout>, String> {
        let view = self.node_view_any()?;
        Ok(view
            .iter()
            .filter(|e| e.is_live_master() && !e.slots.is_empty())
            .map(|master| {
                let mut ports = vec![master.port];
                ports.extend(
                    view.iter()
                        .filter(|e| e.master_id.as_deref() == Some(master.id.as_str()))
                        .map(|e| e.port),
                );
                ShardLayout {
                    slots: master.slots.clone(),
                    ports,
                }
            })
            .collect())
    }

    /// Moves `slot` from its master to master `to` as `redis-cli --cluster reshard` does, in
    /// steps: `CLUSTER SETSLOT IMPORTING` on `to`, `MIGRATING` on the owner, the slot's keys
    /// `MIGRATE`d `per_step` at a time with `pause` between steps (commands on the slot meanwhile
    /// meet `ASK` and `TRYAGAIN`), then `SETSLOT NODE` on `to`, the old owner and every other
    /// master. Returns the index of the old owner. `to` already serving the slot does nothing.
    ///
    /// # Panics
    ///
    /// Panics if a node does not answer or refuses a step (the message names the step);
    /// [`RedisCluster::try_move_slot`] returns that as an error.
    pub fn move_slot(&self, slot: u16, to: usize, per_step: usize, pause: Duration) -> usize {
        self.try_move_slot(slot, to, per_step, pause)
            .unwrap_or_else(|reason| self.fail(&reason))
    }

    /// Like [`RedisCluster::move_slot`], but an error naming the step that failed instead of
    /// a panic.
    pub fn try_move_slot(
        &self,
        slot: u16,
        to: usize,
        per_step: usize,
        pause: Duration,
    ) -> Result<usize, String> {
        let from = self.try_master_of_slot(slot)?;
        if from == to {
            return Ok(from);
        }
        let id = |index: usize| -> Result<String, String> {
            redis::cmd("CLUSTER")
                .arg("MYID")
                .query(&mut self.node(index).conn())
                .map_err(|err| format!("CLUSTER MYID of node {index}: {err}"))
        };
        let (from_id, to_id) = (id(from)?, id(to)?);
        let step = |index: usize, cmd: &mut redis::Cmd, what: &str| -> Result<(), String> {
            cmd.query::<redis::Value>(&mut self.node(index).conn())
                .map(drop)
                .map_err(|err| format!("{what} of slot {slot} on node {index}: {err}"))
        };
        step(
            to,
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("IMPORTING")
                .arg(&from_id),
            "SETSLOT IMPORTING",
        )?;
        step(
            from,
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("MIGRATING")
                .arg(&to_id),
            "SETSLOT MIGRATING",
        )?;
        let to_port = self.node(to).port();
        loop {
            let keys: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(per_step.max(1))
                .query(&mut self.node(from).conn())
                .map_err(|err| format!("GETKEYSINSLOT {slot} on node {from}: {err}"))?;
            if keys.is_empty() {
                break;
            }
            let mut migrate = redis::cmd("MIGRATE");
            migrate
                .arg("127.0.0.1")
                .arg(to_port)
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS");
            for key in &keys {
                migrate.arg(key);
            }
            step(from, &mut migrate, "MIGRATE")?;
            std::thread::sleep(pause);
        }
        std::thread::sleep(pause);
        for (index, what) in [
            (to, "SETSLOT NODE (new owner)"),
            (from, "SETSLOT NODE (old owner)"),
        ] {
            step(
                index,
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg("NODE")
                    .arg(&to_id),
                what,
            )?;
        }
        for master in self.masters() {
            if master != from && master != to {
                step(
                    master,
                    redis::cmd("CLUSTER")
                        .arg("SETSLOT")
                        .arg(slot)
                        .arg("NODE")
                        .arg(&to_id),
                    "SETSLOT NODE",
                )?;
            }
        }
        Ok(from)
    }

    /// `CLUSTER FAILOVER TAKEOVER` on the replica at `replica`: it takes its master's slots
    /// at once, without the master's agreement nor the other masters' vote (the way to repair
    /// a shard whose replica was not promoted). Returns when the node accepted the command;
    /// [`RedisCluster::try_wait_ok`] waits for the cluster to agree.
    pub fn failover_takeover(&self, replica: usize) -> Result<(), String> {
        let node = self
            .nodes
            .get(replica)
            .ok_or_else(|| format!("no node {replica} (there are {})", self.nodes.len()))?;
        let mut conn = probe_conn(node).map_err(|e| format!("node {replica}: {e}"))?;
        redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .arg("TAKEOVER")
            .query::<()>(&mut conn)
            .map_err(|e| format!("CLUSTER FAILOVER TAKEOVER on node {replica}: {e}"))
    }

    /// Whether the node at `index` was started and not killed since (a paused node counts).
    pub fn is_node_started(&self, index: usize) -> bool {
        self.nodes.get(index).is_some_and(RedisServer::is_started)
    }

    /// Waits until every running node that answers reports `cluster_state:ok` with all 16384
    /// slots assigned (at least one must answer; paused nodes do not).
    ///
    /// # Panics
    ///
    /// Panics on timeout, with the last unmet condition and the log tails of all nodes.
    pub fn wait_ok(&self, timeout: Duration) {
        if let Err(reason) = self.try_wait_ok(timeout) {
            self.fail(&reason);
        }
    }

    /// Like [`RedisCluster::wait_ok`], but an error (the last unmet condition) instead of a
    /// panic on timeout.
    pub fn try_wait_ok(&self, timeout: Duration) -> Result<(), String> {
        wait_until(timeout, || self.check_ok())
            .map_err(|reason| format!("the cluster was not ok within {timeout:?}: {reason}"))
    }

    /// Kills (`SIGKILL`) the master at `index` and waits until one of its replicas has taken
    /// over; returns that replica's index.
    ///
    /// Failover is complete when every running node that answers (at least one):
    /// flags the killed node `fail`, lists one of its former replicas as a master serving
    /// exactly the killed master's slots, and reports `cluster_state:ok`; and that replica
    /// itself answers `ROLE` with `master`.
    ///
    /// # Panics
    ///
    /// Panics if the node at `index` is not a live master serving slots or has no replica, or
    /// on timeout (with the last unmet condition and the log tails of all nodes).
    pub fn kill_master_and_wait_for_failover(&mut self, index: usize, timeout: Duration) -> usize {
        self.try_kill_master_and_wait_for_failover(index, timeout)
            .unwrap_or_else(|reason| self.fail(&reason))
    }

    /// Like [`RedisCluster::kill_master_and_wait_for_failover`], but an error instead of a
    /// panic when the node is not a live master with a replica (it is not killed then), or
    /// when no replica took over in time (the master stays killed: see
    /// [`RedisCluster::masterless_shards`]).
    pub fn try_kill_master_and_wait_for_failover(
        &mut self,
        index: usize,
        timeout: Duration,
    ) -> Result<usize, String> {
        let view = self.node_view_any()?;
        let port = self
            .nodes
            .get(index)
            .ok_or_else(|| format!("no node {index} (there are {})", self.nodes.len()))?
            .port();
        let old = view
            .iter()
            .find(|e| e.port == port)
            .filter(|e| e.is_live_master() && !e.slots.is_empty())
            .cloned()
            .ok_or_else(|| {
                format!(
                    "node {index} (port {port}) is not a live master serving slots; \
                     CLUSTER NODES view: {view:?}"
                )
            })?;
        let replica_ids: Vec<String> = view
            .iter()
            .filter(|e| e.master_id.as_deref() == Some(&old.id))
            .map(|e| e.id.clone())
            .collect();
        if replica_ids.is_empty() {
            return Err(format!(
                "master {index} (port {port}) has no replica to fail over to"
            ));
        }

        self.nodes[index].kill();
        let started = Instant::now();
        wait_until(timeout, || self.check_failover(index, &old, &replica_ids)).map_err(|reason| {
            format!(
                "no replica of master {index} (port {port}) took over within {timeout:?} \
                 (waited {:?}): {reason}",
                started.elapsed()
            )
        })
    }

    // ----- internals -----

    /// Runs `redis-cli --cluster create` over all nodes.
    fn create(&self, cli: &std::path::Path, replicas_per_master: usize) {
        let log_path = self.dir.path().join("cluster-create.log");
        let log = File::create(&log_path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", log_path.display()));
        let stderr = log
            .try_clone()
            .unwrap_or_else(|e| panic!("cannot duplicate the log file handle: {e}"));
        let mut command = Command::new(cli);
        command
            .args(["--cluster", "create"])
            .args(self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())))
            .args(["--cluster-replicas", &replicas_per_master.to_string()])
            .arg("--cluster-yes")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(stderr));
        let description = format!("{command:?}");
        let mut child = spawn_tied_to_process(command)
            .unwrap_or_else(|e| panic!("cannot spawn {}: {e}", cli.display()));
        let deadline = Instant::now() + CREATE_TIMEOUT;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break Err(format!("timed out after {CREATE_TIMEOUT:?}"));
                }
                Ok(None) => std::thread::sleep(POLL_INTERVAL),
                Err(e) => break Err(format!("cannot wait for it: {e}")),
            }
        };
        let output = std::fs::read_to_string(&log_path).unwrap_or_default();
        match status {
            Ok(status) if status.success() => {}
            Ok(status) => self.fail(&format!(
                "`{description}` failed ({status}); its output:\n{output}"
            )),
            Err(reason) => self.fail(&format!("`{description}` {reason}; its output:\n{output}")),
        }
    }

    /// The stable-start condition, checked on every node.
    fn check_formed(&self, masters: usize) -> Result<(), String> {
        let total = self.nodes.len();
        for (i, node) in self.nodes.iter().enumerate() {
            let info = self.cluster_info(i)?;
            expect_field(&info, "cluster_state", "ok", i)?;
            expect_field(&info, "cluster_slots_assigned", "16384", i)?;
            expect_field(&info, "cluster_known_nodes", &total.to_string(), i)?;
            let view = self.node_view(i)?;
            let live_masters = view
                .iter()
                .filter(|e| e.is_live_master() && !e.slots.is_empty())
                .count();
            if live_masters != masters {
                return Err(format!(
                    "node {i} sees {live_masters} masters serving slots, expected {masters}"
                ));
            }
            // Every node must also know every replica's master (gossip can
            // lag the replicas' own link): `replicas_of` asks any node.
            let replicas = view
                .iter()
                .filter(|e| e.is_live_replica() && e.master_id.is_some())
                .count();
            if replicas != total - masters {
                return Err(format!(
                    "node {i} sees {replicas} replicas with their master, expected {}",
                    total - masters
                ));
            }
            let me = view
                .iter()
                .find(|e| e.has_flag("myself"))
                .ok_or_else(|| format!("node {i}: no `myself` line in CLUSTER NODES"))?;
            if me.has_flag("slave") {
                let mut conn = probe_conn(node).map_err(|e| format!("node {i}: {e}"))?;
                let replication: String = redis::cmd("INFO")
                    .arg("replication")
                    .query(&mut conn)
                    .map_err(|e| format!("INFO replication on node {i}: {e}"))?;
                expect_field(&replication, "master_link_status", "up", i)?;
            }
        }
        Ok(())
    }

    fn check_ok(&self) -> Result<(), String> {
        let mut answered = 0;
        let mut last_error = String::from("no node is running");
        for (i, node) in self.nodes.iter().enumerate() {
            if !node.is_started() {
                continue;
            }
            let info = match self.cluster_info(i) {
                Ok(info) => info,
                Err(e) => {
                    last_error = e;
                    continue;
                }
            };
            answered += 1;
            expect_field(&info, "cluster_state", "ok", i)?;
            expect_field(&info, "cluster_slots_assigned", "16384", i)?;
        }
        if answered == 0 {
            return Err(format!(
                "no running node answered (last error: {last_error})"
            ));
        }
        Ok(())
    }

    fn check_failover(
        &self,
        killed: usize,
        old: &NodeEntry,
        replica_ids: &[String],
    ) -> Result<usize, String> {
        let mut promoted: Option<String> = None;
        let mut last_error = String::from("no other node is running");
        for (i, node) in self.nodes.iter().enumerate() {
            if i == killed || !node.is_started() {
                continue;
            }
            let (view, info) = match (self.node_view(i), self.cluster_info(i)) {
                (Ok(view), Ok(info)) => (view, info),
                (Err(e), _) | (_, Err(e)) => {
                    last_error = e;
                    continue;
                }
            };
            let seen = view.iter().find(|e| e.id == old.id);
            if !seen.is_some_and(|e| e.has_flag("fail")) {
                return Err(format!(
                    "node {i} does not flag node {killed} as failed yet (flags {:?})",
                    seen.map(|e| &e.flags)
                ));
            }
            let new_master = view
                .iter()
                .find(|e| replica_ids.contains(&e.id) && e.is_live_master())
                .ok_or_else(|| {
                    format!("node {i} does not list a former replica of node {killed} as master")
                })?;
            if new_master.slots != old.slots {
                return Err(format!(
                    "node {i}: the new master serves {:?}, expected {:?}",
                    new_master.slots, old.slots
                ));
            }
            match &promoted {
                Some(id) if *id != new_master.id => {
                    return Err(format!(
                        "nodes disagree on the new master ({id} vs {})",
                        new_master.id
                    ));
                }
                _ => promoted = Some(new_master.id.clone()),
            }
            expect_field(&info, "cluster_state", "ok", i)?;
        }
        let Some(id) = promoted else {
            return Err(format!(
                "no running node answered (last error: {last_error})"
            ));
        };
        let view = self.node_view_any()?;
        let index = view
            .iter()
            .find(|e| e.id == id)
            .and_then(|e| self.index_of_port(e.port))
            .ok_or_else(|| format!("the new master {id} is not one of our nodes"))?;
        let role = role(&self.nodes[index])?;
        if role != "master" {
            return Err(format!("node {index} answers ROLE with {role}, not master"));
        }
        Ok(index)
    }

    fn cluster_info(&self, index: usize) -> Result<String, String> {
        let mut conn = probe_conn(&self.nodes[index]).map_err(|e| format!("node {index}: {e}"))?;
        redis::cmd("CLUSTER")
            .arg("INFO")
            .query(&mut conn)
            .map_err(|e| format!("CLUSTER INFO on node {index}: {e}"))
    }

    fn node_view(&self, index: usize) -> Result<Vec<NodeEntry>, String> {
        let mut conn = probe_conn(&self.nodes[index]).map_err(|e| format!("node {index}: {e}"))?;
        let text: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut conn)
            .map_err(|e| format!("CLUSTER NODES on node {index}: {e}"))?;
        parse_cluster_nodes(&text)
            .map_err(|e| format!("cannot parse CLUSTER NODES of node {index}: {e}\n{text}"))
    }

    /// `CLUSTER NODES` of the first running node that reports `cluster_state:ok`, or else of
    /// the first running node that answers (a node that has just been restarted may not have
    /// caught up with the cluster yet, and then reports `cluster_state:fail`).
    fn node_view_any(&self) -> Result<Vec<NodeEntry>, String> {
        let mut fallback = None;
        let mut last_error = String::from("no node is running");
        for (i, node) in self.nodes.iter().enumerate() {
            if !node.is_started() {
                continue;
            }
            let ok = match self.cluster_info(i) {
                Ok(info) => info_field(&info, "cluster_state") == Some("ok"),
                Err(e) => {
                    last_error = e;
                    continue;
                }
            };
            match self.node_view(i) {
                Ok(view) if ok => return Ok(view),
                Ok(view) => {
                    fallback.get_or_insert(view);
                }
                Err(e) => last_error = e,
            }
        }
        fallback.ok_or_else(|| {
            format!("no running node answered CLUSTER NODES (last error: {last_error})")
        })
    }

    fn view(&self) -> Vec<NodeEntry> {
        self.node_view_any().unwrap_or_else(|e| self.fail(&e))
    }

    fn index_of_port(&self, port: u16) -> Option<usize> {
        self.nodes.iter().position(|n| n.port() == port)
    }

    fn indices<'a>(&self, entries: impl Iterator<Item = &'a NodeEntry>) -> Vec<usize> {
        let mut indices: Vec<usize> = entries.filter_map(|e| self.index_of_port(e.port)).collect();
        indices.sort_unstable();
        indices
    }

    fn fail(&self, reason: &str) -> ! {
        panic!(
            "lock-test-support: RedisCluster: {reason}\n{}",
            log_sections(
                self.nodes
                    .iter()
                    .enumerate()
                    .map(|(i, node)| (format!("cluster node {i}"), node))
            )
        )
    }
}

fn expect_field(info: &str, field: &str, expected: &str, node: usize) -> Result<(), String> {
    match info_field(info, field) {
        Some(value) if value == expected => Ok(()),
        other => Err(format!(
            "node {node} reports {field}:{}, expected {expected}",
            other.unwrap_or("<missing>")
        )),
    }
}

/// Parses the text of `CLUSTER NODES`:
/// `<id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent> <pong-recv> <config-epoch>
/// <link-state> <slot> ...`.
fn parse_cluster_nodes(text: &str) -> Result<Vec<NodeEntry>, String> {
    let mut entries = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 8 {
            return Err(format!("short line: {line}"));
        }
        let address = fields[1].split(['@', ',']).next().unwrap_or_default();
        let port = address
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| format!("bad address {}", fields[1]))?;
        let mut slots = Vec::new();
        // Importing/migrating markers look like `[slot->-id]`; they are not served slots.
        for range in fields[8..].iter().filter(|s| !s.starts_with('[')) {
            let (a, b) = range.split_once('-').unwrap_or((range, range));
            let parse = |s: &str| {
                s.parse::<u16>()
                    .map_err(|e| format!("bad slot range {range}: {e}"))
            };
            slots.push((parse(a)?, parse(b)?));
        }
        entries.push(NodeEntry {
            id: fields[0].to_owned(),
            port,
            flags: fields[2].split(',').map(str::to_owned).collect(),
            master_id: (fields[3] != "-").then(|| fields[3].to_owned()),
            slots,
        });
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cluster_nodes() {
        let text = "\
07c3 127.0.0.1:30004@40004 slave e7d1 0 1426238317239 4 connected
67ed 127.0.0.1:30002@40002,host master - 0 1426238316232 2 connected 5461-10922
e7d1 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460 [93->-292f]
6ec2 127.0.0.1:30005@40005 master,fail - 1426238316232 0 5 disconnected 16383
";
        let nodes = parse_cluster_nodes(text).unwrap();
        assert_eq!(nodes.len(), 4);
        assert_eq!(nodes[0].port, 30004);
        assert_eq!(nodes[0].master_id.as_deref(), Some("e7d1"));
        assert!(nodes[0].is_live_replica());
        assert_eq!(nodes[1].port, 30002);
        assert_eq!(nodes[1].slots, vec![(5461, 10922)]);
        assert!(nodes[2].has_flag("myself") && nodes[2].is_live_master());
        assert_eq!(nodes[2].slots, vec![(0, 5460)]);
        assert!(nodes[2].serves(5460) && !nodes[2].serves(5461));
        assert!(!nodes[3].is_live_master());
        assert_eq!(nodes[3].slots, vec![(16383, 16383)]);
    }
}
