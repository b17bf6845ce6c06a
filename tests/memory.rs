//! The behavioural suite on the in-memory backend.

mod suite;

use distlock::{LockClient, LockClientBuilder, MemoryStore};
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
            prefix: distlock::DEFAULT_PREFIX.to_owned(),
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
            operator.admin().force_release(name).await.unwrap(),
            "{name} was not held"
        );
    }
}

behaviour_suite!(Memory::new());
family_suite!(Memory::new());
hot_suite!(Memory::new());
siblings_suite!(Memory::new());
leader_suite!(Memory::new());

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

// ----- edge cases (see tests/suite/edges.rs) -----

use std::time::Duration;

use distlock::LockError;

/// Client-wide settings out of range are `InvalidConfig { key: "*", .. }`
/// naming the value, from `LockClientBuilder::memory` (see
/// `suite::builder_setting_problems` for the ranges).
///
/// Old code: the lease (365 days + 1 s, `Duration::MAX`) and the timeouts
/// (500 µs, 1 day + 1 s, `Duration::MAX`) are accepted, a zero timeout is
/// rejected without naming its value, and braces in the key prefix are
/// accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edges_memory_builder_settings_are_range_checked() {
    let store = MemoryStore::new();
    let problems = suite::builder_setting_problems(|builder| {
        let store = store.clone();
        async move { builder.memory(store) }
    })
    .await;
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A rejected `Duration::MAX` lease leaves the shared store working: the
/// same client and other clients on the store can still lock, inspect and
/// list, and `MemoryStore::held` answers.
///
/// Old code: the acquisition panics ("overflow when adding duration to
/// instant") while holding the store's mutex, which poisons it: every later
/// call on the store, by any client, panics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edges_memory_store_survives_a_rejected_max_lease() {
    let store = MemoryStore::new();
    let client = |store: &MemoryStore| LockClient::builder().memory(store.clone()).unwrap();
    let (a, b) = (client(&store), client(&store));
    let rejected = tokio::spawn({
        let a = a.clone();
        async move { a.lock("edges:max").lease(Duration::MAX).acquire().await }
    })
    .await;
    let mut problems = Vec::new();
    match rejected {
        Ok(Err(LockError::InvalidConfig { key, reason }))
            if key == "edges:max" && reason.contains(&format!("{:?}", Duration::MAX)) => {}
        other => problems.push(format!(
            "lease(Duration::MAX): expected InvalidConfig naming the lock and the value, got {other:?}"
        )),
    }
    let later = tokio::spawn(async move {
        for (who, client) in [("the same client", &a), ("another client", &b)] {
            let guard = client
                .lock(format!("edges:max:{who}"))
                .acquire()
                .await
                .unwrap_or_else(|err| panic!("{who}: {err}"));
            assert!(client
                .admin()
                .inspect("edges:max")
                .await
                .unwrap()
                .holder
                .is_none());
            assert_eq!(client.admin().list("edges:max:").await.unwrap().len(), 1);
            guard.release().await.unwrap();
        }
        let guard = b.lock("edges:max").acquire().await.unwrap();
        guard.release().await.unwrap();
    })
    .await;
    if let Err(err) = later {
        problems.push(format!(
            "the store stopped working after the rejected lease: {err}"
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert_eq!(store.held(), 0);
    let third = client(&store);
    let guard = third.lock("edges:max").acquire().await.unwrap();
    assert_eq!(store.held(), 1);
    guard.release().await.unwrap();
}

/// A memory client built and used on one runtime keeps working on the next
/// (see `suite::client_keeps_working_on_a_second_runtime`).
///
/// Old code: (a) fails: the watchdog driver died with runtime A while the
/// client still marks it as running, so no renewal round runs on B and the
/// 300 ms lease runs out.
#[test]
fn edges_memory_client_keeps_working_on_a_second_runtime() {
    let store = MemoryStore::new();
    suite::client_keeps_working_on_a_second_runtime(
        |builder| {
            let store = store.clone();
            async move { builder.memory(store).unwrap() }
        },
        |_| None,
    );
}

/// A guard dropped where no tokio runtime runs (after its runtime shut down)
/// cannot release at once; its release waits in the client and runs as soon
/// as the client is used on a runtime again, well before the 30 s lease.
#[test]
fn a_guard_dropped_outside_any_runtime_is_released_when_its_client_is_next_used() {
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    };
    let store = MemoryStore::new();
    let client = LockClient::builder().memory(store.clone()).unwrap();
    let first = runtime();
    let guard = first
        .block_on(client.lock("edges:no-runtime").acquire())
        .unwrap();
    drop(first);
    drop(guard); // no runtime here: the release is queued
    assert_eq!(store.held(), 1);
    let started = std::time::Instant::now();
    runtime().block_on(async {
        let again = client
            .lock("edges:no-runtime")
            .wait(Duration::from_secs(5))
            .acquire()
            .await
            .expect("the queued release ran on this runtime");
        again.release().await.unwrap();
    });
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(store.held(), 0);
}

/// A waiter of the holder's own client, waiting when an operator
/// force-releases the lock, is woken by that release and takes the lock at
/// once, instead of trusting its client's holder until the watchdog's next
/// round (10 s with the default 30 s lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_of_the_holders_client_gets_a_force_released_lock_at_once() {
    let store = MemoryStore::new();
    let client = LockClient::builder().memory(store.clone()).unwrap();
    let operator = LockClient::builder().memory(store).unwrap();
    let holder = client.lock("edges:forced").acquire().await.unwrap();
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .lock("edges:forced")
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let forced = tokio::time::Instant::now();
    assert!(operator
        .admin()
        .force_release("edges:forced")
        .await
        .unwrap());
    let guard = waiter.await.unwrap().unwrap();
    assert!(
        forced.elapsed() < Duration::from_secs(2),
        "{:?}",
        forced.elapsed()
    );
    assert!(guard.fencing_token() > holder.fencing_token());
    drop(holder);
    guard.release().await.unwrap();
}

