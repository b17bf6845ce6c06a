//! `WAIT` for replicas is for one node and Sentinel: a cluster has none.
use std::time::Duration;

use distlock::LockClient;

async fn connect() {
    let _ = LockClient::builder()
        .cluster(["redis://127.0.0.1:7000/"])
        .sync_replicas(1, Duration::from_millis(50))
        .connect()
        .await;
}

fn main() {
    let _ = connect();
}
