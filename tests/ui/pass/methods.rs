//! Inherent methods (`&self`, `&mut self`, `self: Arc<Self>`) and a native
//! `async fn` in a trait impl.
use std::sync::Arc;

use distlock::{distributed_lock, LockClient, LockError};

struct Ledger {
    locks: LockClient,
    tenant: String,
    entries: Vec<u64>,
}

impl Ledger {
    #[distributed_lock(key = "{self.tenant}:account:{account}", client = self.locks)]
    async fn balance(&self, account: u64) -> Result<usize, LockError> {
        Ok(self.entries.iter().filter(|e| **e == account).count())
    }

    #[distributed_lock(key = "{self.tenant}:account:{account}", wait = "1s", client = self.locks)]
    async fn post(&mut self, account: u64) -> Result<(), LockError> {
        self.entries.push(account);
        Ok(())
    }

    #[distributed_lock(key = "{self.tenant}:audit", client = self.locks.clone())]
    async fn audit(self: Arc<Self>) -> Result<usize, LockError> {
        Ok(self.entries.len())
    }
}

trait Payments {
    async fn pay(&self, order: u64) -> Result<u64, LockError>;
}

impl Payments for Ledger {
    #[distributed_lock(key = "{self.tenant}:order:{order}", client = &self.locks)]
    async fn pay(&self, order: u64) -> Result<u64, LockError> {
        Ok(order)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut ledger = Ledger { locks: LockClient::memory(), tenant: "acme".into(), entries: vec![] };
    ledger.post(7).await.unwrap();
    assert_eq!(ledger.balance(7).await.unwrap(), 1);
    assert_eq!(ledger.pay(3).await.unwrap(), 3);
    assert_eq!(Arc::new(ledger).audit().await.unwrap(), 1);
}
