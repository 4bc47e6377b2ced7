// The frames pusher-js and Laravel Echo actually send, for
// crates/pusher/tests/vectors.rs: each client connects to a scripted
// WebSocket server (`ws`, on 127.0.0.1) that answers just enough of the
// protocol to make the client subscribe to every channel kind, send client
// events, sign in and ping; every text frame the client sends is recorded.
// Channel and user auth come from the real `pusher` server library, with
// the key and secret of pusher-http-node.json.
//
// Regenerate (versions pinned in host/tests/clients/package.json):
//   (cd host/tests/clients && npm ci)
//   node crates/pusher/vectors/frames.mjs > crates/pusher/vectors/pusher-js-frames.json
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const clients = path.join(here, "../../../host/tests/clients/package.json");
const require = createRequire(clients);
const PusherServer = require("pusher");
const PusherJs = require("pusher-js");
const { WebSocketServer } = require("ws");
const { default: Echo } = await import(require.resolve("laravel-echo").replace(/echo\.common\.js$/, "echo.js"));

const APP = { appId: "4242", key: "weir-test-key", secret: "weir-test-secret" };
const SOCKET_ID = "1234.5678";
const MEMBER = { user_id: "u1", user_info: { name: "Ann" } };
const server = new PusherServer({ ...APP, encryptionMasterKeyBase64: Buffer.alloc(32, 7).toString("base64") });

const frames = [];
const urls = [];
let label = "";
const wss = new WebSocketServer({ host: "127.0.0.1", port: 0 });
await new Promise((ok) => wss.on("listening", ok));
const send = (ws, msg) => ws.send(JSON.stringify(msg));
wss.on("connection", (ws, req) => {
  urls.push({ client: label, url: req.url });
  // activity_timeout 1 s: the client pings after a second of silence.
  send(ws, { event: "pusher:connection_established", data: JSON.stringify({ socket_id: SOCKET_ID, activity_timeout: 1 }) });
  ws.on("message", (raw) => {
    const text = raw.toString();
    frames.push({ client: label, frame: text });
    const msg = JSON.parse(text);
    if (!msg.event.startsWith("pusher:")) return;
    const data = typeof msg.data === "string" ? JSON.parse(msg.data) : msg.data;
    if (msg.event === "pusher:subscribe") {
      const presence = data.channel.startsWith("presence-")
        ? JSON.stringify({ presence: { ids: ["u1"], hash: { u1: MEMBER.user_info }, count: 1 } })
        : "{}";
      send(ws, { event: "pusher_internal:subscription_succeeded", channel: data.channel, data: presence });
    } else if (msg.event === "pusher:signin") {
      send(ws, { event: "pusher:signin_success", data: { user_data: data.user_data } });
    }
  });
  // The server's own ping, which the client answers with pusher:pong.
  setTimeout(() => send(ws, { event: "pusher:ping", data: {} }), 300);
});
const port = wss.address().port;

const channelAuthorization = {
  customHandler: ({ socketId, channelName }, callback) =>
    callback(null, server.authorizeChannel(socketId, channelName, channelName.startsWith("presence-") ? MEMBER : undefined)),
};
const userAuthentication = {
  customHandler: ({ socketId }, callback) => callback(null, server.authenticateUser(socketId, { id: "u1", user_info: { name: "Ann" } })),
};
const options = { cluster: "mt1", wsHost: "127.0.0.1", wsPort: port, forceTLS: false, enabledTransports: ["ws"], channelAuthorization, userAuthentication };
const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));
const timer = setTimeout(() => { console.error("frames.mjs: timed out"); process.exit(1); }, 30000);

// pusher-js on its own.
label = "pusher-js";
const p = new PusherJs(APP.key, options);
await new Promise((ok) => p.connection.bind("connected", ok));
p.subscribe("news");
const priv = p.subscribe("private-orders");
const presence = p.subscribe("presence-room");
p.subscribe("cache-ticker");
p.subscribe("private-encrypted-vault");
await new Promise((ok) => presence.bind("pusher:subscription_succeeded", ok));
priv.trigger("client-note", "a plain string");
presence.trigger("client-typing", { typing: true, text: "quote \" é✓" });
p.signin();
await sleep(300);
p.unsubscribe("news");
await sleep(1800); // past activity_timeout: the client's own pusher:ping
p.disconnect();

// Laravel Echo over pusher-js.
label = "laravel-echo";
const echo = new Echo({ broadcaster: "pusher", key: APP.key, Pusher: PusherJs, ...options });
await new Promise((ok) => echo.connector.pusher.connection.bind("connected", ok));
echo.channel("orders");
const room = echo.join("room");
const orders = echo.private("orders");
await sleep(300);
room.whisper("typing", { name: "Ann" });
orders.whisper("saved", { id: 7 });
await sleep(300);
echo.leave("orders");
await sleep(300);
echo.disconnect();

clearTimeout(timer);
wss.close();
const modules = path.join(path.dirname(clients), "node_modules");
const version = (n) => JSON.parse(fs.readFileSync(path.join(modules, n, "package.json"), "utf8")).version;
const versions = Object.fromEntries(["pusher-js", "laravel-echo", "pusher"].map((n) => [n, version(n)]));
console.log(JSON.stringify({ versions, app: APP, socket_id: SOCKET_ID, urls, frames }, null, 2));
process.exit(0);
