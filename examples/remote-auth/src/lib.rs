//! Remote authentication before the 101: the upgrade hook defers the
//! decision, the gateway asks an HTTP auth service (env `AUTH_URL`, which
//! the route's `allow_outbound` must allow) `GET {AUTH_URL}?token=T` for the
//! client's `?token=T`, and the answer decides: 200 accepts, with the
//! response body (the user's name) as the connection's state; any other
//! status is a 401; no answer (refused, timeout, down) a 503. Then every
//! message is echoed as `name: message`.
//!
//! A service to try it with: `python3 examples/remote-auth/auth_service.py`
//! (port 9003; token `let-me-in` is user `ann`).

use weir_guest::{Conn, Handler, HttpRequest, HttpResult, Message, Request, Upgrade};

#[derive(Default)]
struct RemoteAuth;

fn auth_url() -> String {
    std::env::var("AUTH_URL").unwrap_or_else(|_| "http://127.0.0.1:9003/auth".into())
}

impl Handler for RemoteAuth {
    type State = String;

    fn on_upgrade(&mut self, req: &Request) -> Upgrade<String> {
        match req.query_param("token") {
            Some(token)
                if !token.is_empty()
                    && token
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-') =>
            {
                Upgrade::defer(HttpRequest::get(&format!("{}?token={token}", auth_url())))
            }
            _ => Upgrade::unauthorized(),
        }
    }

    fn on_upgrade_response(&mut self, _: &Request, result: HttpResult) -> Upgrade<String> {
        match result {
            Ok(r) if r.status == 200 => match r.text() {
                Some(user) if !user.trim().is_empty() => {
                    Upgrade::accept_with(user.trim().to_string())
                }
                _ => Upgrade::reject(502),
            },
            Ok(_) => Upgrade::unauthorized(),
            Err(_) => Upgrade::reject(503),
        }
    }

    fn on_message(&mut self, conn: &mut Conn<String>, msg: Message) {
        let user = conn.state().clone();
        match msg {
            Message::Text(t) => conn.send_fmt(format_args!("{user}: {t}")),
            Message::Binary(_) => conn.close(1003, "text only"),
        }
    }
}

weir_guest::export!(RemoteAuth);

#[cfg(test)]
mod tests {
    use super::RemoteAuth;
    use weir_guest::testing::TestRoute;
    use weir_guest::{HttpErrorReason, Request};

    #[test]
    fn the_auth_service_decides_the_upgrade() {
        let mut route = TestRoute::<RemoteAuth>::new("/remote-auth");
        let ann = route
            .upgrade_answering(Request::new("/remote-auth?token=let-me-in"), |sent| {
                assert_eq!(sent.url, "http://127.0.0.1:9003/auth?token=let-me-in");
                Ok((200, vec![], b"ann\n".to_vec()))
            })
            .expect("accepted");
        route.send_text(ann, "hi");
        assert_eq!(route.texts(ann), ["ann: hi"]);
        let refused = route.upgrade_answering(Request::new("/remote-auth?token=nope"), |_| {
            Ok((403, vec![], Vec::new()))
        });
        assert_eq!(refused, Err(401));
        let down = route.upgrade_answering(Request::new("/remote-auth?token=x"), |_| {
            Err(HttpErrorReason::Timeout)
        });
        assert_eq!(down, Err(503));
        assert_eq!(route.upgrade(Request::new("/remote-auth")), Err(401));
    }
}
