// Echo: every message goes back to its sender, text as text and binary as
// binary. The smallest handler the JS SDK allows (examples/echo in Rust).

export default {
  onMessage(conn, msg) {
    conn.send(msg);
  },
};
