use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "exports:{tenant}", permits = 2, take = 3)]
async fn export(tenant: u32) -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let _ = export(7);
}
