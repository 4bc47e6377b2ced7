//! One value of a routes file with its key and place: type and range checks
//! whose messages name the line, show the value and say what to write.

use std::ops::Range;
use std::time::Duration;

use toml::{Spanned, Value};

use super::units::{self, SizeError};
use super::ConfigError;

/// Any single value: its type is checked by hand so that the message can name
/// the key and give an example of what to write.
pub(super) type Field = Option<Spanned<Value>>;

/// The text being parsed, to turn byte offsets into line numbers.
pub(super) struct Source<'a> {
    pub(super) text: &'a str,
}

/// The first of `fields` the route sets, in the file's order: the key a
/// refusal names.
pub(super) fn first_set<'a>(
    fields: impl IntoIterator<Item = (&'static str, &'a Field)>,
) -> Option<(&'static str, Range<usize>)> {
    fields
        .into_iter()
        .filter_map(|(key, field)| field.as_ref().map(|f| (key, f.span())))
        .min_by_key(|(_, span)| span.start)
}

/// Refuses `first` (a key only routes of another kind take): "{key} only
/// applies to {applies_to}, and this route is {kind}; remove {key}, or
/// {instead}".
pub(super) fn refuse_key(
    src: &Source,
    first: Option<(&'static str, Range<usize>)>,
    kind: &Item,
    applies_to: &str,
    instead: &str,
) -> Result<(), ConfigError> {
    match first {
        Some((key, span)) => Err(src.error(
            span,
            format!(
                "{key} only applies to {applies_to}, and this route is {}; remove {key}, \
                 or {instead}",
                kind.shown()
            ),
        )),
        None => Ok(()),
    }
}

impl Source<'_> {
    pub(super) fn line(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    pub(super) fn line_text(&self, line: usize) -> &str {
        self.text.lines().nth(line - 1).unwrap_or("").trim()
    }

    pub(super) fn error(&self, span: Range<usize>, message: impl std::fmt::Display) -> ConfigError {
        let line = self.line(span.start);
        ConfigError {
            message: format!("line {line}: {message}"),
            line: Some(line),
        }
    }
}

/// A key, its value and where the value is: what every check needs to report.
pub(super) struct Item<'a> {
    pub(super) key: &'a str,
    pub(super) value: &'a Value,
    pub(super) span: Range<usize>,
}

