//! Ctrl-C (and, on Unix, SIGTERM and SIGHUP) as `run` and `demo` listen
//! for them: registered once for the whole command, so a signal that comes
//! while no turn is running is queued, not lost (once tokio's handler is
//! installed it replaces the default one, which would have ended the
//! process).

use std::io;

#[cfg(not(unix))]
use tokio::sync::mpsc;

/// Ctrl-C presses, counted from the moment the handler is installed (a
/// press before that ends the process the usual way). On Unix, SIGTERM and
/// SIGHUP (a supervisor stopping the run, the terminal closing) count as
/// a press too, and mark the run [`terminated`](Interrupts::terminated):
/// the running turn is cancelled the same way, so what streamed is kept as
/// an interrupted message the next request carries, and the run then
/// ends instead of waiting for the next prompt.
pub(crate) struct Interrupts {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    hangup: tokio::signal::unix::Signal,
    #[cfg(not(unix))]
    rx: mpsc::UnboundedReceiver<()>,
    terminated: bool,
}

impl Interrupts {
    pub(crate) fn install() -> io::Result<Interrupts> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Interrupts {
                signal: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
                hangup: signal(SignalKind::hangup())?,
                terminated: false,
            })
        }
        #[cfg(not(unix))]
        {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(async move {
                while tokio::signal::ctrl_c().await.is_ok() {
                    if tx.send(()).is_err() {
                        break;
                    }
                }
            });
            Ok(Interrupts { rx, terminated: false })
        }
    }

    /// Whether a SIGTERM or SIGHUP came: the run ends after the turn.
    pub(crate) fn terminated(&self) -> bool {
        self.terminated
    }

    /// The next press.
    pub(crate) async fn recv(&mut self) -> Option<()> {
        #[cfg(unix)]
        {
            tokio::select! {
                pressed = self.signal.recv() => pressed,
                asked = self.terminate.recv() => {
                    self.terminated = true;
                    asked
                }
                asked = self.hangup.recv() => {
                    self.terminated = true;
                    asked
                }
            }
        }
        #[cfg(not(unix))]
        {
            self.rx.recv().await
        }
    }
}
