//! Real network partitions between worker processes and Redis servers, with Linux network
//! namespaces (needs root and `ip` from iproute2; no firewall tables are used).
//!
//! Layout of one [`NetLab`] (subnet `10.213.B.0/24`, `B` picked per lab so that concurrent
//! labs do not collide):
//!
//! ```text
//!   host (the harness and every redis-server)
//!     bridge lcxB-br: 10.213.B.1 (gateway), 10.213.B.10+k (server k's own address)
//!        |-- veth lcxBhI <-> eth0 in namespace lcxB-wI: 10.213.B.100+I (worker I)
//! ```
//!
//! Each server binds its own host address (`ServerOptions::bind_pool` of the test support
//! crate), so one server can be cut off alone. The two directions are cut differently:
//!
//! * worker -> server (`ToHost`): inside the worker's namespace the server's `/32` is routed
//!   to a sink (a veth pair inside the namespace whose far end has no address, with a
//!   permanent neighbour entry): packets leave and vanish, silently, as in a real partition
//!   (a blackhole route would fail `connect` at once with `EINVAL` instead of timing out);
//! * server -> worker (`FromHost`): a host policy rule `from <server> to <worker> blackhole`:
//!   the server's replies and SYN-ACKs are dropped on the host (its TCP retransmits in vain),
//!   which the worker sees as silence.
//!
//! Dropping the lab deletes the namespaces (and with them the veth pairs), the bridge (and
//! its addresses) and the rules, also while unwinding from a panic. A lab left behind by a
//! process that died (`SIGKILL`) is removed by the next [`NetLab::create`]: the bridge's alias
//! records the creating process id.
//!
//! Processes started with [`NetLab::command_in`] keep their namespace alive after it is
//! deleted: stop them before dropping the lab.

// A few helpers serve the tests only (this file is also compiled into them).
#![allow(dead_code)]

use std::ffi::OsStr;
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::Mutex;

use anyhow::{bail, Context as _};

/// Every lab's interface and namespace names start with this.
pub const PREFIX: &str = "lcx";
/// The first two octets of every lab's subnet.
const NET: [u8; 2] = [10, 213];
/// Host address (gateway) of the lab.
const GATEWAY: u8 = 1;
/// Server `k` has `10.213.B.(SERVER_BASE + k)`.
const SERVER_BASE: u8 = 10;
/// Worker `i` has `10.213.B.(WORKER_BASE + i)`.
const WORKER_BASE: u8 = 100;
/// The next hop of sinked routes inside a namespace (never a real host).
const SINK_HOP: u8 = 254;
/// Preference of the lab's host policy rules (before `main` at 32766).
const RULE_PREF: u32 = 9213;
/// Preference of the rules cutting servers off from each other (before [`LOCAL_PREF`]).
const SERVER_RULE_PREF: u32 = 9212;
/// Where [`NetLab::cut_servers`] moves the host's `lookup local` rule.
pub const LOCAL_PREF: u32 = 10000;

/// Which direction of traffic a partition drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Both ways.
    Both,
    /// Worker -> server only (requests vanish; the server could still talk).
    ToHost,
    /// Server -> worker only (requests arrive and are executed; the answers vanish).
    FromHost,
}

impl Direction {
    fn cuts_to_host(self) -> bool {
        matches!(self, Direction::Both | Direction::ToHost)
    }

    fn cuts_from_host(self) -> bool {
        matches!(self, Direction::Both | Direction::FromHost)
    }
}

/// Whether this machine can build a lab: root and `ip` present and namespaces allowed.
/// `Err` says why not.
pub fn available() -> Result<(), String> {
    // SAFETY: plain syscall without arguments.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root".into());
    }
    match Command::new("ip").arg("-V").output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!("`ip -V` failed: {}", out.status)),
        Err(e) => Err(format!("`ip` (iproute2) not found: {e}")),
    }
}

/// One worker's namespace.
#[derive(Debug)]
struct Ns {
    name: String,
    addr: Ipv4Addr,
}

/// Namespaces for workers, a bridge with one address per server, and the partitions.
#[derive(Debug)]
pub struct NetLab {
    subnet: u8,
    bridge: String,
    servers: Vec<Ipv4Addr>,
    workers: Vec<Ns>,
    /// Host rules in place: (server address, worker address).
    rules: Mutex<Vec<(Ipv4Addr, Ipv4Addr)>>,
    /// Host rules between two servers in place: (from, to).
    server_rules: Mutex<Vec<(Ipv4Addr, Ipv4Addr)>>,
}

