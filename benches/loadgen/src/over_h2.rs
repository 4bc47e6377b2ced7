//! `--h2`: WebSockets over HTTP/2 (RFC 8441). Each generator thread runs a
//! current-thread tokio runtime with the `h2` crate: TCP connections
//! (h2c with prior knowledge for `ws://`, TLS with ALPN `h2` for `wss://`),
//! each carrying up to `--streams` WebSockets opened by an extended CONNECT
//! (`:protocol = websocket`). A stream is one task: the frames due go out
//! as one DATA frame, what comes back is parsed and checked exactly as over
//! HTTP/1.1 (`ws::Parser`, `payload::Checker`). Request/response loads only
//! (echo, json, binary).

use crate::conn::{Outbox, Target};
use crate::engine::{Control, ThreadResult, DONE, MEASURE};
use crate::payload::{Checker, Expect, Source, MASK_KEY};
use crate::ws::{self, Parser, OP_CLOSE, OP_PONG};
use bytes::Bytes;
use h2::client::SendRequest;
use http::{Method, Request};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Barrier;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// A stream with an in-flight message older than this has stalled (as in `engine`).
const STALL: Duration = Duration::from_secs(3);
/// Receive windows we grant: large enough that replies of a whole
/// pipeline (64 KiB × 8) never wait for a WINDOW_UPDATE from us.
const STREAM_WINDOW_BYTES: u32 = 4 << 20;
const CONN_WINDOW_BYTES: u32 = 64 << 20;
/// How long the connection preface, SETTINGS and each CONNECT may take.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// One WebSocket on a stream: what is sent, what must come back.
struct WsState {
    parser: Parser,
    check: Checker,
    out: Outbox,
    send_seq: u64,
    sent_at: Vec<Instant>,
    dead: Option<String>,
}

impl WsState {
    fn new(src: Source, expect: Expect, depth: usize) -> Self {
        WsState {
            parser: Parser::default(),
            check: Checker::new(expect),
            out: Outbox::new(src, depth),
            send_seq: 0,
            sent_at: vec![Instant::now(); depth.max(1)],
            dead: None,
        }
    }

    fn queue_next(&mut self, now: Instant) {
        let seq = self.send_seq;
        self.out.push(seq);
        let n = self.sent_at.len() as u64;
        self.sent_at[(seq % n) as usize] = now;
        self.send_seq += 1;
    }

    fn sent_time(&self, seq: u64) -> Instant {
        self.sent_at[(seq % self.sent_at.len() as u64) as usize]
    }
}

/// Runs one generator thread: opens connections and streams for `ends`
/// (`streams` per connection), meets the other threads and the main one
/// at `ready`, then keeps `depth` messages in flight on every stream until
/// the phase is DONE.
pub fn run(
    target: &Target,
    ends: Vec<(Source, Expect)>,
    streams: usize,
    depth: usize,
    ctl: &'static Control,
    ready: &Barrier,
) -> ThreadResult {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            ready.wait();
            return failed(format!("tokio runtime: {e}"), ends.len());
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let res = Rc::new(RefCell::new(ThreadResult::default()));
        let mut opened = Vec::new();
        let mut setup_error = None;
        'open: for chunk in ends.chunks(streams.max(1)) {
            let client = match open_conn(target).await {
                Ok(c) => c,
                Err(e) => {
                    setup_error = Some(e);
                    break;
                }
            };
            for &(src, expect) in chunk {
                match tokio::time::timeout(SETUP_TIMEOUT, open_stream(&client, target)).await {
                    Ok(Ok((send, recv))) => {
                        let state = Rc::new(RefCell::new(WsState::new(src, expect, depth)));
                        opened.push((send, recv, state));
                    }
                    Ok(Err(e)) => {
                        setup_error = Some(e);
                        break 'open;
                    }
                    Err(_) => {
                        setup_error =
                            Some(format!("no answer to CONNECT within {SETUP_TIMEOUT:?}"));
                        break 'open;
                    }
                }
            }
        }
        ready.wait();
        if let Some(e) = setup_error {
            return failed(format!("setup: {e}"), ends.len() - opened.len());
        }
        let states: Vec<_> = opened.iter().map(|(_, _, s)| s.clone()).collect();
        for (send, recv, state) in opened {
            tokio::task::spawn_local(drive(send, recv, state, depth, ctl, res.clone()));
        }
        while ctl.get() != DONE {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut res = std::mem::take(&mut *res.borrow_mut());
        collect(&states, &mut res);
        res
    })
}

