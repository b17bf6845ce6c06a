use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "prices", read, write)]
async fn update_prices() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "exports", fair, permits = 3)]
async fn export() -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let _ = update_prices();
    let _ = export();
}
