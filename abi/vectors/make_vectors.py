#!/usr/bin/env python3
"""Writes events.json, commands.json (and the io-, realtime- and proxy- files) next
to this file.

A second implementation of the layout (struct.pack, independent of the Rust
code), so the vectors check weir-abi rather than echo it. The expected
decodings and errors are written by hand below; abi/tests/vectors.rs holds the
crate to them. Run: python3 abi/vectors/make_vectors.py
"""

import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

EVENT = {"open": 0, "text": 1, "binary": 2, "close": 3, "http-response": 4, "http-error": 5,
         "timer": 6, "proxy-text": 7, "proxy-binary": 8, "kv-error": 9, "history": 10, "presence": 11,
         "rt-subscribe": 12, "rt-publish": 13, "pusher-connect": 14, "pusher-subscribe": 15,
         "pusher-client-event": 16}
COMMAND = {
    "send-text": 0,
    "send-binary": 1,
    "close": 2,
    "publish-text": 3,
    "publish-binary": 4,
    "subscribe": 5,
    "unsubscribe": 6,
    "set-attachment": 7,
    "http-request": 8,
    "set-timer": 9,
    "cancel-timer": 10,
    "kv-set": 11,
    "kv-delete": 12,
    "forward-text": 13,
    "forward-binary": 14,
    "history-read": 15,
    "presence-read": 16,
    "rt-subscribe-verdict": 17,
    "rt-publish-verdict": 18,
}

# Below 2**53, so every JSON reader keeps it exact; still 7 distinct bytes.
BIG_CONN = 0x0001020304050607


def event_header(conn, kind, code, offset, length, reserved=0):
    return {"conn": conn, "kind": kind, "reserved": reserved, "code": code,
            "offset": offset, "len": length}


def pack_event(h):
    return struct.pack("<QBBHII", h["conn"], h["kind"], h["reserved"],
                       h["code"], h["offset"], h["len"])


def command_header(conn, kind, code=0, topic=(0, 0), payload=(0, 0), reserved=0):
    return {"conn": conn, "kind": kind, "reserved": reserved, "code": code,
            "topic_offset": topic[0], "topic_len": topic[1],
            "offset": payload[0], "len": payload[1]}


def pack_command(h):
    return struct.pack("<QBBHIIII", h["conn"], h["kind"], h["reserved"],
                       h["code"], h["topic_offset"], h["topic_len"],
                       h["offset"], h["len"])


def case(name, about, headers, data, pack, **expected):
    out = {"name": name, "about": about,
           "headers_hex": b"".join(pack(h) for h in headers).hex(),
           "data_hex": data.hex(), "headers": headers}
    out.update(expected)
    return out


class Batch:
    """Events appended the way the gateway's Batch does: bytes back to back."""

    def __init__(self):
        self.headers, self.data = [], b""

    def push(self, conn, kind, code, payload):
        self.headers.append(event_header(conn, EVENT[kind], code, len(self.data), len(payload)))
        self.data += payload
        return self


class Answer:
    """Commands appended the way weir-guest's Context does: for a publish the
    topic first, then the payload; (un)subscribe has no payload range."""

    def __init__(self):
        self.headers, self.data = [], b""

    def put(self, b):
        r = (len(self.data), len(b))
        self.data += b
        return r

    def push(self, conn, kind, code=0, topic=b"", payload=b"", has_topic=False):
        t = self.put(topic) if has_topic else (0, 0)
        no_payload = ("subscribe", "unsubscribe", "history-read", "presence-read")
        p = (0, 0) if kind in no_payload else self.put(payload)
        self.headers.append(command_header(conn, COMMAND[kind], code, t, p))
        return self


def conn_info(target, params=(), attachment=b""):
    """An open event's bytes: u32 length-prefixed target, u32 parameter
    count, length-prefixed name and value per parameter, then the
    attachment (the rest)."""
    def field(b):
        return struct.pack("<I", len(b)) + b
    out = field(target.encode()) + struct.pack("<I", len(params))
    for name, value in params:
        out += field(name.encode()) + field(value.encode())
    return out + attachment


