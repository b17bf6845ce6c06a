//! Edge cases found by a hostile user that need a real Redis Cluster: a
//! client whose connections to every master were killed, and a client moved
//! to another runtime after the one it connected on was dropped. Each lock
//! command and admin read must answer on its first call, as on one node
//! (`tests/edges_redis.rs`).

use std::time::Duration;

use distlock::{LockClient, LockError, LockGuard};
use lock_test_support::{RedisCluster, ServerOptions};
use tokio::time::Instant;

/// A cluster of 3 masters (no replicas: no failover can move a slot) whose
/// node timeout tolerates a loaded machine.
fn cluster() -> RedisCluster {
    RedisCluster::start_with(
        3,
        0,
        ServerOptions::new()
            .arg("--cluster-node-timeout")
            .arg("5000"),
    )
}

/// The clients of one run of [`assert_first_calls_answer`]: one per call, so
/// that each call is its client's first command after the connections broke
/// (a failed call may repair its client for the next), and a lock that the
/// `release` client holds.
struct Prepared {
    clients: Vec<LockClient>,
    held: LockGuard,
}

const PREFIX: &str = "edges:cluster:";
const HELD: &str = "edges:cluster:held";
const RELEASED: &str = "edges:cluster:released";

/// Connects the clients (each carries a command first) and lets one of them
/// take `RELEASED`.
async fn prepare(urls: &[String]) -> Prepared {
    let mut clients = Vec::new();
    for _ in 0..6 {
        let client = LockClient::cluster(urls.to_vec()).await.unwrap();
        client.admin().inspect("edges:cluster:warm").await.unwrap();
        clients.push(client);
    }
    let holder = LockClient::cluster(urls.to_vec()).await.unwrap();
    let held = holder
        .lock(RELEASED)
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    Prepared { clients, held }
}

/// Runs each lock command and admin read once, each as the first command of
/// its client after its connections broke, and asserts that each answers
/// (and reads what `other`, a client of its own, holds): `release` of the
/// prepared guard, `acquire`, `inspect`, `list`, `layouts`, `waiters` and
/// `inspect_fair` (a family primitive's script).
async fn assert_first_calls_answer(urls: &[String], prepared: Prepared) {
    let other = LockClient::cluster(urls.to_vec()).await.unwrap();
    let held = other
        .lock(HELD)
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let Prepared {
        mut clients,
        held: to_release,
    } = prepared;
    let mut failed = Vec::new();
    let mut first_try = |what: &str, outcome: Result<String, LockError>, want: &str| match outcome {
        Ok(got) if got == want => {}
        Ok(got) => failed.push(format!("{what}: read {got}, expected {want}")),
        Err(err) => failed.push(format!("{what}: the first try failed: {err:?}")),
    };

    first_try(
        "release",
        to_release.release().await.map(|()| "released".into()),
        "released",
    );

    let client = clients.pop().unwrap();
    let acquired = client.lock("edges:cluster:acquired").try_acquire().await;
    let acquired = match acquired {
        Ok(Some(guard)) => {
            let _ = guard.release().await;
            Ok("acquired".to_owned())
        }
        Ok(None) => Ok("busy".to_owned()),
        Err(err) => Err(err),
    };
    first_try("acquire", acquired, "acquired");

    let client = clients.pop().unwrap();
    let info = client.admin().inspect(HELD).await;
    let holder = info.map(|info| format!("{:?}", info.holder.map(|h| h.owner)));
    first_try("inspect", holder, &format!("{:?}", Some(held.owner())));

    let client = clients.pop().unwrap();
    let listed = client.admin().list(PREFIX).await;
    let names =
        listed.map(|locks| format!("{:?}", locks.iter().map(|l| &l.name).collect::<Vec<_>>()));
    first_try("list", names, &format!("{:?}", [HELD]));

    let client = clients.pop().unwrap();
    let layouts = client.admin().layouts().await.map(|l| format!("{l:?}"));
    first_try("layouts", layouts, "[Native]");

    let client = clients.pop().unwrap();
    let waiters = client
        .admin()
        .waiters([HELD])
        .await
        .map(|w| format!("{w:?}"));
    first_try("waiters", waiters, "[0]");

    let client = clients.pop().unwrap();
    let fair = client.admin().inspect_fair("edges:cluster:fair").await;
    let fair = fair.map(|info| format!("{:?} {}", info.holder, info.queue.len()));
    first_try("inspect_fair", fair, "None 0");

    assert!(failed.is_empty(), "{}", failed.join("\n"));
    held.release().await.unwrap();
}

