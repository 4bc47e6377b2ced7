//! Holds weir-abi to the shared test vectors in abi/vectors/ (written by an
//! independent Python packer, make_vectors.py): every header packs to the
//! vector's bytes and unpacks to its fields, every valid case decodes to the
//! listed events or commands, every invalid one fails with the named error.

use serde_json::{json, Value};
use weir_abi::{
    parse_commands, parse_events, AbiError, Command, CommandHeader, Event, EventHeader,
    ProxyMessage, RtVerdict, COMMAND_HEADER_BYTES, EVENT_HEADER_BYTES,
};

const EVENTS: &str = include_str!("../vectors/events.json");
const COMMANDS: &str = include_str!("../vectors/commands.json");
const REALTIME_EVENTS: &str = include_str!("../vectors/realtime-events.json");
const REALTIME_COMMANDS: &str = include_str!("../vectors/realtime-commands.json");
const IO_EVENTS: &str = include_str!("../vectors/io-events.json");
const IO_COMMANDS: &str = include_str!("../vectors/io-commands.json");
const PROXY_EVENTS: &str = include_str!("../vectors/proxy-events.json");
const PROXY_COMMANDS: &str = include_str!("../vectors/proxy-commands.json");

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex {s}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn num(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

/// The variant name of an error, as the vectors spell it.
fn name(e: &AbiError) -> String {
    let debug = format!("{e:?}");
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or_default()
        .to_string()
}

/// `vectors[set]` with at least one case: a vector file that lost its cases
/// must not pass by checking nothing.
fn cases<'a>(vectors: &'a Value, set: &str) -> &'a Vec<Value> {
    let cases = vectors[set].as_array().expect("a list of cases");
    assert!(!cases.is_empty(), "no {set} cases");
    cases
}

fn event_header(v: &Value) -> EventHeader {
    EventHeader {
        conn: num(v, "conn"),
        kind: num(v, "kind") as u8,
        reserved: num(v, "reserved") as u8,
        code: num(v, "code") as u16,
        offset: num(v, "offset") as u32,
        len: num(v, "len") as u32,
    }
}

fn command_header(v: &Value) -> CommandHeader {
    CommandHeader {
        conn: num(v, "conn"),
        kind: num(v, "kind") as u8,
        reserved: num(v, "reserved") as u8,
        code: num(v, "code") as u16,
        topic_offset: num(v, "topic_offset") as u32,
        topic_len: num(v, "topic_len") as u32,
        offset: num(v, "offset") as u32,
        len: num(v, "len") as u32,
    }
}

/// Packing the listed header fields gives `headers_hex`; unpacking its
/// bytes gives the fields back.
fn check_headers<H: PartialEq + std::fmt::Debug, const N: usize>(
    case: &Value,
    from_json: fn(&Value) -> H,
    encode: fn(&H) -> [u8; N],
    decode: fn(&[u8; N]) -> H,
) {
    let Some(fields) = case["headers"].as_array() else {
        return;
    };
    let name = &case["name"];
    let want: Vec<H> = fields.iter().map(from_json).collect();
    let packed: Vec<u8> = want.iter().flat_map(encode).collect();
    assert_eq!(hex(&packed), case["headers_hex"], "{name}: pack");
    let bytes = unhex(case["headers_hex"].as_str().expect("headers_hex"));
    let (chunks, rest) = bytes.as_chunks::<N>();
    assert!(rest.is_empty(), "{name}: whole headers");
    let got: Vec<H> = chunks.iter().map(decode).collect();
    assert_eq!(got, want, "{name}: unpack");
}

fn buffers(case: &Value) -> (Vec<u8>, Vec<u8>) {
    (
        unhex(case["headers_hex"].as_str().expect("headers_hex")),
        unhex(case["data_hex"].as_str().expect("data_hex")),
    )
}

fn check_error(case: &Value, got: AbiError) {
    let n = &case["name"];
    assert_eq!(name(&got), case["error"], "{n}: {got}");
    let index = match got {
        AbiError::HeadersNotWhole { .. } => None,
        AbiError::ReservedByteSet { index, .. }
        | AbiError::RangeOutOfBounds { index, .. }
        | AbiError::UnknownKind { index, .. }
        | AbiError::TextNotUtf8 { index }
        | AbiError::ReasonNotUtf8 { index }
        | AbiError::EmptyTopic { index }
        | AbiError::TopicNotUtf8 { index }
        | AbiError::ConnInfoMalformed { index }
        | AbiError::MetaMalformed { index }
        | AbiError::IoEventMalformed { index } => Some(index as u64),
    };
    assert_eq!(index, case["index"].as_u64(), "{n}: index");
}

