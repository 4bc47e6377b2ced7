//! The serving process's signals: SIGHUP reloads the routes file and the
//! TLS certificate; SIGTERM and SIGINT drain and stop. Registered before
//! the listeners exist, so none is lost.

use anyhow::Context;
use tokio::sync::watch;

/// The signal-handling runtime, with SIGHUP already registered.
pub struct Signals {
    runtime: tokio::runtime::Runtime,
    hup: Option<tokio::signal::unix::Signal>,
    /// SIGTERM and SIGINT, registered with SIGHUP before the listeners
    /// exist: a signal that arrives as soon as the port answers is seen,
    /// not lost (nor the process killed by the default action).
    stop: StopSignals,
}

struct StopSignals {
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Registers SIGHUP, SIGTERM and SIGINT now; [`Signals::run`] waits.
    pub fn install() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .context("starting the signal-handling runtime")?;
        let _in_runtime = runtime.enter();
        let hup = signal(SignalKind::hangup())
            .inspect_err(|err| {
                tracing::warn!(
                    "cannot listen for SIGHUP ({err}); reload with POST /reload on the admin API"
                )
            })
            .ok();
        let term = signal(SignalKind::terminate())
            .inspect_err(|err| tracing::warn!("cannot listen for SIGTERM ({err})"))
            .ok();
        let int = signal(SignalKind::interrupt())
            .inspect_err(|err| tracing::warn!("cannot listen for SIGINT ({err})"))
            .ok();
        drop(_in_runtime);
        Ok(Signals {
            runtime,
            hup,
            stop: StopSignals { term, int },
        })
    }

    /// A watch channel that flips to true on the first Ctrl-C or SIGTERM; a
    /// second one exits at once, for when draining connections takes too
    /// long. SIGHUP reloads the routes file (`changes`).
    pub fn run(self, changes: weir::server::Changes) -> anyhow::Result<weir::Shutdown> {
        let (tx, rx) = watch::channel(false);
        let Signals {
            runtime,
            hup,
            mut stop,
        } = self;
        std::thread::Builder::new()
            .name("weir-signals".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let signal = tokio::select! {
                        signal = stop.next() => signal,
                        _ = reload_on_sighup(hup, changes) => "SIGHUP handler",
                    };
                    tracing::info!("{signal}: shutting down (send it again to exit at once)");
                    let _ = tx.send(true);
                    let signal = stop.next().await;
                    tracing::warn!("{signal} again: exiting without draining");
                    std::process::exit(130);
                })
            })
            .context("starting the signal-handling thread")?;
        Ok(rx)
    }
}

/// Reloads the routes file on every SIGHUP (never returns). The outcome is
/// logged by the reload itself.
async fn reload_on_sighup(
    hup: Option<tokio::signal::unix::Signal>,
    changes: weir::server::Changes,
) {
    let Some(mut hup) = hup else {
        return std::future::pending().await;
    };
    while hup.recv().await.is_some() {
        tracing::info!("SIGHUP: reloading the routes file");
        let changes = changes.clone();
        let _ = tokio::task::spawn_blocking(move || changes.reload()).await;
    }
    std::future::pending().await
}

/// Waits for Ctrl-C (SIGINT) or SIGTERM and says which one came.
impl StopSignals {
    /// The next SIGTERM or SIGINT (Ctrl-C); never, if neither could be
    /// registered.
    async fn next(&mut self) -> &'static str {
        async fn recv(signal: &mut Option<tokio::signal::unix::Signal>) {
            match signal {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            _ = recv(&mut self.int) => "Ctrl-C",
            _ = recv(&mut self.term) => "SIGTERM",
        }
    }
}
