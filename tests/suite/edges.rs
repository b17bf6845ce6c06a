//! Edge cases found by a hostile user, pinned on every backend: duration
//! ranges, odd lock names, sibling re-entry, bad input. Each test is run per
//! backend by `behaviour_suite!` (see `mod.rs`); backend-specific edge tests
//! (runtimes, server faults, key layout) live next to their fixture.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::{LockClient, LockClientBuilder, LockError, LockGuard};
use tokio::time::Instant;

use super::{client_with_lease, clients, Fixture};

const DAY: Duration = Duration::from_secs(24 * 60 * 60);
const YEAR: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// How an acquisition ended, with a panic turned into a value (so that one
/// test can report every offending input, and a panic in the library is a
/// failure of the assertion, not of the test harness).
#[derive(Debug)]
enum Outcome<T> {
    Done(Result<T, LockError>),
    Panicked(String),
}

/// Runs `fut` in its own task and reports a panic in it as `Panicked`.
async fn run_task<T, F>(fut: F) -> Outcome<T>
where
    T: Send + 'static,
    F: std::future::Future<Output = Result<T, LockError>> + Send + 'static,
{
    match tokio::spawn(fut).await {
        Ok(result) => Outcome::Done(result),
        Err(err) if err.is_panic() => {
            let payload = err.into_panic();
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "<non-string panic>".into());
            Outcome::Panicked(message)
        }
        Err(err) => Outcome::Panicked(format!("task failed: {err}")),
    }
}

/// Checks that `outcome` is `InvalidConfig` for a key in `keys` whose reason
/// names `value` (formatted with `{:?}`); returns the problem otherwise.
fn invalid_config_problem<T: std::fmt::Debug>(
    what: &str,
    value: Duration,
    keys: &[&str],
    outcome: &Outcome<T>,
) -> Option<String> {
    let shown = format!("{value:?}");
    match outcome {
        Outcome::Done(Err(LockError::InvalidConfig { key, reason }))
            if keys.contains(&key.as_str()) && reason.contains(&shown) =>
        {
            None
        }
        Outcome::Done(Err(err @ LockError::InvalidConfig { .. })) => Some(format!(
            "{what}({shown}): InvalidConfig must name one of {keys:?} and the value {shown}: {err:?}"
        )),
        other => Some(format!(
            "{what}({shown}): expected InvalidConfig, got {other:?}"
        )),
    }
}

