//! Real partitions with network namespaces: a redis-server on a host address of the lab and
//! `redis-cli` inside a worker's namespace. Needs root and `ip`; elsewhere it prints a skip
//! line and passes (CI runs as root).

#[path = "../src/netns.rs"]
mod netns;

use std::time::{Duration, Instant};

use lock_test_support::{RedisServer, ServerOptions};
use netns::{Direction, NetLab};

/// How long one `PING` from the namespace may take before it counts as unanswered.
const PING_TIMEOUT: &str = "1.5";

/// The tests run one at a time: each builds a lab, and one of them fakes a stale lab that a
/// concurrent lab's clean-up could remove half-made.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Prints a skip line past the test harness's output capture (so it shows in every run).
fn loud_skip(test: &str, reason: &str) {
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "!!!!! SKIPPED {test}: {reason} (it needs root and iproute2)"
    );
}

fn skip_reason() -> Option<String> {
    netns::available().err()
}

/// `PING` from worker `i`'s namespace to `server`: whether it answered `PONG` in time.
fn ping(lab: &NetLab, i: usize, server: &RedisServer) -> bool {
    let addr = server
        .bind_addr()
        .expect("bound to a lab address")
        .to_string();
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
        loud_skip("netns partitions test", &reason);
        return;
    }
    let _serial = serial();
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
        assert!(
            ping(&lab, 1, &a),
            "{direction:?}: the other worker is cut off too"
        );
        lab.heal(0).unwrap();
        assert!(ping(&lab, 0, &a), "{direction:?}: not healed");
        assert!(ping(&lab, 0, &b), "{direction:?}: not healed");
    }

    // Per-master: only A is cut off, in each direction.
    for direction in [Direction::Both, Direction::ToHost, Direction::FromHost] {
        lab.partition_servers(0, &[0], direction).unwrap();
        assert!(
            !ping(&lab, 0, &a),
            "{direction:?}: A answers through its partition"
        );
        assert!(ping(&lab, 0, &b), "{direction:?}: B was cut off with A");
        lab.heal(0).unwrap();
        assert!(ping(&lab, 0, &a));
    }

    // A partition left in place is removed with the lab.
    lab.partition(1, Direction::Both).unwrap();
    let prefix = format!(
        "{}{}",
        netns::PREFIX,
        lab.subnet().split('.').nth(2).unwrap()
    );
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