/// A result with `n` failed connections and why.
fn failed(why: String, n: usize) -> ThreadResult {
    ThreadResult {
        failed_conns: n.max(1) as u64,
        errors: vec![why],
        ..ThreadResult::default()
    }
}

/// Mismatches, dead and stalled streams, as `engine` counts them.
fn collect(states: &[Rc<RefCell<WsState>>], res: &mut ThreadResult) {
    let end = Instant::now();
    for (i, s) in states.iter().enumerate() {
        let s = s.borrow();
        res.mismatches += s.check.mismatches;
        res.lost += s.check.lost;
        for e in &s.check.errors {
            if res.errors.len() < 20 {
                res.errors.push(format!("stream {i}: {e}"));
            }
        }
        let mut problem = s.dead.clone();
        if problem.is_none() && s.send_seq > s.check.next_seq {
            let oldest = end.duration_since(s.sent_time(s.check.next_seq));
            if oldest > STALL {
                problem = Some(format!("no reply for {:.1}s", oldest.as_secs_f64()));
            }
        }
        if let Some(p) = problem {
            res.failed_conns += 1;
            if res.errors.len() < 20 {
                res.errors.push(format!("stream {i}: {p}"));
            }
        }
    }
}

/// Opens one HTTP/2 connection and waits for the server's SETTINGS to
/// enable extended CONNECT (RFC 8441 §3).
async fn open_conn(target: &Target) -> Result<SendRequest<Bytes>, String> {
    let tcp = tokio::time::timeout(SETUP_TIMEOUT, TcpStream::connect(&target.addr))
        .await
        .map_err(|_| format!("connect {}: timed out", target.addr))?
        .map_err(|e| format!("connect {}: {e}", target.addr))?;
    tcp.set_nodelay(true).ok();
    let client = match (&target.tls, target.secure) {
        (_, false) => handshake(tcp).await?,
        (Some(config), true) => {
            let name = crate::stream::server_name(&target.host)?;
            let tls = tokio_rustls::TlsConnector::from(config.clone())
                .connect(name, tcp)
                .await
                .map_err(|e| format!("TLS handshake: {e}"))?;
            static SHOWN: std::sync::Once = std::sync::Once::new();
            SHOWN.call_once(|| println!("TLS: {}", crate::stream::describe(tls.get_ref().1)));
            let alpn = tls.get_ref().1.alpn_protocol();
            if alpn != Some(b"h2") {
                return Err(format!(
                    "the server did not choose ALPN h2 (got {:?})",
                    alpn.map(String::from_utf8_lossy)
                ));
            }
            handshake(tls).await?
        }
        (None, true) => return Err("wss:// without a TLS configuration".into()),
    };
    let deadline = Instant::now() + SETUP_TIMEOUT;
    let mut client = client.ready().await.map_err(|e| format!("HTTP/2: {e}"))?;
    while !client.is_extended_connect_protocol_enabled() {
        if Instant::now() > deadline {
            return Err("the server never enabled extended CONNECT (RFC 8441)".into());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        client = client.ready().await.map_err(|e| format!("HTTP/2: {e}"))?;
    }
    Ok(client)
}

/// The client preface and SETTINGS over `io`; the connection's task runs
/// on this thread's `LocalSet`.
async fn handshake<T>(io: T) -> Result<SendRequest<Bytes>, String>
where
    T: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let (client, conn) = h2::client::Builder::new()
        .initial_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(CONN_WINDOW_BYTES)
        .handshake::<T, Bytes>(io)
        .await
        .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
    tokio::task::spawn_local(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// An extended CONNECT for the target's path; the stream once it is 200
/// and accepted no extension we did not offer.
async fn open_stream(
    client: &SendRequest<Bytes>,
    target: &Target,
) -> Result<(h2::SendStream<Bytes>, h2::RecvStream), String> {
    let scheme = if target.secure { "https" } else { "http" };
    let request = Request::builder()
        .method(Method::CONNECT)
        .uri(format!("{scheme}://{}{}", target.addr, target.path))
        .header("sec-websocket-version", "13")
        .extension(h2::ext::Protocol::from_static("websocket"))
        .body(())
        .map_err(|e| format!("request: {e}"))?;
    let mut client = client
        .clone()
        .ready()
        .await
        .map_err(|e| format!("HTTP/2: {e}"))?;
    let (response, send) = client
        .send_request(request, false)
        .map_err(|e| format!("CONNECT: {e}"))?;
    let response = response.await.map_err(|e| format!("CONNECT: {e}"))?;
    if response.status() != 200 {
        return Err(format!("CONNECT answered {}", response.status()));
    }
    if let Some(ext) = response.headers().get("sec-websocket-extensions") {
        return Err(format!(
            "server accepted an extension we did not offer: {ext:?}"
        ));
    }
    Ok((send, response.into_body()))
}

/// One stream's load: `depth` messages in flight, each batch of frames due
/// in one DATA frame, every reply checked.
async fn drive(
    mut send: h2::SendStream<Bytes>,
    mut recv: h2::RecvStream,
    state: Rc<RefCell<WsState>>,
    depth: usize,
    ctl: &'static Control,
    res: Rc<RefCell<ThreadResult>>,
) {
    {
        let mut ws = state.borrow_mut();
        let now = Instant::now();
        for _ in 0..depth {
            ws.queue_next(now);
        }
        ws.check.allowed = depth as u64;
    }
    loop {
        let end = {
            let mut ws = state.borrow_mut();
            let mut batch = Vec::new();
            ws.out.drain_into(&mut batch);
            if !batch.is_empty() {
                if let Err(e) = send.send_data(Bytes::from(batch), false) {
                    ws.dead = Some(format!("send: {e}"));
                    return;
                }
            }
            ws.dead.is_some()
        };
        if end {
            return;
        }
        let chunk = match recv.data().await {
            Some(Ok(chunk)) => chunk,
            Some(Err(e)) => {
                state.borrow_mut().dead = Some(format!("stream error: {e}"));
                return;
            }
            None => {
                let mut ws = state.borrow_mut();
                ws.dead = Some(match ws.check.close_code {
                    Some(c) => format!("server ended the stream (close code {c})"),
                    None => "server ended the stream".into(),
                });
                return;
            }
        };
        // Window back to the server only for what was taken.
        let _ = recv.flow_control().release_capacity(chunk.len());
        let phase = ctl.get();
        if phase == DONE {
            return;
        }
        let now = Instant::now();
        let mut ws = state.borrow_mut();
        let ws = &mut *ws;
        if let Err(e) = ws.parser.feed(&chunk, &mut ws.check) {
            ws.dead = Some(format!("protocol error: {e}"));
            return;
        }
        for p in std::mem::take(&mut ws.check.pings) {
            ws.out
                .push_control(&ws::client_frame(OP_PONG, &p, MASK_KEY));
        }
        if let Some(code) = ws.check.close_code {
            let payload = code.to_be_bytes();
            ws.out
                .push_control(&ws::client_frame(OP_CLOSE, &payload, MASK_KEY));
            let mut batch = Vec::new();
            ws.out.drain_into(&mut batch);
            let _ = send.send_data(Bytes::from(batch), true);
            ws.dead = Some(format!(
                "server closed the connection with code {code} {:?}",
                ws.check.close_reason
            ));
            return;
        }
        let done = std::mem::take(&mut ws.check.done);
        if done == 0 {
            continue;
        }
        if phase == MEASURE {
            let mut r = res.borrow_mut();
            r.msgs += done;
            for seq in ws.check.next_seq - done..ws.check.next_seq {
                r.hist
                    .record(now.duration_since(ws.sent_time(seq)).as_nanos() as u64);
            }
        }
        for _ in 0..done {
            ws.queue_next(now);
        }
        ws.check.allowed += done;
    }
}