/// After every master killed its clients' connections (`CLIENT KILL TYPE
/// normal`), each lock command and admin read answers on its first call.
///
/// Old code: `inspect`, `list`, `layouts`, `waiters` and `inspect_fair`
/// were not retried, and `acquire`'s and `release`'s retries only followed
/// `is_connection_dropped`: the calls failed with
/// `ClusterConnectionNotFound` ("No connections found").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edges_cluster_calls_answer_first_try_after_connections_were_killed() {
    let cluster = cluster();
    let urls = cluster.urls();
    let prepared = prepare(&urls).await;
    for master in cluster.masters() {
        let killed: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .query(&mut cluster.node(master).conn())
            .unwrap();
        assert!(killed > 0, "master {master}: no connection killed");
    }
    assert_first_calls_answer(&urls, prepared).await;
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// Clients connected on a runtime that was then dropped (and with it the
/// driver of each client's cluster connection): on the next runtime each
/// lock command and admin read answers on its first call, and a waiter of
/// such a client is woken by a release, long before the holder's 30 s lease
/// would have let it in.
///
/// Old code: every call failed ("broken pipe": the cluster connection's
/// driver died with the first runtime and was never made again), even
/// after the retries of lock commands.
#[test]
fn edges_cluster_calls_answer_first_try_on_a_second_runtime() {
    let cluster = cluster();
    let urls = cluster.urls();
    let runtime_a = runtime();
    let (prepared, waiter) = runtime_a.block_on(async {
        let prepared = prepare(&urls).await;
        let waiter = LockClient::cluster(urls.clone()).await.unwrap();
        waiter
            .lock("edges:cluster:warm")
            .acquire()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        (prepared, waiter)
    });
    drop(runtime_a);

    let runtime_b = runtime();
    runtime_b.block_on(async {
        let test = async {
            assert_first_calls_answer(&urls, prepared).await;

            let other = LockClient::cluster(urls.clone()).await.unwrap();
            let name = "edges:cluster:wake";
            let held = other
                .lock(name)
                .lease(Duration::from_secs(30))
                .acquire()
                .await
                .unwrap();
            let waiting = tokio::spawn({
                let waiter = waiter.clone();
                async move {
                    let guard = waiter
                        .lock(name)
                        .wait(Duration::from_secs(20))
                        .acquire()
                        .await;
                    (Instant::now(), guard)
                }
            });
            // Released once the waiter is past the confirmation of its
            // subscription (it gives up on that after the 2 s response
            // timeout and then waits on the lease, or on a wake-up).
            tokio::time::sleep(Duration::from_millis(2500)).await;
            assert!(!waiting.is_finished(), "the waiter did not wait");
            let released = Instant::now();
            held.release().await.unwrap();
            let (acquired, got) = tokio::time::timeout(Duration::from_secs(15), waiting)
                .await
                .expect("the waiter was not woken within 15 s of the release")
                .unwrap();
            let got = got.expect("the waiter's acquisition");
            assert!(
                acquired - released <= Duration::from_secs(3),
                "the waiter was woken {:?} after the release (lease 30 s)",
                acquired - released
            );
            got.release().await.unwrap();
        };
        tokio::time::timeout(Duration::from_secs(60), test)
            .await
            .expect("the test ran for more than 60 s");
    });
}

