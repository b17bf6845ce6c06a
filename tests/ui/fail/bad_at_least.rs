use distlock::distributed_lock;

#[distributed_lock(key = "job:report", at_least = "5 minuts", on_busy = skip)]
async fn report() {}

fn main() {
    let _ = report();
}
