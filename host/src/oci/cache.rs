//! Pulled components on disk, by digest: `blobs/sha256/<hex>` holds both
//! manifests and components (an OCI image layout's blob store), each
//! checked against its name whenever it is read, so a pinned reference
//! loads with the registry down and a damaged file is never served.

use std::io::Write;
use std::path::{Path, PathBuf};

use oci_client::manifest::OciImageManifest;

use super::{sha256_digest, OciError, WASM_LAYER_MEDIA_TYPE};

/// A directory of blobs named by their sha256.
pub(super) struct Cache {
    dir: PathBuf,
}

impl Cache {
    pub(super) fn new(dir: &Path) -> Cache {
        Cache {
            dir: dir.to_path_buf(),
        }
    }

    /// Where the blob `digest` (`sha256:<hex>`) is kept.
    pub(super) fn path(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
        self.dir.join("blobs").join("sha256").join(hex)
    }

    /// The component the cached manifest `digest` names, if the manifest
    /// and its component are both here and both match their digests.
    pub(super) fn component_of(&self, digest: &str) -> Option<PathBuf> {
        let manifest = self.read_checked(digest)?;
        let manifest: OciImageManifest = serde_json::from_slice(&manifest).ok()?;
        let [layer] = manifest.layers.as_slice() else {
            return None;
        };
        if layer.media_type != WASM_LAYER_MEDIA_TYPE {
            return None;
        }
        self.read_checked(&layer.digest)?;
        Some(self.path(&layer.digest))
    }

    /// The blob's bytes, when it is here and its sha256 is its name.
    fn read_checked(&self, digest: &str) -> Option<Vec<u8>> {
        let bytes = std::fs::read(self.path(digest)).ok()?;
        (sha256_digest(&bytes) == digest).then_some(bytes)
    }

    /// Stores a verified blob: written to a temporary file and renamed, so
    /// a reader (or another gateway sharing the directory) never sees half.
    pub(super) fn store(
        &self,
        reference: &str,
        digest: &str,
        bytes: &[u8],
    ) -> Result<PathBuf, OciError> {
        let path = self.path(digest);
        let failed = |error| OciError::Cache {
            reference: reference.to_string(),
            path: path.clone(),
            error,
        };
        let dir = path.parent().expect("a blob has a directory");
        std::fs::create_dir_all(dir).map_err(failed)?;
        let mut nonce = [0u8; 8];
        getrandom::fill(&mut nonce).map_err(|e| failed(std::io::Error::other(e)))?;
        let tmp = dir.join(format!(".tmp-{}", u64::from_ne_bytes(nonce)));
        let written = std::fs::File::create(&tmp)
            .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
            .and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(failed(e));
        }
        Ok(path)
    }
}
