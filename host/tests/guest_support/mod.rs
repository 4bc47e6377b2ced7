//! Shared helpers for the guest tests: find the example components (built by
//! scripts/build-guests.sh), one engine per test binary, and an owned copy of
//! a guest's commands for assertions.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use weir::guest::{Batch, Command, Commands, GuestEngine, Program, Runner};
use weir_config::{GuestConfig, Isolation};

/// `examples/wasm/<name>.wasm`, or a panic that says how to build it.
pub fn wasm(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/wasm")
        .join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: run scripts/build-guests.sh first (the guest tests never skip)",
        path.display()
    );
    path
}

/// One engine for the whole test binary (the pool reserves address space per
/// engine), caching artifacts under this test run's temporary directory.
pub fn engine() -> Arc<GuestEngine> {
    static ENGINE: OnceLock<Arc<GuestEngine>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("weir-guest-cache");
            GuestEngine::new(Some(dir)).expect("engine")
        })
        .clone()
}

/// Route settings for tests: generous deadline (the machine is shared and
/// epochs count wall time), 16 MiB memory.
pub fn config(name: &str) -> GuestConfig {
    GuestConfig {
        wasm: wasm(name),
        oci: None,
        isolation: Isolation::Worker,
        memory: 16 << 20,
        timeout: Duration::from_millis(500),
        instances: 64,
        recycle_after: 10_000,
        attachment_max: 16 << 10,
        env: BTreeMap::new(),
        log: Default::default(),
        cpu_share: 50,
        outbound: Default::default(),
        kv: None,
        kv_quota: Default::default(),
        realtime: false,
    }
}

pub fn program_with(name: &str, route: &str, edit: impl FnOnce(&mut GuestConfig)) -> Arc<Program> {
    let mut cfg = config(name);
    edit(&mut cfg);
    Program::load(&engine(), route, &cfg).unwrap_or_else(|e| panic!("load {name}: {e}"))
}

pub fn runner(name: &str) -> Runner {
    Runner::new(program_with(name, &format!("/{name}"), |_| {}))
}

/// A command with owned bytes, for `assert_eq!`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owned {
    Text(u64, String),
    Binary(u64, Vec<u8>),
    Close(u64, u16, String),
    Publish {
        topic: String,
        text: bool,
        payload: Vec<u8>,
        exclude: Option<u64>,
    },
    Subscribe(u64, String),
    Unsubscribe(u64, String),
    /// An I/O command (0.4.0), as its Debug text.
    Io(String),
}

pub fn owned(cmds: &Commands) -> Vec<Owned> {
    cmds.iter()
        .map(|c| match c {
            Command::Send {
                conn,
                text: true,
                payload,
            } => Owned::Text(conn, String::from_utf8(payload.to_vec()).unwrap()),
            Command::Send {
                conn,
                text: false,
                payload,
            } => Owned::Binary(conn, payload.to_vec()),
            Command::Close { conn, code, reason } => Owned::Close(conn, code, reason.to_string()),
            Command::Publish {
                topic,
                text,
                payload,
                exclude,
            } => Owned::Publish {
                topic: topic.to_string(),
                text,
                payload: payload.to_vec(),
                exclude,
            },
            Command::Subscribe { conn, topic } => Owned::Subscribe(conn, topic.to_string()),
            Command::Unsubscribe { conn, topic } => Owned::Unsubscribe(conn, topic.to_string()),
            Command::SetAttachment { .. } => unreachable!("the runner applies attachments"),
            io => Owned::Io(format!("{io:?}")),
        })
        .collect()
}

/// One text message from `conn` in a batch of its own, answered.
/// Open `conn` on `runner` (target `/`, no parameters, no attachment).
pub fn open(runner: &mut Runner, conn: u64) -> Result<Vec<Owned>, weir::guest::Fault> {
    let mut b = Batch::new();
    b.push_open(conn, "/", &[], b"");
    runner.handle(&mut b).map(|c| owned(&c))
}

pub fn send_text(
    runner: &mut Runner,
    conn: u64,
    text: &str,
) -> Result<Vec<Owned>, weir::guest::Fault> {
    let mut b = Batch::new();
    b.push_message(conn, true, text.as_bytes());
    runner.handle(&mut b).map(|c| owned(&c))
}
