//! Channel names and what their prefix makes them (Pusher docs, "Channels":
//! naming conventions, channel types, cache channels; "User authentication"
//! for `#server-to-user-{id}`). The kind decides whether a subscription
//! needs a signature, carries presence, replays the last event, or may carry
//! client events; the adapter asks these predicates and never the prefix.

use std::fmt;

/// Longest channel name, prefix included: the docs' "maximum of 164
/// characters". (pusher-http-node lets 200 through; the docs' limit is the
/// one real Pusher enforces, so an app that works there works here.) Every
/// allowed character is ASCII, so characters and bytes are the same count.
pub const MAX_CHANNEL_NAME_BYTES: usize = 164;

/// The channel Pusher delivers `sendToUser` events on, for a signed-in user.
pub const USER_CHANNEL_PREFIX: &str = "#server-to-user-";

/// What a channel's prefix makes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChannelKind {
    /// No prefix: anyone who knows the name may subscribe.
    Public,
    /// `private-`: subscription signed by the app's auth endpoint.
    Private,
    /// `private-encrypted-`: signed, and payloads are end-to-end encrypted
    /// between the app server and clients; the server only relays them.
    PrivateEncrypted,
    /// `presence-`: signed, with the member's `channel_data`.
    Presence,
    /// `#server-to-user-{id}`: a signed-in user's own channel; only a
    /// connection signed in as `{id}` may subscribe (pusher-js does so by
    /// itself after `pusher:signin_success`).
    User,
}

/// A valid channel name and its kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Channel {
    name: String,
    kind: ChannelKind,
    /// A `cache-` variant: the last event is kept and replayed to each new
    /// subscriber (or `pusher:cache_miss` is sent).
    cache: bool,
}

/// Why a channel name is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ChannelNameError {
    #[error("channel name is empty")]
    ChannelNameEmpty,
    #[error("channel name is longer than {MAX_CHANNEL_NAME_BYTES} characters")]
    ChannelNameTooLong,
    #[error("channel name has a character outside A-Z a-z 0-9 _ - = @ , . ;")]
    ChannelNameForbiddenCharacter,
    #[error("user channel names no user")]
    UserChannelWithoutUser,
}

/// Prefixes, longest first where one starts another, with their meaning.
const PREFIXES: &[(&str, ChannelKind, bool)] = &[
    (
        "private-encrypted-cache-",
        ChannelKind::PrivateEncrypted,
        true,
    ),
    ("private-encrypted-", ChannelKind::PrivateEncrypted, false),
    ("private-cache-", ChannelKind::Private, true),
    ("private-", ChannelKind::Private, false),
    ("presence-cache-", ChannelKind::Presence, true),
    ("presence-", ChannelKind::Presence, false),
    ("cache-", ChannelKind::Public, true),
];

/// The docs' character set: letters, digits and `_ - = @ , . ;`.
fn allowed(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'=' | b'@' | b',' | b'.' | b';')
}

impl Channel {
    /// `name` checked against the docs' rules and classified by prefix. A
    /// user channel's id is any non-empty text without control characters
    /// (pusher-http-node's `validateUserId` asks only for a non-empty string).
    pub fn parse(name: &str) -> Result<Channel, ChannelNameError> {
        Ok(Channel {
            name: name.to_owned(),
            ..Channel::classify(name)?
        })
    }

