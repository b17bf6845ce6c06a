use distlock::distributed_lock;

#[distributed_lock(key = "job:{name}", on_busy = skip, abort_on_lost)]
async fn run_job(name: &str) -> Option<u32> {
    Some(1)
}

fn main() {
    let _ = run_job("nightly");
}