impl NetLab {
    /// Creates a lab with `workers` namespaces and `servers` host addresses (after removing
    /// labs whose creating process is gone).
    pub fn create(workers: usize, servers: usize) -> anyhow::Result<NetLab> {
        available().map_err(|e| anyhow::anyhow!("network namespaces unavailable: {e}"))?;
        anyhow::ensure!(
            workers <= 100 && servers <= 80,
            "too many workers or servers"
        );
        // Labs of one process are made one at a time: a bridge is claimed before its alias
        // names its owner, and a concurrent stale check must not see it in between.
        static CREATING: Mutex<()> = Mutex::new(());
        let _one_at_a_time = CREATING.lock().unwrap_or_else(|e| e.into_inner());
        cleanup_stale();
        let used = ip(&["-4", "-o", "addr", "show"])?;
        let mut lab = None;
        for subnet in 0..=255u8 {
            if used.contains(&format!("{}.{}.{subnet}.", NET[0], NET[1])) {
                continue;
            }
            let bridge = format!("{PREFIX}{subnet}-br");
            // Creating the bridge claims the subnet (fails if another lab just took it).
            if ip(&["link", "add", &bridge, "type", "bridge"]).is_err() {
                continue;
            }
            lab = Some(NetLab {
                subnet,
                bridge,
                servers: Vec::new(),
                workers: Vec::new(),
                rules: Mutex::new(Vec::new()),
                server_rules: Mutex::new(Vec::new()),
            });
            break;
        }
        let mut lab = lab.context("no free 10.213.x.0/24 subnet for a network lab")?;
        // From here on, Drop removes whatever was made.
        lab.setup(workers, servers)?;
        Ok(lab)
    }

    fn addr(&self, last: u8) -> Ipv4Addr {
        Ipv4Addr::new(NET[0], NET[1], self.subnet, last)
    }

