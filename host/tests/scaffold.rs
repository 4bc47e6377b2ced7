//! `weir new` → `weir build` → `weir serve` → a real client, in a temporary
//! directory outside the repository: the path a newcomer takes with only
//! the `weir` binary and a Rust toolchain. Also the scaffold's own tests
//! (plain `cargo test`), which drive its handler natively.

mod common;

use common::{client, next};
use futures_util::SinkExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

fn weir() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weir"))
}

/// Run `cmd` to completion within `limit`, killing it past that; panics
/// with its output on failure. Returns its stdout.
fn run(mut cmd: Command, what: &str, limit: Duration) -> String {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("{what}: still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The admin token the gateways here are started with.
const ADMIN_TOKEN: &str = "scaffold-test-admin-token-0123456789";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The greeting a new connection to `url` gets.
async fn greeting(url: &str) -> Message {
    next(&mut client(url).await).await
}

/// `weir serve`, stopped (by its PID) when dropped.
struct Serving(Child);

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `weir serve` on `project`'s routes file on a free port, its compile
/// cache in `cache`; returns once the port answers (within `limit`).
async fn serve(project: &Path, cache: &Path, limit: Duration) -> (Serving, u16) {
    let port = free_port();
    let child = weir()
        .arg("serve")
        .arg(project.join("routes.toml"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("WEIR_CACHE_DIR", cache)
        .env("WEIR_ADMIN_TOKEN", ADMIN_TOKEN)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut serving = Serving(child);
    let deadline = Instant::now() + limit;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        let name = project.display();
        assert!(
            Instant::now() < deadline,
            "{name}: weir serve did not listen"
        );
        assert!(
            serving.0.try_wait().unwrap().is_none(),
            "{name}: weir serve exited"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (serving, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_build_serve_and_a_client_outside_the_repository() {
    let parent = std::env::temp_dir().join(format!("weir-new-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&parent);
    std::fs::create_dir_all(&parent).unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    assert!(
        !parent.starts_with(repo),
        "the project must live outside the checkout"
    );

    let mut new = weir();
    new.args(["new", "hello", "--dir"]).arg(&parent);
    let said = run(new, "weir new", Duration::from_secs(10));
    assert!(said.contains("weir build"), "{said}");
    let project = parent.join("hello");

    // Compiled guest dependencies are shared with scripts/build-guests.sh
    // when a target dir is set (CI), so only the project and the SDK build.
    let shared_target = std::env::var_os("CARGO_TARGET_DIR");
    let mut build = weir();
    build.arg("build").arg(&project);
    if let Some(dir) = &shared_target {
        build.env("CARGO_TARGET_DIR", Path::new(dir).join("wasm"));
    }
    let built = run(build, "weir build", Duration::from_secs(600));
    let component = project.join("dist/hello.wasm");
    assert_eq!(built.trim(), component.display().to_string());
    assert_eq!(&std::fs::read(&component).unwrap()[..4], b"\0asm");

    let mut test = Command::new("cargo");
    // Plain `cargo test`, as a newcomer types it (issue 36: with the
    // wasm target as the project's default it failed with a runner line).
    test.current_dir(&project).arg("test");
    let tested = run(test, "the scaffold's cargo test", Duration::from_secs(600));
    assert!(tested.contains("2 passed"), "{tested}");

    // The scaffold's routes file listens on its own port, not the example
    // gateway's 9001; an admin listener is added as the README shows.
    let routes = project.join("routes.toml");
    let text = std::fs::read_to_string(&routes).unwrap();
    assert!(
        text.contains(weir::scaffold::SCAFFOLD_LISTEN) && !text.contains(":9001"),
        "{text}"
    );
    let admin = format!("127.0.0.1:{}", free_port());
    std::fs::write(&routes, format!("{text}\n[admin]\nlisten = \"{admin}\"\n")).unwrap();

    let (serving, port) = serve(&project, &parent.join("cache"), Duration::from_secs(20)).await;
    let url = format!("ws://127.0.0.1:{port}/hello");
    let mut ws = client(&url).await;
    assert_eq!(next(&mut ws).await, Message::text("welcome to hello"));
    ws.send(Message::text("hi")).await.unwrap();
    assert_eq!(next(&mut ws).await, Message::text("#1 hi"));
    ws.send(Message::binary(vec![7, 8])).await.unwrap();
    assert_eq!(next(&mut ws).await, Message::binary(vec![7, 8]));

    // A change deployed, rolled back, then a reload (issue 36: the reload
    // brought the rolled-back build back, since the routes file names the
    // file `weir build` overwrites). The CLI finds the admin address in the
    // project's routes.toml.
    let lib = project.join("src/lib.rs");
    let v1 = std::fs::read_to_string(&lib).unwrap();
    std::fs::write(&lib, v1.replace("\"welcome to", "\"v2: welcome to")).unwrap();
    let mut build = weir();
    build.arg("build").arg(&project);
    if let Some(dir) = &shared_target {
        build.env("CARGO_TARGET_DIR", Path::new(dir).join("wasm"));
    }
    run(build, "weir build (v2)", Duration::from_secs(600));
    let cli = |args: &[&str]| {
        let mut cmd = weir();
        cmd.current_dir(&project)
            .args(args)
            .env("WEIR_ADMIN_TOKEN", ADMIN_TOKEN)
            .env_remove("WEIR_ADMIN");
        run(
            cmd,
            &format!("weir {}", args.join(" ")),
            Duration::from_secs(120),
        )
    };
    let said = cli(&["deploy", "/hello", "dist/hello.wasm"]);
    assert!(said.contains("to /hello: version 2"), "{said}");
    assert_eq!(greeting(&url).await, Message::text("v2: welcome to hello"));
    let said = cli(&["rollback", "/hello"]);
    assert!(
        said.contains("version 1 serves") && said.contains("pinned"),
        "{said}"
    );
    assert_eq!(greeting(&url).await, Message::text("welcome to hello"));
    let reload = || {
        weir::client::request(
            &admin,
            ADMIN_TOKEN,
            http::Method::POST,
            "/reload",
            Vec::new(),
        )
    };
    let (status, body) = reload().await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("pinned to version 1 by a rollback"), "{body}");
    assert_eq!(greeting(&url).await, Message::text("welcome to hello"));
    let said = cli(&["routes"]);
    assert!(
        said.lines()
            .any(|l| l.starts_with("/hello ") && l.contains("pinned")),
        "{said}"
    );
    let said = cli(&["unpin", "/hello"]);
    assert!(said.contains("unpinned /hello"), "{said}");
    let (status, body) = reload().await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(greeting(&url).await, Message::text("v2: welcome to hello"));
    drop(serving);
    std::fs::remove_dir_all(&parent).unwrap();
}

/// The same path in JavaScript and Python: `weir new --lang js|python`,
/// `weir build` (which installs the SDK's pinned toolchain into the
/// project's weir-sdk/ on first use), `weir serve`, and a client that gets
/// the starter's greeting, numbered texts, echoed binary and awaited timer;
/// and the starter's own tests under the SDK's harness (`node --test`,
/// `python3 -m unittest`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_and_python_projects_new_build_and_serve() {
    let parent = std::env::temp_dir().join(format!("weir-new-lang-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&parent);
    std::fs::create_dir_all(&parent).unwrap();
    for (lang, name) in [("js", "hellojs"), ("python", "hellopy")] {
        let mut new = weir();
        new.args(["new", name, "--lang", lang, "--dir"])
            .arg(&parent);
        let said = run(new, "weir new --lang", Duration::from_secs(10));
        assert!(said.contains("weir build"), "{said}");
        assert!(!said.contains("cargo test"), "{said}");
        let project = parent.join(name);

        let mut build = weir();
        build.arg("build").arg(&project);
        let built = run(build, "weir build", Duration::from_secs(600));
        let component = project.join(format!("dist/{name}.wasm"));
        assert_eq!(built.trim(), component.display().to_string());
        assert_eq!(&std::fs::read(&component).unwrap()[..4], b"\0asm");
        if lang == "js" {
            // The starter's own tests, under node's test runner and the
            // SDK's harness (weir build installed the SDK's packages).
            let mut tests = std::process::Command::new("node");
            tests.arg("--test").current_dir(&project);
            let said = run(tests, "node --test", Duration::from_secs(120));
            assert!(
                said.contains("# pass 3") && said.contains("# fail 0"),
                "{said}"
            );
        } else {
            // The same under unittest and weir_guest.testing (nothing to
            // install: the harness is plain Python).
            // unittest reports on stderr.
            let mut tests = std::process::Command::new("sh");
            tests
                .args(["-c", "python3 -m unittest 2>&1"])
                .current_dir(&project);
            let said = run(tests, "python3 -m unittest", Duration::from_secs(120));
            assert!(
                said.contains("Ran 3 tests") && said.contains("OK"),
                "{said}"
            );
        }

        // A Python component compiles for several seconds on first load.
        let (serving, port) =
            serve(&project, &parent.join("cache"), Duration::from_secs(120)).await;
        let mut ws = client(&format!("ws://127.0.0.1:{port}/{name}")).await;
        assert_eq!(
            next(&mut ws).await,
            Message::text(format!("welcome to {name}"))
        );
        ws.send(Message::text("hi")).await.unwrap();
        assert_eq!(next(&mut ws).await, Message::text("#1 hi"));
        ws.send(Message::text("again")).await.unwrap();
        assert_eq!(next(&mut ws).await, Message::text("#2 again"));
        ws.send(Message::binary(vec![7, 8])).await.unwrap();
        assert_eq!(next(&mut ws).await, Message::binary(vec![7, 8]));
        // An awaited timer: what follows the await runs in a later batch.
        // A second apart, so a client descheduled between its two sends on
        // a busy machine still sees "now" answered first.
        ws.send(Message::text("later 1000")).await.unwrap();
        ws.send(Message::text("now")).await.unwrap();
        assert_eq!(next(&mut ws).await, Message::text("#3 now"));
        assert_eq!(next(&mut ws).await, Message::text("later"));
        drop(serving);
    }
    std::fs::remove_dir_all(&parent).unwrap();
}
