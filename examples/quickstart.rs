//! Quickstart: eight workers increment a shared counter under one lock.
//!
//! Uses Redis when `REDIS_URL` is set (e.g. `redis://127.0.0.1:6379/`),
//! PostgreSQL when `DATABASE_URL` is (feature `postgres`), otherwise the
//! in-memory backend, and says which.
//!
//! ```sh
//! cargo run --example quickstart
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example quickstart
//! DATABASE_URL=postgres://app@127.0.0.1:5432/app cargo run --example quickstart --features postgres
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::{LockClient, LockError};

#[tokio::main]
async fn main() -> Result<(), LockError> {
    // `LockClient::connect` takes a redis:// or a postgres:// URL.
    let url = std::env::var("REDIS_URL").or_else(|_| std::env::var("DATABASE_URL"));
    let client = match url {
        Ok(url) => {
            let client = LockClient::connect(&url).await?;
            // The server only: the URL may carry a password.
            let store = if url.starts_with("postgres") {
                "PostgreSQL"
            } else {
                "Redis"
            };
            println!("backend: {store} at {}", client.server());
            client
        }
        Err(_) => {
            println!(
                "backend: in-memory (set REDIS_URL=redis://host:port/ to use Redis, or \
                 DATABASE_URL=postgres://user@host/db with --features postgres)"
            );
            LockClient::memory()
        }
    };

    // 1. Mutual exclusion with waiting: 8 workers x 5 increments of a
    //    read-modify-write counter that is only safe under the lock.
    let counter = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for worker in 0..8 {
        let (client, counter) = (client.clone(), counter.clone());
        workers.push(tokio::spawn(async move {
            for _ in 0..5 {
                let guard = client
                    .lock("quickstart:counter")
                    .wait(Duration::from_secs(10))
                    .acquire()
                    .await?;
                let seen = counter.load(Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
                counter.store(seen + 1, Ordering::SeqCst);
                println!(
                    "worker {worker} holds the lock with fencing token {}",
                    guard.fencing_token()
                );
                guard.release().await?;
            }
            Ok::<_, LockError>(())
        }));
    }
    for worker in workers {
        worker.await.expect("worker panicked")?;
    }
    println!(
        "counter = {} after 40 locked increments",
        counter.load(Ordering::SeqCst)
    );

    // 2. try once: a second owner does not get a held lock.
    let guard = client.lock("quickstart:job").acquire().await?;
    let other = tokio::spawn({
        let client = client.clone();
        async move { client.lock("quickstart:job").try_acquire().await }
    });
    let busy = other.await.expect("task panicked")?.is_none();
    println!("another task trying the held lock gets nothing: {busy}");

    // 3. Reentrancy: inside the guard's scope the same lock is re-entered.
    guard
        .scope(async {
            let again = client.lock("quickstart:job").acquire().await?;
            println!(
                "re-entered quickstart:job (holds: {}, same token: {})",
                again.hold_count(),
                again.fencing_token() == guard.fencing_token()
            );
            again.release().await
        })
        .await?;
    guard.release().await?;
    println!("released; done");
    Ok(())
}