fn event_json(e: Event<'_>) -> Value {
    match e {
        Event::Open { conn, info } => json!({
            "kind": "open",
            "conn": conn,
            "target": info.target,
            "params": info.params().map(|(n, v)| json!([n, v])).collect::<Vec<_>>(),
            "attachment_hex": hex(info.attachment),
        }),
        Event::Text { conn, text } => json!({"kind": "text", "conn": conn, "text": text}),
        Event::Binary { conn, payload } => {
            json!({"kind": "binary", "conn": conn, "payload_hex": hex(payload)})
        }
        Event::Close { conn, code, reason } => {
            json!({"kind": "close", "conn": conn, "code": code, "reason": reason})
        }
        Event::HttpResponse {
            conn,
            tag,
            status,
            head,
            body,
        } => json!({"kind": "http-response", "conn": conn, "tag": tag, "status": status,
            "head": head, "body_hex": hex(body)}),
        Event::HttpError {
            conn,
            tag,
            reason,
            message,
        } => json!({"kind": "http-error", "conn": conn, "tag": tag, "reason": reason,
            "message": message}),
        Event::Timer { conn, tag } => json!({"kind": "timer", "conn": conn, "tag": tag}),
        Event::KvError { conn, reason, key } => {
            json!({"kind": "kv-error", "conn": conn, "reason": reason, "key_hex": hex(key)})
        }
        Event::Proxy {
            conn,
            direction,
            msg,
        } => {
            let direction = direction as u8;
            match msg {
                ProxyMessage::Text(text) => json!({"kind": "proxy-text", "conn": conn,
                    "direction": direction, "text": text}),
                ProxyMessage::Binary(payload) => json!({"kind": "proxy-binary", "conn": conn,
                    "direction": direction, "payload_hex": hex(payload)}),
            }
        }
        Event::RtSubscribe { conn, req } => json!({"kind": "rt-subscribe", "conn": conn,
            "call": req.call, "channel": req.channel, "client": req.client, "user": req.user,
            "info_hex": hex(req.info)}),
        Event::RtPublish { conn, req, data } => json!({"kind": "rt-publish", "conn": conn,
            "call": req.call, "channel": req.channel, "client": req.client, "user": req.user,
            "info_hex": hex(req.info), "data_hex": hex(data)}),
        Event::PusherConnect { conn, req } => json!({"kind": "pusher-connect", "conn": conn,
            "call": req.call, "channel": req.channel, "client": req.client, "user": req.user,
            "info_hex": hex(req.info)}),
        Event::PusherSubscribe {
            conn,
            req,
            check,
            auth,
        } => json!({"kind": "pusher-subscribe", "conn": conn, "call": req.call,
            "channel": req.channel, "client": req.client, "user": req.user,
            "info_hex": hex(req.info), "signature": check.as_str(), "auth": auth}),
        Event::PusherClientEvent { conn, req, data } => json!({"kind": "pusher-client-event",
            "conn": conn, "call": req.call, "channel": req.channel, "client": req.client,
            "user": req.user, "info_hex": hex(req.info), "data_hex": hex(data)}),
        Event::History { conn, tag, result } => match result {
            Ok(h) => json!({"kind": "history", "conn": conn, "tag": tag, "offset": h.offset,
                "epoch": h.epoch,
                "publications": h.publications.map(|(o, d)| json!([o, d])).collect::<Vec<_>>()}),
            Err(code) => json!({"kind": "history", "conn": conn, "tag": tag, "error": code}),
        },
        Event::Presence { conn, tag, result } => match result {
            Ok(members) => json!({"kind": "presence", "conn": conn, "tag": tag,
                "members": members.map(|m| json!({"client": m.client, "user": m.user,
                    "conn_info": m.conn_info})).collect::<Vec<_>>()}),
            Err(code) => json!({"kind": "presence", "conn": conn, "tag": tag, "error": code}),
        },
    }
}

