//! `weir new` and `weir build`: a guest project that builds outside any
//! checkout with only the `weir` binary and a Rust toolchain.
//!
//! The SDK travels inside the binary: `weir new` writes the sources of
//! `weir-guest`, `weir-abi` and the WIT this gateway speaks into the
//! project's `weir-sdk/` (so the project builds against exactly the ABI of
//! the gateway that made it, offline from weir's side), together with a
//! starter handler, its harness tests, a `.cargo/config.toml` that makes a
//! plain `cargo build` produce a component (wasm32-wasip2, 64 KiB stack),
//! a size-oriented release profile, and a routes file mounting it at
//! `/NAME`. `weir build` runs cargo with those settings and copies the
//! component to `dist/NAME.wasm`, the path the routes file names.
//!
//! `weir new NAME --lang js|python` writes the JavaScript or Python SDK
//! (guest-sdk/js, guest-sdk/python, with the WIT) into `weir-sdk/` and a
//! starter `handler.js` (with `handler.test.mjs`, for `node --test`) /
//! `handler.py` instead; `weir build` then installs
//! the SDK's pinned toolchain into `weir-sdk/` on first use (npm or pip)
//! and runs its build script.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context};

/// The SDK's sources, as this binary was built with them: (path under
/// `weir-sdk/`, contents). Manifests are rewritten by [`vendored_manifest`].
const SDK_FILES: &[(&str, &str)] = &[
    (
        "guest-sdk/Cargo.toml",
        include_str!("../../guest-sdk/Cargo.toml"),
    ),
    (
        "guest-sdk/src/lib.rs",
        include_str!("../../guest-sdk/src/lib.rs"),
    ),
    (
        "guest-sdk/src/conn.rs",
        include_str!("../../guest-sdk/src/conn.rs"),
    ),
    (
        "guest-sdk/src/io.rs",
        include_str!("../../guest-sdk/src/io.rs"),
    ),
    (
        "guest-sdk/src/realtime.rs",
        include_str!("../../guest-sdk/src/realtime.rs"),
    ),
    (
        "guest-sdk/src/request.rs",
        include_str!("../../guest-sdk/src/request.rs"),
    ),
    (
        "guest-sdk/src/runtime.rs",
        include_str!("../../guest-sdk/src/runtime.rs"),
    ),
    (
        "guest-sdk/src/hook.rs",
        include_str!("../../guest-sdk/src/hook.rs"),
    ),
    (
        "guest-sdk/src/state.rs",
        include_str!("../../guest-sdk/src/state.rs"),
    ),
    (
        "guest-sdk/src/testing.rs",
        include_str!("../../guest-sdk/src/testing.rs"),
    ),
    (
        "guest-sdk/src/pusher.rs",
        include_str!("../../guest-sdk/src/pusher.rs"),
    ),
    (
        "guest-sdk/src/handler.rs",
        include_str!("../../guest-sdk/src/handler.rs"),
    ),
    (
        "guest-sdk/src/exports.rs",
        include_str!("../../guest-sdk/src/exports.rs"),
    ),
    (
        "guest-sdk/src/testing/apply.rs",
        include_str!("../../guest-sdk/src/testing/apply.rs"),
    ),
    (
        "guest-sdk/src/testing/inbox.rs",
        include_str!("../../guest-sdk/src/testing/inbox.rs"),
    ),
    (
        "guest-sdk/src/testing/played.rs",
        include_str!("../../guest-sdk/src/testing/played.rs"),
    ),
    (
        "guest-sdk/src/testing/questions.rs",
        include_str!("../../guest-sdk/src/testing/questions.rs"),
    ),
    ("abi/Cargo.toml", include_str!("../../abi/Cargo.toml")),
    ("abi/src/lib.rs", include_str!("../../abi/src/lib.rs")),
    (
        "abi/src/commands.rs",
        include_str!("../../abi/src/commands.rs"),
    ),
    (
        "abi/src/conn_info.rs",
        include_str!("../../abi/src/conn_info.rs"),
    ),
    ("abi/src/error.rs", include_str!("../../abi/src/error.rs")),
    ("abi/src/events.rs", include_str!("../../abi/src/events.rs")),
    ("abi/src/header.rs", include_str!("../../abi/src/header.rs")),
    ("abi/src/io.rs", include_str!("../../abi/src/io.rs")),
    (
        "abi/src/commands/buf.rs",
        include_str!("../../abi/src/commands/buf.rs"),
    ),
    (
        "abi/src/commands/iter.rs",
        include_str!("../../abi/src/commands/iter.rs"),
    ),
    (
        "abi/src/io/reads.rs",
        include_str!("../../abi/src/io/reads.rs"),
    ),
    ("abi/src/pusher.rs", include_str!("../../abi/src/pusher.rs")),
    (
        "abi/src/realtime.rs",
        include_str!("../../abi/src/realtime.rs"),
    ),
    // The SDK's own unit tests read this vector.
    (
        "abi/vectors/commands.json",
        include_str!("../../abi/vectors/commands.json"),
    ),
    ("wit/weir.wit", include_str!("../../wit/weir.wit")),
];

