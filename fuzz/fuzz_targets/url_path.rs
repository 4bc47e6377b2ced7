//! `weir::url_check` (issue 35): the outbound URL path normaliser and the
//! `allow_outbound` prefix matcher, on any path and any prefix, and the
//! proxy's parameter encoder. Properties: normalising twice changes
//! nothing; a normalised path holds no dot segment (`/../`, `/./`, at the
//! end either), no encoded slash and no backslash; a path a prefix admits,
//! once normalised, starts with the prefix on a segment boundary; an
//! encoded parameter is one segment that is neither `.` nor `..`.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use weir::url_check::{encode_param, normalize_path, path_within};

#[derive(Arbitrary, Debug)]
struct Input {
    path: String,
    prefix: String,
}

fuzz_target!(|input: Input| {
    if let Ok(normal) = normalize_path(&input.path) {
        assert_eq!(normalize_path(&normal).as_ref(), Ok(&normal), "idempotent");
        assert!(normal.starts_with('/'));
        let lower = normal.to_ascii_lowercase();
        for bad in ["/../", "/./", "//", "%2f", "\\", "%5c"] {
            assert!(!lower.contains(bad), "{normal:?} holds {bad:?}");
        }
        assert!(
            !normal.ends_with("/..") && !normal.ends_with("/."),
            "{normal:?}"
        );
        if let Ok(prefix) = normalize_path(&input.prefix) {
            if path_within(&prefix, &normal) {
                let rest = &normal[prefix.len()..];
                assert!(
                    prefix.ends_with('/') || rest.is_empty() || rest.starts_with('/'),
                    "{prefix:?} admitted {normal:?} off a segment boundary"
                );
            }
        }
    }
    if let Ok(segment) = encode_param(&input.path, false) {
        assert!(
            !segment.contains('/') && !segment.contains('\\'),
            "{segment:?}"
        );
        assert!(segment != "." && segment != "..", "{segment:?}");
    }
});
