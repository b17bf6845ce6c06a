//! `#[tokio::test]` / `#[tokio::main]` above the attribute expand first and
//! take `async` off the function: the message says to swap the two.
use distlock::{distributed_lock, LockError};

#[tokio::test]
#[distributed_lock(key = "job:test")]
async fn runs_locked() -> Result<(), LockError> {
    Ok(())
}

#[tokio::main]
#[distributed_lock(key = "job:main")]
async fn main() -> Result<(), LockError> {
    Ok(())
}
