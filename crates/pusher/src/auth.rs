//! Subscription and signin signatures (Pusher docs, "Authentication and
//! authorization signatures"), checked the way pusher-http-node makes them
//! (`lib/auth.js`):
//! - channel: `auth = key:hex(HMAC-SHA256(secret, socket_id:channel[:channel_data]))`
//! - user: `auth = key:hex(HMAC-SHA256(secret, socket_id::user::user_data))`
//!
//! and the JSON the signatures cover: a presence member's `channel_data`
//! and a signed-in user's `user_data`.

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::codes;
use crate::sign::{hmac_sha256_hex, verify_hmac_sha256_hex};

/// Longest presence `user_id`: Pusher's documented presence limit (128
/// characters); an id is repeated in every member event, so it stays short.
pub const MAX_USER_ID_BYTES: usize = 128;

/// Largest presence `user_info` as JSON text: Pusher's documented 1 KB
/// presence limit. Every member's info goes to every new subscriber in
/// `subscription_succeeded`, so this bounds that message.
pub const MAX_USER_INFO_BYTES: usize = 1024;

/// Members one presence channel holds by default: Pusher's documented
/// presence limit of 100. The core enforces it (it owns presence); it lives
/// here beside the other presence limits so the route's config names it.
pub const DEFAULT_MAX_PRESENCE_MEMBERS: usize = 100;

/// An app's credentials: the key is public (it names the app in URLs and
/// `auth` values), the secret signs.
#[derive(Debug, Clone, Copy)]
pub struct AppKey<'a> {
    pub key: &'a str,
    pub secret: &'a [u8],
}

/// Why a subscription or signin is refused. All are answered with code 4009.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("auth is missing")]
    AuthMissing,
    #[error("auth is not key:signature")]
    AuthMalformed,
    #[error("auth names another app's key")]
    AuthKeyMismatch,
    #[error("invalid signature")]
    SignatureMismatch,
    #[error("presence channels need channel_data")]
    ChannelDataMissing,
    #[error("channel_data is not a JSON object")]
    ChannelDataMalformed,
    #[error("user_id is missing, empty or not a string or integer")]
    UserIdInvalid,
    #[error("user_id is longer than {MAX_USER_ID_BYTES} bytes")]
    UserIdTooLong,
    #[error("user_info is larger than {MAX_USER_INFO_BYTES} bytes")]
    UserInfoTooLarge,
    #[error("user_data is not a JSON object with a non-empty string id")]
    UserDataMalformed,
}

impl AuthError {
    /// "Connection is unauthorized", what servers answer a failed auth with.
    pub fn code(self) -> u16 {
        codes::UNAUTHORIZED
    }
}

/// Splits `key:signature` and checks the key names this app.
fn split_auth<'a>(app: &AppKey<'_>, auth: &'a str) -> Result<&'a str, AuthError> {
    let (key, signature) = auth.split_once(':').ok_or(AuthError::AuthMalformed)?;
    if key != app.key {
        return Err(AuthError::AuthKeyMismatch);
    }
    Ok(signature)
}

/// The `auth` pusher-http-node's `authorizeChannel` returns (for tests and
/// for a host that signs on the app's behalf).
pub fn sign_channel(
    app: &AppKey<'_>,
    socket_id: &str,
    channel: &str,
    channel_data: Option<&str>,
) -> String {
    let sig = match channel_data {
        Some(data) => hmac_sha256_hex(
            app.secret,
            &[
                socket_id.as_bytes(),
                b":",
                channel.as_bytes(),
                b":",
                data.as_bytes(),
            ],
        ),
        None => hmac_sha256_hex(
            app.secret,
            &[socket_id.as_bytes(), b":", channel.as_bytes()],
        ),
    };
    format!("{}:{sig}", app.key)
}

/// Checks a `pusher:subscribe`'s `auth` for `channel`; `channel_data` is the
/// presence member JSON exactly as the client sent it (it is signed too).
pub fn verify_channel(
    app: &AppKey<'_>,
    socket_id: &str,
    channel: &str,
    channel_data: Option<&str>,
    auth: Option<&str>,
) -> Result<(), AuthError> {
    let signature = split_auth(app, auth.ok_or(AuthError::AuthMissing)?)?;
    let ok = match channel_data {
        Some(data) => verify_hmac_sha256_hex(
            app.secret,
            &[
                socket_id.as_bytes(),
                b":",
                channel.as_bytes(),
                b":",
                data.as_bytes(),
            ],
            signature,
        ),
        None => verify_hmac_sha256_hex(
            app.secret,
            &[socket_id.as_bytes(), b":", channel.as_bytes()],
            signature,
        ),
    };
    if ok {
        Ok(())
    } else {
        Err(AuthError::SignatureMismatch)
    }
}

/// The `auth` pusher-http-node's `authenticateUser` returns.
pub fn sign_user(app: &AppKey<'_>, socket_id: &str, user_data: &str) -> String {
    let sig = hmac_sha256_hex(
        app.secret,
        &[socket_id.as_bytes(), b"::user::", user_data.as_bytes()],
    );
    format!("{}:{sig}", app.key)
}

