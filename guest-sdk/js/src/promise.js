// Promises and async functions that run inside a guest call.
//
// componentize-qjs calls a synchronous export and returns: it never runs
// QuickJS's job queue, so a native Promise's reactions (and what follows an
// `await` in a native async function) would never run in the gateway. This
// module owns the microtask queue instead: `WeirPromise` queues its
// reactions here, and the runtime drains the queue after each event of a
// batch (and during an upgrade), so an awaiting handler resumes inside the
// call that delivers what it waited for. build.mjs (src/transform.mjs)
// rewrites a handler's `async` functions into generators driven by
// `runAsync` and its `Promise` into `WeirPromise`; the test harness loads
// handlers through the same rewrite, so tests see the gateway's order.
//
// Every async function and reaction also carries the *context* it was
// started in: the connection whose hook started it, or null for the route.
// The I/O calls (fetch, setTimeout) use it, so a request made after an
// `await` in onMessage is still that connection's.

const PENDING = 0;
const FULFILLED = 1;
const REJECTED = 2;

/**
 * Queued microtasks: [job, argument] pairs, run in order by
 * drainMicrotasks; empty (length 0) whenever none waits, so the runtime's
 * hot path checks `microtasks.length` without a call.
 */
export const microtasks = [];
const queue = microtasks;
let head = 0;

/**
 * The running context: `conn` is the Conn whose work is running, or null
 * for the route's. An object, so the runtime swaps it without a call per
 * message.
 */
export const context = { conn: null };

/** Rejected promises nobody has handled yet (reported after a drain). */
const unhandled = new Set();

/** The running context: a Conn, or null for the route. */
export function currentContext() {
  return context.conn;
}

/** Make `ctx` the running context; returns the one it replaces. */
export function swapContext(ctx) {
  const saved = context.conn;
  context.conn = ctx;
  return saved;
}

/** Run `fn()` with `ctx` as the running context. */
export function withContext(ctx, fn, arg) {
  const saved = context.conn;
  context.conn = ctx;
  try {
    return fn(arg);
  } finally {
    context.conn = saved;
  }
}

/** Whether microtasks are waiting. */
export function hasMicrotasks() {
  return head < queue.length;
}

/**
 * Run every queued microtask, including those they queue, in order. The
 * route's deadline bounds a handler that keeps queueing forever.
 */
export function drainMicrotasks() {
  while (head < queue.length) {
    const job = queue[head];
    const arg = queue[head + 1];
    queue[head] = undefined;
    queue[head + 1] = undefined;
    head += 2;
    job(arg);
  }
  queue.length = 0;
  head = 0;
}

/** The rejections nobody handled since the last call (and forget them). */
export function takeUnhandled() {
  if (unhandled.size === 0) return [];
  const out = [];
  for (const p of unhandled) out.push(p._value);
  unhandled.clear();
  return out;
}

function enqueue(job, arg) {
  queue.push(job, arg);
}

/** `queueMicrotask(fn)`: run `fn` at the next drain, in the current context. */
export function queueMicrotask(fn) {
  if (typeof fn !== "function") throw new TypeError("queueMicrotask needs a function");
  const ctx = context.conn;
  enqueue(runMicrotask, { fn, ctx });
}

let reportError = (e) => {
  throw e;
};

/** Where a microtask's own throw goes (the runtime logs it). */
export function setReportError(f) {
  reportError = f;
}

function runMicrotask(task) {
  const saved = context.conn;
  context.conn = task.ctx;
  try {
    task.fn();
  } catch (e) {
    reportError(e);
  } finally {
    context.conn = saved;
  }
}

function runReaction(r) {
  const saved = context.conn;
  context.conn = r.ctx;
  const p = r.source;
  const handler = p._state === FULFILLED ? r.onFulfilled : r.onRejected;
  try {
    if (typeof handler !== "function") {
      if (p._state === FULFILLED) r.resolve(p._value);
      else r.reject(p._value);
    } else {
      r.resolve(handler(p._value));
    }
  } catch (e) {
    r.reject(e);
  } finally {
    context.conn = saved;
  }
}

function settle(p, state, value) {
  if (p._state !== PENDING) return;
  p._state = state;
  p._value = value;
  const reactions = p._reactions;
  p._reactions = null;
  if (reactions.length === 0) {
    if (state === REJECTED && !p._handled) unhandled.add(p);
    return;
  }
  for (const r of reactions) {
    r.source = p;
    enqueue(runReaction, r);
  }
}

function adopt(job) {
  const saved = context.conn;
  context.conn = job.ctx;
  const [resolve, reject] = resolvers(job.promise);
  try {
    job.then.call(job.thenable, resolve, reject);
  } catch (e) {
    reject(e);
  } finally {
    context.conn = saved;
  }
}

/** The resolve and reject functions of `p` (ECMA-262 CreateResolvingFunctions). */
function resolvers(p) {
  let done = false;
  const resolve = (x) => {
    if (done) return;
    done = true;
    if (x === p) {
      settle(p, REJECTED, new TypeError("a promise cannot resolve to itself"));
      return;
    }
    if (x !== null && (typeof x === "object" || typeof x === "function")) {
      let then;
      try {
        then = x.then;
      } catch (e) {
        settle(p, REJECTED, e);
        return;
      }
      if (typeof then === "function") {
        enqueue(adopt, { promise: p, thenable: x, then, ctx: context.conn });
        return;
      }
    }
    settle(p, FULFILLED, x);
  };
  const reject = (e) => {
    if (done) return;
    done = true;
    settle(p, REJECTED, e);
  };
  return [resolve, reject];
}

