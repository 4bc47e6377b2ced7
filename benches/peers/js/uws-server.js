// uWebSockets.js peer on Node (the patched addon installed by install.sh):
// /echo replies with each message, /relay forwards to the paired connection
// and ends the partner with 1001 when one side leaves, /topic/NAME
// subscribes to NAME and publishes each message to the topic's other
// subscribers (ws.publish leaves the sender out, like weir's default). Compression off,
// 64 MiB max payload and backpressure limit (so large pipelined echoes are
// never dropped). With TLS_CERT and TLS_KEY (PEM files) in the environment it
// serves wss:// through uWS.SSLApp instead (run.sh's `uws-tls`).
'use strict';
const path = require('path');
const uWS = require(path.join(__dirname, '..', 'uws', `uws_linux_x64_${process.versions.modules}.node`));

const port = Number(process.argv[2] || process.env.PORT || 9001);
const common = {
  compression: uWS.DISABLED,
  maxPayloadLength: 64 << 20,
  maxBackpressure: 64 << 20,
  // IDLE_TIMEOUT (seconds, >= 8; compare.sh's heartbeat scenario): ping
  // connections silent that long, close them if they stay silent.
  idleTimeout: Number(process.env.IDLE_TIMEOUT || 0),
  sendPingsAutomatically: true,
};
let waiting = null;
const tls = process.env.TLS_CERT && process.env.TLS_KEY;
const app = tls
  ? uWS.SSLApp({ cert_file_name: process.env.TLS_CERT, key_file_name: process.env.TLS_KEY })
  : uWS.App();

// permessage-deflate (benches/compare.sh's deflate scenarios): /zecho
// with the shared compressor (no context kept between messages), and
// /zecho-dedicated with a compressor and decompressor per connection
// (context takeover). ws.send compresses when the connection negotiated it.
const compressed = (compression) => ({
  ...common,
  compression,
  message: (ws, msg, isBinary) => { ws.send(msg, isBinary, true); },
});

app
  .ws('/echo', {
    ...common,
    message: (ws, msg, isBinary) => { ws.send(msg, isBinary); },
  })
  .ws('/zecho', compressed(uWS.SHARED_COMPRESSOR))
  .ws('/zecho-dedicated', compressed(uWS.DEDICATED_COMPRESSOR | uWS.DEDICATED_DECOMPRESSOR))
  .ws('/zpub/:topic', {
    ...compressed(uWS.SHARED_COMPRESSOR),
    upgrade: (res, req, context) => {
      res.upgrade(
        { topic: req.getParameter(0) },
        req.getHeader('sec-websocket-key'),
        req.getHeader('sec-websocket-protocol'),
        req.getHeader('sec-websocket-extensions'),
        context,
      );
    },
    open: (ws) => { ws.subscribe(ws.getUserData().topic); },
    message: (ws, msg, isBinary) => { ws.publish(ws.getUserData().topic, msg, isBinary, true); },
  })
  .ws('/relay', {
    ...common,
    open: (ws) => {
      const me = ws.getUserData();
      if (waiting && !waiting.getUserData().closed) {
        me.partner = waiting;
        waiting.getUserData().partner = ws;
        waiting = null;
      } else {
        waiting = ws;
      }
    },
    message: (ws, msg, isBinary) => {
      const p = ws.getUserData().partner;
      if (p) p.send(msg, isBinary);
    },
    close: (ws) => {
      const me = ws.getUserData();
      me.closed = true;
      if (waiting === ws) waiting = null;
      const p = me.partner;
      if (p && !p.getUserData().closed) {
        p.getUserData().partner = null;
        p.end(1001);
      }
    },
  })
  .ws('/topic/:topic', {
    ...common,
    upgrade: (res, req, context) => {
      res.upgrade(
        { topic: req.getParameter(0) },
        req.getHeader('sec-websocket-key'),
        req.getHeader('sec-websocket-protocol'),
        req.getHeader('sec-websocket-extensions'),
        context,
      );
    },
    open: (ws) => { ws.subscribe(ws.getUserData().topic); },
    message: (ws, msg, isBinary) => { ws.publish(ws.getUserData().topic, msg, isBinary); },
  })
  .any('/*', (res) => { res.writeStatus('404 Not Found').end(); })
  .listen('127.0.0.1', port, (token) => {
    if (!token) { console.error(`uWS: cannot listen on ${port}`); process.exit(1); }
    console.log(`uWebSockets.js peer listening on 127.0.0.1:${port}${tls ? ' (TLS)' : ''}`);
  });
