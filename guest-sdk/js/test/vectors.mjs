// Holds the JS codec (src/abi.js) to the shared ABI test vectors in
// abi/vectors/, as abi/tests/vectors.rs holds the Rust one: every header
// packs to the vector's bytes and unpacks to its fields, every valid case
// decodes to the listed events or commands, every invalid one fails with
// the named error at the named index, and the answer writer packs the
// "every-kind" commands to their exact bytes. Run: node guest-sdk/js/test/vectors.mjs

import { readFileSync } from "node:fs";
import { deepStrictEqual, strictEqual, ok, throws } from "node:assert";
import * as abi from "../src/abi.js";

const dir = new URL("../../../abi/vectors/", import.meta.url);
const load = (name) => JSON.parse(readFileSync(new URL(name, dir), "utf8"));

const unhex = (s) => Uint8Array.from(s.match(/../g) || [], (h) => parseInt(h, 16));
const hex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");

/** A decoded event or command as the vectors spell it (bytes as hex). */
function asVector(item) {
  const out = {};
  for (const [k, v] of Object.entries(item)) {
    if (k === "payload" && typeof v !== "string") out.payload_hex = hex(v);
    else if (k === "attachment") out.attachment_hex = hex(v);
    else if (k === "body") out.body_hex = hex(v);
    else if (k === "key") out.key_hex = hex(v);
    else if (k === "value") out.value_hex = hex(v);
    else if (k === "info") out.info_hex = hex(v);
    else if (k === "data") out.data_hex = hex(v);
    else out[k] = v;
  }
  return out;
}

/** Objects compared by key set and values, whatever the key order. */
function same(got, want, what) {
  deepStrictEqual(JSON.parse(JSON.stringify(got)), want, what);
}

function run(file, key, size, read, write, decode, only = null) {
  const v = load(file);
  if (only !== null) {
    v.valid = v.valid.filter((c) => only.includes(c.name));
    v.invalid = v.invalid.filter((c) => only.includes(c.name));
  }
  const seen = [];
  let checked = 0;
  for (const [group, valid] of [["valid", true], ["invalid", false]]) {
    ok(v[group].length > 0, `${file}: no ${group} cases`);
    for (const c of v[group]) {
      const bytes = unhex(c.headers_hex);
      if (c.headers) {
        const packed = new Uint8Array(c.headers.length * size);
        c.headers.forEach((h, i) => write(packed, i * size, h));
        strictEqual(hex(packed), c.headers_hex, `${c.name}: pack`);
        const back = c.headers.map((_, i) => read(bytes, i * size));
        deepStrictEqual(back, c.headers, `${c.name}: unpack`);
      }
      const data = unhex(c.data_hex);
      if (valid) {
        same(decode(bytes, data).map(asVector), c[key], c.name);
      } else {
        throws(
          () => decode(bytes, data),
          (e) => {
            strictEqual(e.variant, c.error, `${c.name}: ${e.message}`);
            strictEqual(e.index, c.index, `${c.name}: index`);
            return true;
          },
          c.name,
        );
        seen.push(c.error);
      }
      checked++;
    }
  }
  return { seen, checked };
}

