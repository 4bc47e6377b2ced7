// Drives a pusher route whose app has a guest (examples/fixtures/pusher-gate)
// with the real `pusher-js` client and the real `pusher` server library,
// for host/tests/pusher_guest.rs. Usage:
//   node pusher-guest-client.mjs <host> <port> <scenario>
// The apps are the test's routes file's: app "g" (key "gkey", secret
// "gsecret", the guest, client events on) and app "p" (key "pkey", secret
// "psecret", no guest, client events on) on /app/{key}; app "t" (key
// "tkey", the guest) on /{tenant}/app/{key}. There is no auth endpoint:
// the clients' authorisers hand out HS256 JWTs signed with the fixture's
// key, which the guest checks. Each scenario asserts and exits non-zero on
// failure; the last stdout line is a JSON summary. Every wait is bounded.
import Pusher from 'pusher-js';
import PusherServer from 'pusher';
import { createHmac } from 'node:crypto';
import assert from 'node:assert/strict';

const [host, port, scenario] = process.argv.slice(2);
const STEP_MS = 10000;
/** The fixture's token key (examples/fixtures/pusher-gate's JWT_KEY). */
const JWT_KEY = 'weir-pusher-gate-test-key';
const APPS = {
  g: { appId: 'g', key: 'gkey', secret: 'gsecret' },
  p: { appId: 'p', key: 'pkey', secret: 'psecret' },
  t: { appId: 't', key: 'tkey', secret: 'gsecret' },
};

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const b64 = (s) => Buffer.from(s).toString('base64url');

/** An HS256 JWT for `claims`, signed with `key`. */
function jwt(claims, key = JWT_KEY) {
  const head = b64(JSON.stringify({ alg: 'HS256', typ: 'JWT' }));
  const body = b64(JSON.stringify({ iat: 1, exp: 4102444800, ...claims }));
  const sig = createHmac('sha256', key).update(`${head}.${body}`).digest('base64url');
  return `${head}.${body}.${sig}`;
}

function server(app = 'g') {
  return new PusherServer({ ...APPS[app], host, port: Number(port), useTLS: false });
}

/** A pusher-js client of `app` whose authoriser returns `token` as the
 * `auth` (and, for presence channels, the user it claims), or with
 * `sign` the app's own signature as an auth endpoint would. */
function client(app = 'g', { token = '', claim = 'anon', wsPath, sign = false } = {}) {
  return new Pusher(APPS[app].key, {
    cluster: 'mt1',
    wsHost: host,
    wsPort: Number(port),
    wsPath,
    forceTLS: false,
    enabledTransports: ['ws'],
    disableStats: true,
    channelAuthorization: {
      customHandler: ({ socketId, channelName }, callback) => {
        if (sign) {
          return callback(null, server(app).authorizeChannel(socketId, channelName, { user_id: claim }));
        }
        const auth = { auth: token };
        if (channelName.startsWith('presence-')) {
          // pusher-js wants a channel_data to know its own member.
          auth.channel_data = JSON.stringify({ user_id: claim });
        }
        callback(null, auth);
      },
    },
  });
}

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

function collect(ch, event) {
  const got = [];
  ch.bind(event, (data) => got.push(data));
  return got;
}

