use distlock::distributed_lock;

struct Report;

#[distributed_lock(key = "job:{name}", on_busy = skip)]
async fn run_job(name: &str) -> Report {
    Report
}

fn main() {
    let _ = run_job("nightly");
}
