//! The PostgreSQL backend behind PgBouncer in transaction pooling mode: the
//! behavioural suite with the lock's statements through PgBouncer and the
//! `LISTEN` connection direct to the server (`listen_url`); that the
//! statements really went through PgBouncer; and what happens when the
//! `LISTEN` goes through PgBouncer too.
//!
//! Skipped, saying why, when `pgbouncer` is not installed, unless
//! `DISTLOCK_REQUIRE_PGBOUNCER` is set (as CI sets it after installing it).

mod suite;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use distlock::{LockClient, LockClientBuilder};
use lock_test_support::{PgBouncer, PostgresServer};
use suite::Fixture;

/// A server and a transaction-mode PgBouncer in front of it.
struct Deployment {
    // Declared first: stopped before the server.
    bouncer: PgBouncer,
    server: PostgresServer,
}

impl Deployment {
    fn start() -> Option<Deployment> {
        let server = PostgresServer::start();
        let bouncer = PgBouncer::start_or_skip(&server)?;
        Some(Deployment { bouncer, server })
    }
}

/// The deployment of the tests running now (started again when none runs).
fn deployment() -> Option<Arc<Deployment>> {
    static SHARED: Mutex<Weak<Deployment>> = Mutex::new(Weak::new());
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(deployment) = shared.upgrade() {
        return Some(deployment);
    }
    let deployment = Arc::new(Deployment::start()?);
    *shared = Arc::downgrade(&deployment);
    Some(deployment)
}

