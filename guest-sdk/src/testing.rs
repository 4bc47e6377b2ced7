//! Test a [`Handler`] natively, in `cargo test`: no gateway, no wasm.
//!
//! [`TestRoute`] stands in for one gateway route serving your handler. It
//! turns what clients do (upgrade, send, close) into the same event batches
//! the gateway sends, runs them through the same SDK code the component
//! runs, and applies the handler's answer as the gateway would: messages
//! land in each client's inbox, publishes reach the route's subscribers,
//! closes are recorded (and, as a client answers a close, followed by the
//! connection's `on_close`), state is saved to attachments under the
//! route's `attachment_max`. [`TestRoute::replace_instance`] starts a fresh
//! handler, as the gateway does after a fault or a recycle, so a test can
//! check that state survives it.
//!
//! ```
//! use weir_guest::testing::TestRoute;
//! use weir_guest::{Conn, Handler, Message};
//!
//! #[derive(Default)]
//! struct Echo;
//!
//! impl Handler for Echo {
//!     type State = ();
//!     fn on_message(&mut self, conn: &mut Conn<()>, msg: Message) {
//!         conn.send(msg);
//!     }
//! }
//!
//! let mut route = TestRoute::<Echo>::new("/echo");
//! let client = route.connect("/echo");
//! route.send_text(client, "hi");
//! assert_eq!(route.texts(client), ["hi"]);
//! ```
//!
//! I/O (weir:gateway 0.4.0) is played by the test: requests the handler
//! sends wait in [`TestRoute::requests`] until the test answers them
//! ([`TestRoute::respond`], [`TestRoute::fail`]); timers wait in
//! [`TestRoute::timers`] until the test fires them ([`TestRoute::fire`]);
//! the route's key-value store is a map ([`TestRoute::kv`]) that `kv_get`
//! reads and `kv_set` writes after each batch, as the gateway does; a
//! refused write is played by [`TestRoute::kv_error`], or by a store with
//! a key quota ([`TestRoute::with_kv_max_keys`]). A deferred upgrade is answered by [`TestRoute::upgrade_answering`].
//!
//! ```
//! use weir_guest::testing::TestRoute;
//! use weir_guest::{Conn, Handler, HttpRequest, HttpResult, Message, Tag};
//!
//! #[derive(Default)]
//! struct Lookup;
//!
//! impl Handler for Lookup {
//!     type State = ();
//!     fn on_message(&mut self, conn: &mut Conn<()>, msg: Message) {
//!         let url = format!("http://127.0.0.1:9000/{}", msg.as_bytes().len());
//!         conn.fetch(&HttpRequest::get(&url));
//!     }
//!     fn on_response(&mut self, conn: &mut Conn<()>, _: Tag, r: HttpResult) {
//!         conn.send_text(r.ok().and_then(|r| r.text()).unwrap_or("error"));
//!     }
//! }
//!
//! let mut route = TestRoute::<Lookup>::new("/lookup");
//! let client = route.connect("/lookup");
//! route.send_text(client, "abc");
//! let sent = route.requests();
//! assert_eq!(sent[0].url, "http://127.0.0.1:9000/3");
//! route.respond(sent[0].tag, 200, &[], b"three");
//! assert_eq!(route.texts(client), ["three"]);
//! ```
//!
//! History and presence reads (`realtime = true` routes) wait in
//! [`TestRoute::reads`] until the test answers them
//! ([`TestRoute::answer_history`], [`TestRoute::answer_presence`],
//! [`TestRoute::fail_read`]), as requests do.
//!
//! Scope: one route, one instance, batches of one event each; topics are
//! the route's own (a publish reaches the route's subscribers as it was
//! sent, not through a real-time core). A handler that panics fails the
//! test with its panic.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use weir_abi::io::{encode_history, encode_http_response, encode_presence, split_request_head};
use weir_abi::ReadErrorReason;
use weir_abi::{
    encode_conn_info, parse_commands, Command, EventHeader, EventKind, HttpErrorReason,
    KvErrorReason,
};

use crate::runtime::{Runtime, UpgradeAnswer};
use crate::{
    ChannelDecision, ChannelRequest, ClientEventRequest, ConnectDecision, ConnectRequest,
    ConnectionId, Direction, Handler, HttpError, HttpResponse, Message, PubDecision,
    PublishRequest, Request, SubDecision, SubscribeRequest, Tag,
};
use weir_abi::RtVerdict;

