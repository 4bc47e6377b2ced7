//! The core's vocabulary, shared with every adapter: a publication and the
//! client info it carries, the framer an adapter gives the core, the
//! errors, and a subscribe's request, its join and its answer.

use super::*;

/// One publication: what history keeps and adapters frame.
#[derive(Debug, Clone)]
pub struct Publication {
    /// The channel's offset (0 in a channel without history).
    pub offset: u64,
    /// The payload: JSON text (Centrifugo's JSON protocol carries it as is).
    pub data: Bytes,
    /// The publishing client, when a client published.
    pub info: Option<Arc<ClientInfo>>,
    /// When it was published (for `history_ttl`).
    pub time: Instant,
}

/// A subscriber as presence and join/leave name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientInfo {
    /// The connection's client id.
    pub client: String,
    /// The token's `sub` ("" for anonymous).
    pub user: String,
    /// The token's `info` claim, JSON text.
    pub conn_info: Option<Bytes>,
    /// The subscription token's `info` claim, JSON text.
    pub chan_info: Option<Bytes>,
}

/// Frames the core's events for one adapter's clients, once per event.
pub trait Framer: Send + Sync {
    /// Whole server frames carrying `publication` of `channel`.
    fn publication(&self, channel: &str, publication: &Publication) -> Bytes;
    /// A join (true) or leave push, if the adapter's clients get them.
    fn join_leave(&self, channel: &str, info: &ClientInfo, join: bool) -> Option<Bytes>;
    /// The close (code, reason) for a positioned subscriber whose
    /// channel's positions broke on this node: its client reconnects and
    /// recovers from where it was.
    fn discontinuity(&self) -> Option<(u16, &'static str)> {
        None
    }
}

/// Why the core refuses a request; adapters map these to their codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RealtimeError {
    #[error("{0}")]
    ChannelName(#[from] ChannelNameError),
    #[error("{0}")]
    Presence(#[from] PresenceError),
    #[error("{0}")]
    History(#[from] HistoryError),
    /// Presence or history asked of a namespace that keeps none.
    #[error("not available")]
    NotAvailable,
    /// The channel's namespace holds `max_channels` channels already
    /// (Centrifugo: 106 limit exceeded).
    #[error("limit exceeded")]
    TooManyChannels,
    /// Redis did not answer (with `[cluster]`): nothing was done.
    #[error("internal server error")]
    Unavailable,
}

/// A subscription's state, shared by its connection and the core: with
/// `[cluster]` a subscribe finishes after Redis answers, and the client may
/// leave meanwhile.
#[derive(Debug, Default)]
pub struct Subscription(AtomicU8);

const PENDING: u8 = 0;
const ACTIVE: u8 = 1;
const FAILED: u8 = 2;
const CANCELLED: u8 = 3;

impl Subscription {
    /// The subscribe was refused: the channel may be subscribed again.
    pub fn failed(&self) -> bool {
        self.0.load(Ordering::Acquire) == FAILED
    }

    /// Ended by a leave (or by an adapter undoing its join).
    pub fn cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire) == CANCELLED
    }

    /// Joined and not ended since.
    pub fn active(&self) -> bool {
        self.0.load(Ordering::Acquire) == ACTIVE
    }

    pub(crate) fn activate(&self) -> bool {
        self.0
            .compare_exchange(PENDING, ACTIVE, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Refused (by the core, or by a namespace's guest before it).
    pub fn fail(&self) {
        let _ = self
            .0
            .compare_exchange(PENDING, FAILED, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Ends it; true if it was active (the caller undoes the join).
    pub(crate) fn cancel(&self) -> bool {
        self.0.swap(CANCELLED, Ordering::AcqRel) == ACTIVE
    }
}

/// A subscribe request, owned (it may outlive the command that made it).
pub struct Subscribe {
    pub channel: String,
    pub topics: Arc<Topics>,
    pub conn: ConnId,
    pub outbound: Arc<Outbound>,
    pub member: Arc<ClientInfo>,
    pub recoverable: bool,
    pub recover: Option<StreamPosition>,
    pub subscription: Arc<Subscription>,
}

/// Frames a subscribe's reply from what it found.
pub type Reply = Box<dyn FnOnce(&Subscribed) -> Bytes + Send>;

/// The Redis side, with `[cluster]`.
pub(crate) struct Cluster {
    pub(crate) store: Arc<RedisStore>,
    pub(crate) broker: Arc<RedisBroker>,
}

impl Cluster {
    /// The scope the core's channels are named in (the store's).
    pub(crate) fn scope(&self) -> &str {
        self.store.scope()
    }
}

/// A client joining a channel through an adapter.
pub struct Join<'a> {
    pub channel: &'a str,
    /// The adapter's topic namespace its clients are subscribed in.
    pub topics: &'a Arc<Topics>,
    pub conn: ConnId,
    pub outbound: &'a Arc<Outbound>,
    pub member: Arc<ClientInfo>,
    /// The client wants its position kept (it asked, or the namespace forces it).
    pub recoverable: bool,
    /// Where the client was, if it asks to recover.
    pub recover: Option<StreamPosition>,
}

/// What a subscribe found, for the adapter's reply.
pub struct Subscribed {
    /// Publications carry offsets in this channel.
    pub positioned: bool,
    /// The client may recover from its position later.
    pub recoverable: bool,
    /// The result of the recovery the client asked for.
    pub recovery: Option<Recovery>,
    /// The channel's position now.
    pub top: StreamPosition,
}
