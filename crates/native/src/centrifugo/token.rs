//! Connection and subscription tokens: JWTs (Centrifugo's claims: `sub`,
//! `exp`, `info`, `channels`; `channel` for a subscription token; `aud` and
//! `iss` when the route names them), checked with `jsonwebtoken` (through
//! ring; HMAC compared in constant time). HS256 with the route's secret, and
//! RS256/384/512, PS256/384/512 and ES256/384 with the public keys of a JWKS
//! file, chosen by the token's `kid` (or the file's only key), or with one
//! PEM public key for tokens no JWKS key claims by `kid`. The key, not
//! the token, decides the algorithm's family: an RSA key never checks an
//! HMAC token. An expired token is told apart from an invalid one: the
//! client refreshes the first and gives up on the second.

use bytes::Bytes;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::Value;
use std::time::{SystemTime, UNIX_EPOCH};

/// Why a key file's content cannot check tokens.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("not a JWK set (JSON): {0}")]
    NotJwkSet(serde_json::Error),
    #[error("key {index}: {source}")]
    BadJwk {
        index: usize,
        source: jsonwebtoken::errors::Error,
    },
    #[error(
        "key {0} is a shared secret (kty \"oct\"): a JWKS file holds public keys; \
         HMAC secrets come from token_hmac_secret_env"
    )]
    SecretInJwks(usize),
    #[error("the JWK set has no keys")]
    EmptyJwkSet,
    #[error("not PEM (-----BEGIN PUBLIC KEY----- …)")]
    NotPem,
    #[error(
        "a PEM \"{0}\", not a public key (-----BEGIN PUBLIC KEY-----); a private key or a \
         certificate does not belong here"
    )]
    NotPublicKeyPem(String),
    #[error("not a public key: {0}")]
    NotPublicKey(String),
    #[error("neither an RSA nor an EC public key")]
    UnknownKeyType,
}

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

/// Public keys tokens may be signed with, by `kid`; `pem` checks tokens
/// that name no key of the set.
#[derive(Default)]
struct PublicKeys {
    keys: Vec<(Option<String>, DecodingKey)>,
    pem: Option<DecodingKey>,
}

/// Algorithms public keys are accepted with.
const PUBLIC_KEY_ALGORITHMS: [Algorithm; 8] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
];

/// A route's token checker.
pub struct Verifier {
    /// The HS256 secret, when the route has one.
    secret: Option<DecodingKey>,
    public: Option<PublicKeys>,
    audience: Option<String>,
    issuer: Option<String>,
}

impl Verifier {
    /// HS256 with `secret`; `aud`/`iss` are checked when given.
    pub(crate) fn hs256(secret: &[u8], audience: Option<&str>, issuer: Option<&str>) -> Verifier {
        Verifier {
            secret: Some(DecodingKey::from_secret(secret)),
            public: None,
            audience: audience.map(str::to_string),
            issuer: issuer.map(str::to_string),
        }
    }

    /// Also (or only, without a secret) the public keys of `jwks`, a JWK
    /// set as JSON; an error names what is wrong with it.
    pub(crate) fn with_jwks(mut self, jwks: &[u8]) -> Result<Verifier, KeyError> {
        let set: JwkSet = serde_json::from_slice(jwks).map_err(KeyError::NotJwkSet)?;
        let mut keys = Vec::new();
        for (i, jwk) in set.keys.iter().enumerate() {
            let key = DecodingKey::from_jwk(jwk)
                .map_err(|source| KeyError::BadJwk { index: i, source })?;
            if matches!(
                jwk.algorithm,
                jsonwebtoken::jwk::AlgorithmParameters::OctetKey(_)
            ) {
                return Err(KeyError::SecretInJwks(i));
            }
            keys.push((jwk.common.key_id.clone(), key));
        }
        if keys.is_empty() {
            return Err(KeyError::EmptyJwkSet);
        }
        self.public.get_or_insert_with(PublicKeys::default).keys = keys;
        Ok(self)
    }

    /// Also (or only, without a secret) one PEM public key, RSA (`BEGIN
    /// PUBLIC KEY` or `BEGIN RSA PUBLIC KEY`) or EC (`BEGIN PUBLIC KEY`), for
    /// tokens that name no `kid` of a JWKS file.
    pub(crate) fn with_pem(mut self, pem: &[u8]) -> Result<Verifier, KeyError> {
        let key = pem_public_key(pem)?;
        self.public.get_or_insert_with(PublicKeys::default).pem = Some(key);
        Ok(self)
    }

    /// Only public keys: add them with [`with_jwks`](Self::with_jwks) and
    /// [`with_pem`](Self::with_pem).
    pub(crate) fn public_only(audience: Option<&str>, issuer: Option<&str>) -> Verifier {
        Verifier {
            secret: None,
            public: None,
            audience: audience.map(str::to_string),
            issuer: issuer.map(str::to_string),
        }
    }

    /// Only the public keys of `jwks` (no HMAC secret).
    pub fn jwks(
        jwks: &[u8],
        audience: Option<&str>,
        issuer: Option<&str>,
    ) -> Result<Verifier, KeyError> {
        Verifier::public_only(audience, issuer).with_jwks(jwks)
    }

    fn validation(&self, algorithm: Algorithm) -> Validation {
        let mut validation = Validation::new(algorithm);
        // `exp` is checked here, to tell "expired" from "invalid".
        validation.validate_exp = false;
        validation.required_spec_claims.clear();
        validation.leeway = 0;
        match &self.audience {
            Some(aud) => validation.set_audience(&[aud]),
            None => validation.validate_aud = false,
        }
        if let Some(iss) = &self.issuer {
            validation.set_issuer(&[iss]);
        }
        validation
    }

