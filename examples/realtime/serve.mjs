// The chat example's page server (Node, no dependencies): serves chat.html,
// the official `centrifuge` browser bundle, and connection tokens for the
// centrifugo route of routes.toml. From the repository root:
//
//   export WEIR_TOKEN_HMAC_SECRET=...   # the same secret `weir serve` has
//   npm ci --prefix host/tests/clients  # once: centrifuge 5.8.0, pinned there
//   node examples/realtime/serve.mjs    # then open http://127.0.0.1:8080
//
// GET /token?user=NAME answers {"token", "url"}: an HS256 JWT for user NAME
// (`sub`, `exp` in 10 minutes, `info: {name}`) and the WebSocket URL to
// connect to. It is a demo login: it signs a token for whatever name the
// page asks for. A real application signs tokens in its own login, for
// the user it authenticated; the secret never reaches a browser.
//
// Environment: PORT (8080), WEIR_WS_URL (ws://127.0.0.1:9001/connection/websocket),
// CENTRIFUGE_JS (the bundle; host/tests/clients/node_modules/centrifuge/dist/centrifuge.js).
// It listens on 127.0.0.1 only and answers only Host 127.0.0.1 or localhost
// (a page on another site cannot reach it through DNS rebinding).
import { createServer } from 'node:http';
import { createHmac } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const port = Number(process.env.PORT || 8080);
const wsUrl = process.env.WEIR_WS_URL || 'ws://127.0.0.1:9001/connection/websocket';
const secret = process.env.WEIR_TOKEN_HMAC_SECRET;
/** How long a token lives: the page asks for a new one (getToken) before then. */
const TOKEN_TTL_SECONDS = 600;

if (!secret) {
  console.error('serve.mjs: export WEIR_TOKEN_HMAC_SECRET (the secret weir serve verifies tokens with)');
  process.exit(2);
}
const bundlePath = process.env.CENTRIFUGE_JS
  || here('../../host/tests/clients/node_modules/centrifuge/dist/centrifuge.js');
let bundle;
try {
  bundle = readFileSync(bundlePath);
} catch {
  console.error(`serve.mjs: ${bundlePath} is missing; run: npm ci --prefix host/tests/clients`);
  process.exit(2);
}
const page = readFileSync(here('./chat.html'));

const b64url = (x) => Buffer.from(x).toString('base64url');

/** An HS256 JWT with `claims`. */
function sign(claims) {
  const head = b64url(JSON.stringify({ alg: 'HS256', typ: 'JWT' }));
  const body = b64url(JSON.stringify(claims));
  const sig = createHmac('sha256', secret).update(`${head}.${body}`).digest('base64url');
  return `${head}.${body}.${sig}`;
}

/** A user name the page may ask a token for: 1 to 32 letters, digits, `-`, `_`, `.`. */
const USER = /^[A-Za-z0-9._-]{1,32}$/;

function send(res, status, type, body) {
  res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store' });
  res.end(body);
}

const server = createServer((req, res) => {
  const host = (req.headers.host || '').replace(/:\d+$/, '');
  if (host !== '127.0.0.1' && host !== 'localhost') {
    return send(res, 421, 'text/plain', 'this page server answers only 127.0.0.1 and localhost\n');
  }
  const url = new URL(req.url, 'http://localhost');
  if (req.method !== 'GET') return send(res, 405, 'text/plain', 'GET only\n');
  switch (url.pathname) {
    case '/':
    case '/chat.html':
      return send(res, 200, 'text/html; charset=utf-8', page);
    case '/centrifuge.js':
      return send(res, 200, 'text/javascript; charset=utf-8', bundle);
    case '/token': {
      const user = url.searchParams.get('user') || '';
      if (!USER.test(user)) return send(res, 400, 'text/plain', 'user: 1-32 of A-Z a-z 0-9 . _ -\n');
      const exp = Math.floor(Date.now() / 1000) + TOKEN_TTL_SECONDS;
      const token = sign({ sub: user, exp, info: { name: user } });
      return send(res, 200, 'application/json', JSON.stringify({ token, url: wsUrl }));
    }
    default:
      return send(res, 404, 'text/plain', 'not found\n');
  }
});
server.listen(port, '127.0.0.1', () => {
  console.log(`chat page on http://127.0.0.1:${server.address().port}/ (gateway ${wsUrl})`);
});
