// pusher-js reconnecting after a network cut, for host/tests/pusher_reconnect.rs.
// Usage: node pusher-reconnect.mjs <host> <port> <cuts>
// The test's routes file has app "1" (key "key1", secret from
// WEIR_TEST_PUSHER_SECRET, client events on). Alice's pusher-js client
// reaches weir through a TCP relay started here; Bob's connects directly.
// Alice subscribes to a public, a private and a presence channel; each
// cut destroys the relay's sockets (no close frame: the client sees 1006,
// weir a closed socket), and the scenario checks that pusher-js connects
// again with a new socket id, subscribes again to all three channels, that
// weir lists Alice once in the presence channel (the cut connection gone),
// and that events triggered through the `pusher` server library and Bob's
// client events reach her again. Asserts, exits non-zero on failure; the
// last stdout line is a JSON summary. Every wait is bounded.
import Pusher from 'pusher-js';
import PusherServer from 'pusher';
import { createServer, connect } from 'node:net';
import assert from 'node:assert/strict';

const [host, port, cutsArg] = process.argv.slice(2);
const CUTS = Number(cutsArg || 2);
const STEP_MS = 10000;
const CHANNELS = ['news', 'private-inbox', 'presence-room'];
const secret = process.env.WEIR_TEST_PUSHER_SECRET;
assert.ok(secret, 'WEIR_TEST_PUSHER_SECRET is set');

const server = new PusherServer({ appId: '1', key: 'key1', secret, host, port: Number(port), useTLS: false });

/** Waits until `test()` is (or resolves to) true, polling, bounded by STEP_MS. */
async function until(what, test) {
  const deadline = Date.now() + STEP_MS;
  while (!(await test())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** A TCP relay to weir; `cut()` destroys every socket it carries. */
async function relay() {
  const sockets = new Set();
  const track = (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => {});
  };
  const listener = createServer((client) => {
    const upstream = connect(Number(port), host);
    track(client);
    track(upstream);
    client.pipe(upstream);
    upstream.pipe(client);
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise((r) => listener.listen(0, '127.0.0.1', r));
  return {
    port: listener.address().port,
    carried: () => sockets.size,
    cut: () => {
      for (const s of sockets) s.destroy();
    },
    close: () => listener.close(),
  };
}

/** A pusher-js client of app 1 as `user`, to weir through `wsPort`. */
function client(user, wsPort) {
  return new Pusher('key1', {
    cluster: '',
    wsHost: '127.0.0.1',
    wsPort,
    forceTLS: false,
    enabledTransports: ['ws'],
    disableStats: true,
    channelAuthorization: {
      customHandler: ({ socketId, channelName }, callback) => {
        const presence = channelName.startsWith('presence-')
          ? { user_id: user, user_info: { name: user } }
          : undefined;
        callback(null, server.authorizeChannel(socketId, channelName, presence));
      },
    },
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const r = await relay();
const alice = client('alice', r.port);
const bob = client('bob', Number(port));
const subscribed = Object.fromEntries(CHANNELS.map((c) => [c, 0]));
const got = [];
const states = [];
alice.connection.bind('state_change', ({ current }) => states.push(current));
for (const name of CHANNELS) {
  const channel = alice.subscribe(name);
  channel.bind('pusher:subscription_succeeded', () => (subscribed[name] += 1));
  channel.bind('pusher:subscription_error', (e) => {
    console.error(`alice: ${name}: subscription error ${JSON.stringify(e)}`);
    process.exit(1);
  });
  channel.bind('news', (d) => got.push(`${name}:${d.n}`));
  channel.bind('client-wave', (d) => got.push(`${name}:wave ${d.n}`));
}
const bobRoom = bob.subscribe('presence-room');
let bobSubscribed = false;
bobRoom.bind('pusher:subscription_succeeded', () => (bobSubscribed = true));

/** The users weir lists in presence-room, sorted. */
async function present() {
  const res = await server.get({ path: '/channels/presence-room/users' });
  return (await res.json()).users.map((u) => u.id).sort();
}

/** Round n: a trigger on each channel and a client event from Bob, all seen by Alice. */
async function round(n) {
  await server.trigger(CHANNELS, 'news', { n });
  assert.ok(bobRoom.trigger('client-wave', { n }), 'bob sent a client event');
  const want = [...CHANNELS.map((c) => `${c}:${n}`), `presence-room:wave ${n}`].sort();
  await until(`round ${n} on alice`, () => want.every((w) => got.includes(w)));
  await sleep(100); // anything doubled arrives with the rest
  const seen = got.filter((g) => g.endsWith(`:${n}`) || g.endsWith(`wave ${n}`)).sort();
  assert.deepEqual(seen, want, `round ${n}: each event once`);
}

const bounded = setTimeout(() => {
  console.error(`timed out; states ${states.join(' ')}; subscribed ${JSON.stringify(subscribed)}`);
  process.exit(1);
}, STEP_MS * (3 + 2 * CUTS));

await until('alice subscribed', () => CHANNELS.every((c) => subscribed[c] === 1));
await until('bob subscribed', () => bobSubscribed);
assert.deepEqual(await present(), ['alice', 'bob']);
await round(0);

const socketIds = [alice.connection.socket_id];
for (let cut = 1; cut <= CUTS; cut++) {
  assert.ok(r.carried() > 0, 'alice goes through the relay');
  r.cut();
  await until(`alice reconnected after cut ${cut}`, () =>
    alice.connection.state === 'connected' && !socketIds.includes(alice.connection.socket_id));
  socketIds.push(alice.connection.socket_id);
  await until(`alice resubscribed after cut ${cut}`, () => CHANNELS.every((c) => subscribed[c] === cut + 1));
  // weir dropped the cut connection: Alice is listed once, by her new one.
  await until(`alice and bob present after cut ${cut}`,
    async () => JSON.stringify(await present()) === '["alice","bob"]');
  await round(cut);
}

// Each cut took pusher-js back through `connecting` to `connected`.
assert.equal(states.filter((s) => s === 'connected').length, CUTS + 1, states.join(' '));
clearTimeout(bounded);
alice.disconnect();
bob.disconnect();
r.close();
console.log(JSON.stringify({ cuts: CUTS, socket_ids: socketIds, states, subscribed }));
process.exit(0);
