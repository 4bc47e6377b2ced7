// Ticker: a route timer polls an HTTP endpoint (TICKER_URL below, which
// the route's `allow_outbound` must allow) every second and publishes its
// body to the topic `ticker` whenever it changed. Clients of the route are
// subscribed to it and get the latest value on joining. The JavaScript
// twin of examples/ticker (Rust).
//
// The timer and the request are the route's own (route.setTimer,
// route.fetch), not a connection's: the gateway holds the timer, so it
// keeps firing when the instance that set it is replaced (the new one gets
// it in onTimer). The last value is kept in the route's store (`kv`),
// which also keeps instances on different workers from publishing the
// same change twice.

import { kv, route } from "weir-guest";

const TICKER_URL = "http://127.0.0.1:9002/ticker.txt";
/** How often the endpoint is polled (ms). */
const POLL_EVERY_MS = 1000;

/** This instance keeps a poll going (started by its first client). */
let polling = false;

async function poll() {
  polling = true;
  route.setTimer(POLL_EVERY_MS);
  let value;
  try {
    const r = await route.fetch(TICKER_URL);
    if (!r.ok) return;
    value = (await r.text()).trim();
  } catch {
    return; // the next poll tries again
  }
  if (kv.getText("last") === value) return;
  kv.set("last", value);
  route.publish("ticker", value);
}

export default {
  onOpen(conn) {
    conn.subscribe("ticker");
    const last = kv.getText("last");
    if (last !== null) conn.sendText(last);
    if (!polling) {
      polling = true;
      route.setTimer(0);
    }
  },

  onMessage() {},

  // Every route timer, whichever instance set it.
  onTimer(target) {
    if (target === route) return poll();
  },
};
