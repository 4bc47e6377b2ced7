// The pusher example's backend: what a Laravel (or any) app server does
// for a Pusher chat, in one small Node file with the official `pusher`
// server library pointed at weir. It serves the page (index.html) and the
// two client libraries' browser builds from node_modules, a fake login
// (the user picks a name; a session cookie remembers it), the endpoints
// pusher-js and laravel-echo call to authorise channels
// (`/broadcasting/auth`, the library's `authorizeChannel`) and to sign a
// user in (`/broadcasting/user-auth`, `authenticateUser`), and
// `POST /messages`, which triggers each chat message through weir's HTTP
// API (`trigger`, excluding the sender's socket) or, for `@name text`,
// sends it to that user alone (`sendToUser`).
//
// Started by `bash examples/pusher/run.sh`; by hand, from this directory:
//   npm ci && PUSHER_APP_SECRET=... node server.mjs
// Environment: PUSHER_APP_SECRET (required: the secret weir serve has),
// PORT (3000), WEIR_HOST (127.0.0.1) and WEIR_PORT (8080): where weir
// listens, for the library's HTTP API calls and the page's WebSocket.
// It listens on 127.0.0.1 only and answers only Host 127.0.0.1 or
// localhost (a page on another site cannot reach it through DNS rebinding).
import { createServer } from 'node:http';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import Pusher from 'pusher';

/** The app of routes.toml beside this file. */
const APP_ID = 'demo';
const APP_KEY = 'demo-key';
/** The private channel chat messages are triggered on (Echo.private('chat-messages')). */
const MESSAGES_CHANNEL = 'private-chat-messages';
/** The presence channel of who is online and who types (Echo.join('chat')). */
const PRESENCE_CHANNEL = 'presence-chat';
/** Largest request body read: a chat message, a login or an auth form. */
const MAX_BODY_BYTES = 4096;
/** Longest chat message, in characters. */
const MAX_TEXT_CHARS = 500;
/** Sessions kept at once: a demo login must not grow memory without bound. */
const MAX_SESSIONS = 10000;
/** A Pusher socket id, as the page sends it in X-Socket-Id (Laravel's header). */
const SOCKET_ID = /^\d+\.\d+$/;
/** A user name: 1 to 32 letters, digits, spaces, `-`, `_`, `.`. */
const NAME = /^[A-Za-z0-9 ._-]{1,32}$/;

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const port = Number(process.env.PORT || 3000);
const weirHost = process.env.WEIR_HOST || '127.0.0.1';
const weirPort = Number(process.env.WEIR_PORT || 8080);
const secret = process.env.PUSHER_APP_SECRET;
if (!secret) {
  console.error('server.mjs: export PUSHER_APP_SECRET (the secret weir serve has for app "demo")');
  process.exit(2);
}

function load(path) {
  try {
    return readFileSync(here(path));
  } catch {
    console.error(`server.mjs: ${path} is missing; run: npm ci --prefix examples/pusher`);
    process.exit(2);
  }
}
const files = {
  '/': ['text/html; charset=utf-8', load('./index.html')],
  '/pusher.js': ['text/javascript; charset=utf-8', load('./node_modules/pusher-js/dist/web/pusher.min.js')],
  '/echo.js': ['text/javascript; charset=utf-8', load('./node_modules/laravel-echo/dist/echo.iife.js')],
};

/** The server library, pointed at weir's HTTP API (same listener as the WebSocket). */
const pusher = new Pusher({ appId: APP_ID, key: APP_KEY, secret, host: weirHost, port: weirPort, useTLS: false });

/** Session id (the `sid` cookie) → { id, name }: the fake login. */
const sessions = new Map();

class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function send(res, status, type, body, headers = {}) {
  res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store', ...headers });
  res.end(body);
}
const json = (res, status, value, headers) => send(res, status, 'application/json', JSON.stringify(value), headers);