mod apply;
mod inbox;
mod played;
mod questions;

thread_local! {
    /// The store `kv_get` reads natively: the running TestRoute's, moved
    /// in for the length of a batch.
    static KV: RefCell<BTreeMap<Vec<u8>, Vec<u8>>> = const { RefCell::new(BTreeMap::new()) };
}

/// `Context::kv_get` in native builds.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn kv_get(key: &[u8]) -> Option<Vec<u8>> {
    KV.with(|kv| kv.borrow().get(key).cloned())
}

/// A request the handler sent, waiting for the test's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentRequest {
    /// The connection it is for; 0 for the route's own.
    pub conn: ConnectionId,
    pub tag: Tag,
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// A history or presence read the handler sent, waiting for the test's
/// answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentRead {
    /// The connection it is for; 0 for the route's own.
    pub conn: ConnectionId,
    pub tag: Tag,
    pub channel: String,
    /// Publications asked for (a history read), None for a presence read.
    pub limit: Option<u32>,
    /// Newest first (a history read).
    pub reverse: bool,
}

/// A message a client received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    Text(String),
    Binary(Vec<u8>),
}

/// The gateway's default `attachment_max` (64 KiB).
pub const DEFAULT_ATTACHMENT_MAX: usize = 64 * 1024;

/// One connected client.
#[derive(Debug, Default)]
struct Client {
    /// Target and route parameters, packed as the open event carries them.
    info: Vec<u8>,
    attachment: Vec<u8>,
    topics: BTreeSet<String>,
    inbox: VecDeque<Received>,
    /// The close the handler sent, once it did.
    closed_by_handler: Option<(u16, String)>,
    /// Gone: closed by the client, or by the handler and answered.
    gone: bool,
    /// What a proxy filter passed on, in order.
    forwarded: VecDeque<(Direction, Received)>,
}

/// A route serving handler `H`, driven by the test. See the module doc.
pub struct TestRoute<H: Handler> {
    pattern: String,
    runtime: Runtime<H>,
    next_id: ConnectionId,
    clients: BTreeMap<ConnectionId, Client>,
    attachment_max: usize,
    /// Closes the handler sent whose `on_close` is still due.
    closing: Vec<(ConnectionId, u16, String)>,
    /// Requests the handler sent, not answered yet.
    requests: Vec<SentRequest>,
    /// History and presence reads the handler sent, not answered yet.
    reads: Vec<SentRead>,
    /// Pending timers: (connection, tag) → delay.
    timers: BTreeMap<(ConnectionId, Tag), Duration>,
    /// The route's key-value store.
    kv: BTreeMap<Vec<u8>, Vec<u8>>,
    /// `kv_max_keys` of the store, if the test set one.
    kv_max_keys: Option<usize>,
    /// Writes refused during a batch, told to the handler after it.
    kv_refused: Vec<(Vec<u8>, KvErrorReason)>,
    /// A real-time namespace guest's verdicts of the last question.
    rt_verdicts: Vec<RtAnswer>,
}

/// A real-time namespace guest's answer, as the harness read it from the
/// ABI ([`TestRoute::subscribe`], [`TestRoute::client_publish`]).
#[derive(Debug, Clone, PartialEq, Eq)]
enum RtAnswer {
    /// An rt-subscribe-verdict: call, code, authorise, payload.
    Subscribe(u64, u16, bool, String),
    Publish(u64, PubDecision),
}

/// The connection id the harness's real-time questions name (the host
/// names the asking client's connection; the guest only echoes it).
const RT_CONN: ConnectionId = u64::MAX;

/// The parameters of `path` matched against route `pattern` (`{name}`: one
/// segment, `{*name}`: the rest of the path), or None if it does not match.
fn match_route(pattern: &str, path: &str) -> Option<Vec<(String, String)>> {
    let mut params = Vec::new();
    let mut want = pattern.split('/');
    let mut got = path.split('/');
    loop {
        match (want.next(), got.next()) {
            (None, None) => return Some(params),
            (Some(w), Some(g)) => {
                if let Some(name) = w.strip_prefix("{*").and_then(|w| w.strip_suffix('}')) {
                    let rest: Vec<&str> = std::iter::once(g).chain(got).collect();
                    params.push((name.to_string(), rest.join("/")));
                    return Some(params);
                }
                match w.strip_prefix('{').and_then(|w| w.strip_suffix('}')) {
                    Some(name) if !g.is_empty() => params.push((name.to_string(), g.to_string())),
                    Some(_) => return None,
                    None if w == g => {}
                    None => return None,
                }
            }
            _ => return None,
        }
    }
}

