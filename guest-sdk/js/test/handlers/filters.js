// Handler for test/filter-reads.test.mjs: a filter's bad verdicts and the
// bound on pending reads.
import { Verdict, MAX_PENDING_READS } from "../../src/index.js";

export default {
  onProxyMessage(conn, direction, msg) {
    if (msg === "throw") throw new Error("filter broke");
    if (msg === "number") return 42;
    if (msg === "async") return Promise.resolve(Verdict.PASS);
    if (msg === "swap") return Verdict.replace("swapped");
    if (msg === "bytes") return new Uint8Array([1, 2, 3]);
    return undefined;
  },
  onMessage(conn, msg) {
    if (msg === "one more") {
      conn.history("chat:room");
      return;
    }
    let busy = 0;
    for (let i = 0; i <= MAX_PENDING_READS; i++) {
      conn.history("chat:room", { limit: 1 }).catch((e) => {
        if (e.reason === "busy") busy = i;
        conn.sendText(`busy ${busy}`);
      });
    }
    conn.presence("").catch((e) => conn.sendText(e.reason));
  },
};
