// Drives weir's pusher route with the real `pusher-js` client and the real
// `pusher` server library (pinned in package.json), for
// host/tests/pusher.rs. Usage:
//   node pusher-client.mjs <host> <port> <scenario>
// The apps are the test's routes file's: app "1" (key "key1", secret
// "secret1": client events at 3 per second, user authentication) and app
// "2" (key "key2", secret "secret2": no client events). Private and
// presence subscriptions are signed by a tiny auth endpoint served here
// on 127.0.0.1 with the library's `authorizeChannel`. Each scenario
// asserts and exits non-zero on failure; the last stdout line is a JSON
// summary. Every wait is bounded.
import Pusher from 'pusher-js';
import PusherServer from 'pusher';
import { createServer } from 'node:http';
import assert from 'node:assert/strict';

const [host, port, scenario] = process.argv.slice(2);
const STEP_MS = 10000;
const APPS = {
  1: { appId: '1', key: 'key1', secret: 'secret1' },
  2: { appId: '2', key: 'key2', secret: 'secret2' },
};

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The app server's library, pointed at weir's HTTP API. */
function server(app = 1, secret = APPS[app].secret) {
  return new PusherServer({ ...APPS[app], secret, host, port: Number(port), useTLS: false });
}

/** The tiny auth endpoint: POST {socket_id, channel_name, user_id?} →
 * the library's authorizeChannel (with presence data for presence-). */
async function authEndpoint() {
  const signers = { 1: server(1), 2: server(2), bad: server(1, 'not-the-secret') };
  const http = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const q = JSON.parse(body);
      const signer = signers[q.signer];
      const presence = q.channel_name.startsWith('presence-')
        ? { user_id: q.user_id, user_info: { name: q.user_id.toUpperCase() } }
        : undefined;
      const auth = signer.authorizeChannel(q.socket_id, q.channel_name, presence);
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify(auth));
    });
  });
  await new Promise((r) => http.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${http.address().port}/auth`, close: () => http.close() };
}

let endpoint;

/** A pusher-js client of `app`; its auth goes to the endpoint, signed by
 * `signer` ("bad": the wrong secret) for user `user`. */
function client(app = 1, { user = 'anon', signer = app, key = APPS[app].key } = {}) {
  return new Pusher(key, {
    cluster: 'mt1',
    wsHost: host,
    wsPort: Number(port),
    forceTLS: false,
    enabledTransports: ['ws'],
    disableStats: true,
    channelAuthorization: {
      customHandler: async ({ socketId, channelName }, callback) => {
        try {
          const res = await fetch(endpoint.url, {
            method: 'POST',
            body: JSON.stringify({ socket_id: socketId, channel_name: channelName, user_id: user, signer }),
          });
          callback(null, await res.json());
        } catch (e) {
          callback(e, null);
        }
      },
    },
    userAuthentication: {
      customHandler: ({ socketId }, callback) => {
        callback(null, server(app).authenticateUser(socketId, { id: user, user_info: { n: 1 } }));
      },
    },
  });
}

/** Resolves with the first `event` (on a channel, the connection or the
 * user) that `pred` accepts, or fails after `ms`. */
function once(bindable, event, pred = () => true, ms = STEP_MS) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out waiting for ${event}`)), ms);
    const on = (data, meta) => {
      if (pred(data, meta)) {
        clearTimeout(timer);
        bindable.unbind(event, on);
        resolve(data === undefined ? meta : data);
      }
    };
    bindable.bind(event, on);
  });
}

async function connected(p) {
  if (p.connection.state !== 'connected') {
    await once(p.connection, 'connected');
  }
  return p;
}

async function subscribed(p, name) {
  const ch = p.subscribe(name);
  await once(ch, 'pusher:subscription_succeeded');
  return ch;
}

/** Collects every `event` a channel gets. */
function collect(ch, event) {
  const got = [];
  ch.bind(event, (data, meta) => got.push({ data, meta }));
  return got;
}

