//! The harness's repair of a Cluster shard left without a master: a master killed while its
//! replica may not fail over (`cluster-replica-no-failover yes`, as when its promotion
//! never happens) leaves the shard masterless; the repair must give it a master again
//! (`CLUSTER FAILOVER TAKEOVER` on the replica, the dead master restarted as its replica),
//! and the cluster must be `cluster_state:ok`, without a panic anywhere.

#[allow(dead_code)]
#[path = "../src/topology.rs"]
mod topology;

use std::time::{Duration, Instant};

use topology::{Backend, Servers};

/// Runs one command on a cluster node (1 s bounds).
fn command(url: &str, args: &[&str]) -> redis::RedisResult<redis::Value> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_connection_with_timeout(Duration::from_secs(1))?;
    conn.set_read_timeout(Some(Duration::from_secs(1)))?;
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query(&mut conn)
}

#[test]
fn a_shard_whose_replica_is_never_promoted_is_repaired() {
    let mut servers = Servers::start_with(Backend::Cluster, None);
    let key = "lock:{chaos-0}";
    let Servers::Cluster(cluster) = &servers else {
        panic!("not a cluster");
    };
    let slot = cluster.slot_of(key);
    let master = cluster.try_master_of_slot(slot).expect("a master");
    let replica = cluster.try_replicas_of(master).expect("replicas")[0];
    let replica_url = cluster.node(replica).url();
    command(
        &replica_url,
        &["CONFIG", "SET", "cluster-replica-no-failover", "yes"],
    )
    .expect("CONFIG SET");
    assert!(servers.masterless().expect("a view").is_empty());

    // The master dies; its replica is not allowed to take over.
    let Servers::Cluster(cluster) = &mut servers else {
        unreachable!()
    };
    cluster.node_mut(master).kill();
    let started = Instant::now();
    let shards = loop {
        let shards = servers.masterless().expect("a view");
        if !shards.is_empty() {
            break shards;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the killed master was never flagged failed"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(shards.len(), 1, "{shards:?}");
    assert!(
        shards[0].iter().any(|&(a, b)| (a..=b).contains(&slot)),
        "{shards:?}"
    );
    // Looking for the shard's master is an answer, not a panic.
    assert!(servers.lock_master(key, 0).is_none());

    let repairs = servers.repair_masterless();
    assert_eq!(repairs.len(), 1, "{repairs:?}");
    assert!(repairs[0].ok, "{repairs:?}");
    assert!(
        repairs[0].action.contains("TAKEOVER") && repairs[0].action.contains("restarted"),
        "{repairs:?}"
    );
    let Servers::Cluster(cluster) = &servers else {
        unreachable!()
    };
    assert_eq!(cluster.try_master_of_slot(slot), Ok(replica));
    cluster
        .try_wait_ok(Duration::from_secs(10))
        .expect("cluster ok");
    // The old master came back as the new master's replica: the shard has one again.
    let started = Instant::now();
    while cluster
        .try_replicas_of(replica)
        .map(|r| r.contains(&master))
        != Ok(true)
    {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the restarted master did not rejoin as a replica"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(servers.masterless().expect("a view").is_empty());
    assert!(servers.repair_masterless().is_empty());
}
