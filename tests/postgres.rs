//! The behavioural suite against a real PostgreSQL (feature `postgres`),
//! and the Postgres-only checks: the refusals of what the backend does not
//! offer yet, the schema options, tokens across clients and schemas.
//!
//! One server (`initdb` into a temporary directory, a free loopback port)
//! serves the tests that run at the same time; each test has a schema of its
//! own, so their locks never meet.

mod suite;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{LockClient, LockClientBuilder, LockError};
use lock_test_support::PostgresServer;
use suite::Fixture;

/// Clients on one schema of their own, on the shared server.
struct Postgres {
    server: Arc<PostgresServer>,
    schema: String,
}

impl Postgres {
    fn new() -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        Postgres {
            server: PostgresServer::shared(),
            schema: format!("t{}_{n}", std::process::id()),
        }
    }

    /// The server's URL, with the test's schema as the application name of
    /// its sessions (to find them in `pg_stat_activity`).
    fn url(&self) -> String {
        format!("{}?application_name={}", self.server.url(), self.schema)
    }

    /// The pids of this test's sessions whose last statement was a
    /// `LISTEN` (`listen`: true) or anything else.
    async fn sessions(&self, sql: &tokio_postgres::Client, listen: bool) -> Vec<i32> {
        sql.query(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1 \
             AND (query LIKE 'LISTEN %') = $2",
            &[&self.schema, &listen],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
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
}

impl Fixture for Postgres {
    const COUNTS_WAITERS: bool = false;

    async fn client_with(&self, builder: LockClientBuilder) -> LockClient {
        builder
            .postgres(&self.url())
            .schema(&self.schema)
            .connect()
            .await
            .unwrap()
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

// Every test of the suite. PostgreSQL shows a session only its own LISTENs, so
// the backend cannot count the clients that wait for a lock: the suite's
// waiter-count test checks the documented 0 (`COUNTS_WAITERS`).
behaviour_suite!(Postgres::new());

// Leader election, but `leader_role_lock_is_never_kept_hot`: a client that
// keeps locks hot is refused at connect on PostgreSQL (see below).
behaviour_suite!(Postgres::new();
    leader_one_at_a_time_with_rising_terms,
    leader_resignation_hands_over_at_once,
    leader_is_read_by_any_client,
    leader_observer_sees_every_change_in_order,
    leader_observers_never_see_an_older_term,
    leader_run_loop_drops_work_on_loss_and_campaigns_again,
    leader_shutdown_hands_over_at_once,
    leader_second_campaign_in_one_chain_is_refused,
    leader_dropped_leadership_resigns,
);

#[tokio::test]
async fn the_family_and_hot_locks_are_refused_with_typed_errors() {
    let fixture = Postgres::new();
    let client = fixture.client().await;
    let refused = client.fair_lock("p:fair").acquire().await.unwrap_err();
    assert!(
        matches!(&refused, LockError::Unsupported { key, backend: "PostgreSQL", .. } if key == "p:fair"),
        "{refused:?}"
    );
    let refused = client
        .read_write_lock("p:rw")
        .write()
        .acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(refused, LockError::Unsupported { .. }),
        "{refused:?}"
    );
    let hot = LockClient::builder()
        .keep_hot(Duration::from_secs(1))
        .postgres(&fixture.server.url())
        .schema(&fixture.schema)
        .connect()
        .await
        .unwrap_err();
    assert!(
        matches!(&hot, LockError::InvalidConfig { reason, .. } if reason.contains("keep_hot")),
        "{hot:?}"
    );
    let redisson = LockClient::builder()
        .layout(distlock::Layout::Redisson)
        .postgres(&fixture.server.url())
        .connect()
        .await
        .unwrap_err();
    assert!(
        matches!(&redisson, LockError::InvalidConfig { reason, .. } if reason.contains("Redisson")),
        "{redisson:?}"
    );
    let data = client.data_connection().unwrap_err();
    assert!(matches!(data, LockError::Unsupported { .. }), "{data:?}");
}

#[tokio::test]
async fn bad_schema_and_table_prefix_are_invalid_config_naming_them() {
    let fixture = Postgres::new();
    for (schema, prefix, named) in [
        ("Bad-Schema", "distlock_", "Bad-Schema"),
        ("public", "x; DROP TABLE y", "x; DROP TABLE y"),
    ] {
        let err = LockClient::builder()
            .postgres(&fixture.server.url())
            .schema(schema)
            .table_prefix(prefix)
            .connect()
            .await
            .unwrap_err();
        assert!(
            matches!(&err, LockError::InvalidConfig { reason, .. } if reason.contains(named)),
            "{err:?}"
        );
    }
    let err = LockClient::postgres("postgres://nobody@127.0.0.1:1/x?connect_timeout=bad")
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::InvalidConfig { .. }), "{err:?}");
}

