//! Without `redis-server` on `PATH` the harness panics with the install command.
//!
//! Kept in its own test binary, with a single test, because it changes `PATH` for the whole
//! process.

use lock_test_support::{redis_server_path, RedisServer, ServerOptions};

fn panic_message(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
    let payload = std::panic::catch_unwind(f).expect_err("must panic without redis-server");
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

#[test]
fn constructors_panic_with_the_install_command_when_redis_is_missing() {
    let empty = tempfile::tempdir().unwrap();
    std::env::set_var("PATH", empty.path());

    let expected = "redis-server not found on PATH: install it with \
                    `apt-get update && apt-get install -y redis-server redis-tools` \
                    (the tests need a real Redis)";
    assert_eq!(panic_message(|| drop(redis_server_path())), expected);
    assert_eq!(panic_message(|| drop(RedisServer::start())), expected);
    assert_eq!(
        panic_message(|| drop(RedisServer::start_with(ServerOptions::new().tls()))),
        expected
    );
}