/** The request's body, at most MAX_BODY_BYTES. */
function body(req) {
  return new Promise((resolve, reject) => {
    let size = 0;
    const chunks = [];
    req.on('data', (c) => {
      size += c.length;
      if (size > MAX_BODY_BYTES) {
        reject(new HttpError(413, `body over ${MAX_BODY_BYTES} bytes`));
        req.destroy();
      } else {
        chunks.push(c);
      }
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

/** A JSON body, or a form body (pusher-js posts its auth requests as forms). */
async function fields(req) {
  const text = await body(req);
  if ((req.headers['content-type'] || '').startsWith('application/json')) {
    try {
      return JSON.parse(text);
    } catch {
      throw new HttpError(400, 'the body is not JSON');
    }
  }
  return Object.fromEntries(new URLSearchParams(text));
}

function cookie(req, name) {
  for (const part of (req.headers.cookie || '').split(';')) {
    const [k, v] = part.trim().split('=');
    if (k === name) return v;
  }
  return undefined;
}

/** The logged-in user, or 403. */
function user(req) {
  const found = sessions.get(cookie(req, 'sid'));
  if (!found) throw new HttpError(403, 'not logged in');
  return found;
}

function required(value, what) {
  if (typeof value !== 'string' || value === '') throw new HttpError(400, `${what} is missing`);
  return value;
}

async function login(req, res) {
  const name = String((await fields(req)).name || '').trim();
  if (!NAME.test(name)) throw new HttpError(400, 'name: 1-32 of A-Z a-z 0-9 space . _ -');
  if (sessions.size >= MAX_SESSIONS) sessions.delete(sessions.keys().next().value);
  const sid = randomBytes(16).toString('hex');
  const me = { id: randomBytes(6).toString('hex'), name };
  sessions.set(sid, me);
  json(res, 200, me, { 'set-cookie': `sid=${sid}; Path=/; HttpOnly; SameSite=Strict` });
}

/** What the page needs to connect: who it is and where weir is. */
function session(req, res) {
  const me = sessions.get(cookie(req, 'sid')) || null;
  json(res, 200, { user: me, key: APP_KEY, wsHost: weirHost, wsPort: weirPort });
}

/** pusher-js's channel authorisation: the chat's two channels, for a logged-in user. */
async function authorize(req, res) {
  const me = user(req);
  const form = await fields(req);
  const socketId = required(form.socket_id, 'socket_id');
  const channel = required(form.channel_name, 'channel_name');
  let auth;
  try {
    if (channel === MESSAGES_CHANNEL) {
      auth = pusher.authorizeChannel(socketId, channel);
    } else if (channel === PRESENCE_CHANNEL) {
      auth = pusher.authorizeChannel(socketId, channel, { user_id: me.id, user_info: { id: me.id, name: me.name } });
    } else {
      throw new HttpError(403, `${channel} is not a channel of this chat`);
    }
  } catch (e) {
    if (e instanceof HttpError) throw e;
    throw new HttpError(400, e.message); // the library's own check of socket_id or the channel
  }
  json(res, 200, auth);
}

/** pusher-js's user authentication (`pusher:signin`): the session's user. */
async function authenticate(req, res) {
  const me = user(req);
  const socketId = required((await fields(req)).socket_id, 'socket_id');
  try {
    json(res, 200, pusher.authenticateUser(socketId, { id: me.id, user_info: { name: me.name } }));
  } catch (e) {
    throw new HttpError(400, e.message);
  }
}

/** A chat message: to everyone but the sender's socket, or `@name text` to that user. */
async function message(req, res) {
  const me = user(req);
  const text = String((await fields(req)).text || '').trim();
  if (text === '' || text.length > MAX_TEXT_CHARS) throw new HttpError(400, `text: 1-${MAX_TEXT_CHARS} characters`);
  const socketId = req.headers['x-socket-id'] || undefined;
  if (socketId !== undefined && !SOCKET_ID.test(socketId)) throw new HttpError(400, 'x-socket-id: not a socket id');
  const sent = { from: me.name, text, at: Date.now() };
  const direct = /^@(\S+)\s+(.+)$/.exec(text);
  if (direct) {
    const ids = [...new Set([...sessions.values()].filter((u) => u.name === direct[1]).map((u) => u.id))];
    if (ids.length === 0) throw new HttpError(404, `nobody is called ${direct[1]}`);
    await Promise.all(ids.map((id) => pusher.sendToUser(id, 'direct', { ...sent, text: direct[2] })));
  } else {
    await pusher.trigger(MESSAGES_CHANNEL, 'message', sent, socketId ? { socket_id: socketId } : {});
  }
  json(res, 200, sent);
}

const routes = {
  'GET /session': session,
  'POST /login': login,
  'POST /broadcasting/auth': authorize,
  'POST /broadcasting/user-auth': authenticate,
  'POST /messages': message,
};

const server = createServer(async (req, res) => {
  const host = (req.headers.host || '').replace(/:\d+$/, '');
  if (host !== '127.0.0.1' && host !== 'localhost') {
    return send(res, 421, 'text/plain', 'this server answers only 127.0.0.1 and localhost\n');
  }
  const path = new URL(req.url, 'http://localhost').pathname;
  try {
    const file = req.method === 'GET' && files[path];
    if (file) return send(res, 200, file[0], file[1]);
    const route = routes[`${req.method} ${path}`];
    if (!route) throw new HttpError(404, `no ${req.method} ${path}`);
    await route(req, res);
  } catch (e) {
    const status = e instanceof HttpError ? e.status : 502; // a failed HTTP API call (e.g. weir not running)
    if (status === 502) console.error(`server.mjs: ${req.method} ${path}: ${e.message}`);
    if (!res.headersSent) send(res, status, 'text/plain', `${e.message}\n`);
  }
});
server.listen(port, '127.0.0.1', () => {
  console.log(`chat on http://127.0.0.1:${server.address().port}/ (weir at ${weirHost}:${weirPort})`);
});