impl<'a> Item<'a> {
    pub(super) fn of(key: &'a str, field: &'a Field) -> Option<Item<'a>> {
        field.as_ref().map(|spanned| Item {
            key,
            value: spanned.get_ref(),
            span: spanned.span(),
        })
    }

    /// `max_message = "32 megs"` — how the value looks in the file.
    pub(super) fn shown(&self) -> String {
        format!("{} = {}", self.key, self.value)
    }

    pub(super) fn fail(&self, src: &Source, why: impl std::fmt::Display) -> ConfigError {
        src.error(self.span.clone(), format!("{}: {why}", self.shown()))
    }

    pub(super) fn string(&self, src: &Source, example: &str) -> Result<&'a str, ConfigError> {
        match self.value {
            Value::String(s) => Ok(s),
            _ => Err(self.fail(src, format!("not a string; write e.g. {example}"))),
        }
    }

    /// An `IP:port` to listen on; `examples` ends "write e.g. …", and
    /// its first address is the one shown when the value is not a string.
    pub(super) fn socket_addr(
        &self,
        src: &Source,
        examples: &str,
    ) -> Result<std::net::SocketAddr, ConfigError> {
        let first = examples.split(',').next().unwrap_or(examples);
        let text = self.string(src, first)?;
        text.parse().map_err(|_| {
            self.fail(
                src,
                format!("not an IP address and port; write e.g. {examples}"),
            )
        })
    }

    /// The `listen` a section (`[admin]`, `[api]`) cannot do without,
    /// refused at `header` when missing.
    pub(super) fn listen(
        src: &Source,
        field: &Field,
        header: Range<usize>,
        section: &str,
        example: &str,
    ) -> Result<std::net::SocketAddr, ConfigError> {
        match Item::of("listen", field) {
            Some(item) => item.socket_addr(src, example),
            None => Err(src.error(
                header,
                format!("{section} needs listen, e.g. listen = {example}"),
            )),
        }
    }

    /// `true` or `false`.
    pub(super) fn flag(&self, src: &Source) -> Result<bool, ConfigError> {
        match self.value {
            Value::Boolean(b) => Ok(*b),
            _ => Err(self.fail(src, "not true or false; write e.g. true")),
        }
    }

    /// A byte count, written `"32MiB"` or as a plain integer of bytes.
    pub(super) fn size(&self, src: &Source, min: u64, max: u64) -> Result<usize, ConfigError> {
        const HINT: &str = r#"write e.g. "32MiB", "512KiB" or a number of bytes"#;
        let bytes = match self.value {
            Value::Integer(n) if *n < 0 => {
                return Err(self.fail(src, format!("a size cannot be negative; {HINT}")))
            }
            Value::Integer(n) => *n as u64,
            Value::String(s) => match units::parse_size(s) {
                Ok(bytes) => bytes,
                Err(SizeError::NotASize) => {
                    return Err(self.fail(src, format!("not a size; {HINT}")))
                }
                Err(SizeError::AmbiguousUnit { suggestion }) => {
                    return Err(self.fail(
                        src,
                        format!("sizes use binary units (KiB, MiB, GiB); write \"{suggestion}\""),
                    ))
                }
                Err(SizeError::TooLarge) => u64::MAX,
            },
            _ => return Err(self.fail(src, format!("not a size; {HINT}"))),
        };
        if bytes < min {
            return Err(self.fail(
                src,
                format!("too small; write at least \"{}\"", units::format_size(min)),
            ));
        }
        if bytes > max {
            return Err(self.fail(
                src,
                format!("too large; write at most \"{}\"", units::format_size(max)),
            ));
        }
        usize::try_from(bytes).map_err(|_| self.fail(src, "too large for this machine"))
    }

    /// A duration with its unit: `"30s"`, `"10ms"`, `"2m"`, `"1h"`.
    pub(super) fn duration(
        &self,
        src: &Source,
        min: Duration,
        max: Duration,
    ) -> Result<Duration, ConfigError> {
        const HINT: &str = r#"write e.g. "30s", "10ms", "2m" or "1h""#;
        let duration = match self.value {
            Value::Integer(n) => {
                return Err(self.fail(
                    src,
                    format!("a duration needs a unit; write e.g. \"{n}s\" or \"{n}ms\""),
                ))
            }
            Value::String(s) => units::parse_duration(s)
                .ok_or_else(|| self.fail(src, format!("not a duration; {HINT}")))?,
            _ => return Err(self.fail(src, format!("not a duration; {HINT}"))),
        };
        if duration < min {
            return Err(self.fail(
                src,
                format!(
                    "too short; write at least \"{}\"",
                    units::format_duration(min)
                ),
            ));
        }
        if duration > max {
            return Err(self.fail(
                src,
                format!(
                    "too long; write at most \"{}\"",
                    units::format_duration(max)
                ),
            ));
        }
        Ok(duration)
    }

    /// A whole number in `min..=max`.
    pub(super) fn count(&self, src: &Source, min: u64, max: u64) -> Result<u64, ConfigError> {
        let range = format!("write a whole number from {min} to {max}");
        match self.value {
            Value::Integer(n) if (min as i128..=max as i128).contains(&(*n as i128)) => {
                Ok(*n as u64)
            }
            Value::Integer(_) => Err(self.fail(src, format!("out of range; {range}"))),
            Value::String(s) if s.trim().parse::<u64>().is_ok() => Err(self.fail(
                src,
                format!(
                    "a count is written without quotes; write {} = {}",
                    self.key,
                    s.trim()
                ),
            )),
            _ => Err(self.fail(src, format!("not a number; {range}"))),
        }
    }

    /// Subprotocol names, in preference order (RFC 6455 section 4.1: each is
    /// an HTTP token, and they must be unique).
    pub(super) fn subprotocols(&self, src: &Source) -> Result<Vec<String>, ConfigError> {
        const HINT: &str = r#"write e.g. ["chat.v2", "chat.v1"]"#;
        let Value::Array(items) = self.value else {
            return Err(self.fail(src, format!("not a list of names; {HINT}")));
        };
        let mut names = Vec::with_capacity(items.len());
        for item in items {
            let Value::String(name) = item else {
                return Err(self.fail(src, format!("{item} is not a string; {HINT}")));
            };
            if !is_token(name) {
                return Err(self.fail(
                    src,
                    format!(
                        "{item} is not a valid subprotocol name (letters, digits and \
                         !#$%&'*+-.^_`|~ only, no spaces or commas); {HINT}"
                    ),
                ));
            }
            if names.contains(name) {
                return Err(self.fail(src, format!("{item} is listed twice; list each name once")));
            }
            names.push(name.clone());
        }
        Ok(names)
    }
}

