//! `weir deploy`, `rollback`, `unpin` and `routes` (`--cluster`: the fleet's): the admin API's
//! address (flag, `WEIR_ADMIN`, or the routes file here), the request with
//! the token from the environment, and what is printed.

use anyhow::Context;
use weir::config;

/// The admin API's address for deploy, rollback and routes: `--admin`,
/// else `WEIR_ADMIN`, else `[admin] listen` of `routes.toml` in the current
/// directory (a project from `weir new`, or a gateway's own directory).
pub fn admin_addr(flag: Option<String>) -> anyhow::Result<String> {
    let given = flag.or_else(|| std::env::var(ADMIN_ADDR_ENV).ok().filter(|a| !a.is_empty()));
    if let Some(addr) = given {
        return weir::client::admin_authority(&addr).map_err(anyhow::Error::msg);
    }
    let file = std::path::Path::new("routes.toml");
    if let Ok(text) = std::fs::read_to_string(file) {
        let table: toml::Table = text
            .parse()
            .with_context(|| format!("{} is not valid TOML", file.display()))?;
        if let Some(listen) = table
            .get("admin")
            .and_then(|a| a.get("listen"))
            .and_then(|l| l.as_str())
        {
            return Ok(listen.to_string());
        }
    }
    anyhow::bail!(
        "which gateway? pass --admin ADDR (its [admin] listen, e.g. 127.0.0.1:9090), \
         or set {ADMIN_ADDR_ENV}, or run this where a routes.toml has [admin] listen"
    )
}

/// The environment variable admin commands take the admin address from
/// when `--admin` is not given.
const ADMIN_ADDR_ENV: &str = "WEIR_ADMIN";

/// One admin request from the command line; the body of a 2xx answer, or
/// the server's error.
fn admin_request(
    addr: &str,
    method: http::Method,
    path: &str,
    body: Vec<u8>,
) -> anyhow::Result<serde_json::Value> {
    let token = std::env::var(config::DEFAULT_ADMIN_TOKEN_ENV).with_context(|| {
        format!(
            "set {} to the gateway's admin token",
            config::DEFAULT_ADMIN_TOKEN_ENV
        )
    })?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting a runtime")?;
    let (status, text) =
        runtime.block_on(weir::client::request(addr, &token, method, path, body))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|_| serde_json::json!({ "error": text.trim() }));
    if status == 404 && text.starts_with(weir::server::NO_ROUTE_BODY.trim_end()) {
        anyhow::bail!(
            "{addr} is the gateway's public listener, not its admin one \
             (the address in the routes file's [admin] listen)"
        );
    }
    if !(200..300).contains(&status) {
        let message = value["error"].as_str().unwrap_or(text.trim()).to_string();
        anyhow::bail!("the gateway answered {status}: {message}");
    }
    Ok(value)
}

