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

    /// Spawns a task that triggers shutdown on SIGINT or SIGTERM.
    ///
    /// Installing the SIGTERM handler can fail (the process may not be allowed to); the daemon
    /// then still stops on SIGINT and says loudly that SIGTERM will kill it without the final
    /// checkpoint, rather than the task dying silently and leaving no handler at all.
    pub fn on_signals(&self) {
        let this = self.clone();
        tokio::spawn(async move {
            let ctrl_c = tokio::signal::ctrl_c();
            #[cfg(unix)]
            {
                use tokio::signal::unix::{signal, SignalKind};
                let term = match signal(SignalKind::terminate()) {
                    Ok(term) => Some(term),
                    Err(error) => {
                        tracing::error!(%error, "installing a SIGTERM handler failed: SIGTERM now stops rankpulse without a final checkpoint (the last periodic one stands); SIGINT still stops it cleanly");
                        None
                    }
                };
                let term_received = async {
                    match term {
                        Some(mut term) => term.recv().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = ctrl_c => tracing::info!("SIGINT received, shutting down"),
                    _ = term_received => tracing::info!("SIGTERM received, shutting down"),
                    _ = this.wait() => return,
                }
            }
            #[cfg(not(unix))]
            tokio::select! {
                _ = ctrl_c => tracing::info!("interrupt received, shutting down"),
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
}
