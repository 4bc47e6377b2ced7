// Drives two weir nodes' pusher routes (one cluster on Redis) with the
// real `pusher-js` client and the real `pusher` server library, for
// host/tests/pusher_cluster.rs. Usage:
//   node pusher-cluster.mjs <host> <port A> <port B> <scenario>
// The app is the test's: id "1", key "key1", secret "secret1", client
// events and user authentication on. Subscriptions and signins are signed
// here with the library's `authorizeChannel` / `authenticateUser`. Each
// scenario asserts and exits non-zero on failure; the last stdout line is
// a JSON summary. Every wait is bounded.
import Pusher from 'pusher-js';
import PusherServer from 'pusher';
import assert from 'node:assert/strict';

const [host, portA, portB, scenario] = process.argv.slice(2);
const A = Number(portA);
const B = Number(portB);
const STEP_MS = 10000;
const APP = { appId: '1', key: 'key1', secret: 'secret1' };

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The app server's library, pointed at one node's HTTP API. */
function server(port) {
  return new PusherServer({ ...APP, host, port, useTLS: false });
}

/** A pusher-js client on the node at `port`, signed in as `user`. */
function client(port, user = 'anon') {
  const signer = server(port);
  return new Pusher(APP.key, {
    cluster: 'mt1',
    wsHost: host,
    wsPort: port,
    forceTLS: false,
    enabledTransports: ['ws'],
    disableStats: true,
    channelAuthorization: {
      customHandler: ({ socketId, channelName }, callback) => {
        const presence = channelName.startsWith('presence-')
          ? { user_id: user, user_info: { name: user.toUpperCase() } }
          : undefined;
        callback(null, signer.authorizeChannel(socketId, channelName, presence));
      },
    },
    userAuthentication: {
      customHandler: ({ socketId }, callback) => {
        callback(null, signer.authenticateUser(socketId, { id: user }));
      },
    },
  });
}

/** Resolves with the first `event` that `pred` accepts, or fails after `ms`. */
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

async function until(cond, what, ms = STEP_MS) {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await sleep(50);
  }
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

/** GET `path` of the HTTP API on the node at `port`, as JSON. */
async function query(port, path, params = {}) {
  const res = await server(port).get({ path, params });
  assert.equal(res.status, 200, `${path} on ${port}`);
  return res.json();
}

/** A trigger through node B's API reaches a subscriber on node A; a
 * client event from node B reaches node A's subscriber. */
async function events() {
  const a = client(A);
  const b = client(B);
  const got = collect(await subscribed(a, 'news'), 'ev');
  await server(B).trigger('news', 'ev', { n: 1 });
  await until(() => got.length === 1, 'the event triggered through B on A');
  assert.deepEqual(got, [{ n: 1 }]);
  const chatA = await subscribed(a, 'private-chat');
  const typing = collect(chatA, 'client-typing');
  const chatB = await subscribed(b, 'private-chat');
  chatB.trigger('client-typing', { who: 'b' });
  await until(() => typing.length === 1, "B's client event on A");
  a.disconnect();
  b.disconnect();
  return { events: got.length, client_events: typing.length };
}

/** Presence members across nodes as pusher-js sees them: a member on B is
 * listed on A and announced there once per user, and removed only when
 * the user's last connection, on any node, leaves. */
async function presence() {
  const alice = client(A, 'alice');
  const chA = await subscribed(alice, 'presence-room');
  const added = collect(chA, 'pusher:member_added');
  const removed = collect(chA, 'pusher:member_removed');
  const bob = client(B, 'bob');
  const chB = await subscribed(bob, 'presence-room');
  const members = chB.members.count;
  assert.equal(members, 2, 'bob on B sees alice on A');
  assert.deepEqual(chB.members.get('alice').info, { name: 'ALICE' });
  await until(() => added.length === 1, "bob's member_added on A");
  assert.equal(added[0].id, 'bob');
  assert.equal(chA.members.count, 2);
  // Bob again, on A: already a member (through B), so no new member_added.
  const bob2 = client(A, 'bob');
  await subscribed(bob2, 'presence-room');
  for (const port of [A, B]) {
    const users = await query(port, '/channels/presence-room/users');
    assert.deepEqual(users.users.map((u) => u.id).sort(), ['alice', 'bob'], `users on ${port}`);
    const info = await query(port, '/channels/presence-room', { info: 'user_count,subscription_count' });
    assert.equal(info.user_count, 2, `user_count on ${port}`);
    assert.equal(info.subscription_count, 3, `subscription_count on ${port}`);
  }
  bob.disconnect();
  await sleep(700);
  assert.equal(removed.length, 0, 'bob left B but is still on A');
  assert.equal(added.length, 1, 'one member_added per user');
  bob2.disconnect();
  await until(() => removed.length === 1, "bob's member_removed on A");
  assert.equal(removed[0].id, 'bob');
  // A answers joins from its copy of the members, which follows B: bea,
  // who joined on B, is in a new member's list on A; bob, gone from both
  // nodes, is not.
  const bea = client(B, 'bea');
  await subscribed(bea, 'presence-room');
  await until(() => added.length === 2, "bea's member_added on A");
  const carol = client(A, 'carol');
  const chC = await subscribed(carol, 'presence-room');
  const listed = [];
  chC.members.each((m) => listed.push(m.id));
  assert.deepEqual(listed.sort(), ['alice', 'bea', 'carol'], "carol's list on A");
  const out = { members, added: added.length, removed: removed.length };
  for (const c of [alice, bea, carol]) c.disconnect();
  return out;
}

