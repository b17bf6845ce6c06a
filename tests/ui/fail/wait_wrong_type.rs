use distlock::{distributed_lock, LockError};

struct Config {
    wait_secs: u64,
}

#[distributed_lock(key = "order:{id}", wait = cfg.wait_secs)]
async fn pay(cfg: &Config, id: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "order:{id}", wait = 10)]
async fn refund(id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let _ = pay(&Config { wait_secs: 1 }, 1);
    let _ = refund(1);
}
