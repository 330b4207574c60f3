//! Crash-test hooks.
//!
//! In debug builds, `TURNBACK_FAILPOINT=NAME` makes the process stop dead at the point
//! called `NAME`: it prints `turnback: failpoint NAME reached` to stderr and then waits,
//! doing nothing, until the test kills it with SIGKILL. Crash tests use this to kill a real
//! process at every step of a sequence. Release builds compile every failpoint away.

/// Stops here forever if the `TURNBACK_FAILPOINT` environment variable names `name`.
#[inline]
pub fn hit(name: &str) {
    #[cfg(debug_assertions)]
    if std::env::var_os("TURNBACK_FAILPOINT").is_some_and(|v| v == name) {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "turnback: failpoint {name} reached");
        let _ = std::io::stderr().flush();
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = name;
}