#[tokio::test]
async fn an_unreachable_server_is_a_connect_error() {
    let port = lock_test_support::free_port();
    let err = LockClient::builder()
        .connect_timeout(Duration::from_secs(2))
        .postgres(&format!("postgres://postgres@127.0.0.1:{port}/postgres"))
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Connect { .. }), "{err:?}");
}

#[tokio::test]
async fn tables_are_created_once_under_the_schema_and_prefix_given() {
    let fixture = Postgres::new();
    let connect = || {
        LockClient::builder()
            .postgres(&fixture.server.url())
            .schema(&fixture.schema)
            .table_prefix("svc_")
            .connect()
    };
    // Clients connecting at once: the DDL is serialised, none fails.
    let (a, b, c) = tokio::join!(connect(), connect(), connect());
    let (a, _b, _c) = (a.unwrap(), b.unwrap(), c.unwrap());
    let guard = a.lock("p:tables").acquire().await.unwrap();
    let rows = fixture
        .sql()
        .await
        .query(
            &format!(
                "SELECT owner, token FROM {}.svc_locks WHERE key = 'lock:{{p:tables}}'",
                fixture.schema
            ),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    let token: i64 = rows[0].get(1);
    assert_eq!(u64::try_from(token).unwrap(), guard.fencing_token());
    guard.release().await.unwrap();
}

#[tokio::test]
async fn tokens_rise_past_a_lost_counter_by_the_servers_clock() {
    let fixture = Postgres::new();
    let client = fixture.client().await;
    let first = client.lock("p:floor").acquire().await.unwrap();
    let token = first.fencing_token();
    first.release().await.unwrap();
    // The counters are lost (a restore from an old backup, an asynchronous
    // standby promoted): the next token still lies above.
    fixture
        .sql()
        .await
        .execute(
            &format!("DELETE FROM {}.distlock_fences", fixture.schema),
            &[],
        )
        .await
        .unwrap();
    let next = client.lock("p:floor").acquire().await.unwrap();
    assert!(
        next.fencing_token() > token,
        "{} after {token}",
        next.fencing_token()
    );
    next.release().await.unwrap();
}

#[tokio::test]
async fn expired_rows_are_cleaned_by_later_acquisitions() {
    let fixture = Postgres::new();
    let client = fixture.client().await;
    for i in 0..40 {
        let guard = client
            .lock(format!("p:gone:{i}"))
            .lease(Duration::from_millis(300))
            .acquire()
            .await
            .unwrap();
        std::mem::forget(guard); // expires unreleased, as a crashed holder's
    }
    // Well past every lease (each taken within the last 300 ms or earlier).
    tokio::time::sleep(Duration::from_millis(600)).await;
    for i in 0..40 {
        let guard = client.lock(format!("p:new:{i}")).acquire().await.unwrap();
        guard.release().await.unwrap();
    }
    let rows: i64 = fixture
        .sql()
        .await
        .query_one(
            &format!("SELECT count(*) FROM {}.distlock_locks", fixture.schema),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(rows <= 2, "{rows} rows left of 40 expired locks");
}

#[tokio::test]
async fn a_nul_in_a_lock_name_is_invalid_key() {
    let fixture = Postgres::new();
    let client = fixture.client().await;
    let err = client.lock("a\0b").acquire().await.unwrap_err();
    assert!(
        matches!(&err, LockError::InvalidKey { key, reason } if key == "a\0b" && reason.contains("NUL")),
        "{err:?}"
    );
}

/// Terminates session `pid` (`pg_terminate_backend`).
async fn terminate(sql: &tokio_postgres::Client, pid: i32) {
    let done: bool = sql
        .query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap()
        .get(0);
    assert!(done, "session {pid} terminated");
}

/// Waits (at most 10 s) until `found` gives something.
async fn eventually<T>(mut found: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(found) = found().await {
            return found;
        }
        assert!(tokio::time::Instant::now() < deadline, "not within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The waiter's LISTEN connection is terminated while it waits: its
/// subscriber connects again and listens again, and the release that comes
/// after wakes it at once (its lease is 30 s, its wait 20 s: without the
/// new connection it would sleep until one of them ran out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_listen_connection_is_made_again_and_wakes_its_waiter() {
    let fixture = Postgres::new();
    let sql = fixture.sql().await;
    let [holder, waiter] = suite::clients::<Postgres, 2>(&fixture).await;
    let guard = holder.lock("p:listen").acquire().await.unwrap();
    let waiting = suite::spawn_waiter(waiter, "p:listen");
    let old = eventually(async || fixture.sessions(&sql, true).await.first().copied()).await;
    terminate(&sql, old).await;
    eventually(async || {
        let now = fixture.sessions(&sql, true).await;
        (!now.is_empty() && !now.contains(&old)).then_some(())
    })
    .await;
    let released = tokio::time::Instant::now();
    guard.release().await.unwrap();
    let (at, got) = waiting.await.unwrap();
    let took = at.duration_since(released);
    assert!(
        took < Duration::from_secs(5),
        "the waiter took {took:?} after the release"
    );
    got.release().await.unwrap();
}

/// The command connection is terminated between two acquisitions: the
/// next statements connect again.
#[tokio::test]
async fn a_terminated_command_connection_is_made_again() {
    let fixture = Postgres::new();
    let sql = fixture.sql().await;
    let client = fixture.client().await;
    let first = client.lock("p:command").acquire().await.unwrap();
    let token = first.fencing_token();
    first.release().await.unwrap();
    let sessions = fixture.sessions(&sql, false).await;
    assert_eq!(sessions.len(), 1, "one command connection: {sessions:?}");
    terminate(&sql, sessions[0]).await;
    // The first statement after the termination may still meet the closed
    // connection (an error); the ones after it connect again.
    let again = eventually(async || client.lock("p:command").acquire().await.ok()).await;
    assert!(again.fencing_token() > token);
    again.release().await.unwrap();
    let now = fixture.sessions(&sql, false).await;
    assert!(
        now.len() == 1 && now[0] != sessions[0],
        "{now:?} after {sessions:?}"
    );
}

/// `hold_in`: a transaction that confirmed the hold keeps the lock from
/// changing hands until it commits, even past the lease; its write then
/// commits, and the next holder gets the lock after the commit, with a
/// higher token.
#[tokio::test]
async fn hold_in_keeps_the_lock_until_the_transaction_commits() {
    let fixture = Postgres::new();
    let (client, other) = (fixture.client().await, fixture.client().await);
    let mut db = fixture.sql().await;
    let table = format!("{}.orders", fixture.schema);
    db.batch_execute(&format!(
        "CREATE TABLE {table} (id int PRIMARY KEY, state text NOT NULL); \
         INSERT INTO {table} VALUES (42, 'new')"
    ))
    .await
    .unwrap();
    let guard = client
        .lock("p:order:42")
        .lease(Duration::from_millis(400))
        .acquire()
        .await
        .unwrap();
    let tx = db.transaction().await.unwrap();
    guard.hold_in(&tx).await.unwrap();
    let committed = Arc::new(Mutex::new(None::<std::time::Instant>));
    let taker = tokio::spawn(async move {
        let next = other
            .lock("p:order:42")
            .wait(Duration::from_secs(30))
            .acquire()
            .await
            .unwrap();
        (std::time::Instant::now(), next.fencing_token())
    });
    // Well past the 400 ms lease: the lock cannot change hands while `tx` is open.
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(
        !taker.is_finished(),
        "the lock changed hands under an open hold_in"
    );
    tx.execute(
        &format!("UPDATE {table} SET state = 'paid' WHERE id = 42"),
        &[],
    )
    .await
    .unwrap();
    *committed.lock().unwrap() = Some(std::time::Instant::now());
    tx.commit().await.unwrap();
    let (taken_at, token) = taker.await.unwrap();
    assert!(taken_at >= committed.lock().unwrap().unwrap());
    assert!(token > guard.fencing_token());
    let state: String = db
        .query_one(&format!("SELECT state FROM {table} WHERE id = 42"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(state, "paid");
}

/// `hold_in` refuses a lease that ran out, a lock taken over by another
/// owner, and a backend that is not PostgreSQL, each with its typed error.
#[tokio::test]
async fn hold_in_refuses_a_lost_lease_a_new_holder_and_other_backends() {
    let fixture = Postgres::new();
    let (client, other) = (fixture.client().await, fixture.client().await);
    let mut db = fixture.sql().await;
    let expired = client
        .lock("p:hold:expired")
        .lease(Duration::from_millis(200))
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let tx = db.transaction().await.unwrap();
    let err = expired.hold_in(&tx).await.unwrap_err();
    assert!(
        matches!(&err, LockError::LeaseLost { key, .. } if key == "p:hold:expired"),
        "{err:?}"
    );
    tx.rollback().await.unwrap();
    let next = other
        .lock("p:hold:expired")
        .acquire()
        .await
        .expect("free after the lease");
    let tx = db.transaction().await.unwrap();
    let err = expired.hold_in(&tx).await.unwrap_err();
    assert!(matches!(err, LockError::LeaseLost { .. }), "{err:?}");
    next.hold_in(&tx).await.unwrap();
    tx.commit().await.unwrap();
    next.release().await.unwrap();
    let memory = LockClient::memory();
    let guard = memory.lock("p:hold:memory").acquire().await.unwrap();
    let tx = db.transaction().await.unwrap();
    let err = guard.hold_in(&tx).await.unwrap_err();
    assert!(
        matches!(&err, LockError::Unsupported { key, primitive: "hold_in", .. } if key == "p:hold:memory"),
        "{err:?}"
    );
}

/// A role the server refuses is `LockError::Authentication` naming the
/// server's SQLSTATE; a statement's error is `BackendError::Postgres` with
/// its SQLSTATE.
#[tokio::test]
async fn server_errors_are_typed_with_their_sqlstate() {
    let fixture = Postgres::new();
    let url = format!(
        "postgres://nobody_here@127.0.0.1:{}/postgres",
        fixture.server.port()
    );
    let err = LockClient::postgres(&url).await.unwrap_err();
    assert!(
        matches!(&err, LockError::Authentication { message, .. } if message.contains("28000")),
        "{err:?}"
    );
    // The lock table dropped behind the client's back (an operator's
    // mistake): the acquisition's statement fails with SQLSTATE 42P01.
    let client = fixture.client().await;
    fixture
        .sql()
        .await
        .batch_execute(&format!("DROP TABLE {}.distlock_locks", fixture.schema))
        .await
        .unwrap();
    let err = client.lock("p:typed").acquire().await.unwrap_err();
    assert!(
        matches!(
            &err,
            LockError::Backend {
                key,
                source: distlock::BackendError::Postgres { code: Some(code), .. },
                ..
            } if key == "p:typed" && code == "42P01"
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("42P01") || format!("{err:?}").contains("42P01"));
}

/// `sslmode=require`: the connections (the command one and the LISTEN one)
/// are TLS, verified against the builder's root certificate; a server the
/// roots do not vouch for is refused; without sslmode the connections stay
/// plain even on a server that offers TLS.
#[tokio::test]
async fn sslmode_require_connects_with_verified_tls() {
    let server = PostgresServer::start_tls();
    let ca = server.ca_cert_pem().unwrap();
    let url = format!(
        "{}?sslmode=require&application_name=tls_probe",
        server.url()
    );
    let client = LockClient::builder()
        .tls_root_certificate(ca)
        .postgres(&url)
        .connect()
        .await
        .unwrap();
    let waiter = {
        let guard = client.lock("p:tls").acquire().await.unwrap();
        let other = client.clone();
        let waiter = tokio::spawn(async move {
            other
                .lock("p:tls")
                .wait(Duration::from_secs(20))
                .acquire()
                .await
                .map(|g| g.fencing_token())
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let token = guard.fencing_token();
        guard.release().await.unwrap();
        (waiter, token)
    };
    let started = std::time::Instant::now();
    let next = waiter.0.await.unwrap().unwrap();
    assert!(next > waiter.1);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "woken by the release"
    );
    let (sql, connection) =
        tokio_postgres::connect(&server.connection_string(), tokio_postgres::NoTls)
            .await
            .unwrap();
    tokio::spawn(connection);
    let tls_sessions: i64 = sql
        .query_one(
            "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a ON a.pid = s.pid \
             WHERE a.application_name = 'tls_probe' AND s.ssl",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        tls_sessions >= 2,
        "command and LISTEN connections over TLS: {tls_sessions}"
    );
    // The system's roots do not vouch for the test CA: refused.
    let refused = LockClient::postgres(&url).await.unwrap_err();
    assert!(
        matches!(
            refused,
            LockError::Connect { .. } | LockError::InvalidConfig { .. }
        ),
        "{refused:?}"
    );
    // Without sslmode: plain TCP, even though the server offers TLS.
    let plain_url = format!("{}?application_name=plain_probe", server.url());
    let plain = LockClient::postgres(&plain_url).await.unwrap();
    plain
        .lock("p:plain")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let plain_tls: i64 = sql
        .query_one(
            "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a ON a.pid = s.pid \
             WHERE a.application_name = 'plain_probe' AND s.ssl",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(plain_tls, 0);
}

/// A command connection ended by the server while idle (an operator's
/// `pg_terminate_backend`, an `idle_session_timeout`) before the client
/// noticed: the next acquisition (and read) is sent again on a new
/// connection instead of failing.
#[tokio::test]
async fn a_connection_ended_while_idle_is_replaced_for_the_next_statement() {
    let fixture = Postgres::new();
    let client = fixture.client().await;
    let sql = fixture.sql().await;
    for round in 0..10 {
        let guard = client.lock("p:idle").acquire().await.unwrap();
        guard.release().await.unwrap();
        for pid in fixture.sessions(&sql, false).await {
            let _ = sql
                .query_one("SELECT pg_terminate_backend($1)", &[&pid])
                .await
                .unwrap();
        }
        // At once: the client has not read the server's goodbye yet.
        let guard = client.lock("p:idle").acquire().await;
        assert!(guard.is_ok(), "round {round}: {guard:?}");
        let info = client.admin().inspect("p:idle").await.unwrap();
        assert!(info.holder.is_some());
        guard.unwrap().release().await.unwrap();
    }
}

/// Inside a `#[distributed_lock]` body the guard is the attribute's: the
/// hold is confirmed through `distlock::current()`, with the same answers.
#[tokio::test]
async fn hold_in_works_from_the_current_lock_of_a_scope() {
    let fixture = Postgres::new();
    let client = fixture.client().await;
    let mut db = fixture.sql().await;
    let guard = client
        .lock("p:current")
        .lease(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    let tx = db.transaction().await.unwrap();
    guard
        .scope(async { distlock::current().unwrap().hold_in(&tx).await })
        .await
        .unwrap();
    tx.commit().await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let tx = db.transaction().await.unwrap();
    let err = guard
        .scope(async { distlock::current().unwrap().hold_in(&tx).await })
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::LeaseLost { .. }), "{err:?}");
}
