//! The one shutdown signal every task listens to.
//!
//! A [`Shutdown`] is cheap to clone; [`Shutdown::trigger`] wakes every holder's
//! [`Shutdown::wait`]. SIGINT and SIGTERM trigger it through [`Shutdown::on_signals`].

use tokio::sync::watch;

#[derive(Clone, Debug)]
pub struct Shutdown {
    /// Sets the flag; shared by every clone, so any holder can trigger.
    sender: watch::Sender<bool>,
    /// Reads and awaits the flag; cloned per waiter.
    receiver: watch::Receiver<bool>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    pub fn new() -> Self {
        let (sender, receiver) = watch::channel(false);
        Shutdown { sender, receiver }
    }

    /// Asks every task to stop. Idempotent.
    pub fn trigger(&self) {
        self.sender.send_replace(true);
    }

    pub fn is_triggered(&self) -> bool {
        *self.receiver.borrow()
    }

    /// Resolves once shutdown has been triggered (at once if it already was).
    pub async fn wait(&self) {
        let mut receiver = self.receiver.clone();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = receiver.wait_for(|stop| *stop).await;
    }

    /// Triggers shutdown on SIGINT or SIGTERM, from the moment it returns.
    ///
    /// The handlers are installed here, on the calling thread (inside the runtime's context),
    /// and only the waiting is spawned: installed in the spawned task, they existed only once a
    /// worker first ran it, and a SIGTERM before that (a daemon asked to stop right after its
    /// start, on a busy machine) took the signal's default action and killed the process.
    ///
    /// Installing the SIGTERM handler can fail (the process may not be allowed to); the daemon
    /// then still stops on SIGINT and says loudly that SIGTERM will kill it without the final
    /// checkpoint, rather than the task dying silently and leaving no handler at all.
    pub fn on_signals(&self) {
        let this = self.clone();
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let interrupt = signal(SignalKind::interrupt());
            let term = signal(SignalKind::terminate());
            let received = |stream: std::io::Result<tokio::signal::unix::Signal>, if_failed: &'static str| {
                let stream = stream.map_err(|error| tracing::error!(%error, "{if_failed}")).ok();
                async move {
                    match stream {
                        Some(mut stream) => stream.recv().await,
                        None => std::future::pending().await,
                    }
                }
            };
            let interrupt = received(
                interrupt,
                "installing a SIGINT handler failed: SIGINT now stops rankpulse without a final checkpoint",
            );
            let term = received(term, "installing a SIGTERM handler failed: SIGTERM now stops rankpulse without a final checkpoint (the last periodic one stands); SIGINT still stops it cleanly");
            tokio::spawn(async move {
                tokio::select! {
                    _ = interrupt => tracing::info!("SIGINT received, shutting down"),
                    _ = term => tracing::info!("SIGTERM received, shutting down"),
                    _ = this.wait() => return,
                }
                this.trigger();
            });
        }
        #[cfg(not(unix))]
        tokio::spawn(async move {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => tracing::info!("interrupt received, shutting down"),
                _ = this.wait() => return,
            }
            this.trigger();
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_clone_sees_the_trigger() {
        let s = Shutdown::new();
        let waiter = s.clone();
        let task = tokio::spawn(async move { waiter.wait().await });
        s.trigger();
        task.await.unwrap();
        assert!(s.is_triggered());
        s.wait().await; // already triggered: returns at once
    }

    /// A SIGTERM that arrives before the runtime has run anything (the spawned task included)
    /// triggers shutdown instead of killing the process: the handlers exist once `on_signals`
    /// returns. With them installed in the task, this test's process died of the signal.
    #[cfg(unix)]
    #[test]
    fn a_sigterm_right_after_on_signals_triggers_shutdown() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let shutdown = Shutdown::new();
        {
            let _in_runtime = runtime.enter();
            shutdown.on_signals();
        }
        // SAFETY: raise only sends a signal to this process.
        assert_eq!(unsafe { libc::raise(libc::SIGTERM) }, 0);
        runtime.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(10), shutdown.wait())
                .await
                .expect("the SIGTERM triggered shutdown")
        });
    }
}
