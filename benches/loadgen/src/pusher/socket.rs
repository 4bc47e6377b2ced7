//! One Pusher client connection on tokio: the WebSocket handshake to
//! `/app/{key}?protocol=7`, `pusher:connection_established` (its socket id),
//! text messages in and out, and the keep-alives answered on the way (a
//! WebSocket ping gets its pong, a `pusher:ping` its `pusher:pong`), so the
//! scenarios only see the messages they count.

use crate::ws::{self, Parser, Rng, Sink};
use serde::Deserialize;
use std::collections::VecDeque;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bytes read from the socket at once: a burst of deliveries is parsed from
/// one read.
const READ_BYTES: usize = 16 * 1024;

/// What one server message says, borrowed from its text. `data` is kept raw:
/// Pusher servers send it as a JSON string (server events) or as the
/// object a client sent (client events).
#[derive(Deserialize)]
pub struct Message<'a> {
    #[serde(borrow)]
    pub event: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    pub channel: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    pub data: Option<&'a serde_json::value::RawValue>,
}

impl<'a> Message<'a> {
    pub fn parse(text: &'a [u8]) -> Result<Self, String> {
        serde_json::from_slice(text)
            .map_err(|e| format!("unparsable message {:?}: {e}", preview(text)))
    }

    /// `data` as the string it carries (decoded once when it is a JSON
    /// string, as-is when it is an object).
    pub fn data_text(&self) -> Option<String> {
        let raw = self.data?.get();
        if raw.starts_with('"') {
            serde_json::from_str::<String>(raw).ok()
        } else {
            Some(raw.to_owned())
        }
    }
}

/// The first 120 bytes of a message, for error reports.
pub fn preview(text: &[u8]) -> String {
    String::from_utf8_lossy(&text[..text.len().min(120)]).into_owned()
}

/// Complete text messages and control frames owed, as the parser finds them.
#[derive(Default)]
struct Inbox {
    current: Vec<u8>,
    ready: VecDeque<Vec<u8>>,
    /// Pong frames to send (answers to the server's WebSocket pings).
    owed: Vec<Vec<u8>>,
    closed: Option<u16>,
    key: [u8; 4],
}

impl Sink for Inbox {
    fn data(&mut self, chunk: &[u8]) {
        self.current.extend_from_slice(chunk);
    }
    fn end(&mut self, _opcode: u8, _len: u64) {
        self.ready.push_back(std::mem::take(&mut self.current));
    }
    fn control(&mut self, opcode: u8, payload: &[u8]) {
        match opcode {
            ws::OP_PING => self
                .owed
                .push(ws::client_frame(ws::OP_PONG, payload, self.key)),
            ws::OP_CLOSE => {
                let code =
                    (payload.len() >= 2).then(|| u16::from_be_bytes([payload[0], payload[1]]));
                self.closed = Some(code.unwrap_or(1005));
            }
            _ => {}
        }
    }
}

/// A connected Pusher client.
pub struct Socket {
    tcp: TcpStream,
    parser: Parser,
    inbox: Inbox,
    buf: Vec<u8>,
    rng: Rng,
    /// The id `pusher:connection_established` gave this connection (what
    /// channel auth signatures sign).
    pub socket_id: String,
}

impl Socket {
    /// Connects, upgrades and waits for `pusher:connection_established`.
    pub async fn open(
        addr: SocketAddr,
        host: &str,
        path: &str,
        seed: u64,
    ) -> Result<Socket, String> {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        tcp.set_nodelay(true).ok();
        let mut rng = Rng::new(seed);
        let key = ws::new_key(&mut rng);
        let mut s = Socket {
            tcp,
            parser: Parser::default(),
            inbox: Inbox::default(),
            buf: vec![0; READ_BYTES],
            rng,
            socket_id: String::new(),
        };
        s.inbox.key = s.mask_key();
        s.tcp
            .write_all(ws::handshake_request(host, path, &key).as_bytes())
            .await
            .map_err(|e| format!("handshake write: {e}"))?;
        let mut head = Vec::new();
        let end = loop {
            let n = s
                .tcp
                .read(&mut s.buf)
                .await
                .map_err(|e| format!("handshake read: {e}"))?;
            if n == 0 {
                return Err("closed during the handshake".into());
            }
            head.extend_from_slice(&s.buf[..n]);
            if let Some(end) = ws::head_end(&head) {
                break end;
            }
            if head.len() > 16 * 1024 {
                return Err("handshake response head over 16 KiB".into());
            }
        };
        ws::check_response(&head[..end], &key)?;
        let rest = head[end..].to_vec();
        s.parser.feed(&rest, &mut s.inbox)?;
        let first = s.recv().await?;
        let msg = Message::parse(&first)?;
        if msg.event != "pusher:connection_established" {
            return Err(format!(
                "expected pusher:connection_established, got {}",
                preview(&first)
            ));
        }
        #[derive(Deserialize)]
        struct Established {
            socket_id: String,
        }
        let data = msg
            .data_text()
            .ok_or("connection_established without data")?;
        let est: Established = serde_json::from_str(&data)
            .map_err(|e| format!("connection_established data {data:?}: {e}"))?;
        s.socket_id = est.socket_id;
        Ok(s)
    }

