// Webhook receivers and pusher-js clients for host/tests/pusher_webhooks.rs.
// Usage: node pusher-webhooks.mjs <scenario>
// It starts three receivers on 127.0.0.1 (port 0) and prints their ports
// as one JSON line ({"receivers":[ok, failing, silent]}); the test writes
// the routes file with them, starts weir and answers with one stdin line
// "<host> <port>". Receivers: "ok" answers 200; "failing" answers 500 to
// its first two requests, then 200; "silent" reads requests and never
// answers. Every request is checked with the `pusher` library's own
// `webhook({headers, rawBody}).isValid()` before its events are recorded.
// The apps are the test's: app "1" (key1/secret1: client events, a webhook
// to "ok" for every event), app "2" (key2/secret2: occupied/vacated to
// "failing"), app "3" (key3/secret3: client events to "silent", a 4 KiB
// queue). Each scenario asserts and exits non-zero on failure; the last
// stdout line is a JSON summary. Every wait is bounded.
import Pusher from 'pusher-js';
import PusherServer from 'pusher';
import { createServer } from 'node:http';
import { createInterface } from 'node:readline';
import assert from 'node:assert/strict';

const [scenario] = process.argv.slice(2);
const STEP_MS = 10000;
const APPS = {
  1: { appId: '1', key: 'key1', secret: 'secret1' },
  2: { appId: '2', key: 'key2', secret: 'secret2' },
  3: { appId: '3', key: 'key3', secret: 'secret3' },
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let host;
let port;

function server(app, secret = APPS[app].secret) {
  return new PusherServer({ ...APPS[app], secret, host, port: Number(port), useTLS: false });
}

/** A receiver for `app`: `answer(n)` is the status of its n-th request
 * (null: never answer). Records each valid request's events. */
async function receiver(app, answer) {
  const r = { requests: 0, invalid: 0, batches: [], events: [], held: [] };
  const lib = new PusherServer({ ...APPS[app], host: '127.0.0.1', port: 1, useTLS: false });
  r.http = createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      r.requests += 1;
      const status = answer(r.requests);
      if (status === null) {
        r.held.push(res);
        return;
      }
      if (status === 200) {
        const hook = lib.webhook({ headers: req.headers, rawBody: Buffer.concat(chunks).toString() });
        if (hook.isValid()) {
          r.batches.push(hook.getEvents().length);
          r.timeMs = hook.getTime().getTime();
          r.events.push(...hook.getEvents());
        } else {
          r.invalid += 1;
        }
      }
      res.statusCode = status;
      res.end();
    });
  });
  await new Promise((ok) => r.http.listen(0, '127.0.0.1', ok));
  r.port = r.http.address().port;
  return r;
}

const auth = {};

/** A pusher-js client of `app` as `user`; channels are authorised here
 * with the library's authorizeChannel. */
function client(app, user = 'anon') {
  return new Pusher(APPS[app].key, {
    cluster: 'mt1',
    wsHost: host,
    wsPort: Number(port),
    forceTLS: false,
    enabledTransports: ['ws'],
    disableStats: true,
    channelAuthorization: {
      customHandler: ({ socketId, channelName }, callback) => {
        const presence = channelName.startsWith('presence-') ? { user_id: user } : undefined;
        callback(null, server(app).authorizeChannel(socketId, channelName, presence));
      },
    },
  });
}

function once(bindable, event, ms = STEP_MS) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out waiting for ${event}`)), ms);
    const on = (data) => {
      clearTimeout(timer);
      bindable.unbind(event, on);
      resolve(data);
    };
    bindable.bind(event, on);
  });
}

async function connected(p) {
  if (p.connection.state !== 'connected') await once(p.connection, 'connected');
  return p;
}

async function subscribed(p, name) {
  const ch = p.subscribe(name);
  await once(ch, 'pusher:subscription_succeeded');
  return ch;
}

async function until(cond, what, ms = STEP_MS) {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out: ${what}`);
    await sleep(10);
  }
}

/** The events as compared: name, channel, and user_id where there is one. */
const shape = (e) => [e.name, e.channel, e.user_id ?? e.event ?? ''].join(' ');

/** Every event kind from pusher-js actions, in order, each action waiting
 * for its webhook before the next. */
