use distlock::distributed_lock;

#[distributed_lock(key = "job:{name}")]
async fn run_job(name: &str) -> u32 {
    1
}

fn main() {
    let _ = run_job("nightly");
}
