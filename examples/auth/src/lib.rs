//! Token-checked echo: the upgrade is refused with 401 unless the request
//! carries the route's token — query parameter `token`, header
//! `authorization: Bearer <token>`, or header `x-weir-token`. The token comes
//! from the environment variable `WEIR_AUTH_TOKEN`, set by the route's `env`
//! table; without it every upgrade is refused (fail closed). Accepted
//! connections echo.

use weir_guest::{Conn, Handler, Message, Request, Upgrade};

#[derive(Default)]
struct Auth;

/// Compare without stopping at the first difference, so the time taken does
/// not tell how much of a guess was right.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn presented(req: &Request) -> Option<&str> {
    req.query_param("token")
        .or_else(|| {
            req.header("authorization")
                .and_then(|v| v.strip_prefix("Bearer "))
        })
        .or_else(|| req.header("x-weir-token"))
}

impl Handler for Auth {
    type State = ();

    fn on_upgrade(&mut self, req: &Request) -> Upgrade {
        let expected = std::env::var("WEIR_AUTH_TOKEN").unwrap_or_default();
        match presented(req) {
            Some(token) if !expected.is_empty() && same(token.trim(), &expected) => {
                Upgrade::accept()
            }
            _ => Upgrade::unauthorized(),
        }
    }

    fn on_message(&mut self, conn: &mut Conn<()>, msg: Message) {
        conn.send(msg);
    }
}

weir_guest::export!(Auth);

#[cfg(test)]
mod tests;
