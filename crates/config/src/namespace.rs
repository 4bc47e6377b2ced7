//! Channel namespaces: the options a channel gets from the part of its name
//! before the first `:` (`chat:room1` is channel `room1` of namespace
//! `chat`; a name without `:` is in the default namespace), named as
//! Centrifugo names them so a Centrifugo configuration reads the same.

use std::collections::HashMap;
use std::time::Duration;

/// Bytes of history one channel may hold when its namespace names no
/// `history_max_bytes`: a thousand 1 KiB chat messages, so memory stays
/// bounded however large publications are.
pub const DEFAULT_HISTORY_MAX_BYTES: usize = 1 << 20;

/// Channels one namespace may hold in memory on a node when it names no
/// `max_channels`: with `history_max_bytes` it bounds what clients that may
/// publish can make the gateway keep (channels × bytes per channel).
pub const DEFAULT_MAX_CHANNELS: usize = 10_000;

/// Longest channel name accepted (Centrifugo's default `channel_max_length`).
pub const MAX_CHANNEL_NAME_BYTES: usize = 255;

/// One namespace's options (Centrifugo's names; all off by default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceOptions {
    /// Publications kept per channel (0: no history, no positions).
    pub history_size: usize,
    /// How long a publication stays in history.
    pub history_ttl: Duration,
    /// Bytes of publication data kept per channel: the bound that holds
    /// when publications are large.
    pub history_max_bytes: usize,
    /// Channels of the namespace this node holds at once (with history,
    /// presence, subscribers or idempotency keys); a publish or subscribe
    /// that would make one more is refused with "limit exceeded" until idle
    /// channels age out.
    pub max_channels: usize,
    /// Every subscription recovers, whether or not the client asked.
    pub force_recovery: bool,
    /// A client may ask for recovery (`recoverable: true` when subscribing).
    pub allow_recovery: bool,
    /// Subscribers are recorded in the channel's presence.
    pub presence: bool,
    /// Subscribers get join and leave pushes.
    pub join_leave: bool,
    /// Members a channel's presence may hold; the next subscriber is
    /// refused with "limit exceeded" (0: no limit).
    pub presence_max: usize,
    /// Any connected client may subscribe without a subscription token.
    pub allow_subscribe_for_client: bool,
    /// A subscriber may publish into the channel.
    pub allow_publish_for_subscriber: bool,
    /// Any connected client may publish into the channel.
    pub allow_publish_for_client: bool,
    /// A subscriber may read the channel's presence.
    pub allow_presence_for_subscriber: bool,
    /// A subscriber may read the channel's history.
    pub allow_history_for_subscriber: bool,
}

impl Default for NamespaceOptions {
    fn default() -> Self {
        NamespaceOptions {
            history_size: 0,
            history_ttl: Duration::ZERO,
            history_max_bytes: DEFAULT_HISTORY_MAX_BYTES,
            max_channels: DEFAULT_MAX_CHANNELS,
            force_recovery: false,
            allow_recovery: false,
            presence: false,
            join_leave: false,
            presence_max: 0,
            allow_subscribe_for_client: false,
            allow_publish_for_subscriber: false,
            allow_publish_for_client: false,
            allow_presence_for_subscriber: false,
            allow_history_for_subscriber: false,
        }
    }
}

impl NamespaceOptions {
    /// The channel keeps history, so publications carry offsets and a
    /// subscriber can recover.
    pub fn keeps_history(&self) -> bool {
        self.history_size > 0 && !self.history_ttl.is_zero()
    }
}

/// Every namespace of the routes file; "" is the default one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Namespaces {
    by_name: HashMap<String, NamespaceOptions>,
}

/// Why a channel name is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ChannelNameError {
    #[error("empty channel name")]
    Empty,
    #[error("channel name longer than {MAX_CHANNEL_NAME_BYTES} bytes")]
    TooLong,
    /// `x:room` where no namespace `x` is configured (Centrifugo: 102).
    #[error("unknown namespace")]
    UnknownNamespace,
}

impl Namespaces {
    pub fn new(by_name: HashMap<String, NamespaceOptions>) -> Namespaces {
        Namespaces { by_name }
    }

    /// Only the default namespace, with every option off.
    pub fn with_default() -> Namespaces {
        Namespaces::new(HashMap::from([(
            String::new(),
            NamespaceOptions::default(),
        )]))
    }

    /// The name of `channel`'s namespace ("" for the default one), whether
    /// or not it is configured.
    pub fn name_of(channel: &str) -> &str {
        channel.split_once(':').map_or("", |(ns, _)| ns)
    }

    /// The options of `channel`'s namespace.
    pub fn of(&self, channel: &str) -> Result<&NamespaceOptions, ChannelNameError> {
        if channel.is_empty() {
            return Err(ChannelNameError::Empty);
        }
        if channel.len() > MAX_CHANNEL_NAME_BYTES {
            return Err(ChannelNameError::TooLong);
        }
        self.by_name
            .get(Self::name_of(channel))
            .ok_or(ChannelNameError::UnknownNamespace)
    }

    /// Namespace names (for `info` and messages).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_names_pick_their_namespace() {
        let chat = NamespaceOptions {
            history_size: 10,
            ..Default::default()
        };
        let ns = Namespaces::new(HashMap::from([
            (String::new(), NamespaceOptions::default()),
            ("chat".to_string(), chat.clone()),
        ]));
        assert_eq!(ns.of("chat:room1"), Ok(&chat));
        assert_eq!(ns.of("room1"), Ok(&NamespaceOptions::default()));
        assert_eq!(ns.of("news:x"), Err(ChannelNameError::UnknownNamespace));
        assert_eq!(ns.of(""), Err(ChannelNameError::Empty));
        assert_eq!(ns.of(&"a".repeat(256)), Err(ChannelNameError::TooLong));
    }
}
