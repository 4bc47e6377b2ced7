//! The routes file parser, `Config::parse`, on arbitrary text and on
//! mostly-valid files built from the fuzz bytes.
//!
//! Input: first byte even = the rest as text (bytes that are not UTF-8 are
//! replaced, as a file `Config::load` could read would never hold them);
//! odd = the rest drives a generator that writes `[server]` and
//! `[[route]]` tables from the real keys and typical, edge and broken values,
//! to get past the TOML syntax into the checks behind it.
//!
//! Checked: no panic; every error names its line (`line N: ...` with N in the
//! file) except the one for a file without routes; an accepted config has
//! routes, paths that start with `/`, a router that builds (`Config::router`
//! expects it to), and subprotocols the server can send back in a header.
#![no_main]

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use std::fmt::Write as _;
use std::path::Path;
use weir::config::{Behaviour, Config};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let text = if mode % 2 == 0 {
        String::from_utf8_lossy(rest).into_owned()
    } else {
        match generate(&mut Unstructured::new(rest)) {
            Ok(text) => text,
            Err(_) => return,
        }
    };
    check(&text);
});

fn check(text: &str) {
    let origin = Path::new("/etc/weir");
    match Config::parse(text, origin) {
        Err(err) => {
            let Some(line) = err.line else {
                assert!(
                    err.message.starts_with("the file has no routes"),
                    "an error without a line: {:?}",
                    err.message
                );
                return;
            };
            let lines = text.bytes().filter(|&b| b == b'\n').count() + 1;
            assert!(
                (1..=lines).contains(&line),
                "line {line} of a {lines}-line file: {:?}",
                err.message
            );
            let prefix = format!("line {line}: ");
            assert!(
                err.message.starts_with(&prefix),
                "message does not start with {prefix:?}: {:?}",
                err.message
            );
        }
        Ok(config) => {
            assert!(!config.routes.is_empty());
            let _router = config.router();
            for route in &config.routes {
                assert!(route.path.starts_with('/'), "path {:?}", route.path);
                assert!(route.line >= 1);
                for p in &route.limits.subprotocols {
                    assert!(http::HeaderValue::from_str(p).is_ok(), "subprotocol {p:?}");
                }
                assert!(route.limits.max_message >= 1);
                if let Behaviour::Guest(g) = &route.behaviour {
                    assert!(g.wasm.starts_with(origin) || g.wasm.is_absolute());
                }
            }
        }
    }
}

const SERVER_KEYS: &[&str] = &[
    "listen",
    "workers",
    "max_message",
    "outbound_budget",
    "idle_timeout",
    "handshake_timeout",
    "subprotocols",
    "max_connections",
    "max_connections_per_ip",
    "cache_dir",
    "drain_timeout",
];

const ROUTE_KEYS: &[&str] = &[
    "path",
    "native",
    "guest",
    "max_message",
    "outbound_budget",
    "idle_timeout",
    "subprotocols",
    "isolation",
    "memory",
    "timeout",
    "instances",
    "recycle_after",
    "attachment_max",
    "env",
];

