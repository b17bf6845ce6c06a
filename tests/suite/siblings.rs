//! Sibling futures of one scope are different owners, run per backend by
//! `siblings_suite!`: a lock is re-entered only by code polled inside the
//! scope of a guard that holds it, so two concurrently polled branches
//! (`join!`, `select!`, `FuturesUnordered`) that take the same lock inside a
//! common outer scope exclude each other, while nested, sequential re-entry
//! stays free.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::{current, distributed_lock, LockClient, LockError, LockGuard};
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use super::Fixture;

const LONG: Duration = Duration::from_secs(20);

/// Counts the bodies running at once; remembers the most ever seen.
#[derive(Debug, Default)]
pub struct Overlap {
    inside: AtomicUsize,
    most: AtomicUsize,
}

impl Overlap {
    /// Runs a body: enters, yields to the other branches for `hold` (a
    /// sleep, so that a sibling that is not excluded runs meanwhile), leaves.
    async fn body(&self, hold: Duration) {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::task::yield_now().await;
        tokio::time::sleep(hold).await;
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }

    fn most(&self) -> usize {
        self.most.load(Ordering::SeqCst)
    }
}

#[distributed_lock(key = "siblings:order:{id}", wait = "20s", client = client)]
async fn pay(client: &LockClient, id: u64, overlap: &Overlap) -> Result<(u64, String), LockError> {
    overlap.body(Duration::from_millis(3)).await;
    let lock = current().expect("the body runs under its lock");
    Ok((lock.fencing_token(), lock.owner().to_owned()))
}

#[distributed_lock(key = "siblings:cart:{cart}", client = client)]
async fn checkout(
    client: &LockClient,
    cart: u64,
    overlap: &Overlap,
) -> Result<[(u64, String); 2], LockError> {
    // Two payments of one order, polled together inside the cart's lock.
    let (a, b) = tokio::join!(pay(client, cart, overlap), pay(client, cart, overlap));
    Ok([a?, b?])
}

/// `join!(pay(1), pay(1))` inside an annotated fn holding another lock: the
/// two bodies never run at once (an in-body overlap detector that sleeps,
/// 25 rounds), and each call holds the lock as its own owner with its own
/// fencing token.
///
/// Old code: the second call re-entered the first one's lock as the same
/// owner (the enclosing scope): both bodies ran at once, with one token.
pub async fn siblings_annotated_calls_on_one_key_never_overlap<F: Fixture>(fixture: &F) {
    let client = fixture.client().await;
    let overlap = Overlap::default();
    for round in 0..25 {
        let [(token_a, owner_a), (token_b, owner_b)] =
            checkout(&client, round, &overlap).await.unwrap();
        assert_ne!(token_a, token_b, "round {round}: one hold for two siblings");
        assert_ne!(
            owner_a, owner_b,
            "round {round}: one owner for two siblings"
        );
    }
    assert_eq!(overlap.most(), 1, "sibling bodies ran at once");
}

/// The same with explicit acquisitions in a guard's scope: branches of a
/// `join!` each take the lock with `acquire()` (four branches; two hold it
/// through `scope`, two merely keep the guard) and never overlap (25 rounds).
///
/// Old code: every branch after the first re-entered the first one's lock.
pub async fn siblings_explicit_acquisitions_in_a_guard_scope_never_overlap<F: Fixture>(
    fixture: &F,
) {
    let client = fixture.client().await;
    let outer = client
        .lock("siblings:explicit:outer")
        .acquire()
        .await
        .unwrap();
    let overlap = Overlap::default();
    let branch = |scoped: bool| {
        let (client, overlap) = (&client, &overlap);
        async move {
            let guard = client
                .lock("siblings:explicit")
                .wait(LONG)
                .acquire()
                .await
                .unwrap();
            assert_eq!(guard.hold_count(), 1, "a sibling re-entered another's hold");
            let hold = Duration::from_millis(2);
            if scoped {
                guard.scope(overlap.body(hold)).await;
            } else {
                overlap.body(hold).await;
            }
            guard.release().await.unwrap();
        }
    };
    outer
        .scope(async {
            for _ in 0..25 {
                tokio::join!(branch(true), branch(false), branch(true), branch(false));
            }
        })
        .await;
    assert_eq!(overlap.most(), 1, "sibling holders ran at once");
    outer.release().await.unwrap();
}

