//! Background tasks that cannot die silently.
//!
//! A [`Supervised`] task is started on the runtime of the code that needs it
//! and started again (on that code's runtime) when its task is gone: its
//! runtime was dropped, or it panicked. Dropping the `Supervised` stops it.
//! The task's state must therefore live outside the task (in the structure
//! that owns the `Supervised`), so that a restarted task picks up where the
//! gone one stopped. [`stop`](Supervised::stop) ends it for good (the client
//! shut down): it is not started again.

use std::future::Future;

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use crate::sync::Mutex;

/// The owner of one background task.
#[derive(Debug, Default)]
pub(crate) struct Supervised {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    task: Option<JoinHandle<()>>,
    /// Stopped for good: never started again.
    stopped: bool,
}

impl Supervised {
    /// Makes sure the task runs: spawns `start()` on the current runtime
    /// when it has never run, or its task is gone. Returns false when there
    /// is no runtime to run it on (the caller's work then waits until a later
    /// call from inside a runtime), or when the task was stopped for good.
    pub(crate) fn ensure<F, Fut>(&self, start: F) -> bool
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let mut state = self.state.lock();
        if state.stopped {
            return false;
        }
        if state.task.as_ref().is_some_and(|task| !task.is_finished()) {
            return true;
        }
        let Ok(runtime) = Handle::try_current() else {
            return false;
        };
        state.task = Some(runtime.spawn(start()));
        true
    }

    /// Whether the task runs now.
    pub(crate) fn is_running(&self) -> bool {
        self.state
            .lock()
            .task
            .as_ref()
            .is_some_and(|task| !task.is_finished())
    }

    /// Forgets a task that ended by itself (it found nothing left to do), so
    /// that the next [`ensure`](Supervised::ensure) starts a new one. Called
    /// by the task, under the owner's own lock, right before it returns.
    pub(crate) fn finished(&self) {
        self.state.lock().task.take();
    }

    /// Stops the task for good (at its current `.await`): later calls of
    /// [`ensure`](Supervised::ensure) start nothing.
    pub(crate) fn stop(&self) {
        let mut state = self.state.lock();
        state.stopped = true;
        if let Some(task) = state.task.take() {
            task.abort();
        }
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        if let Some(task) = self.state.lock().task.take() {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    }

    /// Until the task started `n` times (its runtime's worker may be slow to
    /// get to it on a busy machine).
    async fn started(starts: &AtomicUsize, n: usize) {
        tokio::time::timeout(Duration::from_secs(60), async {
            while starts.load(Ordering::SeqCst) < n {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("the task started");
    }

    #[test]
    fn a_task_whose_runtime_was_dropped_is_started_again_on_the_next() {
        let task = Supervised::default();
        let starts = Arc::new(AtomicUsize::new(0));
        let start = || {
            let starts = starts.clone();
            async move {
                starts.fetch_add(1, Ordering::SeqCst);
                std::future::pending::<()>().await;
            }
        };
        let first = runtime();
        first.block_on(async {
            assert!(task.ensure(start));
            started(&starts, 1).await;
            assert!(task.ensure(start), "still running: not started twice");
        });
        drop(first);
        let second = runtime();
        second.block_on(async {
            assert!(task.ensure(start));
            started(&starts, 2).await;
        });
        drop(second);
        assert_eq!(starts.load(Ordering::SeqCst), 2);
        assert!(!task.is_running());
        assert!(!task.ensure(start), "no runtime here: nothing to start on");
    }

    #[tokio::test]
    async fn a_panicked_task_is_started_again() {
        let task = Supervised::default();
        assert!(task.ensure(|| async { panic!("the task fails") }));
        tokio::time::sleep(Duration::from_millis(20)).await;
        let ran = Arc::new(AtomicUsize::new(0));
        let seen = ran.clone();
        task.ensure(move || async move {
            seen.fetch_add(1, Ordering::SeqCst);
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_stopped_task_is_not_started_again() {
        let task = Supervised::default();
        assert!(task.ensure(std::future::pending::<()>));
        task.stop();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!task.is_running());
        let ran = Arc::new(AtomicUsize::new(0));
        let seen = ran.clone();
        assert!(!task.ensure(move || async move {
            seen.fetch_add(1, Ordering::SeqCst);
        }));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(ran.load(Ordering::SeqCst), 0);
    }
}