/// Out-of-range fixed leases (`Lock::lease`) are rejected with
/// `InvalidConfig { key: <lock name>, reason naming the value }`, never a
/// panic, and leave nothing held; 10 ms and 365 days are accepted.
///
/// Old code: 1 ms, 9 ms and 365 days + 1 s are accepted; `Duration::MAX`
/// panics ("overflow when adding duration to instant") on the memory store
/// (poisoning it) and, on Redis, makes the acquire script fail after its
/// HSET (a `WrongType` error, the lock key left behind without a TTL).
pub async fn edges_fixed_lease_out_of_range_is_invalid_config<F: Fixture>(fixture: &F) {
    let [a, b] = clients::<F, 2>(fixture).await;
    let name = "edges:lease-range";
    let mut problems = Vec::new();
    for lease in [
        Duration::ZERO,
        Duration::from_millis(1),
        Duration::from_millis(9),
        YEAR + Duration::from_secs(1),
        Duration::MAX,
    ] {
        let client = a.clone();
        let outcome = run_task(async move { client.lock(name).lease(lease).acquire().await }).await;
        problems.extend(invalid_config_problem("lease", lease, &[name], &outcome));
        if let Outcome::Done(Ok(guard)) = outcome {
            let _ = guard.release().await;
        }
    }
    // Nothing was left held by a rejected lease: another owner gets it at once.
    match run_task({
        let b = b.clone();
        async move { b.lock(name).try_acquire().await }
    })
    .await
    {
        Outcome::Done(Ok(Some(guard))) => guard.release().await.unwrap(),
        other => problems.push(format!(
            "{name} is not free after the rejected leases: {other:?}"
        )),
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    // The bounds themselves are accepted. (10 ms may run out before a
    // Redlock quorum answers: only "not rejected as invalid" is asserted.)
    let short = a
        .lock("edges:lease-range:10ms")
        .lease(Duration::from_millis(10))
        .acquire()
        .await;
    assert!(
        !matches!(short, Err(LockError::InvalidConfig { .. })),
        "a 10 ms lease was rejected: {short:?}"
    );
    if let Ok(guard) = short {
        let _ = guard.release().await;
    }
    let long = a
        .lock("edges:lease-range:year")
        .lease(YEAR)
        .acquire()
        .await
        .expect("a lease of 365 days is accepted");
    let ttl = a
        .admin()
        .inspect("edges:lease-range:year")
        .await
        .unwrap()
        .holder
        .expect("held")
        .ttl
        .expect("a lease");
    assert!(ttl > YEAR - DAY, "a 365-day lease has a TTL of {ttl:?}");
    long.release().await.unwrap();
}

/// The same range on `MultiLock::lease`: `InvalidConfig` naming one of its
/// locks and the value, nothing held afterwards; the bounds are accepted.
///
/// Old code: as for `Lock::lease` (accepted, or a panic for `Duration::MAX`).
pub async fn edges_multi_lock_lease_out_of_range_is_invalid_config<F: Fixture>(fixture: &F) {
    let [a, b] = clients::<F, 2>(fixture).await;
    let names = ["edges:multi-range:1", "edges:multi-range:2"];
    let mut problems = Vec::new();
    for lease in [
        Duration::ZERO,
        Duration::from_millis(1),
        Duration::from_millis(9),
        YEAR + Duration::from_secs(1),
        Duration::MAX,
    ] {
        let client = a.clone();
        let outcome =
            run_task(async move { client.lock_all(names).lease(lease).acquire().await }).await;
        problems.extend(invalid_config_problem(
            "multi-lock lease",
            lease,
            &names,
            &outcome,
        ));
        if let Outcome::Done(Ok(guard)) = outcome {
            let _ = guard.release().await;
        }
    }
    for name in names {
        match run_task({
            let b = b.clone();
            async move { b.lock(name).try_acquire().await }
        })
        .await
        {
            Outcome::Done(Ok(Some(guard))) => guard.release().await.unwrap(),
            other => problems.push(format!(
                "{name} is not free after the rejected multi-lock leases: {other:?}"
            )),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let long = a
        .lock_all(names)
        .lease(YEAR)
        .acquire()
        .await
        .expect("a multi-lock lease of 365 days is accepted");
    assert!(long.is_held());
    long.release().await.unwrap();
    let short = a
        .lock_all(names)
        .lease(Duration::from_millis(10))
        .acquire()
        .await;
    assert!(
        !matches!(short, Err(LockError::InvalidConfig { .. })),
        "a 10 ms multi-lock lease was rejected: {short:?}"
    );
    if let Ok(guard) = short {
        let _ = guard.release().await;
    }
}

/// `wait(Duration::MAX)` on a busy lock waits as long as it takes: no panic,
/// and the waiter gets the lock when its holder releases it.
/// `wait(Duration::ZERO)` tries once: `Busy` (already holds on the old code).
///
/// Old code: the waiter panics with "overflow when adding duration to instant".
pub async fn edges_wait_duration_max_waits_until_release<F: Fixture>(fixture: &F) {
    let [a, b] = clients::<F, 2>(fixture).await;
    let name = "edges:wait-max";
    let guard = a.lock(name).acquire().await.unwrap();
    match b.lock(name).wait(Duration::ZERO).acquire().await {
        Err(LockError::Busy { key }) => assert_eq!(key, name),
        other => panic!("wait(ZERO) on a busy lock: expected Busy, got {other:?}"),
    }
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            let guard = b.lock(name).wait(Duration::MAX).acquire().await;
            (Instant::now(), guard)
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiter.is_finished(),
        "wait(Duration::MAX) returned while the lock was held: {:?}",
        waiter.await
    );
    let released = Instant::now();
    guard.release().await.unwrap();
    let (acquired, got) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("wait(Duration::MAX) was not woken by the release within 10 s")
        .expect("wait(Duration::MAX) must not panic");
    let got = got.expect("wait(Duration::MAX) gets the lock once it is released");
    assert!(
        acquired - released < Duration::from_secs(5),
        "woken {:?} after the release",
        acquired - released
    );
    got.release().await.unwrap();
}

/// Lock names with hash-tag braces, `%`, non-ASCII, spaces and newlines.
/// `%7D` must stay a different lock from `}` (names are escaped, not decoded).
const ODD_NAMES: [&str; 9] = [
    "}x",
    "{",
    "}",
    "a}b{c",
    "%7D",
    "50%",
    "über 🔒",
    "with space",
    "line\nbreak",
];

/// Every odd name works end to end: acquire, another client is `Busy`, a
/// waiter is woken by the release (well before the 30 s lease), `inspect` and
/// `list` report the original name, release works. `}` and `%7D` are two
/// different locks.
///
/// Old code: passes on memory, standalone, Sentinel and Redlock; on the
/// cluster `}x` and `}` fail with CROSSSLOT (their keys hash to different
/// slots).
pub async fn edges_odd_lock_names_work_end_to_end<F: Fixture>(fixture: &F) {
    let [a, b, c] = clients::<F, 3>(fixture).await;
    for name in ODD_NAMES {
        let guard = a
            .lock(name)
            .lease(Duration::from_secs(30))
            .acquire()
            .await
            .unwrap_or_else(|err| panic!("acquiring {name:?}: {err:?}"));
        assert_eq!(guard.key(), name);
        match b.lock(name).acquire().await {
            Err(LockError::Busy { key }) => assert_eq!(key, name),
            other => panic!("{name:?} held: expected Busy, got {other:?}"),
        }
        let info = b
            .admin()
            .inspect(name)
            .await
            .unwrap_or_else(|err| panic!("inspect({name:?}): {err:?}"));
        assert_eq!(info.name, name, "inspect reports the original name");
        let holder = info
            .holder
            .unwrap_or_else(|| panic!("inspect({name:?}) sees no holder"));
        assert_eq!(holder.owner, guard.owner(), "{name:?}");
        assert_eq!(holder.fencing_token, guard.fencing_token(), "{name:?}");
        let listed = b
            .admin()
            .list("")
            .await
            .unwrap_or_else(|err| panic!("list(\"\") with {name:?} held: {err:?}"));
        let entry = listed
            .iter()
            .find(|info| info.name == name)
            .unwrap_or_else(|| {
                let names: Vec<&str> = listed.iter().map(|i| i.name.as_str()).collect();
                panic!("list(\"\") does not report {name:?}: {names:?}")
            });
        assert_eq!(
            entry.holder.as_ref().map(|h| h.owner.as_str()),
            Some(guard.owner())
        );
        let by_prefix = b.admin().list(name).await.unwrap();
        assert!(
            by_prefix.iter().any(|info| info.name == name),
            "list({name:?}) does not report it: {by_prefix:?}"
        );

        let waiter = tokio::spawn({
            let c = c.clone();
            async move {
                let guard = c
                    .lock(name)
                    .wait(Duration::from_secs(20))
                    .acquire()
                    .await
                    .unwrap_or_else(|err| panic!("waiting for {name:?}: {err:?}"));
                (Instant::now(), guard)
            }
        });
        tokio::time::sleep(Duration::from_millis(150)).await;
        let released = Instant::now();
        guard
            .release()
            .await
            .unwrap_or_else(|err| panic!("releasing {name:?}: {err:?}"));
        let (acquired, next) = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .unwrap_or_else(|_| panic!("the waiter of {name:?} was not woken within 10 s"))
            .unwrap();
        assert!(
            acquired - released < Duration::from_secs(3),
            "the waiter of {name:?} was woken {:?} after the release (lease 30 s)",
            acquired - released
        );
        next.release().await.unwrap();
        assert!(
            b.admin().inspect(name).await.unwrap().holder.is_none(),
            "{name:?} still held after its release"
        );
    }

    // `%7D` is not `}`: both can be held at once, by different owners.
    let brace = a.lock("}").acquire().await.unwrap();
    let escaped = b
        .lock("%7D")
        .acquire()
        .await
        .expect("`%7D` is another lock than `}`");
    assert_eq!(
        a.admin().inspect("}").await.unwrap().holder.unwrap().owner,
        brace.owner()
    );
    assert_eq!(
        a.admin()
            .inspect("%7D")
            .await
            .unwrap()
            .holder
            .unwrap()
            .owner,
        escaped.owner()
    );
    let listed: Vec<String> = a
        .admin()
        .list("")
        .await
        .unwrap()
        .into_iter()
        .map(|info| info.name)
        .filter(|name| name == "}" || name == "%7D")
        .collect();
    assert_eq!(listed, ["%7D", "}"], "sorted by name, each once");
    brace.release().await.unwrap();
    assert!(
        escaped.is_held() && c.lock("%7D").try_acquire().await.unwrap().is_none(),
        "releasing `}}` touched `%7D`"
    );
    escaped.release().await.unwrap();
}

/// Every call that takes a lock name answers bad input with a typed error:
/// the empty name and names over 1024 bytes are `InvalidKey` for `lock`,
/// `force_release` and `inspect`; `list` with a 2000-byte prefix is
/// `Ok(empty)` (or `InvalidKey`); `lock_all` of no names or with an empty name
/// is `InvalidKey` and leaves nothing held. A 1024-byte name is accepted.
///
/// Old code: holds (a regression guard).
pub async fn edges_bad_names_get_typed_errors_everywhere<F: Fixture>(fixture: &F) {
    let [a, b] = clients::<F, 2>(fixture).await;
    let long = format!("edges:{}", "x".repeat(1100));
    for name in ["", long.as_str()] {
        let shown = &name[..name.len().min(20)];
        match a.lock(name).acquire().await {
            Err(LockError::InvalidKey { .. }) => {}
            other => panic!("lock({shown:?}..).acquire(): expected InvalidKey, got {other:?}"),
        }
        match a.admin().force_release(name).await {
            Err(LockError::InvalidKey { .. }) => {}
            other => panic!("force_release({shown:?}..): expected InvalidKey, got {other:?}"),
        }
        match a.admin().inspect(name).await {
            Err(LockError::InvalidKey { .. }) => {}
            other => panic!("inspect({shown:?}..): expected InvalidKey, got {other:?}"),
        }
    }
    let max = "m".repeat(1024);
    let guard = a
        .lock(max.clone())
        .acquire()
        .await
        .expect("a 1024-byte name is accepted");
    assert_eq!(
        a.admin().inspect(&max).await.unwrap().holder.unwrap().owner,
        guard.owner()
    );
    guard.release().await.unwrap();
    match a.lock(format!("{max}m")).acquire().await {
        Err(LockError::InvalidKey { .. }) => {}
        other => panic!("a 1025-byte name: expected InvalidKey, got {other:?}"),
    }

    match a.admin().list(&"p".repeat(2000)).await {
        Ok(listed) => assert!(listed.is_empty(), "{listed:?}"),
        Err(LockError::InvalidKey { .. }) => {}
        Err(other) => panic!("list(<2000 bytes>): expected Ok(empty), got {other:?}"),
    }

    match a.lock_all(Vec::<String>::new()).acquire().await {
        Err(LockError::InvalidKey { .. }) => {}
        other => panic!("lock_all([]): expected InvalidKey, got {other:?}"),
    }
    for names in [
        vec!["edges:bad:a".to_owned(), String::new()],
        vec!["edges:bad:a".to_owned(), long.clone()],
    ] {
        match a.lock_all(names).acquire().await {
            Err(LockError::InvalidKey { .. }) => {}
            other => panic!("lock_all with a bad name: expected InvalidKey, got {other:?}"),
        }
        let free = b
            .lock("edges:bad:a")
            .try_acquire()
            .await
            .unwrap()
            .expect("a failed lock_all left `edges:bad:a` held");
        free.release().await.unwrap();
    }
    assert_eq!(a.stats().watched_locks, 0);
}

/// Sibling futures of one scope that try a lock new to the scope at the
/// same moment are different owners: exactly one gets it, the other finds
/// it busy, and the one held is renewed by the watchdog like any other
/// (client lease 300 ms).
///
/// The race runs once with `tokio::join!` in one task, then many times (up
/// to 5000 rounds or 2.5 s) on two threads released together by a spin
/// barrier and polling without sleeping, each round on a fresh name, so that
/// both acquisitions really start at once (neither holds yet). Each round
/// must have exactly one winner, and `watched_locks` must count its lock;
/// every tenth winner's guard (and any round that failed that check) is
/// kept, the others are released. After 2 s every kept lock must still be
/// held (another client gets `Busy`) and counted.
///
/// Old code: both siblings got the lock, as the scope's one owner (the
/// second re-entered the first's hold, or the store granted both requests
/// of that owner).
pub async fn edges_siblings_racing_for_one_lock_in_one_scope_exclude_each_other<F: Fixture>(
    fixture: &F,
) {
    const MAX_ROUNDS: usize = 5000;
    const MIN_ROUNDS: usize = 200;
    const KEEP_EVERY: usize = 10;
    let lease = Duration::from_millis(300);
    let client = client_with_lease(fixture, lease).await;
    let other = fixture.client().await;
    let outer = Arc::new(client.lock("edges:siblings:outer").acquire().await.unwrap());

    let mut kept: Vec<(String, LockGuard)> = Vec::new();
    let joined = "edges:siblings:joined".to_owned();
    let (first, second) = outer
        .scope(async {
            tokio::join!(
                client.lock(joined.clone()).try_acquire(),
                client.lock(joined.clone()).try_acquire()
            )
        })
        .await;
    let winners: Vec<LockGuard> = [first.unwrap(), second.unwrap()]
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(winners.len(), 1, "both siblings of a join! got the lock");
    for winner in winners {
        assert_eq!(winner.hold_count(), 1);
        kept.push((joined.clone(), winner));
    }
    assert_eq!(client.stats().watched_locks, 2, "{:?}", client.stats());

    // Two threads, each trying the round's name in the outer scope. Thread
    // 0 decides (before a barrier, read by both after it) when to stop, and
    // checks `watched_locks` once both tried the round's lock.
    let arrived = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let missed = Arc::new(AtomicBool::new(false));
    let deadline = std::time::Instant::now() + Duration::from_millis(2500);
    let handle = tokio::runtime::Handle::current();
    let racer = |index: usize| {
        let (client, outer) = (client.clone(), outer.clone());
        let (arrived, stop, missed) = (arrived.clone(), stop.clone(), missed.clone());
        let handle = handle.clone();
        tokio::task::spawn_blocking(move || {
            let mut phase = 0;
            let mut barrier = || {
                phase += 1;
                spin_barrier(&arrived, 2 * phase);
            };
            // Locks kept from earlier rounds that the watchdog counts.
            let mut counted = 2; // the outer lock and the joined one
            let mut kept = Vec::new();
            let mut wins = Vec::new();
            let mut uncounted = Vec::new();
            for round in 0..MAX_ROUNDS {
                if index == 0 && round >= MIN_ROUNDS && std::time::Instant::now() > deadline {
                    stop.store(true, Ordering::Release);
                }
                barrier();
                if stop.load(Ordering::Acquire) {
                    break;
                }
                let name = format!("edges:siblings:{round}");
                let guard = {
                    let _runtime = handle.enter();
                    busy_poll(outer.scope(client.lock(name.clone()).try_acquire())).unwrap()
                };
                wins.push(guard.is_some());
                barrier();
                if index == 0 {
                    let watched = client.stats().watched_locks;
                    let miss = watched != counted + 1;
                    if miss {
                        uncounted.push(format!(
                            "{name}: watched_locks {watched}, expected {}",
                            counted + 1
                        ));
                    }
                    missed.store(miss, Ordering::Release);
                }
                barrier();
                let miss = missed.load(Ordering::Acquire);
                if miss || round % KEEP_EVERY == 0 {
                    counted += usize::from(!miss);
                    kept.extend(guard.map(|guard| (name, guard)));
                } else if let Some(guard) = guard {
                    handle.block_on(guard.release()).unwrap();
                }
            }
            (kept, wins, uncounted)
        })
    };
    let (left, right) = tokio::join!(racer(0), racer(1));
    let ((left, left_wins, uncounted), (right, right_wins, _)) = (left.unwrap(), right.unwrap());
    assert_eq!(left_wins.len(), right_wins.len());
    let shared: Vec<usize> = (0..left_wins.len())
        .filter(|&round| left_wins[round] == right_wins[round])
        .collect();
    assert!(
        shared.is_empty(),
        "{} of {} rounds without exactly one winner (both won: {}), e.g. rounds {:?}",
        shared.len(),
        left_wins.len(),
        shared.iter().filter(|&&round| left_wins[round]).count(),
        &shared[..shared.len().min(5)]
    );
    for (name, guard) in left.into_iter().chain(right) {
        assert_eq!(guard.hold_count(), 1, "{name}");
        kept.push((name, guard));
    }

    tokio::time::sleep(Duration::from_secs(2)).await; // ~6.7 leases
    let mut expired = Vec::new();
    for (name, guard) in &kept {
        let taken = other.lock(name.clone()).try_acquire().await.unwrap();
        if !guard.is_held() || taken.is_some() {
            expired.push(name.clone());
        }
        if let Some(taken) = taken {
            taken.release().await.unwrap();
        }
    }
    assert!(
        uncounted.is_empty() && expired.is_empty(),
        "locks won by one of two racing siblings and not registered with the watchdog:\n\
         {} rounds right after acquiring: {:?}\n\
         {} of {} kept locks expired within 2 s: {:?}",
        uncounted.len(),
        &uncounted[..uncounted.len().min(5)],
        expired.len(),
        kept.len(),
        &expired[..expired.len().min(5)]
    );
    assert_eq!(
        client.stats().watched_locks,
        kept.len() + 1,
        "{:?}",
        client.stats()
    );
    for (_, guard) in kept {
        guard.release().await.unwrap();
    }
    Arc::try_unwrap(outer)
        .expect("the racers are done")
        .release()
        .await
        .unwrap();
    assert_eq!(client.stats().watched_locks, 0);
}

/// Polls `fut` to completion on this thread without ever sleeping (a no-op
/// waker, yielding the CPU between polls): two racers polling this way see
/// their replies within microseconds of each other, instead of one futex
/// wake-up apart. Needs the runtime entered (for timers). Panics after 30 s.
fn busy_poll<F: std::future::Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let started = std::time::Instant::now();
    loop {
        if let std::task::Poll::Ready(output) = fut.as_mut().poll(&mut cx) {
            return output;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "an acquisition did not finish within 30 s"
        );
        std::thread::yield_now();
    }
}

/// Blocks until `target` arrivals were counted (this one included): spins
/// first, so that the threads leave together, then yields.
/// Panics after 30 s (the other thread failed), so a failure never hangs.
fn spin_barrier(arrived: &AtomicUsize, target: usize) {
    arrived.fetch_add(1, Ordering::AcqRel);
    let started = std::time::Instant::now();
    let mut spins = 0u32;
    while arrived.load(Ordering::Acquire) < target {
        if spins < 20_000 {
            spins += 1;
            std::hint::spin_loop();
        } else {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the other racer never arrived (it failed)"
            );
            std::thread::yield_now();
        }
    }
}

