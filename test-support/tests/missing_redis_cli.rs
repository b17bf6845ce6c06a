//! Without `redis-cli` (next to `redis-server` or on `PATH`) the cluster helpers panic with
//! the install command.
//!
//! Kept in its own test binary, with a single test, because it changes `PATH` for the whole
//! process.

use lock_test_support::{redis_cli_path, redis_server_path, RedisCluster};

fn panic_message(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
    let payload = std::panic::catch_unwind(f).expect_err("must panic without redis-cli");
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

#[test]
fn cluster_panics_with_the_install_command_when_redis_cli_is_missing() {
    // A PATH with only redis-server on it (a symlink), so redis-cli is found nowhere.
    let server = redis_server_path();
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&server, bin.path().join("redis-server")).unwrap();
    std::env::set_var("PATH", bin.path());

    let expected = "redis-cli not found next to redis-server or on PATH: install it with \
                    `apt-get update && apt-get install -y redis-tools` \
                    (needed to form a Redis Cluster)";
    assert_eq!(panic_message(|| drop(redis_cli_path())), expected);
    // The check comes before any server is started.
    assert_eq!(panic_message(|| drop(RedisCluster::start(3, 1))), expected);
}