/// Checks a `pusher:signin`'s `auth` over `user_data`.
pub fn verify_user(
    app: &AppKey<'_>,
    socket_id: &str,
    user_data: &str,
    auth: &str,
) -> Result<(), AuthError> {
    let signature = split_auth(app, auth)?;
    if verify_hmac_sha256_hex(
        app.secret,
        &[socket_id.as_bytes(), b"::user::", user_data.as_bytes()],
        signature,
    ) {
        Ok(())
    } else {
        Err(AuthError::SignatureMismatch)
    }
}

/// A presence member from `channel_data`.
#[derive(Debug, Clone)]
pub struct PresenceMember {
    /// Always a string: pusher-http-node sends whatever the app put in
    /// `user_id`, and PHP/Laravel apps put integers there (the auth
    /// identifier of an Eloquent model), so an integer is accepted and
    /// written as its decimal digits, the key pusher-js's `members` map
    /// would give it anyway.
    pub user_id: String,
    /// `user_info` as raw JSON, relayed untouched; `None` when absent.
    pub user_info: Option<Box<RawValue>>,
}

#[derive(Deserialize)]
struct ChannelData {
    user_id: Option<serde_json::Value>,
    user_info: Option<Box<RawValue>>,
}

impl PresenceMember {
    /// Reads `channel_data` (after its signature has been checked).
    pub fn parse(channel_data: Option<&str>) -> Result<PresenceMember, AuthError> {
        let text = channel_data.ok_or(AuthError::ChannelDataMissing)?;
        let data: ChannelData =
            serde_json::from_str(text).map_err(|_| AuthError::ChannelDataMalformed)?;
        let user_id = match data.user_id {
            Some(serde_json::Value::String(s)) if !s.is_empty() => s,
            Some(serde_json::Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
            _ => return Err(AuthError::UserIdInvalid),
        };
        if user_id.len() > MAX_USER_ID_BYTES {
            return Err(AuthError::UserIdTooLong);
        }
        let user_info = data.user_info.filter(|info| info.get() != "null");
        if user_info
            .as_ref()
            .is_some_and(|info| info.get().len() > MAX_USER_INFO_BYTES)
        {
            return Err(AuthError::UserInfoTooLarge);
        }
        Ok(PresenceMember { user_id, user_info })
    }
}

/// Watchlist ids kept per user (Pusher Channels Protocol, `pusher:signin`:
/// "a default maximum of 100 user IDs"; past it the first 100 are kept and
/// error 4302 follows the signin's success).
pub const MAX_WATCHLIST_USERS: usize = 100;

/// A signed-in user, from `user_data` (after its signature has been checked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigninUser {
    /// pusher-js and pusher-http-node both require a non-empty string `id`
    /// (`_onSigninSuccess`, `validateUserData`).
    pub id: String,
    /// The users whose online status this one follows, at most
    /// [`MAX_WATCHLIST_USERS`].
    pub watchlist: Vec<String>,
    /// The watchlist was cut to the limit: send `pusher:error` 4302
    /// (`codes::WATCHLIST_LIMIT_EXCEEDED`) after `pusher:signin_success`.
    pub watchlist_truncated: bool,
}

impl SigninUser {
    /// Reads `user_data`; `user_info` and other fields are the app's and are
    /// relayed in `pusher:signin_success` as the string they came in.
    pub fn parse(user_data: &str) -> Result<SigninUser, AuthError> {
        #[derive(Deserialize)]
        struct UserData {
            id: Option<serde_json::Value>,
            watchlist: Option<Vec<String>>,
        }
        let data: UserData =
            serde_json::from_str(user_data).map_err(|_| AuthError::UserDataMalformed)?;
        let id = match data.id {
            Some(serde_json::Value::String(id)) if !id.is_empty() => id,
            _ => return Err(AuthError::UserDataMalformed),
        };
        let mut watchlist = data.watchlist.unwrap_or_default();
        let watchlist_truncated = watchlist.len() > MAX_WATCHLIST_USERS;
        watchlist.truncate(MAX_WATCHLIST_USERS);
        Ok(SigninUser {
            id,
            watchlist,
            watchlist_truncated,
        })
    }
}

