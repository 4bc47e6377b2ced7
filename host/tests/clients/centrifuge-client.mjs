// Drives weir's centrifugo route with the official `centrifuge` client
// (pinned in package.json), for host/tests/centrifugo.rs. Usage:
//   node centrifuge-client.mjs <ws url> <hmac secret> <scenario> [channel]
// Each scenario asserts and exits non-zero on failure; the last stdout
// line is a JSON summary. Every wait is bounded.
import { Centrifuge } from 'centrifuge';
import WebSocket from 'ws';
import { createHmac, createPrivateKey, generateKeyPairSync, sign } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import assert from 'node:assert/strict';

const [url, secret, scenario] = process.argv.slice(2);
const STEP_MS = 10000;

function b64url(x) {
  return Buffer.from(x).toString('base64url');
}

/** An HS256 JWT, as an application's login would sign it. */
function token(claims, key = secret) {
  const head = b64url(JSON.stringify({ alg: 'HS256', typ: 'JWT' }));
  const body = b64url(JSON.stringify(claims));
  const sig = createHmac('sha256', key).update(`${head}.${body}`).digest('base64url');
  return `${head}.${body}.${sig}`;
}

const now = () => Math.floor(Date.now() / 1000);

/** Every WebSocket a client opened, so a test can cut one. */
function trackingWebSocket(sockets) {
  return class extends WebSocket {
    constructor(address, protocols) {
      super(address, protocols);
      sockets.push(this);
    }
  };
}

function client(opts = {}, at = url) {
  const sockets = [];
  const c = new Centrifuge(at, {
    websocket: trackingWebSocket(sockets),
    minReconnectDelay: 50,
    maxReconnectDelay: 200,
    timeout: 5000,
    ...opts,
  });
  c.sockets = sockets;
  return c;
}

