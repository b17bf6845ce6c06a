use distlock::{distributed_lock, LockError};

#[distributed_lock(keys = ["account:{from}", "account:{to}"], fair)]
async fn transfer(from: u32, to: u32) -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let _ = transfer(1, 2);
}
