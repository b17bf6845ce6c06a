//! `PgFence` and `PgFenceStore` on a real PostgreSQL that the test starts:
//! the interleaving of the workspace's `tests/fencing.rs` in transactions
//! and without; a write-only check that loses the update; the SQL; typed
//! refusals.

mod common;

use std::sync::Arc;

use common::{
    assert_lost_update_caught, assert_no_lost_update, interleave, redis_locks, Fut, Store,
};
use distlock_fence::{FenceError, PgFence, PgFenceStore};
use lock_test_support::{PostgresServer, RedisServer};
use tokio_postgres::{Client, NoTls};

async fn connect(server: &PostgresServer) -> Client {
    let (client, connection) = tokio_postgres::connect(&server.connection_string(), NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// The stock in a row, each read and write its own statement.
struct RowStore {
    client: Client,
    fence: PgFence,
}

impl RowStore {
    async fn new(client: Client) -> RowStore {
        client
            .batch_execute("CREATE TABLE stock (sku text PRIMARY KEY, qty bigint NOT NULL)")
            .await
            .unwrap();
        let fence = PgFence::new("stock", "sku", "fence").unwrap();
        client.batch_execute(&fence.migration()).await.unwrap();
        // The migration runs twice without harm.
        client.batch_execute(&fence.migration()).await.unwrap();
        RowStore { client, fence }
    }
}

impl Store for RowStore {
    fn reset(&self, qty: i64) -> Fut<'_, ()> {
        Box::pin(async move {
            self.client
                .execute(
                    "INSERT INTO stock (sku, qty) VALUES ($1, $2) ON CONFLICT (sku) DO UPDATE SET qty = $2, fence = 0",
                    &[&common::SKU, &qty],
                )
                .await
                .unwrap();
        })
    }
    fn read(&self, token: u64) -> Fut<'_, Result<i64, FenceError>> {
        Box::pin(async move {
            let row = self
                .fence
                .read(&self.client, &common::SKU, token, &["qty"])
                .await?;
            Ok(row.get(0))
        })
    }
    fn write(&self, token: u64, qty: i64) -> Fut<'_, Result<(), FenceError>> {
        Box::pin(async move {
            self.fence
                .write(&self.client, &common::SKU, token, &[("qty", &qty)])
                .await
        })
    }
    fn stock(&self) -> Fut<'_, i64> {
        Box::pin(async move {
            let row = self
                .client
                .query_one("SELECT qty FROM stock WHERE sku = $1", &[&common::SKU])
                .await
                .unwrap();
            row.get(0)
        })
    }
}

/// The old rule in SQL: `UPDATE ... WHERE fence <= $token` on writes only.
struct WriteOnlyRow {
    client: Client,
}

