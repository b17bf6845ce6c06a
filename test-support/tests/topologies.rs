//! Tests of the multi-server topologies against real `redis-server` processes.

use std::time::{Duration, Instant};

use lock_test_support::{
    free_cluster_port, key_slot, RedisCluster, RedisMasters, RedisSentinels, RedisServer,
    ServerOptions, CLUSTER_SLOTS,
};
use redis::Commands;

const CLUSTER_FAILOVER_TIMEOUT: Duration = Duration::from_secs(20);
const SENTINEL_FAILOVER_TIMEOUT: Duration = Duration::from_secs(30);

fn role(conn: &mut redis::Connection) -> String {
    let reply: redis::Value = redis::cmd("ROLE").query(conn).unwrap();
    match reply {
        redis::Value::Array(items) => match items.first() {
            Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            other => panic!("unexpected ROLE reply: {other:?}"),
        },
        other => panic!("unexpected ROLE reply: {other:?}"),
    }
}

#[test]
fn cluster_ports_have_a_free_bus_port() {
    let port = free_cluster_port();
    assert_ne!(port, 6379);
    let bus = port.checked_add(10000).expect("the bus port fits in u16");
    std::net::TcpListener::bind(("127.0.0.1", port)).expect("the client port is free");
    std::net::TcpListener::bind(("127.0.0.1", bus)).expect("the bus port is free");
}

#[test]
#[should_panic(
    expected = "ServerOptions::sentinel cannot be combined with tls() or cluster_node()"
)]
fn sentinel_options_cannot_be_combined_with_cluster_node() {
    RedisServer::start_with(ServerOptions::new().sentinel("").cluster_node());
}

#[test]
fn masters_start_independent_servers() {
    let mut masters = RedisMasters::start(3);
    assert_eq!(masters.count(), 3);
    let urls = masters.urls();
    assert_eq!(urls.len(), 3);
    let mut ports: Vec<u16> = masters.servers().iter().map(|s| s.port()).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 3, "every master has its own port");
    for (i, url) in urls.iter().enumerate() {
        assert_eq!(*url, masters.server(i).url());
    }

    let () = masters.server(0).conn().set("only-on-0", "x").unwrap();
    for i in 1..3 {
        let value: Option<String> = masters.server(i).conn().get("only-on-0").unwrap();
        assert_eq!(value, None, "master {i} must not see master 0's data");
        let role = role(&mut masters.server(i).conn());
        assert_eq!(role, "master");
    }

    masters.server_mut(1).kill();
    assert!(!masters.server_mut(1).is_running());
    let pong: String = redis::cmd("PING")
        .query(&mut masters.server(2).conn())
        .unwrap();
    assert_eq!(pong, "PONG", "killing one master leaves the others up");
    masters.server_mut(1).restart();
    assert_eq!(masters.server(1).url(), urls[1]);
}

#[test]
fn cluster_forms_and_keys_land_on_the_master_of_their_slot() {
    let started = Instant::now();
    let cluster = RedisCluster::start(3, 1);
    eprintln!("cluster of 6 formed in {:?}", started.elapsed());
    assert_eq!(cluster.node_count(), 6);
    assert_eq!(cluster.urls().len(), 6);

    let masters = cluster.masters();
    let replicas = cluster.replicas();
    assert_eq!(masters.len(), 3, "masters: {masters:?}");
    assert_eq!(replicas.len(), 3, "replicas: {replicas:?}");
    assert_eq!(cluster.master_urls().len(), 3);
    for &m in &masters {
        assert_eq!(
            cluster.replicas_of(m).len(),
            1,
            "master {m} has one replica"
        );
    }

    // Every node: ok, all slots assigned; every slot has a live master.
    for (i, node) in cluster.nodes().iter().enumerate() {
        let info: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query(&mut node.conn())
            .unwrap();
        assert!(info.contains("cluster_state:ok"), "node {i}: {info}");
        assert!(info.contains("cluster_slots_assigned:16384"), "node {i}");
    }
    for slot in [0, 1, 5460, 5461, 10922, 10923, CLUSTER_SLOTS - 1] {
        assert!(masters.contains(&cluster.master_of_slot(slot)));
    }

    // slot_of agrees with the server's CLUSTER KEYSLOT, hash tags included.
    let mut conn0 = cluster.node(0).conn();
    for key in ["foo", "lock:{order-42}", "{user1}.a", "x{}y", "", "ünïcode"] {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut conn0)
            .unwrap();
        assert_eq!(cluster.slot_of(key), slot, "key {key:?}");
        assert_eq!(key_slot(key.as_bytes()), slot);
    }

    // Keys written through a cluster-aware client are on the master of their slot only.
    let client = redis::cluster::ClusterClient::new(cluster.urls()).unwrap();
    let mut cc = client.get_connection().unwrap();
    for n in 0..12 {
        let key = format!("key-{n}");
        let () = cc.set(&key, n).unwrap();
        let owner = cluster.master_of_slot(cluster.slot_of(&key));
        let value: Option<i64> = cluster.node(owner).conn().get(&key).unwrap();
        assert_eq!(value, Some(n), "{key} must be on node {owner}");
        for &other in masters.iter().filter(|&&m| m != owner) {
            let err = cluster
                .node(other)
                .conn()
                .get::<_, Option<i64>>(&key)
                .expect_err("another master must redirect");
            assert_eq!(
                err.kind(),
                redis::ErrorKind::Server(redis::ServerErrorKind::Moved)
            );
            let target = format!("127.0.0.1:{}", cluster.node(owner).port());
            assert!(
                err.to_string().contains(&target),
                "node {other} should redirect {key} to {target}: {err}"
            );
        }
    }
}

