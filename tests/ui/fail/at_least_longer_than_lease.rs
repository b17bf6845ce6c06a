use distlock::distributed_lock;

#[distributed_lock(key = "job:report", lease = "5m", at_least = "10m", on_busy = skip)]
async fn report() {}

fn main() {
    let _ = report();
}
