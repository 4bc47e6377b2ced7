// ws 8 peer on Node: /echo replies with each message, /relay forwards each
// message to the connection it was paired with (arrival order) and closes the
// partner with 1001 when one side leaves. Compression off, 64 MiB max payload.
'use strict';
const http = require('http');
const { WebSocketServer } = require('ws');

const port = Number(process.argv[2] || process.env.PORT || 9001);
const server = http.createServer((req, res) => { res.writeHead(426); res.end(); });
const wss = new WebSocketServer({ noServer: true, perMessageDeflate: false, maxPayload: 64 << 20 });
// permessage-deflate on /zecho (benches/compare.sh's deflate scenarios):
// zlib level 1 (as weir) and no threshold, so every message is compressed
// and the ratios are comparable.
const zwss = new WebSocketServer({
  noServer: true,
  maxPayload: 64 << 20,
  perMessageDeflate: { threshold: 0, zlibDeflateOptions: { level: 1 } },
});
let waiting = null;

function relay(ws) {
  if (waiting && waiting.readyState === 1) {
    const a = waiting;
    waiting = null;
    a.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }));
    ws.on('message', (data, isBinary) => a.send(data, { binary: isBinary }));
    a.on('close', () => ws.close(1001));
    ws.on('close', () => a.close(1001));
  } else {
    waiting = ws;
    ws.on('close', () => { if (waiting === ws) waiting = null; });
  }
}

server.on('upgrade', (req, socket, head) => {
  const path = req.url.split('?')[0];
  if (path === '/zecho') {
    zwss.handleUpgrade(req, socket, head, (ws) => {
      ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }));
    });
    return;
  }
  if (path !== '/echo' && path !== '/relay') {
    socket.end('HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n');
    return;
  }
  wss.handleUpgrade(req, socket, head, (ws) => {
    if (path === '/echo') ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }));
    else relay(ws);
  });
});
server.listen(port, '127.0.0.1', () => console.log(`ws peer listening on 127.0.0.1:${port}`));
