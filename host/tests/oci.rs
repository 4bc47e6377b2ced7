//! Guests from an OCI registry: a real CNCF distribution registry (Debian's
//! `docker-registry`, installed by scripts/registry.sh) on a loopback port,
//! `weir push` publishing built components, `weir serve` pulling them by
//! digest and by tag, refusing wrong digests and tampered layers, serving
//! from its cache with the registry gone, and `weir deploy ROUTE oci://…`
//! through the admin API. Clients are real WebSocket clients.

mod admin_support;
mod common;
mod guest_support;

use admin_support::{free_port, Gateway, TOKEN, TOKEN_ENV};
use common::STEP;
use futures_util::{SinkExt, StreamExt};
use guest_support::wasm;
use http::Method;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};
use tokio_tungstenite::tungstenite::Message;

/// A `docker-registry serve` child on a free loopback port, with a config
/// and a storage directory of its own; killed (by its PID) on drop.
struct Registry {
    child: Option<Child>,
    addr: SocketAddr,
    dir: PathBuf,
}

/// The user the authenticating registry knows, and its password (a
/// throwaway for a registry that lives as long as one test).
const USER: &str = "weir";
const PASSWORD: &str = "weir-test-password";
/// `PASSWORD`'s bcrypt (cost 4), the only hash distribution's htpasswd
/// takes.
const PASSWORD_BCRYPT: &str = "$2b$04$/htTlYGysyrxOlAejtJPpehgQ/Z1uShEHQnZJGCUiyAD6PHQ.6py.";

impl Registry {
    async fn start(name: &str) -> Registry {
        Registry::start_with(name, false).await
    }

    /// A registry that asks for `USER`/`PASSWORD` (basic auth) when
    /// `authenticated`.
    async fn start_with(name: &str, authenticated: bool) -> Registry {
        let port = free_port();
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("oci-registry-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let config = dir.join("config.yml");
        let auth = if authenticated {
            let htpasswd = dir.join("htpasswd");
            std::fs::write(&htpasswd, format!("{USER}:{PASSWORD_BCRYPT}\n")).unwrap();
            format!(
                "auth:\n  htpasswd:\n    realm: weir-test\n    path: {}\n",
                htpasswd.display()
            )
        } else {
            String::new()
        };
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
                 http:\n  addr: 127.0.0.1:{port}\n{auth}",
                dir.join("data").display()
            ),
        )
        .unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("docker-registry (install it with bash scripts/registry.sh)");
        let mut registry = Registry {
            child: Some(child),
            addr: format!("127.0.0.1:{port}").parse().unwrap(),
            dir,
        };
        let deadline = Instant::now() + STEP;
        while TcpStream::connect(registry.addr).await.is_err() {
            assert!(Instant::now() < deadline, "the registry did not listen");
            let child = registry.child.as_mut().unwrap();
            assert!(child.try_wait().unwrap().is_none(), "the registry exited");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        registry
    }

    fn reference(&self, repo_and_tag: &str) -> String {
        format!("oci://{}/{repo_and_tag}", self.addr)
    }

    /// Kills the registry now (its port stops answering).
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The manifest `reference` (a tag or digest) of `repo`, as the
    /// registry serves it to an OCI client (plain HTTP/1.1 over loopback).
    async fn manifest(&self, repo: &str, reference: &str) -> serde_json::Value {
        let path = format!("/v2/{repo}/manifests/{reference}");
        let accept = "Accept: application/vnd.oci.image.manifest.v1+json\r\n";
        let (head, body) = self.http("GET", &path, accept, b"").await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        serde_json::from_slice(&body).unwrap()
    }

    /// One HTTP/1.1 request to the registry (the distribution API, by
    /// hand, for what `weir push` would never write); its head and body.
    async fn http(
        &self,
        method: &str,
        path: &str,
        headers: &str,
        body: &[u8],
    ) -> (String, Vec<u8>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = TcpStream::connect(self.addr).await.unwrap();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\n{headers}Content-Length: {}\r\n\
             Connection: close\r\n\r\n",
            self.addr,
            body.len()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(body).await.unwrap();
        let mut answer = Vec::new();
        timeout(STEP, stream.read_to_end(&mut answer))
            .await
            .unwrap()
            .unwrap();
        let split = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let head = String::from_utf8(answer[..split].to_vec()).unwrap();
        (head, answer[split + 4..].to_vec())
    }

