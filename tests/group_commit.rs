//! The group commit of a standalone node's plain-lock acquisitions and
//! releases, against a real `redis-server`: requests that pile up while one
//! is in flight go out as one script call, and each caller gets its own
//! lock's answer, as it would alone.
//!
//! Each test freezes the server (`SIGSTOP`) while it starts its requests:
//! the first ones (as many as the node lets be in flight at once, at most
//! [`FIRST`]) are then in flight, and the others wait for them and go out
//! together once the server runs again.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::{LockClient, LockError, LockGuard};
use lock_test_support::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

fn redis_key(name: &str) -> String {
    format!("lock:{{{name}}}")
}

/// At least as many requests as a node sends alone at once.
const FIRST: usize = 4;

/// Time for spawned tasks to send or queue their requests.
const SETTLE: Duration = Duration::from_millis(200);

fn spawn_acquire(
    client: &LockClient,
    name: &str,
) -> JoinHandle<Result<Option<LockGuard>, LockError>> {
    let (client, name) = (client.clone(), name.to_owned());
    tokio::spawn(async move { client.lock(name).try_acquire().await })
}

/// Starts one acquisition per name while `server` is frozen, then lets it
/// run: the first is sent alone, the others wait for it and form a batch.
async fn acquire_frozen(
    server: &RedisServer,
    client: &LockClient,
    names: &[String],
) -> Vec<Result<Option<LockGuard>, LockError>> {
    let paused = server.paused();
    let tasks: Vec<_> = names
        .iter()
        .map(|name| spawn_acquire(client, name))
        .collect();
    tokio::time::sleep(SETTLE).await;
    paused.resume();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap());
    }
    outcomes
}

/// The owner field and token of the plain lock `name`, if held.
fn holder(server: &RedisServer, name: &str) -> Option<(String, u64)> {
    let fields: Vec<(String, u64)> = redis::cmd("HGETALL")
        .arg(redis_key(name))
        .query(&mut server.conn())
        .unwrap();
    assert!(fields.len() <= 1, "{name}: {fields:?}");
    fields.into_iter().next()
}

