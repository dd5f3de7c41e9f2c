//! Running the real `rankpulse` binary, and waiting for things to happen.

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_rankpulse");

/// Calls `poll` every `every` until it gives a value, and returns that; panics with `what` once
/// `deadline` has passed without one.
pub fn wait_for<T>(deadline: Instant, every: Duration, what: &str, mut poll: impl FnMut() -> Option<T>) -> T {
    loop {
        if let Some(value) = poll() {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(every);
    }
}

/// `rankpulse replay --format json` of two files under a configuration: the report.
pub fn replay_json(impressions: &Path, engagements: &Path, config: &Path) -> Value {
    let out = Command::new(BIN)
        .args(["replay", "--impressions", impressions.to_str().unwrap(), "--engagements"])
        .args([engagements.to_str().unwrap(), "--config", config.to_str().unwrap(), "--format", "json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "replay failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A running `rankpulse` process, killed if the test fails before stopping it.
pub struct Daemon {
    /// The process: killed on drop, so a failing test leaves no daemon behind.
    pub child: Child,
}

impl Daemon {
    /// Starts `rankpulse` with `args`, its output going to the test's.
    pub fn spawn(args: &[&str]) -> Daemon {
        let child = Command::new(BIN)
            .args(args)
            .env("RUST_LOG", "info,librdkafka=warn")
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting rankpulse");
        Daemon { child }
    }

    /// Sends SIGTERM and waits up to `within` for a clean exit.
    pub fn terminate(mut self, within: Duration) -> (ExitStatus, Duration) {
        let started = Instant::now();
        Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status().unwrap();
        let what = format!("rankpulse did not stop within {within:?} of SIGTERM");
        let status = wait_for(started + within, Duration::from_millis(50), &what, || self.child.try_wait().unwrap());
        (status, started.elapsed())
    }

    /// SIGKILL: no chance to checkpoint or commit.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Waits up to `within` for the process to exit by itself.
    pub fn wait(mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        let what = format!("rankpulse did not exit within {within:?}");
        wait_for(deadline, Duration::from_millis(100), &what, || self.child.try_wait().unwrap())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