    /// The key `token` must be checked with, by its header's algorithm
    /// and `kid`.
    fn key_for(&self, token: &str) -> Result<(&DecodingKey, Algorithm), TokenError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| TokenError::Invalid)?;
        if header.alg == Algorithm::HS256 {
            return self
                .secret
                .as_ref()
                .map(|k| (k, header.alg))
                .ok_or(TokenError::Invalid);
        }
        if !PUBLIC_KEY_ALGORITHMS.contains(&header.alg) {
            return Err(TokenError::Invalid);
        }
        let public = self.public.as_ref().ok_or(TokenError::Invalid)?;
        let by_kid = match &header.kid {
            Some(kid) => public
                .keys
                .iter()
                .find(|(id, _)| id.as_deref() == Some(kid.as_str())),
            None if public.keys.len() == 1 && public.pem.is_none() => public.keys.first(),
            None => None,
        };
        by_kid
            .map(|(_, k)| k)
            .or(public.pem.as_ref())
            .map(|k| (k, header.alg))
            .ok_or(TokenError::Invalid)
    }

    fn claims(&self, token: &str) -> Result<Claims, TokenError> {
        let (key, algorithm) = self.key_for(token)?;
        let validation = self.validation(algorithm);
        let data = jsonwebtoken::decode::<Claims>(token, key, &validation).map_err(|e| match e
            .kind()
        {
            ErrorKind::ExpiredSignature => TokenError::Expired,
            _ => TokenError::Invalid,
        })?;
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

/// The key of a PEM file: `PUBLIC KEY` (SubjectPublicKeyInfo, RSA or EC)
/// or `RSA PUBLIC KEY` (PKCS #1).
fn pem_public_key(pem: &[u8]) -> Result<DecodingKey, KeyError> {
    use x509_parser::prelude::FromDer;
    use x509_parser::public_key::PublicKey;
    use x509_parser::x509::SubjectPublicKeyInfo;
    let (_, block) = x509_parser::pem::parse_x509_pem(pem).map_err(|_| KeyError::NotPem)?;
    if block.label == "RSA PUBLIC KEY" {
        return Ok(DecodingKey::from_rsa_der(&block.contents));
    }
    if block.label != "PUBLIC KEY" {
        return Err(KeyError::NotPublicKeyPem(block.label));
    }
    let (_, spki) = SubjectPublicKeyInfo::from_der(&block.contents)
        .map_err(|e| KeyError::NotPublicKey(e.to_string()))?;
    match spki.parsed() {
        Ok(PublicKey::RSA(rsa)) => {
            let trim = |b: &[u8]| b[b.iter().take_while(|&&x| x == 0).count()..].to_vec();
            Ok(DecodingKey::from_rsa_raw_components(
                &trim(rsa.modulus),
                &trim(rsa.exponent),
            ))
        }
        Ok(PublicKey::EC(point)) => Ok(DecodingKey::from_ec_der(point.data())),
        _ => Err(KeyError::UnknownKeyType),
    }
}

fn json_text(v: Value) -> Bytes {
    Bytes::from(serde_json::to_vec(&v).expect("a JSON value serialises"))
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> u64 {
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

    /// A JWKS file holds public keys, at least one; without a secret an
    /// HS256 token is refused, and a public-key token needs a key whose
    /// `kid` it names.
    #[test]
    fn jwks_files_hold_public_keys_and_tokens_name_theirs() {
        let rsa = json!({"kty": "RSA", "kid": "k1", "alg": "RS256",
            "n": "r8xDuwWBrCUdf8GmIBFX7ogVP5_AoTUaT3a2XFvo-_-SqoVHI5EgWwvk_pIdxlTRxUtJRg6z00iPGv4DuYfHLnnZFEEm4arDkX2LrvbeJXTN25BpHX13FHiDZA-CX63wd8IuHnQHrBZPjVPf7bWFeRYuopUTkkEYNlV5FjqZlwn_OeX69R8nsnNAqiR-mo13gmKOE4kSh1XRCD9kMg8mQuIVmMzt-L_szFgPO_Yy3LkgKjHBD0MF_8JJrrzVMpuP1uxvZXaF4eNjp4Ix_EoxpF8MGe1S3ZHTbAIRk7HZdZWsekkXbQhIG1IQPU1HjUp0O5S2OkikX9H0BK-PbfxcBQ",
            "e": "AQAB"});
        let none = json!({"keys": []}).to_string();
        assert!(Verifier::jwks(none.as_bytes(), None, None).is_err());
        let secret = json!({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}).to_string();
        let refused = Verifier::jwks(secret.as_bytes(), None, None)
            .err()
            .unwrap()
            .to_string();
        assert!(refused.contains("token_hmac_secret_env"), "{refused}");
        assert!(Verifier::jwks(b"{", None, None).is_err());
        let set = json!({"keys": [rsa]}).to_string();
        let v = Verifier::jwks(set.as_bytes(), None, None).unwrap();
        let hs = token(b"secret", json!({"sub": "42"}));
        assert_eq!(v.connection(&hs), Err(TokenError::Invalid), "no secret");
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some("k9".into());
        let unknown = format!(
            "{}.e30.c2ln",
            base64::engine::Engine::encode(
                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                serde_json::to_vec(&header).unwrap()
            )
        );
        assert_eq!(
            v.connection(&unknown),
            Err(TokenError::Invalid),
            "unknown kid"
        );
    }
}