    fn mask_key(&mut self) -> [u8; 4] {
        (self.rng.next_u64() as u32).to_le_bytes()
    }

    /// Sends one text message.
    pub async fn send(&mut self, text: &str) -> Result<(), String> {
        let key = self.mask_key();
        let frame = ws::client_frame(ws::OP_TEXT, text.as_bytes(), key);
        self.tcp
            .write_all(&frame)
            .await
            .map_err(|e| format!("write: {e}"))
    }

    /// The next text message other than `pusher:ping` (answered here).
    pub async fn recv(&mut self) -> Result<Vec<u8>, String> {
        loop {
            for pong in std::mem::take(&mut self.inbox.owed) {
                self.tcp
                    .write_all(&pong)
                    .await
                    .map_err(|e| format!("write pong: {e}"))?;
            }
            if let Some(text) = self.inbox.ready.pop_front() {
                if is_event(&text, "pusher:ping") {
                    self.send(r#"{"event":"pusher:pong","data":{}}"#).await?;
                    continue;
                }
                return Ok(text);
            }
            if let Some(code) = self.inbox.closed {
                return Err(format!("server closed the connection ({code})"));
            }
            let n = self
                .tcp
                .read(&mut self.buf)
                .await
                .map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return Err("server closed the TCP connection".into());
            }
            self.parser.feed(&self.buf[..n], &mut self.inbox)?;
        }
    }

    /// Waits for `pusher_internal:subscription_succeeded` on `channel`,
    /// returning its message; a `pusher:error` or a
    /// `pusher:subscription_error` on the way is the error.
    pub async fn await_subscribed(&mut self, channel: &str) -> Result<Vec<u8>, String> {
        loop {
            let text = self.recv().await?;
            if is_event(&text, "pusher_internal:subscription_succeeded") {
                let msg = Message::parse(&text)?;
                if msg.channel.as_deref() == Some(channel) {
                    return Ok(text);
                }
            } else if is_event(&text, "pusher:error")
                || is_event(&text, "pusher:subscription_error")
            {
                return Err(format!("subscribing to {channel}: {}", preview(&text)));
            }
        }
    }
}

/// Whether a message's `event` is `name`, by a search for `"name"` (cheap
/// enough for the storm's millions of member_added messages; event names
/// are never inside `data`, which a server sends as an escaped string).
pub fn is_event(text: &[u8], name: &str) -> bool {
    let quoted = format!("\"{name}\"");
    text.windows(quoted.len()).any(|w| w == quoted.as_bytes())
}

/// A `pusher:subscribe` for a public channel.
pub fn subscribe_public(channel: &str) -> String {
    format!(r#"{{"event":"pusher:subscribe","data":{{"channel":"{channel}"}}}}"#)
}

/// A `pusher:subscribe` for a presence channel as `user_id`, with the
/// signature the app's auth endpoint would return (signed here with the
/// app's secret, as pusher-http-node's `authorizeChannel` does).
pub fn subscribe_presence(
    app: &weir_pusher::AppKey<'_>,
    socket_id: &str,
    channel: &str,
    user_id: &str,
) -> String {
    let channel_data = format!(r#"{{"user_id":"{user_id}"}}"#);
    let auth = weir_pusher::auth::sign_channel(app, socket_id, channel, Some(&channel_data));
    let msg = serde_json::json!({
        "event": "pusher:subscribe",
        "data": { "channel": channel, "auth": auth, "channel_data": channel_data },
    });
    msg.to_string()
}
