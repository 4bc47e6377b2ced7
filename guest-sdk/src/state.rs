//! [`ConnState`]: per-connection state that outlives the instance holding
//! it, written to the connection's host-held attachment in an encoding that
//! survives the state type changing between deploys ([`Versioned`] for the
//! changes that need a migration).

/// Why an attachment does not decode into the state type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateError(pub String);

impl core::fmt::Display for StateError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StateError {}

/// Per-connection state that can outlive the instance holding it.
///
/// The SDK saves it by itself: after a hook that changed it (took it
/// mutably through [`Conn`](crate::Conn)), [`persist`](ConnState::persist)
/// writes it into the connection's attachment, which the gateway keeps; a
/// fresh instance that meets the connection rebuilds it with
/// [`restore`](ConnState::restore). An upgrade can also hand a first state
/// to the connection ([`Upgrade::accept_with`](crate::Upgrade::accept_with)).
///
/// Two ways to implement it:
///
/// - with the `serde` feature, every `Serialize + DeserializeOwned +
///   Default` type is a `ConnState`, encoded so that the type may evolve
///   between deploys (see "Encoding" below); [`Versioned`] adds a version
///   and a migration for changes a field's default cannot cover;
/// - by hand, for a codec of your own. The defaults keep nothing, which suits
///   state you can afford to lose.
///
/// # Encoding (the `serde` feature)
///
/// An attachment is one tag byte ([`STATE_FORMAT_TAG`]), the state's
/// version as a LEB128 number (0 for a plain type) and the state as JSON
/// with named fields. A new version of the type reads what an older one
/// wrote when fields were:
///
/// - **added**: a field missing from the attachment takes its value from
///   the type's `Default` (no `#[serde(default)]` needed: the decoder fills
///   missing fields from `T::default()`, at any depth);
/// - **removed**: fields the type no longer has are ignored (unless the
///   type says `#[serde(deny_unknown_fields)]`);
/// - **reordered** or renamed with `#[serde(alias = "...")]`.
///
/// A field whose type changed does not decode: wrap the state in
/// [`Versioned`] and convert in [`Migrate::migrate`], or the gateway
/// refuses the deploy (it tries every live connection's attachment first,
/// through the `check-state` export) unless the operator resets state.
/// Attachments written by earlier SDKs (postcard, no tag) still decode when the
/// type's layout is unchanged.
///
/// What `persist` writes is capped by the route's `attachment_max`: over it,
/// the gateway closes the connection with 1011 and logs why.
pub trait ConnState: Default + 'static {
    /// Rebuild the state from attachment bytes, or say why they do not
    /// decode (never called with empty bytes: no attachment means
    /// `Default`). A deploy calls it on every live connection's attachment
    /// before the new version serves. By hand: [`restore`](Self::restore)'s
    /// answer, which cannot fail.
    fn try_restore(attachment: &[u8]) -> Result<Self, StateError> {
        Ok(Self::restore(attachment))
    }

    /// Rebuild the state from attachment bytes (never called with empty
    /// bytes: no attachment means `Default`).
    fn restore(attachment: &[u8]) -> Self {
        let _ = attachment;
        Self::default()
    }

    /// Append the durable part of the state to `out` (nothing: the
    /// attachment is cleared).
    fn persist(&self, out: &mut Vec<u8>) {
        let _ = out;
    }
}

#[cfg(not(feature = "serde"))]
impl ConnState for () {}

#[cfg(feature = "serde")]
pub use codec::{Migrate, Versioned, STATE_FORMAT_TAG};

#[cfg(feature = "serde")]
mod codec {
    use super::{ConnState, StateError};
    use serde::de::DeserializeOwned;
    use serde::Serialize;
    use serde_json::Value;

    /// First byte of an attachment in the evolving encoding. Earlier SDKs wrote
    /// bare postcard, whose first byte may be anything: an attachment that
    /// starts with the tag but does not decode is tried as postcard too.
    pub const STATE_FORMAT_TAG: u8 = 0xFE;