#[test]
fn cluster_kill_master_promotes_its_replica() {
    let mut cluster = RedisCluster::start(3, 1);
    let key = "lock:{failover}";
    let slot = cluster.slot_of(key);
    let owner = cluster.master_of_slot(slot);
    let replicas = cluster.replicas_of(owner);
    assert_eq!(replicas.len(), 1);

    let mut conn = cluster.node(owner).conn();
    let () = conn.set(key, "before").unwrap();
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(2000)
        .query(&mut conn)
        .unwrap();
    assert_eq!(acked, 1, "the replica acknowledges the write");

    let started = Instant::now();
    let promoted = cluster.kill_master_and_wait_for_failover(owner, CLUSTER_FAILOVER_TIMEOUT);
    eprintln!("cluster failover took {:?}", started.elapsed());
    assert_eq!(promoted, replicas[0]);
    assert!(!cluster.node_mut(owner).is_running());
    assert_eq!(cluster.master_of_slot(slot), promoted);
    let masters = cluster.masters();
    assert_eq!(masters.len(), 3, "masters after failover: {masters:?}");
    assert!(masters.contains(&promoted) && !masters.contains(&owner));
    cluster.wait_ok(Duration::from_secs(5));

    let mut conn = cluster.node(promoted).conn();
    assert_eq!(role(&mut conn), "master");
    let value: Option<String> = conn.get(key).unwrap();
    assert_eq!(value.as_deref(), Some("before"), "replicated data survives");
    let () = conn.set(key, "after").unwrap();

    // A cluster-aware client follows the new topology.
    let client = redis::cluster::ClusterClient::new(cluster.master_urls()).unwrap();
    let mut cc = client.get_connection().unwrap();
    let value: String = cc.get(key).unwrap();
    assert_eq!(value, "after");

    // The old master, restarted, keeps its nodes.conf and rejoins as a replica of the new one.
    let started = Instant::now();
    cluster.node_mut(owner).restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(cluster.replicas_of(promoted).contains(&owner)
        && role(&mut cluster.node(owner).conn()) == "slave")
    {
        assert!(
            Instant::now() < deadline,
            "node {owner} did not rejoin as a replica of node {promoted}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    cluster.wait_ok(Duration::from_secs(5));
    eprintln!("old master rejoined as replica in {:?}", started.elapsed());
    assert_eq!(cluster.master_of_slot(slot), promoted);
}

#[test]
fn sentinels_report_the_master_and_fail_over_to_the_replica() {
    let started = Instant::now();
    let mut set = RedisSentinels::start("locks");
    eprintln!("sentinel set stable in {:?}", started.elapsed());
    assert_eq!(set.master_name(), "locks");
    assert_eq!(set.sentinel_urls().len(), 3);
    let old_master = set.master().port();
    let old_replica = set.replica().port();
    assert_eq!(set.current_master_port(), old_master);
    for sentinel in set.sentinels() {
        let mut conn = sentinel.conn();
        let addr: (String, u16) = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg("locks")
            .query(&mut conn)
            .unwrap();
        assert_eq!(addr, ("127.0.0.1".to_owned(), old_master));
    }
    assert_eq!(role(&mut set.replica().conn()), "slave");
    let () = set.master().conn().set("k", "v").unwrap();

    let started = Instant::now();
    set.kill_master_and_wait_for_failover(SENTINEL_FAILOVER_TIMEOUT);
    eprintln!("sentinel failover took {:?}", started.elapsed());
    assert_eq!(set.master().port(), old_replica);
    assert_eq!(set.replica().port(), old_master);
    assert_eq!(set.current_master_port(), old_replica);

    let mut conn = set.master().conn();
    assert_eq!(role(&mut conn), "master");
    let () = conn.set("k", "after failover").unwrap();
    let value: String = conn.get("k").unwrap();
    assert_eq!(value, "after failover");

    // A restarted sentinel keeps its rewritten configuration: same id, the new master.
    let myid = |set: &RedisSentinels| -> String {
        redis::cmd("SENTINEL")
            .arg("myid")
            .query(&mut set.sentinel(0).conn())
            .unwrap()
    };
    let id = myid(&set);
    set.sentinel_mut(0).restart();
    assert_eq!(myid(&set), id);
    let addr: (String, u16) = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg("locks")
        .query(&mut set.sentinel(0).conn())
        .unwrap();
    assert_eq!(addr.1, old_replica);
}
