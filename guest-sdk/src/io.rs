//! Talking to the world without blocking (weir:gateway 0.4.0): an HTTP
//! request or a timer is a command, its answer an event in a later batch
//! ([`Handler::on_response`](crate::Handler::on_response),
//! [`Handler::on_timer`](crate::Handler::on_timer)), matched by the
//! [`Tag`] the call returned. Key-value reads answer at once
//! ([`Context::kv_get`]); writes are applied after the batch, and one the
//! gateway refuses comes back as
//! [`Handler::on_kv_error`](crate::Handler::on_kv_error).

use std::cell::Cell;
use std::time::Duration;

use weir_abi::io::{encode_request_meta, HeaderLines};
use weir_abi::{CommandKind, HttpErrorReason};

use crate::conn::Context;
use crate::ConnectionId;

/// Names one request or timer; the answer carries it back. Unique within
/// the route for as long as the gateway runs (the SDK seeds its counter
/// from the clock, so a fresh instance does not reuse its predecessor's).
pub type Tag = u64;

thread_local! {
    static NEXT_TAG: Cell<u64> = const { Cell::new(0) };
}

/// The next tag of this instance.
pub(crate) fn next_tag() -> Tag {
    NEXT_TAG.with(|next| {
        let mut tag = next.get();
        if tag == 0 {
            // Microseconds since the epoch, times 1024: an instance would
            // have to issue 1024 tags a microsecond to catch up with the
            // one that replaces it.
            let micros = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_micros() as u64);
            tag = micros.wrapping_mul(1024).max(1);
        }
        next.set(tag.wrapping_add(1).max(1));
        tag
    })
}

/// An outbound HTTP request. The route's `allow_outbound` must allow its
/// URL (deny by default); `http://` or `https://` (the server's certificate
/// checked against the Mozilla roots, or the route's `outbound_ca`).
///
/// ```
/// use weir_guest::HttpRequest;
/// let req = HttpRequest::post("http://127.0.0.1:8080/check")
///     .header("content-type", "application/json")
///     .body(br#"{"token":"t"}"#.to_vec());
/// assert_eq!(req.method(), "POST");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    method: String,
    url: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl HttpRequest {
    /// A request with `method` to `url` (`http://host:port/path?query`).
    pub fn new(method: &str, url: &str) -> Self {
        HttpRequest {
            method: method.to_string(),
            url: url.to_string(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// A GET request.
    pub fn get(url: &str) -> Self {
        Self::new("GET", url)
    }

    /// A POST request (give it a [`body`](Self::body)).
    pub fn post(url: &str) -> Self {
        Self::new("POST", url)
    }

    /// With one more header (no line breaks in name or value).
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// With `body`.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    pub fn method(&self) -> &str {
        &self.method
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    pub fn body_bytes(&self) -> &[u8] {
        &self.body
    }

    /// The request as the deferred upgrade's record.
    pub(crate) fn into_parts(self) -> (String, String, Vec<(String, String)>, Vec<u8>) {
        (self.method, self.url, self.headers, self.body)
    }
}

/// The answer to an [`HttpRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpResponse<'a> {
    /// The HTTP status.
    pub status: u16,
    /// `name: value` lines (names lower-case).
    pub(crate) head: &'a str,
    /// The body.
    pub body: &'a [u8],
}

impl<'a> HttpResponse<'a> {
    /// A response (for tests: [`testing`](crate::testing) builds them).
    pub fn new(status: u16, head: &'a str, body: &'a [u8]) -> Self {
        HttpResponse { status, head, body }
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&'a str> {
        HeaderLines::new(self.head)
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// Every header, in order.
    pub fn headers(&self) -> impl Iterator<Item = (&'a str, &'a str)> {
        HeaderLines::new(self.head)
    }

    /// The body as text, None when it is not UTF-8.
    pub fn text(&self) -> Option<&'a str> {
        std::str::from_utf8(self.body).ok()
    }

    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// Why an [`HttpRequest`] got no response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpError<'a> {
    /// Refused by the route's policy, timeout, connect failure, too large,
    /// busy, invalid; None for a reason this SDK does not know.
    pub reason: Option<HttpErrorReason>,
    /// What the gateway says about it.
    pub message: &'a str,
}

impl HttpError<'_> {
    /// The reason as one word (`refused`, `timeout`, `connect`,
    /// `too-large`, `busy`, `invalid`, `unknown`).
    pub fn reason_str(&self) -> &'static str {
        self.reason.map_or("unknown", HttpErrorReason::as_str)
    }
}

/// What became of a request: the response, or why there is none.
pub type HttpResult<'a> = Result<HttpResponse<'a>, HttpError<'a>>;

