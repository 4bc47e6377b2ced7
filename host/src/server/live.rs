//! A connection's place under the connection limits and its deadline until
//! it carries a WebSocket. The limits count each WebSocket (an HTTP/2
//! stream included) and each connection that carries none yet: a
//! connection holds one [`Ticket`] while it has no WebSocket, its first
//! WebSocket takes that ticket, every further one (HTTP/2) admits its own,
//! and the last to end gives one back. A connection with no request being
//! answered and no WebSocket open is closed at its deadline:
//! `handshake_timeout` after it opened, then the idle deadline after its
//! last request or WebSocket ended. See docs/architecture.md, "Admission".

use super::{Shared, Shutdown};
use crate::admission::Ticket;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// One accepted connection: counted as open for as long as it exists
/// (the drain waits for it), with its place under the limits.
pub(super) struct Live {
    shared: Arc<Shared>,
    ip: IpAddr,
    /// Whether the connection got a place at accept; one that did not is
    /// answered 503 (it still gets its deadline).
    admitted: bool,
    /// The connection's own place while no WebSocket holds it.
    ticket: RefCell<Option<Ticket>>,
    /// Requests being answered and WebSockets open: while any, no deadline.
    busy: Cell<u32>,
    /// When the connection opened, then when `busy` last fell to 0.
    idle_since: Cell<Instant>,
    /// Whether it has been busy: its deadline is then the idle one.
    served: Cell<bool>,
}

impl Live {
    pub fn new(shared: Arc<Shared>, ip: IpAddr) -> Live {
        shared.drain.tcp_open.fetch_add(1, Ordering::AcqRel);
        let ticket = shared.front.admission.admit(ip);
        Live {
            admitted: ticket.is_some(),
            ticket: RefCell::new(ticket),
            shared,
            ip,
            busy: Cell::new(0),
            idle_since: Cell::new(Instant::now()),
            served: Cell::new(false),
        }
    }

    /// A place for a WebSocket (or a request that may become one) on this
    /// connection: the connection's own if free, else a new one; None
    /// over a limit. Held by the returned [`Place`], which gives it back.
    pub fn place(self: &Rc<Self>) -> Option<Place> {
        if !self.admitted {
            return None;
        }
        let own = self.ticket.borrow_mut().take();
        let ticket = own.or_else(|| self.shared.front.admission.admit(self.ip))?;
        Some(Place {
            live: self.clone(),
            ticket: Some(ticket),
            _busy: Busy::new(self),
        })
    }

    /// When the connection is to be closed if it stays as it is: None while
    /// it is busy.
    fn deadline(&self, first: Duration, between: Duration) -> Option<Instant> {
        if self.busy.get() > 0 {
            return None;
        }
        let wait = if self.served.get() { between } else { first };
        Some(self.idle_since.get() + wait)
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.shared.drain.tcp_open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Marks the connection busy (a request being answered, a WebSocket open)
/// for as long as it exists.
pub(super) struct Busy(Rc<Live>);

impl Busy {
    pub fn new(live: &Rc<Live>) -> Busy {
        live.busy.set(live.busy.get() + 1);
        live.served.set(true);
        Busy(live.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let live = &self.0;
        live.busy.set(live.busy.get() - 1);
        if live.busy.get() == 0 {
            live.idle_since.set(Instant::now());
        }
    }
}

/// A WebSocket's place under the limits (taken for its request; the
/// WebSocket keeps it for its life). Its end gives the ticket back to the
/// connection if the connection holds none, so a connection left without
/// WebSockets is counted again.
pub(super) struct Place {
    live: Rc<Live>,
    ticket: Option<Ticket>,
    _busy: Busy,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut own = self.live.ticket.borrow_mut();
        if own.is_none() {
            *own = self.ticket.take();
        }
    }
}

/// How long a connection closed at its deadline has to finish (GOAWAY or
/// the end of a response) before it is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Runs hyper's connection `http` to its end. It is asked to end
/// gracefully (`graceful_shutdown`: HTTP/1.1 closes an idle keep-alive
/// connection after the request in flight, HTTP/2 sends GOAWAY) on
/// shutdown, and when it has been idle past its deadline (`first` before
/// any request, `between` after one); one closed at its deadline is
/// dropped if it has not ended [`CLOSE_GRACE`] later. A connection
/// accepted while draining is answered 503 and closed by its response;
/// only ones open before the drain need closing. None: dropped.
pub(super) async fn serve_until<F: Future>(
    mut http: Pin<&mut F>,
    stop: &mut Shutdown,
    live: &Live,
    (first, between): (Duration, Duration),
    graceful_shutdown: impl Fn(Pin<&mut F>),
) -> Option<F::Output> {
    let accepted_while_draining = *stop.borrow_and_update();
    let mut draining = accepted_while_draining;
    let mut expired = false;
    let timer = tokio::time::sleep(first);
    let mut timer = std::pin::pin!(timer);
    loop {
        tokio::select! {
            ended = http.as_mut() => return Some(ended),
            _ = stop.wait_for(|stop| *stop), if !draining => {
                draining = true;
                graceful_shutdown(http.as_mut());
            }
            () = timer.as_mut() => {
                if expired {
                    return None;
                }
                let now = Instant::now();
                match live.deadline(first, between) {
                    Some(at) if at <= now => {
                        expired = true;
                        graceful_shutdown(http.as_mut());
                        timer.as_mut().reset(now + CLOSE_GRACE);
                    }
                    Some(at) => timer.as_mut().reset(at),
                    // Busy: look again after the shortest deadline.
                    None => timer.as_mut().reset(now + first.min(between)),
                }
            }
        }
    }
}