/// Runs `redis-cli <args>` inside worker `i`'s namespace; its trimmed output, if it ran in
/// time.
fn cli_in(lab: &NetLab, i: usize, args: &[&str]) -> Option<String> {
    let out = lab
        .command_in(i, "timeout")
        .args(["3", "redis-cli"])
        .args(args)
        .output()
        .expect("running redis-cli in the namespace");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[test]
fn sentinel_and_cluster_hand_out_addresses_reachable_from_a_namespace() {
    if let Some(reason) = skip_reason() {
        loud_skip("netns sentinel/cluster test", &reason);
        return;
    }
    let _serial = serial();
    let lab = NetLab::create(1, 11).expect("creating the lab");
    let addrs = lab.server_addrs().to_vec();
    let subnet = format!("{}.", lab.subnet().rsplit_once('.').unwrap().0);

    // Sentinel: master, replica, three sentinels (5 addresses).
    let set = lock_test_support::RedisSentinels::start_with(
        "netns",
        ServerOptions::new().bind_pool(addrs[..5].iter().copied()),
    );
    let sentinel = set.sentinels()[0].bind_addr().unwrap().to_string();
    let port = set.sentinels()[0].port().to_string();
    let master = cli_in(
        &lab,
        0,
        &[
            "-h",
            &sentinel,
            "-p",
            &port,
            "SENTINEL",
            "get-master-addr-by-name",
            "netns",
        ],
    )
    .expect("the sentinel answers from the namespace");
    let mut lines = master.lines();
    let (host, mport) = (lines.next().unwrap(), lines.next().unwrap());
    assert!(host.starts_with(&subnet), "sentinel hands out {host}");
    assert_eq!(
        cli_in(&lab, 0, &["-h", host, "-p", mport, "SET", "k", "v"]).as_deref(),
        Some("OK"),
        "the master the sentinels name is reachable and writable"
    );
    let replicas = cli_in(
        &lab,
        0,
        &[
            "-h", &sentinel, "-p", &port, "SENTINEL", "replicas", "netns",
        ],
    )
    .unwrap();
    assert!(
        replicas.contains(&subnet),
        "replicas announced as:\n{replicas}"
    );
    drop(set);

    // Cluster: 3 masters, 3 replicas (6 addresses).
    let cluster = lock_test_support::RedisCluster::start_with(
        3,
        1,
        ServerOptions::new().bind_pool(addrs[5..11].iter().copied()),
    );
    let node = cluster.node(0);
    let (host, port) = (
        node.bind_addr().unwrap().to_string(),
        node.port().to_string(),
    );
    let slots = cli_in(&lab, 0, &["-h", &host, "-p", &port, "CLUSTER", "SLOTS"]).unwrap();
    assert!(
        slots
            .lines()
            .filter(|l| l.starts_with("10."))
            .all(|l| l.starts_with(&subnet))
            && slots.contains(&subnet),
        "CLUSTER SLOTS announces:\n{slots}"
    );
    assert!(
        !slots.contains("127.0.0.1"),
        "CLUSTER SLOTS announces loopback:\n{slots}"
    );
    for key in ["a", "b", "c", "d"] {
        assert_eq!(
            cli_in(&lab, 0, &["-c", "-h", &host, "-p", &port, "SET", key, "v"]).as_deref(),
            Some("OK"),
            "following MOVED from the namespace"
        );
    }
}

/// A request sent while the worker->server direction is cut is not lost: TCP retransmits
/// it, and it runs after the heal (so a cut does not keep a late write off a server).
#[test]
fn a_request_sent_during_a_partition_lands_after_the_heal() {
    if let Some(reason) = skip_reason() {
        loud_skip("netns retransmission test", &reason);
        return;
    }
    let _serial = serial();
    use std::io::{BufRead as _, Write as _};
    let lab = NetLab::create(1, 1).expect("creating the lab");
    let server = RedisServer::start_with(ServerOptions::new().bind_addr(lab.server_addr(0)));
    // A client in the namespace: connects, says so, then sends what it reads on stdin.
    let script = format!(
        "import socket,sys\n\
         s=socket.create_connection(('{}',{}))\n\
         print('connected',flush=True)\n\
         line=sys.stdin.readline()\n\
         s.sendall(line.encode())\n\
         s.settimeout(10)\n\
         print(s.recv(100).decode().strip(),flush=True)\n",
        lab.server_addr(0),
        server.port()
    );
    let mut child = lab
        .command_in(0, "python3")
        .args(["-c", &script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 in the namespace");
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "connected");
    lab.partition(0, Direction::ToHost).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"SET late 1\r\n").unwrap();
    stdin.flush().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let mut conn = server.conn();
    let during: Option<String> = redis::cmd("GET").arg("late").query(&mut conn).unwrap();
    assert_eq!(during, None, "the request got through the partition");
    lab.heal(0).unwrap();
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(
        line.trim(),
        "+OK",
        "the retransmitted request ran after the heal"
    );
    let after: Option<String> = redis::cmd("GET").arg("late").query(&mut conn).unwrap();
    assert_eq!(after.as_deref(), Some("1"));
    let _ = child.wait();
}

/// A lab whose creator died (no Drop ran) is removed by the next one.
#[test]
fn a_lab_left_by_a_dead_process_is_removed() {
    if let Some(reason) = skip_reason() {
        loud_skip("netns stale-cleanup test", &reason);
        return;
    }
    let _serial = serial();
    // A process id that is not running: a child that has exited and been reaped.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let ip = |args: &[&str]| {
        let status = std::process::Command::new("ip")
            .args(args)
            .status()
            .unwrap();
        assert!(status.success(), "ip {args:?}");
    };
    // Subnet 250's names, as a lab of the dead process would have left them.
    let (bridge, ns) = (
        format!("{}250-br", netns::PREFIX),
        format!("{}250-w0", netns::PREFIX),
    );
    let _ = std::process::Command::new("ip")
        .args(["link", "del", &bridge])
        .status();
    let _ = std::process::Command::new("ip")
        .args(["netns", "del", &ns])
        .status();
    ip(&["link", "add", &bridge, "type", "bridge"]);
    ip(&["link", "set", &bridge, "alias", &format!("pid={dead}")]);
    ip(&["netns", "add", &ns]);
    let lab = NetLab::create(1, 1).expect("creating a lab");
    assert!(
        !netns::leftover_namespaces().contains(&ns),
        "the dead process's namespace is still there"
    );
    let links = std::process::Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&links.stdout).contains(&format!("{bridge}:")));
    drop(lab);
}

