//! The one time base of a run: `CLOCK_MONOTONIC`, shared by every process on the machine.
//!
//! `std::time::Instant` reads the same clock but does not expose its value, and the checker
//! must compare times recorded by different worker processes and by the nemesis.

/// Nanoseconds on `CLOCK_MONOTONIC` (system-wide, never jumps, stops in no process).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC always exists
    // on Linux, so the call cannot fail.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// Milliseconds between two [`now_ns`] readings (negative when `to` is earlier).
pub fn ms_between(from: u64, to: u64) -> f64 {
    (to as f64 - from as f64) / 1e6
}