    fn classify(name: &str) -> Result<Channel, ChannelNameError> {
        if name.is_empty() {
            return Err(ChannelNameError::ChannelNameEmpty);
        }
        if name.len() > MAX_CHANNEL_NAME_BYTES {
            return Err(ChannelNameError::ChannelNameTooLong);
        }
        if let Some(user) = name.strip_prefix(USER_CHANNEL_PREFIX) {
            if user.is_empty() {
                return Err(ChannelNameError::UserChannelWithoutUser);
            }
            if user.chars().any(char::is_control) {
                return Err(ChannelNameError::ChannelNameForbiddenCharacter);
            }
            return Ok(Channel {
                name: String::new(),
                kind: ChannelKind::User,
                cache: false,
            });
        }
        if !name.bytes().all(allowed) {
            return Err(ChannelNameError::ChannelNameForbiddenCharacter);
        }
        let (kind, cache) = PREFIXES
            .iter()
            .find(|(prefix, _, _)| name.starts_with(prefix))
            .map_or((ChannelKind::Public, false), |&(_, kind, cache)| {
                (kind, cache)
            });
        Ok(Channel {
            name: String::new(),
            kind,
            cache,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn kind(&self) -> ChannelKind {
        self.kind
    }

    /// Whether `pusher:subscribe` must carry an `auth` signature.
    pub fn needs_auth(&self) -> bool {
        matches!(
            self.kind,
            ChannelKind::Private | ChannelKind::PrivateEncrypted | ChannelKind::Presence
        )
    }

    pub fn is_presence(&self) -> bool {
        self.kind == ChannelKind::Presence
    }

    pub fn is_cache(&self) -> bool {
        self.cache
    }

    pub fn is_encrypted(&self) -> bool {
        self.kind == ChannelKind::PrivateEncrypted
    }

    /// Whether subscribers may send `client-*` events here. Pusher docs
    /// ("Events", client events): only on private and presence channels,
    /// since the sender must be authorised; not on encrypted channels (the
    /// docs list client events among what end-to-end encryption does not
    /// support: the server could not check a payload it cannot read, and
    /// pusher-js's encrypted channel has no path to encrypt them), and not
    /// on user channels, which only the server writes to.
    pub fn allows_client_events(&self) -> bool {
        matches!(self.kind, ChannelKind::Private | ChannelKind::Presence)
    }

    /// The user a `#server-to-user-` channel belongs to.
    pub fn user_id(&self) -> Option<&str> {
        match self.kind {
            ChannelKind::User => self.name.strip_prefix(USER_CHANNEL_PREFIX),
            _ => None,
        }
    }
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ChannelNameError::*;

    // Pusher docs, "Channels" > "Channel naming conventions": the example name.
    #[test]
    fn the_docs_example_name_is_public() {
        let c = Channel::parse("foo-bar_1234@=,.;").unwrap();
        assert_eq!(c.kind(), ChannelKind::Public);
        assert!(!c.needs_auth() && !c.is_cache() && !c.allows_client_events());
    }

    #[test]
    fn prefixes_give_kinds() {
        let cases = [
            ("private-a", ChannelKind::Private, false, true, true),
            (
                "private-encrypted-a",
                ChannelKind::PrivateEncrypted,
                false,
                true,
                false,
            ),
            ("presence-a", ChannelKind::Presence, false, true, true),
            ("cache-a", ChannelKind::Public, true, false, false),
            ("private-cache-a", ChannelKind::Private, true, true, true),
            ("presence-cache-a", ChannelKind::Presence, true, true, true),
            (
                "private-encrypted-cache-a",
                ChannelKind::PrivateEncrypted,
                true,
                true,
                false,
            ),
            ("privatea", ChannelKind::Public, false, false, false),
            ("presence", ChannelKind::Public, false, false, false),
            ("#server-to-user-42", ChannelKind::User, false, false, false),
        ];
        for (name, kind, cache, auth, client) in cases {
            let c = Channel::parse(name).unwrap();
            assert_eq!(
                (
                    c.kind(),
                    c.is_cache(),
                    c.needs_auth(),
                    c.allows_client_events()
                ),
                (kind, cache, auth, client),
                "{name}"
            );
            assert_eq!(c.name(), name);
            assert_eq!(c.is_presence(), kind == ChannelKind::Presence);
            assert_eq!(c.is_encrypted(), kind == ChannelKind::PrivateEncrypted);
        }
        assert_eq!(
            Channel::parse("#server-to-user-a b").unwrap().user_id(),
            Some("a b")
        );
        assert_eq!(Channel::parse("private-x").unwrap().user_id(), None);
    }

    #[test]
    fn bad_names_are_refused() {
        assert_eq!(Channel::parse(""), Err(ChannelNameEmpty));
        assert_eq!(
            Channel::parse(&"a".repeat(MAX_CHANNEL_NAME_BYTES)).map(|c| c.kind()),
            Ok(ChannelKind::Public)
        );
        assert_eq!(
            Channel::parse(&"a".repeat(MAX_CHANNEL_NAME_BYTES + 1)),
            Err(ChannelNameTooLong)
        );
        for bad in [
            "a b",
            "a/b",
            "a:b",
            "é",
            "a#b",
            "#server-to-user",
            "#other",
            "a\"b",
        ] {
            assert!(Channel::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            Channel::parse("#server-to-user-"),
            Err(UserChannelWithoutUser)
        );
        assert_eq!(
            Channel::parse("#server-to-user-a\nb"),
            Err(ChannelNameForbiddenCharacter)
        );
    }
}
