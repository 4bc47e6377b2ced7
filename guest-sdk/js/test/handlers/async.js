// Handler for test/io.test.mjs: the async shapes a handler may use.
import { kv, route, MAX_PENDING_REQUESTS } from "../../src/index.js";

const order = [];

export default {
  async onUpgrade(req) {
    if (req.queryParam("twice") !== undefined) {
      await fetch("http://auth/one");
      await fetch("http://auth/two");
      return true;
    }
    if (req.queryParam("sleep") !== undefined) {
      await new Promise((r) => setTimeout(r, 10));
      return true;
    }
    if (req.queryParam("token") === undefined) return true;
    const r = await fetch(`http://auth/check?token=${req.queryParam("token")}`, {
      headers: { authorization: "Bearer x" },
    });
    if (!r.ok) return 401;
    const user = await r.json();
    return { state: { user: user.name }, protocol: req.protocols()[0] };
  },

  async onMessage(conn, msg) {
    const [word, arg] = msg.split(" ");
    switch (word) {
      case "json": {
        const r = await fetch("http://api/item", { method: "POST", body: JSON.stringify({ q: arg }), headers: [["content-type", "application/json"]] });
        const item = await r.json();
        conn.sendText(`${r.status} ${r.headers.get("x-count")} ${item.name}`);
        break;
      }
      case "both": {
        const [a, b] = await Promise.all([fetch("http://api/a"), fetch("http://api/b")]);
        conn.sendText(`${await a.text()}+${await b.text()}`);
        break;
      }
      case "throw-later":
        await null;
        throw new Error("later");
      case "unhandled":
        Promise.reject(new Error("nobody")); // not awaited
        conn.sendText("ok");
        break;
      case "order":
        order.length = 0;
        queueMicrotask(() => order.push("micro"));
        Promise.resolve().then(() => order.push("then"));
        order.push("sync");
        setTimeout(() => conn.sendText(order.join(",")), 0);
        break;
      case "interval": {
        let n = 0;
        const id = setInterval(() => {
          n += 1;
          conn.sendText(`tick ${n}`);
          if (n === 3) clearInterval(id);
        }, 100);
        break;
      }
      case "durable":
        conn.state = { timer: conn.setTimer(Number(arg)) };
        break;
      case "flood": {
        const results = await Promise.allSettled(
          Array.from({ length: MAX_PENDING_REQUESTS + 2 }, (_, i) => fetch(`http://api/${i}`)),
        );
        conn.sendText(`${results.filter((r) => r.status === "rejected").map((r) => r.reason.reason)}`);
        break;
      }
      case "kv": {
        kv.set("a", "1");
        kv.setJson("b", { x: 2 }, { ttl: 1000 });
        kv.delete("c");
        conn.sendText(`${kv.getText("a")} ${JSON.stringify(kv.getJson("d"))}`);
        break;
      }
      case "route-fetch": {
        const r = await route.fetch("http://api/route");
        route.publish("all", await r.text());
        break;
      }
      default:
        conn.send(msg);
    }
  },

  onOpen(conn) {
    conn.subscribe("all");
  },

  onTimer(conn, tag) {
    if (conn !== route && conn.state && conn.state.timer === tag) conn.sendText("durable fired");
  },

  onKvError(_route, key, reason) {
    route.publish("all", `refused ${String.fromCharCode(...key)} ${reason}`);
  },
};
