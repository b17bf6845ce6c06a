use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "exports:{tenant}", permits = limit)]
async fn export(tenant: u32, limit: usize) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "exports:{tenant}", permits = -1)]
async fn import(tenant: u32) -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let _ = export(7, 2);
    let _ = import(7);
}
