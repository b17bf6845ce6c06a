//! The PostgreSQL backend on a service's own pool (features
//! `deadpool-postgres` and `bb8-postgres`): the behavioural suite through a
//! deadpool and through a bb8 pool, against a real PostgreSQL; that the lock's
//! statements run on the pool's sessions and only the `LISTEN` on one of its
//! own; a pool whose connections the server ended; and a pool the service
//! keeps busy past a lease (the lock is lost, never shared).

mod suite;

use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{LockClient, LockClientBuilder, LockError};
use lock_test_support::PostgresServer;
use suite::Fixture;

/// Which pool a fixture's clients run their statements on.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Deadpool,
    Bb8,
}

/// Clients on one schema of their own, each on a new pool of `kind` with
/// `size` connections.
struct Pooled {
    server: Arc<PostgresServer>,
    schema: String,
    kind: Kind,
    size: usize,
}

impl Pooled {
    fn new(kind: Kind) -> Self {
        Self::sized(kind, 4)
    }

    fn sized(kind: Kind, size: usize) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        Pooled {
            server: PostgresServer::shared(),
            schema: format!("p{}_{n}", std::process::id()),
            kind,
            size,
        }
    }

    /// The pool's sessions are named `<schema>_pool`, the `LISTEN`
    /// connection's `<schema>_listen` (in `pg_stat_activity`).
    fn url(&self, role: &str) -> String {
        format!(
            "{}?application_name={}_{role}",
            self.server.url(),
            self.schema
        )
    }

    fn deadpool(&self) -> deadpool_postgres::Pool {
        let config = tokio_postgres::Config::from_str(&self.url("pool")).unwrap();
        let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
        deadpool_postgres::Pool::builder(manager)
            .max_size(self.size)
            .build()
            .unwrap()
    }

    async fn bb8(
        &self,
    ) -> bb8::Pool<bb8_postgres::PostgresConnectionManager<tokio_postgres::NoTls>> {
        let manager = bb8_postgres::PostgresConnectionManager::new_from_stringlike(
            self.url("pool"),
            tokio_postgres::NoTls,
        )
        .unwrap();
        bb8::Pool::builder()
            .max_size(u32::try_from(self.size).unwrap())
            .build(manager)
            .await
            .unwrap()
    }

    async fn connect(&self, builder: LockClientBuilder) -> Result<LockClient, LockError> {
        let listen = self.url("listen");
        let connect = match self.kind {
            Kind::Deadpool => builder.postgres_pool(self.deadpool(), &listen),
            Kind::Bb8 => builder.postgres_pool(self.bb8().await, &listen),
        };
        connect.schema(&self.schema).connect().await
    }

    /// A plain tokio-postgres client of the server, for the tests' own statements.
    async fn sql(&self) -> tokio_postgres::Client {
        let (client, connection) =
            tokio_postgres::connect(&self.server.connection_string(), tokio_postgres::NoTls)
                .await
                .unwrap();
        tokio::spawn(connection);
        client
    }

    /// This test's sessions of `role` (`pool` or `listen`): pid and last
    /// statement.
    async fn sessions(&self, sql: &tokio_postgres::Client, role: &str) -> Vec<(i32, String)> {
        sql.query(
            "SELECT pid, query FROM pg_stat_activity WHERE application_name = $1",
            &[&format!("{}_{role}", self.schema)],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
    }
}

impl Fixture for Pooled {
    const COUNTS_WAITERS: bool = false;

    async fn client_with(&self, builder: LockClientBuilder) -> LockClient {
        self.connect(builder).await.unwrap()
    }

    async fn delete_lock(&self, name: &str) {
        let deleted = self
            .sql()
            .await
            .execute(
                &format!("DELETE FROM {}.distlock_locks WHERE key = $1", self.schema),
                &[&format!("lock:{{{name}}}")],
            )
            .await
            .unwrap();
        assert_eq!(deleted, 1, "{name} was not held");
    }
}

/// The whole behavioural suite through a deadpool.
mod deadpool_suite {
    use super::*;
    behaviour_suite!(Pooled::new(Kind::Deadpool));
}

/// The whole behavioural suite through a bb8 pool.
mod bb8_suite {
    use super::*;
    behaviour_suite!(Pooled::new(Kind::Bb8));
}

