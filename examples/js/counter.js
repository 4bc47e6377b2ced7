// Message counter: answers every message with how many messages this
// connection has sent so far ("1", "2", …). The count is the connection's
// state: the SDK saves it in the gateway-held attachment after each change,
// so it survives the instance being replaced (recycle_after, a fault, a
// deploy). `?from=N` on the upgrade starts counting from N.

export default {
  onUpgrade(req) {
    const from = Number.parseInt(req.queryParam("from") ?? "", 10);
    return { state: Number.isSafeInteger(from) && from >= 0 ? from : 0 };
  },
  onMessage(conn) {
    conn.state += 1;
    conn.sendText(String(conn.state));
  },
};
