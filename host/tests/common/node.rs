//! The Node test clients (`host/tests/clients`, pinned by its
//! package-lock.json): where they are, and one run of a client script whose
//! last line of output is its JSON summary. The centrifugo tests use it;
//! any protocol's client scenarios can.

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// `host/tests/clients`.
pub fn clients_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// Fails the test, saying how to install them, when the npm `package`
/// the client scripts import is missing.
pub fn require_client(package: &str) {
    assert!(
        clients_dir().join("node_modules").join(package).exists(),
        "host/tests/clients/node_modules/{package} missing: run npm ci there (scripts/test.sh does)"
    );
}

/// Runs `node args…` in the clients folder and returns the JSON of its
/// last line of output; a non-zero exit fails the test with what it
/// printed, named by `what`.
pub fn node_summary(what: &str, args: &[&str]) -> serde_json::Value {
    let output = Command::new("node")
        .args(args)
        .current_dir(clients_dir())
        .stdin(Stdio::null())
        .output()
        .expect("node (scripts/test.sh installs the clients)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{what}: {}\n{stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or("null")).unwrap()
}