/** Channel queries from either node count both; a channel stays occupied
 * while a subscriber remains on any node, and is vacated after the last
 * one anywhere leaves. */
async function occupancy() {
  const a = client(A);
  const b = client(B);
  await subscribed(a, 'room');
  await subscribed(b, 'room');
  const counted = async (port, n) => {
    const one = await query(port, '/channels/room', { info: 'subscription_count' });
    const list = await query(port, '/channels', { filter_by_prefix: 'ro', info: 'subscription_count' });
    const listed = list.channels.room?.subscription_count ?? 0;
    return one.occupied === n > 0 && (one.subscription_count ?? 0) === n && listed === n;
  };
  for (const port of [A, B]) {
    assert.ok(await counted(port, 2), `both nodes' subscribers counted on ${port}`);
  }
  a.unsubscribe('room');
  await until(async () => (await counted(A, 1)) && (await counted(B, 1)), 'one left, on B');
  const stillA = await query(A, '/channels/room');
  assert.equal(stillA.occupied, true, 'occupied while B has a subscriber');
  b.disconnect();
  await until(async () => (await counted(A, 0)) && (await counted(B, 0)), 'vacated everywhere');
  const list = await query(B, '/channels');
  assert.deepEqual(Object.keys(list.channels), [], 'nothing listed once vacated');
  a.disconnect();
  return { occupied_while_one_left: stillA.occupied, vacated: true };
}

/** A message to the user and terminate_connections through node B reach
 * the user's connection on node A. */
async function terminate() {
  const p = client(A, 'carol');
  if (p.connection.state !== 'connected') await once(p.connection, 'connected');
  p.signin();
  await until(() => p.user.serverToUserChannel?.subscribed, 'the user channel');
  const note = once(p.user, 'note');
  await server(B).sendToUser('carol', 'note', { hi: 'carol' });
  assert.deepEqual(await note, { hi: 'carol' });
  const gone = once(p.connection, 'state_change', (s) => s.current === 'disconnected' || s.current === 'failed');
  const res = await server(B).terminateUserConnections('carol');
  assert.equal(res.status, 200);
  await gone;
  await sleep(300);
  assert.notEqual(p.connection.state, 'connected', 'reconnected after termination');
  return { terminated: true };
}

/** A cache channel's event triggered through node A is replayed to a
 * subscriber on node B. */
async function cache() {
  const a = client(A);
  const chA = a.subscribe('cache-prices');
  await once(chA, 'pusher:cache_miss');
  const seen = once(chA, 'price');
  await server(A).trigger('cache-prices', 'price', { eur: 2 });
  await seen;
  const b = client(B);
  const replay = await once(b.subscribe('cache-prices'), 'price');
  assert.deepEqual(replay, { eur: 2 });
  a.disconnect();
  b.disconnect();
  return { replayed: replay.eur };
}

/** Node A's API counts `room` (subscribed on node B by the test). */
async function occupied() {
  const one = await query(A, '/channels/room', { info: 'subscription_count' });
  assert.equal(one.occupied, true);
  return { occupied: one.occupied, subscription_count: one.subscription_count };
}

/** Node B was killed with a subscriber of `room`: node A's API stops
 * counting it once B's lease ends (30 s after its last renewal). */
async function vacated() {
  const start = Date.now();
  await until(async () => !(await query(A, '/channels/room')).occupied, 'the lease of the killed node', 45000);
  const list = await query(A, '/channels');
  assert.deepEqual(Object.keys(list.channels), []);
  return { vacated: true, after_ms: Date.now() - start };
}

async function all() {
  const out = {};
  for (const [name, run] of Object.entries(scenarios)) {
    if (!['all', 'occupied', 'vacated'].includes(name)) out[name] = await run();
  }
  return out;
}

const scenarios = { events, presence, occupancy, terminate, cache, all, occupied, vacated };

const timer = setTimeout(() => {
  console.error('scenario timed out');
  process.exit(2);
}, 120000);
try {
  const out = await scenarios[scenario]();
  console.log(JSON.stringify(out));
} catch (e) {
  console.error(e);
  process.exitCode = 1;
} finally {
  clearTimeout(timer);
  // pusher-js keeps timers for reconnects; the scenario is over.
  setTimeout(() => process.exit(process.exitCode ?? 0), 50);
}