    /// Uploads a blob (POST, then PUT with its digest); its digest.
    async fn upload_blob(&self, repo: &str, bytes: &[u8]) -> String {
        let digest = format!("sha256:{}", sha256_hex(bytes));
        let (head, _) = self
            .http("POST", &format!("/v2/{repo}/blobs/uploads/"), "", b"")
            .await;
        assert!(head.starts_with("HTTP/1.1 202"), "{head}");
        let location = head
            .lines()
            .find_map(|l| l.strip_prefix("Location: "))
            .unwrap()
            .trim();
        let location = location
            .strip_prefix(&format!("http://{}", self.addr))
            .unwrap_or(location);
        let sep = if location.contains('?') { '&' } else { '?' };
        let (head, _) = self
            .http(
                "PUT",
                &format!("{location}{sep}digest={digest}"),
                "Content-Type: application/octet-stream\r\n",
                bytes,
            )
            .await;
        assert!(head.starts_with("HTTP/1.1 201"), "{head}");
        digest
    }

    /// The registry's stored copy of blob `digest` (its filesystem driver's
    /// layout), to damage it.
    fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap();
        self.dir
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs the `weir` binary; (exit code, stdout, stderr).
fn weir(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
    cmd.args(args).env("RUST_LOG", "off");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `weir push examples/wasm/<name>.wasm <reference>`: the pinned reference
/// it prints last.
fn push(name: &str, reference: &str) -> String {
    let file = wasm(name).display().to_string();
    let (code, out, err) = weir(&["push", &file, reference], &[]);
    assert_eq!(code, Some(0), "weir push: {out}{err}");
    let pinned = out.lines().last().unwrap().to_string();
    assert!(
        pinned.contains("@sha256:")
            && out.contains(&format!("pushed {file} to {reference}: sha256:")),
        "{out}"
    );
    pinned
}

fn sha256_hex(bytes: &[u8]) -> String {
    weir::guest::hex_sha256(bytes)
}

/// Sends `text` and expects it back (the echo component).
async fn echoes(url: &str, text: &str) {
    let mut ws = common::client(url).await;
    ws.send(Message::text(text)).await.unwrap();
    match timeout(STEP, ws.next()).await {
        Ok(Some(Ok(Message::Text(t)))) => assert_eq!(t.as_str(), text),
        other => panic!("expected the echo of {text:?}, got {other:?}"),
    }
}

/// Kills the gateway and starts `weir serve` again on the same routes file
/// and ports (its state directory, with the OCI cache, kept).
async fn restart(gw: &mut Gateway) {
    let _ = gw.child.kill();
    let _ = gw.child.wait();
    gw.child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("serve")
        .arg(gw.dir.join("routes.toml"))
        .env("RUST_LOG", "warn")
        .env(TOKEN_ENV, TOKEN)
        .env("WEIR_CACHE_DIR", gw.dir.join("cache"))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + STEP;
    while TcpStream::connect(gw.addr).await.is_err() {
        assert!(Instant::now() < deadline, "weir serve did not listen again");
        assert!(gw.child.try_wait().unwrap().is_none(), "weir serve exited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn cached(gw: &Gateway, digest_hex: &str) -> PathBuf {
    gw.dir.join("weir-state/oci/blobs/sha256").join(digest_hex)
}

/// Pushed, served by digest over a real WebSocket, cached as the layer's
/// digest; then the registry is killed and a restarted gateway serves the
/// same component from its cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_component_is_served_and_survives_the_registry_going_away() {
    let mut registry = Registry::start("pinned").await;
    let pinned = push("echo", &registry.reference("weir/echo:v1"));
    assert!(
        pinned.starts_with(&registry.reference("weir/echo@sha256:")),
        "{pinned}"
    );
    let mut gw = Gateway::start(
        "oci-pinned",
        &[],
        &format!("[[route]]\npath = \"/e\"\nguest = \"{pinned}\"\n"),
    )
    .await;
    echoes(&gw.url("/e"), "from the registry").await;

    // The component is in the cache under its own sha256, byte for byte.
    let echo = std::fs::read(wasm("echo")).unwrap();
    let file = cached(&gw, &sha256_hex(&echo));
    assert_eq!(std::fs::read(&file).unwrap(), echo, "{}", file.display());
    // GET /routes names where it came from.
    let (status, body) = gw.admin(Method::GET, "/routes", Vec::new()).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(&pinned), "{body}");

    registry.stop();
    restart(&mut gw).await;
    echoes(&gw.url("/e"), "from the cache, registry gone").await;
}

/// A tag is resolved to its digest at load; `weir check` pulls and
/// compiles it; an unknown digest, an unknown tag, a layer damaged in the
/// registry and a registry that is down are each refused with an error
/// naming the reference.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tags_resolve_and_wrong_digests_are_refused() {
    let mut registry = Registry::start("tags").await;
    let tagged = registry.reference("weir/echo:stable");
    let pinned = push("echo", &tagged);
    let gw = Gateway::start(
        "oci-tag",
        &[],
        &format!("[[route]]\npath = \"/e\"\nguest = \"{tagged}\"\n"),
    )
    .await;
    echoes(&gw.url("/e"), "by tag").await;
    let (_, body) = gw.admin(Method::GET, "/routes", Vec::new()).await;
    let digest = pinned.split_once('@').unwrap().1;
    assert!(
        body.contains(&format!("{tagged}@{digest}")),
        "the tag is shown pinned to what it resolved to: {body}"
    );
    drop(gw);

    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("oci-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let check = |guest: &str| {
        let file = dir.join("routes.toml");
        std::fs::write(
            &file,
            format!("[[route]]\npath = \"/e\"\nguest = \"{guest}\"\n"),
        )
        .unwrap();
        weir(&["check", &file.display().to_string()], &[])
    };
    let (code, out, err) = check(&tagged);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("ok: 1 route"), "{out}");