/// The lock keys left on `server`.
fn lock_keys(server: &RedisServer) -> Vec<String> {
    redis::cmd("KEYS")
        .arg("lock:{*")
        .query(&mut server.conn())
        .unwrap()
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Each guard holds its lock on the server, under its own owner, with its
/// token; the owners are all different.
fn assert_held(server: &RedisServer, names: &[String], guards: &[LockGuard]) {
    let mut owners = BTreeSet::new();
    for (name, guard) in names.iter().zip(guards) {
        let (owner, token) = holder(server, name).unwrap_or_else(|| panic!("{name} not held"));
        assert_eq!(owner, guard.owner(), "{name}");
        assert_eq!(token, guard.fencing_token(), "{name}");
        assert!(token > 0, "{name}");
        owners.insert(owner);
    }
    assert_eq!(owners.len(), names.len(), "owners: {owners:?}");
}

async fn release_all(guards: Vec<LockGuard>) {
    for guard in guards {
        guard.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_acquisitions_and_releases_share_script_calls() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let names = names("gc", 32);

    server.reset_command_stats();
    let outcomes = acquire_frozen(&server, &client, &names).await;
    let calls = server.command_calls("evalsha");
    let guards: Vec<LockGuard> = outcomes
        .into_iter()
        .map(|outcome| outcome.unwrap().expect("a free lock"))
        .collect();
    assert!(calls < 8, "{calls} EVALSHA calls for 32 acquisitions");
    assert_held(&server, &names, &guards);

    // The releases, the same way; the last one's wake-up is watched.
    let (last, owner) = (names[31].clone(), guards[31].owner().to_owned());
    let mut subscriber = server.conn();
    let mut wakeups = subscriber.as_pubsub();
    wakeups
        .subscribe(format!("{}:released", redis_key(&last)))
        .unwrap();
    wakeups
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    server.reset_command_stats();
    let paused = server.paused();
    let tasks: Vec<_> = guards
        .into_iter()
        .map(|guard| tokio::spawn(guard.release()))
        .collect();
    tokio::time::sleep(SETTLE).await;
    paused.resume();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    // `INFO commandstats` also counts the commands a script runs: the
    // releases' HDELs are 32 whether batched or not. Alone, a release is
    // HDEL + PUBLISH without a script; one EVALSHA is the batch of all the
    // releases that waited for the first one.
    let (hdel, evalsha) = (
        server.command_calls("hdel"),
        server.command_calls("evalsha"),
    );
    assert_eq!(hdel, 32);
    assert_eq!(evalsha, 1, "{evalsha} EVALSHA calls for 32 releases");
    // A batched release's wake-up is the single release's, `0 <owner>`.
    let message: String = wakeups.get_message().unwrap().get_payload().unwrap();
    assert_eq!(message, format!("0 {owner}"), "{last}");
    assert_eq!(lock_keys(&server), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_owners_of_one_key_in_a_batch_one_gets_it() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    // The first ones are in flight; the two on "shared" wait and go out
    // together, in one batch.
    let mut names = names("gc-first", FIRST);
    names.extend(["gc-shared", "gc-shared"].map(str::to_owned));
    server.reset_command_stats();
    let mut outcomes = acquire_frozen(&server, &client, &names).await;
    let calls = server.command_calls("evalsha");
    assert!(calls <= FIRST as u64 + 1, "{calls} EVALSHA calls");
    let shared: Vec<LockGuard> = outcomes
        .split_off(FIRST)
        .into_iter()
        .filter_map(|outcome| outcome.unwrap())
        .collect();
    let first: Vec<LockGuard> = outcomes
        .into_iter()
        .map(|outcome| outcome.unwrap().expect("a free lock"))
        .collect();
    assert_eq!(shared.len(), 1, "exactly one owner gets the lock");
    let (owner, token) = holder(&server, "gc-shared").unwrap();
    assert_eq!(
        (owner.as_str(), token),
        (shared[0].owner(), shared[0].fencing_token())
    );
    release_all(shared).await;
    release_all(first).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_key_in_a_batch_fails_only_its_caller() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let () = redis::cmd("SET")
        .arg(redis_key("gc-bad"))
        .arg("not a lock")
        .query(&mut server.conn())
        .unwrap();
    let mut names = names("gc-good", 8);
    names.push("gc-bad".to_owned());
    server.reset_command_stats();
    let mut outcomes = acquire_frozen(&server, &client, &names).await;
    let calls = server.command_calls("evalsha");
    assert!(
        calls <= FIRST as u64 + 1,
        "{calls} EVALSHA calls: not batched"
    );
    match outcomes.remove(8) {
        Err(LockError::WrongType { key, redis_key }) => {
            assert_eq!(
                (key.as_str(), redis_key.as_str()),
                ("gc-bad", "lock:{gc-bad}")
            );
        }
        other => panic!("expected WrongType, got {other:?}"),
    }
    names.remove(8);
    let guards: Vec<LockGuard> = outcomes
        .into_iter()
        .map(|outcome| outcome.unwrap().expect("a free lock"))
        .collect();
    assert_held(&server, &names, &guards);

    // A release batch with one lock overwritten with a string meanwhile.
    let () = redis::cmd("SET")
        .arg(redis_key(&names[3]))
        .arg("not a lock")
        .query(&mut server.conn())
        .unwrap();
    server.reset_command_stats();
    let paused = server.paused();
    let tasks: Vec<_> = guards
        .into_iter()
        .map(|guard| tokio::spawn(guard.release()))
        .collect();
    tokio::time::sleep(SETTLE).await;
    paused.resume();
    for (i, task) in tasks.into_iter().enumerate() {
        match (i, task.await.unwrap()) {
            (3, Err(LockError::WrongType { key, .. })) => assert_eq!(key, names[3]),
            (3, other) => panic!("expected WrongType, got {other:?}"),
            (_, outcome) => outcome.unwrap(),
        }
    }
    assert!(server.command_calls("evalsha") >= 1, "not batched");
    let mut left = lock_keys(&server);
    left.sort();
    assert_eq!(left, vec![redis_key("gc-bad"), redis_key(&names[3])]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_dropped_while_queued_leaves_no_lock() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let paused = server.paused();
    let first: Vec<_> = names("gc-first", FIRST)
        .iter()
        .map(|name| spawn_acquire(&client, name))
        .collect();
    tokio::time::sleep(SETTLE).await;
    let left = spawn_acquire(&client, "gc-left");
    let others: Vec<_> = names("gc-other", 4)
        .iter()
        .map(|name| spawn_acquire(&client, name))
        .collect();
    tokio::time::sleep(SETTLE).await;
    // Its request waits in the queue behind the first ones.
    left.abort();
    assert!(left.await.unwrap_err().is_cancelled());
    // The rollback of its attempt (a grant it may have got) is sent now,
    // ahead of the batch, which goes out once the server answers.
    tokio::time::sleep(SETTLE).await;
    paused.resume();
    let mut guards = Vec::new();
    for task in first.into_iter().chain(others) {
        guards.push(task.await.unwrap().unwrap().unwrap());
    }
    // Give a rollback time to run, were one needed.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        holder(&server, "gc-left"),
        None,
        "the left caller's lock is held"
    );
    release_all(guards).await;
    assert_eq!(lock_keys(&server), Vec::<String>::new());
}

/// A TCP proxy to `upstream` that, once armed, forwards the first chunk the client
/// sends of more than `big` bytes (a batch), drops the server's answer and
/// closes that connection: the batch ran, its answer was lost.
async fn proxy(
    upstream: SocketAddr,
    big: usize,
) -> (SocketAddr, Arc<AtomicBool>, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let armed = Arc::new(AtomicBool::new(false));
    let kills = Arc::new(AtomicUsize::new(0));
    let counted = kills.clone();
    let arm = armed.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = TcpStream::connect(upstream).await.unwrap();
            let (mut client_read, mut client_write) = client.into_split();
            let (mut server_read, mut server_write) = server.into_split();
            let muted = Arc::new(AtomicBool::new(false));
            let (armed, kills, muted_up) = (armed.clone(), counted.clone(), muted.clone());
            let up = tokio::spawn(async move {
                let mut buf = vec![0; 1 << 16];
                loop {
                    let n = match client_read.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if n > big && armed.swap(false, Ordering::SeqCst) {
                        muted_up.store(true, Ordering::SeqCst);
                        kills.fetch_add(1, Ordering::SeqCst);
                        let _ = server_write.write_all(&buf[..n]).await;
                        // The answer is dropped by the other half, which
                        // then closes the connection.
                        std::future::pending::<()>().await;
                    }
                    if server_write.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
            tokio::spawn(async move {
                let mut buf = vec![0; 1 << 16];
                loop {
                    let n = match server_read.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if muted.load(Ordering::SeqCst) {
                        break;
                    }
                    if client_write.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
                up.abort();
            });
        }
    });
    (addr, arm, kills)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_connection_dropped_is_resent_once() {
    let server = RedisServer::start();
    let upstream: SocketAddr = format!("127.0.0.1:{}", server.port()).parse().unwrap();
    let (addr, arm, kills) = proxy(upstream, 1500).await;
    let client = LockClient::connect(&format!("redis://{addr}"))
        .await
        .unwrap();
    // After the connection loaded the scripts (one big chunk too).
    arm.store(true, Ordering::SeqCst);
    let names = names("gc-kill", 16);
    server.reset_command_stats();
    let outcomes = acquire_frozen(&server, &client, &names).await;
    assert_eq!(
        kills.load(Ordering::SeqCst),
        1,
        "the batch's connection was not cut"
    );
    let guards: Vec<LockGuard> = outcomes
        .into_iter()
        .map(|outcome| outcome.unwrap().expect("a free lock"))
        .collect();
    let calls = server.command_calls("evalsha");
    assert!(
        calls <= FIRST as u64 + 2,
        "{calls} EVALSHA calls: not batched"
    );
    // The first send ran (its grants stand); the second found them ours.
    assert_held(&server, &names, &guards);
    release_all(guards).await;
    assert_eq!(lock_keys(&server), Vec::<String>::new());
}
