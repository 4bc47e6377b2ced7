//! A component in an OCI registry, as the routes file and `weir deploy`
//! name it: `oci://host[:port]/repository:tag`, `…@sha256:<hex>`, or both
//! (the digest wins; the tag is kept for messages). Syntax only: pulling
//! and the cache are the host's (`host/src/oci/`).

use std::fmt;

/// The scheme that marks a guest source as a registry reference.
pub const OCI_SCHEME: &str = "oci://";
/// The only digest algorithm accepted: what the wasm OCI tooling writes,
/// and what the host can check bytes against.
const DIGEST_PREFIX: &str = "sha256:";
/// The OCI distribution spec's tag grammar caps a tag at 128 characters.
const MAX_TAG_CHARS: usize = 128;
/// Registries commonly cap a repository name at 255 characters.
const MAX_REPOSITORY_CHARS: usize = 255;

/// A parsed `oci://` reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OciRef {
    /// `host` or `host:port` (no scheme: https, or http for loopback and
    /// hosts the operator marks insecure).
    pub registry: String,
    /// Slash-separated, lower-case path components, e.g. `weir/chat`.
    pub repository: String,
    /// The tag, resolved to a digest each time the reference is loaded.
    pub tag: Option<String>,
    /// `sha256:<64 hex>`: the manifest's digest; a pinned reference is
    /// served from the cache without asking the registry.
    pub digest: Option<String>,
}

impl OciRef {
    /// Whether `text` is meant as a registry reference (starts `oci://`).
    pub fn is_oci(text: &str) -> bool {
        text.starts_with(OCI_SCHEME)
    }

    /// Parses `oci://host[:port]/repo[:tag][@sha256:hex]`; the error says
    /// what is wrong and what to write.
    pub fn parse(text: &str) -> Result<OciRef, String> {
        let example = "write e.g. oci://ghcr.io/me/chat:1.0 or oci://127.0.0.1:5000/chat@sha256:<64 hex digits>";
        let rest = text
            .strip_prefix(OCI_SCHEME)
            .ok_or_else(|| format!("`{text}` is not an oci:// reference; {example}"))?;
        let (registry, path) = rest
            .split_once('/')
            .ok_or_else(|| format!("`{text}`: no repository after the registry; {example}"))?;
        check_registry(registry).map_err(|why| format!("`{text}`: {why}; {example}"))?;
        let (name, digest) = match path.split_once('@') {
            Some((name, digest)) => {
                check_digest(digest).map_err(|why| format!("`{text}`: {why}"))?;
                (name, Some(digest.to_string()))
            }
            None => (path, None),
        };
        // A ':' after the last '/' starts the tag.
        let last_slash = name.rfind('/').map_or(0, |i| i + 1);
        let (repository, tag) = match name[last_slash..].find(':') {
            Some(i) => (&name[..last_slash + i], Some(&name[last_slash + i + 1..])),
            None => (name, None),
        };
        check_repository(repository).map_err(|why| format!("`{text}`: {why}; {example}"))?;
        if let Some(tag) = tag {
            check_tag(tag).map_err(|why| format!("`{text}`: {why}"))?;
        }
        if tag.is_none() && digest.is_none() {
            return Err(format!(
                "`{text}`: neither a tag nor a digest; add :TAG (resolved at each load) \
                 or @sha256:DIGEST (pinned; what `weir push` prints)"
            ));
        }
        Ok(OciRef {
            registry: registry.to_string(),
            repository: repository.to_string(),
            tag: tag.map(str::to_string),
            digest,
        })
    }

    /// The same reference pinned to `digest` (the tag kept for messages).
    pub fn pinned(&self, digest: &str) -> OciRef {
        OciRef {
            digest: Some(digest.to_string()),
            ..self.clone()
        }
    }

    /// The registry's host without its port (for the loopback check).
    pub fn host(&self) -> &str {
        let registry = self.registry.as_str();
        if let Some(v6) = registry.strip_prefix('[') {
            return v6.split_once(']').map_or(v6, |(host, _)| host);
        }
        registry.split_once(':').map_or(registry, |(host, _)| host)
    }
}

