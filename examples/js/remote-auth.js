// Remote authentication before the 101: onUpgrade awaits an HTTP auth
// service (AUTH_URL below, which the route's `allow_outbound` must allow),
// `GET AUTH_URL?token=T` for the client's `?token=T`, and the answer
// decides: 200 accepts, with the response body (the user's name) as the
// connection's state; any other status is a 401; no answer (refused,
// timeout, down) a 503. Then every message is echoed as `name: message`.
// The JavaScript twin of examples/remote-auth (Rust): the gateway defers
// the upgrade on the one request onUpgrade awaits.
//
// A service to try it with: `python3 examples/remote-auth/auth_service.py`
// (port 9003; token `let-me-in` is user `ann`).

const AUTH_URL = "http://127.0.0.1:9003/auth";

export default {
  async onUpgrade(req) {
    const token = req.queryParam("token") ?? "";
    if (!/^[A-Za-z0-9-]+$/.test(token)) return 401;
    let r;
    try {
      r = await fetch(`${AUTH_URL}?token=${token}`);
    } catch {
      return 503;
    }
    if (r.status !== 200) return 401;
    const user = (await r.text()).trim();
    return user === "" ? 502 : { state: user };
  },

  onMessage(conn, msg) {
    if (typeof msg !== "string") return conn.close(1003, "text only");
    conn.sendText(`${conn.state}: ${msg}`);
  },
};
