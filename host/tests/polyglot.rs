//! The JavaScript and Python example handlers (examples/js, examples/python,
//! built by scripts/build-guests.sh with guest-sdk/js and guest-sdk/python)
//! over real loopback sockets with tokio-tungstenite as the client: the
//! same assertions as the Rust examples' in guest_routes.rs, and the limits
//! (a JS throw or Python raise, an endless loop, memory exhaustion) closing
//! only the affected connections with 1011; and what `weir check` says of
//! a JS or Python component built for another world.

mod common;
mod guest_support;

use common::{client, next, Gateway, Ws};
use futures_util::SinkExt;
use futures_util::StreamExt;
use std::path::PathBuf;
use std::time::Duration;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;
use weir_config::{Behaviour, Config, GuestConfig, Isolation, RouteConfig};

/// A language's components: `js-<name>.wasm` or `py-<name>.wasm`.
#[derive(Clone, Copy)]
enum Lang {
    Js,
    Python,
}

impl Lang {
    fn wasm(self, name: &str) -> PathBuf {
        let prefix = match self {
            Lang::Js => "js",
            Lang::Python => "py",
        };
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../examples/wasm")
            .join(format!("{prefix}-{name}.wasm"));
        assert!(
            path.exists(),
            "{} is missing: run scripts/build-guests.sh first",
            path.display()
        );
        path
    }

    /// What the fault fixture is asked for to fail in the language's own way.
    fn error_word(self) -> &'static str {
        match self {
            Lang::Js => "throw",
            Lang::Python => "raise",
        }
    }
}

fn route(path: &str, guest: GuestConfig) -> RouteConfig {
    RouteConfig {
        path: path.to_string(),
        line: 0,
        behaviour: Behaviour::Guest(guest),
        limits: weir_config::Limits::default(),
        topics: None,
    }
}

/// Native /echo plus the routes a test needs of the language's examples
/// (under the Rust examples' paths) and its fault fixture, on one worker so
/// the fault tests know which connections share an instance. Only what the
/// test uses is loaded: a Python component takes seconds to compile the
/// first time (cached after).
fn gateway(lang: Lang, paths: &[&str]) -> Gateway {
    let mut config = Config::builtin_default();
    config.server.workers = 1;
    for &path in paths {
        let (name, edit): (&str, fn(&mut GuestConfig)) = match path {
            "/plain" => ("echo", |_| {}),
            "/json" => ("json", |_| {}),
            "/chat/{room}" => ("chat", |_| {}),
            "/counter" => ("counter", |_| {}),
            "/counter-recycled" => ("counter", |g| g.recycle_after = 1),
            "/counter-batch" => ("counter", |g| g.isolation = Isolation::Batch),
            "/faulty" => ("faulty", |g| {
                g.memory = 48 << 20;
                g.timeout = Duration::from_millis(200);
            }),
            other => panic!("no route {other}"),
        };
        let mut guest = GuestConfig::defaults(lang.wasm(name));
        // Deadlines are wall time; a loaded 2-core CI machine needs
        // headroom (the fault fixture sets its own).
        guest.timeout = Duration::from_secs(2);
        edit(&mut guest);
        config.routes.push(route(path, guest));
    }
    Gateway::start(config)
}

async fn ask(ws: &mut Ws, msg: Message) -> Message {
    ws.send(msg).await.unwrap();
    next(ws).await
}

async fn expect_close(ws: &mut Ws, code: u16) {
    loop {
        match next(ws).await {
            Message::Close(Some(frame)) => {
                assert_eq!(
                    u16::from(frame.code),
                    code,
                    "close reason: {}",
                    frame.reason
                );
                return;
            }
            Message::Close(None) => panic!("closed without a code, expected {code}"),
            _ => continue,
        }
    }
}

