//! Hot locks (`LockClientBuilder::keep_hot`), run per backend by
//! `hot_suite!`: the kept lock's exclusion, its hand-over to another client
//! (idle or in use), its linger, its loss, its tokens and its shutdown.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::{LockClient, LockError};
use tokio::time::Instant;

use super::{assert_within, Fixture};

const LONG: Duration = Duration::from_secs(20);

/// A hot client keeping idle locks for `linger`.
async fn hot<F: Fixture>(fixture: &F, linger: Duration) -> LockClient {
    fixture
        .client_with(LockClient::builder().keep_hot(linger))
        .await
}

/// Takes `name` once in `client` and releases it (a hot client then keeps
/// it); returns the use's fencing token.
async fn use_once(client: &LockClient, name: &str) -> u64 {
    let guard = client.lock(name).acquire().await.unwrap();
    let token = guard.fencing_token();
    guard.release().await.unwrap();
    token
}

/// A kept lock is taken again with the same token by any task of its
/// client, and stays busy for other clients meanwhile.
pub async fn hot_kept_lock_is_reused_with_its_token<F: Fixture>(fixture: &F) {
    let keeper = hot(fixture, LONG).await;
    let other = fixture.client().await;
    let token = use_once(&keeper, "hot:reuse").await;
    for _ in 0..5 {
        // Another task: another scope of the same client.
        let client = keeper.clone();
        let guard = tokio::spawn(async move { client.lock("hot:reuse").acquire().await })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(guard.fencing_token(), token);
        guard.release().await.unwrap();
    }
    // Kept: a single try of another client finds it taken...
    assert!(matches!(
        other.lock("hot:reuse").acquire().await,
        Err(LockError::Busy { .. })
    ));
    // ...and gets it once it asked and waited a moment, with a higher token.
    let taken = other.lock("hot:reuse").wait(LONG).acquire().await.unwrap();
    assert!(taken.fencing_token() > token);
    taken.release().await.unwrap();
}

/// Another client's request makes a kept idle lock go at once (not after
/// the linger of a minute).
pub async fn hot_idle_lock_goes_to_an_asking_client_at_once<F: Fixture>(fixture: &F) {
    let keeper = hot(fixture, Duration::from_secs(60)).await;
    let other = fixture.client().await;
    use_once(&keeper, "hot:idle").await;
    // Let the keeper's subscription be confirmed, as in a running service.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let asked = Instant::now();
    let guard = other.lock("hot:idle").wait(LONG).acquire().await.unwrap();
    assert_within(asked.elapsed(), Duration::from_secs(2), "the asker's wait");
    // Given up for good: the keeper's next acquisition waits for the asker.
    assert!(matches!(
        keeper.lock("hot:idle").acquire().await,
        Err(LockError::Busy { .. })
    ));
    guard.release().await.unwrap();
}

/// A kept lock in use when another client asks is given up at the end of
/// that use, and the asker gets it promptly then.
pub async fn hot_lock_in_use_goes_to_an_asker_at_its_release<F: Fixture>(fixture: &F) {
    let keeper = hot(fixture, Duration::from_secs(60)).await;
    let other = fixture.client().await;
    let guard = keeper.lock("hot:busy").acquire().await.unwrap();
    let waiter = super::spawn_waiter(other, "hot:busy");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "taken while in use");
    let released = Instant::now();
    guard.release().await.unwrap();
    let (acquired, theirs) = waiter.await.unwrap();
    assert_within(
        acquired.saturating_duration_since(released),
        Duration::from_secs(2),
        "the hand-over after the use",
    );
    assert!(matches!(
        keeper.lock("hot:busy").acquire().await,
        Err(LockError::Busy { .. })
    ));
    theirs.release().await.unwrap();
}