/** Resolves with the first `event` that `pred` accepts, or fails after STEP_MS. */
function once(emitter, event, pred = () => true, ms = STEP_MS) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out waiting for ${event}`)), ms);
    const on = (ctx) => {
      if (pred(ctx)) {
        clearTimeout(timer);
        emitter.removeListener(event, on);
        resolve(ctx);
      }
    };
    emitter.on(event, on);
  });
}

async function until(cond, what, ms = STEP_MS) {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function basics() {
  const alice = client({ token: token({ sub: 'alice', exp: now() + 600, info: { name: 'A' } }) });
  const bob = client({ token: token({ sub: 'bob', exp: now() + 600 }) });
  alice.connect();
  bob.connect();
  await Promise.all([once(alice, 'connected'), once(bob, 'connected')]);

  const subA = alice.newSubscription('chat:room', { joinLeave: true });
  const joins = [];
  const leaves = [];
  subA.on('join', (ctx) => joins.push(ctx.info));
  subA.on('leave', (ctx) => leaves.push(ctx.info));
  subA.subscribe();
  await once(subA, 'subscribed');
  const subB = bob.newSubscription('chat:room');
  const got = [];
  subB.on('publication', (ctx) => got.push(ctx));
  subB.subscribe();
  const subscribed = await once(subB, 'subscribed');
  assert.equal(subscribed.positioned, true, 'chat keeps history: positioned');
  assert.equal(subscribed.recoverable, true, 'force_recovery: recoverable');

  await subA.publish({ text: 'hi' });
  await until(() => got.length === 1, 'bob gets alice\'s publication');
  assert.deepEqual(got[0].data, { text: 'hi' });
  assert.equal(got[0].info.user, 'alice');
  assert.deepEqual(got[0].info.connInfo, { name: 'A' });
  assert.ok(got[0].offset > 0, 'publications carry offsets');

  await until(() => joins.some((i) => i.user === 'bob'), 'alice sees bob join');
  const presence = await subA.presence();
  assert.equal(Object.keys(presence.clients).length, 2);
  const stats = await subA.presenceStats();
  assert.deepEqual([stats.numClients, stats.numUsers], [2, 2]);

  const history = await subA.history({ limit: 10 });
  assert.equal(history.publications.length, got[0].offset);
  assert.deepEqual(history.publications.at(-1).data, { text: 'hi' });
  assert.equal(history.offset, got[0].offset);
  assert.ok(history.epoch.length > 0);
  const reversed = await subA.history({ limit: 1, reverse: true });
  assert.deepEqual(reversed.publications[0].data, { text: 'hi' });

  subB.unsubscribe();
  await until(() => leaves.some((i) => i.user === 'bob'), 'alice sees bob leave');
  const after = await subA.presenceStats();
  assert.equal(after.numClients, 1);

  // A namespace that does not let clients subscribe without a token.
  const denied = alice.newSubscription('private:x');
  denied.subscribe();
  const refusal = await once(denied, 'unsubscribed');
  assert.equal(refusal.code, 103, 'permission denied');
  // A client publication into a namespace that does not allow it.
  await assert.rejects(alice.publish('private:x', { no: 1 }), (e) => e.code === 103);
  // A namespace nobody configured.
  await assert.rejects(alice.publish('nowhere:x', {}), (e) => e.code === 102);
  // A publication over max_publication.
  await assert.rejects(subA.publish({ big: 'x'.repeat(5000) }), (e) => e.code === 106);

  alice.disconnect();
  bob.disconnect();
  return { publications: got.length, joins: joins.length, leaves: leaves.length };
}

async function badTokens() {
  // A token signed with another key: disconnect 3500, no reconnect.
  const forged = client({ token: token({ sub: 'eve' }, 'not-the-secret') });
  forged.connect();
  const d = await once(forged, 'disconnected');
  assert.equal(d.code, 3500, `invalid token: ${JSON.stringify(d)}`);
  // An expired token: error 109, which makes the client ask for a new one.
  let asked = 0;
  const expired = client({
    token: token({ sub: 'alice', exp: now() - 10 }),
    getToken: async () => {
      asked++;
      return token({ sub: 'alice', exp: now() + 600 });
    },
  });
  const errors = [];
  expired.on('error', (ctx) => errors.push(ctx.error.code));
  expired.connect();
  await once(expired, 'connected');
  assert.ok(errors.includes(109), `token expired: ${errors}`);
  assert.equal(asked, 1);
  expired.disconnect();
  return { forged: d.code, expired: errors };
}

async function refresh() {
  // Tokens live 2 s; the client refreshes them through getToken and stays.
  let refreshed = 0;
  const c = client({
    token: token({ sub: 'alice', exp: now() + 2 }),
    getToken: async () => {
      refreshed++;
      return token({ sub: 'alice', exp: now() + 2 });
    },
  });
  const drops = [];
  c.on('disconnected', (ctx) => drops.push(ctx.code));
  c.on('connecting', (ctx) => drops.push(ctx.code));
  c.connect();
  await once(c, 'connected');
  drops.length = 0;
  await sleep(5500);
  assert.ok(refreshed >= 2, `refreshed ${refreshed} times`);
  assert.deepEqual(drops, [], 'a refreshed connection stays');
  c.disconnect();

  // A client that never gets a new token is closed with 3005 at expiry.
  const stuck = client({
    token: token({ sub: 'bob', exp: now() + 2 }),
    getToken: () => new Promise(() => {}),
  });
  stuck.connect();
  await once(stuck, 'connected');
  const closed = await once(stuck, 'connecting', (ctx) => ctx.code === 3005, 6000);
  stuck.disconnect();
  return { refreshed, expired: closed.code };
}

/**
 * `reader` subscribes to `channel` while `writer` publishes { n } into it
 * (n = 1, 2, ...); the reader's TCP connection is cut under it (no close
 * frame) `cuts` times. Returns once every publication arrived: how many
 * were published, the n the reader saw, and its `subscribed` contexts.
 */
async function cutWhilePublishing(reader, writer, channel, cuts) {
  const sub = reader.newSubscription(channel);
  const seen = [];
  const recoveries = [];
  sub.on('publication', (ctx) => seen.push(ctx.data.n));
  sub.on('subscribed', (ctx) => recoveries.push(ctx));
  sub.subscribe();
  await once(sub, 'subscribed');
  let n = 0;
  let publishing = true;
  const writing = (async () => {
    while (publishing) {
      n++;
      await writer.publish(channel, { n });
      await sleep(5);
    }
  })();
  for (let cut = 0; cut < cuts; cut++) {
    await sleep(150);
    const before = recoveries.length;
    reader.sockets.at(-1)._socket.destroy();
    await until(() => recoveries.length > before, `resubscribe after cut ${cut}`);
  }
  await sleep(100);
  publishing = false;
  await writing;
  await until(() => seen.length >= n, `all ${n} publications (have ${seen.length})`);
  await sleep(200);
  return { n, seen, recoveries };
}

async function recovery() {
  const reader = client({ token: token({ sub: 'reader' }) });
  const writer = client({ token: token({ sub: 'writer' }) });
  reader.connect();
  writer.connect();
  await Promise.all([once(reader, 'connected'), once(writer, 'connected')]);
  const CUTS = 6;
  const { n, seen, recoveries } = await cutWhilePublishing(reader, writer, 'chat:recover', CUTS);
  const expected = Array.from({ length: n }, (_, i) => i + 1);
  assert.deepEqual(seen, expected, 'every publication once, in order');
  const resubscribes = recoveries.slice(1);
  assert.equal(resubscribes.length, CUTS);
  for (const r of resubscribes) {
    assert.equal(r.wasRecovering, true);
    assert.equal(r.recovered, true, `recovered: ${JSON.stringify(r)}`);
  }
  reader.disconnect();
  writer.disconnect();
  return { published: n, received: seen.length, cuts: CUTS };
}

async function tooOld() {
  // `tiny` keeps 2 publications: a reader that misses 5 is told it did not recover.
  const channel = 'tiny:x';
  const reader = client({
    token: token({ sub: 'reader' }),
    minReconnectDelay: 1500,
    maxReconnectDelay: 1500,
  });
  const writer = client({ token: token({ sub: 'writer' }) });
  reader.connect();
  writer.connect();
  await Promise.all([once(reader, 'connected'), once(writer, 'connected')]);
  const sub = reader.newSubscription(channel);
  const contexts = [];
  sub.on('subscribed', (ctx) => contexts.push(ctx));
  sub.subscribe();
  await once(sub, 'subscribed');
  await writer.publish(channel, { n: 1 });
  await sleep(100);
  reader.sockets.at(-1)._socket.destroy();
  await sleep(100);
  for (let i = 2; i <= 6; i++) await writer.publish(channel, { n: i });
  await until(() => contexts.length === 2, 'resubscribed');
  const again = contexts[1];
  assert.equal(again.wasRecovering, true);
  assert.equal(again.recovered, false, 'publications 2..4 are gone');
  assert.equal(again.streamPosition.offset, 6);
  reader.disconnect();
  writer.disconnect();
  return { recovered: again.recovered, offset: again.streamPosition.offset };
}

async function listen() {
  // For the server API test: subscribed, says "ready", then expects the
  // three publications cent_client.py makes (data n = 1, 2, 3).
  const c = client({ token: token({ sub: 'listener' }) });
  c.connect();
  await once(c, 'connected');
  const sub = c.newSubscription(process.argv[5]);
  const got = [];
  sub.on('publication', (ctx) => got.push(ctx.data.n));
  sub.subscribe();
  await once(sub, 'subscribed');
  console.log('ready');
  await until(() => got.length >= 3, `3 API publications (have ${got})`, 30000);
  await sleep(200);
  assert.deepEqual(got, [1, 2, 3]);
  c.disconnect();
  return { received: got };
}

/** Lines from the test on stdin, one per `await nextLine()`. */
const lines = [];
let lineWaiter = null;
let stdinBuffer = '';
process.stdin.on('data', (chunk) => {
  stdinBuffer += chunk;
  let at;
  while ((at = stdinBuffer.indexOf('\n')) >= 0) {
    lines.push(stdinBuffer.slice(0, at));
    stdinBuffer = stdinBuffer.slice(at + 1);
  }
  if (lineWaiter && lines.length) lineWaiter();
});
async function nextLine(ms = 40000) {
  if (!lines.length) {
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no line from the test')), ms);
      lineWaiter = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }
  return lines.shift();
}

/** POSTs one server API call to `api` (`http://host:port/api`). */
async function apiCall(api, key, method, params) {
  const res = await fetch(`${api}/${method}`, {
    method: 'POST',
    headers: { 'X-API-Key': key, 'Content-Type': 'application/json' },
    body: JSON.stringify(params),
  });
  assert.equal(res.status, 200, `${method}: HTTP ${res.status}`);
  return res.json();
}

