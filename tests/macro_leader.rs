//! `#[distributed_lock(leader = "role")]`: a function that runs only on the
//! role's leader, on the in-memory backend (two clients of one store) and
//! on a real `redis-server` (two connected clients): a follower's call is
//! skipped or fails with `Busy`, the leader's runs with its term as
//! `current()`'s token and is seen by observers, a nested call re-enters
//! the term, a waiting call runs once the leader resigns, and a leadership
//! lost mid-body cancels it with `abort_on_lost`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use distlock::{distributed_lock, LockClient, LockError, MemoryStore, Wait};
use lock_test_support::RedisServer;
use tokio::sync::oneshot;
use tokio::time::timeout;

const LONG: Duration = Duration::from_secs(30);

/// Leader-only, skipped on a follower: the term it ran in, as `current()`
/// gives it, and the leader an observer read meanwhile.
#[distributed_lock(leader = "cron", on_busy = skip, client = client)]
async fn tick(client: &LockClient, ran: &AtomicUsize) -> Option<(u64, Option<u64>)> {
    ran.fetch_add(1, Ordering::SeqCst);
    let lock = distlock::current().expect("inside a leader-only fn");
    assert_eq!(lock.key(), "leader:cron");
    let observed = client.election("cron").leader().await.unwrap();
    Some((lock.fencing_token(), observed.map(|leader| leader.term)))
}

/// Leader-only, an error on a follower.
#[distributed_lock(leader = "cron", client = client)]
async fn tick_or_busy(client: &LockClient) -> Result<u64, LockError> {
    Ok(distlock::current().unwrap().fencing_token())
}

/// Leader-only, calling another function of the same role.
#[distributed_lock(leader = "cron", client = client)]
async fn outer(client: &LockClient) -> Result<(u64, u64), LockError> {
    let term = distlock::current().unwrap().fencing_token();
    Ok((term, tick_or_busy(client).await?))
}

/// Leader-only, waiting to be elected, per shard.
#[distributed_lock(leader = "cron:{shard}", wait = "30s", client = client)]
async fn waiting(client: &LockClient, shard: u32) -> Result<u64, LockError> {
    Ok(distlock::current().unwrap().fencing_token())
}

/// Leader-only, cancelled when leadership is lost.
#[distributed_lock(leader = "cron", abort_on_lost, client = client)]
async fn long_job(client: &LockClient, started: oneshot::Sender<()>) -> Result<(), LockError> {
    let _ = started.send(());
    std::future::pending::<()>().await;
    Ok(())
}

async fn follower_is_skipped_and_the_leader_runs_with_its_term(a: LockClient, b: LockClient) {
    let ran = AtomicUsize::new(0);
    let leadership = a.election("cron").campaign(Wait::Once).await.unwrap();
    assert_eq!(tick(&b, &ran).await, None, "a follower's call is skipped");
    match tick_or_busy(&b).await {
        Err(LockError::Busy { key }) => assert_eq!(key, "leader:cron"),
        other => panic!("expected Busy on a follower, got {other:?}"),
    }
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the body ran on a follower");
    let first = leadership.term();
    leadership.resign().await.unwrap();

    let (term, observed) = tick(&b, &ran).await.expect("the leader's call runs");
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert!(term > first, "a new term: {first} then {term}");
    assert_eq!(observed, Some(term), "observers see the call's term");
    // The call resigned at its end: the role is free.
    assert!(a.election("cron").leader().await.unwrap().is_none());
}

async fn a_nested_call_reenters_the_term(a: LockClient) {
    let (outer_term, inner_term) = outer(&a).await.unwrap();
    assert_eq!(
        outer_term, inner_term,
        "the nested call runs in the same term"
    );
    assert!(a.election("cron").leader().await.unwrap().is_none());
}

async fn a_waiting_call_runs_once_the_leader_resigns(a: LockClient, b: LockClient) {
    let leadership = a.election("cron:3").campaign(Wait::Once).await.unwrap();
    let first = leadership.term();
    let call = tokio::spawn(async move { waiting(&b, 3).await });
    // The call is waiting: it cannot have run while A leads.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !call.is_finished(),
        "the call ran while another process led"
    );
    leadership.resign().await.unwrap();
    let term = timeout(LONG, call).await.unwrap().unwrap().unwrap();
    assert!(term > first, "{first} then {term}");
}

async fn a_lost_leadership_cancels_the_body(a: LockClient, b: LockClient) {
    let (started, running) = oneshot::channel();
    let call = tokio::spawn(async move { long_job(&a, started).await });
    running.await.unwrap();
    assert!(b.admin().force_release("leader:cron").await.unwrap());
    match timeout(LONG, call).await.unwrap().unwrap() {
        Err(LockError::LeaseLost { key, .. }) => assert_eq!(key, "leader:cron"),
        other => panic!("expected LeaseLost, got {other:?}"),
    }
}

fn memory_pair() -> (LockClient, LockClient) {
    let store = MemoryStore::new();
    (
        LockClient::builder().memory(store.clone()).unwrap(),
        LockClient::builder().memory(store).unwrap(),
    )
}

async fn redis_pair(server: &RedisServer) -> (LockClient, LockClient) {
    (
        LockClient::connect(&server.url()).await.unwrap(),
        LockClient::connect(&server.url()).await.unwrap(),
    )
}

#[tokio::test]
async fn memory_follower_is_skipped_and_the_leader_runs_with_its_term() {
    let (a, b) = memory_pair();
    follower_is_skipped_and_the_leader_runs_with_its_term(a, b).await;
}

#[tokio::test]
async fn memory_a_nested_call_reenters_the_term() {
    a_nested_call_reenters_the_term(LockClient::memory()).await;
}

#[tokio::test]
async fn memory_a_waiting_call_runs_once_the_leader_resigns() {
    let (a, b) = memory_pair();
    a_waiting_call_runs_once_the_leader_resigns(a, b).await;
}

#[tokio::test]
async fn memory_a_lost_leadership_cancels_the_body() {
    let store = MemoryStore::new();
    // A short lease: the watchdog finds the lock gone within a third of it.
    let a = LockClient::builder()
        .lease(Duration::from_secs(3))
        .memory(store.clone())
        .unwrap();
    let b = LockClient::builder().memory(store).unwrap();
    a_lost_leadership_cancels_the_body(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_follower_is_skipped_and_the_leader_runs_with_its_term() {
    let server = RedisServer::start();
    let (a, b) = redis_pair(&server).await;
    follower_is_skipped_and_the_leader_runs_with_its_term(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_nested_call_reenters_the_term() {
    let server = RedisServer::start();
    let (a, _) = redis_pair(&server).await;
    a_nested_call_reenters_the_term(a).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_waiting_call_runs_once_the_leader_resigns() {
    let server = RedisServer::start();
    let (a, b) = redis_pair(&server).await;
    a_waiting_call_runs_once_the_leader_resigns(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_lost_leadership_cancels_the_body() {
    let server = RedisServer::start();
    // A short lease: the watchdog finds the lock gone within a third of it.
    let a = LockClient::builder()
        .lease(Duration::from_secs(3))
        .connect(&server.url())
        .await
        .unwrap();
    let b = LockClient::connect(&server.url()).await.unwrap();
    a_lost_leadership_cancels_the_body(a, b).await;
}
