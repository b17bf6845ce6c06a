//! Background cleanup: the release of a dropped guard's lock and the
//! rollback of a grant whose acquisition was abandoned.
//!
//! Jobs are kept here until they finish, and run by one [`Supervised`] task:
//! when its runtime goes away mid-job, the next call from another runtime
//! starts a task there that runs the unfinished jobs again from the start
//! (every job is safe to repeat). A job queued where there is no runtime at
//! all (a guard dropped after its runtime shut down) waits for the next one.
//! A client's shutdown waits (bounded) for the jobs to finish; jobs queued
//! after it still run (they only delete this client's own entries).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};

use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::Notify;

use crate::supervised::Supervised;
use crate::sync::Mutex;

/// A cleanup job: makes the future that does it, as often as it is started.
pub(crate) type Job = Box<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>;

/// The owner of a client's cleanup jobs.
#[derive(Debug, Default)]
pub(crate) struct Janitor {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    jobs: Mutex<Jobs>,
    added: Notify,
    /// Woken when the last pending job finished.
    drained: Notify,
    task: Supervised,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Janitor")
            .field("jobs", &self.jobs.lock().pending.len())
            .finish()
    }
}

#[derive(Default)]
struct Jobs {
    next: u64,
    pending: HashMap<u64, Arc<Job>>,
}

impl Janitor {
    /// Queues `job` and makes sure the task runs.
    pub(crate) fn spawn(&self, job: Job) {
        let mut jobs = self.shared.jobs.lock();
        let id = jobs.next;
        jobs.next = jobs.next.wrapping_add(1);
        jobs.pending.insert(id, Arc::new(job));
        self.start(&jobs);
        drop(jobs);
        self.shared.added.notify_one();
    }

    /// Makes sure the task runs while jobs are pending (its runtime may have
    /// gone since it was started).
    pub(crate) fn ensure_running(&self) {
        let jobs = self.shared.jobs.lock();
        if !jobs.pending.is_empty() {
            self.start(&jobs);
        }
    }

    /// Starts the task; called under the jobs' lock, as the task ends under it.
    fn start(&self, _jobs: &Jobs) {
        let shared = Arc::downgrade(&self.shared);
        self.shared.task.ensure(move || run(shared));
    }

    /// Resolves when no job is pending (starting the task on this runtime
    /// when jobs wait for one). Jobs queued meanwhile are waited for too.
    pub(crate) async fn idle(&self) {
        loop {
            // Created before the check: a drain after it still wakes us.
            let drained = self.shared.drained.notified();
            {
                let jobs = self.shared.jobs.lock();
                if jobs.pending.is_empty() {
                    return;
                }
                self.start(&jobs);
            }
            drained.await;
        }
    }

    /// Jobs not finished yet.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.shared.jobs.lock().pending.len()
    }
}

async fn run(shared: Weak<Shared>) {
    let mut running = FuturesUnordered::new();
    let mut started: HashSet<u64> = HashSet::new();
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let added = strong.added.notified();
        {
            let jobs = strong.jobs.lock();
            for (&id, job) in &jobs.pending {
                if started.insert(id) {
                    let work = job();
                    running.push(async move {
                        work.await;
                        id
                    });
                }
            }
            if running.is_empty() {
                strong.task.finished();
                return;
            }
        }
        // Jobs are running: they keep the janitor alive until they end.
        tokio::select! {
            Some(id) = running.next() => {
                started.remove(&id);
                let mut jobs = strong.jobs.lock();
                jobs.pending.remove(&id);
                if jobs.pending.is_empty() {
                    strong.drained.notify_waiters();
                }
            }
            () = added => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use futures_util::FutureExt;

    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    }

    /// A job cut off mid-way (its runtime dropped while it waits for a gate
    /// that only opens later) runs again from the start on the next
    /// runtime, once `ensure_running` is called there. No timing: the job
    /// reports its starts and its end.
    #[test]
    fn a_job_cut_off_by_its_runtime_runs_again_on_the_next() {
        let janitor = Janitor::default();
        let started = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let finished = Arc::new(Notify::new());
        let (gate, opened) = tokio::sync::watch::channel(false);
        let first = runtime();
        first.block_on(async {
            let (starts, done, finished) = (started.clone(), done.clone(), finished.clone());
            janitor.spawn(Box::new(move || {
                let (started, done, finished) = (starts.clone(), done.clone(), finished.clone());
                let mut opened = opened.clone();
                async move {
                    started.fetch_add(1, Ordering::SeqCst);
                    let _ = opened.wait_for(|open| *open).await;
                    done.fetch_add(1, Ordering::SeqCst);
                    finished.notify_one();
                }
                .boxed()
            }));
            tokio::time::timeout(Duration::from_secs(60), async {
                while started.load(Ordering::SeqCst) == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
            .await
            .expect("the job started on the first runtime");
        });
        drop(first);
        assert_eq!(done.load(Ordering::SeqCst), 0);
        assert_eq!(janitor.pending(), 1);
        gate.send_replace(true);
        runtime().block_on(async {
            janitor.ensure_running();
            tokio::time::timeout(Duration::from_secs(60), finished.notified())
                .await
                .expect("the job ran again on the second runtime");
            janitor.idle().await; // the finished job is taken off the list
        });
        assert_eq!(started.load(Ordering::SeqCst), 2, "started again");
        assert_eq!(done.load(Ordering::SeqCst), 1);
        assert_eq!(janitor.pending(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_waits_for_every_pending_job() {
        let janitor = Janitor::default();
        janitor.idle().await; // nothing pending
        let done = Arc::new(AtomicUsize::new(0));
        for delay in [30, 60] {
            let done = done.clone();
            janitor.spawn(Box::new(move || {
                let done = done.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                    done.fetch_add(1, Ordering::SeqCst);
                }
                .boxed()
            }));
        }
        tokio::time::timeout(Duration::from_secs(2), janitor.idle())
            .await
            .unwrap();
        assert_eq!(done.load(Ordering::SeqCst), 2);
        assert_eq!(janitor.pending(), 0);
    }

    #[test]
    fn a_job_queued_without_a_runtime_waits_for_one() {
        let janitor = Janitor::default();
        let done = Arc::new(AtomicUsize::new(0));
        let seen = done.clone();
        janitor.spawn(Box::new(move || {
            let seen = seen.clone();
            async move {
                seen.fetch_add(1, Ordering::SeqCst);
            }
            .boxed()
        }));
        runtime().block_on(async {
            janitor.ensure_running();
            // Until it ran (on a busy machine, 50 ms were not always enough).
            tokio::time::timeout(Duration::from_secs(60), async {
                while done.load(Ordering::SeqCst) == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
            .await
            .expect("the job ran on the runtime");
        });
        assert_eq!(done.load(Ordering::SeqCst), 1);
    }
}
