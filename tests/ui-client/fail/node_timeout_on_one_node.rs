//! The per-master timeout is Redlock's: one node has none.
use std::time::Duration;

use distlock::LockClient;

async fn connect() {
    let _ = LockClient::builder()
        .redis("redis://127.0.0.1/")
        .node_timeout(Duration::from_millis(50))
        .connect()
        .await;
}

fn main() {
    let _ = connect();
}