fn command_json(c: Command<'_>) -> Value {
    let text = |text: bool, payload: &[u8]| {
        if text {
            ("text", json!(std::str::from_utf8(payload).expect("UTF-8")))
        } else {
            ("payload_hex", json!(hex(payload)))
        }
    };
    match c {
        Command::Send {
            conn,
            text: t,
            payload,
        } => {
            let (key, value) = text(t, payload);
            let kind = if t { "send-text" } else { "send-binary" };
            json!({"kind": kind, "conn": conn, key: value})
        }
        Command::Close { conn, code, reason } => {
            json!({"kind": "close", "conn": conn, "code": code, "reason": reason})
        }
        Command::Publish {
            topic,
            text: t,
            payload,
            exclude,
        } => {
            let (key, value) = text(t, payload);
            let kind = if t { "publish-text" } else { "publish-binary" };
            json!({"kind": kind, "topic": topic, key: value, "exclude": exclude})
        }
        Command::Subscribe { conn, topic } => {
            json!({"kind": "subscribe", "conn": conn, "topic": topic})
        }
        Command::Unsubscribe { conn, topic } => {
            json!({"kind": "unsubscribe", "conn": conn, "topic": topic})
        }
        Command::SetAttachment { conn, attachment } => {
            json!({"kind": "set-attachment", "conn": conn, "attachment_hex": hex(attachment)})
        }
        Command::HttpRequest {
            conn,
            tag,
            head,
            body,
        } => json!({"kind": "http-request", "conn": conn, "tag": tag, "head": head,
            "body_hex": hex(body)}),
        Command::SetTimer {
            conn,
            tag,
            delay_ms,
        } => json!({"kind": "set-timer", "conn": conn, "tag": tag, "delay_ms": delay_ms}),
        Command::CancelTimer { conn, tag } => {
            json!({"kind": "cancel-timer", "conn": conn, "tag": tag})
        }
        Command::KvSet { key, value, ttl_ms } => json!({"kind": "kv-set", "key_hex": hex(key),
            "value_hex": hex(value), "ttl_ms": ttl_ms}),
        Command::KvDelete { key } => json!({"kind": "kv-delete", "key_hex": hex(key)}),
        Command::Forward {
            conn,
            direction,
            text: t,
            payload,
        } => {
            let (key, value) = text(t, payload);
            let kind = if t { "forward-text" } else { "forward-binary" };
            json!({"kind": kind, "conn": conn, "direction": direction as u8, key: value})
        }
        Command::RtSubscribeVerdict {
            conn,
            call,
            code,
            authorise,
            payload,
        } => {
            let mut v = json!({"kind": "rt-subscribe-verdict", "conn": conn, "call": call,
                "code": code});
            if authorise || !payload.is_empty() {
                v["authorise"] = json!(authorise);
                v["payload"] = json!(payload);
            }
            v
        }
        Command::RtPublishVerdict {
            conn,
            call,
            verdict,
        } => match verdict {
            RtVerdict::Pass => json!({"kind": "rt-publish-verdict", "conn": conn, "call": call,
                "verdict": "pass"}),
            RtVerdict::Replace(data) => json!({"kind": "rt-publish-verdict", "conn": conn,
                "call": call, "verdict": "replace", "data_hex": hex(data)}),
            RtVerdict::Drop(code) => json!({"kind": "rt-publish-verdict", "conn": conn,
                "call": call, "verdict": "drop", "code": code}),
        },
        Command::HistoryRead {
            conn,
            tag,
            limit,
            reverse,
            channel,
        } => json!({"kind": "history-read", "conn": conn, "tag": tag, "limit": limit,
            "reverse": reverse, "channel": channel}),
        Command::PresenceRead { conn, tag, channel } => {
            json!({"kind": "presence-read", "conn": conn, "tag": tag, "channel": channel})
        }
    }
}

/// A header type's reader from the vectors' JSON, packer and unpacker.
type HeaderCodec<H, const N: usize> = (fn(&Value) -> H, fn(&H) -> [u8; N], fn(&[u8; N]) -> H);