    fn setup(&mut self, workers: usize, servers: usize) -> anyhow::Result<()> {
        let bridge = self.bridge.clone();
        ip(&[
            "link",
            "set",
            &bridge,
            "alias",
            &format!("pid={}", std::process::id()),
        ])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/24", self.addr(GATEWAY)),
            "dev",
            &bridge,
        ])?;
        for k in 0..servers {
            let addr = self.addr(SERVER_BASE + k as u8);
            ip(&["addr", "add", &format!("{addr}/24"), "dev", &bridge])?;
            self.servers.push(addr);
        }
        ip(&["link", "set", &bridge, "up"])?;
        for i in 0..workers {
            let name = format!("{PREFIX}{}-w{i}", self.subnet);
            let host_end = format!("{PREFIX}{}h{i}", self.subnet);
            let ns_end = format!("{PREFIX}{}n{i}", self.subnet);
            let addr = self.addr(WORKER_BASE + i as u8);
            ip(&["netns", "add", &name])?;
            self.workers.push(Ns {
                name: name.clone(),
                addr,
            });
            ip(&[
                "link", "add", &host_end, "type", "veth", "peer", "name", &ns_end,
            ])?;
            ip(&["link", "set", &ns_end, "netns", &name])?;
            ip(&["link", "set", &host_end, "master", &bridge])?;
            ip(&["link", "set", &host_end, "up"])?;
            let n = |args: &[&str]| {
                let mut all = vec!["-n", name.as_str()];
                all.extend_from_slice(args);
                ip(&all)
            };
            n(&["link", "set", &ns_end, "name", "eth0"])?;
            n(&["addr", "add", &format!("{addr}/24"), "dev", "eth0"])?;
            n(&["link", "set", "lo", "up"])?;
            n(&["link", "set", "eth0", "up"])?;
            n(&[
                "route",
                "add",
                "default",
                "via",
                &self.addr(GATEWAY).to_string(),
            ])?;
            // The sink: a veth pair inside the namespace; frames sent to it reach a peer
            // without addresses, addressed to a MAC nobody has, and are dropped.
            n(&[
                "link", "add", "sink0", "type", "veth", "peer", "name", "sink1",
            ])?;
            n(&["link", "set", "sink0", "up"])?;
            n(&["link", "set", "sink1", "up"])?;
            n(&[
                "neigh",
                "replace",
                &self.addr(SINK_HOP).to_string(),
                "lladdr",
                "02:00:00:00:00:01",
                "dev",
                "sink0",
                "nud",
                "permanent",
            ])?;
        }
        Ok(())
    }

    /// The lab's subnet, `10.213.B.0/24`.
    pub fn subnet(&self) -> String {
        format!("{}/24", self.addr(0))
    }

    /// The host address of server `k` (bind server `k` to it).
    pub fn server_addr(&self, k: usize) -> Ipv4Addr {
        self.servers[k]
    }

    /// Every server address, in order (for `ServerOptions::bind_pool`).
    pub fn server_addrs(&self) -> &[Ipv4Addr] {
        &self.servers
    }

    /// How many worker namespaces there are.
    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    /// The namespace name of worker `i`.
    pub fn worker_ns(&self, i: usize) -> &str {
        &self.workers[i].name
    }

    /// The address of worker `i` inside its namespace.
    pub fn worker_addr(&self, i: usize) -> Ipv4Addr {
        self.workers[i].addr
    }

    /// A command that runs `program` inside worker `i`'s namespace
    /// (`ip netns exec <ns> <program>`); add its arguments and spawn it (for tokio:
    /// `tokio::process::Command::from(cmd)`).
    pub fn command_in(&self, i: usize, program: impl AsRef<OsStr>) -> Command {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.workers[i].name])
            .arg(program);
        command
    }

    /// Moves the calling thread into worker `i`'s namespace: sockets it opens from then on
    /// are the worker's (for a client inside the lab without a process of its own, e.g. a
    /// current-thread runtime on a thread of its own). Irreversible for that thread.
    pub fn enter(&self, i: usize) -> anyhow::Result<()> {
        use std::os::fd::AsRawFd as _;
        let path = format!("/var/run/netns/{}", self.workers[i].name);
        let file = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
        // SAFETY: plain syscall on a file descriptor we own for its duration.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            bail!("setns {path}: {}", std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Cuts worker `i` off from every server, in `direction`.
    pub fn partition(&self, i: usize, direction: Direction) -> anyhow::Result<()> {
        let all: Vec<usize> = (0..self.servers.len()).collect();
        self.partition_servers(i, &all, direction)
    }

    /// Cuts worker `i` off from the servers `servers` (indices) only, in `direction`; the
    /// other servers stay reachable (a per-master partition).
    pub fn partition_servers(
        &self,
        i: usize,
        servers: &[usize],
        direction: Direction,
    ) -> anyhow::Result<()> {
        let ns = &self.workers[i];
        for &k in servers {
            let server = self.servers[k];
            if direction.cuts_to_host() {
                ip(&[
                    "-n",
                    &ns.name,
                    "route",
                    "replace",
                    &format!("{server}/32"),
                    "via",
                    &self.addr(SINK_HOP).to_string(),
                    "dev",
                    "sink0",
                    "onlink",
                ])?;
            }
            if direction.cuts_from_host() {
                let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
                if !rules.contains(&(server, ns.addr)) {
                    rule("add", server, ns.addr)?;
                    rules.push((server, ns.addr));
                }
            }
        }
        Ok(())
    }

    /// Heals every partition of worker `i` (both directions, every server).
    pub fn heal(&self, i: usize) -> anyhow::Result<()> {
        let ns = &self.workers[i];
        ip(&["-n", &ns.name, "route", "flush", "dev", "sink0"])?;
        let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        let mut result = Ok(());
        rules.retain(|&(server, worker)| {
            if worker != ns.addr {
                return true;
            }
            if let Err(e) = rule("del", server, worker) {
                result = Err(e);
            }
            false
        });
        result
    }

    /// Heals every partition of every worker, and every cut between servers.
    pub fn heal_all(&self) -> anyhow::Result<()> {
        for i in 0..self.workers.len() {
            self.heal(i)?;
        }
        self.heal_servers()
    }

    /// Cuts every server of `a` off from every server of `b`, both ways (e.g. a Sentinel
    /// master from its replica and the sentinels, for a split brain in which workers still
    /// reach the old master). The servers all run on the host, where traffic between local
    /// addresses is routed by the `lookup local` rule at preference 0, ahead of any other
    /// rule: the first cut moves that rule to preference [`LOCAL_PREF`] (the same lookup for
    /// every other packet; the last heal of this process, or dropping the lab, moves it back,
    /// and a later [`NetLab::create`] does when the process that moved it died) and puts
    /// `from X to Y blackhole` rules before it.
    /// Relies on each server sending from its own address: Redis binds its outgoing
    /// replication, cluster bus and sentinel connections to its first `--bind` address,
    /// which `ServerOptions::bind_addr` makes the lab address. New connections fail at once
    /// (`EINVAL`); established ones see silence.
    pub fn cut_servers(&self, a: &[usize], b: &[usize]) -> anyhow::Result<()> {
        let mut rules = self.server_rules.lock().unwrap_or_else(|e| e.into_inner());
        if rules.is_empty() {
            local_rule_needed(true)?;
        }
        for &x in a {
            for &y in b {
                for (from, to) in [
                    (self.servers[x], self.servers[y]),
                    (self.servers[y], self.servers[x]),
                ] {
                    if from != to && !rules.contains(&(from, to)) {
                        rule_at("add", from, to, SERVER_RULE_PREF)?;
                        rules.push((from, to));
                    }
                }
            }
        }
        Ok(())
    }

    /// Heals every cut between servers; the last lab of this process to heal its cuts puts
    /// the host's `lookup local` rule back at preference 0, where it was.
    pub fn heal_servers(&self) -> anyhow::Result<()> {
        let mut guard = self.server_rules.lock().unwrap_or_else(|e| e.into_inner());
        let rules = std::mem::take(&mut *guard);
        let mut result = Ok(());
        let had_cuts = !rules.is_empty();
        for (from, to) in rules {
            if let Err(e) = rule_at("del", from, to, SERVER_RULE_PREF) {
                result = Err(e);
            }
        }
        if had_cuts {
            if let Err(e) = local_rule_needed(false) {
                result = Err(e);
            }
        }
        result
    }
}

