//! The `weir` binary end to end: `weir check` output and exit codes, and
//! `weir serve` announcing the built-in default and stopping on SIGTERM.

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn weir() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weir"))
}

fn routes_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn check_accepts_a_valid_file() {
    let file = routes_file(
        "ok.toml",
        "[[route]]\npath = \"/echo\"\nnative = \"echo\"\n[[route]]\npath = \"/relay\"\nnative = \"relay\"\n",
    );
    let out = weir().arg("check").arg(&file).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok: 2 routes\n");
}

#[test]
fn check_reports_the_line_and_fails() {
    let file = routes_file(
        "bad.toml",
        "[server]\nmax_message = \"32 megs\"\n[[route]]\npath = \"/echo\"\nnative = \"echo\"\n",
    );
    let out = weir().arg("check").arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "{}: line 2: max_message = \"32 megs\": not a size; write e.g. \"32MiB\"",
            file.display()
        )),
        "{stderr}"
    );
}

#[test]
fn check_needs_a_file() {
    let out = weir().arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "clap usage error: {out:?}");
    let missing = weir()
        .args(["check", "/nonexistent/routes.toml"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot read"));
}

#[test]
fn serve_without_a_file_says_so_and_stops_on_sigterm() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = weir()
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--workers",
            "1",
        ])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "weir serve did not listen on {port}"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "weir serve exited early"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on the child we spawned; no memory is involved.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("weir serve did not stop within 10 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.success(), "{status:?}\n{stderr}");

    // Said once the gateway is ready (after lines about its limits).
    assert!(
        stderr.contains(&format!(
            "no routes file given: serving the built-in default, native /echo and /relay on 127.0.0.1:{port}"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("SIGTERM: shutting down"), "{stderr}");
}

/// A `weir serve` child, killed (by its PID) when dropped.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `weir serve FILE` and waits until `port` accepts connections.
fn serving(file: &std::path::Path, port: u16) -> Child {
    let child = weir()
        .arg("serve")
        .arg(file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = Child(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "weir serve did not listen");
        assert!(child.0.try_wait().unwrap().is_none(), "weir serve exited");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// A forgotten gateway on the same address must not silently share it
/// (SO_REUSEPORT would split connections between old and new handler
/// code): the second one fails with a clear error. Sharing is explicit.
#[test]
fn a_second_gateway_on_an_address_in_use_fails_unless_sharing_is_asked_for() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let routes = format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\nworkers = 1\n[[route]]\npath = \"/echo\"\nnative = \"echo\"\n"
    );
    let file = routes_file(&format!("in-use-{port}.toml"), &routes);
    let _first = serving(&file, port);
    let second = weir().arg("serve").arg(&file).output().unwrap();
    assert_eq!(second.status.code(), Some(1), "{second:?}");
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        stderr.contains(&format!(
            "cannot listen on 127.0.0.1:{port}: another process is listening there"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("--listen"),
        "the hint is the safe flag: {stderr}"
    );
    assert!(!stderr.contains("reuse_port = true"), "{stderr}");

    // With reuse_port on both sides, both serve.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let shared = format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\nworkers = 1\nreuse_port = true\n[[route]]\npath = \"/echo\"\nnative = \"echo\"\n"
    );
    let file = routes_file(&format!("shared-{port}.toml"), &shared);
    let mut a = serving(&file, port);
    let mut b = serving(&file, port);
    std::thread::sleep(Duration::from_millis(200));
    assert!(a.0.try_wait().unwrap().is_none() && b.0.try_wait().unwrap().is_none());
}

#[test]
fn check_counts_one_route_in_the_singular() {
    let file = routes_file(
        "one.toml",
        "[[route]]\npath = \"/echo\"\nnative = \"echo\"\n",
    );
    let out = weir().arg("check").arg(&file).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok: 1 route\n");
}

/// `--log-format json`: every line the gateway logs is one JSON object
/// with its level, message and the event's fields at the top level.
#[test]
fn json_logs_are_one_object_per_line() {
    let mut child = weir()
        .args([
            "--log-format",
            "json",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--workers",
            "1",
        ])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        // Until the "listening" line (or EOF); bounded by the kill below.
        let mut text = String::new();
        let mut byte = [0u8; 1];
        while !text.contains("weir listening") {
            match stderr.read(&mut byte) {
                Ok(1) => text.push(byte[0] as char),
                _ => break,
            }
        }
        while !text.ends_with('\n') {
            match stderr.read(&mut byte) {
                Ok(1) => text.push(byte[0] as char),
                _ => break,
            }
        }
        text
    });
    let started = Instant::now();
    while !reader.is_finished() && started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    let text = reader.join().unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(!lines.is_empty(), "no log line");
    for line in &lines {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(
            value["level"].is_string() && value["message"].is_string(),
            "{line}"
        );
    }
    let listening: serde_json::Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    assert_eq!(listening["message"], "weir listening");
    assert_eq!(listening["workers"], 1);
    assert!(listening["addr"]
        .as_str()
        .unwrap()
        .starts_with("127.0.0.1:"));
}

/// Issue 36: `weir check` said `ok` for `allow_outbound` and `kv` on a
/// component that cannot use them (a JavaScript guest on the 0.3.0 world:
/// the echo example built with `build.mjs --world 0.3.0`). It still passes
/// (the route serves), with a warning naming the settings, the component
/// and the world. The check reads the component's world, whatever its
/// language (issue 39): the Python echo built with `build.py --world
/// 0.3.0` gets the same warning.
#[test]
fn check_warns_when_a_route_sets_io_its_component_cannot_use() {
    for name in ["js-echo-v3.wasm", "py-echo-v3.wasm"] {
        let wasm = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../examples/wasm")
            .join(name);
        assert!(wasm.exists(), "run scripts/build-guests.sh first");
        let file = routes_file(
            &format!("io-on-{name}.toml"),
            &format!(
                "[[route]]\npath = \"/v3\"\nguest = \"{}\"\nkv = \"route\"\n\
                 allow_outbound = [\"http://127.0.0.1:9/\"]\n",
                wasm.display()
            ),
        );
        let out = weir()
            .arg("check")
            .arg(&file)
            .env("WEIR_CACHE_DIR", "")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {stderr}");
        assert!(
            stderr.contains("allow_outbound and kv set on the route")
                && stderr.contains(name)
                && stderr.contains("weir:gateway@0.3.0"),
            "{name}: {stderr}"
        );
    }
}

/// The realtime example (Centrifugo's protocol and API) is a file `weir
/// check` accepts as shipped, with its secrets in the environment.
#[test]
fn check_accepts_the_realtime_example() {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/realtime/routes.toml");
    let out = weir()
        .arg("check")
        .arg(&file)
        .env(
            "WEIR_TOKEN_HMAC_SECRET",
            "example-token-secret-0123456789abcdef",
        )
        .env("WEIR_API_KEY", "example-api-key-0123456789abcdef")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("ok: 1 route"),
        "{out:?}"
    );
}