    /// A state type with a version number and a way up from older ones,
    /// for changes [`ConnState`]'s encoding cannot absorb (a field's type
    /// changed, one field split in two). Use it as `type State =
    /// Versioned<MyState>;`.
    pub trait Migrate: Serialize + DeserializeOwned + Default + 'static {
        /// This type's version; raise it with every change `migrate` has to
        /// convert. A plain (unversioned) state type is version 0.
        const VERSION: u32;

        /// Build the state from what version `from` (below
        /// [`VERSION`](Self::VERSION)) wrote, as JSON. An `Err` says why it
        /// cannot (the deploy is then refused for that connection).
        fn migrate(from: u32, old: Value) -> Result<Self, String>;
    }

    /// `T`, saved with its version: what version `n` wrote is read by
    /// version `n` directly (fields added or removed as for any state) and
    /// by later versions through [`Migrate::migrate`]. State written by a
    /// *later* version does not decode (a rollback across a version bump
    /// is refused unless the operator resets state).
    #[derive(Debug, Default, Clone, PartialEq, Eq)]
    pub struct Versioned<T>(pub T);

    impl<T> core::ops::Deref for Versioned<T> {
        type Target = T;
        fn deref(&self) -> &T {
            &self.0
        }
    }

    impl<T> core::ops::DerefMut for Versioned<T> {
        fn deref_mut(&mut self) -> &mut T {
            &mut self.0
        }
    }

    impl<T> ConnState for T
    where
        T: Serialize + DeserializeOwned + Default + 'static,
    {
        fn try_restore(attachment: &[u8]) -> Result<Self, StateError> {
            decode(attachment, 0, |from, _| {
                Err(format!(
                    "state written by version {from} of a versioned type; this type is not versioned"
                ))
            })
        }

        /// Bytes that do not decode give `Default`, with a warning in the
        /// gateway log (a deploy refuses that case unless state is reset).
        fn restore(attachment: &[u8]) -> Self {
            Self::try_restore(attachment).unwrap_or_else(|e| fallback(e))
        }

        fn persist(&self, out: &mut Vec<u8>) {
            encode(self, 0, out);
        }
    }

    impl<T: Migrate> ConnState for Versioned<T> {
        fn try_restore(attachment: &[u8]) -> Result<Self, StateError> {
            decode(attachment, T::VERSION, T::migrate).map(Versioned)
        }

        fn restore(attachment: &[u8]) -> Self {
            Self::try_restore(attachment).unwrap_or_else(|e| fallback(e))
        }

        fn persist(&self, out: &mut Vec<u8>) {
            encode(&self.0, T::VERSION, out);
        }
    }

    fn fallback<T: Default>(e: StateError) -> T {
        crate::log(
            crate::Level::Warn,
            &format!("connection state does not decode ({e}); starting from Default"),
        );
        T::default()
    }

    /// Appends `value` in the evolving encoding: tag, version, JSON. A
    /// zero-sized type writes nothing (its `Default` is its only value).
    pub(crate) fn encode<T: Serialize>(value: &T, version: u32, out: &mut Vec<u8>) {
        if core::mem::size_of::<T>() == 0 {
            return;
        }
        out.push(STATE_FORMAT_TAG);
        let mut v = version;
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(byte);
                break;
            }
            out.push(byte | 0x80);
        }
        // Serializing fails only for a map with non-string keys; such a
        // type is a programming error, reported where it happens. (`to_vec`,
        // not `to_writer`: the SDK takes serde_json without `std`, as a
        // project from `weir new` builds it.)
        let json = serde_json::to_vec(value).expect("connection state serializes as JSON");
        out.extend_from_slice(&json);
    }

    /// Reads `bytes` into `T`, which is at `version`: the evolving encoding
    /// (older versions through `migrate`), else the earlier SDKs' postcard.
    pub(crate) fn decode<T: Serialize + DeserializeOwned + Default>(
        bytes: &[u8],
        version: u32,
        migrate: impl FnOnce(u32, Value) -> Result<T, String>,
    ) -> Result<T, StateError> {
        let tagged = match bytes.split_first() {
            Some((&STATE_FORMAT_TAG, rest)) => split_version(rest),
            _ => None,
        };
        let Some((written, json)) = tagged else {
            return legacy(bytes)
                .map_err(|e| StateError(format!("not an SDK state encoding ({e})")));
        };
        let result = if written == version {
            decode_json(json)
        } else if written < version {
            serde_json::from_slice::<Value>(json)
                .map_err(|e| e.to_string())
                .and_then(|old| migrate(written, old))
                .map_err(|e| format!("migrating from version {written} to {version}: {e}"))
        } else {
            Err(format!(
                "state written by version {written} of the type; this build reads versions up to {version}"
            ))
        };
        // A postcard attachment that happened to start with the tag byte.
        result.or_else(|e| legacy(bytes).map_err(|_| StateError(e)))
    }

    /// The earlier SDKs' postcard, which wrote exactly one value: trailing bytes
    /// mean these are not postcard bytes of `T`.
    fn legacy<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
        match postcard::take_from_bytes(bytes) {
            Ok((value, [])) => Ok(value),
            Ok((_, rest)) => Err(format!("{} bytes left over", rest.len())),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The version number after the tag, and the JSON after it.
    fn split_version(bytes: &[u8]) -> Option<(u32, &[u8])> {
        let mut version: u32 = 0;
        for (i, &b) in bytes.iter().enumerate().take(5) {
            version |= u32::from(b & 0x7f).checked_shl(7 * i as u32)?;
            if b & 0x80 == 0 {
                return Some((version, &bytes[i + 1..]));
            }
        }
        None
    }

    /// JSON into `T`; when fields are missing, fills them from
    /// `T::default()` and tries again (only that path pays for the merge).
    fn decode_json<T: Serialize + DeserializeOwned + Default>(json: &[u8]) -> Result<T, String> {
        match serde_json::from_slice::<T>(json) {
            Ok(value) => Ok(value),
            Err(first) => {
                let mut stored: Value = serde_json::from_slice(json).map_err(|e| e.to_string())?;
                let defaults = serde_json::to_value(T::default()).map_err(|e| e.to_string())?;
                if !fill_missing(&mut stored, defaults) {
                    return Err(first.to_string());
                }
                serde_json::from_value(stored).map_err(|e| e.to_string())
            }
        }
    }

    /// Adds to every object in `stored` the keys `defaults` has and it
    /// lacks, recursively; whether anything was added.
    fn fill_missing(stored: &mut Value, defaults: Value) -> bool {
        let (Value::Object(stored), Value::Object(defaults)) = (stored, defaults) else {
            return false;
        };
        let mut added = false;
        for (key, default) in defaults {
            match stored.get_mut(&key) {
                Some(inner) => added |= fill_missing(inner, default),
                None => {
                    stored.insert(key, default);
                    added = true;
                }
            }
        }
        added
    }
}