    let unknown = registry.reference(&format!("weir/echo@sha256:{}", "0".repeat(64)));
    let (code, _, err) = check(&unknown);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&unknown) && err.contains("not found in the registry"),
        "{err}"
    );

    let (code, _, err) = check(&registry.reference("weir/echo:nope"));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("weir/echo:nope") && err.contains("not found"),
        "{err}"
    );

    // A layer damaged in the registry's storage: the registry serves it,
    // the digest check refuses it.
    let manifest = registry.manifest("weir/echo", digest).await;
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.wasm.config.v0+json"
    );
    assert_eq!(manifest["layers"][0]["mediaType"], "application/wasm");
    let layer = manifest["layers"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let blob = registry.blob_file(&layer);
    let mut bytes = std::fs::read(&blob).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&blob, &bytes).unwrap();
    // Pinned and cached by the check above: the registry is not asked.
    let (code, out, err) = check(&pinned);
    assert_eq!(code, Some(0), "{out}{err}");
    std::fs::remove_dir_all(dir.join("weir-state")).unwrap();
    let (code, _, err) = check(&pinned);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&pinned) && err.contains("digest mismatch") && err.contains(&layer),
        "{err}"
    );

    registry.stop();
    let (code, _, err) = check(&tagged);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&tagged) && err.contains("cannot reach the registry"),
        "{err}"
    );
    // Syntax only: no registry needed.
    let file = dir.join("routes.toml");
    let (code, out, err) = weir(&["check", "--no-pull", &file.display().to_string()], &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A tag is resolved again by a reload (SIGHUP): pushed over with another
/// component, the route serves it as its next version; the open
/// connection switches at its next message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_follows_a_moved_tag() {
    let registry = Registry::start("reload").await;
    let tagged = registry.reference("weir/app:live");
    push("echo", &tagged);
    let gw = Gateway::start(
        "oci-reload",
        &[],
        &format!("[[route]]\npath = \"/g\"\nguest = \"{tagged}\"\n"),
    )
    .await;
    let mut ws = common::client(&gw.url("/g")).await;
    ws.send(Message::text("{\"number\": 3}")).await.unwrap();
    let reply = timeout(STEP, ws.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(reply.to_text().unwrap(), "{\"number\": 3}", "echo first");

    let json = push("json", &tagged);
    gw.sighup();
    let deadline = Instant::now() + STEP;
    while gw.version("/g").await != 2 {
        assert!(
            Instant::now() < deadline,
            "the reload did not deploy the moved tag"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, body) = gw.admin(Method::GET, "/routes", Vec::new()).await;
    let digest = json.split_once('@').unwrap().1;
    assert!(body.contains(&format!("{tagged}@{digest}")), "{body}");
    ws.send(Message::text("{\"number\": 3}")).await.unwrap();
    let reply = timeout(STEP, ws.next()).await.unwrap().unwrap().unwrap();
    let value: serde_json::Value = serde_json::from_str(reply.to_text().unwrap()).unwrap();
    assert_eq!(
        value["number"], 4,
        "json answers the next even number: {reply}"
    );
}

/// An artifact that is not a wasm component (a container image's config
/// and a tar layer, written with the distribution API by hand) is refused,
/// its media type named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_that_is_not_a_wasm_artifact_is_refused() {
    let registry = Registry::start("mediatype").await;
    let config = b"{}";
    let layer = std::fs::read(wasm("echo")).unwrap();
    let config_digest = registry.upload_blob("weir/image", config).await;
    let layer_digest = registry.upload_blob("weir/image", &layer).await;
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config.len(),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": layer_digest,
            "size": layer.len(),
        }],
    });
    let (head, _) = registry
        .http(
            "PUT",
            "/v2/weir/image/manifests/v1",
            "Content-Type: application/vnd.oci.image.manifest.v1+json\r\n",
            &serde_json::to_vec(&manifest).unwrap(),
        )
        .await;
    assert!(head.starts_with("HTTP/1.1 201"), "{head}");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("oci-mediatype-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("routes.toml");
    let reference = registry.reference("weir/image:v1");
    std::fs::write(
        &file,
        format!("[[route]]\npath = \"/e\"\nguest = \"{reference}\"\n"),
    )
    .unwrap();
    let (code, _, err) = weir(&["check", &file.display().to_string()], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&reference)
            && err.contains("not a WebAssembly component artifact")
            && err.contains("application/vnd.oci.image.config.v1+json"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `weir deploy ROUTE oci://…`: the node pulls from the registry and
/// swaps the route's component; an unknown tag is refused with the
/// reference named, the route keeping its version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_pulls_from_the_registry_through_the_admin_api() {
    let registry = Registry::start("deploy").await;
    let reference = registry.reference("weir/json:v2");
    let pinned = push("json", &reference);
    let gw = Gateway::start(
        "oci-deploy",
        &["echo"],
        "[[route]]\npath = \"/g\"\nguest = \"echo.wasm\"\n",
    )
    .await;
    let admin = gw.admin.to_string();
    let env = [("WEIR_ADMIN_TOKEN", TOKEN)];
    let mut ws = common::client(&gw.url("/g")).await;
    ws.send(Message::text("{\"number\": 1}")).await.unwrap();
    let reply = timeout(STEP, ws.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(reply.to_text().unwrap(), "{\"number\": 1}", "echo first");

    let (code, out, err) = weir(&["deploy", "--admin", &admin, "/g", &reference], &env);
    assert_eq!(code, Some(0), "{out}{err}");
    let digest = pinned.split_once('@').unwrap().1;
    assert!(
        out.contains(&format!("deployed {reference}@{digest} to /g: version 2")),
        "{out}"
    );
    // The open connection switches at its next batch.
    ws.send(Message::text("{\"number\": 1}")).await.unwrap();
    let reply = timeout(STEP, ws.next()).await.unwrap().unwrap().unwrap();
    let value: serde_json::Value = serde_json::from_str(reply.to_text().unwrap()).unwrap();
    assert_eq!(
        value["number"], 2,
        "json answers the next even number: {reply}"
    );
    assert_eq!(gw.version("/g").await, 2);

    let missing = registry.reference("weir/json:v3");
    let (code, out, err) = weir(&["deploy", "--admin", &admin, "/g", &missing], &env);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains(&missing) && err.contains("answered 404") && err.contains("not found"),
        "{err}"
    );
    assert_eq!(gw.version("/g").await, 2);
    // A body that is not a reference is a 400 naming what to send.
    let path = weir::client::route_endpoint("/g", "pull");
    let (status, body) = gw.admin(Method::POST, &path, b"json.wasm".to_vec()).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("oci://"), "{body}");
}

