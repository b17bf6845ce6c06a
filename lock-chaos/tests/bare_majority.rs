//! A Redlock lock held on exactly 3 of 5 masters, and the README's documented limit: a
//! master of that bare majority restarted empty within the lease lets a second client
//! acquire the lock at once, and the first learns it at its next renewal.

#[path = "../src/bare_majority.rs"]
mod bare_majority;

use std::time::Duration;

use bare_majority::{acquire_on_bare_majority, masters_holding};
use distlock::LockClient;
use lock_test_support::RedisMasters;

const LEASE: Duration = Duration::from_secs(3);

/// How long each master may take to answer: generous, as two tests start ten servers at
/// once on a small machine (a running master missing it would fail the acquisition).
const NODE_TIMEOUT: Duration = Duration::from_millis(300);

async fn redlock(urls: Vec<String>) -> LockClient {
    let client = LockClient::builder()
        .lease(LEASE)
        .redlock(urls)
        .node_timeout(NODE_TIMEOUT)
        .connect()
        .await
        .expect("connecting a Redlock client");
    // Warm every connection up before a fault.
    let warm = client.lock("warm-up").acquire().await.expect("warm-up");
    warm.release().await.expect("warm-up release");
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_majority_loses_the_lock_to_a_master_restarted_empty() {
    let mut masters = tokio::task::spawn_blocking(|| RedisMasters::start(5))
        .await
        .unwrap();
    let first = redlock(masters.urls()).await;
    let second = redlock(masters.urls()).await;

    let guard = acquire_on_bare_majority(&mut masters, &[3, 4], &first, "bare")
        .await
        .expect("a majority is up");
    let key = first.admin().inspect("bare").await.unwrap().key;
    assert_eq!(
        masters_holding(masters.servers(), &key),
        [0, 1, 2],
        "the lock should be on exactly the 3 masters that were up"
    );
    // Restarted masters answer again, and the lock is still held: a second client is refused.
    assert!(second.lock("bare").try_acquire().await.unwrap().is_none());

    // Master 0 of the bare majority restarts empty within the lease.
    tokio::task::block_in_place(|| {
        let server = masters.server_mut(0);
        server.kill();
        server.restart();
    });
    assert_eq!(masters_holding(masters.servers(), &key), [1, 2]);

    // The documented limit: masters 0, 3 and 4 grant the lock to the second client at once.
    let stolen = second
        .lock("bare")
        .try_acquire()
        .await
        .expect("no backend error")
        .expect("the README says a second client gets the lock now");
    assert_ne!(stolen.owner(), guard.owner());
    // The first holder learns it at its next renewal (a third of the lease).
    tokio::time::timeout(LEASE, guard.lost())
        .await
        .expect("the first holder should see lost() within a lease");
    stolen.release().await.unwrap();
    tokio::task::spawn_blocking(move || drop(masters))
        .await
        .unwrap();
}

/// Why pausing two masters is not the way: the request waits in the paused server's socket
/// buffer and runs when it is resumed, so the lock lands on all five.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_masters_during_the_acquire_still_puts_the_lock_on_all_five() {
    let masters = tokio::task::spawn_blocking(|| RedisMasters::start(5))
        .await
        .unwrap();
    let client = redlock(masters.urls()).await;
    masters.server(3).pause();
    masters.server(4).pause();
    let guard = client
        .lock("paused")
        .acquire()
        .await
        .expect("a majority is up");
    masters.server(3).resume();
    masters.server(4).resume();
    let key = client.admin().inspect("paused").await.unwrap().key;
    let holding = tokio::task::spawn_blocking({
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        let servers: Vec<String> = masters.urls();
        move || loop {
            let n = servers
                .iter()
                .filter(|url| {
                    let mut conn = redis::Client::open(url.as_str())
                        .unwrap()
                        .get_connection()
                        .unwrap();
                    redis::cmd("EXISTS")
                        .arg(&key)
                        .query::<u64>(&mut conn)
                        .unwrap()
                        == 1
                })
                .count();
            if n == 5 || std::time::Instant::now() > deadline {
                return n;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .await
    .unwrap();
    assert_eq!(
        holding, 5,
        "the paused masters ran the queued acquire when resumed"
    );
    guard.release().await.unwrap();
    tokio::task::spawn_blocking(move || drop(masters))
        .await
        .unwrap();
}