/// Split brain on Sentinel: the master cut off from its replica and the sentinels (workers
/// still reach it) is failed over while it keeps taking writes, unless
/// `min-replicas-to-write` stops it; after the heal the sentinels demote it.
#[test]
fn sentinel_split_brain_with_and_without_min_replicas_to_write() {
    if let Some(reason) = skip_reason() {
        loud_skip("netns split-brain test", &reason);
        return;
    }
    let _serial = serial();
    for min_replicas in [false, true] {
        let lab = NetLab::create(1, 5).expect("creating the lab");
        let set = lock_test_support::RedisSentinels::start_with(
            "split",
            ServerOptions::new().bind_pool(lab.server_addrs().iter().copied()),
        );
        let index = |s: &RedisServer| {
            let addr = s.bind_addr().unwrap();
            lab.server_addrs().iter().position(|a| *a == addr).unwrap()
        };
        let (old, new) = (set.master(), set.replica());
        let others: Vec<usize> = std::iter::once(index(new))
            .chain(set.sentinels().iter().map(index))
            .collect();
        if min_replicas {
            for s in [old, new] {
                let _: () = redis::cmd("CONFIG")
                    .arg("SET")
                    .arg("min-replicas-to-write")
                    .arg("1")
                    .arg("min-replicas-max-lag")
                    .arg("2")
                    .query(&mut s.conn())
                    .unwrap();
            }
        }
        let old_host = old.bind_addr().unwrap().to_string();
        let old_port = old.port().to_string();
        let write_old = |value: &str| {
            cli_in(
                &lab,
                0,
                &["-h", &old_host, "-p", &old_port, "SET", "k", value],
            )
            .unwrap_or_default()
        };
        assert_eq!(write_old("before"), "OK");

        lab.cut_servers(&[index(old)], &others).unwrap();
        // The sentinels promote the replica (down-after 1 s, then the election).
        let promoted = (0..150).any(|_| {
            std::thread::sleep(Duration::from_millis(100));
            set.current_master_port() == new.port()
        });
        assert!(promoted, "no failover while the master was cut off");
        let on_old = write_old("split");
        if min_replicas {
            // It refuses once its replica's last acknowledgement is older than the max lag
            // (2 s, acknowledgements every 1 s): the failover may be quicker than that, so
            // the refusal is awaited, within the lag and a margin, not assumed at once.
            let mut last = on_old;
            let refused = (0..50).any(|_| {
                if last.contains("NOREPLICAS") {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(100));
                last = write_old("split");
                false
            }) || last.contains("NOREPLICAS");
            assert!(
                refused,
                "the old master still took writes without replicas 5 s after the failover: {last:?}"
            );
        } else {
            assert_eq!(
                on_old, "OK",
                "the old master should still take writes (split brain)"
            );
        }
        let new_host = new.bind_addr().unwrap().to_string();
        let new_port = new.port().to_string();
        let write_new = || {
            cli_in(
                &lab,
                0,
                &["-h", &new_host, "-p", &new_port, "SET", "k", "new"],
            )
            .unwrap_or_default()
        };
        if min_replicas {
            // Its only replica would be the old master, cut off: no side takes writes.
            assert!(write_new().contains("NOREPLICAS"));
        } else {
            assert_eq!(write_new(), "OK", "the promoted replica takes writes");
        }

        lab.heal_servers().unwrap();
        let demoted = (0..200).any(|_| {
            std::thread::sleep(Duration::from_millis(100));
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut old.conn())
                .unwrap_or_default();
            info.contains("role:slave")
        });
        assert!(demoted, "the old master was not demoted after the heal");
        let healed = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(100));
            write_new() == "OK"
        });
        assert!(healed, "the new master does not take writes after the heal");
        drop(set);
        drop(lab);
    }
}

/// Runs `f` on a thread inside worker `i`'s namespace, with a current-thread runtime.
fn in_namespace<T: Send + 'static>(
    lab: &NetLab,
    i: usize,
    f: impl FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = T>>> + Send + 'static,
) -> T {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                lab.enter(i).expect("entering the namespace");
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(f())
            })
            .join()
            .unwrap()
    })
}

