//! The Origin allow-list against a real `weir serve`: an upgrade from an
//! origin a route does not allow gets 403 on native and guest routes
//! alike, before the guest's upgrade hook; listed origins, subdomain
//! wildcards, `null`, the same origin with default ports, `require_origin`,
//! and forwarded hosts from trusted proxies only; refusals counted per
//! route and logged as an escaped summary.

mod common;
mod guest_support;

use common::{Raw, WeirProcess, STEP};
use std::process::Stdio;

/// The status of an upgrade to `path` with `extra` header lines.
async fn upgrade(weir: &WeirProcess, path: &str, extra: &str) -> u16 {
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n",
        weir.addr
    );
    let (_raw, status) = Raw::request(weir.addr, &head).await;
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origins_are_checked_on_native_and_guest_routes_alike() {
    let echo_wasm = guest_support::wasm("echo");
    let routes = format!(
        "[[route]]\npath = \"/native\"\nnative = \"echo\"\norigins = [\"https://app.example.com\", \"https://*.example.org\"]\n\n\
         [[route]]\npath = \"/guest\"\nguest = \"{}\"\norigins = [\"https://app.example.com\"]\n\n\
         [[route]]\npath = \"/strict\"\nnative = \"echo\"\nrequire_origin = true\n\n\
         [[route]]\npath = \"/files\"\nnative = \"echo\"\norigins = [\"null\"]\n",
        echo_wasm.display()
    );
    let log = std::env::temp_dir().join(format!("weir-origins-{}.log", std::process::id()));
    let weir = WeirProcess::start(
        "workers = 2\ntrusted_proxies = [\"127.0.0.1\"]",
        &routes,
        "warn",
        Stdio::from(std::fs::File::create(&log).unwrap()),
    )
    .await;
    let own = format!("Origin: http://{}\r\n", weir.addr);

    for path in ["/native", "/guest"] {
        assert_eq!(
            upgrade(&weir, path, "").await,
            101,
            "{path}: no Origin, not a browser"
        );
        assert_eq!(
            upgrade(&weir, path, "Origin: https://app.example.com\r\n").await,
            101,
            "{path}"
        );
        assert_eq!(
            upgrade(&weir, path, "Origin: https://app.example.com:443\r\n").await,
            101,
            "{path}"
        );
        assert_eq!(
            upgrade(&weir, path, &own).await,
            101,
            "{path}: the same origin"
        );
        for evil in [
            "https://evil.example",
            "http://app.example.com",
            "https://app.example.com.evil.example",
            "https://app.example.com:8443",
            "null",
        ] {
            assert_eq!(
                upgrade(&weir, path, &format!("Origin: {evil}\r\n")).await,
                403,
                "{path} must refuse {evil}"
            );
        }
    }
    // Subdomain wildcards: one or more labels, never the domain itself.
    assert_eq!(
        upgrade(&weir, "/native", "Origin: https://a.example.org\r\n").await,
        101
    );
    assert_eq!(
        upgrade(&weir, "/native", "Origin: https://a.b.example.org\r\n").await,
        101
    );
    assert_eq!(
        upgrade(&weir, "/native", "Origin: https://example.org\r\n").await,
        403
    );
    // require_origin refuses non-browser clients; the same origin passes.
    assert_eq!(upgrade(&weir, "/strict", "").await, 403);
    assert_eq!(upgrade(&weir, "/strict", &own).await, 101);
    // `null` only where listed.
    assert_eq!(upgrade(&weir, "/files", "Origin: null\r\n").await, 101);
    // A forwarded host counts from a trusted proxy (this test is 127.0.0.1).
    assert_eq!(
        upgrade(
            &weir,
            "/strict",
            "Origin: https://gw.example.com\r\nX-Forwarded-Host: gw.example.com:443\r\n"
        )
        .await,
        101
    );
    assert_eq!(
        upgrade(
            &weir,
            "/strict",
            "Origin: https://gw.example.com\r\nX-Forwarded-Host: gw.example.com\r\n"
        )
        .await,
        403,
        "a forwarded host without a port has the listener's (http: 80), not 443"
    );
    assert_eq!(
        upgrade(
            &weir,
            "/strict",
            "Origin: http://gw.example.com\r\nX-Forwarded-Host: gw.example.com\r\n"
        )
        .await,
        101
    );

    // Counted per route (never labelled by origin).
    let metrics = common::metrics(weir.addr).await;
    let count = |route: &str| {
        weir::metrics::read(
            &metrics,
            &format!("weir_route_refused_origin_total{{route=\"{route}\"}}"),
        )
        .unwrap_or_else(|| panic!("{route} in {metrics}"))
    };
    assert_eq!(count("/native"), 6);
    assert_eq!(count("/guest"), 5);
    assert_eq!(count("/strict"), 2);
    assert!(
        !metrics.contains("evil.example"),
        "origins never label metrics"
    );

    // Refusals are logged as a summary (the origin it shows is escaped;
    // hyper already refuses control characters in headers).
    drop(weir);
    let mut text;
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        text = std::fs::read_to_string(&log).unwrap();
        if text.contains("origin not allowed") || tokio::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let _ = std::fs::remove_file(&log);
    assert!(text.contains("origin not allowed"), "{text}");
    assert!(text.contains("last_origin"), "{text}");
    assert!(
        text.lines()
            .filter(|l| l.contains("origin not allowed"))
            .count()
            <= 2,
        "one summary per 10 s, not a line per refusal: {text}"
    );
}