/**
 * A Promise whose reactions run in this module's queue: what `Promise`
 * means in a handler (build.mjs renames it). Same API as the standard one.
 */
export class WeirPromise {
  constructor(executor) {
    if (typeof executor !== "function") throw new TypeError("Promise resolver is not a function");
    this._state = PENDING;
    this._value = undefined;
    this._reactions = [];
    this._handled = false;
    const [resolve, reject] = resolvers(this);
    try {
      executor(resolve, reject);
    } catch (e) {
      reject(e);
    }
  }

  then(onFulfilled, onRejected) {
    let resolve;
    let reject;
    const next = new WeirPromise((a, b) => {
      resolve = a;
      reject = b;
    });
    const r = { onFulfilled, onRejected, resolve, reject, ctx: context.conn, source: this };
    if (this._state === PENDING) {
      this._reactions.push(r);
    } else {
      if (this._state === REJECTED && !this._handled) unhandled.delete(this);
      enqueue(runReaction, r);
    }
    this._handled = true;
    return next;
  }

  catch(onRejected) {
    return this.then(undefined, onRejected);
  }

  finally(onFinally) {
    if (typeof onFinally !== "function") return this.then(onFinally, onFinally);
    return this.then(
      (v) => WeirPromise.resolve(onFinally()).then(() => v),
      (e) =>
        WeirPromise.resolve(onFinally()).then(() => {
          throw e;
        }),
    );
  }

  get [Symbol.toStringTag]() {
    return "Promise";
  }

  static resolve(v) {
    if (v instanceof WeirPromise) return v;
    return new WeirPromise((resolve) => resolve(v));
  }

  static reject(e) {
    return new WeirPromise((_, reject) => reject(e));
  }

  static withResolvers() {
    let resolve;
    let reject;
    const promise = new WeirPromise((a, b) => {
      resolve = a;
      reject = b;
    });
    return { promise, resolve, reject };
  }

  static all(items) {
    return new WeirPromise((resolve, reject) => {
      const out = [];
      let left = 1;
      let i = 0;
      for (const item of items) {
        const at = i++;
        left++;
        WeirPromise.resolve(item).then((v) => {
          out[at] = v;
          if (--left === 0) resolve(out);
        }, reject);
      }
      if (--left === 0) resolve(out);
    });
  }

  static allSettled(items) {
    return WeirPromise.all(
      Array.from(items, (item) =>
        WeirPromise.resolve(item).then(
          (value) => ({ status: "fulfilled", value }),
          (reason) => ({ status: "rejected", reason }),
        ),
      ),
    );
  }

  static race(items) {
    return new WeirPromise((resolve, reject) => {
      for (const item of items) WeirPromise.resolve(item).then(resolve, reject);
    });
  }

  static any(items) {
    return new WeirPromise((resolve, reject) => {
      const errors = [];
      let left = 1;
      let i = 0;
      for (const item of items) {
        const at = i++;
        left++;
        WeirPromise.resolve(item).then(resolve, (e) => {
          errors[at] = e;
          if (--left === 0) reject(new AggregateError(errors, "All promises were rejected"));
        });
      }
      if (--left === 0) reject(new AggregateError(errors, "All promises were rejected"));
    });
  }
}

/** Whether `p` is a WeirPromise that has not settled. */
export function isPending(p) {
  return p instanceof WeirPromise && p._state === PENDING;
}

/** A settled WeirPromise's outcome: { ok, value } (undefined while pending). */
export function outcome(p) {
  if (!(p instanceof WeirPromise) || p._state === PENDING) return undefined;
  if (p._state === REJECTED && !p._handled) {
    unhandled.delete(p);
    p._handled = true;
  }
  return { ok: p._state === FULFILLED, value: p._value };
}

/**
 * What an `async` function becomes (src/transform.mjs): `gen` is its body
 * as a generator, each `await x` a `yield x`. Runs the body at once up to
 * its first await, then one step per settled value, each step in the
 * context the call started in; returns a WeirPromise of the result.
 */
export function runAsync(gen, self, args) {
  const ctx = context.conn;
  return new WeirPromise((resolve, reject) => {
    const it = gen.apply(self, args);
    const step = (method, arg) => {
      const saved = context.conn;
      context.conn = ctx;
      let r;
      try {
        r = method === 0 ? it.next(arg) : it.throw(arg);
      } catch (e) {
        reject(e);
        return;
      } finally {
        context.conn = saved;
      }
      if (r.done) {
        resolve(r.value);
      } else {
        const saved2 = context.conn;
        context.conn = ctx;
        try {
          WeirPromise.resolve(r.value).then(onValue, onError);
        } finally {
          context.conn = saved2;
        }
      }
    };
    const onValue = (v) => step(0, v);
    const onError = (e) => step(1, e);
    step(0, undefined);
  });
}
