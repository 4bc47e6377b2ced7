//! Every example route from a real browser: headless Chromium loads a test
//! page (host/tests/browser/page.html) from this test's own loopback server,
//! which is another origin than the gateway's, and the page runs its checks
//! against `weir serve` on the example routes: text, 8 MiB text, 1 MiB
//! binary, relay, the guest examples, close codes and reasons as `onclose`
//! sees them, no extension negotiated, and the Origin allow-list (a route
//! that does not list the page's origin refuses it, `"*"` accepts it). The
//! page POSTs its results here; each one is asserted.
//!
//! Needs Chromium (`chromium` on PATH, or `WEIR_CHROMIUM`); scripts/test.sh
//! installs Debian's package when it is missing.

mod common;

use common::WeirProcess;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const PAGE: &str = include_str!("browser/page.html");

/// The page's server: serves the page and takes one POST of results.
fn page_server() -> (u16, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request = String::new();
            if reader.read_line(&mut request).is_err() {
                continue;
            }
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() || line.trim().is_empty() {
                    break;
                }
                if let Some((name, value)) = line.split_once(':') {
                    if name.eq_ignore_ascii_case("content-length") {
                        length = value.trim().parse().unwrap_or(0);
                    }
                }
            }
            let answer = if request.starts_with("GET /page.html") {
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{PAGE}",
                    PAGE.len()
                )
            } else if request.starts_with("POST /results") {
                let mut body = vec![0; length];
                if reader.read_exact(&mut body).is_ok() {
                    let _ = tx.send(String::from_utf8_lossy(&body).into_owned());
                }
                "HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n".to_string()
            } else {
                "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    .to_string()
            };
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    (port, rx)
}

/// The example routes (examples/routes.toml, guests by absolute path), plus
/// two native echo routes to check the Origin allow-list from the page.
fn routes() -> String {
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let text = std::fs::read_to_string(examples.join("routes.toml")).unwrap();
    let first_route = text
        .find("[[route]]")
        .expect("examples/routes.toml has routes");
    let wasm = examples.join("wasm");
    assert!(
        wasm.join("echo.wasm").exists(),
        "run scripts/build-guests.sh first"
    );
    // The Rust and native routes: the JS and Python examples have their
    // own loopback tests (host/tests/polyglot.rs), and compiling them into
    // this test's fresh cache would cost ~10 s per Python component.
    let routes: String = text[first_route..]
        .split("[[route]]")
        .filter(|table| !table.trim().is_empty())
        .filter(|table| !table.contains("path = \"/js/") && !table.contains("path = \"/py/"))
        .map(|table| format!("[[route]]{table}"))
        .collect();
    let wasm = wasm.canonicalize().unwrap();
    let routes = routes
        .replace("guest = \"wasm/", &format!("guest = \"{}/", wasm.display()))
        .replace(
            "filter = \"wasm/",
            &format!("filter = \"{}/", wasm.display()),
        );
    format!(
        "{routes}\n\
         [[route]]\npath = \"/closed-to-pages\"\nnative = \"echo\"\norigins = []\n\n\
         [[route]]\npath = \"/open-to-all\"\nnative = \"echo\"\norigins = [\"*\"]\n"
    )
}

/// Chromium in a process group of its own, so its helper processes end
/// with it; killed (by that group) when dropped.
struct Chromium(std::process::Child);

impl Drop for Chromium {
    fn drop(&mut self) {
        let pgid = libc::pid_t::try_from(self.0.id()).unwrap();
        // SAFETY: kill(2) on the process group this test created.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_route_from_headless_chromium() {
    let chromium = std::env::var("WEIR_CHROMIUM").unwrap_or_else(|_| "chromium".into());
    let (page_port, results) = page_server();
    let page_origin = format!("http://127.0.0.1:{page_port}");
    let gw = WeirProcess::start(
        &format!("max_message = \"32MiB\"\norigins = [\"{page_origin}\"]"),
        &routes(),
        "warn",
        Stdio::null(),
    )
    .await;
    let profile = std::env::temp_dir().join(format!("weir-chromium-{}", std::process::id()));
    let child = Command::new(&chromium)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--disable-background-networking",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("{page_origin}/page.html?gw={}", gw.addr))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start {chromium} ({e}); scripts/test.sh installs Debian's chromium")
        });
    let browser = Chromium(child);
    let body = tokio::task::spawn_blocking(move || results.recv_timeout(Duration::from_secs(120)))
        .await
        .unwrap()
        .expect("the page posted no results within 120 s");
    drop(browser);
    let _ = std::fs::remove_dir_all(&profile);

    let results: serde_json::Value = serde_json::from_str(&body).unwrap();
    let results = results.as_object().expect("an object of results");
    let expected = [
        "echo_text",
        "echo_8mib_text",
        "echo_1mib_binary",
        "relay_pair",
        "guest_plain",
        "guest_json",
        "guest_binary_and_1003",
        "chat_rooms",
        "shout_room",
        "auth_with_token",
        "auth_without_token",
        "counter",
        "client_close_4001",
        "origin_not_listed_is_refused",
        "origin_star_is_accepted",
    ];
    let failed: Vec<String> = expected
        .iter()
        .filter(|name| results.get(**name).and_then(|r| r["ok"].as_bool()) != Some(true))
        .map(|name| {
            format!(
                "{name}: {}",
                results
                    .get(*name)
                    .map_or("missing".into(), |r| r["detail"].to_string())
            )
        })
        .collect();
    assert!(
        failed.is_empty(),
        "failed in the browser:\n{}",
        failed.join("\n")
    );
    assert_eq!(results.len(), expected.len(), "{results:?}");
}
