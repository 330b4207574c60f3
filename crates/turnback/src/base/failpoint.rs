//! Crash-test hooks.
//!
//! In debug builds, `TURNBACK_FAILPOINT=NAME` makes the process stop dead at the point
//! called `NAME`: it prints `turnback: failpoint NAME reached` to stderr and then waits,
//! doing nothing, until the test kills it with SIGKILL. Crash tests use this to kill a real
//! process at every step of a sequence. `TURNBACK_PAUSE=NAME=FILE` instead prints the same
//! line and waits until `FILE` exists, then carries on: race tests change the workspace
//! at exactly that point. Release builds compile every failpoint away.

/// Stops here forever if the `TURNBACK_FAILPOINT` environment variable names `name`.
#[inline]
pub(crate) fn hit(name: &str) {
    #[cfg(debug_assertions)]
    if std::env::var_os("TURNBACK_FAILPOINT").is_some_and(|v| v == name) {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "turnback: failpoint {name} reached");
        let _ = std::io::stderr().flush();
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
    #[cfg(debug_assertions)]
    if let Some(spec) = std::env::var_os("TURNBACK_PAUSE") {
        let spec = spec.to_string_lossy().into_owned();
        if let Some((point, flag)) = spec.split_once('=')
            && point == name
        {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "turnback: failpoint {name} reached");
            let _ = std::io::stderr().flush();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
            while !std::path::Path::new(flag).exists() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = name;
}
