// weir's server frames (weir-server-frames.json, pinned by
// crates/pusher/tests/server_frames.rs) served to pusher-js by a scripted
// WebSocket server on 127.0.0.1; prints what pusher-js handed the app's
// callbacks, which that test checks.
//
// Regenerate (versions pinned in host/tests/clients/package.json):
//   (cd host/tests/clients && npm ci)
//   node crates/pusher/vectors/replay.mjs > crates/pusher/vectors/pusher-js-received.json
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../../../host/tests/clients/package.json"));
const PusherServer = require("pusher");
const PusherJs = require("pusher-js");
const { WebSocketServer } = require("ws");

const { frames } = JSON.parse(fs.readFileSync(path.join(here, "weir-server-frames.json"), "utf8"));
const APP = { appId: "4242", key: "weir-test-key", secret: "weir-test-secret" };
const appServer = new PusherServer(APP);

const received = {};
const onSubscribe = {
  news: ["news_subscribed", "news_event", "news_event_plain", "news_count"],
  "presence-room": ["presence_subscribed", "member_added", "member_removed", "client_event", "client_event_string"],
  "cache-ticker": ["cache_subscribed", "cache_miss"],
  "private-orders": ["orders_error"],
  "#server-to-user-u1": ["user_subscribed", "user_event"],
};
const wss = new WebSocketServer({ host: "127.0.0.1", port: 0 });
await new Promise((ok) => wss.on("listening", ok));
wss.on("connection", (ws) => {
  ws.send(frames.connection_established);
  ws.on("message", (raw) => {
    const msg = JSON.parse(raw.toString());
    if (msg.event === "pusher:subscribe") {
      for (const name of onSubscribe[msg.data.channel] ?? []) ws.send(frames[name]);
    } else if (msg.event === "pusher:signin") {
      ws.send(frames.signin_success);
    } else if (msg.event === "pusher:pong") {
      received.pong_sent = true;
    }
  });
  setTimeout(() => { ws.send(frames.error); ws.send(frames.ping); }, 1000);
});

const timer = setTimeout(() => { console.error("replay.mjs: timed out"); process.exit(1); }, 20000);
const p = new PusherJs(APP.key, {
  cluster: "mt1", wsHost: "127.0.0.1", wsPort: wss.address().port, forceTLS: false, enabledTransports: ["ws"],
  channelAuthorization: {
    customHandler: ({ socketId, channelName }, cb) =>
      cb(null, appServer.authorizeChannel(socketId, channelName, channelName.startsWith("presence-") ? { user_id: "u1", user_info: { name: "Ann \"A\" ✓" } } : undefined)),
  },
  userAuthentication: {
    customHandler: ({ socketId }, cb) => cb(null, appServer.authenticateUser(socketId, { id: "u1", user_info: { name: "Ann" } })),
  },
});
p.connection.bind("error", (err) => { if (err.type === "PusherError") received.error = err; });
await new Promise((ok) => p.connection.bind("connected", ok));
received.socket_id = p.connection.socket_id;

const news = p.subscribe("news");
received.news_events = [];
news.bind("pusher:subscription_succeeded", (d) => { received.news_subscribed = d; });
news.bind("update", (d) => received.news_events.push(d));
news.bind("pusher:subscription_count", (d) => { received.news_count = d; });

const room = p.subscribe("presence-room");
const memberIds = (members) => { const ids = []; members.each((m) => ids.push(m.id)); return ids; };
room.bind("pusher:subscription_succeeded", (members) => {
  received.presence_subscribed = { count: members.count, me: members.me, ids: memberIds(members) };
});
room.bind("pusher:member_added", (m) => { received.member_added = m; });
room.bind("pusher:member_removed", (m) => {
  received.member_removed = m;
  received.members_after = { count: room.members.count, ids: memberIds(room.members) };
});
room.bind("client-typing", (data, metadata) => { received.client_event = { data, metadata }; });
room.bind("client-note", (data) => { received.client_event_string = data; });

p.subscribe("cache-ticker").bind("pusher:cache_miss", () => { received.cache_miss = true; });
p.subscribe("private-orders").bind("pusher:subscription_error", (d) => { received.orders_error = d; });

p.user.bind("notify", (d) => { received.user_event = d; });
p.signin();
await p.user.signinDonePromise;
received.signed_in_as = p.user.user_data?.id ?? null;

await new Promise((ok) => setTimeout(ok, 2000));
p.disconnect();
wss.close();
clearTimeout(timer);
const version = JSON.parse(fs.readFileSync(path.join(path.dirname(require.resolve("pusher-js")), "../../package.json"), "utf8")).version;
console.log(JSON.stringify({ client: `pusher-js ${version}`, received }, null, 2));
process.exit(0);
