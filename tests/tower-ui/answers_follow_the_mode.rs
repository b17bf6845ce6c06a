// The busy answer's options exist in the modes that lock, the
// over-the-limit answer's only under a concurrency limit.
use distlock::tower::{LockLayer, PathTemplate};
use distlock::LockClient;
use http::StatusCode;

fn main() {
    let key = || PathTemplate::new("/orders/{id}", "order:{id}");
    let client = LockClient::memory();
    let _ = LockLayer::new(client.clone(), key())
        .concurrency_limit(5)
        .busy_status(StatusCode::LOCKED);
    let _ = LockLayer::new(client, key())
        .fair()
        .limit_status(StatusCode::SERVICE_UNAVAILABLE);
}