impl<H: Handler> TestRoute<H> {
    /// A route at `pattern` (as in the routes file: `/chat/{room}`).
    pub fn new(pattern: &str) -> Self {
        TestRoute {
            pattern: pattern.to_string(),
            runtime: Runtime::default(),
            next_id: 1,
            clients: BTreeMap::new(),
            attachment_max: DEFAULT_ATTACHMENT_MAX,
            closing: Vec::new(),
            requests: Vec::new(),
            reads: Vec::new(),
            timers: BTreeMap::new(),
            kv: BTreeMap::new(),
            kv_max_keys: None,
            kv_refused: Vec::new(),
            rt_verdicts: Vec::new(),
        }
    }

    /// With a store that holds at most `keys` keys, as the gateway's
    /// `kv_max_keys`: a `kv_set` of a new key past it is not applied, and
    /// the handler's `on_kv_error` gets it (reason `max-keys`) after the
    /// batch, as from the gateway in a later batch.
    pub fn with_kv_max_keys(mut self, keys: usize) -> Self {
        self.kv_max_keys = Some(keys);
        self
    }

    /// Upgrade `req`; if the handler defers it, `answer` plays the remote
    /// service (Ok: status, headers, body; Err: why the request failed)
    /// and the handler's `on_upgrade_response` decides.
    #[allow(clippy::type_complexity)]
    pub fn upgrade_answering(
        &mut self,
        req: Request,
        mut answer: impl FnMut(
            &SentRequest,
        )
            -> Result<(u16, Vec<(String, String)>, Vec<u8>), HttpErrorReason>,
    ) -> Result<ConnectionId, u16> {
        self.upgrade_with(req, Some(&mut |sent: &SentRequest| answer(sent)))
    }

    /// Set the route's `attachment_max` (bytes).
    pub fn with_attachment_max(mut self, bytes: usize) -> Self {
        self.attachment_max = bytes;
        self
    }

    /// Upgrade `target` without headers and open it.
    ///
    /// # Panics
    /// If the route does not match or the handler refuses the upgrade.
    pub fn connect(&mut self, target: &str) -> ConnectionId {
        match self.upgrade(Request::new(target)) {
            Ok(id) => id,
            Err(status) => panic!("upgrade of {target} refused with {status}"),
        }
    }

    /// Ask the handler to upgrade `req` (its `params` are filled in from the
    /// route); open the connection if it accepts. `Err(status)`: the HTTP
    /// status the gateway would answer with.
    ///
    /// # Panics
    /// If `req.path` does not match the route (the gateway answers 404).
    pub fn upgrade(&mut self, req: Request) -> Result<ConnectionId, u16> {
        self.upgrade_with(req, None)
    }

