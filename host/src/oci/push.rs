//! `weir push FILE oci://host/repo:tag`: a built component published as a
//! wasm artifact (config [`WASM_CONFIG_MEDIA_TYPE`] naming its top-level
//! imports and exports, one [`WASM_LAYER_MEDIA_TYPE`] layer), so `wkg`,
//! wasmtime's and Spin's tooling read it, and weir pulls it by digest.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use oci_client::manifest::{OciDescriptor, OciImageManifest};
use serde_json::json;
use wasmparser::{Encoding, Parser, Payload};
use weir_config::OciRef;

use super::{
    block_on, check_pinned_manifest, client_for, sha256_digest, OciError, MAX_COMPONENT_BYTES,
    OCI_MANIFEST_MEDIA_TYPE, WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE,
};

/// Publishes the component in `file` at `reference` (a tag, or a digest
/// only); the manifest's digest, to pin in a routes file.
pub fn push(file: &Path, reference: &OciRef) -> Result<String, OciError> {
    let wasm = std::fs::read(file).map_err(|error| OciError::Unreadable {
        path: file.to_path_buf(),
        error,
    })?;
    let shown = reference.to_string();
    let not_wasm = |why: String| OciError::NotWasm {
        reference: format!("{} (for {shown})", file.display()),
        why,
    };
    if wasm.len() > MAX_COMPONENT_BYTES {
        return Err(OciError::TooLarge {
            reference: shown,
            what: "component",
            size: wasm.len() as u64,
            max: MAX_COMPONENT_BYTES,
        });
    }
    let (imports, exports) = component_names(&wasm).map_err(not_wasm)?;
    let layer_digest = sha256_digest(&wasm);
    let created = rfc3339(SystemTime::now());
    let config = serde_json::to_vec(&json!({
        "created": created,
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
        "component": { "imports": imports, "exports": exports },
    }))
    .expect("JSON of strings");
    let config_digest = sha256_digest(&config);
    let manifest = OciImageManifest {
        schema_version: 2,
        media_type: Some(OCI_MANIFEST_MEDIA_TYPE.to_string()),
        config: OciDescriptor {
            media_type: WASM_CONFIG_MEDIA_TYPE.to_string(),
            digest: config_digest.clone(),
            size: config.len() as i64,
            ..OciDescriptor::default()
        },
        layers: vec![OciDescriptor {
            media_type: WASM_LAYER_MEDIA_TYPE.to_string(),
            digest: layer_digest.clone(),
            size: wasm.len() as i64,
            ..OciDescriptor::default()
        }],
        annotations: Some(
            [("org.opencontainers.image.created".to_string(), created)]
                .into_iter()
                .collect(),
        ),
        ..OciImageManifest::default()
    };
    // Our bytes, our digest: what is printed is the sha256 of exactly what
    // the registry stores.
    let body = serde_json::to_vec(&manifest).expect("a manifest serializes");
    let digest = sha256_digest(&body);
    check_pinned_manifest(reference, &digest)?;
    let reference = reference.clone();
    block_on(async move {
        let (client, auth, target) = client_for(&reference);
        let failed = |e| OciError::from_client(&reference, e);
        client
            .store_auth_if_needed(target.resolve_registry(), &auth)
            .await;
        client
            .push_blob(&target, wasm, &layer_digest)
            .await
            .map_err(failed)?;
        client
            .push_blob(&target, config, &config_digest)
            .await
            .map_err(failed)?;
        client
            .push_manifest_raw(
                &target,
                body,
                http::HeaderValue::from_static(OCI_MANIFEST_MEDIA_TYPE),
            )
            .await
            .map_err(failed)?;
        Ok(digest)
    })?
}

/// The component's top-level import and export names (nested modules'
/// and components' are their own business); an error if it is not a
/// valid component.
fn component_names(wasm: &[u8]) -> Result<(Vec<String>, Vec<String>), String> {
    let mut validator = wasmparser::Validator::new_with_features(wasmparser::WasmFeatures::all());
    validator
        .validate_all(wasm)
        .map_err(|e| format!("it does not validate: {e}"))?;
    let (mut imports, mut exports) = (Vec::new(), Vec::new());
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(wasm) {
        match payload.map_err(|e| e.to_string())? {
            Payload::Version { encoding, .. } if depth == 0 && encoding != Encoding::Component => {
                return Err(
                    "it is a core module, not a component (build for wasm32-wasip2, e.g. `weir build`)"
                        .into(),
                );
            }
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(section) if depth == 0 => {
                for import in section {
                    imports.push(import.map_err(|e| e.to_string())?.name.name.to_string());
                }
            }
            Payload::ComponentExportSection(section) if depth == 0 => {
                for export in section {
                    exports.push(export.map_err(|e| e.to_string())?.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    Ok((imports, exports))
}

/// `t` as RFC 3339 in UTC, e.g. 2026-12-05T13:40:00Z (the config's and the
/// annotation's `created`).
fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_709_210_096);
        assert_eq!(rfc3339(t), "2024-02-29T12:34:56Z");
    }

    #[test]
    fn a_core_module_is_not_a_component() {
        let module = b"\0asm\x01\0\0\0";
        let err = component_names(module).unwrap_err();
        assert!(err.contains("core module"), "{err}");
    }
}
