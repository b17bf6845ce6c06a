//! Every other option: `keys`, `lease`, `wait = "forever"`, `abort_on_lost`,
//! client expressions, `crate = "..."`, `Result` aliases, literal braces.
use std::sync::Arc;

use distlock::{distributed_lock, LockClient, LockError};
use distlock as locks;

type AppResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn client() -> LockClient {
    distlock::global_client().unwrap()
}

#[distributed_lock(keys = ["account:{from}", "account:{to}"], wait = "forever", client = client)]
async fn transfer(client: Arc<LockClient>, from: u32, to: u32) -> Result<Vec<String>, LockError> {
    Ok(distlock::current_all().iter().map(|l| l.key().to_owned()).collect())
}

#[distributed_lock(key = "cache:{name}", lease = "1500ms", abort_on_lost, client = client())]
async fn refresh(name: &str) -> std::io::Result<usize> {
    Ok(name.len())
}

#[distributed_lock(key = "literal:{{braces}}:<<{id}", crate = "locks")]
async fn renamed(id: u8) -> AppResult<String> {
    Ok(locks::current().unwrap().key().to_owned())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    distlock::set_global_client(LockClient::memory());
    let client = Arc::new(client());
    assert_eq!(transfer(client.clone(), 2, 1).await.unwrap(), ["account:2", "account:1"]);
    assert_eq!(transfer(client, 1, 1).await.unwrap(), ["account:1"]);
    assert_eq!(refresh("abc").await.unwrap(), 3);
    assert_eq!(renamed(5).await.unwrap(), "literal:{braces}:<5");
}