impl Store for WriteOnlyRow {
    fn reset(&self, qty: i64) -> Fut<'_, ()> {
        Box::pin(async move {
            self.client
                .execute(
                    "UPDATE stock SET qty = $2, fence = 0 WHERE sku = $1",
                    &[&common::SKU, &qty],
                )
                .await
                .unwrap();
        })
    }
    fn read(&self, _token: u64) -> Fut<'_, Result<i64, FenceError>> {
        Box::pin(async move {
            let row = self
                .client
                .query_one("SELECT qty FROM stock WHERE sku = $1", &[&common::SKU])
                .await
                .unwrap();
            Ok(row.get(0))
        })
    }
    fn write(&self, token: u64, qty: i64) -> Fut<'_, Result<(), FenceError>> {
        Box::pin(async move {
            let token_i64 = i64::try_from(token).unwrap();
            let updated = self
                .client
                .execute(
                    "UPDATE stock SET qty = $3, fence = $1 WHERE sku = $2 AND fence <= $1",
                    &[&token_i64, &common::SKU, &qty],
                )
                .await
                .unwrap();
            if updated == 1 {
                Ok(())
            } else {
                Err(FenceError::Stale {
                    key: "stock".into(),
                    token,
                    seen: 0,
                })
            }
        })
    }
    fn stock(&self) -> Fut<'_, i64> {
        Box::pin(async move {
            let row = self
                .client
                .query_one("SELECT qty FROM stock WHERE sku = $1", &[&common::SKU])
                .await
                .unwrap();
            row.get(0)
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_interleaving_refuses_the_stale_holder_on_postgres() {
    let pg = PostgresServer::start();
    let redis = RedisServer::start();
    let [a, b, op] = redis_locks(&redis.url()).await;

    let store = RowStore::new(connect(&pg).await).await;
    let outcome = interleave(&a, &b, &op, &store).await;
    assert_no_lost_update(&outcome);
    let refusal = outcome.a_refusal.unwrap();
    assert!(refusal.contains("stock[\"sku:4\"]"), "{refusal}");

    // The same test fails on a row that checks writes only.
    let outcome = interleave(
        &a,
        &b,
        &op,
        &WriteOnlyRow {
            client: connect(&pg).await,
        },
    )
    .await;
    assert_lost_update_caught(&outcome);
}

/// The helper in the callers' transactions: A's transaction reads and
/// commits (its claim is kept); B's transaction reads; A's second
/// transaction writes and is refused; B writes and commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_keep_the_claim_and_refuse_the_stale_write() {
    let pg = PostgresServer::start();
    let mut a = connect(&pg).await;
    let mut b = connect(&pg).await;
    let store = RowStore::new(connect(&pg).await).await;
    store.reset(300).await;
    let fence = &store.fence;

    let tx = a.transaction().await.unwrap();
    let qty_a: i64 = fence
        .read(&tx, &common::SKU, 5, &["qty"])
        .await
        .unwrap()
        .get(0);
    tx.commit().await.unwrap();

    let tx_b = b.transaction().await.unwrap();
    let qty_b: i64 = fence
        .read(&tx_b, &common::SKU, 6, &["qty"])
        .await
        .unwrap()
        .get(0);
    tx_b.commit().await.unwrap();

    let tx = a.transaction().await.unwrap();
    match fence
        .write(&tx, &common::SKU, 5, &[("qty", &(qty_a - 1))])
        .await
    {
        Err(FenceError::Stale {
            token: 5, seen: 6, ..
        }) => {}
        other => panic!("{other:?}"),
    }
    tx.rollback().await.unwrap();

    let tx_b = b.transaction().await.unwrap();
    fence
        .write(&tx_b, &common::SKU, 6, &[("qty", &(qty_b - 1))])
        .await
        .unwrap();
    tx_b.commit().await.unwrap();
    assert_eq!(store.stock().await, 299);

    // Missing rows and tokens beyond bigint are typed errors.
    match fence.read(&store.client, &"sku:none", 9, &["qty"]).await {
        Err(FenceError::Missing { key }) => assert_eq!(key, "stock[\"sku:none\"]"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        fence.check(&store.client, &common::SKU, u64::MAX).await,
        Err(FenceError::TokenOutOfRange {
            token: u64::MAX,
            ..
        })
    ));
    // A write that a newer read overtook inside a still-open transaction
    // waits for the row lock, then sees the newer fence.
    fence.check(&store.client, &common::SKU, 7).await.unwrap();
    let tx_b = b.transaction().await.unwrap();
    assert!(fence
        .check(&tx_b, &common::SKU, 6)
        .await
        .unwrap_err()
        .is_stale());
    tx_b.rollback().await.unwrap();
}

#[test]
fn the_sql_for_other_drivers() {
    let fence = PgFence::new("shop.stock", "sku", "fence").unwrap();
    assert_eq!(
        fence.read_sql(&["qty"]).unwrap(),
        r#"UPDATE "shop"."stock" SET "fence" = $1 WHERE "sku" = $2 AND "fence" <= $1 RETURNING "qty""#
    );
    assert_eq!(
        fence.write_sql(&["qty", "note"]).unwrap(),
        r#"UPDATE "shop"."stock" SET "qty" = $3, "note" = $4, "fence" = $1 WHERE "sku" = $2 AND "fence" <= $1"#
    );
    assert_eq!(
        fence.migration(),
        r#"ALTER TABLE "shop"."stock" ADD COLUMN IF NOT EXISTS "fence" bigint NOT NULL DEFAULT 0 CHECK ("fence" >= 0)"#
    );
    // Names are quoted, so no name can break out of the statement.
    let odd = PgFence::new("t", "k", "f").unwrap();
    assert_eq!(
        odd.read_sql(&["a\"; DROP TABLE t; --"]).unwrap(),
        r#"UPDATE "t" SET "f" = $1 WHERE "k" = $2 AND "f" <= $1 RETURNING "a""; DROP TABLE t; --""#
    );
    assert!(matches!(
        PgFence::new("t", "", "f"),
        Err(FenceError::Invalid { .. })
    ));
}

#[tokio::test]
async fn a_fence_table_claims_by_name() {
    let pg = PostgresServer::start();
    let store = PgFenceStore::new(Arc::new(connect(&pg).await), "fences").unwrap();
    let client = connect(&pg).await;
    client.batch_execute(&store.migration()).await.unwrap();
    assert_eq!(store.seen("a").await.unwrap(), 0);
    store.claim("a", 3).await.unwrap();
    store.claim("a", 3).await.unwrap();
    match store.claim("a", 2).await {
        Err(FenceError::Stale {
            key,
            token: 2,
            seen: 3,
        }) => assert_eq!(key, "a"),
        other => panic!("{other:?}"),
    }
    store.claim("a", i64::MAX.unsigned_abs()).await.unwrap();
    store.claim("b", 1).await.unwrap();
    assert_eq!(store.seen("b").await.unwrap(), 1);
}

/// Issue 37's first sequence, with the ready-made `PgFence` and a Redis
/// without persistence: three holders increment the row; holder H takes the
/// lock (watchdog mode) and reads; redis-server restarts empty. Holders of a
/// second client then retry until the fence accepts their read. Before the
/// clock floor, the first accepted one got H's token again (the counter
/// started over at 1): both read the same value, both writes were accepted,
/// and one increment was lost. Now every token after the restart is above
/// H's, H's write is refused, and every acknowledged increment is in the row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_mid_write_across_an_empty_restart_is_refused() {
    use std::time::Duration;

    let pg = PostgresServer::start();
    let mut redis = RedisServer::start();
    let store = RowStore::new(connect(&pg).await).await;
    store.reset(0).await;
    let mut acknowledged = 0_i64;

    let first = distlock_core::LockClient::connect(&redis.url())
        .await
        .unwrap();
    for _ in 0..3 {
        let guard = first.lock("stock").acquire().await.unwrap();
        let token = guard.fencing_token();
        let qty = store.read(token).await.unwrap();
        store.write(token, qty + 1).await.unwrap();
        acknowledged += 1;
        guard.release().await.unwrap();
    }

    let h = first.lock("stock").acquire().await.unwrap();
    let h_token = h.fencing_token();
    let h_qty = store.read(h_token).await.unwrap();

    redis.restart();

    let second = distlock_core::LockClient::connect(&redis.url())
        .await
        .unwrap();
    let mut accepted = None;
    for _ in 0..50 {
        let guard = second
            .lock("stock")
            .wait(Duration::from_secs(5))
            .acquire()
            .await
            .unwrap();
        match store.read(guard.fencing_token()).await {
            Ok(qty) => {
                accepted = Some((guard, qty));
                break;
            }
            Err(FenceError::Stale { .. }) => guard.release().await.unwrap(),
            Err(other) => panic!("{other}"),
        }
    }
    let (n, n_qty) = accepted.expect("a holder after the restart is accepted");
    // H's watchdog has not renewed since the restart: it still believes it holds the lock.
    assert!(h.is_held(), "H still believes it holds the lock");
    assert!(
        n.fencing_token() > h_token,
        "a token issued after the empty restart ({}) must be above the last one before it ({h_token})",
        n.fencing_token()
    );

    // H, then the new holder, write what they read plus one.
    match store.write(h_token, h_qty + 1).await {
        Ok(()) => acknowledged += 1,
        Err(FenceError::Stale { .. }) => {}
        Err(other) => panic!("{other}"),
    }
    store.write(n.fencing_token(), n_qty + 1).await.unwrap();
    acknowledged += 1;
    n.release().await.unwrap();

    assert_eq!(
        store.stock().await,
        acknowledged,
        "every acknowledged increment is in the row (none lost)"
    );
    drop(h);
    let _ = first.shutdown(Duration::from_secs(1)).await;
    let _ = second.shutdown(Duration::from_secs(1)).await;
}
