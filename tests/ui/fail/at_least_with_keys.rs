use distlock::{distributed_lock, LockError};

#[distributed_lock(keys = ["job:a", "job:b"], at_least = "5m")]
async fn both_jobs() -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let _ = both_jobs();
}
