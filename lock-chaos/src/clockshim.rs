//! Real clock faults on redis-server processes: a small
//! preloaded library moves the server's wall clock (`CLOCK_REALTIME`: `gettimeofday`,
//! `clock_gettime`, `time`), which is what Redis 7 computes key expiry from (`mstime()`),
//! by an offset the harness changes at run time. Monotonic clocks are left alone.
//!
//! Why not the usual tools: libfaketime hangs Debian's redis-server at start-up (its
//! initialisation calls `dlsym`, which allocates, and jemalloc's initialisation asks for the
//! time: they recurse); a time namespace (`unshare --time`) moves only `CLOCK_MONOTONIC` and
//! `CLOCK_BOOTTIME`, and its offsets cannot change once a process is inside; setting the
//! machine's clock would move every process on it. The library here allocates nothing: it
//! asks the kernel for the time with a raw system call (no vDSO, so a little slower) and adds
//! the offset read from a file it maps, named after its process id, in a directory given by
//! `CLOCK_SHIM_DIR` (created with offset 0 at the first clock call). A restarted server is a
//! new process and starts with offset 0.
//!
//! It needs a C compiler (`cc`) at run time to build the library; [`ClockShim::build`] says
//! so when there is none.

// A few helpers serve the tests only (this file is also compiled into them).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context as _};

/// The library's source.
const SHIM_C: &str = r#"
#define _GNU_SOURCE
#include <time.h>
#include <sys/time.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <fcntl.h>
#include <stdlib.h>
#include <stdint.h>

static volatile int64_t *offset_map;

static void init_map(void) {
    const char *dir = getenv("CLOCK_SHIM_DIR");
    if (!dir) return;
    char path[4096];
    size_t n = 0;
    while (dir[n] && n < sizeof(path) - 32) { path[n] = dir[n]; n++; }
    path[n++] = '/';
    char digits[24];
    int d = 0;
    long pid = syscall(SYS_getpid);
    do { digits[d++] = (char)('0' + pid % 10); pid /= 10; } while (pid > 0);
    while (d > 0) path[n++] = digits[--d];
    path[n] = 0;
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    if (syscall(SYS_ftruncate, fd, 8) != 0) { syscall(SYS_close, fd); return; }
    void *m = mmap(0, 8, PROT_READ, MAP_SHARED, fd, 0);
    syscall(SYS_close, fd);
    if (m != MAP_FAILED) offset_map = (volatile int64_t *)m;
}

static int64_t offset_ns(void) {
    static volatile int tried;
    if (!tried) { tried = 1; init_map(); }
    return offset_map ? *offset_map : 0;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    long r = syscall(SYS_clock_gettime, id, ts);
    if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
        int64_t t = (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_ns();
        ts->tv_sec = t / 1000000000LL;
        ts->tv_nsec = t % 1000000000LL;
    }
    return (int)r;
}

