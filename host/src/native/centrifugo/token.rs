//! Connection and subscription tokens: HS256 JWTs (Centrifugo's claims:
//! `sub`, `exp`, `info`, `channels`; `channel` for a subscription token;
//! `aud` and `iss` when the route names them), checked with `jsonwebtoken`
//! (a constant-time signature comparison, through ring). An expired token
//! is told apart from an invalid one: the client refreshes the first and
//! gives up on the second.

use bytes::Bytes;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::Value;
use std::time::{SystemTime, UNIX_EPOCH};

/// Why a token is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Its `exp` has passed (Centrifugo: error 109, the client refreshes).
    #[error("token expired")]
    Expired,
    /// Bad signature, algorithm, audience, issuer or shape (Centrifugo:
    /// disconnect 3500).
    #[error("invalid token")]
    Invalid,
}

/// What a valid connection token says.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    /// The user (`sub`; "" for an anonymous connection).
    pub user: String,
    /// Unix seconds after which the connection must refresh (`exp`).
    pub expires_at: Option<u64>,
    /// `info`, as JSON text.
    pub info: Option<Bytes>,
    /// Server-side subscriptions (`channels`).
    pub channels: Vec<String>,
}

/// What a valid subscription token says.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelGrant {
    pub user: String,
    pub channel: String,
    pub expires_at: Option<u64>,
    pub info: Option<Bytes>,
}

#[derive(Deserialize)]
struct Claims {
    #[serde(default)]
    sub: String,
    exp: Option<u64>,
    info: Option<Value>,
    #[serde(default)]
    channels: Vec<String>,
    #[serde(default)]
    channel: String,
}

/// A route's token checker.
pub struct Verifier {
    key: DecodingKey,
    validation: Validation,
}

impl Verifier {
    /// HS256 with `secret`; `aud`/`iss` are checked when given.
    pub fn hs256(secret: &[u8], audience: Option<&str>, issuer: Option<&str>) -> Verifier {
        let mut validation = Validation::new(Algorithm::HS256);
        // `exp` is checked here, to tell "expired" from "invalid".
        validation.validate_exp = false;
        validation.required_spec_claims.clear();
        validation.leeway = 0;
        match audience {
            Some(aud) => validation.set_audience(&[aud]),
            None => validation.validate_aud = false,
        }
        if let Some(iss) = issuer {
            validation.set_issuer(&[iss]);
        }
        Verifier {
            key: DecodingKey::from_secret(secret),
            validation,
        }
    }

    fn claims(&self, token: &str) -> Result<Claims, TokenError> {
        let data = jsonwebtoken::decode::<Claims>(token, &self.key, &self.validation).map_err(
            |e| match e.kind() {
                ErrorKind::ExpiredSignature => TokenError::Expired,
                _ => TokenError::Invalid,
            },
        )?;
        let claims = data.claims;
        if claims.exp.is_some_and(|exp| exp <= unix_now()) {
            return Err(TokenError::Expired);
        }
        Ok(claims)
    }

    /// A connection token.
    pub fn connection(&self, token: &str) -> Result<Identity, TokenError> {
        let claims = self.claims(token)?;
        Ok(Identity {
            user: claims.sub,
            expires_at: claims.exp,
            info: claims.info.map(json_text),
            channels: claims.channels,
        })
    }

    /// A subscription token (its `channel` claim must be set).
    pub fn subscription(&self, token: &str) -> Result<ChannelGrant, TokenError> {
        let claims = self.claims(token)?;
        if claims.channel.is_empty() {
            return Err(TokenError::Invalid);
        }
        Ok(ChannelGrant {
            user: claims.sub,
            channel: claims.channel,
            expires_at: claims.exp,
            info: claims.info.map(json_text),
        })
    }
}

fn json_text(v: Value) -> Bytes {
    Bytes::from(serde_json::to_vec(&v).expect("a JSON value serialises"))
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{encode, EncodingKey, Header};
    use serde_json::json;

    fn token(secret: &[u8], claims: Value) -> String {
        encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(secret),
        )
        .unwrap()
    }

    #[test]
    fn tokens_are_checked_for_signature_expiry_audience_and_issuer() {
        let v = Verifier::hs256(b"secret", Some("app"), Some("login"));
        let later = unix_now() + 60;
        let good = json!({"sub": "42", "exp": later, "aud": "app", "iss": "login",
                          "info": {"name": "A"}, "channels": ["news"]});
        let id = v.connection(&token(b"secret", good.clone())).unwrap();
        assert_eq!(id.user, "42");
        assert_eq!(id.expires_at, Some(later));
        assert_eq!(id.info.as_deref(), Some(&b"{\"name\":\"A\"}"[..]));
        assert_eq!(id.channels, ["news"]);
        assert_eq!(
            v.connection(&token(b"other", good)),
            Err(TokenError::Invalid)
        );
        let expired = json!({"sub": "42", "exp": unix_now() - 1, "aud": "app", "iss": "login"});
        assert_eq!(
            v.connection(&token(b"secret", expired)),
            Err(TokenError::Expired)
        );
        let wrong_aud = json!({"sub": "42", "aud": "other", "iss": "login"});
        assert_eq!(
            v.connection(&token(b"secret", wrong_aud)),
            Err(TokenError::Invalid)
        );
        assert_eq!(v.connection("not.a.jwt"), Err(TokenError::Invalid));
        let sub = json!({"sub": "42", "channel": "chat:x", "aud": "app", "iss": "login"});
        assert_eq!(
            v.subscription(&token(b"secret", sub)).unwrap().channel,
            "chat:x"
        );
    }
}