/// Clients on two different stores do not share locks, so a call chain holding
/// `x` through one may take `x` through the other: no false `HeldByOtherClient`.
#[tokio::test]
async fn the_same_name_on_another_store_is_another_lock() {
    let a = LockClient::memory();
    let b = LockClient::memory();
    let guard = a.lock("x").acquire().await.unwrap();
    let inner = guard
        .scope(async { b.lock("x").try_acquire().await })
        .await
        .expect("another store's lock `x` is free")
        .expect("try_acquire took it");
    inner.release().await.unwrap();
    guard.release().await.unwrap();
}

/// On the in-memory store as on Redis: a client of another layout than the
/// store's clients is refused with `LayoutConflict` (recording nothing),
/// connects when the mix is declared, and connects alone again once the
/// other layout is forgotten. A client built with `record_layout(false)`
/// neither records nor is refused.
/// Old code: the second client was built with a warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_another_layout_is_refused_unless_the_mix_is_declared() {
    use distlock::Layout;
    let store = MemoryStore::new();
    let native = LockClient::builder().memory(store.clone()).unwrap();
    let refused = LockClient::builder()
        .layout(Layout::Redisson)
        .memory(store.clone());
    match &refused {
        Err(LockError::LayoutConflict {
            server,
            layout,
            others,
        }) => assert_eq!(
            (server.as_str(), *layout, others.as_slice()),
            ("memory", Layout::Redisson, ["native".to_owned()].as_slice())
        ),
        other => panic!("not a layout conflict: {other:?}"),
    }
    assert_eq!(native.admin().layouts().await.unwrap(), [Layout::Native]);
    LockClient::builder()
        .layout(Layout::Redisson)
        .record_layout(false)
        .memory(store.clone())
        .unwrap();
    assert_eq!(native.admin().layouts().await.unwrap(), [Layout::Native]);
    let _migrating = LockClient::builder()
        .layout(Layout::Redisson)
        .allow_mixed_layouts(true)
        .memory(store.clone())
        .unwrap();
    assert_eq!(
        native.admin().layouts().await.unwrap(),
        [Layout::Native, Layout::Redisson]
    );
    assert!(native.admin().forget_layout(Layout::Native).await.unwrap());
    LockClient::builder()
        .layout(Layout::Redisson)
        .memory(store)
        .unwrap();
}

/// A client in Redisson's layout refuses leader election (Redisson's lock
/// hash keeps a hold count, not the fencing token a term is), naming why.
#[tokio::test]
async fn leader_election_is_refused_in_redissons_layout() {
    let client = LockClient::builder()
        .layout(distlock::Layout::Redisson)
        .memory(MemoryStore::new())
        .unwrap();
    match client
        .election("scheduler")
        .campaign(distlock::Wait::Once)
        .await
    {
        Err(distlock::LockError::Unsupported {
            key,
            backend,
            reason,
            ..
        }) => {
            assert_eq!(key, "leader:scheduler");
            assert!(backend.contains("Redisson"), "{backend}");
            assert!(reason.contains("fencing token"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // An empty role is a typed error too.
    assert!(matches!(
        client.election("").leader().await,
        Err(distlock::LockError::InvalidKey { .. })
    ));
}