/// Checks the client-wide settings of `LockClientBuilder` against their
/// ranges, building each through `build` (`memory(..)`, `connect(..)`):
/// the watchdog lease must be 30 ms ..= 365 days, `response_timeout` and
/// `connect_timeout` 1 ms ..= 1 day; a key prefix must not contain `{` or
/// `}`. (The options of one topology, `sync_replicas` and `node_timeout`,
/// are checked where they apply: `tests/edges_redis.rs`.) Out of range is
/// `InvalidConfig { key: "*", reason naming the value }` (never a panic); a
/// bound is not rejected as invalid (it may still fail to connect: a 1 ms
/// response timeout). Returns every problem found.
pub async fn builder_setting_problems<B, Fut>(build: B) -> Vec<String>
where
    B: Fn(LockClientBuilder) -> Fut,
    Fut: std::future::Future<Output = Result<LockClient, LockError>> + Send + 'static,
{
    type Setting = fn(LockClientBuilder, Duration) -> LockClientBuilder;
    let timeouts_bad = [
        Duration::ZERO,
        Duration::from_micros(500),
        DAY + Duration::from_secs(1),
        Duration::MAX,
    ];
    let timeouts_ok = [Duration::from_millis(1), DAY];
    let settings: Vec<(&str, Setting, Vec<Duration>, Vec<Duration>)> = vec![
        (
            "lease",
            |b, d| b.lease(d),
            vec![
                Duration::ZERO,
                Duration::from_millis(29),
                YEAR + Duration::from_secs(1),
                Duration::MAX,
            ],
            vec![Duration::from_millis(30), YEAR],
        ),
        (
            "response_timeout",
            |b, d| b.response_timeout(d),
            timeouts_bad.to_vec(),
            timeouts_ok.to_vec(),
        ),
        (
            "connect_timeout",
            |b, d| b.connect_timeout(d),
            timeouts_bad.to_vec(),
            timeouts_ok.to_vec(),
        ),
    ];
    let mut problems = Vec::new();
    for (what, set, bad, good) in settings {
        for value in bad {
            let outcome = run_task(build(set(LockClient::builder(), value))).await;
            problems.extend(invalid_config_problem(what, value, &["*"], &outcome));
        }
        for value in good {
            match run_task(build(set(LockClient::builder(), value))).await {
                Outcome::Done(Ok(_)) => {}
                Outcome::Done(Err(err @ LockError::InvalidConfig { .. })) => {
                    problems.push(format!("{what}({value:?}) is in range but rejected: {err}"))
                }
                // Connecting within a 1 ms timeout may fail; that is no
                // range check.
                Outcome::Done(Err(_)) => {}
                Outcome::Panicked(message) => {
                    problems.push(format!("{what}({value:?}) panicked: {message}"))
                }
            }
        }
    }
    for prefix in ["a{b}:", "{", "}", "lock:}"] {
        match run_task(build(LockClient::builder().key_prefix(prefix))).await {
            Outcome::Done(Err(LockError::InvalidConfig { key, .. })) if key == "*" => {}
            other => problems.push(format!(
                "key_prefix({prefix:?}): expected InvalidConfig {{ key: \"*\" }}, got {other:?}"
            )),
        }
    }
    problems
}