/// The JavaScript SDK, under `weir-sdk/` of a `weir new --lang js` project.
const JS_SDK_FILES: &[(&str, &str)] = &[
    ("build.mjs", include_str!("../../guest-sdk/js/build.mjs")),
    (
        "package.json",
        include_str!("../../guest-sdk/js/package.json"),
    ),
    (
        "package-lock.json",
        include_str!("../../guest-sdk/js/package-lock.json"),
    ),
    ("README.md", include_str!("../../guest-sdk/js/README.md")),
    (
        "src/index.js",
        include_str!("../../guest-sdk/js/src/index.js"),
    ),
    ("src/abi.js", include_str!("../../guest-sdk/js/src/abi.js")),
    ("src/io.js", include_str!("../../guest-sdk/js/src/io.js")),
    (
        "src/questions.js",
        include_str!("../../guest-sdk/js/src/questions.js"),
    ),
    (
        "src/promise.js",
        include_str!("../../guest-sdk/js/src/promise.js"),
    ),
    // Node only: the build's rewrite and the test harness.
    (
        "src/transform.mjs",
        include_str!("../../guest-sdk/js/src/transform.mjs"),
    ),
    (
        "src/testing.mjs",
        include_str!("../../guest-sdk/js/src/testing.mjs"),
    ),
    (
        "src/loader.mjs",
        include_str!("../../guest-sdk/js/src/loader.mjs"),
    ),
    ("wit/weir.wit", include_str!("../../wit/weir.wit")),
    // For `build.mjs --world 0.3.0`.
    (
        "wit/0.3.0/weir.wit",
        include_str!("../../wit/0.3.0/weir.wit"),
    ),
];

/// The Python SDK, under `weir-sdk/` of a `weir new --lang python` project.
const PYTHON_SDK_FILES: &[(&str, &str)] = &[
    ("build.py", include_str!("../../guest-sdk/python/build.py")),
    (
        "requirements-build.txt",
        include_str!("../../guest-sdk/python/requirements-build.txt"),
    ),
    (
        "README.md",
        include_str!("../../guest-sdk/python/README.md"),
    ),
    (
        "weir_guest/__init__.py",
        include_str!("../../guest-sdk/python/weir_guest/__init__.py"),
    ),
    (
        "weir_guest/abi.py",
        include_str!("../../guest-sdk/python/weir_guest/abi.py"),
    ),
    (
        "weir_guest/runtime.py",
        include_str!("../../guest-sdk/python/weir_guest/runtime.py"),
    ),
    (
        "weir_guest/io.py",
        include_str!("../../guest-sdk/python/weir_guest/io.py"),
    ),
    (
        "weir_guest/questions.py",
        include_str!("../../guest-sdk/python/weir_guest/questions.py"),
    ),
    // Native only: the test harness.
    (
        "weir_guest/testing.py",
        include_str!("../../guest-sdk/python/weir_guest/testing.py"),
    ),
    ("wit/weir.wit", include_str!("../../wit/weir.wit")),
    // For `build.py --world 0.3.0`.
    (
        "wit/0.3.0/weir.wit",
        include_str!("../../wit/0.3.0/weir.wit"),
    ),
];

/// The language of a guest project (`weir new --lang`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    Rust,
    Js,
    Python,
}

impl Lang {
    /// `rust`, `js` (or `javascript`), `python` (or `py`).
    pub fn parse(s: &str) -> anyhow::Result<Lang> {
        Ok(match s {
            "rust" => Lang::Rust,
            "js" | "javascript" => Lang::Js,
            "python" | "py" => Lang::Python,
            other => bail!("no guest language \"{other}\": use rust, js or python"),
        })
    }
}

/// The versions the SDK pins, as tested with this gateway: the examples'
/// lock file (cargo drops the entries the project does not use).
const LOCK_FILE: &str = include_str!("../../examples/Cargo.lock");

