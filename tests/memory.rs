//! The behavioural suite on the in-memory backend.

mod suite;

use distributed_lock::{LockClient, LockClientBuilder, MemoryStore};
use suite::Fixture;

/// Clients on one shared in-memory store.
struct Memory {
    store: MemoryStore,
    prefix: String,
}

impl Memory {
    fn new() -> Self {
        Memory {
            store: MemoryStore::new(),
            prefix: distributed_lock::DEFAULT_PREFIX.to_owned(),
        }
    }
}

impl Fixture for Memory {
    async fn client_with(&self, builder: LockClientBuilder) -> LockClient {
        builder
            .key_prefix(self.prefix.clone())
            .memory(self.store.clone())
            .unwrap()
    }

    async fn delete_lock(&self, name: &str) {
        let operator = LockClient::builder().memory(self.store.clone()).unwrap();
        assert!(
            operator.force_release(name).await.unwrap(),
            "{name} was not held"
        );
    }
}

behaviour_suite!(Memory::new());

#[tokio::test]
async fn memory_clients_are_isolated_unless_they_share_a_store() {
    let (a, b) = (LockClient::memory(), LockClient::memory());
    let guard = a.lock("iso").acquire().await.unwrap();
    // Separate private stores: no contention.
    let other = b.lock("iso").acquire().await.unwrap();
    assert_ne!(a.id(), b.id());
    guard.release().await.unwrap();
    other.release().await.unwrap();
}
