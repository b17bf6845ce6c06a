//! The machine side of a run: the Redis server, core pinning, and what the
//! process spends (CPU time, live heap bytes).

use std::alloc::{GlobalAlloc, Layout, System};
use std::process::Command;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use lock_test_support::RedisServer;

/// The system allocator, counting the bytes currently allocated, so that the
/// memory of N held locks can be measured exactly (RSS moves in pages and
/// keeps what an earlier workload freed).
pub(crate) struct CountingAlloc;

static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);

// SAFETY: every call is forwarded unchanged to `System`; only a counter is added.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            LIVE_BYTES.fetch_add(layout.size() as i64, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE_BYTES.fetch_sub(layout.size() as i64, Ordering::Relaxed);
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            LIVE_BYTES.fetch_add(layout.size() as i64, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            LIVE_BYTES.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        }
        new
    }
}

/// Heap bytes allocated and not yet freed by this process.
pub(crate) fn live_heap_bytes() -> i64 {
    LIVE_BYTES.load(Ordering::Relaxed)
}

/// CPU time (user + system) this process has used, all threads.
pub(crate) fn process_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The number of CPUs this machine has online (not only those we may run on).
pub(crate) fn online_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    #[allow(unsafe_code)]
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(1).max(1)
}

/// Pins every thread of process `pid` to `cpu` with `taskset -a -c -p`.
/// Returns why it could not, so the caller can warn and go on unpinned.
pub(crate) fn pin(pid: u32, cpu: usize) -> Result<(), String> {
    let output = Command::new("taskset")
        .args(["-a", "-c", "-p", &cpu.to_string(), &pid.to_string()])
        .output()
        .map_err(|err| format!("taskset could not be run ({err}); install util-linux"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "taskset failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Where the benchmark's Redis is: a server this run started, or a given URL.
pub(crate) struct Target {
    pub(crate) url: String,
    /// Kept alive for the run; dropping it kills the server.
    _server: Option<RedisServer>,
    /// What was pinned where, for the report.
    pub(crate) pinning: String,
}

impl Target {
    /// Starts a `redis-server` (no persistence, free loopback port) unless
    /// `url` is given, and pins it to `redis_cpu` and this process to
    /// `client_cpu` when the machine has two or more CPUs and `pin` is set.
    pub(crate) fn start(
        url: Option<String>,
        pin_cores: bool,
        redis_cpu: usize,
        client_cpu: usize,
    ) -> Target {
        let cpus = online_cpus();
        let can_pin = pin_cores && cpus >= 2;
        let mut notes = Vec::new();
        let (url, server) = match url {
            Some(url) => {
                notes.push("redis: given by --url, not pinned by this run".to_owned());
                (url, None)
            }
            None => {
                let server = RedisServer::start();
                if can_pin {
                    match pin(server.pid(), redis_cpu) {
                        Ok(()) => notes.push(format!("redis-server pinned to cpu {redis_cpu}")),
                        Err(why) => {
                            eprintln!("warning: redis-server not pinned: {why}");
                            notes.push("redis-server not pinned".to_owned());
                        }
                    }
                }
                (server.url(), Some(server))
            }
        };
        if can_pin {
            match pin(std::process::id(), client_cpu) {
                Ok(()) => notes.push(format!("client pinned to cpu {client_cpu}")),
                Err(why) => {
                    eprintln!("warning: client not pinned: {why}");
                    notes.push("client not pinned".to_owned());
                }
            }
        } else if pin_cores {
            eprintln!("warning: {cpus} CPU(s) online; not pinning (needs 2 or more)");
            notes.push(format!("not pinned ({cpus} cpu)"));
        } else {
            notes.push("not pinned (--no-pin)".to_owned());
        }
        Target {
            url,
            _server: server,
            pinning: notes.join("; "),
        }
    }
}
