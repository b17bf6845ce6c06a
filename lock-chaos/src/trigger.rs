//! State-triggered injection: wait until a lock has been held by
//! one owner for a while and someone else is waiting for it, so that the fault hits a lock
//! somebody wanted; and decide after the fact, from the history, whether an injection did.

use std::collections::HashMap;
use std::time::Duration;

use distlock::{ListedLock, LockClient};
use tokio::time::Instant;

/// What [`wait_for_target`] waits for.
#[derive(Debug, Clone)]
pub struct TriggerConfig {
    /// The lock names to watch.
    pub names: Vec<String>,
    /// The holder must have held the lock (as seen by the polls) at least this long.
    pub min_hold: Duration,
    /// Give up after this long ("not effective").
    pub bound: Duration,
    /// Time between two polls.
    pub poll: Duration,
    /// Bound of one poll's round trip (a server may be down during another fault).
    pub probe_timeout: Duration,
    /// The backend cannot count a lock's waiters (PostgreSQL: `LISTEN`s are sessions'
    /// state, invisible to other sessions): a long hold alone triggers, and the checker's
    /// count from the history (a hold and another task's acquisition in flight) says
    /// whether the injection was effective.
    pub waiters_unknown: bool,
}

impl TriggerConfig {
    /// Watch `names`; a hold counts after a third of `lease` (a long hold: the workers'
    /// holds are mostly shorter), give up after four leases, poll every 20 ms.
    pub fn new(names: Vec<String>, lease: Duration) -> TriggerConfig {
        TriggerConfig {
            names,
            min_hold: lease / 3,
            bound: lease * 4,
            poll: Duration::from_millis(20),
            probe_timeout: Duration::from_millis(500),
            waiters_unknown: false,
        }
    }
}

/// Which primitive of a name a step aims at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TargetKind {
    /// A plain lock (the run's `chaos-N` names).
    #[default]
    Plain,
    /// A fair lock: its holder, with a waiter queued behind it.
    Fair,
    /// A read-write lock: a reader holding it, while a client waits.
    ReadWrite,
    /// A semaphore: a holder of permits, while a client waits.
    Semaphore,
}

impl TargetKind {
    /// The name in `start` targets (`lock:{name} <kind> ...`).
    pub fn name(self) -> &'static str {
        match self {
            TargetKind::Plain => "plain",
            TargetKind::Fair => "fair",
            TargetKind::ReadWrite => "read_write",
            TargetKind::Semaphore => "semaphore",
        }
    }

    /// The kind named `name` (as [`TargetKind::name`] writes it).
    pub fn from_name(name: &str) -> Option<TargetKind> {
        [
            TargetKind::Plain,
            TargetKind::Fair,
            TargetKind::ReadWrite,
            TargetKind::Semaphore,
        ]
        .into_iter()
        .find(|k| k.name() == name)
    }
}

/// The lock a fault should hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Which primitive of the name.
    pub kind: TargetKind,
    /// The lock name.
    pub name: String,
    /// The holder's client id (a worker's `Hello` carries the same id).
    pub client_id: String,
    /// The holder's owner id.
    pub owner: String,
    /// The holder's fencing token.
    pub fencing_token: u64,
    /// How long the polls have seen this holder hold it (a lower bound).
    pub held_for: Duration,
    /// Waiters subscribed to the lock when it was picked.
    pub waiters: u64,
}

/// What [`wait_for_target`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Triggered {
    /// A long hold with a waiter: inject now.
    Effective(Target),
    /// None within the bound; `longest` is the longest hold seen (without a waiter, or too
    /// short), if any: inject anyway and count the injection as not effective.
    NotEffective {
        /// The best candidate seen.
        longest: Option<Target>,
    },
}