async function across() {
  // Two nodes on one Redis: `url` is node A's, argv[5..] node B's
  // WebSocket URL, its API URL and key.
  const [urlB, apiB, apiKey] = process.argv.slice(5);
  const channel = 'chat:across';
  const ann = client({ token: token({ sub: 'ann' }) });
  const ben = client({ token: token({ sub: 'ben' }) }, urlB);
  ann.connect();
  ben.connect();
  await Promise.all([once(ann, 'connected'), once(ben, 'connected')]);
  const subA = ann.newSubscription(channel, { joinLeave: true });
  const onA = [];
  const joins = [];
  subA.on('publication', (ctx) => onA.push(ctx));
  subA.on('join', (ctx) => joins.push(ctx.info.user));
  subA.subscribe();
  await once(subA, 'subscribed');
  const subB = ben.newSubscription(channel);
  subB.subscribe();
  await once(subB, 'subscribed');
  await until(() => joins.includes('ben'), 'ann (node A) sees ben (node B) join');

  // A client publication on B and an API publication through B reach A,
  // with the offsets Redis gave them.
  await subB.publish({ n: 1 });
  const api = await apiCall(apiB, apiKey, 'publish', { channel, data: { n: 2 } });
  assert.equal(api.result.offset, 2, JSON.stringify(api));
  await until(() => onA.length === 2, 'two publications on A');
  assert.deepEqual(onA.map((p) => [p.data.n, p.offset]), [[1, 1], [2, 2]]);
  assert.equal(onA[0].info.user, 'ben');

  // Presence and history are the cluster's, whichever node answers.
  const presence = await subA.presence();
  assert.deepEqual(
    Object.values(presence.clients).map((c) => c.user).sort(),
    ['ann', 'ben'],
  );
  const stats = await subB.presenceStats();
  assert.deepEqual([stats.numClients, stats.numUsers], [2, 2]);
  const history = await subA.history({ limit: 10 });
  assert.deepEqual(history.publications.map((p) => p.data.n), [1, 2]);
  assert.equal(history.epoch, api.result.epoch);
  const onBPresence = await apiCall(apiB, apiKey, 'presence', { channel });
  assert.equal(Object.keys(onBPresence.result.presence).length, 2);

  // Recovery across nodes: ben publishes on B while ann's socket on A is
  // cut, again and again; ann gets each publication once, in order.
  const CUTS = 5;
  const { n, seen, recoveries } = await cutWhilePublishing(ann, ben, 'chat:across-recover', CUTS);
  assert.deepEqual(seen, Array.from({ length: n }, (_, i) => i + 1), 'once each, in order');
  for (const r of recoveries.slice(1)) {
    assert.equal(r.recovered, true, `recovered: ${JSON.stringify(r)}`);
  }
  ann.disconnect();
  ben.disconnect();
  return { published: n, received: seen.length, cuts: CUTS };
}

