//! A `weir serve` child with an admin listener, for the tests that drive
//! the admin API (deploy, dashboard).
#![allow(dead_code)]

use crate::common::STEP;
use crate::guest_support::wasm;
use http::Method;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// The admin token every test's gateway is started with.
pub const TOKEN: &str = "test-admin-token-0123456789";
pub const TOKEN_ENV: &str = "WEIR_TEST_ADMIN_TOKEN";

/// An HTTP/1.1 request (`connection: close`, a body of `body_len` bytes to
/// follow): its head, blank line included.
pub fn request_head(
    method: &str,
    path: &str,
    host: &str,
    headers: &[(&str, &str)],
    body_len: usize,
) -> String {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\ncontent-length: {body_len}\r\n"
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    head
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `weir serve` child with an admin listener, serving a routes file in a
/// directory of its own (components copied there, so a test can change
/// them); killed on drop.
pub struct Gateway {
    pub child: Child,
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub dir: PathBuf,
}

impl Gateway {
    /// Serves `routes` (`[[route]]` tables; guest paths relative to the
    /// test's directory, where `files` are copied from examples/wasm:
    /// `"echo"` as echo.wasm, `"echo>v"` as v.wasm).
    pub async fn start(name: &str, files: &[&str], routes: &str) -> Gateway {
        Gateway::start_with(name, files, routes, false).await
    }

    /// [`Gateway::start`], with the gateway's log in [`Gateway::log`]'s file
    /// instead of the test's output when `log_to_file`.
    pub async fn start_with(
        name: &str,
        files: &[&str],
        routes: &str,
        log_to_file: bool,
    ) -> Gateway {
        let (port, admin_port) = (free_port(), free_port());
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("deploy-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for file in files {
            // "echo>v": examples/wasm/echo.wasm copied as v.wasm.
            let (from, to) = file.split_once('>').unwrap_or((file, file));
            std::fs::copy(wasm(from), dir.join(format!("{to}.wasm"))).unwrap();
        }
        let gateway_routes = Gateway::routes_file(port, admin_port, routes);
        std::fs::write(dir.join("routes.toml"), gateway_routes).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("serve")
            .arg(dir.join("routes.toml"))
            .env("RUST_LOG", if log_to_file { "debug" } else { "warn" })
            .env(TOKEN_ENV, TOKEN)
            .env("WEIR_CACHE_DIR", dir.join("cache"))
            .stdout(Stdio::null())
            .stderr(if log_to_file {
                Stdio::from(std::fs::File::create(dir.join("weir.log")).unwrap())
            } else {
                Stdio::inherit()
            })
            .spawn()
            .unwrap();
        let mut gateway = Gateway {
            child,
            addr: format!("127.0.0.1:{port}").parse().unwrap(),
            admin: format!("127.0.0.1:{admin_port}").parse().unwrap(),
            dir,
        };
        let deadline = Instant::now() + STEP;
        while TcpStream::connect(gateway.admin).await.is_err()
            || TcpStream::connect(gateway.addr).await.is_err()
        {
            assert!(Instant::now() < deadline, "weir serve did not listen");
            assert!(
                gateway.child.try_wait().unwrap().is_none(),
                "weir serve exited"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        gateway
    }

    pub fn routes_file(port: u16, admin_port: u16, routes: &str) -> String {
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nworkers = 2\n\n\
             [admin]\nlisten = \"127.0.0.1:{admin_port}\"\ntoken_env = \"{TOKEN_ENV}\"\n\n{routes}\n"
        )
    }

    /// Rewrites the routes file (same ports) with `routes`.
    pub fn rewrite(&self, routes: &str) {
        let text = Gateway::routes_file(self.addr.port(), self.admin.port(), routes);
        std::fs::write(self.dir.join("routes.toml"), text).unwrap();
    }

    /// What the gateway logged, when started with `log_to_file`.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("weir.log")).unwrap_or_default()
    }

    pub fn url(&self, path: &str) -> String {
        format!("ws://{}{}", self.addr, path)
    }

    pub async fn admin_as(
        &self,
        token: &str,
        method: Method,
        path: &str,
        body: Vec<u8>,
    ) -> (u16, String) {
        weir::client::request(&self.admin.to_string(), token, method, path, body)
            .await
            .expect("admin request")
    }

    pub async fn admin(&self, method: Method, path: &str, body: Vec<u8>) -> (u16, String) {
        self.admin_as(TOKEN, method, path, body).await
    }

    /// `PUT /routes/{route}/component` with examples/wasm/`name`.wasm.
    pub async fn deploy(&self, route: &str, name: &str) -> (u16, String) {
        let body = std::fs::read(wasm(name)).unwrap();
        let path = weir::client::route_endpoint(route, "component");
        self.admin(Method::PUT, &path, body).await
    }

    pub async fn metric(&self, name: &str) -> Option<u64> {
        let (status, body) = self.admin(Method::GET, "/metrics", Vec::new()).await;
        assert_eq!(status, 200, "{body}");
        weir::metrics::read(&body, name)
    }

    /// The serving version of `route`, from `GET /routes`.
    pub async fn version(&self, route: &str) -> u64 {
        let (status, body) = self.admin(Method::GET, "/routes", Vec::new()).await;
        assert_eq!(status, 200, "{body}");
        let list: serde_json::Value = serde_json::from_str(&body).unwrap();
        list["routes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["path"] == route)
            .unwrap_or_else(|| panic!("{route} in {body}"))["version"]
            .as_u64()
            .unwrap()
    }

    /// Runs `weir ARGS… --admin <this gateway's admin address>` to its end,
    /// with the admin token in `WEIR_ADMIN_TOKEN`: its exit code, stdout
    /// and stderr.
    pub fn weir(&self, args: &[&str]) -> (Option<i32>, String, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(args)
            .args(["--admin", &self.admin.to_string()])
            .env("WEIR_ADMIN_TOKEN", TOKEN)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    pub fn sighup(&self) {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) on the child this test spawned; no memory involved.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
