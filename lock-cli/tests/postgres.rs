//! `lockctl --url postgres://...` against a real PostgreSQL: `run` in three
//! concurrent processes on one lock name (one command at a time, checked
//! from inside), `status`, `list`, `release --force`, and `leader status`.

use std::process::{Child, Output};
use std::time::Duration;

mod common;

use common::*;
use lock_test_support::PostgresServer;

fn lockctl_pg(server: &PostgresServer) -> std::process::Command {
    let mut cmd = bare_lockctl();
    cmd.arg("--url").arg(server.url());
    cmd
}

fn code(output: &Output) -> i32 {
    output.status.code().unwrap_or(-1)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Three `lockctl run` processes on one name: each command checks that no
/// other one is inside (a marker file created with `set -C`, which fails if
/// it exists) and counts its entry; every run succeeds and none overlaps.
#[test]
fn run_excludes_across_processes_on_postgres() {
    let server = PostgresServer::start();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("inside");
    let journal = dir.path().join("journal");
    let script = format!(
        "set -C; if ! : > {m}; then echo overlap >> {j}; exit 3; fi; \
         echo enter $LOCK_FENCING_TOKEN >> {j}; sleep 0.05; rm -f {m}",
        m = marker.display(),
        j = journal.display()
    );
    let children: Vec<Child> = (0..3)
        .map(|_| {
            let loop_script = format!(
                "for i in 1 2 3 4 5 6; do {lockctl} --url '{url}' run --key pg:cron --wait 60s \
                 -- sh -c '{script}' || exit $?; done",
                lockctl = env!("CARGO_BIN_EXE_lockctl"),
                url = server.url(),
            );
            let mut cmd = std::process::Command::new("sh");
            cmd.arg("-c").arg(loop_script);
            cmd.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            cmd.spawn().unwrap()
        })
        .collect();
    for child in children {
        let output = finish(child, Duration::from_secs(120));
        assert_eq!(code(&output), 0, "stderr: {}", text(&output.stderr));
    }
    let journal = std::fs::read_to_string(&journal).unwrap();
    assert!(!journal.contains("overlap"), "{journal}");
    let tokens: Vec<u64> = journal
        .lines()
        .map(|line| line.trim_start_matches("enter ").parse().unwrap())
        .collect();
    assert_eq!(tokens.len(), 18, "{journal}");
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens in order of entry: {tokens:?}"
    );
}

/// `status`, `list` and `release --force` see and free a lock held by a
/// `lockctl run` on PostgreSQL; `leader status` names a role's leader.
#[test]
fn status_list_release_and_leader_status_on_postgres() {
    let server = PostgresServer::start();
    let holder = lockctl_pg(&server)
        .args(["run", "--key", "pg:held", "--", "sleep", "30"])
        .spawn()
        .unwrap();
    wait_until("pg:held is held", || {
        let out = complete(lockctl_pg(&server).args(["status", "pg:held"]));
        code(&out) == 0 && text(&out.stdout).contains("owner")
    });
    let listed = complete(lockctl_pg(&server).args(["list"]));
    assert_eq!(code(&listed), 0, "{}", text(&listed.stderr));
    assert!(
        text(&listed.stdout).contains("pg:held"),
        "{}",
        text(&listed.stdout)
    );
    let released = complete(lockctl_pg(&server).args(["release", "pg:held", "--force"]));
    assert_eq!(code(&released), 0, "{}", text(&released.stderr));
    let out = complete(lockctl_pg(&server).args(["status", "pg:held"]));
    assert!(
        !text(&out.stdout).contains("owner"),
        "{}",
        text(&out.stdout)
    );
    let mut holder = holder;
    let _ = holder.kill();
    let _ = holder.wait();

    let leader = lockctl_pg(&server)
        .args(["leader", "run", "pg-role", "--", "sleep", "30"])
        .spawn()
        .unwrap();
    wait_until("pg-role has a leader", || {
        let out = complete(lockctl_pg(&server).args(["leader", "status", "pg-role"]));
        code(&out) == 0 && !text(&out.stdout).contains("no leader")
    });
    let mut leader = leader;
    let _ = leader.kill();
    let _ = leader.wait();
}