async function hold() {
  // Subscribes to argv[5] with presence, says "ready", and stays until
  // its connection is gone (the test kills its node).
  const c = client({ token: token({ sub: 'held' }), minReconnectDelay: 60000 });
  c.connect();
  await once(c, 'connected');
  const sub = c.newSubscription(process.argv[5]);
  sub.subscribe();
  await once(sub, 'subscribed');
  console.log('ready');
  await once(c, 'connecting', () => true, 50000);
  c.disconnect();
  return { held: true };
}

async function guestPeer() {
  // For host/tests/guest_realtime.rs: a centrifuge client beside a guest
  // route with realtime = true. Subscribed to argv[5] (with presence, user
  // "peer", connection info {"role":"peer"}), says "ready"; on the line
  // "publish" publishes {"from":"centrifuge"}; on "done" reports every
  // publication it received with its offset.
  const c = client({ token: token({ sub: 'peer', info: { role: 'peer' } }) });
  c.connect();
  await once(c, 'connected');
  const sub = c.newSubscription(process.argv[5]);
  const got = [];
  sub.on('publication', (ctx) => got.push({ from: ctx.data.from, offset: ctx.offset }));
  sub.subscribe();
  await once(sub, 'subscribed');
  console.log('ready');
  for (;;) {
    const line = await nextLine();
    if (line === 'publish') {
      await sub.publish({ from: 'centrifuge' });
      console.log('published');
    } else if (line === 'done') {
      break;
    }
  }
  c.disconnect();
  return { received: got };
}

