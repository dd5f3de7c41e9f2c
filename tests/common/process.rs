//! Running the real `rankpulse` binary, and waiting for things to happen.

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_rankpulse");

/// The passwords and passphrases tests give rankpulse. No daemon's output may contain one
/// ([`Daemon`] checks whatever it wrote when it stops): rankpulse never logs a secret.
pub const TEST_SECRETS: [&str; 3] = ["kafka-pw-7d1e4b9c", "key-passphrase-52af0e", "wrong-pw-c83b61"];

/// Panics if `output` (what `what` wrote) contains a secret of [`TEST_SECRETS`].
pub fn assert_no_secret(output: &str, what: &str) {
    for secret in TEST_SECRETS {
        assert!(!output.contains(secret), "{what} wrote a secret ({secret}):\n{output}");
    }
}

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

/// A running `rankpulse` process, killed if the test fails before stopping it. Its stdout and
/// stderr go to a file, printed only if the test fails, so a passing suite shows none of the
/// warnings its daemons rightly log (broker faults are what many tests inject).
pub struct Daemon {
    /// The process: killed on drop, so a failing test leaves no daemon behind.
    pub child: Child,
    /// What the process wrote (stdout and stderr, in order): read by [`Daemon::output`],
    /// printed on a test's panic, deleted with the daemon.
    output: tempfile::NamedTempFile,
    /// The arguments, to name the daemon when its output is printed.
    args: String,
}

impl Daemon {
    /// Starts `rankpulse` with `args`, its output captured.
    pub fn spawn(args: &[&str]) -> Daemon {
        Daemon::spawn_with_env(args, &[])
    }

    /// [`Daemon::spawn`] with extra environment variables.
    pub fn spawn_with_env(args: &[&str], env: &[(&str, &str)]) -> Daemon {
        let output = tempfile::NamedTempFile::new().expect("a file for the daemon's output");
        // Both streams share one file description (one offset): lines stay whole and in order.
        let stdout = output.as_file().try_clone().unwrap();
        let stderr = output.as_file().try_clone().unwrap();
        let child = Command::new(BIN)
            .args(args)
            .env("RUST_LOG", "info,librdkafka=warn")
            .envs(env.iter().copied())
            .stdout(Stdio::from(stdout))
            .stderr(Stdio::from(stderr))
            .spawn()
            .expect("starting rankpulse");
        Daemon { child, output, args: args.join(" ") }
    }

    /// Everything the process has written so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(self.output.path()).unwrap_or_default()
    }

    /// Sends SIGTERM and waits up to `within` for a clean exit.
    pub fn terminate(self, within: Duration) -> (ExitStatus, Duration) {
        let (status, took, _) = self.terminate_with_output(within);
        (status, took)
    }

    /// [`Daemon::terminate`], and everything the process wrote, to its last line.
    pub fn terminate_with_output(mut self, within: Duration) -> (ExitStatus, Duration, String) {
        let started = Instant::now();
        Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status().unwrap();
        let what = format!("rankpulse did not stop within {within:?} of SIGTERM");
        let status = wait_for(started + within, Duration::from_millis(50), &what, || self.child.try_wait().unwrap());
        self.print_output_unless(status.success());
        let output = self.output();
        assert_no_secret(&output, &format!("rankpulse {}", self.args));
        (status, started.elapsed(), output)
    }

    /// SIGKILL: no chance to checkpoint or commit.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        assert_no_secret(&self.output(), &format!("rankpulse {}", self.args));
    }

    /// Waits up to `within` for the process to exit by itself.
    pub fn wait(mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        let what = format!("rankpulse did not exit within {within:?}");
        let status = wait_for(deadline, Duration::from_millis(100), &what, || self.child.try_wait().unwrap());
        self.print_output_unless(status.success());
        assert_no_secret(&self.output(), &format!("rankpulse {}", self.args));
        status
    }

    /// Prints the output unless `fine`: every test asserts a clean exit, so a failed one is
    /// about to fail the test, after the daemon is gone.
    fn print_output_unless(&self, fine: bool) {
        if !fine {
            self.print_output();
        }
    }

    fn print_output(&self) {
        eprintln!("---- output of `rankpulse {}` ----\n{}---- end of output ----", self.args, self.output());
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            self.print_output();
        }
    }
}
