//! `leader = "role"`: a follower's call is skipped or busy, the leader's
//! runs with its term as `current()`'s token, per role template.
use std::time::Duration;

use distlock::{distributed_lock, LockClient, LockError, Wait};

#[distributed_lock(leader = "scheduler", on_busy = skip, client = client)]
async fn tick(client: &LockClient) -> Option<u64> {
    distlock::current().map(|lock| lock.fencing_token())
}

#[distributed_lock(leader = "relay:{shard}", wait = timeout, abort_on_lost, client = client)]
async fn relay(client: &LockClient, shard: u32, timeout: Duration) -> Result<String, LockError> {
    Ok(distlock::current().unwrap().key().to_owned())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let client = LockClient::memory();
    let term = tick(&client).await.expect("no other process leads");
    assert!(term > 0);
    let leadership = client.election("scheduler").campaign(Wait::Once).await.unwrap();
    // Another task of this client is another owner: a follower for the call.
    let skipped = tokio::spawn({
        let client = client.clone();
        async move { tick(&client).await }
    });
    assert_eq!(skipped.await.unwrap(), None);
    leadership.resign().await.unwrap();
    assert_eq!(
        relay(&client, 3, Duration::from_secs(1)).await.unwrap(),
        "leader:relay:3"
    );
}