/// The lock's statements run on the pool's sessions; the client keeps one
/// session of its own, the `LISTEN`, and a waiter is woken through it.
async fn statements_run_on_the_pool(kind: Kind) {
    let fixture = Pooled::new(kind);
    let sql = fixture.sql().await;
    let [a, b] = [fixture.client().await, fixture.client().await];
    let guard = a.lock("pooled").acquire().await.unwrap();
    let waiter = tokio::spawn(async move {
        let guard = b
            .lock("pooled")
            .wait(Duration::from_secs(20))
            .acquire()
            .await
            .unwrap();
        let woken = Instant::now();
        guard.release().await.unwrap();
        woken
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The waiting client listens on a session of its own.
    let listen = fixture.sessions(&sql, "listen").await;
    assert_eq!(
        listen.len(),
        1,
        "one LISTEN session, the waiter's: {listen:?}"
    );
    assert!(
        listen.iter().all(|(_, q)| q.starts_with("LISTEN")),
        "{listen:?}"
    );
    let released = Instant::now();
    guard.release().await.unwrap();
    let woken = waiter.await.unwrap();
    // The lease is 30 s: only the NOTIFY on the LISTEN connection wakes it so soon.
    assert!(
        woken.duration_since(released) < Duration::from_secs(3),
        "the waiter was woken {:?} after the release",
        woken.duration_since(released)
    );
    let pool = fixture.sessions(&sql, "pool").await;
    assert!(
        !pool.is_empty() && pool.len() <= 2 * fixture.size,
        "{pool:?}"
    );
    assert!(
        pool.iter().any(|(_, q)| q.contains("distlock_")),
        "the pool's sessions ran the lock's statements: {pool:?}"
    );
    // No session of the client's own besides the LISTEN ones.
    let others: i64 = sql
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            &[&fixture.schema],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(others, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadpool_statements_run_on_the_pool_and_listen_on_its_own() {
    statements_run_on_the_pool(Kind::Deadpool).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bb8_statements_run_on_the_pool_and_listen_on_its_own() {
    statements_run_on_the_pool(Kind::Bb8).await;
}

/// The server ends every pooled session (`pg_terminate_backend`) while the
/// client is idle; the next acquisition, at once, still succeeds (the
/// statement is sent again on another of the pool's connections).
async fn terminated_sessions_are_replaced(kind: Kind) {
    let fixture = Pooled::sized(kind, 2);
    let sql = fixture.sql().await;
    let client = fixture.client().await;
    for round in 0..5 {
        let guard = client.lock("terminated").acquire().await.unwrap();
        guard.release().await.unwrap();
        let pids: Vec<i32> = fixture
            .sessions(&sql, "pool")
            .await
            .into_iter()
            .map(|(pid, _)| pid)
            .collect();
        assert!(!pids.is_empty());
        for pid in &pids {
            sql.execute("SELECT pg_terminate_backend($1)", &[pid])
                .await
                .unwrap();
        }
        let guard = client
            .lock("terminated")
            .acquire()
            .await
            .unwrap_or_else(|err| panic!("round {round}: {err:?}"));
        guard.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadpool_sessions_ended_by_the_server_are_replaced() {
    terminated_sessions_are_replaced(Kind::Deadpool).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bb8_sessions_ended_by_the_server_are_replaced() {
    terminated_sessions_are_replaced(Kind::Bb8).await;
}

/// The service holds the pool's only connection for longer than a lease:
/// the watchdog cannot renew, `lost()` fires by the local deadline, another
/// client enters only after the lease ran out with a higher token, and the
/// first holder's release reports the loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_kept_busy_past_the_lease_loses_the_lock_and_never_shares_it() {
    let fixture = Pooled::sized(Kind::Deadpool, 1);
    let pool = fixture.deadpool();
    let lease = Duration::from_millis(1500);
    let client = LockClient::builder()
        .lease(lease)
        .connect_timeout(Duration::from_millis(300))
        .postgres_pool(pool.clone(), &fixture.url("listen"))
        .schema(&fixture.schema)
        .connect()
        .await
        .unwrap();
    // Another client on a connection of its own.
    let other = LockClient::builder()
        .postgres(&fixture.url("other"))
        .schema(&fixture.schema)
        .connect()
        .await
        .unwrap();
    let guard = client.lock("busy").acquire().await.unwrap();
    let granted = Instant::now();
    let token = guard.fencing_token();
    let busy = pool.get().await.unwrap();
    let lost = guard.lost();
    tokio::time::timeout(Duration::from_secs(5), lost)
        .await
        .expect("lost() fires while renewals cannot get a connection");
    let lost_after = granted.elapsed();
    assert!(
        lost_after <= lease + Duration::from_millis(200),
        "{lost_after:?}"
    );
    let entered = other
        .lock("busy")
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    let entered_after = granted.elapsed();
    assert!(
        entered_after >= lease,
        "another client entered {entered_after:?} after a {lease:?} lease was granted"
    );
    assert!(entered.fencing_token() > token);
    drop(busy);
    let released = guard.release().await.unwrap_err();
    assert!(
        matches!(released, LockError::LeaseLost { .. }),
        "{released:?}"
    );
    entered.release().await.unwrap();
}

/// A pool of the user's own making (the trait is public): deadpool
/// underneath, but every connection handed out after a random 0-3 ms, so
/// that statements sent one after another on a key may reach the server in
/// another order unless the backend keeps them in order.
struct LatePool {
    inner: deadpool_postgres::Pool,
    seed: std::sync::atomic::AtomicU64,
}

impl distlock::PostgresPool for LatePool {
    fn get(
        &self,
    ) -> futures::future::BoxFuture<'_, Result<distlock::PooledClient, distlock::PoolError>> {
        // A xorshift step: no shared RNG state across awaits.
        let mut x = self
            .seed
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            | 1;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let late = Duration::from_micros(x % 3000);
        Box::pin(async move {
            tokio::time::sleep(late).await;
            let object = self.inner.get().await?;
            Ok(distlock::PooledClient::new(Object(object)))
        })
    }
}

/// A deadpool object, deref'd the whole way to the client.
struct Object(deadpool_postgres::Object);

impl std::ops::Deref for Object {
    type Target = tokio_postgres::Client;

    fn deref(&self) -> &tokio_postgres::Client {
        &self.0
    }
}

/// Acquisitions dropped at every point of their statement, on a pool that
/// hands out connections late: the rollback of an abandoned grant still runs
/// after the grant (the lock is free again at once, not at its 30 s lease),
/// and never after the same task's next acquisition (which keeps the lock: a
/// second client cannot take it while it is held).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquisitions_on_a_late_pool_are_rolled_back_in_order() {
    let fixture = Pooled::sized(Kind::Deadpool, 4);
    let connect = || async {
        LockClient::builder()
            .postgres_pool(
                LatePool {
                    inner: fixture.deadpool(),
                    seed: std::sync::atomic::AtomicU64::new(u64::from(std::process::id())),
                },
                &fixture.url("listen"),
            )
            .schema(&fixture.schema)
            .connect()
            .await
            .unwrap()
    };
    let (a, b) = (connect().await, connect().await);
    for step in 0..120u64 {
        let budget = Duration::from_micros(step * 100);
        let _ = tokio::time::timeout(budget, a.lock("late:cancel").acquire()).await;
        if step % 2 == 0 {
            // Whatever happened, the lock is free again promptly.
            let guard = b
                .lock("late:cancel")
                .wait(Duration::from_secs(5))
                .acquire()
                .await
                .unwrap_or_else(|e| panic!("cancelled at {budget:?} left the lock held: {e}"));
            guard.release().await.unwrap();
        } else {
            // The same task at once again (waiting, if the abandoned grant
            // is not rolled back yet): its hold survives the rollback.
            let guard = a
                .lock("late:cancel")
                .wait(Duration::from_secs(5))
                .acquire()
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(30)).await;
            let info = b.admin().inspect("late:cancel").await.unwrap();
            assert!(
                info.holder.is_some(),
                "cancelled at {budget:?}: the rollback deleted the next hold: {info:?}"
            );
            let other = b.lock("late:cancel").try_acquire().await;
            assert!(
                matches!(other, Ok(None)),
                "cancelled at {budget:?}: another client's try: {other:?}"
            );
            guard.release().await.unwrap();
        }
    }
}

/// A `LISTEN` address that cannot be reached is refused at connect, naming
/// it, with a pool and with `.listen_url` (it used to connect, and waiters
/// woke only at the holders' leases).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_listen_url_is_refused_at_connect() {
    let fixture = Pooled::new(Kind::Deadpool);
    let dead = "postgres://postgres@127.0.0.1:1/postgres";
    let pooled = LockClient::builder()
        .postgres_pool(fixture.deadpool(), dead)
        .schema(&fixture.schema)
        .connect()
        .await
        .unwrap_err();
    let own = LockClient::builder()
        .postgres(&fixture.url("own"))
        .listen_url(dead)
        .schema(&fixture.schema)
        .connect()
        .await
        .unwrap_err();
    for err in [pooled, own] {
        assert!(
            matches!(&err, LockError::Connect { server, .. } if server.contains("127.0.0.1:1 (the LISTEN connection)")),
            "{err:?}"
        );
    }
}

/// A pool that cannot connect fails `connect` with the pool's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_that_cannot_connect_fails_connect_with_its_reason() {
    let fixture = Pooled::new(Kind::Deadpool);
    let config =
        tokio_postgres::Config::from_str("postgres://postgres@127.0.0.1:1/postgres").unwrap();
    let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
    let pool = deadpool_postgres::Pool::builder(manager).build().unwrap();
    let err = LockClient::builder()
        .postgres_pool(pool, &fixture.url("listen"))
        .schema(&fixture.schema)
        .connect()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::Connect { source: distlock::BackendError::Postgres { message, .. }, .. }
            if message.contains("connection pool") && message.contains("refused")),
        "{err:?}"
    );
}
