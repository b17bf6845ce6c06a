use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "order:{id")]
async fn pay(id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let _ = pay(1);
}