/// A plain tokio-postgres client of `connection_string`, for the tests' own
/// statements.
async fn sql(connection_string: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(connection_string, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// Clients on one schema of their own: statements through PgBouncer, the
/// `LISTEN` connection direct to the server.
struct Bounced {
    deployment: Arc<Deployment>,
    schema: String,
}

impl Bounced {
    fn on(deployment: Arc<Deployment>) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        Bounced {
            deployment,
            schema: format!("b{}_{n}", std::process::id()),
        }
    }
}

impl Fixture for Bounced {
    const COUNTS_WAITERS: bool = false;

    async fn client_with(&self, builder: LockClientBuilder) -> LockClient {
        builder
            .postgres(&self.deployment.bouncer.url())
            .listen_url(self.deployment.server.url())
            .schema(&self.schema)
            .connect()
            .await
            .unwrap()
    }

    async fn delete_lock(&self, name: &str) {
        let deleted = sql(&self.deployment.server.connection_string())
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

/// The suite's tests run one at a time: through PgBouncer every statement
/// takes two more hops through a single-threaded process, and the suite's
/// tests with leases of 100-300 ms, two at a time on a loaded machine (load
/// average 8 on 2 cores), saw a grant answered after its lease (`LeaseLost`)
/// in 2 of 8 runs. The mutex keeps the deployment between them (one at a
/// time, the shared one of [`deployment`] would be started again for each),
/// until the last of them ends (a run of only some of them leaves it to the
/// end of the process, whose death stops its processes).
static ONE_AT_A_TIME: tokio::sync::Mutex<Option<Arc<Deployment>>> =
    tokio::sync::Mutex::const_new(None);

/// The suite's tests that have not ended yet (set by `bounced_suite!`).
static SUITE_LEFT: AtomicUsize = AtomicUsize::new(0);

/// Ends one suite test: the last one stops the kept deployment.
struct SuiteTestEnds;

impl Drop for SuiteTestEnds {
    fn drop(&mut self) {
        if SUITE_LEFT.fetch_sub(1, Ordering::SeqCst) == 1 {
            if let Ok(mut kept) = ONE_AT_A_TIME.try_lock() {
                kept.take();
            }
        }
    }
}

/// One `#[tokio::test]` per suite test on [`Bounced`], one at a time,
/// skipped when PgBouncer is not there (see the file's documentation).
macro_rules! bounced_suite {
    ($($name:ident),* $(,)?) => {
        const SUITE_TESTS: usize = [$(stringify!($name)),*].len();
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let _ = SUITE_LEFT.compare_exchange(
                    0, SUITE_TESTS, Ordering::SeqCst, Ordering::SeqCst,
                );
                // Dropped last, after the mutex's guard (even on a panic).
                let _ends = SuiteTestEnds;
                let mut kept = ONE_AT_A_TIME.lock().await;
                if kept.is_none() {
                    *kept = deployment();
                }
                let Some(deployment) = kept.clone() else { return };
                suite::$name(&Bounced::on(deployment)).await;
            }
        )*
    };
}

// Every test of the suite, one at a time on one kept server and PgBouncer
// (hence its own list: `behaviour_suite!` runs each test on a fixture of its
// own). Waiters are not counted on PostgreSQL (`COUNTS_WAITERS`).
bounced_suite!(
    exclusion_holds_for_concurrent_tasks,
    busy_lock_is_busy_for_another_owner,
    release_after_expiry_does_not_delete_new_holder,
    another_owner_cannot_renew,
    reentrant_in_scope_needs_as_many_releases,
    spawned_task_is_another_owner,
    watchdog_keeps_lock_past_lease,
    renewals_are_batched_per_period,
    fixed_lease_is_not_renewed,
    deleted_lock_is_lost_within_a_period,
    waiter_is_woken_by_release,
    waiters_of_the_holders_client_are_woken_in_turn,
    crashed_holder_is_replaced_after_its_lease,
    waiter_times_out_at_its_wait,
    wait_forever_gets_the_lock,
    cancelled_acquire_never_leaves_lock_held,
    cancelled_waiter_leaves_no_trace,
    dropped_guard_is_released_in_background,
    panicking_holder_releases,
    fencing_tokens_increase_and_survive_expiry,
    bad_input_gets_typed_errors,
    force_release_wakes_a_waiter,
    admin_counts_the_clients_waiting_for_a_lock,
    multi_lock_is_sorted_and_all_or_nothing,
    multi_lock_in_swapped_order_does_not_deadlock,
    multi_lock_never_hands_out_a_lock_lost_while_awaiting_the_others,
    current_reports_the_locks_of_the_scope,
    scope_or_lost_cancels_work_when_the_lease_is_lost,
    reentry_through_another_client_fails_at_once,
    edges_fixed_lease_out_of_range_is_invalid_config,
    edges_multi_lock_lease_out_of_range_is_invalid_config,
    edges_wait_duration_max_waits_until_release,
    edges_odd_lock_names_work_end_to_end,
    edges_bad_names_get_typed_errors_everywhere,
    edges_siblings_racing_for_one_lock_in_one_scope_exclude_each_other,
    shutdown_releases_locks_for_other_clients,
    shutdown_wakes_waiters_at_once,
    shutdown_grace_lets_bodies_finish,
    shutdown_refuses_new_locks_and_stops_renewing,
);

/// The rows of a `SHOW` command of PgBouncer's admin console, as maps of
/// column name to value.
async fn show(admin: &tokio_postgres::Client, what: &str) -> Vec<Vec<(String, String)>> {
    admin
        .simple_query(&format!("SHOW {what}"))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|message| match message {
            tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                row.columns()
                    .iter()
                    .enumerate()
                    .map(|(i, column)| {
                        (
                            column.name().to_owned(),
                            row.get(i).unwrap_or_default().to_owned(),
                        )
                    })
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

fn column<'a>(row: &'a [(String, String)], name: &str) -> &'a str {
    row.iter()
        .find(|(column, _)| column == name)
        .map(|(_, value)| value.as_str())
        .unwrap_or_else(|| panic!("no column {name} in {row:?}"))
}

/// PgBouncer's count of transactions on database `postgres`.
async fn transactions(admin: &tokio_postgres::Client) -> u64 {
    show(admin, "STATS")
        .await
        .iter()
        .find(|row| column(row, "database") == "postgres")
        .map_or(0, |row| column(row, "total_xact_count").parse().unwrap())
}

/// The lock's statements run on PgBouncer's server connections: PgBouncer
/// counts one transaction per statement, and every server session that ran
/// the client's statements is one of PgBouncer's (its client port is the
/// local port of one of PgBouncer's server connections).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_statements_go_through_pgbouncer() {
    let Some(deployment) = Deployment::start() else {
        return;
    };
    let admin = sql(&deployment.bouncer.admin_connection_string()).await;
    let direct = sql(&deployment.server.connection_string()).await;
    let client = LockClient::builder()
        .postgres(&format!(
            "{}?application_name=routed",
            deployment.bouncer.url()
        ))
        .listen_url(format!(
            "{}?application_name=routed_listen",
            deployment.server.url()
        ))
        .connect()
        .await
        .unwrap();
    let before = transactions(&admin).await;
    for _ in 0..5 {
        let guard = client.lock("b:routed").acquire().await.unwrap();
        guard.release().await.unwrap();
    }
    let after = transactions(&admin).await;
    assert!(
        after >= before + 10,
        "PgBouncer counted {} transactions for 5 acquisitions and 5 releases",
        after - before
    );
    let bouncer_ports: HashSet<i32> = show(&admin, "SERVERS")
        .await
        .iter()
        .map(|row| column(row, "local_port").parse().unwrap())
        .collect();
    let routed: Vec<i32> = direct
        .query(
            "SELECT client_port FROM pg_stat_activity WHERE application_name = 'routed'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(!routed.is_empty(), "no session ran the client's statements");
    assert!(
        routed.iter().all(|port| bouncer_ports.contains(port)),
        "sessions of the client from ports {routed:?}, PgBouncer's are {bouncer_ports:?}"
    );
}

/// How long a waiter takes to enter after the holder's release, when its
/// `LISTEN` goes direct (`listen_direct`) or through PgBouncer: the holder
/// takes the lock with a fixed lease of `LEASE` and releases it at once.
async fn wake_up_delay(deployment: &Deployment, schema: &str, listen_direct: bool) -> Duration {
    let connect = |builder: LockClientBuilder| {
        let connect = builder.postgres(&deployment.bouncer.url()).schema(schema);
        let connect = if listen_direct {
            connect.listen_url(deployment.server.url())
        } else {
            connect
        };
        connect.connect()
    };
    let holder = connect(LockClient::builder()).await.unwrap();
    let waiter = connect(LockClient::builder()).await.unwrap();
    let guard = holder
        .lock("b:listen")
        .lease(LEASE)
        .acquire()
        .await
        .unwrap();
    let waiting = tokio::spawn(async move {
        let guard = waiter
            .lock("b:listen")
            .wait(LEASE * 4)
            .acquire()
            .await
            .unwrap();
        (Instant::now(), guard)
    });
    // The waiter has tried once and listens.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let (at, got) = waiting.await.unwrap();
    got.release().await.unwrap();
    at.duration_since(released)
}

/// The holder's fixed lease in [`wake_up_delay`].
const LEASE: Duration = Duration::from_secs(9);

/// Why the `LISTEN` connection must go direct: through PgBouncer in
/// transaction mode, the `LISTEN` runs in a transaction on some pooled
/// server connection, which goes back to the pool when it ends; PostgreSQL
/// delivers a `NOTIFY` to that server session, and PgBouncer does not pass
/// it on to the waiter's client connection. Measured: the waiter hears
/// nothing and enters only when the holder's lease runs out (8.5 s after
/// the release here), while with the `LISTEN` direct it enters within
/// milliseconds of the release. (Nothing is lost but latency: waiters also
/// wake at the holder's remaining lease.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_through_pgbouncer_misses_the_release_and_a_direct_one_hears_it() {
    let Some(deployment) = Deployment::start() else {
        return;
    };
    let direct = wake_up_delay(&deployment, "listen_direct", true).await;
    let bounced = wake_up_delay(&deployment, "listen_bounced", false).await;
    eprintln!(
        "woken {direct:?} after the release with the LISTEN direct, {bounced:?} through PgBouncer"
    );
    assert!(
        direct < LEASE / 3,
        "with the LISTEN direct, the waiter took {direct:?}"
    );
    assert!(
        bounced >= LEASE / 2,
        "with the LISTEN through PgBouncer, the waiter took only {bounced:?}"
    );
}
