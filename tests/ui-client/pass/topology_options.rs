//! Each topology's own options, where they apply.
use std::time::Duration;

use distlock::{LockClient, ShardedPubSub};

#[allow(dead_code)]
async fn connect() -> Result<(), distlock::LockError> {
    let _one = LockClient::builder()
        .lease(Duration::from_secs(10))
        .redis("redis://127.0.0.1/")
        .sync_replicas(1, Duration::from_millis(50))
        .connect()
        .await?;
    let _sentinel = LockClient::builder()
        .sentinel(["redis://127.0.0.1:26379/"], "locks")
        .sync_replicas(1, Duration::from_millis(50))
        .connect()
        .await?;
    let _cluster = LockClient::builder()
        .cluster(["redis://127.0.0.1:7000/"])
        .sharded_pubsub(ShardedPubSub::Off)
        .connect()
        .await?;
    let _redlock = LockClient::builder()
        .redlock(["redis://127.0.0.1:7001/", "redis://127.0.0.1:7002/"])
        .node_timeout(Duration::from_millis(50))
        .connect()
        .await?;
    let client = redis::Client::open("redis://127.0.0.1/").map_err(|err| {
        distlock::LockError::InvalidConfig {
            key: "*".into(),
            reason: err.to_string(),
        }
    })?;
    let _existing = LockClient::builder().redis_client(client).connect().await?;
    Ok(())
}

fn main() {}
