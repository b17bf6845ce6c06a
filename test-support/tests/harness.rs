//! Tests of the harness against real `redis-server` processes.

use std::time::Duration;

use lock_test_support::{free_port, redis_server_path, RedisServer, ServerOptions};
use redis::{Commands, ErrorKind};

const SHORT_TIMEOUT: Duration = Duration::from_millis(300);

fn ping(conn: &mut redis::Connection) -> redis::RedisResult<String> {
    redis::cmd("PING").query(conn)
}

#[test]
fn redis_server_is_found_and_ports_are_free() {
    assert!(redis_server_path().is_file());
    let port = free_port();
    assert_ne!(port, 0);
    assert_ne!(port, 6379);
    std::net::TcpListener::bind(("127.0.0.1", port)).expect("free_port returned a usable port");
}

#[test]
fn start_ping_set_get() {
    let server = RedisServer::start();
    assert_ne!(server.port(), 6379);
    assert_eq!(
        server.url(),
        format!("redis://127.0.0.1:{}/", server.port())
    );
    assert!(server.ca_cert_pem().is_none());

    let mut conn = server.conn();
    assert_eq!(ping(&mut conn).unwrap(), "PONG");
    let () = conn.set("greeting", "hello").unwrap();
    let value: String = conn.get("greeting").unwrap();
    assert_eq!(value, "hello");

    let info: String = redis::cmd("INFO").arg("server").query(&mut conn).unwrap();
    assert!(
        info.contains(&format!("process_id:{}", server.pid())),
        "pid() should be the server's process id"
    );
    assert!(info.contains(&format!("tcp_port:{}", server.port())));
    assert!(server.log_tail().contains("Ready to accept connections"));
}

#[test]
fn kill_fails_connections_and_restart_comes_back_empty_on_same_port() {
    let mut server = RedisServer::start();
    let port = server.port();
    let old_pid = server.pid();
    let mut conn = server.conn();
    let () = conn.set("survives", "no").unwrap();

    server.kill();
    assert!(!server.is_running());
    server.kill(); // idempotent

    conn.set_read_timeout(Some(SHORT_TIMEOUT)).unwrap();
    assert!(
        ping(&mut conn).is_err(),
        "an open connection must fail once the server is killed"
    );
    let refused = server.client().get_connection_with_timeout(SHORT_TIMEOUT);
    assert!(refused.is_err(), "new connections must fail while killed");

    server.restart();
    assert!(server.is_running());
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), old_pid);

    let mut conn = server.conn();
    assert_eq!(ping(&mut conn).unwrap(), "PONG");
    let value: Option<String> = conn.get("survives").unwrap();
    assert_eq!(value, None, "a restarted server comes back empty");
    let size: i64 = redis::cmd("DBSIZE").query(&mut conn).unwrap();
    assert_eq!(size, 0);

    // Restarting a running server works too.
    server.restart();
    assert_eq!(ping(&mut server.conn()).unwrap(), "PONG");
}

#[test]
fn pause_times_out_commands_and_resume_recovers() {
    let server = RedisServer::start();
    let mut conn = server
        .client()
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    conn.set_read_timeout(Some(SHORT_TIMEOUT)).unwrap();
    assert_eq!(ping(&mut conn).unwrap(), "PONG");

    server.pause();
    let started = std::time::Instant::now();
    let err = ping(&mut conn).expect_err("a paused server must not answer");
    assert!(err.is_timeout(), "expected a timeout, got {err:?}");
    assert!(started.elapsed() >= Duration::from_millis(250));
    let connect = server.client().get_connection_with_timeout(SHORT_TIMEOUT);
    assert!(
        connect.is_err(),
        "connection setup must time out while paused"
    );

    server.resume();
    let mut fresh = server
        .client()
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    fresh.set_read_timeout(Some(SHORT_TIMEOUT)).unwrap();
    assert_eq!(ping(&mut fresh).unwrap(), "PONG");
}

#[test]
fn tls_server_answers_over_rediss_and_refuses_plain() {
    let server = RedisServer::start_with(ServerOptions::new().tls());
    assert_eq!(
        server.url(),
        format!("rediss://127.0.0.1:{}/", server.port())
    );
    let ca = server.ca_cert_pem().expect("TLS servers have a CA");
    assert!(String::from_utf8(ca.clone())
        .unwrap()
        .starts_with("-----BEGIN CERTIFICATE-----"));

    // The harness client trusts the CA.
    assert_eq!(ping(&mut server.conn()).unwrap(), "PONG");

    // So does a client built by hand from the URL and the CA.
    let client = redis::Client::build_with_tls(
        server.url(),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(ca),
        },
    )
    .unwrap();
    let mut conn = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    let () = conn.set("over", "tls").unwrap();
    let value: String = conn.get("over").unwrap();
    assert_eq!(value, "tls");

    // Plain RESP on the TLS port fails.
    let plain = redis::Client::open(format!("redis://127.0.0.1:{}/", server.port())).unwrap();
    let result = plain
        .get_connection_with_timeout(Duration::from_secs(2))
        .and_then(|mut conn| {
            conn.set_read_timeout(Some(Duration::from_secs(2)))?;
            ping(&mut conn)
        });
    assert!(
        result.is_err(),
        "plain redis:// on a TLS port must fail, got {result:?}"
    );

    // A client that does not trust the generated CA is rejected.
    let untrusted = redis::Client::open(server.url()).unwrap();
    assert!(untrusted
        .get_connection_with_timeout(Duration::from_secs(2))
        .is_err());
}