/// `endpoint`, asking to reset state when `reset_state` and to reach the
/// whole fleet (or fail) when `cluster`.
fn with_params(endpoint: String, reset_state: bool, cluster: bool) -> String {
    let params: Vec<&str> = [
        reset_state.then_some("reset_state=true"),
        cluster.then_some("cluster=true"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if params.is_empty() {
        endpoint
    } else {
        format!("{endpoint}?{}", params.join("&"))
    }
}

/// What the answer says of the fleet, when the change went to it.
fn fleet_line(answer: &serde_json::Value) -> Option<String> {
    let fleet = answer.get("fleet")?;
    Some(format!(
        "fleet version {} recorded; every node follows (see `weir routes --cluster`)",
        fleet["version"]
    ))
}

/// What the answer says of the state the version inherited.
fn state_line(answer: &serde_json::Value) -> String {
    let state = &answer["state"];
    let live = state["live"].as_u64().unwrap_or(0);
    match (state["checked"].as_bool(), state["reset"].as_u64()) {
        (Some(true), Some(0)) => format!("state of {live} live connections checked"),
        (Some(true), Some(reset)) => {
            format!("state of {reset} of {live} live connections reset to Default")
        }
        _ => "live connections' state not checked (the component does not export \
              weir:gateway/state)"
            .to_string(),
    }
}

/// How a deploy or rollback is asked for: `--reset-state`, `--cluster`,
/// `--wait` (the flags both commands take).
#[derive(Clone, Copy, Debug, Default, clap::Args)]
pub struct Ask {
    /// Go ahead even if the version to serve cannot read some live
    /// connections' state: those start from their state's Default
    /// (without it, such a deploy or rollback is refused with their count)
    #[arg(long)]
    pub reset_state: bool,
    /// Refuse unless the change reaches every node of the fleet (the
    /// gateway has [cluster] redis; with it, every deploy and rollback does)
    #[arg(long)]
    pub cluster: bool,
    /// With a fleet: return once every node serves the version deployed or
    /// put back (exit 1 if a node refuses it, or after 120 s)
    #[arg(long)]
    pub wait: bool,
}

pub fn deploy(admin: &str, route: &str, file: &std::path::Path, ask: Ask) -> anyhow::Result<()> {
    if let Some(text) = file.to_str().filter(|t| config::OciRef::is_oci(t)) {
        return deploy_from_registry(admin, route, text, ask);
    }
    let Ask {
        reset_state,
        cluster,
        ..
    } = ask;
    let wasm = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let path = with_params(
        weir::client::route_endpoint(route, "component"),
        reset_state,
        cluster,
    );
    let answer = admin_request(admin, http::Method::PUT, &path, wasm)
        .with_context(|| format!("{} was not deployed to {route}", file.display()))?;
    report_deploy(admin, route, &file.display().to_string(), &answer, ask)
}

/// `weir deploy ROUTE oci://…`: the gateway pulls the component itself
/// (with its own registry credentials) and deploys it (to the fleet with
/// `[cluster]`).
fn deploy_from_registry(admin: &str, route: &str, reference: &str, ask: Ask) -> anyhow::Result<()> {
    config::OciRef::parse(reference).map_err(anyhow::Error::msg)?;
    let path = with_params(
        weir::client::route_endpoint(route, "pull"),
        ask.reset_state,
        ask.cluster,
    );
    let answer = admin_request(
        admin,
        http::Method::POST,
        &path,
        reference.as_bytes().to_vec(),
    )
    .with_context(|| format!("{reference} was not deployed to {route}"))?;
    let source = answer["source"].as_str().unwrap_or(reference).to_string();
    report_deploy(admin, route, &source, &answer, ask)
}

/// Prints the gateway's `answer` to a deploy of `source` (a file or the
/// pinned `oci://` reference) to `route`, then waits for the fleet with
/// `--wait`.
fn report_deploy(
    admin: &str,
    route: &str,
    source: &str,
    answer: &serde_json::Value,
    ask: Ask,
) -> anyhow::Result<()> {
    println!(
        "deployed {source} to {route}: version {} (sha256 {}); {}",
        answer["version"],
        answer["hash"].as_str().unwrap_or("?"),
        state_line(answer)
    );
    if let Some(line) = fleet_line(answer) {
        println!("{line}");
    }
    if ask.wait {
        wait_for_fleet(admin, route, answer)?;
    }
    Ok(())
}

pub fn rollback(admin: &str, route: &str, ask: Ask) -> anyhow::Result<()> {
    let path = with_params(
        weir::client::route_endpoint(route, "rollback"),
        ask.reset_state,
        ask.cluster,
    );
    let answer = admin_request(admin, http::Method::POST, &path, Vec::new())
        .with_context(|| format!("{route} was not rolled back"))?;
    println!(
        "rolled back {route}: version {} serves (sha256 {}); {}",
        answer["version"],
        answer["hash"].as_str().unwrap_or("?"),
        state_line(&answer)
    );
    match fleet_line(&answer) {
        Some(line) => println!("{line}"),
        None => println!(
            "pinned: reloads keep this version until the next deploy or `weir unpin {route}`"
        ),
    }
    if ask.wait {
        wait_for_fleet(admin, route, &answer)?;
    }
    Ok(())
}

/// How long `--wait` waits for every node.
const FLEET_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// `--wait`: polls the fleet's view until every live node serves the
/// fleet version `answer` recorded for `route`; an error as soon as a node
/// refuses it, when another version replaces it, or after [`FLEET_WAIT`].
fn wait_for_fleet(admin: &str, route: &str, answer: &serde_json::Value) -> anyhow::Result<()> {
    let Some(version) = answer["fleet"]["version"].as_u64() else {
        anyhow::bail!(
            "--wait: {route} changed on this gateway alone (it has no [cluster] redis): \
             there is no fleet to wait for"
        );
    };
    let started = std::time::Instant::now();
    loop {
        let view = admin_request(admin, http::Method::GET, "/fleet", Vec::new())?;
        let found = view["routes"]
            .as_array()
            .and_then(|routes| routes.iter().find(|r| r["route"] == route));
        if let Some(r) = found {
            let desired = r["desired"]["version"].as_u64();
            if desired != Some(version) {
                anyhow::bail!(
                    "fleet version {version} of {route} was replaced by version {} while waiting",
                    r["desired"]["version"]
                );
            }
            let nodes = r["nodes"].as_array().cloned().unwrap_or_default();
            if let Some(n) = nodes.iter().find(|n| {
                n["state"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("diverged"))
            }) {
                anyhow::bail!(
                    "node {} did not take fleet version {version}: {}",
                    n["node"],
                    n["state"]
                );
            }
            if r["agrees"] == true {
                println!(
                    "every node serves fleet version {version} ({} nodes, {} ms)",
                    nodes.len(),
                    started.elapsed().as_millis()
                );
                return Ok(());
            }
            if started.elapsed() > FLEET_WAIT {
                let waiting: Vec<String> = nodes
                    .iter()
                    .filter(|n| n["agrees"] != true)
                    .map(|n| format!("{} ({})", n["node"], n["state"]))
                    .collect();
                anyhow::bail!(
                    "after {} s not every node serves fleet version {version}: {}",
                    FLEET_WAIT.as_secs(),
                    waiting.join(", ")
                );
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

pub fn unpin(admin: &str, route: &str) -> anyhow::Result<()> {
    let path = weir::client::route_endpoint(route, "unpin");
    let answer = admin_request(admin, http::Method::POST, &path, Vec::new())
        .with_context(|| format!("{route} was not unpinned"))?;
    if answer["unpinned"].as_bool() == Some(true) {
        println!("unpinned {route}: the next reload deploys its routes file's component");
    } else {
        println!("{route} was not pinned");
    }
    Ok(())
}

pub fn routes(admin: &str) -> anyhow::Result<()> {
    let answer = admin_request(admin, http::Method::GET, "/routes", Vec::new())?;
    println!(
        "{:<24} {:<9} {:>11} {:>10}  {:<12}  DEPLOYED",
        "PATH", "BEHAVIOUR", "CONNECTIONS", "VERSION", "SHA256"
    );
    for r in answer["routes"].as_array().into_iter().flatten() {
        let text = |v: &serde_json::Value| {
            v.as_str()
                .map(str::to_string)
                .unwrap_or_else(|| v.to_string())
        };
        let hash = r["hash"]
            .as_str()
            .map_or("-".to_string(), |h| h[..12.min(h.len())].to_string());
        let mut version = r.get("version").map_or("-".to_string(), text);
        if r["pinned"].as_bool() == Some(true) {
            version.push_str(" pinned");
        }
        let since = r
            .get("deployed_at")
            .and_then(|v| v.as_u64())
            .map_or("-".to_string(), deployed_at);
        println!(
            "{:<24} {:<9} {:>11} {:>10}  {:<12}  {since}",
            text(&r["path"]),
            text(&r["behaviour"]),
            text(&r["connections"]),
            version,
            hash
        );
    }
    Ok(())
}

/// `weir routes --cluster`: each fleet route's desired version, then one
/// line per node with what it serves; a node that does not serve the
/// desired version is named with its state (converging, or the error it
/// refused the version with).
pub fn fleet_routes(admin: &str) -> anyhow::Result<()> {
    let answer = admin_request(admin, http::Method::GET, "/fleet", Vec::new())?;
    let text = |v: &serde_json::Value| {
        v.as_str()
            .map(str::to_string)
            .unwrap_or_else(|| v.to_string())
    };
    let short = |v: &serde_json::Value| {
        v.as_str()
            .map_or("-".to_string(), |h| h[..12.min(h.len())].to_string())
    };
    let nodes = answer["nodes"].as_array().map_or(0, Vec::len);
    println!("{nodes} nodes reporting");
    let routes = answer["routes"].as_array().cloned().unwrap_or_default();
    if routes.is_empty() {
        println!("no route has been deployed to the fleet yet (weir deploy --cluster ROUTE FILE)");
    }
    for r in routes {
        let d = &r["desired"];
        let since = d["at"].as_u64().map_or("-".to_string(), deployed_at);
        println!(
            "{}  fleet version {} ({} by {}, {since})  sha256 {}  {}",
            text(&r["route"]),
            d["version"],
            text(&d["action"]),
            text(&d["who"]),
            short(&d["digest"]),
            if r["agrees"].as_bool() == Some(true) {
                "every node agrees"
            } else {
                "DIVERGED"
            }
        );
        println!(
            "  {:<28} {:>13} {:>8}  {:<12}  STATE",
            "NODE", "FLEET VERSION", "VERSION", "SHA256"
        );
        for n in r["nodes"].as_array().into_iter().flatten() {
            let or_dash = |v: &serde_json::Value| if v.is_null() { "-".into() } else { text(v) };
            println!(
                "  {:<28} {:>13} {:>8}  {:<12}  {}",
                text(&n["node"]),
                or_dash(&n["fleet_version"]),
                or_dash(&n["version"]),
                short(&n["hash"]),
                text(&n["state"])
            );
        }
    }
    Ok(())
}

/// A deploy's time (Unix seconds) as an HTTP date, in UTC.
fn deployed_at(unix_secs: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix_secs);
    httpdate::fmt_http_date(at)
}