def rt_request(call, channel, client, user, info, data=b""):
    """An rt-subscribe or rt-publish event's bytes: u64 call id, then
    channel, client, user and info each u32 length-prefixed, then the
    publication (the rest)."""
    def field(b):
        return struct.pack("<I", len(b)) + b
    return (struct.pack("<Q", call) + field(channel.encode()) + field(client.encode())
            + field(user.encode()) + field(info) + data)
def sized(b):
    return struct.pack("<I", len(b)) + b


def events():
    reads = (Batch()
             .push(1, "history", 0, struct.pack("<QQ", 7, 12) + sized(b"ep")
                   + struct.pack("<Q", 11) + sized(b'"a"') + struct.pack("<Q", 12) + sized(b"{}"))
             .push(0, "history", 2, struct.pack("<Q", 8))
             .push(1, "presence", 0, struct.pack("<Q", 9) + sized(b"c1") + sized(b"u1")
                   + sized(b'{"n":1}') + sized(b"c2") + sized(b"") + sized(b""))
             .push(1, "presence", 3, struct.pack("<Q", 10)))
    b = (Batch()
         .push(1, "open", 0, conn_info("/chat/lobby?token=x", [("room", "lobby")], b"\x07id"))
         .push(BIG_CONN, "text", 0, "héllo".encode())
         .push(BIG_CONN, "binary", 0, bytes([0, 0xff, 0x80]))
         .push(1, "close", 1000, b"bye")
         .push(2, "close", 1006, b""))
    valid = [
        case("every-kind",
             "one event of each kind as the gateway packs them; the conn of "
             "events 1 and 2 checks byte order",
             b.headers, b.data, pack_event,
             events=[
                 {"kind": "open", "conn": 1, "target": "/chat/lobby?token=x",
                  "params": [["room", "lobby"]], "attachment_hex": "07" + b"id".hex()},
                 {"kind": "text", "conn": BIG_CONN, "text": "héllo"},
                 {"kind": "binary", "conn": BIG_CONN, "payload_hex": "00ff80"},
                 {"kind": "close", "conn": 1, "code": 1000, "reason": "bye"},
                 {"kind": "close", "conn": 2, "code": 1006, "reason": ""},
             ]),
        case("empty", "a batch with no events", [], b"", pack_event, events=[]),
        case("unknown-kind-skipped",
             "a kind a newer host may send is skipped (its range is still "
             "checked); the reserved byte is not looked at",
             [event_header(5, 200, 0, 0, 2), event_header(5, EVENT["binary"], 0, 0, 2, reserved=1)],
             b"ab", pack_event,
             events=[{"kind": "binary", "conn": 5, "payload_hex": "6162"}]),
    ]
    pusher = (Batch()
              .push(5, "pusher-connect", 0,
                    rt_request(1, "/app/k?protocol=7", "1.2", "", b"host: a"))
              .push(5, "pusher-subscribe", 0,
                    rt_request(2, "presence-r", "1.2", "ann", b'{"user_id":"ann"}',
                               bytes([2]) + b"k:x"))
              .push(5, "pusher-client-event", 0,
                    rt_request(3, "private-c", "1.2", "", b"client-m", b'"hi"')))
    realtime_valid = [
        case("rt-kinds",
             "a real-time namespace guest's questions (packed-only kinds 12 "
             "and 13): call id, channel, client, user, token info, publication",
             (Batch()
              .push(4, "rt-subscribe", 0, rt_request(9, "chat:room", "c-1", "ann", b'{"n":1}'))
              .push(4, "rt-publish", 0, rt_request(10, "chat:room", "c-1", "", b"",
                                                   b'{"t":"hi"}'))).headers,
             (Batch()
              .push(4, "rt-subscribe", 0, rt_request(9, "chat:room", "c-1", "ann", b'{"n":1}'))
              .push(4, "rt-publish", 0, rt_request(10, "chat:room", "c-1", "", b"",
                                                   b'{"t":"hi"}'))).data,
             pack_event,
             events=[
                 {"kind": "rt-subscribe", "conn": 4, "call": 9, "channel": "chat:room",
                  "client": "c-1", "user": "ann", "info_hex": b'{"n":1}'.hex()},
                 {"kind": "rt-publish", "conn": 4, "call": 10, "channel": "chat:room",
                  "client": "c-1", "user": "", "info_hex": "",
                  "data_hex": b'{"t":"hi"}'.hex()},
             ]),
        case("pusher-kinds",
             "a Pusher app guest's questions (packed-only kinds 14, 15, 16), "
             "an rt request each: connect (channel: the request target, "
             "info: header lines), subscribe (info: channel_data; rest: the "
             "signature check 0 none, 1 passed, 2 failed, then the auth), "
             "client event (info: the event name; rest: its data)",
             pusher.headers, pusher.data, pack_event,
             events=[
                 {"kind": "pusher-connect", "conn": 5, "call": 1,
                  "channel": "/app/k?protocol=7", "client": "1.2", "user": "",
                  "info_hex": b"host: a".hex()},
                 {"kind": "pusher-subscribe", "conn": 5, "call": 2,
                  "channel": "presence-r", "client": "1.2", "user": "ann",
                  "info_hex": b'{"user_id":"ann"}'.hex(), "signature": "failed",
                  "auth": "k:x"},
                 {"kind": "pusher-client-event", "conn": 5, "call": 3,
                  "channel": "private-c", "client": "1.2", "user": "",
                  "info_hex": b"client-m".hex(), "data_hex": b'"hi"'.hex()},
             ]),
        case("realtime-reads",
             "history and presence answers (packed-only kinds 10 and 11): "
             "code 0 with the position and publications or the members, or "
             "a read-error code with the tag alone",
             reads.headers, reads.data, pack_event,
             events=[
                 {"kind": "history", "conn": 1, "tag": 7, "offset": 12, "epoch": "ep",
                  "publications": [[11, '"a"'], [12, "{}"]]},
                 {"kind": "history", "conn": 0, "tag": 8, "error": 2},
                 {"kind": "presence", "conn": 1, "tag": 9, "members": [
                     {"client": "c1", "user": "u1", "conn_info": '{"n":1}'},
                     {"client": "c2", "user": "", "conn_info": ""}]},
                 {"kind": "presence", "conn": 1, "tag": 10, "error": 3},
             ]),
    ]
    invalid = [
        case("headers-not-whole", "19 header bytes", [], b"", pack_event,
             error="HeadersNotWhole", index=None),
        case("range-out-of-bounds", "bytes 1..4 of a 3-byte buffer",
             [event_header(1, EVENT["binary"], 0, 1, 3)], b"abc", pack_event,
             error="RangeOutOfBounds", index=0),
        case("text-not-utf8", "a text event whose payload is not UTF-8",
             [event_header(1, EVENT["binary"], 0, 0, 1), event_header(1, EVENT["text"], 0, 0, 2)],
             bytes([0xc3, 0x28]), pack_event, error="TextNotUtf8", index=1),
        case("conn-info-not-utf8", "an open event whose target is not UTF-8",
             [event_header(1, EVENT["open"], 0, 0, 5)], struct.pack("<I", 1) + bytes([0xff]),
             pack_event, error="ConnInfoMalformed", index=0),
        case("conn-info-truncated",
             "an open event announcing a parameter its bytes do not hold",
             [event_header(1, EVENT["binary"], 0, 0, 0), event_header(1, EVENT["open"], 0, 0, 10)],
             conn_info("/a") [:6] + struct.pack("<I", 1), pack_event,
             error="ConnInfoMalformed", index=1),
        case("reason-not-utf8", "a close event whose reason is not UTF-8",
             [event_header(1, EVENT["close"], 1000, 0, 1)], bytes([0xff]), pack_event,
             error="ReasonNotUtf8", index=0),
    ]
    realtime_invalid = [
        case("history-truncated",
             "a history answer whose publication claims more bytes than it has",
             [event_header(1, EVENT["history"], 0, 0, 34)],
             struct.pack("<QQ", 1, 1) + sized(b"") + struct.pack("<QI", 1, 9) + b"{}",
             pack_event, error="IoEventMalformed", index=0),
        case("pusher-subscribe-check-unknown",
             "a pusher-subscribe whose signature check byte is 3 (0-2 only)",
             [event_header(1, EVENT["pusher-subscribe"], 0, 0, 27)],
             rt_request(2, "p", "s", "", b"", bytes([3])),
             pack_event, error="IoEventMalformed", index=0),
    ]
    invalid[0]["headers_hex"] = "00" * 19
    del invalid[0]["headers"]  # not whole headers: nothing to decode
    return ({"about": "event batches, host to guest; see README.md",
             "valid": valid, "invalid": invalid},
            {"about": "real-time kinds (history and presence answers of realtime guest routes, a namespace guest's rt-subscribe and rt-publish, a Pusher app guest's questions), read by the Rust, JavaScript and Python codecs; see README.md",
             "valid": realtime_valid, "invalid": realtime_invalid})


