//! Guests from OCI registries: an `oci://` reference resolved to a
//! component's bytes ([`pull`]), kept by digest on disk (`cache.rs`), and
//! `weir push` ([`push`]). The layout is the wasm OCI convention (CNCF TAG
//! Runtime's, as `wkg` and `oci-wasm` write it): an image manifest whose
//! config is [`WASM_CONFIG_MEDIA_TYPE`] and whose one layer is the
//! component, [`WASM_LAYER_MEDIA_TYPE`]. docs/architecture.md, "Guests
//! from an OCI registry".

mod cache;
mod pull;
mod push;

use std::path::PathBuf;
use std::time::Duration;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use weir_config::{Config, OciRef};

pub use pull::{pull, resolve_guests, Pulled};
pub use push::push;

/// The wasm artifact's config media type (its JSON names the component's
/// imports and exports).
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The component layer's media type.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The manifest's media type: a plain OCI image manifest.
pub const OCI_MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// A manifest past this is not a wasm artifact's (they are under 1 KiB);
/// 4 MiB is what the distribution spec asks registries to accept.
const MAX_MANIFEST_BYTES: usize = 4 << 20;
/// The largest component pulled: the same cap as an admin upload.
const MAX_COMPONENT_BYTES: usize = crate::server::MAX_COMPONENT_BYTES;
/// A registry that accepts no connection in this long is down, not slow.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A pull or push stalled this long without a byte is given up.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// A whole pull (manifest and component) takes at most this: it holds the
/// change lock, and 64 MiB at a slow 1 MiB/s fits.
const PULL_TIMEOUT: Duration = Duration::from_secs(120);

/// User name for every registry, unless `WEIR_OCI_USERNAME_<REGISTRY>`
/// names one for that registry (`<REGISTRY>`: its host and port upper-cased,
/// other characters as `_`, e.g. `WEIR_OCI_USERNAME_GHCR_IO`).
pub const USERNAME_ENV: &str = "WEIR_OCI_USERNAME";
/// Password or token, looked up like [`USERNAME_ENV`].
pub const PASSWORD_ENV: &str = "WEIR_OCI_PASSWORD";
/// Comma-separated `host:port`s spoken to over plain http (loopback
/// registries always are); every other registry is https only.
pub const INSECURE_ENV: &str = "WEIR_OCI_INSECURE";