/// Polls the holders and waiter counts of `config.names` through `client` (connected to the
/// servers directly, not through a fault) until a lock has been held by the same owner for
/// `config.min_hold` while at least one client waits for it, and the holder's client id
/// passes `is_worker` (a worker of this run, not the inspector). Gives up after
/// `config.bound`.
pub async fn wait_for_target(
    client: &LockClient,
    config: &TriggerConfig,
    is_worker: impl Fn(&str) -> bool,
) -> Triggered {
    let started = Instant::now();
    // name -> (owner, token, first seen)
    let mut seen: HashMap<String, (String, u64, Instant)> = HashMap::new();
    let mut longest: Option<Target> = None;
    loop {
        let waiters = tokio::time::timeout(
            config.probe_timeout,
            client.admin().waiters(config.names.iter()),
        )
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
        for (i, name) in config.names.iter().enumerate() {
            let Ok(Ok(info)) =
                tokio::time::timeout(config.probe_timeout, client.admin().inspect(name)).await
            else {
                continue;
            };
            let Some(holder) = info.holder else {
                seen.remove(name);
                continue;
            };
            let now = Instant::now();
            let entry = seen
                .entry(name.clone())
                .or_insert_with(|| (holder.owner.clone(), holder.fencing_token, now));
            if entry.0 != holder.owner || entry.1 != holder.fencing_token {
                *entry = (holder.owner.clone(), holder.fencing_token, now);
            }
            if !is_worker(holder.client_id()) {
                continue;
            }
            let target = Target {
                kind: TargetKind::Plain,
                name: name.clone(),
                client_id: holder.client_id().to_owned(),
                owner: holder.owner.clone(),
                fencing_token: holder.fencing_token,
                held_for: now - entry.2,
                waiters: waiters.get(i).copied().unwrap_or(0),
            };
            if target.held_for >= config.min_hold && (target.waiters > 0 || config.waiters_unknown)
            {
                return Triggered::Effective(target);
            }
            if longest
                .as_ref()
                .is_none_or(|l| l.held_for < target.held_for)
            {
                longest = Some(target);
            }
        }
        if started.elapsed() >= config.bound {
            return Triggered::NotEffective { longest };
        }
        tokio::time::sleep(config.poll).await;
    }
}

/// The id of the client of an owner id (the owner id up to its last `:`).
fn client_of(owner: &str) -> &str {
    owner.rsplit_once(':').map_or(owner, |(client, _)| client)
}

/// One poll of the lock family's primitive `kind` named `name`: its holders (owner,
/// fencing token; 0 where the store records none: readers, permits) and how many clients
/// wait for it (the fair queue's places; waiting writers or the subscribers of the
/// primitive's own wake-up channel, whichever is more; a semaphore's subscribers). `None`
/// when the poll failed or timed out.
async fn family_holders(
    client: &LockClient,
    kind: TargetKind,
    name: &str,
    timeout: Duration,
) -> Option<(Vec<(String, u64)>, u64)> {
    let admin = client.admin();
    let subscribed = |listed: ListedLock| async {
        tokio::time::timeout(timeout, admin.waiters_of(&[listed]))
            .await
            .ok()
            .and_then(Result::ok)
            .and_then(|counts| counts.first().copied())
            .unwrap_or(0)
    };
    match kind {
        TargetKind::Plain => None,
        TargetKind::Fair => {
            let info = tokio::time::timeout(timeout, admin.inspect_fair(name))
                .await
                .ok()?
                .ok()?;
            let holders = info
                .holder
                .map(|h| (h.owner, h.fencing_token))
                .into_iter()
                .collect();
            Some((holders, info.queue.len() as u64))
        }
        TargetKind::ReadWrite => {
            let info = tokio::time::timeout(timeout, admin.inspect_read_write(name))
                .await
                .ok()?
                .ok()?;
            // Readers only: their expiry is a member's, inside a key.
            let holders = info.readers.iter().map(|r| (r.owner.clone(), 0)).collect();
            let writers = info.waiting_writers.len() as u64;
            let waiting = writers.max(subscribed(ListedLock::ReadWrite(info)).await);
            Some((holders, waiting))
        }
        TargetKind::Semaphore => {
            let info = tokio::time::timeout(timeout, admin.inspect_semaphore(name))
                .await
                .ok()?
                .ok()?;
            let holders = info.holders.iter().map(|h| (h.owner.clone(), 0)).collect();
            Some((holders, subscribed(ListedLock::Semaphore(info)).await))
        }
    }
}

