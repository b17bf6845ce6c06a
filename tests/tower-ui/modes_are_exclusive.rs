// A layer has one mode: the mode methods exist only in the default
// (exclusive) mode, so a second one does not compile.
use distlock::tower::{LockLayer, PathTemplate, SafeMethods};
use distlock::LockClient;

fn main() {
    let key = || PathTemplate::new("/orders/{id}", "order:{id}");
    let client = LockClient::memory();
    let _ = LockLayer::new(client.clone(), key()).fair().concurrency_limit(5);
    let _ = LockLayer::new(client.clone(), key()).read_write(SafeMethods).fair();
    let _ = LockLayer::new(client.clone(), key()).concurrency_limit(5).read_write(SafeMethods);
    let _ = LockLayer::new(client, key()).grpc().fair().fair();
}
