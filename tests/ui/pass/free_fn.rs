//! The mission's own example, in both placeholder forms, on the global client.
use distlock::{distributed_lock, LockClient, LockError};

#[derive(Debug, PartialEq)]
struct Receipt(u64);

#[derive(Debug)]
enum AppError {
    Lock(LockError),
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError::Lock(err)
    }
}

#[distributed_lock(key = "order:<id>", wait = "10s")]
async fn pay(id: u64) -> Result<Receipt, AppError> {
    Ok(Receipt(id))
}

#[distributed_lock(key = "order:{id}", wait = "10s")]
async fn refund(id: u64) -> Result<Receipt, AppError> {
    let lock = distlock::current().unwrap();
    assert_eq!(lock.key(), format!("order:{id}"));
    Ok(Receipt(lock.fencing_token()))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    distlock::set_global_client(LockClient::memory());
    assert_eq!(pay(42).await.unwrap(), Receipt(42));
    // A fencing token: at least the clock in microseconds.
    assert!(refund(42).await.unwrap().0 > 1_700_000_000_000_000);
    // Busy: `pay` waits (up to 10 s) until the holder lets go.
    let holder = tokio::spawn(async {
        let held = distlock::global_client().unwrap().lock("order:42").acquire().await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        held.release().await.unwrap();
    });
    tokio::task::yield_now().await;
    assert_eq!(pay(42).await.unwrap(), Receipt(42));
    holder.await.unwrap();
}
