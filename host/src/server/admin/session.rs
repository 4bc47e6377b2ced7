//! Browser sessions for the dashboard: the page POSTs the admin token once
//! and gets an `HttpOnly`, `SameSite=Strict` cookie naming a random session
//! (also `Secure` when the admin listener serves TLS),
//! so the token never sits in the page, a URL or a log. A request
//! authenticated by that cookie that changes anything must also carry
//! [`CSRF_HEADER`], which a cross-site form or image cannot send.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The session cookie's name.
pub const COOKIE: &str = "weir_admin";
/// The header every state-changing request made with the cookie carries
/// (`X-Weir-Admin: 1`): a custom header makes the browser send a CORS
/// preflight for cross-origin requests, which the admin listener never
/// approves, and HTML forms cannot set one at all.
pub const CSRF_HEADER: &str = "x-weir-admin";
/// How long a session lasts from its login.
pub const LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// Sessions kept at once; logging in past this ends the oldest.
const MAX_SESSIONS: usize = 64;

/// Open sessions: id → when it ends.
#[derive(Default)]
pub struct Sessions {
    open: Mutex<HashMap<String, Instant>>,
}

impl Sessions {
    /// Opens a session and returns its id (32 random bytes, hex), or None
    /// when the system has no randomness to give.
    pub fn open(&self) -> Option<String> {
        let id = random_id()?;
        let now = Instant::now();
        let mut open = self.open.lock().expect("sessions lock");
        open.retain(|_, ends| *ends > now);
        if open.len() >= MAX_SESSIONS {
            if let Some(oldest) = open
                .iter()
                .min_by_key(|(_, ends)| **ends)
                .map(|(id, _)| id.clone())
            {
                open.remove(&oldest);
            }
        }
        open.insert(id.clone(), now + LIFETIME);
        Some(id)
    }

    /// Whether `id` names a session that has not ended.
    pub fn valid(&self, id: &str) -> bool {
        let open = self.open.lock().expect("sessions lock");
        open.get(id).is_some_and(|ends| *ends > Instant::now())
    }

    pub fn close(&self, id: &str) {
        self.open.lock().expect("sessions lock").remove(id);
    }
}

/// 32 bytes from the operating system's generator (`getrandom`: the
/// `getrandom` syscall, no file to open), as 64 hex digits.
fn random_id() -> Option<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The session id in a `Cookie` header value, if it names ours.
pub fn from_cookie_header(value: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(value).ok()?;
    text.split(';').find_map(|pair| {
        let (name, value) = pair.trim().split_once('=')?;
        (name == COOKIE).then_some(value)
    })
}

/// The `Set-Cookie` value that starts session `id`; `secure` (the admin
/// listener serves TLS) keeps the browser from ever sending it in clear.
pub fn set_cookie(id: &str, secure: bool) -> String {
    format!(
        "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{}",
        LIFETIME.as_secs(),
        secure_attribute(secure)
    )
}

/// The `Set-Cookie` value that ends the session in the browser.
pub fn clear_cookie(secure: bool) -> String {
    format!(
        "{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0{}",
        secure_attribute(secure)
    )
}

fn secure_attribute(secure: bool) -> &'static str {
    if secure {
        "; Secure"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_open_check_and_close() {
        let sessions = Sessions::default();
        let id = sessions.open().expect("randomness");
        assert_eq!(id.len(), 64);
        assert!(sessions.valid(&id));
        assert!(!sessions.valid("0123"));
        let other = sessions.open().unwrap();
        assert_ne!(id, other);
        sessions.close(&id);
        assert!(!sessions.valid(&id));
        assert!(sessions.valid(&other));
    }

    #[test]
    fn sessions_are_capped() {
        let sessions = Sessions::default();
        let first = sessions.open().unwrap();
        for _ in 0..MAX_SESSIONS {
            sessions.open().unwrap();
        }
        assert!(!sessions.valid(&first), "the oldest ended");
        assert_eq!(sessions.open.lock().unwrap().len(), MAX_SESSIONS);
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        assert_eq!(from_cookie_header(b"a=1; weir_admin=abc; b=2"), Some("abc"));
        assert_eq!(from_cookie_header(b"weir_adminx=abc"), None);
        assert!(set_cookie("x", false).contains("HttpOnly; SameSite=Strict"));
        assert!(!set_cookie("x", false).contains("Secure"));
        assert!(set_cookie("x", true).ends_with("; Secure"));
        assert!(clear_cookie(true).ends_with("; Secure"));
    }
}
