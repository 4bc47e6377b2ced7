//! Resolving an `oci://` reference to a component file: a pinned digest
//! found in the cache needs no registry; otherwise the manifest is fetched
//! (a tag resolved to its digest), checked to be a wasm artifact, and its
//! one layer streamed under the size cap, verified and cached.

use std::path::{Path, PathBuf};

use futures_util::StreamExt;
use oci_client::manifest::OciImageManifest;
use weir_config::{Config, OciRef};

use super::cache::Cache;
use super::{
    block_on, cache_dir, check_pinned_manifest, client_for, sha256_digest, OciError,
    MAX_COMPONENT_BYTES, MAX_MANIFEST_BYTES, OCI_MANIFEST_MEDIA_TYPE, PULL_TIMEOUT,
    WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE,
};

/// A component ready to load.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The reference pinned to the manifest's digest (its tag kept).
    pub reference: OciRef,
    /// The verified component in the cache.
    pub file: PathBuf,
    /// Whether the registry was asked (false: a pinned digest from cache).
    pub from_registry: bool,
}

/// Pulls every `oci://` guest of `config` (or finds it in the cache) and
/// points its `wasm` at the cached component, its reference pinned; the
/// first failure is returned, naming the guest.
pub fn resolve_guests(config: &mut Config) -> Result<(), OciError> {
    let cache = cache_dir(config);
    let mut guests: Vec<_> = config
        .guests_mut()
        .into_iter()
        .filter(|(_, g)| g.oci.is_some())
        .collect();
    if guests.is_empty() {
        return Ok(());
    }
    let wanted: Vec<(String, OciRef)> = guests
        .iter()
        .map(|(what, g)| (what.clone(), *g.oci.clone().expect("filtered")))
        .collect();
    let pulled = block_on(async move {
        let mut pulled = Vec::new();
        for (what, reference) in wanted {
            match pull(&reference, &cache).await {
                Ok(p) => pulled.push(p),
                Err(e) => {
                    return Err(OciError::InGuest {
                        what,
                        error: Box::new(e),
                    })
                }
            }
        }
        Ok(pulled)
    })??;
    for ((what, guest), pulled) in guests.iter_mut().zip(pulled) {
        tracing::info!(
            guest = %what,
            reference = %pulled.reference,
            from_registry = pulled.from_registry,
            "component from an OCI registry"
        );
        guest.wasm = pulled.file;
        guest.oci = Some(Box::new(pulled.reference));
    }
    Ok(())
}

/// The component `reference` names, in the cache under `cache_dir`; at
/// most [`PULL_TIMEOUT`] of registry time.
pub async fn pull(reference: &OciRef, cache_dir: &Path) -> Result<Pulled, OciError> {
    tokio::time::timeout(PULL_TIMEOUT, pull_within(reference, cache_dir))
        .await
        .unwrap_or_else(|_| {
            Err(OciError::Unreachable {
                reference: reference.to_string(),
                detail: format!("the pull took more than {} s", PULL_TIMEOUT.as_secs()),
            })
        })
}

async fn pull_within(reference: &OciRef, cache_dir: &Path) -> Result<Pulled, OciError> {
    let cache = Cache::new(cache_dir);
    if let Some(digest) = &reference.digest {
        if let Some(file) = cache.component_of(digest) {
            return Ok(Pulled {
                reference: reference.clone(),
                file,
                from_registry: false,
            });
        }
    }
    let shown = reference.to_string();
    let (client, auth, target) = client_for(reference);
    let (body, _) = client
        .pull_manifest_raw(&target, &auth, &[OCI_MANIFEST_MEDIA_TYPE])
        .await
        .map_err(|e| OciError::from_client(reference, e))?;
    if body.len() > MAX_MANIFEST_BYTES {
        return Err(OciError::TooLarge {
            reference: shown,
            what: "manifest",
            size: body.len() as u64,
            max: MAX_MANIFEST_BYTES,
        });
    }
    // The digest is ours, not the registry's header: what is pinned is
    // what was read.
    let digest = sha256_digest(&body);
    check_pinned_manifest(reference, &digest)?;
    let not_wasm = |why: String| OciError::NotWasm {
        reference: shown.clone(),
        why,
    };
    let manifest: OciImageManifest = serde_json::from_slice(&body)
        .map_err(|e| not_wasm(format!("its manifest is not an OCI image manifest ({e})")))?;
    if manifest.config.media_type != WASM_CONFIG_MEDIA_TYPE {
        return Err(not_wasm(format!(
            "its config is {}, not {WASM_CONFIG_MEDIA_TYPE} (push it with `weir push` or `wkg oci push`)",
            manifest.config.media_type
        )));
    }
    let [layer] = manifest.layers.as_slice() else {
        return Err(not_wasm(format!(
            "it has {} layers; a component artifact has exactly one",
            manifest.layers.len()
        )));
    };
    if layer.media_type != WASM_LAYER_MEDIA_TYPE {
        return Err(not_wasm(format!(
            "its layer is {}, not {WASM_LAYER_MEDIA_TYPE}",
            layer.media_type
        )));
    }
    weir_config::check_digest(&layer.digest)
        .map_err(|why| not_wasm(format!("its layer's digest: {why}")))?;
    let too_large = |size: u64| OciError::TooLarge {
        reference: shown.clone(),
        what: "component",
        size,
        max: MAX_COMPONENT_BYTES,
    };
    let declared = u64::try_from(layer.size).unwrap_or(u64::MAX);
    if declared > MAX_COMPONENT_BYTES as u64 {
        return Err(too_large(declared));
    }
    let mut stream = client
        .pull_blob_stream(&target, layer)
        .await
        .map_err(|e| OciError::from_client(reference, e))?;
    let mut wasm = Vec::with_capacity(declared as usize);
    while let Some(chunk) = stream.next().await {
        let chunk = match chunk {
            Ok(chunk) => chunk,
            // oci-client's own digest check fails the stream at its end,
            // after every byte came: ours below names what was expected.
            Err(_) if wasm.len() as u64 == declared => break,
            Err(e) => {
                return Err(OciError::Unreachable {
                    reference: shown,
                    detail: format!("the component's download broke off: {e}"),
                })
            }
        };
        if wasm.len() + chunk.len() > MAX_COMPONENT_BYTES {
            return Err(too_large((wasm.len() + chunk.len()) as u64));
        }
        wasm.extend_from_slice(&chunk);
    }
    let actual = sha256_digest(&wasm);
    if actual != layer.digest {
        return Err(OciError::DigestMismatch {
            reference: shown,
            what: "component layer",
            expected: layer.digest.clone(),
            actual,
        });
    }
    // The component first: a manifest in the cache always has its layer.
    let file = cache.store(&shown, &layer.digest, &wasm)?;
    cache.store(&shown, &digest, &body)?;
    Ok(Pulled {
        reference: reference.pinned(&digest),
        file,
        from_registry: true,
    })
}