async function events(rx) {
  const ok = rx[0];
  let want = 0;
  const step = async (n, what) => {
    want += n;
    await until(() => ok.events.length >= want, what);
  };
  const a = await connected(client(1, 'alice'));
  const b = await connected(client(1, 'bob'));
  const a2 = await connected(client(1, 'alice'));
  await subscribed(a, 'news');
  await step(1, 'occupied news');
  await subscribed(b, 'news');
  a.unsubscribe('news');
  await sleep(300);
  b.unsubscribe('news');
  await step(1, 'vacated news');
  await subscribed(a, 'presence-room');
  await step(2, 'occupied + alice added');
  await subscribed(a2, 'presence-room');
  await subscribed(b, 'presence-room');
  await step(1, 'bob added');
  a2.unsubscribe('presence-room');
  await sleep(300);
  a.unsubscribe('presence-room');
  await step(1, 'alice removed');
  b.unsubscribe('presence-room');
  await step(2, 'bob removed + vacated');
  const chA = await subscribed(a, 'private-chat');
  await step(1, 'occupied private-chat');
  await subscribed(b, 'private-chat');
  chA.trigger('client-typing', { text: 'hi' });
  await step(1, 'client event');
  const miss = b.subscribe('cache-prices');
  await once(miss, 'pusher:cache_miss');
  await step(2, 'occupied + cache miss');
  // Three subscriptions at once: their webhooks come in one POST.
  const before = ok.batches.length;
  for (const name of ['x1', 'x2', 'x3']) a.subscribe(name);
  await step(3, 'three occupied');
  const together = ok.batches.slice(before);
  await sleep(400);
  const clientEvent = ok.events.find((e) => e.name === 'client_event');
  assert.equal(clientEvent.data, '{"text":"hi"}');
  assert.equal(clientEvent.socket_id, a.connection.socket_id);
  assert.ok(Math.abs(ok.timeMs - Date.now()) < 60000, 'time_ms is now');
  for (const p of [a, b, a2]) p.disconnect();
  return {
    events: ok.events.map(shape),
    invalid: ok.invalid,
    together,
    requests: ok.requests,
  };
}

/** The failing receiver answers 500 twice: the batch arrives on the third
 * attempt, then the next one at once. */
async function retry(rx) {
  const failing = rx[1];
  const a = await connected(client(2));
  await subscribed(a, 'orders');
  await until(() => failing.events.length >= 1, 'occupied after retries');
  a.unsubscribe('orders');
  await until(() => failing.events.length >= 2, 'vacated');
  a.disconnect();
  return { events: failing.events.map(shape), requests: failing.requests, invalid: failing.invalid };
}

/** The silent receiver never answers: client events keep flowing at full
 * speed between two connections while the webhook queue fills and drops. */
async function silent(rx) {
  const a = await connected(client(3));
  const b = await connected(client(3));
  const chA = await subscribed(a, 'private-feed');
  const chB = await subscribed(b, 'private-feed');
  const got = [];
  chB.bind('client-tick', (d) => got.push(d.i));
  const started = Date.now();
  const n = 400;
  for (let i = 0; i < n; i++) {
    chA.trigger('client-tick', { i, pad: 'x'.repeat(100) });
    if (i % 50 === 49) await sleep(60);
  }
  await until(() => got.length === n, `all ${n} client events relayed`);
  const ms = Date.now() - started;
  assert.deepEqual(got, [...Array(n).keys()], 'in order, none lost');
  for (const p of [a, b]) p.disconnect();
  return { relayed: got.length, ms, held: rx[2].requests };
}

/** Per-app figures: app 1 with two connections, client events and API
 * calls (one with a bad signature), app 2 with one connection and a query;
 * /metrics read while they are open. */
async function metrics() {
  const a = await connected(client(1));
  const b = await connected(client(1));
  const chA = await subscribed(a, 'private-m');
  const chB = await subscribed(b, 'private-m');
  const got = [];
  chB.bind('client-m', (d) => got.push(d));
  chB.bind('ev', (d) => got.push(d));
  const gotA = [];
  chA.bind('ev', (d) => gotA.push(d));
  chA.trigger('client-m', { n: 1 });
  chA.trigger('client-m', { n: 2 });
  await until(() => got.length === 2, 'client events');
  await server(1).trigger('private-m', 'ev', { n: 3 });
  await assert.rejects(server(1, 'wrong').trigger('private-m', 'ev', {}));
  await until(() => got.length === 3 && gotA.length === 1, 'the trigger');
  const c = await connected(client(2));
  await subscribed(c, 'news');
  const res = await server(2).get({ path: '/channels' });
  assert.equal(res.status, 200);
  const text = await (await fetch(`http://${host}:${port}/metrics`)).text();
  const figures = {};
  for (const line of text.split('\n')) {
    if (line.startsWith('weir_pusher_')) {
      const at = line.lastIndexOf(' ');
      figures[line.slice(0, at)] = Number(line.slice(at + 1));
    }
  }
  for (const p of [a, b, c]) p.disconnect();
  return { figures };
}

const scenarios = { events, retry, silent, metrics };
const rx = [
  await receiver(1, () => 200),
  await receiver(2, (n) => (n <= 2 ? 500 : 200)),
  await receiver(3, () => null),
];
console.log(JSON.stringify({ receivers: rx.map((r) => r.port) }));
const lines = createInterface({ input: process.stdin });
const first = await new Promise((r) => lines.once('line', r));
[host, port] = first.trim().split(' ');
const timer = setTimeout(() => {
  console.error('scenario timed out');
  process.exit(2);
}, 60000);
try {
  const out = await scenarios[scenario](rx);
  console.log(JSON.stringify(out));
} catch (e) {
  console.error(e);
  process.exitCode = 1;
} finally {
  clearTimeout(timer);
  lines.close();
  for (const r of rx) {
    for (const res of r.held) res.destroy();
    r.http.close();
    r.http.closeAllConnections();
  }
  setTimeout(() => process.exit(process.exitCode ?? 0), 50);
}