/// The library's clients inside a namespace reach Sentinel and Cluster through the
/// addresses the servers announce, and a partition stops them until healed.
#[test]
fn lock_clients_in_a_namespace_use_sentinel_and_cluster() {
    if let Some(reason) = skip_reason() {
        loud_skip("netns lock-client test", &reason);
        return;
    }
    let _serial = serial();
    let lab = NetLab::create(1, 11).expect("creating the lab");
    let addrs = lab.server_addrs().to_vec();
    let set = lock_test_support::RedisSentinels::start_with(
        "inside",
        ServerOptions::new().bind_pool(addrs[..5].iter().copied()),
    );
    let cluster = lock_test_support::RedisCluster::start_with(
        3,
        1,
        ServerOptions::new().bind_pool(addrs[5..11].iter().copied()),
    );
    let sentinel_urls: Vec<String> = set.sentinels().iter().map(|s| s.bind_url()).collect();
    let cluster_urls: Vec<String> = cluster.nodes().iter().map(|n| n.bind_url()).collect();
    let builder = || {
        distlock::LockClient::builder()
            .lease(Duration::from_secs(2))
            .response_timeout(Duration::from_millis(500))
            .connect_timeout(Duration::from_secs(1))
    };
    let sentinel_owner = in_namespace(&lab, 0, move || {
        Box::pin(async move {
            let client = builder()
                .connect_sentinel(sentinel_urls, "inside")
                .await
                .expect("connecting through the sentinels from the namespace");
            let guard = client.lock("inside").acquire().await.unwrap();
            let owner = guard.owner().to_owned();
            guard.release().await.unwrap();
            owner
        })
    });
    assert!(!sentinel_owner.is_empty());

    let cluster_ok = in_namespace(&lab, 0, {
        let urls = cluster_urls.clone();
        move || {
            Box::pin(async move {
                let client = builder().connect_cluster(urls).await.expect("cluster");
                for name in ["a", "b", "c", "d", "e"] {
                    client
                        .lock(name)
                        .acquire()
                        .await
                        .unwrap()
                        .release()
                        .await
                        .unwrap();
                }
                true
            })
        }
    });
    assert!(cluster_ok);

    // Connected first, then cut off: acquisitions fail; after the heal they work again.
    let (tx, rx) = std::sync::mpsc::channel::<&'static str>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<Result<(), String>>();
    let lab_ref = &lab;
    std::thread::scope(|scope| {
        scope.spawn(move || {
            lab_ref.enter(0).unwrap();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let client = builder().connect_cluster(cluster_urls).await.unwrap();
                client
                    .lock("x")
                    .acquire()
                    .await
                    .unwrap()
                    .release()
                    .await
                    .unwrap();
                done_tx.send(Ok(())).unwrap();
                while let Ok(step) = rx.recv() {
                    let result = client.lock("x").acquire().await;
                    let ok = match result {
                        Ok(guard) => {
                            let _ = guard.release().await;
                            true
                        }
                        Err(_) => false,
                    };
                    let expected = step == "healed";
                    done_tx
                        .send(if ok == expected {
                            Ok(())
                        } else {
                            Err(format!("{step}: acquired = {ok}"))
                        })
                        .unwrap();
                }
            });
        });
        done_rx.recv().unwrap().unwrap();
        lab.partition(0, Direction::Both).unwrap();
        tx.send("partitioned").unwrap();
        done_rx.recv().unwrap().unwrap();
        lab.heal(0).unwrap();
        // Give the client a moment to notice its connections are usable again.
        std::thread::sleep(Duration::from_millis(500));
        let mut last = Err(String::new());
        for _ in 0..20 {
            tx.send("healed").unwrap();
            last = done_rx.recv().unwrap();
            if last.is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        drop(tx);
        last.unwrap();
    });
    drop(cluster);
    drop(set);
}

/// Cutting servers off from each other moves the host's `lookup local` rule; healing (and
/// dropping the lab) puts it back, so the machine's rules are left as they were found.
#[test]
fn cutting_servers_leaves_the_host_rules_as_found() {
    if let Some(reason) = skip_reason() {
        loud_skip("netns host rules test", &reason);
        return;
    }
    let _serial = serial();
    let rules = || {
        let out = std::process::Command::new("ip")
            .args(["rule", "show"])
            .output()
            .expect("ip rule show");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // Creating a lab puts back a rule a killed process left moved.
    let lab = NetLab::create(1, 2).expect("creating the lab");
    assert!(netns::local_rule_in_place(), "{}", rules());
    let before = rules();
    lab.cut_servers(&[0], &[1]).unwrap();
    assert!(!netns::local_rule_in_place(), "moved while cut");
    lab.heal_servers().unwrap();
    assert!(netns::local_rule_in_place(), "back after the heal");
    assert_eq!(rules(), before);
    lab.cut_servers(&[0], &[1]).unwrap();
    drop(lab);
    assert!(netns::local_rule_in_place(), "back after the drop");
    assert_eq!(rules(), before);
}
