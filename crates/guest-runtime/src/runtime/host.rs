//! What a guest instance sees of the host: the per-Store state (WASI context
//! with no files and no sockets, the route's environment only), the
//! `weir:gateway/host` imports (log, connection), the memory limiter, and
//! guest stdout/stderr gathered into lines; every line goes through the
//! route's [`RouteLog`] (level, budget, escaping).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::runtime::abi::bindings::weir::gateway::{host, kv, types};
use crate::runtime::abi::bindings_v3::weir::gateway as v3;
use crate::runtime::log::{RouteLog, MAX_LOG_LINE_BYTES};
use crate::services::kv::KvStore;
use crate::ConnectionId;
use weir_config::LogLevel;

/// Everything one wasmtime Store carries.
pub(crate) struct StoreState {
    wasi: WasiCtx,
    table: ResourceTable,
    /// The route's log limiter, for the `log` import.
    log: Arc<RouteLog>,
    /// Memory cap of the route, enforced by [`wasmtime::ResourceLimiter`].
    memory_limit: usize,
    /// Set when the limiter refused growth, so the fault is reported as
    /// `Memory` rather than the trap the guest's allocator turns it into.
    pub(crate) memory_refused: bool,
    /// The runner's connection records, moved in for the duration of a
    /// call so the `connection` import can read them (a cheap swap, not a
    /// copy).
    pub(crate) conns: HashMap<ConnectionId, ConnRecord>,
    /// The route's key-value store, for the `kv.get` import (0.4.0).
    pub(crate) kv: Option<Arc<KvStore>>,
}

impl StoreState {
    pub(crate) fn new(log: Arc<RouteLog>, env: &[(String, String)], memory_limit: usize) -> Self {
        let mut b = WasiCtxBuilder::new();
        // No preopened directories and no network: a guest talks to the
        // world only through commands. Clocks and randomness stay available.
        b.envs(env)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .stdout(LogStream::new(log.clone(), "stdout"))
            .stderr(LogStream::new(log.clone(), "stderr"));
        StoreState {
            wasi: b.build(),
            table: ResourceTable::new(),
            log,
            memory_limit,
            memory_refused: false,
            conns: HashMap::new(),
            kv: None,
        }
    }
}

/// What the host keeps of one guest connection: its connection info as the
/// open event carried it (target, route parameters), then its attachment,
/// in one buffer, so the `connection` import answers with one copy.
pub(crate) struct ConnRecord {
    bytes: Vec<u8>,
    /// Where the attachment starts.
    fixed: usize,
}

impl ConnRecord {
    /// The record of an open event's connection info; None if the bytes do
    /// not follow the layout (the host built them, so that is a bug).
    pub(crate) fn new(info: &[u8]) -> Option<Self> {
        let parsed = weir_abi::ConnInfo::parse(info, 0).ok()?;
        Some(ConnRecord {
            fixed: parsed.fixed().len(),
            bytes: info.to_vec(),
        })
    }

    pub(crate) fn attachment(&self) -> &[u8] {
        &self.bytes[self.fixed..]
    }

    /// Replace the attachment (empty clears it).
    pub(crate) fn set_attachment(&mut self, attachment: &[u8]) {
        self.bytes.truncate(self.fixed);
        self.bytes.extend_from_slice(attachment);
        if attachment.is_empty() {
            self.bytes.shrink_to_fit();
        }
    }
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl wasmtime::ResourceLimiter for StoreState {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_limit {
            self.memory_refused = true;
            // An error (not `Ok(false)`) traps at once: a Rust guest would
            // otherwise abort in its allocator with a less telling trap.
            wasmtime::bail!(
                "memory limit of {} bytes reached (wanted {desired})",
                self.memory_limit
            );
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Tables hold function references; a handler needs a few hundred.
        Ok(desired <= 100_000)
    }
}

impl types::Host for StoreState {}

impl host::Host for StoreState {
    fn log(&mut self, level: host::Level, msg: String) {
        let level = match level {
            host::Level::Error => LogLevel::Error,
            host::Level::Warn => LogLevel::Warn,
            host::Level::Info => LogLevel::Info,
            host::Level::Debug | host::Level::Trace => LogLevel::Debug,
        };
        self.log.write(level, "log", msg.as_bytes());
    }

    fn connection(&mut self, conn: ConnectionId) -> Option<Vec<u8>> {
        self.conns.get(&conn).map(|record| record.bytes.clone())
    }
}

impl kv::Host for StoreState {
    fn get(&mut self, key: Vec<u8>) -> Option<Vec<u8>> {
        self.kv.as_ref()?.get(&key)
    }
}

// weir:gateway 0.3.0: the same imports, for components built against it.
impl v3::types::Host for StoreState {}

impl v3::host::Host for StoreState {
    fn log(&mut self, level: v3::host::Level, msg: String) {
        use v3::host::Level as L;
        let level = match level {
            L::Error => host::Level::Error,
            L::Warn => host::Level::Warn,
            L::Info => host::Level::Info,
            L::Debug => host::Level::Debug,
            L::Trace => host::Level::Trace,
        };
        host::Host::log(self, level, msg)
    }

    fn connection(&mut self, conn: ConnectionId) -> Option<Vec<u8>> {
        host::Host::connection(self, conn)
    }
}

/// Guest stdout or stderr: bytes are gathered into lines, and each line goes
/// to the route's log (info for stdout, warn for stderr).
#[derive(Clone)]
struct LogStream {
    log: Arc<RouteLog>,
    name: &'static str,
    /// The unfinished line; shared by every handle the guest opens.
    pending: Arc<Mutex<Vec<u8>>>,
}

impl LogStream {
    fn new(log: Arc<RouteLog>, name: &'static str) -> Self {
        LogStream {
            log,
            name,
            pending: Arc::default(),
        }
    }

    fn emit(&self, line: &[u8]) {
        let level = if self.name == "stderr" {
            LogLevel::Warn
        } else {
            LogLevel::Info
        };
        self.log.write(level, self.name, line);
    }

    fn write_bytes(&self, bytes: &[u8]) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.extend_from_slice(bytes);
        while let Some(nl) = pending.iter().position(|&b| b == b'\n') {
            self.emit(&pending[..nl]);
            pending.drain(..=nl);
        }
        if pending.len() > MAX_LOG_LINE_BYTES {
            self.emit(&pending);
            pending.clear();
        }
    }

    fn flush_pending(&self) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if !pending.is_empty() {
            self.emit(&pending);
            pending.clear();
        }
    }
}

impl Drop for LogStream {
    fn drop(&mut self) {
        // The last handle of a Store flushes an unterminated line (e.g. a
        // panic message written just before the trap).
        if Arc::strong_count(&self.pending) == 1 {
            self.flush_pending();
        }
    }
}

impl IsTerminal for LogStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LogStream {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for LogStream {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.write_bytes(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

impl Pollable for LogStream {
    fn ready<'a, 'b>(&'a mut self) -> Pin<Box<dyn Future<Output = ()> + Send + 'b>>
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(std::future::ready(()))
    }
}

impl tokio::io::AsyncWrite for LogStream {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.write_bytes(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