/// As [`wait_for_target`], for one primitive of the lock family (`kind`, not
/// [`TargetKind::Plain`]) named `name`: a fair lock's holder with a waiter queued, a reader
/// of a read-write lock or a holder of a semaphore's permits while a client waits, seen
/// holding for `config.min_hold` (the longest-seen such holder is the target).
pub async fn wait_for_family_target(
    client: &LockClient,
    kind: TargetKind,
    name: &str,
    config: &TriggerConfig,
    is_worker: impl Fn(&str) -> bool,
) -> Triggered {
    let started = Instant::now();
    // owner -> first seen holding
    let mut seen: HashMap<String, Instant> = HashMap::new();
    let mut longest: Option<Target> = None;
    loop {
        if let Some((holders, waiters)) =
            family_holders(client, kind, name, config.probe_timeout).await
        {
            let now = Instant::now();
            seen.retain(|owner, _| holders.iter().any(|(o, _)| o == owner));
            let mut best: Option<Target> = None;
            for (owner, token) in holders {
                let first = *seen.entry(owner.clone()).or_insert(now);
                if !is_worker(client_of(&owner)) {
                    continue;
                }
                let target = Target {
                    kind,
                    name: name.to_owned(),
                    client_id: client_of(&owner).to_owned(),
                    owner,
                    fencing_token: token,
                    held_for: now - first,
                    waiters,
                };
                if best.as_ref().is_none_or(|b| b.held_for < target.held_for) {
                    best = Some(target);
                }
            }
            if let Some(target) = best {
                if target.held_for >= config.min_hold
                    && (target.waiters > 0 || config.waiters_unknown)
                {
                    return Triggered::Effective(target);
                }
                if longest
                    .as_ref()
                    .is_none_or(|l| l.held_for < target.held_for)
                {
                    longest = Some(target);
                }
            }
        }
        if started.elapsed() >= config.bound {
            return Triggered::NotEffective { longest };
        }
        tokio::time::sleep(config.poll).await;
    }
}

/// Who did something in the history: a worker's task.
pub type Who = (u32, u32);

/// A hold of the target lock (from its `Acquired` to its `Released`/`Lost`, `None` when it
/// never ended in the history), or an acquisition attempt (from the call to its return,
/// `None` when it never returned). Times in ns on the history's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    /// The worker and task.
    pub who: Who,
    /// Start.
    pub start: u64,
    /// End, if it ended.
    pub end: Option<u64>,
}

impl Interval {
    fn covers(&self, t: u64) -> bool {
        self.start <= t && self.end.is_none_or(|end| end > t)
    }
}

/// Whether an injection hit a lock somebody wanted, decided from the history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// At the fault's start the lock had been held at least `min_hold` by `holder`, and
    /// `waiting` other tasks were trying to acquire it.
    Effective {
        /// The holder.
        holder: Who,
        /// How long it had held the lock at the fault's start.
        held_ns: u64,
        /// Attempts by other tasks in flight at the fault's start.
        waiting: usize,
    },
    /// Nobody (or not the targeted worker) held the lock at the fault's start.
    NoHolder,
    /// Held, but for less than `min_hold`.
    ShortHold,
    /// Held long enough, but nobody else was trying to acquire it.
    NoWaiter,
}

impl Effect {
    /// Whether it counts as effective.
    pub fn is_effective(self) -> bool {
        matches!(self, Effect::Effective { .. })
    }
}

