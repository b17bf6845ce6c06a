//! A mutex that a panicking thread cannot poison for everyone else.
//!
//! The lock's shared state (scopes, the watchdog's list, the in-memory store)
//! is only changed in short critical sections that call no user code, so a
//! panic inside one leaves consistent data; refusing every later call because
//! of it (std's poisoning) would take the whole process down instead.

use std::sync::{MutexGuard, PoisonError};

/// `std::sync::Mutex` whose `lock` ignores poisoning.
#[derive(Debug, Default)]
pub(crate) struct Mutex<T>(std::sync::Mutex<T>);

impl<T> Mutex<T> {
    pub(crate) const fn new(value: T) -> Self {
        Mutex(std::sync::Mutex::new(value))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_while_locked_does_not_poison() {
        let mutex = std::sync::Arc::new(Mutex::new(1));
        let other = mutex.clone();
        let _ = std::thread::spawn(move || {
            let _held = other.lock();
            panic!("a caller panics while holding the lock");
        })
        .join();
        *mutex.lock() += 1;
        assert_eq!(*mutex.lock(), 2);
    }
}