/// The 64 KiB shadow stack flag (the target's default is 1 MiB, spent from
/// the route's `memory`); as in examples/.cargo/config.toml.
const STACK_FLAG: &str = "-C link-arg=-zstack-size=65536";

/// Where a new project's routes file listens: not 9001, which the example
/// gateway (`scripts/serve.sh`) and `weir serve` without a file take, so a
/// newcomer running both does not meet "address in use".
pub const SCAFFOLD_LISTEN: &str = "127.0.0.1:9011";

/// A manifest of this repository's workspace made standalone: inherited
/// keys spelled out, `[dev-dependencies]` (the SDK's own test tools)
/// dropped.
fn vendored_manifest(text: &str) -> String {
    let mut out = String::new();
    let mut skipping = false;
    for line in text.lines() {
        if line.starts_with('[') {
            skipping = line.trim() == "[dev-dependencies]";
        }
        if skipping {
            continue;
        }
        let line = match line.trim() {
            "edition.workspace = true" => "edition = \"2021\"",
            "license.workspace = true" => "license = \"Apache-2.0\"",
            "rust-version.workspace = true" => "rust-version = \"1.95\"",
            "version.workspace = true" => "version = \"0.1.0\"",
            _ => line,
        };
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Whether `name` can be a crate name and a route path segment.
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && name.len() <= 64
}

/// Write a new Rust guest project `name` into `parent/name`; returns its
/// path. Refuses an existing non-empty directory.
pub fn new_project(parent: &Path, name: &str) -> anyhow::Result<PathBuf> {
    new_project_in(parent, name, Lang::Rust)
}

/// Write a new guest project `name` in `lang` into `parent/name`; returns
/// its path. Refuses an existing non-empty directory.
pub fn new_project_in(parent: &Path, name: &str, lang: Lang) -> anyhow::Result<PathBuf> {
    if !valid_name(name) {
        bail!(
            "\"{name}\" cannot name a guest: use lower-case letters, digits, '-' and '_', starting with a letter"
        );
    }
    let dir = parent.join(name);
    if dir.exists() && dir.read_dir().map_or(true, |mut d| d.next().is_some()) {
        bail!("{} already exists and is not empty", dir.display());
    }
    let files = match lang {
        Lang::Rust => project_files(name),
        Lang::Js | Lang::Python => script_project_files(name, lang),
    };
    for (path, text) in &files {
        let path = dir.join(path);
        let parent = path.parent().expect("files are in directories");
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(dir)
}

/// Every file of a new project, relative to its directory.
fn project_files(name: &str) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = SDK_FILES
        .iter()
        .map(|(path, text)| {
            let text = if path.ends_with("Cargo.toml") {
                vendored_manifest(text)
            } else {
                text.to_string()
            };
            (format!("weir-sdk/{path}"), text)
        })
        .collect();
    let wit = include_str!("../../wit/weir.wit");
    let package = wit
        .lines()
        .find_map(|l| l.strip_prefix("package "))
        .unwrap_or("weir:gateway")
        .trim_end_matches(';');
    files.push((
        "weir-sdk/README.md".into(),
        format!(
            "The weir guest SDK (weir-guest) and the ABI it speaks ({package}), as\n\
             written by `weir new` of weir {}. Regenerate with a newer `weir new` to\n\
             follow a newer gateway.\n",
            env!("CARGO_PKG_VERSION")
        ),
    ));
    files.push(("Cargo.toml".into(), project_manifest(name)));
    files.push(("Cargo.lock".into(), LOCK_FILE.to_string()));
    files.push((
        ".cargo/config.toml".into(),
        format!(
            "# `weir build` makes the WebAssembly component weir loads (cargo build\n\
             # --release --target wasm32-wasip2, with these flags: the shadow stack is\n\
             # 64 KiB instead of 1 MiB, so the route's `memory` is spent on the heap).\n\
             # Plain `cargo test` runs the handler's tests natively (weir_guest::testing).\n\
             [target.wasm32-wasip2]\n\
             rustflags = [{}]\n",
            STACK_FLAG
                .split(' ')
                .map(|a| format!("\"{a}\""))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ));
    files.push((".gitignore".into(), "/target\n/dist\n".into()));
    files.push(("src/lib.rs".into(), STARTER.replace("NAME", name)));
    files.push(("src/tests.rs".into(), STARTER_TESTS.replace("NAME", name)));
    files.push((
        "routes.toml".into(),
        format!(
            "# `weir serve routes.toml` after `weir build`: {name} at ws://{SCAFFOLD_LISTEN}/{name}\n\
             [server]\n\
             listen = \"{SCAFFOLD_LISTEN}\"\n\n\
             [[route]]\n\
             path = \"/{name}\"\n\
             guest = \"dist/{name}.wasm\"\n"
        ),
    ));
    files.push(("README.md".into(), STARTER_README.replace("NAME", name)));
    files
}

/// Every file of a new JavaScript or Python project.
fn script_project_files(name: &str, lang: Lang) -> Vec<(String, String)> {
    let (sdk, handler, starter, ignore) = match lang {
        Lang::Js => (
            JS_SDK_FILES,
            "handler.js",
            JS_STARTER,
            "/dist\n/weir-sdk/node_modules\n",
        ),
        _ => (
            PYTHON_SDK_FILES,
            "handler.py",
            PYTHON_STARTER,
            "/dist\n/weir-sdk/.venv\n__pycache__/\n",
        ),
    };
    let mut files: Vec<(String, String)> = sdk
        .iter()
        .map(|(path, text)| (format!("weir-sdk/{path}"), text.to_string()))
        .collect();
    files.push((handler.into(), starter.replace("NAME", name)));
    if lang == Lang::Js {
        files.push((
            "handler.test.mjs".into(),
            JS_STARTER_TESTS.replace("NAME", name),
        ));
    } else {
        files.push((
            "test_handler.py".into(),
            PYTHON_STARTER_TESTS.replace("NAME", name),
        ));
    }
    files.push((".gitignore".into(), ignore.into()));
    files.push((
        "routes.toml".into(),
        format!(
            "# `weir serve routes.toml` after `weir build`: {name} at ws://{SCAFFOLD_LISTEN}/{name}\n\
             [server]\n\
             listen = \"{SCAFFOLD_LISTEN}\"\n\n\
             [[route]]\n\
             path = \"/{name}\"\n\
             guest = \"dist/{name}.wasm\"\n"
        ),
    ));
    let language = if lang == Lang::Js {
        "JavaScript"
    } else {
        "Python"
    };
    let tests = if lang == Lang::Js {
        "node --test             # handler.test.mjs: the handler under the SDK's harness (weir-sdk/src/testing.mjs)\n    "
    } else {
        "python3 -m unittest     # test_handler.py: the handler under the SDK's harness (weir-sdk/weir_guest/testing.py)\n    "
    };
    files.push((
        "README.md".into(),
        format!(
            "# {name}\n\n\
             A weir WebSocket handler in {language}.\n\n    \
             weir build              # dist/{name}.wasm (installs the SDK's toolchain into weir-sdk/ once)\n    \
             {tests}\
             weir serve routes.toml  # serves it at ws://{SCAFFOLD_LISTEN}/{name}\n\n\
             The handler is `{handler}`; the SDK it uses is in `weir-sdk/` (written by\n\
             `weir new`, matching the gateway's ABI), documented in weir-sdk/README.md.\n"
        ),
    ));
    files
}

const JS_STARTER: &str = r##"// NAME: a weir WebSocket handler. Greets each connection, then answers
// every text message with its number on this connection and the text
// ("#1 hello"); binary messages are echoed; `later N` answers "later"
// after N milliseconds (a timer the gateway holds: the hook awaits it).
// The count is the connection's state: the SDK saves it after each
// change, so it survives the gateway replacing the instance. Hooks may be
// async and use fetch, setTimeout and the key-value store (`import { kv }
// from "weir-guest"`). API: weir-sdk/README.md; tests: handler.test.mjs.

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export default {
  onOpen(conn) {
    conn.state = 0;
    conn.sendText("welcome to NAME");
  },
  async onMessage(conn, msg) {
    if (typeof msg !== "string") {
      conn.send(msg);
      return;
    }
    const later = /^later (\d+)$/.exec(msg);
    if (later) {
      await sleep(Number(later[1]));
      conn.sendText("later");
      return;
    }
    conn.state += 1;
    conn.sendText(`#${conn.state} ${msg}`);
  },
};
"##;

const JS_STARTER_TESTS: &str = r##"// Run with `node --test` (after `weir build`, which installs the SDK's
// toolchain): the handler runs natively under the SDK's harness, which
// plays the gateway (weir-sdk/src/testing.mjs: connect, send, read what was
// sent, fire timers, answer requests, inspect the key-value store).

import { test } from "node:test";
import assert from "node:assert/strict";
import { TestRoute } from "./weir-sdk/src/testing.mjs";

const handler = new URL("./handler.js", import.meta.url);

test("greets, then numbers each text message", async () => {
  const route = await TestRoute.load(handler, "/NAME");
  const c = route.connect("/NAME");
  route.sendText(c, "hello");
  route.sendBinary(c, new Uint8Array([7, 8]));
  assert.deepEqual(route.received(c), ["welcome to NAME", "#1 hello", new Uint8Array([7, 8])]);
});

test("the count survives the gateway replacing the instance", async () => {
  const route = await TestRoute.load(handler, "/NAME");
  const c = route.connect("/NAME");
  route.sendText(c, "a");
  await route.replaceInstance();
  route.sendText(c, "b");
  assert.deepEqual(route.texts(c), ["welcome to NAME", "#1 a", "#2 b"]);
});

test("later N answers after its timer fires", async () => {
  const route = await TestRoute.load(handler, "/NAME");
  const c = route.connect("/NAME");
  route.texts(c);
  route.sendText(c, "later 500");
  assert.deepEqual(route.texts(c), []);
  route.advance(499);
  assert.deepEqual(route.texts(c), []);
  route.advance(1);
  assert.deepEqual(route.texts(c), ["later"]);
});
"##;

const PYTHON_STARTER: &str = r##""""NAME: a weir WebSocket handler. Greets each connection, then answers
every text message with its number on this connection and the text
("#1 hello"); binary messages are echoed; `later N` answers "later" after
N milliseconds (a timer the gateway holds: the hook awaits it). The count
is the connection's state: the SDK saves it after each change, so it
survives the gateway replacing the instance. Hooks may be `async def` and
use fetch, sleep, timers and the key-value store (`from weir_guest import
fetch, kv`). API: weir-sdk/README.md; tests: test_handler.py."""

import weir_guest


class Handler(weir_guest.Handler):
    def on_open(self, conn):
        conn.state = 0
        conn.send_text("welcome to NAME")

    async def on_message(self, conn, msg):
        if not isinstance(msg, str):
            conn.send(msg)
            return
        word, _, arg = msg.partition(" ")
        if word == "later" and arg.isdigit():
            await weir_guest.sleep(int(arg) / 1000)
            conn.send_text("later")
            return
        conn.state += 1
        conn.send_text(f"#{conn.state} {msg}")
"##;

const PYTHON_STARTER_TESTS: &str = r##""""Run with `python3 -m unittest`: the handler runs natively under the
SDK's harness, which plays the gateway (weir-sdk/weir_guest/testing.py:
connect, send, read what was sent, fire timers, answer requests, inspect
the key-value store)."""

import pathlib
import sys
import unittest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "weir-sdk"))

from weir_guest.testing import TestRoute  # noqa: E402

HANDLER = HERE / "handler.py"


class HandlerTest(unittest.TestCase):
    def test_greets_then_numbers_each_text_message(self):
        route = TestRoute.load(HANDLER, "/NAME")
        c = route.connect("/NAME")
        route.send_text(c, "hello")
        route.send_binary(c, b"\x07\x08")
        self.assertEqual(route.received(c), ["welcome to NAME", "#1 hello", b"\x07\x08"])

    def test_the_count_survives_the_gateway_replacing_the_instance(self):
        route = TestRoute.load(HANDLER, "/NAME")
        c = route.connect("/NAME")
        route.send_text(c, "a")
        route.replace_instance()
        route.send_text(c, "b")
        self.assertEqual(route.texts(c), ["welcome to NAME", "#1 a", "#2 b"])

    def test_later_n_answers_after_its_timer_fires(self):
        route = TestRoute.load(HANDLER, "/NAME")
        c = route.connect("/NAME")
        route.texts(c)
        route.send_text(c, "later 500")
        self.assertEqual(route.texts(c), [])
        route.advance(0.499)
        self.assertEqual(route.texts(c), [])
        route.advance(0.001)
        self.assertEqual(route.texts(c), ["later"])


if __name__ == "__main__":
    unittest.main()
"##;

fn project_manifest(name: &str) -> String {
    let mut m = String::new();
    let _ = write!(
        m,
        "[package]\n\
         name = \"{name}\"\n\
         version = \"0.1.0\"\n\
         edition = \"2021\"\n\
         publish = false\n\n\
         [lib]\n\
         crate-type = [\"cdylib\"]\n\n\
         [dependencies]\n\
         weir-guest = {{ path = \"weir-sdk/guest-sdk\", features = [\"serde\"] }}\n\
         serde = {{ version = \"1\", features = [\"derive\"] }}\n\n\
         # A project of its own, also when it sits inside another cargo workspace.\n\
         [workspace]\n\n\
         # Small components: they load faster and cost less memory per instance.\n\
         [profile.release]\n\
         opt-level = \"s\"\n\
         lto = true\n\
         codegen-units = 1\n\
         panic = \"abort\"\n\
         strip = true\n"
    );
    m
}

const STARTER: &str = r##"//! NAME: a weir WebSocket handler. Greets each connection, then answers
//! every text message with its number on this connection and the text
//! (`#1 hello`); binary messages are echoed. The count is the connection's
//! state: the SDK saves it after each change, so it survives the gateway
//! replacing the instance. Docs: the weir-guest crate (`cargo doc --open`).

use weir_guest::{Conn, Handler, Message};

#[derive(Default)]
struct App;

impl Handler for App {
    type State = u64;

    fn on_open(&mut self, conn: &mut Conn<u64>) {
        conn.send_text("welcome to NAME");
    }

    fn on_message(&mut self, conn: &mut Conn<u64>, msg: Message) {
        match msg {
            Message::Text(text) => {
                *conn.state_mut() += 1;
                let n = *conn.state();
                conn.send_fmt(format_args!("#{n} {text}"));
            }
            Message::Binary(_) => conn.send(msg),
        }
    }
}

weir_guest::export!(App);

#[cfg(test)]
mod tests;
"##;

const STARTER_TESTS: &str = r##"//! Run with `cargo test`: the handler runs natively,
//! driven like the gateway drives it.

use super::App;
use weir_guest::testing::{Received, TestRoute};

#[test]
fn greets_then_numbers_text_and_echoes_binary() {
    let mut route = TestRoute::<App>::new("/NAME");
    let c = route.connect("/NAME");
    route.send_text(c, "hello");
    route.send_binary(c, &[1, 2]);
    assert_eq!(
        route.received(c),
        [
            Received::Text("welcome to NAME".into()),
            Received::Text("#1 hello".into()),
            Received::Binary(vec![1, 2]),
        ]
    );
}

#[test]
fn the_count_survives_a_new_instance() {
    let mut route = TestRoute::<App>::new("/NAME");
    let c = route.connect("/NAME");
    route.send_text(c, "a");
    route.replace_instance();
    route.send_text(c, "b");
    assert_eq!(route.texts(c)[1..], ["#1 a", "#2 b"]);
}
"##;

const STARTER_README: &str = r##"# NAME

A weir WebSocket handler.

    cargo test                       # the handler's tests, natively
    weir build                       # builds dist/NAME.wasm
    weir serve routes.toml           # serves it at ws://127.0.0.1:9011/NAME

The handler is `src/lib.rs`; the SDK it uses is in `weir-sdk/` (written by
`weir new`, matching the gateway's ABI). `cargo doc --open` documents it.
"##;

/// Build the project in `dir` and put the component at
/// `dir/dist/NAME.wasm`; returns that path. A project with a `handler.js`
/// or `handler.py` (`weir new --lang js|python`) is built with its SDK's
/// script (NAME: the directory's name); any other with cargo for
/// wasm32-wasip2.
pub fn build_project(dir: &Path) -> anyhow::Result<PathBuf> {
    if dir.join("handler.js").is_file() {
        return build_script_project(dir, Lang::Js);
    }
    if dir.join("handler.py").is_file() {
        return build_script_project(dir, Lang::Python);
    }
    build_rust_project(dir)
}

/// Run `cmd`, failing with `what` and its status when it fails; `missing`
/// says what to install when it cannot start.
fn run_tool(mut cmd: Command, what: &str, missing: &str) -> anyhow::Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {what} ({missing})"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

/// Build a JavaScript or Python project: the SDK's pinned toolchain into
/// `weir-sdk/` on first use, then its build script.
fn build_script_project(dir: &Path, lang: Lang) -> anyhow::Result<PathBuf> {
    let dir = dir
        .canonicalize()
        .with_context(|| format!("cannot find {}", dir.display()))?;
    let name = dir
        .file_name()
        .and_then(|n| n.to_str())
        .context("the project's directory has no name")?
        .to_string();
    let sdk = dir.join("weir-sdk");
    let dist = dir.join("dist");
    std::fs::create_dir_all(&dist).with_context(|| format!("cannot create {}", dist.display()))?;
    let out = dist.join(format!("{name}.wasm"));
    if lang == Lang::Js {
        // acorn came with 0.4.0's rewrite: an older install lacks it.
        if !sdk.join("node_modules/.bin/componentize-qjs").exists()
            || !sdk.join("node_modules/acorn").exists()
        {
            eprintln!("weir build: installing the SDK's toolchain (npm ci in weir-sdk/)");
            let mut npm = Command::new("npm");
            npm.current_dir(&sdk)
                .args(["ci", "--no-audit", "--no-fund", "--prefer-offline"])
                .stdout(Stdio::null());
            run_tool(npm, "npm ci", "install Node.js 20.6 or later with npm")?;
        }
        let mut node = Command::new("node");
        node.current_dir(&dir)
            .arg(sdk.join("build.mjs"))
            .arg("handler.js")
            .arg("-o")
            .arg(&out)
            .stdout(Stdio::null());
        run_tool(
            node,
            "the JS build (weir-sdk/build.mjs)",
            "install Node.js 20.6 or later",
        )?;
    } else {
        let venv = sdk.join(".venv");
        if !venv.join("bin/componentize-py").exists() {
            eprintln!("weir build: installing the SDK's toolchain (pip, into weir-sdk/.venv)");
            let mut mk = Command::new("python3");
            mk.args(["-m", "venv"]).arg(&venv);
            run_tool(mk, "python3 -m venv", "install Python 3 with venv")?;
            let mut pip = Command::new(venv.join("bin/pip"));
            pip.args(["install", "--quiet", "--disable-pip-version-check", "-r"])
                .arg(sdk.join("requirements-build.txt"));
            run_tool(pip, "pip install componentize-py", "the venv has no pip")?;
        }
        let mut py = Command::new("python3");
        py.current_dir(&dir)
            .arg(sdk.join("build.py"))
            .arg("handler.py")
            .arg("-o")
            .arg(&out);
        run_tool(
            py,
            "the Python build (weir-sdk/build.py)",
            "install Python 3",
        )?;
    }
    Ok(out)
}

/// Build a Rust project for wasm32-wasip2 and copy the component to
/// `dir/dist/NAME.wasm`; returns that path.
fn build_rust_project(dir: &Path) -> anyhow::Result<PathBuf> {
    let manifest_path = dir.join("Cargo.toml");
    let manifest = std::fs::read_to_string(&manifest_path).with_context(|| {
        format!(
            "cannot read {} (build a project made by `weir new`)",
            manifest_path.display()
        )
    })?;
    let manifest: toml::Table = manifest
        .parse()
        .with_context(|| format!("{} is not valid TOML", manifest_path.display()))?;
    let name = manifest
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(|n| n.as_str())
        .with_context(|| format!("{} has no [package] name", manifest_path.display()))?
        .to_string();
    ensure_wasm_target()?;
    let mut cargo = Command::new("cargo");
    cargo
        .current_dir(dir)
        .args(["build", "--release", "--target", "wasm32-wasip2"]);
    // RUSTFLAGS from the environment replaces the config file's flags, so
    // the stack flag must ride along.
    if let Ok(flags) = std::env::var("RUSTFLAGS") {
        cargo.env("RUSTFLAGS", format!("{flags} {STACK_FLAG}"));
    }
    let status = cargo
        .status()
        .context("cannot run cargo (install Rust: https://rustup.rs)")?;
    if !status.success() {
        bail!("cargo build failed ({status})");
    }
    let target_dir = target_dir(dir)?;
    let artifact = target_dir
        .join("wasm32-wasip2/release")
        .join(format!("{}.wasm", name.replace('-', "_")));
    let bytes = std::fs::read(&artifact)
        .with_context(|| format!("cargo built no {}", artifact.display()))?;
    // A component's preamble: \0asm, then layer 1 (a core module has 0).
    if bytes.get(..8) != Some(b"\0asm\x0d\0\x01\0") {
        bail!(
            "{} is not a WebAssembly component (is crate-type cdylib and the target wasm32-wasip2?)",
            artifact.display()
        );
    }
    let dist = dir.join("dist");
    std::fs::create_dir_all(&dist).with_context(|| format!("cannot create {}", dist.display()))?;
    let out = dist.join(format!("{name}.wasm"));
    std::fs::write(&out, &bytes).with_context(|| format!("cannot write {}", out.display()))?;
    // Absolute, as the JavaScript and Python builds print it.
    Ok(out.canonicalize().unwrap_or(out))
}

/// Where cargo puts the project's artifacts (`CARGO_TARGET_DIR`, config
/// files, or `target/`), as `cargo metadata` says.
fn target_dir(dir: &Path) -> anyhow::Result<PathBuf> {
    let out = Command::new("cargo")
        .current_dir(dir)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .output()
        .context("cannot run cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("cargo metadata printed no JSON")?;
    let target = meta["target_directory"]
        .as_str()
        .context("cargo metadata names no target_directory")?;
    Ok(PathBuf::from(target))
}

/// Make sure rustup's wasm32-wasip2 target is installed (add it if not).
/// Without rustup, cargo's own error will say what is missing.
fn ensure_wasm_target() -> anyhow::Result<()> {
    let Ok(list) = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
    else {
        eprintln!(
            "weir build: rustup not found; cargo needs the wasm32-wasip2 target's standard library"
        );
        return Ok(());
    };
    if String::from_utf8_lossy(&list.stdout)
        .lines()
        .any(|l| l.trim() == "wasm32-wasip2")
    {
        return Ok(());
    }
    eprintln!("weir build: adding the wasm32-wasip2 target (rustup target add wasm32-wasip2)");
    let status = Command::new("rustup")
        .args(["target", "add", "wasm32-wasip2"])
        .status()
        .context("cannot run rustup")?;
    if !status.success() {
        bail!("rustup target add wasm32-wasip2 failed ({status})");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every source file of the SDK and the ABI crate travels with the
    /// binary: a file added there and not here would make `weir new`
    /// projects fail to build.
    #[test]
    fn every_sdk_source_file_is_embedded() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut dirs = vec!["guest-sdk/src".to_string(), "abi/src".to_string()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(root.join(&dir)).unwrap() {
                let entry = entry.unwrap();
                let path = format!("{dir}/{}", entry.file_name().to_string_lossy());
                if entry.file_type().unwrap().is_dir() {
                    dirs.push(path);
                    continue;
                }
                assert!(
                    SDK_FILES.iter().any(|(p, _)| *p == path),
                    "{path} is not in scaffold::SDK_FILES"
                );
            }
        }
    }

    /// The same for the JavaScript and Python SDKs' runtime sources.
    #[test]
    fn every_js_and_python_sdk_source_file_is_embedded() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk");
        for (dir, files) in [
            ("js/src", JS_SDK_FILES),
            ("python/weir_guest", PYTHON_SDK_FILES),
        ] {
            let under = dir.split_once('/').map_or("", |(_, d)| d);
            for entry in std::fs::read_dir(root.join(dir)).unwrap() {
                let name = entry.unwrap().file_name().to_string_lossy().into_owned();
                if name == "__pycache__" {
                    continue;
                }
                let path = format!("{under}/{name}");
                assert!(
                    files.iter().any(|(p, _)| *p == path),
                    "guest-sdk/{dir}/{name} is not embedded in scaffold.rs"
                );
            }
        }
        assert_eq!(Lang::parse("py").unwrap(), Lang::Python);
        assert!(Lang::parse("cobol").is_err());
    }

    #[test]
    fn vendored_manifests_stand_alone() {
        for (path, text) in SDK_FILES {
            if path.ends_with("Cargo.toml") {
                let out = vendored_manifest(text);
                assert!(!out.contains("workspace = true"), "{path}: {out}");
                assert!(!out.contains("[dev-dependencies]"), "{path}");
                out.parse::<toml::Table>().unwrap();
            }
        }
    }

    #[test]
    fn names_must_suit_a_crate_and_a_path() {
        for ok in ["shout", "my-room", "a1_b"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "Shout", "1room", "a/b", "a b", "../x", &"x".repeat(65)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn a_new_project_refuses_a_directory_in_use() {
        let parent = std::env::temp_dir().join(format!("weir-scaffold-{}", std::process::id()));
        std::fs::create_dir_all(parent.join("taken")).unwrap();
        std::fs::write(parent.join("taken/file"), "x").unwrap();
        let err = new_project(&parent, "taken").unwrap_err();
        assert!(err.to_string().contains("not empty"), "{err}");
        let dir = new_project(&parent, "fresh").unwrap();
        let routes = std::fs::read_to_string(dir.join("routes.toml")).unwrap();
        assert!(routes.contains("path = \"/fresh\""), "{routes}");
        assert!(dir.join("weir-sdk/wit/weir.wit").is_file());
        std::fs::remove_dir_all(&parent).unwrap();
    }
}