impl Drop for NetLab {
    fn drop(&mut self) {
        let rules = std::mem::take(&mut *self.rules.lock().unwrap_or_else(|e| e.into_inner()));
        for (server, worker) in rules {
            let _ = rule("del", server, worker);
        }
        let _ = self.heal_servers();
        remove_lab(self.subnet);
    }
}

/// Adds or deletes the host rule dropping `server`'s packets to `worker`.
fn rule(action: &str, server: Ipv4Addr, worker: Ipv4Addr) -> anyhow::Result<()> {
    rule_at(action, server, worker, RULE_PREF)
}

/// Adds or deletes the host rule `from <from> to <to> blackhole pref <pref>`.
fn rule_at(action: &str, from: Ipv4Addr, to: Ipv4Addr, pref: u32) -> anyhow::Result<()> {
    ip(&[
        "rule",
        action,
        "from",
        &from.to_string(),
        "to",
        &to.to_string(),
        "blackhole",
        "pref",
        &pref.to_string(),
    ])
    .map(drop)
}

/// Labs of this process with cuts between servers in place (they need the host's
/// `lookup local` rule moved).
static CUTTING: Mutex<usize> = Mutex::new(0);

/// Counts a lab's cuts in (`true`) or out; moves the host's `lookup local` rule to
/// [`LOCAL_PREF`] with the first and back to preference 0 after the last.
fn local_rule_needed(needed: bool) -> anyhow::Result<()> {
    let mut cutting = CUTTING.lock().unwrap_or_else(|e| e.into_inner());
    if needed {
        move_local_rule()?;
        *cutting += 1;
        Ok(())
    } else {
        *cutting = cutting.saturating_sub(1);
        if *cutting == 0 {
            restore_local_rule()
        } else {
            Ok(())
        }
    }
}

/// Puts the host's `lookup local` rule back at preference 0 (adding it there before
/// deleting the moved one); does nothing when it is there already or was never moved.
fn restore_local_rule() -> anyhow::Result<()> {
    let moved = ip(&["rule", "show", "pref", &LOCAL_PREF.to_string()])?;
    if !moved.contains("lookup local") {
        return Ok(());
    }
    let at_zero = ip(&["rule", "show", "pref", "0"])?;
    if !at_zero.contains("lookup local") {
        ip(&["rule", "add", "pref", "0", "lookup", "local"])?;
    }
    ip(&[
        "rule",
        "del",
        "pref",
        &LOCAL_PREF.to_string(),
        "lookup",
        "local",
    ])
    .map(drop)
}

/// Whether the host's `lookup local` rule is at preference 0 only (where the kernel puts
/// it), not moved.
pub fn local_rule_in_place() -> bool {
    ip(&["rule", "show", "pref", "0"]).is_ok_and(|r| r.contains("lookup local"))
        && !ip(&["rule", "show", "pref", &LOCAL_PREF.to_string()])
            .is_ok_and(|r| r.contains("lookup local"))
}

