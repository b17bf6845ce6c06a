//! Real partitions with network namespaces: a redis-server on a host address of the lab and
//! `redis-cli` inside a worker's namespace. Needs root and `ip`; elsewhere it prints a skip
//! line and passes (CI runs as root).

#[allow(dead_code)]
#[path = "../src/netns.rs"]
mod netns;

use std::time::{Duration, Instant};

use lock_test_support::{RedisServer, ServerOptions};
use netns::{Direction, NetLab};

/// How long one `PING` from the namespace may take before it counts as unanswered.
const PING_TIMEOUT: &str = "1.5";

fn skip_reason() -> Option<String> {
    netns::available().err()
}

/// `PING` from worker `i`'s namespace to `server`: whether it answered `PONG` in time.
fn ping(lab: &NetLab, i: usize, server: &RedisServer) -> bool {
    let addr = server.bind_addr().expect("bound to a lab address").to_string();
    let port = server.port().to_string();
    let out = lab
        .command_in(i, "timeout")
        .args([PING_TIMEOUT, "redis-cli", "-h", &addr, "-p", &port, "PING"])
        .output()
        .expect("running redis-cli in the namespace");
    out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "PONG"
}

#[test]
fn partitions_heal_and_clean_up() {
    if let Some(reason) = skip_reason() {
        eprintln!("!!!!! SKIPPED netns partitions test: {reason} (it needs root and iproute2)");
        return;
    }
    let lab = NetLab::create(2, 2).expect("creating the lab");
    let a = RedisServer::start_with(ServerOptions::new().bind_addr(lab.server_addr(0)));
    let b = RedisServer::start_with(ServerOptions::new().bind_addr(lab.server_addr(1)));

    assert!(ping(&lab, 0, &a), "reachable before any partition");
    assert!(ping(&lab, 0, &b));

    for direction in [Direction::Both, Direction::ToHost, Direction::FromHost] {
        lab.partition(0, direction).unwrap();
        let started = Instant::now();
        assert!(!ping(&lab, 0, &a), "{direction:?}: server A still answers");
        assert!(
            started.elapsed() >= Duration::from_secs(1),
            "{direction:?}: the PING failed at once instead of timing out"
        );
        assert!(!ping(&lab, 0, &b), "{direction:?}: server B still answers");
        assert!(ping(&lab, 1, &a), "{direction:?}: the other worker is cut off too");
        lab.heal(0).unwrap();
        assert!(ping(&lab, 0, &a), "{direction:?}: not healed");
        assert!(ping(&lab, 0, &b), "{direction:?}: not healed");
    }

    // Per-master: only A is cut off, in each direction.
    for direction in [Direction::Both, Direction::ToHost, Direction::FromHost] {
        lab.partition_servers(0, &[0], direction).unwrap();
        assert!(!ping(&lab, 0, &a), "{direction:?}: A answers through its partition");
        assert!(ping(&lab, 0, &b), "{direction:?}: B was cut off with A");
        lab.heal(0).unwrap();
        assert!(ping(&lab, 0, &a));
    }

    // A partition left in place is removed with the lab.
    lab.partition(1, Direction::Both).unwrap();
    let prefix = format!("{}{}", netns::PREFIX, lab.subnet().split('.').nth(2).unwrap());
    drop(lab);
    let left: Vec<String> = netns::leftover_namespaces()
        .into_iter()
        .filter(|n| n.starts_with(&format!("{prefix}-")))
        .collect();
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
    let rules = std::process::Command::new("ip")
        .args(["rule", "show"])
        .output()
        .unwrap();
    let rules = String::from_utf8_lossy(&rules.stdout);
    assert!(
        !rules.contains(&format!("{}.", prefix.replace(netns::PREFIX, "10.213."))),
        "rules left behind:\n{rules}"
    );
    let links = std::process::Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .unwrap();
    let links = String::from_utf8_lossy(&links.stdout);
    assert!(
        !links.contains(&format!("{prefix}-br")) && !links.contains(&format!("{prefix}h")),
        "links left behind:\n{links}"
    );
}