const events = run(
  "events.json",
  "events",
  abi.EVENT_HEADER_BYTES,
  abi.readEventHeader,
  abi.writeEventHeader,
  abi.decodeEvents,
);
const commands = run(
  "commands.json",
  "commands",
  abi.COMMAND_HEADER_BYTES,
  abi.readCommandHeader,
  abi.writeCommandHeader,
  abi.decodeCommands,
);
// weir:gateway 0.4.0's I/O kinds, as abi/tests/vectors.rs reads them.
const ioEvents = run("io-events.json", "events", abi.EVENT_HEADER_BYTES, abi.readEventHeader, abi.writeEventHeader, abi.decodeEvents);
const ioCommands = run(
  "io-commands.json",
  "commands",
  abi.COMMAND_HEADER_BYTES,
  abi.readCommandHeader,
  abi.writeCommandHeader,
  abi.decodeCommands,
);
ok(ioEvents.seen.every((e) => e === "IoEventMalformed"), `${ioEvents.seen}`);
// Every real-time kind of realtime-*.json: the realtime reads (history
// 10, presence 11; history-read 15, presence-read 16), a namespace guest's
// questions (12, 13) and a Pusher app guest's (14–16), and their verdicts
// (17, 18).
const rtEvents = run(
  "realtime-events.json",
  "events",
  abi.EVENT_HEADER_BYTES,
  abi.readEventHeader,
  abi.writeEventHeader,
  abi.decodeEvents,
);
const rtCommands = run(
  "realtime-commands.json",
  "commands",
  abi.COMMAND_HEADER_BYTES,
  abi.readCommandHeader,
  abi.writeCommandHeader,
  abi.decodeCommands,
);
deepStrictEqual(rtEvents.seen, ["IoEventMalformed", "IoEventMalformed"]);
deepStrictEqual(rtCommands.seen, ["ReservedByteSet", "ReservedByteSet", "TextNotUtf8", "MetaMalformed", "MetaMalformed", "MetaMalformed"]);
// The proxy filter's kinds (proxy-text 7, proxy-binary 8; forward-text 13,
// forward-binary 14), as abi/tests/vectors.rs reads them.
const proxyEvents = run(
  "proxy-events.json",
  "events",
  abi.EVENT_HEADER_BYTES,
  abi.readEventHeader,
  abi.writeEventHeader,
  abi.decodeEvents,
);
const proxyCommands = run(
  "proxy-commands.json",
  "commands",
  abi.COMMAND_HEADER_BYTES,
  abi.readCommandHeader,
  abi.writeCommandHeader,
  abi.decodeCommands,
);
deepStrictEqual(proxyEvents.seen, ["ReservedByteSet", "TextNotUtf8"]);
deepStrictEqual(proxyCommands.seen, ["ReservedByteSet", "TextNotUtf8"]);
ok(ioCommands.seen.length === 6 && ioCommands.seen.every((e) => e === "MetaMalformed"), `${ioCommands.seen}`);

for (const variant of [
  "HeadersNotWhole",
  "ReservedByteSet",
  "RangeOutOfBounds",
  "UnknownKind",
  "TextNotUtf8",
  "ReasonNotUtf8",
  "EmptyTopic",
  "TopicNotUtf8",
]) {
  ok(commands.seen.includes(variant), `no command vector for ${variant}`);
}

// The writer the SDK answers with packs "every-kind" byte for byte.
const everyKind = load("commands.json").valid[0];
strictEqual(everyKind.name, "every-kind");
const w = new abi.CommandWriter(28, 4);
w.sendText(1, "héllo");
w.sendBinary(0x0001_0203_0405_0607, new Uint8Array([0, 0xff]));
w.close(3, 4000, "done");
w.publish("room", "hi all", 0);
w.publish("room", new Uint8Array([1, 2]), 4);
w.subscribe(4, "room");
w.unsubscribe(4, "lobby");
w.setAttachment(4, abi.encodeUtf8("state"));
const answer = w.finish();
strictEqual(hex(answer.commands), everyKind.headers_hex, "writer: headers");
strictEqual(hex(answer.data), everyKind.data_hex, "writer: data");

// ...and the I/O commands the runtime writes (fetch, timers, kv) too.
const ioKinds = load("io-commands.json").valid[0];
strictEqual(ioKinds.name, "io-kinds");
const wio = new abi.CommandWriter(28, 4);
wio.httpRequest(3, 7, "POST", "http://h:1/x", [["content-type", "text/plain"]], abi.encodeUtf8("hi"));
wio.setTimer(0, 8, 1500);
wio.cancelTimer(3, 8);
wio.kvSet("k", "v", 60000);
wio.kvDelete("k");
const ioAnswer = wio.finish();
strictEqual(hex(ioAnswer.commands), ioKinds.headers_hex, "writer: I/O headers");
strictEqual(hex(ioAnswer.data), ioKinds.data_hex, "writer: I/O data");

