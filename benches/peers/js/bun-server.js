// Bun.serve peer: /echo replies with each message, /relay forwards to the
// paired connection (arrival order) and closes the partner with 1001 when one
// side leaves; /topic/NAME subscribes to NAME and publishes each message to
// the topic's other subscribers (ws.publish leaves the sender out, like
// weir's default). permessage-deflate when a client offers it (see below),
// 64 MiB max payload and backpressure limit.
// With TLS_CERT and TLS_KEY (PEM files) in the environment it serves wss://
// (run.sh's `bun-tls`).
const tls = process.env.TLS_CERT && process.env.TLS_KEY
  ? { cert: Bun.file(process.env.TLS_CERT), key: Bun.file(process.env.TLS_KEY) }
  : undefined;
const port = Number(process.argv[2] || process.env.PORT || 9001);
let waiting = null;

// permessage-deflate on /zecho and /zpub/NAME (a /topic/NAME whose
// publishes are compressed; benches/compare.sh's deflate scenarios):
// a second server on port + 1 would change the harness, so the same
// server negotiates it on every path; weir-load's other modes offer no
// extension, so /echo stays uncompressed for them.
Bun.serve({
  hostname: '127.0.0.1',
  port,
  tls,
  fetch(req, server) {
    const path = new URL(req.url).pathname;
    const zpub = path.startsWith('/zpub/');
    const topic = path.startsWith('/topic/') ? path.slice('/topic/'.length)
      : zpub ? path.slice('/zpub/'.length) : null;
    if (path !== '/echo' && path !== '/zecho' && path !== '/relay' && !topic) return new Response('not found', { status: 404 });
    if (server.upgrade(req, { data: { path, topic, zpub, partner: null, closed: false } })) return undefined;
    return new Response('upgrade required', { status: 426 });
  },
  websocket: {
    perMessageDeflate: true,
    // IDLE_TIMEOUT (seconds; compare.sh's heartbeat scenario): ping
    // connections silent that long. Bun's default is 120 s.
    idleTimeout: Number(process.env.IDLE_TIMEOUT || 120),
    sendPings: true,
    maxPayloadLength: 64 << 20,
    backpressureLimit: 64 << 20,
    publishToSelf: false,
    open(ws) {
      if (ws.data.topic) { ws.subscribe(ws.data.topic); return; }
      if (ws.data.path !== '/relay') return;
      if (waiting && !waiting.data.closed) {
        ws.data.partner = waiting;
        waiting.data.partner = ws;
        waiting = null;
      } else {
        waiting = ws;
      }
    },
    message(ws, msg) {
      if (ws.data.topic) ws.publish(ws.data.topic, msg, ws.data.zpub);
      else if (ws.data.path === '/echo') ws.send(msg);
      else if (ws.data.path === '/zecho') ws.send(msg, true);
      else if (ws.data.partner) ws.data.partner.send(msg);
    },
    close(ws) {
      ws.data.closed = true;
      if (waiting === ws) waiting = null;
      const p = ws.data.partner;
      if (p && !p.data.closed) p.close(1001);
    },
  },
});
console.log(`Bun peer listening on 127.0.0.1:${port}${tls ? ' (TLS)' : ''}`);
