//! Fencing a read-modify-write: the interleaving that loses an update under
//! the rule "reject a token lower than the last write's, else apply", and the
//! claim-on-read store of the examples (`examples/ledger/mod.rs`, the README's
//! "Fencing tokens") that refuses it. Real locks, on memory and on Redis.
//!
//! The interleaving (two replicas of an inventory service, one SKU with 300
//! in stock): A takes the lock and reads 300; A's lock is force-released (or
//! A is paused past its lease); B takes the lock (a higher token) and reads
//! 300; A writes 299; B writes 299. Two reservations, stock down by one.

#[path = "../examples/ledger/mod.rs"]
mod ledger;

use std::collections::HashMap;
use std::sync::Mutex;

use distlock::{LockClient, LockError};
use lock_test_support::RedisServer;

/// A store with the old advice's rule: a write is refused when its token is
/// lower than the last accepted write's, else applied. Reads are not fenced.
#[derive(Default)]
struct LastWriteFence {
    rows: Mutex<HashMap<&'static str, (u64, u64)>>, // sku -> (qty, fence)
}

impl LastWriteFence {
    fn read(&self, sku: &'static str, _token: u64) -> Result<u64, ()> {
        Ok(self.rows.lock().unwrap().get(sku).map_or(0, |row| row.0))
    }

    fn write(&self, sku: &'static str, token: u64, qty: u64) -> Result<(), ()> {
        let mut rows = self.rows.lock().unwrap();
        let row = rows.entry(sku).or_default();
        if token < row.1 {
            return Err(());
        }
        *row = (qty, token);
        Ok(())
    }
}

/// The two stores behind one face, for the one interleaving.
trait Store {
    fn read(&self, token: u64) -> Result<u64, ()>;
    fn write(&self, token: u64, qty: u64) -> Result<(), ()>;
    fn qty(&self) -> u64;
}

const SKU: &str = "sku:4";

impl Store for LastWriteFence {
    fn read(&self, token: u64) -> Result<u64, ()> {
        LastWriteFence::read(self, SKU, token)
    }
    fn write(&self, token: u64, qty: u64) -> Result<(), ()> {
        LastWriteFence::write(self, SKU, token, qty)
    }
    fn qty(&self) -> u64 {
        self.rows.lock().unwrap()[SKU].0
    }
}

impl Store for ledger::Ledger<&'static str, u64> {
    fn read(&self, token: u64) -> Result<u64, ()> {
        ledger::Ledger::read(self, &SKU, token).map_err(drop)
    }
    fn write(&self, token: u64, qty: u64) -> Result<(), ()> {
        ledger::Ledger::write(self, &SKU, token, qty).map_err(drop)
    }
    fn qty(&self) -> u64 {
        self.peek(&SKU).0
    }
}

/// What each replica's reservation came to.
#[derive(Debug)]
struct Outcome {
    a_reserved: bool,
    b_reserved: bool,
    stock: u64,
}

/// Runs the interleaving with real locks of `a` and `b` (two replicas) and an
/// operator client `op` on one store: each replica reserves one unit of
/// `SKU` under the lock `SKU`, reading and writing with its fencing token.
async fn interleave(a: &LockClient, b: &LockClient, op: &LockClient, store: &dyn Store) -> Outcome {
    store.write(0, 300).unwrap();
    let lock_a = a.lock(SKU).acquire().await.unwrap();
    let read_a = store.read(lock_a.fencing_token());
    // A's lock is taken away (an operator, or A paused past its lease).
    assert!(op.admin().force_release(SKU).await.unwrap());
    let lock_b = b.lock(SKU).acquire().await.unwrap();
    assert!(lock_b.fencing_token() > lock_a.fencing_token());
    let read_b = store.read(lock_b.fencing_token());
    // A, unaware, writes first; then B.
    let a_reserved = match read_a {
        Ok(qty) => store.write(lock_a.fencing_token(), qty - 1).is_ok(),
        Err(()) => false,
    };
    let b_reserved = match read_b {
        Ok(qty) => store.write(lock_b.fencing_token(), qty - 1).is_ok(),
        Err(()) => false,
    };
    lock_b.release().await.unwrap();
    assert!(matches!(
        lock_a.release().await,
        Err(LockError::LeaseLost { .. } | LockError::NotHeld { .. })
    ));
    Outcome {
        a_reserved,
        b_reserved,
        stock: store.qty(),
    }
}

/// Every reservation that was answered "done" took one unit of stock.
fn assert_no_lost_update(outcome: &Outcome) {
    let reserved = u64::from(outcome.a_reserved) + u64::from(outcome.b_reserved);
    assert_eq!(
        300 - outcome.stock,
        reserved,
        "{outcome:?}: a reservation answered as done is missing from the stock"
    );
    assert!(
        !outcome.a_reserved,
        "{outcome:?}: the stale holder's write was accepted"
    );
    assert!(
        outcome.b_reserved,
        "{outcome:?}: the valid holder was refused"
    );
}

fn memory_clients() -> [LockClient; 3] {
    let store = distlock::MemoryStore::new();
    [(); 3].map(|()| LockClient::builder().memory(store.clone()).unwrap())
}

async fn redis_clients(server: &RedisServer) -> [LockClient; 3] {
    let url = server.url();
    [
        LockClient::connect(&url).await.unwrap(),
        LockClient::connect(&url).await.unwrap(),
        LockClient::connect(&url).await.unwrap(),
    ]
}

/// The claim-on-read store of the examples refuses the stale holder: one
/// reservation, stock 299, the stale write answered as a conflict.
#[tokio::test]
async fn claim_on_read_refuses_the_stale_holder_on_memory() {
    let [a, b, op] = memory_clients();
    let outcome = interleave(&a, &b, &op, &ledger::Ledger::default()).await;
    assert_no_lost_update(&outcome);
}

/// The same on Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_on_read_refuses_the_stale_holder_on_redis() {
    let server = RedisServer::start();
    let [a, b, op] = redis_clients(&server).await;
    let outcome = interleave(&a, &b, &op, &ledger::Ledger::default()).await;
    assert_no_lost_update(&outcome);
}

/// The old advice ("reject a token lower than the last write's, else
/// apply") accepts both writes in this interleaving: two reservations
/// answered as done, stock down by one. This is why reads must carry the
/// token too; `assert_no_lost_update` fails on such a store.
#[tokio::test]
async fn the_last_write_rule_loses_a_reservation() {
    let [a, b, op] = memory_clients();
    let outcome = interleave(&a, &b, &op, &LastWriteFence::default()).await;
    assert!(outcome.a_reserved && outcome.b_reserved, "{outcome:?}");
    assert_eq!(outcome.stock, 299, "{outcome:?}");
    let checked = std::panic::catch_unwind(|| assert_no_lost_update(&outcome));
    assert!(checked.is_err(), "the check must catch the lost update");
}
