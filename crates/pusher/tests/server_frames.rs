//! weir's server frames as pusher-js reads them. This test builds one frame
//! per builder and pins them to vectors/weir-server-frames.json; replay.mjs
//! serves exactly that file to pusher-js 8.6.0 and records what the app's
//! callbacks received into vectors/pusher-js-received.json, which this test
//! checks. So a builder change that pusher-js would read differently fails
//! here until the file is regenerated and pusher-js has read it again:
//!   WEIR_BLESS=1 cargo test --release -p weir-pusher --test server_frames
//!   node crates/pusher/vectors/replay.mjs > crates/pusher/vectors/pusher-js-received.json

use serde_json::value::RawValue;
use serde_json::{json, Value};
use weir_pusher::server::{self, Member};
use weir_pusher::SocketId;

fn raw(s: &str) -> Box<RawValue> {
    RawValue::from_string(s.to_owned()).unwrap()
}

/// Name → frame, in the order replay.mjs sends them.
fn frames() -> Vec<(&'static str, String)> {
    let ann = raw(r#"{"name":"Ann \"A\" ✓"}"#);
    let cy = raw(r#"{"name":"Cy"}"#);
    let typing = raw(r#"{"typing":true}"#);
    let note = raw(r#""a plain \"string\"""#);
    vec![
        (
            "connection_established",
            server::connection_established(&SocketId::parse("1234.5678").unwrap(), 120),
        ),
        ("news_subscribed", server::subscription_succeeded("news")),
        (
            "news_event",
            server::event("update", "news", r#"{"n":1,"s":"q\"\\"}"#, None),
        ),
        (
            "news_event_plain",
            server::event("update", "news", "plain text", None),
        ),
        ("news_count", server::subscription_count("news", 5)),
        (
            "presence_subscribed",
            server::presence_subscription_succeeded(
                "presence-room",
                &[
                    Member {
                        user_id: "u1",
                        user_info: Some(&ann),
                    },
                    Member {
                        user_id: "u2",
                        user_info: None,
                    },
                ],
            ),
        ),
        (
            "member_added",
            server::member_added(
                "presence-room",
                Member {
                    user_id: "u3",
                    user_info: Some(&cy),
                },
            ),
        ),
        (
            "member_removed",
            server::member_removed("presence-room", "u2"),
        ),
        (
            "client_event",
            server::client_event("client-typing", "presence-room", &typing, Some("u3")),
        ),
        (
            "client_event_string",
            server::client_event("client-note", "presence-room", &note, None),
        ),
        (
            "cache_subscribed",
            server::subscription_succeeded("cache-ticker"),
        ),
        ("cache_miss", server::cache_miss("cache-ticker")),
        (
            "orders_error",
            server::subscription_error("private-orders", "AuthError", "Invalid signature", 401),
        ),
        (
            "signin_success",
            server::signin_success(r#"{"id":"u1","user_info":{"name":"Ann"}}"#),
        ),
        (
            "user_subscribed",
            server::subscription_succeeded("#server-to-user-u1"),
        ),
        (
            "user_event",
            server::event("notify", "#server-to-user-u1", r#"{"hello":"world"}"#, None),
        ),
        ("error", server::error("Client event rejected", Some(4301))),
        ("ping", server::ping()),
    ]
}

#[test]
fn frames_match_the_file_pusher_js_read() {
    let built: serde_json::Map<String, Value> = frames()
        .into_iter()
        .map(|(n, f)| (n.to_owned(), Value::from(f)))
        .collect();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/vectors/weir-server-frames.json"
    );
    let text = serde_json::to_string_pretty(&json!({ "frames": built })).unwrap() + "\n";
    if std::env::var_os("WEIR_BLESS").is_some() {
        std::fs::write(path, &text).unwrap();
    }
    let committed = std::fs::read_to_string(path).unwrap();
    assert_eq!(
        committed, text,
        "builders changed: bless and rerun replay.mjs (see this file's head)"
    );
}

#[test]
fn pusher_js_handed_the_app_what_weir_meant() {
    let got: Value =
        serde_json::from_str(include_str!("../vectors/pusher-js-received.json")).unwrap();
    let r = &got["received"];
    assert_eq!(r["socket_id"], "1234.5678");
    assert_eq!(r["news_subscribed"], json!({}));
    assert_eq!(
        r["news_events"],
        json!([{"n": 1, "s": "q\"\\"}, "plain text"])
    );
    assert_eq!(r["news_count"], json!({"subscription_count": 5}));
    assert_eq!(
        r["presence_subscribed"],
        json!({"count": 2, "me": {"id": "u1", "info": {"name": "Ann \"A\" ✓"}}, "ids": ["u1", "u2"]})
    );
    assert_eq!(
        r["member_added"],
        json!({"id": "u3", "info": {"name": "Cy"}})
    );
    assert_eq!(r["member_removed"], json!({"id": "u2", "info": null}));
    assert_eq!(r["members_after"], json!({"count": 2, "ids": ["u1", "u3"]}));
    assert_eq!(
        r["client_event"],
        json!({"data": {"typing": true}, "metadata": {"user_id": "u3"}})
    );
    assert_eq!(r["client_event_string"], json!("a plain \"string\""));
    assert_eq!(r["cache_miss"], json!(true));
    assert_eq!(
        r["orders_error"],
        json!({"type": "AuthError", "error": "Invalid signature", "status": 401})
    );
    assert_eq!(r["signed_in_as"], "u1");
    assert_eq!(r["user_event"], json!({"hello": "world"}));
    assert_eq!(
        r["error"],
        json!({"type": "PusherError", "data": {"message": "Client event rejected", "code": 4301}})
    );
    assert_eq!(r["pong_sent"], json!(true));
}