/// A runtime of its own, as an application that builds one per phase would.
fn one_worker_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// A client built and used on runtime A (a waiter waits once, so the wake-up
/// subscriber starts there; a watchdog lock is acquired and released, so the
/// watchdog starts there) keeps working on runtime B once A is dropped:
///
/// (a) a watchdog lock (client lease 300 ms) held for 2 s is renewed:
///     `renewal_rounds` grows, `is_held()` stays true, another client cannot
///     take it and its TTL stays above zero (`inspect`, and `redis_ttl_ms`
///     when given: the lock's Redis `PTTL`);
/// (b) a waiter on B for a lock another client holds with a 30 s lease,
///     released after 2.5 s of waiting, is woken within 5 s of the release;
/// (c) a guard dropped on B (30 s lease, not released) lets another client
///     in within 5 s.
///
/// `make` builds a client from a builder on the backend under test; it is
/// called on runtime A for the client under test and on B for the others.
pub fn client_keeps_working_on_a_second_runtime<M, Fut>(
    make: M,
    redis_ttl_ms: impl Fn(&str) -> Option<i64>,
) where
    M: Fn(LockClientBuilder) -> Fut,
    Fut: std::future::Future<Output = LockClient>,
{
    let lease = Duration::from_millis(300);
    let runtime_a = one_worker_runtime();
    let client = runtime_a.block_on(async {
        let client = make(LockClient::builder().lease(lease)).await;
        let other = make(LockClient::builder()).await;
        let held = other.lock("edges:rt:first-wait").acquire().await.unwrap();
        let waiting = tokio::spawn({
            let client = client.clone();
            async move {
                client
                    .lock("edges:rt:first-wait")
                    .wait(Duration::from_secs(10))
                    .acquire()
                    .await
            }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        held.release().await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("runtime A: the waiter was woken")
            .unwrap()
            .unwrap();
        got.release().await.unwrap();
        let guard = client.lock("edges:rt:first-hold").acquire().await.unwrap();
        guard.release().await.unwrap();
        client
    });
    // Whatever the client started on A (its watchdog, its subscriber, its
    // connections' drivers) is dropped with A.
    drop(runtime_a);

    let runtime_b = one_worker_runtime();
    runtime_b.block_on(async {
        let other = make(LockClient::builder()).await;
        let test = async {
            // (a) renewed on B.
            let rounds = client.stats().renewal_rounds;
            let name = "edges:rt:held";
            let guard = client
                .lock(name)
                .acquire()
                .await
                .expect("runtime B: acquire");
            for step in 1..=4 {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let at = format!("{} ms into the hold on runtime B", step * 500);
                assert!(
                    guard.is_held(),
                    "{at}: the guard is not held ({:?})",
                    client.stats()
                );
                assert!(
                    other.lock(name).try_acquire().await.unwrap().is_none(),
                    "{at}: another client took the lock ({:?})",
                    client.stats()
                );
                let ttl = other
                    .admin()
                    .inspect(name)
                    .await
                    .unwrap()
                    .holder
                    .and_then(|h| h.ttl);
                assert!(ttl.is_some_and(|ttl| !ttl.is_zero()), "{at}: TTL {ttl:?}");
                if let Some(ttl) = redis_ttl_ms(name) {
                    assert!(ttl > 0, "{at}: Redis PTTL {ttl}");
                }
            }
            let renewed = client.stats().renewal_rounds - rounds;
            assert!(
                renewed >= 5,
                "{renewed} renewal rounds in 2 s (every 100 ms)"
            );
            guard.release().await.unwrap();

            // (b) woken on B.
            let name = "edges:rt:wake";
            let held = other
                .lock(name)
                .lease(Duration::from_secs(30))
                .acquire()
                .await
                .unwrap();
            let waiting = tokio::spawn({
                let client = client.clone();
                async move {
                    let guard = client
                        .lock(name)
                        .wait(Duration::from_secs(20))
                        .acquire()
                        .await;
                    (Instant::now(), guard)
                }
            });
            // Released once the waiter is past the confirmation of its
            // subscription (it gives up on that after the 2 s response
            // timeout and then waits on the lease, or on a wake-up).
            tokio::time::sleep(Duration::from_millis(2500)).await;
            assert!(!waiting.is_finished(), "runtime B: the waiter did not wait");
            let released = Instant::now();
            held.release().await.unwrap();
            let (acquired, got) = tokio::time::timeout(Duration::from_secs(10), waiting)
                .await
                .expect("runtime B: the waiter was not woken within 10 s of the release")
                .unwrap();
            assert!(
                acquired - released <= Duration::from_secs(5),
                "runtime B: the waiter was woken {:?} after the release (lease 30 s)",
                acquired - released
            );
            got.unwrap().release().await.unwrap();

            // (c) released in the background on B.
            let name = "edges:rt:dropped";
            let dropped = client
                .lock(name)
                .lease(Duration::from_secs(30))
                .acquire()
                .await
                .unwrap();
            let at = Instant::now();
            drop(dropped);
            let next = other
                .lock(name)
                .wait(Duration::from_secs(20))
                .acquire()
                .await
                .unwrap();
            assert!(
                at.elapsed() <= Duration::from_secs(5),
                "runtime B: a dropped guard let another client in after {:?}",
                at.elapsed()
            );
            next.release().await.unwrap();
        };
        tokio::time::timeout(Duration::from_secs(30), test)
            .await
            .expect("runtime B: the checks hung");
    });
}