int gettimeofday(struct timeval *tv, void *tz) {
    (void)tz;
    struct timespec ts;
    int r = clock_gettime(CLOCK_REALTIME, &ts);
    if (r == 0 && tv) { tv->tv_sec = ts.tv_sec; tv->tv_usec = ts.tv_nsec / 1000; }
    return r;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
"#;

/// The built library and the directory of the servers' offset files. Dropping it removes
/// both (stop the servers first).
#[derive(Debug)]
pub struct ClockShim {
    dir: PathBuf,
    library: PathBuf,
}

impl ClockShim {
    /// Builds the library with `cc` into a fresh directory.
    pub fn build() -> anyhow::Result<ClockShim> {
        let dir = std::env::temp_dir().join(format!(
            "lock-chaos-clock-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(dir.join("offsets"))?;
        let shim = ClockShim {
            library: dir.join("clockshim.so"),
            dir,
        };
        let source = shim.dir.join("clockshim.c");
        std::fs::write(&source, SHIM_C)?;
        let out = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&shim.library)
            .arg(&source)
            .output()
            .context("running cc (a C compiler is needed to build the clock library)")?;
        if !out.status.success() {
            bail!(
                "cc failed building the clock library: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(shim)
    }

    /// The preloaded library.
    pub fn library(&self) -> &Path {
        &self.library
    }

    /// `options` plus the environment that loads the library into the server.
    pub fn options(
        &self,
        options: lock_test_support::ServerOptions,
    ) -> lock_test_support::ServerOptions {
        options
            .env("LD_PRELOAD", self.library.to_string_lossy())
            .env("CLOCK_SHIM_DIR", self.dir.join("offsets").to_string_lossy())
    }

    /// The offset file of the server process `pid`.
    fn offset_file(&self, pid: u32) -> PathBuf {
        self.dir.join("offsets").join(pid.to_string())
    }

    /// The wall-clock offset of server process `pid`, in ms (0 before its first clock call
    /// or when it was not started with [`ClockShim::options`]).
    pub fn offset_ms(&self, pid: u32) -> i64 {
        std::fs::read(self.offset_file(pid))
            .ok()
            .and_then(|bytes| {
                bytes
                    .get(..8)
                    .map(|b| i64::from_ne_bytes(b.try_into().unwrap()))
            })
            .map_or(0, |ns| ns / 1_000_000)
    }

    /// Sets the wall-clock offset of server process `pid` to `ms` (positive: ahead). Errs
    /// when that process has no offset file (not started with the library, or not yet
    /// asked for the time).
    pub fn set_offset_ms(&self, pid: u32, ms: i64) -> anyhow::Result<()> {
        use std::os::unix::fs::FileExt as _;
        let path = self.offset_file(pid);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .with_context(|| format!("no clock offset file for server pid {pid}"))?;
        // One aligned 8-byte write: the server's mapping sees the old or the new value.
        file.write_all_at(&(ms.saturating_mul(1_000_000)).to_ne_bytes(), 0)?;
        Ok(())
    }

    /// Moves server process `pid`'s wall clock by `delta_ms` (negative: back).
    pub fn jump_ms(&self, pid: u32, delta_ms: i64) -> anyhow::Result<()> {
        self.set_offset_ms(pid, self.offset_ms(pid).saturating_add(delta_ms))
    }
}

impl Drop for ClockShim {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use lock_test_support::{RedisServer, ServerOptions};

    use super::*;

    fn query<T: redis::FromRedisValue>(server: &RedisServer, args: &[&str]) -> T {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut server.conn()).unwrap()
    }

    #[test]
    fn a_server_clock_jumps_forward_and_back_and_expiry_follows() {
        let shim = match ClockShim::build() {
            Ok(shim) => shim,
            Err(e) => {
                // Past the test harness's capture, so it shows in every run.
                use std::io::Write as _;
                let _ = writeln!(std::io::stderr(), "!!!!! SKIPPED clock shim test: {e:#}");
                return;
            }
        };
        let moved = RedisServer::start_with(shim.options(ServerOptions::new()));
        let plain = RedisServer::start();
        let pid = moved.pid();
        let time = |s: &RedisServer| -> i64 {
            let t: Vec<String> = query(s, &["TIME"]);
            t[0].parse::<i64>().unwrap()
        };
        assert!(
            (time(&moved) - time(&plain)).abs() <= 1,
            "offset 0 at start"
        );

        let _: () = query(&moved, &["SET", "k", "v", "PX", "20000"]);
        shim.jump_ms(pid, 5_000).unwrap();
        assert_eq!(shim.offset_ms(pid), 5_000);
        let ttl: i64 = query(&moved, &["PTTL", "k"]);
        assert!(
            (13_000..=15_000).contains(&ttl),
            "PTTL {ttl} after a 5 s jump"
        );
        assert!((4..=6).contains(&(time(&moved) - time(&plain))));

        // Back: the key's remaining time grows again (Redis trusts the clock).
        shim.jump_ms(pid, -5_000).unwrap();
        let ttl: i64 = query(&moved, &["PTTL", "k"]);
        assert!(
            (18_000..=20_000).contains(&ttl),
            "PTTL {ttl} after jumping back"
        );

        // Past the expiry: the key is gone at once.
        shim.jump_ms(pid, 25_000).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let v: Option<String> = query(&moved, &["GET", "k"]);
        assert_eq!(v, None);
        // The other server's clock did not move.
        assert!((time(&moved) - time(&plain) - 25).abs() <= 1);
        drop(moved);
        drop(plain);
    }
}
