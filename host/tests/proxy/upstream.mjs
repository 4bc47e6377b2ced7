// A Node `ws` upstream for host/tests/proxy.rs: on each connection it first
// sends a JSON description of the upgrade request it got (path, headers,
// chosen subprotocol), then echoes every message with its type. Of the
// subprotocols offered it picks the last one, so a test can tell the
// upstream's choice from a first-listed default. Prints its port.
import { createRequire } from 'node:module';
const require = createRequire(import.meta.url);
const { WebSocketServer } = require('ws');

const wss = new WebSocketServer({
  host: '127.0.0.1',
  port: 0,
  perMessageDeflate: false,
  maxPayload: 64 << 20,
  handleProtocols: (protocols) => [...protocols].pop() ?? false,
});
wss.on('connection', (ws, req) => {
  ws.send(JSON.stringify({ path: req.url, headers: req.headers, protocol: ws.protocol }));
  ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }));
  ws.on('close', (code, reason) => console.log(`close ${code} ${reason}`));
});
wss.on('listening', () => console.log(`port ${wss.address().port}`));