async fn examples_answer(lang: Lang) {
    let gw = gateway(lang, &["/plain", "/json", "/counter"]);
    let mut plain = client(&gw.url("/plain")).await;
    assert_eq!(
        ask(&mut plain, Message::text("héllo")).await,
        Message::text("héllo")
    );
    assert_eq!(
        ask(&mut plain, Message::binary(vec![0, 1, 255])).await,
        Message::binary(vec![0, 1, 255])
    );

    let mut json = client(&gw.url("/json")).await;
    let reply =
        |m: Message| serde_json::from_str::<serde_json::Value>(m.to_text().unwrap()).unwrap();
    assert_eq!(
        reply(ask(&mut json, Message::text(r#"{"number": 7}"#)).await)["number"],
        8
    );
    assert_eq!(
        reply(ask(&mut json, Message::text(r#"{"number": 10}"#)).await)["number"],
        12
    );
    for bad in ["{not json", "[1]", r#"{"number": 1.5}"#, r#"{"n": 1}"#] {
        assert!(
            reply(ask(&mut json, Message::text(bad)).await)
                .get("error")
                .is_some(),
            "{bad}"
        );
    }
    // A malformed message is answered, not fatal: the connection still works.
    assert_eq!(
        reply(ask(&mut json, Message::text(r#"{"number": -3}"#)).await)["number"],
        -2
    );
    // Binary is read as UTF-8 JSON, as the Rust example does.
    assert_eq!(
        reply(ask(&mut json, Message::binary(br#"{"number": 1}"#.to_vec())).await)["number"],
        2
    );

    let mut counter = client(&gw.url("/counter")).await;
    for n in 1..=3 {
        assert_eq!(
            ask(&mut counter, Message::text("tick")).await,
            Message::text(n.to_string())
        );
    }
    // The upgrade hook's first state: counting starts at ?from=.
    let mut from = client(&gw.url("/counter?from=41")).await;
    assert_eq!(
        ask(&mut from, Message::text("tick")).await,
        Message::text("42")
    );
    gw.stop();
}

async fn chat_reaches_the_others(lang: Lang) {
    let gw = gateway(lang, &["/chat/{room}"]);
    let mut a = client(&gw.url("/chat/lobby")).await;
    let mut b = client(&gw.url("/chat/lobby")).await;
    let mut c = client(&gw.url("/chat/lobby")).await;
    let mut other = client(&gw.url("/chat/attic")).await;
    // Let the open events (and their subscriptions) reach the guest first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.send(Message::text("hi from a")).await.unwrap();
    assert_eq!(next(&mut b).await, Message::text("hi from a"));
    assert_eq!(next(&mut c).await, Message::text("hi from a"));
    other.send(Message::text("attic only")).await.unwrap();
    b.send(Message::binary(vec![7, 0, 255])).await.unwrap();
    assert_eq!(next(&mut a).await, Message::binary(vec![7, 0, 255]));
    assert_eq!(next(&mut c).await, Message::binary(vec![7, 0, 255]));
    // The sender never hears itself, and other rooms hear nothing.
    assert!(timeout(Duration::from_millis(300), b.next()).await.is_err());
    assert!(timeout(Duration::from_millis(300), other.next())
        .await
        .is_err());
    gw.stop();
}

async fn state_survives_replacement(lang: Lang) {
    let gw = gateway(lang, &["/counter-recycled", "/counter-batch"]);
    for path in ["/counter-recycled", "/counter-batch"] {
        let mut a = client(&gw.url(path)).await;
        let mut b = client(&gw.url(path)).await;
        for n in 1..=4 {
            assert_eq!(
                ask(&mut a, Message::text("x")).await,
                Message::text(n.to_string()),
                "{path}"
            );
        }
        assert_eq!(
            ask(&mut b, Message::text("x")).await,
            Message::text("1"),
            "{path}"
        );
        assert_eq!(
            ask(&mut a, Message::text("x")).await,
            Message::text("5"),
            "{path}"
        );
    }
    gw.stop();
}

/// Each fault closes the connection that caused it with 1011; an idle
/// connection of the same route, another guest route and the native route
/// keep working.
async fn faults_close_only_the_affected(lang: Lang) {
    let gw = gateway(lang, &["/plain", "/faulty"]);
    let mut bystander = client(&gw.url("/faulty")).await;
    let mut other_guest = client(&gw.url("/plain")).await;
    let mut native = client(&gw.url("/echo")).await;
    assert_eq!(
        ask(&mut bystander, Message::text("warm")).await,
        Message::text("warm")
    );
    for fault in [lang.error_word(), "loop", "grow"] {
        let mut victim = client(&gw.url("/faulty")).await;
        victim.send(Message::text(fault)).await.unwrap();
        expect_close(&mut victim, 1011).await;
        let note = format!("after {fault}");
        for ws in [&mut bystander, &mut other_guest, &mut native] {
            assert_eq!(
                ask(ws, Message::text(note.clone())).await,
                Message::text(note.clone()),
                "{fault}"
            );
        }
    }
    gw.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_examples_answer_over_the_network() {
    examples_answer(Lang::Js).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_examples_answer_over_the_network() {
    examples_answer(Lang::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_chat_reaches_every_other_member_of_the_room_only() {
    chat_reaches_the_others(Lang::Js).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_chat_reaches_every_other_member_of_the_room_only() {
    chat_reaches_the_others(Lang::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_state_survives_instance_replacement() {
    state_survives_replacement(Lang::Js).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_state_survives_instance_replacement() {
    state_survives_replacement(Lang::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_throw_loop_and_memory_close_only_the_affected_connections() {
    faults_close_only_the_affected(Lang::Js).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_raise_loop_and_memory_close_only_the_affected_connections() {
    faults_close_only_the_affected(Lang::Python).await;
}

/// A component built against another world is refused at load time (what
/// `weir check` runs) with the missing export named and the rebuild
/// command of its own toolchain; the extra exports those toolchains leave
/// in (componentize-qjs `init`, componentize-py `exports`) are allowed, as
/// every other test here shows by serving their components.
#[test]
fn a_wrong_world_names_the_export_and_the_toolchains_rebuild_command() {
    for (lang, hint) in [
        (Lang::Js, "node guest-sdk/js/build.mjs"),
        (Lang::Python, "python3 guest-sdk/python/build.py"),
    ] {
        let mut cfg = guest_support::config("echo");
        cfg.wasm = lang.wasm("wrong-world");
        let err = match weir::guest::Program::load(&guest_support::engine(), "/r", &cfg) {
            Err(e) => e,
            Ok(_) => panic!("{}: loaded", cfg.wasm.display()),
        };
        assert!(
            matches!(err, weir::guest::GuestError::Abi { .. }),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(msg.contains("weir:gateway/handler@0.4.0"), "{msg}");
        assert!(msg.contains("weir:gateway@0.3.0"), "{msg}");
        assert!(msg.contains("weir:gateway/handler@0.2.0"), "{msg}");
        assert!(msg.contains(hint), "{msg}");
        assert!(!msg.contains("weir build"), "{msg}");
    }
}