/// Decides whether a fault that started at `fault_start` hit the lock whose holds are
/// `holds` and acquisition attempts are `attempts` (both for that one lock name): effective
/// when a hold covering `fault_start` had begun at least `min_hold_ns` earlier and at least
/// one attempt by another task covers `fault_start`. With `target_worker`, the hold must be
/// that worker's (a fault aimed at a holder process that was no longer the holder missed).
pub fn effect(
    fault_start: u64,
    min_hold_ns: u64,
    target_worker: Option<u32>,
    holds: &[Interval],
    attempts: &[Interval],
) -> Effect {
    // Under a fault that breaks exclusion two holds may overlap: take the longest-running.
    let Some(hold) = holds
        .iter()
        .filter(|h| h.covers(fault_start))
        .filter(|h| target_worker.is_none_or(|w| h.who.0 == w))
        .min_by_key(|h| h.start)
    else {
        return Effect::NoHolder;
    };
    let held_ns = fault_start - hold.start;
    if held_ns < min_hold_ns {
        return Effect::ShortHold;
    }
    let waiting = attempts
        .iter()
        .filter(|a| a.who != hold.who && a.covers(fault_start))
        .count();
    if waiting == 0 {
        return Effect::NoWaiter;
    }
    Effect::Effective {
        holder: hold.who,
        held_ns,
        waiting,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(worker: u32, task: u32, start: u64, end: Option<u64>) -> Interval {
        Interval {
            who: (worker, task),
            start,
            end,
        }
    }

    #[test]
    fn effective_when_long_hold_and_another_task_waits() {
        let holds = [iv(1, 0, 100, Some(900))];
        let attempts = [iv(2, 3, 400, Some(950)), iv(1, 0, 90, Some(100))];
        assert_eq!(
            effect(500, 300, None, &holds, &attempts),
            Effect::Effective {
                holder: (1, 0),
                held_ns: 400,
                waiting: 1
            }
        );
        // An attempt that never returned still counts; the holder's own does not.
        let attempts = [iv(2, 1, 450, None), iv(1, 0, 450, None)];
        assert!(effect(500, 300, Some(1), &holds, &attempts).is_effective());
        // Another task of the same worker waiting counts.
        let attempts = [iv(1, 2, 450, None)];
        assert!(effect(500, 300, None, &holds, &attempts).is_effective());
    }

    #[test]
    fn not_effective_cases() {
        let holds = [iv(1, 0, 100, Some(900))];
        let waiter = [iv(2, 0, 400, None)];
        assert_eq!(effect(50, 0, None, &holds, &waiter), Effect::NoHolder);
        assert_eq!(
            effect(900, 0, None, &holds, &waiter),
            Effect::NoHolder,
            "hold ended"
        );
        assert_eq!(effect(300, 300, None, &holds, &waiter), Effect::ShortHold);
        assert_eq!(effect(500, 300, None, &holds, &[]), Effect::NoWaiter);
        // The waiter gave up before the fault, or started after it.
        let gone = [iv(2, 0, 200, Some(450)), iv(3, 0, 600, None)];
        assert_eq!(effect(500, 300, None, &holds, &gone), Effect::NoWaiter);
        // The targeted worker was not the holder.
        assert_eq!(effect(500, 300, Some(7), &holds, &waiter), Effect::NoHolder);
    }

    #[test]
    fn overlapping_holds_take_the_oldest() {
        let holds = [iv(1, 0, 100, None), iv(2, 0, 450, None)];
        let attempts = [iv(3, 0, 400, None)];
        assert_eq!(
            effect(500, 300, None, &holds, &attempts),
            Effect::Effective {
                holder: (1, 0),
                held_ns: 400,
                waiting: 1
            }
        );
        // Aimed at worker 2, whose hold is too short.
        assert_eq!(
            effect(500, 300, Some(2), &holds, &attempts),
            Effect::ShortHold
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn triggers_on_a_long_hold_with_a_waiter_only() {
        let server = tokio::task::spawn_blocking(lock_test_support::RedisServer::start)
            .await
            .unwrap();
        let connect = || async {
            LockClient::builder()
                .lease(Duration::from_secs(3))
                .connect(&server.url())
                .await
                .unwrap()
        };
        let (holder, waiter, inspector) = (connect().await, connect().await, connect().await);
        let names = vec!["trigger-a".to_owned(), "trigger-b".to_owned()];
        let mut config = TriggerConfig::new(names, Duration::from_secs(3));
        config.min_hold = Duration::from_millis(300);
        config.bound = Duration::from_millis(1500);
        let holder_id = holder.id().to_owned();
        let is_worker = |id: &str| id == holder_id;

        let guard = holder.lock("trigger-b").acquire().await.unwrap();
        // Held, nobody waiting: not effective, but the hold is reported.
        match wait_for_target(&inspector, &config, is_worker).await {
            Triggered::NotEffective { longest: Some(t) } => {
                assert_eq!(t.name, "trigger-b");
                assert_eq!(t.waiters, 0);
                assert!(t.held_for >= Duration::from_millis(1000), "{t:?}");
            }
            other => panic!("expected no effective target, got {other:?}"),
        }
        let waiting = tokio::spawn(async move {
            waiter
                .lock("trigger-b")
                .wait(Duration::from_secs(10))
                .acquire()
                .await
                .map(|g| g.owner().to_owned())
        });
        let started = Instant::now();
        match wait_for_target(&inspector, &config, is_worker).await {
            Triggered::Effective(t) => {
                assert_eq!(t.name, "trigger-b");
                assert_eq!(t.client_id, holder.id());
                assert_eq!(t.owner, guard.owner());
                assert_eq!(t.fencing_token, guard.fencing_token());
                assert!(t.waiters >= 1);
            }
            other => panic!("expected a target, got {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_millis(1500));
        // The inspector's own hold is never a target.
        let is_nobody = |_: &str| false;
        assert!(matches!(
            wait_for_target(&inspector, &config, is_nobody).await,
            Triggered::NotEffective { longest: None }
        ));
        guard.release().await.unwrap();
        let _ = waiting.await.unwrap().unwrap();
        tokio::task::spawn_blocking(move || drop(server))
            .await
            .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn triggers_on_a_family_hold_with_a_waiter_only() {
        let server = tokio::task::spawn_blocking(lock_test_support::RedisServer::start)
            .await
            .unwrap();
        let connect = || async {
            LockClient::builder()
                .lease(Duration::from_secs(3))
                .connect(&server.url())
                .await
                .unwrap()
        };
        let (holder, waiter, inspector) = (connect().await, connect().await, connect().await);
        let mut config = TriggerConfig::new(Vec::new(), Duration::from_secs(3));
        config.min_hold = Duration::from_millis(300);
        config.bound = Duration::from_millis(1500);
        let holder_id = holder.id().to_owned();
        let is_worker = |id: &str| id == holder_id;
        let wait = Duration::from_secs(10);

        // A reader with nobody waiting: reported, not effective.
        let read = holder
            .read_write_lock("trig-rw")
            .read()
            .acquire()
            .await
            .unwrap();
        match wait_for_family_target(
            &inspector,
            TargetKind::ReadWrite,
            "trig-rw",
            &config,
            is_worker,
        )
        .await
        {
            Triggered::NotEffective { longest: Some(t) } => {
                assert_eq!(
                    (t.kind, t.owner.as_str()),
                    (TargetKind::ReadWrite, read.owner())
                );
                assert_eq!(t.waiters, 0);
            }
            other => panic!("expected no effective target, got {other:?}"),
        }
        // A writer waits for the reader: the reader is the target.
        let writer = tokio::spawn({
            let waiter = waiter.clone();
            async move {
                let guard = waiter
                    .read_write_lock("trig-rw")
                    .write()
                    .wait(wait)
                    .acquire()
                    .await;
                guard.unwrap().release().await.unwrap();
            }
        });
        match wait_for_family_target(
            &inspector,
            TargetKind::ReadWrite,
            "trig-rw",
            &config,
            is_worker,
        )
        .await
        {
            Triggered::Effective(t) => {
                assert_eq!(t.owner, read.owner());
                assert_eq!(t.client_id, holder.id());
                assert!(t.waiters >= 1, "{t:?}");
            }
            other => panic!("expected a target, got {other:?}"),
        }
        read.release().await.unwrap();
        writer.await.unwrap();

        // A fair lock's holder with a waiter queued behind it.
        let turn = holder.fair_lock("trig-fair").acquire().await.unwrap();
        let queued = tokio::spawn({
            let waiter = waiter.clone();
            async move {
                let guard = waiter.fair_lock("trig-fair").wait(wait).acquire().await;
                guard.unwrap().release().await.unwrap();
            }
        });
        match wait_for_family_target(
            &inspector,
            TargetKind::Fair,
            "trig-fair",
            &config,
            is_worker,
        )
        .await
        {
            Triggered::Effective(t) => {
                assert_eq!(t.kind, TargetKind::Fair);
                assert_eq!(t.owner, turn.owner());
                assert_eq!(t.fencing_token, turn.fencing_token());
                assert_eq!(t.waiters, 1);
            }
            other => panic!("expected a target, got {other:?}"),
        }
        turn.release().await.unwrap();
        queued.await.unwrap();

        // Every permit of a semaphore held, a client waiting for one.
        let permit = holder
            .semaphore("trig-sem", 1)
            .permit()
            .acquire()
            .await
            .unwrap();
        let pending = tokio::spawn({
            let waiter = waiter.clone();
            async move {
                let guard = waiter
                    .semaphore("trig-sem", 1)
                    .permit()
                    .wait(wait)
                    .acquire()
                    .await;
                guard.unwrap().release().await.unwrap();
            }
        });
        match wait_for_family_target(
            &inspector,
            TargetKind::Semaphore,
            "trig-sem",
            &config,
            is_worker,
        )
        .await
        {
            Triggered::Effective(t) => {
                assert_eq!(
                    (t.kind, t.owner.as_str()),
                    (TargetKind::Semaphore, permit.owner())
                );
                assert!(t.waiters >= 1, "{t:?}");
            }
            other => panic!("expected a target, got {other:?}"),
        }
        permit.release().await.unwrap();
        pending.await.unwrap();
        tokio::task::spawn_blocking(move || drop(server))
            .await
            .unwrap();
    }
}
