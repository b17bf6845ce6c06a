//! The Redis versions the backends need, against real servers of another
//! version: the current one on `PATH`, and Redis 6.2 from the executable
//! that `DISTLOCK_TEST_REDIS_6_2` names (scripts/test.sh fetches it). On
//! 6.2 the standalone backend works, and a cluster is refused when the
//! client connects, with an error that names the version and what is
//! missing (sharded pub/sub, Redis 7.0).

use std::path::PathBuf;
use std::time::Duration;

use distlock::{LockClient, LockError};
use lock_test_support::{RedisCluster, RedisServer, ServerOptions};

/// The Redis 6.2 `redis-server`, or `None` (with a note) outside CI when
/// it was not fetched. In CI its absence fails the test.
fn redis_6_2() -> Option<PathBuf> {
    match std::env::var_os("DISTLOCK_TEST_REDIS_6_2") {
        Some(path) => Some(PathBuf::from(path)),
        None if std::env::var_os("CI").is_some() => panic!(
            "DISTLOCK_TEST_REDIS_6_2 is not set: run the tests with `bash scripts/test.sh`, \
             which fetches Redis 6.2"
        ),
        None => {
            eprintln!(
                "skipped: DISTLOCK_TEST_REDIS_6_2 is not set (`bash scripts/test.sh` fetches \
                 Redis 6.2 and sets it)"
            );
            None
        }
    }
}

fn version_of(server: &RedisServer) -> String {
    let mut conn = server.conn();
    let info: String = redis::cmd("INFO").arg("server").query(&mut conn).unwrap();
    info.lines()
        .find_map(|line| {
            line.trim_end()
                .strip_prefix("redis_version:")
                .map(str::to_owned)
        })
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standalone_backend_works_on_redis_6_2() {
    let Some(binary) = redis_6_2() else { return };
    let server = RedisServer::start_with(ServerOptions::new().binary(&binary));
    let version = version_of(&server);
    assert!(version.starts_with("6.2."), "{version}");

    let client = LockClient::builder()
        .lease(Duration::from_secs(5))
        .connect(&server.url())
        .await
        .unwrap_or_else(|err| panic!("Redis {version}: {err}"));
    // Exclusion, wake-up across clients, fencing and listing.
    let other = LockClient::connect(&server.url()).await.unwrap();
    let guard = client.lock("v62").acquire().await.unwrap();
    assert!(other.lock("v62").try_acquire().await.unwrap().is_none());
    let waiter = tokio::spawn({
        let other = other.clone();
        async move {
            other
                .lock("v62")
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let first = guard.fencing_token();
    assert_eq!(client.admin().list("").await.unwrap().len(), 1);
    guard.release().await.unwrap();
    let next = waiter.await.unwrap().unwrap();
    assert!(next.fencing_token() > first);
    next.release().await.unwrap();

    // The lock family's scripts read the server's clock (TIME before writes).
    let fair = client.fair_lock("v62f").acquire().await.unwrap();
    let read = client
        .read_write_lock("v62rw")
        .read()
        .acquire()
        .await
        .unwrap();
    let permit = client
        .semaphore("v62s", 2)
        .permit()
        .acquire()
        .await
        .unwrap();
    fair.release().await.unwrap();
    read.release().await.unwrap();
    permit.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_of_redis_6_2_is_refused_at_connect_naming_its_version() {
    let Some(binary) = redis_6_2() else { return };
    let cluster = RedisCluster::start_with(3, 0, ServerOptions::new().binary(&binary));
    let version = version_of(cluster.node(0));
    match LockClient::builder().connect_cluster(cluster.urls()).await {
        Err(err @ LockError::UnsupportedServer { .. }) => {
            let text = err.to_string();
            assert!(text.contains(&format!("Redis {version}")), "{text}");
            assert!(text.contains("Redis 7.0.0"), "{text}");
            assert!(text.contains("SSUBSCRIBE"), "{text}");
            assert!(!err.is_backend(), "not worth a retry: {err:?}");
        }
        Err(other) => panic!("expected UnsupportedServer, got {other:?}"),
        Ok(_) => panic!("a Redis {version} cluster was accepted"),
    }
}

#[tokio::test]
async fn the_current_server_passes_the_check() {
    // The servers of every other test pass it too; this one says which.
    let server = RedisServer::start();
    let version = version_of(&server);
    let client = LockClient::connect(&server.url())
        .await
        .unwrap_or_else(|err| panic!("Redis {version}: {err}"));
    client
        .lock("current")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}