impl Item<'_> {
    /// Browser origins: each `"*"` or `scheme://host[:port]` (RFC 6454, as a
    /// browser sends it in `Origin`), compared case-insensitively.
    pub(super) fn origins(&self, src: &Source) -> Result<Vec<String>, ConfigError> {
        const HINT: &str = r#"write e.g. ["https://app.example.com", "https://*.example.com", "http://localhost:8080"], ["null"], or ["*"] for any"#;
        let Value::Array(items) = self.value else {
            return Err(self.fail(src, format!("not a list of origins; {HINT}")));
        };
        let mut origins = Vec::with_capacity(items.len());
        for item in items {
            let Value::String(origin) = item else {
                return Err(self.fail(src, format!("{item} is not a string; {HINT}")));
            };
            if let Err(why) = crate::origin::Rule::parse(&origin.to_ascii_lowercase()) {
                return Err(self.fail(src, format!("{item}: {why}; {HINT}")));
            }
            origins.push(origin.to_ascii_lowercase());
        }
        Ok(origins)
    }

    /// `allowed_hosts`: names or IP literals without a port, or
    /// `*.domain` wildcards; lower case.
    pub(super) fn host_names(&self, src: &Source) -> Result<Vec<String>, ConfigError> {
        const HINT: &str =
            r#"write e.g. ["gw.example.com", "*.example.com", "10.0.0.5"] (no scheme, no port)"#;
        let Value::Array(items) = self.value else {
            return Err(self.fail(src, format!("not a list of host names; {HINT}")));
        };
        let mut names = Vec::with_capacity(items.len());
        for item in items {
            let Value::String(name) = item else {
                return Err(self.fail(src, format!("{item} is not a string; {HINT}")));
            };
            if let Err(why) = crate::hosts::HostRule::parse(name) {
                return Err(self.fail(src, format!("{item}: {why}; {HINT}")));
            }
            names.push(name.trim().to_ascii_lowercase());
        }
        Ok(names)
    }

    /// `trusted_proxies`: addresses or CIDR ranges.
    pub(super) fn address_ranges(
        &self,
        src: &Source,
    ) -> Result<Vec<crate::origin::Cidr>, ConfigError> {
        const HINT: &str = r#"write e.g. ["127.0.0.1", "10.0.0.0/8", "::1"]"#;
        let Value::Array(items) = self.value else {
            return Err(self.fail(src, format!("not a list of addresses; {HINT}")));
        };
        items
            .iter()
            .map(|item| match item {
                Value::String(text) => crate::origin::Cidr::parse(text).ok_or_else(|| {
                    self.fail(src, format!("{item} is not an IP address or range; {HINT}"))
                }),
                _ => Err(self.fail(src, format!("{item} is not a string; {HINT}"))),
            })
            .collect()
    }
}

/// RFC 7230 section 3.2.6 `token`, the grammar of a subprotocol name.
fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}