/// A release sent again after a dropped connection, whose last send deleted
/// nothing, reports `BackendError::Unconfirmed` (an earlier send may have
/// deleted the lock with its answer lost), as on one node; so does
/// `force_release`. Simulated: every master killed its clients'
/// connections, so the first send fails, and the lock was deleted meanwhile
/// by another connection, as the lost first send would have.
///
/// Old code: the release reports `NotHeld` (it was sent again after the
/// dropped connection, and the second send's "nothing deleted" taken as the
/// answer), or `ClusterConnectionNotFound` when that was the first error;
/// the force-release "nothing was held".
///
/// Whether the first send fails is up to timing: the redis crate's cluster
/// connection may notice the killed connection and reconnect before the
/// call is sent, and then the one send honestly finds nothing (`NotHeld`,
/// `Ok(false)`). So the scenario is repeated, on fresh names, until both
/// calls went through a resend (at most 8 rounds); any other error fails at
/// once, and a round never reaching `Unconfirmed` fails the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edges_cluster_a_resent_deletion_that_deleted_nothing_is_unconfirmed() {
    let cluster = cluster();
    let urls = cluster.urls();
    let holder = LockClient::cluster(urls.clone()).await.unwrap();
    let admin = LockClient::cluster(urls.clone()).await.unwrap();
    admin.admin().inspect("edges:cluster:warm").await.unwrap();
    let (mut release_unconfirmed, mut force_unconfirmed) = (false, false);
    for round in 0..8 {
        let names = [
            format!("edges:cluster:resent-release-{round}"),
            format!("edges:cluster:resent-force-{round}"),
        ];
        let mut guards = Vec::new();
        for name in &names {
            let guard = holder
                .lock(name)
                .lease(Duration::from_secs(30))
                .acquire()
                .await
                .unwrap();
            guards.push(guard);
        }
        for master in cluster.masters() {
            let _: i64 = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg("normal")
                .query(&mut cluster.node(master).conn())
                .unwrap();
        }
        for name in &names {
            let key = format!("lock:{{{name}}}");
            let master = cluster.master_of_slot(cluster.slot_of(&key));
            let deleted: i64 = redis::cmd("DEL")
                .arg(&key)
                .query(&mut cluster.node(master).conn())
                .unwrap();
            assert_eq!(deleted, 1, "{name} was not held");
        }
        match guards.remove(0).release().await {
            Err(err) if unconfirmed(Some(&err)) => release_unconfirmed = true,
            Err(LockError::NotHeld { .. }) => {} // sent once, after a reconnect
            other => panic!("release: {other:?}"),
        }
        match admin.admin().force_release(&names[1]).await {
            Err(err) if unconfirmed(Some(&err)) => force_unconfirmed = true,
            Ok(false) => {} // sent once, after a reconnect
            other => panic!("force_release: {other:?}"),
        }
        if release_unconfirmed && force_unconfirmed {
            break;
        }
    }
    assert!(
        release_unconfirmed,
        "no resent release reported Unconfirmed"
    );
    assert!(
        force_unconfirmed,
        "no resent force_release reported Unconfirmed"
    );
}

fn unconfirmed(err: Option<&LockError>) -> bool {
    matches!(
        err,
        Some(LockError::Backend {
            source: distlock::BackendError::Unconfirmed,
            ..
        })
    )
}

/// A master that hangs (SIGSTOP, not dead) makes a lock call fail after one
/// response timeout, as on one node: a command that timed out is not a
/// dropped connection and is not sent again (it was, three times, so a call
/// with a 1 s response timeout took 3 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edges_cluster_a_hung_master_costs_one_response_timeout() {
    let cluster = cluster();
    let response_timeout = Duration::from_secs(1);
    let client = LockClient::builder()
        .response_timeout(response_timeout)
        .connect_cluster(cluster.master_urls())
        .await
        .unwrap();
    let name = "edges:cluster:hung";
    client.admin().inspect(name).await.unwrap();
    let node = cluster.master_of_slot(cluster.slot_of(&format!("lock:{{{name}}}")));
    let paused = cluster.node(node).paused();
    let started = Instant::now();
    let outcome = client.lock(name).try_acquire().await;
    let took = started.elapsed();
    drop(paused);
    assert!(
        matches!(outcome, Err(LockError::Backend { .. })),
        "a hung master answers nothing: {outcome:?}"
    );
    assert!(
        took < response_timeout * 2,
        "one response timeout ({response_timeout:?}) per call, took {took:?}"
    );
}
