//! `on_busy = skip` on `()`, `Option<T>`, a `Default` type and a `Result`.
use distlock::{distributed_lock, LockClient, LockError};

#[derive(Debug, Default, PartialEq)]
struct Report {
    rows: usize,
}

#[distributed_lock(key = "job:unit", on_busy = skip, client = client)]
async fn unit(client: &LockClient, ran: &mut bool) {
    *ran = true;
}

#[distributed_lock(key = "job:option", on_busy = skip, client = client)]
async fn option(client: &LockClient) -> Option<u32> {
    Some(1)
}

#[distributed_lock(key = "job:report", on_busy = skip, client = client)]
async fn report(client: &LockClient) -> Report {
    Report { rows: 3 }
}

#[distributed_lock(key = "job:result", on_busy = skip, wait = "10ms", client = client)]
async fn result(client: &LockClient) -> Result<Option<u32>, LockError> {
    Ok(Some(2))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let client = LockClient::memory();
    let mut ran = false;
    unit(&client, &mut ran).await;
    assert!(ran);
    assert_eq!(option(&client).await, Some(1));
    assert_eq!(report(&client).await, Report { rows: 3 });
    assert_eq!(result(&client).await.unwrap(), Some(2));

    // Held by another owner (a spawned task): every flavour skips.
    let other = client.clone();
    let held = tokio::spawn(async move {
        other.lock_all(["job:unit", "job:option", "job:report", "job:result"]).acquire().await.unwrap()
    })
    .await
    .unwrap();
    let mut ran = false;
    unit(&client, &mut ran).await;
    assert!(!ran);
    assert_eq!(option(&client).await, None);
    assert_eq!(report(&client).await, Report::default());
    assert_eq!(result(&client).await.unwrap(), None);
    held.release().await.unwrap();
}