/// Two hot clients (4 tasks each) on one lock: never two holders at once,
/// every acquisition counted, and both clients served.
pub async fn hot_clients_exclude_each_other<F: Fixture>(fixture: &F) {
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let client = hot(fixture, Duration::from_secs(60)).await;
        let served = Arc::new(AtomicU64::new(0));
        for _ in 0..4 {
            let (client, counter, inside, served) = (
                client.clone(),
                counter.clone(),
                inside.clone(),
                served.clone(),
            );
            tasks.push(tokio::spawn(async move {
                for _ in 0..25 {
                    let guard = client
                        .lock("hot:counter")
                        .wait(LONG)
                        .acquire()
                        .await
                        .unwrap();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders overlap");
                    let seen = counter.load(Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_micros(200)).await;
                    counter.store(seen + 1, Ordering::SeqCst);
                    inside.store(false, Ordering::SeqCst);
                    guard.release().await.unwrap();
                    served.fetch_add(1, Ordering::SeqCst);
                }
                served
            }));
        }
    }
    let mut per_client = Vec::new();
    for (i, task) in tasks.into_iter().enumerate() {
        let served = task.await.unwrap();
        if i % 4 == 3 {
            per_client.push(served.load(Ordering::SeqCst));
        }
    }
    assert_eq!(counter.load(Ordering::SeqCst), 2 * 4 * 25);
    assert_eq!(per_client, [100, 100]);
}

/// An idle kept lock is given up after its linger: another client's single
/// try (which asks nobody in time) then finds it free.
pub async fn hot_idle_lock_is_given_up_after_its_linger<F: Fixture>(fixture: &F) {
    let keeper = hot(fixture, Duration::from_millis(200)).await;
    let other = fixture.client().await;
    let token = use_once(&keeper, "hot:linger").await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let guard = other.lock("hot:linger").acquire().await.unwrap();
    assert!(guard.fencing_token() > token);
    guard.release().await.unwrap();
}

/// A kept lock deleted behind the keeper's back while idle: the next
/// acquisition finds it gone and takes it from the store, with a new token.
pub async fn hot_lost_idle_lock_is_taken_again_from_the_store<F: Fixture>(fixture: &F) {
    let keeper = fixture
        .client_with(
            LockClient::builder()
                .keep_hot(LONG)
                .lease(Duration::from_millis(600)),
        )
        .await;
    let token = use_once(&keeper, "hot:lost").await;
    fixture.delete_lock("hot:lost").await;
    // The watchdog's next round (every 200 ms) finds it gone.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let again = keeper.lock("hot:lost").acquire().await.unwrap();
    assert!(again.fencing_token() > token, "taken from the store again");
    again.release().await.unwrap();
}

/// The watchdog renews an idle kept lock: it outlives several leases while
/// kept.
pub async fn hot_idle_lock_is_renewed<F: Fixture>(fixture: &F) {
    let keeper = fixture
        .client_with(
            LockClient::builder()
                .keep_hot(Duration::from_secs(3))
                .lease(Duration::from_millis(500)),
        )
        .await;
    let token = use_once(&keeper, "hot:renewed").await;
    tokio::time::sleep(Duration::from_millis(1500)).await; // 3 leases
    let again = keeper.lock("hot:renewed").acquire().await.unwrap();
    assert_eq!(again.fencing_token(), token, "still kept");
    again.release().await.unwrap();
}

/// A shutdown gives up the idle kept locks at once.
pub async fn hot_shutdown_gives_up_kept_locks<F: Fixture>(fixture: &F) {
    let keeper = hot(fixture, Duration::from_secs(60)).await;
    let other = fixture.client().await;
    use_once(&keeper, "hot:shutdown").await;
    keeper.shutdown(Duration::from_secs(1)).await.unwrap();
    let guard = other.lock("hot:shutdown").acquire().await.unwrap();
    guard.release().await.unwrap();
}