/// Why a registry component could not be had; each names the reference.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    #[error("{reference}: cannot reach the registry ({detail})")]
    Unreachable { reference: String, detail: String },
    #[error(
        "{reference}: not found in the registry (no such repository, tag or digest: {detail})"
    )]
    NotFound { reference: String, detail: String },
    #[error("{reference}: the registry refused the credentials or asked for some ({detail}); set {USERNAME_ENV} and {PASSWORD_ENV} (or their _<REGISTRY> forms)")]
    Unauthorized { reference: String, detail: String },
    #[error("{reference}: the registry answered with an error: {detail}")]
    Registry { reference: String, detail: String },
    #[error("{reference}: not a WebAssembly component artifact: {why}")]
    NotWasm { reference: String, why: String },
    #[error(
        "{reference}: digest mismatch: the {what} should have sha256 {expected} but has {actual}"
    )]
    DigestMismatch {
        reference: String,
        what: &'static str,
        expected: String,
        actual: String,
    },
    #[error("{reference}: the {what} is {size} bytes, over the {max}-byte cap")]
    TooLarge {
        reference: String,
        what: &'static str,
        size: u64,
        max: usize,
    },
    // The causes are in the messages, not `source`s: anyhow's `{:#}`
    // would print them twice.
    #[error("{reference}: the OCI cache {}: {error}", path.display())]
    Cache {
        reference: String,
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot read {}: {error}", path.display())]
    Unreadable {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{what}: {error}")]
    InGuest { what: String, error: Box<OciError> },
    #[error("cannot start the OCI client's thread: {0}")]
    Thread(std::io::Error),
}

impl OciError {
    /// The admin API's status: 502 when the registry failed us, 422 when
    /// what it holds is not something to serve.
    pub fn status(&self) -> http::StatusCode {
        match self {
            OciError::Unreachable { .. }
            | OciError::Unauthorized { .. }
            | OciError::Registry { .. } => http::StatusCode::BAD_GATEWAY,
            OciError::NotFound { .. } => http::StatusCode::NOT_FOUND,
            OciError::InGuest { error, .. } => error.status(),
            OciError::Cache { .. } | OciError::Thread(_) | OciError::Unreadable { .. } => {
                http::StatusCode::INTERNAL_SERVER_ERROR
            }
            OciError::NotWasm { .. }
            | OciError::DigestMismatch { .. }
            | OciError::TooLarge { .. } => http::StatusCode::UNPROCESSABLE_ENTITY,
        }
    }

    /// Sorts an oci-client error: the registry down, the name unknown,
    /// credentials, or anything else the registry said.
    fn from_client(reference: &OciRef, err: oci_client::errors::OciDistributionError) -> OciError {
        use oci_client::errors::{OciDistributionError as E, OciErrorCode as C};
        let reference = reference.to_string();
        let detail = err.to_string();
        match &err {
            E::RequestError(_) => OciError::Unreachable { reference, detail },
            E::ImageManifestNotFoundError(_) => OciError::NotFound { reference, detail },
            E::ServerError { code: 404, .. } => OciError::NotFound { reference, detail },
            E::AuthenticationFailure(_)
            | E::UnauthorizedError { .. }
            | E::ServerError {
                code: 401 | 403, ..
            } => OciError::Unauthorized { reference, detail },
            E::RegistryError { envelope, .. } => {
                let unknown = envelope.errors.iter().any(|e| {
                    matches!(
                        e.code,
                        C::ManifestUnknown | C::NameUnknown | C::BlobUnknown | C::NotFound
                    )
                });
                let denied = envelope
                    .errors
                    .iter()
                    .any(|e| matches!(e.code, C::Unauthorized | C::Denied));
                if unknown {
                    OciError::NotFound { reference, detail }
                } else if denied {
                    OciError::Unauthorized { reference, detail }
                } else {
                    OciError::Registry { reference, detail }
                }
            }
            _ => OciError::Registry { reference, detail },
        }
    }
}

/// Where pulled components are kept: `[server] oci_cache`, else `oci` in
/// the state directory.
pub fn cache_dir(config: &Config) -> PathBuf {
    config
        .server
        .oci_cache
        .clone()
        .unwrap_or_else(|| crate::routes::state_dir(config).join("oci"))
}

/// The client for `reference`'s registry: http for loopback registries
/// and those in [`INSECURE_ENV`], https for the rest; the operator's
/// credentials when the environment has them.
fn client_for(reference: &OciRef) -> (Client, RegistryAuth, Reference) {
    // reqwest's rustls is built without a provider: ring, as everywhere
    // else in weir (an Err means one is installed already).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut plain: Vec<String> = std::env::var(INSECURE_ENV)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if is_loopback(reference.host()) {
        plain.push(reference.registry.clone());
    }
    let config = ClientConfig {
        protocol: ClientProtocol::HttpsExcept(plain),
        connect_timeout: Some(CONNECT_TIMEOUT),
        read_timeout: Some(READ_TIMEOUT),
        // A wasm artifact is one manifest, never an index of platforms.
        platform_resolver: None,
        user_agent: concat!("weir/", env!("CARGO_PKG_VERSION")),
        ..ClientConfig::default()
    };
    let target = match (&reference.tag, &reference.digest) {
        (_, Some(digest)) => Reference::with_digest(
            reference.registry.clone(),
            reference.repository.clone(),
            digest.clone(),
        ),
        (Some(tag), None) => Reference::with_tag(
            reference.registry.clone(),
            reference.repository.clone(),
            tag.clone(),
        ),
        (None, None) => unreachable!("OciRef::parse requires a tag or a digest"),
    };
    (Client::new(config), auth_for(&reference.registry), target)
}

fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Basic credentials for `registry` from the environment, per registry
/// first; anonymous without them.
fn auth_for(registry: &str) -> RegistryAuth {
    let suffix: String = registry
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    let var = |name: &str| {
        std::env::var(format!("{name}_{suffix}"))
            .or_else(|_| std::env::var(name))
            .ok()
            .filter(|v| !v.is_empty())
    };
    match (var(USERNAME_ENV), var(PASSWORD_ENV)) {
        (Some(user), Some(password)) => RegistryAuth::Basic(user, password),
        _ => RegistryAuth::Anonymous,
    }
}

/// An error unless `digest` (ours, of the manifest bytes read or about to
/// be pushed) is the one `reference` pins, when it pins one.
fn check_pinned_manifest(reference: &OciRef, digest: &str) -> Result<(), OciError> {
    match &reference.digest {
        Some(pinned) if pinned != digest => Err(OciError::DigestMismatch {
            reference: reference.to_string(),
            what: "manifest",
            expected: pinned.clone(),
            actual: digest.to_string(),
        }),
        _ => Ok(()),
    }
}

/// `sha256:<hex>` of `bytes`.
fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", weir_guest_runtime::hex_sha256(bytes))
}

/// Runs `work` on a thread of its own with a current-thread runtime: the
/// callers are plain threads (startup, the signal thread's reload, `weir
/// check`) and tests' runtimes, where a nested `block_on` would panic.
pub(crate) fn block_on<T: Send + 'static>(
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, OciError> {
    std::thread::Builder::new()
        .name("weir-oci".into())
        .spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map(|rt| rt.block_on(work))
        })
        .map_err(OciError::Thread)?
        .join()
        .expect("the OCI thread does not panic")
        .map_err(OciError::Thread)
}
