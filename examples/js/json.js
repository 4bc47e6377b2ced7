// JSON counter: {"number": n} gets back {"number": n + 1} when n is odd and
// {"number": n + 2} when n is even, so the answer is always the next even
// number after n. Anything else (not JSON, not an object, no integer
// "number", past 2^53 where JS numbers stop being exact) gets
// {"error": "<what was wrong>"} and the connection stays open.

import { utf8 } from "../../guest-sdk/js/src/index.js";

/** The next even number after the request's, or { error }. */
function answer(text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    return { error: `malformed JSON: ${e.message}` };
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    return { error: "expected an object with an integer \"number\"" };
  }
  if (!("number" in value)) return { error: "missing field \"number\"" };
  const n = value.number;
  if (!Number.isInteger(n)) return { error: "\"number\" must be an integer" };
  const next = n + (n % 2 === 0 ? 2 : 1);
  if (!Number.isSafeInteger(n) || !Number.isSafeInteger(next)) {
    return { error: "\"number\" is too large" };
  }
  return next;
}

export default {
  onMessage(conn, msg) {
    // A binary message is parsed as UTF-8 text, as the Rust example does.
    const text = typeof msg === "string" ? msg : utf8(msg);
    const reply = text === null ? { error: "malformed JSON: not UTF-8" } : answer(text);
    // The common answer, formatted directly (as the Rust example does).
    conn.sendText(typeof reply === "number" ? `{"number":${reply}}` : JSON.stringify(reply));
  },
};