async function restart() {
  // Redis restarts (the test does it between two lines): the channel's
  // history is gone and its epoch new, and the subscriber on A is told
  // it could not recover. argv[5..]: node B's URL.
  const [urlB] = process.argv.slice(5);
  const channel = 'chat:restart';
  const reader = client({ token: token({ sub: 'reader' }) });
  const writer = client({ token: token({ sub: 'writer' }) }, urlB);
  reader.connect();
  writer.connect();
  await Promise.all([once(reader, 'connected'), once(writer, 'connected')]);
  const sub = reader.newSubscription(channel);
  const contexts = [];
  const seen = [];
  sub.on('subscribed', (ctx) => contexts.push(ctx));
  sub.on('publication', (ctx) => seen.push(ctx.data.n));
  sub.subscribe();
  await once(sub, 'subscribed');
  for (let i = 1; i <= 3; i++) await writer.publish(channel, { n: i });
  await until(() => seen.length === 3, 'three publications before the restart');
  const before = contexts[0].streamPosition.epoch;
  console.log('restart-redis');
  await nextLine();
  // Publish until Redis answers again (code 100 meanwhile).
  let failures = 0;
  for (;;) {
    try {
      await writer.publish(channel, { n: 4 });
      break;
    } catch (e) {
      assert.equal(e.code, 100, `while Redis restarts: ${JSON.stringify(e)}`);
      failures++;
      await sleep(200);
    }
  }
  await until(() => contexts.length >= 2, 'resubscribed after the epoch changed', 20000);
  const again = contexts.at(-1);
  assert.equal(again.wasRecovering, true);
  assert.equal(again.recovered, false, `told it could not recover: ${JSON.stringify(again)}`);
  assert.notEqual(again.streamPosition.epoch, before, 'a new epoch');
  reader.disconnect();
  writer.disconnect();
  return { failures, recovered: again.recovered };
}

async function oversized() {
  // A publish whose command is over the route's max_command (64 KiB):
  // the server closes with 1009, the client reports messageSizeLimit (3)
  // and stays disconnected.
  const c = client({ token: token({ sub: 'big' }) });
  c.connect();
  await once(c, 'connected');
  const disconnected = once(c, 'disconnected');
  c.publish('chat:big', { x: 'x'.repeat(70 * 1024) }).catch(() => {});
  const d = await disconnected;
  let reconnected = false;
  c.on('connecting', () => (reconnected = true));
  await sleep(1000);
  assert.equal(reconnected, false, 'no reconnect after a message size disconnect');
  return { code: d.code, reason: d.reason, state: c.state };
}

/** A JWT signed with a public-key algorithm (RS256, ES256) and `kid`. */
function signedToken(claims, alg, kid, privatePem) {
  const head = b64url(JSON.stringify({ alg, typ: 'JWT', kid }));
  const body = b64url(JSON.stringify(claims));
  const key = createPrivateKey(privatePem);
  const options = alg.startsWith('ES') ? { key, dsaEncoding: 'ieee-p1363' } : key;
  const sig = sign('sha256', Buffer.from(`${head}.${body}`), options).toString('base64url');
  return `${head}.${body}.${sig}`;
}

