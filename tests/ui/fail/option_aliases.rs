//! Option names from other lock libraries get the option meant here.
use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "order:{id}", waitTime = "5s", leaseTime = "30s")]
async fn pay(id: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "order:{id}", lease_time = "30s")]
async fn refund(id: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "order:{id}", leas = "30s")]
async fn ship(id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let _ = pay(1);
    let _ = refund(1);
    let _ = ship(1);
}