#[cfg(all(test, feature = "serde"))]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Serialize, Deserialize, Default, Debug, PartialEq)]
    struct V1 {
        nick: String,
        room: String,
    }

    /// V1 with a field added (no `#[serde(default)]`), one nested.
    #[derive(Serialize, Deserialize, Default, Debug, PartialEq)]
    struct V2 {
        room: String,
        nick: String,
        sent: u64,
        prefs: Prefs,
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Prefs {
        color: String,
        mute: bool,
    }

    impl Default for Prefs {
        fn default() -> Self {
            Prefs {
                color: "blue".into(),
                mute: false,
            }
        }
    }

    fn saved<S: ConnState>(state: &S) -> Vec<u8> {
        let mut out = Vec::new();
        state.persist(&mut out);
        out
    }

    fn v1() -> V1 {
        V1 {
            nick: "ada".into(),
            room: "lobby".into(),
        }
    }

    /// Issue 36: a field added to the state type lost every connection's
    /// state at the next deploy.
    #[test]
    fn a_field_added_takes_its_default_and_keeps_the_rest() {
        let v2 = V2::try_restore(&saved(&v1())).unwrap();
        assert_eq!(
            v2,
            V2 {
                nick: "ada".into(),
                room: "lobby".into(),
                sent: 0,
                prefs: Prefs::default(),
            }
        );
    }

    #[test]
    fn a_nested_field_added_takes_its_default() {
        let mut bytes = vec![STATE_FORMAT_TAG, 0];
        bytes.extend_from_slice(br#"{"room":"r","nick":"n","sent":3,"prefs":{"mute":true}}"#);
        let v2 = V2::try_restore(&bytes).unwrap();
        assert_eq!(v2.prefs.color, "blue");
        assert!(v2.prefs.mute);
        assert_eq!(v2.sent, 3);
    }

    #[test]
    fn a_field_removed_is_ignored_and_an_older_build_reads_a_newer_one() {
        let v2 = V2 {
            nick: "ada".into(),
            room: "lobby".into(),
            sent: 7,
            prefs: Prefs::default(),
        };
        // A rollback: V1 reads what V2 wrote.
        assert_eq!(V1::try_restore(&saved(&v2)).unwrap(), v1());
    }

    #[test]
    fn a_field_whose_type_changed_is_an_error_naming_it() {
        #[derive(Serialize, Deserialize, Default, Debug)]
        struct V3 {
            nick: u64,
        }
        let e = V3::try_restore(&saved(&v1())).unwrap_err();
        assert!(e.0.contains("invalid type"), "{e}");
        // restore still falls back to Default rather than failing the hook.
        assert_eq!(V3::restore(&saved(&v1())).nick, 0);
    }

    #[test]
    fn old_postcard_attachments_still_decode() {
        let old = postcard::to_allocvec(&v1()).unwrap();
        assert_eq!(V1::try_restore(&old).unwrap(), v1());
        let counter = postcard::to_allocvec(&41u64).unwrap();
        assert_eq!(u64::try_restore(&counter).unwrap(), 41);
        // A postcard counter whose first byte is the tag (varint 254).
        let tagged = postcard::to_allocvec(&254u64).unwrap();
        assert_eq!(tagged[0], STATE_FORMAT_TAG);
        assert_eq!(u64::try_restore(&tagged).unwrap(), 254);
        // and the new encoding round-trips the counter.
        assert_eq!(u64::try_restore(&saved(&254u64)).unwrap(), 254);
    }

    #[test]
    fn unit_state_writes_nothing() {
        assert!(saved(&()).is_empty());
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(V1::try_restore(&[STATE_FORMAT_TAG, 0, b'{']).is_err());
        assert!(V1::try_restore(&[0xff, 0xff, 0xff]).is_err());
    }

    /// Version 2 stores `score` as a string; version 1 stored a number.
    #[derive(Serialize, Deserialize, Default, Debug, PartialEq)]
    struct Scored {
        nick: String,
        score: String,
    }

    impl Migrate for Scored {
        const VERSION: u32 = 2;
        fn migrate(from: u32, old: serde_json::Value) -> Result<Self, String> {
            match from {
                0 | 1 => Ok(Scored {
                    nick: old["nick"].as_str().unwrap_or_default().into(),
                    score: old["score"]
                        .as_u64()
                        .ok_or("score is not a number")?
                        .to_string(),
                }),
                _ => Err(format!("no way from version {from}")),
            }
        }
    }

    #[derive(Serialize, Deserialize, Default, Debug)]
    struct ScoredV1 {
        nick: String,
        score: u64,
    }

    impl Migrate for ScoredV1 {
        const VERSION: u32 = 1;
        fn migrate(_: u32, _: serde_json::Value) -> Result<Self, String> {
            Err("none".into())
        }
    }

    #[test]
    fn migrate_converts_older_versions() {
        let old = saved(&Versioned(ScoredV1 {
            nick: "ada".into(),
            score: 12,
        }));
        assert_eq!(old[1], 1, "version 1 after the tag");
        let new = Versioned::<Scored>::try_restore(&old).unwrap();
        assert_eq!(new.score, "12");
        assert_eq!(new.nick, "ada");
        // Unversioned state (version 0) migrates too.
        let plain = saved(&ScoredV1 {
            nick: "bo".into(),
            score: 3,
        });
        assert_eq!(Versioned::<Scored>::try_restore(&plain).unwrap().score, "3");
        // The current version reads itself directly.
        let same = saved(&Versioned(Scored {
            nick: "c".into(),
            score: "x".into(),
        }));
        assert_eq!(Versioned::<Scored>::try_restore(&same).unwrap().score, "x");
    }

    #[test]
    fn a_newer_version_is_refused_by_an_older_build() {
        let newer = saved(&Versioned(Scored::default()));
        let e = Versioned::<ScoredV1>::try_restore(&newer).unwrap_err();
        assert!(e.0.contains("version 2"), "{e}");
    }

    #[test]
    fn a_failed_migration_says_so() {
        let mut bytes = vec![STATE_FORMAT_TAG, 1];
        bytes.extend_from_slice(br#"{"nick":"a","score":"not a number"}"#);
        let e = Versioned::<Scored>::try_restore(&bytes).unwrap_err();
        assert!(e.0.contains("score is not a number"), "{e}");
    }

    /// What the evolving encoding costs against postcard on the counter
    /// example's state (a u64) and a chat member's (nick, room, count):
    /// ns per encode and per decode, and bytes. A timing loop, not a
    /// check: `cargo test --release --features serde state_codec_cost --
    /// --ignored --nocapture` (numbers in docs/architecture.md).
    #[test]
    #[ignore]
    fn state_codec_cost() {
        use std::hint::black_box;
        use std::time::Instant;
        const ROUNDS: u32 = 200_000;

        fn time<T: Serialize + serde::de::DeserializeOwned + Default + 'static>(
            name: &str,
            value: &T,
        ) {
            let ns = |start: Instant| start.elapsed().as_nanos() as f64 / f64::from(ROUNDS);
            let mut out = Vec::with_capacity(128);
            let start = Instant::now();
            for _ in 0..ROUNDS {
                out.clear();
                black_box(value).persist(&mut out);
            }
            let enc = ns(start);
            let start = Instant::now();
            for _ in 0..ROUNDS {
                black_box(T::try_restore(black_box(&out)).unwrap());
            }
            let dec = ns(start);
            let pc = postcard::to_allocvec(value).unwrap();
            let start = Instant::now();
            for _ in 0..ROUNDS {
                let buf = std::mem::take(&mut out);
                out = postcard::to_extend(black_box(value), buf).unwrap();
                out.clear();
            }
            let pc_enc = ns(start);
            let start = Instant::now();
            for _ in 0..ROUNDS {
                black_box(postcard::from_bytes::<T>(black_box(&pc)).unwrap());
            }
            let pc_dec = ns(start);
            let mut new = Vec::new();
            value.persist(&mut new);
            println!(
                "{name}: tagged JSON {} B, encode {enc:.0} ns, decode {dec:.0} ns | postcard {} B, encode {pc_enc:.0} ns, decode {pc_dec:.0} ns",
                new.len(),
                pc.len()
            );
        }

        #[derive(Serialize, Deserialize, Default)]
        struct Member {
            nick: String,
            room: String,
            sent: u64,
        }
        time("counter (u64 = 1234)", &1234u64);
        time(
            "chat member",
            &Member {
                nick: "ada".into(),
                room: "lobby".into(),
                sent: 42,
            },
        );
        // The path a deploy that added a field takes (fill from Default).
        let old = saved(&v1());
        let start = Instant::now();
        for _ in 0..ROUNDS {
            black_box(V2::try_restore(black_box(&old)).unwrap());
        }
        println!(
            "decode with a field added: {:.0} ns",
            start.elapsed().as_nanos() as f64 / f64::from(ROUNDS)
        );
    }
}