/** Makes keys k1 (RSA), k2 (EC P-256), k3 (RSA) in argv[3]'s directory
 * (private `k1.pem`, public `k1.pub.pem`, …), and jwks.json with the public
 * halves of k1 and k2. */
function makeKeys(dir) {
  const pairs = {
    k1: generateKeyPairSync('rsa', { modulusLength: 2048 }),
    k2: generateKeyPairSync('ec', { namedCurve: 'P-256' }),
    k3: generateKeyPairSync('rsa', { modulusLength: 2048 }),
  };
  const jwk = {};
  for (const [kid, pair] of Object.entries(pairs)) {
    writeFileSync(`${dir}/${kid}.pem`, pair.privateKey.export({ type: 'pkcs8', format: 'pem' }));
    writeFileSync(`${dir}/${kid}.pub.pem`, pair.publicKey.export({ type: 'spki', format: 'pem' }));
    const alg = kid === 'k2' ? 'ES256' : 'RS256';
    jwk[kid] = { ...pair.publicKey.export({ format: 'jwk' }), kid, alg, use: 'sig' };
  }
  writeFileSync(`${dir}/jwks.json`, JSON.stringify({ keys: [jwk.k1, jwk.k2] }));
  writeFileSync(`${dir}/jwks-rotated.json`, JSON.stringify({ keys: [jwk.k2, jwk.k3] }));
}

/** Connects with `tok`: 'connected', or the disconnect code. */
async function tryConnect(tok) {
  const c = client({ token: tok });
  const outcome = Promise.race([
    once(c, 'connected').then(() => 'connected'),
    once(c, 'disconnected').then((d) => d.code),
  ]);
  c.connect();
  const got = await outcome;
  c.disconnect();
  return got;
}

async function jwks() {
  // argv[5]: the keys' directory; argv[6]: "before" or "after" the test
  // rotated jwks.json (k1, k2 -> k2, k3) and reloaded the gateway, or (the
  // PEM test) "after" it replaced k1's public key by k3's, then "ec" by
  // k2's.
  const [dir, phase] = process.argv.slice(5);
  const key = (kid) => readFileSync(`${dir}/${kid}.pem`);
  const claims = (user) => ({ sub: user, exp: now() + 600 });
  const tries = async () => ({
    k1: await tryConnect(signedToken(claims('rsa'), 'RS256', 'k1', key('k1'))),
    k2: await tryConnect(signedToken(claims('ec'), 'ES256', 'k2', key('k2'))),
    k3: await tryConnect(signedToken(claims('other'), 'RS256', 'k3', key('k3'))),
    // A token that claims k2's kid with k1's RSA signature.
    swapped: await tryConnect(signedToken(claims('x'), 'RS256', 'k2', key('k1'))),
    hmac: await tryConnect(token(claims('hmac'))),
  });
  let got = await tries();
  if (phase === 'after' || phase === 'ec') {
    // The reload is asynchronous to this client: retry until it shows.
    const added = phase === 'after' ? 'k3' : 'k2';
    const end = Date.now() + STEP_MS;
    while (got[added] !== 'connected' && Date.now() < end) {
      await sleep(200);
      got = await tries();
    }
  }
  return got;
}

/** One server API call through `cent` (cent_call.py): its result. */
function cent(apiUrl, apiKey, method, params) {
  const out = execFileSync(
    '.venv/bin/python',
    ['cent_call.py', apiUrl, apiKey, method, JSON.stringify(params)],
    { timeout: STEP_MS, encoding: 'utf8' },
  );
  return JSON.parse(out.trim().split('\n').pop());
}