/// Nested, sequential re-entry is unchanged: inside the scope (and inside
/// an annotated body) the same lock is re-entered with hold count 2 and the
/// same token, without asking the store: after the lock was deleted behind
/// the holder's back, a re-entry still gets the old token (a request would
/// have been granted a new one). Passes on old code too (a guard against
/// breaking re-entry).
pub async fn siblings_nested_reentry_is_free_and_shares_the_hold<F: Fixture>(fixture: &F) {
    let client = fixture.client().await;
    let outer = client.lock("siblings:nested").acquire().await.unwrap();
    let token = outer.fencing_token();
    outer
        .scope(async {
            let inner = client.lock("siblings:nested").acquire().await.unwrap();
            assert_eq!((inner.hold_count(), inner.fencing_token()), (2, token));
            assert_eq!(inner.owner(), outer.owner());
            // Nested deeper, through a scope of the inner guard.
            let third = inner
                .scope(client.lock("siblings:nested").acquire())
                .await
                .unwrap();
            assert_eq!((third.hold_count(), third.fencing_token()), (3, token));
            third.release().await.unwrap();
            inner.release().await.unwrap();
        })
        .await;
    assert_eq!(outer.hold_count(), 1);
    fixture.delete_lock("siblings:nested").await;
    let again = outer
        .scope(client.lock("siblings:nested").acquire())
        .await
        .unwrap();
    assert_eq!(
        (again.hold_count(), again.fencing_token()),
        (2, token),
        "the re-entry asked the store"
    );
    drop(again);
    drop(outer);

    // Through annotated functions: the nested call re-enters.
    let overlap = Overlap::default();
    let (token, nested) = reenter_pay(&client, 9, &overlap).await.unwrap();
    assert_eq!(token, nested);
}

#[distributed_lock(key = "siblings:order:{id}", client = client)]
async fn reenter_pay(
    client: &LockClient,
    id: u64,
    overlap: &Overlap,
) -> Result<(u64, u64), LockError> {
    let token = current().unwrap().fencing_token();
    let guard = client
        .lock(format!("siblings:order:{id}"))
        .acquire()
        .await?;
    assert_eq!(guard.hold_count(), 2);
    drop(guard);
    let (nested, _) = pay(client, id, overlap).await?;
    Ok((token, nested))
}

/// `select!`, `FuturesUnordered` and `tokio::spawn` inside a scope: every
/// branch that takes a lock itself is its own owner.
///
/// - `select!`: while one branch holds the lock, the other's single try
///   finds it busy.
/// - `FuturesUnordered`: six futures taking one lock never overlap.
/// - `tokio::spawn`: a spawned task is another owner (as it always was); a
///   guard moved into a spawned task is re-entered inside its own scope
///   there, and the task it came from, not in that scope, is another owner.
///
/// Old code: the `select!` branch and the unordered futures re-entered the
/// first holder's lock, and the task that moved its guard away re-entered
/// it as well.
pub async fn siblings_in_select_unordered_and_spawn_are_other_owners<F: Fixture>(fixture: &F) {
    let client = fixture.client().await;
    let outer = client
        .lock("siblings:select:outer")
        .acquire()
        .await
        .unwrap();
    outer
        .scope(async {
            let held = tokio::sync::Notify::new();
            let holder = async {
                let _guard = client.lock("siblings:select").acquire().await.unwrap();
                held.notify_one();
                std::future::pending::<()>().await;
            };
            let other = async {
                held.notified().await;
                client.lock("siblings:select").try_acquire().await.unwrap()
            };
            tokio::select! {
                () = holder => panic!("the holder finished first"),
                taken = other => assert!(taken.is_none(), "a select! branch re-entered its sibling's lock"),
            }

            let overlap = Overlap::default();
            let mut unordered: FuturesUnordered<_> = (0..6)
                .map(|_| async {
                    let guard = client
                        .lock("siblings:unordered")
                        .wait(LONG)
                        .acquire()
                        .await
                        .unwrap();
                    guard.scope(overlap.body(Duration::from_millis(5))).await;
                    guard.release().await.unwrap();
                })
                .collect();
            while unordered.next().await.is_some() {}
            assert_eq!(overlap.most(), 1, "unordered futures ran at once");

            // A spawned task is another owner.
            let spawned = tokio::spawn({
                let client = client.clone();
                async move {
                    client
                        .lock("siblings:select:outer")
                        .try_acquire()
                        .await
                        .unwrap()
                        .is_none()
                }
            });
            assert!(spawned.await.unwrap(), "a spawned task re-entered");

            // A guard moved into a spawned task: its scope there re-enters
            // it; this task, no longer in a scope of it, is another owner.
            let moved = client.lock("siblings:moved").acquire().await.unwrap();
            let token = moved.fencing_token();
            let (entered, leave) = (
                Arc::new(tokio::sync::Notify::new()),
                Arc::new(tokio::sync::Notify::new()),
            );
            let task = tokio::spawn({
                let (client, entered, leave) = (client.clone(), entered.clone(), leave.clone());
                async move {
                    let inner = moved
                        .scope(client.lock("siblings:moved").acquire())
                        .await
                        .unwrap();
                    assert_eq!((inner.hold_count(), inner.fencing_token()), (2, token));
                    entered.notify_one();
                    leave.notified().await;
                    inner.release().await.unwrap();
                    moved.release().await.unwrap();
                }
            });
            entered.notified().await;
            let here = client.lock("siblings:moved").try_acquire().await.unwrap();
            assert!(here.is_none(), "the task re-entered a guard it gave away");
            leave.notify_one();
            task.await.unwrap();
        })
        .await;
    outer.release().await.unwrap();
}