def commands():
    a = (Answer()
         .push(1, "send-text", payload="héllo".encode())
         .push(BIG_CONN, "send-binary", payload=bytes([0, 0xff]))
         .push(3, "close", 4000, payload=b"done")
         .push(0, "publish-text", topic=b"room", payload=b"hi all", has_topic=True)
         .push(4, "publish-binary", topic=b"room", payload=bytes([1, 2]), has_topic=True)
         .push(4, "subscribe", topic=b"room", has_topic=True)
         .push(4, "unsubscribe", topic=b"lobby", has_topic=True)
         .push(4, "set-attachment", payload=b"state"))
    reads = (Answer()
             .push(1, "history-read", topic=struct.pack("<QIB", 4, 20, 1) + b"chat:room",
                   has_topic=True)
             .push(0, "presence-read", topic=struct.pack("<Q", 5) + b"chat:room",
                   has_topic=True))
    reason = "é" * 100
    repaired = (Answer()
                .push(7, "close", 1005, payload=reason.encode())
                .push(8, "close", 999, payload=b"")
                .push(9, "set-attachment", payload=b""))
    valid = [
        case("every-kind",
             "one command of each kind as weir-guest packs them",
             a.headers, a.data, pack_command,
             commands=[
                 {"kind": "send-text", "conn": 1, "text": "héllo"},
                 {"kind": "send-binary", "conn": BIG_CONN, "payload_hex": "00ff"},
                 {"kind": "close", "conn": 3, "code": 4000, "reason": "done"},
                 {"kind": "publish-text", "topic": "room", "text": "hi all", "exclude": None},
                 {"kind": "publish-binary", "topic": "room", "payload_hex": "0102", "exclude": 4},
                 {"kind": "subscribe", "conn": 4, "topic": "room"},
                 {"kind": "unsubscribe", "conn": 4, "topic": "lobby"},
                 {"kind": "set-attachment", "conn": 4, "attachment_hex": "7374617465"},
             ]),
        case("close-repaired",
             "a code that may not be sent becomes 1011; a 200-byte reason is "
             "cut to 122 bytes (the last character boundary within 123); an "
             "empty attachment clears it",
             repaired.headers, repaired.data, pack_command,
             commands=[
                 {"kind": "close", "conn": 7, "code": 1011, "reason": "é" * 61},
                 {"kind": "close", "conn": 8, "code": 1011, "reason": ""},
                 {"kind": "set-attachment", "conn": 9, "attachment_hex": ""},
             ]),
        case("shared-bytes",
             "ranges may overlap and reuse bytes; a kind without a topic may "
             "still carry an in-bounds topic range",
             [command_header(1, COMMAND["send-text"], payload=(0, 4)),
              command_header(2, COMMAND["send-binary"], topic=(0, 2), payload=(2, 2)),
              command_header(0, COMMAND["publish-text"], topic=(0, 2), payload=(0, 4))],
             b"abcd", pack_command,
             commands=[
                 {"kind": "send-text", "conn": 1, "text": "abcd"},
                 {"kind": "send-binary", "conn": 2, "payload_hex": "6364"},
                 {"kind": "publish-text", "topic": "ab", "text": "abcd", "exclude": None},
             ]),
        case("empty", "an answer with no commands", [], b"", pack_command, commands=[]),
    ]
    realtime_valid = [
        case("rt-verdicts",
             "a real-time namespace guest's verdicts (packed-only kinds 17 and "
             "18): the call id is the 8-byte meta; byte 9 of 18 is pass 0, "
             "replace 1 (payload: the data), drop 2 (code: the client's error)",
             [command_header(4, COMMAND["rt-subscribe-verdict"], 0, topic=(0, 8)),
              command_header(4, COMMAND["rt-subscribe-verdict"], 4403, topic=(0, 8)),
              command_header(4, COMMAND["rt-publish-verdict"], 0, topic=(0, 8)),
              command_header(4, COMMAND["rt-publish-verdict"], 0, topic=(0, 8),
                             payload=(8, 2), reserved=1),
              command_header(4, COMMAND["rt-publish-verdict"], 103, topic=(0, 8), reserved=2)],
             struct.pack("<Q", 9) + b"{}", pack_command,
             commands=[
                 {"kind": "rt-subscribe-verdict", "conn": 4, "call": 9, "code": 0},
                 {"kind": "rt-subscribe-verdict", "conn": 4, "call": 9, "code": 4403},
                 {"kind": "rt-publish-verdict", "conn": 4, "call": 9, "verdict": "pass"},
                 {"kind": "rt-publish-verdict", "conn": 4, "call": 9, "verdict": "replace",
                  "data_hex": "7b7d"},
                 {"kind": "rt-publish-verdict", "conn": 4, "call": 9, "verdict": "drop",
                  "code": 103},
             ]),
        case("pusher-verdicts",
             "a Pusher app guest's rt-subscribe-verdicts: byte 9 1 authorises "
             "(payload: the presence channel data), a refusal's payload is "
             "its message (UTF-8)",
             [command_header(4, COMMAND["rt-subscribe-verdict"], 0, topic=(0, 8),
                             payload=(8, 15), reserved=1),
              command_header(4, COMMAND["rt-subscribe-verdict"], 403, topic=(0, 8),
                             payload=(23, 2))],
             struct.pack("<Q", 9) + b'{"user_id":"a"}' + b"no", pack_command,
             commands=[
                 {"kind": "rt-subscribe-verdict", "conn": 4, "call": 9, "code": 0,
                  "authorise": True, "payload": '{"user_id":"a"}'},
                 {"kind": "rt-subscribe-verdict", "conn": 4, "call": 9, "code": 403,
                  "authorise": False, "payload": "no"},
             ]),
        case("realtime-reads",
             "history-read (meta: tag, limit u32, reverse u8, channel) and "
             "presence-read (meta: tag, channel), packed-only kinds 15 and 16",
             reads.headers, reads.data, pack_command,
             commands=[
                 {"kind": "history-read", "conn": 1, "tag": 4, "limit": 20, "reverse": True,
                  "channel": "chat:room"},
                 {"kind": "presence-read", "conn": 0, "tag": 5, "channel": "chat:room"},
             ]),
    ]
    ok = command_header(1, COMMAND["send-binary"], payload=(0, 1))
    invalid = [
        case("headers-not-whole", "29 header bytes", [], b"", pack_command,
             error="HeadersNotWhole", index=None),
        case("reserved-byte-set", "byte 9 of the second header is 1",
             [ok, command_header(1, COMMAND["send-binary"], reserved=1)], b"x",
             pack_command, error="ReservedByteSet", index=1),
        case("payload-out-of-bounds", "payload 2+5 of a 4-byte buffer",
             [command_header(1, COMMAND["send-binary"], payload=(2, 5))], b"abcd",
             pack_command, error="RangeOutOfBounds", index=0),
        case("topic-out-of-bounds",
             "topic 3+2 of a 4-byte buffer, on a kind that has no topic",
             [command_header(1, COMMAND["send-binary"], topic=(3, 2))], b"abcd",
             pack_command, error="RangeOutOfBounds", index=0),
        case("range-wraps", "offset and len both 2**32-1: the end must not wrap",
             [command_header(1, COMMAND["send-binary"], payload=(0xFFFFFFFF, 0xFFFFFFFF))],
             b"abcd", pack_command, error="RangeOutOfBounds", index=0),
        case("unknown-kind", "kind 255 (weir:gateway 0.4.0 defines 0 to 18)",
             [command_header(1, 255)], b"", pack_command, error="UnknownKind", index=0),

        case("text-not-utf8", "send-text of 0xff 0xfe",
             [command_header(1, COMMAND["send-text"], payload=(0, 2))], bytes([0xff, 0xfe]),
             pack_command, error="TextNotUtf8", index=0),
        case("publish-text-not-utf8", "publish-text with a payload cut inside a character",
             [command_header(0, COMMAND["publish-text"], topic=(0, 1), payload=(1, 1))],
             "té".encode(), pack_command, error="TextNotUtf8", index=0),
        case("reason-not-utf8", "close reason 0xff",
             [command_header(1, COMMAND["close"], 1000, payload=(0, 1))], bytes([0xff]),
             pack_command, error="ReasonNotUtf8", index=0),
        case("empty-topic", "subscribe to the empty topic",
             [command_header(1, COMMAND["subscribe"])], b"", pack_command,
             error="EmptyTopic", index=0),
        case("topic-not-utf8", "publish-binary to topic 0xff",
             [command_header(0, COMMAND["publish-binary"], topic=(0, 1))], bytes([0xff]),
             pack_command, error="TopicNotUtf8", index=0),
        case("first-violation-wins",
             "header 0 has an unknown kind and a bad range: the range is checked first",
             [command_header(1, 200, payload=(9, 9))], b"", pack_command,
             error="RangeOutOfBounds", index=0),
    ]
    invalid[0]["headers_hex"] = pack_command(ok).hex() + "00"
    invalid[0]["data_hex"] = "78"
    del invalid[0]["headers"]  # not whole headers: nothing to decode
    realtime_invalid = [
        case("rt-verdict-decision-unknown", "an rt-publish-verdict whose byte 9 is 3",
             [command_header(4, COMMAND["rt-publish-verdict"], topic=(0, 8), reserved=3)],
             struct.pack("<Q", 9), pack_command, error="ReservedByteSet", index=0),
        case("rt-subscribe-verdict-decision-unknown",
             "an rt-subscribe-verdict whose byte 9 is 2 (0 allow, 1 authorise)",
             [command_header(4, COMMAND["rt-subscribe-verdict"], topic=(0, 8), reserved=2)],
             struct.pack("<Q", 9), pack_command, error="ReservedByteSet", index=0),
        case("rt-subscribe-verdict-not-utf8",
             "an rt-subscribe-verdict whose payload (a message) is not UTF-8",
             [command_header(4, COMMAND["rt-subscribe-verdict"], 403, topic=(0, 8),
                             payload=(8, 1))],
             struct.pack("<Q", 9) + bytes([0xff]), pack_command, error="TextNotUtf8", index=0),
        case("rt-verdict-call-short", "an rt-subscribe-verdict with 7 bytes of meta",
             [command_header(4, COMMAND["rt-subscribe-verdict"], topic=(0, 7))],
             struct.pack("<Q", 9), pack_command, error="MetaMalformed", index=0),
        case("history-read-malformed",
             "a history-read whose reverse byte is 2 (0 or 1 only)",
             [command_header(1, COMMAND["history-read"], topic=(0, 14))],
             struct.pack("<QIB", 1, 10, 2) + b"c", pack_command,
             error="MetaMalformed", index=0),
        case("presence-read-no-channel",
             "a presence-read whose meta is the tag alone",
             [command_header(1, COMMAND["presence-read"], topic=(0, 8))],
             struct.pack("<Q", 1), pack_command,
             error="MetaMalformed", index=0),
    ]
    return ({"about": "guest answers, guest to host; see README.md",
             "valid": valid, "invalid": invalid},
            {"about": "real-time kinds (history-read and presence-read of realtime guest routes, a namespace guest's rt-subscribe, rt-publish and verdicts, a Pusher app guest's verdicts), read by the Rust, JavaScript and Python codecs; see README.md",
             "valid": realtime_valid, "invalid": realtime_invalid})


