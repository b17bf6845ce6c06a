//! Sharded pub/sub is a cluster's option: one node has none.
use distlock::{LockClient, ShardedPubSub};

async fn connect() {
    let _ = LockClient::builder()
        .redis("redis://127.0.0.1/")
        .sharded_pubsub(ShardedPubSub::On)
        .connect()
        .await;
}

fn main() {
    let _ = connect();
}