async function until(cond, what, ms = STEP_MS) {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out: ${what}`);
    await sleep(20);
  }
}

/** Private and presence channels authorised by the guest from a JWT, with
 * no auth endpoint; members as the token names them; a forged token and a
 * token for another channel refused. */
async function authorised() {
  const annToken = jwt({ sub: 'ann', name: 'Ann', channels: ['private-room', 'presence-*'] });
  const ann = await connected(client('g', { token: annToken, claim: 'ann' }));
  const room = await subscribed(ann, 'private-room');
  const got = collect(room, 'note');
  await server().trigger('private-room', 'note', { hi: 1 });
  await until(() => got.length === 1, 'the private event');
  assert.deepEqual(got[0], { hi: 1 });

  const lobbyA = await subscribed(ann, 'presence-lobby');
  assert.equal(lobbyA.members.me.id, 'ann');
  assert.deepEqual(lobbyA.members.me.info, { name: 'Ann' });
  // Bob claims to be "mallory": the guest names the member from his token.
  const added = once(lobbyA, 'pusher:member_added');
  const bobToken = jwt({ sub: 'bob', name: 'Bob', channels: ['presence-*'] });
  const bob = await connected(client('g', { token: bobToken, claim: 'mallory' }));
  const lobbyB = await subscribed(bob, 'presence-lobby');
  const member = await added;
  assert.equal(member.id, 'bob');
  assert.deepEqual(member.info, { name: 'Bob' });
  assert.deepEqual(lobbyB.members.get('ann').info, { name: 'Ann' });
  assert.equal(lobbyB.members.get('mallory'), null);
  const users = await (await server().get({ path: '/channels/presence-lobby/users' })).json();
  assert.deepEqual(users.users.map((u) => u.id).sort(), ['ann', 'bob']);

  // Bob's token does not grant private-room; a forged token is refused.
  const notGranted = once(bob.subscribe('private-room'), 'pusher:subscription_error');
  const forged = await connected(client('g', { token: jwt({ sub: 'eve', channels: ['*'] }, 'guess') }));
  const forgedErr = once(forged.subscribe('private-room'), 'pusher:subscription_error');
  const [e1, e2] = await Promise.all([notGranted, forgedErr]);
  assert.equal(e1.status, 403, JSON.stringify(e1));
  assert.equal(e2.status, 401, JSON.stringify(e2));
  for (const p of [ann, bob, forged]) p.disconnect();
  return { members: users.users.length, not_granted: e1.status, forged: e2.status };
}

/** A channel prefix the guest refuses: subscription_error with its code. */
async function refused() {
  const p = await connected(client('g', { token: jwt({ channels: ['*'] }) }));
  const err = await once(p.subscribe('private-banned-x'), 'pusher:subscription_error');
  assert.equal(err.status, 403, JSON.stringify(err));
  assert.equal(err.error, 'this channel is closed');
  // A public channel of the same connection is still allowed.
  await subscribed(p, 'news');
  p.disconnect();
  return { status: err.status };
}

/** Client events rewritten (tagged, trimmed) and dropped, as another
 * pusher-js client sees them; a drop with a code reaches the sender. */
async function events() {
  const token = jwt({ sub: 'x', channels: ['private-chat'] });
  const a = await connected(client('g', { token }));
  const b = await connected(client('g', { token }));
  const chA = await subscribed(a, 'private-chat');
  const chB = await subscribed(b, 'private-chat');
  const got = collect(chB, 'client-msg');
  assert.ok(chA.trigger('client-msg', '  hello  '));
  assert.ok(chA.trigger('client-msg', { n: 1 }));
  assert.ok(chA.trigger('client-msg', 'buy spam now'));
  await sleep(400);
  const loud = once(a.connection, 'error', (e) => e?.data?.code === 4301);
  assert.ok(chA.trigger('client-msg', '!loud'));
  const err = await loud;
  assert.ok(chA.trigger('client-msg', { last: true }));
  await until(() => got.length === 3, 'three events passed');
  await sleep(300);
  assert.deepEqual(got, [
    { text: 'hello', checked: true },
    { n: 1, checked: true },
    { last: true, checked: true },
  ]);
  a.disconnect();
  b.disconnect();
  return { delivered: got.length, loud: err.data.code };
}

/** A connection the guest refuses: pusher:error with its code, no retry;
 * another tenant's connection is accepted. */
async function suspended() {
  const ok = await connected(client('t', { wsPath: '/acme' }));
  const p = client('t', { wsPath: '/suspended' });
  const code = (e) => e?.data?.code ?? e?.error?.data?.code;
  const err = await once(p.connection, 'error', (e) => code(e) !== undefined);
  await sleep(500);
  assert.notEqual(p.connection.state, 'connected');
  p.disconnect();
  ok.disconnect();
  return { code: code(err) };
}

/** The guest traps on a subscribe, then passes its deadline on another:
 * each refused with an error, the connection stays up and subscribes
 * again. */
async function trap() {
  const p = await connected(client('g', { token: jwt({ channels: ['private-ok'] }) }));
  const socket = p.connection.socket_id;
  const err = await once(p.subscribe('private-trap-1'), 'pusher:subscription_error');
  assert.equal(err.status, 500, JSON.stringify(err));
  // One that spins past the guest's deadline: refused the same way.
  const slow = await once(p.subscribe('private-slow-1'), 'pusher:subscription_error');
  assert.equal(slow.status, 500, JSON.stringify(slow));
  const ch = await subscribed(p, 'private-ok');
  assert.equal(p.connection.state, 'connected');
  assert.equal(p.connection.socket_id, socket, 'the connection was replaced');
  const got = collect(ch, 'n');
  await server().trigger('private-ok', 'n', 1);
  await until(() => got.length === 1, 'an event after the trap');
  p.disconnect();
  return { status: err.status, slow: slow.status, same_socket: true };
}

/** App "p" on the same route has no guest: a JWT is no signature there,
 * and its client events pass untouched. */
async function otherApp() {
  const token = jwt({ channels: ['*'] });
  const p = await connected(client('p', { token }));
  const err = await once(p.subscribe('private-room'), 'pusher:subscription_error');
  assert.equal(err.status, 401, JSON.stringify(err));
  // Client events need a private or presence channel: signed with the
  // app's secret, as its auth endpoint would.
  const a = await connected(client('p', { sign: true, claim: 'u1' }));
  const b = await connected(client('p', { sign: true, claim: 'u2' }));
  const chA = await subscribed(a, 'presence-x');
  const chB = await subscribed(b, 'presence-x');
  const got = collect(chB, 'client-msg');
  chA.trigger('client-msg', '  spam  ');
  await until(() => got.length === 1, 'the untouched event');
  assert.equal(got[0], '  spam  ');
  for (const c of [p, a, b]) c.disconnect();
  return { refused: err.status, untouched: got[0] };
}

const scenarios = { authorised, refused, events, suspended, trap, other_app: otherApp };

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
  setTimeout(() => process.exit(process.exitCode ?? 0), 50);
}