#[test]
fn tls_server_restarts_with_the_same_ca() {
    let mut server = RedisServer::start_with(ServerOptions::new().tls());
    let ca = server.ca_cert_pem();
    let client = server.client();
    server.restart();
    assert_eq!(server.ca_cert_pem(), ca);
    let mut conn = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    assert_eq!(ping(&mut conn).unwrap(), "PONG");
}

#[test]
fn acl_user_with_right_password_writes_and_wrong_password_fails() {
    let server = RedisServer::start_with(ServerOptions::new().acl_user("locker", "s3cret:/@"));
    let url = server.url_with_auth("locker", "s3cret:/@");
    assert_eq!(
        url,
        format!(
            "redis://locker:s3cret%3A%2F%40@127.0.0.1:{}/",
            server.port()
        )
    );

    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    let () = conn.set("acl-key", "v").unwrap();
    let whoami: String = redis::cmd("ACL").arg("WHOAMI").query(&mut conn).unwrap();
    assert_eq!(whoami, "locker");
    let value: String = server.conn().get("acl-key").unwrap();
    assert_eq!(value, "v", "the default user stays usable");

    let err = redis::Client::open(server.url_with_auth("locker", "wrong"))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(5))
        .err()
        .expect("a wrong password must be rejected");
    assert!(
        err.kind() == ErrorKind::AuthenticationFailed || err.to_string().contains("WRONGPASS"),
        "expected an authentication error, got {err:?}"
    );
}

#[test]
fn acl_over_tls() {
    let server = RedisServer::start_with(ServerOptions::new().tls().acl_user("app", "pw"));
    assert!(server
        .url_with_auth("app", "pw")
        .starts_with("rediss://app:pw@"));
    let mut conn = server
        .client_with_auth("app", "pw")
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    let whoami: String = redis::cmd("ACL").arg("WHOAMI").query(&mut conn).unwrap();
    assert_eq!(whoami, "app");
    assert!(server
        .client_with_auth("app", "nope")
        .get_connection_with_timeout(Duration::from_secs(5))
        .is_err());
}

#[test]
fn extra_args_are_passed_through() {
    let server = RedisServer::start_with(ServerOptions::new().arg("--maxmemory").arg("12345678"));
    let config: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory")
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(config, ["maxmemory", "12345678"]);
    let save: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("save")
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(save, ["save", ""], "persistence stays off");
}

#[test]
fn startup_failure_panics_with_the_log_tail() {
    let result = std::panic::catch_unwind(|| {
        RedisServer::start_with(ServerOptions::new().arg("--no-such-option").arg("x"))
    });
    let payload = result.expect_err("a bad option must fail startup");
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(message.contains("exited during startup"), "{message}");
    assert!(message.contains("no-such-option"), "{message}");
}

#[test]
fn drop_kills_the_process() {
    let server = RedisServer::start();
    let pid = server.pid();
    drop(server);
    // SAFETY: signal 0 only checks whether the pid exists; ours has been reaped by drop.
    let alive = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0;
    assert!(!alive, "redis-server {pid} survived drop");
}

#[test]
fn drop_kills_a_paused_process() {
    let server = RedisServer::start();
    server.pause();
    let pid = server.pid();
    drop(server);
    // SAFETY: signal 0 only checks whether the pid exists.
    let alive = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0;
    assert!(!alive, "paused redis-server {pid} survived drop");
}

#[test]
fn restart_waits_for_a_briefly_unavailable_port() {
    let mut server = RedisServer::start();
    let port = server.port();
    server.kill();

    // Something else holds the port for a while; restart keeps retrying until it is free.
    let squatter =
        std::net::TcpListener::bind(("127.0.0.1", port)).expect("port is free after kill");
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(700));
        drop(squatter);
    });
    let started = std::time::Instant::now();
    server.restart();
    release.join().unwrap();
    assert!(started.elapsed() >= Duration::from_millis(600));
    assert_eq!(server.port(), port);
    assert_eq!(ping(&mut server.conn()).unwrap(), "PONG");
    assert!(server.log_tail().contains("Address already in use"));
}