    #[allow(clippy::type_complexity)]
    fn upgrade_with(
        &mut self,
        mut req: Request,
        answer: Option<
            &mut dyn FnMut(
                &SentRequest,
            )
                -> Result<(u16, Vec<(String, String)>, Vec<u8>), HttpErrorReason>,
        >,
    ) -> Result<ConnectionId, u16> {
        req.params = match_route(&self.pattern, &req.path)
            .unwrap_or_else(|| panic!("{} does not match route {}", req.path, self.pattern));
        let mut decision = self.runtime.upgrade(&req);
        if let UpgradeAnswer::Defer { tag, request } = &decision {
            let answer = answer.unwrap_or_else(|| {
                panic!("the handler deferred the upgrade; use upgrade_answering")
            });
            let sent = SentRequest {
                conn: 0,
                tag: *tag,
                method: request.method().to_string(),
                url: request.url().to_string(),
                headers: request.headers().to_vec(),
                body: request.body_bytes().to_vec(),
            };
            decision = match answer(&sent) {
                Ok((status, headers, body)) => {
                    let head = headers
                        .iter()
                        .map(|(n, v)| format!("{n}: {v}"))
                        .collect::<Vec<_>>()
                        .join("\n");
                    let response = HttpResponse::new(status, &head, &body);
                    self.runtime.resume_upgrade(&req, Ok(response))
                }
                Err(reason) => self.runtime.resume_upgrade(
                    &req,
                    Err(HttpError {
                        reason: Some(reason),
                        message: reason.as_str(),
                    }),
                ),
            };
            if matches!(decision, UpgradeAnswer::Defer { .. }) {
                return Err(500);
            }
        }
        let (protocol, attachment) = match decision {
            UpgradeAnswer::Reject(status) if (400..=599).contains(&status) => return Err(status),
            UpgradeAnswer::Reject(_) => return Err(403),
            UpgradeAnswer::Defer { .. } => unreachable!("answered above"),
            UpgradeAnswer::Accept {
                protocol,
                attachment,
            } => (protocol, attachment),
        };
        if protocol.is_some_and(|p| !req.protocols().any(|offered| offered == p)) {
            return Err(500);
        }
        if attachment.len() > self.attachment_max {
            return Err(500);
        }
        let id = self.next_id;
        self.next_id += 1;
        let target = if req.query.is_empty() {
            req.path.clone()
        } else {
            format!("{}?{}", req.path, req.query)
        };
        let mut info = Vec::new();
        let params = req.params.iter().map(|(n, v)| (n.as_str(), v.as_str()));
        encode_conn_info(&mut info, &target, params, &[]);
        let client = Client {
            info: info.clone(),
            attachment: attachment.clone(),
            ..Client::default()
        };
        self.clients.insert(id, client);
        info.extend_from_slice(&attachment);
        self.run(id, EventKind::Open, 0, &info);
        Ok(id)
    }

    /// The client sends a text message.
    pub fn send_text(&mut self, conn: ConnectionId, text: &str) {
        self.live(conn);
        self.run(conn, EventKind::Text, 0, text.as_bytes());
    }

    /// The client sends a binary message.
    pub fn send_binary(&mut self, conn: ConnectionId, bytes: &[u8]) {
        self.live(conn);
        self.run(conn, EventKind::Binary, 0, bytes);
    }

    /// The client closes with `code` (1005: no code, 1006: the TCP
    /// connection dropped) and `reason`; the handler's `on_close` runs.
    pub fn close(&mut self, conn: ConnectionId, code: u16, reason: &str) {
        self.live(conn);
        self.clients.get_mut(&conn).expect("live").gone = true;
        self.run(conn, EventKind::Close, code, reason.as_bytes());
    }

    /// A message on its way through proxied connection `conn` in
    /// `direction`: the handler is a proxy route's filter
    /// ([`Handler::on_proxy_message`]); [`forwarded`](Self::forwarded)
    /// tells what it passed on.
    pub fn proxy_message(&mut self, conn: ConnectionId, direction: Direction, msg: Message<'_>) {
        self.live(conn);
        let kind = if msg.is_text() {
            EventKind::ProxyText
        } else {
            EventKind::ProxyBinary
        };
        self.run_in(conn, kind, direction as u8, 0, msg.as_bytes());
    }

    /// Drop the handler instance and start a fresh one, as the gateway does
    /// after a fault or every `recycle_after` batches: connections stay
    /// open; the new instance knows them only through what the gateway
    /// holds (target, parameters, saved state).
    pub fn replace_instance(&mut self) {
        self.runtime = Runtime::default();
    }

    fn client(&self, conn: ConnectionId) -> &Client {
        self.clients
            .get(&conn)
            .unwrap_or_else(|| panic!("no connection {conn} on this route"))
    }

    /// Panics unless `conn` is open.
    fn live(&self, conn: ConnectionId) {
        assert!(self.is_open(conn), "connection {conn} is not open");
    }

    /// One batch of one event, then the handler's answer applied; closes
    /// the handler sent are answered (their `on_close` runs) afterwards.
    fn run(&mut self, conn: ConnectionId, kind: EventKind, code: u16, bytes: &[u8]) {
        self.run_in(conn, kind, 0, code, bytes);
    }

    /// [`run`](Self::run) with byte 9 of the event header (a proxy
    /// event's direction).
    fn run_in(&mut self, conn: ConnectionId, kind: EventKind, byte9: u8, code: u16, bytes: &[u8]) {
        self.run_one(conn, kind, byte9, code, bytes);
        while !self.closing.is_empty() || !self.kv_refused.is_empty() {
            for (conn, code, reason) in std::mem::take(&mut self.closing) {
                self.clients.get_mut(&conn).expect("known").gone = true;
                self.run_one(conn, EventKind::Close, 0, code, reason.as_bytes());
            }
            for (key, reason) in std::mem::take(&mut self.kv_refused) {
                self.run_one(0, EventKind::KvError, 0, reason as u16, &key);
            }
        }
    }