async function userCommands() {
  // argv[5], argv[6]: the server API's URL (of this node or another one)
  // and its key. The API subscribes a connected user to a channel (a
  // server-side subscription), publishes into it, unsubscribes the user
  // from it and from a channel the client subscribed itself, then
  // disconnects the user.
  const [apiUrl, apiKey] = process.argv.slice(5);
  const user = `pushed-${process.pid}`;
  const c = client({ token: token({ sub: user, exp: now() + 600 }) });
  const own = c.newSubscription('chat:own');
  const ownSubscribed = once(own, 'subscribed');
  c.connect();
  own.subscribe();
  await ownSubscribed;

  const serverSubscribed = once(c, 'subscribed', (ctx) => ctx.channel === 'chat:pushed');
  assert.deepEqual(cent(apiUrl, apiKey, 'subscribe', { user, channel: 'chat:pushed' }), {});
  const sub = await serverSubscribed;
  const published = once(c, 'publication', (ctx) => ctx.channel === 'chat:pushed');
  cent(apiUrl, apiKey, 'publish', { channel: 'chat:pushed', data: { n: 1 } });
  const pub = await published;
  assert.equal(pub.data.n, 1);
  assert.ok(pub.offset >= 1, 'a positioned publication');

  const ownGone = once(own, 'unsubscribed');
  cent(apiUrl, apiKey, 'unsubscribe', { user, channel: 'chat:own' });
  const gone = await ownGone;
  const serverGone = once(c, 'unsubscribed', (ctx) => ctx.channel === 'chat:pushed');
  cent(apiUrl, apiKey, 'unsubscribe', { user, channel: 'chat:pushed' });
  await serverGone;
  // Unsubscribed: a publication no longer reaches it.
  let late = 0;
  c.on('publication', () => late++);
  cent(apiUrl, apiKey, 'publish', { channel: 'chat:pushed', data: { n: 2 } });
  await sleep(300);
  const unknown = cent(apiUrl, apiKey, 'subscribe', { user, channel: 'nowhere:x' });

  const disconnected = once(c, 'disconnected');
  cent(apiUrl, apiKey, 'disconnect', { user });
  const d = await disconnected;
  assert.equal(late, 0, 'a publication after the unsubscribe arrived');
  c.disconnect();
  return {
    serverSubscribed: sub.channel,
    positioned: sub.positioned === true,
    publication: pub.data.n,
    ownUnsubscribed: gone.code,
    unknownNamespace: unknown.error,
    disconnected: d.code,
  };
}

async function subRefresh() {
  // A subscription token that lives 2 s, renewed through the
  // subscription's getToken (the client's sub_refresh): the subscription
  // stays for 5 s without a resubscribe.
  const user = 'subref';
  const c = client({ token: token({ sub: user, exp: now() + 600 }) });
  let tokens = 0;
  const sub = c.newSubscription('private:room', {
    getToken: async () => {
      tokens++;
      return token({ sub: user, channel: 'private:room', exp: now() + 2 });
    },
  });
  const subscribed = once(sub, 'subscribed');
  c.connect();
  sub.subscribe();
  await subscribed;
  const changes = [];
  sub.on('subscribing', (ctx) => changes.push(`subscribing ${ctx.code}`));
  sub.on('unsubscribed', (ctx) => changes.push(`unsubscribed ${ctx.code}`));
  c.on('connecting', (ctx) => changes.push(`connecting ${ctx.code} ${ctx.reason}`));
  await sleep(5000);
  const seen = { tokens, changes: [...changes], state: sub.state };
  c.disconnect();
  return seen;
}

/**
 * The code a subscribe ends with: the refusal that unsubscribes it, or the
 * error of a subscribe the client would retry; the subscription is removed
 * either way.
 */
async function subscribeError(c, channel) {
  const sub = c.newSubscription(channel);
  const ended = new Promise((resolve) => {
    sub.on('unsubscribed', (ctx) => resolve(ctx.code));
    sub.on('error', (ctx) => resolve(ctx.error.code));
    sub.on('subscribed', () => resolve('subscribed'));
  });
  sub.subscribe();
  const code = await Promise.race([ended, sleep(STEP_MS).then(() => 'timed out')]);
  sub.unsubscribe();
  c.removeSubscription(sub);
  return code;
}

/**
 * Namespaces with a guest (host/tests/rt_hooks.rs): `chat` runs the
 * moderate example (secret channels refused 103, vip ones 4403; "darn"
 * rewritten, "spam" dropped with 103, "!broken" replaced by non-JSON),
 * `faulty` the faulty fixture (trap and loop on demand, 300 ms deadline).
 * A server API publication is not filtered. The connections never drop.
 */
