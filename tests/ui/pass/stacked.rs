//! `#[tracing::instrument]` above and below, and `#[async_trait]`.
use distlock::{distributed_lock, LockClient, LockError};

#[tracing::instrument(skip(client))]
#[distributed_lock(key = "order:{id}", client = client)]
async fn above(client: &LockClient, id: u64) -> Result<u64, LockError> {
    Ok(distlock::current().unwrap().fencing_token())
}

#[distributed_lock(key = "order:{id}", client = client)]
#[tracing::instrument(skip(client), err)]
async fn below(client: &LockClient, id: u64) -> Result<u64, LockError> {
    Ok(distlock::current().unwrap().fencing_token())
}

#[async_trait::async_trait]
trait Orders {
    async fn cancel(&self, id: u64) -> Result<String, LockError>;
}

struct Service {
    locks: LockClient,
}

#[async_trait::async_trait]
impl Orders for Service {
    #[distributed_lock(key = "order:{id}", wait = "5s", client = self.locks)]
    async fn cancel(&self, id: u64) -> Result<String, LockError> {
        Ok(distlock::current().unwrap().key().to_owned())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let client = LockClient::memory();
    // Two acquisitions: the second token is above the first.
    let first = above(&client, 1).await.unwrap();
    assert!(below(&client, 1).await.unwrap() > first);
    let service = Service { locks: client };
    assert_eq!(service.cancel(1).await.unwrap(), "order:1");
}