/// A single try on a kept lock another task of the same client uses is
/// busy, and waiting tasks of that client take it in turn without
/// asking the store.
pub async fn hot_tasks_of_the_keeper_take_turns<F: Fixture>(fixture: &F) {
    let keeper = hot(fixture, LONG).await;
    let guard = keeper.lock("hot:turns").acquire().await.unwrap();
    let client = keeper.clone();
    let busy = tokio::spawn(async move { client.lock("hot:turns").acquire().await })
        .await
        .unwrap();
    assert!(matches!(busy, Err(LockError::Busy { .. })), "{busy:?}");
    let token = guard.fencing_token();
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let client = keeper.clone();
        waiters.push(tokio::spawn(async move {
            let guard = client.lock("hot:turns").wait(LONG).acquire().await.unwrap();
            let token = guard.fencing_token();
            guard.release().await.unwrap();
            token
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    for waiter in waiters {
        assert_eq!(waiter.await.unwrap(), token);
    }
    assert_within(released.elapsed(), Duration::from_secs(2), "three turns");
}

/// A kept lock used back to back by one client (uses a few microseconds
/// apart, each renewal round answered after several hand-overs) is renewed
/// as one lock: no use is refused or lost over many leases, and every use has
/// the token of the first.
///
/// Old code: a renewal answered after the hand-over to the next use extended
/// the use that had ended, so the use in progress ran out at the old
/// deadline: about one `LeaseLost` per lease on a healthy server.
pub async fn hot_lock_used_back_to_back_is_renewed_as_one<F: Fixture>(fixture: &F) {
    let lease = Duration::from_millis(300);
    let keeper = fixture
        .client_with(LockClient::builder().keep_hot(LONG).lease(lease))
        .await;
    let token = use_once(&keeper, "hot:back-to-back").await;
    let started = Instant::now();
    let (mut uses, mut problems) = (0u64, Vec::new());
    while started.elapsed() < lease * 7 {
        match keeper.lock("hot:back-to-back").acquire().await {
            Ok(guard) => {
                if guard.fencing_token() != token {
                    problems.push(format!("use {uses}: token {}", guard.fencing_token()));
                }
                tokio::task::yield_now().await;
                if let Err(err) = guard.release().await {
                    problems.push(format!("use {uses}: release: {err}"));
                }
            }
            Err(err) => problems.push(format!("use {uses}: acquire: {err}")),
        }
        uses += 1;
    }
    assert!(uses > 100, "only {uses} uses");
    assert!(
        problems.is_empty(),
        "{} of {uses} uses failed:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// A kept lock deleted in the store while it is used back to back is known
/// lost by the next renewal round (a third of the lease), not at the end of
/// the last lease seen: no use with its token starts later, and the lock is
/// taken from the store again with a higher token.
///
/// Old code: the round's `gone` answer marked a use that had already ended;
/// the use in progress and its successors went on with the old token until
/// the last successful renewal's deadline, up to a whole lease.
pub async fn hot_lock_deleted_in_use_is_lost_within_a_renewal_period<F: Fixture>(fixture: &F) {
    let lease = Duration::from_millis(1500);
    let keeper = fixture
        .client_with(LockClient::builder().keep_hot(LONG).lease(lease))
        .await;
    let token = use_once(&keeper, "hot:deleted").await;
    let stop = Arc::new(AtomicBool::new(false));
    let user = tokio::spawn({
        let (keeper, stop) = (keeper.clone(), stop.clone());
        async move {
            // (start of the use, its token)
            let mut uses: Vec<(Instant, u64)> = Vec::new();
            while !stop.load(Ordering::Acquire) {
                let Ok(guard) = keeper
                    .lock("hot:deleted")
                    .wait(Duration::from_secs(5))
                    .acquire()
                    .await
                else {
                    continue;
                };
                let at = Instant::now();
                let token = guard.fencing_token();
                tokio::task::yield_now().await;
                let _ = guard.release().await; // a loss may be reported here
                uses.push((at, token));
            }
            uses
        }
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    fixture.delete_lock("hot:deleted").await;
    let deleted = Instant::now();
    tokio::time::sleep(lease).await;
    stop.store(true, Ordering::Release);
    let uses = user.await.unwrap();
    // A renewal round every lease/3 (500 ms), plus a round's own time.
    let bound = deleted + lease / 3 + Duration::from_millis(300);
    let late: Vec<_> = uses
        .iter()
        .filter(|(at, t)| *t == token && *at > bound)
        .collect();
    assert!(
        late.is_empty(),
        "{} uses with the deleted lock's token started after the bound, the last {:?} after the deletion",
        late.len(),
        late.last().map(|(at, _)| at.saturating_duration_since(deleted))
    );
    assert!(
        uses.iter().any(|(_, t)| *t > token),
        "taken from the store again with a higher token"
    );
}

/// An idle kept lock's lease in the store is short (the linger plus twice
/// the response timeout, here 1.6 s against a 20 s lease), so that a keeper
/// that dies without giving it up holds the others up that long. A use that
/// takes it on that short lease keeps it however long it lasts (the keeper
/// extends it to the full lease while in use), and a lock kept over many
/// short leases, with idle gaps of most of the linger, long uses and uses
/// back to back, never leaves its keeper: one token throughout, no use
/// lost, and the store shows it held by the keeper with that token at every
/// look.
///
/// Old code: the idle lock kept the whole lease in the store.
pub async fn hot_idle_lock_has_a_short_lease_and_its_uses_keep_it<F: Fixture>(fixture: &F) {
    let linger = Duration::from_secs(1);
    let timeout = Duration::from_millis(300);
    let short = linger + timeout * 2;
    let name = "hot:short";
    let keeper = fixture
        .client_with(
            LockClient::builder()
                .keep_hot(linger)
                .lease(LONG)
                .response_timeout(timeout),
        )
        .await;
    let observer = fixture.client().await;
    let token = use_once(&keeper, name).await;
    // Idle: its lease is cut to the short one at once (in the background).
    let kept = Instant::now();
    let mut first = None;
    loop {
        let info = observer.admin().inspect(name).await.unwrap();
        let ttl = info.holder.and_then(|holder| holder.ttl);
        if ttl.is_some_and(|ttl| ttl <= short) {
            break;
        }
        let first = *first.get_or_insert(ttl);
        assert!(
            kept.elapsed() < linger / 3,
            "the idle kept lock's lease is not cut to {short:?}: {first:?} left at the first look, {ttl:?} at the last"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Reads only (an attempt would ask the keeper for it).
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = tokio::spawn({
        let stop = stop.clone();
        async move {
            let (mut looks, mut wrong) = (0u32, Vec::new());
            while !stop.load(Ordering::Acquire) {
                match observer.admin().inspect(name).await {
                    Ok(info) => match info.holder {
                        Some(holder) if holder.kept() && holder.fencing_token == token => {}
                        other => wrong.push(format!("{other:?}")),
                    },
                    Err(err) => wrong.push(err.to_string()),
                }
                looks += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (looks, wrong, observer)
        }
    });
    for _ in 0..2 {
        // Idle for a while (within the linger, with room for a busy
        // machine): it runs on a short lease.
        tokio::time::sleep(linger / 3).await;
        let guard = keeper.lock(name).acquire().await.unwrap();
        assert_eq!(guard.fencing_token(), token, "taken from the keeper");
        // A use longer than the short lease.
        tokio::select! {
            () = guard.lost() => panic!("a use that began on the short lease was lost"),
            () = tokio::time::sleep(short * 3 / 2) => {}
        }
        assert!(guard.is_held());
        guard.release().await.unwrap();
    }
    // Back to back for longer than the short lease: the store's lease goes
    // from short to full and back under the uses.
    let started = Instant::now();
    let mut uses = 0u32;
    while started.elapsed() < short * 3 / 2 {
        let guard = keeper.lock(name).acquire().await.unwrap();
        assert_eq!(guard.fencing_token(), token, "use {uses}");
        tokio::task::yield_now().await;
        guard.release().await.unwrap();
        uses += 1;
    }
    stop.store(true, Ordering::Release);
    let (looks, wrong, observer) = watcher.await.unwrap();
    assert!(looks > 20 && uses > 100, "{looks} looks, {uses} uses");
    assert!(
        wrong.is_empty(),
        "{} of {looks} looks did not find the keeper's hold: {:?}",
        wrong.len(),
        wrong.first()
    );
    // Another client that asks gets it, with a higher token.
    let taken = observer.lock(name).wait(LONG).acquire().await.unwrap();
    assert!(taken.fencing_token() > token);
    taken.release().await.unwrap();
}

/// Generates one test per hot-lock suite test, on the fixture `$make`.
#[macro_export]
macro_rules! hot_suite {
    ($make:expr) => {
        behaviour_suite!($make;
            hot_kept_lock_is_reused_with_its_token,
            hot_idle_lock_goes_to_an_asking_client_at_once,
            hot_lock_in_use_goes_to_an_asker_at_its_release,
            hot_clients_exclude_each_other,
            hot_idle_lock_is_given_up_after_its_linger,
            hot_lost_idle_lock_is_taken_again_from_the_store,
            hot_idle_lock_is_renewed,
            hot_shutdown_gives_up_kept_locks,
            hot_tasks_of_the_keeper_take_turns,
            hot_lock_used_back_to_back_is_renewed_as_one,
            hot_lock_deleted_in_use_is_lost_within_a_renewal_period,
            hot_idle_lock_has_a_short_lease_and_its_uses_keep_it,
        );
    };
}