async function hooks() {
  const [api, apiKey] = process.argv.slice(5);
  const alice = client({ token: token({ sub: 'alice', exp: now() + 600, info: { name: 'A' } }) });
  const bob = client({ token: token({ sub: 'bob', exp: now() + 600 }) });
  alice.connect();
  bob.connect();
  await Promise.all([once(alice, 'connected'), once(bob, 'connected')]);

  const refused = await subscribeError(alice, 'chat:secret-plans');
  assert.equal(refused, 103, 'the guest refuses chat:secret*');
  const vip = await subscribeError(alice, 'chat:vip-lounge');
  assert.equal(vip, 4403, 'the guest picks its own code');

  const subA = alice.newSubscription('chat:room');
  subA.subscribe();
  await once(subA, 'subscribed');
  const subB = bob.newSubscription('chat:room');
  const got = [];
  subB.on('publication', (ctx) => got.push(ctx.data));
  subB.subscribe();
  await once(subB, 'subscribed');

  await subA.publish({ text: 'oh darn' });
  await assert.rejects(subA.publish({ text: 'buy spam' }), (e) => e.code === 103);
  await assert.rejects(subA.publish({ text: '!broken' }), (e) => e.code === 100);
  await subA.publish({ text: 'after' });
  const viaApi = await apiCall(api, apiKey, 'publish', {
    channel: 'chat:room',
    data: { text: 'api spam' },
  });
  assert.ok(!viaApi.error, JSON.stringify(viaApi));
  await until(() => got.length === 3, 'bob gets what the guest passed, and the API publication');
  await sleep(200);
  assert.deepEqual(got, [{ text: 'oh d**n' }, { text: 'after' }, { text: 'api spam' }]);
  const history = await subA.history({ limit: 10 });
  const kept = history.publications.map((p) => p.data);
  assert.deepEqual(kept, got, 'history holds what was published, rewritten');

  // A guest that traps or runs past its deadline: error 100, and the
  // connection carries on.
  const trap = await subscribeError(alice, 'faulty:trap');
  assert.equal(trap, 100, 'a trapping guest refuses with 100');
  const loop = await subscribeError(alice, 'faulty:loop');
  assert.equal(loop, 100, 'a guest past its deadline refuses with 100');
  const fine = alice.newSubscription('faulty:ok');
  const fineGot = [];
  fine.on('publication', (ctx) => fineGot.push(ctx.data));
  fine.subscribe();
  await once(fine, 'subscribed');
  await assert.rejects(fine.publish({ text: 'trap' }), (e) => e.code === 100);
  await assert.rejects(fine.publish({ text: 'loop' }), (e) => e.code === 100);
  await fine.publish({ text: 'ok' });
  await until(() => fineGot.length === 1, 'the publication after the faults arrives');
  assert.deepEqual(fineGot, [{ text: 'ok' }]);
  assert.equal(alice.state, 'connected');
  const sockets = alice.sockets.length;
  assert.equal(sockets, 1, 'the connection was never dropped');

  alice.disconnect();
  bob.disconnect();
  return { received: got, refused, vip, trap, loop, sockets };
}

const scenarios = {
  subRefresh,
  userCommands,
  hooks,
  basics,
  jwks,
  badTokens,
  refresh,
  recovery,
  tooOld,
  listen,
  oversized,
  across,
  hold,
  restart,
  guestPeer,
};
if (scenario === 'keys') {
  makeKeys(process.argv[5]);
  process.exit(0);
}
const run = scenarios[scenario];
if (!run) {
  console.error(`unknown scenario ${scenario}`);
  process.exit(2);
}
const guard = setTimeout(() => {
  console.error(`${scenario}: over 60 s`);
  process.exit(3);
}, 60000);
try {
  const summary = await run();
  clearTimeout(guard);
  console.log(JSON.stringify({ scenario, ...summary }));
  process.exit(0);
} catch (e) {
  console.error(`${scenario}: ${e.stack || e}`);
  process.exit(1);
}