    fn run_one(&mut self, conn: ConnectionId, kind: EventKind, byte9: u8, code: u16, bytes: &[u8]) {
        let header = EventHeader {
            conn,
            kind: kind as u8,
            reserved: byte9,
            code,
            offset: 0,
            len: bytes.len() as u32,
        };
        KV.with(|kv| std::mem::swap(&mut *kv.borrow_mut(), &mut self.kv));
        let clients = &self.clients;
        let mut lookup = |id: ConnectionId| {
            let c = clients.get(&id).filter(|c| !c.gone || id == conn)?;
            Some([c.info.as_slice(), &c.attachment].concat())
        };
        let ctx = self.runtime.handle(&header.encode(), bytes, &mut lookup);
        KV.with(|kv| std::mem::swap(&mut *kv.borrow_mut(), &mut self.kv));
        let commands = parse_commands(&ctx.commands, &ctx.data)
            .unwrap_or_else(|e| panic!("the handler's answer breaks the ABI: {e}"));
        if kind == EventKind::Close {
            self.clients.get_mut(&conn).expect("known").topics.clear();
        }
        for command in &commands {
            self.apply(conn, command);
        }
    }
}

/// `id`'s client if it can still be written to (neither side closed it).
fn open(clients: &mut BTreeMap<ConnectionId, Client>, id: ConnectionId) -> Option<&mut Client> {
    clients
        .get_mut(&id)
        .filter(|c| !c.gone && c.closed_by_handler.is_none())
}

