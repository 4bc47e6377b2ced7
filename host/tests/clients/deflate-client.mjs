// A Node `ws` client with permessage-deflate: sends JSON-like messages of
// several sizes to an echo route, checks each echo byte for byte, and
// prints what it negotiated and saw as one JSON line.
// Usage: node deflate-client.mjs URL takeover|none
import WebSocket from 'ws';

const [url, mode] = process.argv.slice(2);
const none = mode === 'none';
const ws = new WebSocket(url, {
  // Left unset rather than false in takeover mode: ws then accepts a
  // server that asks for client_no_context_takeover anyway (RFC 7692
  // §7.1.1.2 lets it; weir's "none" routes do).
  perMessageDeflate: none
    ? { threshold: 0, clientNoContextTakeover: true, serverNoContextTakeover: true }
    : { threshold: 0 },
});

function message(i, size) {
  let s = '';
  for (let n = 0; s.length < size; n++) {
    s += JSON.stringify({ seq: i, n, price: (n * 7919) % 1000, side: n % 3 ? 'buy' : 'sell' });
  }
  return s.slice(0, size);
}

const sizes = [10, 300, 1024, 16384, 100000];
const sent = [];
let echoed = 0;
const timer = setTimeout(() => { console.log(JSON.stringify({ error: 'timeout' })); process.exit(2); }, 15000);

ws.on('upgrade', (res) => {
  ws._weirExtensions = res.headers['sec-websocket-extensions'] || '';
});
ws.on('open', () => {
  for (let i = 0; i < 20; i++) {
    const m = message(i, sizes[i % sizes.length]);
    sent.push(m);
    ws.send(m);
  }
});
ws.on('message', (data, isBinary) => {
  const want = sent[echoed++];
  if (isBinary || data.toString() !== want) {
    console.log(JSON.stringify({ error: `echo ${echoed - 1} differs` }));
    process.exit(1);
  }
  if (echoed === sent.length) ws.close(1000, 'done');
});
ws.on('close', (code) => {
  clearTimeout(timer);
  // Bytes the server sent against the messages' total: compressed replies
  // make the first much smaller.
  const payload = sent.reduce((n, m) => n + m.length, 0);
  console.log(JSON.stringify({ extensions: ws._weirExtensions, echoed, code, wireBytes: ws._socket.bytesRead, payload }));
});
ws.on('error', (e) => { console.log(JSON.stringify({ error: String(e) })); process.exit(1); });