/// Values worth trying, valid and not, for any key (a key gets the wrong
/// kind of value about as often as the right one).
const VALUES: &[&str] = &[
    r#""/echo""#,
    r#""/chat/{room}""#,
    r#""/chat/*""#,
    r#""/files/{*rest}""#,
    r#""/a/{b}/{c}""#,
    r#""/a/{b}{c}""#,
    r#""/{x}""#,
    r#""/*""#,
    r#""/a/*/b""#,
    r#""/a/{{lit}}""#,
    r#""/a?b""#,
    r#""/é/ü""#,
    r#""echo""#,
    r#""relay""#,
    r#""wasm/echo.wasm""#,
    r#""/abs/x.wasm""#,
    r#""""#,
    r#""worker""#,
    r#""batch""#,
    r#""32MiB""#,
    r#""1 KiB""#,
    r#""1_024KiB""#,
    r#""64KiB""#,
    r#""4GiB""#,
    r#""5GiB""#,
    r#""32MB""#,
    r#""1.5KiB""#,
    r#""18446744073709551615GiB""#,
    r#""99999999999999999999""#,
    r#""30s""#,
    r#""10ms""#,
    r#""2m""#,
    r#""1h""#,
    r#""0ms""#,
    r#""25h""#,
    r#""18446744073709551615h""#,
    r#""127.0.0.1:9001""#,
    r#""[::]:0""#,
    r#""localhost:80""#,
    r#"["chat", "v2.json"]"#,
    r#"["chat", "chat"]"#,
    r#"["bad name"]"#,
    r#"["a,b"]"#,
    r#"[]"#,
    r#"[1]"#,
    r#"{ WEIR_AUTH_TOKEN = "let-me-in" }"#,
    r#"{ "" = "x" }"#,
    r#"{ "A=B" = "x" }"#,
    r#"{ A = 1 }"#,
    r#"{ A = [] }"#,
    "0",
    "1",
    "-1",
    "64",
    "1024",
    "1025",
    "4294967296",
    "9223372036854775807",
    "-9223372036854775808",
    "1.5",
    "nan",
    "inf",
    "true",
    "1979-05-27",
    "'/literal'",
    r#""""multi
line""""#,
];

fn pick<'a>(u: &mut Unstructured, from: &[&'a str]) -> Result<&'a str> {
    Ok(from[u.choose_index(from.len())?])
}

/// A value: mostly from the list, sometimes a fuzzer-made string.
fn value(u: &mut Unstructured) -> Result<String> {
    Ok(match u.int_in_range(0..=7)? {
        0 => format!("{:?}", fuzz_str(u)?),
        1 => {
            let n: i64 = u.arbitrary()?;
            n.to_string()
        }
        _ => pick(u, VALUES)?.to_string(),
    })
}

/// A short string of fuzz bytes (only the valid UTF-8 start of them).
fn fuzz_str(u: &mut Unstructured) -> Result<String> {
    let len = u.int_in_range(0..=24)?;
    let bytes = u.bytes(len)?;
    Ok(match std::str::from_utf8(bytes) {
        Ok(s) => s.to_string(),
        Err(e) => String::from_utf8_lossy(&bytes[..e.valid_up_to()]).into_owned(),
    })
}

fn key(u: &mut Unstructured, keys: &[&str]) -> Result<String> {
    Ok(match u.int_in_range(0..=15)? {
        0 => "zzz".to_string(),
        1 => pick(u, keys)?.to_uppercase(),
        _ => pick(u, keys)?.to_string(),
    })
}

/// A routes file: an optional `[server]`, then routes, with comments, odd
/// spacing and line ends here and there.
fn generate(u: &mut Unstructured) -> Result<String> {
    let mut out = String::new();
    let eol = if u.ratio(1, 8)? { "\r\n" } else { "\n" };
    if u.ratio(1, 2)? {
        let header = *u.choose(&["[server]", "[server]", "[[server]]", "[ server ]"])?;
        write!(out, "{header}{eol}").unwrap();
        for _ in 0..u.int_in_range(0..=6)? {
            let k = key(u, SERVER_KEYS)?;
            let v = value(u)?;
            write!(out, "{k} = {v}{eol}").unwrap();
        }
    }
    let routes = u.int_in_range(0..=6)?;
    for _ in 0..routes {
        if u.ratio(1, 6)? {
            write!(out, "# a comment{eol}{eol}").unwrap();
        }
        let header = *u.choose(&[
            "[[route]]",
            "[[route]]",
            "[[route]]",
            "[route]",
            "[[ route ]]",
        ])?;
        if u.ratio(1, 10)? {
            // The inline form of an array of tables.
            let k = key(u, ROUTE_KEYS)?;
            let v = value(u)?;
            write!(out, "route = [{{ path = {v}, {k} = {v} }}]{eol}").unwrap();
            continue;
        }
        write!(out, "{header}{eol}").unwrap();
        if u.ratio(7, 8)? {
            let path = pick(u, &VALUES[..12])?;
            write!(out, "path = {path}{eol}").unwrap();
        }
        match u.int_in_range(0..=5)? {
            0 => write!(out, "native = \"echo\"{eol}").unwrap(),
            1 => write!(out, "native = \"relay\"{eol}").unwrap(),
            2 => write!(out, "guest = \"wasm/echo.wasm\"{eol}").unwrap(),
            _ => {}
        }
        for _ in 0..u.int_in_range(0..=5)? {
            let k = key(u, ROUTE_KEYS)?;
            let v = value(u)?;
            let spacing = *u.choose(&[" = ", "=", "  =\t"])?;
            write!(out, "{k}{spacing}{v}{eol}").unwrap();
        }
    }
    if u.ratio(1, 8)? {
        // Trailing fuzz bytes as text.
        let tail = u.bytes(u.len())?;
        out.push_str(&String::from_utf8_lossy(tail));
    }
    Ok(out)
}