impl Context {
    /// Send `req` for the route (not for one connection): the answer comes
    /// to [`Handler::on_response`](crate::Handler::on_response) with a
    /// route handle ([`Conn::is_route`](crate::Conn::is_route)), on this
    /// worker, in a later batch.
    ///
    /// ```no_run
    /// # use weir_guest::{Context, HttpRequest};
    /// fn poll(ctx: &mut Context) {
    ///     let _tag = ctx.fetch(&HttpRequest::get("http://127.0.0.1:8080/price"));
    /// }
    /// ```
    pub fn fetch(&mut self, req: &HttpRequest) -> Tag {
        self.fetch_for(0, req)
    }

    pub(crate) fn fetch_for(&mut self, conn: ConnectionId, req: &HttpRequest) -> Tag {
        let tag = next_tag();
        let start = self.data.len();
        let headers = req.headers.iter().map(|(n, v)| (n.as_str(), v.as_str()));
        encode_request_meta(&mut self.data, tag, &req.method, &req.url, headers);
        let meta = (start as u32, (self.data.len() - start) as u32);
        let body = self.put(&req.body);
        self.push(conn, CommandKind::HttpRequest, 0, meta, body);
        tag
    }

    /// A timer for the route: [`Handler::on_timer`](crate::Handler::on_timer)
    /// gets its tag after `delay`. The gateway holds it, so it fires even
    /// when the instance that set it was replaced meanwhile.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use weir_guest::Context;
    /// fn every_second(ctx: &mut Context) {
    ///     ctx.set_timer(Duration::from_secs(1));
    /// }
    /// ```
    pub fn set_timer(&mut self, delay: Duration) -> Tag {
        self.set_timer_for(0, delay)
    }

    pub(crate) fn set_timer_for(&mut self, conn: ConnectionId, delay: Duration) -> Tag {
        let tag = next_tag();
        let start = self.data.len();
        self.data.extend_from_slice(&tag.to_le_bytes());
        self.data
            .extend_from_slice(&(delay.as_millis() as u64).to_le_bytes());
        self.push(conn, CommandKind::SetTimer, 0, (start as u32, 16), (0, 0));
        tag
    }

    /// Cancel the route's timer `tag`.
    pub fn cancel_timer(&mut self, tag: Tag) {
        self.cancel_timer_for(0, tag)
    }

    pub(crate) fn cancel_timer_for(&mut self, conn: ConnectionId, tag: Tag) {
        let meta = self.put(&tag.to_le_bytes());
        self.push(conn, CommandKind::CancelTimer, 0, meta, (0, 0));
    }

    /// The value under `key` in the route's store (`kv` in the routes
    /// file), None when absent, expired, or the route has none. Writes of
    /// this batch are not visible yet (they are applied after it).
    ///
    /// ```no_run
    /// # use weir_guest::Context;
    /// fn visits(ctx: &mut Context) -> u64 {
    ///     let n = ctx
    ///         .kv_get(b"visits")
    ///         .and_then(|v| v.try_into().ok())
    ///         .map_or(0, u64::from_le_bytes);
    ///     ctx.kv_set(b"visits", &(n + 1).to_le_bytes());
    ///     n + 1
    /// }
    /// ```
    pub fn kv_get(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        kv_get(key)
    }

    /// Store `value` under `key` (applied after the batch; key ≤ 1 KiB,
    /// value ≤ 1 MiB). A write the gateway refuses (over one of those caps,
    /// over the store's `kv_max_bytes` or `kv_max_keys`, its write queue
    /// full) is not applied, and comes back in a later batch as
    /// [`Handler::on_kv_error`](crate::Handler::on_kv_error).
    pub fn kv_set(&mut self, key: &[u8], value: &[u8]) {
        self.kv_set_ttl(key, value, None)
    }

    /// Store `value` under `key` for `ttl` (None: until deleted).
    pub fn kv_set_ttl(&mut self, key: &[u8], value: &[u8], ttl: Option<Duration>) {
        let start = self.data.len();
        let ttl_ms = ttl.map_or(0, |t| (t.as_millis() as u64).max(1));
        self.data.extend_from_slice(&ttl_ms.to_le_bytes());
        self.data.extend_from_slice(key);
        let meta = (start as u32, (self.data.len() - start) as u32);
        let value = self.put(value);
        self.push(0, CommandKind::KvSet, 0, meta, value);
    }

    /// Remove `key` (applied after the batch; refused only when the
    /// store's write queue is full: [`Handler::on_kv_error`](crate::Handler::on_kv_error)).
    pub fn kv_delete(&mut self, key: &[u8]) {
        let meta = self.put(key);
        self.push(0, CommandKind::KvDelete, 0, meta, (0, 0));
    }
}

/// The `kv.get` import; natively, [`testing`](crate::testing)'s store.
fn kv_get(key: &[u8]) -> Option<Vec<u8>> {
    #[cfg(target_arch = "wasm32")]
    return crate::bindings::weir::gateway::kv::get(key);
    #[cfg(not(target_arch = "wasm32"))]
    return crate::testing::kv_get(key);
}
