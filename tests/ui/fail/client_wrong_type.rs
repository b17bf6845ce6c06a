//! `client = <not a LockClient>`: the message names the types `client` takes.
use distlock::{distributed_lock, LockError};

struct Service {
    redis_url: String,
}

impl Service {
    #[distributed_lock(key = "order:{id}", client = self.redis_url)]
    async fn pay(&self, id: u64) -> Result<(), LockError> {
        Ok(())
    }
}

fn main() {
    let service = Service {
        redis_url: "redis://127.0.0.1/".to_owned(),
    };
    let _ = service.pay(1);
}