/// The signed-in user's id from `user_data` (see [`SigninUser::parse`]).
pub fn signin_user_id(user_data: &str) -> Result<String, AuthError> {
    SigninUser::parse(user_data).map(|user| user.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    const APP: AppKey<'static> = AppKey {
        key: "278d425bdf160c739803",
        secret: b"7ad3773142a6692b25b8",
    };

    // Pusher docs, "Authentication and authorization signatures", worked
    // examples (private and presence) with the docs' key and secret.
    #[test]
    fn docs_worked_examples() {
        let private = sign_channel(&APP, "1234.1234", "private-foobar", None);
        assert_eq!(
            private,
            "278d425bdf160c739803:58df8b0c36d6982b82c3ecf6b4662e34fe8c25bba48f5369f135bf843651c3a4"
        );
        assert_eq!(
            verify_channel(&APP, "1234.1234", "private-foobar", None, Some(&private)),
            Ok(())
        );
        let data = r#"{"user_id":10,"user_info":{"name":"Mr. Channels"}}"#;
        let presence = sign_channel(&APP, "1234.1234", "presence-foobar", Some(data));
        assert_eq!(
            presence,
            "278d425bdf160c739803:31935e7d86dba64c2a90aed31fdc61869f9b22ba9d8863bba239c03ca481bc80"
        );
        let member = PresenceMember::parse(Some(data)).unwrap();
        assert_eq!(member.user_id, "10");
        assert_eq!(
            member.user_info.unwrap().get(),
            r#"{"name":"Mr. Channels"}"#
        );
    }

    #[test]
    fn tampered_auth_is_refused() {
        let auth = sign_channel(&APP, "1.2", "private-a", None);
        assert_eq!(
            verify_channel(&APP, "1.3", "private-a", None, Some(&auth)),
            Err(AuthError::SignatureMismatch)
        );
        assert_eq!(
            verify_channel(&APP, "1.2", "private-b", None, Some(&auth)),
            Err(AuthError::SignatureMismatch)
        );
        assert_eq!(
            verify_channel(&APP, "1.2", "private-a", Some("{}"), Some(&auth)),
            Err(AuthError::SignatureMismatch)
        );
        let other = AppKey {
            key: "other",
            secret: APP.secret,
        };
        assert_eq!(
            verify_channel(&other, "1.2", "private-a", None, Some(&auth)),
            Err(AuthError::AuthKeyMismatch)
        );
        assert_eq!(
            verify_channel(&APP, "1.2", "private-a", None, Some("nocolon")),
            Err(AuthError::AuthMalformed)
        );
        assert_eq!(
            verify_channel(&APP, "1.2", "private-a", None, None),
            Err(AuthError::AuthMissing)
        );
        assert_eq!(AuthError::SignatureMismatch.code(), 4009);

        let user_auth = sign_user(&APP, "1.2", r#"{"id":"a"}"#);
        assert_eq!(
            verify_user(&APP, "1.2", r#"{"id":"a"}"#, &user_auth),
            Ok(())
        );
        assert_eq!(
            verify_user(&APP, "1.2", r#"{"id":"b"}"#, &user_auth),
            Err(AuthError::SignatureMismatch)
        );
    }

    #[test]
    fn channel_data_and_user_data() {
        assert_eq!(
            PresenceMember::parse(Some(r#"{"user_id":"u"}"#))
                .unwrap()
                .user_info
                .map(|i| i.get().to_owned()),
            None
        );
        for bad in [
            r#"{"user_id":""}"#,
            r#"{"user_id":1.5}"#,
            r#"{"user_id":null}"#,
            r#"{}"#,
            r#"{"user_id":true}"#,
        ] {
            assert_eq!(
                PresenceMember::parse(Some(bad)).err(),
                Some(AuthError::UserIdInvalid),
                "{bad}"
            );
        }
        assert_eq!(
            PresenceMember::parse(Some("[")).err(),
            Some(AuthError::ChannelDataMalformed)
        );
        assert_eq!(
            PresenceMember::parse(None).err(),
            Some(AuthError::ChannelDataMissing)
        );
        let long = format!(r#"{{"user_id":"{}"}}"#, "x".repeat(MAX_USER_ID_BYTES + 1));
        assert_eq!(
            PresenceMember::parse(Some(&long)).err(),
            Some(AuthError::UserIdTooLong)
        );
        let big = format!(
            r#"{{"user_id":"a","user_info":"{}"}}"#,
            "x".repeat(MAX_USER_INFO_BYTES)
        );
        assert_eq!(
            PresenceMember::parse(Some(&big)).err(),
            Some(AuthError::UserInfoTooLarge)
        );
        assert_eq!(
            signin_user_id(r#"{"id":"7","user_info":{}}"#),
            Ok("7".to_owned())
        );
        let many: Vec<String> = (0..=MAX_WATCHLIST_USERS).map(|i| i.to_string()).collect();
        let user =
            SigninUser::parse(&serde_json::json!({"id": "a", "watchlist": many}).to_string())
                .unwrap();
        assert_eq!(
            (user.watchlist.len(), user.watchlist_truncated),
            (MAX_WATCHLIST_USERS, true)
        );
        let user = SigninUser::parse(r#"{"id":"a","watchlist":["b"]}"#).unwrap();
        assert_eq!(
            (user.watchlist, user.watchlist_truncated),
            (vec!["b".to_owned()], false)
        );
        assert_eq!(
            SigninUser::parse(r#"{"id":"a","watchlist":[1]}"#),
            Err(AuthError::UserDataMalformed)
        );
        assert_eq!(
            signin_user_id(r#"{"id":7}"#),
            Err(AuthError::UserDataMalformed)
        );
        assert_eq!(
            signin_user_id(r#"{"id":""}"#),
            Err(AuthError::UserDataMalformed)
        );
    }
}