def io():
    """weir:gateway 0.4.0's I/O kinds (abi/src/io.rs): events 4-6 and 9,
    commands 8-12, packed as the gateway and the SDKs pack them."""
    head = b"content-type: text/plain"
    b = (Batch()
         .push(1, "http-response", 200, struct.pack("<QI", BIG_CONN, len(head)) + head + b"hi")
         .push(0, "http-error", 2, struct.pack("<Q", 8) + b"timed out")
         .push(1, "timer", 0, struct.pack("<Q", 9))
         .push(0, "kv-error", 2, b"k"))
    events_valid = [
        case("io-kinds",
             "an http-response (tag, head length, head, body; code the "
             "status), an http-error (tag, message; code the reason), a "
             "timer (tag) and a kv-error (code the reason, bytes the key)",
             b.headers, b.data, pack_event,
             events=[
                 {"kind": "http-response", "conn": 1, "tag": BIG_CONN, "status": 200,
                  "head": "content-type: text/plain", "body_hex": b"hi".hex()},
                 {"kind": "http-error", "conn": 0, "tag": 8, "reason": 2, "message": "timed out"},
                 {"kind": "timer", "conn": 1, "tag": 9},
                 {"kind": "kv-error", "conn": 0, "reason": 2, "key_hex": b"k".hex()},
             ]),
    ]
    bad_head = struct.pack("<QI", 1, 50) + b"short"
    events_invalid = [
        case("http-response-head-past-end", "the head's length runs past the event's bytes",
             [event_header(1, EVENT["http-response"], 200, 0, len(bad_head))], bad_head, pack_event,
             error="IoEventMalformed", index=0),
        case("timer-not-a-tag", "a timer's bytes are 8 (its tag)",
             [event_header(1, EVENT["text"], 0, 0, 2), event_header(1, EVENT["timer"], 0, 2, 7)],
             b"ok" + bytes(7), pack_event, error="IoEventMalformed", index=1),
        case("http-error-not-utf8", "an http-error's message is UTF-8",
             [event_header(1, EVENT["http-error"], 3, 0, 9)], struct.pack("<Q", 1) + b"\xff",
             pack_event, error="IoEventMalformed", index=0),
    ]

    data = b""
    headers = []

    def put(x):
        nonlocal data
        r = (len(data), len(x))
        data += x
        return r

    req_head = b"POST http://h:1/x\ncontent-type: text/plain"
    meta = put(struct.pack("<Q", 7) + req_head)
    headers.append(command_header(3, COMMAND["http-request"], 0, meta, put(b"hi")))
    headers.append(command_header(0, COMMAND["set-timer"], 0, put(struct.pack("<QQ", 8, 1500))))
    headers.append(command_header(3, COMMAND["cancel-timer"], 0, put(struct.pack("<Q", 8))))
    meta = put(struct.pack("<Q", 60000) + b"k")
    headers.append(command_header(0, COMMAND["kv-set"], 0, meta, put(b"v")))
    headers.append(command_header(0, COMMAND["kv-delete"], 0, put(b"k")))
    commands_valid = [
        case("io-kinds",
             "one I/O command of each kind as weir-guest and the JS SDK pack "
             "them: the fixed fields in the topic range (meta), the body or "
             "value as the payload",
             headers, data, pack_command,
             commands=[
                 {"kind": "http-request", "conn": 3, "tag": 7, "head": req_head.decode(),
                  "body_hex": b"hi".hex()},
                 {"kind": "set-timer", "conn": 0, "tag": 8, "delay_ms": 1500},
                 {"kind": "cancel-timer", "conn": 3, "tag": 8},
                 {"kind": "kv-set", "key_hex": b"k".hex(), "value_hex": b"v".hex(), "ttl_ms": 60000},
                 {"kind": "kv-delete", "key_hex": b"k".hex()},
             ]),
    ]

    def meta_case(name, about, kind, meta_bytes):
        return case(name, about, [command_header(1, COMMAND[kind], 0, (0, len(meta_bytes)))],
                    meta_bytes, pack_command, error="MetaMalformed", index=0)

    commands_invalid = [
        meta_case("http-request-no-tag", "an http-request's meta starts with an 8-byte tag",
                  "http-request", bytes(7)),
        meta_case("http-request-head-not-utf8", "an http-request's head is UTF-8",
                  "http-request", bytes(8) + b"GET \xff"),
        meta_case("set-timer-short", "a set-timer's meta is tag and delay, 16 bytes",
                  "set-timer", bytes(15)),
        meta_case("cancel-timer-long", "a cancel-timer's meta is the tag, 8 bytes",
                  "cancel-timer", bytes(9)),
        meta_case("kv-set-no-key", "a kv-set's meta is the ttl and a key of one byte or more",
                  "kv-set", bytes(8)),
        meta_case("kv-delete-no-key", "a kv-delete's meta is the key, not empty",
                  "kv-delete", b""),
    ]
    about = ("weir:gateway 0.4.0's I/O kinds (outbound HTTP, timers, key-value; "
             "layouts in abi/src/io.rs), read by the Rust and JavaScript tests; see README.md")
    return ({"about": about, "valid": events_valid, "invalid": events_invalid},
            {"about": about, "valid": commands_valid, "invalid": commands_invalid})


