//! `client` takes a `LockClient`, a reference to one, or a shared pointer
//! to one.
use std::sync::Arc;

use distlock::{distributed_lock, LockClient, LockError};

struct Shared {
    locks: Arc<LockClient>,
}

impl Shared {
    #[distributed_lock(key = "order:{id}", client = self.locks)]
    async fn pay(&self, id: u64) -> Result<u64, LockError> {
        Ok(id)
    }
}

#[distributed_lock(key = "order:{id}", client = locks)]
async fn boxed(locks: Box<LockClient>, id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "order:{id}", client = locks)]
async fn by_mut(locks: &mut LockClient, id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut client = LockClient::memory();
    let shared = Shared {
        locks: Arc::new(client.clone()),
    };
    assert_eq!(shared.pay(1).await.unwrap(), 1);
    assert_eq!(boxed(Box::new(client.clone()), 2).await.unwrap(), 2);
    assert_eq!(by_mut(&mut client, 4).await.unwrap(), 4);
}