impl fmt::Display for OciRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{OCI_SCHEME}{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

fn check_registry(registry: &str) -> Result<(), String> {
    if registry.is_empty() {
        return Err("no registry host".into());
    }
    let (host, port) = match registry.strip_prefix('[') {
        Some(v6) => {
            let (host, after) = v6
                .split_once(']')
                .ok_or("an IPv6 registry address needs its closing ]")?;
            if host.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(format!("`[{host}]` is not an IPv6 address"));
            }
            (None, after.strip_prefix(':'))
        }
        None => {
            let (host, port) = match registry.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (registry, None),
            };
            (Some(host), port)
        }
    };
    if let Some(host) = host {
        let label_ok = |l: &str| {
            !l.is_empty()
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        };
        if host.is_empty() || !host.split('.').all(label_ok) {
            return Err(format!("`{host}` is not a registry host name"));
        }
    }
    if let Some(port) = port {
        if port.parse::<u16>().map_or(true, |p| p == 0) {
            return Err(format!("`{port}` is not a port (1-65535)"));
        }
    }
    Ok(())
}

fn check_repository(repository: &str) -> Result<(), String> {
    // The distribution spec: path components of [a-z0-9]+ joined by
    // `.`, `_`, `__` or `-`s, separated by `/`.
    let component_ok = |c: &str| {
        let bytes = c.as_bytes();
        !c.is_empty()
            && bytes[0].is_ascii_alphanumeric()
            && bytes[bytes.len() - 1].is_ascii_alphanumeric()
            && bytes
                .iter()
                .all(|&b| b.is_ascii_digit() || b.is_ascii_lowercase() || b"._-".contains(&b))
    };
    if repository.is_empty() {
        return Err("no repository name".into());
    }
    if repository.len() > MAX_REPOSITORY_CHARS {
        return Err(format!(
            "the repository name is longer than {MAX_REPOSITORY_CHARS} characters"
        ));
    }
    if !repository.split('/').all(component_ok) {
        return Err(format!(
            "`{repository}` is not a repository name (lower-case letters, digits, and . _ - inside, / between parts)"
        ));
    }
    Ok(())
}

fn check_tag(tag: &str) -> Result<(), String> {
    let bytes = tag.as_bytes();
    let ok = !tag.is_empty()
        && tag.len() <= MAX_TAG_CHARS
        && (bytes[0].is_ascii_alphanumeric() || bytes[0] == b'_')
        && bytes
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{tag}` is not a tag (letters, digits, _ . -, at most {MAX_TAG_CHARS}, not starting with . or -)"
        ))
    }
}

/// `sha256:` and 64 lower-case hex digits.
pub fn check_digest(digest: &str) -> Result<(), String> {
    let hex = digest.strip_prefix(DIGEST_PREFIX).ok_or_else(|| {
        format!("`{digest}` is not a sha256 digest; write @sha256:<64 hex digits>")
    })?;
    if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(format!(
            "`{digest}`: a sha256 digest has 64 lower-case hex digits"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn tags_digests_and_ports_parse() {
        let r = OciRef::parse("oci://127.0.0.1:5000/weir/chat:1.0").unwrap();
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.repository, "weir/chat");
        assert_eq!(r.tag.as_deref(), Some("1.0"));
        assert_eq!(r.digest, None);
        assert_eq!(r.host(), "127.0.0.1");
        let pinned = format!("oci://ghcr.io/me/chat@sha256:{HEX}");
        let r = OciRef::parse(&pinned).unwrap();
        assert_eq!(r.tag, None);
        assert_eq!(r.digest.as_deref(), Some(&*format!("sha256:{HEX}")));
        assert_eq!(r.to_string(), pinned);
        let both = format!("oci://[::1]:5000/chat:v2@sha256:{HEX}");
        let r = OciRef::parse(&both).unwrap();
        assert_eq!(r.host(), "::1");
        assert_eq!(r.tag.as_deref(), Some("v2"));
        assert_eq!(r.to_string(), both);
    }

    #[test]
    fn bad_references_say_what_to_write() {
        for (text, says) in [
            ("oci://host", "no repository"),
            ("oci:///chat:1", "no registry host"),
            ("oci://host/chat", "neither a tag nor a digest"),
            ("oci://host/Chat:1", "not a repository name"),
            ("oci://host:0/chat:1", "not a port"),
            ("oci://host/chat:-x", "not a tag"),
            ("oci://host/chat@md5:abc", "not a sha256 digest"),
            ("oci://host/chat@sha256:ABC", "64 lower-case hex"),
            ("http://host/chat:1", "not an oci:// reference"),
        ] {
            let err = OciRef::parse(text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }
}
