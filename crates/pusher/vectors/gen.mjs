// Vectors from the real `pusher` server library (pusher-http-node), for
// crates/pusher/tests/vectors.rs: channel and user auth from
// `authorizeChannel` / `authenticateUser`, HTTP API requests exactly as the
// library sends them (recorded by a local HTTP server on 127.0.0.1), and
// webhooks that the library's own `webhook(...).isValid()` accepts.
//
// Regenerate (versions pinned in host/tests/clients/package.json):
//   (cd host/tests/clients && npm ci)
//   node crates/pusher/vectors/gen.mjs > crates/pusher/vectors/pusher-http-node.json
import { createRequire } from "node:module";
import http from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../../../host/tests/clients/package.json"));
const Pusher = require("pusher");
const pusherVersion = require("pusher/package.json").version;

const APP = { appId: "4242", key: "weir-test-key", secret: "weir-test-secret" };

// The HTTP API calls: the server records each request and answers {}.
const requests = [];
const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const [reqPath, query = ""] = req.url.split(/\?(.*)/s);
    requests.push({ method: req.method, path: reqPath, query, body: Buffer.concat(chunks).toString("utf8") });
    res.writeHead(200, { "content-type": "application/json" });
    res.end("{}");
  });
});
await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
const timer = setTimeout(() => { console.error("gen.mjs: timed out"); process.exit(1); }, 20000);

const pusher = new Pusher({
  ...APP,
  host: "127.0.0.1",
  port: server.address().port,
  useTLS: false,
  encryptionMasterKeyBase64: Buffer.alloc(32, 7).toString("base64"),
});

const calls = [
  ["trigger one channel", () => pusher.trigger("news", "update", { n: 1, s: "quote \" backslash \\ é✓" })],
  ["trigger many channels, socket_id, info", () => pusher.trigger(["a", "private-b", "presence-c"], "e", "plain string", { socket_id: "123.456", info: "user_count,subscription_count" })],
  ["trigger batch", () => pusher.triggerBatch([{ channel: "a", name: "x", data: { k: 1 } }, { channel: "cache-b", name: "y", data: "s", socket_id: "1.2" }])],
  ["send to user", () => pusher.sendToUser("u1", "notify", { hello: "world" })],
  ["terminate user connections", () => pusher.terminateUserConnections("u1")],
  // Signed as "user one", sent as "user%20one" by the HTTP client.
  ["terminate user with a space in its id", () => pusher.terminateUserConnections("user one")],
  ["get channel info, name with @ , ; =", () => pusher.get({ path: "/channels/a@b,c;d=e" })],
  ["get channels with filter and info", () => pusher.get({ path: "/channels", params: { filter_by_prefix: "presence-", info: "user_count" } })],
  ["get channel info", () => pusher.get({ path: "/channels/presence-room", params: { info: "user_count,subscription_count" } })],
  ["get users", () => pusher.get({ path: "/channels/presence-room/users" })],
];
const http_requests = [];
for (const [name, call] of calls) {
  await call();
  const r = requests.shift();
  const ts = Number(new URLSearchParams(r.query).get("auth_timestamp"));
  http_requests.push({ name, ...r, auth_timestamp: ts });
}

const socket_id = "1234.5678";
const channel_auth = [];
for (const [channel, data] of [
  ["private-orders", undefined],
  ["private-cache-orders", undefined],
  ["private-encrypted-vault", undefined],
  ["presence-room", { user_id: "u1", user_info: { name: "Ann \"A\" ✓" } }],
  // Laravel's broadcaster sends the model's integer id.
  ["presence-numbers", { user_id: 42 }],
]) {
  const out = pusher.authorizeChannel(socket_id, channel, data);
  channel_auth.push({ socket_id, channel, channel_data: out.channel_data ?? null, auth: out.auth, has_shared_secret: "shared_secret" in out });
}

const user_auth = [];
for (const user of [{ id: "u1" }, { id: "u2", user_info: { name: "Bo" }, watchlist: ["u1"] }]) {
  const out = pusher.authenticateUser(socket_id, user);
  user_auth.push({ socket_id, user_data: out.user_data, auth: out.auth });
}

// Webhook bodies in the field order weir's serialiser writes, signed the
// way Pusher signs them, and checked with the library's own validator.
const token = new Pusher.Token(APP.key, APP.secret);
const webhooks = [];
for (const events of [
  [{ name: "channel_occupied", channel: "news" }, { name: "channel_vacated", channel: "news" }],
  [{ name: "member_added", channel: "presence-room", user_id: "u1" }, { name: "member_removed", channel: "presence-room", user_id: "u1" }],
  [{ name: "client_event", channel: "presence-room", event: "client-typing", data: JSON.stringify({ typing: true }), socket_id, user_id: "u1" }, { name: "cache_miss", channel: "cache-ticker" }],
]) {
  const body = JSON.stringify({ time_ms: 1700000000123, events });
  const signature = token.sign(body);
  const valid = pusher.webhook({ headers: { "x-pusher-key": APP.key, "x-pusher-signature": signature, "content-type": "application/json" }, rawBody: body }).isValid();
  if (!valid) throw new Error("pusher-http-node refused its own webhook");
  webhooks.push({ body, key: APP.key, signature });
}

clearTimeout(timer);
server.close();
console.log(JSON.stringify({ generator: `pusher ${pusherVersion} (pusher-http-node)`, app: APP, channel_auth, user_auth, http_requests, webhooks }, null, 2));