/// A sibling waiting for a lock its sibling holds, inside a scope that
/// holds another lock, still re-enters that outer lock (it is nested in its
/// scope): before, while and after it waits. It gets its lock only once the
/// sibling released it, as another owner.
///
/// Old code: the waiting sibling re-entered the first one's lock at once.
pub async fn siblings_waiting_sibling_reenters_its_parents_lock<F: Fixture>(fixture: &F) {
    let client = fixture.client().await;
    let parent = client.lock("siblings:parent").acquire().await.unwrap();
    let parent_token = parent.fencing_token();
    let released = AtomicBool::new(false);
    let reenter_parent = || async {
        let again = client.lock("siblings:parent").acquire().await.unwrap();
        assert_eq!(
            (again.hold_count(), again.fencing_token()),
            (2, parent_token)
        );
        again.release().await.unwrap();
    };
    let held = tokio::sync::Notify::new();
    let (first_owner, second_owner) = parent
        .scope(async {
            let first = async {
                let guard = client.lock("siblings:child").acquire().await.unwrap();
                held.notify_one();
                let owner = guard.owner().to_owned();
                tokio::time::sleep(Duration::from_millis(300)).await;
                released.store(true, Ordering::SeqCst);
                guard.release().await.unwrap();
                owner
            };
            let second = async {
                held.notified().await;
                reenter_parent().await;
                let waiting = client.lock("siblings:child").wait(LONG).acquire();
                let (guard, ()) = tokio::join!(waiting, async {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    reenter_parent().await;
                });
                let guard = guard.unwrap();
                assert!(
                    released.load(Ordering::SeqCst),
                    "the waiting sibling got the lock while its sibling held it"
                );
                guard.scope(reenter_parent()).await;
                let owner = guard.owner().to_owned();
                guard.release().await.unwrap();
                owner
            };
            tokio::join!(first, second)
        })
        .await;
    assert_ne!(first_owner, second_owner);
    assert_eq!(parent.hold_count(), 1);
    parent.release().await.unwrap();
}