/// Checks every case of a vector file: headers pack and unpack to their
/// fields, valid cases parse to `key`'s list, invalid ones to their error.
/// Returns the names of the errors seen.
fn run_vectors<H: PartialEq + std::fmt::Debug, const N: usize>(
    file: &str,
    key: &str,
    header: HeaderCodec<H, N>,
    parse: impl Fn(&[u8], &[u8]) -> Result<Vec<Value>, AbiError>,
) -> Vec<String> {
    let v: Value = serde_json::from_str(file).expect("vector file");
    let mut seen = Vec::new();
    for (group, valid) in [("valid", true), ("invalid", false)] {
        for case in cases(&v, group) {
            check_headers::<_, N>(case, header.0, header.1, header.2);
            let (h, d) = buffers(case);
            if valid {
                let got = parse(&h, &d).unwrap_or_else(|e| panic!("{}: {e}", case["name"]));
                assert_eq!(Value::from(got), case[key], "{}", case["name"]);
            } else {
                let err = parse(&h, &d).expect_err(case["name"].as_str().unwrap_or_default());
                check_error(case, err);
                seen.push(name(&err));
            }
        }
    }
    seen
}

#[test]
fn event_batches_match_the_vectors() {
    for file in [EVENTS, REALTIME_EVENTS, IO_EVENTS, PROXY_EVENTS] {
        run_vectors::<_, EVENT_HEADER_BYTES>(
            file,
            "events",
            (event_header, EventHeader::encode, EventHeader::decode),
            |h, d| Ok(parse_events(h, d)?.iter().map(event_json).collect()),
        );
    }
}

/// The real-time commands: history-read and presence-read (15, 16; a
/// realtime guest route's) and a namespace or Pusher app guest's verdicts
/// (17, 18): the valid ones read back; a malformed meta, a verdict byte
/// that is not one, or a verdict message that is not UTF-8 is refused.
#[test]
fn realtime_reads_match_the_vectors() {
    let seen = run_vectors::<_, COMMAND_HEADER_BYTES>(
        REALTIME_COMMANDS,
        "commands",
        (command_header, CommandHeader::encode, CommandHeader::decode),
        |h, d| Ok(parse_commands(h, d)?.iter().map(command_json).collect()),
    );
    assert!(seen.iter().any(|s| s == "MetaMalformed"), "{seen:?}");
    assert!(seen.iter().any(|s| s == "ReservedByteSet"), "{seen:?}");
    assert!(
        seen.iter()
            .all(|s| s == "MetaMalformed" || s == "ReservedByteSet" || s == "TextNotUtf8"),
        "{seen:?}"
    );
}

/// weir:gateway 0.4.0's I/O commands (8–12), as the JavaScript SDK is held
/// to them too (guest-sdk/js/test/vectors.mjs): the valid ones read back,
/// every malformed meta is refused.
#[test]
fn io_commands_match_the_vectors() {
    let seen = run_vectors::<_, COMMAND_HEADER_BYTES>(
        IO_COMMANDS,
        "commands",
        (command_header, CommandHeader::encode, CommandHeader::decode),
        |h, d| Ok(parse_commands(h, d)?.iter().map(command_json).collect()),
    );
    assert_eq!(seen.len(), 6, "{seen:?}");
    assert!(seen.iter().all(|s| s == "MetaMalformed"), "{seen:?}");
}

/// A proxy filter's forwards (13, 14), as the JavaScript and Python SDKs
/// are held to them too: the valid ones read back; a direction that is not
/// 0 or 1, or a forward-text that is not UTF-8, is refused.
#[test]
fn proxy_forwards_match_the_vectors() {
    let seen = run_vectors::<_, COMMAND_HEADER_BYTES>(
        PROXY_COMMANDS,
        "commands",
        (command_header, CommandHeader::encode, CommandHeader::decode),
        |h, d| Ok(parse_commands(h, d)?.iter().map(command_json).collect()),
    );
    assert_eq!(seen, ["ReservedByteSet", "TextNotUtf8"]);
}

#[test]
fn command_answers_match_the_vectors() {
    let seen = run_vectors::<_, COMMAND_HEADER_BYTES>(
        COMMANDS,
        "commands",
        (command_header, CommandHeader::encode, CommandHeader::decode),
        |h, d| Ok(parse_commands(h, d)?.iter().map(command_json).collect()),
    );
    // Every way a guest's answer can be refused has a vector.
    for variant in [
        "HeadersNotWhole",
        "ReservedByteSet",
        "RangeOutOfBounds",
        "UnknownKind",
        "TextNotUtf8",
        "ReasonNotUtf8",
        "EmptyTopic",
        "TopicNotUtf8",
    ] {
        assert!(seen.iter().any(|s| s == variant), "no vector for {variant}");
    }
}
