//! Ticker: a route timer polls an HTTP endpoint (env `TICKER_URL`, which
//! the route's `allow_outbound` must allow) every second, and publishes
//! its body to the topic `ticker` whenever it changed. Clients of
//! `/ticker` are subscribed to it and get the latest value on joining.
//!
//! The timer and the request are the route's own (not a connection's):
//! the gateway holds the timer, so it keeps firing when the instance that
//! set it is replaced. The last value is kept in the route's store (`kv`),
//! which also keeps instances on different workers from publishing the
//! same change twice (they may, rarely, when both see it in the same
//! instant).

use std::time::Duration;

use weir_guest::{Conn, Handler, HttpRequest, HttpResult, Message, Tag};

/// How often the endpoint is polled.
const POLL_EVERY: Duration = Duration::from_secs(1);
/// The key of the last value published.
const LAST: &[u8] = b"last";

#[derive(Default)]
struct Ticker {
    /// This instance keeps a poll going (started by its first client).
    polling: bool,
}

fn url() -> String {
    std::env::var("TICKER_URL").unwrap_or_else(|_| "http://127.0.0.1:9002/ticker.txt".into())
}

impl Handler for Ticker {
    type State = ();

    fn on_open(&mut self, conn: &mut Conn<()>) {
        conn.subscribe("ticker");
        if let Some(last) = conn.ctx().kv_get(LAST) {
            conn.send(Message::Text(&String::from_utf8_lossy(&last)));
        }
        if !self.polling {
            self.polling = true;
            conn.ctx().set_timer(Duration::ZERO);
        }
    }

    fn on_message(&mut self, _: &mut Conn<()>, _: Message) {}

    fn on_timer(&mut self, conn: &mut Conn<()>, _: Tag) {
        // A timer that outlived its instance keeps this one polling.
        self.polling = true;
        conn.ctx().fetch(&HttpRequest::get(&url()));
        conn.ctx().set_timer(POLL_EVERY);
    }

    fn on_response(&mut self, conn: &mut Conn<()>, _: Tag, result: HttpResult) {
        let Ok(response) = result else { return };
        let Some(value) = response.text().filter(|_| response.is_success()) else {
            return;
        };
        let value = value.trim();
        if conn.ctx().kv_get(LAST).as_deref() == Some(value.as_bytes()) {
            return;
        }
        conn.ctx().kv_set(LAST, value.as_bytes());
        conn.publish("ticker", Message::Text(value));
    }
}

weir_guest::export!(Ticker);

#[cfg(test)]
mod tests {
    use super::Ticker;
    use weir_guest::testing::TestRoute;
    use weir_guest::HttpErrorReason;

    #[test]
    fn polls_on_a_route_timer_and_publishes_changes_only() {
        let mut route = TestRoute::<Ticker>::new("/ticker");
        let a = route.connect("/ticker");
        let b = route.connect("/ticker");
        let timers = route.timers();
        assert_eq!(timers.len(), 1, "one poll for the instance");
        assert_eq!(timers[0].0, 0, "a route timer");
        let tick = |route: &mut TestRoute<Ticker>, answer: Option<&str>| {
            let (_, tag, _) = route.timers()[0];
            route.fire(tag);
            let req = route.requests().pop().expect("a poll");
            assert_eq!(req.url, "http://127.0.0.1:9002/ticker.txt");
            match answer {
                Some(body) => route.respond(req.tag, 200, &[], body.as_bytes()),
                None => route.fail(req.tag, HttpErrorReason::Connect),
            }
        };
        tick(&mut route, Some("1.00\n"));
        tick(&mut route, Some("1.00"));
        tick(&mut route, None);
        route.replace_instance();
        tick(&mut route, Some("1.01"));
        assert_eq!(route.texts(a), ["1.00", "1.01"]);
        assert_eq!(route.texts(b), ["1.00", "1.01"]);
        let c = route.connect("/ticker");
        assert_eq!(route.texts(c), ["1.01"], "the last value on joining");
        assert_eq!(route.timers().len(), 1, "still one poll");
    }
}
