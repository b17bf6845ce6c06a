//! The fenced writes of a shell job under `lockctl run` (which exports
//! `LOCK_FENCING_TOKEN`), as the README and the crate docs give them: psql
//! with the SQL of `PgFence`, redis-cli with `REDIS_SCRIPT`. The job exits
//! 75 when its token is stale, and writes nothing.

use std::process::Command;

use distlock_fence::{RedisFence, REDIS_SCRIPT};
use lock_test_support::{postgres_bin_dir, redis_cli_path, PostgresServer, RedisServer};

/// The README's psql job.
const PSQL_JOB: &str = r#"
psql -X -q -At -v ON_ERROR_STOP=1 -v token="$LOCK_FENCING_TOKEN" <<"SQL" | grep -q . || exit 75
UPDATE reports SET body = $$done$$, fence = :token WHERE day = current_date AND fence <= :token RETURNING 1;
SQL"#;

/// The README's redis-cli job.
const REDIS_CLI_JOB: &str = r#"
redis-cli --raw EVAL "$FENCE_SCRIPT" 2 "fence:{report:daily}:report:daily" report:daily \
    "$LOCK_FENCING_TOKEN" k SET report:daily done | head -n1 | grep -qx 1 || exit 75"#;

fn run_job(job: &str, token: u64, env: &[(&str, String)]) -> i32 {
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(job)
        .env("LOCK_FENCING_TOKEN", token.to_string());
    for (name, value) in env {
        command.env(name, value);
    }
    command.status().unwrap().code().unwrap()
}

fn path_with(dir: &std::path::Path) -> String {
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

#[tokio::test]
async fn a_psql_job_writes_under_its_token_and_stops_when_stale() {
    let pg = PostgresServer::start();
    let (client, connection) =
        tokio_postgres::connect(&pg.connection_string(), tokio_postgres::NoTls)
            .await
            .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(
            "CREATE TABLE reports (day date PRIMARY KEY, body text, fence bigint NOT NULL DEFAULT 0);
             INSERT INTO reports (day) VALUES (current_date);",
        )
        .await
        .unwrap();
    let env = [
        ("PATH", path_with(&postgres_bin_dir())),
        ("PGHOST", "127.0.0.1".to_owned()),
        ("PGPORT", pg.port().to_string()),
        ("PGUSER", "postgres".to_owned()),
        ("PGDATABASE", "postgres".to_owned()),
    ];
    assert_eq!(run_job(PSQL_JOB, 7, &env), 0);
    assert_eq!(
        run_job(PSQL_JOB, 7, &env),
        0,
        "the same holder writes again"
    );
    client
        .execute("UPDATE reports SET body = 'newer', fence = 9", &[])
        .await
        .unwrap();
    assert_eq!(
        run_job(PSQL_JOB, 8, &env),
        75,
        "a stale token fails the job"
    );
    let body: String = client
        .query_one("SELECT body FROM reports", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(body, "newer");
}

#[tokio::test]
async fn a_redis_cli_job_writes_under_its_token_and_stops_when_stale() {
    let server = RedisServer::start();
    let cli_dir = redis_cli_path().parent().unwrap().to_path_buf();
    let env = [
        ("PATH", path_with(&cli_dir)),
        ("REDISCLI_AUTH", String::new()),
        ("FENCE_SCRIPT", REDIS_SCRIPT.to_owned()),
    ];
    // redis-cli reads the port from -p; the job names none, so point it here.
    let job = REDIS_CLI_JOB.replace("redis-cli ", &format!("redis-cli -p {} ", server.port()));
    assert_eq!(run_job(&job, 7, &env), 0);
    let fence = RedisFence::new(
        server
            .client()
            .get_multiplexed_async_connection()
            .await
            .unwrap(),
    );
    assert_eq!(
        fence.fence_key("report:daily"),
        "fence:{report:daily}:report:daily"
    );
    assert_eq!(fence.seen("report:daily").await.unwrap(), 7);
    fence.write("report:daily", 9, "newer").await.unwrap();
    assert_eq!(run_job(&job, 8, &env), 75, "a stale token fails the job");
    let body: String = fence.read("report:daily", 9).await.unwrap();
    assert_eq!(body, "newer");
}
