// Deno.serve + Deno.upgradeWebSocket peer: /echo replies with each message,
// /relay forwards to the paired connection (arrival order) and closes the
// partner with 1001 when one side leaves. Deno does not negotiate compression.
const port = Number(Deno.args[0] || Deno.env.get('PORT') || 9001);
let waiting = null;

function relay(s) {
  s.onopen = () => {
    if (waiting && waiting.readyState === WebSocket.OPEN) {
      const a = waiting;
      waiting = null;
      a.onmessage = (e) => s.send(e.data);
      s.onmessage = (e) => a.send(e.data);
      a.onclose = () => { if (s.readyState === WebSocket.OPEN) s.close(1001); };
      s.onclose = () => { if (a.readyState === WebSocket.OPEN) a.close(1001); };
    } else {
      waiting = s;
      s.onclose = () => { if (waiting === s) waiting = null; };
    }
  };
}

Deno.serve({
  hostname: '127.0.0.1',
  port,
  onListen: () => console.log(`Deno peer listening on 127.0.0.1:${port}`),
}, (req) => {
  const path = new URL(req.url).pathname;
  if (path !== '/echo' && path !== '/relay') return new Response('not found', { status: 404 });
  if ((req.headers.get('upgrade') || '').toLowerCase() !== 'websocket') {
    return new Response('upgrade required', { status: 426 });
  }
  const { socket, response } = Deno.upgradeWebSocket(req, { idleTimeout: 0 });
  socket.binaryType = 'arraybuffer';
  if (path === '/echo') socket.onmessage = (e) => socket.send(e.data);
  else relay(socket);
  return response;
});
