use distlock::{distributed_lock, LockError};

// `leader` names a role in place of a lock's key.
#[distributed_lock(leader = "scheduler", key = "job:tick")]
async fn with_key() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(keys = ["a", "b"], leader = "scheduler")]
async fn with_keys() -> Result<(), LockError> {
    Ok(())
}

// A term is held in watchdog mode and ends with the call.
#[distributed_lock(leader = "scheduler", lease = "30s", at_least = "5m")]
async fn with_lease() -> Result<(), LockError> {
    Ok(())
}

// One kind of lock.
#[distributed_lock(leader = "scheduler", fair)]
async fn with_fair() -> Result<(), LockError> {
    Ok(())
}

// A follower's call is busy: `on_busy = error` needs a `Result`.
#[distributed_lock(leader = "scheduler")]
async fn not_result() -> u64 {
    1
}

// A guess at the option's name.
#[distributed_lock(role = "scheduler", on_busy = skip)]
async fn guessed() {}

fn main() {
    let _ = with_key();
    let _ = with_keys();
    let _ = with_lease();
    let _ = with_fair();
    let _ = not_result();
    let _ = guessed();
}