/// Moves the host's `lookup local` rule from preference 0 to [`LOCAL_PREF`] (adding the
/// new one before deleting the old, so local delivery never stops); does nothing when done.
fn move_local_rule() -> anyhow::Result<()> {
    let at_zero = ip(&["rule", "show", "pref", "0"])?;
    if !at_zero.contains("lookup local") {
        return Ok(());
    }
    let moved = ip(&["rule", "show", "pref", &LOCAL_PREF.to_string()])?;
    if !moved.contains("lookup local") {
        ip(&[
            "rule",
            "add",
            "pref",
            &LOCAL_PREF.to_string(),
            "lookup",
            "local",
        ])?;
    }
    ip(&["rule", "del", "pref", "0", "lookup", "local"]).map(drop)
}

/// Removes everything of lab `subnet`: its namespaces (with their veths), bridge and rules.
fn remove_lab(subnet: u8) {
    // The host ends of the veth pairs first: deleting one deletes its peer at once, while a
    // deleted namespace's devices go away later, in the kernel's own time.
    let veth_prefix = format!("{PREFIX}{subnet}h");
    if let Ok(links) = ip(&["-o", "link", "show"]) {
        for line in links.lines() {
            let Some(name) = line.split(": ").nth(1) else {
                continue;
            };
            let name = name.split('@').next().unwrap_or(name);
            if name.starts_with(&veth_prefix) {
                let _ = ip(&["link", "del", name]);
            }
        }
    }
    let ns_prefix = format!("{PREFIX}{subnet}-w");
    if let Ok(list) = ip(&["netns", "list"]) {
        for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
            if name.starts_with(&ns_prefix) {
                let _ = ip(&["netns", "del", name]);
            }
        }
    }
    let _ = ip(&["link", "del", &format!("{PREFIX}{subnet}-br")]);
    let net = format!("{}.{}.{subnet}.", NET[0], NET[1]);
    for pref in [RULE_PREF, SERVER_RULE_PREF] {
        if let Ok(rules) = ip(&["rule", "show", "pref", &pref.to_string()]) {
            for line in rules.lines() {
                let words: Vec<&str> = line.split_whitespace().collect();
                let (Some(from), Some(to)) = (after(&words, "from"), after(&words, "to")) else {
                    continue;
                };
                if from.starts_with(&net) || to.starts_with(&net) {
                    let _ = ip(&[
                        "rule",
                        "del",
                        "from",
                        from,
                        "to",
                        to,
                        "blackhole",
                        "pref",
                        &pref.to_string(),
                    ]);
                }
            }
        }
    }
}

/// The word after `key` in `words`.
fn after<'a>(words: &[&'a str], key: &str) -> Option<&'a str> {
    words
        .iter()
        .position(|w| *w == key)
        .and_then(|p| words.get(p + 1).copied())
}

/// Removes the labs whose creating process no longer exists (it was killed before its
/// `Drop` ran).
pub fn cleanup_stale() {
    let Ok(links) = ip(&["-o", "link", "show", "type", "bridge"]) else {
        return;
    };
    let mut live_labs = 0;
    for line in links.lines() {
        // "7: lcx3-br: <...> ... alias pid=1234"
        let Some(name) = line.split(": ").nth(1) else {
            continue;
        };
        let Some(subnet) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.strip_suffix("-br"))
            .and_then(|s| s.parse::<u8>().ok())
        else {
            continue;
        };
        let owner = line
            .split("alias pid=")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|pid| pid.parse::<u32>().ok());
        let alive = owner.is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists());
        if !alive {
            remove_lab(subnet);
        } else {
            live_labs += 1;
        }
    }
    // A process killed with cuts in place left the `lookup local` rule moved: put it back
    // when no lab is left that could still rely on it.
    if live_labs == 0 && *CUTTING.lock().unwrap_or_else(|e| e.into_inner()) == 0 {
        let _ = restore_local_rule();
    }
    // Namespaces whose bridge is gone (a creator killed between the two steps).
    if let Ok(list) = ip(&["netns", "list"]) {
        for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
            let Some(subnet) = name
                .strip_prefix(PREFIX)
                .and_then(|rest| rest.split_once("-w"))
                .map(|(s, _)| s)
            else {
                continue;
            };
            if ip(&["link", "show", &format!("{PREFIX}{subnet}-br")]).is_err() {
                let _ = ip(&["netns", "del", name]);
            }
        }
    }
}

/// The names of the namespaces left with this module's prefix (for tests and reports).
pub fn leftover_namespaces() -> Vec<String> {
    ip(&["netns", "list"])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(PREFIX))
        .map(str::to_owned)
        .collect()
}

/// Runs `ip <args>`; returns its standard output, or an error with its standard error.
fn ip(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .with_context(|| format!("running ip {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "ip {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