/// The lock family and hot locks: siblings that take a write lock, a read
/// lock against a sibling's write, a semaphore's only permit, a fair lock or
/// a kept (hot) lock are other owners: the second finds it busy. Siblings
/// reading one read lock share it; a writer's body that reads in two
/// branches gets both reads (its own write does not block them).
///
/// Old code: every second sibling was granted the lock (as the same owner).
pub async fn siblings_of_the_lock_family_are_other_owners<F: Fixture>(fixture: &F) {
    let client = fixture.client().await;
    let hot = fixture
        .client_with(LockClient::builder().keep_hot(Duration::from_secs(5)))
        .await;
    let outer = client
        .lock("siblings:family:outer")
        .acquire()
        .await
        .unwrap();
    let rw = client.read_write_lock("siblings:rw");
    let semaphore = client.semaphore("siblings:sem", 1);
    // The first branch holds `take`, the second tries `try_take` meanwhile.
    async fn second_is_busy(
        take: impl std::future::Future<Output = Result<LockGuard, LockError>>,
        try_take: impl std::future::Future<Output = Result<Option<LockGuard>, LockError>>,
    ) -> bool {
        let (held, tried) = (tokio::sync::Notify::new(), tokio::sync::Notify::new());
        let ((), taken) = tokio::join!(
            async {
                let guard = take.await.unwrap();
                held.notify_one();
                tried.notified().await;
                guard.release().await.unwrap();
            },
            async {
                held.notified().await;
                let taken = try_take.await;
                tried.notify_one();
                taken
            }
        );
        match taken {
            Ok(None) => true,
            Ok(Some(guard)) => {
                let _ = guard.release().await;
                false
            }
            Err(err) => panic!("the second sibling failed: {err:?}"),
        }
    }
    outer
        .scope(async {
            let cases = [
                (
                    "write, write",
                    second_is_busy(rw.write().acquire(), rw.write().try_acquire()).await,
                ),
                (
                    "write, read",
                    second_is_busy(rw.write().acquire(), rw.read().try_acquire()).await,
                ),
                (
                    "read, write",
                    second_is_busy(rw.read().acquire(), rw.write().try_acquire()).await,
                ),
                (
                    "permit, permit",
                    second_is_busy(
                        semaphore.permit().acquire(),
                        semaphore.permit().try_acquire(),
                    )
                    .await,
                ),
                (
                    "fair, fair",
                    second_is_busy(
                        client.fair_lock("siblings:fair").acquire(),
                        client.fair_lock("siblings:fair").try_acquire(),
                    )
                    .await,
                ),
            ];
            let shared: Vec<_> = cases.iter().filter(|(_, busy)| !busy).collect();
            assert!(shared.is_empty(), "siblings shared a hold: {shared:?}");

            // Reads of siblings share the read lock.
            let (a, b) = tokio::join!(rw.read().acquire(), rw.read().acquire());
            a.unwrap().release().await.unwrap();
            b.unwrap().release().await.unwrap();
            // Inside the write lock's scope, two branches both read.
            let write = rw.write().acquire().await.unwrap();
            let (a, b) = write
                .scope(async {
                    tokio::time::timeout(Duration::from_secs(5), async {
                        tokio::join!(rw.read().acquire(), rw.read().acquire())
                    })
                    .await
                    .expect("the writer's branches waited for its own write lock")
                })
                .await;
            a.unwrap().release().await.unwrap();
            b.unwrap().release().await.unwrap();
            write.release().await.unwrap();
        })
        .await;
    outer.release().await.unwrap();

    // Hot locks: the kept lock is one field of the client; a sibling
    // still finds it in use.
    let outer = hot.lock("siblings:hot:outer").acquire().await.unwrap();
    let busy = outer
        .scope(second_is_busy(
            hot.lock("siblings:hot").acquire(),
            hot.lock("siblings:hot").try_acquire(),
        ))
        .await;
    assert!(busy, "hot-lock siblings shared a hold");
    outer.release().await.unwrap();
    let started = Instant::now();
    let guard = hot.lock("siblings:hot").acquire().await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
    guard.release().await.unwrap();
}

/// Generates one `#[tokio::test]` per siblings suite test, on the fixture
/// `$make` (a backend with the lock family and hot locks).
#[macro_export]
macro_rules! siblings_suite {
    ($make:expr) => {
        behaviour_suite!($make;
            siblings_annotated_calls_on_one_key_never_overlap,
            siblings_explicit_acquisitions_in_a_guard_scope_never_overlap,
            siblings_nested_reentry_is_free_and_shares_the_hold,
            siblings_in_select_unordered_and_spawn_are_other_owners,
            siblings_waiting_sibling_reenters_its_parents_lock,
            siblings_of_the_lock_family_are_other_owners,
        );
    };
}