/// A registry that wants credentials: without them push and pull are
/// refused saying which variables to set; with them (global, or for that
/// registry alone) both work; wrong ones are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_come_from_the_environment() {
    let registry = Registry::start_with("auth", true).await;
    let reference = registry.reference("weir/echo:v1");
    let file = wasm("echo").display().to_string();
    let (code, _, err) = weir(&["push", &file, &reference], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&reference) && err.contains("WEIR_OCI_USERNAME"),
        "{err}"
    );
    let (code, _, err) = weir(
        &["push", &file, &reference],
        &[("WEIR_OCI_USERNAME", USER), ("WEIR_OCI_PASSWORD", "wrong")],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("refused the credentials"), "{err}");
    let (code, out, err) = weir(
        &["push", &file, &reference],
        &[("WEIR_OCI_USERNAME", USER), ("WEIR_OCI_PASSWORD", PASSWORD)],
    );
    assert_eq!(code, Some(0), "{out}{err}");

    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("oci-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let routes = dir.join("routes.toml");
    std::fs::write(
        &routes,
        format!("[[route]]\npath = \"/e\"\nguest = \"{reference}\"\n"),
    )
    .unwrap();
    let routes = routes.display().to_string();
    let (code, _, err) = weir(&["check", &routes], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("WEIR_OCI_PASSWORD"), "{err}");
    // Per registry: the host and port upper-cased, the rest as `_`.
    let suffix = registry.addr.to_string().replace(['.', ':'], "_");
    let (user_var, password_var) = (
        format!("WEIR_OCI_USERNAME_{suffix}"),
        format!("WEIR_OCI_PASSWORD_{suffix}"),
    );
    let (code, out, err) = weir(
        &["check", &routes],
        &[(&user_var, USER), (&password_var, PASSWORD)],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `weir push` refuses what is not a component, before any registry is
/// asked.
#[test]
fn push_refuses_a_core_module() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let module = dir.join(format!("core-{}.wasm", std::process::id()));
    std::fs::write(&module, b"\0asm\x01\0\0\0").unwrap();
    let (code, _, err) = weir(
        &[
            "push",
            &module.display().to_string(),
            "oci://127.0.0.1:1/x:1",
        ],
        &[],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("core module, not a component"), "{err}");
    let _ = std::fs::remove_file(&module);
}

/// With `[cluster] redis`, `weir deploy ROUTE oci://…` through one node
/// is the fleet's: that node pulls, the bytes go to Redis by digest, and
/// the other node serves the new version without asking the registry
/// (stopped once the deploy is answered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_through_one_fleet_node_reaches_every_node() {
    use common::redis::{have_redis, Redis};
    if !have_redis() {
        return;
    }
    let registry = Registry::start("fleet").await;
    let reference = registry.reference("weir/json:fleet");
    let pinned = push("json", &reference);
    let redis = Redis::start(false).await;
    let routes = format!(
        "[cluster]\nredis = \"{}\"\n\n[[route]]\npath = \"/g\"\nguest = \"echo.wasm\"\n",
        redis.url()
    );
    let a = Gateway::start("oci-fleet-a", &["echo"], &routes).await;
    let b = Gateway::start("oci-fleet-b", &["echo"], &routes).await;
    // The registry is gone once A has pulled: B can only have it from Redis.
    let env = [("WEIR_ADMIN_TOKEN", TOKEN)];
    let admin = a.admin.to_string();
    let (code, out, err) = weir(
        &["deploy", "--cluster", "--admin", &admin, "/g", &reference],
        &env,
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let digest = pinned.split_once('@').unwrap().1;
    assert!(
        out.contains(&format!("deployed {reference}@{digest}")),
        "{out}"
    );
    drop(registry);
    let deadline = Instant::now() + STEP;
    loop {
        let mut ws = common::client(&b.url("/g")).await;
        ws.send(Message::text("{\"number\": 1}")).await.unwrap();
        let reply = timeout(STEP, ws.next()).await.unwrap().unwrap().unwrap();
        let value: serde_json::Value =
            serde_json::from_str(reply.to_text().unwrap()).unwrap_or_default();
        if value["number"] == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "B still serves echo: {reply}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(b.version("/g").await, 2, "B took it as its version 2");
}
