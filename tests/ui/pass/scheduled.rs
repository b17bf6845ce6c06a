//! ShedLock-style scheduled jobs: `at_least` (lockAtLeastFor) with and
//! without a fixed `lease` (lockAtMostFor), `on_busy = skip`.
use std::sync::atomic::{AtomicUsize, Ordering};

use distlock::{distributed_lock, LockClient, LockError};

#[distributed_lock(key = "job:report", lease = "10m", at_least = "200ms", on_busy = skip, client = client)]
async fn report(client: &LockClient, runs: &AtomicUsize) {
    runs.fetch_add(1, Ordering::SeqCst);
}

#[distributed_lock(key = "job:cleanup", at_least = "1m 30s", on_busy = skip, client = client)]
async fn cleanup(client: &LockClient) -> Result<Option<u32>, LockError> {
    Ok(Some(1))
}

#[distributed_lock(key = "job:equal", lease = "5s", at_least = "5s", client = client)]
async fn equal(client: &LockClient) -> Result<(), LockError> {
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let client = LockClient::memory();
    let runs = AtomicUsize::new(0);
    report(&client, &runs).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // Another owner (a spawned task, as another replica would be) within the
    // minimum hold: skipped, although the first run has returned.
    let other = client.clone();
    let skipped = tokio::spawn(async move {
        let runs = AtomicUsize::new(0);
        report(&other, &runs).await;
        runs.load(Ordering::SeqCst)
    });
    assert_eq!(skipped.await.unwrap(), 0);
    assert_eq!(cleanup(&client).await.unwrap(), Some(1));
    equal(&client).await.unwrap();
}
