//! The lock family: `fair`, `read`, `write`, `permits` with and without
//! `take`, on the in-memory backend.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use distlock::{distributed_lock, LockClient, LockError};

#[distributed_lock(key = "payout:{batch}", fair, wait = "5s", client = client)]
async fn payout(client: &LockClient, batch: u32) -> Result<String, LockError> {
    Ok(distlock::current().unwrap().key().to_owned())
}

#[distributed_lock(key = "prices", read, wait = "5s", client = client)]
async fn read_prices(client: &LockClient, readers: &AtomicUsize) -> Result<usize, LockError> {
    let now = readers.fetch_add(1, Ordering::SeqCst) + 1;
    tokio::time::sleep(Duration::from_millis(50)).await;
    readers.fetch_sub(1, Ordering::SeqCst);
    Ok(now)
}

#[distributed_lock(key = "prices", write, wait = "5s", client = client)]
async fn write_prices(client: &LockClient) -> Result<u64, LockError> {
    Ok(distlock::current().unwrap().fencing_token())
}

#[distributed_lock(key = "exports:{tenant}", permits = 5, wait = "5s", client = client)]
async fn export(client: &LockClient, tenant: u32) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "exports:{tenant}", permits = 5, take = 5, on_busy = skip, client = client)]
async fn export_all(client: &LockClient, tenant: u32) -> Option<u32> {
    Some(tenant)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let client = LockClient::memory();
    assert_eq!(payout(&client, 3).await.unwrap(), "payout:3");
    let readers = AtomicUsize::new(0);
    let (a, b) = tokio::join!(read_prices(&client, &readers), read_prices(&client, &readers));
    assert_eq!(a.unwrap().max(b.unwrap()), 2, "readers share the lock");
    assert!(write_prices(&client).await.unwrap() > 0);
    export(&client, 7).await.unwrap();
    assert_eq!(export_all(&client, 7).await, Some(7));
    // One permit taken elsewhere: all five cannot be had, so it is skipped.
    let other = client.clone();
    let permit = tokio::spawn(async move { other.semaphore("exports:7", 5).permit().acquire().await })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(export_all(&client, 7).await, None);
    permit.release().await.unwrap();
}