// ...and the realtime reads and proxy forwards the runtime writes.
const reads = load("realtime-commands.json").valid.find((c) => c.name === "realtime-reads");
const wrt = new abi.CommandWriter(28, 4);
wrt.historyRead(1, 4, 20, true, "chat:room");
wrt.presenceRead(0, 5, "chat:room");
const rtAnswer = wrt.finish();
strictEqual(hex(rtAnswer.commands), reads.headers_hex, "writer: read headers");
strictEqual(hex(rtAnswer.data), reads.data_hex, "writer: read data");
const forwards = load("proxy-commands.json").valid[0];
strictEqual(forwards.name, "proxy-forwards");
const wfw = new abi.CommandWriter(28, 4);
wfw.forward(3, 0, "up");
wfw.forward(3, 1, new Uint8Array([0xff]));
const fwAnswer = wfw.finish();
strictEqual(hex(fwAnswer.commands), forwards.headers_hex, "writer: forward headers");
strictEqual(hex(fwAnswer.data), forwards.data_hex, "writer: forward data");
// ...and the verdicts a namespace or Pusher app guest answers with.
for (const name of ["rt-verdicts", "pusher-verdicts"]) {
  const want = load("realtime-commands.json").valid.find((c) => c.name === name);
  const wv = new abi.CommandWriter(28, 4);
  for (const c of want.commands) {
    if (c.kind === "rt-subscribe-verdict") wv.subscribeVerdict(c.conn, c.call, c.code, c.authorise === true, c.payload ?? "");
    else wv.publishVerdict(c.conn, c.call, ["pass", "replace", "drop"].indexOf(c.verdict), c.code ?? 0, unhex(c.data_hex ?? ""));
  }
  const got = wv.finish();
  // The writer lays the data out its own way (each verdict's call id, then
  // its payload): the host reads the same commands from it.
  same(abi.decodeCommands(got.commands, got.data).map(asVector), want.commands, `writer: ${name}`);
}
// The gateway's questions as the harness encodes them read back.
for (const name of ["rt-kinds", "pusher-kinds"]) {
  const want = load("realtime-events.json").valid.find((c) => c.name === name);
  const parts = want.events.map((e) => {
    const req = { call: e.call, channel: e.channel, client: e.client, user: e.user, info: unhex(e.info_hex) };
    const rest = e.kind === "pusher-subscribe" ? abi.encodeSubscribeRest(e.signature, e.auth) : unhex(e.data_hex ?? "");
    return abi.encodeRtRequest(req, rest);
  });
  strictEqual(parts.map(hex).join(""), want.data_hex, `encodeRtRequest: ${name}`);
}
// The gateway's answers as the harness encodes them read back.
const hist = abi.encodeHistory(7, 12, "ep", [[11, '"a"'], [12, "{}"]]);
const readEvents = load("realtime-events.json").valid.find((c) => c.name === "realtime-reads");
strictEqual(hex(hist), readEvents.data_hex.slice(0, hist.length * 2), "encodeHistory");
const pres = abi.encodePresence(9, [{ client: "c1", user: "u1", conn_info: '{"n":1}' }, { client: "c2", user: "", conn_info: "" }]);
strictEqual(hex(pres), readEvents.data_hex.slice((51 + 8) * 2, (51 + 8 + 45) * 2), "encodePresence");

// UTF-8 both ways, against node's own codec.
for (const s of ["", "ascii", "héllo", "日本語", "😀 emoji", "a".repeat(10000) + "é"]) {
  const bytes = abi.encodeUtf8(s);
  deepStrictEqual(Buffer.from(bytes), Buffer.from(s, "utf8"), `encode ${s.slice(0, 10)}`);
  strictEqual(abi.decodeUtf8(bytes), s, `decode ${s.slice(0, 10)}`);
  strictEqual(abi.decodeUtf8Fast(bytes, 0, bytes.length), s, `decode (builtins) ${s.slice(0, 10)}`);
}
for (const bad of [[0xff], [0xc3], [0xc0, 0x80], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80], [0xe2, 0x82]]) {
  const b = Uint8Array.from([0x61, ...bad, 0x62]);
  strictEqual(abi.decodeUtf8(b), null, `invalid ${bad}`);
  strictEqual(abi.decodeUtf8Fast(b, 0, b.length), null, `invalid (builtins) ${bad}`);
}

console.log(
  `vectors (js): ${events.checked + ioEvents.checked + rtEvents.checked + proxyEvents.checked} event cases, ` +
    `${commands.checked + ioCommands.checked + rtCommands.checked + proxyCommands.checked} command cases, writer and UTF-8 ok`,
);