fn received(text: bool, payload: &[u8]) -> Received {
    if text {
        Received::Text(String::from_utf8(payload.to_vec()).expect("checked UTF-8"))
    } else {
        Received::Binary(payload.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Conn, ConnState, Upgrade};

    #[test]
    fn route_patterns_match_like_the_gateway() {
        let p = |pattern, path| match_route(pattern, path);
        assert_eq!(p("/echo", "/echo"), Some(vec![]));
        assert_eq!(p("/echo", "/echo/x"), None);
        assert_eq!(
            p("/chat/{room}", "/chat/lobby"),
            Some(vec![("room".into(), "lobby".into())])
        );
        assert_eq!(p("/chat/{room}", "/chat/"), None);
        assert_eq!(p("/chat/{room}", "/chat"), None);
        assert_eq!(
            p("/f/{*rest}", "/f/a/b"),
            Some(vec![("rest".into(), "a/b".into())])
        );
    }

    /// Counts messages in a hand-written state codec; `!close` closes.
    #[derive(Default)]
    struct Count(u64);

    impl ConnState for Count {
        fn restore(bytes: &[u8]) -> Self {
            Count(bytes.try_into().map(u64::from_le_bytes).unwrap_or(0))
        }
        fn persist(&self, out: &mut Vec<u8>) {
            out.extend_from_slice(&self.0.to_le_bytes());
        }
    }

    #[derive(Default)]
    struct Counter {
        closes: Vec<(ConnectionId, u16)>,
    }

    impl Handler for Counter {
        type State = Count;
        fn on_upgrade(&mut self, req: &Request) -> Upgrade<Count> {
            match req.query_param("start") {
                Some(n) => Upgrade::accept_with(Count(n.parse().unwrap_or(0))),
                None => Upgrade::accept(),
            }
        }
        fn on_message(&mut self, conn: &mut Conn<Count>, msg: Message) {
            if msg == Message::Text("!close") {
                conn.close(4000, "asked");
                return;
            }
            conn.0 += 1;
            let n = conn.0;
            conn.send_fmt(format_args!("{n}"));
        }
        fn on_close(&mut self, conn: &mut Conn<Count>, code: u16, _: &str) {
            self.closes.push((conn.id(), code));
        }
    }

    #[test]
    fn state_is_saved_restored_and_seeded_by_the_upgrade() {
        let mut route = TestRoute::<Counter>::new("/count");
        let a = route.connect("/count");
        let b = route.connect("/count?start=40");
        route.send_text(a, "x");
        route.send_text(b, "x");
        assert_eq!(route.attachment(a), 1u64.to_le_bytes());
        route.replace_instance();
        route.send_text(a, "x");
        route.send_text(b, "x");
        assert_eq!(route.texts(a), ["1", "2"]);
        assert_eq!(route.texts(b), ["41", "42"]);
    }

    #[test]
    fn a_handler_close_is_recorded_and_answered_with_on_close() {
        let mut route = TestRoute::<Counter>::new("/count");
        let a = route.connect("/count");
        route.send_text(a, "!close");
        assert_eq!(route.closed_with(a), Some((4000, "asked")));
        assert!(!route.is_open(a));
        assert_eq!(route.runtime_handler().closes, [(a, 4000)]);
    }

    impl<H: Handler> TestRoute<H> {
        fn runtime_handler(&self) -> &H {
            self.runtime.handler()
        }
    }

    #[test]
    fn an_attachment_over_the_cap_closes_with_1011() {
        let mut route = TestRoute::<Counter>::new("/count").with_attachment_max(4);
        let a = route.connect("/count");
        route.send_text(a, "x");
        assert_eq!(route.closed_with(a), Some((1011, "")));
        assert_eq!(route.upgrade(Request::new("/count?start=1")), Err(500));
    }

    /// Stores each message under its own key; tells every client of a
    /// refused write.
    #[derive(Default)]
    struct Roster {
        refused: Vec<(Vec<u8>, Option<KvErrorReason>)>,
    }

    impl Handler for Roster {
        type State = ();
        fn on_open(&mut self, conn: &mut Conn<()>) {
            conn.subscribe("all");
        }
        fn on_message(&mut self, conn: &mut Conn<()>, msg: Message) {
            if let Message::Text(name) = msg {
                conn.ctx().kv_set(name.as_bytes(), b"here");
            }
        }
        fn on_kv_error(&mut self, route: &mut Conn<()>, key: &[u8], reason: Option<KvErrorReason>) {
            assert!(route.is_route());
            self.refused.push((key.to_vec(), reason));
            let why = reason.map_or("unknown", KvErrorReason::as_str);
            route.publish("all", Message::Text(&format!("refused {why}")));
        }
    }

    #[test]
    fn a_refused_kv_write_reaches_on_kv_error_after_its_batch() {
        let mut route = TestRoute::<Roster>::new("/r").with_kv_max_keys(2);
        let a = route.connect("/r");
        for name in ["ann", "bob", "cy"] {
            route.send_text(a, name);
        }
        assert_eq!(route.kv().len(), 2, "the third key is not applied");
        assert_eq!(route.texts(a), ["refused max-keys"]);
        route.kv_error(b"ann", KvErrorReason::QueueFull);
        assert_eq!(route.texts(a), ["refused queue-full"]);
        assert_eq!(
            route.runtime_handler().refused,
            [
                (b"cy".to_vec(), Some(KvErrorReason::OverMaxKeys)),
                (b"ann".to_vec(), Some(KvErrorReason::QueueFull))
            ]
        );
    }

    /// A real-time namespace's guest: refuses secret channels with its own
    /// code, rewrites one word, drops publications with another.
    #[derive(Default)]
    struct Moderator;

    impl Handler for Moderator {
        type State = ();
        fn on_message(&mut self, _: &mut crate::Conn<'_, ()>, _: Message<'_>) {}
        fn on_subscribe(&mut self, req: &SubscribeRequest<'_>) -> SubDecision {
            if req.channel.starts_with("chat:secret") {
                SubDecision::Refuse(4403)
            } else {
                SubDecision::Allow
            }
        }
        fn on_client_publish(&mut self, req: &PublishRequest<'_>) -> PubDecision {
            let text = std::str::from_utf8(req.data).unwrap();
            if text.contains("spam") {
                PubDecision::Drop(0)
            } else if text.contains("darn") {
                PubDecision::Replace(text.replace("darn", "****").into_bytes())
            } else {
                PubDecision::Pass
            }
        }
    }

    #[test]
    fn a_namespace_guest_answers_subscribes_and_publications() {
        let mut route = TestRoute::<Moderator>::new("/rt");
        let sub = |channel| SubscribeRequest {
            channel,
            client: "c1",
            user: "42",
            info: b"{}",
        };
        assert_eq!(route.subscribe(&sub("chat:index")), SubDecision::Allow);
        assert_eq!(
            route.subscribe(&sub("chat:secret-plans")),
            SubDecision::Refuse(4403)
        );
        let publish = |data: &'static str| PublishRequest {
            channel: "chat:index",
            client: "c1",
            user: "42",
            info: b"",
            data: data.as_bytes(),
        };
        assert_eq!(
            route.client_publish(&publish(r#"{"t":"hi"}"#)),
            PubDecision::Pass
        );
        assert_eq!(
            route.client_publish(&publish(r#"{"t":"darn it"}"#)),
            PubDecision::Replace(br#"{"t":"**** it"}"#.to_vec())
        );
        // Drop(0) reaches the gateway as Centrifugo's 103.
        assert_eq!(
            route.client_publish(&publish(r#"{"t":"spam"}"#)),
            PubDecision::Drop(0)
        );
    }

    /// A handler without the hooks allows and passes everything.
    #[test]
    fn the_default_namespace_hooks_allow_and_pass() {
        let mut route = TestRoute::<Counter>::new("/rt");
        let req = SubscribeRequest {
            channel: "news",
            client: "c",
            user: "",
            info: b"",
        };
        assert_eq!(route.subscribe(&req), SubDecision::Allow);
        let publish = PublishRequest {
            channel: "news",
            client: "c",
            user: "",
            info: b"",
            data: b"1",
        };
        assert_eq!(route.client_publish(&publish), PubDecision::Pass);
    }

    /// Reads history and presence of the channel a message names and
    /// sends what came back.
    #[derive(Default)]
    struct Reader;

    impl Handler for Reader {
        type State = ();
        fn on_message(&mut self, conn: &mut Conn<()>, msg: Message) {
            let Message::Text(channel) = msg else { return };
            conn.subscribe("route");
            conn.history_newest(channel, 2);
            conn.presence(channel);
            conn.ctx().history(channel, 0);
        }
        fn on_history(&mut self, conn: &mut Conn<()>, _tag: Tag, result: crate::HistoryResult) {
            let text = match result {
                Ok(h) => {
                    let pubs: Vec<String> =
                        h.publications.map(|(o, d)| format!("{o}={d}")).collect();
                    format!("history {} {} {}", h.offset, h.epoch, pubs.join(","))
                }
                Err(e) => format!("history error {}", e.reason_str()),
            };
            if conn.is_route() {
                conn.publish("route", Message::Text(&text));
            } else {
                conn.send_text(&text);
            }
        }
        fn on_presence(&mut self, conn: &mut Conn<()>, _tag: Tag, result: crate::PresenceResult) {
            let text = match result {
                Ok(members) => {
                    let m: Vec<String> = members
                        .map(|m| format!("{}/{}/{}", m.client, m.user, m.conn_info))
                        .collect();
                    format!("presence {}", m.join(","))
                }
                Err(e) => format!("presence error {}", e.reason_str()),
            };
            conn.send_text(&text);
        }
    }

    /// History and presence reads (issue 37) wait in `reads()` with what
    /// they asked for; answers and failures reach `on_history` and
    /// `on_presence` with the connection (or the route) that asked.
    #[test]
    fn history_and_presence_reads_are_answered_by_the_test() {
        let mut route = TestRoute::<Reader>::new("/r");
        let a = route.connect("/r");
        route.send_text(a, "chat:room");
        let reads = route.reads();
        assert_eq!(reads.len(), 3);
        assert_eq!(
            (
                reads[0].conn,
                reads[0].channel.as_str(),
                reads[0].limit,
                reads[0].reverse
            ),
            (a, "chat:room", Some(2), true)
        );
        assert_eq!((reads[1].conn, reads[1].limit), (a, None));
        assert_eq!(
            (reads[2].conn, reads[2].limit, reads[2].reverse),
            (0, Some(0), false)
        );
        route.answer_history(reads[0].tag, 9, "ep", &[(9, "\"b\""), (8, "{}")]);
        route.answer_presence(reads[1].tag, &[("c1", "u1", "{\"n\":1}"), ("c2", "", "")]);
        assert_eq!(
            route.texts(a),
            ["history 9 ep 9=\"b\",8={}", "presence c1/u1/{\"n\":1},c2//"]
        );
        // The route's own read is answered to the route's handle, which
        // publishes what it got.
        route.fail_read(reads[2].tag, ReadErrorReason::HistoryOff);
        assert!(route.reads().is_empty());
        assert_eq!(route.texts(a), ["history error history-off"]);
    }
}
