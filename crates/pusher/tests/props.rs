//! Property tests: no input panics a parser, channel names survive a trip
//! through a client frame, and every builder writes JSON that reads back as
//! what it was given, whatever the strings hold.

use proptest::prelude::*;
use serde_json::{json, Value};
use weir_pusher::api::{parse_batch, parse_trigger, ApiLimits};
use weir_pusher::auth::{self, AppKey, PresenceMember};
use weir_pusher::channel::{Channel, ChannelKind};
use weir_pusher::client::{parse_client_message, ClientMessage, DEFAULT_MAX_MESSAGE_BYTES};
use weir_pusher::connect::parse_connect_request;
use weir_pusher::http_api::{verify_request, SignedRequest};
use weir_pusher::server;

const APP: AppKey<'static> = AppKey {
    key: "k",
    secret: b"s",
};

/// Frames that look like Pusher messages, so the parser gets past the
/// envelope and into each event's data.
fn framey() -> impl Strategy<Value = String> {
    let event = prop_oneof![
        Just("pusher:ping".to_owned()),
        Just("pusher:subscribe".to_owned()),
        Just("pusher:unsubscribe".to_owned()),
        Just("pusher:signin".to_owned()),
        "client-[a-z]{0,4}",
        ".{0,8}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        ".{0,12}".prop_map(Value::from)
    ];
    let value = leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(
                prop_oneof![
                    Just("channel".to_owned()),
                    Just("auth".to_owned()),
                    Just("channel_data".to_owned()),
                    Just("user_data".to_owned()),
                    "[a-z]{1,3}"
                ],
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    (event, value.clone(), prop::option::of(value), any::<bool>()).prop_map(
        |(event, data, channel, stringify)| {
            let data = if stringify {
                Value::String(data.to_string())
            } else {
                data
            };
            let mut m = json!({"event": event, "data": data});
            if let Some(c) = channel {
                m["channel"] = c;
            }
            m.to_string()
        },
    )
}

/// A valid name, with the kind and cache flag its prefix gives. The rest
/// starts with a character no prefix starts with, so it cannot extend the
/// prefix into a longer one ("private-" + "cache-x").
fn valid_channel() -> impl Strategy<Value = (String, ChannelKind, bool)> {
    let prefix = prop_oneof![
        Just(("", ChannelKind::Public, false)),
        Just(("private-", ChannelKind::Private, false)),
        Just(("private-encrypted-", ChannelKind::PrivateEncrypted, false)),
        Just(("presence-", ChannelKind::Presence, false)),
        Just(("cache-", ChannelKind::Public, true)),
        Just(("private-cache-", ChannelKind::Private, true)),
        Just(("presence-cache-", ChannelKind::Presence, true)),
        Just((
            "private-encrypted-cache-",
            ChannelKind::PrivateEncrypted,
            true
        )),
    ];
    (prefix, "[A-Z0-9_=@,.;][A-Za-z0-9_=@,.;-]{0,130}")
        .prop_map(|((p, kind, cache), rest)| (format!("{p}{rest}"), kind, cache))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic_the_parsers(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = parse_client_message(&text, DEFAULT_MAX_MESSAGE_BYTES);
        let _ = parse_client_message(&text, 8);
        let _ = Channel::parse(&text);
        let _ = PresenceMember::parse(Some(&text));
        let _ = auth::signin_user_id(&text);
        let _ = auth::verify_channel(&APP, "1.1", "private-a", Some(&text), Some(&text));
        let _ = parse_trigger(&bytes, &ApiLimits::default());
        let _ = parse_batch(&bytes, &ApiLimits::default());
        let _ = parse_connect_request(&text, &text);
        let _ = verify_request(&APP, &SignedRequest { method: "POST", path: "/", query: &text, body: &bytes }, 0, 600);
    }

    #[test]
    fn message_shaped_input_never_panics(frame in framey()) {
        let _ = parse_client_message(&frame, DEFAULT_MAX_MESSAGE_BYTES);
    }

    #[test]
    fn channel_names_round_trip((name, kind, cache) in valid_channel()) {
        let channel = Channel::parse(&name).unwrap();
        prop_assert_eq!(channel.name(), name.as_str());
        prop_assert_eq!(channel.kind(), kind);
        prop_assert_eq!(channel.is_cache(), cache);
        prop_assert_eq!(channel.needs_auth(), kind != ChannelKind::Public);
        // Through a client frame (data as an object and as a string) and back.
        let frame = json!({"event": "pusher:subscribe", "data": {"channel": name, "auth": ""}}).to_string();
        let ClientMessage::Subscribe(sub) = parse_client_message(&frame, DEFAULT_MAX_MESSAGE_BYTES).unwrap() else { panic!() };
        prop_assert_eq!(&sub.channel, &channel);
        let inner = json!({"channel": name}).to_string();
        let frame = json!({"event": "pusher:unsubscribe", "data": inner}).to_string();
        let ClientMessage::Unsubscribe { channel: back } = parse_client_message(&frame, DEFAULT_MAX_MESSAGE_BYTES).unwrap() else { panic!() };
        prop_assert_eq!(back, channel);
    }

    #[test]
    fn builders_write_json_that_reads_back(event in ".{0,20}", channel in ".{0,20}", data in ".{0,64}", user in prop::option::of(".{1,10}")) {
        let m: Value = serde_json::from_str(&server::event(&event, &channel, &data, user.as_deref())).unwrap();
        prop_assert_eq!(&m["event"], &Value::from(event.as_str()));
        prop_assert_eq!(&m["channel"], &Value::from(channel.as_str()));
        prop_assert_eq!(&m["data"], &Value::from(data.as_str()));
        let want_user = user.as_deref().map(Value::from);
        prop_assert_eq!(m.get("user_id"), want_user.as_ref());
        let m: Value = serde_json::from_str(&server::member_removed(&channel, &data)).unwrap();
        let inner: Value = serde_json::from_str(m["data"].as_str().unwrap()).unwrap();
        prop_assert_eq!(&inner["user_id"], &Value::from(data.as_str()));
        let m: Value = serde_json::from_str(&server::error(&data, Some(4301))).unwrap();
        prop_assert_eq!(&m["data"]["message"], &Value::from(data.as_str()));
    }
}