async function until(cond, what, ms = STEP_MS) {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out: ${what}`);
    await sleep(20);
  }
}

/** Public channel: an event triggered with the library's `trigger`, a
 * batch, and `socket_id` exclusion. */
async function publicChannel() {
  const a = await connected(client());
  const b = await connected(client());
  const chA = await subscribed(a, 'news');
  const chB = await subscribed(b, 'news');
  const other = await subscribed(b, 'other');
  const gotA = collect(chA, 'greet');
  const gotB = collect(chB, 'greet');
  const gotOther = collect(other, 'greet');
  const lib = server();
  const res = await lib.trigger('news', 'greet', { hello: 'world' });
  assert.equal(res.status, 200);
  await until(() => gotA.length === 1 && gotB.length === 1, 'both got the trigger');
  assert.deepEqual(gotA[0].data, { hello: 'world' });
  // The sender's own socket is excluded.
  await lib.trigger('news', 'greet', { n: 2 }, { socket_id: a.connection.socket_id });
  await until(() => gotB.length === 2, 'b got the second trigger');
  await sleep(300);
  assert.equal(gotA.length, 1, 'the excluded socket got the event');
  // A batch reaches each of its channels.
  await lib.triggerBatch([
    { channel: 'news', name: 'greet', data: { n: 3 } },
    { channel: 'other', name: 'greet', data: { n: 4 } },
  ]);
  await until(() => gotA.length === 2 && gotOther.length === 1, 'the batch arrived');
  assert.deepEqual(gotOther[0].data, { n: 4 });
  // Channel info through the library's `get`.
  const info = await (await lib.get({ path: '/channels/news', params: { info: 'subscription_count' } })).json();
  assert.deepEqual(info, { occupied: true, subscription_count: 2 });
  const list = await (await lib.get({ path: '/channels', params: {} })).json();
  assert.deepEqual(Object.keys(list.channels).sort(), ['news', 'other']);
  a.disconnect();
  b.disconnect();
  return { a: gotA.length, b: gotB.length, other: gotOther.length };
}

/** Private channel: authorised by the endpoint; a bad signature refused. */
async function privateChannel() {
  const good = await connected(client());
  const ch = await subscribed(good, 'private-room');
  const got = collect(ch, 'secret');
  await server().trigger('private-room', 'secret', 'only for you');
  await until(() => got.length === 1, 'the private event');
  assert.equal(got[0].data, 'only for you');
  const bad = await connected(client(1, { signer: 'bad' }));
  const badCh = bad.subscribe('private-room');
  const err = await once(badCh, 'pusher:subscription_error');
  assert.equal(err.status, 401, JSON.stringify(err));
  assert.equal(badCh.subscribed, false);
  good.disconnect();
  bad.disconnect();
  return { refused: err.status };
}

/** Presence: members join and leave as others see them; the users and
 * channel queries through the library. */
async function presence() {
  const alice = await connected(client(1, { user: 'alice' }));
  const chA = await subscribed(alice, 'presence-room');
  assert.equal(chA.members.count, 1);
  assert.deepEqual(chA.members.me.info, { name: 'ALICE' });
  const added = once(chA, 'pusher:member_added');
  const bob = await connected(client(1, { user: 'bob' }));
  const chB = await subscribed(bob, 'presence-room');
  assert.equal(chB.members.count, 2);
  assert.deepEqual(chB.members.get('alice').info, { name: 'ALICE' });
  const member = await added;
  assert.equal(member.id, 'bob');
  assert.deepEqual(member.info, { name: 'BOB' });
  assert.equal(chA.members.count, 2);
  const lib = server();
  const users = await (await lib.get({ path: '/channels/presence-room/users' })).json();
  assert.deepEqual(users.users.map((u) => u.id).sort(), ['alice', 'bob']);
  const info = await (
    await lib.get({ path: '/channels/presence-room', params: { info: 'user_count,subscription_count' } })
  ).json();
  assert.deepEqual(info, { occupied: true, user_count: 2, subscription_count: 2 });
  const list = await (
    await lib.get({ path: '/channels', params: { filter_by_prefix: 'presence-', info: 'user_count' } })
  ).json();
  assert.deepEqual(list, { channels: { 'presence-room': { user_count: 2 } } });
  const removed = once(chA, 'pusher:member_removed');
  bob.disconnect();
  assert.equal((await removed).id, 'bob');
  assert.equal(chA.members.count, 1);
  alice.disconnect();
  return { members: 2 };
}

/** Client events: relayed to the others (never echoed), with user_id on
 * presence channels, rate-limited (4301), refused where disabled. */
async function clientEvents() {
  const a = await connected(client(1, { user: 'alice' }));
  const b = await connected(client(1, { user: 'bob' }));
  const chA = await subscribed(a, 'presence-chat');
  const chB = await subscribed(b, 'presence-chat');
  const gotA = collect(chA, 'client-msg');
  const gotB = collect(chB, 'client-msg');
  assert.equal(chA.trigger('client-msg', { text: 'hi' }), true);
  await until(() => gotB.length === 1, 'b got the client event');
  assert.deepEqual(gotB[0].data, { text: 'hi' });
  assert.equal(gotB[0].meta.user_id, 'alice');
  await sleep(300);
  assert.equal(gotA.length, 0, 'the sender got its own client event');
  // The app allows 3 per second: a burst of 10 gets 4301.
  await sleep(1100);
  const limited = once(a.connection, 'error', (e) => e?.data?.code === 4301);
  for (let i = 0; i < 10; i++) chA.trigger('client-msg', { i });
  const err = await limited;
  await sleep(500);
  assert.ok(gotB.length >= 2 && gotB.length <= 4, `relayed ${gotB.length} of the burst`);
  // App 2 has client events off.
  const c = await connected(client(2));
  const d = await connected(client(2));
  const chC = await subscribed(c, 'private-chat');
  const chD = await subscribed(d, 'private-chat');
  const gotD = collect(chD, 'client-msg');
  const off = once(c.connection, 'error', (e) => e?.data?.code === 4301);
  chC.trigger('client-msg', { no: 1 });
  const offErr = await off;
  await sleep(300);
  assert.equal(gotD.length, 0, 'a disabled client event was relayed');
  for (const p of [a, b, c, d]) p.disconnect();
  return { relayed: gotB.length, limited: err.data.code, disabled: offErr.data.message };
}

/** Cache channels: a miss first, then the last event replayed. */
async function cache() {
  const a = await connected(client());
  const ch = a.subscribe('cache-prices');
  await once(ch, 'pusher:cache_miss');
  await server().trigger('cache-prices', 'price', { eur: 1 });
  await server().trigger('cache-prices', 'price', { eur: 2 });
  const b = await connected(client());
  const chB = b.subscribe('cache-prices');
  const replay = await once(chB, 'price');
  assert.deepEqual(replay, { eur: 2 });
  a.disconnect();
  b.disconnect();
  return { replayed: replay.eur };
}

/** Signin, a message to the user (`sendToUser`), then
 * `terminateUserConnections`. */
async function user() {
  const p = await connected(client(1, { user: 'carol' }));
  p.signin();
  // pusher-js subscribes to #server-to-user-carol by itself after signin.
  await until(() => p.user.serverToUserChannel?.subscribed, 'the user channel');
  const got = once(p.user, 'note');
  await server().sendToUser('carol', 'note', { hi: 'carol' });
  assert.deepEqual(await got, { hi: 'carol' });
  const gone = once(p.connection, 'state_change', (s) => s.current === 'disconnected' || s.current === 'failed');
  const res = await server().terminateUserConnections('carol');
  assert.equal(res.status, 200);
  await gone;
  await sleep(300);
  assert.notEqual(p.connection.state, 'connected', 'reconnected after termination');
  return { terminated: true };
}

/** An unknown key: pusher:error 4001, and the client does not retry. */
async function unknownKey() {
  const p = client(1, { key: 'no-such-key' });
  // During the handshake pusher-js wraps the server's pusher:error.
  const code = (e) => e?.data?.code ?? e?.error?.data?.code;
  const err = await once(p.connection, 'error', (e) => code(e) !== undefined);
  await sleep(500);
  assert.notEqual(p.connection.state, 'connected');
  p.disconnect();
  return { code: code(err) };
}

/** Two apps with the same channel name never see each other's events. */
async function isolation() {
  const one = await connected(client(1));
  const two = await connected(client(2));
  const ch1 = await subscribed(one, 'shared');
  const ch2 = await subscribed(two, 'shared');
  const got1 = collect(ch1, 'ev');
  const got2 = collect(ch2, 'ev');
  await server(1).trigger('shared', 'ev', 'for app 1');
  await until(() => got1.length === 1, 'app 1 got its event');
  await server(2).trigger('shared', 'ev', 'for app 2');
  await until(() => got2.length === 1, 'app 2 got its event');
  await sleep(300);
  assert.deepEqual(got1.map((g) => g.data), ['for app 1']);
  assert.deepEqual(got2.map((g) => g.data), ['for app 2']);
  // App 2's credentials cannot read app 1's channels.
  const list = await (await server(2).get({ path: '/channels', params: {} })).json();
  assert.deepEqual(Object.keys(list.channels), ['shared']);
  one.disconnect();
  two.disconnect();
  return { one: got1.length, two: got2.length };
}

/** A request signed with the wrong secret is refused (401). */
async function badApiSignature() {
  let status;
  try {
    await server(1, 'wrong').trigger('news', 'x', {});
  } catch (e) {
    status = e.status;
  }
  assert.equal(status, 401);
  return { status };
}

const scenarios = {
  public: publicChannel,
  private: privateChannel,
  presence,
  client_events: clientEvents,
  cache,
  user,
  unknown_key: unknownKey,
  isolation,
  bad_api_signature: badApiSignature,
};

endpoint = await authEndpoint();
const timer = setTimeout(() => {
  console.error('scenario timed out');
  process.exit(2);
}, 60000);
try {
  const out = await scenarios[scenario]();
  console.log(JSON.stringify(out));
} catch (e) {
  console.error(e);
  process.exitCode = 1;
} finally {
  clearTimeout(timer);
  endpoint.close();
  // pusher-js keeps timers for reconnects; the scenario is over.
  setTimeout(() => process.exit(process.exitCode ?? 0), 50);
}