def proxy():
    """A proxy route's filter kinds (abi/src/lib.rs): events proxy-text 7
    and proxy-binary 8, commands forward-text 13 and forward-binary 14,
    byte 9 of each header the direction (0 client to upstream, 1 upstream
    to client)."""
    events_valid = [
        case("proxy-messages",
             "a text message on its way to the upstream and a binary one on "
             "its way to the client (byte 9: the direction)",
             [event_header(3, EVENT["proxy-text"], 0, 0, 2),
              event_header(3, EVENT["proxy-binary"], 0, 2, 1, reserved=1)],
             b"up\xff", pack_event,
             events=[
                 {"kind": "proxy-text", "conn": 3, "direction": 0, "text": "up"},
                 {"kind": "proxy-binary", "conn": 3, "direction": 1, "payload_hex": "ff"},
             ]),
    ]
    events_invalid = [
        case("proxy-direction-unknown", "a proxy event's byte 9 is 0 or 1",
             [event_header(3, EVENT["proxy-binary"], 0, 0, 1, reserved=2)], b"\x01",
             pack_event, error="ReservedByteSet", index=0),
        case("proxy-text-not-utf8", "a proxy-text event's payload is UTF-8",
             [event_header(3, EVENT["proxy-text"], 0, 0, 1)], b"\xff",
             pack_event, error="TextNotUtf8", index=0),
    ]
    commands_valid = [
        case("proxy-forwards",
             "a filter passes a text message on toward the upstream and a "
             "binary one toward the client (byte 9: the direction)",
             [command_header(3, COMMAND["forward-text"], 0, (0, 0), (0, 2)),
              command_header(3, COMMAND["forward-binary"], 0, (0, 0), (2, 1), reserved=1)],
             b"up\xff", pack_command,
             commands=[
                 {"kind": "forward-text", "conn": 3, "direction": 0, "text": "up"},
                 {"kind": "forward-binary", "conn": 3, "direction": 1, "payload_hex": "ff"},
             ]),
    ]
    commands_invalid = [
        case("forward-direction-unknown", "a forward's byte 9 is 0 or 1",
             [command_header(3, COMMAND["forward-binary"], 0, (0, 0), (0, 1), reserved=2)],
             b"\x01", pack_command, error="ReservedByteSet", index=0),
        case("forward-text-not-utf8", "a forward-text's payload is UTF-8",
             [command_header(3, COMMAND["forward-text"], 0, (0, 0), (0, 1))],
             b"\xff", pack_command, error="TextNotUtf8", index=0),
    ]
    about = ("a proxy route filter's kinds (packed layout only; abi/src/lib.rs), read by "
             "the Rust, JavaScript and Python tests; see README.md")
    return ({"about": about, "valid": events_valid, "invalid": events_invalid},
            {"about": about, "valid": commands_valid, "invalid": commands_invalid})


def write(name, doc):
    with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    events_doc, realtime_events = events()
    commands_doc, realtime_commands = commands()
    write("events.json", events_doc)
    write("commands.json", commands_doc)
    write("realtime-events.json", realtime_events)
    write("realtime-commands.json", realtime_commands)
    io_events, io_commands = io()
    write("io-events.json", io_events)
    write("io-commands.json", io_commands)
    proxy_events, proxy_commands = proxy()
    write("proxy-events.json", proxy_events)
    write("proxy-commands.json", proxy_commands)
